"""Folding the slices a plan does not keep into summary slices (SPEC G3).

Summaries: small slices of a track are sorted by start and cut into groups wherever
an idle bucket lies between them, or a boundary of a kept slice of that track lies
in the gap. A small slice that itself straddles a kept boundary is kept instead, so
no group hull ever contains a kept boundary strictly inside it — summaries nest
properly even where the input's own slices do not. Comparisons happen on integer
ranks of the slice endpoints, offset per track, which makes per-track running
maxima and boundary look-ups single numpy calls over all tracks at once.

Below the plan (`plan._plan_table` and `plan._plan_window` call `_reduce_slices`), which
holds a `Summaries` in each `Plan`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ..model.slices import SliceTable
from ..scan_pieces import usable_cores
from . import shared
from .buckets import _Buckets
from .busy import digits_of, group_busy
from .fold_steps import bound_between, fold_cuts, fold_groups, name_counts, select_slices

TOP_NAMES = 5
Grow = Callable[[int], None]


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
    # Summary k's busy share per bucket it touches, as ASCII digits (`busy.py`):
    # busy[busy_offsets[k]:busy_offsets[k + 1]], empty for one within a bucket. None: not made.
    busy_offsets: Optional[np.ndarray] = None
    busy: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.start)


def _no_summaries() -> Summaries:
    z = np.zeros(0)
    return Summaries(z.astype(np.int32), z, z, z.astype(np.int64), np.zeros(1, dtype=np.int64),
                     z.astype(np.int64), z.astype(np.int64), np.zeros(1, dtype=np.int64), z.astype(np.uint8))


# Slices worked on at once within one track by the fold (`_reduce_slices`), whose two threads
# each hold a chunk's temporaries at the plan's peak: half as many as the plan's other passes
# (`shared.CHUNK_SLICES // FOLD_SHARE`, at least one).
FOLD_SHARE = 2


def _reduce_slices(sl: SliceTable, overlaps: Optional[np.ndarray], bk: _Buckets,
                   rank: np.ndarray, slice_order: np.ndarray,
                   grow: Optional[Grow] = None,
                   runs: Optional[list[tuple[int, int]]] = None) -> tuple[np.ndarray, Summaries]:
    """Keep big slices (and straddlers); fold the rest into summaries, track by track.

    Each track is read in chunks of half `CHUNK_SLICES` of its slices in start order, twice:
    once to promote straddlers to a fixpoint, once to fold the small slices, carrying
    the running end and the open group from chunk to chunk. What is held for the whole
    trace is a flag per slice and the summaries themselves (SPEC: memory bounded as
    traces grow); the result is the same as folding each track whole. `runs`: each track's
    rows of `slice_order` (`_track_runs`), where the caller knows them already.
    `overlaps`: a flag a slice, set where it overlaps the window; None where every slice of
    `slice_order` does (a window's plan reads its own: no flag of every slice to make, 1 B
    a slice, and to read at random for each row — ~3.5 ms of a 1 % window's plan of an
    8 GiB trace).
    """
    if len(slice_order) < len(sl) or overlaps is None:  # a window's slices (`_plan_window`): only theirs are read
        kept = np.zeros(len(sl), dtype=bool)
        idx = np.asarray(slice_order)
        if overlaps is not None:
            idx = idx[overlaps[idx]]
        kept[idx] = sl.dur[idx] >= bk.theta
    else:
        kept = overlaps & (sl.dur >= bk.theta)
    if runs is None:
        runs = _track_runs(sl.track, slice_order)
    parts = [_SummaryParts(grow) for _ in runs]
    step = max(1, shared.CHUNK_SLICES // FOLD_SHARE)

    def fold(k: int) -> None:
        lo, hi = runs[k]

        def chunks(want: bool, names: bool = False):
            """This track's overlapping slices kept (`want`) or not, by (start, event), a
            chunk at a time: rows, starts, ends (and names)."""
            for a in range(lo, hi, step):
                got = select_slices(slice_order[a:min(a + step, hi)], overlaps, kept, want, sl.start, sl.end,
                                    sl.name if names else None)
                if len(got[0]):
                    yield got
        bounds = _promote_straddlers(sl, kept, chunks)
        _fold_track(sl, kept, bounds, bk, rank, chunks, parts[k])

    _on_two_cores(fold, [hi - lo for lo, hi in runs])
    out = _SummaryParts(grow)
    for part in parts:  # in track order, whichever thread folded it
        out.extend(part)
    return kept, out.summaries()


# Tracks are folded on two threads at once (`_on_two_cores`) when the slices are at least
# this many: each thread holds one chunk of a track's slices (half `CHUNK_SLICES`) at a time
# (`reduction_bytes` charges both whatever the count). From 32 k on, a thread pays its start:
# a warm 1 % window of the 8 GiB Kineto trace (175 k slices, 15 tracks), folded on one thread
# below 512 k before, planned in 30.8 → 25.5 ms (medians of 9, twice).
FOLD_THREADS = 2
_FOLD_APART_FROM = 1 << 15


def _on_two_cores(work: Callable[[int], None], sizes: list[int]) -> None:
    """`work(k)` for every k, on this thread and a second one where two cores may be used:
    the biggest first, each to the thread with the less so far. Folding a track is numpy
    on chunks of 262,144 slices (the GIL let go in each step), and a track's kept flags and
    summaries are its own (`kept` rows of its slices, its own `_SummaryParts`): the result
    is the one of folding them in turn."""
    if len(sizes) < 2 or sum(sizes) < _FOLD_APART_FROM or usable_cores() < 2:
        for k in range(len(sizes)):
            work(k)
        return
    load, mine = [0, 0], [[], []]
    for k in sorted(range(len(sizes)), key=lambda k: -sizes[k]):
        t = int(load[1] < load[0])
        mine[t].append(k)
        load[t] += sizes[k]
    errors: list[BaseException] = []

    def run(ks: list) -> None:
        try:
            for k in ks:
                if errors:
                    return
                work(k)
        except BaseException as exc:  # raised again on the caller's thread
            errors.append(exc)

    worker = threading.Thread(target=run, args=(mine[1],), name="tb-reduce-fold", daemon=True)
    try:
        worker.start()
    except RuntimeError:  # a process out of threads: in turn, on this one
        run(mine[1])
        worker = None
    run(mine[0])
    if worker is not None:
        worker.join()
    if errors:
        raise errors[0]


def _promote_straddlers(sl: SliceTable, kept: np.ndarray, chunks) -> np.ndarray:
    """Keep the small slices of a track that straddle a boundary of a kept one, to a
    fixpoint (each pass with the boundaries of the one before); the kept boundaries."""
    parts = []
    for _, start, end in chunks(True):
        parts += [start, end]
    bounds = np.unique(np.concatenate(parts)) if parts else np.zeros(0)
    while True:
        parts = []
        for cand, start, end in chunks(False):
            straddle = bound_between(bounds, start, end, open_interval=True)
            if straddle.any():
                parts += [start[straddle], end[straddle]]
                kept[cand[straddle]] = True
        if not parts:
            return bounds
        bounds = np.unique(np.concatenate([bounds] + parts))


@dataclass
class _OpenGroup:
    """A track's last summary so far, which the next chunk may still extend."""

    start: float
    end: float
    count: int
    names: np.ndarray  # distinct name ids
    counts: np.ndarray  # how many of its slices bear each
    busy_first: int  # the bucket of its start...
    busy: np.ndarray  # ...and from there, its slices' busy time per bucket (`busy.group_busy`)


class _SummaryParts:
    """Summaries as they are completed, in order: columns per batch, top names made at once.
    `grow` is told twice the bytes of each batch before it is kept (the batches, then their
    concatenation)."""

    def __init__(self, grow: Optional[Grow] = None) -> None:
        self.grow = grow
        self.track: list = []
        self.start: list = []
        self.end: list = []
        self.count: list = []
        self.offsets: list = [np.zeros(1, dtype=np.int64)]
        self.top_name: list = []
        self.top_count: list = []
        self.busy_offsets: list = [np.zeros(1, dtype=np.int64)]
        self.busy: list = []
        self.n = self.ntop = self.nbusy = 0

    def add(self, track: int, start: np.ndarray, end: np.ndarray, count: np.ndarray,
            g: np.ndarray, name: np.ndarray, cnt: np.ndarray, rank: np.ndarray,
            busy_span: np.ndarray, busy_sums: np.ndarray, theta: float) -> None:
        """Completed summaries of `track`, with their names' counts as triples (group
        0..len-1 of this batch, name id, count), one per distinct (group, name), and their
        busy time per bucket (`busy_span[j]` buckets each, back to back in `busy_sums`)."""
        if len(start) == 0:
            return
        offsets, top_name, top_count = _top_of_counts(g, name, cnt, rank, len(start))
        ndigits, digits = digits_of(busy_sums, busy_span, theta)
        if self.grow is not None:
            self.grow(2 * (len(start) * (4 + 8 + 8 + 8 + 8 + 8) + top_name.nbytes + top_count.nbytes + digits.nbytes))
        self.track.append(np.full(len(start), track, dtype=np.int32))
        self.start.append(start)
        self.end.append(end)
        self.count.append(count)
        self.offsets.append(offsets[1:] + self.ntop)
        self.top_name.append(top_name)
        self.top_count.append(top_count)
        self.busy_offsets.append(np.cumsum(ndigits) + self.nbusy)
        self.busy.append(digits)
        self.n += len(start)
        self.ntop += len(top_name)
        self.nbusy += len(digits)

    def extend(self, other: _SummaryParts) -> None:
        """`other`'s summaries after these (their name and busy offsets moved on)."""
        if other.n == 0:
            return
        for name in ("track", "start", "end", "count", "top_name", "top_count", "busy"):
            getattr(self, name).extend(getattr(other, name))
        self.offsets.extend(o + self.ntop for o in other.offsets[1:])
        self.busy_offsets.extend(o + self.nbusy for o in other.busy_offsets[1:])
        self.n += other.n
        self.ntop += other.ntop
        self.nbusy += other.nbusy

    def add_open(self, track: int, grp: _OpenGroup, rank: np.ndarray, theta: float) -> None:
        self.add(track, np.array([grp.start]), np.array([grp.end]), np.array([grp.count], dtype=np.int64),
                 np.zeros(len(grp.names), dtype=np.int64), grp.names, grp.counts, rank,
                 np.array([len(grp.busy)]), grp.busy, theta)

    def summaries(self) -> Summaries:
        if self.n == 0:
            return _no_summaries()
        return Summaries(track=np.concatenate(self.track), start=np.concatenate(self.start),
                         end=np.concatenate(self.end), count=np.concatenate(self.count),
                         top_offsets=np.concatenate(self.offsets), top_name=np.concatenate(self.top_name),
                         top_count=np.concatenate(self.top_count), busy_offsets=np.concatenate(self.busy_offsets),
                         busy=np.concatenate(self.busy) if self.busy else np.zeros(0, dtype=np.uint8))


def _fold_track(sl: SliceTable, kept: np.ndarray, bounds: np.ndarray, bk: _Buckets, rank: np.ndarray,
                chunks, out: _SummaryParts) -> None:
    """Cut a track's small slices (by start) into summaries: a new one wherever the
    slice starts after all before it ended and an idle bucket or a kept boundary lies
    in that gap."""
    track = -1
    run_end: Optional[float] = None  # the latest end of the track's small slices so far
    grp: Optional[_OpenGroup] = None
    for small, ss, se, name_ids in chunks(False, names=True):
        track = int(sl.track[small[0]])
        # which open a summary, and where each one's busy time begins (`fold_steps.fold_cuts`)
        new, part, run_end = fold_cuts(ss, se, bounds, bk, run_end)
        # this chunk's parts of summaries (the first may go on the open one): each slice's, their firsts and ends
        group, seg, seg_end = fold_groups(new, se)
        seg_start = ss[seg]
        seg_count = np.diff(np.append(seg, len(small)))
        busy_first, busy_last = bk.clipped(seg_start), bk.clipped(seg_end)
        carried = None
        if not new[0]:  # the open summary goes on: its buckets, and the busy time it has
            assert grp is not None
            busy_first[0] = grp.busy_first
            busy_last[0] = bk.clipped(np.array([max(grp.end, float(seg_end[0]))]))[0]
            carried = grp.busy
        sums, at_sums = group_busy(part, se, group, busy_first, busy_last, carried, bk.t0, bk.t1, bk.theta,
                                   bk.r - 1)
        del part
        span = busy_last - busy_first + 1
        g, nm, cnt = name_counts(group, name_ids)
        del group, name_ids
        if not new[0]:  # the chunk goes on with the open summary
            head = g == 0
            names, inv = np.unique(np.concatenate((grp.names, nm[head])), return_inverse=True)
            grp = _OpenGroup(grp.start, max(grp.end, float(seg_end[0])), grp.count + int(seg_count[0]), names,
                             np.bincount(inv, weights=np.concatenate((grp.counts, cnt[head])),
                                         minlength=len(names)).astype(np.int64),
                             grp.busy_first, sums[:at_sums[1]])
            g, nm, cnt = g[~head], nm[~head], cnt[~head]
            done = 1
        else:
            if grp is not None:
                out.add_open(track, grp, rank, bk.theta)
            done = 0
        last = len(seg) - 1
        if last >= done:  # summaries done..last-1 are complete; the last stays open
            if grp is not None and done:
                out.add_open(track, grp, rank, bk.theta)
            in_last = g == last
            out.add(track, seg_start[done:last], seg_end[done:last], seg_count[done:last],
                    g[~in_last] - done, nm[~in_last], cnt[~in_last], rank,
                    span[done:last], sums[at_sums[done]:at_sums[last]], bk.theta)
            grp = _OpenGroup(float(seg_start[last]), float(seg_end[last]), int(seg_count[last]),
                             nm[in_last], cnt[in_last].astype(np.int64), int(busy_first[last]),
                             sums[at_sums[last]:].copy())
    if grp is not None:
        out.add_open(track, grp, rank, bk.theta)


def _track_runs(track: np.ndarray, slice_order: np.ndarray, chunk: int = 1 << 20) -> list[tuple[int, int]]:
    """The rows lo:hi of `slice_order` (slices by track first) that hold each track, found
    a chunk at a time so that no track id is gathered for every slice at once."""
    cuts = [0]
    for lo in range(0, len(slice_order), chunk):
        trk = track[slice_order[lo:lo + chunk + 1]]
        cuts.extend((np.flatnonzero(trk[1:] != trk[:-1]) + 1 + lo).tolist())
    cuts.append(len(slice_order))
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def _top_of_counts(g: np.ndarray, name: np.ndarray, count: np.ndarray, rank: np.ndarray,
                   ngroups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group, the most frequent names (ties by name order), as flat arrays (offsets
    per group, name ids, counts), from one (group, name, count) triple per distinct
    (group, name) pair, groups 0..ngroups-1 in ascending order."""
    order = np.lexsort((rank[name], -count, g))
    g, name, count = g[order], name[order], count[order]
    pos = np.arange(len(g)) - np.searchsorted(g, g, "left")
    sel = pos < TOP_NAMES
    g, name, count = g[sel], name[sel], count[sel]
    offsets = np.searchsorted(g, np.arange(ngroups + 1), "left")
    return offsets, name, count.astype(np.int64)
