"""How much memory parsing an XSpace will take, known before parsing it.

Why: protobuf cannot be parsed in bounded pieces, and upb's cost per element is
fixed while an element's size on the wire is not. A real profile costs upb about
1.2-2x its bytes, but an empty `hostnames` entry is 2 bytes on the wire and ~43 once
parsed, an empty line 2 and ~100 (measured: bench/README.md): 875 kB of gzip holding
300 M host names took a server past 8 GB. So before upb sees a file, the two levels
above the event lists are walked here (in real profiles a few thousand fields: planes,
their lines, metadata, stats) to count what upb will build and bound what it will
take; the event lists, the bulk of every real file, are only bounded by counting the
bytes that could start an event. The walk refuses files whose structure no profiler
writes — hundreds of thousands of top-level entries, millions of lines or metadata
entries — before any of it is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from ..errors import TraceError
from ..native import scanner_module

# XSpace: planes 1, errors 2, warnings 3, hostnames 4. XPlane: lines 3, event_metadata 4,
# stat_metadata 5, stats 6 (id 1 and name 2 are scalars). XLine: events 4 (tag 0x22).
_PLANES, _LINES, _EVENT_MD, _STAT_MD, _PLANE_STATS = 1, 3, 4, 5, 6
_EVENT_TAG = b"\x22"
# The fields upb reads above the events, each with the wire type it reads it as (another
# is an unknown field to upb, read as nothing): XSpace's text lists; XPlane's id, name,
# metadata maps and stats; XLine's (`xspace.py` finds its events itself).
TOP_HEAD = {2: 2, 3: 2, 4: 2}
PLANE_HEAD = {1: 0, 2: 2, 4: 2, 5: 2, 6: 2}
LINE_HEAD = {1: 0, 2: 2, 3: 0, 9: 0, 10: 0, 11: 2}
CORRUPT = "corrupt XSpace: "  # how a malformed file's messages start

MAX_TOP_FIELDS = 100_000  # real profiles: a plane per device and a host name or two
MAX_PLANE_FIELDS = 4_000_000  # lines, metadata and stats of all planes together

# upb's cost of each element (measured on empty elements, which are the worst case per
# wire byte, and rounded up), and per wire byte of nested messages walked no deeper.
STRING_BYTES = 48
MESSAGE_BYTES = 128
METADATA_ENTRY_BYTES = 320
EVENT_BYTES = 48
NESTED_PER_BYTE = 32


@dataclass
class Shape:
    planes: int = 0
    lines: int = 0
    strings: int = 0  # host names, errors, warnings
    string_bytes: int = 0
    metadata_entries: int = 0  # event and stat metadata entries
    nested_bytes: int = 0  # metadata entries and stats, whose insides are not walked
    events_at_most: int = 0  # bytes in the lines that could start an event
    line_bytes: int = 0
    fields: int = 0
    top_heads: list[tuple[int, int]] = field(default_factory=list)  # the XSpace's fields but planes, [tag, end)
    plane_spans: list[tuple[int, int]] = field(default_factory=list)  # each plane's bytes

    def head_bytes(self) -> int:
        """An upper bound on what upb allocates to parse everything but the lines' events
        (the XSpace's text, each plane's metadata and stats, each line's own fields)."""
        return (STRING_BYTES * self.strings + self.string_bytes
                + MESSAGE_BYTES * (self.planes + self.lines)
                + METADATA_ENTRY_BYTES * self.metadata_entries + NESTED_PER_BYTE * self.nested_bytes)

    def parse_bytes(self) -> int:
        """An upper bound on what upb allocates to parse the file (events read as bytes)."""
        return (STRING_BYTES * self.strings + self.string_bytes
                + MESSAGE_BYTES * (self.planes + self.lines)
                + METADATA_ENTRY_BYTES * self.metadata_entries + NESTED_PER_BYTE * self.nested_bytes
                + EVENT_BYTES * self.events_at_most + self.line_bytes)


def _varint(data: bytes, pos: int, what: str) -> tuple[int, int]:
    """The varint at `pos` and the position after it (IndexError past the end)."""
    b = data[pos]
    pos += 1
    value = b & 0x7F
    shift = 7
    while b & 0x80:
        if shift >= 70:  # ten bytes read (a negative int64 takes ten), and an eleventh would follow
            raise TraceError(f"{CORRUPT}{what} longer than 10 bytes")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
    return value, pos


def _fields(data: bytes, pos: int, end: int):  # type: ignore[no-untyped-def]
    """(field number, wire type, field start, value start, value end) of each field of the
    message in data[pos:end] (a length-delimited one's value is its bytes). Raises on a
    malformed message."""
    try:
        while pos < end:
            at = pos
            key = data[pos]  # one byte for fields 1-15, which are all XSpace uses
            if key & 0x80:
                key, pos = _varint(data, pos, "a field tag")
            else:
                pos += 1
            wire, number = key & 7, key >> 3
            if number == 0:
                raise TraceError(f"{CORRUPT}a field numbered 0")
            if wire == 2:
                n = data[pos]
                if n & 0x80:
                    n, pos = _varint(data, pos, "a length")
                else:
                    pos += 1
                if pos + n > end:
                    raise TraceError(f"{CORRUPT}a field runs past the end of its message")
                yield number, wire, at, pos, pos + n
                pos += n
            elif wire == 0:
                value = pos
                _, pos = _varint(data, pos, "a varint")
                yield number, wire, at, value, pos
            elif wire == 1:
                pos += 8
                yield number, wire, at, pos - 8, pos
            elif wire == 5:
                pos += 4
                yield number, wire, at, pos - 4, pos
            else:
                raise TraceError(f"{CORRUPT}field {number} has wire type {wire}, which XSpace never uses")
    except IndexError:
        raise TraceError(f"{CORRUPT}a field runs past the end of the file") from None
    if pos > end:
        raise TraceError(f"{CORRUPT}a field runs past the end of its message")


_COUNT_CHUNK = 1 << 22


def _count(data: Any, byte: bytes, start: int, end: int) -> int:
    """`data.count(byte, start, end)`, also for a mapping (which has no `count`): natively
    (`_scan.count_byte`, 32 bytes at a time: each line is counted twice, by `scan` and by
    `plane_lines`, ~60 ms of a 2 M-event file's ~0.5 s read by `bytes.count`), else read
    4 MiB at a time, so counting a line of 1 GB holds 4 MiB."""
    module = scanner_module()
    if module is not None:
        with memoryview(data) as view, view[start:end] as part:
            return module.count_byte(part, byte[0])
    if isinstance(data, bytes):
        return data.count(byte, start, end)
    return sum(data[a:min(a + _COUNT_CHUNK, end)].count(byte) for a in range(start, end, _COUNT_CHUNK))


def scan(data: bytes, end: int) -> Shape:
    """Walk the XSpace in data[:end] down to its lines; bound what parsing it will take."""
    shape = Shape()
    top = 0
    planes = []
    for number, wire, f, a, b in _fields(data, 0, end):
        if wire != 2:
            continue  # unknown to upb: read as nothing
        top += 1
        if top > MAX_TOP_FIELDS:
            raise TraceError(f"not a profile: an XSpace with more than {MAX_TOP_FIELDS:,} top-level entries"
                             " (planes, host names, errors)")
        if number == _PLANES:
            planes.append((a, b))
        else:
            shape.strings += 1
            shape.string_bytes += b - a
            if TOP_HEAD.get(number) == wire:
                shape.top_heads.append((f, b))
    shape.planes = len(planes)
    shape.plane_spans = planes
    shape.fields = top
    for a, b in planes:
        for number, wire, _, c, d in _fields(data, a, b):
            if wire != 2:
                continue
            shape.fields += 1
            if shape.fields > MAX_PLANE_FIELDS:
                raise TraceError(f"not a profile: an XSpace with more than {MAX_PLANE_FIELDS:,} lines, "
                                 "metadata entries and stats")
            if number == _LINES:
                shape.lines += 1
                shape.line_bytes += d - c
                shape.events_at_most += _count(data, _EVENT_TAG, c, d)
            elif number in (_EVENT_MD, _STAT_MD):
                shape.metadata_entries += 1
                shape.nested_bytes += d - c
            else:
                shape.nested_bytes += d - c
    return shape


# What the reader walks again, plane by plane, once `scan` has bounded the whole (nothing
# is listed per line or per metadata entry while the bounds are not known).


def plane_head(data: Any, start: int, end: int) -> bytes:
    """The plane in data[start:end] without its lines: its fields that upb reads, joined."""
    head = bytearray()
    for number, wire, f, _, d in _fields(data, start, end):
        if PLANE_HEAD.get(number) == wire:
            head += data[f:d]
    return bytes(head)


def plane_lines(data: Any, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """Each line of the plane in data[start:end]: its bytes' [start, end) and the bytes in
    it that could start an event (at most its events; 0: it has none)."""
    for number, wire, _, c, d in _fields(data, start, end):
        if number == _LINES and wire == 2:
            yield c, d, _count(data, _EVENT_TAG, c, d)
