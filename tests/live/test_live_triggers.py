"""Drive-recorder triggers: step:Kx, stall:T, name:REGEX:T on synthetic and real traces; rate limits."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest
from conftest import ROOT, TESTS, write_trace

from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.live.triggers import (
    DEFAULT_TRIGGERS,
    MIN_HISTORY,
    WARMUP_STEPS,
    Firing,
    RateLimiter,
    StepHistory,
    TriggerError,
    evaluate,
    parse_trigger,
    parse_triggers,
)
from tb_reduce_plugin.reduce.pipeline import index_file
from tb_reduce_plugin.waveforms.steps import derive

FIXTURES = TESTS / "fixtures" / "traces"
TORCH_STALLED = FIXTURES / "torch_stalled_step.pt.trace.json.gz"  # 8 steps of ~100 ms; step 5 slept 150 ms
JAX_STALLED = FIXTURES / "jax_stalled_step.xplane.pb"
MS = 1000.0  # µs


def _steps(times_ms: list[float], t0_ms: float = 0.0, first: int = 0, every_ms: float = 10.0,
           holes: Optional[dict[int, tuple[float, float]]] = None, pause_ms: float = 0.0) -> list[dict[str, Any]]:
    """ProfilerStep#N markers on the main thread (pid 1, tid 1), each filled with a 5 ms op every
    `every_ms` from its start, except that in `holes` {step index: (at ms, gap ms)} none starts strictly between
    `at` and `at + gap` (a gap of exactly `gap` when both are multiples of `every_ms`); `pause_ms` between steps."""
    ev: list[dict[str, Any]] = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python"}}]
    t = t0_ms
    for i, ms in enumerate(times_ms):
        ev.append({"ph": "X", "name": f"ProfilerStep#{first + i}", "cat": "user_annotation", "pid": 1, "tid": 1,
                   "ts": t * MS, "dur": ms * MS})
        hole = (holes or {}).get(i)
        k = 0.0
        while k + 5.0 <= ms:
            if not (hole and hole[0] < k < hole[0] + hole[1]):
                ev.append({"ph": "X", "name": "aten::add", "cat": "cpu_op", "pid": 1, "tid": 1,
                           "ts": (t + k) * MS, "dur": 5.0 * MS})
            k += every_ms
        t += ms + pause_ms
    return ev


def _fire(tmp_path: Path, events: list[dict[str, Any]], *specs: str, history: Optional[StepHistory] = None,
          name: str = "w.json") -> list[Firing]:
    """The firings of one window; by default judged by a sidecar past its run's warm-up (no
    baseline yet): these tests are about what each trigger measures, the warm-up has its own."""
    path = write_trace(tmp_path / name, {"traceEvents": events})
    history = history if history is not None else StepHistory(seen=WARMUP_STEPS)
    return evaluate([parse_trigger(s) for s in specs], index_file(path), history)


# ---- step:Kx -------------------------------------------------------------------------


def test_a_doubled_step_fires_once_on_that_step(tmp_path: Path) -> None:
    times = [100.0] * 12
    times[8] = 210.0  # above 2 × 100 ms (the trigger is strict: exactly 2× does not fire)
    fired = _fire(tmp_path, _steps(times, first=40), "step:2x")
    assert len(fired) == 1
    f = fired[0]
    assert (f.kind, f.step, f.trigger, f.unit) == ("step", 48, "step:2x", "ms")
    assert f.value == pytest.approx(210.0) and f.threshold == pytest.approx(200.0)
    assert f.start_us == pytest.approx(800 * MS) and f.end_us == pytest.approx(1010 * MS)
    assert "step 48 took 210.0 ms, 2.1× the median 100.0 ms of the previous 8 steps" in f.reason
    doc = json.loads(json.dumps(f.to_json(), allow_nan=False))
    assert doc["step"] == 48 and doc["kind"] == "step" and doc["threshold"] == pytest.approx(200.0)


def test_exactly_k_times_the_median_does_not_fire(tmp_path: Path) -> None:
    times = [100.0] * 10
    times[7] = 200.0
    assert _fire(tmp_path, _steps(times), "step:2x") == []
    assert [f.step for f in _fire(tmp_path, _steps(times), "step:1.5x", name="b.json")] == [7]


def test_noise_within_the_threshold_never_fires(tmp_path: Path) -> None:
    rng = random.Random(11)
    history = StepHistory()
    for w in range(4):  # ±40 % around 100 ms, over several windows
        times = [round(100.0 * rng.uniform(0.6, 1.4), 3) for _ in range(60)]
        times[::7] = [60.0] * len(times[::7])
        times[3::7] = [140.0] * len(times[3::7])
        assert _fire(tmp_path, _steps(times, first=60 * w), "step:2x", history=history, name=f"{w}.json") == []


def test_a_slow_step_without_enough_history_does_not_fire(tmp_path: Path) -> None:
    times = [100.0] * (MIN_HISTORY - 1) + [900.0] + [100.0] * 10
    assert _fire(tmp_path, _steps(times), "step:2x") == []
    times = [100.0] * MIN_HISTORY + [900.0] + [100.0] * 10
    assert [f.step for f in _fire(tmp_path, _steps(times), "step:2x", name="b.json")] == [MIN_HISTORY]


def test_history_carries_across_windows(tmp_path: Path) -> None:
    history = StepHistory()
    assert _fire(tmp_path, _steps([100.0] * 20), "step:2x", history=history, name="1.json") == []
    assert history.times() == [100.0] * 20
    second = _steps([250.0] + [100.0] * 5, t0_ms=5000.0, first=20)
    fired = _fire(tmp_path, second, "step:2x", history=history, name="2.json")
    assert [(f.step, round(f.threshold, 3)) for f in fired] == [(20, 200.0)]
    assert "previous 20 steps" in fired[0].reason
    assert len(history) == 20 and history.times()[-6:] == [250.0] + [100.0] * 5
    # Alone, window 2 has no baseline for its first step: nothing fires.
    assert _fire(tmp_path, second, "step:2x", name="3.json") == []


def test_a_window_s_own_steps_count_as_previous_and_check_leaves_history_alone(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "w.json", {"traceEvents": _steps([100.0] * 6 + [300.0])})
    table = index_file(path).table
    history = StepHistory([50.0] * 20)
    fired = parse_trigger("step:2x").check(table, derive(table), history)
    # Step 6's previous 20: fourteen 50s from history and the window's six 100s; median 50.
    assert history.times() == [50.0] * 20
    # step 0 against twenty 50s: 100 ms is exactly 2×, not above; step 6: 300 > 2 × 50.
    assert [f.step for f in fired] == [6]


def test_history_round_trips_through_json() -> None:
    h = StepHistory([1.0, float("nan"), 2.0, float("inf")] + [3.0] * 30)
    assert len(h) == 20 and all(x == 3.0 for x in h.times())
    assert StepHistory.from_json(json.loads(json.dumps(h.to_json()))).times() == h.times()
    assert StepHistory.from_json({"bad": 1}).times() == []


# ---- stall:T -------------------------------------------------------------------------


def test_a_300ms_gap_on_the_main_thread_inside_a_step_fires_and_200ms_does_not(tmp_path: Path) -> None:
    fired = _fire(tmp_path, _steps([500.0] * 8, holes={3: (90.0, 300.0)}), "stall:250ms")
    assert len(fired) == 1
    f = fired[0]
    assert (f.kind, f.step) == ("stall", 3)
    assert f.value == pytest.approx(300.0) and f.threshold == 250.0
    assert f.start_us == pytest.approx((1500 + 90) * MS) and f.end_us == pytest.approx((1500 + 390) * MS)
    assert "main thread" in f.reason and "python" in (f.track or "")
    assert _fire(tmp_path, _steps([500.0] * 8, holes={3: (90.0, 200.0)}), "stall:250ms", name="b.json") == []


def test_the_step_start_and_end_count_as_points(tmp_path: Path) -> None:
    # The hole runs to the step's end: the gap is last start -> step end.
    fired = _fire(tmp_path, _steps([500.0] * 4, holes={2: (150.0, 400.0)}), "stall:250ms")
    assert [(f.step, round(f.value, 3), f.end_us) for f in fired] == [(2, 350.0, 1500 * MS)]
    # ... and step start -> first start: the first op of step 1 starts 260 ms late.
    ev = [e for e in _steps([500.0] * 4) if not (e.get("name") == "aten::add" and 500 * MS <= e["ts"] < 760 * MS)]
    fired = _fire(tmp_path, ev, "stall:250ms", name="b.json")
    assert [(f.step, round(f.value, 3), f.start_us) for f in fired] == [(1, 260.0, 500 * MS)]


def test_a_gap_outside_any_step_does_not_fire(tmp_path: Path) -> None:
    assert _fire(tmp_path, _steps([100.0] * 6, pause_ms=800.0), "stall:250ms") == []


def test_a_device_stream_gap_fires_and_a_rarely_used_stream_does_not(tmp_path: Path) -> None:
    ev = _steps([500.0] * 6)
    for i in range(6):
        for k in range(0, 500, 10):
            if i == 4 and 100 <= k < 420:
                continue
            ev.append({"ph": "X", "name": "volta_sgemm", "cat": "kernel", "pid": 0, "tid": 7,
                       "ts": (500 * i + k) * MS, "dur": 8 * MS})
        # stream 13: one copy per step (its own gaps are ~500 ms, the device is busy on stream 7)
        ev.append({"ph": "X", "name": "Memcpy HtoD", "cat": "gpu_memcpy", "pid": 0, "tid": 13,
                   "ts": (500 * i + 1) * MS, "dur": 1 * MS})
    ev.append({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}})
    fired = _fire(tmp_path, ev, "stall:250ms")
    assert [(f.step, round(f.value, 3)) for f in fired] == [(4, 330.0)]
    assert "device GPU 0" in fired[0].reason and "2 streams" in fired[0].reason


def test_a_lone_device_stream_stall_fires(tmp_path: Path) -> None:
    ev = _steps([500.0] * 4)
    for i in range(4):
        ev += [{"ph": "X", "name": "k", "cat": "kernel", "pid": 0, "tid": 7, "ts": (500 * i + k) * MS, "dur": 5 * MS}
               for k in range(0, 500, 10) if not (i == 1 and 50 <= k < 360)]
    fired = _fire(tmp_path, ev, "stall:250ms")
    assert [f.step for f in fired] == [1] and "device" in (fired[0].track or "")


def test_stall_units(tmp_path: Path) -> None:
    ev = _steps([500.0] * 4, holes={1: (100.0, 300.0)})
    for spec in ("stall:0.25s", "stall:250000us", "stall:250000µs", "stall:250000000ns", "stall:250 ms"):
        assert [f.step for f in _fire(tmp_path, ev, spec, name=f"{len(spec)}.json")] == [1], spec
    assert _fire(tmp_path, ev, "stall:0.4s", name="x.json") == []


# ---- name:REGEX:T --------------------------------------------------------------------


def _named(*slices: tuple[str, float, float]) -> list[dict[str, Any]]:
    ev = _steps([1000.0] * 3)
    ev += [{"ph": "X", "name": n, "cat": "cpu_op", "pid": 1, "tid": 2, "ts": ts * MS, "dur": ms * MS}
           for n, ts, ms in slices]
    return ev


def test_a_matching_slice_of_350ms_fires_and_250ms_or_another_name_does_not(tmp_path: Path) -> None:
    ev = _named(("ncclAllReduce", 1100.0, 350.0), ("ncclAllReduce", 2100.0, 250.0), ("aten::mm", 100.0, 900.0))
    fired = _fire(tmp_path, ev, "name:nccl:300ms")
    assert len(fired) == 1
    f = fired[0]
    assert (f.kind, f.step) == ("name", 1)
    assert f.value == pytest.approx(350.0) and f.threshold == 300.0
    assert f.start_us == pytest.approx(1100 * MS) and f.end_us == pytest.approx(1450 * MS)
    assert "'ncclAllReduce' lasted 350.0 ms" in f.reason


def test_at_least_the_threshold_fires(tmp_path: Path) -> None:
    assert [f.value for f in _fire(tmp_path, _named(("x", 10.0, 300.0)), "name:^x$:300ms")] == [300.0]


def test_a_regex_may_hold_colons(tmp_path: Path) -> None:
    ev = _named(("aten::mm", 1100.0, 350.0), ("aten::add", 2100.0, 350.0))
    t = parse_trigger("name:aten::mm:300ms")
    assert t.pattern == "aten::mm" and t.threshold_us == 300 * MS
    assert [f.start_us for f in _fire(tmp_path, ev, "name:aten::mm:300ms")] == [1100 * MS]
    assert len(_fire(tmp_path, ev, "name:^aten::(mm|add)$:0.3s", name="b.json")) == 2


def test_a_matching_slice_outside_steps_has_no_step(tmp_path: Path) -> None:
    fired = _fire(tmp_path, _named(("Waiting", 5000.0, 400.0)), "name:Wait:300ms")
    assert [f.step for f in fired] == [None] and fired[0].to_json()["step"] is None


def test_a_trace_without_steps_still_runs_name_triggers_and_no_others(tmp_path: Path) -> None:
    ev = [{"ph": "X", "name": "slow", "pid": 1, "tid": 1, "ts": 0, "dur": 400 * MS}]
    fired = _fire(tmp_path, ev, "step:2x", "stall:1ms", "name:slow:300ms")
    assert [f.kind for f in fired] == ["name"]


def test_b_e_pairs_are_slices_too(tmp_path: Path) -> None:
    ev = _steps([1000.0] * 2) + [
        {"ph": "B", "name": "nccl:all_reduce", "pid": 1, "tid": 3, "ts": 100 * MS},
        {"ph": "E", "pid": 1, "tid": 3, "ts": 500 * MS},
    ]
    assert [f.value for f in _fire(tmp_path, ev, "name:nccl:300ms")] == [400.0]


# Issue 24: `name:nccl.*AllReduce:300ms` on a 3 MB trace holding three 1 MB names stalled the
# sidecar for more than 240 s under Python's backtracking `re` (each "nccl" restarts a scan to
# the end of the name: quadratic). In a subprocess, so that a regression fails at the bound
# instead of hanging the suite.
_MEGABYTE_NAMES = r"""
import json, sys
from tb_reduce_plugin.live.triggers import StepHistory, evaluate, parse_trigger
from tb_reduce_plugin.reduce.pipeline import index_file
unit = "nccl" * 262_144  # 1 MiB
names = [unit, unit[:-1] + "x", unit + "AllReduce"]  # only the last one matches
ev = [{"ph": "X", "name": n, "pid": 1, "tid": 2, "ts": 1000.0 * i, "dur": 400_000.0} for i, n in enumerate(names)]
with open(sys.argv[1], "w") as f:
    json.dump({"traceEvents": ev}, f)
fired = evaluate([parse_trigger("name:nccl.*AllReduce:300ms")], index_file(sys.argv[1]), StepHistory())
print(json.dumps([[f.value, f.start_us, len(f.reason)] for f in fired]))
"""


def test_a_name_trigger_on_three_megabyte_names_finishes_and_finds_the_one_that_matches(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-c", _MEGABYTE_NAMES, str(tmp_path / "w.json")], capture_output=True,
                       text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    [(value, start_us, reason_chars)] = json.loads(r.stdout)
    assert value == pytest.approx(400.0) and start_us == pytest.approx(2000.0)
    assert reason_chars < 1000  # the reason shows the start of a long name, not its megabyte


def test_a_name_trigger_matches_each_distinct_name_once_and_only_names_of_long_enough_slices(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tb_reduce_plugin.query import search

    ev = _named(*[("ncclAllReduce", 100.0 + 10 * i, 350.0) for i in range(50)],
                *[(f"short{i}", 100.0 + 10 * i, 1.0) for i in range(50)], ("nccl:other", 50.0, 400.0))
    seen: list[list] = []
    matches = search.NameQuery.matches

    def counted(self: Any, names: list, seconds: Optional[float] = None) -> Any:
        seen.append(list(names))
        return matches(self, names, seconds)

    monkeypatch.setattr(search.NameQuery, "matches", counted)
    fired = _fire(tmp_path, ev, "name:nccl:300ms")
    assert len(fired) == 51
    # The three steps (1 s each) last long enough too; the 50 short slices' names are never matched.
    assert len(seen) == 1
    assert sorted(seen[0]) == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2", "nccl:other", "ncclAllReduce"]


# ---- parsing -------------------------------------------------------------------------


@pytest.mark.parametrize("spec, says", [
    ("", "empty"),
    ("step", "no ':'"),
    ("step:2", "factor"),
    ("step:x", "factor"),
    ("step:-1x", "factor"),
    ("step:0x", "above 0"),
    ("stall:250", "not a duration"),
    ("stall:250 parsecs", "not a duration"),
    ("stall:0ms", "above 0"),
    ("stall:-5ms", "not a duration"),
    ("name:foo", "name:REGEX:DURATION"),
    ("name::300ms", "empty"),
    ("name:(:300ms", "not a regular expression"),
    ("name:a{99999999999}:1ms", "not a regular expression"),  # Python's re: OverflowError, an internal error
    ("name:(?=x)y:1ms", "RE2"),  # look-around: RE2 refuses it (it would need backtracking)
    ("name:" + "a" * 1001 + ":1ms", "at most 1,000"),
    ("name:x:300", "not a duration"),
    ("speed:2x", "unknown kind"),
])
def test_bad_specs_say_which_and_why(spec: str, says: str) -> None:
    with pytest.raises(TriggerError) as err:
        parse_trigger(spec)
    msg = str(err.value)
    assert says in msg and "\n" not in msg
    if len(spec) > 1000:  # a long spec is named by its start: the message stays one short line
        assert repr(spec[:40]) in msg and len(msg) < 200
    elif spec:
        assert repr(spec) in msg
    assert isinstance(err.value, TraceError)  # the CLI's one line and exit 2


def test_defaults_and_parsing() -> None:
    assert [t.spec for t in parse_triggers(None)] == list(DEFAULT_TRIGGERS) == ["step:2x", "stall:250ms"]
    assert [t.spec for t in parse_triggers(["name:x:1s"])] == ["name:x:1s"]
    t = parse_trigger(" step:1.5x ")
    assert (t.kind, t.factor, t.spec) == ("step", 1.5, "step:1.5x")
    assert parse_trigger("stall:250ms").threshold_us == 250_000.0


# ---- rate limits ---------------------------------------------------------------------


def test_rate_limit_cooldown() -> None:
    r = RateLimiter()
    assert (r.max_per_hour, r.cooldown_s) == (6, 60.0)
    assert r.allow("step:2x", 1000.0)
    assert not r.allow("step:2x", 1059.9)
    assert r.allow("stall:250ms", 1001.0)  # per spec
    assert r.allow("step:2x", 1060.0)


def test_rate_limit_count_per_hour() -> None:
    r = RateLimiter(max_per_hour=3, cooldown_s=0)
    assert [r.allow("s", t) for t in (0.0, 10.0, 20.0, 30.0, 3599.0)] == [True, True, True, False, False]
    assert r.allow("s", 3600.0)  # the first has left the hour
    assert not r.allow("s", 3601.0)
    assert r.allow(parse_trigger("step:2x"), 0.0)


def test_rate_limit_bad_settings() -> None:
    with pytest.raises(TriggerError):
        RateLimiter(max_per_hour=0)
    with pytest.raises(TriggerError):
        RateLimiter(cooldown_s=-1)


# ---- real traces ---------------------------------------------------------------------


@pytest.mark.parametrize("path", [TORCH_STALLED, JAX_STALLED], ids=["torch", "jax"])
def test_real_stalled_step_fires_step_and_stall_on_step_5_only(path: Path) -> None:
    index = index_file(path)
    fired = evaluate([parse_trigger("step:2x")], index, StepHistory())
    assert [(f.kind, f.step) for f in fired] == [("step", 5)]
    stalls = evaluate([parse_trigger("stall:100ms")], index, StepHistory())
    assert [(f.kind, f.step) for f in stalls] == [("stall", 5)]
    assert stalls[0].value >= 140.0 and "main thread" in stalls[0].reason  # the 150 ms sleep
    assert all(json.dumps(f.to_json(), allow_nan=False) for f in fired + stalls)


def test_real_pytorch_trace_fires_nothing_at_3x() -> None:
    # Step 5 is 2.5× its baseline (260 ms against ~104 ms). The JAX fixture's steps are
    # ~0.2 ms, so its 150 ms step 5 is far over any factor: it fires at 3x too.
    assert evaluate(parse_triggers(["step:3x"]), index_file(TORCH_STALLED), StepHistory()) == []
    jax = evaluate(parse_triggers(["step:3x"]), index_file(JAX_STALLED), StepHistory())
    assert [f.step for f in jax] == [5]


def test_real_trace_default_triggers_and_history() -> None:
    history = StepHistory()
    fired = evaluate(parse_triggers(None), index_file(TORCH_STALLED), history)
    assert [(f.kind, f.step) for f in fired] == [("step", 5)]  # the sleep leaves 150 ms, under 250
    assert len(history) == 8
