#!/usr/bin/env python3
"""Benchmark inflating ahead (issue 26, item 3): a gzip trace's next block inflated on a
thread of its own while the native scanner works on the current one.

Side by side in one process, alternating per repeat (this machine is noisy: medians and
the ratio are what to read), `sources.INFLATE_AHEAD` off and on:
1. `index_file` (the ingest: inflate, cut, scan, build the columns);
2. `reduce_file` at level 2 (ingest, plan, and the write pass, which reads the file again);
3. the floor: inflating the file alone through `TraceStream` (nothing overlaps it).

    python3 bench/bench_inflate_ahead.py                 # a 1 GiB trace generated in /tmp if absent
    python3 bench/bench_inflate_ahead.py --trace PATH -n 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tb_reduce_plugin.formats import sources  # noqa: E402
from tb_reduce_plugin.reduce.pipeline import index_file, reduce_file  # noqa: E402

DEFAULT_TRACE = Path("/tmp/tb_reduce_store_1g.pt.trace.json.gz")


def inflate_only(path: Path) -> None:
    with sources.TraceStream(path, 1 << 40) as s:
        while s.read():
            pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=None)
    ap.add_argument("-n", type=int, default=3)
    args = ap.parse_args()
    trace = args.trace or DEFAULT_TRACE
    if not trace.exists():
        subprocess.run([sys.executable, str(REPO / "bench" / "gen_kineto_trace.py"), "--size-mb", "1024",
                        "-o", str(trace), "-q"], check=True)
    out = Path(tempfile.mkdtemp()) / "out.json.gz"
    times: dict[str, list[float]] = {}
    for _ in range(args.n):
        for ahead in (False, True):
            sources.INFLATE_AHEAD = ahead
            tag = "on" if ahead else "off"
            for what, fn in (("inflate", lambda: inflate_only(trace)), ("index", lambda: index_file(trace)),
                             ("reduce", lambda: reduce_file(trace, out, 2))):
                began = time.perf_counter()
                fn()
                times.setdefault(f"{what} {tag}", []).append(time.perf_counter() - began)
    os.unlink(out)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"trace: {trace.name}, {trace.stat().st_size / 1e6:,.0f} MB; medians of {args.n}; {os.cpu_count()} cores")
    print(f"inflating alone (the floor)   {med['inflate off']:.2f} s")
    for what in ("index", "reduce"):
        print(f"{what:6s} ahead off {med[f'{what} off']:.2f} s, on {med[f'{what} on']:.2f} s: "
              f"x{med[f'{what} on'] / med[f'{what} off']:.3f}, {med[f'{what} on'] / med['inflate off']:.1f}x the floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
