#!/usr/bin/env python3
"""Benchmark the index store (issue 26, item 1): what a restart costs with and without it.

Before the store, a restarted server (or a second one over the same cache, or a new CLI
run) parsed the whole trace again for the first window it had not cached. Now the first
parse writes the index into `<cache>/index/` and a restart maps it. Measured side by side
in one process, contenders interleaved per repeat (this machine is noisy: medians and
ratios are what to read):

1. `index_file` (a full parse) against `IndexStore.load` of the same file version
   (checksums of every stored file included).
2. A restarted `TraceService` asked a window it never reduced: over an empty cache (it
   parses: the old behaviour) against over the cache the first service filled (it maps
   the stored index). Both then plan and write the same window; the bodies are compared.
3. What the stored index takes on disk per event (and with the block store kept beside
   it, which spares a restarted server inflating a gzip trace again), and what the
   reopened index charges the memory budget against the parsed one (mapped columns are
   file-backed pages).

    python3 bench/bench_index_store.py                      # generate a 1 GiB trace in /tmp if absent
    python3 bench/bench_index_store.py --trace PATH -n 5
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tb_reduce_plugin.index.store import IndexStore, indexed  # noqa: E402
from tb_reduce_plugin.reduce.pipeline import index_file  # noqa: E402
from tb_reduce_plugin.reduce.plan import default_window  # noqa: E402
from tb_reduce_plugin.serve.service import TraceService  # noqa: E402

DEFAULT_TRACE = Path("/tmp/tb_reduce_store_1g.pt.trace.json.gz")


def ensure_trace(path: Path, size_mb: int) -> Path:
    if not path.exists():
        print(f"generating {path} ({size_mb} MiB of JSON) ...", flush=True)
        subprocess.run([sys.executable, str(REPO / "bench" / "gen_kineto_trace.py"), "--size-mb", str(size_mb),
                        "-o", str(path), "-q"], check=True)
    return path


def timed(fn):
    began = time.perf_counter()
    value = fn()
    return time.perf_counter() - began, value


def body(reduction) -> bytes:
    data = reduction.body.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def restart_and_ask(logdir: Path, cache: Path, host: str, window: tuple):
    """A new service over `cache` (a restarted server) asked `window` at level 2: (seconds, reduction)."""
    service = TraceService(str(logdir), cache_dir=str(cache))
    return timed(lambda: service.reduction("run", host, 2, *window))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=None)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("-n", type=int, default=3, help="repeats (medians)")
    args = ap.parse_args()
    trace = args.trace or ensure_trace(DEFAULT_TRACE, args.size_mb)
    work = Path(tempfile.mkdtemp(prefix="tbr-store-bench-"))
    try:
        logdir = work / "logs" / "run"
        logdir.mkdir(parents=True)
        local = logdir / trace.name
        shutil.copyfile(trace, local)
        host = trace.name.split(".pt.trace.json")[0].split(".trace.json")[0].split(".json")[0]

        # 1. parse against reopen
        store = IndexStore(str(work / "store" / "index"), 1 << 40)
        parsed = index_file(local)
        store.save(parsed)
        events = parsed.events
        parsed_mem = parsed.memory_bytes()
        lo, hi = default_window(parsed.table)
        del parsed
        parse_s, load_s = [], []
        for _ in range(args.n):
            s, idx = timed(lambda: index_file(local))
            del idx
            parse_s.append(s)
            s, idx = timed(lambda: indexed(store, str(local)))
            assert idx.extra.get("stored_index")
            reopened_mem = idx.memory_bytes()
            del idx
            load_s.append(s)
        info = store.info()

        # 2. a restarted service's first new window
        filled = work / "cache-filled"
        first = TraceService(str(work / "logs"), cache_dir=str(filled))
        first.reduction("run", host, 2, None, None)
        first.wait_saved()
        kept = first.store.info().bytes if first.store is not None else 0
        del first
        cold_s, stored_s = [], []
        for i in range(args.n):
            window = (lo + (hi - lo) * (0.1 + 0.08 * i), lo + (hi - lo) * (0.12 + 0.08 * i))  # never asked before
            s, a = restart_and_ask(work / "logs", work / f"cache-empty-{i}", host, window)
            cold_s.append(s)
            s, b = restart_and_ask(work / "logs", filled, host, window)
            stored_s.append(s)
            assert b.stats["index"] == "stored" and a.stats["index"] == "parsed"
            assert body(a) == body(b), "the stored index answered differently"
            del a, b

        med = statistics.median
        print(f"trace: {trace.name}, {trace.stat().st_size / 1e6:,.0f} MB on disk, {events:,} events; "
              f"medians of {args.n}")
        print(f"1. parse (index_file)          {med(parse_s):8.3f} s")
        print(f"   reopen from the store       {med(load_s):8.3f} s   x{med(parse_s) / med(load_s):,.0f} faster")
        print(f"2. restarted service, new window: parse {med(cold_s):.3f} s, stored index {med(stored_s):.3f} s "
              f"(x{med(cold_s) / med(stored_s):.1f})")
        print(f"3. index on disk: {info.bytes / 1e6:,.0f} MB, {info.bytes / events:.1f} B/event; memory charged: "
              f"parsed {parsed_mem / 1e6:,.0f} MB, reopened {reopened_mem / 1e6:,.0f} MB")
        print(f"   with the blocks kept beside it (a gzip trace's events, compressed): {kept / 1e6:,.0f} MB, "
              f"{kept / events:.1f} B/event")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
