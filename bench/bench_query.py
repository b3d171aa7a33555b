#!/usr/bin/env python3
"""Benchmark search and range statistics over a ~2 M-event trace (issue 13, parts 1 and 2).

Targets (the issue's): a warm `search` p50 <= 100 ms and a warm `aggregate` of the
full range <= 300 ms, on a 2 M-event trace.

What is measured, on one trace (default: a 2 M-event Kineto-style trace made by
`gen_kineto_trace.py --events 2000000`, written to /tmp once and reused):

1. In process, on the parsed index (`query.search.search`, `query.aggregate.aggregate`):
   the first call of each (it prepares state kept with the index: the time order of
   searchable events, the slices' parents) and then warm calls, against a floor
   measured side by side: one plain numpy pass over the columns that any answer must
   at least make (`flatnonzero(name == id)` for a search, a weighted `bincount` of the
   name column for a table). Contenders are interleaved per repeat, so the machine's
   noise falls on both; medians and ratios are reported.
2. Over HTTP, a real TensorBoard (`tests/tensorboard_process.py`) with the trace as its
   only run: the `search` and `aggregate` routes warm, against the warm `stats` of the
   default view (a disk-cache read: the cheapest answer the plugin gives) in the same
   run. Timed from the request to the last byte of the body.
3. Memory: `tracemalloc` peak of a first and a warm search and table, per event, to
   check the charges `service.py` makes before running them.

    python3 bench/bench_query.py                 # generate /tmp/tb_reduce_query_2m.pt.trace.json.gz if absent
    python3 bench/bench_query.py --trace PATH -n 9 --skip-http
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
import tracemalloc
from pathlib import Path
from typing import Callable

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from tb_reduce_plugin.index.prepared import prepared_of  # noqa: E402
from tb_reduce_plugin.query.aggregate import aggregate  # noqa: E402
from tb_reduce_plugin.query.aggregate import working_bytes as aggregate_working_bytes  # noqa: E402
from tb_reduce_plugin.query.search import compile_query, search  # noqa: E402
from tb_reduce_plugin.query.search import working_bytes as search_working_bytes  # noqa: E402
from tb_reduce_plugin.reduce.pipeline import index_file  # noqa: E402
from tb_reduce_plugin.reduce.shared import slices_of  # noqa: E402

DEFAULT_TRACE = Path("/tmp/tb_reduce_query_2m.pt.trace.json.gz")


def ensure_trace(path: Path, events: int) -> Path:
    if not path.exists():
        print(f"generating {path} ({events:,} events) ...", flush=True)
        subprocess.run([sys.executable, str(REPO / "bench" / "gen_kineto_trace.py"), "--events", str(events),
                        "-o", str(path), "-q"], check=True, stdout=subprocess.DEVNULL)
    return path


def timed(fn: Callable[[], object]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def ms(x: float) -> str:
    return f"{1000 * x:8.1f} ms"


def queries(t) -> dict[str, tuple[str, bool, bool]]:
    """Queries chosen from the trace itself: its rarest and commonest slice names, a
    regex and a case-insensitive word."""
    sl = slices_of(t)
    counts = np.bincount(sl.name, minlength=len(t.names))
    present = np.flatnonzero(counts)
    rare = str(t.names[present[np.argmin(counts[present])]])
    common = str(t.names[present[np.argmax(counts[present])]])
    return {
        "rare name": (rare, False, False),
        "common name": (common, False, False),
        "regex": (r"^aten::(mm|addmm|bmm)$|Backward\d+$", True, False),
        "icase": ("CUDALAUNCHKERNEL", False, True),
    }


def in_process(path: Path, n: int) -> None:
    began = time.perf_counter()
    idx = index_file(path)
    t = idx.table
    print(f"index     {idx.events:,} events, {len(t.names):,} distinct names, parsed in {time.perf_counter() - began:.1f} s")
    qs = queries(t)
    rare_id = int(np.flatnonzero(np.asarray([str(v) == qs["rare name"][0] for v in t.names]))[0])
    dur = np.nan_to_num(t.dur)

    def floor_search() -> object:
        return np.flatnonzero(t.name == rare_id)

    def floor_table() -> object:
        return np.bincount(t.name, weights=dur, minlength=len(t.names))

    compiled = {k: compile_query(*v) for k, v in qs.items()}
    first_search = timed(lambda: search(t, compiled["rare name"]))
    first_table = timed(lambda: aggregate(t))
    print(f"first     search {ms(first_search)} (prepares the time order), aggregate {ms(first_table)} "
          f"(prepares the parents)")
    t0, t1 = float(np.nanmin(t.ts)), float(np.nanmax(t.ts))
    window = (t0 + 0.45 * (t1 - t0), t0 + 0.55 * (t1 - t0))
    runs: dict[str, list[float]] = {}
    contenders: dict[str, Callable[[], object]] = {"floor: flatnonzero(name == id)": floor_search}
    for k, q in compiled.items():
        contenders[f"search {k} ({qs[k][0][:28]})"] = (lambda q=q: search(t, q))
    contenders["floor: bincount(name, dur)"] = floor_table
    contenders["aggregate full range"] = lambda: aggregate(t)
    contenders["aggregate 10% window"] = lambda: aggregate(t, *window)
    for _ in range(n):
        for name, fn in contenders.items():
            runs.setdefault(name, []).append(timed(fn))
    print(f"\nwarm, in process, median of {n} (interleaved)")
    search_floor = statistics.median(runs["floor: flatnonzero(name == id)"])
    table_floor = statistics.median(runs["floor: bincount(name, dur)"])
    for name, xs in runs.items():
        floor = table_floor if name.startswith(("aggregate", "floor: bincount")) else search_floor
        hits = ""
        if name.startswith("search"):
            k = name[len("search "):].split(" (")[0]
            hits = f"  {search(t, compiled[k])['total']:>9,} hits"
        print(f"  {name:<48} {ms(statistics.median(xs))}  (min {ms(min(xs))})  {statistics.median(xs) / floor:6.1f}x floor{hits}")

    print("\nmemory (tracemalloc peak per event of the trace, and what service.py charges before)")
    prepared = prepared_of(t)
    for label, fresh in (("first", True), ("warm", False)):
        for what, state, fn, charge in (
                ("search common", "searchable", lambda: search(t, compiled["common name"]), search_working_bytes),
                ("aggregate", "parents", lambda: aggregate(t), aggregate_working_bytes)):
            if fresh:  # as if never asked: the state it prepares is built again
                setattr(prepared, state, None)
            charged = charge(t)
            tracemalloc.start()
            fn()
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            print(f"  {label:<6} {what:<14} {peak / idx.events:6.1f} B/event ({peak / 2**20:.0f} MB), "
                  f"charged {charged / idx.events:6.1f} B/event")


def over_http(path: Path, n: int) -> None:
    from tensorboard_process import start_tensorboard

    root = Path(tempfile.mkdtemp(prefix="bench_query_"))
    run = root / "logdir" / "big"
    run.mkdir(parents=True)
    try:
        os.link(path, run / path.name)
    except OSError:
        shutil.copyfile(path, run / path.name)
    host = path.name.split(".")[0]
    tb = start_tensorboard(root / "logdir", root / "cache", "--load_fast=false", "--tb_reduce_memory_mb", "4096")
    route = "data/plugin/tb_reduce/"
    try:
        host = tb.json(route + "runs")[0]["hosts"][0]["host"]
        began = time.perf_counter()
        status = tb.get(route + "stats", run="big", host=host)[0]
        print(f"\nHTTP      cold default view (parse + level 2): {time.perf_counter() - began:.1f} s, status {status}")
        asks = {
            "stats (default view, warm)": dict(path="stats", run="big", host=host),
            "search rare": dict(path="search", run="big", host=host, q="ProfilerStep#3"),
            "search common (1000 hits)": dict(path="search", run="big", host=host, q="aten::"),
            "search regex": dict(path="search", run="big", host=host, q=r"^aten::(mm|addmm|bmm)$", re=1),
            "search icase": dict(path="search", run="big", host=host, q="CUDALAUNCHKERNEL", icase=1),
            "aggregate full range": dict(path="aggregate", run="big", host=host),
        }
        for params in asks.values():  # first asks: prepare the state
            p = dict(params)
            assert tb.get(route + p.pop("path"), **p)[0] == 200
        runs: dict[str, list[float]] = {}
        for _ in range(n):
            for name, params in asks.items():
                p = dict(params)
                began = time.perf_counter()
                code, _, body = tb.get(route + p.pop("path"), **p)
                runs.setdefault(name, []).append(time.perf_counter() - began)
                assert code == 200, body[:200]
        base = statistics.median(runs["stats (default view, warm)"])
        print(f"warm over HTTP, median of {n} (interleaved)")
        for name, xs in runs.items():
            print(f"  {name:<48} {ms(statistics.median(xs))}  (p95-ish max {ms(max(xs))})  "
                  f"{statistics.median(xs) / base:6.1f}x stats")
    finally:
        tb.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=None)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("-n", type=int, default=7, help="warm repeats (default 7)")
    ap.add_argument("--skip-http", action="store_true")
    a = ap.parse_args()
    path = a.trace or ensure_trace(DEFAULT_TRACE, a.events)
    from bench_reduce import impl_fingerprint

    print(f"input     {path} ({path.stat().st_size / 1e6:.1f} MB)")
    print(f"code      {impl_fingerprint()}")
    print(f"machine   {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, numpy {np.__version__}; "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    in_process(path, a.n)
    if not a.skip_http:
        over_http(path, a.n)
    print(f"load at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
