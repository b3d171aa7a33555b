"""Per-step series derived from a trace: step time and busy time per category.

Data in (an `EventTable`), points out (`StepSeries`), in one vectorised pass over
the slices: no per-event Python. The live sidecar writes these and the dashboard's
waveform panel polls them; docs/SEMANTICS.md ("Waveforms") is the contract.

Steps come only from markers real profilers write — PyTorch's `ProfilerStep#N`
slices, slices carrying a `step_num` arg or stat (JAX's and TensorFlow's
`StepTraceAnnotation`), XProf's "Steps" lines — on ONE track (the main thread: a
host track before a device one, then the track with the most markers). A trace
without them has no steps, and says so: steps are never invented.

A step is its marker's extent. Busy time of a category in a step is the length of
the union of that category's slices (`categories.RULES`) inside the step, so nested
or overlapping slices count once. `device_idle` is the step's time no device slice
of any category covers; it exists only for traces with device tracks.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ..model import EventTable
from ..reduction import slices_of
from .categories import CATEGORIES, DEVICE_IDLE, NONE, classify, device_tracks

PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
STEPS_LINE = "Steps"
SLOWEST = 3  # steps marked as the slowest
MARKER_PYTORCH, MARKER_STEP_NUM, MARKER_STEPS_LINE = "ProfilerStep#N", "step_num", "Steps line"
NO_MARKERS = ("no step markers: the trace has no ProfilerStep#N slices, no slices with a step_num "
              "(StepTraceAnnotation) and no XProf Steps line")


@dataclass
class StepSeries:
    """One row per step, in time order (a step number may repeat or go back: kept as written)."""

    step: np.ndarray  # float64 step numbers (integers in practice)
    start_us: np.ndarray
    end_us: np.ndarray
    busy_ms: dict[str, np.ndarray] = field(default_factory=dict)  # category -> ms per step
    marker: Optional[str] = None
    reason: Optional[str] = None  # why there are no steps
    track: Optional[tuple] = None  # (pid, tid) of the markers

    def __len__(self) -> int:
        return len(self.step)

    @property
    def step_time_ms(self) -> np.ndarray:
        return (self.end_us - self.start_us) / 1000.0

    @property
    def series(self) -> list[str]:
        """Names of the series, as columns and in the dashboard: `step_time_ms`, `<category>_ms`."""
        return ["step_time_ms", *(f"{c}_ms" for c in self.busy_ms)]

    def slowest(self, k: int = SLOWEST) -> list[int]:
        """Indices of the `k` slowest steps, slowest first (ties: the earlier step)."""
        if not len(self):
            return []
        order = np.lexsort((np.arange(len(self)), -self.step_time_ms))
        return order[:k].tolist()

    def to_json(self) -> dict[str, Any]:
        """The shape of `tb-reduce waveforms --format json` and the `waveforms` route."""
        times = self.step_time_ms.tolist()
        busy = {c: v.tolist() for c, v in self.busy_ms.items()}
        steps = [
            {"step": _int(s), "start_us": _us(a), "end_us": _us(b), "step_time_ms": _ms(ms),
             "busy_ms": {c: _ms(v[i]) for c, v in busy.items()}}
            for i, (s, a, b, ms) in enumerate(zip(self.step.tolist(), self.start_us.tolist(),
                                                  self.end_us.tolist(), times))
        ]
        return {"marker": self.marker, "reason": self.reason, "series": self.series, "steps": steps,
                "slowest": self.slowest()}

    def rows(self) -> tuple[list[str], list[list[Any]]]:
        """CSV header and rows: `step, start_us, step_time_ms, <category>_ms…`."""
        header = ["step", "start_us", *self.series]
        cols = [self.step_time_ms.tolist(), *(v.tolist() for v in self.busy_ms.values())]
        rows = [[_int(s), _us(a), *(_ms(c[i]) for c in cols)]
                for i, (s, a) in enumerate(zip(self.step.tolist(), self.start_us.tolist()))]
        return header, rows


def _int(x: float) -> Any:
    return int(x) if x == x and float(x).is_integer() else x


def _ms(x: float) -> Optional[float]:
    """ms to ns precision (the finest any profiler records); a non-finite time (a hostile
    trace's events at ±1e308) is None, so the JSON stays strict."""
    return round(x, 6) if math.isfinite(x) else None


def _us(x: float) -> Optional[float]:
    return x if math.isfinite(x) else None


def derive(t: EventTable) -> StepSeries:
    """The per-step series of a trace (see the module docstring)."""
    sl = slices_of(t)
    on_device = device_tracks(t)
    marks = _markers(t, sl.event, sl.track, sl.name, on_device)
    if marks is None:
        empty = np.zeros(0)
        return StepSeries(empty, empty, empty, reason=NO_MARKERS)
    rows, numbers, marker = marks
    order = np.lexsort((sl.event[rows], sl.start[rows]))  # time order; file order on ties
    rows, numbers = rows[order], numbers[order]
    start, end = sl.start[rows], sl.end[rows]
    category = classify(t, sl.event, sl.track, sl.name, on_device)
    busy: dict[str, np.ndarray] = {}
    for k, name in enumerate(CATEGORIES):
        mine = category == k
        busy[name] = _covered(*_union(sl.start[mine], sl.end[mine]), start, end) / 1000.0
    if on_device.any():
        work = (category != NONE) & on_device[sl.track]
        busy[DEVICE_IDLE] = (end - start - _covered(*_union(sl.start[work], sl.end[work]), start, end)) / 1000.0
    return StepSeries(numbers, start, end, busy, marker=marker, track=t.tracks[int(sl.track[rows[0]])])


def _markers(t: EventTable, events: np.ndarray, tracks: np.ndarray, names: np.ndarray,
             on_device: np.ndarray) -> Optional[tuple[np.ndarray, np.ndarray, str]]:
    """Slice rows of the step markers on the chosen track, their step numbers, and their kind."""
    # PyTorch: the step number is in the name.
    numbers_by_name = np.full(len(t.names), np.nan)
    used = np.zeros(len(t.names), dtype=bool)
    used[names] = True
    for i in np.flatnonzero(used).tolist():
        v = t.names[i]
        m = PROFILER_STEP.match(v) if isinstance(v, str) else None
        if m:
            numbers_by_name[i] = float(m.group(1))
    rows = np.flatnonzero(~np.isnan(numbers_by_name[names]))
    if len(rows):
        return _on_one_track(rows, numbers_by_name[names[rows]], tracks, on_device) + (MARKER_PYTORCH,)
    # StepTraceAnnotation: the step number is the event's step_num.
    if len(t.step_event):
        at = np.searchsorted(t.step_event, events)
        at = np.minimum(at, len(t.step_event) - 1)
        rows = np.flatnonzero(t.step_event[at] == events)
        if len(rows):
            return _on_one_track(rows, t.step_value[at[rows]], tracks, on_device) + (MARKER_STEP_NUM,)
    # XProf: a device plane's "Steps" line, whose events are named by their step number.
    steps_tracks = np.zeros(len(t.tracks), dtype=bool)
    for i, name in t.thread_names.items():
        steps_tracks[i] = name == STEPS_LINE
    rows = np.flatnonzero(steps_tracks[tracks])
    if len(rows):
        numbers = np.asarray([_number(t.names[i]) for i in names[rows].tolist()])
        keep = ~np.isnan(numbers)
        if keep.any():
            return _on_one_track(rows[keep], numbers[keep], tracks, on_device) + (MARKER_STEPS_LINE,)
    return None


def _number(v: Any) -> float:
    try:
        return float(v) if isinstance(v, (str, int, float)) and not isinstance(v, bool) else np.nan
    except ValueError:
        return np.nan


def _on_one_track(rows: np.ndarray, numbers: np.ndarray, tracks: np.ndarray,
                  on_device: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The markers of one track: a host track before a device one, then the most markers,
    then the lowest track id."""
    trk = tracks[rows]
    ids, counts = np.unique(trk, return_counts=True)
    best = ids[np.lexsort((ids, -counts, on_device[ids]))[0]]
    keep = trk == best
    return rows[keep], numbers[keep]


def _union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as sorted, disjoint intervals (vectorised: a running max)."""
    if not len(start):
        return start, end
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], reach[last]


def _covered(gs: np.ndarray, ge: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Length of [a_i, b_i] covered by the disjoint sorted intervals [gs, ge], per i."""
    if not len(gs):
        return np.zeros(len(a))
    lengths = ge - gs
    before = np.concatenate(([0.0], np.cumsum(lengths)))

    def upto(x: np.ndarray) -> np.ndarray:  # covered length of (-inf, x]
        k = np.searchsorted(gs, x, side="right")  # intervals starting at or before x
        j = np.maximum(k - 1, 0)
        part = np.clip(x - gs[j], 0.0, lengths[j])
        return np.where(k > 0, before[j] + part, 0.0)

    return np.maximum(upto(b) - upto(a), 0.0)
