"""A Chrome trace's text kept compressed in chunks, so that later passes read back the
events they need without inflating the file from its start (`ChromeJsonEvents`).

Two parts in one file. The text itself, in chunks of `TEXT_CHUNK` bytes (or, without
event positions, in the reader's blocks). Then, optionally, the *coarse tier*: the events
a wide window keeps whole (every event but flows and slices shorter than a small fraction
of the trace's finest default bucket: instants, counters, metadata, long slices), copied
one after another in file order and chunked the same way. A window over a tenth of a
16 GiB trace keeps ~10 k events spread over all of its 1.6 GB of text; nearly every chunk
holds one, so without the tier it inflates nearly all of them; with it, it inflates the
tier's share of the window (~15 % of the events on a Kineto trace) and the chunks of the
few events outside it.

The tier's text lies after the file's in one address space: its chunk tables go on
where the text's end (`firsts` keeps increasing from `tier_base`, the text's size), and
`tier` holds, per tier event, its index and where it starts in the tier's text (two int64
columns, written a part at a time while the pass streams and then mapped, or kept in the
index store). Nothing else changes for a reader that ignores the tier.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator, Optional

import msgspec
import numpy as np

from ..errors import KeptTextDamaged, TraceError
from ..model.mapped import ColumnFiles, SpillFailed
from ..native import scanner_module
from . import kept_codec
from .sources import FileIdentity, open_regular

# The chunks text read by offset is kept in (`BlockStore.add_text`): a later pass inflates
# a chunk for any event in it, so small, but big enough to keep the codec's ratio (256 KiB
# chunks of ISA-L level 1: 1.7 % bigger than 16 MB blocks on a Kineto trace, and inflated
# 2x faster a byte; zstd, `kept_codec`, loses as little at this size).
TEXT_CHUNK = 256 * 1024
# At most this much of the kept text's file is asked for ahead of a window's reads (`_prefetch`).
_PREFETCH_BYTES = 64 << 20
# What a chunk of a store kept by events (a reader's blocks, without positions) may hold at
# most when read back: a block is a read of the file and the event it ends in.
_EVENT_BLOCK_LIMIT = 1 << 31
# A request for more events than this reads them from the text alone (level 0 of a whole
# trace: the tier would only add its chunks); a window's view keeps far fewer. The events
# read through the tier are held at once (~340 bytes each on a Kineto trace).
TIER_MAX_EVENTS = 1 << 16
# A tier past this share of the text read (once TIER_JUDGED_AFTER bytes are read) is given up: it would
# save little (a trace of mostly instants) and cost nearly the text again on disk.
TIER_MAX_SHARE = 0.4
TIER_JUDGED_AFTER = 64 << 20
_TIER_ROWS = 1 << 16  # events looked at at once while the pass streams
_GATHER_BYTES = 1 << 20  # the tier's text gathered at once from what is read

# Threads that compress a read's chunks at once (`BlockStore.add_text`): the keeping after a
# first view inflated on one core and compressed on the other in turn, and a zoom asked
# meanwhile waits for it to pass its events.
_COMPRESS_THREADS = max(1, min(4, os.cpu_count() or 1))
_pool: Optional[tuple[int, ThreadPoolExecutor]] = None  # (the process that made it, the pool)
_pool_lock = threading.Lock()


def _compressors() -> ThreadPoolExecutor:
    """The pool, made on first use in this process (a forked child makes its own: the
    parent's threads are not in it)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(_COMPRESS_THREADS, thread_name_prefix="tb-reduce-keep"))
        return _pool[1]


Tier = tuple[np.ndarray, np.ndarray]  # the tier's events: indices, starts in the tier's text

raw_list = msgspec.json.Decoder(list[msgspec.Raw])


class BlockStore:
    """Blocks of event JSON (`[...]`) or chunks of text, compressed, in one file; read by block."""

    def __init__(self, directory: str, prefix: str = ".blocks-") -> None:
        os.makedirs(directory, exist_ok=True)
        fd, self.path = tempfile.mkstemp(prefix=prefix, dir=directory)
        self._file = os.fdopen(fd, "w+b")
        self._fd = fd
        self._offsets: list[int] = [0]
        self._firsts: list[int] = [0]
        self._pending = bytearray()  # text of a chunk not yet full (`add_text`)
        self.tier: Optional[Tier] = None
        self.tier_base = 0  # where the tier's text starts, after the file's
        self.failed = False
        # Held while a chunk is written and listed, so `partial` sees whole chunks only.
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _remove, self._file, self.path)

    @classmethod
    def kept(cls, path: str, offsets: np.ndarray, firsts: np.ndarray, tier: Optional[Tier] = None,
             tier_base: int = 0, expect: Optional[FileIdentity] = None) -> BlockStore:
        """A store written by an earlier process, read-only: closed, not removed, when collected.
        `expect`: the file it must be (device and inode), else `FileChanged`."""
        self = cls.__new__(cls)
        self._file, _ = open_regular(path, expect=expect)  # without blocking, a regular file only
        self.path = path
        self._fd = self._file.fileno()
        self._offsets = [int(x) for x in offsets]
        self._firsts = [int(x) for x in firsts]
        self._firsts_arr = np.asarray(firsts, dtype=np.int64)
        self._pending = bytearray()
        self.tier, self.tier_base = tier, tier_base
        self.failed = False
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, self._file.close)
        return self

    @property
    def covered(self) -> int:
        """How much of the text (by offset, `add_text`) is kept so far, in whole chunks."""
        return self._firsts[-1]

    def partial(self) -> Optional[BlockStore]:
        """The text kept so far (`covered`), as a store of its own to read while this one
        is still being written (by `ChromeJsonEvents.keep_store`, on another thread): the
        chunks written are flushed and read through a file descriptor of its own, so this
        one may go on, fail or be removed meanwhile. None if it failed or cannot be read."""
        with self._lock:
            if self.failed:
                return None
            try:
                self._file.flush()
                this = FileIdentity.from_stat(os.fstat(self._fd))  # the file being written, not one put at its path
                return BlockStore.kept(self.path, list(self._offsets), list(self._firsts), expect=this)
            except (OSError, TraceError):  # the disk refused the flush; the file is gone
                return None

    def add(self, text: Any, events: int) -> None:
        """Keep one block; a store that cannot be written (a full disk) gives up quietly:
        it only saves later passes time, and the pass that builds it goes on without it."""
        if self.failed:
            return
        self._write([kept_codec.compress(text)], [events])

    def _write(self, frames: list[bytes], sizes: list[int]) -> None:
        """Append compressed chunks (and each one's events or text bytes) in order."""
        with self._lock:
            try:
                self._file.write(b"".join(frames) if len(frames) > 1 else frames[0])
            except OSError:
                self.failed = True
                self._finalizer()
                return
            for frame, size in zip(frames, sizes):
                self._offsets.append(self._offsets[-1] + len(frame))
                self._firsts.append(self._firsts[-1] + size)

    def add_text(self, text: Any) -> None:
        """Keep text read by offset (`ChromeJsonEvents._copy`) in chunks of `TEXT_CHUNK`
        bytes, whatever the sizes it comes in: a later pass inflates only the chunks its
        events lie in, so a few events far apart cost a few small chunks, not a 16 MB
        block each. The chunks of one call are compressed on `_compressors` at once (the
        pass's other thread inflates; zstd lets go of the GIL) and written in order before
        it returns, so `text`, a buffer its caller reads into again, is not held after."""
        if self.failed:
            return
        view = memoryview(text)
        at = 0
        pieces: list[Any] = []
        if self._pending:
            at = min(len(view), TEXT_CHUNK - len(self._pending))
            self._pending += view[:at]
            if len(self._pending) < TEXT_CHUNK:
                return
            pieces.append(self._pending)
            self._pending = bytearray()
        while len(view) - at >= TEXT_CHUNK:
            pieces.append(view[at:at + TEXT_CHUNK])
            at += TEXT_CHUNK
        if pieces:
            frames = list(_compressors().map(kept_codec.compress, pieces)) if len(pieces) > 1 else \
                [kept_codec.compress(pieces[0])]
            self._write(frames, [TEXT_CHUNK] * len(pieces))
        self._pending += view[at:]

    def finish(self) -> None:
        if self._pending:
            self.add(self._pending, len(self._pending))
            self._pending = bytearray()
        try:
            self._file.flush()
        except OSError:
            self.failed = True
            self._finalizer()
            return
        self._firsts_arr = np.asarray(self._firsts, dtype=np.int64)

    def append_tier(self, tier: TierBuilder) -> None:
        """Put a finished tier's text after this (finished) store's text, and keep its table."""
        if self.failed or tier.failed or tier.table is None:
            return
        base_offset, base_text = self._offsets[-1], self._firsts[-1]
        try:
            with open(tier.text.path, "rb") as f:
                while piece := f.read(1 << 24):
                    self._file.write(piece)
            self._file.flush()
        except OSError:
            self.failed = True
            self._finalizer()
            return
        self._offsets += [base_offset + x for x in tier.text._offsets[1:]]
        self._firsts += [base_text + x for x in tier.text._firsts[1:]]
        self._firsts_arr = np.asarray(self._firsts, dtype=np.int64)
        self.tier, self.tier_base = tier.table, base_text

    def close(self, remove: bool) -> None:
        if remove:
            self._finalizer()

    def events(self, indices: np.ndarray) -> Iterator[list[bytes]]:
        firsts = self._firsts_arr
        blocks = np.unique(np.searchsorted(firsts, indices, side="right") - 1)
        for b in blocks.tolist():
            if b >= len(firsts) - 1:
                raise TraceError(f"no event {int(indices[-1])} in this trace")
            lo, hi = self._offsets[b], self._offsets[b + 1]
            raws = raw_list.decode(kept_codec.decompress(os.pread(self._fd, hi - lo, lo), _EVENT_BLOCK_LIMIT))
            first = int(firsts[b])
            a, z = np.searchsorted(indices, [first, first + len(raws)])
            yield [bytes(raws[i]) for i in (indices[a:z] - first).tolist()]

    def copy_events(self, indices: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Iterator[list[bytes]]:
        """The events at `indices` (sorted), at [starts, ends) in the text: those in the
        tier copied from it (when the request is a window's, not a whole level 0)."""
        tier = self.tier
        if tier is None or not len(indices) or len(indices) > TIER_MAX_EVENTS or not len(tier[0]):
            yield from self.copy(starts, ends)
            return
        ids = tier[0]
        at = np.minimum(np.searchsorted(ids, indices), len(ids) - 1)
        hit = ids[at] == indices
        if not hit.any():
            yield from self.copy(starts, ends)
            return
        where = np.where(hit, np.asarray(tier[1][at]) + self.tier_base, starts)
        order = np.argsort(where, kind="stable")  # the text's events first, then the tier's
        out: list[Any] = [None] * len(indices)
        slots = iter(order.tolist())
        for batch in self.copy(where[order], where[order] + (ends - starts)[order]):
            for raw in batch:
                out[next(slots)] = raw
        yield out

    def copy(self, starts: np.ndarray, ends: np.ndarray) -> Iterator[list[bytes]]:
        """Byte ranges of the text kept by offset (`ChromeJsonEvents._copy`), sorted: each
        chunk they lie in is read and inflated once, and only the ranges are copied out of
        it (a range across chunks joins its own pieces, never the chunks)."""
        firsts = self._firsts_arr  # each chunk's offset; the last entry is the end
        total = int(firsts[-1])
        if len(ends) and int(ends[-1]) > total:
            raise TraceError("an event lies beyond the kept text")
        lo_chunk = np.searchsorted(firsts, starts, side="right") - 1
        hi_chunk = np.searchsorted(firsts, np.maximum(ends - 1, starts), side="right") - 1
        self._prefetch(lo_chunk, hi_chunk)
        held: dict[int, bytes] = {}  # inflated chunks still needed by the ranges to come
        i, n = 0, len(starts)
        while i < n:
            a = int(lo_chunk[i])
            j = int(np.searchsorted(lo_chunk, a, side="right"))  # the run of ranges starting in chunk a
            b = int(hi_chunk[i:j].max())
            for c in [c for c in held if c < a]:
                del held[c]
            for c in range(a, b + 1):
                if c not in held:
                    held[c] = self._chunk(c)
            x, y = (starts[i:j] - firsts[a]).tolist(), (ends[i:j] - firsts[a]).tolist()
            data = held[a]
            if b == a:
                yield [data[p:q] for p, q in zip(x, y)]
            else:
                yield [data[p:q] if q <= len(data) else _across(held, a, p, q) for p, q in zip(x, y)]
            i = j

    def _prefetch(self, lo_chunk: np.ndarray, hi_chunk: np.ndarray) -> None:
        """Ask the kernel for the compressed bytes of the chunks [lo_chunk[i], hi_chunk[i]]
        at once, run by run of chunks, before they are read one by one: the reads then
        wait for those bytes in one round of I/O rather than a miss at a time, each with
        the read-ahead it starts (up to `read_ahead_kb`). Past `_PREFETCH_BYTES` in all,
        the kernel reads ahead as it would (a wide read is one long run anyway)."""
        if not len(lo_chunk) or not hasattr(os, "posix_fadvise"):
            return
        need = np.zeros(len(self._offsets), dtype=np.int64)  # +1 where a run of chunks starts, -1 past its end
        np.add.at(need, lo_chunk, 1)
        np.add.at(need, hi_chunk + 1, -1)
        inside = np.cumsum(need[:-1]) > 0
        edges = np.flatnonzero(np.diff(np.concatenate(([False], inside, [False])).astype(np.int8)))
        offsets = np.asarray(self._offsets, dtype=np.int64)
        a, b = offsets[edges[0::2]], offsets[edges[1::2]]
        if int((b - a).sum()) > _PREFETCH_BYTES:
            return
        for lo, hi in zip(a.tolist(), b.tolist()):
            try:
                os.posix_fadvise(self._fd, lo, hi - lo, os.POSIX_FADV_WILLNEED)
            except OSError:  # advice only: the reads go on as they would
                return

    def _chunk(self, c: int) -> bytes:
        """Chunk `c` of text kept by offset: exactly the text between its offset and the next's."""
        lo, hi = self._offsets[c], self._offsets[c + 1]
        size = self._firsts[c + 1] - self._firsts[c]
        text = kept_codec.decompress(os.pread(self._fd, hi - lo, lo), size)
        if len(text) != size:
            raise KeptTextDamaged("a kept chunk is damaged (it holds another length than its table says)")
        return text


def _across(held: dict[int, bytes], a: int, p: int, q: int) -> bytes:
    """Bytes [p, q) from the start of chunk `a`, through the chunks after it."""
    parts, c, base = [], a, 0
    while p < q:
        data = held[c]
        if p < base + len(data):
            parts.append(data[p - base:min(q, base + len(data)) - base])
            p = min(q, base + len(data))
        base += len(data)
        c += 1
    return b"".join(parts)


class TierBuilder:
    """The coarse tier made while a full pass streams the text by (`ChromeJsonEvents._copy`):
    the events `rows(a, b)` selects among events a..b-1 (a boolean mask), gathered from each
    read as soon as they are whole, their text chunked into a store of its own and their
    table written to files a part at a time. `failed` (a disk error, or a tier that grew past
    `TIER_MAX_SHARE`): no tier, the pass goes on."""

    def __init__(self, directory: str, rows: Callable[[int, int], np.ndarray], starts: np.ndarray,
                 lengths: np.ndarray) -> None:
        self._rows, self._starts, self._lengths = rows, starts, lengths
        self.text = BlockStore(directory, prefix=".tier-")
        self._folder = tempfile.mkdtemp(prefix=".tier-table-", dir=directory)
        self._done = weakref.finalize(self, shutil.rmtree, self._folder, True)
        self._table: Optional[ColumnFiles] = ColumnFiles(
            self._folder, {"ids": "ids.npy", "starts": "starts.npy"}, {"ids": np.int64, "starts": np.int64},
            "the coarse tier")
        self.table: Optional[Tier] = None
        self.row = 0  # the first event not gathered yet
        self._carry: Optional[bytes] = None  # the text of that event read so far, when it began in a read
        self._carry_at = 0
        self.size = 0  # the tier's text so far
        self.count = 0
        self.failed = False

    def take(self, chunk: Any, at: int) -> None:
        """Gather the tier's events that end within `chunk`, the text from offset `at` (the
        reads of one pass, in order). An event across two reads is joined from the tail
        kept of the first and the head of the second: never a copy of a whole read."""
        if self.failed:
            return
        starts, n, end = self._starts, len(self._starts), at + len(chunk)
        try:
            if self._carry is not None and self.row < n:  # the event begun in the last read
                r = self.row
                e = int(starts[r]) + int(self._lengths[r])
                if e > end:  # longer than this read too
                    self._carry += bytes(chunk)
                    return
                self._take_rows(self._carry + bytes(chunk[:e - at]), self._carry_at, r, r + 1)
                self.row, self._carry = r + 1, None
            hi = int(np.searchsorted(starts, end, side="left"))
            if hi > self.row and int(starts[hi - 1]) + int(self._lengths[hi - 1]) > end:
                hi -= 1  # the last one goes on past this read
            if hi > self.row:
                self._take_rows(chunk, at, self.row, hi)
                self.row = hi
        except SpillFailed:
            self.close()
            return
        if self.row < n and int(starts[self.row]) < end:
            self._carry_at = int(starts[self.row])
            self._carry = bytes(chunk[self._carry_at - at:])
        if self.text.failed or (end > TIER_JUDGED_AFTER and self.size > TIER_MAX_SHARE * end):
            self.close()

    def _take_rows(self, src: Any, base: int, lo: int, hi: int) -> None:
        """The selected events among lo..hi-1, all within `src` (the text from `base`)."""
        text = np.frombuffer(src, dtype=np.uint8)
        for a in range(lo, hi, _TIER_ROWS):
            b = min(hi, a + _TIER_ROWS)
            sel = a + np.flatnonzero(self._rows(a, b))
            if not len(sel):
                continue
            where = np.asarray(self._starts[sel]) - base
            lengths = np.asarray(self._lengths[sel], dtype=np.int64)
            before = np.cumsum(lengths) - lengths  # where each starts in the tier's text, from here
            total = int(lengths.sum())
            self.text.add_text(_gather(text, where, lengths, total))
            assert self._table is not None
            self._table.append({"ids": sel, "starts": self.size + before})
            self.size += total
            self.count += len(sel)

    def finish(self) -> Optional[Tier]:
        """The tier's table (mapped), its text finished; None when it failed, is not whole
        or is empty."""
        if self.failed or self.row != len(self._starts) or self._table is None or not self.count:
            self.close()
            return None
        self.text.finish()
        try:
            cols = self._table.finish(self.count)
        except SpillFailed:
            self._table = None
            self.close()
            return None
        self._table = None
        if self.text.failed:
            self.close()
            return None
        self.table = (cols["ids"], cols["starts"])
        return self.table

    def close(self) -> None:
        """Remove the tier's files (its table stays readable while mapped)."""
        self.failed = self.failed or self.table is None
        if self._table is not None:
            self._table.close()
            self._table = None
        self.text.close(remove=True)
        self._done()


def _gather(text: np.ndarray, at: np.ndarray, lengths: np.ndarray, total: int) -> Any:
    """text[at[i]:at[i] + lengths[i]] for each i, one after another: natively (one memcpy
    each), or by numpy, _GATHER_BYTES at a time (its byte offsets cost 4 bytes a byte)."""
    module = scanner_module()
    if module is not None:
        out = bytearray(total)
        module.gather(text, np.ascontiguousarray(at, dtype=np.int64), lengths, out)
        return out
    before = np.cumsum(lengths) - lengths
    parts = []
    cuts = np.searchsorted(before, np.arange(0, total, _GATHER_BYTES), side="left").tolist() + [len(at)]
    for x, y in zip(cuts, cuts[1:]):
        if y > x:
            start = (at[x:y] - before[x:y] + before[x]).astype(np.int32)
            n = int(before[y - 1] + lengths[y - 1] - before[x])
            parts.append(text[np.repeat(start, lengths[x:y]) + np.arange(n, dtype=np.int32)])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)


def _remove(file: Any, path: str) -> None:
    try:
        file.close()
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
