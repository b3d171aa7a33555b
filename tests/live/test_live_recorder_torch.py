"""The drive recorder on the path the README documents for PyTorch, end to end: a real torch
training loop captures windows with `torch_schedule` (plain `.pt.trace.json` files, renamed
into the folder whole) while a real `tb-reduce live --source torch` sidecar process watches it
at its default settle time. The window holding a planted slow step must be kept raw, its
anomaly run must appear while the training still runs, the reduced window holding it must
outlive `--keep`, and the live scalars must carry wall times no later than the steps were run.

These are the facts a user measured on main before: the ring stayed empty ("kept 0": a fresh
plain JSON file was reduced while it might still grow, and its final hand-out was then skipped
as seen), the anomaly run appeared only at shutdown, `--keep` pruned the window with the
stall, and the scalars were stamped from the file's mtime (the window's end) as its start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tb_reduce_plugin.live.capture import torch_schedule
from tb_reduce_plugin.live.sidecar import ANOMALY_JSON, RING_FOLDER
from tb_reduce_plugin.live.windows import WINDOW_NAME
from tb_reduce_plugin.waveforms.scalars import RunScalars

torch = pytest.importorskip("torch")

EVERY, ACTIVE = 10, 3
SLOW_STEP = 27  # captured: the third window holds steps 26-28
SLOW_S = 0.6
KEEP = 2
DEADLINE_S = 240.0  # a bound on waiting, never a measured claim: the loop goes on until the sidecar has done its part


def _windows(live: Path) -> list[str]:
    return sorted(d.name for d in live.iterdir() if WINDOW_NAME.match(d.name)) if live.is_dir() else []


def _anomalies(live: Path) -> list[Path]:
    return [d for d in live.iterdir() if "-anomaly-" in d.name and not d.name.startswith(".")] if live.is_dir() else []


def _train_until(done, folder: Path) -> tuple[int, float, float]:
    """Train (plain JSON windows from `torch_schedule`) until `done(step)`; returns the steps
    run, and the wall times just before the slow step and at the end."""
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 128), torch.randint(0, 10, (64,))
    slow_at = float("nan")
    began = time.monotonic()
    step = 0
    with torch_schedule(folder, every=EVERY, window_steps=ACTIVE) as w:
        while not done(step) and time.monotonic() - began < DEADLINE_S:
            with torch.profiler.record_function("data_wait"):
                time.sleep(0.03)
            if step == SLOW_STEP:
                slow_at = time.time()
                with torch.profiler.record_function("slow_io"):
                    time.sleep(SLOW_S)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            w.step()
            step += 1
    return step, slow_at, time.time()


def test_the_torch_schedule_path_keeps_the_slow_window_raw_while_training_runs(tmp_path: Path) -> None:
    folder, logdir = tmp_path / "profiles", tmp_path / "logdir"
    live = logdir / "live"
    log = (tmp_path / "sidecar.log").open("w")
    started = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "tb_reduce_plugin", "live", "--logdir", str(logdir), "--watch",
                             str(folder), "--source", "torch", "--trigger", "name:^slow_io$:300ms", "--keep",
                             str(KEEP), "--before", "10ms", "--after", "10ms", "--every", "1s"], stderr=log)
    seen: dict[str, float] = {}  # what was there while training ran: anomaly run -> the step it was first seen at

    def done(step: int) -> bool:
        for a in _anomalies(live):
            seen.setdefault(a.name, step)
        # on well past the slow step: the anomaly run has appeared, and windows enough to prune past it have landed
        return bool(seen) and step >= max(seen.values()) + (KEEP + 3) * EVERY

    try:
        steps, slow_at, ended = _train_until(done, folder)
        assert seen, f"no anomaly run appeared in {steps} steps: {(tmp_path / 'sidecar.log').read_text()[-2000:]}"
        time.sleep(3.0)  # the last windows settle and are reduced (what follows reads what is there)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        log.close()
    said = (tmp_path / "sidecar.log").read_text()
    [name] = seen
    assert seen[name] < steps  # listed while the training still ran, not at the sidecar's shutdown
    anomaly = live / name
    report = json.loads((anomaly / ANOMALY_JSON).read_text())
    assert report["step"] == SLOW_STEP and report["trigger"] == "name:^slow_io$:300ms", report
    raw = [p for p in anomaly.iterdir() if p.name.endswith(".pt.trace.json")]
    assert len(raw) == 1, (sorted(p.name for p in anomaly.iterdir()), said)  # the raw plain JSON window, whole
    events = json.loads(raw[0].read_text())["traceEvents"]
    assert any(e.get("name") == "slow_io" and e.get("dur", 0) >= SLOW_S * 1e6 for e in events)
    assert "kept 1 raw window(s)" in said and "kept 0" not in said
    assert (logdir / RING_FOLDER).is_dir() and any((logdir / RING_FOLDER).iterdir())
    # --source torch: the helper's folder is the sidecar's; each window is moved into the ring, so it stays small
    left = [p.name for p in folder.iterdir() if not p.name.startswith(".")]
    assert len(left) <= 4 < steps // EVERY - 2, (left, steps)  # of the windows written, only the last few are there
    # the reduced window holding the slow step outlives --keep; the others are pruned to it
    windows = _windows(live)
    assert report["window"] in windows, (report["window"], windows)
    assert len([w for w in windows if w != report["window"]]) == KEEP
    # the live scalars: one run for this process's windows, steps forward, wall times true
    [series] = [d for d in (live / "series").iterdir() if d.is_dir()]
    rs = RunScalars(str(series))
    rs.poll()
    numbers, walls, values = rs.series("live/step_time_ms")
    assert len(numbers) >= 4 * ACTIVE and (np.diff(numbers) > 0).all()
    assert walls.min() >= started - 1.0 and walls.max() <= ended + 1.0  # never stamped in the future
    slow = walls[numbers == SLOW_STEP]
    # stamped when the step ran: the window's mtime is its capture's end, its start that minus its span
    # (stamped from the end as its start, the step would be placed after the sleep it began with)
    assert len(slow) == 1 and abs(float(slow[0]) - slow_at) < SLOW_S * 0.75, (slow, slow_at)
    assert float(values[numbers == SLOW_STEP][0]) >= SLOW_S * 1e3
    newest = max(os.path.getmtime(p) for p in series.glob("events.out.tfevents.*"))
    assert walls.max() <= newest + 1.0  # no point later than the file holding it was written
