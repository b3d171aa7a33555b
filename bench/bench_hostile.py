#!/usr/bin/env python3
"""Hostile files and request storms against a real TensorBoard with the plugin: peak RSS
against `--tb_reduce_memory_mb`, statuses, and how fast the run list answers meanwhile.

Each scenario starts a fresh `tensorboard` (its own logdir, cache and, as root, an 8 GB
memory cgroup so a server that would take the machine down is killed alone) for each
code tree given, side by side in one run, so the figures compare on the same machine
and files:

    python3 bench/bench_hostile.py --tree base=/tmp/base --tree new=. [--scenario storm]

`/tmp/base` is a checkout of an older commit (`git worktree add /tmp/base <commit>`).
Figures: VmHWM (peak RSS) and VmRSS after, in MB, TensorBoard's own ~250 MB included.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import hostile_files as hf  # noqa: E402
from tensorboard_process import TensorBoard, start_tensorboard  # noqa: E402

ROUTE = "data/plugin/tb_reduce/"


def report(tree: str, scenario: str, tb: TensorBoard, before_mb: float, **figures: Any) -> None:
    alive = tb.alive()
    peak = tb.peak_mb() if alive else float("nan")
    rss = tb.rss_mb() if alive else float("nan")
    extra = " ".join(f"{k}={v}" for k, v in figures.items())
    state = "" if alive else " KILLED (out of memory)"
    print(f"{tree:>6} {scenario:<24} idle {before_mb:6.0f} MB  peak {peak:7.0f} MB  after {rss:7.0f} MB{state}  {extra}",
          flush=True)


def one_request(tree: str, path: str, scenario: str, logdir: Path, work: Path, flags: list[str], run: str,
                host: str, **params: Any) -> None:
    cache = work / f"cache-{scenario}-{tree}"
    shutil.rmtree(cache, ignore_errors=True)  # cold: every run computes
    tb = start_tensorboard(logdir, cache, "--load_fast=false", *flags,
                           pythonpath=None if path == "." else path, cgroup_mb=8192)
    try:
        before = tb.rss_mb()
        began = time.perf_counter()
        try:
            status, headers, body = tb.get(ROUTE + "trace", gz=True, timeout=600, run=run, host=host, **params)
            if headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            what = f"{status} {body[:140].decode(errors='replace')}" if status != 200 else f"200 ({len(body):,} B)"
        except OSError as exc:
            what = f"no answer ({type(exc).__name__})"
        took = time.perf_counter() - began
        time.sleep(1.0)
        report(tree, scenario, tb, before, answer=what, seconds=f"{took:.1f}")
    finally:
        tb.stop()


def storm(tree: str, path: str, logdir: Path, work: Path, flags: list[str], n: int, run: str, host: str) -> None:
    cache = work / f"cache-storm{n}-{tree}"
    shutil.rmtree(cache, ignore_errors=True)
    tb = start_tensorboard(logdir, cache, "--load_fast=false", *flags,
                           pythonpath=None if path == "." else path, cgroup_mb=8192)
    try:
        stats = tb.json(ROUTE + "stats", run=run, host=host, level=2)  # warm: the index is built
        t0, t1 = stats["window_us"]
        before = tb.rss_mb()
        statuses: collections.Counter = collections.Counter()
        lock = threading.Lock()
        done = threading.Event()
        runs_ms: list[float] = []

        def ask(k: int) -> None:
            a = t0 + (t1 - t0) * (k % 97) / 100
            b = a + (t1 - t0) * (1 + k % 13) / 400
            try:
                status, _, _ = tb.get(ROUTE + "trace", gz=True, timeout=600, run=run, host=host,
                                      level=1 + k % 4, start_us=a, end_us=b)
            except OSError as exc:
                status = type(exc).__name__
            with lock:
                statuses[status] += 1

        def poll_runs() -> None:
            while not done.is_set():
                began = time.perf_counter()
                try:
                    tb.get(ROUTE + "runs", timeout=120)
                except OSError:
                    pass
                runs_ms.append(1000 * (time.perf_counter() - began))
                time.sleep(0.2)

        poller = threading.Thread(target=poll_runs)
        poller.start()
        began = time.perf_counter()
        threads = [threading.Thread(target=ask, args=(k,)) for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.perf_counter() - began
        done.set()
        poller.join()
        runs = (f"runs p50 {statistics.median(runs_ms):.0f} ms max {max(runs_ms):.0f} ms" if runs_ms else "runs -")
        report(tree, f"storm x{n}", tb, before, statuses=dict(sorted(statuses.items(), key=str)),
               seconds=f"{took:.1f}", runs=f"[{runs}]")
    finally:
        tb.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", default=[], help="NAME=PATH of a tb_reduce_plugin tree (repeat)")
    ap.add_argument("--scenario", action="append", default=[],
                    help="xspace-bomb, identical-events, tiny-events, whitespace, storm (default: all)")
    ap.add_argument("--storm", type=int, nargs="*", default=[10, 50, 200], help="concurrent requests per storm")
    ap.add_argument("--storm-events", type=int, default=5_000_000)
    ap.add_argument("--bomb-events", type=int, default=30_000_000, help="identical tiny events in the .json.gz bomb")
    ap.add_argument("--hostnames", type=int, default=300_000_000, help="hostnames in the XSpace bomb")
    ap.add_argument("--work", default=None, help="where to build the files (default: a temp dir)")
    args = ap.parse_args()
    trees = [t.split("=", 1) for t in (args.tree or ["new=."])]
    scenarios = args.scenario or ["xspace-bomb", "identical-events", "whitespace", "storm"]
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-hostile-"))
    work.mkdir(parents=True, exist_ok=True)
    small = ["--tb_reduce_memory_mb", "256"]

    def logdir(name: str, build: Callable[[Path], Any], file: str) -> Path:
        d = work / name
        target = d / "run" / file
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            began = time.perf_counter()
            build(target)
            print(f"# built {target} ({target.stat().st_size:,} B) in {time.perf_counter() - began:.0f} s", flush=True)
        return d

    for scenario in scenarios:
        if scenario == "xspace-bomb":
            d = logdir(f"xspace-{args.hostnames}", lambda p: hf.xspace_hostnames_bomb(p, args.hostnames), "h.xplane.pb")
            for name, path in trees:
                one_request(name, path, scenario, d, work, small + ["--tb_reduce_max_input_mb", "16"], "run", "h")
        elif scenario == "identical-events":
            d = logdir(f"ident-{args.bomb_events}", lambda p: hf.identical_events_gz(p, args.bomb_events), "b.json.gz")
            for name, path in trees:
                one_request(name, path, scenario, d, work, small, "run", "b")
        elif scenario == "tiny-events":
            d = logdir(f"tiny-{args.bomb_events}", lambda p: hf.tiny_events_gz(p, args.bomb_events), "t.json.gz")
            for name, path in trees:
                one_request(name, path, scenario, d, work, small, "run", "t")
        elif scenario == "whitespace":
            d = logdir("ws", lambda p: hf.whitespace_gz(p, 100 << 20), "w.json.gz")
            for name, path in trees:
                one_request(name, path, scenario, d, work, [], "run", "w")
        elif scenario == "storm":
            d = logdir(f"storm-{args.storm_events}", lambda p: hf.tiny_events_gz(p, args.storm_events), "s.json.gz")
            for n in args.storm:
                for name, path in trees:
                    storm(name, path, d, work, [], n, "run", "s")
        else:
            ap.error(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
