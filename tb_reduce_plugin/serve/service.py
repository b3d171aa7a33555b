"""Serving reduced traces from a logdir: discovery + index cache + reduction cache, bounded.

Everything the plugin routes need, without HTTP: find the file a (run, host) names,
open exactly that file (its device and inode as listed, a regular file, under the
input limit as opened), parse it once into an index kept in memory for every level
and window asked of it, and keep each reduction on disk, streamed back from there.
Concurrent requests for one key compute it once.

Bounds, because a profiling server is shared by a team and reads logdirs other
people's jobs write into:
- memory: one budget (`--tb_reduce_memory_mb`) for everything — parses in progress,
  parsed indexes, reductions being planned and written, bodies that could not go to
  disk. A trace that needs more fails with `OverBudget`; a request that finds the
  memory taken by others with `BudgetBusy`.
- computations: a gate lets a few run (sized from the cores and the budget) and a few
  wait; the rest get `ServerBusy` at once. Cached reductions, the run list and warm
  event look-ups never pass through it.

Errors are domain errors (`NotFound` here, the `TraceError` family from the readers,
`ServerBusy` from the gate); `plugin.py` alone turns them into HTTP statuses.
"""

from __future__ import annotations

import functools
import gc
import json
import logging
import os
import queue
import threading
import time
import traceback
import weakref
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence, TypeVar

from isal import isal_zlib

from .. import FORMAT_VERSION, OUTPUT_REVISION
from ..budget import MB, Account, BudgetBusy, MemoryBudget, release_free_memory, return_large_blocks
from ..compare.diff import Side
from ..compare.diff import compare as compare_sides
from ..compare.steps import StepRange
from ..errors import FileChanged, IndexDamaged, InputTooLarge, NotFound, ObjectStoreError, TraceError
from ..formats import objectstore
from ..formats.chrome_json import ChromeJsonEvents
from ..formats.sources import DEFAULT_MAX_RATIO, FileIdentity
from ..index.store import IndexStore, default_index_bytes, parse_spilling
from ..model import mapped
from ..model.table import SpillFailed
from ..multihost.executor import LocalPool, make_executor
from ..multihost.views import MergedViews
from ..query import aggregate as query_aggregate
from ..query import search as query_search
from ..reduce.coarse_tier import tier_rows_of
from ..reduce.pipeline import (
    Level,
    TraceIndex,
    check_window,
    derive_index,
    event_json,
    index_file,
    memory_bytes_needed,
    memory_counters,
    reduce_index,
)
from ..reduce.plan import prepare_window_index
from ..reduce.window_index import window_index_bytes
from ..waveforms.categories import CATEGORIES
from ..waveforms.scalars import JSON_WORK_BYTES, POINT_BYTES, RunScalars, json_points, m4_indices, series_summary
from ..waveforms.scalars import tag_id as scalar_tag_id
from .cache import Body, DiskCache, IndexCache, MemoryBody, SingleFlight, key_digest
from .discovery import Catalog, TraceFile
from .gate import ComputeGate, default_workers

log = logging.getLogger(__name__)
MAX_REFUSALS = 1024  # files remembered as unreadable (each version), least recently refused out
MAX_DERIVED = 256  # per-step series kept (each file version), least recently used out
COMPARE_NAMES = 5000  # names a comparison answers by default (the largest changes first)
MAX_SIDES = 64  # sides of comparisons kept (a file version and a step range each), least recently used out
SIDES_BYTES = 64 << 20  # ...and at most this much of them (a trace of 100 k distinct names makes a 20 MB side)
SIDE_NAME_BYTES = 200  # what a side keeps a name (its text and five sums in a dict)
MAX_SCALAR_RUNS = 64  # runs whose event files are kept read (and tailed), least recently used out
MAX_SCALAR_BODIES = 16  # encoded `scalars` answers kept (each version of a series and width), on the budget
# What reading event files may hold besides the points: a chunk being framed and one
# record's payload at most (a longer record is skipped as damage). Real records are
# small (a scalar, an image of a few MB); a hostile length cannot make the reader
# allocate more than this.
MAX_RECORD_BYTES = 32 * MB
# What building a block store holds while it reads (`_keep_store`): the block read, the one
# inflated ahead, the event across two reads, the coarse tier's gathering, at most.
KEEP_STORE_BYTES = 64 * MB
KEEPER_THREAD = "tb-reduce-keep-text"  # the threads that keep a gzip's text after its first view
T = TypeVar("T")


@dataclass
class _Scalars:
    """A run folder's scalars as read so far, their memory held on the budget."""

    scalars: RunScalars
    account: Account
    lock: threading.Lock
    ids: Optional[dict] = None  # tag id -> tag, for the tags listed in `ids_of`
    ids_of: Optional[list] = None


@dataclass
class ScalarsAnswer:
    """A `scalars` answer: gzip JSON held in memory (charged to the budget until the last
    response streaming it ends) and the length of the JSON it inflates to."""

    body: MemoryBody
    json_bytes: int


@dataclass
class Reduction:
    body: Optional[Body]  # the reduced trace, gzip; None when only the stats were asked and were cached
    stats: dict
    etag: str


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tb-reduce")


class TraceService:
    def __init__(self, logdir: str, cache_dir: Optional[str] = None, cache_mb: float = 1024,
                 max_input_mb: float = 4096, memory_mb: float = 2048, workers: Optional[int] = None,
                 max_waiting: int = 32, wait_s: float = 60.0, follow_symlinks: bool = True,
                 host_workers: Optional[str] = None, index_mb: Optional[float] = None) -> None:
        self.catalog = Catalog(logdir, follow_symlinks=follow_symlinks)
        cache_dir = cache_dir or default_cache_dir()
        self.budget = MemoryBudget(int(memory_mb * MB))
        return_large_blocks()  # what computations free goes back to the system (see budget)
        self.disk = DiskCache(cache_dir, int(cache_mb * MB))
        self.store_dir: Optional[str] = None
        if self.disk.usable:
            # Compressed event blocks of Chrome traces being zoomed (see ChromeJsonEvents);
            # leftovers of earlier processes go (a live one keeps its open file readable).
            self.store_dir = os.path.join(cache_dir, "blocks")
            try:
                for name in os.listdir(self.store_dir):
                    if name.startswith(".blocks-"):
                        try:
                            os.unlink(os.path.join(self.store_dir, name))
                        except OSError:
                            pass
            except OSError:
                pass
        # Parsed indexes kept on disk per file version (`index.store`): a restart, or a second
        # server over this cache, maps them instead of parsing the trace again.
        index_dir = os.path.join(cache_dir, "index")
        self.store: Optional[IndexStore] = None
        if self.disk.usable:
            store = IndexStore(index_dir, int(index_mb * MB) if index_mb else default_index_bytes(index_dir))
            self.store = store if store.usable else None
        self._writes = _Writer()
        self._keepers: list[threading.Thread] = []  # building block stores (`_keep_store`)
        self._keepers_lock = threading.Lock()
        self._work: dict[tuple, _Work] = {}  # file version -> what is being done to it now (`progress`)
        self._work_lock = threading.Lock()
        self.indexes: IndexCache[TraceIndex] = IndexCache(self.budget)
        self.flight = SingleFlight()
        self._refusals: OrderedDict[tuple, tuple[type, str, dict]] = OrderedDict()  # index key -> why
        self._refusals_lock = threading.Lock()
        self.gate = ComputeGate(workers or default_workers(self.budget.limit), max_waiting, wait_s)
        self._derived: OrderedDict[tuple, dict] = OrderedDict()  # index key -> per-step series (JSON)
        self._derived_lock = threading.Lock()
        self._sides: OrderedDict[tuple, Side] = OrderedDict()  # (index key, step range) -> a comparison's side
        self._scalars: OrderedDict[str, _Scalars] = OrderedDict()  # run folder -> its scalars
        self._scalars_lock = threading.Lock()
        self._scalar_bodies: OrderedDict[tuple, ScalarsAnswer] = OrderedDict()  # encoded answers, see `scalars`
        self._scalar_bodies_lock = threading.Lock()
        self.budget.add_reclaimer(self._drop_scalar_bodies)
        self.max_input_bytes = int(max_input_mb * MB)
        # Where objects of a logdir on an object store are copied to be read (`objectstore.local_copy`).
        self.stage_dir = os.path.join(cache_dir, "objects")
        # Several hosts of a run as one timeline, their per-host work on `host_workers`
        # (`--tb_reduce_workers`: local:N processes, each with its share of the memory, or Dask).
        executor = make_executor(host_workers)
        share = self.budget.limit // max(1, executor.workers) if isinstance(executor, LocalPool) else self.budget.limit
        self.merged = MergedViews(self, Reduction, executor, share)

    @contextmanager
    def computing(self) -> Iterator[None]:
        """A computation slot (see gate); when the last running computation ends, the heap
        pages its temporaries left free go back to the system (see budget's allocator)."""
        try:
            with self.gate.slot():
                yield
        finally:
            if self.gate.running == 0:
                release_free_memory()

    # ---- discovery -----------------------------------------------------------
    def runs(self) -> list[dict]:
        return self.catalog.runs()

    def has_traces(self) -> bool:
        return bool(self.catalog.files())

    def has_runs(self) -> bool:
        """Anything for the tab to show: a trace, or a run of scalars only (its waveforms)."""
        return self.has_traces() or bool(self.catalog.scalar_runs())

    def refuse_scalars_only(self, run: str) -> None:
        """`NotFound` saying so when `run` is a run of scalars only: a trace route asked about
        it gets where its data is, not "no trace" (the dashboard shows the message)."""
        if run in self.catalog.scalar_runs() and not self._hosts(run):
            raise NotFound(f"run {run!r} has scalars only (TensorBoard event files, no profiler trace): "
                           f"plot them in the waveform panel")

    def trace_file(self, run: str, host: str) -> TraceFile:
        tf = self.catalog.find(run, host)
        if tf is None:
            self.refuse_scalars_only(run)
            known = {f.run for f in self.catalog.files().values()}
            what = f"host {host!r} in run {run!r}" if run in known else f"run {run!r}"
            raise NotFound(f"no trace for {what}")
        if tf.bytes > self.max_input_bytes:
            raise InputTooLarge(f"{_name(tf)} is {tf.bytes:,} bytes, over the input limit "
                                f"of {self.max_input_bytes:,} bytes (--tb_reduce_max_input_mb)",
                                tf.bytes, self.max_input_bytes)
        return tf

    def _fresh(self, run: str, host: str, stale: TraceFile, why: FileChanged) -> TraceFile:
        """After a `FileChanged`: list again, and give the file as it is now (or say it is gone)."""
        self.catalog.invalidate()
        try:
            tf = self.trace_file(run, host)
        except NotFound:
            raise FileChanged(f"{why}; it is no longer listed: reload the run list") from None
        if tf == stale:
            raise FileChanged(f"{_name(stale)} is changing while it is read; try again when it is written")
        return tf

    # ---- index -----------------------------------------------------------------
    def _index_key(self, tf: TraceFile) -> tuple:
        return ("index", tf.path, tf.dev, tf.ino, tf.bytes, tf.mtime_ns)

    def warm_index(self, tf: TraceFile) -> Optional[TraceIndex]:
        return self.indexes.get(self._index_key(tf))

    def _refusal(self, tf: TraceFile) -> None:
        """Raise again what reading this version of the file raised before, without reading it.

        A file's refusal (corrupt, a bomb, more than the budget) depends only on its bytes
        and this server's limits, and finding it can cost seconds of CPU: a storm of
        requests for one hostile file must not pay that again and again.
        """
        refused = self._refusals.get(self._index_key(tf))
        if refused is None and self.store is not None and not objectstore.is_url(tf.path):
            kept = self.store.refusal(tf.path, tf.identity(), self._limits())
            if kept is not None:
                self._remember_refusal(self._index_key(tf), kept, tf, on_disk=False)
                refused = self._refusals.get(self._index_key(tf))
        if refused is not None:
            kind, message, attrs = refused
            exc = TraceError.__new__(kind)
            TraceError.__init__(exc, message)
            exc.__dict__.update(attrs)
            raise exc

    def _limits(self) -> tuple:
        """What a refusal depends on besides the file's bytes: this server's limits."""
        return (self.max_input_bytes, self.budget.limit)

    def _remember_refusal(self, key: tuple, exc: BaseException, tf: TraceFile, on_disk: bool = True) -> None:
        # A store that could not be reached (ObjectStoreError) may answer the next time: not remembered.
        if isinstance(exc, TraceError) and not isinstance(exc, (BudgetBusy, FileChanged, ObjectStoreError)):
            named = _named(exc, tf, "cannot read")
            with self._refusals_lock:
                self._refusals[key] = (type(named), str(named), dict(named.__dict__))
                while len(self._refusals) > MAX_REFUSALS:
                    self._refusals.popitem(last=False)
            if on_disk and self.store is not None and not objectstore.is_url(tf.path):
                # kept per file version on disk too: a restarted server refuses it without a parse
                self.store.remember_refusal(tf.path, tf.identity(), self._limits(), named)

    def _index(self, tf: TraceFile) -> TraceIndex:
        """The index of `tf`, parsed once; the caller holds a computation slot."""
        key = self._index_key(tf)
        cached = self.indexes.get(key)
        if cached is not None:
            return cached
        self._refusal(tf)

        def build() -> TraceIndex:
            hit = self.indexes.get(key)
            if hit is not None:
                return hit
            self.indexes.discard_where(lambda k: k[1] == tf.path and k != key)  # older versions of the file
            account = self.budget.account(f"reading {_name(tf)}")
            try:
                path, expect = self._readable(tf)
                inflated = max(self.max_input_bytes * 64, 1 << 30)
                idx = None if self.store is None else self.store.load(
                    path, expect, max_inflated_bytes=inflated, max_ratio=DEFAULT_MAX_RATIO,
                    store_dir=self.store_dir, account=account)
                if idx is not None:
                    self._keep_blocks_of(idx)  # a stored index without kept blocks gets them now
                else:
                    with self._working(key, "reading", tf.bytes) as work:
                        # its columns written into the store as they are read (`parse_spilling`)
                        idx = parse_spilling(self.store, path, max_inflated_bytes=inflated,
                                             store_dir=self.store_dir, expect=expect,
                                             max_file_bytes=self.max_input_bytes, account=account,
                                             progress=work.advance, parse=index_file)
                    if idx.identity is not None and (idx.identity.size, idx.identity.mtime_ns) != (tf.bytes,
                                                                                                  tf.mtime_ns):
                        raise FileChanged(f"{_name(tf)} changed since it was listed")
                    account.settle(idx.memory_bytes(), "the parsed trace")
                    self._save_index(idx)
            except BaseException as exc:
                account.close()
                self._remember_refusal(key, exc, tf)
                _let_go(exc)  # a refused parse gives its memory back to the system
                raise
            account.keep_until_collected(idx)
            idx.account = account
            self.indexes.put(key, idx)
            return idx

        try:
            return self.flight.do(key, build)
        except TraceError as exc:
            raise _named(exc, tf, "cannot read") from None
        except MemoryError:
            raise TraceError(f"{_name(tf)} is too large to read in this server's memory") from None

    # ---- progress -----------------------------------------------------------------
    @contextmanager
    def _working(self, key: tuple, stage: str, total: int) -> Iterator[_Work]:
        """Say what is being done to a file version while it is done (`progress`)."""
        work = _Work(stage, total)
        with self._work_lock:
            self._work[key] = work
        try:
            yield work
        finally:
            with self._work_lock:
                if self._work.get(key) is work:
                    del self._work[key]

    def progress(self, run: str, host: str) -> dict:
        """What the server is doing to (run, host) now, for a viewer waiting on it: `stage`
        (reading: the file parsed, `done` of `total` bytes of it; reducing: a window planned
        and written; idle), how long so far and the rate. Cheap: no slot, no parse."""
        tf = self.trace_file(run, host)
        with self._work_lock:
            work = self._work.get(self._index_key(tf))
            return {"stage": "idle"} if work is None else work.as_dict()

    def _save_index(self, idx: TraceIndex) -> None:
        """Write `idx` into the index store beside the requests, not in their way (the view
        the parse was for is answered meanwhile; the columns are never written again), and
        keep its block store there too once a full pass has built it."""
        store = self.store
        if store is None:
            return
        if store.can_save(idx):
            self._writes.put_for(idx, store.save)
        self._keep_blocks_of(idx)

    def _keep_blocks_of(self, idx: TraceIndex) -> None:
        store, source, identity = self.store, idx.source, idx.identity
        if store is None or identity is None or not isinstance(source, ChromeJsonEvents) or source.has_store:
            return
        path, writes = idx.path, self._writes

        def on_blocks(blocks_path: str, offsets: Any, firsts: Any, tier: Any) -> None:
            # linked now (the temp file goes with its source), moved beside the index after
            # the index itself is written (one writer, in order)
            staged = store.stage_blocks(blocks_path)
            if staged is not None:
                writes.put(functools.partial(store.keep_blocks, path, identity, staged, offsets, firsts, tier))

        source.on_blocks = on_blocks  # holds no reference to the index: no cycle keeps it alive
        source.tier_rows = tier_rows_of(idx.table)  # (the table, not the index)
        source.defer_store = source.positions is not None  # built after a first view (`_keep_store`)

    def wait_saved(self, timeout: Optional[float] = None) -> None:
        """Wait for what was handed to the index store's writer so far, and for the block
        stores being built (which hand theirs to it when built) (tests, benchmarks)."""
        with self._keepers_lock:
            keepers = list(self._keepers)
        for keeper in keepers:
            keeper.join(timeout)
        self._writes.wait(timeout)

    def _readable(self, tf: TraceFile) -> tuple[str, FileIdentity]:
        """The local file to parse for `tf` and the identity it must have when opened.

        A listed file is read in place, as listed. An object of a logdir on an object store
        (its path a URL) is first copied, that version only, into `stage_dir`
        (`objectstore.local_copy`, refused over the input limit before it is fetched); the
        copy carries the object's size and mtime, so the index's identity checks hold.
        """
        if not objectstore.is_url(tf.path):
            return tf.path, tf.identity()
        local = objectstore.local_copy(tf.path, tf.identity(), self.stage_dir, self.max_input_bytes)
        try:
            return local, FileIdentity.from_stat(os.stat(local))
        except OSError:
            raise FileChanged(f"{_name(tf)}: its local copy went away while it was staged; try again") from None

    # ---- reductions --------------------------------------------------------------
    def reduction(self, run: str, host: str, level: Level, start_us: Optional[float],
                  end_us: Optional[float], drop_args: bool = False, with_body: bool = True,
                  resolution: Optional[int] = None) -> Reduction:
        """The reduction of (run, host) at `level` over the window; `resolution` (a bucket
        count) replaces the level's, for viewers that size it from their pixels."""
        check_window(start_us, end_us)
        tf = self.trace_file(run, host)
        try:
            return self.reduction_of(tf, level, start_us, end_us, drop_args, with_body, resolution)
        except FileChanged as exc:
            tf = self._fresh(run, host, tf, exc)
            return self.reduction_of(tf, level, start_us, end_us, drop_args, with_body, resolution)

    def etag(self, run: str, host: str, level: Level, start_us: Optional[float], end_us: Optional[float],
             drop_args: bool = False, resolution: Optional[int] = None) -> str:
        """What names a reduction's bytes: the file as listed and the view asked (reductions
        are deterministic), known without computing or reading anything."""
        check_window(start_us, end_us)
        return self._digest(self.trace_file(run, host), level, start_us, end_us, drop_args, resolution)[:32]

    @staticmethod
    def _digest(tf: TraceFile, level: Level, start_us: Optional[float], end_us: Optional[float],
                drop_args: bool, resolution: Optional[int] = None) -> str:
        parts: list = ["trace", FORMAT_VERSION, OUTPUT_REVISION, "input_index", tf.path, tf.dev, tf.ino, tf.bytes, tf.mtime_ns,
                       level, start_us, end_us, drop_args]
        if resolution is not None:
            parts.append(["resolution", resolution])
        return key_digest(parts)

    def reduction_of(self, tf: TraceFile, level: Level, start_us: Optional[float], end_us: Optional[float],
                     drop_args: bool = False, with_body: bool = True, resolution: Optional[int] = None) -> Reduction:
        """`reduction` of a file as listed (it raises `FileChanged` if it is no longer that file)."""
        digest = self._digest(tf, level, start_us, end_us, drop_args, resolution)
        found = self._cached(digest, with_body)
        if found is not None:
            return found
        return self.flight.do(("trace", digest),
                              lambda: self._compute(tf, digest, level, start_us, end_us, drop_args, resolution))

    def _cached(self, digest: str, with_body: bool) -> Optional[Reduction]:
        entry = self.disk.open(digest, with_body)
        if entry is None:
            return None
        try:
            stats = json.loads(entry.meta)
        except (ValueError, UnicodeDecodeError):
            return None
        return Reduction(entry.body, dict(stats, cached=True), digest[:32])

    def _compute(self, tf: TraceFile, digest: str, level: Level, start_us: Optional[float],
                 end_us: Optional[float], drop_args: bool, resolution: Optional[int] = None) -> Reduction:
        found = self._cached(digest, True)  # finished by another caller while this one queued for the flight
        if found is not None:
            return found
        if self.warm_index(tf) is None:
            self._refusal(tf)  # a file known to be unreadable takes no slot
        began = time.perf_counter()
        with self.computing(), self.budget.account(f"reducing {_name(tf)}") as account:
            for attempt in (0, 1):  # once more from the trace if a file of its stored index was cut meanwhile
                idx = self._index(tf)
                before = mapped.faults()
                spool = self.disk.spool(digest, self.budget)
                try:
                    self._check_intact(tf, idx, before)
                    with self._working(self._index_key(tf), "reducing", 0) as work:
                        stats = reduce_index(idx, spool, level, start_us, end_us, gzip=True, with_input_index=True,
                                             drop_args=drop_args, account=account, resolution=resolution,
                                             progress=work.advance)
                    self._check_intact(tf, idx, before)  # nothing read as zeros goes out
                    stats["timings_s"]["request"] = time.perf_counter() - began
                    stats["input"]["file"] = _name(tf)
                    body = spool.finish(json.dumps(stats, separators=(",", ":")).encode())
                except IndexDamaged:
                    spool.abort()
                    if attempt:
                        raise
                    continue
                except TraceError as exc:
                    spool.abort()
                    _let_go(exc)
                    raise _named(exc, tf, "cannot reduce") from None
                except BaseException as exc:
                    spool.abort()
                    _let_go(exc)
                    raise
                finally:
                    self._settle_index(idx)
                break
        release_free_memory()
        return Reduction(body, dict(stats, cached=False), digest[:32])

    def _check_intact(self, tf: TraceFile, idx: TraceIndex, faults_before: int) -> None:
        """`IndexDamaged` if a file `idx` maps was cut (`mapped.shrunk`) or a guarded read
        met zeros since `faults_before` (any index's: a fault cannot be told apart); the
        index is then dropped from memory and from the store, so the next try parses."""
        cut = mapped.shrunk(idx.arrays())
        if cut is None and mapped.faults() == faults_before and not idx.damaged:
            return
        idx.damaged = True
        key = self._index_key(tf)
        self.indexes.discard_where(lambda k: k == key)
        if self.store is not None:
            self.store.discard(idx)
        log.warning("tb_reduce: a file of the stored index of %s was cut while in use (%s); reading the trace again",
                    _name(tf), cut or "a read past its end")
        raise IndexDamaged(f"the stored index of {_name(tf)} was cut on disk while in use; try again")

    def _settle_index(self, idx: TraceIndex) -> None:
        """The first plan prepared its state on the table: the index's charge becomes exact,
        and the state is kept beside the stored index (a restart plans at once).

        A gzip's text is kept after its first view (`_keep_store`), and the writer's jobs for
        the index (its prepared state, its window index) wait until it is: on two cores they
        took a core from it, and a zoom asked right after a first view waits for that text
        (2 GiB Kineto: 3.8 s, 2.5–2.9 s with them after it)."""
        if idx.damaged:
            return
        try:
            idx.settle_memory()
        except TraceError:
            pass  # it is already held; the estimate charged at parse time stands
        later: list[Callable[[TraceIndex], Any]] = []  # the writer's jobs for this index, in order
        store = self.store
        if store is not None and idx.identity is not None and store.can_keep_prepared(idx):
            ready = idx.prepared.ready_fields()
            if not ready <= idx.prepared_kept:
                idx.prepared_kept = idx.prepared_kept | ready
                later.append(store.save_prepared)
        if idx.table.scratch is not None and not idx.window_index_asked and not idx.prepared.ready("window_index"):
            idx.window_index_asked = True  # once per index: zooms into it then plan from the window index
            later.append(self._prepare_window_index)
        source = idx.source
        if isinstance(source, ChromeJsonEvents) and source.defer_store and not source.has_store and not idx.store_asked:
            idx.store_asked = True  # once per index, on a thread of its own: not behind the writer's queue
            keeper = threading.Thread(target=self._keep_store, args=(idx, later), name=KEEPER_THREAD,
                                      daemon=True)
            try:
                keeper.start()
            except RuntimeError:  # no thread to be had: the next full pass builds it, as it reads
                source.defer_store = False
            else:
                later = []  # queued by the keeper once the text is kept
                with self._keepers_lock:
                    self._keepers = [t for t in self._keepers if t.is_alive()] + [keeper]
        for write in later:
            self._writes.put_for(idx, write)

    def _keep_store(self, idx: TraceIndex, then: Sequence[Callable[[TraceIndex], Any]] = ()) -> None:
        """Build `idx`'s block store (`ChromeJsonEvents.keep_store`), after its first view:
        the gzip's text compressed in chunks, so zooms inflate only the chunks they need,
        kept beside the stored index too (`_keep_blocks_of`). Charged to the budget while
        it reads (its buffers and the block inflated ahead); a budget held by requests, a
        full disk or a file changed since leaves it unbuilt: the next full pass a request
        makes builds it then, as it reads. `then`: the writer's jobs for the index, queued
        once the text is kept (or could not be)."""
        source = idx.source
        assert isinstance(source, ChromeJsonEvents)
        try:
            with self.budget.account(f"keeping the text of {os.path.basename(idx.path)}") as account:
                account.charge(KEEP_STORE_BYTES, "reading the trace", wait_s=5.0)
                source.keep_store()
        except Exception as exc:  # an optimisation: never a thread's traceback, the passes go on as before
            log.info("tb_reduce: the text of %s is not kept now (%s); the next full pass keeps it",
                     os.path.basename(idx.path), str(exc))
        finally:
            if not source.has_store:
                source.defer_store = False
            release_free_memory()
            for write in then:
                self._writes.put_for(idx, write)

    def _prepare_window_index(self, idx: TraceIndex) -> None:
        """Make `idx`'s window index (`plan.prepare_window_index`) in the background,
        after its first plan: until it is made, plans of a window read the whole table, as
        before; once made, a zoom costs what it shows. It goes into the index's scratch
        folder, so what it holds is a chunk and the sorts' samples, charged to the budget
        while it is made; a budget held by requests, a full disk or a file cut meanwhile
        (read as zeros) leaves it unmade: plans go on as before."""
        if idx.damaged:
            return
        before = mapped.faults()
        try:
            with self.budget.account(f"indexing the windows of {os.path.basename(idx.path)}") as account:
                account.charge(window_index_bytes(idx.table), "the window index", wait_s=5.0)
                with mapped.spill_or_fail():  # charged as files: a disk that fails them is no index
                    wi = prepare_window_index(idx.table)
        except (TraceError, OSError, SpillFailed) as exc:
            if isinstance(exc, BudgetBusy):
                idx.window_index_asked = False  # memory held by requests now: the next plan asks again
            log.info("tb_reduce: no window index for %s (%s); zooms read the whole table",
                     os.path.basename(idx.path), str(exc))
            return
        if mapped.faults() != before or mapped.shrunk(idx.prepared.arrays()) is not None:
            if idx.prepared.window_index is wi:
                idx.prepared.window_index = None  # made from a file cut meanwhile: not trusted
            return
        try:
            idx.settle_memory()  # charged as the index's state...
        except TraceError:
            pass
        store = self.store  # ...and kept beside the stored index, now (this is the writer's thread)
        if store is not None and idx.identity is not None and store.can_keep_prepared(idx):
            idx.prepared_kept = idx.prepared_kept | idx.prepared.ready_fields()
            store.save_prepared(idx)

    # ---- waveforms -----------------------------------------------------------------
    def waveforms(self, run: str, host: str) -> dict:
        """The per-step series of a (run, host) (`waveforms.steps`), derived once per file version."""
        tf = self.trace_file(run, host)
        try:
            out = self._waveforms(tf)
        except FileChanged as exc:
            out = self._waveforms(self._fresh(run, host, tf, exc))
        return {"run": run, "host": host, **out}

    def derived_series(self, tf: TraceFile) -> Optional[list[str]]:
        """The series names of a file's per-step series when they are known already (no work)."""
        with self._derived_lock:
            found = self._derived.get(self._index_key(tf))
        return None if found is None else list(found["series"])

    def _waveforms(self, tf: TraceFile) -> dict:
        key = self._index_key(tf)
        with self._derived_lock:
            found = self._derived.get(key)
            if found is not None:
                self._derived.move_to_end(key)
                return found
        if self.warm_index(tf) is None:
            self._refusal(tf)

        def compute() -> dict:
            with self.computing(), self.budget.account(f"deriving the steps of {_name(tf)}") as account:
                idx = self._index(tf)
                try:
                    try:
                        out = self._intact_run(tf, idx, lambda i: derive_index(i, account).to_json())
                    except IndexDamaged:
                        idx = self._index(tf)
                        out = self._intact_run(tf, idx, lambda i: derive_index(i, account).to_json())
                except TraceError as exc:
                    _let_go(exc)
                    raise _named(exc, tf, "cannot derive the steps of") from None
                finally:
                    self._settle_index(idx)  # slices the derivation prepared belong to the index
            with self._derived_lock:
                self._derived[key] = out
                while len(self._derived) > MAX_DERIVED:
                    self._derived.popitem(last=False)
            return out

        return self.flight.do(("waveforms", key), compute)

    # ---- the memory timeline (Kineto's [memory] events) --------------------------------
    def memory(self, run: str, host: str, start_us: Optional[float] = None, end_us: Optional[float] = None,
               resolution: Optional[int] = None) -> dict:
        """The allocator's totals over a window as counter series (`pipeline.memory_counters`):
        read back once per index, when its events read back cheaply — a gzip's text kept —
        else answered `pending` with no series (ask again in `retry_after_s`: its first view
        keeps the text, and reading the events now would inflate the whole file once more). Not
        a 503: a viewer's console would list every such answer as a failed load."""
        check_window(start_us, end_us)
        tf = self.trace_file(run, host)

        def read(idx: TraceIndex) -> dict:
            need = memory_bytes_needed(idx)
            if need and not getattr(idx.source, "reads_cheaply", True):
                return {"run": run, "host": host, "series": [], "pending": True, "retry_after_s": 2}
            with self.budget.account(f"reading the memory of {_name(tf)}") as account:
                account.charge(need, "the [memory] events' totals",
                               alongside=idx.account.total if idx.account is not None else 0)
                series = memory_counters(idx, start_us, end_us, resolution)
            return {"run": run, "host": host, "series": series, "pending": False}

        try:
            return self.on_index(tf, read)
        except FileChanged as exc:
            return self.on_index(self._fresh(run, host, tf, exc), read)

    # ---- comparing two traces (compare/) ---------------------------------------------
    def compare(self, base_run: str, base_host: str, run: str, host: str,
                steps: Optional[StepRange] = None, limit: Optional[int] = COMPARE_NAMES,
                base_steps: Optional[StepRange] = None) -> dict:
        """(run, host) against the baseline (base_run, base_host): both traces' per-step
        series and every name's exact statistics over the chosen steps (`compare.diff`).
        Each side is made from its own index in turn (never two held for it at once) and
        kept: what a side holds is its steps and its names' sums, a few kB (`SIDES_BYTES` in
        all). `limit`: the names answered, the largest changes first (`names_total` says how
        many there are)."""
        base = self._side(base_run, base_host, base_steps if base_steps is not None else steps)
        cand = self._side(run, host, steps)
        doc = compare_sides(base, cand)
        names = doc["names"]
        doc["names_total"] = len(names)
        if limit is not None and len(names) > limit:  # the largest changes (markers last), a page a browser holds
            doc["names"] = names[:limit]
        return {"base_run": base_run, "base_host": base_host, "run": run, "host": host,
                "steps": None if steps is None else str(steps),
                "base_steps": None if base_steps is None else str(base_steps), **doc}

    def _side(self, run: str, host: str, steps: Optional[StepRange]) -> Side:
        tf = self.trace_file(run, host)
        key = (self._index_key(tf), None if steps is None else str(steps))
        with self._derived_lock:
            found = self._sides.get(key)
            if found is not None:
                self._sides.move_to_end(key)
                return found

        def make(idx: TraceIndex) -> Side:
            with self.budget.account(f"comparing {_name(tf)}") as account:
                account.charge(query_aggregate.working_bytes(idx.table), f"the names of {_name(tf)}",
                               alongside=idx.account.total if idx.account is not None else 0)
                try:
                    label = f"{run} · {host}" + ("" if steps is None else f" · steps {steps}")
                    side = Side.of(label, idx.table, derive_index(idx, account), steps)
                    side.names  # noqa: B018  (made now, while the table is at hand)
                finally:
                    self._settle_index(idx)
            side.table = None  # what a side keeps is its sums, not the trace
            return side

        def compute() -> Side:
            try:
                side = self.on_index(tf, make)
            except FileChanged as exc:
                side = self.on_index(self._fresh(run, host, tf, exc), make)
            with self._derived_lock:
                self._sides[key] = side
                while len(self._sides) > MAX_SIDES or (
                        len(self._sides) > 1 and sum(map(_side_bytes, self._sides.values())) > SIDES_BYTES):
                    self._sides.popitem(last=False)
            return side

        return self.flight.do(("side", key), compute)

    # ---- scalars from event files ------------------------------------------------
    def tags(self, run: str) -> dict:
        """The run's scalar tags (its event files, read up to now) and, per host, the derived
        series: the names known once a host's steps were derived, else all that may exist.
        A run of scalars only has no hosts (and says `scalars_only`)."""
        hosts = self._hosts(run)
        entry = self._read_scalars(run, self._scalars_folder(run, hosts))
        with entry.lock:
            rs = entry.scalars
            scalars = [{"tag": tag, "id": scalar_tag_id(tag), "points": len(rs.series(tag)[0])} for tag in rs.tags()]
            gaps, pending = [_gap(g) for g in rs.gaps], rs.pending_bytes
        every = ["step_time_ms", *(f"{c}_ms" for c in CATEGORIES), "device_idle_ms", "unaccounted_ms"]
        out_hosts = []
        for tf in hosts:
            known = self.derived_series(tf)
            out_hosts.append({"host": tf.host, "series": known if known is not None else every,
                              "derived": known is not None})
        out = {"run": run, "scalars": scalars, "hosts": out_hosts, "gaps": gaps, "pending_bytes": pending}
        if not hosts:
            out["scalars_only"] = True
        return out

    def scalars(self, run: str, tag: Optional[str] = None, tag_id: Optional[str] = None,
                width: Optional[int] = None) -> ScalarsAnswer:
        """A tag (by name, or by its id from `tags`) as gzip JSON: its points in record order
        (a step may repeat or go back), or with `width` only those a plot that wide needs
        (`m4_indices`), with counts over every point and the gaps skipped.

        The answer is encoded once per version of the series and width, whoever asks:
        concurrent identical requests share one computation, and later ones the kept
        body. Encoding runs in a computation slot, its working memory and its output
        charged to the budget as they are held (a 2 M-point tag is ~80 MB of JSON, ~30 MB
        of gzip), and the body stays charged until the last response streaming it ends."""
        entry = self._read_scalars(run, self._scalars_folder(run, self._hosts(run)))
        with entry.lock:
            rs = entry.scalars
            tags = rs.tags()
            if tag_id is not None:
                ids = entry.ids if entry.ids_of == tags else None
                if ids is None:
                    ids = {scalar_tag_id(t): t for t in tags}
                    entry.ids, entry.ids_of = ids, tags
                tag = ids.get(tag_id)
                if tag is None:
                    raise NotFound(f"no scalar tag with tag id {tag_id!r} in run {run!r}: list its tags again")
            assert tag is not None
            if tag not in tags:
                listed = ", ".join(repr(t[:200]) for t in tags[:20]) + (", …" if len(tags) > 20 else "")
                raise NotFound(f"no scalar tag {tag[:200]!r} in run {run!r}" + (f"; its tags: {listed}" if tags
                                                                                else "; it has no scalars"))
            series = rs.series(tag)
            key = (rs.path, tag, width, rs.generation)
            head = {"run": run, "tag": tag, "id": scalar_tag_id(tag), "gaps": [_gap(g) for g in rs.gaps],
                    "pending_bytes": rs.pending_bytes}
        with self._scalar_bodies_lock:
            found = self._scalar_bodies.get(key)
            if found is not None:
                self._scalar_bodies.move_to_end(key)
                return found

        def compute() -> ScalarsAnswer:
            with self._scalar_bodies_lock:
                done = self._scalar_bodies.get(key)
            if done is not None:
                return done
            with self.computing():
                answer = self._encode_scalars(head, series, width)
            with self._scalar_bodies_lock:
                self._scalar_bodies[key] = answer
                while len(self._scalar_bodies) > MAX_SCALAR_BODIES:
                    self._scalar_bodies.popitem(last=False)
            return answer

        return self.flight.do(("scalars", key), compute)

    def _encode_scalars(self, head: dict, series: tuple, width: Optional[int]) -> ScalarsAnswer:
        steps, walls, values = series
        summary = series_summary(steps, values)
        keep = None if width is None else m4_indices(steps, values, width)
        if keep is not None:
            steps, walls, values = steps[keep], walls[keep], values[keep]
        doc = dict(head, downsampled=keep is not None, width=width, summary=summary)
        text = json.dumps(doc, separators=(",", ":"), allow_nan=False)
        account = self.budget.account(f"the scalars of {head['tag'][:80]!r} in run {head['run']}")
        try:
            with self.budget.account(f"encoding the scalars of run {head['run']}") as work:
                work.charge(JSON_WORK_BYTES, "encoding points as JSON")
                gz = isal_zlib.compressobj(3, isal_zlib.DEFLATED, 31)
                parts: list[bytes] = []
                json_bytes = 0

                def add(piece: str) -> None:
                    nonlocal json_bytes
                    raw = piece.encode()
                    json_bytes += len(raw)
                    out = gz.compress(raw)
                    if out:
                        account.charge(len(out), "the encoded points")  # held from here on
                        parts.append(out)

                add(text[:-1] + ',"points":')
                for piece in json_points(steps, walls, values):
                    add(piece)
                add("}")
                tail = gz.flush()
                account.charge(len(tail), "the encoded points")
                parts.append(tail)
                data = b"".join(parts)  # the parts and their join, briefly: charged twice over
                parts.clear()
            account.settle(len(data))
        except BaseException:
            account.close()
            raise
        return ScalarsAnswer(MemoryBody(data, account), json_bytes)

    def _drop_scalar_bodies(self, _n: int) -> None:
        """A reclaimer: kept scalars bodies go when the budget needs the room (those being
        streamed stay charged until their responses end)."""
        with self._scalar_bodies_lock:
            self._scalar_bodies.clear()

    def _hosts(self, run: str) -> list[TraceFile]:
        """The trace hosts of a run, by name: none for a run of scalars only."""
        return sorted((f for f in self.catalog.files().values() if f.run == run), key=lambda f: f.host)

    def _scalars_folder(self, run: str, hosts: list[TraceFile]) -> str:
        """The folder whose event files hold a listed run's scalars (`NotFound` for any other
        name: a run is only ever looked up by its listed name, never read as a path)."""
        folder = hosts[0].events_dir if hosts else self.catalog.scalars_folder(run)
        if folder is None:
            raise NotFound(f"no run {run!r} with traces or scalars in this logdir")
        return folder

    def _read_scalars(self, run: str, folder: str) -> _Scalars:
        """The run folder's scalars, with what was appended since the last request read
        (in a computation slot: a first read of a big event file takes seconds)."""
        with self._scalars_lock:
            entry = self._scalars.get(folder)
            if entry is None:
                catalog, name = self.catalog, run
                record_limit = max(64 * 1024, min(MAX_RECORD_BYTES, self.budget.limit // 8))
                entry = _Scalars(RunScalars(folder, max_record_bytes=record_limit,
                                            files=lambda: catalog.event_files(name)),
                                 self.budget.account(f"the scalars of run {run}"), threading.Lock())
                self._scalars[folder] = entry
                while len(self._scalars) > MAX_SCALAR_RUNS:
                    self._scalars.popitem(last=False)[1].account.close()
            self._scalars.move_to_end(folder)
        with self.computing(), entry.lock:
            try:
                # Charged before it is held: a chunk and a record while reading, and each
                # batch's points as they arrive, so a poll stops at the budget.
                rs = entry.scalars
                what = f"reading the event files of run {run}"
                entry.account.charge(2 * rs.max_record_bytes, what)
                rs.on_points = lambda n: entry.account.charge(POINT_BYTES * n, what)
                rs.poll()
                entry.account.settle(rs.memory_bytes(), f"the scalars of run {run}")
            except BaseException:
                with self._scalars_lock:  # what could not be read or held is not kept
                    if self._scalars.get(folder) is entry:
                        del self._scalars[folder]
                entry.account.close()
                raise
        return entry

    # ---- single events -----------------------------------------------------------
    def event(self, run: str, host: str, i: int) -> bytes:
        tf = self.trace_file(run, host)
        try:
            return self._event(tf, i)
        except FileChanged as exc:
            return self._event(self._fresh(run, host, tf, exc), i)

    def _event(self, tf: TraceFile, i: int) -> bytes:
        return self.on_index(tf, lambda idx: self._event_of(idx, tf, i))

    def on_index(self, tf: TraceFile, fn: Callable[[TraceIndex], T]) -> T:
        """`fn` on the index of `tf` (a file as listed): at once when the index is in memory
        and reads its events back cheaply (in memory, one compressed block each, or where they
        lie in a plain file), else in a computation slot, parsing the file first if it must."""
        idx = self.warm_index(tf)
        if idx is not None and getattr(idx.source, "reads_cheaply", True):
            try:
                return self._intact_run(tf, idx, fn)
            except IndexDamaged:
                pass  # dropped: parsed again below
        self._refusal(tf)
        with self.computing():
            try:
                return self._intact_run(tf, self._index(tf), fn)
            except IndexDamaged:
                return self._intact_run(tf, self._index(tf), fn)

    def _intact_run(self, tf: TraceFile, idx: TraceIndex, fn: Callable[[TraceIndex], T]) -> T:
        """`fn(idx)`, checked before and after (`_check_intact`)."""
        before = mapped.faults()
        self._check_intact(tf, idx, before)
        out = fn(idx)
        self._check_intact(tf, idx, before)
        return out

    def _event_of(self, idx: TraceIndex, tf: TraceFile, i: int) -> bytes:
        if not 0 <= i < idx.events:
            raise NotFound(f"no event {i}: the trace has {idx.events:,}")
        try:
            return event_json(idx, i)
        except TraceError as exc:
            raise _named(exc, tf, "cannot read an event of") from None

    # ---- questions over the whole index (query/): every event, folded ones too ----------
    def search(self, run: str, host: str, q: str, regex: bool = False, icase: bool = False,
               start_us: Optional[float] = None, end_us: Optional[float] = None,
               limit: int = query_search.DEFAULT_LIMIT, offset: int = 0) -> dict:
        """Events whose name matches `q`, in time order, one page (`query.search`). A bad
        query (`BadQuery`) is refused before any file is read."""
        wanted = query_search.compile_query(q, regex, icase)
        query_search.check_range(start_us, end_us)
        query_search.check_page(limit, offset)
        out = self._query(run, host, "searching", query_search.working_bytes,
                          lambda idx: query_search.search(idx.table, wanted, start_us, end_us, limit, offset))
        return {"run": run, "host": host, **out}

    def aggregate(self, run: str, host: str, start_us: Optional[float] = None, end_us: Optional[float] = None,
                  pid: Optional[str] = None, tid: Optional[str] = None,
                  limit: int = query_aggregate.DEFAULT_LIMIT) -> dict:
        """Exact per-name statistics of a time range (`query.aggregate`)."""
        query_aggregate.check_aggregate(start_us, end_us, pid, tid, limit)
        out = self._query(run, host, "summing", query_aggregate.working_bytes,
                          lambda idx: query_aggregate.aggregate(idx.table, start_us, end_us, pid, tid, limit))
        return {"run": run, "host": host, **out}

    def _query(self, run: str, host: str, what: str, working_bytes: Callable[[Any], int],
               fn: Callable[[TraceIndex], dict]) -> dict:
        """`fn` on the index of (run, host), its working memory (`working_bytes` of the
        table) charged first; the state it prepares on the index (slice parents, the time
        order of searchable events) is then counted with the index."""
        def charged(tf: TraceFile) -> Callable[[TraceIndex], dict]:
            def run_on(idx: TraceIndex) -> dict:
                with self.budget.account(f"{what} {_name(tf)}") as account:
                    account.charge(working_bytes(idx.table), f"{what} the events of {_name(tf)}",  # with its index: 413
                                   alongside=idx.account.total if idx.account is not None else 0)
                    try:
                        return fn(idx)
                    finally:
                        self._settle_index(idx)
            return run_on

        tf = self.trace_file(run, host)
        try:
            return self.on_index(tf, charged(tf))
        except FileChanged as exc:
            tf = self._fresh(run, host, tf, exc)
            return self.on_index(tf, charged(tf))


def _side_bytes(side: Side) -> int:
    """About what a kept comparison side holds: its names' sums and its steps' series."""
    steps = side.steps
    return SIDE_NAME_BYTES * len(side.names) + 8 * len(steps) * (3 + len(steps.busy_ms) + len(steps.memory_mb))


class _Work:
    """One stage of work on a file version: how far it is (bytes of the file read, or of
    the window's input), set by the worker's progress callback (any thread)."""

    def __init__(self, stage: str, total: int) -> None:
        self.stage = stage
        self.total = total
        self.done = 0
        self.began = time.monotonic()

    def advance(self, done: int, total: int) -> None:
        self.done, self.total = int(done), int(total)

    def as_dict(self) -> dict:
        seconds = time.monotonic() - self.began
        return {"stage": self.stage, "done": self.done, "total": self.total, "seconds": round(seconds, 3),
                "bytes_per_s": round(self.done / seconds) if seconds > 0 else 0}


class _Writer:
    """One daemon thread that runs the index store's writes in the order given: an index
    before the blocks kept beside it, and never in a request's way. A daemon, so a server
    stopping does not wait for a write (the store removes what a dead writer left)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Callable[[], Any]] = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        _WRITERS.add(self)

    def put(self, job: Callable[[], Any]) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tb-reduce-index-writer", daemon=True)
                self._thread.start()
        self._queue.put(job)

    def put_for(self, index: TraceIndex, write: Callable[[TraceIndex], Any]) -> None:
        """`write(index)` in turn, holding the index only weakly until then: a queued write
        never keeps an index the budget has let go (it is then not written: a later parse is)."""
        ref = weakref.ref(index)

        def job() -> None:
            found = ref()
            if found is not None:
                write(found)

        self.put(job)

    def wait(self, timeout: Optional[float] = None) -> None:
        if self._thread is None:
            return  # nothing was ever given to it
        done = threading.Event()
        self.put(done.set)
        done.wait(timeout)

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                job()
            except Exception as exc:  # a write that failed costs a parse after a restart, nothing more
                log.warning("tb_reduce: writing to the index store failed (%s: %s)", type(exc).__name__, str(exc))


_WRITERS: weakref.WeakSet[_Writer] = weakref.WeakSet()  # every service's writer in this process


def wait_for_background_work(timeout: Optional[float] = None) -> None:
    """Wait for what every service of this process does after its answers: the texts kept
    on threads of their own, then what their writers were given. For measurements that see
    the whole process, as tracemalloc does: a service's kept text read 16 MiB blocks into a
    later test's traced peak (tests, benchmarks)."""
    for thread in threading.enumerate():
        if thread.name == KEEPER_THREAD and thread is not threading.current_thread():
            thread.join(timeout)
    for writer in list(_WRITERS):
        writer.wait(timeout)


def _let_go(exc: BaseException) -> None:
    """Free what a failed computation held, now rather than at some later collection.

    An exception keeps its traceback's frames, and their locals (a half-built event
    table, a block of decoded events) with them; the frames and the exception refer
    to each other, so only the cycle collector frees them — possibly much later, while
    the memory budget already counts them as given back. Clearing the frames and
    collecting at once gives the memory back to the system when the error is answered.
    """
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)
        exc = exc.__context__  # type: ignore[assignment]
    gc.collect()
    release_free_memory()


def _gap(g: Any) -> dict:
    return {"file": g.file, "offset": g.offset, "skipped": g.skipped, "reason": g.reason}


def _name(tf: TraceFile) -> str:
    return os.path.basename(tf.path)


def _named(exc: TraceError, tf: TraceFile, prefix: str) -> TraceError:
    """The same error, its message prefixed with what failed unless it already names the file."""
    reason = str(exc)
    if _name(tf) in reason:
        return exc
    named = TraceError.__new__(type(exc))
    TraceError.__init__(named, f"{prefix} {_name(tf)}: {reason}")
    named.__dict__.update(exc.__dict__)
    return named
