#!/usr/bin/env python3
"""A storm of `scalars` requests for one long tag against a real TensorBoard: latency,
peak RSS against `--tb_reduce_memory_mb`, and how fast `/runs` answers meanwhile.

Issue 24, item 15: 16 concurrent `scalars` of a 2 M-point tag (82 MB of JSON each) took
p50 65 s, VmHWM 1.23 GB at `--tb_reduce_memory_mb 1024`, `/runs` up to 3.96 s. Each tree
given starts a fresh `tensorboard` on the same logdir (as root, in an 8 GB memory
cgroup), reads the tag once (warm: the event file is read and the run listed), then
fires the storm; with `--width W` a second storm asks as the dashboard does (M4 per
pixel column, at most ~4 W points):

    git worktree add /tmp/base <commit>   # or: git archive <commit> tb_reduce_plugin | tar -x -C /tmp/base
    .venv/bin/python bench/bench_scalars.py --tree base=/tmp/base --tree new=. [--points 2000000] [--width 1536]

The event file (Event protos framed as TFRecords, each `simple_value` of one tag) is
written once to `--events` and reused.
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from tensorboard_process import TensorBoard, start_tensorboard  # noqa: E402

ROUTE = "data/plugin/tb_reduce/"
RUN = "run"
TAG = "train/loss"


def write_events(path: Path, n: int) -> None:
    """`n` scalar events of one tag, as TensorBoard's writer frames them (length, masked
    CRC32C, payload, masked CRC32C), written in 64 k-event batches."""
    import google_crc32c
    import numpy as np
    from tensorboard.compat.proto import event_pb2, summary_pb2

    def masked(data: bytes) -> int:
        crc = google_crc32c.value(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    values = np.sin(np.arange(n) / 5000.0) + 0.01 * np.random.default_rng(0).standard_normal(n)
    tmp = path.with_suffix(".part")
    with open(tmp, "wb") as f:
        head = event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString()
        for payload in [head]:
            length = struct.pack("<Q", len(payload))
            f.write(length + struct.pack("<I", masked(length)) + payload + struct.pack("<I", masked(payload)))
        for a in range(0, n, 65536):
            parts = []
            for step in range(a, min(n, a + 65536)):
                summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=TAG, simple_value=values[step])])
                payload = event_pb2.Event(step=step, wall_time=1.7e9 + step * 0.01, summary=summary).SerializeToString()
                length = struct.pack("<Q", len(payload))
                parts.append(length + struct.pack("<I", masked(length)) + payload + struct.pack("<I", masked(payload)))
            f.write(b"".join(parts))
    tmp.rename(path)


def storm(tb: TensorBoard, n: int, params: dict) -> dict:
    statuses: collections.Counter = collections.Counter()
    took: list[float] = []
    sizes: list[int] = []
    runs_s: list[float] = []
    lock = threading.Lock()
    done = threading.Event()

    def ask() -> None:
        began = time.perf_counter()
        try:
            status, _, body = tb.get(ROUTE + "scalars", gz=True, timeout=900, run=RUN, **params)
        except OSError as exc:
            status, body = type(exc).__name__, b""
        with lock:
            statuses[status] += 1
            took.append(time.perf_counter() - began)
            sizes.append(len(body))

    def poll_runs() -> None:
        while not done.is_set():
            began = time.perf_counter()
            try:
                tb.get(ROUTE + "runs", timeout=120)
            except OSError:
                pass
            runs_s.append(time.perf_counter() - began)
            time.sleep(0.1)

    poller = threading.Thread(target=poll_runs)
    poller.start()
    askers = [threading.Thread(target=ask) for _ in range(n)]
    for t in askers:
        t.start()
    for t in askers:
        t.join()
    done.set()
    poller.join()
    return {"statuses": dict(statuses), "p50_s": statistics.median(took), "max_s": max(took),
            "gzip_bytes": statistics.median(sizes), "runs_max_s": max(runs_s) if runs_s else math.nan}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", default=[], help="NAME=PATH of a tree holding tb_reduce_plugin")
    ap.add_argument("--points", type=int, default=2_000_000)
    ap.add_argument("--concurrent", type=int, default=16)
    ap.add_argument("--memory-mb", type=int, default=1024)
    ap.add_argument("--width", type=int, default=0, help="also a storm at the dashboard's width (new trees only)")
    ap.add_argument("--events", default=None, help="where the event file is kept (default: /tmp)")
    args = ap.parse_args()
    trees = [t.split("=", 1) for t in (args.tree or ["new=."])]
    events = Path(args.events or f"/tmp/tbr-bench-scalars-{args.points}.tfevents")
    if not events.exists():
        began = time.perf_counter()
        write_events(events, args.points)
        print(f"wrote {events} ({events.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - began:.1f} s", flush=True)
    with tempfile.TemporaryDirectory() as work:
        logdir = Path(work) / "logdir"
        (logdir / RUN).mkdir(parents=True)
        (logdir / RUN / "host.pt.trace.json").write_text(
            '{"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 10, "name": "step"}]}')
        os.symlink(events, logdir / RUN / "events.out.tfevents.bench")
        for name, path in trees:
            cache = Path(work) / f"cache-{name}"
            shutil.rmtree(cache, ignore_errors=True)
            tb = start_tensorboard(logdir, cache, "--load_fast=false", "--tb_reduce_memory_mb", str(args.memory_mb),
                                   pythonpath=None if path == "." else str(Path(path).resolve()), cgroup_mb=8192)
            try:
                began = time.perf_counter()
                status, _, _ = tb.get(ROUTE + "tags", timeout=900, run=RUN)
                warm = time.perf_counter() - began
                idle = tb.peak_mb()
                plans = [("all points", {"tag": TAG})]
                if args.width and name != "base":
                    plans.append((f"width={args.width}", {"tag": TAG, "width": args.width}))
                for what, params in plans:
                    r = storm(tb, args.concurrent, params)
                    alive = tb.alive()
                    print(f"{name:>5} {what:<12} x{args.concurrent}: {r['statuses']}  p50 {r['p50_s']:.2f} s  "
                          f"max {r['max_s']:.2f} s  gzip body {r['gzip_bytes'] / 1e6:.2f} MB  "
                          f"/runs max {r['runs_max_s']:.2f} s  VmHWM {tb.peak_mb() if alive else math.nan:.0f} MB "
                          f"(after warm-up {idle:.0f} MB; tags {status} in {warm:.1f} s)"
                          f"{'' if alive else ' KILLED'}", flush=True)
            finally:
                tb.stop()


if __name__ == "__main__":
    main()
