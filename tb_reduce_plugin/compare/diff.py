"""Two traces compared: their step series side by side, their names joined, a gate held.

A `Side` is a trace's table, its per-step series and the steps chosen of it; `compare`
makes the document every surface shows (the CLI's table, CSV and JSON); `hold` judges
the gate's conditions against the same figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from ..model.table import EventTable
from ..waveforms.steps import StepSeries
from .gate import Condition, Verdict, judge, median_of
from .names import joined, matching_names, name_table, per_step_sums
from .steps import BadCompare, StepRange, chosen_steps, series_values, spread, step_number, unit_of, window_of


@dataclass
class Side:
    """One trace of a comparison and the steps chosen of it. `names` (its range table over
    the chosen steps, by name) is made on first use; a side whose `names` are made needs
    its table only for a gate's name conditions (`hold`), so a server may let it go."""

    label: str
    table: Optional[EventTable]
    steps: StepSeries
    chosen: np.ndarray
    _names: Optional[dict[str, dict[str, float]]] = field(default=None, repr=False)

    @classmethod
    def of(cls, label: str, table: EventTable, steps: StepSeries, step_range: Optional[StepRange]) -> Side:
        return cls(label, table, steps, chosen_steps(steps, step_range, label))

    @property
    def names(self) -> dict[str, dict[str, float]]:
        if self._names is None:
            assert self.table is not None, "a side whose table was let go keeps its names"
            self._names = name_table(self.table, self.window)
        return self._names

    @property
    def window(self) -> Optional[tuple[float, float]]:
        """The chosen steps' time range (None, the whole trace, where it has no steps)."""
        return window_of(self.steps, self.chosen)

    @property
    def step_count(self) -> int:
        return int(len(self.chosen))

    def describe(self) -> dict[str, Any]:
        numbers = self.steps.step[self.chosen]
        return {"trace": self.label, "steps": self.step_count, "marker": self.steps.marker,
                "first_step": step_number(numbers.min()) if len(numbers) else None,
                "last_step": step_number(numbers.max()) if len(numbers) else None,
                "window_us": list(self.window) if self.window is not None else None,
                "no_steps": None if len(self.chosen) else self.steps.reason}


def compare(base: Side, cand: Side) -> dict[str, Any]:
    """The comparison's document: both sides, each series' spread over their steps, and
    every name joined (per step where both sides have steps, else totals)."""
    per_step = bool(base.step_count and cand.step_count)
    a_values, b_values = series_values(base.steps, base.chosen), series_values(cand.steps, cand.chosen)
    series = []
    for name in list(dict.fromkeys([*a_values, *b_values])):
        a = spread(a_values[name], base.steps.step[base.chosen]) if name in a_values else None
        b = spread(b_values[name], cand.steps.step[cand.chosen]) if name in b_values else None
        if a is None and b is None:
            continue
        row: dict[str, Any] = {"series": name, "unit": unit_of(name), "base": a.to_json() if a else None,
                               "candidate": b.to_json() if b else None, "delta": None, "ratio": None}
        if a is not None and b is not None:
            row["delta"] = b.median - a.median
            row["ratio"] = b.median / a.median if a.median > 0 else None
        series.append(row)
    names = joined(base.names, cand.names, base.step_count if per_step else None,
                   cand.step_count if per_step else None)
    return {"base": base.describe(), "candidate": cand.describe(), "per_step": per_step,
            "series": series, "names": names}


def hold(conditions: Sequence[Condition], base: Side, cand: Side) -> list[Verdict]:
    """Each condition judged on the two sides (`gate`); `BadCompare` for one that cannot be."""
    return [_hold(c, base, cand) for c in conditions]


def _hold(cond: Condition, base: Side, cand: Side) -> Verdict:
    if cond.series is not None:
        for side in (base, cand):
            if not side.step_count:
                raise BadCompare(f"--fail-if {cond.spec}: {side.label} has no steps to compare ({side.steps.reason})")
        a = series_values(base.steps, base.chosen).get(cond.series)
        b = series_values(cand.steps, cand.chosen).get(cond.series)
        if a is None and b is None:
            known = ", ".join(dict.fromkeys([*series_values(base.steps, base.chosen),
                                             *series_values(cand.steps, cand.chosen)]))
            raise BadCompare(f"--fail-if {cond.spec}: neither trace has a series {cond.series!r}; theirs: {known}")
        for side, values in ((base, a), (cand, b)):
            if values is None:  # e.g. memory in one run only (recorded with profile_memory=True in the other)
                raise BadCompare(f"--fail-if {cond.spec}: {side.label} has no series {cond.series!r} (the other "
                                 f"trace has); a trace records memory with torch.profiler's profile_memory=True")
        assert a is not None and b is not None
        ma, mb = median_of(a), median_of(b)
        return judge(cond, ma, mb, f"median of a step over {base.step_count} and {cand.step_count} steps",
                     unit_of(cond.series))
    assert cond.query is not None
    ma, hits_a = _name_figure(cond, base, bool(base.step_count and cand.step_count))
    mb, hits_b = _name_figure(cond, cand, bool(base.step_count and cand.step_count))
    if not hits_a and not hits_b:
        raise BadCompare(f"--fail-if {cond.spec}: {cond.pattern!r} matches no slice in either trace"
                         + (" in the chosen steps" if base.step_count or cand.step_count else ""))
    how = (f"median of a step over {base.step_count} and {cand.step_count} steps" if base.step_count and cand.step_count
           else "totals over the whole traces (a side has no steps)")
    return judge(cond, ma, mb, how)


def _name_figure(cond: Condition, side: Side, per_step: bool) -> tuple[float, int]:
    """The condition's figure on one side (ms, or slices for a count) and how many slices it counts."""
    scale = 1.0 if cond.field == "count" else 1e-3
    if per_step:
        assert side.table is not None, "a gate reads the slices of each side"
        match = matching_names(side.table, cond.query)  # type: ignore[arg-type]
        starts, ends = side.steps.start_us[side.chosen], side.steps.end_us[side.chosen]
        sums = per_step_sums(side.table, starts, ends, match)
        return median_of(sums[cond.field].astype(np.float64)) * scale, int(sums["count"].sum())
    rows = side.names
    picked = [r for name, r in rows.items() if cond.query.matches([name], seconds=float("inf"))[0][0]]  # type: ignore[union-attr]
    return sum(r[cond.field] for r in picked) * scale, int(sum(r["count"] for r in picked))
