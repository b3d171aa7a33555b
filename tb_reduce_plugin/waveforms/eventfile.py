"""TFRecord-framed event files, read so that damage costs only the damaged bytes.

An event file is a sequence of records: the payload's length (u64, little-endian),
the masked CRC32C of those 8 bytes (u32), the payload, the masked CRC32C of the
payload (u32). TensorBoard's readers stop at the first bad checksum, so one flipped
bit hides every later point of a run. This reader skips the damage instead: it finds
the next position where a record header's checksum holds (and its payload's, when
the payload is on disk), carries on from there, and reports each skipped region
once, as a `Gap`.

A record cut short at the end of the file is not damage: a live writer is still
writing it. Its bytes are `pending_bytes`, and a later `poll()` reads the record once
it is complete. Each `poll()` reads only what was appended since the last one; a
file that shrank or was replaced is read again from the start (`restarted`).

Memory is bounded: the file is read in chunks of `chunk_bytes`, and only a record
larger than a chunk (at most `max_record_bytes`) is held whole.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import BinaryIO, Iterator, List, Optional, Tuple

import google_crc32c
import numpy as np

from ..errors import display_name
from ..formats.sources import open_regular

HEADER_BYTES = 12  # length (8) + masked CRC32C of the length (4)
FOOTER_BYTES = 4  # masked CRC32C of the payload
# Real events are bytes to kilobytes (an image summary: megabytes). A "length" above
# this is damage, not a record: waiting for 2**60 bytes would stall the file forever.
DEFAULT_MAX_RECORD_BYTES = 256 * 1024 * 1024
CHUNK_BYTES = 4 * 1024 * 1024
# Damage is searched in windows this long: the vectorised search makes temporaries of
# about 20 bytes per position, so 1 MiB windows keep them near 20 MB.
SCAN_BYTES = 1024 * 1024

_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF
_HEADER = struct.Struct("<QI")
_LENGTH = struct.Struct("<Q")
_FOOTER = struct.Struct("<I")
_crc = google_crc32c.value
_crc_extend = google_crc32c.extend

# `_frame` stops for one of these reasons.
_NEED_MORE = 0  # the record at the stop is not complete in the buffer (or the buffer is used up)
_BAD_LENGTH_CRC = 1
_TOO_LONG = 2  # the length's checksum holds, but the length is over `max_record_bytes`
_BAD_PAYLOAD_CRC = 3


def masked_crc32c(data: bytes) -> int:
    """The TFRecord checksum: CRC32C, rotated right by 15 bits, plus a constant.

    The masking exists so that a CRC stored inside data that is itself checksummed
    (a record within a record) does not make the outer checksum degenerate.
    """
    crc = _crc(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _U32


def _slice_by_8_tables() -> np.ndarray:
    """Eight 256-entry tables whose XOR, indexed by 8 bytes, is the CRC32C of those bytes.

    Slicing-by-8 over exactly one 8-byte block, with the initial value (0xFFFFFFFF)
    and the final inversion folded into the tables, so that the CRC of every 8-byte
    window of a buffer is 8 gathers and 7 XORs over whole arrays.
    """
    t0 = np.zeros(256, np.uint32)
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)  # CRC32C (Castagnoli), reflected
        t0[b] = c
    tables = [t0]
    for _ in range(7):
        prev = tables[-1]
        tables.append((prev >> 8) ^ t0[prev & 0xFF])
    inverted = np.arange(256) ^ 0xFF
    out = np.empty((8, 256), np.uint32)
    for k in range(8):
        # bytes 0-3 meet the initial value 0xFFFFFFFF: the index is the byte inverted
        out[k] = tables[7 - k][inverted] if k < 4 else tables[7 - k]
    out[0] ^= np.uint32(_U32)  # the final inversion
    return out


_SLICE = _slice_by_8_tables()
_EMPTY_LENGTH_CRC = masked_crc32c(bytes(8))  # the length checksum of an empty record


def window_crc32c(buf: bytes, positions: np.ndarray) -> np.ndarray:
    """CRC32C of the 8 bytes at each of `positions` in `buf` (each at most len(buf) - 8)."""
    a = np.frombuffer(buf, np.uint8)
    crc = _SLICE[0][a[positions]]
    for k in range(1, 8):
        crc ^= _SLICE[k][a[positions + k]]
    return crc


def header_candidates(buf: bytes, stop: int, max_record_bytes: int) -> np.ndarray:
    """Offsets p < `stop` in `buf` where a record header could start: the u64 at p is at
    most `max_record_bytes` and the u32 at p + 8 is its masked CRC32C. Vectorised, so a
    long damaged region costs a few numpy passes per window, not a Python call per byte.
    """
    n = min(stop, len(buf) - (HEADER_BYTES - 1))
    if n <= 0:
        return np.empty(0, np.intp)
    lengths = np.ndarray((n,), "<u8", buf, 0, (1,))
    stored = np.ndarray((n,), "<u4", buf, 8, (1,))
    keep = lengths <= max_record_bytes  # random bytes pass 1 time in 2**36, text never
    empty = None
    if np.count_nonzero(keep) > n // 16:
        # Mostly zeros, the usual damage after a crash: a header of length 0 is valid
        # exactly when its checksum is that of eight zero bytes, so those positions
        # need no CRC at all (and twelve zero bytes are never a header).
        zero = lengths == 0
        empty = np.flatnonzero(zero & (stored == _EMPTY_LENGTH_CRC))
        keep &= ~zero
    pos = np.flatnonzero(keep)
    if pos.size:
        crc = window_crc32c(buf, pos)
        masked = ((crc >> 15) | (crc << 17)) + np.uint32(_MASK_DELTA)
        pos = pos[masked == stored[pos]]
    return pos if empty is None or not empty.size else np.union1d(pos, empty)


def _frame(buf: bytes, i: int, out: List[bytes], limit: int) -> Tuple[int, int, int]:
    """Append the payloads of the complete, valid records of `buf` from offset `i` to
    `out`; return (where it stopped, why, the length read there or -1).

    Batched, since this is the hot loop: a Python walk from length to length (one
    `unpack_from` per record, trusting the lengths for now), then every header's
    checksum at once in numpy, then the payloads' CRCs by `map` over the C function
    and compared in numpy. The walk stops early at a length that cannot be right
    (over the limit, past the buffer); the first bad checksum cuts the batch there.
    """
    n = len(buf)
    starts: List[int] = []
    ends: List[int] = []
    add_start = starts.append
    add_end = ends.append
    unpack = _LENGTH.unpack_from
    while n - i >= HEADER_BYTES:
        length = unpack(buf, i)[0]
        if length > limit:
            break
        j = i + HEADER_BYTES + length
        if j + FOOTER_BYTES > n:
            break
        add_start(i)
        add_end(j)
        i = j + FOOTER_BYTES
    if starts:
        at = np.array(starts, np.intp)
        words = np.ndarray((n - 3,), "<u4", buf, 0, (1,))  # the u32 at every offset
        crc = window_crc32c(buf, at)
        bad = np.flatnonzero(((crc >> 15) | (crc << 17)) + np.uint32(_MASK_DELTA) != words[at + 8])
        if bad.size:  # the walk went astray there: what it found after is not records
            k = int(bad[0])
            i = starts[k]
            del starts[k:], ends[k:]
        payloads = [buf[a + HEADER_BYTES:b] for a, b in zip(starts, ends)]
        crc = np.fromiter(map(_crc, payloads), np.uint32, len(payloads))
        bad = np.flatnonzero(((crc >> 15) | (crc << 17)) + np.uint32(_MASK_DELTA) != words[np.array(ends, np.intp)])
        if bad.size:
            k = int(bad[0])
            out.extend(payloads[:k])
            return starts[k], _BAD_PAYLOAD_CRC, ends[k] - starts[k] - HEADER_BYTES
        out.extend(payloads)
    # Why the walk stopped at i: the C CRC decides.
    if n - i < HEADER_BYTES:
        return i, _NEED_MORE, -1
    length, length_crc = _HEADER.unpack_from(buf, i)
    if masked_crc32c(buf[i:i + 8]) != length_crc:
        return i, _BAD_LENGTH_CRC, -1
    if length > limit:
        return i, _TOO_LONG, length
    return i, _NEED_MORE, length


@dataclass(frozen=True)
class Gap:
    """Bytes of `file` (a base name, never a path: it may reach a web page) that were
    skipped as damaged: `skipped` bytes from byte `offset`, for `reason`."""

    file: str
    offset: int
    skipped: int
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: skipped {self.skipped} bytes at offset {self.offset} ({self.reason})"


class EventFileReader:
    """Reads the records of one event file, incrementally, recovering from damage.

    `poll()` returns the payloads of the records completed since the last call, in file
    order. State after each poll: `offset` (where the next poll starts: the end of the
    last complete record or gap), `records` (valid records read so far), `gaps` (all so
    far) and `new_gaps` (this poll's), `pending_bytes` (bytes after `offset`: a record
    being written), `size` (the file's size as last read), `restarted` (this poll
    started over: the file shrank or is another file now) and `bytes_read` (all bytes
    read from disk, so callers and tests can see that old records are not read again).

    Opening errors (missing file, a FIFO) raise the project's `TraceError` types; bad
    bytes never raise.
    """

    def __init__(self, path: str | os.PathLike, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                 chunk_bytes: int = CHUNK_BYTES) -> None:
        self.path = os.fspath(path)
        self.name = display_name(os.path.basename(self.path.rstrip(os.sep)) or self.path)
        self.max_record_bytes = int(max_record_bytes)
        self.chunk_bytes = max(int(chunk_bytes), HEADER_BYTES + FOOTER_BYTES)
        self.restarts = 0
        self.restarted = False
        self.bytes_read = 0
        self._start_over()

    def _start_over(self) -> None:
        self.offset = 0
        self.records = 0
        self.gaps: List[Gap] = []
        self.new_gaps: List[Gap] = []
        self.pending_bytes = 0
        self.size = 0
        self._identity: Optional[Tuple[int, int]] = None

    def poll(self) -> List[bytes]:
        """The payloads of the new complete, valid records, in file order."""
        out: List[bytes] = []
        for batch in self.poll_batches():
            out.extend(batch)
        return out

    def poll_batches(self) -> Iterator[List[bytes]]:
        """`poll()` a chunk at a time, so a caller that digests each batch holds one
        chunk's payloads, not the file's. The file is opened (and `restarted` decided)
        by this call, then read as the batches are taken: take them all, since the state
        (`offset`, `gaps`, `pending_bytes`) is final only then."""
        self.new_gaps = []
        self.restarted = False
        f, st = open_regular(self.path)
        identity = (st.st_dev, st.st_ino)
        if self._identity is not None and (identity != self._identity or st.st_size < self.size):
            self._start_over()
            self.restarts += 1
            self.restarted = True
        self._identity = identity
        return self._batches(f)

    def _batches(self, f: BinaryIO) -> Iterator[List[bytes]]:
        with f:
            yield from self._read(f)

    # -- reading ------------------------------------------------------------------------

    def _read_at(self, f: BinaryIO, pos: int, n: int) -> bytes:
        """Up to `n` bytes from `pos` (fewer only at the end of the file)."""
        f.seek(pos)
        parts = []
        left = n
        while left > 0:
            b = f.read(left)
            if not b:
                break
            parts.append(b)
            left -= len(b)
        self.bytes_read += n - left
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _read(self, f: BinaryIO) -> Iterator[List[bytes]]:
        limit = self.max_record_bytes
        pos = self.offset  # the file offset of buf[0]
        buf = self._read_at(f, pos, self.chunk_bytes)
        i = 0
        while True:
            out: List[bytes] = []
            i, why, length = _frame(buf, i, out, limit)
            if out:
                self.records += len(out)
                self.offset = pos + i
                yield out
            start = pos + i
            if why == _NEED_MORE:
                need = HEADER_BYTES if length < 0 else HEADER_BYTES + length + FOOTER_BYTES
                have = len(buf) - i
                more = self._read_at(f, pos + len(buf), max(self.chunk_bytes, need - have))
                if not more:  # the end of the file: what is left is a record being written
                    self._finish(start, pos + len(buf))
                    return
                buf = buf[i:] + more
                pos, i = start, 0
                continue
            if why == _BAD_PAYLOAD_CRC:
                reason = "bad payload checksum"
                end = start + HEADER_BYTES + length + FOOTER_BYTES
                # Skip exactly that record when a record (or the end of the file) follows
                # it; otherwise its length, though checksummed, does not lead to a record
                # (a writer that died mid-record and another that appended after it).
                found = self._header_at(f, buf, pos, end)
                target = end if found else None
            elif why == _TOO_LONG:
                reason = f"record length {length} over the {limit}-byte limit"
                target = None
            else:
                reason = "bad length checksum"
                target = None
            if target is None:
                target, found = self._resync(f, start + 1)
                if not found:
                    reason += "; no valid record after it"
            self._gap(start, target - start, reason)
            if not found:
                self._finish(target, self.size)
                return
            if target < pos + len(buf):
                i = target - pos
            else:
                pos, i = target, 0
                buf = self._read_at(f, pos, self.chunk_bytes)

    def _finish(self, offset: int, eof: int) -> None:
        self.offset = offset
        self.size = max(eof, offset)
        self.pending_bytes = self.size - offset

    def _gap(self, offset: int, skipped: int, reason: str) -> None:
        gap = Gap(self.name, offset, skipped, reason)
        self.gaps.append(gap)
        self.new_gaps.append(gap)

    def _header_at(self, f: BinaryIO, buf: bytes, pos: int, at: int) -> bool:
        """Whether a record header is at file offset `at`, or fewer than 12 bytes are there
        (the end of the file, or a header being written)."""
        if pos <= at and at + HEADER_BYTES <= pos + len(buf):
            head = buf[at - pos:at - pos + HEADER_BYTES]
        else:
            head = self._read_at(f, at, HEADER_BYTES)
            if len(head) < HEADER_BYTES:
                self.size = max(self.size, at + len(head))
                return True
        length, length_crc = _HEADER.unpack(head)
        return length <= self.max_record_bytes and masked_crc32c(head[:8]) == length_crc

    def _resync(self, f: BinaryIO, start: int) -> Tuple[int, bool]:
        """The first offset at or after `start` where a valid record starts: its header's
        checksum holds and, when its payload is all on disk, the payload's too (a payload
        still being written is accepted: the record is pending). Returns (offset, True),
        or (first offset not yet searchable, False) when there is none up to the end of
        the file (the last 11 bytes can only be searched once more bytes arrive)."""
        pos = start
        while True:
            buf = self._read_at(f, pos, SCAN_BYTES + HEADER_BYTES - 1)
            if len(buf) < HEADER_BYTES:
                self.size = max(self.size, pos + len(buf))
                return pos, False
            stop = len(buf) - (HEADER_BYTES - 1)
            for c in header_candidates(buf, stop, self.max_record_bytes).tolist():
                # numpy's tables proposed it; the maintained C implementation decides.
                length, length_crc = _HEADER.unpack_from(buf, c)
                if masked_crc32c(buf[c:c + 8]) != length_crc:
                    continue
                if self._payload_ok(f, buf, pos, pos + c, length) is not False:
                    return pos + c, True
            pos += stop

    def _payload_ok(self, f: BinaryIO, buf: bytes, pos: int, at: int, length: int) -> Optional[bool]:
        """Whether the payload of the record at `at` matches its checksum; None when the
        file ends first. Streams a long payload rather than holding it."""
        begin = at + HEADER_BYTES
        end = begin + length
        if end + FOOTER_BYTES <= pos + len(buf):
            payload = buf[begin - pos:end - pos]
            return masked_crc32c(payload) == _FOOTER.unpack_from(buf, end - pos)[0]
        crc = 0
        p = begin
        while p < end:
            part = self._read_at(f, p, min(self.chunk_bytes, end - p))
            if not part:
                return None
            crc = _crc_extend(crc, part)
            p += len(part)
        tail = self._read_at(f, end, FOOTER_BYTES)
        if len(tail) < FOOTER_BYTES:
            return None
        masked = (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _U32
        return masked == _FOOTER.unpack(tail)[0]
