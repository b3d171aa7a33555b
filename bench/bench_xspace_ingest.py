#!/usr/bin/env python3
"""Benchmark reading a big XSpace (issue 26, item 6): `tb-reduce reduce --level 2` of this
tree against another tree (`--baseline`, e.g. a worktree of the commit before), each with
an empty `--cache-dir` (a server's spill folder: where the streaming reader maps the file,
its columns and positions) under the same `--max-memory-mb`.

Each run is a fresh process; its anonymous memory (`RssAnon`, what the budget promises:
mapped files are not in it) is sampled every 20 ms, with its wall time. Contenders
alternate; medians of N. A run the budget refuses is reported as refused, with its message.

    python3 bench/gen_big_xspace.py /tmp/jax_2m/plugins/profile/*/vm.xplane.pb --size-mb 1024 -o /tmp/bigx/h.xplane.pb
    git worktree add /tmp/base HEAD~1 && cp tb_reduce_plugin/*.so /tmp/base/tb_reduce_plugin/
    python3 bench/bench_xspace_ingest.py /tmp/bigx/h.xplane.pb --baseline /tmp/base -n 3
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


def _anon_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run(tree: Path, trace: Path, budget_mb: int, out_dir: Path) -> tuple[float, float, str]:
    """(seconds, peak RssAnon MB, "" or the refusal) of one `tb-reduce reduce` in `tree`."""
    cache = Path(tempfile.mkdtemp(dir=out_dir))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    began = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "tb_reduce_plugin.cli", "reduce", str(trace), "-o",
                          str(out_dir / "out.json.gz"), "--level", "2", "--max-memory-mb", str(budget_mb),
                          "--cache-dir", str(cache)], cwd=tree, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    peak = 0
    while p.poll() is None:
        peak = max(peak, _anon_kb(p.pid))
        time.sleep(0.02)
    seconds = time.perf_counter() - began
    err = p.stderr.read() if p.stderr else ""
    shutil.rmtree(cache, ignore_errors=True)
    refused = "" if p.returncode == 0 else (err.strip().splitlines() or [f"exit {p.returncode}"])[-1]
    return seconds, peak / 1024, refused


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--baseline", type=Path, help="another tree of tb_reduce_plugin (a worktree)")
    ap.add_argument("--budget-mb", type=int, default=2048, help="--max-memory-mb (default 2048, the server's)")
    ap.add_argument("-n", type=int, default=3)
    a = ap.parse_args()
    trees = [("this tree", REPO)] + ([("baseline", a.baseline.resolve())] if a.baseline else [])
    size = a.trace.stat().st_size
    print(f"trace {a.trace} ({size / 2**20:,.0f} MiB); budget {a.budget_mb} MB; {os.cpu_count()} CPUs; n={a.n}")
    out_dir = Path(tempfile.mkdtemp(prefix="bench_xspace_ingest-"))
    results: dict[str, list[tuple[float, float, str]]] = {label: [] for label, _ in trees}
    try:
        for k in range(a.n):
            for label, tree in trees:
                r = run(tree, a.trace, a.budget_mb, out_dir)
                results[label].append(r)
                print(f"  [{k + 1}/{a.n}] {label:10s} {r[0]:7.2f} s  RssAnon peak {r[1]:7,.0f} MB  "
                      f"{'ok' if not r[2] else 'refused: ' + r[2][:110]}", flush=True)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    print(f"\n{'contender':12s} {'median s':>9s} {'RssAnon MB':>11s}  outcome")
    med = {}
    for label, rs in results.items():
        t, m = statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs)
        med[label] = (t, m, all(not r[2] for r in rs))
        print(f"{label:12s} {t:9.2f} {m:11,.0f}  {'ok' if med[label][2] else 'refused'}")
    if len(med) == 2:
        (t1, m1, _), (t0, m0, ok0) = med["this tree"], med["baseline"]
        print(f"this tree / baseline: {t1 / t0:.2f}x time, {m1 / max(m0, 1):.2f}x peak RssAnon"
              + ("" if ok0 else " (the baseline was refused: its time is the time to refuse)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
