"""Summaries written natively (`_scan.summary_json`, `writer.summary_text`) are the bytes
`writer.summary_events` writes a Python f-string at a time: on the plans of real traces, and
on random summaries with the odd values a trace can hold (names that are None, numbers,
unicode and escapes; times that are negative, huge, NaN, inf or -0.0; counts of one; no busy
digits); and codes or offsets out of their arrays are refused, never read past."""

from __future__ import annotations

import numpy as np
import pytest

from tb_reduce_plugin.native import available, scanner_module
from tb_reduce_plugin.reduce import writer
from tb_reduce_plugin.reduce.plan import Plan, default_window, plan
from tb_reduce_plugin.reduce.summaries import Summaries

pytestmark = pytest.mark.skipif(not available(), reason="the native extension is not built here")


def _native(monkeypatch):
    monkeypatch.setenv("TB_REDUCE_NATIVE", "1")  # also where the suite runs pure
    module = scanner_module()
    assert module is not None
    return module


def _both(p: Plan, tracks: list, names: list, native) -> tuple[bytes, bytes]:
    return writer.summary_text(p, tracks, names, native), b",\n".join(writer.summary_events(p, tracks, names))


def test_the_summaries_of_real_plans_are_written_natively_as_in_python(oracle_tables, monkeypatch) -> None:
    native = _native(monkeypatch)
    compared = 0
    for name, t in oracle_tables:
        d0, d1 = default_window(t)
        w = d1 - d0
        for win in ((None, None), (d0 + 0.3 * w, d0 + 0.31 * w)):
            for level in (1, 2, 4):
                p = plan(t, level, *win, resolution=997)
                fast, slow = _both(p, t.tracks, t.names, native)
                assert fast == slow, (name, level, win)
                compared += len(p.summaries)
    assert compared > 1000


_ODD_NAMES = [None, 0, -7, 3.5, "", "aten::mm", "naïve ✓", 'quote " and \\ back', "tab\tnew\nline",
              "\x00\x1f", "emoji 🎉", "a" * 300, True, 12345678901234567890]
_ODD_TIMES = [0.0, -0.0, 1.0, -1.5, 1e-7, 1420196813804.415, 1e16, 1.7976931348623157e308, 5e-324,
              float("inf"), float("-inf"), float("nan"), 2.0 ** 53 + 2]


def _random_summaries(rng: np.random.Generator, tracks: int, names: int) -> Summaries:
    n = int(rng.integers(1, 60))
    tops = rng.integers(1, 6, n)
    offsets = np.concatenate(([0], np.cumsum(tops))).astype(np.int64)
    if rng.random() < 0.5:
        start = rng.choice(_ODD_TIMES, n)
        end = rng.choice(_ODD_TIMES, n)
    else:
        start = rng.uniform(-1e13, 1e13, n)
        end = start + rng.exponential(1e3, n)
    digits = [rng.integers(48, 58, int(rng.choice([0, 0, 1, 2, 40]))).astype(np.uint8) for _ in range(n)]
    busy_offsets = np.concatenate(([0], np.cumsum([len(d) for d in digits]))).astype(np.int64)
    no_busy = rng.random() < 0.2
    return Summaries(
        rng.integers(0, tracks, n).astype(np.int32), np.asarray(start, dtype=np.float64),
        np.asarray(end, dtype=np.float64), rng.choice([1, 1, 2, 17, 2 ** 40], n).astype(np.int64), offsets,
        rng.integers(0, names, int(offsets[-1])).astype(np.int64),
        rng.choice([1, 3, 999, 2 ** 62], int(offsets[-1])).astype(np.int64),
        None if no_busy else busy_offsets,
        None if no_busy else (np.concatenate(digits) if busy_offsets[-1] else np.zeros(0, dtype=np.uint8)))


@pytest.mark.parametrize("seed", range(60))
def test_random_summaries_with_odd_names_and_times_are_the_same_bytes(seed: int, monkeypatch) -> None:
    native = _native(monkeypatch)
    rng = np.random.default_rng(seed)
    names = list(_ODD_NAMES)
    tracks = [(pid, tid) for pid in (1, "proc ✓", None) for tid in (0, "thread \"x\"", -3)]
    p = Plan(2, 100, 0.0, 1.0, np.zeros(0, dtype=np.int64), _random_summaries(rng, len(tracks), len(names)))
    fast, slow = _both(p, tracks, names, native)
    assert fast == slow


def test_codes_and_offsets_outside_their_arrays_are_refused(monkeypatch) -> None:
    native = _native(monkeypatch)
    head = b'{"ph":"X","name":'
    one = np.zeros(1, dtype=np.int32)
    times = np.zeros(1, dtype=np.float64)
    counts = np.ones(1, dtype=np.int64)

    def call(track_code=one, label_code=one, top_code=one, top_offsets=(0, 1), busy=None,
             busy_offsets=None, names=None):
        return native.summary_json(head, [b'"pid":1,"tid":1'], track_code, [b'"x'], label_code,
                                   names if names is not None else [b'"x"'], top_code, counts,
                                   np.asarray(top_offsets, dtype=np.int64), times, times, counts, busy, busy_offsets)

    assert call().startswith(head)
    for bad in (dict(track_code=np.array([1], dtype=np.int32)), dict(label_code=np.array([-1], dtype=np.int32)),
                dict(top_code=np.array([5], dtype=np.int32)), dict(top_offsets=[0, 2]), dict(top_offsets=[1, 0]),
                dict(top_offsets=[0, 1, 1]), dict(busy=b"12", busy_offsets=np.array([0, 3], dtype=np.int64)),
                dict(busy=b"12", busy_offsets=np.array([2, 1], dtype=np.int64))):
        with pytest.raises(ValueError):
            call(**bad)
    with pytest.raises(TypeError):
        call(names=["not bytes"])


def _times(rng: np.random.Generator, n: int) -> np.ndarray:
    """Doubles a trace's times are, and their neighbours: whole and 1-4 decimal numbers of µs
    up to and past 2^53, their next doubles up and down, halves, random bits, times to the ns
    and the lengths between two of them (exact binary fractions of up to ~15 decimals), and
    numbers small enough for repr's exponent form."""
    m = rng.integers(-(1 << 45), 1 << 45, n)
    k = rng.integers(0, 5, n)
    decimal = m / (10.0 ** k)
    near = np.nextafter(decimal, rng.choice([-np.inf, np.inf], n))
    bits = rng.integers(0, 1 << 63, n, dtype=np.int64).view(np.float64)
    edge = np.array([2.0 ** 42, -(2.0 ** 42), np.nextafter(2.0 ** 42, 0), 2.0 ** 42 - 0.001, 0.001, -0.001, 0.0005,
                     1e-4, 9.9995, 0.125, 1e16 / 3, 4398046511103.999, 1420196813804.415, 123456789012.0005])
    at = rng.choice([1.42e12, 3.3e9, 7e5, 1e15], n) + rng.integers(0, 10 ** 9, n) / 1000.0
    ends = at + rng.integers(0, 10 ** 7, n) / 1000.0  # ends as ts + dur are, and the lengths between
    return np.concatenate((decimal, near, bits, edge, rng.uniform(-5, 5, n) // 0.001 * 0.001, at, ends - at,
                           at - np.roll(at, 1), rng.uniform(1e-5, 1e-3, n)))


@pytest.mark.parametrize("seed", range(4))
def test_times_are_written_as_repr_writes_them(seed: int, monkeypatch) -> None:
    native = _native(monkeypatch)
    rng = np.random.default_rng(seed)
    start = _times(rng, 5000)
    end = _times(rng, 5000)[:len(start)]
    n = len(start)
    s = Summaries(np.zeros(n, dtype=np.int32), start, end, np.ones(n, dtype=np.int64),
                  np.arange(n + 1, dtype=np.int64), np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64))
    p = Plan(2, 100, 0.0, 1.0, np.zeros(0, dtype=np.int64), s)
    fast, slow = _both(p, [(1, 2)], ["n"], native)
    assert fast == slow


def test_the_longest_numbers_each_field_can_hold_fit_the_text_sized_beforehand(monkeypatch) -> None:
    """The native text is sized before it is written (a number 40 characters at most, a
    count 20): counts at the ends of int64, times in repr's longest exponent form, many top
    names and busy digits come out whole and as Python writes them."""
    native = _native(monkeypatch)
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    start = np.array([-1.7976931348623157e308, -2.2250738585072014e-308, -5e-324, np.nan, 1e22, -1e16 / 3])
    end = np.array([1.7976931348623157e308, np.inf, -1.2345678901234567e-300, 0.1, -np.inf, 1e16 / 7])
    n = len(start)
    tops = 40
    count = np.array([big, big - 1, 2, small + 2, 1, 3], dtype=np.int64)
    top_count = np.resize(np.array([big, small, -1, 0], dtype=np.int64), n * tops)
    busy = np.frombuffer(b"9" * (n * 50), dtype=np.uint8).copy()
    s = Summaries(np.arange(n, dtype=np.int32) % 2, start, end, count, np.arange(0, n * tops + 1, tops, dtype=np.int64),
                  np.arange(n * tops, dtype=np.int64) % 7, top_count, np.arange(0, n * 50 + 1, 50, dtype=np.int64), busy)
    p = Plan(2, 100, 0.0, 1.0, np.zeros(0, dtype=np.int64), s)
    names = ["x" * 300, None, 12, "ü" * 50, '"\\', "", "z"]
    fast, slow = _both(p, [(-(1 << 62), "t" * 200), ("p", -5)], names, native)
    assert fast == slow and fast.count(b'"busy":"') == n


def test_one_summary_of_the_longest_numbers_alone_fits_too(monkeypatch) -> None:
    """Alone, with no short field beside it to leave room: a count of 19 digits (and its
    "+N more"), a top count of 20 characters, a start and a length of 24 each."""
    native = _native(monkeypatch)
    start = np.array([-1.2345678901234567e300])
    end = 2 * start  # a length of exactly the start: 24 characters as well
    s = Summaries(np.zeros(1, dtype=np.int32), start, end, np.array([np.iinfo(np.int64).max]),
                  np.array([0, 1], dtype=np.int64), np.zeros(1, dtype=np.int64),
                  np.array([np.iinfo(np.int64).min]))
    p = Plan(2, 100, 0.0, 1.0, np.zeros(0, dtype=np.int64), s)
    fast, slow = _both(p, [(1, 2)], ["n"], native)
    assert fast == slow and len(repr(float(start[0]))) == len(repr(float(end[0] - start[0]))) == 24
