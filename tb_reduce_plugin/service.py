"""Serving reduced traces from a logdir: discovery + index cache + reduction cache.

Everything the plugin routes need, without HTTP: find the file a (run, host)
names, refuse it if it is over the input limit (before reading it), parse it once
into an index kept in memory (LRU, bounded) for every level and window asked of
it, and keep each reduction on disk (LRU, bounded) under a key of the file's
identity (path, size, mtime), level, window and format version. Concurrent
requests for one key compute it once.
"""

from __future__ import annotations

import io
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Optional

from . import FORMAT_VERSION
from .cache import DiskCache, MemoryLRU, SingleFlight, key_digest
from .discovery import Catalog, TraceFile
from .errors import TraceError
from .pipeline import Level, TraceIndex, event_json, index_file, reduce_index

log = logging.getLogger(__name__)
MB = 1024 * 1024


class RequestError(Exception):
    """An error with the HTTP status it maps to and a one-line message for the user."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = " ".join(str(message).split())


@dataclass
class Reduction:
    gz: bytes  # the reduced trace, gzip
    stats: dict
    etag: str


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tb-reduce")


def index_bytes(index: TraceIndex) -> int:
    """Memory an index holds: its columns, strings and, for XSpace, the file."""
    t = index.table
    arrays = (t.ph, t.ts, t.dur, t.track, t.name, t.flow_key, t.bind_enclosing, t.scope,
              t.counter_event, t.counter_series, t.counter_value)
    n = sum(a.nbytes for a in arrays) + 60 * (len(t.names) + len(t.tracks))
    n += 40 * len(t)  # slices, order and depth, built on first use
    source = index.source
    lines = getattr(source, "lines", None)
    if lines:
        shared = {id(line.data): len(line.data) for line in lines}  # lines share the file's bytes
        n += sum(shared.values()) + sum(line.starts.nbytes + line.ends.nbytes for line in lines)
    return n


def estimated_index_bytes(tf: TraceFile) -> int:
    """What parsing `tf` will hold, from its size alone (measured: an XSpace index is
    about 1.5x its file; a Chrome index ~150 B an event, about half its JSON or 5x
    its gzip)."""
    if tf.format == "xspace":
        return int(tf.bytes * 1.5)
    return tf.bytes * 5 if tf.path.endswith(".gz") else tf.bytes // 2


class TraceService:
    def __init__(self, logdir: str, cache_dir: Optional[str] = None, cache_mb: float = 1024,
                 max_input_mb: float = 4096, memory_mb: float = 2048) -> None:
        self.catalog = Catalog(logdir)
        cache_dir = cache_dir or default_cache_dir()
        self.disk = DiskCache(cache_dir, int(cache_mb * MB))
        # Compressed event blocks of Chrome traces being zoomed (see ChromeJsonEvents);
        # leftovers of earlier processes go (a live one keeps its open file readable).
        self.store_dir = os.path.join(cache_dir, "blocks")
        if os.path.isdir(self.store_dir):
            for name in os.listdir(self.store_dir):
                if name.startswith(".blocks-"):
                    try:
                        os.unlink(os.path.join(self.store_dir, name))
                    except OSError:
                        pass
        self.indexes: MemoryLRU[TraceIndex] = MemoryLRU(int(memory_mb * MB), index_bytes)
        self.flight = SingleFlight()
        self.max_input_bytes = int(max_input_mb * MB)

    # ---- discovery -----------------------------------------------------------
    def runs(self) -> list[dict]:
        return self.catalog.runs()

    def has_traces(self) -> bool:
        return bool(self.catalog.files())

    def trace_file(self, run: str, host: str) -> TraceFile:
        tf = self.catalog.find(run, host)
        if tf is None:
            known = {f.run for f in self.catalog.files().values()}
            what = f"host {host!r} in run {run!r}" if run in known else f"run {run!r}"
            raise RequestError(404, f"no trace for {what}")
        if tf.bytes > self.max_input_bytes:
            raise RequestError(413, f"{os.path.basename(tf.path)} is {tf.bytes:,} bytes, over the input limit "
                                    f"of {self.max_input_bytes:,} bytes (--tb_reduce_max_input_mb)")
        return tf

    # ---- index -----------------------------------------------------------------
    def index(self, tf: TraceFile) -> TraceIndex:
        key = ("index", tf.path, tf.bytes, tf.mtime_ns)
        cached = self.indexes.get(key)
        if cached is not None:
            return cached

        def build() -> TraceIndex:
            hit = self.indexes.get(key)
            if hit is not None:
                return hit
            # A file that changed replaces its older versions; then make room first.
            self.indexes.discard_where(lambda k: k[1] == tf.path and k != key)
            self.indexes.reserve(estimated_index_bytes(tf))
            try:
                idx = index_file(tf.path, max_inflated_bytes=max(self.max_input_bytes * 64, 1 << 30),
                                 store_dir=self.store_dir)
            except TraceError as exc:
                raise RequestError(422, _naming(f"cannot read {os.path.basename(tf.path)}", exc, tf)) from None
            except MemoryError:
                raise RequestError(413, f"{os.path.basename(tf.path)} is too large to read in this server's memory") from None
            self.indexes.put(key, idx)
            return idx

        return self.flight.do(key, build)

    # ---- reductions --------------------------------------------------------------
    def reduction(self, run: str, host: str, level: Level, start_us: Optional[float],
                  end_us: Optional[float], drop_args: bool = False) -> Reduction:
        tf = self.trace_file(run, host)
        key = ["trace", FORMAT_VERSION, "input_index", tf.path, tf.bytes, tf.mtime_ns, level, start_us, end_us,
               drop_args]
        digest = key_digest(key)
        stored = self.disk.get(digest)
        if stored is not None:
            found = _unpack(stored, digest, cached=True)
            if found is not None:
                return found

        def compute() -> Reduction:
            again = self.disk.get(digest)
            if again is not None and (found := _unpack(again, digest, cached=True)) is not None:
                return found
            began = time.perf_counter()
            idx = self.index(tf)
            buf = io.BytesIO()
            try:
                stats = reduce_index(idx, buf, level, start_us, end_us, gzip=True, with_input_index=True,
                                     drop_args=drop_args)
            except TraceError as exc:
                raise RequestError(422, _naming(f"cannot reduce {os.path.basename(tf.path)}", exc, tf)) from None
            stats["timings_s"]["request"] = time.perf_counter() - began
            stats["input"]["file"] = os.path.basename(tf.path)
            payload = _pack(stats, buf.getvalue())
            self.disk.put(digest, payload)
            return Reduction(buf.getvalue(), dict(stats, cached=False), digest[:32])

        return self.flight.do(("trace", digest), compute)

    def event(self, run: str, host: str, i: int) -> bytes:
        tf = self.trace_file(run, host)
        idx = self.index(tf)
        try:
            return event_json(idx, i)
        except TraceError as exc:
            raise RequestError(404 if "no event" in str(exc) else 422, str(exc)) from None


def _naming(prefix: str, exc: Exception, tf: TraceFile) -> str:
    """The reason, prefixed with what failed unless the reason already names the file."""
    reason = str(exc)
    return reason if os.path.basename(tf.path) in reason else f"{prefix}: {reason}"


def _pack(stats: dict, gz: bytes) -> bytes:
    head = json.dumps(stats, separators=(",", ":")).encode()
    return len(head).to_bytes(8, "little") + head + gz


def _unpack(payload: bytes, digest: str, cached: bool) -> Optional[Reduction]:
    try:
        n = int.from_bytes(payload[:8], "little")
        stats = json.loads(payload[8:8 + n])
    except (ValueError, UnicodeDecodeError):
        return None
    return Reduction(payload[8 + n:], dict(stats, cached=cached), digest[:32])

