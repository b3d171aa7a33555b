"""Caches for reduced traces: on disk (bytes) and in memory (parsed indexes).

Disk (SPEC §6): one file per key, named by the key's SHA-256, written to a temp
file and renamed (atomic), holding a header with the payload's length and SHA-256
so a damaged or half-written entry is detected, removed and rebuilt. Bounded in
bytes, least recently used first out (recency = the file's mtime, touched on every
hit, so it survives restarts). Memory: parsed indexes, bounded by their estimated
size, least recently used first out.

`SingleFlight` makes concurrent requests for one key compute it once: the first
caller computes, the others wait for its result (or its error).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections import OrderedDict
from typing import Any, Callable, Generic, Hashable, Optional, TypeVar

T = TypeVar("T")
MAGIC = b"TBRC1\n"
_HEADER = len(MAGIC) + 8 + 32


def key_digest(key: Any) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class DiskCache:
    """Bytes by key, on disk, bounded to `max_bytes` (LRU)."""

    def __init__(self, directory: str, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        os.makedirs(directory, exist_ok=True)
        self._lock = threading.Lock()
        self._sizes: dict[str, int] = {}
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            if name.endswith(".entry"):
                try:
                    self._sizes[name] = os.path.getsize(path)
                except OSError:
                    pass
            elif name.startswith(".tmp-"):
                _unlink(path)  # a write that a crash interrupted
        self.hits = self.misses = self.damaged = 0

    def _path(self, digest: str) -> str:
        return os.path.join(self.directory, digest + ".entry")

    def get(self, digest: str) -> Optional[bytes]:
        path = self._path(digest)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError:
            self.misses += 1
            return None
        payload = _unframe(raw)
        if payload is None:
            self.damaged += 1
            self.misses += 1
            with self._lock:
                self._sizes.pop(os.path.basename(path), None)
            _unlink(path)
            return None
        try:
            os.utime(path)  # most recently used
        except OSError:
            pass
        self.hits += 1
        return payload

    def put(self, digest: str, payload: bytes) -> None:
        framed = _frame(payload)
        if len(framed) > self.max_bytes:
            return  # would evict everything else and still not fit
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(framed)
            os.replace(tmp, self._path(digest))
        except OSError:
            _unlink(tmp)
            return
        with self._lock:
            self._sizes[digest + ".entry"] = len(framed)
            self._evict()

    def total_bytes(self) -> int:
        with self._lock:
            return sum(self._sizes.values())

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


def _frame(payload: bytes) -> bytes:
    return MAGIC + len(payload).to_bytes(8, "little") + hashlib.sha256(payload).digest() + payload


def _unframe(raw: bytes) -> Optional[bytes]:
    if len(raw) < _HEADER or not raw.startswith(MAGIC):
        return None
    n = int.from_bytes(raw[len(MAGIC):len(MAGIC) + 8], "little")
    payload = raw[_HEADER:]
    if len(payload) != n or hashlib.sha256(payload).digest() != raw[len(MAGIC) + 8:_HEADER]:
        return None
    return payload


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class MemoryLRU(Generic[T]):
    """Values by key, bounded by the sum of `size(value)` (LRU)."""

    def __init__(self, max_bytes: int, size: Callable[[T], int]) -> None:
        self.max_bytes = max_bytes
        self._size = size
        self._items: OrderedDict[Hashable, tuple[T, int]] = OrderedDict()
        self._total = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Optional[T]:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: Hashable, value: T) -> None:
        n = self._size(value)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._total -= old[1]
            self._items[key] = (value, n)
            self._total += n
            while self._total > self.max_bytes and len(self._items) > 1:
                _, (_, m) = self._items.popitem(last=False)
                self._total -= m

    def reserve(self, n: int) -> None:
        """Evict least recently used values until `n` more bytes fit (or none is left):
        called before building a value, so the old ones go before the peak, not after."""
        with self._lock:
            while self._items and self._total + n > self.max_bytes:
                _, (_, m) = self._items.popitem(last=False)
                self._total -= m

    def discard_where(self, predicate: Callable[[Hashable], bool]) -> None:
        with self._lock:
            for key in [k for k in self._items if predicate(k)]:
                self._total -= self._items.pop(key)[1]

    @property
    def total_bytes(self) -> int:
        return self._total

    def __len__(self) -> int:
        return len(self._items)


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
