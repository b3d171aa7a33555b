"""The index store (issue 26, item 1): a Chrome trace's parsed index written once per file
version into the cache directory and reopened by memory map — by a restarted server, a
second one over the same cache, or the CLI's `--cache-dir` — giving byte for byte what a
fresh parse gives; a damaged, partial or foreign index is detected and rebuilt, never
trusted; whole indexes go least recently used first, never one in use; refusals are
remembered per file version across restarts."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import TESTS
from index_support import CORPUS, _resum, chrome_traces, copied_gz_trace, corpus_for_this_run, identity, reduced, stored_folder
from plugin_support import require_corpus

from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.index import store as store_module
from tb_reduce_plugin.index.store import IndexStore, index_digest, indexed
from tb_reduce_plugin.native import scanner_module
from tb_reduce_plugin.query.aggregate import aggregate
from tb_reduce_plugin.query.search import compile_query, search
from tb_reduce_plugin.reduce.pipeline import index_file
from tb_reduce_plugin.reduce.plan import default_window, prepare_window_index
from tb_reduce_plugin.serve import service as service_module
from tb_reduce_plugin.serve.service import TraceService
from tb_reduce_plugin.waveforms.steps import derive

TORCH = CORPUS / "generated" / "torch_cpu_cnn_small"


@pytest.fixture()
def trace(tmp_path) -> Path:
    """A real PyTorch trace (the corpus's CPU CNN), copied so its version can be changed."""
    require_corpus()
    src = next(TORCH.glob("*.pt.trace.json"))
    dst = tmp_path / "logs" / "run" / src.name
    dst.parent.mkdir(parents=True)
    shutil.copyfile(src, dst)
    return dst


GPU_FIXTURES = sorted((TESTS / "fixtures" / "gpu").glob("*.json.gz"))


@pytest.mark.parametrize("path", corpus_for_this_run(chrome_traces()) + GPU_FIXTURES, ids=lambda p: p.name[:60])
def test_every_corpus_trace_gives_the_same_bytes_parsed_in_memory_parsed_to_disk_and_reopened(path, tmp_path):
    """One table three ways: a parse in memory; a parse that writes its columns (and the
    events' positions) to disk as it reads them, mapped, not the process's memory; and the
    stored index reopened, bare (the first plan prepares its state again) and with the state
    the first parse's plans and queries prepared, kept beside it. The same columns and the
    same bytes every way. (One test a trace: a parse of the biggest is seconds, and the two
    questions were asked of the same parse.)"""
    in_memory = index_file(path)
    spilled = index_file(path, spill_dir=str(tmp_path / "spill"))
    assert spilled.spill_dir == str(tmp_path / "spill") and isinstance(spilled.table.ts, np.memmap)
    for c in store_module.COLUMNS:
        a, b = getattr(in_memory.table, c), getattr(spilled.table, c)
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), c
    columns = sum(getattr(in_memory.table, c).nbytes for c in ("ph", "ts", "dur", "track", "name", "flow_key",
                                                                 "bind_enclosing", "scope", "cat"))
    a, b = in_memory.source.positions, spilled.source.positions
    assert (a is None) == (b is None)
    if a is not None:  # the events' positions in the file: written as they are read too, the same
        assert isinstance(b.starts, np.memmap) and isinstance(b.lengths, np.memmap) or len(a.starts) == 0
        assert np.array_equal(a.starts, b.starts) and np.array_equal(a.lengths, b.lengths)
        assert (a.starts.dtype, a.lengths.dtype, a.crc, a.text_bytes) == (b.starts.dtype, b.lengths.dtype, b.crc,
                                                                          b.text_bytes)
        columns += a.starts.nbytes + a.lengths.nbytes
    assert spilled.memory_bytes() <= in_memory.memory_bytes() - columns  # mapped: not the process's memory

    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    assert store.save(in_memory)
    bare = indexed(store, str(path))
    assert bare.extra.get("stored_index") is True and not bare.prepared.ready_fields()
    assert bare.events == in_memory.events
    lo, hi = default_window(in_memory.table)
    inner = (lo + (hi - lo) * 0.3, lo + (hi - lo) * 0.4)
    views = [(level, (None, None)) for level in (0, 2, 4, "auto")] + [(1, inner)]
    expected = [reduced(in_memory, level, window) for level, window in views]
    assert [reduced(spilled, level) for level in (0, 2)] == expected[:2]
    table = aggregate(in_memory.table, None, None)
    steps = derive(in_memory.table).to_json()
    hits = search(in_memory.table, compile_query("a"), None, None)
    assert store.save_prepared(in_memory)
    kept = indexed(store, str(path))
    assert kept.prepared.ready_fields() == in_memory.prepared.ready_fields()
    for index in (bare, kept):
        assert [reduced(index, level, window) for level, window in views] == expected
        assert aggregate(index.table, None, None) == table
        assert derive(index.table).to_json() == steps
        assert search(index.table, compile_query("a"), None, None) == hits


def test_the_columns_of_a_reopened_index_are_mapped_and_not_charged_as_the_processs_memory(tmp_path):
    require_corpus()
    big = max(chrome_traces(), key=lambda p: p.stat().st_size if p.suffix == ".gz" else 0)
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    parsed = index_file(big)
    store.save(parsed)
    reopened = indexed(store, str(big))
    assert isinstance(reopened.table.ts, np.memmap) and isinstance(reopened.table.name, np.memmap)
    columns = sum(getattr(parsed.table, c).nbytes for c in ("ts", "dur", "name", "track"))
    assert reopened.memory_bytes() <= parsed.memory_bytes() - columns


def test_another_version_of_the_file_does_not_find_the_index_of_the_first(trace, tmp_path):
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    store.save(index_file(trace))
    assert indexed(store, str(trace)).extra.get("stored_index")
    data = json.loads(trace.read_bytes())
    data["traceEvents"] = data["traceEvents"][: len(data["traceEvents"]) // 2]
    trace.write_text(json.dumps(data))  # a new version: new size and mtime
    again = indexed(store, str(trace))
    assert not again.extra.get("stored_index")
    assert again.events < index_file(next(TORCH.glob("*.pt.trace.json"))).events
    assert indexed(store, str(trace)).extra.get("stored_index")  # and this version is stored now


def _truncate(folder: Path) -> None:
    col = folder / "ts.npy"
    col.write_bytes(col.read_bytes()[:-8])


def _flip(folder: Path) -> None:
    col = folder / "dur.npy"
    data = bytearray(col.read_bytes())
    data[-3] ^= 0x40
    col.write_bytes(bytes(data))


def _delete(folder: Path) -> None:
    (folder / "name.npy").unlink()


def _garbage_manifest(folder: Path) -> None:
    (folder / "manifest.json").write_bytes(b"\x00{not json")


def _manifest_naming_a_path(folder: Path) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["../../escape.npy"] = [1, 0]
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _ids_past_the_strings(folder: Path) -> None:
    """A consistent index (sizes and checksums rewritten) whose name ids point past its names."""
    manifest = json.loads((folder / "manifest.json").read_text())
    names = np.load(folder / "name.npy")
    names[0] = np.iinfo(names.dtype).max  # kept int16: its largest
    np.save(folder / "name.npy", names)
    data = (folder / "name.npy").read_bytes()
    manifest["files"]["name.npy"] = [len(data), store_module.isal_zlib.crc32(data)]
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _other_version_in_manifest(folder: Path) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["version"] = -1
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("damage", [_truncate, _flip, _delete, _garbage_manifest, _manifest_naming_a_path,
                                    _ids_past_the_strings, _other_version_in_manifest],
                         ids=lambda f: f.__name__.strip("_"))
def test_a_damaged_index_is_removed_and_the_trace_parsed_again_never_trusted(trace, tmp_path, damage):
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    parsed = index_file(trace)
    store.save(parsed)
    folder = stored_folder(store, trace)
    damage(folder)
    again = indexed(store, str(trace))
    assert not again.extra.get("stored_index")
    assert store.damaged == 1
    assert reduced(again, 2) == reduced(parsed, 2)
    assert not (tmp_path / "escape.npy").exists()
    # rebuilt whole: the next open reopens it
    assert indexed(store, str(trace)).extra.get("stored_index")


def test_a_folder_left_by_a_killed_builder_is_removed_and_a_live_builders_is_kept(tmp_path):
    root = tmp_path / "index"
    root.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (root / f".tmp-{'a' * 64}-{dead.pid}-1").mkdir()
    alive = root / f".tmp-{'b' * 64}-{os.getppid()}-1"
    alive.mkdir()
    IndexStore(str(root), 1 << 30)
    assert not (root / f".tmp-{'a' * 64}-{dead.pid}-1").exists()
    assert alive.exists()


def test_least_recently_used_indexes_go_first_and_one_in_use_is_never_evicted(tmp_path):
    require_corpus()
    sources = [p for p in chrome_traces() if 200_000 < p.stat().st_size < 3_000_000][:3]
    assert len(sources) == 3
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    held = indexed(store, str(sources[0]))  # parsed and stored, then reopened and held
    held = indexed(store, str(sources[0]))
    assert held.extra.get("stored_index")
    for p in sources[1:]:
        indexed(store, str(p))
    os.utime(stored_folder(store, sources[1]) / "manifest.json", (1, 1))  # the least recently used
    sizes = {p: sum(f.stat().st_size for f in stored_folder(store, p).iterdir()) for p in sources}
    store.max_bytes = sizes[sources[0]] + sizes[sources[2]]
    os.utime(stored_folder(store, sources[0]) / "manifest.json", (0, 0))  # older still, but in use
    store.evict()
    assert stored_folder(store, sources[0]).is_dir()  # in use: kept though oldest
    assert not stored_folder(store, sources[1]).exists()
    assert stored_folder(store, sources[2]).is_dir()
    info = store.info()
    assert info.indexes == 2 and info.bytes <= store.max_bytes


def test_two_stores_saving_one_index_at_once_both_succeed_and_one_index_stands(trace, tmp_path):
    parsed = index_file(trace)
    a, b = IndexStore(str(tmp_path / "index"), 1 << 34), IndexStore(str(tmp_path / "index"), 1 << 34)
    assert a.save(parsed) and b.save(parsed)
    assert [n for n in os.listdir(tmp_path / "index") if len(n) == 64] == [index_digest(str(trace), identity(trace))]
    assert indexed(a, str(trace)).extra.get("stored_index")


def test_a_read_only_store_folder_still_serves_by_parsing(trace, tmp_path):
    if os.geteuid() == 0:
        folder = tmp_path / "not-a-folder"
        folder.write_text("a file where the store's folder should be")
        store = IndexStore(str(folder / "index"), 1 << 30)
    else:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o500)
        store = IndexStore(str(folder / "index"), 1 << 30)
    assert not store.usable
    index = indexed(store, str(trace))
    assert index.events > 0 and not index.extra.get("stored_index")
    assert not store.save(index)


def test_a_restarted_service_reopens_the_index_and_answers_the_same(trace, tmp_path, monkeypatch):
    logdir, cache = trace.parent.parent, tmp_path / "cache"
    first = TraceService(str(logdir), cache_dir=str(cache))
    host = first.runs()[0]["hosts"][0]["host"]
    a = first.reduction("run", host, 2, None, None)
    first.wait_saved()
    assert first.store is not None and first.store.info().indexes == 1

    def no_parse(*args, **kwargs):
        raise AssertionError("the stored index should have been reopened")

    monkeypatch.setattr(service_module, "index_file", no_parse)
    second = TraceService(str(logdir), cache_dir=str(cache))
    lo, hi = second.on_index(second.trace_file("run", host), lambda i: default_window(i.table))
    b = second.reduction("run", host, 3, lo, (lo + hi) / 2)  # a window never asked before the restart
    assert second.warm_index(second.trace_file("run", host)).extra.get("stored_index")
    assert b.stats["index"] == "stored"
    monkeypatch.undo()
    fresh = TraceService(str(logdir), cache_dir=str(tmp_path / "other-cache"))
    c = fresh.reduction("run", host, 3, lo, (lo + hi) / 2)
    assert _body(b) == _body(c)
    assert a.stats["index"] == "parsed"


def _body(r) -> bytes:
    data = r.body.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def test_a_refusal_is_remembered_on_disk_and_a_restart_refuses_without_reading(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    (logdir / "bad").mkdir(parents=True)
    (logdir / "bad" / "x.pt.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [')[:-9] + b"garbage!!")
    first = TraceService(str(logdir), cache_dir=str(tmp_path / "cache"))
    with pytest.raises(TraceError) as one:
        first.reduction("bad", "x", 2, None, None)
    monkeypatch.setattr(service_module, "index_file", lambda *a, **k: pytest.fail("read again"))
    second = TraceService(str(logdir), cache_dir=str(tmp_path / "cache"))
    with pytest.raises(TraceError) as two:
        second.reduction("bad", "x", 2, None, None)
    assert type(two.value) is type(one.value) and str(two.value) == str(one.value)
    # another version of the file is read (and here, parsed fine)
    monkeypatch.undo()
    (logdir / "bad" / "x.pt.trace.json.gz").write_bytes(gzip.compress(
        b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]}'))
    third = TraceService(str(logdir), cache_dir=str(tmp_path / "cache"))
    assert third.reduction("bad", "x", 2, None, None).stats["input"]["events"] == 1


def test_the_cli_reopens_the_index_with_cache_dir_and_writes_the_same_trace(trace, tmp_path):
    cache = tmp_path / "cache"

    def run(out: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tb_reduce_plugin", "reduce", str(trace), "-o",
                               str(tmp_path / out), "--level", "2", "--cache-dir", str(cache),
                               "--stats-json", str(tmp_path / f"{out}.stats.json")],
                              capture_output=True, text=True, timeout=300)

    first = run("a.json")
    kept = list(cache.glob("index/*/prepared.json"))  # what the first run's plan prepared: the next one plans at once
    assert len(kept) == 1 and "slices" in json.loads(kept[0].read_text())["spec"]
    second = run("b.json")
    assert first.returncode == 0 and second.returncode == 0, (first.stderr, second.stderr)
    assert "index reopened" not in first.stdout and "[index reopened from --cache-dir]" in second.stdout
    assert json.loads((tmp_path / "a.json.stats.json").read_text())["index"] == "parsed"
    assert json.loads((tmp_path / "b.json.stats.json").read_text())["index"] == "stored"
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    waves = subprocess.run([sys.executable, "-m", "tb_reduce_plugin", "waveforms", str(trace), "--cache-dir",
                            str(cache)], capture_output=True, text=True, timeout=300)
    plain = subprocess.run([sys.executable, "-m", "tb_reduce_plugin", "waveforms", str(trace)],
                           capture_output=True, text=True, timeout=300)
    assert waves.returncode == 0 and waves.stdout == plain.stdout and waves.stdout.count("\n") > 1


def test_a_restarted_tensorboard_answers_a_new_window_from_the_stored_index(tmp_path):
    """Real `tensorboard` processes over one cache: the first parses and stores the index
    (its `info` says so), the second answers a window never asked before from it."""
    require_corpus()
    from tensorboard_process import start_tensorboard

    logdir, cache = tmp_path / "logs", tmp_path / "cache"
    src = max(chrome_traces(), key=lambda p: p.stat().st_size if p.name.endswith(".pt.trace.json.gz") else 0)
    (logdir / "run").mkdir(parents=True)
    shutil.copyfile(src, logdir / "run" / src.name)
    host = src.name[: -len(".pt.trace.json.gz")]

    tb = start_tensorboard(logdir, cache)
    try:
        first = tb.json("data/plugin/tb_reduce/stats", run="run", host=host, level=2)
        assert first["index"] == "parsed"
        tb.wait_index_saved()
    finally:
        tb.stop()
    t0, t1 = first["trace_us"]
    window = dict(run="run", host=host, level=1, start_us=t0 + (t1 - t0) * 0.25, end_us=t0 + (t1 - t0) * 0.3)
    tb = start_tensorboard(logdir, cache)
    try:
        again = tb.json("data/plugin/tb_reduce/stats", **window)
        info = tb.json("data/plugin/tb_reduce/info")["index_store"]
        assert again["index"] == "stored" and info["loaded"] == 1 and info["indexes"] == 1, info
        status, _, body = tb.get("data/plugin/tb_reduce/trace", **window)
        assert status == 200
    finally:
        tb.stop()
    fresh = TraceService(str(logdir), cache_dir=str(tmp_path / "fresh"))
    expected = fresh.reduction("run", host, 1, window["start_us"], window["end_us"])
    served = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body
    assert served == _body(expected)


@pytest.fixture()
def gz_trace(tmp_path) -> Path:
    """A real PyTorch trace as gzip, whose events are read back by inflating."""
    require_corpus()
    return copied_gz_trace(tmp_path)


def _served_once(logdir: Path, cache: Path, host: str) -> TraceService:
    first = TraceService(str(logdir), cache_dir=str(cache))
    first.reduction("run", host, 2, None, None)
    first.wait_saved()
    return first


def test_a_restart_reads_events_from_the_kept_blocks_and_never_inflates_the_trace_again(gz_trace, tmp_path,
                                                                                        monkeypatch):
    logdir, cache = gz_trace.parent.parent, tmp_path / "cache"
    host = gz_trace.name[: -len(".pt.trace.json.gz")]
    first = _served_once(logdir, cache, host)
    folder = stored_folder(first.store, gz_trace)
    assert (folder / "blocks.json").is_file() and (folder / "blocks.bin").stat().st_size > 0
    tiered = scanner_module() is not None  # a tier needs the events' positions, which the scanner notes
    assert (folder / "blocks_tier_ids.npy").is_file() == tiered  # the coarse tier is kept with them

    def no_stream(*args, **kwargs):
        raise AssertionError("the trace was read again")

    second = TraceService(str(logdir), cache_dir=str(cache))
    lo, hi = second.on_index(second.trace_file("run", host), lambda i: default_window(i.table))
    tier = second.on_index(second.trace_file("run", host), lambda i: i.source._store.tier)
    assert (tier is not None and len(tier[0]) > 0) == tiered
    monkeypatch.setattr("tb_reduce_plugin.formats.chrome_json.TraceStream", no_stream)
    window = (lo + (hi - lo) * 0.4, lo + (hi - lo) * 0.45)
    got = second.reduction("run", host, 0, *window)  # level 0: every event's JSON in the window
    detail = second.event("run", host, 7)
    monkeypatch.undo()
    fresh = TraceService(str(logdir), cache_dir=str(tmp_path / "fresh"))
    assert _body(got) == _body(fresh.reduction("run", host, 0, *window))
    assert detail == fresh.event("run", host, 7)


def test_text_kept_by_an_earlier_version_is_kept_again_quietly_and_windows_are_the_same(gz_trace, tmp_path, caplog):
    """A store of kept blocks whose manifest names no codec (ISA-L's, before zstd) is not read
    as zstd frames, nor called damaged: it is dropped with an info line and kept again."""
    import logging

    from tb_reduce_plugin.formats import kept_codec

    logdir, cache = gz_trace.parent.parent, tmp_path / "cache"
    host = gz_trace.name[: -len(".pt.trace.json.gz")]
    first = _served_once(logdir, cache, host)
    folder = stored_folder(first.store, gz_trace)
    manifest = json.loads((folder / "blocks.json").read_text())
    assert manifest["codec"] == kept_codec.CODEC == "zstd"
    assert (folder / "blocks.bin").read_bytes()[:4] == b"\x28\xb5\x2f\xfd"  # a zstd frame's magic
    del manifest["codec"]
    (folder / "blocks.json").write_text(json.dumps(manifest))
    caplog.set_level(logging.INFO, logger="tb_reduce_plugin")
    second = TraceService(str(logdir), cache_dir=str(cache))
    got = second.reduction("run", host, 0, None, None)
    assert got.stats["index"] == "stored"
    assert "compressed another way" in caplog.text and "damaged" not in caplog.text
    fresh = TraceService(str(logdir), cache_dir=str(tmp_path / "fresh"))
    assert _body(got) == _body(fresh.reduction("run", host, 0, None, None))
    second.wait_saved()
    assert json.loads((folder / "blocks.json").read_text())["codec"] == "zstd"  # kept again, in zstd


@pytest.mark.parametrize("damage", ["flip", "truncate", "tables", "manifest", "tier order", "tier range", "tier text"])
def test_damaged_kept_blocks_are_dropped_and_the_events_read_from_the_trace(gz_trace, tmp_path, damage, caplog):
    logdir, cache = gz_trace.parent.parent, tmp_path / "cache"
    host = gz_trace.name[: -len(".pt.trace.json.gz")]
    first = _served_once(logdir, cache, host)
    folder = stored_folder(first.store, gz_trace)
    blocks = folder / "blocks.bin"
    if damage == "flip":
        data = bytearray(blocks.read_bytes())
        data[len(data) // 2] ^= 1
        blocks.write_bytes(bytes(data))
    elif damage == "truncate":
        blocks.write_bytes(blocks.read_bytes()[:-100])
    elif damage == "tables":  # consistent checksums, offsets that do not describe the file
        offsets = np.load(folder / "blocks_offsets.npy")
        offsets[-1] += 4096
        np.save(folder / "blocks_offsets.npy", offsets)
        data = (folder / "blocks_offsets.npy").read_bytes()
        manifest = json.loads((folder / "blocks.json").read_text())
        manifest["files"]["blocks_offsets.npy"] = [len(data), store_module.isal_zlib.crc32(data)]
        (folder / "blocks.json").write_text(json.dumps(manifest))
    elif damage.startswith("tier"):  # consistent checksums, a tier that does not describe the kept text
        if scanner_module() is None:
            pytest.skip("no coarse tier without the native scanner's event positions")
        name = "blocks_tier_starts.npy" if damage == "tier text" else "blocks_tier_ids.npy"
        column = np.load(folder / name)
        if damage == "tier order":
            column[[0, 1]] = column[[1, 0]]
        elif damage == "tier range":
            column[-1] = 1 << 40
        else:
            column += 7  # its text would start past the kept text's end
        np.save(folder / name, column)
        data = (folder / name).read_bytes()
        manifest = json.loads((folder / "blocks.json").read_text())
        manifest["files"][name] = [len(data), store_module.isal_zlib.crc32(data)]
        (folder / "blocks.json").write_text(json.dumps(manifest))
    else:
        (folder / "blocks.json").write_text('{"files": {"../../x": [1, 2]}}')
    second = TraceService(str(logdir), cache_dir=str(cache))
    got = second.reduction("run", host, 0, None, None)
    assert got.stats["index"] == "stored"
    assert "kept blocks" in caplog.text
    assert not (folder / "blocks.json").exists() or (folder / "blocks.json").read_text() != ""
    fresh = TraceService(str(logdir), cache_dir=str(tmp_path / "fresh"))
    assert _body(got) == _body(fresh.reduction("run", host, 0, None, None))
    second.wait_saved()
    assert (folder / "blocks.json").is_file()  # kept again by the pass that read the trace
    assert TraceService(str(logdir), cache_dir=str(cache)).on_index(
        second.trace_file("run", host), lambda i: i.source.has_store)


def test_a_restarted_service_plans_with_the_prepared_state_the_first_one_kept(trace, tmp_path):
    logdir, cache = trace.parent.parent, tmp_path / "cache"
    first = TraceService(str(logdir), cache_dir=str(cache))
    host = first.runs()[0]["hosts"][0]["host"]
    first.reduction("run", host, 2, None, None)
    first.search("run", host, "aten")
    first.wait_saved()
    made = first.warm_index(first.trace_file("run", host)).prepared.ready_fields()
    assert {"slices", "static", "searchable"} <= made
    second = TraceService(str(logdir), cache_dir=str(cache))
    loaded = second.on_index(second.trace_file("run", host), lambda i: i.prepared.ready_fields())
    assert loaded == made
    fresh = TraceService(str(logdir), cache_dir=str(tmp_path / "fresh"))
    lo, hi = fresh.on_index(fresh.trace_file("run", host), lambda i: default_window(i.table))
    for level, window in ((3, (lo, (lo + hi) / 2)), (0, (None, None))):
        assert _body(second.reduction("run", host, level, *window)) == _body(fresh.reduction("run", host, level,
                                                                                           *window))
    assert second.search("run", host, "aten") == fresh.search("run", host, "aten")


def _rewrite_prepared(folder: Path, change) -> None:
    manifest = json.loads((folder / "prepared.json").read_text())
    change(manifest, folder)
    (folder / "prepared.json").write_text(json.dumps(manifest))


def _slices_past_the_table(manifest: dict, folder: Path) -> None:
    """Consistent checksums, a slice naming an event past the table."""
    name = f"p{manifest['gen']}_{manifest['spec']['slices']['f']['event']['a']}.npy"
    a = np.load(folder / name)
    a[-1] = 10 ** 9
    np.save(folder / name, a)
    _resum(manifest, folder, name)


def _track_rows_that_do_not_fit(manifest: dict, folder: Path) -> None:
    """Consistent checksums, the tracks' rows of the slice order ending past it."""
    name = f"p{manifest['gen']}_{manifest['spec']['static']['f']['track_rows']['a']}.npy"
    a = np.load(folder / name)
    a[-1] += 5
    np.save(folder / name, a)
    _resum(manifest, folder, name)


def _instants_past_the_table(manifest: dict, folder: Path) -> None:
    """Consistent checksums, the window index's instants naming an event past the table."""
    name = f"p{manifest['gen']}_{manifest['spec']['window_index']['f']['instants']['a']}.npy"
    a = np.load(folder / name)
    if len(a):
        a[-1] = 10 ** 9
    else:  # a trace without instants: one made up
        a = np.array([10 ** 9], dtype=a.dtype)
    np.save(folder / name, a)
    _resum(manifest, folder, name)


def _unknown_kind(manifest: dict, folder: Path) -> None:
    manifest["spec"]["slices"]["d"] = "Popen"


def _a_path_for_a_file(manifest: dict, folder: Path) -> None:
    manifest["files"]["../../x.npy"] = [1, 1]


def _flipped_array(manifest: dict, folder: Path) -> None:
    name = sorted(manifest["files"])[0]
    data = bytearray((folder / name).read_bytes())
    data[-1] ^= 0x10
    (folder / name).write_bytes(bytes(data))


def _offsets_that_do_not_fit(manifest: dict, folder: Path) -> None:
    segs = manifest["spec"]["flow_binding"]["f"]["segments"]
    field = next(f for f in segs["f"].values() if "at" in f)
    name = f"p{manifest['gen']}_{field['at']}.npy"
    a = np.load(folder / name)
    a[-1] += 5
    np.save(folder / name, a)
    _resum(manifest, folder, name)


@pytest.mark.parametrize("damage", [_slices_past_the_table, _track_rows_that_do_not_fit, _instants_past_the_table,
                                    _unknown_kind, _a_path_for_a_file, _flipped_array, _offsets_that_do_not_fit],
                         ids=lambda f: f.__name__.strip("_"))
def test_damaged_prepared_state_is_dropped_and_prepared_again(tmp_path, damage, caplog):
    require_corpus()
    path = next(p for p in chrome_traces() if "flow" in p.name)  # catapult's flows: a flow binding is kept
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    parsed = index_file(path)
    store.save(parsed)
    expected = reduced(parsed, 2)
    prepare_window_index(parsed.table)  # kept too (a server makes it in the background)
    assert parsed.prepared.flow_binding is not None and parsed.prepared.flow_binding.segments
    assert store.save_prepared(parsed)
    folder = stored_folder(store, path)
    _rewrite_prepared(folder, damage)
    reopened = indexed(store, str(path))
    assert reopened.extra.get("stored_index") and not reopened.prepared.ready_fields()
    assert "prepared state" in caplog.text and not (folder / "prepared.json").exists()
    assert not (tmp_path / "x.npy").exists()
    assert reduced(reopened, 2) == expected
    assert store.save_prepared(reopened)  # kept again, whole
    assert indexed(store, str(path)).prepared.ready_fields() == reopened.prepared.ready_fields()


def test_worker_processes_of_a_merged_view_store_and_reopen_the_hosts_indexes(tmp_path):
    """`--tb_reduce_workers=local:2`: the workers store each host's index in the server's
    store, and after a restart reopen it (each reopening touches its manifest) for the
    same bytes."""
    from multihost_support import write_many_hosts
    from plugin_support import client, get, make_plugin

    write_many_hosts(tmp_path / "logs" / "job", 4)
    cache = tmp_path / "cache"
    first = make_plugin(tmp_path / "logs", cache, "--tb_reduce_workers=local:2")
    a = get(client(first), "trace", run="job", hosts="*", level=2)
    assert a.status_code == 200, a.get_data()[:300]
    first.service.merged.executor.close()
    manifests = list((cache / "index").glob("*/manifest.json"))
    assert len(manifests) == 4
    for m in manifests:
        os.utime(m, (1, 1))
    lo, hi = json.loads(gzip.decompress(a.get_data()) if a.get_data()[:2] == b"\x1f\x8b"
                        else a.get_data())["tb_reduce"]["trace_us"]
    window = dict(run="job", hosts="*", level=3, start_us=lo + 0.2 * (hi - lo), end_us=lo + 0.7 * (hi - lo))
    second = make_plugin(tmp_path / "logs", cache, "--tb_reduce_workers=local:2")
    b = get(client(second), "trace", **window)  # never asked: computed by the workers
    second.service.merged.executor.close()
    assert b.status_code == 200
    assert all(m.stat().st_mtime > 1 for m in manifests)
    here = make_plugin(tmp_path / "logs", tmp_path / "fresh", "--tb_reduce_workers=local:0")
    assert get(client(here), "trace", **window).get_data() == b.get_data()


def test_a_workers_task_reopens_the_stored_index_instead_of_parsing(trace, tmp_path, monkeypatch):
    from tb_reduce_plugin.multihost import tasks

    store = IndexStore(str(tmp_path / "cache" / "index"), 1 << 34)
    store.save(index_file(trace))
    st = os.stat(trace)
    task = tasks.HostTask(str(trace), (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns), memory_bytes=1 << 30,
                          index_dir=store.directory)
    monkeypatch.setattr(tasks, "index_file", lambda *a, **k: pytest.fail("parsed again"))
    monkeypatch.setattr(store_module, "index_file", lambda *a, **k: pytest.fail("parsed again"))
    assert tasks._index(task).extra.get("stored_index")


def test_blocks_staged_by_a_live_process_are_not_taken_for_a_dead_builders(tmp_path):
    store = IndexStore(str(tmp_path / "index"), 1 << 30)
    (tmp_path / "index").mkdir()
    blocks = tmp_path / "blocks.tmp"
    blocks.write_bytes(b"x" * 100)
    staged = store.stage_blocks(str(blocks))
    assert staged is not None and os.path.exists(staged)
    IndexStore(str(tmp_path / "index"), 1 << 30)  # another server starting over the same store
    assert os.path.exists(staged)


# ---- columns written while they are read (spilled) ---------------------------------------


def test_the_positions_of_the_events_are_not_held_in_memory_while_a_spilling_parse_reads(tmp_path):
    """12 B an event of positions held (and charged) for the whole parse refused a 50 M-event
    trace at the default budget: written as read, they are charged nothing, and the charged
    peak falls by at least that much."""
    from tb_reduce_plugin.budget import MemoryBudget
    from tb_reduce_plugin.native import scanner_module

    noted = scanner_module() is not None  # the pure build notes no positions: it reads blocks again
    path = tmp_path / "t.json"
    n = 60_000
    events = [{"ph": "X", "name": f"op{i % 50}", "ts": i * 2.0, "dur": 1.0, "pid": 1, "tid": i % 3} for i in range(n)]
    path.write_text(json.dumps({"traceEvents": events}))
    peaks = {}
    for spill in (None, str(tmp_path / "spill")):
        budget = MemoryBudget(1 << 34)
        with budget.account("parse") as account:
            index = index_file(path, account=account, spill_dir=spill)
        peaks[spill is not None] = budget.peak
        positions = index.source.positions
        assert (positions is not None and len(positions.starts) == n) if noted else positions is None
    assert peaks[True] <= peaks[False] - (12 * n if noted else 0), peaks


def test_the_store_links_the_spilled_columns_and_the_spill_folder_goes_with_its_index(trace, tmp_path):
    import gc

    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    index = store_module.parse_spilling(store, str(trace))
    spill = Path(index.spill_dir)
    assert spill.is_dir() and spill.parent == tmp_path / "index"
    assert store.save(index)
    stored = stored_folder(store, trace) / "ts.npy"
    assert stored.stat().st_ino == (spill / "ts.npy").stat().st_ino  # linked, not written again
    if index.source.positions is not None:  # their starts and lengths kept narrowed: int32, int16
        for name, width in (("pos_starts.npy", np.int32), ("pos_lengths.npy", np.int16)):
            kept = np.load(stored_folder(store, trace) / name)
            assert kept.dtype == width and np.array_equal(kept, getattr(index.source.positions, name[4:-4]))
    reopened = indexed(store, str(trace))
    assert reduced(reopened, 2) == reduced(index_file(trace), 2)
    del index
    gc.collect()
    assert not spill.exists() and stored.is_file()


def test_a_disk_that_cannot_take_the_columns_reads_the_trace_in_memory_instead(tmp_path):
    """In a process whose files may not grow past 64 kB (RLIMIT_FSIZE, as a full disk
    answers): the parse is read again in memory, the same, and no spill folder stays."""
    require_corpus()
    src = max((p for p in chrome_traces() if p.name.endswith(".json.gz")), key=lambda p: p.stat().st_size)
    script = f"""
import os, resource, signal, sys
sys.path.insert(0, {str(TESTS.parent)!r})
from tb_reduce_plugin.index.store import IndexStore, parse_spilling
from tb_reduce_plugin.reduce.pipeline import index_file
import numpy as np
expected = index_file({str(src)!r})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (65536, resource.RLIM_INFINITY))
store = IndexStore({str(tmp_path / "index")!r}, 1 << 34)
got = parse_spilling(store, {str(src)!r})
assert got.spill_dir is None and not isinstance(got.table.ts, np.memmap)
assert np.array_equal(got.table.ts, expected.table.ts, equal_nan=True) and got.table.names == expected.table.names
assert not [n for n in os.listdir({str(tmp_path / "index")!r}) if n.startswith(".tmp-spill")]
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
    assert "could not be written" in done.stderr


@pytest.mark.parametrize("name", ["manifest.json", "ts.npy", "strings.msgpack", "blocks.bin", "prepared.json",
                                  "blocks_tier_ids.npy"])
def test_a_fifo_in_place_of_a_stored_file_is_damage_and_never_waited_on(gz_trace, tmp_path, name):
    """Every file of the store is opened as the traces are: without blocking, a regular file only."""
    logdir, cache = gz_trace.parent.parent, tmp_path / "cache"
    host = gz_trace.name[: -len(".pt.trace.json.gz")]
    first = _served_once(logdir, cache, host)
    folder = stored_folder(first.store, gz_trace)
    if name.startswith("blocks_tier") and scanner_module() is None:
        pytest.skip("no coarse tier without the native scanner's event positions")
    assert (folder / name).is_file()
    (folder / name).unlink()
    os.mkfifo(folder / name)
    result: list = []
    worker = threading.Thread(target=lambda: result.append(
        TraceService(str(logdir), cache_dir=str(cache)).reduction("run", host, 0, None, None)), daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), f"a FIFO named {name} hung the open"
    fresh = TraceService(str(logdir), cache_dir=str(tmp_path / "fresh"))
    assert _body(result[0]) == _body(fresh.reduction("run", host, 0, None, None))
