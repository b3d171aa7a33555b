"""The gate's conditions as written and judged, and the per-step sums a name condition
compares, held against a plain loop over a real PyTorch run's slices."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import ROOT

from tb_reduce_plugin.compare.gate import judge, parse_condition
from tb_reduce_plugin.compare.names import matching_names, per_step_sums
from tb_reduce_plugin.compare.steps import StepRange, chosen_steps, parse_step_range, spread
from tb_reduce_plugin.query.nesting import parents_of
from tb_reduce_plugin.query.search import compile_regex
from tb_reduce_plugin.reduce.pipeline import index_file
from tb_reduce_plugin.reduce.shared import slices_of
from tb_reduce_plugin.waveforms.steps import derive

BASE = ROOT / "tests" / "fixtures" / "compare" / "base.pt.trace.json.gz"


@pytest.mark.parametrize("spec, series, pattern, field, percent, absolute", [
    ("step_time:+5%", "step_time", None, "self_us", 5.0, None),
    ("step_time_ms:+5%", "step_time", None, "self_us", 5.0, None),
    ("unaccounted:+2ms", "unaccounted", None, "self_us", None, 2.0),
    ("compute:+1.5s", "compute", None, "self_us", None, 1500.0),
    ("compute:+250us", "compute", None, "self_us", None, 0.25),
    ("name:aten::mm:self:+10%", None, "aten::mm", "self_us", 10.0, None),
    ("name:nccl|gloo:wall:+3ms", None, "nccl|gloo", "wall_us", None, 3.0),
    ("name:^aten::(add|mul)$:count:+2", None, "^aten::(add|mul)$", "count", None, 2.0),
    ("memory_peak_mb_cpu:+100MB", "memory_peak_mb_cpu", None, "self_us", None, 100.0),
    ("memory_peak_mb_cuda0:+2GB", "memory_peak_mb_cuda0", None, "self_us", None, 2000.0),
    ("memory_peak_mb_cpu:+500kB", "memory_peak_mb_cpu", None, "self_us", None, 0.5),
])
def test_conditions_are_read_as_written(spec, series, pattern, field, percent, absolute) -> None:
    c = parse_condition(spec)
    assert (c.series, c.pattern, c.field, c.percent, c.absolute) == (series, pattern, field, percent, absolute)
    assert (c.query is None) == (pattern is None)


@pytest.mark.parametrize("spec", ["step_time", "step_time:5%", "step_time:-5%", "step time:+5%", "step_time:+5",
                                  "name:x:self:+5", "name:x:count:+5ms", "name:x:+5%", "name::self:+5%",
                                  "name:(:self:+5%", "step_time:+inf%", "step_time:+nan%", "step_time:+5MB",
                                  "memory_peak_mb_cpu:+5ms", "memory_peak_mb_cpu:+5"])
def test_a_condition_that_is_not_one_is_refused_with_a_line_naming_it(spec: str) -> None:
    with pytest.raises(ValueError) as got:
        parse_condition(spec)
    assert spec in str(got.value) and "\n" not in str(got.value)


def test_a_figure_at_its_limit_passes_and_one_past_it_fails() -> None:
    pct, ms = parse_condition("step_time:+10%"), parse_condition("step_time:+2ms")
    assert not judge(pct, 100.0, 110.0, "").failed and judge(pct, 100.0, 110.001, "").failed
    assert not judge(ms, 100.0, 102.0, "").failed and judge(ms, 100.0, 102.001, "").failed
    assert not judge(pct, 100.0, 50.0, "").failed  # faster is never a regression
    assert judge(pct, 0.0, 0.5, "").failed and "new" in judge(pct, 0.0, 0.5, "").line  # from nothing: a margin of 0 % of 0
    assert not judge(pct, 0.0, 0.0, "").failed


def test_step_ranges_are_read_and_matched_by_step_number() -> None:
    assert parse_step_range("3:7") == StepRange(3, 7) and parse_step_range(" 3 : ") == StepRange(3, None)
    assert parse_step_range(":7") == StepRange(None, 7)
    for bad in (":", "", "a:b", "7:3", "1.5:3"):
        with pytest.raises(ValueError):
            parse_step_range(bad)
    s = derive(index_file(BASE).table)
    assert chosen_steps(s, None, "x").tolist() == list(range(len(s)))
    picked = chosen_steps(s, StepRange(4, 6), "x")
    assert s.step[picked].tolist() == [4, 5, 6]


def test_a_spread_takes_finite_values_and_names_the_slowest_step() -> None:
    v = np.array([3.0, np.nan, 9.0, 1.0, 9.0])
    got = spread(v, np.array([10, 11, 12, 13, 14]))
    assert got is not None and got.steps == 4 and got.median == 6.0 and got.slowest == 9.0 and got.slowest_step == 12
    assert spread(np.array([np.nan]), np.array([1])) is None


def test_per_step_sums_are_what_a_plain_loop_over_the_slices_finds() -> None:
    t = index_file(BASE).table
    s = derive(t)
    sl, parent = slices_of(t), parents_of(t)
    for pattern in ("^aten::mm$", "aten::", "."):
        match = matching_names(t, compile_regex(pattern))
        got = per_step_sums(t, s.start_us, s.end_us, match)
        children = np.zeros(len(sl))
        for i in range(len(sl)):
            if parent[i] >= 0:
                children[parent[i]] += sl.dur[i]
        want = {"count": np.zeros(len(s)), "wall_us": np.zeros(len(s)), "self_us": np.zeros(len(s))}
        for i in range(len(sl)):
            if not match[sl.name[i]]:
                continue
            inside = [k for k in range(len(s)) if s.start_us[k] <= sl.start[i] < s.end_us[k]]
            if inside:
                k = max(inside, key=lambda k: s.start_us[k])
                want["count"][k] += 1
                want["wall_us"][k] += sl.dur[i]
                want["self_us"][k] += max(sl.dur[i] - children[i], 0.0)
        assert got["count"].tolist() == want["count"].tolist(), pattern
        assert np.allclose(got["wall_us"], want["wall_us"]) and np.allclose(got["self_us"], want["self_us"])
        assert got["count"].sum() > 0 and math.isfinite(got["self_us"].sum())


def test_per_step_sums_read_the_slices_a_chunk_at_a_time_to_the_same_sums(monkeypatch) -> None:
    from tb_reduce_plugin.reduce import shared

    t = index_file(BASE).table
    s = derive(t)
    match = matching_names(t, compile_regex("aten::"))
    whole = per_step_sums(t, s.start_us, s.end_us, match)
    monkeypatch.setattr(shared, "CHUNK_SLICES", 97)
    chunked = per_step_sums(t, s.start_us, s.end_us, match)
    assert whole["count"].tolist() == chunked["count"].tolist()
    assert np.allclose(whole["self_us"], chunked["self_us"])
