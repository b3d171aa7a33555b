"""Counters and instants (SPEC G4, G5): the samples and the instant events a plan keeps, per
bucket of the view (`buckets`), and how many instants a table holds. Below the plan."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..index.prepared import prepared_of
from ..model.table import INSTANT_PHASES, SCOPE_GLOBAL, SCOPE_PROCESS, EventTable, ph_in
from ..native import scanner_module
from . import shared
from .buckets import _Buckets
from .shared import _event_chunks


def instant_count(t: EventTable) -> int:
    """How many instant events the table holds, counted once (every request's charge asks:
    a pass over the phases of 50 M events each time was a tenth of a second or more)."""
    p = prepared_of(t)
    n = p.instants
    if n is None:
        n = p.instants = sum(int(np.count_nonzero(ph_in(np.asarray(t.ph[c]), INSTANT_PHASES)))
                             for c in _event_chunks(len(t)))
    return n


def _group_firsts(order: np.ndarray, cols: list) -> np.ndarray:
    first = np.zeros(len(order), dtype=bool)
    if len(order):
        first[0] = True
        for c in cols:
            cs = c[order]
            first[1:] |= cs[1:] != cs[:-1]
    return first


def _counter_keep(t: EventTable, bk: _Buckets, rows: Optional[np.ndarray] = None) -> np.ndarray:
    """M4-style: per series and bucket the min and max samples; first and last. `rows`: the
    samples to look at (ascending: a window's), else all."""
    ev, series, value = t.counter_event, t.counter_series, t.counter_value
    if rows is not None:
        ev, series, value = ev[rows], series[rows], value[rows]
    ts = t.ts[ev]
    w = (ts >= bk.t0) & (ts <= bk.t1)
    ev, series, value, ts = ev[w], series[w], value[w], ts[w]
    if len(ev) == 0:
        return ev
    b = bk.of(ts)
    out = []
    for v in (value, -value):
        order = np.lexsort((ev, ts, v, b, series))
        out.append(ev[order][_group_firsts(order, [series, b])])
    order = np.lexsort((ev, ts, series))
    firsts = _group_firsts(order, [series])
    out.append(ev[order][firsts])
    lasts = np.append(firsts[1:], True)
    out.append(ev[order][lasts])
    return np.concatenate(out)


def _instant_keep(t: EventTable, in_window: np.ndarray, bk: _Buckets) -> np.ndarray:
    """Per scope (thread, process or global) and bucket, the first instant (by time, then
    event). Found a chunk of events at a time: each chunk's firsts per group, then the
    first of those — the same instants as one sort of them all, holding a chunk. A table
    without instants (counted once, `instant_count`) skips the pass over its phases. Where
    the window index is made, `first_instants_by_time` finds the same without this pass."""
    if instant_count(t) == 0:
        return np.zeros(0, dtype=np.int64)
    pid_of_track = t.track_pid()
    firsts = [_first_instants(t, np.flatnonzero(ph_in(np.asarray(t.ph[a:a + shared.CHUNK_EVENTS]), INSTANT_PHASES)
                                                & in_window[a:a + shared.CHUNK_EVENTS]) + a, bk, pid_of_track)
              for a in range(0, len(t.ph), shared.CHUNK_EVENTS)]
    found = np.concatenate(firsts) if firsts else np.zeros(0, dtype=np.int64)
    return _first_instants(t, found, bk, pid_of_track) if len(firsts) > 1 else found


def _first_instants(t: EventTable, idx: np.ndarray, bk: _Buckets, pid_of_track: np.ndarray) -> np.ndarray:
    """Of the instants `idx`, the first of each (scope, who, bucket), in that order."""
    if len(idx) == 0:
        return idx
    kind = t.scope[idx].astype(np.int64)
    who = np.where(kind == SCOPE_GLOBAL, 0, np.where(kind == SCOPE_PROCESS, pid_of_track[t.track[idx]], t.track[idx]))
    ts = t.ts[idx]
    b = bk.of(ts)
    order = np.lexsort((idx, ts, b, who, kind))
    return idx[order][_group_firsts(order, [kind, who, b])]


def first_instants_by_time(t: EventTable, inst: np.ndarray, bk: _Buckets, pid_of_track: np.ndarray) -> np.ndarray:
    """Of the instants `inst` in (time, event) order (a run of the window index's
    `instants`), the first of each (scope, who, bucket), ascending: `_first_instants`'s
    set. In that order each (scope, who)'s buckets never go back, so natively one pass
    keeps the last bucket seen per (scope, who) (`_scan.firsts_by_key`) instead of sorting
    them all by five keys (a whole view of the 8 GiB Kineto trace: its 2.2 M instants, ~0.1 s)."""
    inst = np.asarray(inst, dtype=np.int64)
    native = scanner_module()
    tracks = max(len(t.tracks), 1)
    if native is not None and len(inst):
        kind = np.asarray(t.scope[inst]).astype(np.int64)
        nkeys = (int(kind.max()) + 1) * tracks
        if nkeys <= _KEYS_PER_INSTANT * len(inst) + _KEYS_MIN:
            track = np.asarray(t.track[inst]).astype(np.int64)
            who = np.where(kind == SCOPE_GLOBAL, 0, np.where(kind == SCOPE_PROCESS, pid_of_track[track], track))
            out = np.empty(len(inst), dtype=np.int64)
            k = native.firsts_by_key(kind * tracks + who, bk.of(np.asarray(t.ts[inst])).astype(np.int64), nkeys,
                                     out)
            if k >= 0:
                return np.sort(inst[out[:k]])
    return np.sort(_first_instants(t, inst, bk, pid_of_track))


# `first_instants_by_time`'s native pass keeps 8 B a (scope, who): used while those are at most
# this many an instant, plus a few (a trace of millions of threads and few instants sorts them).
_KEYS_PER_INSTANT = 2
_KEYS_MIN = 1 << 16
