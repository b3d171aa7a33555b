"""Reducing one trace file: index (pass 1) → plan → write (pass 2).

A pure function of (file bytes, level, window) → bytes (SPEC §6b), so surfaces can
cache it and pools can run it per host. `index_file` is the cacheable artefact.
"""

from __future__ import annotations

import ctypes
import io
import os
import time
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Callable, Optional, Union

import numpy as np

from . import FORMAT_VERSION
from .chrome_json import ChromeJsonEvents, ChromeJsonReader
from .errors import TraceError
from .model import EventTable, TableBuilder, decode_events
from .reduction import LEVELS, Plan, plan
from .sources import DEFAULT_MAX_INFLATED_BYTES, TraceStream
from .writer import EventSource, Sink, atomic_output, write_trace
from .xspace import read_xspace

Level = Union[int, str]
Progress = Callable[[int, int], None]
BUDGET_EVENTS = 500_000
BUDGET_BYTES = 64 * 1024 * 1024


@dataclass
class TraceIndex:
    """A parsed trace: columns plus the way back to any event's JSON (`source`)."""

    path: str
    format: str
    table: EventTable
    metadata: dict
    truncated: bool
    file_bytes: int
    json_bytes: int  # bytes of the decompressed input
    seconds: float
    source: EventSource
    extra: dict = field(default_factory=dict)

    @property
    def events(self) -> int:
        return len(self.table)

    def estimated_bytes(self) -> np.ndarray:
        """Per event, the average JSON size of its block (for `auto`)."""
        t = self.table
        if not t.block_events:
            return np.zeros(0)
        per = np.asarray(t.block_bytes, dtype=np.float64) / np.maximum(np.asarray(t.block_events), 1)
        return np.repeat(per, t.block_events)


# An XSpace starts with one of its fields: planes (1), errors (2), warnings (3) or
# hostnames (4), all length-delimited: tag bytes 0x0a, 0x12, 0x1a, 0x22.
_XSPACE_FIRST_BYTES = b"\x0a\x12\x1a\x22"


def _sniff(stream: TraceStream) -> str:
    """The format, from the content (names lie: `.json` files hold anything)."""
    raw = stream.peek(64)
    head = raw.lstrip(b"\xef\xbb\xbf \t\r\n")
    if head[:1] in (b"{", b"["):
        return "chrome-json"
    if not raw:
        raise TraceError(f"empty file: {os.path.basename(stream.path)} holds no trace")
    if raw[0] in _XSPACE_FIRST_BYTES and os.path.basename(stream.path).endswith((".pb", ".pb.gz")):
        return "xspace"
    raise TraceError(
        f"not a trace: {os.path.basename(stream.path)} is neither Chrome trace JSON nor an XSpace (.xplane.pb)"
    )


def release_free_memory() -> None:
    """Hand freed heap pages back to the OS after parsing (glibc keeps them).

    Parsing churns through millions of short-lived objects; without this the
    process keeps their pages, and the peak RSS of later phases stacks on top.
    """
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass


def index_file(
    path: Union[str, os.PathLike],
    max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
    progress: Optional[Progress] = None,
    store_dir: Optional[str] = None,
) -> TraceIndex:
    """Pass 1: stream the file into an event table.

    `store_dir`: where a Chrome trace may keep its event blocks compressed after
    the first full write pass, so later windows read only the blocks they need
    (`ChromeJsonEvents`); for servers that reduce one trace many times.
    """
    path = os.fspath(path)
    began = time.perf_counter()
    with TraceStream(path, max_inflated_bytes, progress) as stream:
        fmt = _sniff(stream)
        if fmt == "xspace":
            space = read_xspace(stream)
            release_free_memory()
            return TraceIndex(
                path=path, format=fmt, table=space.table, metadata=space.metadata, truncated=False,
                file_bytes=stream.file_bytes, json_bytes=stream.inflated, seconds=time.perf_counter() - began,
                source=space, extra=space.extra,
            )
        reader = ChromeJsonReader(stream)
        builder = TableBuilder()
        sizes: list[int] = []

        def decode(text: bytes) -> list:
            events = decode_events(text)
            sizes.append(len(text))
            return events

        for block in reader.blocks(decode):
            builder.add(block, sizes[-1])
        table = builder.build()
        del builder
        release_free_memory()
        return TraceIndex(
            path=path,
            format=fmt,
            table=table,
            metadata=reader.metadata,
            truncated=reader.truncated,
            file_bytes=stream.file_bytes,
            json_bytes=stream.inflated,
            seconds=time.perf_counter() - began,
            source=ChromeJsonEvents(path, max_inflated_bytes, len(table), store_dir),
            extra={"container": reader.container},
        )


def parse_level(level: Level) -> Level:
    if isinstance(level, str):
        if level.strip().lower() == "auto":
            return "auto"
        try:
            level = int(level)
        except ValueError:
            raise TraceError(f"level must be 0-4 or auto, not {level!r}") from None
    if level not in LEVELS:
        raise TraceError(f"level must be 0-4 or auto, not {level!r}")
    return level


def choose_level(index: TraceIndex, start_us: Optional[float], end_us: Optional[float],
                 budget_events: Optional[int] = None, budget_bytes: Optional[int] = None) -> Plan:
    """`auto`: the least reduced level whose estimated output fits the budget."""
    budget_events = BUDGET_EVENTS if budget_events is None else budget_events
    budget_bytes = BUDGET_BYTES if budget_bytes is None else budget_bytes
    est = index.estimated_bytes()
    p = None
    for level in LEVELS:
        p = plan(index.table, level, start_us, end_us)
        per_event = est[p.keep] if level < 3 else np.minimum(est[p.keep], 200.0)
        size = float(per_event.sum()) + 220.0 * len(p.summaries)
        if p.events <= budget_events and size <= budget_bytes:
            return p
    assert p is not None
    return p


def tb_reduce_object(index: TraceIndex, p: Plan, auto: bool) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "level": p.level,
        "resolution": p.resolution,
        "bucket_us": p.bucket_us,
        "window_us": [p.t0, p.t1],
        "input": {"format": index.format, "events": index.events, "bytes": index.file_bytes},
        "output": {"events": p.events, "summaries": len(p.summaries)},
    }
    if auto:
        obj["auto"] = {"budget_events": BUDGET_EVENTS, "budget_bytes": BUDGET_BYTES}
    if index.truncated:
        obj["input"]["truncated"] = True
    return obj


def reduce_index(
    index: TraceIndex,
    out: BinaryIO,
    level: Level = 2,
    start_us: Optional[float] = None,
    end_us: Optional[float] = None,
    gzip: bool = True,
    progress: Optional[Progress] = None,
    with_input_index: bool = False,
    drop_args: bool = False,
) -> dict[str, Any]:
    """Write the reduction of an indexed trace to `out`; returns the stats.

    `with_input_index` adds `tb_reduce.input_index`: for each written input event
    (the summaries follow them), its index in the input, which `event_json` takes —
    how the dashboard shows an event's full args on click. `drop_args` writes the
    kept events without args (as levels 3 and 4 do) at any level: a view that
    fetches args on click need not carry them, and is much cheaper to write.
    """
    level = parse_level(level)
    t_plan = time.perf_counter()
    p = choose_level(index, start_us, end_us) if level == "auto" else plan(index.table, level, start_us, end_us)
    plan_s = time.perf_counter() - t_plan
    obj = tb_reduce_object(index, p, level == "auto")
    if with_input_index:
        obj["input_index"] = p.keep.tolist()
    if drop_args:
        obj["args"] = "dropped"
    t_write = time.perf_counter()
    sink = Sink(out, gzip)
    write_trace(index.source, p, index.table.tracks, index.table.names, index.metadata, obj, sink, progress,
                args_level=3 if drop_args else None)
    sink.close()
    stats = {k: v for k, v in obj.items() if k != "input_index"}
    stats["output"] = dict(obj["output"], json_bytes=sink.bytes)
    stats["input"] = dict(obj["input"], json_bytes=index.json_bytes)
    stats["timings_s"] = {"index": index.seconds, "plan": plan_s, "write": time.perf_counter() - t_write}
    return stats


def reduce_file(
    src: Union[str, os.PathLike],
    dst: Union[str, os.PathLike],
    level: Level = 2,
    start_us: Optional[float] = None,
    end_us: Optional[float] = None,
    max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
    progress: Optional[Progress] = None,
) -> dict[str, Any]:
    """Reduce `src` into `dst` atomically (gzip when `dst` ends in .gz)."""
    src, dst = os.fspath(src), os.fspath(dst)
    level = parse_level(level)
    size = os.path.getsize(src) if os.path.exists(src) else 0

    def phase(offset: int) -> Optional[Progress]:
        return None if progress is None else (lambda done, total: progress(offset + done, 2 * size))

    began = time.perf_counter()
    index = index_file(src, max_inflated_bytes, phase(0))
    f, finish = atomic_output(dst)
    ok = False
    try:
        stats = reduce_index(index, f, level, start_us, end_us, dst.endswith(".gz"), phase(size))
        ok = True
    finally:
        finish(ok)
    stats["output"]["file_bytes"] = os.path.getsize(dst)
    stats["timings_s"]["total"] = time.perf_counter() - began
    return stats


def event_json(index: TraceIndex, i: int) -> bytes:
    """The full JSON of event `i` (for details views): for Chrome JSON exactly as the
    file holds it, for XSpace as converted with all its args."""
    if not 0 <= i < index.events:
        raise TraceError(f"no event {i}: the trace has {index.events:,}")
    for block in index.source.events(np.asarray([i]), 0):
        return block[0]
    raise TraceError(f"event {i} could not be read back")  # pragma: no cover


def reduce_to_bytes(path: Union[str, os.PathLike], level: Level = 2, start_us: Optional[float] = None,
                    end_us: Optional[float] = None) -> bytes:
    """The reduced trace as uncompressed JSON bytes (for tests and small inputs)."""
    index = index_file(path)
    buf = io.BytesIO()
    reduce_index(index, buf, level, start_us, end_us, gzip=False)
    return buf.getvalue()
