"""`index_file` of one trace by this tree and by another (a worktree), alternating, each in a
fresh process: medians and their ratio.

    python3 bench/bench_index_trace.py TRACE --baseline /work/wt -n 5

The baseline tree needs its extension built in place (`python setup.py build_ext --inplace`).
Both run with this interpreter, so they share its installed dependencies.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
_ONE = ("import sys, time; sys.path.insert(0, sys.argv[1]); "
        "from tb_reduce_plugin.reduce.pipeline import index_file; "
        "t = time.perf_counter(); i = index_file(sys.argv[2]); print(time.perf_counter() - t, len(i.table))")


def _time(tree: str, trace: str) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-c", _ONE, tree, trace], capture_output=True, text=True, check=True)
    seconds, events = out.stdout.split()
    return float(seconds), int(events)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--baseline", required=True, help="another code tree (a git worktree)")
    ap.add_argument("-n", type=int, default=5, help="runs of each tree (default 5)")
    args = ap.parse_args()
    trees = {"baseline": args.baseline, "this tree": str(HERE)}
    got: dict[str, list[float]] = {k: [] for k in trees}
    events: dict[str, int] = {}
    for _ in range(args.n):
        for name, tree in trees.items():
            seconds, events[name] = _time(tree, args.trace)
            got[name].append(seconds)
    if len(set(events.values())) != 1:
        sys.exit(f"the trees read different event counts: {events}")
    print(f"{args.trace}: {events['this tree']:,} events, n = {args.n}")
    for name, xs in got.items():
        print(f"  {name:10s} median {statistics.median(xs):.3f} s   runs {' '.join(f'{x:.2f}' for x in xs)}")
    print(f"  baseline / this tree: x{statistics.median(got['baseline']) / statistics.median(got['this tree']):.2f}")


if __name__ == "__main__":
    main()
