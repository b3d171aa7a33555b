#!/usr/bin/env python3
"""What the live sidecar costs a training loop, measured in alternating blocks of ONE run.

A real torch loop (the small CNN of `bench_live.py`, CPU) captures windows with
`torch_schedule(every=10, window_steps=3)` from start to end, and one `tb-reduce live
--source torch` process watches the folder. The loop is cut into blocks of `--block`
steps, and the sidecar is switched per block, in a rotating order:

- off: SIGSTOP, and the block's windows are saved to another folder the sidecar does not
  watch (deleted): the capture costs the same, and no backlog is left for the next block
  (stopped but fed, the sidecar would do an off block's work in the next on block, and the
  ratio would count its cost twice);
- on at `nice` N below the loop (`--on 0,10,idle`: N = 0, 10);
- on at the loop's own priority (`nice` 0: what it did before issue 25);
- on under `SCHED_IDLE` (it runs only when a core would be idle).

Each round runs the four conditions in a new (seeded) order. Same process, same model,
same capture, same machine load apart from the sidecar, so the ratio of the blocks'
median step times is the sidecar's own cost. The start of each block (`--settle` steps)
is left out: windows captured in the block before may still be saved or reduced. Prints
per condition the median of block medians, each block's, the ratio to off, and the most
windows still waiting for the sidecar at a block's end (it keeps up, or falls behind).

    .venv/bin/python bench/bench_live_blocks.py [--blocks 12] [--block 200]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bench_live import model_and_data, train_step  # noqa: E402

from tb_reduce_plugin.live.capture import torch_schedule  # noqa: E402

DEFAULT_ON = "0,5,10,idle"  # the "on" conditions: niceness below the loop's, or idle (SCHED_IDLE)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=40, help="blocks in all (a multiple of 4: each condition alike)")
    ap.add_argument("--block", type=int, default=100, help="steps a block")
    ap.add_argument("--settle", type=int, default=20, help="steps left out at the start of each block")
    ap.add_argument("--seed", type=int, default=1, help="of the blocks' order")
    ap.add_argument("--on", default=DEFAULT_ON, help=f"the on conditions, comma-separated (default {DEFAULT_ON})")
    args = ap.parse_args()
    conditions = ["off", *("on, SCHED_IDLE" if c == "idle" else f"on, nice {int(c)}" for c in args.on.split(","))]
    with tempfile.TemporaryDirectory() as tmp:
        folder, logdir, elsewhere = Path(tmp) / "profiles", Path(tmp) / "logdir", Path(tmp) / "unwatched"
        folder.mkdir()
        elsewhere.mkdir()
        sidecar = subprocess.Popen([sys.executable, "-m", "tb_reduce_plugin", "live", "--logdir", str(logdir),
                                    "--source", "torch", "--watch", str(folder), "--trigger", "step:2x"],
                                   stderr=subprocess.DEVNULL)
        base_nice = os.getpriority(os.PRIO_PROCESS, 0)
        per: dict[str, list[float]] = {c: [] for c in conditions}
        backlog: dict[str, list[int]] = {c: [] for c in conditions}  # windows not reduced yet at a block's end
        rng = random.Random(args.seed)  # each round runs the conditions in a new order: none always follows "off"
        try:
            time.sleep(2.0)  # up, and at its default priority
            model, opt, x, y = model_and_data()
            with torch_schedule(folder) as w:
                for _ in range(30):  # warm-up, not counted
                    train_step(model, opt, x, y)
                    w.step()
                rounds = args.blocks // len(conditions)
                order = [c for _ in range(rounds) for c in rng.sample(conditions, len(conditions))]
                for cond in order:
                    w.folder = str(elsewhere if cond == "off" else folder)
                    if cond == "off":
                        sidecar.send_signal(signal.SIGSTOP)
                    else:
                        idle = "IDLE" in cond
                        os.sched_setscheduler(sidecar.pid, os.SCHED_IDLE if idle else os.SCHED_OTHER,
                                              os.sched_param(0))
                        nice = base_nice + (0 if idle else int(cond.rsplit(" ", 1)[1]))
                        os.setpriority(os.PRIO_PROCESS, sidecar.pid, min(19, nice))  # lowering it needs root
                        sidecar.send_signal(signal.SIGCONT)
                    times = []
                    last = time.perf_counter()
                    for _ in range(args.block):
                        train_step(model, opt, x, y)
                        w.step()
                        now = time.perf_counter()
                        times.append(now - last)
                        last = now
                    per[cond].append(statistics.median(times[args.settle:]) * 1e3)
                    backlog[cond].append(len(list(folder.glob("*.pt.trace.json"))))  # moved into the ring once done
                    for p in elsewhere.iterdir():  # the off blocks' windows: never reduced
                        p.unlink(missing_ok=True)
            sidecar.send_signal(signal.SIGCONT)
        finally:
            sidecar.terminate()
            sidecar.wait(60)
    off = statistics.median(per["off"])
    print(f"{args.blocks} blocks of {args.block} steps (first {args.settle} of each left out), one loop, "
          f"windows 3 of every 10 steps; median step time per block, ms:")
    for cond in conditions:
        med = statistics.median(per[cond])
        print(f"  {cond:24s} median {med:6.2f} ms  (x{med / off:.3f} off)  blocks: "
              f"{', '.join(f'{v:.2f}' for v in per[cond])}; windows waiting at block ends: max {max(backlog[cond])}")


if __name__ == "__main__":
    main()
