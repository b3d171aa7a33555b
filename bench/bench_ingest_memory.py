#!/usr/bin/env python3
"""Benchmark what ingesting holds (issue 26, items 1 and 4): `tb-reduce reduce` with the
columns held in memory against with them written to the index store as they are read
(`--cache-dir`, an empty one each run, so both parse).

Each run is a fresh process (its peak RSS, `ru_maxrss`, is its own), the two alternating,
medians of N:

    python3 bench/bench_ingest_memory.py --trace /tmp/tb_reduce_store_1g.pt.trace.json.gz -n 3
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHILD = ("import resource, sys; from tb_reduce_plugin.cli import main; rc = main(sys.argv[1:]); "
         "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(rc)")


def run(args: list[str]) -> tuple[float, float]:
    """(peak RSS in MB, seconds) of one `tb-reduce` process."""
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return int(done.stderr.strip().splitlines()[-1]) / 1024, time.perf_counter() - began


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, required=True)
    ap.add_argument("-n", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tbr-ingest-"))
    out = str(work / "out.json.gz")
    held, spilled = [], []
    try:
        for i in range(args.n):
            held.append(run(["reduce", str(args.trace), "-o", out, "--level", "2"]))
            spilled.append(run(["reduce", str(args.trace), "-o", out, "--level", "2", "--cache-dir",
                                str(work / f"cache{i}")]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = statistics.median
    print(f"trace: {args.trace.name}; medians of {args.n}")
    for label, runs in (("columns in memory", held), ("columns written as read (--cache-dir)", spilled)):
        print(f"{label:40s} peak RSS {med(r[0] for r in runs):7.0f} MB, {med(r[1] for r in runs):6.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
