"""What the summaries' busy digits (issue 26, item 7; `tb_reduce_plugin/reduce/busy.py`) cost a plan
and a reduced trace: plans with the digits (today's fold) against the same fold with the
busy time left out (`busy.group_busy` answering zeros, no digit written), side by side on
one index, interleaved per repeat, medians and ratios; and the JSON of each level with and
without `args.busy`.

    .venv/bin/python bench/bench_busy.py --trace /tmp/tb_reduce_query_2m.pt.trace.json.gz -n 7
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tb_reduce_plugin.reduce import (
    busy,  # noqa: E402
    plan,  # noqa: E402
    summaries,  # noqa: E402
)
from tb_reduce_plugin.reduce.pipeline import index_file, reduce_index  # noqa: E402


def _no_busy(lo, hi, group, first, last, carried, t0, t1, theta, last_bucket):
    """The baseline: the sums' array (as the fold needs it), never filled."""
    span = last - first + 1
    offsets = np.zeros(len(first) + 1, dtype=np.int64)
    np.cumsum(span, out=offsets[1:])
    return np.zeros(int(offsets[-1])), offsets


def _digits_none(sums, span, theta):
    return np.zeros(len(span), dtype=np.int64), np.zeros(0, dtype=np.uint8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", required=True)
    ap.add_argument("-n", type=int, default=7)
    ap.add_argument("--levels", default="1,2,4")
    args = ap.parse_args()
    idx = index_file(args.trace)
    t = idx.table
    print(f"input     {args.trace} ({os.path.getsize(args.trace) / 1e6:.1f} MB), {idx.events:,} events")
    print(f"machine   {os.cpu_count()} CPUs, numpy {np.__version__}")
    plan.plan(t, 2)  # the prepared state, made once for both
    real_busy, real_digits = summaries.group_busy, summaries.digits_of
    for level in (int(x) for x in args.levels.split(",")):
        times: dict[str, list[float]] = {"with busy digits": [], "without (baseline)": []}
        for _ in range(args.n):
            for name in times:
                off = name.startswith("without")
                summaries.group_busy = _no_busy if off else real_busy
                summaries.digits_of = _digits_none if off else real_digits
                start = time.perf_counter()
                plan.plan(t, level)
                times[name].append(time.perf_counter() - start)
        sizes = {}
        for name in times:
            off = name.startswith("without")
            summaries.group_busy = _no_busy if off else real_busy
            summaries.digits_of = _digits_none if off else real_digits
            out = io.BytesIO()
            reduce_index(idx, out, level, gzip=False)
            sizes[name] = len(out.getvalue())
        summaries.group_busy, summaries.digits_of = real_busy, real_digits
        base = statistics.median(times["without (baseline)"])
        made = plan.plan(t, level)
        print(f"level {level}: {len(made.summaries):,} summaries, {len(made.summaries.busy):,} digits")
        for name, xs in times.items():
            m = statistics.median(xs)
            print(f"  plan {name:<20} {m * 1000:8.1f} ms (min {min(xs) * 1000:.1f})  {m / base:5.2f}x   "
                  f"JSON {sizes[name] / 1e6:8.2f} MB  {sizes[name] / sizes['without (baseline)']:6.4f}x")
    assert busy.DIGITS == 10


if __name__ == "__main__":
    main()
