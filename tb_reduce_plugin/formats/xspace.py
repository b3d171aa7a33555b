"""XSpace (`*.xplane.pb`) input: XProf, JAX and TensorFlow profiles into the event model.

Mapping (docs/SEMANTICS.md, "XSpace"): one process per non-empty plane, one thread
per line, event name = metadata display_name (the full name then goes to
`args.long_name`, as XProf does) else name; ts µs = (line.timestamp_ns × 1000 +
offset_ps) / 10⁶, dur = duration_ps / 10⁶; stats become args (metadata stats first,
then the event's own), `ref_value` resolved to the referenced name; a `_counters_`
line becomes counter events. pids follow XProf where they can (host planes 701+,
GPU/TPU planes 1 + plane id), tids are the line's display id cut to 32 bits, so a
view lines up with what XProf and JAX's own `trace.json.gz` show.

Text (names, string stats, hostnames) is read as bytes and decoded with the one
rule every input follows here, `bytes.decode("utf-8", "replace")`: upb would refuse
the whole file at one invalid byte. An event whose stats do not parse is written
with `"args": {"tb_reduce.error": reason}` rather than failing the trace.

Memory and speed (`read_xspace`): upb would parse the file whole into a Python object
per event (2-5x the file), so it is given only what lies above the events (each plane's
metadata and stats, each line's own fields); each line's events are found in place
(`_scan.pb_fields`, or upb line by line in the pure build) and `decode_event_columns`
decodes their fields a chunk at a time (`_scan.pb_event_columns`, or numpy), into
columns that a server's parse writes to its spill folder. The file's bytes are kept (in
that folder, mapped, or in memory), so the args of any kept event are decoded on demand
without reading the file again. Writing does the
same by chunks of a line's kept events (`XSpaceTrace.events`): their stats decoded
in numpy (`_walk`), their values formatted by kind in bulk, the JSON joined once,
byte for byte what `_event` makes of each event alone (and `_event` writes the few
events the chunk path does not vouch for). Level 0 of 2.3 M events: 5 s, not 16.
"""

from __future__ import annotations

import mmap
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Optional

import numpy as np
import orjson
from google.protobuf.message import DecodeError

from ..errors import TraceError
from ..model.mapped import ColumnFiles, SpillFailed, map_bytes, map_in_place
from ..model.table import NAN, PH_C, PH_M, PH_X, SPILL_DTYPES, SPILL_FILES, ArgsPolicy, EventTable, Interner, step_number
from ..native import scanner_module
from . import Parsed, ReadOptions, xspace_shape
from .sources import TraceStream
from .xspace_schema import (
    XEventScalarsView,
    XEventView,
    XLineIndexView,
    XLineView,
    XPlaneIndexView,
    XSpaceIndexView,
)

COUNTERS_LINE = "_counters_"
HOST_PID = 701
FIRST_DEVICE_PID, LAST_DEVICE_PID = 1, 500
OTHER_PID = 1001
_PAD = 32  # zero bytes after the payloads: every varint read ends inside the buffer
_BIG_BYTES = 32
_CHUNK = 1 << 18  # events decoded per task
_WRITE_CHUNK = 1 << 15  # events formatted per block written
ERROR_KEY = "tb_reduce.error"
STEP_STAT = "step_num"  # what `StepTraceAnnotation` records on its TraceMe
_MAX_STEP_PROBES = 20_000  # distinct event kinds per line looked at for step markers
_MAX_STATS = 100_000  # per event: more is no profiler's output, and parsing them would stall a request
_THREADS = min(4, os.cpu_count() or 1)


# ---------------------------------------------------------------- wire decoding


_STOP_BITS = np.uint64(0x8080808080808080)
_ONE = np.uint64(1)
_SEVEN_BITS = [np.uint64(0x7F << (7 * k)) for k in range(8)]


def _windows(buf: np.ndarray) -> np.ndarray:
    """The little-endian uint64 starting at every byte of `buf` (an unaligned view: no copy)."""
    return np.ndarray(shape=(len(buf) - 7,), dtype="<u8", buffer=buf, strides=(1,))


def _varints(buf: np.ndarray, pos: np.ndarray, windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint at each position, as uint64, and the position after it.

    Reads 8 bytes at each position as one little-endian word: the first byte with
    its top bit clear ends the varint (its bit is the lowest of ~w & 0x80…80, and
    the float exponent of that bit says which byte it is), and the 7-bit groups are
    packed with eight shifts over the whole array. Varints longer than 8 bytes
    (negative int64s, values ≥ 2⁵⁶) are rare and take a byte-by-byte path.
    """
    first = buf[pos]
    if not (first & 0x80).any():  # small ids and lengths: one byte each
        return first.astype(np.uint64), pos + 1
    words = windows[pos]
    stop = ~words & _STOP_BITS
    low = stop & (~stop + _ONE)  # lowest set bit, 2^(8k+7); 0 when no byte in 8 ends the varint
    exponent = low.astype(np.float64).view(np.int64) >> 52  # 1023 + 8k + 7 (0 for no bit)
    end = pos + ((exponent - 1030) >> 3) + 1
    words &= (low << _ONE) - _ONE
    val = words & _SEVEN_BITS[0]
    for k in range(1, 8):
        val |= (words >> np.uint64(k)) & _SEVEN_BITS[k]
    long = np.flatnonzero(low == 0)
    if long.size:
        val[long], end[long] = _long_varints(buf, pos[long])
    return val, end


def _long_varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = len(pos)
    val = np.zeros(n, dtype=np.uint64)
    end = pos.copy()
    todo = np.arange(n)
    for k in range(10):
        b = buf[end[todo]]
        val[todo] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        end[todo] += 1
        todo = todo[b >= 0x80]
        if not todo.size:
            return val, end
    raise TraceError("corrupt XSpace: a varint longer than 10 bytes")


# What the index needs; other fields (stats, num_occurrences) are read per kept event.
EVENT_FIELDS = {1: "metadata_id", 2: "offset_ps", 3: "duration_ps"}
_VALID_WIRE = np.array([True, True, True, False, False, True, False, False])
_VECTOR_ROUNDS, _FEW_EVENTS = 64, 64  # past this many rounds, this few events left are read by upb
_MAX_FIELD = max(EVENT_FIELDS)


def decode_event_columns(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> dict[str, np.ndarray]:
    """Decode the scalar fields of many serialized `XEvent`s at once.

    `buf` holds the payloads (plus `_PAD` zero bytes), event k in
    `buf[starts[k]:ends[k]]`. Each round reads one field of every event not yet
    finished, so the rounds number the most fields any event has (stats are
    skipped over by their length), and each round is a few numpy calls on the
    events still active. Fields may come in any order, unknown fields are skipped,
    and an event whose fields overrun its bytes is reported as corrupt rather than
    read past.

    A round costs tens of µs however few events are left, so the last few events
    of a line with a giant one (a million stats) would take a round per field: once
    few remain after many rounds, upb reads each of those whole in C instead
    (`_scalars_by_upb`).

    Natively (`_scan.pb_event_columns`) each event is walked in turn, without the rounds'
    gathers (the 2.1 M events of a JAX profile: 0.24 -> 0.05 CPU-s); any event not plainly
    well formed, or with more fields than the rounds' bound, leaves the batch to the rounds,
    whose values and errors stand (the pure path, and the tests' reference).
    """
    n = len(starts)
    # One row per field number up to 3; other numbers land in row 0 and are ignored.
    rows = np.zeros((_MAX_FIELD + 1, n), dtype=np.int64)
    module = scanner_module()
    if module is not None and n:  # one event at a time in C: the rounds' gathers were ~0.24 CPU-s at 2 M events
        s64 = np.ascontiguousarray(starts, dtype=np.int64)
        e64 = np.ascontiguousarray(ends, dtype=np.int64)
        if module.pb_event_columns(buf, s64, e64, rows[1], rows[2], rows[3]) == 0:
            return {name: rows[num] for num, name in EVENT_FIELDS.items()}
        rows[:] = 0  # not plainly well formed: the rounds' verdict stands
    win = _windows(buf)
    live = np.flatnonzero(starts < ends)
    p, end = starts[live].astype(np.int64), ends[live].astype(np.int64)
    rounds = 0
    while live.size:
        rounds += 1
        if rounds > _VECTOR_ROUNDS and live.size <= _FEW_EVENTS:
            _scalars_by_upb(buf, starts, ends, live, rows)
            break
        tag = buf[p]
        if (tag & 0x80).any():  # field numbers over 15: rare
            wide, p = _varints(buf, p, win)
            number, wire = (wide >> np.uint64(3)).astype(np.int64), (wide & np.uint64(7)).astype(np.int64)
        else:
            number, wire = tag >> 3, tag & 7
            p = p + 1
        if (~_VALID_WIRE[wire] | (number == 0)).any():
            raise TraceError("corrupt XSpace: an event holds an invalid field tag")
        row = np.where(number <= _MAX_FIELD, number, 0)
        if not wire.any():  # every field of this round is a varint
            val, p = _varints(buf, p, win)
            rows[row, live] = val.view(np.int64)
        else:
            varint = np.flatnonzero(wire == 0)
            if varint.size:
                val, p[varint] = _varints(buf, p[varint], win)
                rows[row[varint], live[varint]] = val.view(np.int64)
            sized = np.flatnonzero(wire == 2)
            if sized.size:
                length, after = _varints(buf, p[sized], win)
                if (length > np.uint64(1 << 40)).any():
                    raise TraceError("corrupt XSpace: a field longer than its event")
                p[sized] = after + length.astype(np.int64)
            p[wire == 1] += 8
            p[wire == 5] += 4
        left = end - p
        if (left < 0).any():
            raise TraceError("corrupt XSpace: an event's fields run past its end")
        more = left > 0
        if not more.all():
            live, p, end = live[more], p[more], end[more]
    return {name: rows[num] for num, name in EVENT_FIELDS.items()}  # views: rows stays alive, 25 % unused


def _scalars_by_upb(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, live: np.ndarray,
                    rows: np.ndarray) -> None:
    """The scalar fields of the few events `live`, each parsed whole by upb.

    `XEventScalarsView` declares only fields 1-3, so stats stay unknown fields (raw
    bytes, never objects) and a field of another wire type is skipped, as in the
    rounds; the whole event is read again, so the last value of a field wins.
    """
    for k in live.tolist():
        try:
            ev = XEventScalarsView.FromString(buf[starts[k]:ends[k]].tobytes())
        except DecodeError:
            raise TraceError("corrupt XSpace: an event's fields do not parse") from None
        rows[1, k], rows[2, k], rows[3, k] = ev.metadata_id, ev.offset_ps, ev.duration_ps


# ---------------------------------------------------------------- stats


def as_text(raw: bytes) -> str:
    """A `string` field read as bytes (`xspace_schema`), as text: the one rule."""
    return raw.decode("utf-8", "replace")


def _stat_value(stat: Any, stat_names: dict[int, str]) -> Any:
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":
        return stat_names.get(stat.ref_value, f"stat {stat.ref_value}")
    if kind == "bytes_value":
        raw = stat.bytes_value
        return raw.hex() if len(raw) <= _BIG_BYTES else f"<{len(raw)} bytes>"
    if kind == "str_value":
        return as_text(stat.str_value)
    return getattr(stat, kind)


def parse_event(payload: bytes) -> tuple[Any, str]:
    """One event's full message (`XEventView`), or None and why not.

    The index decodes only an event's scalar fields, so damaged stats surface
    here, for one kept event: they must mark that event, not fail the whole trace.
    A giant event is not parsed at all: each stat costs a 0x22 tag byte, so the
    count of those bytes bounds the stats at C speed.
    """
    if payload.count(b"\x22") > _MAX_STATS:
        return None, "event has too many stats to decode"
    try:
        return XEventView.FromString(payload), ""
    except DecodeError:
        return None, "corrupt XSpace event: its stats do not parse"


def stats_dict(stats: Any, stat_names: dict[int, str], into: Optional[dict] = None) -> dict:
    """XStats as args: keys are the stat metadata names, later stats win."""
    out = {} if into is None else into
    for st in stats:
        out[stat_names.get(st.metadata_id, f"stat {st.metadata_id}")] = _stat_value(st, stat_names)
    return out


def _number(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    x = float(v)
    return x if x == x and abs(x) != float("inf") else None


# ---------------------------------------------------------------- the trace


@dataclass
class _Plane:
    name: str
    pid: int
    stat_names: dict[int, str]
    md_args: dict[int, dict]  # metadata id -> args every event of it carries


@dataclass
class _Line:
    first: int  # index of the line's first event in the table
    plane: _Plane
    pid: int
    tid: int
    counter: bool
    data: bytes  # the file, or (when events are not laid out as usual) the payloads back to back
    starts: np.ndarray  # event k is data[starts[k]:ends[k]]
    ends: np.ndarray
    buf: Optional[np.ndarray] = None  # `data` as uint8 with `_PAD` zeros after, where it is not that itself


@dataclass
class XSpaceTrace:
    """What `index_file` keeps of an XSpace: the table and the way back to any event."""

    table: EventTable
    metadata: dict
    meta_json: list[bytes]
    lines: list[_Line]
    line_first: np.ndarray
    extra: dict = field(default_factory=dict)
    # The file's bytes and the events' positions (mapped from a spill folder, when the
    # parse had one: `TraceIndex.arrays` has `mapped.shrunk` check them like columns).
    arrays: list = field(default_factory=list, repr=False)
    # The file's bytes are the file itself, mapped where it lies (`mapped.map_in_place`): a
    # store keeps no copy of them, and maps the file again when it reopens the index.
    in_place: bool = False
    _name_json: dict = field(default_factory=dict, repr=False)  # name id -> its JSON, made once
    _formats: dict = field(default_factory=dict, repr=False)  # id(plane) -> its `_PlaneFormat`
    _text_json: dict = field(default_factory=dict, repr=False)  # short str stat bytes -> JSON (bounded)

    def events(self, indices: np.ndarray, args: ArgsPolicy = ArgsPolicy.KEEP,
               progress: Optional[Callable[[int, int], None]] = None) -> Iterator[list[bytes]]:
        """The JSON of the events at sorted `indices`, line by line, in chunks.

        Args that `args` drops (`ArgsPolicy.DROP`) are not decoded (counters keep
        theirs: a counter's args are its values); the writer trims the rest.

        A chunk holds one line's events, at most `_WRITE_CHUNK` of them, formatted
        together (`_full_events`, `_bare_events`): what is held at once is a chunk's
        worth, whatever the trace's size (millions of events at level 0), and nothing
        is made per kept event beyond the chunk.
        """
        drop = args is ArgsPolicy.DROP
        indices = np.asarray(indices, dtype=np.int64)
        n_meta = len(self.meta_json)
        cut = int(np.searchsorted(indices, n_meta))
        if cut:
            yield [self.meta_json[i] for i in indices[:cut].tolist()]
        rest = indices[cut:]
        if not rest.size:
            return
        begins = np.searchsorted(rest, self.line_first).tolist()  # where each line's kept events begin
        done = 0
        for line, a, b in zip(self.lines, begins, begins[1:] + [len(rest)]):
            for lo in range(a, b, _WRITE_CHUNK):
                ids = rest[lo:min(lo + _WRITE_CHUNK, b)]
                if line.counter:
                    out = [self._event(line, i, int(i - line.first), drop) for i in ids.tolist()]
                elif drop:
                    out = self._bare_events(line, ids)
                else:
                    out = self._full_events(line, ids)
                if len(ids):  # read: their pages go (a mapping's), as the decoding's did
                    _drop_pages(line.data, int(line.starts[ids[0] - line.first]), int(line.ends[ids[-1] - line.first]))
                done += len(out)
                if progress is not None:
                    progress(done, len(rest))
                yield out
            if b > a:  # and the pages the kernel read around them
                _drop_pages(line.data, int(line.starts[0]), int(line.ends[-1]))

    def _bare_events(self, line: _Line, ids: np.ndarray) -> list[bytes]:
        """X events without args, the chunk formatted at once (`_prefixes`, `_joined`).

        Times are written as `repr` writes them, as this path always has: the shortest
        text that reads back as the same number, like orjson's, but with an exponent
        below 1e-4 and two exponent digits.
        """
        n = len(ids)
        parts: list[Any] = [None] * (2 * n)
        parts[0::2] = self._prefixes(line, ids, repr_floats=True)
        parts[1::2] = self._name_pieces(ids, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool), None)
        return _joined(parts, n)

    def _full_events(self, line: _Line, ids: np.ndarray) -> list[bytes]:
        """X events with their args: `_event` for each, byte for byte, formatted by chunk.

        The events' fields and stats are decoded for the whole chunk at once (`_walk`,
        `_ChunkStats`), each value is formatted by kind in bulk (numbers by orjson from
        numpy arrays, text through bounded caches), and the pieces are joined once. An
        event this does not vouch for (`_ChunkStats.odd`: damaged or unusual stats, a
        key its metadata's args hold too, a giant event) goes through `_event`, in its
        place.
        """
        try:
            return self._fast_events(line, ids)
        except TraceError:  # whatever the chunk path refuses: each event alone says what is wrong with it
            return [self._event(line, i, int(i - line.first), False) for i in ids.tolist()]

    def _fast_events(self, line: _Line, ids: np.ndarray) -> list[bytes]:
        n = len(ids)
        ks = ids - line.first
        st = _ChunkStats(line, line.starts[ks], line.ends[ks])
        fmt = self._plane_format(line.plane)
        good = st.settle(fmt)
        odd = st.odd
        event = st.stat_event[good]
        ns = np.bincount(event, minlength=n)
        has_md = fmt.has_md(st.event_mid) & ~odd
        has_args = has_md | (ns > 0)
        # Pieces per event: head to '"name":', the name and what follows it ('}\n', or
        # ',"args":{' and the metadata's args), a key and a value per stat, then '}}\n'.
        count = np.where(has_args, 3 + 2 * ns, 2)
        count[odd] = 1
        off = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(count, out=off[1:])
        pieces = np.empty(int(off[-1]), dtype=object)
        ok = np.flatnonzero(~odd)
        _put(pieces, off[ok], self._prefixes(line, ids[ok], repr_floats=False))
        _put(pieces, off[ok] + 1, self._name_pieces(ids[ok], st.event_mid[ok], has_args[ok], fmt))
        pieces[off[1:][has_args] - 1] = _ARGS_END
        if good.size:
            rank = np.arange(len(event)) - np.searchsorted(event, event, side="left")
            pos = off[event] + 2 + 2 * rank
            pieces[pos] = st.key_pieces(fmt, (rank > 0) | has_md[event])
            pieces[pos + 1] = st.values(fmt, self._text_json)
        for k in np.flatnonzero(odd).tolist():
            i = int(ids[k])
            pieces[off[k]] = self._event(line, i, i - line.first, False) + _NL
        return _joined(pieces.tolist(), n)

    def _prefixes(self, line: _Line, ids: np.ndarray, repr_floats: bool) -> list[bytes]:
        """`{"ph":"X","pid":…,"tid":…,"ts":…,"dur":…,"name":` of each event, at once.

        orjson writes the (ts, dur) pairs as one array, `[[ts,dur],[ts,dur]…]`, whose
        separators a few `bytes.replace` turn into the text around them.
        """
        if not len(ids):
            return []
        t = self.table
        head = b'{"ph":"X","pid":%d,"tid":%d,"ts":' % (line.pid, line.tid)
        pairs = np.empty((len(ids), 2), dtype=np.float64)
        pairs[:, 0], pairs[:, 1] = t.ts[ids], t.dur[ids]
        text = orjson.dumps(pairs, option=orjson.OPT_SERIALIZE_NUMPY)[2:-2]
        text = text.replace(b"],[", _NL).replace(b",", _DUR).replace(_NL, _NAME + _NL + head)
        out = (head + text + _NAME).split(_NL)
        if repr_floats:  # repr and orjson agree on 0 and on every finite value from 1e-4 to 1e16
            mag = np.abs(pairs)
            fix = (((mag < 1e-4) & (pairs != 0)) | ~(mag < 1e16)).any(axis=1)
            for k in np.flatnonzero(fix).tolist():
                ts, dur = pairs[k].tolist()
                out[k] = b"%s%r%s%r%s" % (head, ts, _DUR, dur, _NAME)
        return out

    def _name_pieces(self, ids: np.ndarray, mids: np.ndarray, has_args: np.ndarray,
                     fmt: Optional[_PlaneFormat]) -> list[bytes]:
        """Each event's name and what follows it: the event's end, or `,"args":{` and
        its metadata's args. Made once per distinct (name, metadata id, args or not)."""
        names = self.table.name[ids].astype(np.int64)
        umid, minv = np.unique(mids, return_inverse=True)
        code, inv = np.unique((minv * (1 << 31) + names) * 2 + has_args, return_inverse=True)
        cache, texts = self._name_json, self.table.names
        table = np.empty(len(code), dtype=object)
        for j, c in enumerate(code.tolist()):
            nid = (c >> 1) & ((1 << 31) - 1)
            js = cache.get(nid)
            if js is None:
                js = cache[nid] = _json(texts[nid])
            if c & 1:
                assert fmt is not None
                table[j] = js + _ARGS + fmt.md_text(int(umid[c >> 32]))
            else:
                table[j] = js + _END
        return table[inv].tolist()

    def _plane_format(self, plane: _Plane) -> _PlaneFormat:
        fmt = self._formats.get(id(plane))
        if fmt is None:
            fmt = self._formats[id(plane)] = _PlaneFormat(plane)
        return fmt

    def _event(self, line: _Line, i: int, k: int, drop_args: bool) -> bytes:
        t = self.table
        name = t.names[t.name[i]]
        ev: dict[str, Any] = {"ph": "C" if line.counter else "X", "pid": line.pid, "tid": line.tid,
                              "ts": float(t.ts[i])}
        if not line.counter:
            ev["dur"] = float(t.dur[i])
        ev["name"] = name
        if line.counter or not drop_args:
            args = self.args(line, k)
            if line.counter:  # its values (and the mark of a damaged event)
                args = {key: v for key, v in args.items() if _number(v) is not None or key == ERROR_KEY}
            if args:
                ev["args"] = args
        return _json(ev)

    def args(self, line: _Line, k: int) -> dict:
        ev, error = parse_event(line.data[line.starts[k]:line.ends[k]])
        if ev is None:
            return {ERROR_KEY: error}
        args = dict(line.plane.md_args.get(ev.metadata_id, {}))
        return stats_dict(ev.stats, line.plane.stat_names, args)


# ---------------------------------------------------------------- writing by chunk

# Pieces of an X event's JSON, as orjson writes the dict `_event` builds. No piece holds a
# newline (orjson escapes it in strings), so a chunk is joined with one after each event
# and split on them again (`_joined`): one C call each way instead of one per event.
_DUR, _NAME, _ARGS = b',"dur":', b',"name":', b',"args":{'
_END, _ARGS_END, _NL = b"}\n", b"}}\n", b"\n"
_TEXT_CACHE_MAX = 1 << 14  # short string stats remembered (`_src` file names, op names): bounded
_TEXT_CACHE_LEN = 256  # longer ones are formatted each time they come
# Wire type expected per field number (-1: unknown, skipped as upb skips it; the last entry
# stands for every larger number). XEvent: metadata_id, offset_ps, duration_ps and
# num_occurrences are varints, stats (4) sized. XStat: metadata_id (1) and the value oneof:
# double (2, fixed64), uint64 (3), int64 (4), str (5), bytes (6), ref (7).
_EVENT_WIRES = np.array([-1, 0, 0, 0, 2, 0, -1])
_STAT_WIRES = np.array([-1, 0, 1, 0, 0, 2, 2, 0, -1])
_DOUBLE, _UINT64, _INT64, _STR, _BYTES, _REF = 2, 3, 4, 5, 6, 7
_U3, _U7, _LOW32 = np.uint64(3), np.uint64(7), np.uint64(0xFFFFFFFF)
_MAX_FIELD_NUMBER = (1 << 29) - 1


def _walk(buf: np.ndarray, win: np.ndarray, starts: np.ndarray, ends: np.ndarray, wires: np.ndarray,
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every field of many protobuf messages (message k in `buf[starts[k]:ends[k]]`), flat.

    Returns (owner, number, value, end, odd): for each field, in each message's order,
    its message, its number, its value (uint64: a varint, the bits of a fixed64 or
    fixed32, or where a sized field's bytes start) and where a sized field's bytes end;
    and per message whether it holds anything this walk does not vouch to read as upb
    does: a known field (`wires`) of another wire type, a group, a tag upb refuses (field
    number 0 or past 2^29, more than 5 bytes), a varint past 10 bytes, a field running
    past the message, or more fields than `_VECTOR_ROUNDS` where few messages are left.
    Fields of unknown numbers are skipped, as upb skips them. Like `decode_event_columns`,
    a round reads one field of every message not yet finished.
    """
    n = len(starts)
    odd = np.zeros(n, dtype=bool)
    live = np.flatnonzero(starts < ends)
    p, end = starts[live].astype(np.int64), ends[live].astype(np.int64)
    top = len(wires) - 1
    got: list[tuple[np.ndarray, ...]] = []
    rounds = 0
    while live.size:
        rounds += 1
        if rounds > _VECTOR_ROUNDS and live.size <= _FEW_EVENTS:
            odd[live] = True
            break
        tag, after, bad = _varints_or_bad(buf, p, win)
        number = (tag >> _U3).astype(np.int64)
        wire = (tag & _U7).astype(np.int64)
        expected = wires[np.clip(number, 0, top)]
        # upb reads a tag as a varint of 5 bytes at most, with a field number below 2^29
        bad |= (after - p > 5) | (number <= 0) | (number > _MAX_FIELD_NUMBER) | ~_VALID_WIRE[wire]
        bad |= (expected >= 0) & (expected != wire)
        p = after
        value = np.zeros(len(live), dtype=np.uint64)
        vend = np.zeros(len(live), dtype=np.int64)
        k = np.flatnonzero(wire == 0)
        if k.size:
            value[k], p[k], long = _varints_or_bad(buf, p[k], win)
            bad[k] |= long
        k = np.flatnonzero(wire == 1)
        if k.size:
            value[k] = win[p[k]]
            p[k] += 8
        k = np.flatnonzero(wire == 5)
        if k.size:
            value[k] = win[p[k]] & _LOW32
            p[k] += 4
        k = np.flatnonzero(wire == 2)
        if k.size:
            length, after, long = _varints_or_bad(buf, p[k], win)
            room = end[k] - after
            over = long | (room < 0) | (length > np.maximum(room, 0).astype(np.uint64))
            bad[k[over]] = True
            value[k] = after.astype(np.uint64)
            vend[k] = np.where(over, after, after + length.astype(np.int64))
            p[k] = vend[k]
        bad |= p > end
        ok = ~bad
        got.append((live[ok], number[ok], value[ok], vend[ok]))
        odd[live[bad]] = True
        more = ok & (p < end)
        live, p, end = live[more], p[more], end[more]
    # A message read one field a round until it ended: its field r came in round r.
    count = np.zeros(n, dtype=np.int64)
    for who, _, _, _ in got:
        count[who] += 1
    first = np.zeros(n, dtype=np.int64)
    np.cumsum(count[:-1], out=first[1:])
    total = int(count.sum())
    owner = np.repeat(np.arange(n, dtype=np.int64), count)
    number, vend = np.empty(total, dtype=np.int64), np.empty(total, dtype=np.int64)
    value = np.empty(total, dtype=np.uint64)
    for r, (who, num, val, ve) in enumerate(got):
        at = first[who] + r
        number[at], value[at], vend[at] = num, val, ve
    return owner, number, value, vend, odd


def _varints_or_bad(buf: np.ndarray, pos: np.ndarray, win: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_varints`, and which of them run past 10 bytes (damaged: read as 0) instead of
    refusing them all: one damaged stat leaves its own event to `_event`, not its chunk."""
    try:
        val, end = _varints(buf, pos, win)
        return val, end, np.zeros(len(pos), dtype=bool)
    except TraceError:
        long = np.ones(len(pos), dtype=bool)
        for j in range(10):
            long &= buf[pos + j] >= 0x80
        val, end = np.zeros(len(pos), dtype=np.uint64), pos + 1
        val[~long], end[~long] = _varints(buf, pos[~long], win)
        return val, end, long


def _last_of(owner: np.ndarray, value: np.ndarray, n: int, odd: np.ndarray) -> np.ndarray:
    """Per message, the one `value` its `owner` gives (0 without); a message that gives
    two is marked odd (upb keeps the last: left to it)."""
    out = np.zeros(n, dtype=value.dtype)
    out[owner] = value
    odd |= np.bincount(owner, minlength=n) > 1
    return out


class _ChunkStats:
    """The fields and stats of a chunk of one line's events, decoded at once (`_walk`).

    `odd` marks the events the chunk path leaves to `_event` (upb, one by one): a giant
    event (which `parse_event` may refuse), unusual or damaged fields, a stat with two
    ids or values, and (`settle`) a stat whose key the event's metadata's args hold too.
    """

    def __init__(self, line: _Line, starts: np.ndarray, ends: np.ndarray) -> None:
        self.data = line.data
        buf = line.buf if line.buf is not None else np.frombuffer(line.data, dtype=np.uint8)
        win = _windows(buf)
        n = self.n = len(starts)
        self.odd = odd = (ends - starts) > _MAX_STATS
        owner, number, value, vend, bad = _walk(buf, win, starts, np.where(odd, starts, ends), _EVENT_WIRES)
        odd |= bad
        ids = number == 1
        self.event_mid = _last_of(owner[ids], value[ids].view(np.int64), n, odd)
        sized = number == 4
        self.stat_event = owner[sized]
        m = len(self.stat_event)
        owner, number, value, vend, bad = _walk(buf, win, value[sized].astype(np.int64), vend[sized], _STAT_WIRES)
        ids = number == 1
        self.stat_mid = _last_of(owner[ids], value[ids].view(np.int64), m, bad)
        vals = (number >= _DOUBLE) & (number <= _REF)
        self.kind = _last_of(owner[vals], number[vals], m, bad)
        self.value = _last_of(owner[vals], value[vals], m, bad)
        self.value_end = np.zeros(m, dtype=np.int64)
        self.value_end[owner[vals]] = vend[vals]
        odd[self.stat_event[bad]] = True
        self.good = self.src = self.kid = np.zeros(0, dtype=np.int64)
        self.keys: list[str] = []

    def settle(self, fmt: _PlaneFormat) -> np.ndarray:
        """The stats written here (of events not odd), with their keys, in order.

        As in a dict, a key an event's stats give twice is written where it came first,
        with the value it came with last (JAX repeats `_src`). An event whose stats give
        a key its metadata's args hold too is made odd.
        """
        odd, event = self.odd, self.stat_event
        g = np.flatnonzero(~odd[event])
        if not g.size:
            return g
        umid, inv = np.unique(self.stat_mid[g], return_inverse=True)
        local: dict[str, int] = {}
        kid = np.asarray([local.setdefault(fmt.key(m), len(local)) for m in umid.tolist()], dtype=np.int64)[inv]
        keys, width = list(local), len(local)
        uev, einv = np.unique(self.event_mid[event[g]], return_inverse=True)
        md = [fmt.plane.md_args.get(e) for e in uev.tolist()]
        if any(md):
            pair = einv * width + kid
            clash = [c for c in np.unique(pair).tolist() if md[c // width] and keys[c % width] in md[c // width]]
            if clash:
                odd[event[g][np.isin(pair, clash)]] = True
                keep = ~odd[event[g]]
                g, kid = g[keep], kid[keep]
        code = event[g] * width + kid
        ordered = np.sort(code)
        src = g
        if (ordered[1:] == ordered[:-1]).any():
            _, first = np.unique(code, return_index=True)
            _, last = np.unique(code[::-1], return_index=True)  # both in the order of the codes
            order = np.argsort(first)
            first, last = first[order], (len(code) - 1 - last)[order]
            g, src, kid = g[first], g[last], kid[first]
        self.good, self.src, self.kid, self.keys = g, src, kid, keys
        return g

    def key_pieces(self, fmt: _PlaneFormat, comma: np.ndarray) -> np.ndarray:
        """`"key":` per written stat, after a comma where one comes before it."""
        table = np.empty(2 * len(self.keys), dtype=object)
        for j, key in enumerate(self.keys):
            js = fmt.key_json(key)
            table[j], table[len(self.keys) + j] = js, b"," + js
        return table[self.kid + len(self.keys) * comma]

    def values(self, fmt: _PlaneFormat, cache: dict) -> np.ndarray:
        """The JSON of each written stat's value, as `_stat_value` and orjson give it."""
        g = self.src
        kind, value, value_end = self.kind[g], self.value[g], self.value_end[g]
        out = np.empty(len(g), dtype=object)
        out[kind == 0] = b"null"
        for kd, dtype in ((_DOUBLE, np.float64), (_UINT64, np.uint64), (_INT64, np.int64)):
            k = np.flatnonzero(kind == kd)
            if k.size:
                text = orjson.dumps(value[k].view(dtype), option=orjson.OPT_SERIALIZE_NUMPY)
                _put(out, k, text[1:-1].split(b","))
        k = np.flatnonzero(kind == _REF)
        if k.size:
            refs, inv = np.unique(value[k], return_inverse=True)
            table = np.empty(len(refs), dtype=object)
            _put(table, np.arange(len(refs)), [fmt.ref_json(r) for r in refs.tolist()])
            out[k] = table[inv]
        data = self.data
        k = np.flatnonzero(kind == _STR)
        if k.size:
            get = cache.get
            raws = [data[a:b] for a, b in zip(value[k].tolist(), value_end[k].tolist())]
            texts = [get(r) for r in raws]
            for j in [j for j, t in enumerate(texts) if t is None]:
                texts[j] = _text_json(raws[j], cache)
            _put(out, k, texts)
        k = np.flatnonzero(kind == _BYTES)
        if k.size:
            raws = [data[a:b] for a, b in zip(value[k].tolist(), value_end[k].tolist())]
            _put(out, k, [_json(r.hex() if len(r) <= _BIG_BYTES else f"<{len(r)} bytes>") for r in raws])
        return out


class _PlaneFormat:
    """A plane's JSON pieces, made once: stat keys, referenced names, metadata args.

    Only what the plane's metadata defines is remembered, so these stay as small as it.
    """

    def __init__(self, plane: _Plane) -> None:
        self.plane = plane
        self._keys: dict[int, str] = {}
        self._key_json: dict[str, bytes] = {}
        self._refs: dict[int, bytes] = {}
        self._md: dict[int, bytes] = {}

    def key(self, mid: int) -> str:
        key = self._keys.get(mid)
        if key is None:
            key = self.plane.stat_names.get(mid)
            if key is None:
                return f"stat {mid}"
            self._keys[mid] = key
        return key

    def key_json(self, key: str) -> bytes:
        js = self._key_json.get(key)
        if js is None:
            js = orjson.dumps(key) + b":"
            if len(self._key_json) < len(self.plane.stat_names):
                self._key_json[key] = js
        return js

    def ref_json(self, ref: int) -> bytes:
        js = self._refs.get(ref)
        if js is None:
            name = self.plane.stat_names.get(ref)
            if name is None:
                return _json(f"stat {ref}")
            js = self._refs[ref] = _json(name)
        return js

    def md_text(self, mid: int) -> bytes:
        """The JSON of the args every event of metadata `mid` carries, inside the braces."""
        js = self._md.get(mid)
        if js is None:
            args = self.plane.md_args.get(mid)
            if not args:
                return b""
            js = self._md[mid] = orjson.dumps(args)[1:-1]
        return js

    def has_md(self, mids: np.ndarray) -> np.ndarray:
        """Per event, whether its metadata carries args."""
        uniq, inv = np.unique(mids, return_inverse=True)
        md = self.plane.md_args
        return np.asarray([bool(md.get(m)) for m in uniq.tolist()], dtype=bool)[inv]


def _json(value: Any) -> bytes:
    """orjson's JSON of `value`, in a bytes object of its own size: orjson hands back its
    whole buffer (4 KB for a short string), which a cache, or a chunk of a million events
    made one by one, would otherwise hold."""
    return b"%b" % orjson.dumps(value)


def _text_json(raw: bytes, cache: dict) -> bytes:
    js = _json(as_text(raw))
    if len(raw) <= _TEXT_CACHE_LEN:
        if len(cache) >= _TEXT_CACHE_MAX:
            cache.clear()
        cache[raw] = js
    return js


def _put(out: np.ndarray, at: np.ndarray, values: list) -> None:
    """`out[at] = values` for a list of bytes (an object array takes them as they are)."""
    if len(values):
        out[at] = values


def _joined(pieces: list, n: int) -> list[bytes]:
    """The events of a chunk from their pieces, each ending in a newline: one join, one split."""
    out = b"".join(pieces).split(_NL)
    out.pop()
    if len(out) != n:  # pragma: no cover - a piece with a newline: a bug, not an input
        raise AssertionError(f"{n} events formatted into {len(out)}")
    return out


def _plane_pids(names: list[str], ids: list[int]) -> list[int]:
    """pids as XProf assigns them where possible; unique in any case."""
    used: set[int] = set()
    pids = [0] * len(names)
    host = sorted((name, i) for i, name in enumerate(names) if name.startswith("/host:CPU"))
    wanted: dict[int, int] = {i: HOST_PID + r for r, (_, i) in enumerate(host)}
    for i, name in enumerate(names):
        if i not in wanted and name.startswith(("/device:GPU:", "/device:TPU:")):
            pid = FIRST_DEVICE_PID + ids[i]
            wanted[i] = pid if FIRST_DEVICE_PID <= pid <= LAST_DEVICE_PID else FIRST_DEVICE_PID
    nxt = OTHER_PID
    for i in range(len(names)):
        pid = wanted.get(i)
        if pid is None or pid in used:
            while nxt in used:
                nxt += 1
            pid = nxt
        used.add(pid)
        pids[i] = pid
    return pids


def _meta(ph_name: str, pid: int, tid: Optional[int], args: dict) -> bytes:
    ev: dict[str, Any] = {"ph": "M", "pid": pid}
    if tid is not None:
        ev["tid"] = tid
    ev["name"] = ph_name
    ev["args"] = args
    return _json(ev)


def _timestamps(base_ns: int, offset_ps: np.ndarray) -> np.ndarray:
    """(base_ns × 1000 + offset_ps) / 10⁶ with one rounding, even at epoch times.

    base_ns × 1000 overflows int64 for epoch timestamps, so whole microseconds and
    the picosecond remainder are added apart and only the sum is rounded.
    """
    whole_us, rest_ns = divmod(int(base_ns), 1000)
    ps = offset_ps + rest_ns * 1000
    q, r = np.divmod(ps, 1_000_000)
    return (q + whole_us).astype(np.float64) + r.astype(np.float64) / 1e6


class _Sink:
    """The event table's columns as they are made, line by line: written to `.npy` files of
    the parse's spill folder and mapped at the end (`mapped.ColumnFiles`), so the parse
    holds a chunk of them, not the table; or, without a folder, written in place into
    columns made once at their full size (`rows`: every row is known before the first is
    decoded), never joined from parts, which held the table twice at the end of the pass.
    The columns that hold one value for an XSpace (categories, scopes, bindings: zero) are
    made zeroed by the system and never written, so their pages are never touched."""

    _FILES = {**SPILL_FILES}

    def __init__(self, spill_dir: Optional[str], rows: int) -> None:
        self.files = ColumnFiles(spill_dir, self._FILES, SPILL_DTYPES, "the XSpace's event table") \
            if spill_dir is not None else None
        self.cols: dict[str, np.ndarray] = {}
        if self.files is None:  # bindings, scopes and categories stay 0, flow keys -1 (none)
            self.cols = {k: np.zeros(rows, dtype=SPILL_DTYPES[k]) for k in self._FILES}
            self.cols["flow_key"].fill(-1)
        self.n = 0

    def add(self, ph: np.ndarray, ts: np.ndarray, dur: np.ndarray, track: np.ndarray, name: np.ndarray) -> None:
        n = len(ph)
        if self.files is not None:
            self.files.append({"ph": ph, "ts": ts, "dur": dur, "track": track, "name": name,
                               "flow_key": np.full(n, -1, dtype=np.int32), "bind": np.zeros(n, dtype=bool),
                               "scope": np.zeros(n, dtype=np.uint8), "cat": np.zeros(n, dtype=np.int32)})
        else:
            at = slice(self.n, self.n + n)
            for key, values in (("ph", ph), ("ts", ts), ("dur", dur), ("track", track), ("name", name)):
                self.cols[key][at] = values
        self.n += n

    def set_meta(self, tracks: np.ndarray, names: np.ndarray) -> None:
        """The track and name ids of the first rows (the metadata rows, written before the
        ids they use were interned: see `_build`)."""
        for key, values in (("track", tracks), ("name", names)):
            if self.files is not None:
                self.files.rewrite(key, 0, values)
            else:
                self.cols[key][:len(values)] = values

    def columns(self) -> dict[str, np.ndarray]:
        if self.files is not None:
            return self.files.finish(self.n)
        if self.n != len(self.cols["ph"]):  # every row is written: anything else is a bug here
            raise AssertionError(f"{self.n} rows written of {len(self.cols['ph'])}")
        cols, self.cols = self.cols, {}
        return cols

    def discard(self) -> None:
        if self.files is not None:
            self.files.discard()
        self.cols = {}


# Memory while the events are decoded: per event of a chunk in flight (its decoded
# fields and their temporaries, its columns), per event of a line (its metadata ids,
# kept for the step markers), per event held in memory (columns, positions) when there
# is no spill folder; and per counter sample kept in Python lists until built.
_DECODE_BYTES_PER_EVENT = 160
_LINE_BYTES_PER_EVENT = 8
_HELD_BYTES_PER_EVENT = 38  # the columns, made at their full size (`_Sink`)
_COUNTER_BYTES = 200
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_IN_FLIGHT = _THREADS + 1  # chunks decoded ahead of the one being written
# Of what follows reading the file's bytes, the share its walk down to each line's events
# takes (`_gather`; the rest is decoding them, `_build`): 3.5 s of 9.7 on a 1 GB XSpace of
# 27.7 M events. Progress of the walk is told every `WALK_STEP` of the file.
WALK_SHARE = 0.35
WALK_STEP = 0.01
_LINE_MASK = sum(1 << n for n in xspace_shape.LINE_HEAD)
_POSITION_FILES = {"starts": "xspace_starts.npy", "ends": "xspace_ends.npy"}
DATA_FILE = "xspace.pb"  # the file's bytes in the spill folder, mapped
_SPILL_READ = 4 << 20  # bytes read at once on their way to that file


def read_xspace(stream: TraceStream, account: Any = None, spill_dir: Optional[str] = None,
                decoded: Optional[Callable[[float], None]] = None) -> XSpaceTrace:
    """Read an XSpace into the event model, walking the file's structure itself.

    Protobuf has no index, and upb can only parse a message whole, which for a profile
    means a Python object per event and 2-5x the file in memory. So the file's bytes are
    kept (with `spill_dir`: written to a file there and mapped, file-backed pages the
    kernel can take back; else in memory), `xspace_shape.scan` walks them down to the
    lines, upb parses only what lies above the events (planes' metadata and stats, each
    line's own fields), and each line's events are found in place (`_line_events`) and
    decoded a chunk at a time into columns that go to the spill folder as they come. What
    is held is the metadata, a few chunks and, without a folder, the columns.

    With an `account` (see `budget`), every step charges what it is about to hold.
    `decoded`: told how far the reading after the file's bytes is (0..1): the walk of the
    lines (`WALK_SHARE` of it, told as each line is found) and then the decoding, after
    each chunk.
    """
    charges = _Charges(account)
    base = os.path.basename(stream.path)
    stream.forget_crc()  # its events are found by their place in the bytes kept, not read again
    data, buf, in_place = _file_bytes(stream, charges, spill_dir)
    file = _File(data, buf)
    try:
        shape = xspace_shape.scan(data, file.limit)
    except TraceError as exc:
        reason = str(exc)
        if reason.startswith(xspace_shape.CORRUPT):  # the words upb's own refusal gets below
            raise TraceError(f"not a valid XSpace: {base}: {reason[len(xspace_shape.CORRUPT):]}") from None
        raise TraceError(f"{base}: {reason}") from None
    heads = shape.head_bytes()
    charges.hold(heads, "parsing the XSpace")
    gathered = _gather(shape, file, base, charges, spill_dir, _share(decoded, 0.0, WALK_SHARE))
    _drop_pages(data, 0, file.limit)  # walked: from here on, read again a chunk of events at a time
    trace = _build(gathered, base, charges, spill_dir, _share(decoded, WALK_SHARE, 1.0))
    trace.in_place = in_place
    _drop_pages(data, 0, file.limit)  # what the decoding's last chunks and the pages around them left
    charges.give(heads)
    return trace


_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)  # where the system has madvise


def _drop_pages(data: Any, start: int, end: int) -> None:
    """The whole pages of data[start:end] out of this process's memory, where `data` is a
    mapping: they stay in the page cache and are read again if touched (a file mapping
    read only loses nothing), so a walk or a decoding pass over a file's bytes holds the
    part it is at, not all it has read. Nothing for bytes in memory."""
    if not isinstance(data, mmap.mmap) or _DONTNEED is None:
        return
    page = mmap.PAGESIZE
    a, b = -(-start // page) * page, min(end, len(data)) // page * page
    if b > a:
        data.madvise(_DONTNEED, a, b - a)


def _file_bytes(stream: TraceStream, charges: _Charges, spill_dir: Optional[str]) -> tuple[Any, Optional[np.ndarray], bool]:
    """The file's bytes with `_PAD` zeros after them, a guarded array over them when they
    are mapped, and whether that mapping is the file itself. A plain file still as it was
    opened is mapped where it lies (`mapped.map_in_place`): nothing is copied, and a store
    keeps no copy of it. Else they are written block by block into `spill_dir` and mapped
    from there, or (without a folder) joined in memory. `SpillFailed` when the folder
    cannot take them."""
    fd = stream.unread_fd()
    mapped = map_in_place(fd, stream.file_bytes, _PAD) if fd is not None else None
    if mapped is not None:
        stream.read_in_place()
        return mapped[0], mapped[1], True
    if spill_dir is not None:
        path = os.path.join(spill_dir, DATA_FILE)
        try:
            os.makedirs(spill_dir, exist_ok=True)
            with open(path, "xb") as f:
                while True:
                    block = stream.read(_SPILL_READ)
                    if not block:
                        break
                    charges.hold(len(block), "reading the XSpace")
                    try:
                        f.write(block)
                    finally:
                        charges.give(len(block))
                    del block
                f.write(bytes(_PAD))
        except OSError as exc:
            raise SpillFailed(f"the XSpace could not be written to {spill_dir}: {exc.strerror or exc}") from None
        buf = map_bytes(path)
        return buf.base, buf, False  # the mapping itself: sliced as bytes, searched, handed to upb
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
    return data, None, False


def _parse(cls: Any, data: Any, spans: Iterable[tuple[int, int]], base: str, what: str) -> Any:
    """upb's parse of the fields at `spans` of `data`, joined (a message's fields but its
    bulk: what upb would have read of them in the whole message)."""
    text = b"".join([data[a:b] for a, b in spans])
    try:
        return cls.FromString(text)
    except DecodeError as exc:
        raise _invalid(base, what, exc) from None


def _invalid(base: str, what: str, exc: DecodeError) -> TraceError:
    """upb's refusal of a part of the file, said of that part (upb names the message type)."""
    reason = str(exc).rsplit("': ", 1)[-1] if "': " in str(exc) else "it does not parse"
    return TraceError(f"not a valid XSpace: {base}: {what} is malformed ({reason})")


def _line_events(file: _File, start: int, end: int, at_most: int, base: str,
                 charges: _Charges) -> tuple[Any, Any, np.ndarray, np.ndarray, np.ndarray]:
    """One line: (its own fields parsed, the bytes its events lie in, their starts and
    ends there, those bytes as uint8).

    Natively (`_scan.pb_fields`) its fields are walked in place and upb parses only the
    line's own; else, or when the walk leaves the line to upb, upb parses the line whole
    (events as bytes, bounded by the line: charged) and they are found in the file
    (`_File.payloads`). Both give the same events from the same bytes.
    """
    data = file.data
    module = scanner_module()
    if module is not None:
        n = module.pb_fields(data, start, end, 4, 0, None, None)
        if n >= 0:
            starts, ends = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
            m = module.pb_fields(data, start, end, 0, _LINE_MASK, None, None)
            at, stop = np.empty(max(m, 0), dtype=np.int64), np.empty(max(m, 0), dtype=np.int64)
            if (module.pb_fields(data, start, end, 4, 0, starts, ends) == n and m >= 0
                    and module.pb_fields(data, start, end, 0, _LINE_MASK, at, stop) == m):
                line = _parse(XLineIndexView, data, zip(at.tolist(), stop.tolist()), base, "a line")
                return line, data, starts, ends, file.buf
    cost = xspace_shape.EVENT_BYTES * at_most + (end - start) + xspace_shape.MESSAGE_BYTES
    charges.hold(cost, "parsing a line of the XSpace")
    try:
        try:
            line = XLineIndexView.FromString(memoryview(data)[start:end])
        except DecodeError as exc:
            raise _invalid(base, "a line", exc) from None
        if not len(line.events):
            empty = np.zeros(0, dtype=np.int64)
            return line, data, empty, empty, file.buf
        file.cursor = start
        blob, starts, ends, buf = file.payloads(line.events)
        line.ClearField("events")
        return line, blob, starts, ends, buf
    finally:
        charges.give(cost)


@dataclass
class _Gathered:
    """What the conversion needs from above the events, as plain values."""

    names: Interner
    meta_json: list[bytes]
    meta_rows: list[tuple[tuple, str]]
    # per line with events: (timestamp_ns, plane, pid, tid, counter?, plane's metadata ids, their name ids)
    lines: list[tuple[int, _Plane, int, int, bool, np.ndarray, np.ndarray]]
    # per line with events: (the bytes its events lie in, those bytes as uint8, its rows in `positions`)
    located: list[tuple[Any, np.ndarray, int, int]]
    positions: dict[str, np.ndarray]  # every line's events' starts and ends, line after line
    file_buf: np.ndarray  # the file's bytes (mapped, when they were written to a spill folder)
    space_info: dict
    planes: int
    process_names: dict = field(default_factory=dict)  # pid -> plane name
    thread_names: dict = field(default_factory=dict)  # (pid, tid) -> line name


class _Positions:
    """Each line's events' starts and ends, appended line by line: to files of the spill
    folder (mapped once all are in), or held in memory (charged). int32 where the file's
    bytes are fewer than 2^31 (`position_dtype`): 8 B an event, not 16, in memory and in a
    stored index; every use reads them as it reads int64 (the native calls and the walk
    of the events' fields take them as int64)."""

    def __init__(self, spill_dir: Optional[str], charges: _Charges, dtype: type) -> None:
        self.dtype = np.dtype(dtype)
        self.files = ColumnFiles(spill_dir, _POSITION_FILES, {k: dtype for k in _POSITION_FILES},
                                 "the XSpace's event positions") if spill_dir is not None else None
        self.parts: dict[str, list[np.ndarray]] = {"starts": [], "ends": []}
        self.charges = charges
        self.n = 0

    def add(self, starts: np.ndarray, ends: np.ndarray) -> tuple[int, int]:
        if self.files is not None:
            self.files.append({"starts": starts, "ends": ends})
        else:
            self.charges.hold(2 * self.dtype.itemsize * len(starts), "the positions of the XSpace's events")
            self.parts["starts"].append(starts.astype(self.dtype, copy=False))
            self.parts["ends"].append(ends.astype(self.dtype, copy=False))
        first = self.n
        self.n += len(starts)
        return first, self.n

    def finish(self) -> dict[str, np.ndarray]:
        if self.files is not None:
            return self.files.finish(self.n)
        return {k: np.concatenate(v) if v else np.zeros(0, dtype=self.dtype) for k, v in self.parts.items()}


def position_dtype(file_bytes: int) -> type:
    """The dtype of an XSpace's event positions: int32 while every place in the file fits."""
    return np.int32 if file_bytes + _PAD < 2**31 else np.int64


def _share(told: Optional[Callable[[float], None]], lo: float, hi: float) -> Optional[Callable[[float], None]]:
    """`told`, for a stage that is the part lo..hi of what it is told about."""
    return None if told is None else (lambda fraction: told(lo + (hi - lo) * fraction))


def _gather(shape: xspace_shape.Shape, file: _File, base: str, charges: _Charges,
            spill_dir: Optional[str], walked: Optional[Callable[[float], None]] = None) -> _Gathered:
    """The planes' metadata and each line's events found in place; `walked` told how far
    through the file's bytes the lines are (0..1), every `WALK_STEP` of them."""
    data = file.data
    told = 0.0
    names = Interner()
    meta_json: list[bytes] = []
    meta_rows: list[tuple[tuple, str]] = []
    planes_info: list[dict] = []
    space = _parse(XSpaceIndexView, data, shape.top_heads, base, "its list of hosts, errors or warnings")
    planes = []
    for a, b in shape.plane_spans:
        head = xspace_shape.plane_head(data, a, b)
        planes.append(_parse(XPlaneIndexView, head, [(0, len(head))], base, "a plane's metadata or stats"))
        del head
    plane_names = [as_text(p.name) for p in planes]
    pids = _plane_pids(plane_names, [p.id for p in planes])
    pending: list[tuple[int, _Plane, int, int, bool, np.ndarray, np.ndarray]] = []
    process_names: dict[int, str] = {}
    thread_names: dict[tuple[int, int], str] = {}
    located: list[tuple[Any, np.ndarray, int, int]] = []
    positions = _Positions(spill_dir, charges, position_dtype(file.limit))
    for plane, (plane_at, plane_end), plane_name, pid in zip(planes, shape.plane_spans, plane_names, pids):
        stat_names = {k: as_text(v.name) for k, v in plane.stat_metadata.items()}
        info: dict[str, Any] = {"name": plane_name, "id": plane.id}
        pstats = stats_dict(plane.stats, stat_names)
        if pstats:
            info["stats"] = pstats
        planes_info.append(info)
        pl: Optional[_Plane] = None
        rank = 0
        used_tids: set[int] = set()
        for start, end, at_most in xspace_shape.plane_lines(data, plane_at, plane_end):
            if start == end:  # an empty line: no events
                continue
            ln, blob, starts, ends, buf = _line_events(file, start, end, at_most, base, charges)
            if walked is not None and end / file.limit >= told + WALK_STEP:
                told = end / file.limit
                walked(told)
            if not len(starts):
                continue
            if pl is None:  # the plane's first line with events: the plane is a process
                info["pid"] = pid
                pl, pl_ids, pl_names = _plane_of(plane, plane_name, pid, stat_names, names)
                meta_rows.append(((pid, None), "process_name"))
                meta_json.append(_meta("process_name", pid, None, {"name": plane_name}))
                process_names[pid] = plane_name
                meta_rows.append(((pid, None), "process_sort_index"))
                meta_json.append(_meta("process_sort_index", pid, None, {"sort_index": pid}))
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
            rank += 1
            pending.append((ln.timestamp_ns, pl, pid, tid, counter, pl_ids, pl_names))
            a, b = positions.add(starts, ends)
            located.append((blob, buf, a, b))
    return _Gathered(names, meta_json, meta_rows, pending, located, positions.finish(), file.buf,
                     _space_info(space, planes_info), len(planes), process_names, thread_names)


def _plane_of(plane: Any, plane_name: str, pid: int, stat_names: dict[int, str],
              names: Interner) -> tuple[_Plane, np.ndarray, np.ndarray]:
    """A plane with events: its metadata's names (interned, in id order) and args."""
    md_args: dict[int, dict] = {}
    md_ids, md_names = [], []
    for mid, md in plane.event_metadata.items():
        md_ids.append(mid)
        name, display = as_text(md.name), as_text(md.display_name)
        md_names.append(display or name)
        args: dict[str, Any] = {}
        if md.display_name and md.name and md.display_name != md.name:  # the bytes differ
            args["long_name"] = name
        stats_dict(md.stats, stat_names, args)
        if args:
            md_args[mid] = args
    pl = _Plane(plane_name, pid, stat_names, md_args)
    order = np.argsort(np.asarray(md_ids, dtype=np.int64), kind="stable")
    pl_ids = np.asarray(md_ids, dtype=np.int64)[order]
    pl_names = names.ids_of([md_names[i] for i in order.tolist()]) if md_ids else np.zeros(0, np.int32)
    return pl, pl_ids, pl_names


def _decoded(pool: Optional[ThreadPoolExecutor], buf: np.ndarray, starts: np.ndarray,
             ends: np.ndarray) -> Iterator[dict[str, np.ndarray]]:
    """`decode_event_columns` of a line's events, a chunk at a time, in order, with at
    most `_IN_FLIGHT` chunks decoded ahead on the pool's threads (numpy releases the
    GIL in the calls that do the work)."""
    bounds = [(lo, min(lo + _CHUNK, len(starts))) for lo in range(0, len(starts), _CHUNK)]

    def run(lo: int, hi: int) -> dict[str, np.ndarray]:
        return decode_event_columns(buf, np.asarray(starts[lo:hi]), np.asarray(ends[lo:hi]))

    if pool is None or len(bounds) < 2:
        for lo, hi in bounds:
            yield run(lo, hi)
        return
    ahead: list[Any] = []
    for lo, hi in bounds:
        ahead.append(pool.submit(run, lo, hi))
        if len(ahead) >= _IN_FLIGHT:
            yield ahead.pop(0).result()
    for f in ahead:
        yield f.result()


def _build(g: _Gathered, base: str, charges: _Charges, spill_dir: Optional[str],
           decoded: Optional[Callable[[float], None]] = None) -> XSpaceTrace:
    names, meta_json, meta_rows = g.names, g.meta_json, g.meta_rows
    tracks = Interner()
    # Tracks in the order the lines come (then the metadata rows'), as they always were.
    line_tracks = tracks.ids_of([(pid, tid) for _, _, pid, tid, _, _, _ in g.lines]) if g.lines else []
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
    total_events = int(len(g.positions["starts"]))
    held = 0 if spill_dir is not None else _HELD_BYTES_PER_EVENT * (n_meta + total_events)
    longest = max((b - a for _, _, a, b in g.located), default=0)
    chunks = max(1, min(_IN_FLIGHT + 1, -(-longest // _CHUNK)))  # decoded at once (`_decoded`), at most
    decoding = _DECODE_BYTES_PER_EVENT * min(_CHUNK, longest) * chunks
    charges.hold(held + decoding, "decoding its events")
    sink = _Sink(spill_dir, n_meta + total_events)
    # The metadata rows come first; their names are interned after the events' (an
    # unknown metadata id's "" may come between), so they are set once all are known.
    sink.add(np.full(n_meta, PH_M, dtype=np.uint8), np.full(n_meta, NAN), np.full(n_meta, NAN),
             np.zeros(n_meta, dtype=np.int32), np.zeros(n_meta, dtype=np.int32))
    workers = min(_THREADS, max(1, -(-longest // _CHUNK)))
    pool = ThreadPoolExecutor(workers) if workers > 1 else None
    try:
        for (timestamp_ns, pl, pid, tid, counter, pl_ids, pl_names), (data, buf, a, b), track in zip(
                g.lines, g.located, line_tracks):
            starts, ends = g.positions["starts"][a:b], g.positions["ends"][a:b]
            n = b - a
            line = _Line(first, pl, pid, tid, counter, data, starts, ends, buf)
            charges.hold(_LINE_BYTES_PER_EVENT * n, "the metadata ids of a line")
            # Its events' metadata ids, for its step markers (only a plane with a step stat
            # has any): made once, filled in place, int32 unless an id needs more.
            line_mids = np.empty(n if not counter and STEP_STAT in pl.stat_names.values() else 0, dtype=np.int32)
            done = 0
            for ev in _decoded(pool, buf, starts, ends):
                k = len(ev["metadata_id"])
                payload_bytes += int((np.asarray(ends[done:done + k]) - np.asarray(starts[done:done + k])).sum())
                mids = ev["metadata_id"]
                at = np.searchsorted(pl_ids, mids)
                found = at < len(pl_ids)
                found[found] = pl_ids[at[found]] == mids[found]
                name_ids = np.empty(k, dtype=np.int32)
                name_ids[found] = pl_names[at[found]]
                if not found.all():
                    if unknown_name is None:
                        unknown_name = int(names.ids_of([""])[0])
                    name_ids[~found] = unknown_name
                ts = _timestamps(timestamp_ns, ev["offset_ps"])
                dur = ev["duration_ps"].astype(np.float64) / 1e6
                if counter:
                    dur[:] = NAN
                    charges.hold(_COUNTER_BYTES * k, "its counter samples")
                    for j in range(k):
                        for key, value in _counter_values(line, done + j):
                            c_event.append(first + done + j)
                            c_series.append((pid, names.values[name_ids[j]], None, key))
                            c_value.append(value)
                sink.add(np.full(k, PH_C if counter else PH_X, dtype=np.uint8), ts, dur,
                         np.full(k, track, dtype=np.int32), name_ids)
                if len(line_mids):
                    if line_mids.dtype != np.int64 and k and (int(mids.min()) < _I32_MIN or int(mids.max()) > _I32_MAX):
                        line_mids = line_mids.astype(np.int64)
                    line_mids[done:done + k] = mids
                if k:
                    _drop_pages(data, int(starts[done]), int(ends[done + k - 1]))  # decoded: read again only if kept
                done += k
                del ev, mids
                if decoded is not None:
                    decoded((first - n_meta + done) / max(total_events, 1))
            if len(line_mids):
                steps.extend(_step_markers(line, line_mids, first))
            del line_mids
            charges.give(_LINE_BYTES_PER_EVENT * n)
            lines.append(line)
            line_first.append(first)
            first += n
        meta_tracks = tracks.ids_of([r[0] for r in meta_rows]) if meta_rows else np.zeros(0, np.int32)
        meta_names = names.ids_of([r[1] for r in meta_rows]) if meta_rows else np.zeros(0, np.int32)
        sink.set_meta(meta_tracks, meta_names)
        cols = sink.columns()
    except BaseException:
        sink.discard()
        raise
    finally:
        if pool is not None:
            pool.shutdown()
    charges.give(decoding)
    series = Interner()
    total = first
    est = 120 + 3 * payload_bytes / max(total - n_meta, 1)
    table = EventTable(
        ph=cols["ph"], ts=cols["ts"], dur=cols["dur"], track=cols["track"], name=cols["name"],
        flow_key=cols["flow_key"], bind_enclosing=cols["bind"], scope=cols["scope"], cat=cols["cat"],
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
                       extra={"planes": g.planes, "lines": len(lines), "file": base},
                       arrays=[g.file_buf, g.positions["starts"], g.positions["ends"]])


class _Charges:
    """Charges to an optional account (a parse without a budget charges nothing)."""

    def __init__(self, account: Any) -> None:
        self.account = account

    def hold(self, n: int, what: str) -> None:
        if self.account is not None:
            self.account.charge(n, what)

    def give(self, n: int) -> None:
        if self.account is not None:
            self.account.release(n)


class _File:
    """The file's bytes (with `_PAD` zeros after them), and where the reader is in them."""

    def __init__(self, data: Any, buf: Optional[np.ndarray] = None) -> None:
        self.data = data  # bytes, or a mapping of the file or of its copy (sliced as bytes)
        self.buf = np.frombuffer(data, dtype=np.uint8) if buf is None else buf  # with `_PAD` zeros after
        self.limit = len(self.buf) - _PAD  # the file's own bytes
        self.words = _windows(self.buf)
        self.cursor = 0

    def payloads(self, events: Any) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray]:
        """(bytes, starts, ends, bytes as uint8) of one line's event payloads.

        upb hands each payload over as a new bytes object; copying them all back to
        back costs time and memory, so the line's events are found in the file
        itself instead: writers put them one after another (`0x22`, length,
        payload), which the lengths upb gives confirm, vectorised, before use.
        Anything else falls back to the copy.
        """
        n = len(events)
        lens = np.fromiter(map(len, events), dtype=np.int64, count=n)
        found = self._locate(events[0], events[n - 1], lens)
        if found is not None:
            return self.data, found, found + lens, self.buf
        ends = np.cumsum(lens)
        blob = b"".join(events) + bytes(_PAD)
        return blob, ends - lens, ends, np.frombuffer(blob, dtype=np.uint8)

    def _locate(self, first: bytes, last: bytes, lens: np.ndarray) -> Optional[np.ndarray]:
        # The tag byte, then the length as a varint (one byte per 7 bits).
        header = 2 + sum((lens >= (1 << (7 * k))).astype(np.int64) for k in range(1, 10))
        sizes = header + lens
        tags = np.zeros(len(lens), dtype=np.int64)
        np.cumsum(sizes[:-1], out=tags[1:])
        total = int(tags[-1] + sizes[-1])
        limit = self.limit
        at = self.data.find(b"\x22" + _varint_bytes(len(first)) + first, self.cursor, limit)
        for _ in range(8):
            if at < 0 or at + total > limit:
                return None
            pos = tags + at
            if (self.buf[pos] == 0x22).all():
                length, after = _varints(self.buf, pos + 1, self.words)
                if (length.view(np.int64) == lens).all() and (after == pos + header).all():
                    if self.data[at + total - len(last):at + total] == last:
                        self.cursor = at + total
                        return pos + header
            at = self.data.find(b"\x22" + _varint_bytes(len(first)) + first, at + 1, limit)
        return None


def _varint_bytes(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


# ---------------------------------------------------------------- kept in the index store

# The files the index store keeps of an XSpace beside its table (linked from the parse's
# spill folder, where they already are): the file's bytes, the events' positions.
KEPT_FILES = (DATA_FILE, _POSITION_FILES["starts"], _POSITION_FILES["ends"])


def kept(trace: XSpaceTrace) -> Optional[dict]:
    """What the index store keeps of an XSpace beside its table and files, as plain values
    (planes, lines, metadata rows, and whether the file's bytes are the file itself); None
    when it cannot be kept: its positions are not mapped from a spill folder, its file's
    bytes neither from there nor from the file itself, or some line's events were copied
    out of them (the pure build's unusual layouts)."""
    if len(trace.arrays) != 3 or not all(isinstance(a, np.memmap) for a in trace.arrays[1:]):
        return None
    if trace.in_place:
        data = trace.lines[0].data if trace.lines else None
    elif isinstance(trace.arrays[0], np.memmap):
        data = trace.arrays[0].base
    else:
        return None
    if any(line.data is not data for line in trace.lines):
        return None
    planes: list[list] = []
    number: dict[int, int] = {}
    for line in trace.lines:
        if id(line.plane) not in number:
            p = line.plane
            number[id(line.plane)] = len(planes)
            planes.append([p.name, p.pid, list(p.stat_names.items()), list(p.md_args.items())])
    return {"meta_json": list(trace.meta_json), "planes": planes,
            "lines": [[number[id(line.plane)], line.pid, line.tid, line.counter] for line in trace.lines],
            "line_first": trace.line_first.tolist(), "in_place": trace.in_place}


def map_file_again(path: str, identity: Any) -> Optional[tuple[mmap.mmap, np.ndarray]]:
    """The file of a stored index whose bytes are the file itself (`kept`'s `in_place`),
    mapped where it lies again, as the parse mapped it; None where it is not the version
    the index was made from (`identity`), or cannot be mapped so now."""
    try:
        with TraceStream(path, expect=identity) as stream:
            fd = stream.unread_fd() if stream.identity == identity else None
            return map_in_place(fd, stream.file_bytes, _PAD) if fd is not None else None
    except (TraceError, OSError):
        return None


def restore(state: dict, table: EventTable, metadata: dict, extra: dict, buf: np.ndarray, starts: np.ndarray,
            ends: np.ndarray, check: bool, in_place: Optional[mmap.mmap] = None) -> XSpaceTrace:
    """The XSpace of a stored index (`kept`'s values, the mapped file and positions).
    `check`: the files changed since they were last checked: every position is checked
    to lie in the file's bytes (a plan and a write read through them). `in_place`: the
    file itself mapped (`map_file_again`), whose bytes `buf` is. ValueError when anything
    does not fit."""
    meta_json = [bytes(b) for b in state["meta_json"]]
    planes = [_Plane(str(name), int(pid), {int(k): str(v) for k, v in stat_names},
                     {int(k): dict(v) for k, v in md_args}) for name, pid, stat_names, md_args in state["planes"]]
    n_meta, total = len(meta_json), len(table)
    first = np.asarray(state["line_first"], dtype=np.int64)
    rows = state["lines"]
    if (len(first) != len(rows) or len(starts) != len(ends) or len(starts) != total - n_meta
            or (len(first) and (int(first[0]) != n_meta or np.any(np.diff(first) <= 0) or int(first[-1]) >= total))
            or (not len(first) and total != n_meta)):
        raise ValueError("its lines do not match its events")
    if check and len(starts):
        limit = len(buf) - _PAD
        if int(starts.min()) < 0 or int(ends.max()) > limit or bool(np.any(ends < starts)):
            raise ValueError("an event's position lies outside the file's bytes")
    data = buf.base if in_place is None else in_place
    bounds = (first - n_meta).tolist() + [total - n_meta]
    lines = []
    for (plane, pid, tid, counter), a, b, at in zip(rows, bounds, bounds[1:], first.tolist()):
        lines.append(_Line(at, planes[int(plane)], int(pid), int(tid), bool(counter), data, starts[a:b], ends[a:b],
                           buf))
    return XSpaceTrace(table, metadata, meta_json, lines, first, extra=extra, arrays=[buf, starts, ends],
                       in_place=in_place is not None)


def _step_markers(line: _Line, mids: np.ndarray, first: int) -> list[tuple[int, float]]:
    """The line's events that carry a `step_num` stat (`StepTraceAnnotation`), with it.

    Only planes that define a `step_num` stat are looked at; there, the first event of
    each distinct metadata id is parsed, and the events of the ids whose first one
    carries the stat are read (one per step: few).
    """
    if STEP_STAT not in line.plane.stat_names.values() or not len(mids):
        return []
    ids, firsts = _first_of_each(mids)
    ids, firsts = ids[:_MAX_STEP_PROBES], firsts[:_MAX_STEP_PROBES]
    probes = _step_values(line, firsts)
    marking = ids[[v is not None for v in probes]] if len(probes) else ids[:0]
    if not len(marking):
        return []
    js = np.flatnonzero(np.isin(mids, marking))
    return [(first + j, v) for j, v in zip(js.tolist(), _step_values(line, js)) if v is not None]


def _first_of_each(mids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(mids, return_index=True)`: each distinct id, ascending, and where it first
    occurs. Metadata ids are small numbers (a JAX line of 830 k events holds ~25 of them,
    1-49): over a range of ids no wider than the events, a table of first places made in
    one pass (~2 ms) instead of a sort (~20 ms a line, ~50 ms a 2 M-event file, on the
    thread that builds the table); the table and the places (16 B an event at most) hold
    no more than the sort's own work."""
    lo, hi = int(mids.min()), int(mids.max())
    n = len(mids)
    if hi - lo > n + (1 << 16):
        return np.unique(mids, return_index=True)
    first = np.full(hi - lo + 1, n, dtype=np.int64)
    np.minimum.at(first, (mids - lo).astype(np.intp, copy=False), np.arange(n, dtype=np.int64))
    present = np.flatnonzero(first < n)
    return (present + lo).astype(mids.dtype, copy=False), first[present]


def _step_values(line: _Line, ks: np.ndarray) -> list[Optional[float]]:
    """The `step_num` of each event `ks` of the line (None where it has none).

    The events are parsed in one protobuf call, as the events of one `XLine` (field 4):
    a JAX loop of 56,000 steps has 56,000 markers, and parsing them one by one cost
    a second. A damaged one makes the batch fail; then each is parsed alone."""
    if not len(ks):
        return []
    names = line.plane.stat_names
    step_ids = {mid for mid, name in names.items() if name == STEP_STAT}
    native = _native_step_values(line, ks, step_ids)
    if native is not None:
        return native
    payloads = [line.data[line.starts[k]:line.ends[k]] for k in ks.tolist()]
    events: list[Any]
    batch = b"".join([b"\x22" + _varint(len(p)) + p for p in payloads])
    try:
        # Each stat costs a 0x22 byte: more than a few per event on average, and one event
        # may hold a giant list; then each is parsed alone, under `parse_event`'s bound.
        if batch.count(b"\x22") > _MAX_STATS + 16 * len(payloads):
            raise DecodeError("too many stats for one batch")
        events = list(XLineView.FromString(batch).events)
    except DecodeError:
        events = [parse_event(p)[0] for p in payloads]
    del batch
    out: list[Optional[float]] = []
    for ev in events:
        value = None
        if ev is not None:
            for st in ev.stats:
                if st.metadata_id in step_ids:
                    x = step_number(_stat_value(st, names))
                    value = x if x == x else None
                    break
        out.append(value)
    return out


def _native_step_values(line: _Line, ks: np.ndarray, step_ids: set) -> Optional[list[Optional[float]]]:
    """`_step_values` by the native scanner (`_scan.step_values`): the events' stats read
    in C, Python only per value. None (the pure path decides) without the scanner, or
    when an event is damaged or holds what only the pure path formats (bytes values)."""
    module = scanner_module()
    if module is None or not step_ids or any(not -2**63 <= i < 2**63 for i in step_ids):
        return None
    n = len(ks)
    starts = np.ascontiguousarray(line.starts[ks], dtype=np.int64)
    ends = np.ascontiguousarray(line.ends[ks], dtype=np.int64)
    kind = np.empty(n, dtype=np.uint8)
    u64 = np.empty(n, dtype=np.uint64)
    f64 = np.empty(n, dtype=np.float64)
    s_at = np.empty(n, dtype=np.int64)
    e_at = np.empty(n, dtype=np.int64)
    quotes = np.empty(n, dtype=np.int64)
    ids = np.fromiter(step_ids, dtype=np.int64, count=len(step_ids))
    module.step_values(line.data, starts, ends, ids, kind, u64, f64, s_at, e_at, quotes)
    if (kind == 255).any():
        return None
    # What the pure path parses one by one, when its batch is too big, and then leaves
    # unread: events with more than `_MAX_STATS` stats (each costs a 0x22 byte). The
    # batch's own bytes count too: a tag per event, and a length's varint whose last
    # byte (its highest 7 bits) is 0x22.
    data = line.data
    high = ends - starts
    while (high >= 128).any():
        high = np.where(high >= 128, high >> 7, high)
    batch = int(quotes.sum()) + n + int(np.count_nonzero(high == 0x22))
    unread = quotes > _MAX_STATS if batch > _MAX_STATS + 16 * n else np.zeros(n, dtype=bool)
    # Numbers, vectorised: `step_number` of a double or an int is it as a float, kept
    # when finite and below 2**53 (an int's conversion rounds as Python's float() does).
    x = np.where(kind == 1, f64, np.where(kind == 2, u64.astype(np.float64), u64.view(np.int64).astype(np.float64)))
    numeric = np.isin(kind, (1, 2, 3)) & ~unread
    good = numeric & (np.abs(x) < 2**53)  # NaN compares False
    out: list[Optional[float]] = [v if g else None for v, g in zip(x.tolist(), good.tolist())]
    for k in np.flatnonzero(np.isin(kind, (4, 5)) & ~unread).tolist():  # strings: few
        if kind[k] == 4:
            value: Any = as_text(data[int(s_at[k]):int(e_at[k])])
        else:  # a reference to a stat's name
            ref = int(u64[k])
            value = line.plane.stat_names.get(ref, f"stat {ref}")
        v = step_number(value)
        out[k] = v if v == v else None
    return out


_SMALL_VARINTS = [bytes([n]) for n in range(128)]


def _varint(n: int) -> bytes:
    if n < 128:
        return _SMALL_VARINTS[n]
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _counter_values(line: _Line, k: int) -> list[tuple[str, float]]:
    ev, _ = parse_event(line.data[line.starts[k]:line.ends[k]])
    if ev is None:  # damaged: no samples (its written event says why)
        return []
    out = []
    for key, v in stats_dict(ev.stats, line.plane.stat_names).items():
        x = _number(v)
        if x is not None:
            out.append((key, x))
    return out


def _space_info(space: Any, planes: list[dict]) -> dict:
    info: dict[str, Any] = {"hostnames": [as_text(h) for h in space.hostnames], "planes": planes}
    if len(space.errors):
        info["errors"] = [as_text(e) for e in space.errors]
    if len(space.warnings):
        info["warnings"] = [as_text(w) for w in space.warnings]
    return info


def read_xspace_trace(stream: TraceStream, account: Any, options: ReadOptions) -> Parsed:
    """The format's reader (`formats.reader_for("xspace")`)."""
    space = read_xspace(stream, account, options.spill_dir, options.decoded)
    return Parsed(table=space.table, metadata=space.metadata, truncated=False, source=space, extra=space.extra)
