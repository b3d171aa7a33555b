"""Merged views: the service's side of `trace?run=&hosts=…` (see `merge` for the rules).

Each host is reduced on its own, as a single-host view of its part of the window with
its share of the buckets (a cached, deterministic reduction like any other), then the
reductions are merged, one host's events in memory at a time, into a body cached under
a digest of every host's file and the view. Hosts are read in parallel, each in a
computation slot of the service's gate; a host that cannot be read is reported with its
reason (`tb_reduce.hosts[k].error`) while the others are served.

The service is passed in (not imported): this module sits below it.
"""

from __future__ import annotations

import gzip
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

import orjson

from .. import FORMAT_VERSION
from ..cache import key_digest
from ..errors import NotFound, TraceError
from ..gate import ServerBusy
from ..levels import RESOLUTION
from ..reduction import default_window
from ..writer import Sink
from .clock import Alignment, HostClock, align, host_clock
from .merge import HostPart, write_merged
from .selection import BadHosts, pick_hosts

PARSED_BYTES_PER_BYTE = 5  # a reduction's JSON bytes and the Python objects parsed from them
MAX_HOSTS = 64  # hosts merged in one view (a run's lanes past this come with the host picker)


def bucket_share(level: Any, resolution: Optional[int], hosts: int) -> Optional[int]:
    """Each host's buckets: the view's (the screen's `resolution`, else the level's)
    shared by the hosts, at least one; level 0 has none, `auto` without a resolution
    keeps its own budget per host."""
    if level == 0:
        return None
    total = resolution if resolution is not None else RESOLUTION.get(level) if isinstance(level, int) else None
    return None if total is None else max(1, total // max(1, hosts))


class MergedViews:
    """`service`: the TraceService; `reduction`: its result type, `(body, stats, etag)`."""

    def __init__(self, service: Any, reduction: Any) -> None:
        self.service = service
        self.reduction_type = reduction

    def files(self, run: str, spec: str) -> list:
        """The listed files of the hosts `spec` names, in the run's order."""
        entry = next((r for r in self.service.runs() if r["run"] == run), None)
        if entry is None:
            raise NotFound(f"no trace for run {run!r}")
        listed = [h["host"] for h in entry["hosts"]]
        exports = [h["host"] for h in entry["hosts"] if h.get("capped")]
        picked, unknown = pick_hosts(spec, listed, exports)
        if unknown:
            raise NotFound(f"no host {unknown[0]!r} in run {run!r}")
        if not picked:
            raise BadHosts("name at least one host, or * for all")
        if len(picked) > MAX_HOSTS:
            raise BadHosts(f"{len(picked)} hosts: a merged view shows at most {MAX_HOSTS}; name fewer")
        ranks = {h: i for i, h in enumerate(listed)}
        files = [(ranks[h], self.service.catalog.find(run, h)) for h in picked]
        if any(tf is None for _, tf in files):
            raise NotFound(f"a host of run {run!r} is no longer listed: reload the run list")
        return files

    def digest(self, files: list, level: Any, start_us: Optional[float], end_us: Optional[float],
               drop_args: bool, resolution: Optional[int]) -> str:
        hosts = [[rank, tf.host, tf.path, tf.dev, tf.ino, tf.bytes, tf.mtime_ns] for rank, tf in files]
        return key_digest(["merged", FORMAT_VERSION, hosts, level, start_us, end_us, drop_args, resolution])

    def etag(self, run: str, spec: str, level: Any, start_us: Optional[float], end_us: Optional[float],
             drop_args: bool, resolution: Optional[int]) -> str:
        return self.digest(self.files(run, spec), level, start_us, end_us, drop_args, resolution)[:32]

    def reduction(self, run: str, spec: str, level: Any, start_us: Optional[float], end_us: Optional[float],
                  drop_args: bool = False, with_body: bool = True, resolution: Optional[int] = None) -> Any:
        files = self.files(run, spec)
        digest = self.digest(files, level, start_us, end_us, drop_args, resolution)
        found = self.service._cached(digest, with_body)
        if found is not None:
            return found
        return self.service.flight.do(
            ("merged", digest), lambda: self._compute(files, digest, level, start_us, end_us, drop_args, resolution))

    # ---- computing -----------------------------------------------------------------
    def _clock(self, tf: Any) -> HostClock:
        def read(idx: Any) -> HostClock:
            t0, t1 = default_window(idx.table)
            return host_clock(idx.metadata, t0, t1)

        return self.service.on_index(tf, read)

    def _compute(self, files: list, digest: str, level: Any, start_us: Optional[float], end_us: Optional[float],
                 drop_args: bool, resolution: Optional[int]) -> Any:
        found = self.service._cached(digest, True)
        if found is not None:
            return found
        began = time.perf_counter()
        svc = self.service
        share = bucket_share(level, resolution, len(files))
        workers = max(1, min(len(files), svc.gate.workers))
        errors: list[Optional[BaseException]] = [None] * len(files)

        def clock_of(i: int) -> HostClock:
            try:
                return self._clock(files[i][1])
            except (TraceError, ServerBusy, MemoryError) as exc:
                errors[i] = exc
                return HostClock(None, "none", 0.0, 0.0)

        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tb-reduce-hosts") as pool:
            clocks = list(pool.map(clock_of, range(len(files))))
            alignment = align([c for c, e in zip(clocks, errors) if e is None] or clocks)
            offsets = iter(alignment.offsets_us)
            host_offsets = [next(offsets) if e is None else 0.0 for e in errors]

            def reduce_host(i: int) -> Any:
                if errors[i] is not None:
                    return None
                off = host_offsets[i]
                lo = None if start_us is None else start_us - off
                hi = None if end_us is None else end_us - off
                try:
                    return svc.reduction_of(files[i][1], level, lo, hi, drop_args, True, share)
                except (TraceError, ServerBusy, MemoryError) as exc:
                    errors[i] = exc
                    return None

            reductions = list(pool.map(reduce_host, range(len(files))))
        if all(e is not None for e in errors):
            raise errors[0]  # type: ignore[misc]
        account = svc.budget.account("merging the hosts' reductions")
        held = [0]

        def loader(body: Any) -> Any:
            def load() -> Any:
                # One host's reduction at a time: its JSON and the objects parsed from it
                # (about 4x its bytes) are charged while it is merged, the previous one given back.
                account.release(held[0])
                raw = gzip.decompress(body.read())
                held[0] = PARSED_BYTES_PER_BYTE * len(raw)
                account.charge(held[0], "a host's reduction, merged")
                return orjson.loads(raw)
            return load

        parts = []
        for (rank, tf), clock, red, exc in zip(files, clocks, reductions, errors):
            load = loader(red.body) if red is not None else None
            parts.append(HostPart(tf.host, rank, clock, load, f"{type(exc).__name__}: {exc}" if exc else None))
        view = {"level": level, "resolution": share, "window_us": [start_us, end_us] if start_us is not None else None}
        spool = svc.disk.spool(digest, svc.budget)
        try:
            sink = Sink(spool, gzip=True)
            stats = write_merged(parts, Alignment(tuple(host_offsets), alignment.epoch_ns, alignment.absolute),
                                 sink, view)
            sink.close()
            stats["timings_s"] = {"request": time.perf_counter() - began}
            body = spool.finish(json.dumps(_meta(stats), separators=(",", ":")).encode())
        except BaseException:
            spool.abort()
            raise
        finally:
            account.close()
        return self.reduction_type(body, dict(_meta(stats), cached=False), digest[:32])


def _meta(stats: dict) -> dict:
    """What `stats` answers: the merged `tb_reduce` object without per-event arrays."""
    hosts = [{k: v for k, v in h.items() if k != "input_index"} for h in stats.get("hosts", [])]
    return dict(stats, hosts=hosts)
