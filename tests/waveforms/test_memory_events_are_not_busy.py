"""Kineto's `[memory]` events (one instant per allocation and free, `profile_memory=True`)
are not busy time: the memory category of a host-only trace is the union of its copies,
on a real PyTorch run that allocates in every step (docs/SEMANTICS.md, rule 9)."""

from __future__ import annotations

import numpy as np
from conftest import ROOT

from tb_reduce_plugin.reduce.pipeline import index_file
from tb_reduce_plugin.reduce.shared import slices_of
from tb_reduce_plugin.waveforms.categories import RULES
from tb_reduce_plugin.waveforms.steps import derive

MEMORY_RUN = ROOT / "tests" / "fixtures" / "compare" / "memory.pt.trace.json.gz"


def _union(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, -np.inf
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def test_allocations_add_no_memory_time_and_copies_do() -> None:
    t = index_file(MEMORY_RUN).table
    memory_names = {k for k, n in enumerate(t.names) if n == "[memory]"}
    assert int(np.isin(t.name, list(memory_names)).sum()) > 400  # the run's allocations and frees
    steps = derive(t)
    sl = slices_of(t)
    copies = [i for i in range(len(sl)) if str(t.names[sl.name[i]]).lower().startswith(("aten::copy_", "copy_",
                                                                                          "memcpy", "memset"))]
    for k in range(len(steps)):
        a, b = steps.start_us[k], steps.end_us[k]
        want = _union([(max(sl.start[i], a), min(sl.end[i], b)) for i in copies if sl.start[i] < b and sl.end[i] > a])
        assert want > 0 and abs(steps.busy_ms["memory"][k] * 1e3 - want) < 1e-6
    assert not any(r.name is not None and "memory" in r.name.lower() and "[" in r.name for r in RULES)
