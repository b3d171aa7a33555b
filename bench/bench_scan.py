#!/usr/bin/env python3
"""The native scanner alone (`_scan.Scanner.scan`) over a trace's text held in memory, this
tree against another (a worktree with its extension built in place): ns an event and GB/s
of one core, each tree in fresh processes, alternating; medians and their ratio.

What it leaves out is what the index pass adds around the scan (inflating, the second
thread's pieces, the columns written out): `bench_index_trace.py` times that whole.

    python3 bench/bench_scan.py TRACE --baseline /work/wt -n 5 [--skip-mb 200] [--mb 256]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

# Run in each tree's process: the text cut into ~16 MiB JSON arrays of whole events, scanned
# once to warm up, then `reps` times with fresh tables; prints the median seconds and counts.
CHILD = r"""
import gzip, statistics, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
from tb_reduce_plugin.native import available, scanner_module
assert available(), "the extension is not built in " + sys.argv[1]
m = scanner_module()
path, skip, size, reps = sys.argv[2], int(sys.argv[3]) << 20, int(sys.argv[4]) << 20, int(sys.argv[5])
with open(path, "rb") as f:
    gz = f.read(2) == b"\x1f\x8b"
with (gzip.open(path) if gz else open(path, "rb")) as f:
    f.read(skip)
    raw = f.read(size)
blocks, at, B = [], 0, 16 << 20
while True:  # whole events: from one that opens a line to the last close before the block's end
    start = raw.find(b"{", at)
    end = raw.rfind(b"},", start, start + B)
    if start < 0 or end < 0 or start + B >= len(raw):
        break
    blocks.append(b"[" + raw[start:end + 1] + b"]")
    at = end + 2
dtypes = (np.uint8, np.float64, np.float64, np.int32, np.int32, np.int32, np.int32, np.int32, np.uint8, np.uint8,
          np.int64, np.int64)
cap = max(b.count(b"{") for b in blocks) + 16
cols = [np.empty(cap, dtype=d) for d in dtypes]

def once():
    s = m.Scanner({}, [], {}, [], {}, [], {}, [])
    n = 0
    t = time.perf_counter()
    for b in blocks:
        k = s.scan(b, *cols)
        if k < 0:
            sys.exit("a block is not plain JSON events: pick another --skip-mb")
        n += k
    return time.perf_counter() - t, n

once()
runs = [once() for _ in range(reps)]
print(statistics.median(r[0] for r in runs), runs[0][1], sum(map(len, blocks)))
"""


def _run(tree: str, args: argparse.Namespace) -> tuple[float, int, int]:
    out = subprocess.run([sys.executable, "-c", CHILD, tree, args.trace, str(args.skip_mb), str(args.mb), "5"],
                         capture_output=True, text=True)
    if out.returncode:
        sys.exit(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"{tree}: failed")
    seconds, events, size = out.stdout.split()
    return float(seconds), int(events), int(size)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="a Chrome JSON trace, gzip or plain (a Kineto trace: gen_kineto_trace.py)")
    ap.add_argument("--baseline", required=True, help="another code tree (a git worktree, extension built in place)")
    ap.add_argument("-n", type=int, default=5, help="fresh processes of each tree (default 5)")
    ap.add_argument("--skip-mb", type=int, default=200, help="text skipped first: the trace's header (default 200)")
    ap.add_argument("--mb", type=int, default=256, help="text scanned (default 256)")
    args = ap.parse_args()
    trees = {"baseline": args.baseline, "this tree": str(HERE)}
    got: dict[str, list[float]] = {k: [] for k in trees}
    counts = set()
    for _ in range(args.n):
        for name, tree in trees.items():
            seconds, events, size = _run(tree, args)
            got[name].append(seconds)
            counts.add((events, size))
    if len(counts) != 1:
        sys.exit(f"the trees scanned different events: {counts}")
    events, size = counts.pop()
    print(f"{args.trace}: {size / 1e6:.0f} MB of text, {events:,} events, n = {args.n} (medians)")
    for name, xs in got.items():
        m = statistics.median(xs)
        print(f"  {name:10s} {m * 1e9 / events:6.0f} ns an event  {size / m / 1e9:5.2f} GB/s   "
              f"runs {' '.join(f'{x:.3f}' for x in xs)} s")
    print(f"  baseline / this tree: x{statistics.median(got['baseline']) / statistics.median(got['this tree']):.2f}")


if __name__ == "__main__":
    main()
