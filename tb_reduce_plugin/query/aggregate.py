"""Exact statistics per event name over a time range, from the original events.

A reduced view cannot give these: summaries fold events, and the browser holds only
what a level keeps. The index holds every slice, so the table of a range (how many
times each name ran, its total and self time, its longest run) comes from the columns
themselves, in a handful of vectorised passes (bincount over name ids, maximum.at, one
small sort of the candidates for each name's longest occurrence): no Python per event.

Rules (docs/SEMANTICS.md, "Search and range statistics"):
- slices only (X and matched B/E), those overlapping the window; a slice's time is its
  overlap with the window, so a whole-trace table holds plain durations;
- self time = that time − the time of the slice's direct children (`nesting`), at
  least 0 (children of a malformed trace can outlast their parent);
- `pid`/`tid` keep one process or one thread, compared as text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from ..errors import BadQuery
from ..index.prepared import prepared_of
from ..model.mapped import scratch_array
from ..model.slices import SliceTable
from ..model.table import EventTable
from ..reduce import plan, shared
from ..reduce.plan import name_rank
from ..reduce.shared import slices_of
from .nesting import parents_of
from .search import check_page, check_range, name_text

DEFAULT_LIMIT = 500
MAX_LIMIT = 10_000
# Working memory of a range table, charged to the memory budget before it is made; held to
# these by tracemalloc in tests/query/test_query_aggregate_chunks.py. Per slice of a chunk (the
# slices are read a chunk at a time, whatever the trace's length); per name (the sums);
# per slice of the trace, the children's time when no scratch folder holds it.
BYTES_PER_CHUNK_SLICE = 200
BYTES_PER_NAME = 96
CHILDREN_BYTES_PER_SLICE = 8
# Made on the first table: the parents (held, one index a slice), their own chunks, and the
# plans' slice order when no plan made it yet (`plan.static_bytes`).
PARENTS_BYTES_PER_SLICE = 8


def working_bytes(t: EventTable) -> int:
    """What a range table of `t` may hold at its peak, counting the state it would prepare first."""
    p = prepared_of(t)
    n = len(t) if p.slices is None else len(p.slices)  # a slice is one event at least
    need = BYTES_PER_CHUNK_SLICE * min(n, shared.CHUNK_SLICES) + BYTES_PER_NAME * len(t.names)
    if t.scratch is None:
        need += CHILDREN_BYTES_PER_SLICE * n
    need += plan.slices_bytes(t)
    if p.parents is None:
        need += PARENTS_BYTES_PER_SLICE * n + plan.static_bytes(t)
    return need


def id_text(value: Any) -> str:
    """A pid or tid as the `pid`/`tid` parameters name it: a string as it is, anything
    else as its JSON (`12`, `null`), which is what a client gets by stringifying the
    value a `search` hit or a trace event carries."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return str(value)


def check_aggregate(start_us: Optional[float], end_us: Optional[float], pid: Optional[str], tid: Optional[str],
                    limit: int) -> Optional[tuple[float, float]]:
    """The window (None: whole trace) of a valid request; `BadQuery` says what is wrong
    (callers check before reading a file, so a bad request costs nothing)."""
    window = check_range(start_us, end_us)
    check_page(limit, 0, MAX_LIMIT)
    if tid is not None and pid is None:
        raise BadQuery("tid needs pid: thread ids repeat across processes")
    return window


def _track_mask(t: EventTable, pid: Optional[str], tid: Optional[str]) -> Optional[np.ndarray]:
    """Which tracks the filter keeps (None: all). Per distinct track, so a Python loop is fine."""
    if pid is None:
        return None
    keep = [id_text(p) == pid and (tid is None or id_text(q) == tid) for p, q in t.tracks]
    return np.asarray(keep, dtype=bool) if keep else np.zeros(0, dtype=bool)


def aggregate(t: EventTable, start_us: Optional[float] = None, end_us: Optional[float] = None,
              pid: Optional[str] = None, tid: Optional[str] = None, limit: Optional[int] = DEFAULT_LIMIT,
              chunk: Optional[int] = None) -> dict:
    """Per-name statistics of the slices overlapping [start_us, end_us] (all, when absent).

    Rows are sorted by wall time (then count, descending; then name); `other` sums the
    rows past `limit`. The slices are read `chunk` (default `shared.CHUNK_SLICES`) at a
    time, in three passes (children's time onto parents; sums; each name's longest), so
    what the table holds beside the trace's columns is per name, plus one number per slice
    (its children's time) kept in a scratch file when the trace's columns are. Sums are added in slice order, one
    slice at a time (`np.add.at`), so they do not depend on the chunk.
    """
    window = check_aggregate(start_us, end_us, pid, tid, DEFAULT_LIMIT if limit is None else limit)
    tracks = _track_mask(t, pid, tid)
    sl = slices_of(t)
    parent = parents_of(t)
    n, k = len(sl), len(t.names)
    chunk = chunk or shared.CHUNK_SLICES
    spans = [(a, min(a + chunk, n)) for a in range(0, n, chunk)]

    def part(a: int, b: int) -> _Part:
        return _part(sl, a, b, window, tracks)

    # Direct children's time, summed onto their parents (a child out of the window adds 0).
    with scratch_array(t.scratch, "children", n, np.float64) as children:
        for a, b in spans:
            p = parent[a:b]
            has = p >= 0
            np.add.at(children, p[has], part(a, b).wall[has])
        count = np.zeros(k, dtype=np.int64)
        wall_sum, self_sum = np.zeros(k), np.zeros(k)
        clipped = np.zeros(k, dtype=np.int64)
        longest = np.full(k, -np.inf)
        on_tracks = np.zeros(len(t.tracks), dtype=bool)
        selected = cut_total = 0
        for a, b in spans:
            c = part(a, b)
            own = np.maximum(c.wall - children[a:b], 0.0)
            name, w, s, cut = c.pick(sl.name[a:b]), c.pick(c.wall), c.pick(own), c.pick(c.cut)
            count += np.bincount(name, minlength=k)
            np.add.at(wall_sum, name, w)
            np.add.at(self_sum, name, s)
            if cut.any():
                clipped += np.bincount(name[cut], minlength=k)
            np.maximum.at(longest, name, w)
            on_tracks[c.pick(sl.track[a:b])] = True
            selected += len(name)
            cut_total += int(np.count_nonzero(cut))
    max_slice = _longest_occurrences(sl, spans, part, longest, k)

    present = np.flatnonzero(count)
    rank = name_rank(t)
    present = present[np.lexsort((rank[present], -count[present], -wall_sum[present]))]
    if limit is None:
        limit = len(present)
    shown, rest = present[:limit], present[limit:]
    rows = [{
        "name": name_text(t.names[n]),
        "count": int(count[n]),
        "wall_us": float(wall_sum[n]),
        "self_us": float(self_sum[n]),
        "avg_us": float(wall_sum[n] / count[n]),
        "max_us": float(longest[n]),
        "max_i": int(sl.event[max_slice[n]]),
        "max_ts": float(sl.start[max_slice[n]]),
        "clipped": int(clipped[n]),
    } for n in shown.tolist()]
    return {
        "window": list(window) if window is not None else None,
        "pid": pid,
        "tid": tid,
        "slices": selected,
        "tracks": int(np.count_nonzero(on_tracks)) if selected else 0,
        "names": int(len(present)),
        "clipped": cut_total,
        "limit": limit,
        "rows": rows,
        "other": {
            "names": int(len(rest)),
            "count": int(count[rest].sum()),
            "wall_us": float(wall_sum[rest].sum()),
            "self_us": float(self_sum[rest].sum()),
            "max_us": float(longest[rest].max()) if len(rest) else 0.0,
            "clipped": int(clipped[rest].sum()),
        },
    }


@dataclass
class _Part:
    """Slices [a, b) as a range table sees them: each one's time in the window (`wall`,
    0 out of it), whether the window cuts it, and which count (`which`; None: all)."""

    wall: np.ndarray
    cut: np.ndarray
    which: Optional[np.ndarray]

    def pick(self, a: np.ndarray) -> np.ndarray:
        return a if self.which is None else a[self.which]


def _part(sl: SliceTable, a: int, b: int, window: Optional[tuple[float, float]],
          tracks: Optional[np.ndarray]) -> _Part:
    dur = np.asarray(sl.dur[a:b])
    if window is None:
        wall = dur  # plain durations, as written (end - start loses digits at epoch times)
        cut = np.zeros(b - a, dtype=bool)
        selected = None
    else:
        lo, hi = window
        start, end = sl.start[a:b], sl.end[a:b]
        inside = (start <= hi) & (end >= lo)
        cut = inside & ((start < lo) | (end > hi))
        wall = np.where(cut, np.minimum(end, hi) - np.maximum(start, lo), dur)
        wall = np.where(inside, np.maximum(wall, 0.0), 0.0)  # out of the window: nothing to give a parent
        selected = inside
    if tracks is not None:
        on_track = tracks[sl.track[a:b]]
        selected = on_track if selected is None else selected & on_track
    return _Part(wall, cut, None if selected is None else np.flatnonzero(selected))


def _longest_occurrences(sl: SliceTable, spans: list[tuple[int, int]], part: Callable[[int, int], _Part],
                         longest: np.ndarray, k: int) -> np.ndarray:
    """Per name id, the slice of its longest time, the earliest on ties (by start, then
    event, then slice); -1 for names with none. Only the slices equal to their name's
    maximum are compared: usually one per name."""
    at = np.full(k, -1, dtype=np.int64)
    at_start, at_event = np.zeros(k), np.zeros(k, dtype=np.int64)
    for a, b in spans:
        c = part(a, b)
        name, w = c.pick(sl.name[a:b]), c.pick(c.wall)
        cand = np.flatnonzero(w == longest[name])
        if not len(cand):
            continue
        pos = a + (cand if c.which is None else c.which[cand])
        start, event, name = sl.start[pos], sl.event[pos], name[cand]
        best = _longest_occurrence(event, start, name, w[cand], longest, k)
        have = np.flatnonzero(best >= 0)
        i = best[have]
        earlier = (at[have] < 0) | (start[i] < at_start[have]) | ((start[i] == at_start[have])
                                                                  & (event[i] < at_event[have]))
        take, i = have[earlier], i[earlier]
        at[take], at_start[take], at_event[take] = pos[i], start[i], event[i]
    return at


def _longest_occurrence(event: np.ndarray, start: np.ndarray, name: np.ndarray, wall: np.ndarray,
                        longest: np.ndarray, k: int) -> np.ndarray:
    """Per name id, the position (in these arrays) of its longest slice, the earliest on
    ties (by start, then input index); -1 for names with none. Only the slices equal to
    their name's maximum are sorted: usually one per name."""
    at = np.full(k, -1, dtype=np.int64)
    cand = np.flatnonzero(wall == longest[name])
    if not len(cand):
        return at
    order = cand[np.lexsort((event[cand], start[cand], name[cand]))]
    first = np.ones(len(order), dtype=bool)
    first[1:] = name[order[1:]] != name[order[:-1]]
    at[name[order[first]]] = order[first]
    return at
