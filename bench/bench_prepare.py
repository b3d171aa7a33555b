"""What preparing a table for its first plan, search and per-step series costs, made a chunk
at a time into a scratch folder (today) against the whole-array way (the baseline: the same
code in one chunk, and the whole-array oracles the tests keep for the flow binding and the
steps), side by side on one index, interleaved per repeat: time (median) and tracemalloc's
peak, with their ratios.

    .venv/bin/python bench/bench_prepare.py --trace /tmp/tb_reduce_query_2m.pt.trace.json.gz -n 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Callable

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from steps_oracle import whole_derive  # noqa: E402
from test_prepared_in_chunks import whole_flow_binding, whole_slice_order  # noqa: E402

from tb_reduce_plugin.index.prepared import Prepared  # noqa: E402
from tb_reduce_plugin.model import slices as slices_module  # noqa: E402
from tb_reduce_plugin.query import search as search_module  # noqa: E402
from tb_reduce_plugin.reduce import flows, plan, shared  # noqa: E402
from tb_reduce_plugin.reduce.pipeline import index_file  # noqa: E402
from tb_reduce_plugin.waveforms import steps  # noqa: E402

WHOLE = 1 << 62  # one chunk: the whole-array way


def measure(fn: Callable[[], object]) -> tuple[float, int]:
    tracemalloc.start()
    began = time.perf_counter()
    try:
        fn()
        return time.perf_counter() - began, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def chunks(size: int) -> None:
    for module, name in ((shared, "CHUNK_EVENTS"), (slices_module, "CHUNK_EVENTS"),
                         (search_module, "CHUNK_ROWS"), (steps, "CHUNK_ROWS")):
        setattr(module, name, size)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", required=True)
    ap.add_argument("-n", type=int, default=3)
    args = ap.parse_args()
    idx = index_file(args.trace)
    t = idx.table
    default = (shared.CHUNK_EVENTS, slices_module.CHUNK_EVENTS, search_module.CHUNK_ROWS, steps.CHUNK_ROWS)
    print(f"input     {args.trace} ({os.path.getsize(args.trace) / 1e6:.1f} MB), {idx.events:,} events")
    print(f"machine   {os.cpu_count()} CPUs, numpy {np.__version__}")

    def fresh(scratch: bool) -> None:
        t.prepared = Prepared()
        t.scratch = tempfile.mkdtemp(prefix="bench-prepare-") if scratch else None

    def chunked(step: str) -> Callable[[], object]:
        def run() -> object:
            sl = shared.slices_of(t)
            if step == "slices":
                return sl
            if step == "slice order":
                return shared._track_start_order(sl, t.scratch)
            if step == "flow binding":
                return flows._flow_binding(t, sl)
            if step == "first plan (level 1)":
                return plan.plan(t, 1)
            if step == "search's time order":
                return search_module._build_searchable(t, sl)
            return steps.derive(t)
        return run

    def whole(step: str) -> Callable[[], object]:
        def run() -> object:
            sl = shared.slices_of(t)
            if step == "slices":
                return sl
            if step == "slice order":
                return whole_slice_order(sl)
            if step == "flow binding":
                return whole_flow_binding(t)
            if step == "first plan (level 1)":
                return plan.plan(t, 1)
            if step == "search's time order":
                return search_module._build_searchable(t, sl)
            return whole_derive(t)
        return run

    print(f"{'step':24s} {'chunked s':>10s} {'whole s':>10s} {'time ×':>7s} {'chunked MB':>11s} {'whole MB':>9s} "
          f"{'peak ×':>7s}")
    for step in ("slices", "slice order", "flow binding", "first plan (level 1)", "search's time order",
                 "per-step series"):
        got: dict[str, list[tuple[float, int]]] = {"chunked": [], "whole": []}
        for _ in range(args.n):
            for way in got:
                fresh(scratch=way == "chunked")
                if step != "slices":  # what the step needs made first, out of the measure
                    shared.slices_of(t)
                    if step in ("flow binding", "first plan (level 1)"):
                        shared._static(t, shared.slices_of(t))
                if way == "chunked":
                    chunks_to = default
                    for (module, name), size in zip(((shared, "CHUNK_EVENTS"), (slices_module, "CHUNK_EVENTS"),
                                                     (search_module, "CHUNK_ROWS"), (steps, "CHUNK_ROWS")), chunks_to):
                        setattr(module, name, size)
                    got[way].append(measure(chunked(step)))
                else:
                    chunks(WHOLE)
                    got[way].append(measure(whole(step)))
        c_s = statistics.median(x[0] for x in got["chunked"])
        w_s = statistics.median(x[0] for x in got["whole"])
        c_mb = max(x[1] for x in got["chunked"]) / 1e6
        w_mb = max(x[1] for x in got["whole"]) / 1e6
        print(f"{step:24s} {c_s:10.2f} {w_s:10.2f} {c_s / w_s:7.2f} {c_mb:11.1f} {w_mb:9.1f} {c_mb / w_mb:7.2f}",
              flush=True)


if __name__ == "__main__":
    main()
