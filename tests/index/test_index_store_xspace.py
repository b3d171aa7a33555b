"""An XSpace's index kept in the store (issue 26, items 1 and 6): what a spilling parse
wrote (the columns, the events' positions, and a copy of the file's bytes where the file
itself cannot be mapped again) linked into the index with its planes, lines and metadata
rows, and reopened by a restarted server or the CLI's
`--cache-dir` without reading the XSpace again: the same table and, at every level and
window, the same bytes as a fresh parse; damaged files found and rebuilt, never trusted."""

from __future__ import annotations

import dataclasses
import gzip
import json
import mmap
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, TESTS
from index_support import _resum, copied_xplane, reduced, stored_folder

from tb_reduce_plugin.formats import xspace
from tb_reduce_plugin.formats.sources import FileIdentity
from tb_reduce_plugin.index.store import IndexStore, indexed, parse_spilling
from tb_reduce_plugin.native import guard_module
from tb_reduce_plugin.query.aggregate import aggregate
from tb_reduce_plugin.query.search import compile_query, search
from tb_reduce_plugin.reduce.pipeline import index_file
from tb_reduce_plugin.reduce.plan import default_window
from tb_reduce_plugin.serve import service as service_module
from tb_reduce_plugin.serve.service import TraceService
from tb_reduce_plugin.waveforms.steps import derive
from tests.table_equality import NARROWED_IDS, native, table_difference

XSPACES = sorted({*(ROOT.parent / "shared" / "corpus").rglob("*.xplane.pb"), *(TESTS / "fixtures").rglob("*.xplane.pb"),
                  *(ROOT / "demo_logdir").rglob("*.xplane.pb")} - {p for p in (ROOT.parent / "shared").rglob("*CORRUPT*")})


@pytest.fixture()
def xplane(tmp_path) -> Path:
    """The demo's real JAX profile, copied so its version can be changed."""
    return copied_xplane(tmp_path)


def _stored(store: IndexStore, path: Path):  # type: ignore[no-untyped-def]
    parsed = parse_spilling(store, str(path))
    assert store.can_save(parsed) and store.save(parsed)
    return parsed


@pytest.mark.parametrize("path", XSPACES, ids=lambda p: p.name[-60:])
def test_a_reopened_xspace_index_gives_every_view_and_query_a_fresh_parse_gives(path, tmp_path):
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    fresh = index_file(path)  # in memory, no store: the reference
    _stored(store, path)
    reopened = indexed(store, str(path))
    assert reopened.extra.get("stored_index") is True and reopened.format == "xspace"
    assert table_difference(reopened.table, fresh.table, NARROWED_IDS) in (
        None, f"scratch: {reopened.table.scratch!r} against None")
    assert reopened.metadata == fresh.metadata and reopened.source.meta_json == fresh.source.meta_json
    lo, hi = default_window(fresh.table)
    inner = (lo + (hi - lo) * 0.3, lo + (hi - lo) * 0.4)
    for level, window in [(0, (None, None)), (2, (None, None)), (4, (None, None)), ("auto", (None, None)),
                          (1, inner)]:
        assert reduced(reopened, level, window) == reduced(fresh, level, window), (level, window)
    assert aggregate(reopened.table, None, None) == aggregate(fresh.table, None, None)
    assert derive(reopened.table).to_json() == derive(fresh.table).to_json()
    assert search(reopened.table, compile_query("a"), None, None) == search(fresh.table, compile_query("a"), None,
                                                                             None)


@pytest.mark.parametrize("in_place", [True, False], ids=["the file itself", "a copy"])
def test_a_reopened_xspace_maps_its_file_and_charges_none_of_it(xplane, tmp_path, monkeypatch, in_place):
    if in_place and guard_module() is None:
        pytest.skip("a mapping in place needs the guard (the native build's _guard)")
    if not in_place:  # as a gzip, a pure build or a file with no room for the zeros after it are kept
        monkeypatch.setattr(xspace, "map_in_place", lambda fd, size, pad: None)
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    _stored(store, xplane)
    folder = stored_folder(store, xplane)
    reopened = indexed(store, str(xplane))
    trace = reopened.source
    size = xplane.stat().st_size
    assert reopened.extra.get("stored_index") and trace.in_place == in_place
    if in_place:  # no copy kept: the trace file mapped again where it lies
        assert not (folder / xspace.DATA_FILE).exists()
        assert all(isinstance(line.data, mmap.mmap) for line in trace.lines)
        assert bytes(trace.arrays[0][:size]) == xplane.read_bytes()
    else:
        assert isinstance(trace.arrays[0], np.memmap) and (folder / xspace.DATA_FILE).stat().st_size > size
        assert all(line.data is trace.arrays[0].base for line in trace.lines)
    assert reopened.memory_bytes() < size  # the file's bytes are not charged: mapped
    assert not any(folder.glob("*.tmp"))


def test_a_stored_xspace_whose_file_cannot_be_mapped_again_is_parsed_again(xplane, tmp_path, monkeypatch):
    """(A pure build reopening it, say.) The index goes, the file is read again, and the
    new index keeps a copy of its bytes."""
    if guard_module() is None:
        pytest.skip("a mapping in place needs the guard (the native build's _guard)")
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    expected = reduced(_stored(store, xplane), 2)
    monkeypatch.setattr(xspace, "map_file_again", lambda path, identity: None)
    monkeypatch.setattr(xspace, "map_in_place", lambda fd, size, pad: None)
    again = indexed(store, str(xplane))
    assert not again.extra.get("stored_index") and store.damaged == 1 and reduced(again, 2) == expected
    assert indexed(store, str(xplane)).source.in_place is False


def test_mapping_a_stored_xspace_file_again_needs_the_version_it_was_made_from(xplane) -> None:
    if guard_module() is None:
        pytest.skip("a mapping in place needs the guard (the native build's _guard)")
    identity = FileIdentity.from_stat(xplane.stat())
    mm, buf = xspace.map_file_again(str(xplane), identity)
    assert mm[:] == xplane.read_bytes() and len(buf) == identity.size + xspace._PAD
    assert xspace.map_file_again(str(xplane), dataclasses.replace(identity, mtime_ns=identity.mtime_ns + 1)) is None
    with open(xplane, "ab") as f:
        f.write(b"\0")  # grown: another version
    assert xspace.map_file_again(str(xplane), identity) is None
    assert xspace.map_file_again(str(xplane.parent / "gone.xplane.pb"), identity) is None


def test_an_xspace_parsed_in_memory_or_with_lines_copied_out_is_not_kept(xplane, tmp_path):
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    assert not store.can_save(index_file(xplane))  # no spill folder: nothing to link
    with native(False):
        parsed = parse_spilling(store, str(xplane))
        parsed.source.lines[0].data = bytes(parsed.source.lines[0].data[:64])  # as a copied-out line holds
        assert xspace.kept(parsed.source) is None and not store.can_save(parsed) and not store.save(parsed)


def _cut_file(folder: Path) -> None:
    f = folder / xspace.DATA_FILE
    f.write_bytes(f.read_bytes()[:-100])


def _flip_position(folder: Path) -> None:
    f = folder / "xspace_ends.npy"
    data = bytearray(f.read_bytes())
    data[-5] ^= 0x10
    f.write_bytes(bytes(data))


def _delete_positions(folder: Path) -> None:
    (folder / "xspace_starts.npy").unlink()


def _positions_past_the_file(folder: Path) -> None:
    """Consistent (checksums rewritten), but an event ends past the file's bytes."""
    ends = np.load(folder / "xspace_ends.npy")
    ends[-1] = np.iinfo(ends.dtype).max  # past any file's bytes, kept or not
    np.save(folder / "xspace_ends.npy", ends)
    manifest = json.loads((folder / "manifest.json").read_text())
    _resum(manifest, folder, "xspace_ends.npy")
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _lines_not_matching_events(folder: Path) -> None:
    """Consistent, but its positions hold one event fewer than its table."""
    for name in ("xspace_starts.npy", "xspace_ends.npy"):
        np.save(folder / name, np.load(folder / name)[:-1])
    manifest = json.loads((folder / "manifest.json").read_text())
    for name in ("xspace_starts.npy", "xspace_ends.npy"):
        _resum(manifest, folder, name)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _unknown_format(folder: Path) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["format"] = "perfetto"
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("damage", [_cut_file, _flip_position, _delete_positions, _positions_past_the_file,
                                    _lines_not_matching_events, _unknown_format],
                         ids=lambda f: f.__name__.strip("_"))
def test_a_damaged_xspace_index_is_removed_and_the_file_parsed_again(xplane, tmp_path, damage, monkeypatch):
    if damage is _cut_file:  # the copy of its bytes an index keeps where it cannot map the file itself
        monkeypatch.setattr(xspace, "map_in_place", lambda fd, size, pad: None)
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    parsed = _stored(store, xplane)
    expected = reduced(parsed, 2)
    folder = stored_folder(store, xplane)
    (folder / "verified.json").unlink(missing_ok=True)  # stamps would say the files were checked
    damage(folder)
    again = indexed(store, str(xplane))
    assert not again.extra.get("stored_index") and store.damaged == 1
    assert reduced(again, 2) == expected
    assert indexed(store, str(xplane)).extra.get("stored_index")  # rebuilt whole


def test_a_restarted_service_answers_a_new_xspace_window_from_the_stored_index(xplane, tmp_path, monkeypatch):
    logdir, cache = xplane.parents[4], tmp_path / "cache"
    first = TraceService(str(logdir), cache_dir=str(cache))
    run = first.runs()[0]
    host = run["hosts"][0]["host"]
    a = first.reduction(run["run"], host, 2, None, None)
    first.wait_saved()
    assert first.store is not None and first.store.info().indexes == 1 and a.stats["index"] == "parsed"

    def no_parse(*args, **kwargs):
        raise AssertionError("the stored index should have been reopened")

    monkeypatch.setattr(service_module, "index_file", no_parse)
    second = TraceService(str(logdir), cache_dir=str(cache))
    tf = second.trace_file(run["run"], host)
    lo, hi = second.on_index(tf, lambda i: default_window(i.table))
    b = second.reduction(run["run"], host, 1, lo, (lo + hi) / 3)  # a window never asked before the restart
    assert b.stats["index"] == "stored"
    monkeypatch.undo()
    fresh = TraceService(str(logdir), cache_dir=str(tmp_path / "other-cache"))
    c = fresh.reduction(run["run"], host, 1, lo, (lo + hi) / 3)
    assert _body(b) == _body(c)


def _body(r) -> bytes:
    data = r.body.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def test_the_cli_reopens_an_xspace_with_cache_dir_and_writes_the_same_trace(xplane, tmp_path):
    cache = tmp_path / "cache"

    def run(out: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tb_reduce_plugin", "reduce", str(xplane), "-o",
                               str(tmp_path / out), "--level", "2", "--cache-dir", str(cache)],
                              capture_output=True, text=True, timeout=300)

    first = run("a.json")
    kept = list(cache.glob("index/*/prepared.json"))  # what the first run's plan prepared: the next one plans at once
    assert len(kept) == 1 and '"col": "ts"' in kept[0].read_text()  # its slices as runs of the columns
    second = run("b.json")
    assert first.returncode == 0 and second.returncode == 0, (first.stderr, second.stderr)
    assert "index reopened" not in first.stdout and "[index reopened from --cache-dir]" in second.stdout
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
