"""The pipeline's library surface: indexing, reduction to bytes, original events."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest
from conftest import ROOT

from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.pipeline import event_json, index_file, reduce_index, reduce_to_bytes

DEMO = ROOT / "demo_logdir" / "pytorch_cnn" / "vm_12922.1795977935943642718.pt.trace.json.gz"


def test_the_original_json_of_any_event_is_reachable_by_index() -> None:
    idx = index_file(DEMO)
    full = json.loads(gzip.decompress(DEMO.read_bytes()))["traceEvents"]
    for i in (0, 1, len(full) // 2, len(full) - 1):
        assert json.loads(event_json(idx, i)) == full[i]
    with pytest.raises(TraceError, match="no event"):
        event_json(idx, len(full))


def test_auto_picks_a_coarser_level_when_the_budget_is_small(monkeypatch: pytest.MonkeyPatch) -> None:
    import tb_reduce_plugin.pipeline as pipeline

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
