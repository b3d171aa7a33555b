"""Flows (SPEC G7): the flows a plan keeps, each whole or not at all, and where each flow
event lands among its track's slices (the flow binding), prepared once per table.

A plan of the whole table makes the binding on a second core while it folds the slices
(`plan._binding_ahead`); the thread that makes it (`_BindingAhead`) is registered here, in
`_ahead`, because `_flow_binding` waits for it rather than make the same again. Below the
plan: the binding follows the plans' slice order, read from `shared`.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..index.prepared import prepared_of
from ..model.mapped import Appended, scratch_array, spill, spill_or_fail, unlink_scratch
from ..model.slices import SliceTable, chunk_end
from ..model.sorting import row_dtype
from ..model.table import EventTable
from . import shared
from .shared import slice_order
from .window_index import WindowIndex


def _flows_leaving(t: EventTable, in_window: np.ndarray) -> np.ndarray:
    """The flow events whose flow has an event outside the window: one flag per flow key
    (keys are small non-negative ids), no sort of the keys, so a narrow window of a long
    trace costs a pass over the events, not a sort of every flow outside it."""
    flows = np.flatnonzero(t.flow_key >= 0)
    if len(flows) == 0:
        return flows
    keys = t.flow_key[flows]
    leaves = np.zeros(int(keys.max()) + 1, dtype=bool)
    leaves[keys[~in_window[flows]]] = True
    return flows[leaves[keys]]


class _BindingAhead:
    """A flow binding being made on a thread of its own (`plan._binding_ahead`)."""

    def __init__(self, t: EventTable, sl: SliceTable, strict: bool) -> None:
        self.done = threading.Event()
        self.failed: list[BaseException] = []
        self.worker = threading.Thread(target=self._make, args=(t, sl, strict), name="tb-reduce-flow-binding",
                                       daemon=True)

    def _make(self, t: EventTable, sl: SliceTable, strict: bool) -> None:
        try:
            with spill_or_fail() if strict else contextlib.nullcontext():  # as strict as the plan's thread
                _flow_binding(t, sl)
        except BaseException as exc:  # raised by the plan's thread, where it waits
            self.failed.append(exc)
        finally:
            self.done.set()

    def wait(self) -> None:
        """Until it is made (or failed: its error raised here), unless called by its own thread."""
        if threading.current_thread() is not self.worker:
            self.done.wait()
            if self.failed:
                raise self.failed[0]


# Flow bindings being made by `plan._binding_ahead`, by the id of their table's prepared state:
# what `_flow_binding` waits for rather than making the same again.
_ahead: dict[int, _BindingAhead] = {}
_ahead_lock = threading.Lock()


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
    only looks up which of those slices it keeps, a track's kept slices and a chunk of
    its flow events at a time (a flag per flow event and per slice of one track held).
    """
    fb = _flow_binding(t, sl)
    n = len(fb.fidx)
    if n == 0 or not kept_slice.any():
        return fb.fidx[:0]
    ok_sorted = np.zeros(n, dtype=bool)
    for seg in fb.segments:
        rows = np.asarray(fb.order[seg.a:seg.b])
        kept = kept_slice[rows]
        n_kept = int(np.count_nonzero(kept))
        if 2 * n_kept > len(kept):  # "how many kept before row r": a running count when dense (4 B a slice)
            count = np.zeros(len(kept) + 1, dtype=row_dtype(len(kept)))
            np.cumsum(kept, out=count[1:])
            kept_before = count.__getitem__
        else:  # the kept rows when sparse (8 B a kept slice)
            kept_before = functools.partial(np.searchsorted, np.flatnonzero(kept), side="left")
        k_starts = k_run_end = None
        if n_kept and seg.between.any():
            k_starts = np.asarray(sl.start[rows[kept]])
            k_run_end = np.maximum.accumulate(np.asarray(sl.end[rows[kept]]))
        for c0 in range(0, seg.hi_f - seg.lo_f, shared.CHUNK_EVENTS):
            c = slice(c0, c0 + shared.CHUNK_EVENTS)
            ok = seg.direct[c] & kept[seg.pc[c]]
            between = np.asarray(seg.between[c])
            if between.any():
                if k_starts is not None:
                    ts, tol = _segment_times(t, fb, seg, np.arange(c0, c0 + len(ok))[between])
                    q = np.searchsorted(k_starts, ts + tol, "right") - 1
                    ok[between] = (q >= 0) & (k_run_end[np.maximum(q, 0)] >= ts - tol)
                else:
                    ok[between] = False
            nxt = ~np.asarray(seg.enclosing[c])  # bound to the next slice: looked up for those only (a
            if nxt.any():  # Kineto trace has none, and 5 M lookups were a third of a whole view's flows)
                at = np.flatnonzero(nxt)
                ok[at] = kept_before(np.asarray(seg.hi_next[c])[at]) > kept_before(np.asarray(seg.lo_next[c])[at])
            ok_sorted[seg.lo_f + c0:seg.lo_f + c0 + len(ok)] = ok
    ok = np.empty(n, dtype=bool)
    bad = np.zeros(0, dtype=bool)
    for a in range(0, n, shared.CHUNK_EVENTS):
        ok[np.asarray(fb.forder[a:a + shared.CHUNK_EVENTS])] = ok_sorted[a:a + shared.CHUNK_EVENTS]
    del ok_sorted
    for a in range(0, n, shared.CHUNK_EVENTS):  # a flow with any event not bound to a kept slice goes whole
        keys = t.flow_key[np.asarray(fb.fidx[a:a + shared.CHUNK_EVENTS])]
        if len(bad) <= int(keys.max()):
            bad = np.concatenate((bad, np.zeros(int(keys.max()) + 1 - len(bad), dtype=bool)))
        bad[keys[~ok[a:a + shared.CHUNK_EVENTS]]] = True
    parts = []
    for a in range(0, n, shared.CHUNK_EVENTS):
        fidx = np.asarray(fb.fidx[a:a + shared.CHUNK_EVENTS])
        parts.append(fidx[~bad[t.flow_key[fidx]]])
    return np.concatenate(parts)


def _flow_keep_window(t: EventTable, sl: SliceTable, wi: WindowIndex, kept_slice: np.ndarray,
                      ks: np.ndarray) -> np.ndarray:
    """`_flow_keep` of a window's plan, whose kept slices `ks` (flagged in `kept_slice`) all
    overlap it. A flow event binds to a slice of its own track, within its span (or, bound
    to the next slice, at most the track's reach before it): so only flows with every event
    near a kept slice of its track can be kept, and only they are looked at, found among
    the window index's flow events by (track, time). Each event's binding is the prepared
    one (its row in the flow binding, `wi.flow_row`, beside it there), tested against the kept slices of
    its track as `_flow_keep` tests it. The same flow events, in the same (ascending) order."""
    fb = _flow_binding(t, sl)
    if len(fb.fidx) == 0 or len(ks) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((sl.start[ks], sl.track[ks]))  # the kept slices by track, then start
    k_start, k_end, k_track = sl.start[ks][order], sl.end[ks][order], sl.track[ks][order]
    heads = np.r_[0, np.flatnonzero(k_track[1:] != k_track[:-1]) + 1, len(ks)]
    found = []
    for h0, h1 in zip(heads[:-1].tolist(), heads[1:].tolist()):  # a track's flow events near its kept slices
        tr = int(k_track[h0])
        r0, r1 = int(wi.flow_tracks[tr]), int(wi.flow_tracks[tr + 1])
        if r1 == r0:
            continue
        starts, ends = k_start[h0:h1], k_end[h0:h1]
        tol = 2e-6 + 4e-15 * max(abs(float(starts[0])), float(np.abs(ends).max()))  # above `_landing`'s own
        a, b = wi.flow_rows(t, tr, ((starts - float(wi.flow_reach[tr]) - tol, "left"),  # ascending, as the starts
                                    (ends + tol, "right")))
        b = np.maximum.accumulate(b)
        new = np.r_[True, a[1:] > b[:-1]]  # runs of rows that overlap merged into one
        lo, hi = a[new], b[np.r_[np.flatnonzero(new)[1:] - 1, len(a) - 1]]
        if int((hi - lo).sum()):
            n = hi - lo
            rows = np.repeat(hi - np.cumsum(n), n) + np.arange(int(n.sum()))
            found.append(r0 + rows)
    if not found:
        return np.zeros(0, dtype=np.int64)
    wrows = np.concatenate(found)  # rows of the window index's flows (distinct: the runs are apart)
    near = np.asarray(wi.flow_event[wrows])
    by_event = np.argsort(near, kind="stable")
    near, wrows = near[by_event], wrows[by_event]
    key = np.asarray(t.flow_key[near])
    code, ncodes, count = _key_codes(key)
    whole = count[code] == wi.flow_size[key]  # flows with every event in the span
    ev, code = near[whole], code[whole]
    if len(ev) == 0:
        return ev.astype(np.int64)
    row = np.asarray(wi.flow_row[wrows[whole]])  # each one's row in the binding, read where it was found
    seg_lo = np.array([seg.lo_f for seg in fb.segments] + [np.iinfo(np.int64).max], dtype=np.int64)
    seg_of = np.searchsorted(seg_lo, row, "right") - 1
    ok = np.zeros(len(ev), dtype=bool)
    for s in np.flatnonzero(np.bincount(seg_of[seg_of >= 0], minlength=len(fb.segments))).tolist():
        seg = fb.segments[s]
        at = np.flatnonzero(seg_of == s)
        r = row[at] - seg.lo_f
        inside = r < seg.hi_f - seg.lo_f
        at, r = at[inside], r[inside]
        if len(at) == 0:
            continue
        a, b = np.searchsorted(k_track, int(t.track[ev[at[0]]]), "left"), \
            np.searchsorted(k_track, int(t.track[ev[at[0]]]), "right")
        starts, run_end = k_start[a:b], np.maximum.accumulate(k_end[a:b]) if b > a else k_end[a:b]
        enclosing = np.asarray(seg.enclosing[r])
        # bound to an enclosing slice: that slice kept (direct), or, in none, within a run of kept ones
        bound = np.asarray(seg.direct[r]) & kept_slice[np.asarray(fb.order[seg.a + np.asarray(seg.pc[r])])]
        between = np.flatnonzero(np.asarray(seg.between[r]) & enclosing)  # (direct and between exclude each other)
        if len(between) and len(starts):
            ts, tl = _segment_times(t, fb, seg, r[between])
            q = np.searchsorted(starts, ts + tl, "right") - 1
            bound[between] |= (q >= 0) & (run_end[np.maximum(q, 0)] >= ts - tl)
        bound &= enclosing
        nxt = np.flatnonzero(~enclosing)  # bound to the next slice: some kept among its candidates
        if len(nxt) and len(starts):
            lo_n, hi_n = np.asarray(seg.lo_next[r[nxt]]), np.asarray(seg.hi_next[r[nxt]])
            some = hi_n > lo_n
            s_lo = np.asarray(sl.start[np.asarray(fb.order[seg.a + np.where(some, lo_n, 0)])])
            s_hi = np.asarray(sl.start[np.asarray(fb.order[seg.a + np.where(some, hi_n - 1, 0)])])
            bound[nxt] = some & (np.searchsorted(starts, s_lo, "left") < np.searchsorted(starts, s_hi, "right"))
        ok[at] = bound
    bad = np.zeros(ncodes, dtype=bool)  # flows with an event not bound to a kept slice, by their code
    bad[code[~ok]] = True
    return ev[~bad[code]]


def _key_codes(key: np.ndarray) -> tuple[np.ndarray, int, np.ndarray]:
    """Each key's code (equal keys, equal codes; 0 .. ncodes-1), ncodes, and how many of
    `key` have each code. Counted over the keys' span where it is at most a few times their
    number (a window's flow keys mostly are: flows are numbered as they first appear), else
    by `np.unique`'s sort: a 10 % window of an 8 GiB trace sorted its 357 k keys, ~10 ms."""
    if len(key) == 0:
        return np.zeros(0, dtype=np.int64), 0, np.zeros(0, dtype=np.int64)
    lo, hi = int(key.min()), int(key.max())
    if hi - lo < 4 * len(key) + (1 << 16):
        code = key.astype(np.int64) - lo
        return code, hi - lo + 1, np.bincount(code, minlength=hi - lo + 1)
    _, code, count = np.unique(key, return_inverse=True, return_counts=True)
    return code.reshape(-1), len(count), count


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


@dataclass
class _FlowBinding:
    """The flow events (`fidx`), them by (track, time) (`forder`), the slices by (track,
    start, -end) (`order`: their starts and ends are `sl.start[order]`, read so, not kept
    a second time) and each track's `_FlowSegment`."""

    fidx: np.ndarray
    forder: np.ndarray
    order: np.ndarray
    segments: list


def _flow_binding(t: EventTable, sl: SliceTable) -> _FlowBinding:
    """Where each flow event lands among its track's slices, prepared once per table.

    Made a chunk at a time into the table's scratch folder when it has one (`Appended`):
    the slices in binding order (by track, start, then longest first) from the plans'
    slice order, each run of equal (track, start) re-sorted inside its chunk, and the flow
    events of each track a chunk of them at a time, so what is held while it is made is a
    chunk, not ~60 B a slice and ~90 B a flow event (1.8 GB for a 50 M-event trace). The
    result is the same as sorting every slice and every flow at once."""
    prep = prepared_of(t)
    ahead = _ahead.get(id(prep))
    if ahead is not None:
        ahead.wait()  # being made on another core (`plan._binding_ahead`)
    if prep.flow_binding is not None:
        return prep.flow_binding
    folder = t.scratch  # the per-slice arrays beside the table's columns, if it has a folder for them
    fidx = _flow_events(t, folder)
    if len(fidx):
        order, sstart, send, rows = _binding_order(sl, slice_order(t), folder)
    else:
        order, sstart, send, rows = np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), {}
    forder, cuts = _flow_track_order(t, fidx, folder)
    parts = Appended(folder, _SEGMENT_DTYPES, "the flow binding")
    spans = []  # (lo_f, hi_f, a, b) of each track with flows and slices
    for lo_f, hi_f in zip(cuts[:-1], cuts[1:]):
        if hi_f <= lo_f:
            continue
        tr = int(t.track[int(fidx[int(forder[lo_f])])])
        if tr not in rows:
            continue
        a, b = rows[tr]
        starts, ends = sstart[a:b], send[a:b]
        for c0 in range(lo_f, hi_f, shared.CHUNK_EVENTS):
            fs = fidx[np.asarray(forder[c0:min(c0 + shared.CHUNK_EVENTS, hi_f)])]
            parts.append(_landing(t, fs, starts, ends))
        spans.append((lo_f, hi_f, a, b))
    cat = parts.finish()
    segments, at = [], 0
    for lo_f, hi_f, a, b in spans:
        n = hi_f - lo_f
        # views of the mapped whole; copies when held in memory, so the state's size counts them
        segments.append(_FlowSegment(lo_f, hi_f, a, b, **{k: v[at:at + n] if isinstance(v, np.memmap)
                                                         else v[at:at + n].copy() for k, v in cat.items()}))
        at += n
    unlink_scratch(sstart, send)  # read through `order` from now on
    fb = prep.flow_binding = _FlowBinding(fidx, forder, order, segments)  # level- and window-independent
    return fb


_SEGMENT_DTYPES = {"pc": np.int64, "direct": np.bool_, "between": np.bool_, "lo_next": np.int64,
                   "hi_next": np.int64, "enclosing": np.bool_}


def _flow_events(t: EventTable, folder: Optional[str]) -> np.ndarray:
    """The flow events' indices (`flow_key >= 0`), found a chunk of events at a time."""
    out = Appended(folder, {"fidx": np.int64}, "the flow events")
    for a in range(0, len(t.flow_key), shared.CHUNK_EVENTS):
        out.append({"fidx": np.flatnonzero(np.asarray(t.flow_key[a:a + shared.CHUNK_EVENTS]) >= 0) + a})
    return out.finish()["fidx"]


def _binding_order(sl: SliceTable, by_start: np.ndarray, folder: Optional[str]
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, tuple[int, int]]]:
    """The slices by (track, start, -end, slice) — what `np.lexsort((-end, start, track))`
    gives — with their starts and ends in that order, and each track's rows in it.

    `by_start` (the plans' order: track, start, event) already has every (track, start)
    in place; only the slices sharing one are ordered otherwise, and a chunk never cuts
    such a run (`chunk_end`), so each chunk is sorted alone."""
    out = Appended(folder, {"order": np.int64, "sstart": np.float64, "send": np.float64}, "the flow binding")
    rows: dict[int, list[int]] = {}
    a, m = 0, len(by_start)
    while a < m:
        b = chunk_end(by_start, sl.track, sl.start, a, shared.CHUNK_SLICES)
        idx = np.asarray(by_start[a:b], dtype=np.int64)
        trk, start, end = sl.track[idx], sl.start[idx], sl.end[idx]
        o = _longest_first_within_ties(idx, trk, start, end)
        trk = trk[o]
        out.append({"order": idx[o], "sstart": start[o], "send": end[o]})
        firsts = np.r_[0, np.flatnonzero(trk[1:] != trk[:-1]) + 1]
        for i, tr in zip((firsts + a).tolist(), trk[firsts].tolist()):
            rows.setdefault(tr, [i, i])
        for i, tr in zip((np.r_[firsts[1:], len(trk)] + a).tolist(), trk[firsts].tolist()):
            rows[tr][1] = i
        a = b
    cols = out.finish()
    return cols["order"], cols["sstart"], cols["send"], {k: (v[0], v[1]) for k, v in rows.items()}


def _longest_first_within_ties(idx: np.ndarray, trk: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """`np.lexsort((idx, -end, start, trk))` of rows already by (trk, start): only the runs
    of rows sharing a (track, start) move (by -end, then slice), so only those are sorted
    (a few thousand of 4 M slices in a Kineto trace, against a sort of every row). A start
    that is NaN ties with another NaN here, as in the sort."""
    both_nan = np.isnan(start[1:]) & np.isnan(start[:-1])
    same = (trk[1:] == trk[:-1]) & ((start[1:] == start[:-1]) | both_nan)
    o = np.arange(len(idx))
    if not same.any():
        return o
    in_run = np.zeros(len(idx), dtype=bool)
    in_run[1:] |= same
    in_run[:-1] |= same
    run = np.cumsum(np.r_[True, ~same])  # a number per run of equal (track, start), ascending
    rows = np.flatnonzero(in_run)
    o[rows] = rows[np.lexsort((idx[rows], -end[rows], run[rows]))]
    return o


def _flow_track_order(t: EventTable, fidx: np.ndarray, folder: Optional[str]) -> tuple[np.ndarray, list[int]]:
    """The flow events by track, stable (`np.argsort(track[fidx], kind="stable")`), made by
    counting: each track's rows follow the tracks before it, and a chunk of flow events at
    a time is placed behind what its tracks hold so far. With the rows where each track's
    flows begin (and the end)."""
    n = len(fidx)
    tracks = max(len(t.tracks), 1)
    counts = np.zeros(tracks, dtype=np.int64)
    for a in range(0, n, shared.CHUNK_EVENTS):
        counts += np.bincount(t.track[np.asarray(fidx[a:a + shared.CHUNK_EVENTS])], minlength=tracks)[:tracks]
    begins = np.zeros(tracks + 1, dtype=np.int64)
    np.cumsum(counts, out=begins[1:])
    filled = begins[:-1].copy()
    with scratch_array(folder, "flow_forder", n, np.int64) as forder:
        for a in range(0, n, shared.CHUNK_EVENTS):
            trk = t.track[np.asarray(fidx[a:a + shared.CHUNK_EVENTS])]
            o = np.argsort(trk, kind="stable")
            ts = trk[o]
            first = np.r_[0, np.flatnonzero(ts[1:] != ts[:-1]) + 1]
            within = np.arange(len(ts)) - np.repeat(first, np.diff(np.r_[first, len(ts)]))
            forder[filled[ts] + within] = o + a
            np.add.at(filled, ts[first], np.diff(np.r_[first, len(ts)]))
        kept = spill(folder, "flow_forder", forder)
    cuts = [int(c) for c in np.unique(begins)]
    return kept, cuts if cuts and cuts[0] == 0 else [0] + cuts


def _landing(t: EventTable, fs: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> dict[str, np.ndarray]:
    """For flow events `fs` of one track, where each lands among that track's slices
    (`starts`/`ends` in binding order): the fields of `_FlowSegment`."""
    ts = t.ts[fs]
    tol = _flow_tolerance(ts)
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
    return {"pc": pc, "direct": direct, "between": between, "lo_next": lo_next, "hi_next": hi_next,
            "enclosing": t.bind_enclosing[fs]}


def _flow_tolerance(ts: np.ndarray) -> np.ndarray:
    """Within float noise: a flow written at its slice's start may differ by an ulp."""
    return 1e-6 + np.abs(ts) * 2e-15


def _segment_times(t: EventTable, fb: _FlowBinding, seg: _FlowSegment, rows: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The times of a segment's flow events `rows` (counted from its first) and their
    tolerance, as `_landing` met them: read through the binding's orders, not kept (a
    copy of `ts` and a value derived from it, 16 B a flow event on disk)."""
    ts = np.asarray(t.ts[np.asarray(fb.fidx[np.asarray(fb.forder[seg.lo_f + np.asarray(rows, dtype=np.int64)])])])
    return ts, _flow_tolerance(ts)
