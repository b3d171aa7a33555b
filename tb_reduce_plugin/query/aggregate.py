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
from typing import Any, Optional

import numpy as np

from ..errors import BadQuery
from ..model import EventTable
from ..reduction import name_rank, slices_of
from .nesting import parents_of
from .search import check_page, check_range, name_text, peak_bytes

DEFAULT_LIMIT = 500
MAX_LIMIT = 10_000
# Working memory per event of the trace, charged to the memory budget before a table is
# made. Measured with tracemalloc on a 2 M-event Kineto-style trace (bench/bench_query.py):
# warm 24 B (whole trace) to 30 B (a window), the first (building the parents) 51 B.
WARM_BYTES_PER_EVENT = 40
FIRST_BYTES_PER_EVENT = 64


def working_bytes(t: EventTable) -> int:
    """What a range table of `t` may hold at its peak, counting the state it would prepare first."""
    return peak_bytes(t, WARM_BYTES_PER_EVENT, FIRST_BYTES_PER_EVENT, "parents")


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
              pid: Optional[str] = None, tid: Optional[str] = None, limit: int = DEFAULT_LIMIT) -> dict:
    """Per-name statistics of the slices overlapping [start_us, end_us] (all, when absent).

    Rows are sorted by wall time (then count, descending; then name); `other` sums the
    rows past `limit`.
    """
    window = check_aggregate(start_us, end_us, pid, tid, limit)
    tracks = _track_mask(t, pid, tid)
    sl = slices_of(t)
    parent = parents_of(t)
    start, end = sl.start, sl.end
    if window is None:
        wall = sl.dur  # plain durations, as written (end - start loses digits at epoch times)
        cut = np.zeros(len(sl), dtype=bool)
        selected = None
    else:
        lo, hi = window
        inside = (start <= hi) & (end >= lo)
        cut = inside & ((start < lo) | (end > hi))
        wall = np.where(cut, np.minimum(end, hi) - np.maximum(start, lo), sl.dur)
        wall = np.where(inside, np.maximum(wall, 0.0), 0.0)  # out of the window: nothing to give a parent
        selected = inside
    if tracks is not None:
        on_track = tracks[sl.track]
        selected = on_track if selected is None else selected & on_track
    # Direct children's time, summed onto their parents (a child out of the window adds 0).
    has_parent = np.flatnonzero(parent >= 0)
    children = np.bincount(parent[has_parent], weights=wall[has_parent], minlength=len(sl))
    own = np.maximum(wall - children, 0.0)

    if selected is None:
        which = None
        name, w, s, c = sl.name, wall, own, cut
    else:
        which = np.flatnonzero(selected)
        name, w, s, c = sl.name[which], wall[which], own[which], cut[which]
    k = len(t.names)
    count = np.bincount(name, minlength=k)
    wall_sum = np.bincount(name, weights=w, minlength=k)
    self_sum = np.bincount(name, weights=s, minlength=k)
    clipped = np.bincount(name[c], minlength=k) if c.any() else np.zeros(k, dtype=np.int64)
    longest = np.full(k, -np.inf)
    np.maximum.at(longest, name, w)
    max_slice = _longest_occurrence(sl.event if which is None else sl.event[which],
                                    start if which is None else start[which], name, w, longest, k)
    if which is not None and len(which):
        max_slice = np.where(max_slice >= 0, which[np.maximum(max_slice, 0)], -1)

    present = np.flatnonzero(count)
    rank = name_rank(t)
    present = present[np.lexsort((rank[present], -count[present], -wall_sum[present]))]
    shown, rest = present[:limit], present[limit:]
    rows = [{
        "name": name_text(t.names[n]),
        "count": int(count[n]),
        "wall_us": float(wall_sum[n]),
        "self_us": float(self_sum[n]),
        "avg_us": float(wall_sum[n] / count[n]),
        "max_us": float(longest[n]),
        "max_i": int(sl.event[max_slice[n]]),
        "max_ts": float(start[max_slice[n]]),
        "clipped": int(clipped[n]),
    } for n in shown.tolist()]
    slice_tracks = sl.track if which is None else sl.track[which]
    return {
        "window": list(window) if window is not None else None,
        "pid": pid,
        "tid": tid,
        "slices": int(len(name)),
        "tracks": int(np.count_nonzero(np.bincount(slice_tracks, minlength=len(t.tracks)))) if len(name) else 0,
        "names": int(len(present)),
        "clipped": int(np.count_nonzero(c)),
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
