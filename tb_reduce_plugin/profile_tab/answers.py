"""The Profile tab's Trace Viewer, answered from tb-reduce's index and caches.

Which runs are tb-reduce's to answer there:
- an XProf run (`…/plugins/profile/<session>/`, named as XProf names it, which is how
  discovery names it too) for a host whose `<host>.xplane.pb` tb-reduce lists: its
  Trace Viewer views, details and searches come from tb-reduce; every other tool
  stays XProf's;
- a run holding no XSpace at all — PyTorch `*.pt.trace.json(.gz)`, JAX
  `*.trace.json.gz` alone, any Chrome trace — which XProf (since 2025) cannot open:
  tb-reduce adds it to the Profile tab's run list with the Trace Viewer as its tool.

Views are tb-reduce reductions (`with_input_index`, args left out: the viewer asks
for them on click), turned into XProf's JSON form (`xprof_json`) once per (file
version, window, resolution) and kept in the disk cache beside the reductions, so a
view asked again is read from disk. Domain errors only (`NotFound`, `TraceError`, …):
`plugin.py` turns them into statuses.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import orjson
from isal import igzip, isal_zlib

from .. import FORMAT_VERSION, OUTPUT_REVISION
from ..model.table import PH_B, PH_X
from ..reduce.levels import ArgsPolicy
from ..reduce.pipeline import TraceIndex, event_json
from ..reduce.plan import default_window
from ..reduce.shared import slices_of
from ..serve.cache import Body, MemoryBody, key_digest
from ..serve.discovery import TraceFile
from ..serve.service import NotFound, TraceService
from . import xprof_json
from .asks import Ask

FORM_VERSION = 1  # of the XProf form written here: part of every cache key
VIEW_LEVEL = 2  # the args and keep rules of a level 1-4 view; its bucket count is the viewer's resolution
MAX_RESOLUTION = 200_000  # buckets per window taken from a request: more is asked for nothing a screen shows
SEARCH_LIMIT = 10_000  # events a search sends back, the first in time
# Python objects of a reduced trace being converted, per byte of its JSON (measured: ~6-9x).
CONVERT_BYTES_PER_JSON_BYTE = 12
_SEARCHED = np.array([PH_X, PH_B, ord("i"), ord("I")], dtype=np.uint8)


@dataclass
class Answer:
    body: Body  # gzip JSON
    info: dict  # what the response headers say about it


class ProfileTabAnswers:
    def __init__(self, service: TraceService) -> None:
        self.service = service

    # ---- which runs are tb-reduce's ------------------------------------------------
    def _runs(self) -> dict[str, list[TraceFile]]:
        runs: dict[str, list[TraceFile]] = {}
        for tf in self.service.catalog.files().values():
            runs.setdefault(tf.run, []).append(tf)
        return runs

    def chrome_runs(self) -> dict[str, list[TraceFile]]:
        """Runs with no XSpace: XProf cannot open them; here each is a Trace Viewer run."""
        return {run: sorted(tfs, key=lambda tf: tf.host) for run, tfs in self._runs().items()
                if not any(tf.format == "xspace" for tf in tfs)}

    def is_chrome_run(self, run: str) -> bool:
        return run in self.chrome_runs()

    def file_for(self, run: str, host: str) -> Optional[TraceFile]:
        """The file tb-reduce answers (run, host) from, in XProf's naming; None: XProf's."""
        tfs = self._runs().get(run)
        if not tfs:
            return None
        if any(tf.format == "xspace" for tf in tfs):
            wanted = f"{host}.xplane.pb"
            return next((tf for tf in tfs if tf.format == "xspace" and os.path.basename(tf.path) == wanted), None)
        return next((tf for tf in tfs if tf.host == host), None)

    def hosts(self, run: str) -> list[dict]:
        return [{"hostname": tf.host} for tf in self.chrome_runs().get(run, [])]

    # ---- answers ------------------------------------------------------------------
    def answer(self, tf: TraceFile, ask: Ask) -> Answer:
        if ask.kind == "view":
            return self.view(tf, ask)
        if ask.kind == "event":
            return self._small(self.service.on_index(tf, lambda idx: self._detail(idx, tf, ask)), {"kind": "event"})
        return self._small(self.service.on_index(tf, lambda idx: self._search(idx, tf, ask)), {"kind": "search"})

    @staticmethod
    def _small(doc: dict, info: dict) -> Answer:
        data = orjson.dumps(doc)
        return Answer(MemoryBody(igzip.compress(data, 1)), dict(info, json_bytes=len(data)))

    def view(self, tf: TraceFile, ask: Ask) -> Answer:
        resolution = min(ask.resolution, MAX_RESOLUTION)
        digest = key_digest(["xprof-view", FORMAT_VERSION, OUTPUT_REVISION, FORM_VERSION, tf.path, tf.dev, tf.ino, tf.bytes,
                             tf.mtime_ns, ask.host, resolution, ask.start_ms, ask.end_ms])
        entry = self.service.disk.open(digest)
        if entry is not None and entry.body is not None:
            return Answer(entry.body, dict(orjson.loads(entry.meta), cached=True))
        return self.service.flight.do(("xprof-view", digest), lambda: self._view(tf, ask, resolution, digest))

    def _view(self, tf: TraceFile, ask: Ask, resolution: int, digest: str) -> Answer:
        entry = self.service.disk.open(digest)  # done by another caller while this one waited
        if entry is not None and entry.body is not None:
            return Answer(entry.body, dict(orjson.loads(entry.meta), cached=True))
        began = time.perf_counter()
        clock, span_ms, fmt = self.service.on_index(tf, _clock_and_span)
        start_us = end_us = None
        if ask.start_ms is not None and ask.end_ms is not None:
            start_us, end_us = clock.to_input_us(ask.start_ms), clock.to_input_us(ask.end_ms)
        level = 0 if resolution == 0 else VIEW_LEVEL
        r = self.service.reduction_of(tf, level, start_us, end_us, drop_args=True,
                                      resolution=resolution or None)
        assert r.body is not None
        json_bytes = int(r.stats.get("output", {}).get("json_bytes") or 0)
        # A computation like any other: it takes a slot (a storm of distinct views waits or is
        # told to come back, as reductions are) and charges what it will hold first.
        with self.service.computing(), self.service.budget.account(f"showing {tf.host} in the Profile tab") as account:
            account.charge(CONVERT_BYTES_PER_JSON_BYTE * max(json_bytes, r.body.length * 8),
                           "converting a reduced trace for the Profile tab", wait_s=30.0)
            doc = orjson.loads(_inflate(r.body))
            whole = start_us is None
            out = xprof_json.view(doc, ask.host, clock, span_ms, filtered=not (level == 0 and whole))
            del doc
            data = orjson.dumps(out)
            del out
            info = {"level": r.stats.get("level"), "resolution": resolution, "bucket_us": r.stats.get("bucket_us"),
                    "events": r.stats.get("output", {}).get("events"), "format": fmt,
                    "json_bytes": len(data), "seconds": round(time.perf_counter() - began, 6), "cached": False}
            spool = self.service.disk.spool(digest, self.service.budget)
            try:
                spool.write(igzip.compress(data, 1))
                body = spool.finish(orjson.dumps(info))
            except BaseException:
                spool.abort()
                raise
        return Answer(body, info)

    def _detail(self, idx: TraceIndex, tf: TraceFile, ask: Ask) -> dict:
        t = idx.table
        i = ask.uid
        assert i is not None
        if not 0 <= i < idx.events:
            raise NotFound(f"no event {i}: the trace has {idx.events:,}")
        name = t.names[t.name[i]]
        if ask.event_name is not None and str(name) != ask.event_name:
            raise NotFound(f"event {i} is {str(name)[:80]!r}, not {ask.event_name[:80]!r}: reload the view")
        event = orjson.loads(event_json(idx, i))
        dur: Optional[float] = None
        if t.ph[i] == PH_B:
            sl = slices_of(t)
            at = np.flatnonzero(sl.event == i)
            if len(at):
                dur = float(sl.dur[at[0]])
        clock, span_ms, _ = _clock_and_span(idx)
        return xprof_json.detail(event, i, dur, ask.host, clock, _names_of(t, [int(t.track[i])]), span_ms)

    def _search(self, idx: TraceIndex, tf: TraceFile, ask: Ask) -> dict:
        """Events whose name starts with the prefix (as XProf: case-sensitive), over the
        whole trace — those folded into summaries too — the first `SEARCH_LIMIT` in time."""
        t = idx.table
        prefix = ask.prefix or ""
        ids = np.fromiter((k for k, n in enumerate(t.names) if isinstance(n, str) and n.startswith(prefix)),
                          dtype=np.int64) if prefix else np.zeros(0, dtype=np.int64)
        hits = np.flatnonzero(np.isin(t.name, ids) & np.isin(t.ph, _SEARCHED)) if len(ids) else ids
        if len(hits) > SEARCH_LIMIT:
            hits = hits[np.argsort(t.ts[hits], kind="stable")[:SEARCH_LIMIT]]
        if len(hits):
            sl = slices_of(t)
            opened = np.isin(sl.event, hits) & (sl.partner >= 0)
            hits = np.union1d(hits, sl.partner[opened])
        clock, span_ms, _ = _clock_and_span(idx)
        events: list[dict] = []
        for block in idx.source.events(hits, ArgsPolicy.DROP) if len(hits) else ():
            for raw in block:
                e = orjson.loads(raw)
                if isinstance(e, dict):
                    e.pop("args", None)
                    events.append(e)
        out = [xprof_json.trace_event(e, int(i), clock) for e, i in zip(events, hits.tolist())]
        tracks = sorted(set(t.track[hits].tolist())) if len(hits) else []
        meta = [xprof_json.metadata_event(m, ask.host) for m in _names_of(t, tracks)]
        return xprof_json.envelope(meta + out, span_ms, True)


def _clock_and_span(idx: TraceIndex) -> tuple[xprof_json.Clock, tuple[float, float], str]:
    d0, d1 = default_window(idx.table)
    clock = xprof_json.clock_for(idx.format, d0)
    return clock, (clock.ms(d0), clock.ms(d1)), idx.format


def _names_of(t, tracks: list[int]) -> list[dict]:
    """`process_name`/`thread_name` metadata for the given tracks (pid, tid)."""
    out: list[dict] = []
    pids_done: set = set()
    for k in tracks:
        pid, tid = t.tracks[k]
        if pid not in pids_done:
            pids_done.add(pid)
            name = t.process_names.get(pid)
            out.append({"args": {"name": name if name is not None else pid}, "name": "process_name", "ph": "M",
                        "pid": pid})
        thread = t.thread_names.get(k)
        if thread is not None:
            out.append({"args": {"name": thread}, "name": "thread_name", "ph": "M", "pid": pid, "tid": tid})
    return out


def _inflate(body: Body) -> bytes:
    inflater = isal_zlib.decompressobj(31)
    parts = [inflater.decompress(chunk) for chunk in body.chunks()]
    parts.append(inflater.flush())
    return b"".join(parts)

