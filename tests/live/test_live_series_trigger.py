"""`series:NAME:Kx` (issue 27, item 3): the step trigger's rule on any per-step series — a
category's busy time, unaccounted time, peak memory — with the same history, warm-up and
runs; judged on windows built from real events and on a real PyTorch memory profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS
from test_live_triggers import MS, _fire, _steps

from tb_reduce_plugin.live.triggers import WARMUP_STEPS, StepHistory, TriggerError, evaluate, parse_trigger
from tb_reduce_plugin.reduce.pipeline import derive_index, index_file

MEMORY_RUN = TESTS / "fixtures" / "compare" / "memory.pt.trace.json.gz"  # keeps 4 MiB more a step from step 6
BASE_RUN = TESTS / "fixtures" / "compare" / "base.pt.trace.json.gz"


def _with_allreduce(times_ms: list[float], comm_ms: list[float], first: int = 0) -> list[dict[str, Any]]:
    """Steps as `_steps` makes them, each with an all-reduce of `comm_ms[i]` on a thread of its own."""
    ev = _steps(times_ms, first=first)
    t = 0.0
    for ms, comm in zip(times_ms, comm_ms):
        ev.append({"ph": "X", "name": "nccl:all_reduce", "cat": "cpu_op", "pid": 1, "tid": 2, "ts": (t + 1) * MS,
                   "dur": comm * MS})
        t += ms
    return ev


def test_a_step_whose_communication_grows_fires_though_its_step_time_does_not(tmp_path: Path) -> None:
    times = [100.0] * 12
    comm = [10.0] * 12
    comm[9] = 45.0  # the all-reduce took 4.5x as long; the step did not (it overlaps compute)
    events = _with_allreduce(times, comm, first=20)
    fired = _fire(tmp_path, events, "series:communication_ms:2x", "step:2x")
    assert [(f.trigger, f.step) for f in fired] == [("series:communication_ms:2x", 29)]
    f = fired[0]
    assert f.kind == "series" and f.unit == "ms" and f.value == pytest.approx(45.0)
    assert f.threshold == pytest.approx(20.0)
    assert "step 29: communication_ms was 45.0 ms, 4.5× its median 10.0 ms over the previous 9 steps" in f.reason
    doc = json.loads(json.dumps(f.to_json(), allow_nan=False))
    assert doc["kind"] == "series" and doc["step"] == 29


def test_series_step_time_is_the_step_trigger(tmp_path: Path) -> None:
    times = [100.0, 104.0, 98.0, 101.0, 99.0, 250.0, 100.0, 97.0, 230.0, 102.0]
    step = _fire(tmp_path, _steps(times), "step:2x")
    series = _fire(tmp_path, _steps(times), "series:step_time_ms:2x", name="b.json")
    assert [(f.step, f.value, f.threshold) for f in step] == [(f.step, f.value, f.threshold) for f in series]
    assert [f.step for f in step] == [5, 8]


def test_a_category_named_without_ms_and_its_baseline_carried_across_windows(tmp_path: Path) -> None:
    assert parse_trigger("series:communication:2x").series_name == "communication_ms"
    history = StepHistory(seen=WARMUP_STEPS)
    first = _fire(tmp_path, _with_allreduce([100.0] * 6, [10.0] * 6), "series:communication:2x", history=history,
                  name="a.json")
    assert first == [] and history.series_values("communication_ms") == [10.0] * 6
    again = StepHistory.from_json(json.loads(json.dumps(history.to_json())))
    assert again.series_values("communication_ms") == [10.0] * 6
    later = _with_allreduce([100.0] * 2, [10.0, 31.0], first=6)
    for e in later:
        if "ts" in e:
            e["ts"] += 600 * MS
    fired = _fire(tmp_path, later, "series:communication:2x", history=again, name="b.json")
    assert [f.step for f in fired] == [7]  # judged against the first window's six steps


def test_peak_memory_that_keeps_growing_fires_on_a_real_profile() -> None:
    idx = index_file(MEMORY_RUN)
    steps = derive_index(idx)
    fired = evaluate([parse_trigger("series:memory_peak_mb_cpu:1.5x")], idx, StepHistory(seen=WARMUP_STEPS), steps)
    assert fired and fired[0].step == 7 and fired[0].unit == "MB"  # the first step with five before it to judge by
    assert all(f.step >= 7 for f in fired)
    assert "memory_peak_mb_cpu was 12.1 MB" in fired[0].reason
    base = index_file(BASE_RUN)  # records no memory: nothing to judge, no error
    assert evaluate([parse_trigger("series:memory_peak_mb_cpu:1.5x")], base, StepHistory(seen=WARMUP_STEPS)) == []


@pytest.mark.parametrize("spec, says", [
    ("series:nope:2x", "no series 'nope'"),
    ("series:compute:2", "a factor like 2x"),
    ("series::2x", "series:NAME:Kx"),
    ("series:compute", "series:NAME:Kx"),
    ("series:compute:0x", "above 0"),
    ("series:memory_peak_mb_:2x", "no series"),
])
def test_bad_series_specs_say_which_and_why(spec: str, says: str) -> None:
    with pytest.raises(TriggerError) as err:
        parse_trigger(spec)
    assert says in str(err.value) and repr(spec) in str(err.value)
