"""What a plan of a window finds without a pass over the whole trace: the events in it
and the slices that overlap it, by binary search.

A plan of the whole trace reads every event; a plan of a window read every event too
(flags per event, a pass over every slice), so a zoom into a 50 M-event trace after a
restart read ~1.5 GB of mapped columns from disk to answer a few thousand events. This
index, made once per table (by a server in the background after the table's first plan:
`plan.prepare_window_index`) and kept with the prepared state
(`index/prepared_io.py`), holds:

* the timed events other than slices (instants, counters, flows, metadata, the rest) in
  (time, event) order: those in [t0, t1] are one run of it;
* the slices in tiers by duration (one per binary exponent: a tier's slices are at most
  twice as long as its shortest), each tier by (start, slice), with the tier's longest
  extent: the slices of a tier that overlap [t0, t1] start within
  [t0 - extent, t1], one run of it. A long slice is in a tier of few; a tier of many
  short ones reaches back little. What a window costs follows the events in it and those
  that reach into it, not the trace (XProf keeps 13 zoom levels for the same reason;
  Perfetto a max-duration segment tree per track);
* the events every plan keeps (metadata, unmatched B/E, untimed ones) by index;
* the instants of those points, in the same order: a plan's first instant of each scope
  and bucket is then found in one pass (`points.first_instants_by_time`), not by a sort;
* for flows: each key's number of events, the flow events by (track, time), each one's row
  in the flow binding (`flows._flow_binding`) and, per track, how far before a slice a
  flow event binds to it as the next one. A flow is kept only if each of its events binds
  to a kept slice of its own track, and kept slices overlap the window: so each of its
  events lies within a kept slice of its track (less that reach), and only the flows
  there are looked at.

It keeps orders, not the sorted keys beside them (a copy of the table's `ts` and of the
slices' starts, 10 B an event on disk): a search reads the keys through the order
(`sorting.search_by`), ~log2(n) of them.

The plans made from it are those of the whole-table path exactly (tests/reduce/
test_window_plans.py compares both): it only finds the same rows a faster way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..index.prepared import prepared_of
from ..model.mapped import Appended, scratch_array
from ..model.slices import SliceTable
from ..model.sorting import KeysThrough, order_by, sample_bytes, search_by
from ..model.table import INSTANT_PHASES, PH_B, PH_E, PH_X, EventTable, ph_in

CHUNK_ROWS = 1 << 19
# Tiers by binary exponent of the duration (`np.frexp`): 0 for slices of no length, then
# one per exponent from 2^-40 µs (a ps is ~2^-20 µs) to beyond any trace.
_EXP_LOW, _EXP_HIGH = -40, 1100
TIERS = _EXP_HIGH - _EXP_LOW + 2

# What making the index holds at its peak: with a scratch folder, a chunk's work and the
# sorts' samples (the rows go to files); in memory, the index itself (~33 B an event, and 8 B
# more an instant: a trace of instants alone ~41) and the sorts' rows and work (~40 B a row).
WINDOW_INDEX_BYTES_PER_EVENT = 88
WINDOW_INDEX_SPILLED_BYTES_PER_EVENT = 2
WINDOW_INDEX_BYTES_PER_CHUNK_ROW = 120


@dataclass
class WindowIndex:
    """The rows of a table a window's plan looks up (see the module's docstring)."""

    points: np.ndarray  # timed events other than X/B/E, by (ts, event)
    tier_order: np.ndarray  # slices by (tier, start, slice)
    tier_rows: np.ndarray  # tier k's rows of tier_order: tier_rows[k]:tier_rows[k + 1] (TIERS + 1)
    tier_extent: np.ndarray  # per tier, the longest end - start (and dur) of its slices
    always: np.ndarray  # the events every plan keeps (`shared._Static.always`), ascending
    flow_size: np.ndarray  # per flow key, how many flow events bear it
    flow_row: np.ndarray  # per row of `flow_event`, that flow event's row in the flow binding's track order
    flow_reach: np.ndarray  # per track, how far before a slice a flow event binding to it as the next lies
    flow_event: np.ndarray  # the flow events by (track, ts (NaN as inf), event)...
    flow_tracks: np.ndarray  # ...and each track's rows: flow_tracks[k]:flow_tracks[k + 1]
    counters_sorted: bool  # counter samples are in event order (their rows found by search)
    instants: np.ndarray  # the instant events (of `points`) by (ts, event): a window's firsts found without a sort

    def instants_within(self, t: EventTable, t0: float, t1: float) -> np.ndarray:
        """The instants of `t` with t0 <= ts <= t1, in (ts, event) order."""
        a, b = _run_in_time(t, self.instants, t0, t1)
        return np.asarray(self.instants[a:b])

    def points_within(self, t: EventTable, t0: float, t1: float) -> np.ndarray:
        """The timed non-slice events of `t` with t0 <= ts <= t1, in event order."""
        a, b = self._point_run(t, t0, t1)
        return np.sort(np.asarray(self.points[a:b]))

    def _point_run(self, t: EventTable, t0: float, t1: float) -> tuple[int, int]:
        return _run_in_time(t, self.points, t0, t1)

    def flow_rows(self, t: EventTable, track: int, queries: tuple) -> list[np.ndarray]:
        """For each (x, side) of `queries`, `np.searchsorted` of `x` among the times (NaN as
        inf) of `track`'s flow events, as rows of that track's run (0 .. its flows): the rows
        between the least and the greatest value of all queries found by search, their times
        read once, and every query searched there (each answer lies between those two; a
        window's flows search its kept slices' starts and ends: one read, not two) — or,
        where the queries are few against those rows, each bisected there (a 10 % window of
        an 8 GiB trace read ~150 k flow times of one track for a few hundred kept slices)."""
        r0, r1 = int(self.flow_tracks[track]), int(self.flow_tracks[track + 1])
        ts_at = KeysThrough(t.ts, self.flow_event, nan_as_inf=True)
        xs = [np.asarray(x, dtype=np.float64) for x, _ in queries]
        if not all(len(x) for x in xs) or any(np.isnan(x).any() for x in xs):
            return [search_by(ts_at, r0, r1, x, side) - r0 for x, (_, side) in zip(xs, queries)]
        a, b = search_by(ts_at, r0, r1, [min(float(x.min()) for x in xs), max(float(x.max()) for x in xs)],
                         [False, True]).tolist()  # both ends at once (b >= a: its search from r0 finds the same)
        if sum(len(x) for x in xs) * 4 * max(1, (b - a).bit_length()) < b - a:  # a few queries over many rows
            found = search_by(ts_at, a, b, np.concatenate(xs), np.concatenate(
                [np.full(len(x), side == "right") for x, (_, side) in zip(xs, queries)])) - r0  # stepping together
            return np.split(found, np.cumsum([len(x) for x in xs])[:-1])
        times = ts_at(np.arange(a, b))
        return [a - r0 + np.searchsorted(times, x, side) for x, (_, side) in zip(xs, queries)]

    def slices_overlapping(self, sl: SliceTable, t0: float, t1: float) -> np.ndarray:
        """The slices with start <= t1 and end >= t0, ascending: per tier, the run of those
        starting from t0 less the tier's extent (widened by float noise) up to t1, then
        the exact test."""
        parts = []
        for a, b in self._tier_runs(sl, t0, t1):
            idx = np.asarray(self.tier_order[a:b])
            parts.append(idx[(sl.start[idx] <= t1) & (sl.end[idx] >= t0)])
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return np.sort(np.concatenate(parts))

    def straddlers(self, sl: SliceTable, t0: float) -> np.ndarray:
        """The slices starting before t0 that reach it (end >= t0), ascending: those of
        `slices_overlapping(t0, t1)` that start before the window, found by the tiers alone
        (a tier's slices starting within its extent before t0). The rest of that set is
        every slice starting in [t0, t1] (an end is never before its start there), which a
        window's plan reads in its order from the plans' slice order (`plan._window_slices`)."""
        parts = []
        for a, b in self._tier_runs(sl, t0, t0, "left"):
            idx = np.asarray(self.tier_order[a:b])
            parts.append(idx[np.asarray(sl.end[idx]) >= t0])
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return np.sort(np.concatenate(parts))

    def rows_within(self, t: EventTable, sl: SliceTable, t0: float, t1: float) -> int:
        """How many rows a window's plan reads through this index (its points and the
        candidate slices of `slices_overlapping`, before the exact test), found by searches
        alone: what planning the window this way costs."""
        a, b = self._point_run(t, t0, t1)
        return max(b - a, 0) + sum(b - a for a, b in self._tier_runs(sl, t0, t1))

    def _tier_runs(self, sl: SliceTable, t0: float, t1: float, side: str = "right") -> list[tuple[int, int]]:
        """Per tier, the rows of `tier_order` whose slices may overlap [t0, t1]: every
        tier's two searches at once (`side` "left": those starting before t1 only)."""
        rows = np.asarray(self.tier_rows)
        k = np.flatnonzero(np.diff(rows))
        if not len(k):
            return []
        extent = np.asarray(self.tier_extent)[k].astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            reach = np.where(np.isfinite(extent), t0 - extent - (abs(t0) + extent) * 1e-12 - 1e-9, -np.inf)

        start_at = KeysThrough(sl.start, self.tier_order)
        m = len(k)  # every tier's two searches step together
        ab = search_by(start_at, np.tile(rows[k], 2), np.tile(rows[k + 1], 2), np.concatenate((reach, np.full(m, t1))),
                       np.repeat([False, side == "right"], m))
        return [(x, y) for x, y in zip(ab[:m].tolist(), ab[m:].tolist()) if y > x]


def _run_in_time(t: EventTable, order: np.ndarray, t0: float, t1: float) -> tuple[int, int]:
    """The rows a:b (a <= b) of `order` (events by (ts, event)) whose times lie in [t0, t1]:
    two searches through the order."""
    a, b = search_by(KeysThrough(t.ts, order), 0, len(order), [t0, t1], [False, True]).tolist()  # at once
    return a, max(a, b)


def window_index_bytes(t: EventTable) -> int:
    """What making `t`'s window index would hold at its peak; 0 once made."""
    if prepared_of(t).window_index is not None:
        return 0
    n = len(t)
    if t.scratch is None:
        return WINDOW_INDEX_BYTES_PER_EVENT * n + sample_bytes(n)
    return (WINDOW_INDEX_SPILLED_BYTES_PER_EVENT * n + WINDOW_INDEX_BYTES_PER_CHUNK_ROW * min(n, CHUNK_ROWS)
            + sample_bytes(n))


def tier_of(dur: np.ndarray) -> np.ndarray:
    """Each duration's tier: 0 for none (0, or not a number), else 1 + its binary exponent
    clipped to [_EXP_LOW, _EXP_HIGH]."""
    dur = np.asarray(dur, dtype=np.float64)
    _, e = np.frexp(np.where(np.isfinite(dur), dur, np.finfo(np.float64).max))
    tier = np.clip(e, _EXP_LOW, _EXP_HIGH) - _EXP_LOW + 1
    return np.where((dur > 0) | ~np.isfinite(dur) & ~np.isnan(dur), tier, 0).astype(np.uint16)


def build_window_index(t: EventTable, sl: SliceTable, always: np.ndarray, binding: Any) -> WindowIndex:
    """Made a chunk at a time into the table's scratch folder when it has one (`Appended`,
    `sorting.order_by`): what is held meanwhile is a chunk and the sorts' samples."""
    folder = t.scratch
    n = len(t)
    pts = Appended(folder, {"idx": np.int64, "ts": np.float64}, "the window index")
    keep = Appended(folder, {"always": np.int64}, "the window index")
    for a in range(0, n, CHUNK_ROWS):
        ph, ts = np.asarray(t.ph[a:a + CHUNK_ROWS]), np.asarray(t.ts[a:a + CHUNK_ROWS])
        point = ~np.isnan(ts) & ~ph_in(ph, (PH_X, PH_B, PH_E))
        pts.append({"idx": np.flatnonzero(point) + a, "ts": ts[point]})
        keep.append({"always": np.flatnonzero(np.asarray(always[a:a + CHUNK_ROWS])) + a})
    p = pts.finish()
    order = order_by(p["ts"], None, None, folder, CHUNK_ROWS, "the window index")
    (points,) = _gathered(folder, order, {"points": p["idx"]})
    del p
    inst = Appended(folder, {"instants": np.int64}, "the window index")
    for a in range(0, len(points), CHUNK_ROWS):
        rows = np.asarray(points[a:a + CHUNK_ROWS])
        inst.append({"instants": rows[ph_in(np.asarray(t.ph[rows]), INSTANT_PHASES)]})
    instants = inst.finish()["instants"]

    s = len(sl)
    tiers = Appended(folder, {"tier": np.uint16}, "the window index")
    counts = np.zeros(TIERS, dtype=np.int64)
    extent = np.zeros(TIERS, dtype=np.float64)
    for a in range(0, s, CHUNK_ROWS):
        tier = tier_of(sl.dur[a:a + CHUNK_ROWS])
        start, end = np.asarray(sl.start[a:a + CHUNK_ROWS]), np.asarray(sl.end[a:a + CHUNK_ROWS])
        tiers.append({"tier": tier})
        counts += np.bincount(tier, minlength=TIERS)
        with np.errstate(invalid="ignore", over="ignore"):
            np.fmax.at(extent, tier, np.fmax(end - start, np.asarray(sl.dur[a:a + CHUNK_ROWS])))
    tier = tiers.finish()["tier"]
    order = order_by(sl.start, None, tier, folder, CHUNK_ROWS, "the window index")
    del tier
    (tier_order,) = _gathered(folder, order, {"tier_order": None})
    rows = np.zeros(TIERS + 1, dtype=np.int64)
    np.cumsum(counts, out=rows[1:])

    flow_size = _flow_sizes(t)
    flow_order, flow_tracks = _flows_by_track_time(t, folder, binding.fidx)
    flow_event, flow_row, flow_reach = _flow_rows(t, sl, folder, binding, flow_order)
    del flow_order
    ce = t.counter_event
    ordered = all(bool(np.all(np.diff(np.asarray(ce[a:a + CHUNK_ROWS + 1])) >= 0))
                  for a in range(0, len(ce), CHUNK_ROWS))
    return WindowIndex(points, tier_order, rows, extent, keep.finish()["always"],
                       flow_size, flow_row, flow_reach, flow_event, flow_tracks, ordered, instants)


def _flow_sizes(t: EventTable) -> np.ndarray:
    """Per flow key, its flow events: counted a chunk at a time (keys are small ids)."""
    size = np.zeros(0, dtype=np.int64)
    for a in range(0, len(t.flow_key), CHUNK_ROWS):
        k = np.asarray(t.flow_key[a:a + CHUNK_ROWS])
        k = k[k >= 0]
        if len(k):
            counted = np.bincount(k)
            if len(counted) > len(size):
                size = np.concatenate((size, np.zeros(len(counted) - len(size), dtype=np.int64)))
            size[:len(counted)] += counted
    return size


def _flows_by_track_time(t: EventTable, folder: Optional[str], fidx: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
    """The flow events by (track, time, event), times NaN as inf (last, never in a finite
    span), as positions in `fidx`; and each track's rows."""
    tracks = max(len(t.tracks), 1)
    cols = Appended(folder, {"ts": np.float64, "track": np.int32}, "the window index")
    counts = np.zeros(tracks, dtype=np.int64)
    for a in range(0, len(fidx), CHUNK_ROWS):
        f = np.asarray(fidx[a:a + CHUNK_ROWS])
        ts, track = np.asarray(t.ts[f]), np.asarray(t.track[f])
        cols.append({"ts": np.where(np.isnan(ts), np.inf, ts), "track": track})
        counts += np.bincount(track, minlength=tracks)[:tracks]
    c = cols.finish()
    order = order_by(c["ts"], None, c["track"], folder, CHUNK_ROWS, "the window index")
    rows = np.zeros(tracks + 1, dtype=np.int64)
    np.cumsum(counts, out=rows[1:])
    return order, rows


def _flow_rows(t: EventTable, sl: SliceTable, folder: Optional[str], fb: Any, order: np.ndarray,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The flow events in `order` (`_flows_by_track_time`: by track and time), each one's row
    in the flow binding's track order (the inverse of `fb.forder`) in that order too (a
    window finds its flow events by track and time and reads their rows where it finds
    them, not by a search of each among all flow events: ~2 ms of a 0.1 % window of an
    8 GiB trace), and per track the longest distance from a flow event binding to the next
    slice to that slice's start (0 with none): from the binding's segments, a chunk at a time."""
    n = len(fb.fidx)
    with scratch_array(folder, "flow_row", n, np.int64) as row:
        for a in range(0, n, CHUNK_ROWS):
            row[np.asarray(fb.forder[a:a + CHUNK_ROWS])] = np.arange(a, min(a + CHUNK_ROWS, n), dtype=np.int64)
        event, kept = _gathered(folder, order, {"flow_event": fb.fidx, "flow_row": row})
    reach = np.zeros(max(len(t.tracks), 1), dtype=np.float64)
    for seg in fb.segments:
        track = int(t.track[int(fb.fidx[int(fb.forder[seg.lo_f])])])
        for a in range(0, seg.hi_f - seg.lo_f, CHUNK_ROWS):
            c = slice(a, a + CHUNK_ROWS)
            lo, hi = np.asarray(seg.lo_next[c]), np.asarray(seg.hi_next[c])
            nxt = ~np.asarray(seg.enclosing[c]) & (hi > lo)
            if nxt.any():
                bound = sl.start[np.asarray(fb.order[seg.a + hi[nxt] - 1])]  # the last start it may bind to
                rows = np.asarray(fb.forder[seg.lo_f + a:seg.lo_f + a + len(lo)])[nxt]
                ts = np.asarray(t.ts[np.asarray(fb.fidx[rows])])  # those flow events' times
                with np.errstate(invalid="ignore", over="ignore"):
                    far = float(np.nanmax(np.append(bound - ts, 0.0)))
                reach[track] = max(reach[track], far)
    return event, kept, reach


def _gathered(folder: Optional[str], order: np.ndarray, columns: dict) -> list[np.ndarray]:
    """Each column taken in `order` (None: the order itself), a chunk at a time."""
    dtypes = {name: (np.int64 if col is None else col.dtype) for name, col in columns.items()}
    out = Appended(folder, dtypes, "the window index")
    for a in range(0, len(order), CHUNK_ROWS):
        o = np.asarray(order[a:a + CHUNK_ROWS])
        out.append({name: (o if col is None else np.asarray(col[o])) for name, col in columns.items()})
    done = out.finish()
    return [done[name] for name in columns]
