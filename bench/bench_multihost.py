#!/usr/bin/env python3
"""Merged multi-host views: where the per-host work runs, side by side in one run.

What it measures (issue 15's targets), each configuration in a fresh server process
with an empty cache, several times, medians and ratios printed:

1. **64 generated hosts, merged view cold** (`trace?hosts=*&level=2`, the whole run; past
   32 hosts that is a busy lane per host, each host still parsed and reduced whole):
   the server alone (`--tb_reduce_workers=local:0`: threads under its gate), one worker
   process (`local:1`), the local pool (`local:2`, one per core here) and a Dask
   `LocalCluster` of 2 process workers started once beforehand (`tcp://…`). Ratios:
   server / local:2, local:1 / local:2 and dask / local:2.
2. **A 1,000-host run** (`hosts=*`, every host a busy/idle lane): its first view cold on
   the local pool, then warm (the same request again: the merged body from the cache),
   and a lane expanded.
3. **Memory**: each server process's peak RSS (its own, not its workers') against
   `--tb_reduce_memory_mb`, and the workers' peak.

Hosts are Kineto-style rank traces from `gen_kineto_trace.py` (one seed per rank, one
job clock), generated once into --data. Run: `python bench/bench_multihost.py`
(`--quick` for fewer, smaller hosts).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

MEMORY_MB = 1024


def ensure_hosts(folder: Path, hosts: int, events: int, layers: int) -> Path:
    """`hosts` rank traces of `events` events each in `folder/job/` (made once, then reused)."""
    import gen_kineto_trace

    run = folder / "job"
    run.mkdir(parents=True, exist_ok=True)
    for r in range(hosts):
        out = run / f"rank{r:04d}.pt.trace.json.gz"
        if not out.exists():
            gen_kineto_trace.generate(str(out), None, events, seed=1000 + r, layers=layers, quiet=True)
    return folder


# One measurement, in a fresh process: a TraceService over the logdir, an empty cache.
CHILD = r"""
import json, resource, sys, time
from tb_reduce_plugin.serve.service import TraceService
logdir, cache, workers, memory_mb, mode = sys.argv[1:6]
svc = TraceService(logdir, cache_dir=cache, memory_mb=float(memory_mb), host_workers=workers)
svc.catalog.max_age_s = 1e9
runs = svc.runs()
out = {"hosts": len(runs[0]["hosts"])}
ex = svc.merged.executor
t = time.perf_counter()
if ex is not None:
    ex.warm_up()  # a running server's workers are started: measure the data's cold view, not the start
out["start_s"] = time.perf_counter() - t
t = time.perf_counter()
r = svc.merged.reduction("job", "*", 2, None, None, drop_args=True)
out["cold_s"] = time.perf_counter() - t
out["bytes"] = r.body.length
out["events"] = r.stats["output"]["events"]
out["errors"] = sum(1 for h in r.stats["hosts"] if "error" in h)
del r
if mode == "warm":
    t = time.perf_counter()
    r = svc.merged.reduction("job", "*", 2, None, None, drop_args=True)
    out["warm_s"] = time.perf_counter() - t
    del r
    host = runs[0]["hosts"][len(runs[0]["hosts"]) // 2]["host"]
    t = time.perf_counter()
    r = svc.merged.reduction("job", "*", 2, None, None, drop_args=True, expand=host)
    out["expand_s"] = time.perf_counter() - t
    del r
out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

def peak_mb(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0

out["workers_rss_mb"] = max([peak_mb(p) for p in ex.worker_pids()] or [0.0]) if ex is not None else 0.0
if ex is not None:
    ex.close()
print(json.dumps(out))
"""


def measure(logdir: Path, workers: str, mode: str = "cold") -> dict:
    with tempfile.TemporaryDirectory(prefix="tbr-bench-cache-") as cache:
        p = subprocess.run([sys.executable, "-c", CHILD, str(logdir), cache, workers, str(MEMORY_MB), mode],
                           capture_output=True, text=True, cwd=str(REPO), timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"{workers}: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _peak_rss_mb() -> float:
    """A process's peak RSS (run on each Dask worker)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("/tmp/tb_reduce_bench_hosts"))
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--events", type=int, default=40_000, help="events per host (default 40,000)")
    ap.add_argument("--many", type=int, default=1000, help="hosts of the lane run (default 1,000)")
    ap.add_argument("-n", type=int, default=3, help="repeats per configuration (default 3)")
    ap.add_argument("--quick", action="store_true", help="16 hosts of 10,000 events, 200 lanes, 1 repeat")
    a = ap.parse_args()
    if a.quick:
        a.hosts, a.events, a.many, a.n = 16, 10_000, 200, 1
    from bench_reduce import impl_fingerprint

    print(f"code      {impl_fingerprint()}")
    print(f"machine   {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    t = time.perf_counter()
    wide = ensure_hosts(a.data / f"hosts{a.hosts}x{a.events}", a.hosts, a.events, layers=12)
    many = ensure_hosts(a.data / f"hosts{a.many}x3000", a.many, 3000, layers=2)
    print(f"data      {wide} and {many} ({time.perf_counter() - t:.1f} s to make or find)")

    import distributed

    results: dict[str, list[dict]] = {}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  host="127.0.0.1") as cluster, distributed.Client(cluster) as client:
        configs = {"server": "local:0", "local:1": "local:1", "local:2": "local:2", "dask": cluster.scheduler_address}
        for i in range(a.n):  # interleaved, so a noisy minute hits every configuration alike
            for name, spec in configs.items():
                if name == "dask":
                    client.restart()  # fresh worker processes: nothing parsed is kept from the last round
                results.setdefault(name, []).append(measure(wide, spec))
                if name == "dask":
                    peaks = client.run(_peak_rss_mb)
                    results[name][-1]["workers_rss_mb"] = max(peaks.values()) if peaks else 0.0
                r = results[name][-1]
                print(f"  round {i + 1} {name:8s} cold {r['cold_s']:6.2f} s  server RSS {r['rss_mb']:5.0f} MB  "
                      f"worker peak {r['workers_rss_mb']:5.0f} MB  start {r['start_s']:5.2f} s  errors {r['errors']}", flush=True)
    first = results["local:2"][0]
    print(f"\n{a.hosts} hosts x {a.events:,} events, merged view cold, level 2 ({first['events']:,} events out, "
          f"{first['bytes'] / 1e6:.1f} MB gzip); medians of {a.n}:")
    base = median(results["local:2"], "cold_s")
    for name in results:
        m = median(results[name], "cold_s")
        print(f"  {name:8s} {m:6.2f} s   {m / base:5.2f}x local:2   server peak RSS "
              f"{max(r['rss_mb'] for r in results[name]):5.0f} MB (budget {MEMORY_MB} MB), a worker's peak "
              f"{max(r['workers_rss_mb'] for r in results[name]):4.0f} MB")

    lanes = [measure(many, "local:2", "warm") for _ in range(a.n)]
    print(f"\n{a.many} hosts (lanes), local:2; medians of {a.n}:")
    print(f"  first view cold {median(lanes, 'cold_s'):6.2f} s, warm {median(lanes, 'warm_s') * 1000:6.1f} ms, "
          f"one lane expanded {median(lanes, 'expand_s'):6.2f} s; {lanes[0]['events']:,} events out, "
          f"{lanes[0]['bytes'] / 1e6:.2f} MB gzip; server peak RSS {max(r['rss_mb'] for r in lanes):.0f} MB")
    print(f"load at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
