"""Smoothing: TensorBoard's `classicSmoothing`, bit for bit, on a hand-computed table
(tests/fixtures/smoothing_cases.json, shared with the dashboard's JavaScript test)."""

from __future__ import annotations

import json
import math
import struct
from fractions import Fraction
from typing import Any, List

import numpy as np
import pytest
from conftest import TESTS
from hypothesis import given
from hypothesis import strategies as st

from tb_reduce_plugin.waveforms.smoothing import DEFAULT_WEIGHT, MAX_WEIGHT, smooth

CASES = json.loads((TESTS / "fixtures" / "smoothing_cases.json").read_text())
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def number(x: Any) -> float:
    return NON_FINITE[x] if isinstance(x, str) else float(x)


def same_bits(got: List[float], expected: List[float]) -> bool:
    """Equal to the last bit (NaN equal to NaN; 0.0 and -0.0 told apart)."""
    return len(got) == len(expected) and all(
        (math.isnan(a) and math.isnan(b)) or struct.pack("<d", a) == struct.pack("<d", b) for a, b in zip(got, expected))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_each_hand_computed_case_is_matched_to_the_last_bit(case: dict) -> None:
    got = smooth([number(v) for v in case["values"]], number(case["weight"])).tolist()
    assert same_bits(got, [number(v) for v in case["expected"]]), got


def test_the_table_covers_the_edge_cases_the_dashboard_must_draw() -> None:
    names = " ".join(c["name"] for c in CASES)
    for what in ("empty", "single point", "constant", "NaN in the middle", "NaN first", "infinities",
                 "weight zero", "weight one", "negative weight", "NaN weight", "infinite weight"):
        assert what in names, what


def test_two_points_at_weight_one_half_by_hand() -> None:
    # w = 0.5, values [1, 3]:
    #   point 1: last = 0 * 0.5 + (1 - 0.5) * 1 = 0.5;  n = 1, debias 1 - 0.5**1 = 0.5   -> 0.5 / 0.5 = 1
    #   point 2: last = 0.5 * 0.5 + 0.5 * 3 = 1.75;     n = 2, debias 1 - 0.5**2 = 0.75  -> 1.75 / 0.75 = 7/3
    # Every intermediate is exact in binary; the one rounding is 7/3 to the nearest double.
    assert smooth([1.0, 3.0], 0.5).tolist() == [1.0, float(Fraction(7, 3))]


def test_weight_one_quarter_by_hand() -> None:
    # w = 0.25, values [4, 8, 0]:
    #   point 1: last = 0.75 * 4 = 3;                      debias 1 - 0.25      = 0.75      -> 3 / 0.75 = 4
    #   point 2: last = 3 * 0.25 + 0.75 * 8 = 6.75;        debias 1 - 0.0625    = 0.9375    -> 6.75 / 0.9375 = 36/5
    #   point 3: last = 6.75 * 0.25 + 0.75 * 0 = 1.6875;   debias 1 - 0.015625  = 0.984375  -> (27/16) / (63/64) = 12/7
    assert smooth([4.0, 8.0, 0.0], 0.25).tolist() == [4.0, float(Fraction(36, 5)), float(Fraction(12, 7))]


def test_nan_in_the_middle_by_hand() -> None:
    # w = 0.5, values [1, NaN, 3]: NaN is passed through and does not advance n, so
    # point 3 is the second accumulated point: (0.5 * 0.5 + 0.5 * 3) / (1 - 0.5**2) = 7/3.
    got = smooth([1.0, math.nan, 3.0], 0.5)
    assert got[0] == 1.0 and math.isnan(got[1]) and got[2] == float(Fraction(7, 3))


def test_the_dashboard_constants_are_tensorboards() -> None:
    assert DEFAULT_WEIGHT == 0.6 and MAX_WEIGHT == 0.999


def test_a_numpy_array_is_not_modified() -> None:
    values = np.array([1.0, 5.0, 2.0])
    smooth(values, 0.6)
    assert values.tolist() == [1.0, 5.0, 2.0]


floats = st.floats(allow_nan=True, allow_infinity=True, width=64)
finite = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)


@given(st.lists(floats, max_size=40))
def test_weight_zero_gives_the_raw_values(values: List[float]) -> None:
    got = smooth(values, 0.0)
    np.testing.assert_array_equal(got, np.array(values, dtype=np.float64))


@given(floats, st.integers(min_value=0, max_value=30), st.floats(allow_nan=True, allow_infinity=True))
def test_a_constant_series_is_returned_unchanged_at_any_weight(c: float, n: int, w: float) -> None:
    got = smooth([c] * n, w)
    if math.isnan(c) and n > 1:  # NaN == NaN is false: not constant, but NaN passes through anyway
        assert np.isnan(got).all()
    else:
        assert got.tolist() == [c] * n or (math.isnan(c) and np.isnan(got).all())


@given(st.lists(st.one_of(finite, st.sampled_from([math.nan, math.inf, -math.inf])), max_size=40),
       st.floats(min_value=0, max_value=MAX_WEIGHT))
def test_non_finite_values_pass_through_and_the_rest_stay_within_the_values_seen(values: List[float], w: float) -> None:
    got = smooth(values, w)
    assert len(got) == len(values)
    seen: List[float] = []
    constant = all(v == values[0] for v in values)
    for v, s in zip(values, got):
        if not math.isfinite(v):
            assert s == v or (math.isnan(v) and math.isnan(s))
            continue
        seen.append(v)
        if constant:
            assert s == v
            continue
        # a debiased moving average is a weighted mean of the finite values so far
        lo, hi = min(seen), max(seen)
        slack = 1e-9 * max(1.0, abs(lo), abs(hi))
        assert lo - slack <= s <= hi + slack, (v, s, lo, hi)
