"""A plain JSON trace's events read where they lie (`formats.plain_text`): the same bytes
and the same views as a whole pass, nothing kept, and a file changed since refused or
read whole again."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from index_support import CORPUS, reductions

from tb_reduce_plugin.errors import FileChanged
from tb_reduce_plugin.formats import chrome_json, plain_text
from tb_reduce_plugin.formats.plain_text import PlainText
from tb_reduce_plugin.native import scanner_module
from tb_reduce_plugin.reduce.pipeline import index_file
from tb_reduce_plugin.reduce.plan import default_window
from tests.table_equality import native

TORCH = next(iter(sorted((CORPUS / "generated").glob("torch_cpu_cnn_small/*.pt.trace.json"))), None)
needs_torch_trace = pytest.mark.skipif(TORCH is None, reason="the corpus's plain torch trace is not here")
# Where each event lies is noted by the native scanner; without it (the pure build) a plain
# file's events are read in a whole pass, as a gzip's are.
needs_positions = pytest.mark.skipif(scanner_module() is None, reason="no event positions without the native scanner")


def events(n: int) -> list[dict]:
    return [{"ph": "X", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i * 10.5, "dur": 3,
             "args": {"text": "tricky },{ \"quote\" ]" * (i % 7)}} for i in range(n)]


def whole_passes(monkeypatch: pytest.MonkeyPatch) -> list:
    """Counts the passes that stream the whole file (`TraceStream` opened by the source)."""
    calls: list = []
    original = chrome_json.TraceStream
    monkeypatch.setattr(chrome_json, "TraceStream", lambda *a, **k: calls.append(a) or original(*a, **k))
    return calls


@needs_positions
def test_a_plain_trace_gives_its_events_from_where_they_lie_and_keeps_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evs = events(3000)
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}, indent=1))
    store = tmp_path / "blocks"
    index = index_file(p, store_dir=str(store))
    assert index.source.positions is not None
    passes = whole_passes(monkeypatch)
    picks = np.array([0, 1, 2, 700, 701, 1500, 2999])
    got = [json.loads(raw) for block in index.source.events(picks) for raw in block]
    everything = [json.loads(raw) for block in index.source.events(np.arange(3000)) for raw in block]
    assert got == [evs[i] for i in picks] and everything == evs
    assert passes == [] and not index.source.has_store and not (store.exists() and any(store.iterdir()))


@pytest.mark.parametrize("gap, run", [(0, 1), (100, 1000), (1 << 16, 8 << 20)])
def test_reads_of_any_gap_and_length_give_the_same_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         gap: int, run: int) -> None:
    monkeypatch.setattr(plain_text, "GAP_BYTES", gap)
    monkeypatch.setattr(plain_text, "RUN_BYTES", run)
    evs = events(500)
    p = tmp_path / "t.json"
    p.write_text(json.dumps(evs))  # the array form
    index = index_file(p, store_dir=str(tmp_path / "blocks"))
    rng = np.random.default_rng(7)
    for size in (1, 17, 250, 500):
        picks = np.sort(rng.choice(500, size, replace=False))
        assert [json.loads(r) for block in index.source.events(picks) for r in block] == [evs[i] for i in picks]


@needs_torch_trace
@needs_positions
def test_views_of_a_real_plain_trace_read_in_place_are_those_of_a_fresh_pure_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with native(False):
        pure = index_file(TORCH)
    t0, t1 = default_window(pure.table)
    third = (t1 - t0) / 3
    windows = [(2, None, None), (0, t0 + third, t0 + 2 * third), (1, t0, t0 + third / 10), (0, None, None)]
    expected = reductions(pure, windows)
    served = index_file(TORCH, store_dir=str(tmp_path / "store"))
    passes = whole_passes(monkeypatch)
    assert reductions(served, windows) == expected
    assert passes == [] and not served.source.has_store


def test_a_gzip_is_never_read_in_place(tmp_path: Path) -> None:
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(json.dumps(events(50)).encode()))
    index = index_file(p, store_dir=str(tmp_path / "blocks"))
    assert index.identity is not None and PlainText.open(str(p), index.identity) is None
    list(index.source.events(np.arange(50)))
    assert index.source.has_store  # read whole once, then kept in chunks


def test_a_file_appended_to_since_is_read_whole_and_gives_the_indexed_events(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "live.json"
    p.write_bytes(json.dumps(events(400))[:-1].encode() + b",")
    index = index_file(p)
    with open(p, "ab") as f:
        f.write(json.dumps(events(40))[1:].encode())
    passes = whole_passes(monkeypatch)
    assert [json.loads(r) for block in index.source.events(np.arange(400)) for r in block] == events(400)
    assert len(passes) == 1  # not the version indexed: the whole pass, whose CRC decides


@needs_positions
def test_a_file_rewritten_in_place_with_its_size_and_mtime_kept_is_refused_not_misread(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_text(json.dumps(events(300)))
    index = index_file(p)
    st = os.stat(p)
    text = p.read_bytes()
    shifted = b" " + text[:-1]  # every event one byte later: same size
    with open(p, "r+b") as f:  # in place: the same inode
        f.write(shifted)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(FileChanged, match="changed since it was read"):
        list(index.source.events(np.array([5, 200])))


def test_a_file_swapped_for_another_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_text(json.dumps(events(30)))
    index = index_file(p)
    shutil.copy(p, tmp_path / "copy.json")
    os.replace(tmp_path / "copy.json", p)  # the same bytes, another file
    with pytest.raises(FileChanged, match="changed since it was listed"):
        list(index.source.events(np.array([0])))


def test_elements_of_the_event_list_that_are_not_objects_are_read_in_place_too(tmp_path: Path) -> None:
    doc = [{"ph": "X", "name": "a", "ts": 0, "dur": 1, "pid": 1, "tid": 1}, 7, "x", [1, 2], True, None, -3.5e2,
           {"ph": "i", "name": "m", "ts": 2, "pid": 1, "tid": 1, "s": "g"}]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc, indent=2))
    index = index_file(p)
    got = [json.loads(r) for block in index.source.events(np.arange(index.events)) for r in block]
    assert index.identity is not None and PlainText.open(str(p), index.identity) is not None
    assert got == doc
