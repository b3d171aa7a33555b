"""Caches for reduced traces: on disk (streamed bodies) and in memory (parsed indexes).

Disk (SPEC §6): one file per key, named by the key's SHA-256, holding a header
(lengths and SHA-256 of the body and of its metadata), the body (the reduced trace,
gzip) and the metadata (its stats). A computation writes its body straight into a
temp file here (`Spool`), renamed into place when done (atomic), and the response is
streamed back from that file — a reduced trace is never held whole in memory, so
concurrent responses cost a read buffer each, not their size. Damaged or
half-written entries are detected by their checksums, removed and rebuilt. Bounded
in bytes, least recently used first out (recency = the file's mtime, touched on
every hit, so it survives restarts).

A cache directory that cannot be created or written (read-only, full, a path under
a regular file) never breaks serving: bodies then stay in memory, charged to the
memory budget, and the log says so once.

Memory: parsed indexes (`IndexCache`), kept while the memory budget has room and
dropped least recently used first when a computation needs the room.

`SingleFlight` makes concurrent requests for one key compute it once: the first
caller computes, the others wait for its result (or its error).
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import stat
import sys
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from typing import Any, Callable, Generic, Hashable, Iterator, Optional, TypeVar, Union

from ..budget import Account, MemoryBudget, Unlimited

log = logging.getLogger(__name__)
T = TypeVar("T")

MAGIC = b"TBRC2\n"
_HEADER = len(MAGIC) + 8 + 8 + 32 + 32  # magic, body length, meta length, SHA-256 of each
CHUNK = 1 << 20
RETRY_S = 60.0  # how often a cache directory that could not be made is tried again


def key_digest(key: Any) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# ---- bodies ----------------------------------------------------------------------


class FileBody:
    """A body in a file, read by position (`pread`), so many responses can stream it at once.

    Owns its descriptor: closed when the body is garbage, which is after the last
    response streaming it is done; an entry evicted meanwhile stays readable.
    """

    def __init__(self, fd: int, offset: int, length: int) -> None:
        self.offset = offset
        self.length = length
        self._fd = fd
        self._closer = weakref.finalize(self, os.close, fd)

    def chunks(self, size: int = CHUNK) -> Iterator[bytes]:
        pos, end = self.offset, self.offset + self.length
        while pos < end:
            data = os.pread(self._fd, min(size, end - pos), pos)
            if not data:
                raise OSError(f"cached body cut short at {pos - self.offset} of {self.length} bytes")
            pos += len(data)
            yield data

    def read(self) -> bytes:
        return b"".join(self.chunks())



class MemoryBody:
    """A body held in memory (the cache could not be written); its bytes stay charged
    to the memory budget until the last response holding it is done."""

    def __init__(self, data: bytes, account: Optional[Account] = None) -> None:
        self.data = data
        self.length = len(data)
        if account is not None:
            account.keep_until_collected(self)

    def chunks(self, size: int = CHUNK) -> Iterator[bytes]:
        view = memoryview(self.data)
        for pos in range(0, len(view), size):
            yield bytes(view[pos:pos + size])

    def read(self) -> bytes:
        return self.data

    def close(self) -> None:
        pass


Body = Union[FileBody, MemoryBody]


class Entry:
    def __init__(self, meta: bytes, body: Optional[FileBody]) -> None:
        self.meta = meta
        self.body = body


# ---- the disk cache --------------------------------------------------------------------


class DiskCache:
    """Entries (a body and its metadata) by key digest, on disk, bounded to `max_bytes` (LRU)."""

    def __init__(self, directory: str, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._sizes: dict[str, int] = {}
        self._warned = False
        self.hits = self.misses = self.damaged = self.write_failures = 0
        self.usable = self._open_directory()
        self._retry_at = time.monotonic() + RETRY_S

    def _check_usable(self) -> bool:
        """A directory that could not be made at start is tried again now and then (a
        mount that came late, a permission fixed), never on every request."""
        if not self.usable and time.monotonic() >= self._retry_at:
            self._retry_at = time.monotonic() + RETRY_S
            self.usable = self._open_directory()
        return self.usable

    def _open_directory(self) -> bool:
        try:
            os.makedirs(self.directory, exist_ok=True)
            names = os.listdir(self.directory)
        except OSError as exc:
            self._warn(f"cannot be created or read ({exc.strerror or exc})")
            return False
        for name in names:
            path = os.path.join(self.directory, name)
            if name.endswith(".entry"):
                try:
                    st = os.stat(path, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    self._sizes[name] = st.st_size
            elif name.startswith(".tmp-"):
                _unlink(path)  # a write that a crash interrupted
        return True

    def _warn(self, reason: str) -> None:
        """One warning per cache, not one per request: a full disk must not flood the log."""
        if not self._warned:
            self._warned = True
            log.warning("tb_reduce: the cache directory %s %s; reduced traces are served from memory"
                        " (counted against --tb_reduce_memory_mb) until it can be written", self.directory, reason)

    def _path(self, digest: str) -> str:
        return os.path.join(self.directory, digest + ".entry")

    def open(self, digest: str, with_body: bool = True) -> Optional[Entry]:
        """The entry for `digest`, its checksums verified (the body's only when asked for)."""
        if not self._check_usable():
            self.misses += 1
            return None
        path = self._path(digest)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            self.misses += 1
            return None
        try:
            entry = self._read(fd, with_body)
        except OSError:
            entry = None
        if entry is None:
            os.close(fd)
            self.damaged += 1
            self.misses += 1
            with self._lock:
                self._sizes.pop(os.path.basename(path), None)
            _unlink(path)
            return None
        if not with_body:
            os.close(fd)
        try:
            os.utime(path)  # most recently used
        except OSError:
            pass
        self.hits += 1
        return entry

    @staticmethod
    def _read(fd: int, with_body: bool) -> Optional[Entry]:
        head = os.pread(fd, _HEADER, 0)
        if len(head) < _HEADER or not head.startswith(MAGIC):
            return None
        at = len(MAGIC)
        body_len = int.from_bytes(head[at:at + 8], "little")
        meta_len = int.from_bytes(head[at + 8:at + 16], "little")
        body_sha, meta_sha = head[at + 16:at + 48], head[at + 48:at + 80]
        if os.fstat(fd).st_size != _HEADER + body_len + meta_len or meta_len > 64 << 20:
            return None
        meta = os.pread(fd, meta_len, _HEADER + body_len)
        if len(meta) != meta_len or hashlib.sha256(meta).digest() != meta_sha:
            return None
        if not with_body:
            return Entry(meta, None)
        h = hashlib.sha256()
        pos, end = _HEADER, _HEADER + body_len
        while pos < end:
            chunk = os.pread(fd, min(CHUNK, end - pos), pos)
            if not chunk:
                return None
            h.update(chunk)
            pos += len(chunk)
        if h.digest() != body_sha:
            return None
        return Entry(meta, FileBody(fd, _HEADER, body_len))

    def spool(self, digest: str, budget: MemoryBudget, store: bool = True) -> Spool:
        """Somewhere to write the body of `digest` while it is computed; a body that must
        stay in memory is charged to `budget` for as long as it lives. `store=False`: an
        answer that must not be kept (it lacks parts that failed for a passing reason) is
        held in memory only and never enters the cache."""
        return Spool(self, digest, budget, store)

    def put(self, digest: str, meta: bytes, body: bytes) -> None:
        """Store a whole entry at once (tests, small values)."""
        spool = self.spool(digest, Unlimited())
        spool.write(body)
        spool.finish(meta)

    def total_bytes(self) -> int:
        with self._lock:
            return sum(self._sizes.values())

    def _commit(self, tmp: str, digest: str, size: int) -> bool:
        """Rename a finished temp file into place, unless it is bigger than the whole cache."""
        if size > self.max_bytes:
            _unlink(tmp)  # served from its open descriptor, not kept
            return False
        with self._lock:  # the rename and the size ledger together: racing writers of one key agree
            os.replace(tmp, self._path(digest))
            self._sizes[digest + ".entry"] = size
            self._evict()
        return True

    def _evict(self) -> None:
        total = sum(self._sizes.values())
        if total <= self.max_bytes:
            return
        aged = []
        for name in self._sizes:
            try:
                aged.append((os.path.getmtime(os.path.join(self.directory, name)), name))
            except OSError:
                aged.append((0.0, name))
        for _, name in sorted(aged):
            if total <= self.max_bytes:
                break
            total -= self._sizes.pop(name)
            _unlink(os.path.join(self.directory, name))


class Spool:
    """Where a computation writes its body: a temp file in the cache (file-like: `write`).

    `finish(meta)` seals it (header, checksums, atomic rename into the cache) and
    returns the body to stream. When the cache cannot be written — at the start or
    half way (a full disk) — the body moves to memory and is charged to `budget`
    from then on, until the body is freed; what was already written is read back, so
    nothing is computed twice.
    """

    _BUFFER = 1 << 20

    def __init__(self, cache: DiskCache, digest: str, budget: MemoryBudget, store: bool = True) -> None:
        self._cache = cache
        self._digest = digest
        self._account: Account = budget.account("the reduced trace, held in memory")
        self._hash = hashlib.sha256()
        self._length = 0
        self._pending = bytearray()
        self._memory: Optional[list[bytes]] = None
        self._fd: Optional[int] = None
        self._tmp = ""
        if store and cache._check_usable():
            try:
                self._fd, self._tmp = tempfile.mkstemp(prefix=".tmp-", dir=cache.directory)
                self._write_all(bytes(_HEADER), 0)
            except OSError as exc:
                self._to_memory(exc)
        else:
            self._memory = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        data = bytes(data)
        if self._memory is not None:
            self._account.charge(len(data), "the reduced trace (the cache cannot be written)")
            self._memory.append(data)
        self._hash.update(data)
        self._length += len(data)
        if self._memory is not None:
            return len(data)
        self._pending += data
        if len(self._pending) >= self._BUFFER:
            self._flush()
        return len(data)

    def flush(self) -> None:
        pass  # buffered on purpose; `finish` writes the rest

    def _flush(self) -> None:
        if self._fd is None or not self._pending:
            return
        try:
            self._write_all(bytes(self._pending), _HEADER + self._length - len(self._pending))
            self._pending.clear()
        except OSError as exc:
            self._to_memory(exc)

    def _write_all(self, data: bytes, offset: int) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:
            n = os.pwrite(self._fd, view, offset)
            view, offset = view[n:], offset + n

    def _to_memory(self, exc: OSError) -> None:
        """Keep what is written so far in memory and carry on there."""
        self._cache.write_failures += 1
        self._cache._warn(f"cannot be written ({exc.strerror or exc})")
        written = self._length - len(self._pending)
        parts: list[bytes] = []
        if self._fd is not None:
            if written:
                self._account.charge(written, "the reduced trace (the cache cannot be written)")
                parts.append(_pread_all(self._fd, written, _HEADER))
            self._discard_file()
        if self._pending:
            self._account.charge(len(self._pending), "the reduced trace (the cache cannot be written)")
            parts.append(bytes(self._pending))
            self._pending.clear()
        self._memory = parts

    def _discard_file(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._tmp:
            _unlink(self._tmp)
            self._tmp = ""

    def finish(self, meta: bytes) -> Body:
        self._flush()
        if self._fd is not None:
            try:
                header = (MAGIC + self._length.to_bytes(8, "little") + len(meta).to_bytes(8, "little")
                          + self._hash.digest() + hashlib.sha256(meta).digest())
                self._write_all(meta, _HEADER + self._length)
                self._write_all(header, 0)
                self._cache._commit(self._tmp, self._digest, _HEADER + self._length + len(meta))
                fd, self._fd, self._tmp = self._fd, None, ""
                return FileBody(fd, _HEADER, self._length)
            except OSError as exc:
                self._to_memory(exc)
        assert self._memory is not None
        # The parts and their join exist together for a moment: hold both, then one.
        self._account.charge(self._length, "the reduced trace (the cache cannot be written)")
        data = b"".join(self._memory)
        self._memory = None
        self._account.release(self._length)
        return MemoryBody(data, self._account)

    def abort(self) -> None:
        """The computation failed: leave nothing behind."""
        self._discard_file()
        self._memory = None
        self._account.close()

    def __del__(self) -> None:
        if self._fd is not None:
            self.abort()


def _pread_all(fd: int, n: int, offset: int) -> bytes:
    parts, got = [], 0
    while got < n:
        data = os.pread(fd, n - got, offset + got)
        if not data:
            raise OSError("short read from the cache's temp file")
        parts.append(data)
        got += len(data)
    return b"".join(parts)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# ---- parsed indexes in memory ------------------------------------------------------------


class IndexCache(Generic[T]):
    """Parsed indexes by key, least recently used first out when the budget needs room.

    The cache only holds references: each index's memory is charged to the budget
    by whoever built it and given back when the index is really freed, so dropping
    one that a request still uses frees nothing until that request is done — and
    the budget says so.
    """

    def __init__(self, budget: MemoryBudget) -> None:
        self.budget = budget
        self._items: OrderedDict[Hashable, T] = OrderedDict()
        self._lock = threading.Lock()
        budget.add_reclaimer(self.reclaim)

    def get(self, key: Hashable) -> Optional[T]:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: Hashable, value: T) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)

    def discard_where(self, predicate: Callable[[Hashable], bool]) -> None:
        with self._lock:
            for key in [k for k in self._items if predicate(k)]:
                del self._items[key]

    def reclaim(self, needed: int) -> None:
        """Drop idle indexes, least recently used first, until `needed` bytes are free.

        An index a request is using is skipped: dropping it would free nothing until
        that request ends, and the next request would parse the file again. "Using" is
        read off the reference count, so a value caught in a reference cycle counts as
        used; a `TraceIndex` holds none (tests/serve/test_plugin_budget.py checks it).
        """
        dropped = False
        while self.budget.free < needed:
            with self._lock:
                idle = _first_idle(self._items)
                if idle is None:
                    break
                del self._items[idle]
            dropped = True
        if dropped and self.budget.free < needed:
            gc.collect()  # an index caught in a reference cycle is freed only by the collector

    def __len__(self) -> int:
        return len(self._items)


def _first_idle(items: OrderedDict) -> Optional[Hashable]:
    """The first key whose value nobody but `items` references."""
    for key, value in items.items():
        if sys.getrefcount(value) <= _IDLE_REFS:
            return key
    return None


def _idle_refs() -> int:
    """What `sys.getrefcount` says inside `_first_idle` of a value only the dict holds
    (measured, since the count of temporary references differs between Pythons)."""
    probe: OrderedDict = OrderedDict(k=object())
    for _, value in probe.items():
        return sys.getrefcount(value)
    return 0  # pragma: no cover


_IDLE_REFS = _idle_refs()


# ---- single flight -------------------------------------------------------------------------


class SingleFlight:
    """One computation per key at a time; callers that arrive meanwhile share its outcome."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[Hashable, _Call] = {}
        self.computations = 0

    def do(self, key: Hashable, fn: Callable[[], T]) -> T:
        with self._lock:
            call = self._calls.get(key)
            leader = call is None
            if leader:
                call = self._calls[key] = _Call()
                self.computations += 1  # under the lock: concurrent leaders of other keys must not lose a count
        assert call is not None
        if not leader:
            call.done.wait()
            if call.error is not None:
                raise call.error
            return call.result
        try:
            call.result = fn()
            return call.result
        except BaseException as exc:
            call.error = exc
            raise
        finally:
            with self._lock:
                del self._calls[key]
            call.done.set()


class _Call:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Any = None
        self.error: Optional[BaseException] = None
