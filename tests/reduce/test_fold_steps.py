"""The fold's per-slice steps (`reduce/fold_steps.py`): plans of real traces are the same
byte for byte whether the steps (and the plan's other native passes: the first instants,
the events of other phases) run natively or in numpy, and the names' counts are
`np.unique`'s whether they are counted in a table or sorted."""

from __future__ import annotations

import numpy as np
import pytest

from tb_reduce_plugin.native import available
from tb_reduce_plugin.reduce import fold_steps, points
from tb_reduce_plugin.reduce import plan as plan_module
from tb_reduce_plugin.reduce.plan import default_window, plan


def _plans(t) -> list:
    d0, d1 = default_window(t)
    w = d1 - d0
    windows = ((None, None), (d0 + 0.1 * w, d1), (d0 + 0.3 * w, d0 + 0.31 * w))
    return [plan(t, level, *win, resolution=res) for level in (1, 2, 4) for win in windows
            for res in (None, 97)]


@pytest.mark.skipif(not available(), reason="the native extension is not built here")
def test_plans_of_real_traces_are_the_same_with_the_native_steps_and_with_numpy(oracle_tables,
                                                                                monkeypatch) -> None:
    compared = 0
    for name, t in oracle_tables:
        monkeypatch.setenv("TB_REDUCE_NATIVE", "1")  # native steps, also where the suite runs pure
        native = _plans(t)
        for module in (fold_steps, points, plan_module):  # the steps' numpy twins only
            monkeypatch.setattr(module, "scanner_module", lambda: None)
        twin = _plans(t)
        monkeypatch.undo()
        for a, b in zip(native, twin):
            assert np.array_equal(a.keep, b.keep), name
            for f in a.summaries.__dataclass_fields__:
                x, y = getattr(a.summaries, f), getattr(b.summaries, f)
                assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), (name, f)
            compared += 1
    assert compared >= 18 * 5


@pytest.mark.parametrize("seed", range(40))
def test_names_counted_in_a_table_or_natively_are_what_unique_finds(seed: int, monkeypatch) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    groups = int(rng.integers(1, max(2, n // int(rng.choice([1, 5, 400])))))
    group = np.sort(rng.integers(0, groups, n))
    group -= group[0]  # ascending from 0, as a chunk's groups are
    name = rng.integers(0, int(rng.choice([1, 7, 700, 70000])), n).astype(np.int64)
    nn = int(name.max()) + 1
    want_combo, want_cnt = np.unique(group * nn + name, return_counts=True)
    module = fold_steps.scanner_module()
    ways = [(None, 0), (None, 1 << 30)]  # numpy: sorted always, counted in a table always
    if available():
        monkeypatch.setenv("TB_REDUCE_NATIVE", "1")  # and natively, also where the suite runs pure
        ways.append((fold_steps.scanner_module(), 0))
        monkeypatch.delenv("TB_REDUCE_NATIVE")
    for module, table_per_row in ways:
        monkeypatch.setattr(fold_steps, "scanner_module", lambda m=module: m)
        monkeypatch.setattr(fold_steps, "_COUNT_TABLE_PER_ROW", table_per_row)
        monkeypatch.setattr(fold_steps, "_COUNT_TABLE_MIN", 0 if table_per_row == 0 else 1 << 30)
        g, nm, cnt = fold_steps.name_counts(group, name)
        assert g.dtype == want_combo.dtype and cnt.dtype == want_cnt.dtype
        assert np.array_equal(g, want_combo // nn) and np.array_equal(nm, want_combo % nn)
        assert np.array_equal(cnt, want_cnt)


def test_the_native_name_count_refuses_what_it_cannot_count_and_numpy_counts_it(monkeypatch) -> None:
    """Groups that go back, names outside [0, nn), too many names: -1, and `name_counts`
    takes the numpy path (same answer as `np.unique`)."""
    if not available():
        pytest.skip("the native extension is not built here")
    monkeypatch.setenv("TB_REDUCE_NATIVE", "1")
    mod = fold_steps.scanner_module()
    out = [np.empty(4, dtype=np.int64) for _ in range(3)]
    assert mod.name_counts(np.array([1, 0, 0, 0]), np.array([0, 0, 1, 1]), 2, *out) == -1
    assert mod.name_counts(np.array([0, 0, 1, 1]), np.array([0, 5, 1, 1]), 2, *out) == -1
    assert mod.name_counts(np.array([0, 0, 1, 1]), np.array([0, -1, 1, 1]), 2, *out) == -1
    assert mod.name_counts(np.array([0, 0, 1, 1]), np.array([0, 1, 1, 1]), 1 << 25, *out) == -1
    assert mod.name_counts(np.array([0, 0, 1, 1]), np.array([1, 0, 1, 1]), 2, *out) == 3
    assert [o[:3].tolist() for o in out] == [[0, 0, 1], [0, 1, 1], [1, 1, 2]]
    with pytest.raises(ValueError):
        mod.name_counts(np.array([0, 0]), np.array([0]), 2, *out)
    g, nm, cnt = fold_steps.name_counts(np.array([0, 0, 1, 1]), np.array([3 << 24, 0, 1, 1]))
    assert g.tolist() == [0, 0, 1] and nm.tolist() == [0, 3 << 24, 1] and cnt.tolist() == [1, 1, 2]


def _both_ways(monkeypatch, fn):
    """`fn()` with the native steps (where built) and with their numpy twins only."""
    got = []
    if available():
        monkeypatch.setenv("TB_REDUCE_NATIVE", "1")  # natively, also where the suite runs pure
        got.append(fn())
        monkeypatch.delenv("TB_REDUCE_NATIVE")
    monkeypatch.setattr(fold_steps, "scanner_module", lambda: None)
    got.append(fn())
    monkeypatch.undo()
    return got


@pytest.mark.parametrize("seed", range(30))
def test_a_chunk_s_slices_are_selected_the_same_natively_and_in_numpy(seed: int, monkeypatch) -> None:
    """`select_slices`: the overlapping rows of a run of the slice order whose kept flag is
    the one asked, with their times and names, in the run's order, whatever the widths of
    the order and the names, and without overlap flags (a window's own slices)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 2000))
    start = rng.normal(0, 1e6, n)
    end = start + rng.exponential(100, n)
    name = rng.integers(0, 300, n).astype(rng.choice([np.int16, np.int32, np.int64]))  # stored ids are narrowed
    overlaps, kept = rng.random(n) < rng.random(), rng.random(n) < rng.random()
    order = rng.permutation(n)[:int(rng.integers(0, n + 1))].astype(rng.choice([np.int32, np.int64]))
    for want in (False, True):
        for names, flags in ((None, overlaps), (name, overlaps), (name, None)):  # None: every row overlaps
            want_rows = [int(i) for i in order if (flags is None or flags[i]) and kept[i] == want]
            for got in _both_ways(monkeypatch, lambda w=want, nm=names, f=flags: fold_steps.select_slices(
                    order, f, kept, w, start, end, nm)):
                assert got[0].dtype == np.int64 and got[0].tolist() == want_rows
                assert got[1].tobytes() == start[want_rows].tobytes() and got[2].tobytes() == end[want_rows].tobytes()
                assert len(got) == (3 if names is None else 4)
                if names is not None:
                    assert got[3].dtype == np.int64 and got[3].tolist() == name[want_rows].tolist()


def test_a_row_outside_the_slices_is_refused_natively_and_raises_as_numpy_does(monkeypatch) -> None:
    if not available():
        pytest.skip("the native extension is not built here")
    monkeypatch.setenv("TB_REDUCE_NATIVE", "1")
    mod = fold_steps.scanner_module()
    flags, times = np.ones(3, dtype=np.uint8), np.zeros(3)
    out = [np.empty(2, dtype=np.int64), np.empty(2), np.empty(2), np.empty(2, dtype=np.int64)]
    for bad in ([0, 3], [-1, 0]):
        assert mod.select_slices(np.array(bad, dtype=np.int64), 8, flags, flags, True, times, times, b"", 0, *out) == -1
    with pytest.raises(ValueError):  # arrays that do not match
        mod.select_slices(np.array([0], dtype=np.int64), 8, flags, flags[:2], True, times, times, b"", 0, *out)
    with pytest.raises(ValueError):  # overlap flags, but not one a slice
        mod.select_slices(np.array([0], dtype=np.int64), 8, flags[:2], flags, True, times, times, b"", 0, *out)
    for bad in ([0, 3], [-1, 0]):  # without overlap flags, rows are still bounded by the slices
        assert mod.select_slices(np.array(bad, dtype=np.int64), 8, b"", flags, True, times, times, b"", 0, *out) == -1
    with pytest.raises(IndexError):
        fold_steps.select_slices(np.array([0, 3]), np.ones(3, dtype=bool), np.ones(3, dtype=bool), True, times, times)


@pytest.mark.parametrize("seed", range(30))
def test_a_chunk_s_groups_are_the_same_natively_and_in_numpy(seed: int, monkeypatch) -> None:
    """`fold_groups`: each slice's group, each group's first slice and latest end, from the
    cuts (slice 0 opening one whatever its flag); ends that are not finite go the numpy way."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    new = rng.random(n) < rng.choice([0.0, 0.01, 0.5, 1.0])
    se = rng.normal(0, 1e3, n)
    if seed % 5 == 4:
        se[int(rng.integers(0, n))] = rng.choice([np.nan, np.inf, -np.inf])
    first = new.copy()
    first[0] = True
    seg = np.flatnonzero(first)
    for group, got_seg, seg_end in _both_ways(monkeypatch, lambda: fold_steps.fold_groups(new, se)):
        assert group.tolist() == (np.cumsum(first) - 1).tolist() and got_seg.tolist() == seg.tolist()
        assert np.array_equal(seg_end, np.maximum.reduceat(se, seg), equal_nan=True)


@pytest.mark.parametrize("seed", range(20))
def test_the_native_keep_of_other_phases_is_numpy_s(seed: int, monkeypatch) -> None:
    """`_scan.window_keep`: events in [t0, t1] (both ends in, NaN in none) of phases without
    a rule, or counters without samples, set in `keep` and nothing cleared."""
    if not available():
        pytest.skip("the native extension is not built here")
    monkeypatch.setenv("TB_REDUCE_NATIVE", "1")
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 500))
    t0, t1 = 10.0, 20.0
    ts = rng.choice([np.nan, t0, t1, np.nextafter(t0, 0), np.nextafter(t1, 99), 15.0, 5.0, 25.0], n)
    ph = rng.choice(np.frombuffer(b"XBEMCisfP", dtype=np.uint8), n)
    handled, sampled, keep = rng.random(n) < 0.5, rng.random(n) < 0.5, rng.random(n) < 0.2
    want = keep | ((ts >= t0) & (ts <= t1) & (~handled | ((ph == ord("C")) & ~sampled)))
    fold_steps.scanner_module().window_keep(ts, ph, handled.view(np.uint8), sampled.view(np.uint8), t0, t1,
                                            keep.view(np.uint8))
    assert np.array_equal(keep, want)
    with pytest.raises(ValueError):
        fold_steps.scanner_module().window_keep(ts[:n // 2], ph, handled.view(np.uint8), sampled.view(np.uint8),
                                                t0, t1, keep.view(np.uint8))
