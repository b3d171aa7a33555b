"""How busy each bucket of a summary slice is: the shape of the work it folds.

A summary covers a run of busy buckets of one track (SPEC G3). In a long trace seen
whole, that run can be the whole trace: a thread busy for 800 s in steps of 100 ms,
with gaps shorter than a 0.5 s bucket, is one summary, and the view says nothing of
where its work thins out or stops. So a summary that touches two buckets or more
carries `args.busy`: one character per bucket it touches, from the bucket of its start
to the bucket of its end, the share of that bucket its folded slices keep busy, in
tenths (`"0"` under 10 %, `"9"` 90 % and more). The dashboard shades the summary by it;
other viewers show it among the args.

Busy time is the union of the folded slices (nested or overlapping slices count once),
split at bucket edges. Slices are taken by track in order of start, a chunk at a time,
with the running end carried between chunks: each slice adds the part of it that
starts past every slice before it, so the parts never overlap. A folded slice is
shorter than a bucket, so its part lies in one bucket or two. The sums are made in that
order, one part at a time (`np.add.at`), so the digits are the same whatever the chunk.
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional

import numpy as np

from .slices import SliceTable

DIGITS = 10  # "0".."9"
ZERO = ord("0")


def busy_digits(sl: SliceTable, folded: Callable[[np.ndarray], np.ndarray], t0: float, t1: float, theta: float,
                bucket: Callable[[np.ndarray], np.ndarray], track: np.ndarray, start: np.ndarray,
                end: np.ndarray, tracks: Iterable[tuple[int, Callable[[], Iterable[np.ndarray]]]],
                grow: Optional[Callable[[int], None]] = None) -> tuple[np.ndarray, np.ndarray]:
    """Per summary (columns `track`, `start`, `end`, sorted by track then start), its
    digits as flat arrays: `busy[offsets[k]:offsets[k + 1]]` (ASCII), empty for a summary
    within one bucket.

    `bucket(t)`: the bucket of each time, clipped to the window [t0, t1];
    `tracks`: (track id, chunks) per track, chunks giving the track's slices by start;
    `folded(idx)`: which of those slices the summaries fold; `grow(n)`: told of the bytes
    the result will hold before it holds them.
    """
    first, last = bucket(start), bucket(end)
    size = np.where(last > first, last - first + 1, 0)
    offsets = np.zeros(len(start) + 1, dtype=np.int64)
    np.cumsum(size, out=offsets[1:])
    if grow is not None:
        grow(9 * int(offsets[-1]) + offsets.nbytes)  # the sums, then their digits
    busy = np.zeros(int(offsets[-1]))
    if len(busy):
        for trk, chunks in tracks:
            lo, hi = np.searchsorted(track, trk, "left"), np.searchsorted(track, trk, "right")
            if not size[lo:hi].any():
                continue  # no summary of this track spans two buckets: nothing to read
            _add_track(sl, folded, t0, t1, theta, bucket, start[lo:hi], first[lo:hi], size[lo:hi],
                       offsets[lo:hi], chunks, busy)
    digits = np.minimum(np.floor(busy * (DIGITS / theta)), DIGITS - 1).astype(np.uint8) + np.uint8(ZERO)
    return offsets, digits


def _add_track(sl: SliceTable, folded: Callable[[np.ndarray], np.ndarray], t0: float, t1: float, theta: float,
               bucket: Callable[[np.ndarray], np.ndarray], start: np.ndarray, first: np.ndarray,
               size: np.ndarray, offsets: np.ndarray, chunks: Callable[[], Iterable[np.ndarray]],
               busy: np.ndarray) -> None:
    """Add one track's busy time to the buckets of its summaries (in `busy`)."""
    run_end = -np.inf  # the latest end of the track's folded slices so far
    for idx in chunks():
        idx = idx[folded(idx)]
        if not len(idx):
            continue
        lo, hi = sl.start[idx], sl.end[idx]  # copies: worked on in place
        del idx
        before = np.maximum.accumulate(hi)
        reach = float(before[-1])
        before[1:] = before[:-1]
        before[0] = run_end
        np.maximum(before, run_end, out=before)  # the latest end of the slices before each
        run_end = max(run_end, reach)
        np.maximum(lo, before, out=lo)  # its part no earlier slice covers...
        del before
        np.clip(lo, t0, t1, out=lo)  # ...in the window
        np.clip(hi, t0, t1, out=hi)
        part = np.flatnonzero(hi > lo)
        lo, hi = lo[part], hi[part]
        del part
        g = np.maximum(np.searchsorted(start, lo, "right") - 1, 0)  # its summary: the last starting at or before it
        spans = np.flatnonzero(size[g] > 0)
        g, lo, hi = g[spans], lo[spans], hi[spans]
        del spans
        b0, b1 = bucket(lo), bucket(hi)
        at = np.empty(2 * len(g), dtype=np.int64)  # each part's head, then its tail (0 when not split)
        at[0::2] = offsets[g] + np.clip(b0 - first[g], 0, size[g] - 1)
        at[1::2] = offsets[g] + np.clip(b1 - first[g], 0, size[g] - 1)
        del g, b0
        edge = t0 + b1 * theta
        split = at[1::2] != at[0::2]
        del b1
        time = np.empty(2 * len(lo))
        time[0::2] = np.where(split, np.maximum(edge - lo, 0.0), hi - lo)
        time[1::2] = np.where(split, np.maximum(hi - edge, 0.0), 0.0)
        del lo, hi, edge, split
        np.add.at(busy, at, time)
