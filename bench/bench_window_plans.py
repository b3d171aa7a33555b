#!/usr/bin/env python3
"""Benchmark plans of a window (issue 26, item 2): found through the window index against
the whole-table path, on a restarted service over a filled cache.

A zoom asks for a window the server never reduced. Before the window index, its plan read
every event and every slice of the trace (flags per event, a pass over each slice and each
flow) however narrow the window; now it finds the window's events, the slices overlapping
it and the flows near its kept slices by search (`reduce/window_index.py`). Measured side
by side in one process, contenders interleaved per repeat (this machine is noisy: read
medians and ratios): a new `TraceService` over the same cache (a restart: the index and
its prepared state are mapped from the store) asks a window of each width at level 2,
once through each path; the bodies are compared. With `--drop-caches` (root only) the page
cache is dropped before each request, as after a reboot.

    python3 bench/bench_window_plans.py                       # a 1 GiB trace in /tmp if absent
    python3 bench/bench_window_plans.py --trace PATH -n 5 --drop-caches
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_index_store import DEFAULT_TRACE, body, ensure_trace  # noqa: E402  (the same 1 GiB trace)

from tb_reduce_plugin.reduce import plan  # noqa: E402
from tb_reduce_plugin.reduce.plan import default_window  # noqa: E402
from tb_reduce_plugin.serve.service import TraceService  # noqa: E402

WIDTHS = (0.001, 0.01, 0.1)


def drop_caches(enabled: bool) -> None:
    if enabled:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")


def ask(logdir: Path, cache: Path, host: str, window: tuple, whole_table: bool):
    """A restarted service asks `window` at level 2: (plan s, request s, body)."""
    service = TraceService(str(logdir), cache_dir=str(cache))
    real = plan.window_index
    if whole_table:
        plan.window_index = lambda t: None
    try:
        began = time.perf_counter()
        r = service.reduction("run", host, 2, *window)
        request = time.perf_counter() - began
    finally:
        plan.window_index = real
    assert r.stats["index"] == "stored", "the service parsed the trace: the cache did not hold its index"
    assert not r.stats["cached"], "a window asked before"
    return r.stats["timings_s"]["plan"], request, body(r)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=None)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("-n", type=int, default=3, help="repeats (medians)")
    ap.add_argument("--drop-caches", action="store_true", help="drop the page cache before each request (root)")
    args = ap.parse_args()
    trace = args.trace or ensure_trace(DEFAULT_TRACE, args.size_mb)
    work = Path(tempfile.mkdtemp(prefix="tbr-window-bench-"))
    try:
        logdir = work / "logs" / "run"
        logdir.mkdir(parents=True)
        local = logdir / trace.name
        try:
            os.link(trace, local)  # the same file, not a copy of gigabytes
        except OSError:
            shutil.copyfile(trace, local)
        host = trace.name.split(".pt.trace.json")[0].split(".trace.json")[0].split(".json")[0]
        cache = work / "cache"

        first = TraceService(str(work / "logs"), cache_dir=str(cache))  # the first view...
        began = time.perf_counter()
        r = first.reduction("run", host, 2, None, None)
        view_s = time.perf_counter() - began
        events = r.stats["input"]["events"]
        lo, hi = first.on_index(first.trace_file("run", host), lambda i: default_window(i.table))
        began = time.perf_counter()
        first.wait_saved()  # ...then the index kept and the window index made, in the background
        build_s = time.perf_counter() - began
        assert first.on_index(first.trace_file("run", host), lambda i: i.prepared.window_index is not None)
        folder = next((cache / "index").glob("*/prepared.json")).parent
        del first
        time.sleep(2.5)  # the index's files old enough to be stamped at the first reopen (`verified.py`)
        # Each contender its own cache folder (their reduced windows are cached apart), the
        # same stored index in both (hard links: no copy of gigabytes).
        other = work / "cache-whole-table"
        subprocess.run(["cp", "-al", str(cache), str(other)], check=True)

        rows = []
        for width in WIDTHS:
            fast_plan, fast_req, slow_plan, slow_req = [], [], [], []
            for i in range(args.n):
                at = 0.05 + 0.9 * ((i * 0.37 + width * 7) % 1.0) * (1 - width)  # never asked before
                window = (lo + at * (hi - lo), lo + (at + width) * (hi - lo))
                drop_caches(args.drop_caches)
                p, q, a = ask(work / "logs", cache, host, window, whole_table=False)
                fast_plan.append(p)
                fast_req.append(q)
                drop_caches(args.drop_caches)
                p, q, b = ask(work / "logs", other, host, window, whole_table=True)
                slow_plan.append(p)
                slow_req.append(q)
                assert a == b, "the window index planned otherwise than the whole table"
            rows.append((width, fast_plan, fast_req, slow_plan, slow_req))

        med = statistics.median
        kept = sum(f.stat().st_size for f in folder.iterdir())
        print(f"trace: {trace.name}, {trace.stat().st_size / 1e6:,.0f} MB, {events:,} events; medians of {args.n}"
              f"{', page cache dropped before each request' if args.drop_caches else ''}")
        print(f"first view {view_s:.1f} s; then in the background (index kept, window index made) {build_s:.1f} s; "
              f"index folder {kept / 1e6:,.0f} MB ({kept / events:.0f} B/event)")
        print("window width   plan: index / whole table        request: index / whole table")
        for width, fp, fq, sp, sq in rows:
            print(f"{width * 100:8.1f} %   {med(fp):7.3f} s / {med(sp):7.3f} s  x{med(sp) / med(fp):5.1f}"
                  f"     {med(fq):7.3f} s / {med(sq):7.3f} s  x{med(sq) / med(fq):5.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
