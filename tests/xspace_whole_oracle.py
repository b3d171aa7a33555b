"""The XSpace reader as it was before it walked the file itself: upb parses the whole
file (every line's events as bytes), then every line is decoded at once and the columns
are assembled in memory. Kept as the oracle the streaming reader (`formats/xspace.py`)
must equal, table for table and byte for byte, on every XSpace the tests have.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
from google.protobuf.message import DecodeError

from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.formats import xspace_shape
from tb_reduce_plugin.formats.sources import TraceStream
from tb_reduce_plugin.formats.xspace import (
    _CHUNK,
    _COUNTER_BYTES,
    _DECODE_BYTES_PER_EVENT,
    _PAD,
    _THREADS,
    COUNTERS_LINE,
    EVENT_FIELDS,
    XSpaceTrace,
    _Charges,
    _counter_values,
    _File,
    _Line,
    _meta,
    _Plane,
    _plane_of,
    _plane_pids,
    _space_info,
    _step_markers,
    _timestamps,
    as_text,
    decode_event_columns,
    stats_dict,
)
from tb_reduce_plugin.formats.xspace_schema import XSpaceIndexView
from tb_reduce_plugin.model.table import NAN, PH_C, PH_M, PH_X, EventTable, Interner


def decode_lines(lines: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """`decode_event_columns` for many lines, in chunks of events decoded on threads.

    Events are independent and numpy releases the GIL in the calls that do the
    work, so chunks run in parallel whatever the layout (one huge line or many).
    """
    tasks = [(k, lo) for k, (_, starts, _) in enumerate(lines) for lo in range(0, len(starts), _CHUNK)]

    def run(task: tuple[int, int]) -> dict[str, np.ndarray]:
        k, lo = task
        buf, starts, ends = lines[k]
        return decode_event_columns(buf, starts[lo:lo + _CHUNK], ends[lo:lo + _CHUNK])

    workers = min(_THREADS, len(tasks))
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            parts = list(pool.map(run, tasks))
    else:
        parts = [run(t) for t in tasks]
    out: list[dict[str, np.ndarray]] = []
    for k in range(len(lines)):
        mine = [parts[i] for i, t in enumerate(tasks) if t[0] == k]
        if not mine:
            out.append({name: np.zeros(0, dtype=np.int64) for name in EVENT_FIELDS.values()})
        else:
            out.append({name: np.concatenate([m[name] for m in mine]) for name in EVENT_FIELDS.values()})
    return out



class _Columns:
    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in ("ph", "ts", "dur", "track", "name")}

    def add(self, ph: np.ndarray, ts: np.ndarray, dur: np.ndarray, track: np.ndarray, name: np.ndarray) -> None:
        for key, arr in zip(("ph", "ts", "dur", "track", "name"), (ph, ts, dur, track, name)):
            self.parts[key].append(arr)

    def column(self, key: str, dtype: Any) -> np.ndarray:
        parts = self.parts.pop(key)
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)



def read_xspace_whole(stream: TraceStream, account: Any = None) -> XSpaceTrace:
    """Parse a whole XSpace (protobuf cannot be streamed) into the event model.

    With an `account` (see `budget`), every step charges what it is about to hold:
    the file's bytes as they are read, what upb will build (bounded before it builds
    it, by `xspace_shape.scan`: the structures above the events are counted, the
    events bounded), and the per-event work of decoding them.
    """
    charges = _Charges(account)
    chunks, total = [], 0
    while True:
        block = stream.read()
        if not block:
            break
        charges.hold(len(block), "reading the XSpace")
        chunks.append(block)
        total += len(block)
    charges.hold(total + _PAD, "reading the XSpace")  # the join, while its parts still exist
    chunks.append(bytes(_PAD))
    data = b"".join(chunks)
    del chunks
    charges.give(total)
    base = os.path.basename(stream.path)
    try:
        shape = xspace_shape.scan(data, len(data) - _PAD)
    except TraceError as exc:
        reason = str(exc)
        if reason.startswith(xspace_shape.CORRUPT):  # the words upb's own refusal gets below
            raise TraceError(f"not a valid XSpace: {base}: {reason[len(xspace_shape.CORRUPT):]}") from None
        raise TraceError(f"{base}: {reason}") from None
    parse = shape.parse_bytes()
    charges.hold(parse, "parsing the XSpace")
    try:
        space = XSpaceIndexView.FromString(memoryview(data)[:-_PAD])
    except DecodeError as exc:
        raise TraceError(f"not a valid XSpace: {base}: {exc}") from None
    events = sum(len(line.events) for plane in space.planes for line in plane.lines)
    charges.hold(_DECODE_BYTES_PER_EVENT * events, "decoding its events")
    file = _File(data)
    gathered = _gather(space, file)
    del space  # upb's copy of every event: freed before the decoding allocates
    charges.give(parse)
    return _build(gathered, base, charges)



@dataclass
class _Gathered:
    """What the conversion needs from upb's parse, as plain values (so it can be freed)."""

    names: Interner
    meta_json: list[bytes]
    meta_rows: list[tuple[tuple, str]]
    # per line with events: (timestamp_ns, plane, pid, tid, counter?, plane's metadata ids, their name ids)
    lines: list[tuple[int, _Plane, int, int, bool, np.ndarray, np.ndarray]]
    located: list[tuple[bytes, np.ndarray, np.ndarray, np.ndarray]]
    space_info: dict
    planes: int
    process_names: dict = field(default_factory=dict)  # pid -> plane name
    thread_names: dict = field(default_factory=dict)  # (pid, tid) -> line name


def _gather(space: Any, file: _File) -> _Gathered:
    names = Interner()
    meta_json: list[bytes] = []
    meta_rows: list[tuple[tuple, str]] = []
    planes_info: list[dict] = []
    planes = list(space.planes)
    plane_names = [as_text(p.name) for p in planes]
    pids = _plane_pids(plane_names, [p.id for p in planes])
    pending: list[tuple[int, _Plane, int, int, bool, np.ndarray, np.ndarray]] = []
    process_names: dict[int, str] = {}
    thread_names: dict[tuple[int, int], str] = {}
    located: list[tuple[bytes, np.ndarray, np.ndarray, np.ndarray]] = []
    for plane, plane_name, pid in zip(planes, plane_names, pids):
        stat_names = {k: as_text(v.name) for k, v in plane.stat_metadata.items()}
        info: dict[str, Any] = {"name": plane_name, "id": plane.id}
        pstats = stats_dict(plane.stats, stat_names)
        if pstats:
            info["stats"] = pstats
        full = [ln for ln in plane.lines if len(ln.events)]
        if full:
            info["pid"] = pid
        planes_info.append(info)
        if not full:
            continue
        pl, pl_ids, pl_names = _plane_of(plane, plane_name, pid, stat_names, names)  # the same mapping
        meta_rows.append(((pid, None), "process_name"))
        meta_json.append(_meta("process_name", pid, None, {"name": plane_name}))
        process_names[pid] = plane_name
        meta_rows.append(((pid, None), "process_sort_index"))
        meta_json.append(_meta("process_sort_index", pid, None, {"sort_index": pid}))
        used_tids: set[int] = set()
        for rank, ln in enumerate(full):
            tid = (ln.display_id or ln.id) & 0xFFFFFFFF
            while tid in used_tids:
                tid = (tid + 1) & 0xFFFFFFFF
            used_tids.add(tid)
            counter = ln.name == COUNTERS_LINE.encode()
            if not counter:
                meta_rows.append(((pid, tid), "thread_name"))
                thread_names[(pid, tid)] = as_text(ln.display_name or ln.name)
                meta_json.append(_meta("thread_name", pid, tid, {"name": thread_names[(pid, tid)]}))
                meta_rows.append(((pid, tid), "thread_sort_index"))
                meta_json.append(_meta("thread_sort_index", pid, tid, {"sort_index": rank + 1}))
            pending.append((ln.timestamp_ns, pl, pid, tid, counter, pl_ids, pl_names))
            located.append(file.payloads(ln.events))
    return _Gathered(names, meta_json, meta_rows, pending, located, _space_info(space, planes_info), len(planes),
                     process_names, thread_names)


def _build(g: _Gathered, base: str, charges: Optional[_Charges] = None) -> XSpaceTrace:
    names, meta_json, meta_rows = g.names, g.meta_json, g.meta_rows
    tracks = Interner()
    cols = _Columns()
    lines: list[_Line] = []
    c_event: list[int] = []
    c_series: list[tuple] = []
    c_value: list[float] = []
    steps: list[tuple[int, float]] = []
    n_meta = len(meta_json)
    unknown_name = None
    first = n_meta
    line_first: list[int] = []
    payload_bytes = 0
    decoded = decode_lines([(buf, starts, ends) for _, starts, ends, buf in g.located])
    for (timestamp_ns, pl, pid, tid, counter, pl_ids, pl_names), (data, starts, ends, _), ev in zip(
            g.lines, g.located, decoded):
        n = len(starts)
        payload_bytes += int((ends - starts).sum())
        mids = ev["metadata_id"]
        at = np.searchsorted(pl_ids, mids)
        found = at < len(pl_ids)
        found[found] = pl_ids[at[found]] == mids[found]
        name_ids = np.empty(n, dtype=np.int32)
        name_ids[found] = pl_names[at[found]]
        if not found.all():
            if unknown_name is None:
                unknown_name = int(names.ids_of([""])[0])
            name_ids[~found] = unknown_name
        track = int(tracks.ids_of([(pid, tid)])[0])
        ts = _timestamps(timestamp_ns, ev["offset_ps"])
        dur = ev["duration_ps"].astype(np.float64) / 1e6
        line = _Line(first, pl, pid, tid, counter, data, starts, ends)
        if counter:
            dur[:] = NAN
            if charges is not None:
                charges.hold(_COUNTER_BYTES * n, "its counter samples")
            for k in range(n):
                for key, value in _counter_values(line, k):
                    c_event.append(first + k)
                    c_series.append((pid, names.values[name_ids[k]], None, key))
                    c_value.append(value)
        else:
            steps.extend(_step_markers(line, mids, first))
        cols.add(np.full(n, PH_C if counter else PH_X, dtype=np.uint8), ts, dur,
                 np.full(n, track, dtype=np.int32), name_ids)
        lines.append(line)
        line_first.append(first)
        first += n
    meta_tracks = tracks.ids_of([r[0] for r in meta_rows]) if meta_rows else np.zeros(0, np.int32)
    meta_names = names.ids_of([r[1] for r in meta_rows]) if meta_rows else np.zeros(0, np.int32)
    cols.parts["ph"].insert(0, np.full(n_meta, PH_M, dtype=np.uint8))
    cols.parts["ts"].insert(0, np.full(n_meta, NAN))
    cols.parts["dur"].insert(0, np.full(n_meta, NAN))
    cols.parts["track"].insert(0, meta_tracks.astype(np.int32))
    cols.parts["name"].insert(0, meta_names.astype(np.int32))
    series = Interner()
    total = first
    est = 120 + 3 * payload_bytes / max(total - n_meta, 1)
    table = EventTable(
        ph=cols.column("ph", np.uint8),
        ts=cols.column("ts", np.float64),
        dur=cols.column("dur", np.float64),
        track=cols.column("track", np.int32),
        name=cols.column("name", np.int32),
        flow_key=np.full(total, -1, dtype=np.int32),
        bind_enclosing=np.zeros(total, dtype=bool),
        scope=np.zeros(total, dtype=np.uint8),
        tracks=list(tracks.values),
        names=list(names.values),
        counter_event=np.asarray(c_event, dtype=np.int64),
        counter_series=series.ids_of(c_series).astype(np.int64) if c_series else np.zeros(0, np.int64),
        counter_value=np.asarray(c_value, dtype=np.float64),
        series=list(series.values),
        block_events=[n_meta, total - n_meta],
        block_bytes=[sum(map(len, meta_json)), int(est * (total - n_meta))],
        step_event=np.asarray([e for e, _ in steps], dtype=np.int64),
        step_value=np.asarray([v for _, v in steps], dtype=np.float64),
        process_names=dict(g.process_names),
        thread_names={int(tracks.ids_of([key])[0]): name for key, name in g.thread_names.items()},
    )
    metadata = {"displayTimeUnit": "ns", "xspace": g.space_info}
    return XSpaceTrace(table, metadata, meta_json, lines, np.asarray(line_first, dtype=np.int64),
                       extra={"planes": g.planes, "lines": len(lines), "file": base})


