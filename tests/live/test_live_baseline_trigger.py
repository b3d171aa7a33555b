"""`baseline:SERIES:+MARGIN` with `--baseline RUN` (issue 27, item 3): each window's median of a
per-step series against the baseline run's, by the regression gate's rule — on real PyTorch
runs of one loop (tests/fixtures/make_compare_traces.py): a run with an extra matmul a step
fires against the base run, a rerun of it does not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, TESTS

from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.live.sidecar import LiveConfig, Sidecar
from tb_reduce_plugin.live.triggers import (
    MIN_BASELINE_STEPS,
    WARMUP_STEPS,
    Baseline,
    StepHistory,
    TriggerError,
    evaluate,
    parse_trigger,
)
from tb_reduce_plugin.reduce.pipeline import derive_index, index_file

RUNS = TESTS / "fixtures" / "compare"
BASE, RERUN, SLOW = (RUNS / f"{n}.pt.trace.json.gz" for n in ("base", "rerun", "slow_matmul"))


def baseline() -> Baseline:
    return Baseline.of("base", derive_index(index_file(BASE)))


def test_a_slowed_run_fires_once_a_window_and_a_rerun_does_not() -> None:
    base = baseline()
    trigger = parse_trigger("baseline:step_time:+10%")
    slow = index_file(SLOW)
    fired = evaluate([trigger], slow, StepHistory(seen=WARMUP_STEPS), baseline=base)
    assert len(fired) == 1
    f = fired[0]
    assert f.kind == "baseline" and f.unit == "ms" and f.value > 1.5 * base.medians["step_time_ms"]
    assert f.threshold == pytest.approx(1.1 * base.medians["step_time_ms"])
    assert "step_time_ms: the median over 12 steps was" in f.reason and "the baseline's" in f.reason
    assert "(base, 7 steps; allowed +10%)" in f.reason
    assert evaluate([trigger], index_file(RERUN), StepHistory(seen=WARMUP_STEPS), baseline=base) == []
    compute = parse_trigger("baseline:compute:+2ms")
    assert [g.kind for g in evaluate([compute], slow, StepHistory(seen=WARMUP_STEPS), baseline=base)] == ["baseline"]


def test_the_baseline_leaves_out_its_warm_up_and_a_window_needs_three_steps() -> None:
    from tb_reduce_plugin.live.triggers import _check_baseline, _subset

    steps = derive_index(index_file(BASE))
    base = Baseline.of("base", steps)
    assert base.steps == len(steps) - WARMUP_STEPS
    assert base.medians["step_time_ms"] == pytest.approx(float(np.median(steps.step_time_ms[WARMUP_STEPS:])))
    slow = derive_index(index_file(SLOW))
    trigger = parse_trigger("baseline:step_time:+10%")
    few = _subset(slow, np.arange(MIN_BASELINE_STEPS - 1))
    enough = _subset(slow, np.arange(MIN_BASELINE_STEPS))
    assert _check_baseline(trigger, few, base) == [] and len(_check_baseline(trigger, enough, base)) == 1
    assert len(evaluate([trigger], index_file(SLOW), StepHistory(seen=0), baseline=base)) == 1  # 7 judged of 12
    assert evaluate([parse_trigger("baseline:memory_peak_mb_cpu:+1MB")], index_file(SLOW),
                    StepHistory(seen=WARMUP_STEPS), baseline=base) == []  # neither records memory
    assert evaluate([trigger], index_file(SLOW), StepHistory(seen=WARMUP_STEPS)) == []  # no baseline given


@pytest.mark.parametrize("spec, says", [
    ("baseline:step_time:10%", "not +N%"),
    ("baseline:name:aten::mm:self:+5%", "not names"),
    ("baseline:nope:+5%", "no series 'nope'"),
    ("baseline:step_time:+5MB", "a time takes a margin"),
])
def test_bad_baseline_specs_say_which_and_why(spec: str, says: str) -> None:
    with pytest.raises(TriggerError) as err:
        parse_trigger(spec)
    assert says in str(err.value) and repr(spec) in str(err.value)


def test_the_sidecar_reads_its_baseline_once_and_refuses_a_baseline_trigger_without_one(tmp_path: Path) -> None:
    (tmp_path / "watch").mkdir()
    cfg = dict(logdir=str(tmp_path / "logdir"), watch=str(tmp_path / "watch"), triggers=["baseline:step_time:+10%"])
    with pytest.raises(TraceError, match="give --baseline"):
        Sidecar(LiveConfig(**cfg))
    car = Sidecar(LiveConfig(**cfg, baseline=str(BASE)))
    assert car.baseline is not None and car.baseline.steps == 7
    (tmp_path / "logdir" / "before").mkdir(parents=True)
    (tmp_path / "logdir" / "before" / BASE.name).write_bytes(BASE.read_bytes())
    named = Sidecar(LiveConfig(**cfg, baseline="before"))  # a run of the logdir, by its name
    assert named.baseline is not None and named.baseline.medians == car.baseline.medians
    two = tmp_path / "two"
    two.mkdir()
    for p in (BASE, RERUN):
        (two / p.name).write_bytes(p.read_bytes())
    with pytest.raises(TraceError, match="give one trace file"):
        Sidecar(LiveConfig(**cfg, baseline=str(two)))
    r = subprocess.run([sys.executable, "-m", "tb_reduce_plugin", "live", "--logdir", str(tmp_path / "l"), "--watch",
                        str(tmp_path / "watch"), "--trigger", "baseline:step_time:+10%"], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert r.returncode == 2 and "give --baseline" in r.stderr, r.stderr
