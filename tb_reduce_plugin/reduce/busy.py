"""How busy each bucket under a summary slice is: the shape of the work it folds.

A summary covers a run of busy buckets of one track (SPEC G3). In a long trace seen
whole, that run can be the whole trace: a thread busy for 800 s in steps of 100 ms,
with gaps shorter than a 0.5 s bucket, is one summary, and the view says nothing of
where its work thins out or stops. So a summary that touches two buckets or more
carries `args.busy`: one character per bucket it touches, from the bucket of its start
to the bucket of its end, the share of that bucket its folded slices keep busy, in
tenths (`"0"` under 10 %, `"9"` 90 % and more). The dashboard shades the
summary by it; other viewers show it among the args.

Busy time is the union of the summary's folded slices inside the window (nested or
overlapping slices count once). The fold (`summaries._fold_track`) reads a track's
folded slices in order of start, a chunk at a time, with the latest end so far: each
slice adds its part past that end, so the parts never overlap and come in time order.
A folded slice is shorter than a bucket, so its part lies in one bucket or two. Sums
are made one part at a time in that order (`np.add.at`), the open summary's sums
carried into the next chunk and added to first, so the digits do not depend on the
chunk. What the fold holds beyond a chunk is the open summary's sums: one per bucket
it spans, no more than the digits it will write.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..native import scanner_module

DIGITS = 10  # "0".."9"
ZERO = ord("0")
# Parts added at once: the temporaries stay some 1-2 MB, within what a plan's chunk is charged.
BATCH = 16384


def group_busy(lo: np.ndarray, hi: np.ndarray, group: np.ndarray, first: np.ndarray, last: np.ndarray,
               carried: Optional[np.ndarray], t0: float, t1: float, theta: float,
               last_bucket: int) -> tuple[np.ndarray, np.ndarray]:
    """Busy time per bucket of each group of one chunk: sums (group j's buckets
    `first[j]..last[j]` at [offsets[j], offsets[j + 1])) and offsets.

    `lo`, `hi`: the part of each folded slice no slice before it covers (its start or the
    latest end before it, whichever is later; its end); `group`: its group, ascending.
    `carried`: the sums group 0 holds from earlier chunks (it goes on from there), which
    are added to first, so each bucket's sum is made in the order of the parts.
    """
    span = last - first + 1
    offsets = np.zeros(len(first) + 1, dtype=np.int64)
    np.cumsum(span, out=offsets[1:])
    sums = np.zeros(int(offsets[-1]))
    if carried is not None:
        sums[:len(carried)] = carried
    base = offsets[:-1] - first
    native = scanner_module()
    if native is not None and len(sums) and native.busy_parts(
            sums, np.ascontiguousarray(base, dtype=np.int64), np.ascontiguousarray(lo, dtype=np.float64),
            np.ascontiguousarray(hi, dtype=np.float64), np.ascontiguousarray(group, dtype=np.int64),
            float(t0), float(t1), float(theta), int(last_bucket)) < 0:
        return sums, offsets  # done natively, to the bit as below (it refuses, changing nothing, what it cannot do)
    for a in range(0, len(lo), BATCH):  # in order: the sums are the same whatever the batch
        _add_parts(sums, base, lo[a:a + BATCH], hi[a:a + BATCH], group[a:a + BATCH], t0, t1, theta, last_bucket)
    return sums, offsets


def _add_parts(sums: np.ndarray, base: np.ndarray, lo: np.ndarray, hi: np.ndarray, g: np.ndarray,
               t0: float, t1: float, theta: float, last_bucket: int) -> None:
    """Add parts [lo, hi) of groups `g` to `sums` (`base[j]`: where group j's bucket 0
    would sit); an empty part (hi <= lo) adds 0. Buckets are counted as
    `buckets._Buckets.of` counts them: floor((t - t0) / theta), at most the last."""
    lo, hi = np.clip(lo, t0, t1), np.clip(hi, t0, t1)
    b0 = np.minimum(((lo - t0) / theta).astype(np.int64), last_bucket)  # t >= t0: truncation is floor
    b1 = np.minimum(((hi - t0) / theta).astype(np.int64), last_bucket)
    at = np.empty(2 * len(g), dtype=np.int64)  # each part's head, then its tail (0 when not split)
    start = base[g]
    np.add(start, b0, out=at[0::2])
    np.add(start, b1, out=at[1::2])
    del start
    np.clip(at, 0, len(sums) - 1, out=at)  # a part lies in its group's buckets; never write past them
    edge = t0 + b1 * theta
    whole = hi > lo
    split = whole & (b1 > b0)
    time = np.empty(2 * len(g))
    time[0::2] = np.where(whole, np.maximum(np.where(split, edge, hi) - lo, 0.0), 0.0)
    time[1::2] = np.where(split, np.maximum(hi - edge, 0.0), 0.0)
    np.add.at(sums, at, time)


def digits_of(sums: np.ndarray, span: np.ndarray, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """The `args.busy` digits (ASCII) of groups whose sums lie back to back, `span[j]`
    buckets each: per group, its digits' count (0 for a group within one bucket) and the
    digits of all."""
    count = np.where(span >= 2, span, 0)
    wide = np.repeat(span >= 2, span)
    digits = np.minimum(np.floor(sums[wide] * (DIGITS / theta)), DIGITS - 1).astype(np.uint8)
    return count, digits + np.uint8(ZERO)
