"""Rows put in order without sorting them all at once: the slices by (track, start) that
plans walk, the slices and instants by time that searches page through.

`np.lexsort` over every row holds ~40 B a row of keys, indices and work space (1.4 GB at
35 M slices). Here the rows are dealt into buckets that are ranges of the sort key — per
group (a track), cut at keys sampled from it so that a bucket holds about `chunk` rows,
a run of one key never cut — and each bucket is sorted alone: the same order, holding a
chunk, the sample and a count per bucket. The rows by bucket, and the order itself, go
to `folder` when there is one (`mapped.Appended`, `mapped.scratch_array`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

import numpy as np

from ..native import scanner_module
from .mapped import Appended, scratch_array
from .read_advice import ask_for, in_memory

SAMPLE_ROWS = 1 << 16  # keys sampled to cut the buckets at, at most: ~500 a cut at 35 M rows
SAMPLE_BYTES_PER_ROW = 48  # the sample's keys, groups and their sort


def sample_bytes(n: int) -> int:
    """What sampling the keys of `n` rows holds (beside a chunk's work): every `n //
    SAMPLE_ROWS`-th row, so up to twice `SAMPLE_ROWS` rows (all of them below that)."""
    return SAMPLE_BYTES_PER_ROW * len(range(0, n, max(1, n // SAMPLE_ROWS)))


def row_dtype(n: int) -> type:
    """The dtype of row numbers among `n` rows (an order, a slice's event): int32 while
    every one fits, 4 bytes a row fewer than int64."""
    return np.int32 if n < 2**31 else np.int64


def order_by(key: np.ndarray, tie: Optional[np.ndarray], group: Optional[np.ndarray], folder: Optional[str],
             chunk: int, what: str) -> np.ndarray:
    """Row indices by (group, key, tie): `np.lexsort((tie, key, group))`, or
    `np.lexsort((tie, key))` without groups. `tie` must be distinct per row, so the order
    is total and ties of the key are decided alike whatever the buckets; None: the row
    itself (`np.argsort(key, kind="stable")`). `group`: small non-negative ints. Rows
    already in that order are found so first, a chunk at a time.

    int32 below 2^31 rows, as the index store keeps orders (`store._write_narrowed`) and
    every use takes them; without a folder, made at their full size and filled in place
    (not joined from parts: the order of an XSpace's 2.1 M slices held 17 MB twice)."""
    n = len(key)
    out = Appended(folder, {"order": row_dtype(n)}, what, rows=n)
    if _in_order(key, tie, group, chunk):
        for c in _chunks(n, chunk):
            out.append({"order": np.arange(c.start, c.stop, dtype=row_dtype(n))})
        return out.finish()["order"]
    cuts = _key_cuts(key, group, chunk)  # per group: the sampled keys its buckets are cut at
    first = np.zeros(len(cuts) + 1, dtype=np.int64)  # each group's first bucket
    np.cumsum([len(c) + 1 for c in cuts], out=first[1:])
    counts = np.zeros(int(first[-1]), dtype=np.int64)
    with scratch_array(folder, "sort_bucket", n, row_dtype(len(counts))) as bucket, \
            scratch_array(folder, "sort_rows", n, np.int64) as rows:
        for c in _chunks(n, chunk):
            bucket[c] = b = _bucket_of(key, group, c, cuts, first)
            counts += np.bincount(b, minlength=len(counts))
        begins = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=begins[1:])
        filled = begins[:-1].copy()
        for c in _chunks(n, chunk):  # each row, behind those of its bucket so far
            b = np.asarray(bucket[c])
            o = np.argsort(b, kind="stable")
            bs = b[o]
            heads = np.r_[0, np.flatnonzero(bs[1:] != bs[:-1]) + 1]
            sizes = np.diff(np.r_[heads, len(bs)])
            rows[filled[bs] + np.arange(len(bs)) - np.repeat(heads, sizes)] = o + c.start
            filled[bs[heads]] += sizes
        for lo, hi in zip(begins[:-1].tolist(), begins[1:].tolist()):
            if hi > lo:
                idx = np.array(rows[lo:hi])
                keys = (idx if tie is None else tie[idx], key[idx]) + (() if group is None else (group[idx],))
                out.append({"order": idx[np.lexsort(keys)]})
    return out.finish()["order"]


def _chunks(n: int, chunk: int) -> Iterator[slice]:
    for a in range(0, n, chunk):
        yield slice(a, min(a + chunk, n))


def _in_order(key: np.ndarray, tie: Optional[np.ndarray], group: Optional[np.ndarray], chunk: int) -> bool:
    """Whether the rows already are by (group, key, tie), checked a chunk at a time."""
    n = len(key)
    for c in _chunks(n, chunk):
        hi = min(c.stop + 1, n)  # one row past the chunk: the pair across its edge is checked too
        k = np.asarray(key[c.start:hi])
        if tie is None:  # the row decides ties: later rows are later
            later = k[1:] >= k[:-1]
        else:
            t = np.asarray(tie[c.start:hi])
            later = (k[1:] > k[:-1]) | ((k[1:] == k[:-1]) & (t[1:] > t[:-1]))
        if group is not None:
            g = np.asarray(group[c.start:hi])
            later = (g[1:] > g[:-1]) | ((g[1:] == g[:-1]) & later)
        if not later.all():
            return False
    return True


def _key_cuts(key: np.ndarray, group: Optional[np.ndarray], chunk: int) -> list[np.ndarray]:
    """Per group, the keys to cut its rows at so each range holds about `chunk`: quantiles
    of every `step`-th row's key (a sample of `SAMPLE_ROWS` at most)."""
    n = len(key)
    groups = (int(group.max()) + 1 if n else 0) if group is not None else 1
    per_group = np.zeros(groups, dtype=np.int64)
    for c in _chunks(n, chunk):
        per_group += (np.bincount(np.asarray(group[c]), minlength=groups) if group is not None
                      else c.stop - c.start)
    rows = np.arange(0, n, max(1, n // SAMPLE_ROWS))
    g = np.asarray(group[rows]) if group is not None else np.zeros(len(rows), dtype=np.int64)
    k = np.asarray(key[rows])
    o = np.lexsort((k, g))
    g, k = g[o], k[o]
    cuts = []
    for gr in range(groups):
        pieces = int(per_group[gr]) // chunk
        lo, hi = np.searchsorted(g, gr, "left"), np.searchsorted(g, gr, "right")
        sample = k[lo:hi]
        if pieces < 1 or not len(sample):
            cuts.append(np.zeros(0, dtype=k.dtype))
            continue
        at = (np.arange(1, pieces + 1) * len(sample)) // (pieces + 1)
        cuts.append(np.unique(sample[at]))
    return cuts


def _bucket_of(key: np.ndarray, group: Optional[np.ndarray], c: slice, cuts: list[np.ndarray],
               first: np.ndarray) -> np.ndarray:
    """The bucket of each row of chunk `c`: its group's first bucket, plus how many of the
    group's cuts its key reaches (equal keys land in one bucket)."""
    if group is None:
        return np.searchsorted(cuts[0], np.asarray(key[c]), "right").astype(np.int64)
    g = np.asarray(group[c])
    b = first[g]
    present = np.bincount(g, minlength=len(cuts))
    big = [gr for gr in np.flatnonzero(present).tolist() if len(cuts[gr])]  # groups of more than a chunk: few
    if big:
        k = np.asarray(key[c])
        for gr in big:
            mine = np.flatnonzero(g == gr)
            b[mine] += np.searchsorted(cuts[gr], k[mine], "right")
    return b


# The steps of a search that look whether its pages are in memory (`KeysThrough.ask_ahead`),
# until one finds them cold: the first, and one deep enough that its rows are the window's
# own (a long-running server keeps the top of every bisection in memory, touched by every
# search, while the pages near the answers may have gone).
_LOOK_AT_STEPS = (0, 12)


class KeysThrough:
    """`keys[order[rows]]` (NaN as inf where `nan_as_inf`): the `key_at` of a search through
    an order, which can ask for a step's pages at once (`ask_ahead`).

    Why: with the page cache cold (a restart, a trace not looked at for a while), each step
    of a search waits for a page of the order and then one of the keys, query after query:
    a cold 10 % window of an 8 GiB trace spent ~0.14 s in searches. Asked for together, the
    pages of a step are read in one round (on this project's VMs 300 random pages took
    ~10 ms so, ~20-30 ms one at a time)."""

    def __init__(self, keys: np.ndarray, order: np.ndarray, nan_as_inf: bool = False) -> None:
        self.keys, self.order, self.nan_as_inf = keys, order, nan_as_inf
        self._keys, self._order = np.asarray(keys), np.asarray(order)  # plain views: no memmap a gather

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        k = self._keys[self._order[rows]]
        return np.where(np.isnan(k), np.inf, k) if self.nan_as_inf else k

    def stepper(self) -> Optional[Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int], int]]:
        """`search_by`'s steps done natively (`_scan.search_through`): `(lo, hi, x, right,
        steps)` narrows contiguous int64 `lo`, `hi` in place by up to `steps` steps and
        returns how many queries are still open. None without the scanner, or for keys and
        an order it does not read (not float64, int32 or int64, or not contiguous).

        Why: the steps in numpy cost ~10 array operations each, ~25 steps a search: a warm
        window's ~9 searches spent ~0.5 ms each in them, for a few dozen queries."""
        native = scanner_module()
        keys, order = self._keys, self._order
        if (native is None or keys.dtype != np.float64 or order.dtype not in (np.int32, np.int64)
                or not keys.flags.c_contiguous or not order.flags.c_contiguous):
            return None
        width, nan_as_inf = order.dtype.itemsize, self.nan_as_inf

        def steps(lo: np.ndarray, hi: np.ndarray, x: np.ndarray, right: np.ndarray, n: int) -> int:
            return native.search_through(keys, order, width, lo, hi, x, right, nan_as_inf, n)

        return steps

    def ask_ahead(self, rows: np.ndarray) -> bool:
        """Where the first row's pages (the order's, the key's) are not both in memory, ask
        for the pages of all of them, the order's first (read, then the keys' pages are
        known); else False, and the search only looks again at its next step of
        `_LOOK_AT_STEPS` (a look is two `mincore` calls: a warm window's ~8 searches pay
        ~0.1 ms for them)."""
        first = int(rows[0])
        if in_memory(self.order, first) and in_memory(self.keys, int(self._order[first])):
            return False
        ask_for(self.order, rows)
        ask_for(self.keys, self._order[rows])
        return True


def search_by(key_at: Callable[[np.ndarray], np.ndarray], lo: Any, hi: Any, x: Any, side: Any = "left") -> np.ndarray:
    """`lo + np.searchsorted(keys[lo:hi], x, side)` for rows whose keys are not stored in
    their order but read through `key_at(rows)` (int64 row numbers in, float keys out):
    a binary search per query, all queries a step at a time (`lo`, `hi`, `x` broadcast).

    Why: an index kept a sorted copy of its rows' keys (the window index's starts and
    times, 8 B a row on disk) only to search them; the keys are a gather of the table's
    columns through the order the index keeps anyway, and a search reads ~log2(n) of them.
    NaN sorts last, as numpy puts it. `side` may also be a boolean array, True where a query
    is searched from the right: two searches of one span (a window's two ends) then step
    together, and their pages are asked for together (`KeysThrough.ask_ahead`)."""
    sides = None if isinstance(side, str) else np.asarray(side, dtype=bool)
    if sides is not None:
        lo, hi, x, sides = np.broadcast_arrays(np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64),
                                               np.asarray(x, dtype=np.float64), sides)
    else:
        lo, hi, x = np.broadcast_arrays(np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64),
                                        np.asarray(x, dtype=np.float64))
    if x.ndim == 0:
        return np.int64(_search_one(key_at, int(lo), int(hi), float(x), side if sides is None else
                                    ("right" if bool(sides) else "left")))
    lo, hi = lo.copy(), hi.copy()  # contiguous, of their own
    x_nan = np.isnan(x)
    ask = getattr(key_at, "ask_ahead", None) if x.size > 1 else None  # a step's pages at once, where cold
    stepper = key_at.stepper() if isinstance(key_at, KeysThrough) else None
    if stepper is not None:
        x = np.ascontiguousarray(x)
        right = np.ascontiguousarray(sides if sides is not None else np.full(x.shape, side == "right"), dtype=np.uint8)
    asking, step = False, 0
    while True:
        open_ = lo < hi
        if not open_.any():
            return lo
        mid = (lo + hi) >> 1
        if ask is not None and (asking or step in _LOOK_AT_STEPS):
            asking = ask(np.unique(mid[open_]))  # cold: asked, and each step after asks too
        if stepper is not None and not asking:  # warm: natively, up to the next look
            later = [s for s in _LOOK_AT_STEPS if s > step] if ask is not None else []
            n = later[0] - step if later else 64  # 64 steps end any search
            stepper(lo, hi, x, right, n)
            step += n
            continue
        step += 1
        k = key_at(np.minimum(mid, int(hi.max()) - 1))  # a closed query's key is read, not used
        if sides is not None:
            below = np.where(sides, x_nan | (k <= x), np.where(x_nan, ~np.isnan(k), k < x))
        elif side == "left":  # key < x, NaN last
            below = np.where(x_nan, ~np.isnan(k), k < x)
        else:  # key <= x, NaN last
            below = x_nan | (k <= x)
        lo = np.where(open_ & below, mid + 1, lo)
        hi = np.where(open_ & ~below, mid, hi)


def _search_one(key_at: Callable[[np.ndarray], np.ndarray], lo: int, hi: int, x: float, side: str) -> int:
    """`search_by` of one query: a bisection reading one key a step."""
    x_nan = x != x
    rows = np.zeros(1, dtype=np.int64)
    while lo < hi:
        mid = (lo + hi) >> 1
        rows[0] = mid
        k = float(key_at(rows)[0])
        if side == "left":
            below = (k == k) if x_nan else k < x
        else:
            below = x_nan or k <= x
        if below:
            lo = mid + 1
        else:
            hi = mid
    return lo
