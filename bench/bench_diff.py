#!/usr/bin/env python3
"""Benchmark `tb-reduce diff` on two ~2 M-event traces (issue 27: ≤ 100 ms warm, ≤ 2× the
cold indexes).

Two Kineto-style traces of one generator (`gen_kineto_trace.py --events 2000000`, seeds
1 and 2: the same ops with other durations), written to /tmp once and reused.

1. Warm, in process, on the parsed indexes: `compare.diff.compare` (both sides' series
   spread, both range tables over every name, the join) against its floor side by side,
   the two range tables alone (`query.aggregate` of each, all names), interleaved per
   repeat; medians and the ratio. The first call of each is reported apart (it prepares
   the slices' parents).
2. Cold, as a user runs it: `tb-reduce diff A B --format json` in a fresh process,
   against `tb-reduce waveforms` of A and of B in fresh processes (each indexes its
   trace and derives its steps: what a diff must do twice at least), interleaved.

    python3 bench/bench_diff.py              # generate the traces in /tmp if absent
    python3 bench/bench_diff.py -n 9 --skip-cold
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tb_reduce_plugin.compare.diff import Side, compare  # noqa: E402
from tb_reduce_plugin.query.aggregate import aggregate  # noqa: E402
from tb_reduce_plugin.reduce.pipeline import index_file  # noqa: E402
from tb_reduce_plugin.waveforms.steps import derive  # noqa: E402

TRACES = [Path("/tmp/tb_reduce_diff_2m_seed1.pt.trace.json.gz"), Path("/tmp/tb_reduce_diff_2m_seed2.pt.trace.json.gz")]


def ensure(path: Path, seed: int, events: int) -> Path:
    if not path.exists():
        print(f"generating {path} ({events:,} events) ...", flush=True)
        subprocess.run([sys.executable, str(REPO / "bench" / "gen_kineto_trace.py"), "--events", str(events),
                        "--seed", str(seed), "-o", str(path), "-q"], check=True, stdout=subprocess.DEVNULL)
    return path


def timed(fn) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("-n", type=int, default=7, help="repeats (medians)")
    ap.add_argument("--skip-cold", action="store_true")
    args = ap.parse_args()
    paths = [ensure(p, seed, args.events) for p, seed in zip(TRACES, (1, 2))]

    sides = []
    for p in paths:
        began = time.perf_counter()
        idx = index_file(p)
        steps = derive(idx.table)
        sides.append(Side.of(p.name, idx.table, steps, None))
        print(f"{p.name}: {idx.events:,} events, {len(steps)} steps, {len(idx.table.names):,} names, "
              f"indexed and derived in {time.perf_counter() - began:.2f} s", flush=True)
    first = timed(lambda: compare(*sides))
    print(f"first compare (prepares the slices' parents): {first * 1e3:.0f} ms")
    diff_t, floor_t = [], []
    for _ in range(args.n):
        diff_t.append(timed(lambda: compare(*sides)))
        floor_t.append(timed(lambda: [aggregate(s.table, *(s.window or (None, None)), limit=None) for s in sides]))
    d, f = statistics.median(diff_t), statistics.median(floor_t)
    print(f"warm compare: median {d * 1e3:.1f} ms (range {min(diff_t) * 1e3:.1f}-{max(diff_t) * 1e3:.1f}); "
          f"the two range tables alone {f * 1e3:.1f} ms; ratio {d / f:.2f}x")

    if args.skip_cold:
        return
    cli = [sys.executable, "-m", "tb_reduce_plugin"]
    cold_diff, cold_one = [], []
    for _ in range(max(3, args.n // 2)):
        cold_diff.append(timed(lambda: subprocess.run([*cli, "diff", *map(str, paths), "--format", "json"],
                                                      check=True, stdout=subprocess.DEVNULL)))
        cold_one.append(sum(timed(lambda p=p: subprocess.run([*cli, "waveforms", str(p)], check=True,
                                                             stdout=subprocess.DEVNULL)) for p in paths))
    cd, co = statistics.median(cold_diff), statistics.median(cold_one)
    print(f"cold `tb-reduce diff`: median {cd:.2f} s; `tb-reduce waveforms` of each, summed: {co:.2f} s; "
          f"ratio {cd / co:.2f}x")


if __name__ == "__main__":
    main()
