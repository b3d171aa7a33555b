"""The fold's steps over every small slice of a track (`summaries._fold_track`, SPEC G3):
where it cuts them into summaries, which slices straddle a kept boundary, and how many of
each name each summary folds. What a plan of a whole trace or a wide window spends most
on, so each is made cheap here: natively, or with a count where numpy sorted.

The fold (`_fold_track`) reads a track's small slices by start, a chunk at a time, with
the latest end before each (`prev`), and opens a summary at a slice that starts at or
after `prev` with an idle bucket or a kept slice's boundary in that gap; the busy time a
slice adds begins at max(start, prev). The straddlers' pass (`_promote_straddlers`)
asks, per small slice, whether a kept boundary lies strictly inside it. In numpy each
is a running maximum, two bucket numbers and a binary search per slice over the kept
boundaries, with a temporary array per step: ~40 % of a whole-trace plan's fold and
~60 % of its straddlers' pass. Both walk slices whose `lo` never decreases (a track by
start; `prev` is a running maximum), so the extension walks the boundaries once with
them (`_scan.fold_cuts`, `_scan.bounds_within`). Reading a chunk (its rows of the slice
order that overlap the window and are kept or not, with their times and names) and cutting
it into groups are one native pass each too (`select_slices`, `fold_groups`): in numpy a
gather and a temporary a column, and three passes (a whole view's fold CPU 0.46 -> 0.25 s).

The numpy code here is the reference: the extension gives the same values, bit for bit
but for the sign of a zero where two zeros meet (numpy's own maximum picks either by CPU;
no bucket or busy sum tells them apart), and refuses, changing nothing, what it cannot do
(a time that is not finite, boundaries out of order), which then goes the numpy way.
tests/test_native_fuzz.py holds the steps to their twins; tests/reduce/test_fold_steps.py
holds plans of real traces made either way to the same bytes.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..native import scanner_module


def bound_between(bounds: np.ndarray, lo: np.ndarray, hi: np.ndarray, open_interval: bool) -> np.ndarray:
    """Whether some value of sorted `bounds` lies in (lo, hi) (open) or [lo, hi] (closed).

    One binary search per element: the first bound past `lo` (at or past it, when
    closed), then one comparison with `hi`.
    """
    if len(bounds) == 0:
        return np.zeros(len(lo), dtype=bool)
    native = scanner_module()
    if native is not None and len(lo):
        out = np.empty(len(lo), dtype=np.bool_)
        if native.bounds_within(_f64(bounds), _f64(lo), _f64(hi), open_interval, out.view(np.uint8)):
            return out
    at = np.searchsorted(bounds, lo, "right" if open_interval else "left")
    inside = at < len(bounds)
    first = bounds[np.minimum(at, len(bounds) - 1)]
    return inside & ((first < hi) if open_interval else (first <= hi))


def fold_cuts(ss: np.ndarray, se: np.ndarray, bounds: np.ndarray, bk: Any,
              run_end: Optional[float]) -> tuple[np.ndarray, np.ndarray, float]:
    """For one chunk of a track's small slices (starts `ss`, ends `se`, by start; at least
    one) in the view's buckets `bk` (`_Buckets`): which open a summary, where each one's
    busy time begins, and the latest end after the chunk (`run_end`: before it; None for a
    track's first chunk, whose first slice opens a summary)."""
    native = scanner_module()
    if native is not None:
        new = np.empty(len(ss), dtype=np.bool_)
        part = np.empty(len(ss), dtype=np.float64)
        end = native.fold_cuts(_f64(ss), _f64(se), _f64(bounds), float(bk.t0), float(bk.t1), float(bk.theta),
                               int(bk.r), np.nan if run_end is None else float(run_end), new.view(np.uint8), part)
        if end is not None:
            return new, part, end
    new = np.ones(len(ss), dtype=bool)
    if run_end is None:
        prev_end, cand, at = np.maximum.accumulate(se)[:-1], ss[1:], 1
    else:
        prev_end, cand, at = np.maximum.accumulate(np.concatenate(([run_end], se)))[:-1], ss, 0
    new[at:] = (cand >= prev_end) & (
        (bk.clipped(cand) > bk.clipped(prev_end) + 1)  # an idle bucket between
        | bound_between(bounds, prev_end, cand, open_interval=False)  # a kept boundary
    )
    part = np.array(ss, dtype=np.float64)  # what each adds to the busy time: from its start or the latest end before it
    np.maximum(part[at:], prev_end, out=part[at:])
    end = float(se.max()) if run_end is None else max(run_end, float(se.max()))
    return new, part, end


def select_slices(order: np.ndarray, overlaps: Optional[np.ndarray], kept: np.ndarray, want: bool,
                  start: np.ndarray, end: np.ndarray, name: Optional[np.ndarray] = None) -> tuple[np.ndarray, ...]:
    """The rows of `order` (a run of the slice order) that overlap the window (all of them
    where `overlaps` is None: a window's plan reads its own slices) and whose kept flag is
    `want`, in order, with their starts and ends (and names, as int64, when `name` is
    given): what the fold reads of a chunk. In numpy a boolean gather, a mask and a gather a
    column, each a temporary; natively one pass (`_scan.select_slices`)."""
    native = scanner_module()
    if native is not None and len(order) and order.dtype in (np.int32, np.int64) \
            and (overlaps is None or overlaps.dtype == np.bool_) and kept.dtype == np.bool_ \
            and (name is None or name.dtype in (np.int16, np.int32, np.int64)):
        n = len(order)
        row, s, e = np.empty(n, dtype=np.int64), np.empty(n), np.empty(n)
        nm = np.empty(n if name is not None else 0, dtype=np.int64)
        k = native.select_slices(_c(order), order.dtype.itemsize,
                                 b"" if overlaps is None else _c(overlaps).view(np.uint8),
                                 _c(kept).view(np.uint8), want, _f64(start), _f64(end),
                                 b"" if name is None else _c(name), 0 if name is None else name.dtype.itemsize,
                                 row, s, e, nm)
        if k >= 0:
            out = (row[:k], s[:k], e[:k])
            return out if name is None else out + (nm[:k],)
    idx = np.asarray(order)
    if overlaps is not None:
        idx = idx[overlaps[idx]]
    idx = idx[kept[idx] == want].astype(np.int64)
    out = (idx, np.asarray(start[idx], dtype=np.float64), np.asarray(end[idx], dtype=np.float64))
    return out if name is None else out + (name[idx].astype(np.int64),)


def fold_groups(new: np.ndarray, se: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A chunk's groups from its cuts (`new`, from `fold_cuts`; slice 0 always opens one)
    and its slices' ends: each slice's group (from 0), each group's first slice, and its
    latest end. Natively in one pass (`_scan.fold_groups`), else three numpy passes."""
    native = scanner_module()
    if native is not None and len(new):
        n = len(new)
        group, seg, seg_end = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64), np.empty(n)
        k = native.fold_groups(_c(new).view(np.uint8), _f64(se), group, seg, seg_end)
        if k >= 0:
            return group, seg[:k], seg_end[:k]
    first = np.array(new, dtype=bool)
    first[:1] = True
    seg = np.flatnonzero(first)
    return np.cumsum(first) - 1, seg, np.maximum.reduceat(se, seg) if len(seg) else np.zeros(0)


def name_counts(group: np.ndarray, name: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (group, name) pairs of a chunk, in order, and how many times each
    occurs: `np.unique(group * nn + name, return_counts=True)` split back into group and
    name (`nn`: one past the largest name id). `group` is ascending from 0 and names are
    few (hundreds), so the pairs' codes mostly fit a table twice the chunk's size:
    counted there (`np.bincount`, one pass) instead of sorted (the fold's costliest step
    in numpy); natively (`_scan.name_counts`), each group's names in a table of the names,
    whatever the groups (a 10 % window of the 8 GiB trace had too many groups for the
    bincount's table: it sorted). The same arrays every way."""
    nn = int(name.max()) + 1
    native = scanner_module()
    # natively, a table of nn slots (8 B each, only those touched paged in): as bounded as numpy's
    if native is not None and len(group) and nn <= _COUNT_TABLE_PER_ROW * len(group) + _COUNT_TABLE_MIN:
        g, nm, cnt = (np.empty(len(group), dtype=np.int64) for _ in range(3))
        k = native.name_counts(_i64(group), _i64(name), nn, g, nm, cnt)
        if k >= 0:
            return g[:k], nm[:k], cnt[:k]
    combo = group * nn + name
    size = (int(group[-1]) + 1) * nn
    if size <= _COUNT_TABLE_PER_ROW * len(combo) + _COUNT_TABLE_MIN:
        counts = np.bincount(combo, minlength=size)
        combo = np.flatnonzero(counts)
        cnt = counts[combo]
    else:
        combo, cnt = np.unique(combo, return_counts=True)
    return combo // nn, combo % nn, cnt


# `name_counts` counts in a table of at most this many slots a pair, plus a few: 16 B a pair,
# about what sorting them held (a copy, its flags and counts).
_COUNT_TABLE_PER_ROW = 2
_COUNT_TABLE_MIN = 1 << 16


def _f64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64)


def _c(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a)


def _i64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)
