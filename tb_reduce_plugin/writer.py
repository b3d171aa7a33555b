"""Writing a reduced trace: Chrome JSON Object format, streamed, deterministic.

Kept events come from the input format's `EventSource` by index: for Chrome JSON
a second streaming pass copies their original bytes (so levels 0 and 1 write them
unchanged and memory never holds the trace); for XSpace they are generated from
the kept payloads. Levels 2–4 re-encode only the kept events whose args they cut
or drop.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from typing import Any, BinaryIO, Callable, Iterator, Optional, Protocol

import msgspec
import numpy as np
import orjson
from isal import igzip

from .reduction import Plan

STRING_LIMIT = 256
LIST_LIMIT = 32
KEPT_ARG_KEYS = ("bind_id", "flow_in", "flow_out")
SUMMARY_CAT = "tb_reduce.summary"
_any = msgspec.json.Decoder()


def dumps(value: Any) -> bytes:
    """orjson, with the stdlib as fallback for what it refuses (ints over 64 bits)."""
    try:
        return orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def cut_value(v: Any) -> tuple[Any, bool]:
    """Level 2: strings to 256 characters, lists to 32 items, at any depth."""
    if isinstance(v, str):
        return (v[:STRING_LIMIT] + "…", True) if len(v) > STRING_LIMIT else (v, False)
    if isinstance(v, list):
        cut = len(v) > LIST_LIMIT
        out = []
        for item in v[:LIST_LIMIT]:
            item, c = cut_value(item)
            cut |= c
            out.append(item)
        return out, cut
    if isinstance(v, dict):
        cut = False
        d = {}
        for k, item in v.items():
            d[k], c = cut_value(item)
            cut |= c
        return d, cut
    return v, False


_LONG_RUN = re.compile(rb'[^"]{%d}' % (STRING_LIMIT + 1))


def _may_need_cut(raw: bytes) -> bool:
    """Cheap, conservative: could any string exceed 256 characters or any list 32 items?

    A longer string needs 257 bytes without a quote (or holds an escaped quote); a
    longer list needs at least 32 commas and a "[".
    """
    if len(raw) > STRING_LIMIT and (b'\\"' in raw or _LONG_RUN.search(raw)):
        return True
    return b"[" in raw and raw.count(b",") >= LIST_LIMIT


def transform(raw: bytes, level: int) -> bytes:
    """The event as written at `level` (its original bytes when nothing changes)."""
    if level <= 1 or b'"args"' not in raw:
        return raw
    if level == 2 and not _may_need_cut(raw):
        return raw
    ev = _any.decode(raw)
    if not isinstance(ev, dict) or not isinstance(ev.get("args"), (dict, list)):
        return raw
    if ev.get("ph") == "M":  # metadata is kept unchanged at every level (G6)
        return raw
    if level == 2:
        args, cut = cut_value(ev["args"])
        if not cut:
            return raw
        if isinstance(args, dict):
            args["tb_reduce.cut"] = True
        ev["args"] = args
        return dumps(ev)
    if ev.get("ph") == "C":
        return raw
    args = ev.pop("args")
    kept = {k: args[k] for k in KEPT_ARG_KEYS if isinstance(args, dict) and k in args}
    if kept:
        ev["args"] = kept
    return dumps(ev)


def summary_events(plan: Plan, tracks: list, names: list) -> list[bytes]:
    """The summary slices as JSON, by string formatting: a zoomed window can hold
    tens of thousands, and names and tracks repeat, so their JSON is made once.
    Times are written by `repr`, the shortest text that reads back as the number."""
    s = plan.summaries
    if not len(s):
        return []
    top_name, top_count = s.top_name.tolist(), s.top_count.tolist()
    name_json = {n: dumps(names[n]).decode() for n in set(top_name)}
    pairs = [f"[{name_json[n]},{c}]" for n, c in zip(top_name, top_count)]
    offsets = s.top_offsets.tolist()
    firsts = [top_name[a] for a in offsets[:-1]]
    label_json = {n: dumps(_name(names[n])).decode()[:-1] for n in set(firsts)}  # without the closing quote
    track_json = {}
    for trk in set(s.track.tolist()):
        pid, tid = tracks[trk]
        track_json[trk] = f'"pid":{dumps(pid).decode()},"tid":{dumps(tid).decode()}'
    out = []
    rows = zip(s.track.tolist(), s.start.tolist(), s.end.tolist(), s.count.tolist(), firsts, offsets, offsets[1:])
    for trk, start, end, count, first, a, b in rows:
        more = f' (+{count - 1} more)"' if count > 1 else '"'
        out.append(
            f'{{"ph":"X","cat":"{SUMMARY_CAT}","name":{label_json[first]}{more},{track_json[trk]},"ts":{start!r},'
            f'"dur":{end - start!r},"args":{{"count":{count},"top":[{",".join(pairs[a:b])}]}}}}'.encode()
        )
    return out


def _name(n: Any) -> str:
    return "(unnamed)" if n is None else str(n)


class Sink:
    """Uncompressed-byte counting writer; gzip (mtime 0, no file name) when asked."""

    def __init__(self, fileobj: BinaryIO, gzip: bool) -> None:
        self._file = fileobj
        self._gz = igzip.IGzipFile(filename="", mode="wb", fileobj=fileobj, mtime=0, compresslevel=2) if gzip else None
        self.bytes = 0

    def write(self, data: bytes) -> None:
        self.bytes += len(data)
        (self._gz or self._file).write(data)

    def close(self) -> None:
        if self._gz is not None:
            self._gz.close()


class EventSource(Protocol):
    """Where the JSON of input events comes from, by index (one per input format)."""

    def events(self, indices: np.ndarray, level: int, progress: Optional[Callable[[int, int], None]] = None,
               ) -> Iterator[list[bytes]]:
        """The JSON of the events at sorted `indices`, in order, in blocks."""
        ...


def write_trace(
    source: EventSource,
    plan: Plan,
    tracks: list,
    names: list,
    metadata: dict,
    tb_reduce: dict,
    sink: Sink,
    progress: Optional[Callable[[int, int], None]] = None,
    args_level: Optional[int] = None,
) -> int:
    """Stream the reduced trace into `sink`; returns the number of events written.

    `args_level` treats args as that level does (default: the plan's level); a
    view that fetches args on demand asks for 3 (args dropped) at any level.
    """
    written = 0
    sink.write(b'{"traceEvents":[\n')
    sep = b""
    args_level = plan.level if args_level is None else max(args_level, plan.level)
    for raws in source.events(plan.keep, args_level, progress):
        parts = [transform(raw, args_level) for raw in raws]
        sink.write(sep + b",\n".join(parts))
        sep = b",\n"
        written += len(parts)
    summaries = summary_events(plan, tracks, names)
    if summaries:
        sink.write(sep + b",\n".join(summaries))
        written += len(summaries)
    sink.write(b"\n]")
    for key, value in metadata.items():
        if key != "tb_reduce":
            sink.write(b",\n" + dumps(key) + b":" + dumps(value))
    tb_reduce["output"]["events"] = written
    sink.write(b',\n"tb_reduce":' + dumps(tb_reduce) + b"}\n")
    return written


def atomic_output(path: str) -> tuple[BinaryIO, Callable[[bool], None]]:
    """A temp file beside `path`, renamed over it on success, removed on failure."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tb-reduce-", suffix=".part", dir=directory)
    f = os.fdopen(fd, "wb")

    def finish(ok: bool) -> None:
        f.close()
        if ok:
            os.replace(tmp, path)
        else:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass

    return f, finish
