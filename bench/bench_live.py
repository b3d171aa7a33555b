#!/usr/bin/env python3
"""What watching costs: the live sidecar beside a real torch training loop on the CPU.

Each round runs the same loop (a small CNN, real forward/backward/SGD) twice,
alternating: once bare (no profiler, no sidecar), once watched at the default settings
(`torch_schedule(every=10, window_steps=3)` in the loop, `tb-reduce live --source torch`
in another process reducing each window as it lands). It prints, as medians over rounds:

- paired, same run: median step time of captured steps / of uncaptured steps;
- amortised overhead of watching: the watched run's mean step time / the bare run's;
- latency: seconds from a window's file landing to its reduced run being complete;
- reduce time of a window against the capture period (`every` steps of wall time).

    python3 bench/bench_live.py [--rounds 3] [--steps 120]
    python3 bench/bench_live.py --rounds 1 --steps 320 --every 300 --window-steps 290   # a ~10 s window
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

from tb_reduce_plugin.live.capture import torch_schedule  # noqa: E402

EVERY, ACTIVE = 10, 3  # the defaults of torch_schedule; --every/--window-steps change them


def model_and_data() -> tuple:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(16 * 28 * 28, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return model, opt, torch.randn(128, 3, 32, 32), torch.randint(0, 10, (128,))


def train_step(model, opt, x, y) -> None:
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def bare(steps: int) -> list[float]:
    model, opt, x, y = model_and_data()
    times = []
    last = time.perf_counter()
    for _ in range(steps):
        train_step(model, opt, x, y)
        now = time.perf_counter()
        times.append(now - last)
        last = now
    return times[10:]  # the first steps warm caches in both runs alike


def watched(steps: int, root: Path) -> tuple[list[float], dict, list[float], list[float]]:
    folder, logdir = root / "profiles", root / "logdir"
    folder.mkdir()
    sidecar = subprocess.Popen([sys.executable, "-m", "tb_reduce_plugin", "live", "--logdir", str(logdir),
                                "--source", "torch", "--watch", str(folder), "--trigger", "step:2x"],
                               stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)  # the sidecar is up before the loop starts
        model, opt, x, y = model_and_data()
        times = []
        with torch_schedule(folder, every=EVERY, window_steps=ACTIVE) as w:
            last = time.perf_counter()
            for _ in range(steps):
                train_step(model, opt, x, y)
                w.step()
                now = time.perf_counter()
                times.append(now - last)
                last = now
        overhead = w.overhead() or {}
        deadline = time.monotonic() + 60
        windows = sorted(folder.glob("*.pt.trace.json"))
        while time.monotonic() < deadline and len(_reduced(logdir)) < len(windows):
            time.sleep(0.2)
    finally:
        sidecar.terminate()
        sidecar.wait(60)
    latency, reduce_s = [], []
    landed = {p.name: p.stat().st_mtime for p in windows}
    for d in _reduced(logdir):
        info = json.loads((d / "window.json").read_text())
        raw = os.path.basename(info["raw"]["path"] if isinstance(info["raw"], dict) else info["raw"][0])
        latency.append((d / "window.json").stat().st_mtime - landed[raw])
        reduce_s.append(info["reduce_s"])
    return times[10:], overhead, latency, reduce_s


def _reduced(logdir: Path) -> list[Path]:
    live = logdir / "live"
    if not live.is_dir():
        return []
    return [d for d in live.iterdir() if d.is_dir() and not d.name.startswith(".") and "-anomaly-" not in d.name
            and (d / "window.json").is_file()]


def main() -> None:
    global EVERY, ACTIVE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--every", type=int, default=EVERY, help="capture a window every this many steps (default 10)")
    ap.add_argument("--window-steps", type=int, default=ACTIVE, help="steps in a window (default 3)")
    args = ap.parse_args()
    EVERY, ACTIVE = args.every, args.window_steps
    paired, amortised, latencies, reduces, step_s = [], [], [], [], []
    for _ in range(args.rounds):
        base = bare(args.steps)
        with tempfile.TemporaryDirectory() as tmp:
            times, overhead, latency, reduce_s = watched(args.steps, Path(tmp))
        paired.append(overhead["captured_ms"] / overhead["uncaptured_ms"])
        amortised.append(statistics.mean(times) / statistics.mean(base))
        latencies.extend(latency)
        reduces.extend(reduce_s)
        step_s.append(statistics.median(base))
    period = statistics.median(step_s) * EVERY
    print(f"torch {torch.__version__} CPU, {args.steps} steps a run, {args.rounds} rounds, "
          f"median bare step {statistics.median(step_s) * 1e3:.1f} ms; windows: {ACTIVE} of every {EVERY} steps")
    print(f"  captured / uncaptured step, same run (paired): median x{statistics.median(paired):.3f} "
          f"({', '.join(f'{p:.3f}' for p in paired)})")
    print(f"  watched / bare mean step time (amortised overhead): median x{statistics.median(amortised):.3f} "
          f"({', '.join(f'{a:.3f}' for a in amortised)})")
    print(f"  window landed -> reduced run complete: median {statistics.median(latencies):.2f} s, "
          f"max {max(latencies):.2f} s over {len(latencies)} windows (target <= 2 s)")
    print(f"  reduce one window: median {statistics.median(reduces):.3f} s against a capture period of "
          f"{period:.2f} s ({statistics.median(reduces) / period:.3f} of it)")


if __name__ == "__main__":
    main()
