"""Plan memory and time: tracks folded in chunks (today's engine) against each track folded
whole (the engine before, kept as the oracle in tests/reduce/test_plan_memory.py), side by side on
one index, interleaved, medians. Peaks are tracemalloc's (numpy's buffers included).

    .venv/bin/python bench/bench_plan_memory.py --trace /tmp/big/g1.pt.trace.json.gz -n 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(TESTS / "reduce"), str(TESTS)]  # the oracle's module, and the helpers it imports

from test_plan_memory import _whole_track_fold  # noqa: E402

from tb_reduce_plugin.reduce import plan  # noqa: E402
from tb_reduce_plugin.reduce.pipeline import choose_level, index_file, reduction_bytes  # noqa: E402


def _run(idx, level, whole: bool) -> tuple[float, int]:
    saved = plan._reduce_slices
    if whole:
        plan._reduce_slices = lambda sl, ov, bk, rank, order, grow=None: _whole_track_fold(sl, ov, bk, rank, order)
    tracemalloc.start()
    t = time.perf_counter()
    try:
        p = choose_level(idx, None, None) if level == "auto" else plan.plan(idx.table, level)
        return time.perf_counter() - t, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        plan._reduce_slices = saved
        del p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", required=True)
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--levels", default="auto,2,4")
    args = ap.parse_args()
    idx = index_file(args.trace, max_inflated_bytes=1 << 40)
    n = idx.events
    plan.plan(idx.table, 2)  # the prepared state, built once for both
    print(f"{Path(args.trace).name}: {n:,} events; reduction_bytes charges {reduction_bytes(idx, 'auto') / n:.1f} B/event"
          " before the summaries")
    print(f"{'level':>6} {'whole B/ev':>11} {'chunked B/ev':>13} {'ratio':>6} {'whole s':>8} {'chunked s':>10} {'ratio':>6}")
    for level in args.levels.split(","):
        lv = level if level == "auto" else int(level)
        runs: dict[bool, list] = {True: [], False: []}
        for _ in range(args.n):
            for whole in (True, False):
                runs[whole].append(_run(idx, lv, whole))
        (ws, wp), (cs, cp) = ([statistics.median(x[i] for x in runs[k]) for i in (0, 1)] for k in (True, False))
        print(f"{level:>6} {wp / n:>11.1f} {cp / n:>13.1f} {cp / wp:>6.2f} {ws:>8.2f} {cs:>10.2f} {cs / ws:>6.2f}")


if __name__ == "__main__":
    main()
