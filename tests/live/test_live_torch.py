"""The live sidecar on a real torch training loop on the CPU: `torch_schedule` captures windows off the
training thread, and exactly the window holding a deliberately slow step is kept raw, for each trigger
alone; the other windows, whose steps vary within the threshold, fire nothing."""

from __future__ import annotations

import json
import os
import random
import re
import socket
import time
from pathlib import Path

import pytest

from tb_reduce_plugin.live.capture import OVERHEAD_SUFFIX, torch_schedule
from tb_reduce_plugin.live.sidecar import ANOMALY_JSON, LiveConfig, Sidecar
from tb_reduce_plugin.waveforms.scalars import RunScalars

torch = pytest.importorskip("torch")

STEPS, EVERY, ACTIVE = 40, 10, 3
SLOW_STEP = 27  # in the third window (steps 26-28)
SLOW_S = 0.4


ATTEMPTS = 5
CALM = 1.6  # a step of the noise at most this × the median of the steps before it (the trigger fires at 2×)


def _record(folder: Path) -> list[float]:
    """Windows of a real loop: every step sleeps 50-80 ms (noise within 2x), one step 400 ms more;
    returns each step's wall time."""
    rnd = random.Random(3)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 128), torch.randint(0, 10, (64,))
    took = []
    with torch_schedule(folder, every=EVERY, window_steps=ACTIVE) as w:
        for step in range(STEPS):
            began = time.perf_counter()
            with torch.profiler.record_function("data_wait"):
                time.sleep(rnd.uniform(0.05, 0.08))
            if step == SLOW_STEP:
                with torch.profiler.record_function("slow_io"):
                    time.sleep(SLOW_S)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            w.step()
            took.append(time.perf_counter() - began)
    assert w.failures == 0
    return took


def _profiled_steps(folder: Path) -> dict[int, float]:
    """Each captured step's duration as the profiler recorded it (`ProfilerStep#N`), which is what
    the step trigger reads: the loop's own clock can miss what the profiler adds to a step."""
    steps = {}
    for trace in folder.glob("*.pt.trace.json"):
        for ev in json.loads(trace.read_text()).get("traceEvents", []):
            name = ev.get("name", "")
            if ev.get("ph") == "X" and isinstance(name, str) and name.startswith("ProfilerStep#"):
                steps[int(name.split("#")[1])] = float(ev.get("dur", 0.0))
    return steps


def _calm(took: list[float], folder: Path) -> bool:
    """No step but the slow one stands out: a busy machine (other tests on its 2 cores) can stretch
    a step past 2× its neighbours, which the triggers rightly report, but this test is about them
    finding the planted step, so such a recording is made again. Judged on the loop's clock and on
    the profiler's, each with a margin below the trigger's 2×."""
    loop = all(took[k] <= CALM * sorted(took[k - 5:k])[2] for k in range(5, STEPS) if k != SLOW_STEP)
    profiled = _profiled_steps(folder)
    others = sorted(d for k, d in profiled.items() if k != SLOW_STEP)
    median = others[len(others) // 2] if others else 0.0
    return loop and all(d <= CALM * median for k, d in profiled.items() if k != SLOW_STEP)


@pytest.fixture(scope="module")
def windows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for attempt in range(ATTEMPTS):
        folder = tmp_path_factory.mktemp("torch") / "profiles"
        if _calm(_record(folder), folder) or attempt == ATTEMPTS - 1:
            return folder
    raise AssertionError("unreachable")


def test_windows_are_saved_whole_off_the_training_thread(windows: Path) -> None:
    traces = sorted(p.name for p in windows.glob("*.pt.trace.json"))
    worker = f"{socket.gethostname()}_{os.getpid()}".replace(".", "-")  # named as Kineto's handler names them
    assert traces == [f"window{n:06d}.{worker}.pt.trace.json" for n in range(1, STEPS // EVERY + 1)]
    assert not [p for p in windows.iterdir() if p.name.startswith(".")]
    overhead = json.loads((windows / f"window000002.{worker}{OVERHEAD_SUFFIX}").read_text())
    assert overhead["captured_steps"] >= 1 and overhead["uncaptured_steps"] >= 1


@pytest.mark.parametrize("trigger", ["step:2x", "stall:250ms", "name:^slow_io$:300ms"])
def test_exactly_the_window_with_the_slow_step_is_kept_raw_for_each_trigger_alone(windows: Path, tmp_path: Path,
                                                                                    trigger: str) -> None:
    car = Sidecar(LiveConfig(logdir=str(tmp_path / "logdir"), watch=str(windows), settle_s=0.0, triggers=[trigger],
                             before_s=0.0, after_s=0.0))
    records = car.step()
    car.finish()
    assert len(records) == STEPS // EVERY
    reports = {a: json.loads((Path(a) / ANOMALY_JSON).read_text()) for a in car.anomalies}
    [anomaly] = [a for a, r in reports.items() if r["step"] == SLOW_STEP]  # the slow step's window, once
    # the noise fired nothing, unless a busy machine made a step really slow in every recording made
    profiled = _profiled_steps(windows)
    median = sorted(d for k, d in profiled.items() if k != SLOW_STEP)[len(profiled) // 2 - 1]
    for r in reports.values():
        assert r["step"] == SLOW_STEP or profiled.get(r["step"], 0.0) > CALM * median, (r, profiled)
    report = reports[anomaly]
    assert report["trigger"] == trigger and report["step"] == SLOW_STEP, report
    slow_window = next(r for r in records if SLOW_STEP in r.step_numbers)
    assert report["window"] == slow_window.name
    raw = [p for p in os.listdir(anomaly) if p.endswith(".pt.trace.json")]
    assert len(raw) == 1 and re.search(r"window000003\.[^.]+\.pt\.trace\.json$", raw[0]), raw  # the raw window, and only it


def test_the_capture_cost_becomes_a_live_series(windows: Path, tmp_path: Path) -> None:
    car = Sidecar(LiveConfig(logdir=str(tmp_path / "logdir"), watch=str(windows), settle_s=0.0,
                             triggers=["name:^never$:1s"]))
    car.step()
    car.finish()
    [source] = [d for d in (tmp_path / "logdir" / "live" / "series").iterdir() if d.is_dir()]  # one: this process
    rs = RunScalars(str(source))
    rs.poll()
    steps, _, values = rs.series("live/overhead_pct")
    assert len(steps) >= 3 and rs.gaps == []


def test_torch_schedule_is_an_on_trace_ready_handler_for_your_own_profiler(tmp_path: Path) -> None:
    from tb_reduce_plugin.live import torch_schedule as exported

    w = exported(tmp_path / "profiles", every=5, window_steps=2)
    model = torch.nn.Linear(32, 32)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=w.schedule,
                                on_trace_ready=w) as prof:
        for _ in range(12):
            model(torch.randn(8, 32)).sum().backward()
            prof.step()
    w.close()
    saved = sorted(p.name for p in (tmp_path / "profiles").glob("*.pt.trace.json"))
    assert saved == [f"window00000{n}.{w.worker}.pt.trace.json" for n in (1, 2)] and w.failures == 0


def test_a_full_disk_costs_windows_not_the_training_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    import errno

    from tb_reduce_plugin.live.capture import TorchWindows

    def full(self, n, results, overhead, ended=None):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(TorchWindows, "_save", full)
    model = torch.nn.Linear(16, 16)
    done = 0
    with torch_schedule(tmp_path / "profiles", every=4, window_steps=1) as w:
        for _ in range(13):
            model(torch.randn(4, 16)).sum().backward()
            w.step()
            done += 1
    assert done == 13 and w.windows >= 2 and w.failures == w.windows
    assert not list((tmp_path / "profiles").iterdir())
    assert sum("could not be saved" in r.getMessage() and "No space left" in r.getMessage() for r in caplog.records) \
        == w.windows
