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
from typing import Any, Callable, Iterator, Optional

import numpy as np

from ..model.mapped import Appended
from ..model.slices import SliceTable
from ..model.sorting import order_by
from ..model.table import EventTable
from ..reduce.shared import slices_of
from .categories import CATEGORIES, DEVICE_IDLE, NONE, UNACCOUNTED, SliceKinds, device_tracks

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
    # `memory_peak_mb_<device>` -> MB per step (`waveforms.memory`; Kineto's `[memory]` events)
    memory_mb: dict[str, np.ndarray] = field(default_factory=dict)
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
        """Names of the series, as columns and in the dashboard: `step_time_ms`, `<category>_ms`,
        and `memory_peak_mb_<device>` where the trace records memory."""
        return ["step_time_ms", *(f"{c}_ms" for c in self.busy_ms), *self.memory_mb]

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
        memory = {c: v.tolist() for c, v in self.memory_mb.items()}
        steps = [
            {"step": _int(s), "start_us": _us(a), "end_us": _us(b), "step_time_ms": _ms(ms),
             "busy_ms": {c: _ms(v[i]) for c, v in busy.items()},
             **({"memory_mb": {c: _ms(v[i]) for c, v in memory.items()}} if memory else {})}
            for i, (s, a, b, ms) in enumerate(zip(self.step.tolist(), self.start_us.tolist(),
                                                  self.end_us.tolist(), times))
        ]
        return {"marker": self.marker, "reason": self.reason, "series": self.series, "steps": steps,
                "slowest": self.slowest(), "unaccounted_stands_out": self.unaccounted_stands_out()}

    def rows(self) -> tuple[list[str], list[list[Any]]]:
        """CSV header and rows: `step, start_us, step_time_ms, <category>_ms…, memory_peak_mb_<device>…`."""
        header = ["step", "start_us", *self.series]
        cols = [self.step_time_ms.tolist(), *(v.tolist() for v in self.busy_ms.values()),
                *(v.tolist() for v in self.memory_mb.values())]
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
    """The per-step series of a trace (see the module docstring).

    Read a chunk of slices at a time: the markers in slice order, then every slice once in
    time order (`sorting.order_by`, into the table's scratch folder when it has one), each
    category's busy intervals merged as they come (`_Union`), so what is held is a chunk,
    a flag per name and the merged intervals, not ~60 B a slice."""
    sl = slices_of(t)
    on_device = device_tracks(t)
    used = np.zeros(len(t.names), dtype=bool)
    for c in _chunks(len(sl)):
        used[sl.name[c]] = True
    marks = _markers(t, sl, used, on_device)
    if marks is None:
        empty = np.zeros(0)
        return StepSeries(empty, empty, empty, reason=NO_MARKERS)
    rows, numbers, marker = marks
    order = np.lexsort((sl.event[rows], sl.start[rows]))  # time order; file order on ties
    rows, numbers = rows[order], numbers[order]
    start, end = sl.start[rows], sl.end[rows]
    kinds = SliceKinds(t, used, on_device)
    own = int(sl.track[rows[0]])
    threads = None  # the host threads whose ops count as accounted for
    if not on_device[own]:
        threads = np.zeros(len(t.tracks), dtype=bool)
        for c in _chunks(len(sl)):
            names = sl.name[c]
            threads[np.unique(sl.track[c][kinds.backward[names]])] = True
        threads &= ~on_device
        threads &= np.fromiter((pid == t.tracks[own][0] for pid, _ in t.tracks), dtype=bool, count=len(t.tracks))
        threads[own] = True
    marker_row = np.zeros(0, dtype=np.int64) if threads is None else np.sort(rows)
    unions = {k: _Union(t.scratch) for k in range(len(CATEGORIES))}
    device_work, host_ops = _Union(t.scratch), _Union(t.scratch)
    by_time = order_by(sl.start, None, None, t.scratch, CHUNK_ROWS, "the slices in time order")
    for c in _chunks(len(by_time)):
        r = np.asarray(by_time[c])
        ev, trk, names, s, e = sl.event[r], sl.track[r], sl.name[r], sl.start[r], sl.end[r]
        category = kinds.category(ev, trk, names)
        for k, u in unions.items():
            mine = category == k
            u.add(s[mine], e[mine])
        if on_device.any():
            work = (category != NONE) & on_device[trk]
            device_work.add(s[work], e[work])
        if threads is not None:
            ops = threads[trk] & ~kinds.wraps(ev, names)
            at = np.searchsorted(marker_row, r)
            ops &= ~((at < len(marker_row)) & (marker_row[np.minimum(at, len(marker_row) - 1)] == r))  # the markers
            host_ops.add(s[ops], e[ops])
    busy: dict[str, np.ndarray] = {}
    for k, name in enumerate(CATEGORIES):
        busy[name] = _covered(*unions[k].finish(), start, end) / 1000.0
    if on_device.any():
        busy[DEVICE_IDLE] = (end - start - _covered(*device_work.finish(), start, end)) / 1000.0
    if threads is not None:
        busy[UNACCOUNTED] = np.maximum(end - start - _covered(*host_ops.finish(), start, end), 0.0) / 1000.0
    return StepSeries(numbers, start, end, busy, marker=marker, track=t.tracks[own])


CHUNK_ROWS = 1 << 19  # slices read at once


def _chunks(n: int) -> Iterator[slice]:
    for a in range(0, n, CHUNK_ROWS):
        yield slice(a, min(a + CHUNK_ROWS, n))


class _Union:
    """The union of intervals given in order of their starts, part by part, as sorted
    disjoint intervals: a running max of the ends carried from part to part, so the result
    is `_union` of them all at once. The closed intervals go to `folder` once they are
    many (`mapped.Appended`)."""

    def __init__(self, folder: Optional[str]) -> None:
        self._closed = Appended(folder, {"start": np.float64, "end": np.float64}, "the busy intervals")
        self._open: Optional[tuple[float, float]] = None  # the last interval, still growing

    def add(self, s: np.ndarray, e: np.ndarray) -> None:
        if not len(s):
            return
        new = np.empty(len(s), dtype=bool)
        if self._open is not None:
            reach = np.maximum.accumulate(np.concatenate(([self._open[1]], e)))[1:]
            new[0] = s[0] > self._open[1]
        else:
            reach = np.maximum.accumulate(e)
            new[0] = True
        new[1:] = s[1:] > reach[:-1]
        first = np.flatnonzero(new)
        starts = s[first]
        ends = reach[np.append(first[1:] - 1, len(s) - 1)] if len(first) else reach[:0]
        if self._open is not None:
            if len(first) == 0 or first[0] != 0:  # the open one goes on into this part
                starts = np.concatenate(([self._open[0]], starts))
                ends = np.concatenate(([reach[first[0] - 1] if len(first) else reach[-1]], ends))
            else:
                self._closed.append({"start": np.array([self._open[0]]), "end": np.array([self._open[1]])})
        self._closed.append({"start": starts[:-1], "end": ends[:-1]})
        self._open = (float(starts[-1]), float(ends[-1]))

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        if self._open is not None:
            self._closed.append({"start": np.array([self._open[0]]), "end": np.array([self._open[1]])})
            self._open = None
        out = self._closed.finish()
        return out["start"], out["end"]


def _markers(t: EventTable, sl: SliceTable, used: np.ndarray,
             on_device: np.ndarray) -> Optional[tuple[np.ndarray, np.ndarray, str]]:
    """Slice rows of the step markers on the chosen track, their step numbers, and their
    kind (found a chunk of slices at a time)."""
    # PyTorch: the step number is in the name.
    numbers_by_name = np.full(len(t.names), np.nan)
    for i in np.flatnonzero(used).tolist():
        v = t.names[i]
        m = PROFILER_STEP.match(v) if isinstance(v, str) else None
        if m:
            numbers_by_name[i] = float(m.group(1))
    is_step = ~np.isnan(numbers_by_name)
    rows = _rows_where(len(sl), lambda c: is_step[sl.name[c]])
    if len(rows):
        return _on_one_track(rows, numbers_by_name[sl.name[rows]], sl.track, on_device) + (MARKER_PYTORCH,)
    # StepTraceAnnotation: the step number is the event's step_num.
    if len(t.step_event):
        def annotated(c: slice) -> np.ndarray:
            events = np.asarray(sl.event[c])
            at = np.minimum(np.searchsorted(t.step_event, events), len(t.step_event) - 1)
            return t.step_event[at] == events
        rows = _rows_where(len(sl), annotated)
        if len(rows):
            at = np.minimum(np.searchsorted(t.step_event, sl.event[rows]), len(t.step_event) - 1)
            return _on_one_track(rows, t.step_value[at], sl.track, on_device) + (MARKER_STEP_NUM,)
    # XProf: a device plane's "Steps" line, whose events are named by their step number.
    steps_tracks = np.zeros(len(t.tracks), dtype=bool)
    for i, name in t.thread_names.items():
        steps_tracks[i] = name == STEPS_LINE
    rows = _rows_where(len(sl), lambda c: steps_tracks[sl.track[c]])
    if len(rows):
        numbers = np.asarray([_number(t.names[i]) for i in sl.name[rows].tolist()])
        keep = ~np.isnan(numbers)
        if keep.any():
            return _on_one_track(rows[keep], numbers[keep], sl.track, on_device) + (MARKER_STEPS_LINE,)
    return None


def _rows_where(n: int, where: Callable[[slice], np.ndarray]) -> np.ndarray:
    """The slice rows for which `where` (of a chunk of rows) holds, a chunk at a time."""
    parts = [np.flatnonzero(where(c)) + c.start for c in _chunks(n)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


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


def _covered(gs: np.ndarray, ge: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Length of [a_i, b_i] covered by the disjoint sorted intervals [gs, ge], per i.

    The intervals may be mapped and many: the covered length before each interval asked
    for is summed a chunk of intervals at a time, carried on in one sequential sum, so it
    is the same float as one `cumsum` over them all."""
    if not len(gs):
        return np.zeros(len(a))
    x = np.concatenate((a, b))
    k = np.searchsorted(gs, x, side="right")  # intervals starting at or before x
    j = np.maximum(k - 1, 0)
    before = _lengths_before(gs, ge, j)
    part = np.clip(x - gs[j], 0.0, ge[j] - gs[j])
    upto = np.where(k > 0, before + part, 0.0)  # covered length of (-inf, x]
    return np.maximum(upto[len(a):] - upto[:len(a)], 0.0)


def _lengths_before(gs: np.ndarray, ge: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Per `j`: the summed lengths of intervals 0..j-1 (`np.cumsum` of them all, read at j)."""
    out = np.zeros(len(j))
    order = np.argsort(j, kind="stable")
    js = j[order]
    carry = 0.0
    for c in _chunks(len(gs)):
        lengths = np.asarray(ge[c]) - np.asarray(gs[c])
        sums = np.cumsum(np.concatenate(([carry], lengths)))  # sums[m]: the lengths before row c.start + m
        lo, hi = np.searchsorted(js, c.start, "left"), np.searchsorted(js, c.stop, "left")
        out[order[lo:hi]] = sums[js[lo:hi] - c.start]
        carry = float(sums[-1])
    return out
