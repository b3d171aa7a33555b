"""Which steps of a trace a comparison takes, and what their series look like.

A step range (`--steps A:B`) is a range of step numbers as the profiler wrote them
(PyTorch's `ProfilerStep#N`, JAX's `step_num`), both ends included, either end open;
steps are matched by number, so two runs whose profilers started at different steps
compare the same steps of training. Each series of the chosen steps is summed up by its
median (what a gate compares: one slow step moves it little), its 90th percentile and
its slowest step.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..errors import TraceError
from ..waveforms.steps import StepSeries

_RANGE = re.compile(r"^\s*(-?\d+)?\s*:\s*(-?\d+)?\s*$")


class BadCompare(TraceError):
    """A comparison that cannot be made as asked (a step range no step is in, a series
    neither trace has): the user's input, answered with one line (exit 2 on the CLI)."""


@dataclass(frozen=True)
class StepRange:
    """Step numbers `first` to `last`, both included; None: open on that side."""

    first: Optional[int] = None
    last: Optional[int] = None

    def __str__(self) -> str:
        return f"{'' if self.first is None else self.first}:{'' if self.last is None else self.last}"


def parse_step_range(text: str) -> StepRange:
    """`A:B`, `A:` or `:B` (step numbers, both ends included); `ValueError` otherwise."""
    m = _RANGE.match(text or "")
    if m is None or (m.group(1) is None and m.group(2) is None):
        raise ValueError(f"not a step range: {text!r} (give FIRST:LAST step numbers, e.g. 10:50, 10: or :50)")
    first = None if m.group(1) is None else int(m.group(1))
    last = None if m.group(2) is None else int(m.group(2))
    if first is not None and last is not None and last < first:
        raise ValueError(f"the step range {text!r} is empty: its last step comes before its first")
    return StepRange(first, last)


def chosen_steps(series: StepSeries, steps: Optional[StepRange], label: str) -> np.ndarray:
    """The indices (time order) of the steps in `steps` (all when None); `BadCompare` when a
    range is asked of a trace that has no step in it."""
    idx = np.arange(len(series))
    if steps is None:
        return idx
    if not len(series):
        raise BadCompare(f"{label}: --steps {steps} asks for steps, and this trace has none ({series.reason})")
    keep = np.ones(len(series), dtype=bool)
    if steps.first is not None:
        keep &= series.step >= steps.first
    if steps.last is not None:
        keep &= series.step <= steps.last
    if not keep.any():
        lo, hi = series.step.min(), series.step.max()
        raise BadCompare(f"{label}: no step numbered in {steps}; its steps are {step_number(lo)} to {step_number(hi)}")
    return idx[keep]


def window_of(series: StepSeries, chosen: np.ndarray) -> Optional[tuple[float, float]]:
    """The time range the chosen steps cover (from the first one's start to the last end)."""
    if not len(chosen):
        return None
    starts, ends = series.start_us[chosen], series.end_us[chosen]
    starts, ends = starts[np.isfinite(starts)], ends[np.isfinite(ends)]
    if not len(starts) or not len(ends) or not starts.min() < ends.max():
        return None  # steps with no finite extent (a hostile trace): the whole trace
    return float(starts.min()), float(ends.max())


def series_values(series: StepSeries, chosen: np.ndarray) -> dict[str, np.ndarray]:
    """Each series of the chosen steps: times by their name without `_ms` (`step_time`,
    `compute`…) in ms, then peak memory per device (`memory_peak_mb_cpu`…) in MB."""
    out = {"step_time": series.step_time_ms[chosen]}
    for category, values in series.busy_ms.items():
        out[category] = values[chosen]
    for name, values in series.memory_mb.items():
        out[name] = values[chosen]
    return out


def unit_of(series: str) -> str:
    """What a series is measured in: MB for peak memory, ms for every time."""
    return "MB" if series.startswith("memory_peak_mb_") else "ms"


@dataclass(frozen=True)
class Spread:
    """A series over the chosen steps: how many have a value, median, p90, the largest (the
    slowest step, for a time) and its step."""

    steps: int
    median: float
    p90: float
    slowest: float
    slowest_step: Any

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "median": self.median, "p90": self.p90, "slowest": self.slowest,
                "slowest_step": self.slowest_step}


def spread(values: np.ndarray, step_numbers: np.ndarray) -> Optional[Spread]:
    """The spread of the finite values (None when there is none)."""
    ok = np.isfinite(values)
    if not ok.any():
        return None
    v, s = values[ok], step_numbers[ok]
    at = int(np.argmax(v))  # the first of equal maxima: the earlier step
    return Spread(int(len(v)), float(np.median(v)), float(np.percentile(v, 90)), float(v[at]), step_number(s[at]))


def step_number(x: Any) -> Any:
    """A step number as the profiler wrote it: an int where it is one."""
    x = float(x)
    return int(x) if math.isfinite(x) and x == int(x) else x
