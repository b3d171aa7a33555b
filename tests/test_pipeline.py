"""The pipeline's library surface: indexing, reduction to bytes, original events."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import ROOT

from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.pipeline import event_json, index_file, reduce_to_bytes

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
