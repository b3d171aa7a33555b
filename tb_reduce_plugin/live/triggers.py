"""Triggers: what makes the drive recorder keep a raw window (SPEC §7).

Everything the sidecar captures is kept reduced; a raw window is kept only when a
trigger fires on it. Three kinds, each given as a spec (`--trigger`, repeatable):

- `step:Kx` — a step took more than K × the median of the previous 20 steps. The
  previous steps span windows (`StepHistory`), so the first step of a window is
  judged against the last window's steps. A step with fewer than `MIN_HISTORY` (5)
  previous steps does not fire: a median of one or two steps is no baseline, and the
  first steps of a run (warm-up, compilation) are routinely slow.
- `stall:T` — while a step runs, no new slice begins for longer than T on the main
  thread (the track of the step markers) or on a device. Measured per step as the
  largest gap between consecutive slice starts inside it, counting the step's start
  and end as points (nested slices count: any start is a new event). A device's
  streams are measured together (a device stalls when none of its streams starts
  anything): one stream used for a single copy per step would otherwise fire on
  every step, though the device is busy.
- `name:REGEX:T` — a slice whose name matches REGEX (searched anywhere in it) lasted
  at least T. The duration follows the last `:`, so REGEX may hold colons
  (`name:aten::mm:300ms`). REGEX is compiled by RE2 exactly as the search route
  compiles a query (`query.search.compile_query`: RE2 syntax, at most 1,000
  characters, no control characters), and names are matched as the search matches
  them (a numeric name as its JSON text). Why RE2 and not Python's `re`: `re`
  backtracks, so `nccl.*AllReduce` on a 1 MB name of repeated "nccl" rescans the rest
  of the name from every "nccl" (quadratic: three such names stalled the sidecar for
  more than 240 s, deaf to SIGTERM); RE2 is linear in the name's length for every
  pattern, and refuses at compile time what would need backtracking (backreferences,
  look-around) or too much memory (`a{99999999999}`).

Units of T: ns, us (µs), ms, s. Comparisons: a step fires strictly above K × median,
a stall strictly longer than T, a name rule at T or longer (as the spec words them).

All measurements are vectorised over slices (one pass per trigger; a name trigger
selects the slices lasting at least T first, then evaluates its regex once per
distinct name among them, from the table's string table, and maps the answers back
to the slices by name id); only the (few) firings are built in Python. A trigger
reports at most `MAX_FIRINGS` firings per window: a window firing more often than
that is preserved anyway, and its report stays small.

`RateLimiter` keeps preserved evidence bounded, like Perfetto's trigger limits: per
trigger spec at most `max_per_hour` firings acted on in any hour, and none within
`cooldown_s` of the last one (defaults 6 per hour, 60 s: a recurring anomaly keeps
a few samples an hour instead of filling the disk with copies of itself).
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np

from ..errors import BadQuery, TraceError
from ..model import EventTable
from ..query.search import MAX_QUERY_CHARS, NameQuery, compile_query, name_text
from ..reduction import slices_of
from ..waveforms.categories import device_tracks
from ..waveforms.steps import MARKER_STEPS_LINE, StepSeries, derive

HISTORY = 20  # previous steps a step's time is compared with
MIN_HISTORY = 5  # fewer previous steps than this: no baseline, the step trigger does not fire
MAX_FIRINGS = 100  # per trigger and window
DEFAULT_TRIGGERS = ("step:2x", "stall:250ms")
DEFAULT_MAX_PER_HOUR = 6
DEFAULT_COOLDOWN_S = 60.0
_CHUNK_POINTS = 4_000_000  # stall: points handled per vectorised pass (bounds memory on overlapping steps)
_REPEAT = re.compile(r"\{(\d+(?:,\d*)?)\}")  # {n}, {n,}, {n,m}: repetition counts, as RE2 writes them
REASON_NAME_CHARS = 200  # of a slice's name in a firing's reason (a name may be megabytes long)

STEP, STALL, NAME = "step", "stall", "name"
_UNITS_US = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "μs": 1.0, "ms": 1e3, "s": 1e6}  # micro sign and Greek mu
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(ns|us|µs|μs|ms|s)\s*$")
_FACTOR = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*x\s*$")
_USAGE = "use step:Kx (e.g. step:2x), stall:DURATION (e.g. stall:250ms) or name:REGEX:DURATION (e.g. name:nccl:300ms)"


class TriggerError(TraceError):
    """A trigger spec that cannot be used; `str(err)` names the spec and what is wrong."""


@dataclass
class Firing:
    """One anomaly a trigger found: what, how much against which threshold, where and when."""

    trigger: str  # the spec as given
    kind: str  # step | stall | name
    value: float  # what was measured, ms
    threshold: float  # what it was compared with, ms
    start_us: float  # the anomalous interval, trace time
    end_us: float
    step: Optional[float]  # the step it happened in, or None
    reason: str
    track: Optional[str] = None  # where (stall, name): a thread or device, as a person reads it
    unit: str = "ms"

    def to_json(self) -> dict[str, Any]:
        """Strict JSON (non-finite numbers become null), for `anomaly.json`."""
        return {"trigger": self.trigger, "kind": self.kind, "value": _finite(self.value, 6),
                "threshold": _finite(self.threshold, 6), "unit": self.unit, "start_us": _finite(self.start_us),
                "end_us": _finite(self.end_us), "step": _step_number(self.step), "track": self.track,
                "reason": self.reason}


def _finite(x: float, digits: Optional[int] = None) -> Optional[float]:
    if not math.isfinite(x):
        return None
    return round(float(x), digits) if digits is not None else float(x)


def _step_number(x: Optional[float]) -> Any:
    if x is None or not math.isfinite(x):
        return None
    return int(x) if float(x).is_integer() else float(x)


class StepHistory:
    """The last `HISTORY` step times (ms) seen, across windows, oldest first.

    Only finite times are kept: a hostile or damaged step must not poison the median.
    """

    def __init__(self, times_ms: Iterable[float] = (), size: int = HISTORY) -> None:
        self._times: deque[float] = deque(maxlen=size)
        self.extend(times_ms)

    def extend(self, times_ms: Iterable[float]) -> None:
        self._times.extend(float(x) for x in times_ms if math.isfinite(x))

    def times(self) -> list[float]:
        return list(self._times)

    @property
    def size(self) -> int:
        """How many step times it keeps (`HISTORY`)."""
        return self._times.maxlen or HISTORY

    def __len__(self) -> int:
        return len(self._times)

    def to_json(self) -> list[float]:
        """For a sidecar that keeps its baseline across restarts."""
        return self.times()

    @classmethod
    def from_json(cls, doc: Any) -> StepHistory:
        if not isinstance(doc, list):
            return cls()
        return cls(float(x) for x in doc if isinstance(x, (int, float)) and not isinstance(x, bool))


@dataclass(frozen=True)
class Trigger:
    """A parsed spec; `check` finds its firings in one window (see the module docstring)."""

    spec: str
    kind: str
    factor: float = 0.0  # step: K
    threshold_us: float = 0.0  # stall, name: T
    pattern: Optional[str] = None  # name: REGEX
    query: Optional[NameQuery] = field(default=None, compare=False, repr=False)  # name: REGEX compiled by RE2

    def check(self, table: EventTable, steps: StepSeries, history: StepHistory) -> list[Firing]:
        """The firings in `table` (whose steps are `steps`); `history` is read, never changed."""
        if self.kind == STEP:
            out = _check_step(self, steps, history)
        elif self.kind == STALL:
            out = _check_stall(self, table, steps)
        else:
            out = _check_name(self, table, steps)
        return out[:MAX_FIRINGS]


def parse_trigger(spec: str) -> Trigger:
    """A trigger from its spec; `TriggerError` (one line, naming the spec) when it is not one."""
    if not isinstance(spec, str) or not spec.strip():
        raise TriggerError(f"empty trigger spec; {_USAGE}")
    text = spec.strip()
    kind, sep, rest = text.partition(":")
    if not sep:
        raise TriggerError(f"trigger {spec!r}: no ':'; {_USAGE}")
    if kind == STEP:
        m = _FACTOR.match(rest)
        if not m:
            raise TriggerError(f"trigger {spec!r}: the step trigger wants a factor like 2x or 1.5x, not {rest!r}")
        factor = float(m.group(1))
        if not (factor > 0 and math.isfinite(factor)):
            raise TriggerError(f"trigger {spec!r}: the factor must be above 0")
        return Trigger(text, STEP, factor=factor)
    if kind == STALL:
        return Trigger(text, STALL, threshold_us=_duration_us(spec, rest))
    if kind == NAME:
        pattern, sep, dur = rest.rpartition(":")
        if not sep:
            raise TriggerError(f"trigger {spec!r}: the name trigger wants name:REGEX:DURATION, e.g. name:nccl:300ms")
        if not pattern:
            raise TriggerError(f"trigger {spec!r}: the regular expression is empty")
        return Trigger(text, NAME, threshold_us=_duration_us(spec, dur), pattern=pattern,
                       query=_compile(spec, pattern))
    raise TriggerError(f"trigger {spec!r}: unknown kind {kind!r}; {_USAGE}")


def _compile(spec: str, pattern: str) -> NameQuery:
    """`pattern` compiled by RE2 as the search route compiles a regex query (see the module docstring)."""
    if len(pattern) > MAX_QUERY_CHARS:
        raise TriggerError(f"trigger {spec[:40]!r}…: the regular expression is {len(pattern):,} characters long; "
                           f"at most {MAX_QUERY_CHARS:,} are taken")
    try:
        query = compile_query(pattern, regex=True)
    except BadQuery as exc:
        raise TriggerError(f"trigger {spec!r}: {exc}") from None
    # RE2 reads a repetition count too big for an int (`a{99999999999}`) as literal text, though
    # it refuses `a{1001}`: compiled with such counts cut to 1001, a pattern that fails meant them
    # as a repetition (escaped or in a class, `{...}` stays literal and the probe compiles).
    probe = _REPEAT.sub(lambda m: "{" + ",".join(n if len(n) <= 4 else "1001" for n in m.group(1).split(",")) + "}",
                        pattern)
    if probe != pattern:
        try:
            compile_query(probe, regex=True)
        except BadQuery:
            raise TriggerError(f"trigger {spec!r}: not a regular expression RE2 takes: a repetition count is over "
                               f"1000 (RE2's limit)") from None
    return query


def _duration_us(spec: str, text: str) -> float:
    m = _DURATION.match(text)
    if not m:
        raise TriggerError(f"trigger {spec!r}: {text!r} is not a duration like 250ms (units ns, us, ms, s)")
    us = float(m.group(1)) * _UNITS_US[m.group(2)]
    if not (us > 0 and math.isfinite(us)):
        raise TriggerError(f"trigger {spec!r}: the duration must be above 0")
    return us


def parse_triggers(specs: Optional[Sequence[str]]) -> list[Trigger]:
    """The given specs, or the defaults when none are given (giving any replaces them)."""
    return [parse_trigger(s) for s in (specs or DEFAULT_TRIGGERS)]


def evaluate(triggers: Sequence[Trigger], index_or_table: Any, history: StepHistory,
             steps: Optional[StepSeries] = None) -> list[Firing]:
    """Run every trigger on one window (a `TraceIndex` or an `EventTable`), steps derived once
    (or given: the window writer derived them already).

    Returns the firings, trigger by trigger in the order given, each trigger's in time
    order; then appends the window's steps to `history`, so the next window's steps
    are judged against them.
    """
    table: EventTable = getattr(index_or_table, "table", index_or_table)
    steps = derive(table) if steps is None else steps
    out: list[Firing] = []
    for trigger in triggers:
        out.extend(trigger.check(table, steps, history))
    history.extend(steps.step_time_ms.tolist())
    return out


# ---- step:Kx -------------------------------------------------------------------------


def _check_step(trigger: Trigger, steps: StepSeries, history: StepHistory) -> list[Firing]:
    n = len(steps)
    if not n:
        return []
    times = steps.step_time_ms
    size = history.size
    past = np.asarray(history.times(), dtype=np.float64)
    # Row i: the `size` times before window step i (the history, then this window's
    # earlier steps), NaN-padded where fewer exist.
    seq = np.concatenate((np.full(size, np.nan), past, np.where(np.isfinite(times), times, np.nan)))
    first = size + len(past)  # position of window step 0 in `seq`
    rows = np.lib.stride_tricks.sliding_window_view(seq, size)[first - size:first - size + n]
    count = np.count_nonzero(~np.isnan(rows), axis=1)
    ok = (count >= MIN_HISTORY) & np.isfinite(times)
    median = np.full(n, np.nan)
    if ok.any():
        median[ok] = np.nanmedian(rows[ok], axis=1)
    fire = np.flatnonzero(ok & (times > trigger.factor * median))
    out = []
    for i in fire.tolist():
        t, med, k = float(times[i]), float(median[i]), int(count[i])
        ratio = f"{t / med:.1f}×" if med > 0 else "∞×"
        step = float(steps.step[i])
        out.append(Firing(trigger.spec, STEP, t, trigger.factor * med, float(steps.start_us[i]), float(steps.end_us[i]),
                          step, f"step {_shown(step)} took {t:.1f} ms, {ratio} the median {med:.1f} ms of the "
                          f"previous {k} steps (threshold {trigger.factor:g}× = {trigger.factor * med:.1f} ms)"))
    return out


# ---- stall:T -------------------------------------------------------------------------


def _check_stall(trigger: Trigger, table: EventTable, steps: StepSeries) -> list[Firing]:
    """Per step and per place (the main thread, each device), the longest time without a new slice."""
    if not len(steps):
        return []
    sl = slices_of(table)
    on_device = device_tracks(table)
    has_slices = np.zeros(len(table.tracks), dtype=bool)
    has_slices[sl.track] = True
    places: list[tuple[str, np.ndarray]] = []  # (label, track mask)
    main = _track_id(table, steps.track)
    if main is not None and steps.marker != MARKER_STEPS_LINE and not on_device[main]:
        # An XProf "Steps" line holds only the markers: it is no thread that could stall.
        mask = np.zeros(len(table.tracks), dtype=bool)
        mask[main] = True
        places.append((f"the main thread, {_track_label(table, main)}", mask))
    pids = [p for p, _ in table.tracks]
    for pid in dict.fromkeys(pids[k] for k in np.flatnonzero(on_device & has_slices).tolist()):
        mask = on_device & has_slices & np.fromiter((p == pid for p in pids), dtype=bool, count=len(pids))
        places.append((f"device {_device_label(table, pid, mask)}", mask))
    out: list[Firing] = []
    step_time = steps.step_time_ms
    for label, mask in places:
        starts = np.sort(sl.start[mask[sl.track]])
        gap, at = _largest_gaps(starts, steps.start_us, steps.end_us)
        for i in np.flatnonzero(gap > trigger.threshold_us).tolist():
            g = float(gap[i]) / 1000.0
            step = float(steps.step[i])
            out.append(Firing(trigger.spec, STALL, g, trigger.threshold_us / 1000.0, float(at[i]), float(at[i] + gap[i]),
                              step, f"no new slice began on {label} for {g:.1f} ms during step {_shown(step)} "
                              f"({step_time[i]:.1f} ms; threshold {_ms(trigger.threshold_us)})", track=label))
    out.sort(key=lambda f: f.start_us)
    return out


def _largest_gaps(starts: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per interval [a_i, b_i]: the largest gap between consecutive points of {a_i, b_i} ∪
    (starts inside it), and where it begins. `starts` sorted. Vectorised: each interval's
    points become one segment of a flat array, sorted by (segment, time)."""
    n = len(a)
    gap, at = np.zeros(n), a.astype(np.float64).copy()
    lo = np.searchsorted(starts, a, side="left")
    hi = np.searchsorted(starts, b, side="right")
    counts = np.maximum(hi - lo, 0)
    i = 0
    while i < n:  # chunks of steps, so overlapping (hostile) steps cannot take unbounded memory
        fits = int(np.searchsorted(np.cumsum(counts[i:] + 2), _CHUNK_POINTS, side="right"))
        j = i + max(fits, 1)
        seg = np.arange(i, j)
        c = counts[i:j]
        total = int(c.sum())
        inner_seg = np.repeat(seg, c)
        offsets = np.arange(total) - np.repeat(np.cumsum(c) - c, c)
        inner = starts[np.repeat(lo[i:j], c) + offsets]
        seg_all = np.concatenate((seg, inner_seg, seg))
        val_all = np.concatenate((a[i:j], inner, b[i:j]))
        order = np.lexsort((val_all, seg_all))
        seg_all, val_all = seg_all[order], val_all[order]
        d = np.diff(val_all)
        same = seg_all[1:] == seg_all[:-1]
        d = np.where(same, d, -np.inf)
        best = np.lexsort((-d, seg_all[:-1]))  # per segment: largest gap first (the earliest on ties)
        first = np.ones(len(best), dtype=bool)
        first[1:] = seg_all[:-1][best][1:] != seg_all[:-1][best][:-1]
        top = best[first]
        owner = seg_all[:-1][top]
        gap[owner] = np.maximum(d[top], 0.0)
        at[owner] = val_all[:-1][top]
        i = j
    return gap, at


# ---- name:REGEX:T --------------------------------------------------------------------


def _check_name(trigger: Trigger, table: EventTable, steps: StepSeries) -> list[Firing]:
    """Slices lasting at least T whose name matches: RE2 once per distinct name among them."""
    sl = slices_of(table)
    if not len(sl):
        return []
    query = trigger.query if trigger.query is not None else _compile(trigger.spec, trigger.pattern or "")
    long_rows = np.flatnonzero(sl.dur >= trigger.threshold_us)  # NaN durations are never long enough
    if not len(long_rows):
        return []
    ids = np.unique(sl.name[long_rows])
    # Every name is matched (no deadline, unlike a search): RE2 is linear in the names' bytes,
    # which the window's parse has read already, and a skipped name would be a missed anomaly.
    found, _ = query.matches([table.names[k] for k in ids.tolist()], seconds=math.inf)
    match = np.zeros(len(table.names), dtype=bool)
    match[ids[found]] = True
    rows = long_rows[match[sl.name[long_rows]]]
    rows = rows[np.lexsort((sl.event[rows], sl.start[rows]))][:MAX_FIRINGS]
    in_step = _step_of(steps, sl.start[rows])
    out = []
    for r, s in zip(rows.tolist(), in_step.tolist()):
        ms = float(sl.dur[r]) / 1000.0
        label = _track_label(table, int(sl.track[r]))
        step = None if s < 0 else float(steps.step[s])
        where = "" if step is None else f" in step {_shown(step)}"
        out.append(Firing(trigger.spec, NAME, ms, trigger.threshold_us / 1000.0, float(sl.start[r]), float(sl.end[r]), step,
                          f"{_short_name(table.names[int(sl.name[r])])} lasted {ms:.1f} ms on {label}{where} (matches "
                          f"{trigger.pattern!r}; threshold {_ms(trigger.threshold_us)})", track=label))
    return out


# ---- helpers -------------------------------------------------------------------------


def _step_of(steps: StepSeries, t_us: np.ndarray) -> np.ndarray:
    """Index of the step holding each time (the latest started), -1 outside every step."""
    if not len(steps):
        return np.full(len(t_us), -1)
    k = np.searchsorted(steps.start_us, t_us, side="right") - 1
    kk = np.maximum(k, 0)
    return np.where((k >= 0) & (t_us <= steps.end_us[kk]), k, -1)


def _track_id(table: EventTable, track: Optional[tuple]) -> Optional[int]:
    if track is None:
        return None
    for k, tr in enumerate(table.tracks):
        if tr == track:
            return k
    return None


def _track_label(table: EventTable, k: int) -> str:
    pid, tid = table.tracks[k]
    name = table.thread_names.get(k)
    return f"{name} [pid {pid}, tid {tid}]" if isinstance(name, str) and name else f"pid {pid}, tid {tid}"


def _device_label(table: EventTable, pid: Any, mask: np.ndarray) -> str:
    name = table.process_names.get(pid)
    streams = int(mask.sum())
    what = f"{name} [pid {pid}]" if isinstance(name, str) and name else f"pid {pid}"
    return f"{what}, {streams} stream{'s' if streams != 1 else ''}"


def _short_name(value: Any) -> str:
    """A slice's name for a reason: quoted, cut at `REASON_NAME_CHARS` (a firing is one log line)."""
    text = name_text(value)
    if len(text) <= REASON_NAME_CHARS:
        return repr(text)
    return f"{text[:REASON_NAME_CHARS]!r}… ({len(text):,} characters)"


def _shown(step: float) -> str:
    return str(int(step)) if math.isfinite(step) and float(step).is_integer() else f"{step:g}"


def _ms(us: float) -> str:
    return f"{us / 1000.0:g} ms"


# ---- rate limits ---------------------------------------------------------------------


class RateLimiter:
    """Per trigger spec: at most `max_per_hour` firings acted on in any 3600 s, none
    within `cooldown_s` of the previous one. `now_s` is the caller's clock (use
    `time.monotonic()`); a clock that goes back starts that spec afresh."""

    def __init__(self, max_per_hour: int = DEFAULT_MAX_PER_HOUR, cooldown_s: float = DEFAULT_COOLDOWN_S) -> None:
        if isinstance(max_per_hour, bool) or not isinstance(max_per_hour, int) or max_per_hour < 1:
            raise TriggerError(f"at most per hour must be a whole number of 1 or more, not {max_per_hour!r}")
        if not (isinstance(cooldown_s, (int, float)) and math.isfinite(cooldown_s) and cooldown_s >= 0):
            raise TriggerError(f"the cool-down must be a number of seconds of 0 or more, not {cooldown_s!r}")
        self.max_per_hour = max_per_hour
        self.cooldown_s = float(cooldown_s)
        self._allowed: dict[str, deque[float]] = {}

    def allow(self, spec: Union[str, Trigger], now_s: float) -> bool:
        """Whether a firing of `spec` at `now_s` may be acted on; if so, it is counted."""
        key = spec.spec if isinstance(spec, Trigger) else spec
        past = self._allowed.setdefault(key, deque())
        if past and now_s < past[-1]:
            past.clear()
        while past and now_s - past[0] >= 3600.0:
            past.popleft()
        if past and now_s - past[-1] < self.cooldown_s:
            return False
        if len(past) >= self.max_per_hour:
            return False
        past.append(now_s)
        return True
