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

import numpy as np

from ..mapped import spill
from ..model import EventTable
from ..prepared import prepared_of
from ..reduction import slices_of

# Below this many slices still looking, a numpy round costs more than a Python step each.
_LOOP_BELOW = 256


def direct_parents(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each slice, the index of its direct parent on its track, or -1 (see module doc)."""
    m = len(start)
    index_type = np.int32 if m < 2**31 else np.int64
    parent = np.full(m, -1, dtype=index_type)
    if m == 0:
        return parent
    order = np.lexsort((-end, start, track))  # per-track order, as `slices.nesting` sorts
    s, e = start[order], end[order]
    trk = track[order]
    # cand[k]: a position before k (or -1) such that every slice strictly between it and k
    # ended at or before s[k]; it becomes the parent's position once e[cand[k]] > s[k].
    cand = np.arange(-1, m - 1, dtype=np.int64)
    cand[np.flatnonzero(trk[1:] != trk[:-1]) + 1] = -1  # a track's first slice has no predecessor
    active = np.flatnonzero(cand >= 0)
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
    found = cand >= 0
    parent[order[found]] = order[cand[found]]
    return parent


def parents_of(t: EventTable) -> np.ndarray:
    """`direct_parents` of the table's slices, prepared once per table.

    Kept in the table's prepared state (`prepared.Prepared.parents`), whose memory the
    index counts (`TraceIndex.memory_bytes`), so the budget sees it.
    """
    p = prepared_of(t)
    parents = p.parents
    if parents is None:
        sl = slices_of(t)
        parents = p.parents = spill(t.scratch, "parents", direct_parents(sl.track, sl.start, sl.end))
    return parents
