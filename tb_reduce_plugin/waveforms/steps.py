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

`unaccounted` is the step's time that no op on the step's own thread (the track of
its marker) covers: the union of that thread's slices inside the step, less the step
markers and the slices that only wrap work (user annotations such as
`record_function`, Python frames: `categories.wrappers`), taken from the step time.
Why this series: a stall (a `sleep`, a blocking read, a lock) inside a
`record_function("data")` adds time to a step but no op, and in a run whose steps
drift by seconds it need not make the step one of the slowest; step time minus the
ops on the thread shows it at once. It exists only when the markers are on a host
thread (an XProf "Steps" line holds nothing but steps).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from ..model import EventTable
from ..reduce.reduction import slices_of
from .categories import CATEGORIES, DEVICE_IDLE, NONE, UNACCOUNTED, backward_tracks, classify, device_tracks, wrappers

PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
STEPS_LINE = "Steps"
SLOWEST = 3  # steps marked as the slowest, at most
SLOW_MAD, SLOW_FRACTION = 3.0, 0.05  # a slow step: above median + max(3·MAD, 5 % of the median)
UNACCOUNTED_MAD, UNACCOUNTED_OF_STEP = 5.0, 0.10  # unaccounted time that stands out (`unaccounted_stands_out`)
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
        """Indices of the steps that stand out as slow, the slowest first (ties: the earlier
        step), at most `k`: a step time above median + max(3·MAD, 5 % of the median) of the
        run's finite step times. Why a robust margin, not the `k` largest: every run has
        a slowest step, and in steady runs it is noise (104.5 ms against a median of 104),
        as every point of a three-step window would be; marking those points the eye at
        nothing. None stands out: an empty list."""
        return _stand_out(self.step_time_ms, k, lambda med, mad: med + max(SLOW_MAD * mad, SLOW_FRACTION * med))

    @property
    def unaccounted_ms(self) -> Optional[np.ndarray]:
        """Per step, the time no op on the step's thread covers (None where there is no such series)."""
        return self.busy_ms.get(UNACCOUNTED)

    def unaccounted_stands_out(self, k: int = SLOWEST) -> list[int]:
        """Indices of the steps whose unaccounted time stands out, the largest first, at most
        `k`: above the run's median unaccounted time by more than 10 % of the median step time
        and by more than 5·MAD of the unaccounted times. The first bound keeps a run's steady
        share of time outside ops (a GPU run's host waiting on the device) from being news,
        and a few ms of jitter in a 100 ms run from being a stall; the second asks it be an
        outlier among the run's own steps."""
        u = self.unaccounted_ms
        if u is None or not len(u):
            return []
        times = self.step_time_ms[np.isfinite(self.step_time_ms)]
        if not len(times):
            return []
        step = float(np.median(times))
        return _stand_out(u, k, lambda med, mad: med + max(UNACCOUNTED_MAD * mad, UNACCOUNTED_OF_STEP * step))

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
                "slowest": self.slowest(), "unaccounted_stands_out": self.unaccounted_stands_out()}

    def rows(self) -> tuple[list[str], list[list[Any]]]:
        """CSV header and rows: `step, start_us, step_time_ms, <category>_ms…`."""
        header = ["step", "start_us", *self.series]
        cols = [self.step_time_ms.tolist(), *(v.tolist() for v in self.busy_ms.values())]
        rows = [[_int(s), _us(a), *(_ms(c[i]) for c in cols)]
                for i, (s, a) in enumerate(zip(self.step.tolist(), self.start_us.tolist()))]
        return header, rows


def _stand_out(values: np.ndarray, k: int, bound: Callable[[float, float], float]) -> list[int]:
    """Indices of the finite values above `bound(median, MAD)` of the finite values, the
    largest first (ties: the earlier index), at most `k`."""
    ok = np.isfinite(values)
    if not ok.any():
        return []
    v = values[ok]
    med = float(np.median(v))
    mad = float(np.median(np.abs(v - med)))
    over = np.flatnonzero(ok & (values > bound(med, mad)))
    order = np.lexsort((over, -values[over]))
    return over[order][:k].tolist()


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
    own = int(sl.track[rows[0]])
    if not on_device[own]:
        threads = backward_tracks(t, sl.track, sl.name) & ~on_device
        threads &= np.fromiter((pid == t.tracks[own][0] for pid, _ in t.tracks), dtype=bool, count=len(t.tracks))
        threads[own] = True
        ops = threads[sl.track] & ~wrappers(t, sl.event, sl.name)
        ops[rows] = False  # the step markers themselves
        busy[UNACCOUNTED] = np.maximum(end - start - _covered(*_union(sl.start[ops], sl.end[ops]), start, end),
                                       0.0) / 1000.0
    return StepSeries(numbers, start, end, busy, marker=marker, track=t.tracks[own])


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
