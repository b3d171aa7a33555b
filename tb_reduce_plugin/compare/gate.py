"""The regression gate: conditions a candidate run must meet against a baseline.

    step_time:+5%               the median step time may grow by 5 % at most
    unaccounted:+2ms            a per-step series (`tb-reduce waveforms`' series, without
                                `_ms`) may grow by 2 ms at most (units ns, us, ms, s)
    memory_peak_mb_cpu:+100MB   a step's peak memory may grow by 100 MB at most (B, kB,
                                MB, GB; 10^3 each) or by a per cent
    name:REGEX:self:+10%        the self time (or `wall`, or `count`) a step of the slices
                                whose name REGEX matches (RE2, as the search's) may grow by
                                10 % at most; `count` takes a plain number as its margin

Every figure is a median over the chosen steps of each side, so one slow step (a
checkpoint, a recompile) moves it little, and a rerun of the same code passes; where a
side has no steps, a name condition compares totals over the whole trace and a series
condition cannot be checked (an error, not a pass). A condition that checks nothing — a
series neither trace has, a pattern that matches no slice on either side — is an error
too: a gate that cannot fail is a misconfigured gate.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..errors import BadQuery
from ..query.search import MAX_QUERY_CHARS, NameQuery, compile_regex

NAME_FIELDS = {"self": "self_us", "wall": "wall_us", "count": "count"}
_MARGIN = re.compile(r"^\s*\+\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(%|ns|us|µs|μs|ms|s|B|kB|KB|MB|GB)?\s*$")
_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "μs": 1e-3, "ms": 1.0, "s": 1e3}
_UNIT_MB = {"B": 1e-6, "kB": 1e-3, "KB": 1e-3, "MB": 1.0, "GB": 1e3}
USAGE = ("give SERIES:+N% or SERIES:+Nms (SERIES: step_time or a category of `tb-reduce waveforms`, e.g. "
         "unaccounted), or name:REGEX:self|wall|count:+N%")


@dataclass(frozen=True)
class Condition:
    """One `--fail-if`: what is compared, and by how much the candidate may exceed the base."""

    spec: str
    series: Optional[str] = None  # a per-step series (`step_time`, `compute`…); or
    pattern: Optional[str] = None  # a name pattern, with
    field: str = "self_us"  # which sum of its slices
    percent: Optional[float] = None  # a margin in per cent, or
    absolute: Optional[float] = None  # in ms (a count: in slices)
    query: Optional[NameQuery] = None

    @property
    def label(self) -> str:
        if self.series is not None:
            return self.series
        field = next(k for k, v in NAME_FIELDS.items() if v == self.field)
        return f"name:{self.pattern}:{field}"


def parse_condition(spec: str) -> Condition:
    """A condition from its spec; `ValueError` (one line, naming the spec) when it is not one."""
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(f"--fail-if {spec!r}: {USAGE}")
    text = spec.strip()
    head, _, margin_text = text.rpartition(":")
    if head.startswith("name:"):
        pattern, sep, field = head[len("name:"):].rpartition(":")
        if not sep or field not in NAME_FIELDS:
            raise ValueError(f"--fail-if {spec!r}: a name condition is name:REGEX:self|wall|count:+MARGIN")
        if not pattern:
            raise ValueError(f"--fail-if {spec!r}: the regular expression is empty")
        if len(pattern) > MAX_QUERY_CHARS:
            raise ValueError(f"--fail-if {spec[:40]!r}…: the regular expression is over {MAX_QUERY_CHARS:,} characters")
        try:
            query = compile_regex(pattern)
        except BadQuery as exc:
            raise ValueError(f"--fail-if {spec!r}: {exc}") from None
        percent, absolute = _margin(spec, margin_text, counts=field == "count")
        return Condition(text, pattern=pattern, field=NAME_FIELDS[field], percent=percent, absolute=absolute,
                         query=query)
    series = head.strip()
    series = series[:-3] if series.endswith("_ms") else series
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", series):
        raise ValueError(f"--fail-if {spec!r}: {series!r} is not a series name; {USAGE}")
    percent, absolute = _margin(spec, margin_text, counts=False, memory=series.startswith("memory_peak_mb_"))
    return Condition(text, series=series, percent=percent, absolute=absolute)


def _margin(spec: str, text: str, counts: bool, memory: bool = False) -> tuple[Optional[float], Optional[float]]:
    m = _MARGIN.match(text)
    units = "B, kB, MB, GB" if memory else "ns, us, ms, s"
    if m is None:
        raise ValueError(f"--fail-if {spec!r}: the margin {text!r} is not +N% or +N with a unit ({units})"
                         + (" or a plain +N slices" if counts else ""))
    value, unit = float(m.group(1)), m.group(2)
    if not math.isfinite(value):
        raise ValueError(f"--fail-if {spec!r}: the margin must be finite")
    if unit == "%":
        return value, None
    if counts:
        if unit is not None:
            raise ValueError(f"--fail-if {spec!r}: a count's margin is +N% or +N (slices), not a time")
        return None, value
    if unit is None:
        raise ValueError(f"--fail-if {spec!r}: give the margin's unit: +{m.group(1)}{'MB' if memory else 'ms'}, "
                         "or a per cent")
    table = _UNIT_MB if memory else _UNIT_MS
    if unit not in table:
        raise ValueError(f"--fail-if {spec!r}: {'memory' if memory else 'a time'} takes a margin in {units}, "
                         f"not {unit}")
    return None, value * table[unit]


@dataclass(frozen=True)
class Verdict:
    """A condition held against two figures: whether it failed, and one line saying so."""

    condition: Condition
    base: float
    candidate: float
    failed: bool
    line: str

    def to_json(self) -> dict[str, Any]:
        return {"condition": self.condition.spec, "base": self.base, "candidate": self.candidate,
                "failed": self.failed, "line": self.line}


def judge(cond: Condition, base: float, candidate: float, how: str, unit: str = "ms") -> Verdict:
    """Whether `candidate` exceeds `base` by more than the condition's margin; `how` says
    what the figures are (`median a step over 12 and 12 steps`, `totals`), `unit` in what
    (ms, MB; a count of slices has none)."""
    if cond.percent is not None:
        limit = base * (1 + cond.percent / 100.0)
        failed = candidate > limit if base > 0 else candidate > 0
        margin = f"+{cond.percent:g}%"
    else:
        assert cond.absolute is not None
        failed = candidate > base + cond.absolute
    shown = "" if cond.series is None and cond.field == "count" else f" {unit}"
    if cond.percent is None:
        margin = f"+{cond.absolute:g}{shown}"
    unit = shown
    change = f"{(candidate / base - 1) * 100:+.1f}%" if base > 0 else ("new" if candidate > 0 else "none")
    line = (f"{'FAIL' if failed else 'pass'} {cond.label}: {_num(base)}{unit} → {_num(candidate)}{unit} "
            f"({change}; allowed {margin}), {how}")
    return Verdict(cond, base, candidate, failed, line)


def median_of(values: np.ndarray) -> float:
    ok = values[np.isfinite(values)]
    return float(np.median(ok)) if len(ok) else math.nan


def _num(x: float) -> str:
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:,.0f}"
