"""The per-name side of a comparison: each trace's exact range table joined by name, and
the per-step sums of the names a gate's pattern matches.

The table of each side is `query.aggregate` over its chosen steps' time range (slices
clipped to it, folded events included: the index holds every one), all names. Where both
sides have steps, count, wall and self time are divided by each side's number of steps,
so two runs of different lengths compare per step; average and longest stay as they are.
Rows are joined by name text, ordered by the size of the change in self time (ties by
name), and a name found on one side only is marked so. Step markers are flagged as
markers and listed after the names of work — what they measure is the step time, which
the series compare — and numbered ones are joined as one name whatever their number:
PyTorch's `ProfilerStep#N` (→ `ProfilerStep#*`), the names of the slices a trace marks
with a `step_num` (JAX's and TensorFlow's `StepTraceAnnotation`), and Kineto's span of the
whole profiling session (`PyTorch Profiler (N)`, all self time on a track of its own,
which would otherwise head every table).

A gate's name condition compares medians over the steps (`per_step_sums`): each slice
counts in the step its start falls in (the latest-starting step that starts at or
before it and has not ended), with its whole duration and its self time (its duration
less its direct children's, at least 0), whatever track it is on — a kernel counts in
the step whose host code launched it as long as it starts inside that step.
"""

from __future__ import annotations

import re
from typing import Any, Optional

import numpy as np

from ..model.table import EventTable
from ..query.aggregate import aggregate
from ..query.nesting import children_durations
from ..query.search import NameQuery, name_text
from ..reduce import shared
from ..reduce.shared import slices_of

FIELDS = ("count", "wall_us", "self_us")
# Numbered markers joined as one name: (pattern, the name they are joined under).
MARKERS = ((re.compile(r"^ProfilerStep#\d+$"), "ProfilerStep#*"),
           (re.compile(r"^PyTorch Profiler \(\d+\)$"), "PyTorch Profiler (*)"))


def name_table(t: EventTable, window: Optional[tuple[float, float]]) -> dict[str, dict[str, float]]:
    """Every name's count, wall, self, average and longest in `window` (all: None), by name."""
    lo, hi = window if window is not None else (None, None)
    out: dict[str, dict[str, float]] = {}
    stepped = {name_text(t.names[k]) for k in np.unique(np.asarray(t.name)[np.asarray(t.step_event)]).tolist()}
    for r in aggregate(t, lo, hi, limit=None)["rows"]:
        key = marker_name(r["name"]) or r["name"]
        got = out.get(key)
        if got is None:
            out[key] = {k: r[k] for k in ("count", "wall_us", "self_us", "avg_us", "max_us")}
            out[key]["marker"] = key in _JOINED or key in stepped
        else:  # another number of the same marker
            for k in FIELDS:
                got[k] += r[k]
            got["max_us"] = max(got["max_us"], r["max_us"])
            got["avg_us"] = got["wall_us"] / got["count"]
    return out


def marker_name(name: str) -> Optional[str]:
    """The name a numbered marker is joined under (None: not a marker)."""
    for pattern, joined_as in MARKERS:
        if pattern.match(name):
            return joined_as
    return None


def joined(base: dict[str, dict[str, float]], cand: dict[str, dict[str, float]], base_steps: Optional[int],
           cand_steps: Optional[int]) -> list[dict[str, Any]]:
    """The two tables joined by name, per step where both counts of steps are given,
    largest change in self time first."""
    rows = []
    for name in set(base) | set(cand):
        a, b = _scaled(base.get(name), base_steps), _scaled(cand.get(name), cand_steps)
        sa, sb = (a or {}).get("self_us", 0.0), (b or {}).get("self_us", 0.0)
        rows.append({
            "name": name,
            "only_in": "base" if b is None else "candidate" if a is None else None,
            "base": _public(a),
            "candidate": _public(b),
            "delta_self_us": sb - sa,
            "ratio_self": (sb / sa) if sa > 0 else None,
            "marker": bool((a or {}).get("marker") or (b or {}).get("marker")),
        })
    rows.sort(key=lambda r: (r["marker"], -abs(r["delta_self_us"]), r["name"]))
    return rows


_JOINED = frozenset(j for _, j in MARKERS)


def _scaled(row: Optional[dict[str, float]], steps: Optional[int]) -> Optional[dict[str, float]]:
    if row is None:
        return None
    if not steps:
        return dict(row)
    return {k: (v / steps if k in FIELDS else v) for k, v in row.items()}


def _public(row: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    return None if row is None else {k: v for k, v in row.items() if k != "marker"}


def matching_names(t: EventTable, query: NameQuery) -> np.ndarray:
    """A flag per name id of `t`: whether `query` matches the name (RE2 once per name)."""
    if not len(t.names):
        return np.zeros(0, dtype=bool)
    found, _ = query.matches(list(t.names), seconds=float("inf"))  # every name: a gate skips none
    return found


def per_step_sums(t: EventTable, starts: np.ndarray, ends: np.ndarray, match: np.ndarray) -> dict[str, np.ndarray]:
    """Per step (`starts`/`ends` in µs, in any order): how many slices whose name id `match`
    flags start in it, their wall time and their self time (µs). A chunk of slices at a
    time; their children's time is one number a slice, in a scratch file where the table
    has a folder."""
    k = len(starts)
    out = {"count": np.zeros(k, dtype=np.int64), "wall_us": np.zeros(k), "self_us": np.zeros(k)}
    sl = slices_of(t)
    n = len(sl)
    if not n or not k or not match.any():
        return out
    by_start = np.argsort(starts, kind="stable")
    s_sorted, e_sorted = starts[by_start], ends[by_start]
    spans = [(a, min(a + shared.CHUNK_SLICES, n)) for a in range(0, n, shared.CHUNK_SLICES)]
    with children_durations(t) as children:
        for a, b in spans:
            rows = np.flatnonzero(match[np.asarray(sl.name[a:b])])
            if not len(rows):
                continue
            st = np.asarray(sl.start[a:b])[rows]
            j = np.searchsorted(s_sorted, st, side="right") - 1
            inside = (j >= 0) & (st < e_sorted[np.maximum(j, 0)])
            rows, step = rows[inside], by_start[j[inside]]
            dur = _finite(np.asarray(sl.dur[a:b])[rows])
            own = np.maximum(dur - children[a:b][rows], 0.0)
            out["count"] += np.bincount(step, minlength=k)
            out["wall_us"] += np.bincount(step, weights=dur, minlength=k)
            out["self_us"] += np.bincount(step, weights=own, minlength=k)
    return out


def _finite(a: np.ndarray) -> np.ndarray:
    """Durations a sum can take: a NaN or infinite one (a hostile trace) as 0."""
    return np.where(np.isfinite(a), a, 0.0)
