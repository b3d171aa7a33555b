"""Direct parents of slices: which slice each slice sits in, for self time.

The rule is the one a viewer draws with (and `slices.nesting` counts depth by): per
track, slices taken in order of start, the longer first at equal starts (a parent
before its child), file order last; each slice's parent is the slice on top of the
stack of open slices when it starts, where a slice is closed once it has ended at or
before that start (a slice that ends where another begins is its sibling, not its
parent). For properly nested slices that is the innermost slice containing it. Where
a track's slices overlap without nesting (a malformed trace), the stack still decides,
so every slice has at most one parent and self time stays defined.

The stack's top when a slice starts is the nearest earlier slice (in that order) that
has not ended by then: every slice between the two was pushed after the top and popped
before, so it ended at or before the start. That form needs no stack: each slice jumps
from its predecessor along candidates, all slices at once, until it finds one still
open. Work is proportional to what a stack would pop, done in numpy rounds while many
slices are still looking, then in a plain loop for the few that climb a long way (a
chain of deeply nested slices that all end together).
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import numpy as np

from ..index.prepared import prepared_of
from ..model.mapped import scratch_array, spill
from ..model.slices import chunk_end
from ..model.sorting import row_dtype
from ..model.table import EventTable
from ..reduce import shared
from ..reduce.shared import slice_order, slices_of

# Below this many slices still looking, a numpy round costs more than a Python step each.
_LOOP_BELOW = 256


def direct_parents(track: np.ndarray, start: np.ndarray, end: np.ndarray,
                   by_start: Optional[np.ndarray] = None, chunk: Optional[int] = None) -> np.ndarray:
    """For each slice, the index of its direct parent on its track, or -1 (see module doc).

    The slices are taken `chunk` (default `shared.CHUNK_SLICES`) at a time in order of (track, start) (`by_start`: that
    order, sorted here when not given), so the work's temporaries stay the size of a chunk
    however long the trace. What a chunk needs of the slices before it is the stack of
    those still open when it starts: a later slice's parent is the nearest earlier slice
    open at its start, which lies on the chain of parents of the previous chunk's last slice
    (every slice between two links of that chain ended before the lower link's child began).
    A chunk ends where (track, start) changes, so the order within equal starts (the longer
    first, then file order) is decided inside one chunk.
    """
    m = len(start)
    index_type = row_dtype(m)
    parent = np.full(m, -1, dtype=index_type)
    if m == 0:
        return parent
    if by_start is None:
        by_start = np.lexsort((start, track))
    chunk = chunk or shared.CHUNK_SLICES
    stack = np.zeros(0, dtype=np.int64)  # the open slices after the previous chunk, outermost first
    a = 0
    while a < m:
        b = chunk_end(by_start, track, start, a, chunk)
        ids = np.asarray(by_start[a:b], dtype=np.int64)
        trk, s, e = track[ids], start[ids], end[ids]
        local = np.lexsort((ids, -e, s, trk))  # as `slices.nesting` sorts: the longer first, file order last
        ids, trk, s, e = ids[local], trk[local], s[local], e[local]
        if len(stack) and track[stack[0]] == trk[0]:
            stack = stack[end[stack] > s[0]]  # closed before this chunk: nobody's parent any more
        else:
            stack = stack[:0]
        cand = _candidates(np.concatenate((start[stack], s)), np.concatenate((end[stack], e)), trk, len(stack))
        every = np.concatenate((stack, ids))
        found = np.flatnonzero(cand >= 0)
        found = found[found >= len(stack)]
        parent[every[found]] = every[cand[found]]
        chain, j = [], len(cand) - 1  # the last slice and its parents: the stack the next chunk starts with
        while j >= 0:
            chain.append(j)
            j = int(cand[j])
        stack = every[chain[::-1]]
        a = b
    return parent


def _candidates(s: np.ndarray, e: np.ndarray, trk: np.ndarray, carried: int) -> np.ndarray:
    """Each slice's parent as a position in these arrays (-1: none). The first `carried`
    are the open slices of earlier chunks, outermost first, each the candidate of the next;
    the rest are the chunk's slices in nesting order on tracks `trk`."""
    m = len(s)
    cand = np.arange(-1, m - 1, dtype=np.int64)
    # cand[k]: a position before k (or -1) such that every slice strictly between it and k
    # ended at or before s[k]; it becomes the parent's position once e[cand[k]] > s[k].
    cand[np.flatnonzero(trk[1:] != trk[:-1]) + 1 + carried] = -1  # a track's first slice has no predecessor
    active = np.flatnonzero(cand >= 0)
    active = active[active >= carried]  # the carried slices' parents are known
    while len(active) >= _LOOP_BELOW:
        c = cand[active]
        active = active[e[c] <= s[active]]  # those whose candidate is closed look further
        if not len(active):
            break
        cand[active] = cand[cand[active]]  # any candidate's candidate keeps the invariant
        active = active[cand[active] >= 0]
    if len(active):  # ascending, so a candidate's own search is already done when it is used
        cand_list, ends = cand.tolist(), e.tolist()
        for k in active.tolist():
            c, sk = cand_list[k], float(s[k])
            while c >= 0 and ends[c] <= sk:
                c = cand_list[c]
            cand_list[k] = c
        cand = np.asarray(cand_list, dtype=np.int64)
    return cand


def parents_of(t: EventTable) -> np.ndarray:
    """`direct_parents` of the table's slices, prepared once per table.

    Kept in the table's prepared state (`prepared.Prepared.parents`), whose memory the
    index counts (`TraceIndex.memory_bytes`), so the budget sees it. It walks the slices
    in the order plans keep (`shared.slice_order`), so it sorts nothing whole.
    """
    p = prepared_of(t)
    parents = p.parents
    if parents is None:
        sl = slices_of(t)
        found = direct_parents(sl.track, sl.start, sl.end, slice_order(t))
        parents = p.parents = spill(t.scratch, "parents", found)
    return parents


@contextlib.contextmanager
def children_durations(t: EventTable) -> Iterator[np.ndarray]:
    """For the length of a `with`: per slice of `t`, the summed duration of its direct
    children (`parents_of`; a duration that is not finite, a hostile trace's, as 0), what
    its self time is its duration less of. One number a slice, in a scratch file where
    the table has a folder; the slices read a chunk at a time. (A range table clips each
    child to its window first: `aggregate` sums those itself.)"""
    sl = slices_of(t)
    n = len(sl)
    parent = parents_of(t) if n else np.zeros(0, dtype=np.int64)
    with scratch_array(t.scratch, "children", n, np.float64) as children:
        for a in range(0, n, shared.CHUNK_SLICES):
            b = min(a + shared.CHUNK_SLICES, n)
            p = np.asarray(parent[a:b])
            has = p >= 0
            dur = np.asarray(sl.dur[a:b])
            np.add.at(children, p[has], np.where(np.isfinite(dur), dur, 0.0)[has])
        yield children
