"""The `unaccounted` per-step series (time no op on the step's thread covers) and the robust
rules for which steps stand out ("slowest", unaccounted time), on real torch profiles
recorded here on the CPU and on small traces whose answer is worked out by hand."""

from __future__ import annotations

import glob
import json
import random
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import TESTS, write_trace

from tb_reduce_plugin.reduce.pipeline import index_file, waveforms_file
from tb_reduce_plugin.waveforms.categories import UNACCOUNTED
from tb_reduce_plugin.waveforms.scalars import RunScalars
from tb_reduce_plugin.waveforms.steps import MARKER_STEPS_LINE, StepSeries, derive

STEPS = 7
SLEEPY = 3  # the step that sleeps inside record_function("data")
SLEEP_S = 0.3

pytestmark = pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")


def _record_torch(out: Path, with_stack: bool) -> Path:
    """A real CPU training loop under torch.profiler: every step loads a batch inside
    `record_function("data")` and trains a small MLP; step SLEEPY also sleeps 0.3 s in
    that range (a stalled read). Returns the trace file the profiler wrote."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with profile(activities=[ProfilerActivity.CPU], with_stack=with_stack,
                 schedule=schedule(wait=0, warmup=0, active=STEPS, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(out), worker_name="unaccounted")) as prof:
        for step in range(STEPS):
            with record_function("data"):
                x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
                if step == SLEEPY:
                    time.sleep(SLEEP_S)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    (path,) = glob.glob(str(out / "*.pt.trace.json"))
    return Path(path)


@pytest.fixture(scope="module", params=[False, True], ids=["ops", "with_stack"])
def torch_trace(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _record_torch(tmp_path_factory.mktemp("torch_unaccounted"), with_stack=request.param)


def test_a_sleep_inside_record_function_is_unaccounted_time_at_its_step_only(torch_trace: Path) -> None:
    s = waveforms_file(torch_trace)
    assert s.step.tolist() == list(range(STEPS)), s.step
    u = s.unaccounted_ms
    assert u is not None and s.series[-1] == "unaccounted_ms"
    # the 300 ms sleep is covered by the "data" annotation (and, with_stack, Python frames), by no op
    assert u[SLEEPY] >= SLEEP_S * 1000 - 1
    assert u[SLEEPY] <= s.step_time_ms[SLEEPY]
    others = np.delete(u, SLEEPY)
    assert np.all(others < 0.25 * SLEEP_S * 1000), u
    assert np.all(u >= 0) and np.all(u <= s.step_time_ms + 1e-9)
    # the sleep stands out first (a busy machine may preempt the thread between ops in another step: that
    # is unaccounted time too, and may stand out after it)
    assert s.unaccounted_stands_out()[0] == SLEEPY
    doc = s.to_json()
    assert doc["unaccounted_stands_out"] == s.unaccounted_stands_out()
    assert doc["steps"][SLEEPY]["busy_ms"][UNACCOUNTED] == pytest.approx(u[SLEEPY], abs=1e-6)


def test_the_live_sidecar_writes_unaccounted_time_as_a_tensorboard_scalar(torch_trace: Path, tmp_path: Path) -> None:
    from tb_reduce_plugin.live.series import LiveSeries  # imported here: the live package is optional to the rest

    s = waveforms_file(torch_trace)
    run = tmp_path / "live"
    with LiveSeries(run) as live:
        assert live.write_steps(s, 1.7e9) == STEPS
        live.flush()
    rs = RunScalars(run)
    rs.poll()
    assert "live/unaccounted_ms" in rs.tags()
    steps, _, values = rs.series("live/unaccounted_ms")
    assert steps.tolist() == list(range(STEPS))
    np.testing.assert_array_equal(values, np.asarray(s.unaccounted_ms, dtype=np.float32).astype(np.float64))
    assert values[SLEEPY] >= SLEEP_S * 1000 - 1


def test_the_stalled_fixtures_unaccounted_time_is_the_sleep() -> None:
    fixtures = TESTS / "fixtures" / "traces"
    for name in ("torch_stalled_step.pt.trace.json.gz", "jax_stalled_step.xplane.pb"):  # 150 ms sleep at step 5
        s = waveforms_file(fixtures / name)
        u = s.unaccounted_ms
        assert u is not None and u[5] >= 149, (name, u)
        assert s.unaccounted_stands_out()[0] == 5, name


def _ops_oracle(intervals: list[tuple[float, float]], a: float, b: float) -> float:
    """Covered length of [a, b] by the intervals, merged in plain Python."""
    parts = sorted((max(s, a), min(e, b)) for s, e in intervals if min(e, b) > max(s, a))
    total, cur = 0.0, None
    for s, e in parts:
        if cur is None or s > cur[1]:
            if cur is not None:
                total += cur[1] - cur[0]
            cur = [s, e]
        else:
            cur[1] = max(cur[1], e)
    return total + (cur[1] - cur[0] if cur else 0.0)


@pytest.mark.parametrize("seed", range(4))
def test_unaccounted_time_is_step_time_less_the_union_of_the_threads_ops(tmp_path: Path, seed: int) -> None:
    """Nested and overlapping ops count once; annotations, Python frames, other threads and
    the markers are not ops (checked against a plain merge)."""
    rnd = random.Random(seed)
    steps = [(i * 100.0 + rnd.uniform(0, 10), rnd.uniform(40, 95)) for i in range(15)]
    ev: list[dict] = [{"ph": "X", "name": f"ProfilerStep#{i}", "cat": "user_annotation", "pid": 1, "tid": 1,
                       "ts": ts, "dur": d} for i, (ts, d) in enumerate(steps)]
    ops: list[tuple[float, float]] = []
    for _ in range(300):
        ts, d = rnd.uniform(0, 1500), rnd.expovariate(1 / 6)
        kind = rnd.choice(["op", "op", "annotation", "frame", "other_thread", "jax_frame"])
        if kind == "op":
            ops.append((ts, ts + d))
            ev.append({"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": ts, "dur": d})
        elif kind == "annotation":
            ev.append({"ph": "X", "name": "data", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": ts, "dur": d * 4})
        elif kind == "frame":
            ev.append({"ph": "X", "name": "train.py(12): step", "cat": "python_function", "pid": 1, "tid": 1,
                       "ts": ts, "dur": d * 4})
        elif kind == "jax_frame":
            ev.append({"ph": "X", "name": "$time sleep", "pid": 1, "tid": 1, "ts": ts, "dur": d * 4})
        else:
            ev.append({"ph": "X", "name": "aten::copy_", "cat": "cpu_op", "pid": 1, "tid": 2, "ts": ts, "dur": d})
    s = derive(index_file(write_trace(tmp_path / "r.json", ev)).table)
    want = [(d - _ops_oracle(ops, ts, ts + d)) / 1000 for ts, d in steps]
    np.testing.assert_allclose(s.unaccounted_ms, want, rtol=1e-9, atol=1e-9)


def test_autograd_threads_of_the_process_count_as_the_steps_threads(tmp_path: Path) -> None:
    """A GPU backward runs on autograd's thread while the caller waits: its ops account for
    the time; another thread of the process (a pin-memory thread) and another process do not."""
    ev = [
        {"ph": "X", "name": "ProfilerStep#1", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "name": "aten::linear", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 0, "dur": 20},
        {"ph": "X", "name": "autograd::engine::evaluate_function: AddmmBackward0", "cat": "cpu_op", "pid": 1,
         "tid": 9, "ts": 30, "dur": 30},
        {"ph": "X", "name": "AddmmBackward0", "cat": "cpu_op", "pid": 1, "tid": 9, "ts": 31, "dur": 28},
        {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 1, "tid": 9, "ts": 65, "dur": 5},  # same thread: an op
        {"ph": "X", "name": "aten::copy_", "cat": "cpu_op", "pid": 1, "tid": 5, "ts": 70, "dur": 30},  # pin memory
        {"ph": "X", "name": "ReluBackward0", "cat": "cpu_op", "pid": 2, "tid": 9, "ts": 70, "dur": 30},  # another rank
    ]
    s = waveforms_file(write_trace(tmp_path / "bw.json", {"traceEvents": ev}))
    assert s.unaccounted_ms.tolist() == pytest.approx([(100 - 20 - 30 - 5) / 1000])


def test_markers_on_a_device_line_give_no_unaccounted_series(corpus: Path) -> None:
    path = next((corpus / "public" / "xprof").glob("*GPU-multi-worker*.xplane.pb"))
    s = waveforms_file(path)
    assert s.marker == MARKER_STEPS_LINE and s.unaccounted_ms is None
    assert "unaccounted_ms" not in s.series and s.to_json()["unaccounted_stands_out"] == []


def _series(times: list[float], unaccounted: list[float] | None = None) -> StepSeries:
    n = len(times)
    start = np.arange(n) * 1e7
    busy = {} if unaccounted is None else {UNACCOUNTED: np.asarray(unaccounted, dtype=float)}
    return StepSeries(np.arange(n, dtype=float), start, start + np.asarray(times) * 1000, busy)


def test_a_step_a_hair_above_the_median_is_not_one_of_the_slowest() -> None:
    assert _series([104.0, 103.8, 104.2, 104.5, 103.9, 104.1, 104.0]).slowest() == []
    assert _series([104.0, 103.8, 104.2, 104.5, 103.9, 104.1, 160.0]).slowest() == [6]


def test_a_three_step_window_never_marks_all_three() -> None:
    rnd = random.Random(7)
    for _ in range(500):
        times = [rnd.uniform(1, 300) for _ in range(3)]
        assert len(_series(times).slowest()) <= 1, times
    assert _series([100.0, 101.0, 250.0]).slowest() == [2]
    assert _series([100.0, 101.0, 102.0]).slowest() == []


def test_slowest_lists_the_steps_that_stand_out_slowest_first_at_most_three() -> None:
    times = [100.0] * 20
    for i, t in [(3, 400.0), (8, 900.0), (11, 400.0), (15, 300.0), (17, 200.0)]:
        times[i] = t
    assert _series(times).slowest() == [8, 3, 11]  # ties: the earlier step
    assert _series([float("nan"), 100.0, 100.0, 500.0, float("inf")]).slowest() == [3]
    assert _series([]).slowest() == [] and _series([5.0]).slowest() == [] and _series([5.0, 50.0]).slowest() == []


def test_unaccounted_time_stands_out_only_past_a_tenth_of_a_step_and_the_runs_spread() -> None:
    times = [1000.0 + 40 * (i % 5) for i in range(12)]
    steady = [60.0 + (i % 3) for i in range(12)]
    assert _series(times, steady).unaccounted_stands_out() == []
    jitter = list(steady)
    jitter[4] = 60.0 + 90.0  # an outlier, but under 10 % of a ~1 s step
    assert _series(times, jitter).unaccounted_stands_out() == []
    stall = list(steady)
    stall[7] = 545.0
    assert _series(times, stall).unaccounted_stands_out() == [7]
    assert _series(times).unaccounted_stands_out() == []  # no series: nothing stands out
    json.dumps(_series(times, stall).to_json(), allow_nan=False)
