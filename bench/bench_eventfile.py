#!/usr/bin/env python3
"""Benchmark reading the scalars of a 1 M-record event file: tb-reduce vs TensorBoard.

What is measured: the wall time from a path to every scalar point of the file in
hand (tag, step, wall time, value), in this process, the file in the page cache.

* **TensorBoard**: its own `EventFileLoader` (the loader its event multiplexer
  uses, with the compat layers that turn `simple_value` into a tensor), each event's
  values turned into numbers with `tensor_util.make_ndarray(value.tensor).item()`,
  as TensorBoard's scalar path does, appended to per-tag lists.
* **TensorBoard, floor** (`--baselines raw`): its `RawEventFileLoader` (framing and
  checksums), `Event.FromString` and `simple_value`, without the compat layers and
  tensor conversions: the least its reader can do, not what TensorBoard does.
* **tb-reduce**: `RunScalars(path).poll()` (framing, checksums, damage search,
  `Event` parse, columns per tag), then `series(tag)` of every tag.

All must agree: the point counts and the sums of the values are compared before
timings are printed.

The file: `--records` real `Event` protos (wall time, step, one `simple_value`
summary; three tags in turn, as a training loop writes them), framed as TensorFlow's
writer frames them. It is written with raw framing because TensorBoard's own
`EventFileWriter` computes its CRCs in pure Python (minutes for 1 M records); the
bytes are the same (the tests check the framing against TensorBoard's reader).

How: the machine is small and shared, so the contenders alternate, `--repeats`
times each, and the medians and their ratio are reported. Without TensorFlow
installed (tb-reduce's case), TensorBoard reads records with its pure-Python stub
(`tensorflow_stub`); with TensorFlow installed it uses TensorFlow's C++ reader, and
the script says which one it measured.

Usage::

    .venv/bin/python bench/bench_eventfile.py                      # 1,000,000 records, 3 repeats
    .venv/bin/python bench/bench_eventfile.py --records 100000 --repeats 5 --baselines raw
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import tempfile
import time
from typing import Callable, Dict, List, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tensorboard.compat import tf  # noqa: E402
from tensorboard.compat.proto import event_pb2  # noqa: E402

from tb_reduce_plugin.waveforms.eventfile import masked_crc32c  # noqa: E402
from tb_reduce_plugin.waveforms.scalars import RunScalars  # noqa: E402

TAGS = ("train/loss", "train/accuracy", "train/lr")


def write_file(path: str, records: int) -> int:
    """`records` framed Events, one scalar each; returns the size in bytes."""
    header = event_pb2.Event(wall_time=1_700_000_000.0, file_version="brain.Event:2").SerializeToString()
    parts: List[bytes] = []
    with open(path, "wb") as f:
        for i in range(records):
            if i == 0:
                payload = header
            else:
                event = event_pb2.Event(wall_time=1_700_000_000.0 + 0.01 * i, step=i // len(TAGS))
                event.summary.value.add(tag=TAGS[i % len(TAGS)], simple_value=((i * 7919) % 10007) / 10007.0)
                payload = event.SerializeToString()
            head = struct.pack("<Q", len(payload))
            parts.append(head + struct.pack("<I", masked_crc32c(head)) + payload
                         + struct.pack("<I", masked_crc32c(payload)))
            if len(parts) >= 10_000:
                f.write(b"".join(parts))
                parts = []
        f.write(b"".join(parts))
    return os.path.getsize(path)


def tensorboard_read(path: str) -> Tuple[int, float]:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    out: Dict[str, List[Tuple[int, float, float]]] = {}
    for event in EventFileLoader(path).Load():
        for value in event.summary.value:
            if value.metadata.plugin_data.plugin_name == "scalars" or value.tag in out:
                x = tensor_util.make_ndarray(value.tensor).item()
                out.setdefault(value.tag, []).append((event.step, event.wall_time, x))
    return sum(len(v) for v in out.values()), sum(p[2] for v in out.values() for p in v)


def tensorboard_raw_read(path: str) -> Tuple[int, float]:
    """The least TensorBoard's reader can do: its `RawEventFileLoader` (framing and
    checksums only), `Event.FromString` and `simple_value`, without the compat layers
    and tensor conversions of its scalar path: a floor, not what TensorBoard does."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader

    parse = event_pb2.Event.FromString
    out: Dict[str, List[Tuple[int, float, float]]] = {}
    for record in RawEventFileLoader(path).Load():
        event = parse(record)
        for value in event.summary.value:
            if value.WhichOneof("value") == "simple_value":
                out.setdefault(value.tag, []).append((event.step, event.wall_time, value.simple_value))
    return sum(len(v) for v in out.values()), sum(p[2] for v in out.values() for p in v)


def tb_reduce_read(path: str) -> Tuple[int, float]:
    run = RunScalars(path)
    run.poll()
    series = [run.series(tag) for tag in run.tags()]
    assert not run.gaps and not run.pending_bytes
    return sum(len(s[0]) for s in series), float(sum(s[2].sum() for s in series))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baselines", default="loader,raw",
                    help="TensorBoard readers to time, comma-separated: loader (its scalar path), raw (a floor)")
    ap.add_argument("--file", default=None, help="where to write the event file (default: a temporary folder)")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="bench_eventfile_")
    path = args.file or os.path.join(tmp, "events.out.tfevents.1700000000.bench")
    t = time.perf_counter()
    size = write_file(path, args.records)
    print(f"wrote {args.records:,} records, {size / 1e6:.1f} MB, in {time.perf_counter() - t:.1f} s: {path}")
    reader = "TensorFlow's C++ record reader" if tf.__version__ != "stub" else "its pure-Python stub reader (no TensorFlow)"
    print(f"TensorBoard {__import__('tensorboard').__version__} reads with {reader}")
    with open(path, "rb") as f:  # into the page cache, for both
        while f.read(16 << 20):
            pass

    baselines = {"loader": ("TensorBoard EventFileLoader", tensorboard_read),
                 "raw": ("TensorBoard RawEventFileLoader + parse (floor)", tensorboard_raw_read)}
    contenders: Dict[str, Callable[[str], Tuple[int, float]]] = dict(baselines[b] for b in args.baselines.split(","))
    contenders["tb-reduce RunScalars"] = tb_reduce_read
    times: Dict[str, List[float]] = {name: [] for name in contenders}
    results = {}
    for rep in range(args.repeats):
        for name, fn in contenders.items():  # alternating: a noisy minute hurts both
            t = time.perf_counter()
            results[name] = fn(path)
            dt = time.perf_counter() - t
            times[name].append(dt)
            print(f"  repeat {rep + 1}: {name}: {dt:.2f} s ({results[name][0]:,} points)", flush=True)
    n_us, sum_us = results["tb-reduce RunScalars"]
    for name, (n, total) in results.items():  # all read the same points
        assert n == n_us == args.records - 1, (name, n, n_us)
        assert abs(total - sum_us) <= 1e-9 * abs(sum_us), (name, total, sum_us)

    med = {name: statistics.median(ts) for name, ts in times.items()}
    us = med["tb-reduce RunScalars"]
    print(f"median of {args.repeats}:")
    for name, m in med.items():
        ratio = "" if name.startswith("tb-reduce") else f": tb-reduce is {m / us:.1f}x faster"
        print(f"  {name}: {m:.2f} s ({m / args.records * 1e6:.2f} µs/record){ratio}")
    if not args.file:
        os.remove(path)
        os.rmdir(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
