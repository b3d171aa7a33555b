"""The pipeline's library surface: indexing, reduction to bytes, original events."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest
from conftest import ROOT

from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.reduce.pipeline import event_json, index_file, reduce_index, reduce_to_bytes

DEMO = ROOT / "demo_logdir" / "pytorch_cnn" / "vm_12922.1795977935943642718.pt.trace.json.gz"


def test_the_original_json_of_any_event_is_reachable_by_index() -> None:
    idx = index_file(DEMO)
    full = json.loads(gzip.decompress(DEMO.read_bytes()))["traceEvents"]
    for i in (0, 1, len(full) // 2, len(full) - 1):
        assert json.loads(event_json(idx, i)) == full[i]
    with pytest.raises(TraceError, match="no event"):
        event_json(idx, len(full))


def test_auto_picks_a_coarser_level_when_the_budget_is_small(monkeypatch: pytest.MonkeyPatch) -> None:
    import tb_reduce_plugin.reduce.pipeline as pipeline

    monkeypatch.setattr(pipeline, "BUDGET_EVENTS", 2000)
    doc = json.loads(reduce_to_bytes(DEMO, level="auto"))
    assert doc["tb_reduce"]["level"] > 0 and len(doc["traceEvents"]) <= 2000


@pytest.mark.parametrize("path", [DEMO, ROOT / "demo_logdir" / "jax_mlp" / "plugins" / "profile" / "2026_11_30_13_59_00"
                                  / "vm.xplane.pb"], ids=["chrome-json", "xspace"])
def test_a_view_without_args_keeps_the_same_events_and_only_names_and_values_in_args(path: Path) -> None:
    """The dashboard's cheap view: same events as the level writes, args only where
    they name (M) or are the values (C); the level's own output keeps its args."""
    index = index_file(path)
    for level in (0, 2):
        full, bare = io.BytesIO(), io.BytesIO()
        reduce_index(index, full, level, gzip=False, with_input_index=True)
        reduce_index(index, bare, level, gzip=False, with_input_index=True, drop_args=True)
        a, b = json.loads(full.getvalue()), json.loads(bare.getvalue())
        assert b["tb_reduce"]["args"] == "dropped" and "args" not in a["tb_reduce"]
        assert a["tb_reduce"]["input_index"] == b["tb_reduce"]["input_index"]
        assert len(a["traceEvents"]) == len(b["traceEvents"])
        for x, y in zip(a["traceEvents"], b["traceEvents"]):
            assert {k: v for k, v in x.items() if k != "args"} == {k: v for k, v in y.items() if k != "args"}
            if x.get("ph") in ("M", "C") or x.get("cat") == "tb_reduce.summary":
                assert x.get("args") == y.get("args")
            elif "args" in y:
                assert set(y["args"]) <= {"bind_id", "flow_in", "flow_out"}
        assert any("args" in x for x in a["traceEvents"] if x.get("ph") == "X" and x.get("cat") != "tb_reduce.summary")


@pytest.mark.parametrize("block_size", [1 << 24, 20_000], ids=["one-block", "many-blocks"])
def test_a_chrome_trace_keeps_its_blocks_after_one_full_pass_and_reads_only_those_later(
        tmp_path: Path, block_size: int) -> None:
    """What makes zooming a big Chrome trace cheap in the plugin: after the first
    full write pass (reads of any size), windows inflate only the chunks they need from
    a temporary store, with the same bytes as streaming the file again."""
    import gc

    import numpy as np

    from tb_reduce_plugin.formats import block_store, chrome_json

    store = tmp_path / "blocks"
    index = index_file(DEMO, store_dir=str(store))
    source = index.source
    source.block_size = block_size
    n = index.events
    picks = np.array(sorted({0, 1, n // 3, n // 2, n - 1}))
    for _ in source.events(np.array([0])):
        break
    assert not source.has_store and not any(store.iterdir())  # an early stop (a details lookup) builds nothing
    streamed = [raw for block in source.events(picks) for raw in block]  # the first full pass
    assert source.has_store and len(list(store.iterdir())) == 1
    if source.positions is not None:  # the text kept in chunks of TEXT_CHUNK bytes, whatever the reads' size
        text = source.positions.text_bytes
        assert len(source._store._offsets) - 1 == -(-text // block_store.TEXT_CHUNK) > 1
    else:  # no positions (the pure build): the blocks the reader decoded, each whole
        assert (len(source._store._offsets) > 10) == (block_size < 1 << 20)
    everything = [raw for block in source.events(np.arange(n)) for raw in block]
    calls = []
    original = chrome_json.TraceStream
    chrome_json.TraceStream = lambda *a, **k: calls.append(a) or original(*a, **k)  # type: ignore[misc]
    try:
        again = [raw for block in source.events(picks) for raw in block]
    finally:
        chrome_json.TraceStream = original  # type: ignore[misc]
    assert again == streamed == [everything[i] for i in picks.tolist()]
    assert not calls  # the file was not read again
    reduced_first = reduce_to_bytes(DEMO, level=2)
    buf = io.BytesIO()
    reduce_index(index, buf, 2, gzip=False)
    assert json.loads(buf.getvalue())["traceEvents"] == json.loads(reduced_first)["traceEvents"]
    del index, source
    gc.collect()
    assert not any(store.iterdir())  # the store goes with its index


SPAN_CASES = [
    [],  # no events
    [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "p"}}],  # metadata only: no timed event
    [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 5, "dur": -3}, {"ph": "i", "name": "b", "ts": 2},
     {"ph": "X", "name": "c", "pid": 1, "tid": 1, "ts": 1}, {"ph": "B", "name": "d", "ts": 9, "dur": 50},
     {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "ts": 100, "args": {"name": "t"}}],
    [{"ph": "X", "name": "a", "ts": 1e308, "dur": 1e308}, {"ph": "X", "name": "b", "ts": "x"}],  # an end past the largest float
]


@pytest.mark.parametrize("events", SPAN_CASES + ["corpus"], ids=lambda e: str(e)[:40])
def test_the_span_a_reader_finds_while_building_is_the_default_window_a_pass_over_the_table_finds(
        events: object, tmp_path: Path) -> None:
    import dataclasses

    from tb_reduce_plugin.reduce import plan

    if events == "corpus":
        paths = sorted((ROOT.parent / "shared" / "corpus" / "generated").rglob("*.json*"))[:6]
    else:
        (tmp_path / "t.json").write_text(json.dumps({"traceEvents": events}))
        paths = [tmp_path / "t.json"]
    for path in paths:
        t = index_file(path).table
        assert t.span is not None
        assert plan._default_window(t) == plan._default_window(dataclasses.replace(t, span=None))
