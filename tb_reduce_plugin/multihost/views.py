"""Merged views: the service's side of `trace?run=&hosts=…` (see `merge` for the rules).

Each host is reduced on its own, as a single-host view of its part of the window with
its share of the buckets (a deterministic reduction cached under the very digest a
single-host view of that window uses, so zooming into one host afterwards is a cache
hit), then the reductions are merged, one host's events in memory at a time, into a
body cached under a digest of every host's file and the view.

Where the per-host work runs (`executor`): hosts already reduced are read from the
cache; a host whose index this server holds, or a view of one host, is reduced here in
a computation slot; the others go to the workers (`--tb_reduce_workers`), whose
reductions land in the disk cache. A view of the whole run is one round: each worker
sends its host's clock (kept here per file version: a few numbers) with its reduction.
A window on the merged clock needs the clocks first (each host's part of it depends on
its offset): a round of clock tasks, then the reductions. A host that cannot be read, or whose worker
failed twice, is reported with its reason (`tb_reduce.hosts[k].error`) while the
others are served. Such an answer is cached only if every failure is the file's own (a
bad trace gives the same answer next time); one with a host lost to a passing failure (a
worker that died, a timeout, a cluster out of reach, a busy server) is served and not
kept, so the next ask makes the view again, whole once the workers are back.

Above `LANE_HOSTS` hosts, every host not named in `expand` is drawn as one busy/idle
lane (`lanes`), so a run of a thousand hosts opens; the lanes share half the view's
buckets with a floor of `LANE_MIN_BUCKETS` each, the expanded hosts the other half.

The service is passed in (not imported): this module sits below it.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, Sequence

import orjson

from .. import FORMAT_VERSION, OUTPUT_REVISION
from ..errors import NotFound, ObjectStoreError, TraceError
from ..reduce.levels import RESOLUTION
from ..reduce.plan import default_window
from ..reduce.writer import Sink
from ..serve.cache import MemoryBody, key_digest
from ..serve.gate import ServerBusy
from .clock import Alignment, HostClock, align, host_clock
from .executor import HostExecutor, Outcome
from .merge import HostPart, write_merged
from .selection import BadHosts, pick_hosts
from .tasks import ClockResult, HostResult, HostTask, host_clock_task, reduce_host_task

PARSED_BYTES_PER_BYTE = 5  # a reduction's JSON bytes and the Python objects parsed from them
MAX_HOSTS = 4096  # hosts merged in one view
LANE_HOSTS = 32  # above this many hosts, hosts not expanded are drawn as lanes
LANE_MIN_BUCKETS = 200  # a lane's buckets at least: a lane is at most one slice a bucket
MAX_CLOCKS = 100_000  # host clocks remembered (a few numbers each)
MAX_MERGES = 8  # merged views computed at once; more are told to come back (a storm of windows)


def bucket_share(level: Any, resolution: Optional[int], hosts: int) -> Optional[int]:
    """Each host's buckets: the view's (the screen's `resolution`, else the level's)
    shared by the hosts, at least one; level 0 has none, `auto` without a resolution
    keeps its own budget per host."""
    if level == 0:
        return None
    total = resolution if resolution is not None else RESOLUTION.get(level) if isinstance(level, int) else None
    return None if total is None else max(1, total // max(1, hosts))


def lane_shares(level: Any, resolution: Optional[int], lanes: int, expanded: int) -> tuple[Optional[int], Optional[int]]:
    """(each lane's buckets, each expanded host's buckets) in a lane view."""
    if level == 0:
        return None, None
    whole = resolution if resolution is not None else RESOLUTION.get(level) if isinstance(level, int) else None
    if whole is None:
        whole = RESOLUTION[2]
    lane = max(LANE_MIN_BUCKETS, (whole // 2) // max(1, lanes))
    return lane, max(1, (whole // 2) // max(1, expanded))


class MergedViews:
    """`service`: the TraceService; `reduction`: its result type, `(body, stats, etag)`;
    `executor`: where hosts are reduced when this server does not do it itself (None:
    always here)."""

    def __init__(self, service: Any, reduction: Any, executor: Optional[HostExecutor] = None,
                 worker_memory_bytes: int = 0) -> None:
        self.service = service
        self.reduction_type = reduction
        self.executor = executor
        self.worker_memory_bytes = worker_memory_bytes or service.budget.limit
        self._clocks: OrderedDict[tuple, HostClock] = OrderedDict()  # a file version -> its clock
        self._clocks_lock = threading.Lock()
        self._merges = threading.BoundedSemaphore(MAX_MERGES)

    # ---- which hosts ---------------------------------------------------------------
    def files(self, run: str, spec: str) -> list:
        """The listed files of the hosts `spec` names, in the run's order, as (rank, file)."""
        entry = next((r for r in self.service.runs() if r["run"] == run), None)
        if entry is None:
            raise NotFound(f"no trace for run {run!r}")
        listed = [h["host"] for h in entry["hosts"]]
        exports = [h["host"] for h in entry["hosts"] if h.get("export") or h.get("capped")]
        picked, unknown = pick_hosts(spec, listed, exports)
        if unknown:
            raise NotFound(f"no host {unknown[0]!r} in run {run!r}")
        if not picked:
            raise BadHosts("name at least one host, or * for all")
        if len(picked) > MAX_HOSTS:
            raise BadHosts(f"{len(picked)} hosts: a merged view shows at most {MAX_HOSTS:,}; name fewer")
        ranks = {h: i for i, h in enumerate(listed)}
        files = [(ranks[h], self.service.catalog.find(run, h)) for h in picked]
        if any(tf is None for _, tf in files):
            raise NotFound(f"a host of run {run!r} is no longer listed: reload the run list")
        return files

    def lanes_of(self, files: list, expand: Optional[str]) -> list[bool]:
        """Which hosts are drawn as lanes: none up to `LANE_HOSTS` hosts, else all but `expand`."""
        if len(files) <= LANE_HOSTS:
            return [False] * len(files)
        wanted: set[str] = set()
        if expand:
            names = [tf.host for _, tf in files]
            wanted = {expand} if expand in names else {n for n in expand.split(",") if n}
            unknown = sorted(wanted - set(names))
            if unknown:
                raise BadHosts(f"expand names {unknown[0]!r}, which is not among the view's hosts")
            if len(wanted) > LANE_HOSTS:
                raise BadHosts(f"expand names {len(wanted)} hosts: at most {LANE_HOSTS} are drawn in full at once")
        return [tf.host not in wanted for _, tf in files]

    def digest(self, files: list, level: Any, start_us: Optional[float], end_us: Optional[float],
               drop_args: bool, resolution: Optional[int], lanes: Sequence[bool] = ()) -> str:
        hosts = [[rank, tf.host, tf.path, tf.dev, tf.ino, tf.bytes, tf.mtime_ns] for rank, tf in files]
        parts: list = ["merged", FORMAT_VERSION, OUTPUT_REVISION, hosts, level, start_us, end_us, drop_args, resolution]
        if any(lanes):
            parts.append(["lanes", [i for i, lane in enumerate(lanes) if not lane]])
        return key_digest(parts)

    def etag(self, run: str, spec: str, level: Any, start_us: Optional[float], end_us: Optional[float],
             drop_args: bool, resolution: Optional[int], expand: Optional[str] = None) -> str:
        files = self.files(run, spec)
        lanes = self.lanes_of(files, expand)
        return self.digest(files, level, start_us, end_us, drop_args, resolution, lanes)[:32]

    def reduction(self, run: str, spec: str, level: Any, start_us: Optional[float], end_us: Optional[float],
                  drop_args: bool = False, with_body: bool = True, resolution: Optional[int] = None,
                  expand: Optional[str] = None) -> Any:
        files = self.files(run, spec)
        lanes = self.lanes_of(files, expand)
        digest = self.digest(files, level, start_us, end_us, drop_args, resolution, lanes)
        found = self.service._cached(digest, with_body)
        if found is not None:
            return found
        return self.service.flight.do(
            ("merged", digest),
            lambda: self._bounded(files, lanes, digest, level, start_us, end_us, drop_args, resolution))

    def _bounded(self, *args: Any) -> Any:
        """`_compute`, unless `MAX_MERGES` merged views are being made already: each holds
        threads and waits on the workers, so a storm of distinct windows is turned away
        (503, as the gate does) instead of queueing without bound."""
        if not self._merges.acquire(blocking=False):
            raise ServerBusy(f"{MAX_MERGES} merged views are being computed; try again in a moment",
                             self.service.gate.retry_after())
        try:
            return self._compute(*args)
        finally:
            self._merges.release()

    # ---- the per-host work -----------------------------------------------------------
    def _remote(self, files: list, i: int) -> bool:
        """Whether host `i` goes to the workers: not for one host, nor one whose index is here."""
        return self.executor is not None and len(files) > 1 and self.service.warm_index(files[i][1]) is None

    def _task(self, tf: Any, level: Any = 2, lo: Optional[float] = None, hi: Optional[float] = None,
              drop_args: bool = False, share: Optional[int] = None) -> HostTask:
        svc = self.service
        store = getattr(svc, "store", None)
        return HostTask(tf.path, (tf.dev, tf.ino, tf.bytes, tf.mtime_ns), level, lo, hi, drop_args, share,
                        self.worker_memory_bytes, svc.max_input_bytes, getattr(svc, "stage_dir", None),
                        index_dir=store.directory if store is not None else None)

    def _clock_here(self, tf: Any) -> HostClock:
        def read(idx: Any) -> HostClock:
            t0, t1 = default_window(idx.table)
            return host_clock(idx.metadata, t0, t1)

        return self.service.on_index(tf, read)

    def _remember_clock(self, tf: Any, clock: HostClock) -> None:
        with self._clocks_lock:
            self._clocks[self.service._index_key(tf)] = clock
            while len(self._clocks) > MAX_CLOCKS:
                self._clocks.popitem(last=False)

    def _clocks_of(self, files: list, errors: list, transient: set, pool: ThreadPoolExecutor) -> list[HostClock]:
        svc = self.service
        clocks: list[Optional[HostClock]] = [None] * len(files)
        with self._clocks_lock:
            for i, (_, tf) in enumerate(files):
                clocks[i] = self._clocks.get(svc._index_key(tf))
        wanted = [i for i, c in enumerate(clocks) if c is None and errors[i] is None]
        remote = [i for i in wanted if self._remote(files, i)]
        here = [i for i in wanted if i not in set(remote)]

        def clock_here(i: int) -> None:
            try:
                clocks[i] = self._clock_here(files[i][1])
                self._remember_clock(files[i][1], clocks[i])  # type: ignore[arg-type]
            except (TraceError, ServerBusy, MemoryError) as exc:
                errors[i] = str(exc) or type(exc).__name__
                if _passing(exc):
                    transient.add(i)

        if remote:
            assert self.executor is not None
            got = self.executor.run(host_clock_task, [self._task(files[i][1]) for i in remote],
                                    [_key("clock", files[i][1]) for i in remote],
                                    [files[i][0] for i in remote])
            for i, outcome in zip(remote, got):
                value: Optional[ClockResult] = _answer(outcome, errors, transient, i)
                if value is not None:
                    clocks[i] = HostClock(value.origin_ns, value.source, value.start_us, value.end_us)
                    self._remember_clock(files[i][1], clocks[i])  # type: ignore[arg-type]
        list(pool.map(clock_here, here))
        return [c if c is not None else HostClock(None, "none", 0.0, 0.0) for c in clocks]

    def _reductions(self, files: list, windows: list, shares: list, level: Any, drop_args: bool,
                    errors: list, transient: set, pool: ThreadPoolExecutor) -> list:
        """Each host's reduction made or found, as what `_merge` reads it from: its digest
        (the body stays in the disk cache until its turn: a thousand hosts hold no thousand
        descriptors) or, where the cache could not be written, the body in memory."""
        svc = self.service
        out: list = [None] * len(files)
        digests = [svc._digest(tf, level, w[0], w[1], drop_args, share)
                   for (_, tf), w, share in zip(files, windows, shares)]
        todo = []
        for i, d in enumerate(digests):
            if errors[i] is not None:
                continue
            if svc._cached(d, False) is not None:
                out[i] = d
            else:
                todo.append(i)
        remote = [i for i in todo if self._remote(files, i)]
        here = [i for i in todo if i not in set(remote)]

        def reduce_here(i: int) -> None:
            lo, hi = windows[i]
            try:
                out[i] = _held(svc.reduction_of(files[i][1], level, lo, hi, drop_args, True, shares[i]), digests[i])
            except (TraceError, ServerBusy, MemoryError) as exc:
                errors[i] = str(exc) or type(exc).__name__
                if _passing(exc):
                    transient.add(i)

        def landed(k: int, outcome: Outcome) -> None:
            """A worker's answer, into the disk cache as soon as it arrives (one body held at a time)."""
            i = remote[k]
            value: Optional[HostResult] = _answer(outcome, errors, transient, i)
            if value is not None:
                out[i] = _held(self._store(digests[i], value), digests[i])
                c = value.clock
                if c is not None and c.error is None:
                    self._remember_clock(files[i][1], HostClock(c.origin_ns, c.source, c.start_us, c.end_us))
            outcome.value = None

        if remote:
            assert self.executor is not None
            tasks = [self._task(files[i][1], level, windows[i][0], windows[i][1], drop_args, shares[i]) for i in remote]
            self.executor.run(reduce_host_task, tasks, [digests[i] for i in remote], [files[i][0] for i in remote],
                              on_done=landed)
        list(pool.map(reduce_here, here))
        return out

    def _store(self, digest: str, result: HostResult) -> Any:
        svc = self.service
        spool = svc.disk.spool(digest, svc.budget)
        try:
            spool.write(result.body)
            body = spool.finish(result.meta)
        except BaseException:
            spool.abort()
            raise
        return self.reduction_type(body, dict(json.loads(result.meta), cached=False), digest[:32])

    # ---- the merge --------------------------------------------------------------------
    def _compute(self, files: list, lanes: list, digest: str, level: Any, start_us: Optional[float],
                 end_us: Optional[float], drop_args: bool, resolution: Optional[int]) -> Any:
        svc = self.service
        found = svc._cached(digest, True)
        if found is not None:
            return found
        began = time.perf_counter()
        if any(lanes):
            lane_share, full_share = lane_shares(level, resolution, sum(lanes), len(lanes) - sum(lanes))
            shares = [lane_share if lane else full_share for lane in lanes]
        else:
            shares = [bucket_share(level, resolution, len(files))] * len(files)
        errors: list[Optional[str]] = [None] * len(files)
        transient: set[int] = set()  # the hosts whose error is not their file's: not to be cached
        whole = start_us is None and end_us is None
        with ThreadPoolExecutor(max_workers=max(1, min(len(files), svc.gate.workers)),
                                thread_name_prefix="tb-reduce-hosts") as pool:
            if whole:
                # The whole run: no host's reduction depends on where the hosts sit in time, so
                # each is reduced at once and its worker sends its clock with it (one round).
                reductions = self._reductions(files, [(None, None)] * len(files), shares, level, drop_args,
                                              errors, transient, pool)
            clocks = self._clocks_of(files, errors, transient, pool)
            ok = [i for i, e in enumerate(errors) if e is None]
            alignment = align([clocks[i] for i in ok] or clocks)
            host_offsets = [0.0] * len(files)
            for i, off in zip(ok, alignment.offsets_us):
                host_offsets[i] = off
            windows = [(None if start_us is None else start_us - off, None if end_us is None else end_us - off)
                       for off in host_offsets]
            if not whole:
                reductions = self._reductions(files, windows, shares, level, drop_args, errors, transient, pool)
        if all(e is not None for e in errors):
            if transient:  # not the files' fault: asked again in a moment, it may well be answered
                first = errors[min(transient)]
                raise ServerBusy(f"no host of the view could be reduced now; the first: {first}",
                                 svc.gate.retry_after())
            raise TraceError(f"no host of the view could be read; the first: {errors[0]}")
        with svc.computing():
            return self._merge(files, lanes, digest, level, start_us, end_us, drop_args, clocks, reductions, errors,
                               Alignment(tuple(host_offsets), alignment.epoch_ns, alignment.absolute), windows,
                               shares, began, keep=not transient)

    def _merge(self, files: list, lanes: list, digest: str, level: Any, start_us: Optional[float],
               end_us: Optional[float], drop_args: bool, clocks: list, reductions: list, errors: list,
               alignment: Alignment, windows: list, shares: list, began: float, keep: bool = True) -> Any:
        """Writes the merged body; `keep`: into the cache (else held in memory for this answer only)."""
        svc = self.service
        account = svc.budget.account("merging the hosts' reductions")
        held = [0]

        def loader(i: int, ref: Any) -> Any:
            def load() -> Any:
                # One host's reduction at a time: its JSON and the objects parsed from it
                # (about 4x its bytes) are charged while it is merged, the previous one given back.
                account.release(held[0])
                held[0] = 0
                body = ref
                if isinstance(ref, str):
                    found = svc._cached(ref, True)
                    if found is None:  # evicted meanwhile by a busy cache: made again, here
                        (_, tf), (lo, hi) = files[i], windows[i]
                        found = svc.reduction_of(tf, level, lo, hi, drop_args, True, shares[i])
                    body = found.body
                raw = gzip.decompress(body.read())
                held[0] = PARSED_BYTES_PER_BYTE * len(raw)
                account.charge(held[0], "a host's reduction, merged")
                return orjson.loads(raw)
            return load

        parts = []
        for i, ((rank, tf), clock, red, err, lane) in enumerate(zip(files, clocks, reductions, errors, lanes)):
            load = loader(i, red) if red is not None and err is None else None
            parts.append(HostPart(tf.host, rank, clock, load, err, lane))
        view = {"level": level, "resolution": shares[0] if len(set(shares)) == 1 else None,
                "window_us": [start_us, end_us] if start_us is not None else None,
                "lane_threshold": LANE_HOSTS}
        spool = svc.disk.spool(digest, svc.budget, store=keep)
        try:
            sink = Sink(spool, gzip=True)
            stats = write_merged(parts, alignment, sink, view)
            sink.close()
            # Where the work ran, and how long it took, are in the stats, not in the body: the same
            # view gives the same bytes whichever executor made it.
            stats["timings_s"] = {"request": time.perf_counter() - began}
            stats["workers"] = self.executor.describe() if self.executor is not None else "in the server"
            body = spool.finish(json.dumps(_meta(stats), separators=(",", ":")).encode())
        except BaseException:
            spool.abort()
            raise
        finally:
            account.close()
        # An answer not kept has an ETag of its own: a browser revalidating it must not be told
        # with a 304 that the answer it holds, hosts missing, is the view.
        return self.reduction_type(body, dict(_meta(stats), cached=False),
                                   digest[:32] if keep else f"{digest[:32]}-partial")


def _answer(outcome: Outcome, errors: list, transient: set, i: int) -> Any:
    """A worker's value for host `i`, or None with the reason in `errors[i]` (and `i` in
    `transient` unless the reason is the file's own)."""
    value = outcome.value
    if outcome.failure or value is None:
        errors[i] = outcome.failure or "no answer from its worker"
        transient.add(i)
        return None
    if value.error:
        errors[i] = value.error
        if getattr(value, "passing", False):
            transient.add(i)
        return None
    return value


def _passing(exc: BaseException) -> bool:
    """Whether a host's failure in the server is of the moment (busy, out of memory, the
    object store unreachable) rather than its file's."""
    return not isinstance(exc, TraceError) or isinstance(exc, ObjectStoreError)


def _held(red: Any, digest: str) -> Any:
    """What to keep of a host's reduction until the merge reads it (see `_reductions`)."""
    return red.body if isinstance(red.body, MemoryBody) else digest


def _key(kind: str, tf: Any) -> str:
    """A task's key on a cluster: what it computes, of which file version."""
    return key_digest([kind, FORMAT_VERSION, tf.path, tf.dev, tf.ino, tf.bytes, tf.mtime_ns])[:40]


def _meta(stats: dict) -> dict:
    """What `stats` answers: the merged `tb_reduce` object without per-event arrays."""
    hosts = [{k: v for k, v in h.items() if k != "input_index"} for h in stats.get("hosts", [])]
    return dict(stats, hosts=hosts)
