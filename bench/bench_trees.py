#!/usr/bin/env python3
"""`tb-reduce reduce` of the same inputs by two code trees, side by side: did a change cost time or memory?

Each run is a fresh process (`python -m tb_reduce_plugin reduce`, the tree on
PYTHONPATH, started outside any checkout so the tree is what gets imported); the
trees alternate run by run, so machine noise falls on both alike. Reports per input
the median wall time and peak RSS of each tree, and the ratios new / base:

    git worktree add /tmp/base <commit>
    python3 bench/bench_trees.py --tree base=/tmp/base --tree new=. -n 3 TRACE [TRACE ...] [--level 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(tree: str, trace: str, level: str, out: str) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of one reduction in a fresh process."""
    env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()))
    cmd = [sys.executable, "-m", "tb_reduce_plugin", "reduce", trace, "-o", out, "--level", level]
    pid_began = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - pid_began
    err = proc.stderr.read() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{tree}: {trace}: {err.strip()}")
    return took, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--tree", action="append", required=True, help="NAME=PATH (the first is the baseline)")
    ap.add_argument("-n", "--repeats", type=int, default=3)
    ap.add_argument("--level", default="2")
    args = ap.parse_args()
    trees = [t.split("=", 1) for t in args.tree]
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with tempfile.TemporaryDirectory() as work:
        for trace in (str(Path(t).resolve()) for t in args.traces):
            seen: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in trees}
            for k in range(args.repeats):
                order = trees if k % 2 == 0 else trees[::-1]
                for name, path in order:
                    seen[name].append(run(path, trace, args.level, os.path.join(work, f"{name}.json.gz")))
            print(f"{Path(trace).name} (level {args.level}, medians of {args.repeats})")
            base = None
            for name, _ in trees:
                secs = statistics.median(s for s, _ in seen[name])
                mb = statistics.median(m for _, m in seen[name])
                ratio = "" if base is None else f"   x{secs / base[0]:.2f} time, x{mb / base[1]:.2f} peak RSS"
                print(f"  {name:>6}: {secs:7.2f} s  {mb:7.0f} MB{ratio}")
                base = base or (secs, mb)


if __name__ == "__main__":
    main()
