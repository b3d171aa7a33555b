#!/usr/bin/env python3
"""Per-step series vs the level-2 reduction of the same trace, same process, side by side.

Target (issue 10): deriving the series of a 2 M-event trace costs ≤ 0.3 × its level-2
reduction. Each round, alternating, times (a) a cold level-2 reduction — parse,
plan, write — and (b) deriving the per-step series from a freshly parsed index (no
plan prepared its slices: the derivation pays for them itself), and prints both
medians and the ratio b / a:

    python3 bench/gen_kineto_trace.py --events 2000000 -o /tmp/k2m.pt.trace.json.gz
    python3 bench/bench_waveforms.py /tmp/k2m.pt.trace.json.gz [-n 3]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tb_reduce_plugin.reduce.pipeline import derive_index, index_file, reduce_file  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("-n", type=int, default=3, help="rounds (default 3)")
    args = ap.parse_args()
    reduce_s, derive_s = [], []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json.gz")
        for _ in range(args.n):
            t = time.perf_counter()
            stats = reduce_file(args.trace, out, level=2)
            reduce_s.append(time.perf_counter() - t)
            gc.collect()
            index = index_file(args.trace)  # parsing is the reduction's, not the derivation's, cost
            t = time.perf_counter()
            series = derive_index(index)
            derive_s.append(time.perf_counter() - t)
            del index
            gc.collect()
    rm, dm = statistics.median(reduce_s), statistics.median(derive_s)
    print(f"{os.path.basename(args.trace)}: {stats['input']['events']:,} events, {len(series)} steps "
          f"({series.marker})")
    print(f"  level-2 reduction  median {rm:.3f} s  ({', '.join(f'{x:.3f}' for x in reduce_s)})")
    print(f"  per-step series    median {dm:.3f} s  ({', '.join(f'{x:.3f}' for x in derive_s)})")
    print(f"  ratio series / reduction: {dm / rm:.3f}  (target ≤ 0.3)")


if __name__ == "__main__":
    main()
