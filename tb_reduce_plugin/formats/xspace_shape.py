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

from dataclasses import dataclass

from ..errors import TraceError

# XSpace: planes 1, errors 2, warnings 3, hostnames 4. XPlane: lines 3, event_metadata 4,
# stat_metadata 5, stats 6 (id 1 and name 2 are scalars). XLine: events 4 (tag 0x22).
_PLANES, _LINES, _EVENT_MD, _STAT_MD, _PLANE_STATS = 1, 3, 4, 5, 6
_EVENT_TAG = b"\x22"
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
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if shift > 63:
            raise TraceError(f"{CORRUPT}{what} longer than 10 bytes")
    return value, pos


def _fields(data: bytes, pos: int, end: int):  # type: ignore[no-untyped-def]
    """(field number, value start, value end) of each length-delimited field of the
    message in data[pos:end]; other fields are skipped. Raises on a malformed message."""
    try:
        while pos < end:
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
                yield number, pos, pos + n
                pos += n
            elif wire == 0:
                _, pos = _varint(data, pos, "a varint")
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                raise TraceError(f"{CORRUPT}field {number} has wire type {wire}, which XSpace never uses")
    except IndexError:
        raise TraceError(f"{CORRUPT}a field runs past the end of the file") from None
    if pos > end:
        raise TraceError(f"{CORRUPT}a field runs past the end of its message")


def scan(data: bytes, end: int) -> Shape:
    """Walk the XSpace in data[:end] down to its lines; bound what parsing it will take."""
    shape = Shape()
    top = 0
    planes = []
    for number, a, b in _fields(data, 0, end):
        top += 1
        if top > MAX_TOP_FIELDS:
            raise TraceError(f"not a profile: an XSpace with more than {MAX_TOP_FIELDS:,} top-level entries"
                             " (planes, host names, errors)")
        if number == _PLANES:
            planes.append((a, b))
        else:
            shape.strings += 1
            shape.string_bytes += b - a
    shape.planes = len(planes)
    shape.fields = top
    for a, b in planes:
        for number, c, d in _fields(data, a, b):
            shape.fields += 1
            if shape.fields > MAX_PLANE_FIELDS:
                raise TraceError(f"not a profile: an XSpace with more than {MAX_PLANE_FIELDS:,} lines, "
                                 "metadata entries and stats")
            if number == _LINES:
                shape.lines += 1
                shape.line_bytes += d - c
                shape.events_at_most += data.count(_EVENT_TAG, c, d)
            elif number in (_EVENT_MD, _STAT_MD):
                shape.metadata_entries += 1
                shape.nested_bytes += d - c
            else:
                shape.nested_bytes += d - c
    return shape
