"""Deciding what a reduced trace keeps: a pure function of (event table, level, window).

The rules are SPEC §4 made precise in docs/SEMANTICS.md; every step is vectorised
over the event columns. The result is a `Plan`: the sorted indices of input events
to write unchanged (args aside) and the summary slices to add.

Summaries: small slices of a track are sorted by start and cut into groups wherever
an idle bucket lies between them, or a boundary of a kept slice of that track lies
in the gap. A small slice that itself straddles a kept boundary is kept instead, so
no group hull ever contains a kept boundary strictly inside it — summaries nest
properly even where the input's own slices do not. Comparisons happen on integer
ranks of the slice endpoints, offset per track, which makes per-track running
maxima and boundary look-ups single numpy calls over all tracks at once.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .errors import TraceError
from .levels import LEVELS, MAX_RESOLUTION, RESOLUTION
from .model import FLOW_PHASES, INSTANT_PHASES, PH_B, PH_C, PH_E, PH_M, PH_X, SCOPE_GLOBAL, SCOPE_PROCESS, EventTable
from .prepared import prepared_of
from .slices import SliceTable, build_slices

TOP_NAMES = 5
MIN_WINDOW_US = 1e-6


@dataclass
class Summaries:
    track: np.ndarray
    start: np.ndarray
    end: np.ndarray
    count: np.ndarray
    # Summary k's most frequent names: top_name/top_count[top_offsets[k]:top_offsets[k + 1]].
    top_offsets: np.ndarray
    top_name: np.ndarray
    top_count: np.ndarray

    def __len__(self) -> int:
        return len(self.start)


@dataclass
class Plan:
    level: int
    resolution: Optional[int]
    t0: float
    t1: float
    keep: np.ndarray  # sorted input event indices
    summaries: Summaries

    @property
    def bucket_us(self) -> Optional[float]:
        return (self.t1 - self.t0) / self.resolution if self.resolution else None

    @property
    def events(self) -> int:
        return len(self.keep) + len(self.summaries)


def _no_summaries() -> Summaries:
    z = np.zeros(0)
    return Summaries(z.astype(np.int32), z, z, z.astype(np.int64), np.zeros(1, dtype=np.int64),
                     z.astype(np.int64), z.astype(np.int64))


def check_window(start_us: Optional[float], end_us: Optional[float]) -> None:
    """Refuse a window no reduction can honour, before any work is done on it.

    Every surface (command line, plugin, `reduce_index`) calls this one check so
    they agree on what a window is. A bound left out (None) is the trace's own
    edge, checked by the plan. Both bounds must be finite numbers; with both
    given, start must be below end, and the width must itself be finite
    (-1e308..1e308 overflows to inf, which makes every bucket infinite) and at
    least `MIN_WINDOW_US`.
    """
    for name, value in (("start_us", start_us), ("end_us", end_us)):
        if value is not None and not math.isfinite(value):
            raise TraceError(f"{name} must be a finite number, not {value}")
    if start_us is None or end_us is None:
        return
    if not start_us < end_us:
        raise TraceError(f"start_us must be below end_us (got {start_us} and {end_us})")
    width = end_us - start_us
    if not math.isfinite(width):
        raise TraceError(f"the window {start_us}..{end_us} is too wide: its width overflows a float")
    if width < MIN_WINDOW_US:
        raise TraceError(
            f"the window {start_us}..{end_us} is {width:.3g} µs wide; it must be at least "
            f"{MIN_WINDOW_US:g} µs (1 ps, the finest time a trace holds)"
        )


def default_window(t: EventTable) -> tuple[float, float]:
    """The whole trace: first timestamp to last end. Prepared once per table."""
    p = prepared_of(t)
    window = p.default_window
    if window is None:
        window = p.default_window = _default_window(t)
    return window


def events_in_window(t: EventTable, t0: float, t1: float) -> int:
    """How many timed events a window shows: those whose time falls in it, and the slices
    that began before it and are still open in it (as a plan keeps them)."""
    timed = ~np.isnan(t.ts) & (t.ph != PH_M)
    inside = int(np.count_nonzero(timed & (t.ts >= t0) & (t.ts <= t1)))
    sl = slices_of(t)
    return inside + int(np.count_nonzero((sl.start < t0) & (sl.end >= t0)))


def _default_window(t: EventTable) -> tuple[float, float]:
    ok = ~np.isnan(t.ts) & (t.ph != PH_M)
    if not ok.any():
        return 0.0, 1.0
    ts = t.ts[ok]
    dur = np.where(t.ph[ok] == PH_X, np.maximum(np.nan_to_num(t.dur[ok], nan=0.0), 0.0), 0.0)
    with np.errstate(over="ignore"):  # an end past the largest float is inf: refused by the plan, in words
        t0, t1 = float(ts.min()), float((ts + dur).max())
    return (t0, t1) if t1 > t0 else (t0, t0 + 1.0)


def slices_of(t: EventTable) -> SliceTable:
    """Slices are level- and window-independent: prepared once per table."""
    p = prepared_of(t)
    sl = p.slices
    if sl is None:
        sl = p.slices = build_slices(t)
    return sl


class _Buckets:
    def __init__(self, t0: float, t1: float, r: int) -> None:
        self.t0, self.t1, self.r = t0, t1, r
        self.theta = (t1 - t0) / r

    def of(self, t: np.ndarray) -> np.ndarray:
        b = np.floor((np.asarray(t, dtype=np.float64) - self.t0) / self.theta)
        return np.clip(b, 0, self.r - 1).astype(np.int64)

    def clipped(self, t: np.ndarray) -> np.ndarray:
        return self.of(np.clip(t, self.t0, self.t1))


def plan(t: EventTable, level: int, start_us: Optional[float] = None, end_us: Optional[float] = None,
         resolution: Optional[int] = None) -> Plan:
    """What to write for `level` over the window (the whole trace by default).

    `resolution`: the window's bucket count instead of the level's (levels 1-4), for a
    viewer that sizes it from its pixels, as XProf's Trace Viewer does."""
    if level not in LEVELS:
        raise TraceError(f"level must be one of 0-4 or auto, not {level!r}")
    if resolution is not None and not (isinstance(resolution, int) and 1 <= resolution <= MAX_RESOLUTION):
        raise TraceError(f"resolution must be a bucket count from 1 to {MAX_RESOLUTION:,}, not {resolution!r}")
    d0, d1 = default_window(t)
    t0 = d0 if start_us is None else float(start_us)
    t1 = d1 if end_us is None else float(end_us)
    if start_us is None or end_us is None:  # a bound from the trace itself: say so if it is the odd one
        try:
            check_window(t0, t1)
        except TraceError as exc:
            raise TraceError(f"the trace's own time span {d0}..{d1} cannot be bucketed ({exc}); "
                             "ask for a window (start_us, end_us)") from None
    check_window(t0, t1)
    sl = slices_of(t)
    st = _static(t, sl)
    has_ts = st.has_ts
    in_window = has_ts & (t.ts >= t0) & (t.ts <= t1)
    overlaps = (sl.start <= t1) & (sl.end >= t0)

    keep = st.always.copy()
    if level == 0:
        whole = start_us is None and end_us is None
        keep[~has_ts] = True
        keep |= in_window & ~np.isin(t.ph, (PH_X, PH_B, PH_E))
        keep[sl.event[overlaps]] = True
        keep[sl.partner[overlaps & (sl.partner >= 0)]] = True
        if not whole:  # flows are written whole: inside the window, or bound to kept slices
            flows = t.flow_key >= 0
            out = np.unique(t.flow_key[flows & ~in_window])
            keep[flows & np.isin(t.flow_key, out)] = False
            keep[_flow_keep(t, sl, overlaps)] = True
        return Plan(0, None, t0, t1, np.flatnonzero(keep), _no_summaries())

    bk = _Buckets(t0, t1, resolution or RESOLUTION[level])
    kept_slice, summaries = _reduce_slices(sl, overlaps, bk, name_rank(t), st.slice_order)
    keep[sl.event[kept_slice]] = True
    keep[sl.partner[kept_slice & (sl.partner >= 0)]] = True
    keep[_counter_keep(t, bk)] = True
    keep[_instant_keep(t, in_window, bk)] = True
    keep[_flow_keep(t, sl, kept_slice)] = True
    keep |= in_window & ~st.handled
    counter_no_series = (t.ph == PH_C) & in_window
    counter_no_series[t.counter_event] = False
    keep |= counter_no_series
    return Plan(level, bk.r, t0, t1, np.flatnonzero(keep), summaries)


@dataclass
class _Static:
    """What every plan of a table shares, whatever the level and window."""

    has_ts: np.ndarray
    always: np.ndarray  # kept at every level: M, unpaired B/E, untimed events (flows aside)
    handled: np.ndarray  # phases with their own rule (the rest are kept when in the window)
    slice_order: np.ndarray  # slices by (track, start, event)


def _static(t: EventTable, sl: SliceTable) -> _Static:
    p = prepared_of(t)
    st = p.static
    if st is None:
        has_ts = ~np.isnan(t.ts)
        always = np.zeros(len(t), dtype=bool)
        always[t.ph == PH_M] = True
        always[sl.unpaired] = True
        always[~has_ts & ~np.isin(t.ph, FLOW_PHASES)] = True  # a flow needs a time to bind
        handled = np.isin(t.ph, (PH_X, PH_B, PH_E, PH_M, PH_C) + INSTANT_PHASES + FLOW_PHASES)
        order = _track_start_order(sl)
        st = p.static = _Static(has_ts, always, handled, order)
    return st


def _track_start_order(sl: SliceTable) -> np.ndarray:
    """Slices by (track, start, event); XSpace lines come sorted already, so check first."""
    n = len(sl.track)
    if n > 1:
        trk, start, ev = sl.track, sl.start, sl.event
        same = trk[1:] == trk[:-1]
        ordered = (trk[1:] >= trk[:-1]) & (~same | (start[1:] > start[:-1])
                                            | ((start[1:] == start[:-1]) & (ev[1:] > ev[:-1])))
        if ordered.all():
            return np.arange(n)
    return np.lexsort((sl.event, sl.start, sl.track))


def name_rank(t: EventTable) -> np.ndarray:
    """Rank of each name id in name order (strings by value, then others by JSON),
    the tie-break of a summary's top names. Distinct names only: prepared once per table."""
    p = prepared_of(t)
    rank = p.name_rank
    if rank is None:
        def key(i: int) -> tuple:
            v = t.names[i]
            return (0, v) if isinstance(v, str) else (1, json.dumps(v, sort_keys=True, separators=(",", ":")))

        rank = np.empty(len(t.names), dtype=np.int64)
        rank[sorted(range(len(t.names)), key=key)] = np.arange(len(t.names))
        p.name_rank = rank
    return rank


def _reduce_slices(sl: SliceTable, overlaps: np.ndarray, bk: _Buckets,
                   rank: np.ndarray, slice_order: np.ndarray) -> tuple[np.ndarray, Summaries]:
    """Keep big slices (and straddlers); fold the rest into summaries, track by track.

    Working one track at a time keeps the temporaries as small as the largest
    track instead of the whole trace (SPEC: memory bounded as traces grow).
    """
    kept = overlaps & (sl.dur >= bk.theta)
    order = slice_order[overlaps[slice_order]]  # the overlapping slices by (track, start, event)
    trk_sorted = sl.track[order]
    cuts = np.flatnonzero(trk_sorted[1:] != trk_sorted[:-1]) + 1
    del trk_sorted
    out_track, out_start, out_end, out_count, members = [], [], [], [], []
    ngroups = 0
    for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(order)].tolist()):
        idx = order[lo:hi]
        s, e, k = sl.start[idx], sl.end[idx], kept[idx]
        while True:  # promote small slices that straddle a kept boundary, to a fixpoint
            bounds = np.unique(np.concatenate((s[k], e[k])))
            straddle = ~k & _bound_between(bounds, s, e, open_interval=True)
            if not straddle.any():
                break
            k |= straddle
        kept[idx] = k
        small = np.flatnonzero(~k)
        if len(small) == 0:
            continue
        ss, se = s[small], e[small]  # sorted by start
        prev_end = np.maximum.accumulate(se)[:-1]
        new = np.ones(len(small), dtype=bool)
        new[1:] = (ss[1:] >= prev_end) & (
            (bk.clipped(ss[1:]) > bk.clipped(prev_end) + 1)  # an idle bucket between
            | _bound_between(bounds, prev_end, ss[1:], open_interval=False)  # a kept boundary
        )
        heads = np.flatnonzero(new)
        out_track.append(np.full(len(heads), sl.track[idx[0]], dtype=np.int32))
        out_start.append(ss[heads])
        out_end.append(np.maximum.reduceat(se, heads))
        out_count.append(np.diff(np.append(heads, len(small))))
        members.append((ngroups + np.cumsum(new) - 1, sl.name[idx[small]]))
        ngroups += len(heads)
    if ngroups == 0:
        return kept, _no_summaries()
    group = np.concatenate([g for g, _ in members])
    names = np.concatenate([n for _, n in members])
    top_offsets, top_name, top_count = _top_names(group, names, rank, ngroups)
    return kept, Summaries(
        track=np.concatenate(out_track),
        start=np.concatenate(out_start),
        end=np.concatenate(out_end),
        count=np.concatenate(out_count),
        top_offsets=top_offsets,
        top_name=top_name,
        top_count=top_count,
    )


def _bound_between(bounds: np.ndarray, lo: np.ndarray, hi: np.ndarray, open_interval: bool) -> np.ndarray:
    """Whether some value of sorted `bounds` lies in (lo, hi) (open) or [lo, hi] (closed).

    One binary search per element: the first bound past `lo` (at or past it, when
    closed), then one comparison with `hi`.
    """
    if len(bounds) == 0:
        return np.zeros(len(lo), dtype=bool)
    at = np.searchsorted(bounds, lo, "right" if open_interval else "left")
    inside = at < len(bounds)
    first = bounds[np.minimum(at, len(bounds) - 1)]
    return inside & ((first < hi) if open_interval else (first <= hi))


def _top_names(group: np.ndarray, name: np.ndarray, rank: np.ndarray,
               ngroups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group, the most frequent names (ties by name order), as flat arrays:
    (offsets per group, name ids, counts)."""
    nn = int(name.max()) + 1
    combo, counts = np.unique(group.astype(np.int64) * nn + name, return_counts=True)
    g, nm = combo // nn, combo % nn
    order = np.lexsort((rank[nm], -counts, g))
    g, nm, counts = g[order], nm[order], counts[order]
    pos = np.arange(len(g)) - np.searchsorted(g, g, "left")
    sel = pos < TOP_NAMES
    g, nm, counts = g[sel], nm[sel], counts[sel]
    offsets = np.searchsorted(g, np.arange(ngroups + 1), "left")
    return offsets, nm, counts.astype(np.int64)


def _group_firsts(order: np.ndarray, cols: list) -> np.ndarray:
    first = np.zeros(len(order), dtype=bool)
    if len(order):
        first[0] = True
        for c in cols:
            cs = c[order]
            first[1:] |= cs[1:] != cs[:-1]
    return first


def _counter_keep(t: EventTable, bk: _Buckets) -> np.ndarray:
    """M4-style: per series and bucket the min and max samples; first and last."""
    ev, series, value = t.counter_event, t.counter_series, t.counter_value
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
    """Per scope (thread, process or global) and bucket, the first instant."""
    idx = np.flatnonzero(np.isin(t.ph, INSTANT_PHASES) & in_window)
    if len(idx) == 0:
        return idx
    kind = t.scope[idx].astype(np.int64)
    pid_of_track = t.track_pid()
    who = np.where(kind == SCOPE_GLOBAL, 0, np.where(kind == SCOPE_PROCESS, pid_of_track[t.track[idx]], t.track[idx]))
    b = bk.of(t.ts[idx])
    order = np.lexsort((idx, t.ts[idx], b, who, kind))
    return idx[order][_group_firsts(order, [kind, who, b])]


def _flow_keep(t: EventTable, sl: SliceTable, kept_slice: np.ndarray) -> np.ndarray:
    """Whole flows whose every event binds to a kept slice of its own track.

    Binding (docs/SEMANTICS.md): `s`, `t` and `f` with `bp: e` bind to the deepest
    slice enclosing their time — the latest-starting one, shortest on ties — and
    other `f` to the first slice starting at or after it. When the latest-starting
    slice does not enclose the time (the event sits between siblings), the event is
    taken as bound to a kept slice iff any kept slice encloses it. A flow is written
    whole or not at all, so no end ever dangles.

    Where each flow event lands among its track's slices does not depend on the
    level or the window, so it is prepared once per table (`_flow_binding`); a plan
    only looks up which of those slices it keeps.
    """
    fb = _flow_binding(t, sl)
    if len(fb.fidx) == 0 or not kept_slice.any():
        return fb.fidx[:0]
    skept = kept_slice[fb.order]
    ok_sorted = np.zeros(len(fb.fidx), dtype=bool)
    for seg in fb.segments:
        lo_f, hi_f, a, b = seg.lo_f, seg.hi_f, seg.a, seg.b
        kept = skept[a:b]
        ok = seg.direct & kept[seg.pc]
        if seg.between.any():
            starts, ends = fb.sstart[a:b], fb.send[a:b]
            k_starts = starts[kept]
            if len(k_starts):
                k_run_end = np.maximum.accumulate(ends[kept])
                ts, tol = seg.ts[seg.between], seg.tol[seg.between]
                q = np.searchsorted(k_starts, ts + tol, "right") - 1
                ok[seg.between] = (q >= 0) & (k_run_end[np.maximum(q, 0)] >= ts - tol)
            else:
                ok[seg.between] = False
        kept_cum = np.concatenate(([0], np.cumsum(kept)))
        next_ok = kept_cum[seg.hi_next] - kept_cum[seg.lo_next] > 0
        ok_sorted[lo_f:hi_f] = np.where(seg.enclosing, ok, next_ok)
    ok = np.empty(len(fb.fidx), dtype=bool)
    ok[fb.forder] = ok_sorted
    keys = t.flow_key[fb.fidx]
    bad = np.zeros(int(keys.max()) + 1, dtype=bool)
    bad[keys[~ok]] = True
    return fb.fidx[~bad[keys]]


@dataclass
class _FlowSegment:
    """The flow events of one track (rows lo_f:hi_f of the track-sorted flows) and
    where each lands among that track's slices (rows a:b of the sorted slices)."""

    lo_f: int
    hi_f: int
    a: int
    b: int
    pc: np.ndarray  # the latest-starting slice at or before ts (0 when none)
    direct: np.ndarray  # it exists and encloses ts
    between: np.ndarray  # it exists and does not enclose ts
    lo_next: np.ndarray  # next-slice binding: candidates lo_next:hi_next
    hi_next: np.ndarray
    enclosing: np.ndarray  # binds to an enclosing slice (else to the next one)
    ts: np.ndarray
    tol: np.ndarray


@dataclass
class _FlowBinding:
    fidx: np.ndarray
    forder: np.ndarray
    order: np.ndarray
    sstart: np.ndarray
    send: np.ndarray
    segments: list


def _flow_binding(t: EventTable, sl: SliceTable) -> _FlowBinding:
    prep = prepared_of(t)
    if prep.flow_binding is not None:
        return prep.flow_binding
    fidx = np.flatnonzero(t.flow_key >= 0)
    order = np.lexsort((-sl.end, sl.start, sl.track)) if len(fidx) else np.zeros(0, dtype=np.int64)
    strack, sstart, send = sl.track[order], sl.start[order], sl.end[order]
    forder = np.argsort(t.track[fidx], kind="stable")
    fsorted = fidx[forder]
    ftrack = t.track[fsorted]
    cuts = np.flatnonzero(np.diff(ftrack)) + 1
    segments = []
    for lo_f, hi_f in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(ftrack)].tolist()):
        if hi_f <= lo_f:
            continue
        tr = ftrack[lo_f]
        a, b = int(np.searchsorted(strack, tr, "left")), int(np.searchsorted(strack, tr, "right"))
        if a == b:
            continue
        starts, ends = sstart[a:b], send[a:b]
        ts = t.ts[fsorted[lo_f:hi_f]]
        # Within float noise: a flow written at its slice's start may differ by an ulp.
        tol = 1e-6 + np.abs(ts) * 2e-15
        p = np.searchsorted(starts, ts + tol, "right") - 1
        pc = np.maximum(p, 0)
        direct = (p >= 0) & (ends[pc] >= ts - tol)
        between = (p >= 0) & ~direct
        # Next-slice binding: any kept slice from ts − tol up to the first start at
        # or after ts (the slices sharing that start included).
        lo_next = np.searchsorted(starts, ts - tol, "left")
        exact = np.searchsorted(starts, ts, "left")
        hi_next = np.searchsorted(starts, starts[np.minimum(exact, len(starts) - 1)], "right")
        hi_next = np.where(exact < len(starts), hi_next, len(starts))
        segments.append(_FlowSegment(lo_f, hi_f, a, b, pc, direct, between, lo_next, hi_next,
                                     t.bind_enclosing[fsorted[lo_f:hi_f]], ts, tol))
    fb = prep.flow_binding = _FlowBinding(fidx, forder, order, sstart, send, segments)  # level- and window-independent
    return fb
