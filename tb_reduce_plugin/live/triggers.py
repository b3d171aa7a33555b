"""Triggers: what makes the drive recorder keep a raw window (SPEC §7).

Everything the sidecar captures is kept reduced; a raw window is kept only when a
trigger fires on it. Four kinds, each given as a spec (`--trigger`, repeatable):

- `step:Kx` — a step took more than K × the median of the previous 20 steps. The
  previous steps span windows (`StepHistory`), so the first step of a window is
  judged against the last window's steps. A step with fewer than `MIN_HISTORY` (5)
  previous steps does not fire: a median of one or two steps is no baseline. The
  baseline is a median, so the run's slow first steps (below) only raise it while
  they are among the previous steps: they can hide an anomaly then, never make one.
- `series:NAME:Kx` — a step's value of the per-step series NAME (`tb-reduce waveforms`'
  series: `communication_ms`, `unaccounted_ms`, `memory_peak_mb_cpu`, …; a category may
  be named without `_ms`) was more than K × its median over the previous 20 steps: the
  step trigger's rule on any series, with the same history, warm-up and runs (`step:Kx`
  is `series:step_time_ms:Kx`). A step whose value is missing (a category the window
  does not have, memory not recorded) is neither judged nor a baseline.
- `baseline:SERIES:+MARGIN` — with `--baseline RUN` (a trace of the run a change is
  measured against): the median over a window's judged steps of a per-step series
  exceeds the baseline run's median of it by more than MARGIN (`+10%`, `+5ms`, `+100MB`:
  the regression gate's conditions, `tb-reduce diff --fail-if`). One firing per window;
  a window needs `MIN_BASELINE_STEPS` (3) judged steps, so one slow step is no regression.
  The baseline's medians leave out its own first `WARMUP_STEPS` steps when it has more.
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

Warm-up. The first steps of a run are slow for reasons that are no anomaly (compilation,
allocator and cache warm-up, the first collective building its communicators, data
loader workers starting): a user's CPU torch loop fired `step:2x` on them. So the
first `WARMUP_STEPS` (5) steps of a run are never judged, by any trigger: no step,
stall or name firing is reported for them (a name firing outside every step still
is). They do count in the step baseline (see above). A run is the steps the sidecar
has seen since it first saw one, or since a step number fell more than `HISTORY` (20)
below the highest one seen: the training run was started again, or resumed from an
older checkpoint, and warms up again; the steps of the run before are then no
baseline (another batch size, another machine) and are forgotten. A smaller drop is
not a new run: windows of several hosts, or windows handed over out of order, go
back a few steps, and a profiler started afresh for each short window numbers its
steps from 0 every time (its windows would otherwise never leave the warm-up). The
count is `StepHistory`'s, kept with it across sidecar restarts.

Already judged steps. A file still being written is reduced as partial windows, then
once more whole: the whole version holds the partial's steps again. Told the window's
source (the raw file), `evaluate` judges each step of it once (a step is known by its
source, number and start time, the last `JUDGED_KEEP` remembered by `StepHistory`)
and adds it to the history once: a step seen again fires nothing, counts once in the
baseline and once in the warm-up. A name firing outside every step is reported once
per source likewise (by trigger and interval). By source, not by step alone: two
files may hold the same steps (a copy landed twice), and two hosts' steps may share
numbers; only a second version of the same file is the same window again.

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
a few samples an hour instead of filling the disk with copies of itself). A false
positive must not hide a real anomaly behind its cool-down (a 282.6 ms gap under CPU
load fired `stall:250ms`, and the injected 618 ms stall 20 s later was only logged as
rate-limited), so a firing's severity counts: value / threshold (how far past its
threshold it is). A firing within the cool-down is still acted on when its severity
is at least `ESCALATION` (1.5) × that of the last firing of its spec acted on; and one
past the hour's cap when it is at least 1.5 × every severity acted on in that hour.
Each such exception must outdo the last by half as much again, so a slowly growing
anomaly cannot flood the disk either (from a severity of 1 to 1,000, at most 17 more
an hour). Asked about a spec alone (no measurement), the limiter applies the plain
limits. `summarize_suppressed` says in one line what was held back in a window,
instead of one log line per firing (a 2-minute run logged ~90 of those).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np

from ..compare.gate import judge, parse_condition
from ..errors import BadQuery, TraceError
from ..model.table import EventTable
from ..query.search import MAX_QUERY_CHARS, NameQuery, compile_regex, name_text
from ..reduce.shared import slices_of
from ..waveforms.categories import CATEGORIES, device_tracks
from ..waveforms.steps import MARKER_STEPS_LINE, StepSeries, derive

HISTORY = 20  # previous steps a step's time is compared with
MIN_HISTORY = 5  # fewer previous steps than this: no baseline, the step trigger does not fire
WARMUP_STEPS = 5  # a run's first steps: judged by no trigger (see the module docstring)
JUDGED_KEEP = 2048  # steps remembered as judged (source, number, start): a window seen again fires nothing twice
NAMED_KEEP = 256  # name firings outside every step remembered as reported
ESCALATION = 1.5  # a firing this × more severe passes the cool-down and the hourly cap
MAX_FIRINGS = 100  # per trigger and window
DEFAULT_TRIGGERS = ("step:2x", "stall:250ms")
DEFAULT_MAX_PER_HOUR = 6
DEFAULT_COOLDOWN_S = 60.0
_CHUNK_POINTS = 4_000_000  # stall: points handled per vectorised pass (bounds memory on overlapping steps)
REASON_NAME_CHARS = 200  # of a slice's name in a firing's reason (a name may be megabytes long)

STEP, STALL, NAME, SERIES, BASELINE = "step", "stall", "name", "series", "baseline"
MIN_BASELINE_STEPS = 3  # judged steps a window needs before its median is held against the baseline
_UNITS_US = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "μs": 1.0, "ms": 1e3, "s": 1e6}  # micro sign and Greek mu
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(ns|us|µs|μs|ms|s)\s*$")
_FACTOR = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*x\s*$")
_USAGE = ("use step:Kx (e.g. step:2x), series:NAME:Kx (e.g. series:communication_ms:1.5x), "
          "baseline:SERIES:+MARGIN (e.g. baseline:step_time:+10%, with --baseline RUN), stall:DURATION "
          "(e.g. stall:250ms) or name:REGEX:DURATION (e.g. name:nccl:300ms)")
# The series a `series:` trigger may name: step time, each category's busy time, and peak memory per device.
_TIME_SERIES = ("step_time_ms", *(f"{c}_ms" for c in CATEGORIES), "device_idle_ms", "unaccounted_ms")
_MEMORY_SERIES = re.compile(r"^memory_peak_mb_[a-z0-9_]+$")


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


StepKey = tuple[int, float, float]  # (source id, step number, start µs): a step, as a window seen again holds it
NamedKey = tuple[int, str, float, float]  # (source id, spec, start µs, end µs): a name firing outside every step


class StepHistory:
    """What the triggers remember across windows (and, through `to_json`, across sidecar
    restarts): the last `HISTORY` step times (ms) seen, oldest first, the baseline of
    `step:Kx`; how many steps of the current run were seen (the warm-up) and the
    highest step number among them (a fall far below it starts a new run); and which
    steps were judged already (see the module docstring).

    Only finite times are kept: a hostile or damaged step must not poison the median.
    """

    def __init__(self, times_ms: Iterable[float] = (), size: int = HISTORY, seen: Optional[int] = None) -> None:
        self._times: deque[float] = deque(maxlen=size)
        self.extend(times_ms)
        # Every other series' last values (`series:` triggers' baselines), as the step times are kept.
        self._series: dict[str, deque[float]] = {}
        # Steps of this run seen so far: by default those whose times are given (a history of
        # 20 steps is one past its run's warm-up).
        self.seen = len(self._times) if seen is None else max(int(seen), 0)
        self.highest: Optional[float] = None  # the highest step number of this run, once one is seen
        self._judged: deque[StepKey] = deque(maxlen=JUDGED_KEEP)
        self._judged_set: set[StepKey] = set()
        self._named: deque[NamedKey] = deque(maxlen=NAMED_KEEP)
        self._named_set: set[NamedKey] = set()

    def extend(self, times_ms: Iterable[float]) -> None:
        """Step times into the baseline (no other bookkeeping: `evaluate` does that)."""
        self._times.extend(float(x) for x in times_ms if math.isfinite(x))

    def times(self) -> list[float]:
        return list(self._times)

    def series_values(self, name: str) -> list[float]:
        """The last values of a series (`series:NAME:Kx`'s baseline); step time is `times()`."""
        if name == "step_time_ms":
            return self.times()
        return list(self._series.get(name, ()))

    def extend_series(self, name: str, values: Iterable[float]) -> None:
        kept = self._series.setdefault(name, deque(maxlen=self.size))
        kept.extend(float(x) for x in values if math.isfinite(x))

    @property
    def size(self) -> int:
        """How many step times it keeps (`HISTORY`)."""
        return self._times.maxlen or HISTORY

    def __len__(self) -> int:
        return len(self._times)

    @property
    def warming_up(self) -> bool:
        """Whether the next step seen would still be one of its run's warm-up steps."""
        return self.seen < WARMUP_STEPS

    def judged(self, source: str, step: float, start_us: float) -> bool:
        """Whether the step numbered `step` that began at `start_us`, in a window of `source`,
        was judged already."""
        return (source_id(source), float(step), float(start_us)) in self._judged_set

    def _remember(self, key: StepKey) -> None:
        if key in self._judged_set:
            return
        if len(self._judged) == self._judged.maxlen:
            self._judged_set.discard(self._judged[0])
        self._judged.append(key)
        self._judged_set.add(key)

    def _reported(self, key: NamedKey) -> bool:
        return key in self._named_set

    def _report(self, key: NamedKey) -> None:
        if key in self._named_set:
            return
        if len(self._named) == self._named.maxlen:
            self._named_set.discard(self._named[0])
        self._named.append(key)
        self._named_set.add(key)

    def _new_run(self) -> None:
        self._times.clear()
        self._series.clear()
        self.seen = 0
        self.highest = None

    def to_json(self) -> dict[str, Any]:
        """For a sidecar that keeps its baseline, warm-up count and judged steps across restarts
        (strict JSON: non-finite keys are left out, they never match anyway)."""
        return {"times": self.times(), "series": {k: list(v) for k, v in self._series.items()}, "seen": self.seen,
                "highest": self.highest if self.highest is not None and math.isfinite(self.highest) else None,
                "judged": [[i, s, t] for i, s, t in self._judged if math.isfinite(s) and math.isfinite(t)],
                "named": [[i, k, a, b] for i, k, a, b in self._named if math.isfinite(a) and math.isfinite(b)]}

    @classmethod
    def from_json(cls, doc: Any) -> StepHistory:
        """What `to_json` wrote; also the older format, a plain list of step times (whose
        steps count as seen: that sidecar was judging them already). Anything else, or a
        damaged part, gives an empty history or leaves that part out."""
        if isinstance(doc, list):
            return cls(_numbers(doc))
        if not isinstance(doc, dict):
            return cls()
        times = _numbers(doc.get("times")) if isinstance(doc.get("times"), list) else []
        seen = doc.get("seen")
        h = cls(times, seen=seen if _is_number(seen) and math.isfinite(seen) else None)
        if _is_number(doc.get("highest")) and math.isfinite(doc["highest"]):
            h.highest = float(doc["highest"])
        series = doc.get("series")
        for name, values in (series.items() if isinstance(series, dict) else ()):
            if isinstance(name, str) and len(name) <= 200 and isinstance(values, list) and len(h._series) < 64:
                h.extend_series(name, _numbers(values))
        for key in doc.get("judged") if isinstance(doc.get("judged"), list) else []:
            if (isinstance(key, list) and len(key) == 3 and all(_is_number(x) for x in key)
                    and isinstance(key[0], int)):
                h._remember((key[0], float(key[1]), float(key[2])))
        for item in doc.get("named") if isinstance(doc.get("named"), list) else []:
            if (isinstance(item, list) and len(item) == 4 and isinstance(item[0], int) and not isinstance(item[0], bool)
                    and isinstance(item[1], str) and _is_number(item[2]) and _is_number(item[3])):
                h._report((item[0], item[1], float(item[2]), float(item[3])))
        return h


def source_id(source: str) -> int:
    """A window's source (the raw file's path) as 48 bits: the judged steps are remembered,
    and saved, by it (a path may be long; two sources alike in 48 bits are very rare, and
    would only share their judged steps, which also need equal step numbers and starts)."""
    return int.from_bytes(hashlib.blake2b(source.encode("utf-8", "surrogatepass"), digest_size=6).digest(), "big")


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _numbers(doc: list) -> list[float]:
    return [float(x) for x in doc if _is_number(x)]


@dataclass(frozen=True)
class Trigger:
    """A parsed spec; `check` finds its firings in one window (see the module docstring)."""

    spec: str
    kind: str
    factor: float = 0.0  # step: K
    threshold_us: float = 0.0  # stall, name: T
    pattern: Optional[str] = None  # name: REGEX; series: the series' name
    query: Optional[NameQuery] = field(default=None, compare=False, repr=False)  # name: REGEX compiled by RE2
    condition: Any = field(default=None, compare=False, repr=False)  # baseline: the gate's `Condition`

    @property
    def series_name(self) -> str:
        """The series a step or series trigger judges (`step_time_ms` for `step:Kx`)."""
        return self.pattern if self.kind in (SERIES, BASELINE) and self.pattern else "step_time_ms"

    def check(self, table: EventTable, steps: StepSeries, history: StepHistory) -> list[Firing]:
        """The firings in `table` (whose steps are `steps`), every step judged: the measurement
        alone. `history` is read (the step baseline), never changed; skipping the warm-up and
        the steps judged already is `evaluate`'s."""
        if self.kind in (STEP, SERIES):
            out = _check_step(self, steps, history.series_values(self.series_name), history.size,
                              values=series_of(steps, self.series_name))
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
    if kind == SERIES:
        name, sep, factor_text = rest.rpartition(":")
        if not sep or not name:
            raise TriggerError(f"trigger {spec!r}: the series trigger wants series:NAME:Kx, e.g. "
                               f"series:communication_ms:1.5x")
        name = name.strip()
        if name not in _TIME_SERIES and not _MEMORY_SERIES.match(name) and f"{name}_ms" in _TIME_SERIES:
            name = f"{name}_ms"  # a category named as `waveforms` columns name it, less `_ms`
        if name not in _TIME_SERIES and not _MEMORY_SERIES.match(name):
            raise TriggerError(f"trigger {spec!r}: no series {name[:80]!r}; the series are "
                               f"{', '.join(_TIME_SERIES)} and memory_peak_mb_<device> (e.g. memory_peak_mb_cuda0)")
        m = _FACTOR.match(factor_text)
        if not m:
            raise TriggerError(f"trigger {spec!r}: the series trigger wants a factor like 2x or 1.5x, not "
                               f"{factor_text!r}")
        factor = float(m.group(1))
        if not (factor > 0 and math.isfinite(factor)):
            raise TriggerError(f"trigger {spec!r}: the factor must be above 0")
        return Trigger(text, SERIES, factor=factor, pattern=name)
    if kind == BASELINE:
        try:
            cond = parse_condition(rest)
        except ValueError as exc:
            raise TriggerError(f"trigger {spec!r}: {str(exc).split(': ', 1)[-1]}") from None
        if cond.series is None:
            raise TriggerError(f"trigger {spec!r}: a baseline trigger bounds a per-step series "
                               f"(baseline:step_time:+10%), not names")
        name = cond.series if cond.series.startswith("memory_peak_mb_") else f"{cond.series}_ms"
        if name not in _TIME_SERIES and not _MEMORY_SERIES.match(name):
            raise TriggerError(f"trigger {spec!r}: no series {cond.series[:80]!r}; the series are "
                               f"{', '.join(_TIME_SERIES)} and memory_peak_mb_<device>")
        return Trigger(text, BASELINE, pattern=name, condition=cond)
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
    """`pattern` compiled by RE2 as the search route compiles a regex query (`compile_regex`)."""
    if len(pattern) > MAX_QUERY_CHARS:
        raise TriggerError(f"trigger {spec[:40]!r}…: the regular expression is {len(pattern):,} characters long; "
                           f"at most {MAX_QUERY_CHARS:,} are taken")
    try:
        return compile_regex(pattern)
    except BadQuery as exc:
        raise TriggerError(f"trigger {spec!r}: {exc}") from None


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
             steps: Optional[StepSeries] = None, source: Optional[str] = None,
             baseline: Optional[Baseline] = None) -> list[Firing]:
    """Run every trigger on one window (a `TraceIndex` or an `EventTable`), steps derived once
    (or given: the window writer derived them already).

    Returns the firings, trigger by trigger in the order given, each trigger's in time
    order, for the steps past their run's warm-up (see the module docstring); then
    records the window's steps in `history` (baseline, warm-up count), so the next
    window's steps are judged against them. `source` names the raw file the window was
    read from (its path): a step of a window of the same source judged already (a
    partial window, then the file whole) is not judged, counted nor fired on again. A
    window of no named source is judged whole: two files may hold the same steps (a
    copy), and only their source tells a second version of a file from another file.
    `baseline`: the baseline run's medians, for `baseline:` triggers (none fire without).
    """
    table: EventTable = getattr(index_or_table, "table", index_or_table)
    steps = derive(table) if steps is None else steps
    src = None if source is None else source_id(source)
    plan = _plan(history, steps, src)
    judged = plan.new[~plan.warm]  # indices into `steps` of the steps judged now
    out: list[Firing] = []
    for trigger in triggers:
        if trigger.kind in (STEP, SERIES):
            fired = _check_step_runs(trigger, steps, history, plan)
        elif trigger.kind == BASELINE:
            fired = _check_baseline(trigger, _subset(steps, judged), baseline)
        elif trigger.kind == STALL:
            fired = _check_stall(trigger, table, _subset(steps, judged))
        else:
            judge = np.zeros(len(steps), dtype=bool)
            judge[judged] = True
            fired = _check_name(trigger, table, steps, judge=judge, history=history, source=src)
        out.extend(fired[:MAX_FIRINGS])
    _commit(history, steps, plan, src)
    for f in out:
        if src is not None and f.kind == NAME and f.step is None:
            history._report((src, f.trigger, f.start_us, f.end_us))
    return out


@dataclass
class _Plan:
    """Which of a window's steps are new, which of those warm up, where their run began."""

    new: np.ndarray  # indices into the window's steps of those not judged before, in order
    warm: np.ndarray  # per new step: one of its run's first WARMUP_STEPS
    run_start: np.ndarray  # per new step: the position in `new` where its run began, -1 before this window
    seen: int  # the history's count of its run's steps once these are in
    highest: Optional[float]


def _keys(steps: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """(step number, start) as one complex number each, for vectorised set operations."""
    return steps.astype(np.float64) + 1j * starts.astype(np.float64)


def _plan(history: StepHistory, steps: StepSeries, source: Optional[int]) -> _Plan:
    """Vectorised over the window's steps (a hostile window may hold millions); only a
    window with a restart walks its steps in Python, once."""
    n = len(steps)
    number = np.asarray(steps.step, dtype=np.float64)
    keys = _keys(number, np.asarray(steps.start_us, dtype=np.float64))
    fresh = np.ones(n, dtype=bool)
    finite = np.flatnonzero(np.isfinite(keys.real) & np.isfinite(keys.imag))  # a NaN key never matches: new
    if source is not None and len(finite):
        k = keys[finite]
        again = np.ones(len(k), dtype=bool)
        again[np.unique(k, return_index=True)[1]] = False  # a step twice in one window: the first is judged
        mine = [(s, t) for i, s, t in history._judged if i == source]
        if mine:
            again |= np.isin(k, _keys(*np.asarray(mine, dtype=np.float64).T))
        fresh[finite[again]] = False
    new = np.flatnonzero(fresh)
    nums = number[new]
    high = history.highest
    before = np.fmax.accumulate(np.concatenate(([np.nan if high is None else high], nums)))[:-1]
    restart = np.isfinite(nums) & (nums < before - HISTORY)  # vs the highest so far, as if no run began here
    if restart.any():  # a run starts again (the module docstring): the highest is its own from there
        restart[:] = False
        h = high
        for pos, x in enumerate(nums.tolist()):
            if not math.isfinite(x):
                continue
            if h is not None and x < h - HISTORY:
                restart[pos] = True
                h = None
            h = x if h is None else max(h, x)
    pos = np.arange(len(new))
    run_start = np.maximum.accumulate(np.where(restart, pos, -1)) if len(new) else pos
    run_pos = np.where(run_start < 0, history.seen + pos, pos - run_start)
    seen = int(run_pos[-1]) + 1 if len(new) else history.seen
    if len(new):
        last = int(run_start[-1])
        tail = nums[max(last, 0):]
        top = np.fmax.reduce(tail[np.isfinite(tail)], initial=-np.inf) if np.isfinite(tail).any() else math.nan
        if last < 0 and high is not None:
            top = max(high, top) if math.isfinite(top) else high
        highest = float(top) if math.isfinite(top) else (None if last >= 0 else high)
    else:
        highest = high
    return _Plan(new, run_pos < WARMUP_STEPS, run_start, seen, highest)


def _commit(history: StepHistory, steps: StepSeries, plan: _Plan, source: Optional[int]) -> None:
    """The new steps into `history`: only the tails that it keeps are walked."""
    new = plan.new
    if len(new):
        last = int(plan.run_start[-1])
        if last >= 0:
            history._new_run()
        run = new[max(last, 0):]
        times = steps.step_time_ms[run]
        history.extend(times[np.isfinite(times)][-history.size:].tolist())
        for name, values in _other_series(steps).items():
            v = values[run]
            history.extend_series(name, v[np.isfinite(v)][-history.size:].tolist())
        tail = new[-JUDGED_KEEP:] if source is not None else new[:0]
        for s, t in zip(steps.step[tail].tolist(), steps.start_us[tail].tolist()):
            if math.isfinite(s) and math.isfinite(t):
                history._remember((source, float(s), float(t)))
    history.seen, history.highest = plan.seen, plan.highest


def _subset(steps: StepSeries, idx: np.ndarray) -> StepSeries:
    """The steps at `idx` (in that order), as a series of their own."""
    return replace(steps, step=steps.step[idx], start_us=steps.start_us[idx], end_us=steps.end_us[idx],
                   busy_ms={c: v[idx] for c, v in steps.busy_ms.items()},
                   memory_mb={c: v[idx] for c, v in steps.memory_mb.items()})


def _other_series(steps: StepSeries) -> dict[str, np.ndarray]:
    """Every series but step time, by its name (`compute_ms`, `memory_peak_mb_cpu`, …)."""
    return {**{f"{c}_ms": v for c, v in steps.busy_ms.items()}, **steps.memory_mb}


def series_of(steps: StepSeries, name: str) -> np.ndarray:
    """A step series' values by name; all NaN where the window does not have it."""
    if name == "step_time_ms":
        return steps.step_time_ms
    found = _other_series(steps).get(name)
    return found if found is not None else np.full(len(steps), np.nan)


# ---- step:Kx -------------------------------------------------------------------------


def _check_step_runs(trigger: Trigger, steps: StepSeries, history: StepHistory, plan: _Plan) -> list[Firing]:
    """`step:Kx` on a window's new steps, run by run: a step after a restart is judged
    against its own run's steps only; warm-up steps are measured (they are the next
    steps' baseline) but never fire."""
    sub = _subset(steps, plan.new)
    return _check_step(trigger, sub, history.series_values(trigger.series_name), history.size, judge=~plan.warm,
                       run_start=plan.run_start, values=series_of(sub, trigger.series_name))


def _check_step(trigger: Trigger, steps: StepSeries, past_ms: Sequence[float], size: int,
                judge: Optional[np.ndarray] = None, run_start: Optional[np.ndarray] = None,
                values: Optional[np.ndarray] = None) -> list[Firing]:
    """Each step against the median of the `size` before it (`past_ms`, then the window's
    earlier steps); only the steps `judge` marks (all when None) may fire. `run_start`
    (per step, the window position where its run began, -1 before the window): the
    steps before that are no baseline for it. `values`: the series judged (step time
    when None; a `series:` trigger's series)."""
    n = len(steps)
    if not n:
        return []
    times = steps.step_time_ms if values is None else values
    past = np.asarray(past_ms, dtype=np.float64)[-size:] if len(past_ms) else np.zeros(0)
    # Row i: the `size` times before window step i (the history, then this window's
    # earlier steps), NaN-padded where fewer exist.
    seq = np.concatenate((np.full(size, np.nan), past, np.where(np.isfinite(times), times, np.nan)))
    first = size + len(past)  # position of window step 0 in `seq`
    rows = np.lib.stride_tricks.sliding_window_view(seq, size)[first - size:first - size + n]
    if run_start is not None and (run_start >= 0).any():
        # Row i holds window positions i-size .. i-1; those before its run's start are not its run's.
        gone = np.where(run_start >= 0, np.clip(run_start - np.arange(n) + size, 0, size), 0)
        rows = np.where(np.arange(size)[None, :] < gone[:, None], np.nan, rows)
    count = np.count_nonzero(~np.isnan(rows), axis=1)
    ok = (count >= MIN_HISTORY) & np.isfinite(times)
    if judge is not None:
        ok &= judge
    median = np.full(n, np.nan)
    full = ok & (count == size)  # np.median on the full rows: nanmedian is ten times slower
    if full.any():
        median[full] = np.median(rows[full], axis=1)
    part = ok & ~full
    if part.any():
        median[part] = np.nanmedian(rows[part], axis=1)
    fire = np.flatnonzero(ok & (times > trigger.factor * median))
    out = []
    name = trigger.series_name
    unit = "MB" if _MEMORY_SERIES.match(name) else "ms"
    for i in fire.tolist():
        t, med, k = float(times[i]), float(median[i]), int(count[i])
        ratio = f"{t / med:.1f}×" if med > 0 else "∞×"
        step = float(steps.step[i])
        if trigger.kind == STEP:
            reason = (f"step {_shown(step)} took {t:.1f} ms, {ratio} the median {med:.1f} ms of the "
                      f"previous {k} steps (threshold {trigger.factor:g}× = {trigger.factor * med:.1f} ms)")
        else:
            reason = (f"step {_shown(step)}: {name} was {t:.1f} {unit}, {ratio} its median {med:.1f} {unit} over the "
                      f"previous {k} steps (threshold {trigger.factor:g}× = {trigger.factor * med:.1f} {unit})")
        out.append(Firing(trigger.spec, trigger.kind, t, trigger.factor * med, float(steps.start_us[i]),
                          float(steps.end_us[i]), step, reason, unit=unit))
    return out


# ---- baseline:SERIES:+MARGIN ---------------------------------------------------------


@dataclass(frozen=True)
class Baseline:
    """The run a change is measured against: its name, how many steps it has, and the
    median of each per-step series over them (its warm-up left out)."""

    name: str
    steps: int
    medians: dict[str, float]

    @classmethod
    def of(cls, name: str, steps: StepSeries) -> Baseline:
        idx = np.arange(len(steps))
        if len(idx) > 2 * WARMUP_STEPS:
            idx = idx[WARMUP_STEPS:]  # its own compilation and warm-up are no baseline either
        medians = {}
        for series, values in {"step_time_ms": steps.step_time_ms, **_other_series(steps)}.items():
            v = values[idx]
            v = v[np.isfinite(v)]
            if len(v):
                medians[series] = float(np.median(v))
        return cls(name, int(len(idx)), medians)


def _check_baseline(trigger: Trigger, steps: StepSeries, baseline: Optional[Baseline]) -> list[Firing]:
    """One firing when the window's judged steps' median of the series is past the baseline's
    by more than the margin (the gate's rule, `compare.gate.judge`)."""
    name = trigger.series_name
    if baseline is None or name not in baseline.medians:
        return []
    values = series_of(steps, name)
    ok = np.flatnonzero(np.isfinite(values))
    if len(ok) < MIN_BASELINE_STEPS:
        return []
    mine = float(np.median(values[ok]))
    base = baseline.medians[name]
    unit = "MB" if _MEMORY_SERIES.match(name) else "ms"
    verdict = judge(trigger.condition, base, mine, f"over {len(ok)} steps of this window and {baseline.steps} of "
                    f"{baseline.name}", unit)
    if not verdict.failed:
        return []
    c = trigger.condition
    limit = base * (1 + c.percent / 100.0) if c.percent is not None else base + c.absolute
    first, last = int(ok[0]), int(ok[-1])
    ratio = f"{mine / base:.2f}×" if base > 0 else "∞×"
    reason = (f"{name}: the median over {len(ok)} steps was {mine:.1f} {unit}, {ratio} the baseline's {base:.1f} "
              f"{unit} ({baseline.name}, {baseline.steps} steps; allowed {c.spec.rpartition(':')[2]})")
    slowest = int(ok[np.argmax(values[ok])])
    return [Firing(trigger.spec, BASELINE, mine, limit, float(steps.start_us[first]), float(steps.end_us[last]),
                   float(steps.step[slowest]), reason, unit=unit)]


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


def _check_name(trigger: Trigger, table: EventTable, steps: StepSeries, judge: Optional[np.ndarray] = None,
                history: Optional[StepHistory] = None, source: Optional[int] = None) -> list[Firing]:
    """Slices lasting at least T whose name matches: RE2 once per distinct name among them.
    With `judge` (per step), a slice in a step it does not mark is left out; with
    `history` and `source`, so is a slice outside every step reported already for it."""
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
    rows = rows[np.lexsort((sl.event[rows], sl.start[rows]))]
    in_step = _step_of(steps, sl.start[rows])
    if judge is not None:
        inside = in_step >= 0
        keep = np.ones(len(rows), dtype=bool)
        keep[inside] = judge[in_step[inside]]
        rows, in_step = rows[keep], in_step[keep]
    if history is not None and source is not None:  # walks at most MAX_FIRINGS + NAMED_KEEP rows
        kept: list[int] = []
        for k in range(len(rows)):
            if len(kept) == MAX_FIRINGS:
                break
            if in_step[k] >= 0 or not history._reported((source, trigger.spec, float(sl.start[rows[k]]),
                                                          float(sl.end[rows[k]]))):
                kept.append(k)
        rows, in_step = rows[kept], in_step[kept]
    rows, in_step = rows[:MAX_FIRINGS], in_step[:MAX_FIRINGS]
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


def severity(firing: Firing) -> float:
    """How far past its threshold a firing is: value / threshold (2.0: twice the threshold).
    A threshold of 0 or less, or a value that is no number, has none (NaN)."""
    v, t = float(firing.value), float(firing.threshold)
    return v / t if math.isfinite(v) and math.isfinite(t) and t > 0 else math.nan


class RateLimiter:
    """Per trigger spec: at most `max_per_hour` firings acted on in any 3600 s, none
    within `cooldown_s` of the previous one, except a firing clearly more severe than
    those acted on (see the module docstring: at least `ESCALATION` × the last one's
    severity within the cool-down, × the hour's largest past the cap). `now_s` is the
    caller's clock (use `time.monotonic()`); a clock that goes back starts that spec
    afresh."""

    def __init__(self, max_per_hour: int = DEFAULT_MAX_PER_HOUR, cooldown_s: float = DEFAULT_COOLDOWN_S) -> None:
        if isinstance(max_per_hour, bool) or not isinstance(max_per_hour, int) or max_per_hour < 1:
            raise TriggerError(f"at most per hour must be a whole number of 1 or more, not {max_per_hour!r}")
        if not (isinstance(cooldown_s, (int, float)) and math.isfinite(cooldown_s) and cooldown_s >= 0):
            raise TriggerError(f"the cool-down must be a number of seconds of 0 or more, not {cooldown_s!r}")
        self.max_per_hour = max_per_hour
        self.cooldown_s = float(cooldown_s)
        self._allowed: dict[str, deque[tuple[float, float]]] = {}  # spec -> (time, severity) acted on, oldest first

    def allow(self, item: Union[Firing, Trigger, str], now_s: float) -> bool:
        """Whether a firing at `now_s` may be acted on; if so, it is counted. `item` is the
        firing (its severity may lift the limits), or its trigger or spec alone (the plain
        limits: a spec has no severity)."""
        if isinstance(item, Firing):
            key, sev = item.trigger, severity(item)
        else:
            key, sev = (item.spec if isinstance(item, Trigger) else item), math.nan
        past = self._allowed.setdefault(key, deque())
        if past and now_s < past[-1][0]:
            past.clear()
        while past and now_s - past[0][0] >= 3600.0:
            past.popleft()
        if past and now_s - past[-1][0] < self.cooldown_s and not _outdoes(sev, past[-1][1]):
            return False
        if len(past) >= self.max_per_hour and not _outdoes(sev, max((s for _, s in past), key=_nan_low)):
            return False
        past.append((now_s, sev))
        return True


def _nan_low(x: float) -> float:
    return -math.inf if math.isnan(x) else x


def _outdoes(sev: float, than: float) -> bool:
    """`sev` at least ESCALATION × `than`; a firing of no known severity outdoes none and is
    outdone by any (NaN: a spec asked alone)."""
    if math.isnan(sev):
        return False
    if math.isnan(than):
        return True
    return sev >= ESCALATION * than


def summarize_suppressed(firings: Sequence[Firing]) -> Optional[str]:
    """One log line for the firings of a window the rate limiter held back, instead of one
    line each: how many, then per spec (in the order first met) how many and the largest
    (by severity), e.g. "3 firing(s) rate-limited: stall:250ms ×2 (largest 301.2 ms),
    step:2x ×1 (largest 260.0 ms, 2.5× the median)". None when there are none."""
    if not firings:
        return None
    groups: dict[str, list[Firing]] = {}
    for f in firings:
        groups.setdefault(f.trigger, []).append(f)
    parts = []
    for spec, fs in groups.items():
        top = max(fs, key=lambda f: _nan_low(severity(f)))
        parts.append(f"{spec} ×{len(fs)} (largest {_largest(top)})")
    return f"{len(firings)} firing(s) rate-limited: {', '.join(parts)}"


def _largest(f: Firing) -> str:
    shown = f"{f.value:.1f} {f.unit}" if math.isfinite(f.value) else str(f.value)
    if f.kind in (STEP, SERIES):
        try:
            factor = parse_trigger(f.trigger).factor
        except TriggerError:
            factor = math.nan
        median = f.threshold / factor if factor > 0 else math.nan
        if math.isfinite(median) and median > 0 and math.isfinite(f.value):
            shown += f", {f.value / median:.1f}× the median"
    return shown
