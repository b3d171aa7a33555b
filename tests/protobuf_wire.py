"""A tiny protobuf wire encoder for hand-made XSpace events and stats in tests:
damaged, unusual or extreme encodings that no profiler writes on purpose."""

from __future__ import annotations

import struct


def varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if not v:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def vfield(number: int, v: int) -> bytes:
    return tag(number, 0) + varint(v)


def sfield(number: int, raw: bytes) -> bytes:
    return tag(number, 2) + varint(len(raw)) + raw


def field(number: int, value: int | bytes) -> bytes:
    """A varint field for an int, a length-delimited one for bytes."""
    return sfield(number, value) if isinstance(value, bytes) else vfield(number, value)


def double(number: int, x: float) -> bytes:
    return tag(number, 1) + struct.pack("<d", x)


def stat(mid: int, value: bytes = b"") -> bytes:
    """An XStat: its metadata id, then `value` (already encoded, any field)."""
    return vfield(1, mid) + value


def event(mid: int, offset_ps: int, duration_ps: int, stats: list[bytes] = (), extra: bytes = b"") -> bytes:
    return vfield(1, mid) + vfield(2, offset_ps) + vfield(3, duration_ps) + b"".join(sfield(4, s) for s in stats) + extra
