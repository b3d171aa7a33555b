"""The first instant of each scope and bucket (SPEC G5) found from the window index's
instants in time order (`points.first_instants_by_time`: one pass natively) is the set the
sort by five keys finds (`points._first_instants`), on real traces and on random keys."""

from __future__ import annotations

import numpy as np
import pytest

from tb_reduce_plugin.model.table import INSTANT_PHASES, ph_in
from tb_reduce_plugin.native import available
from tb_reduce_plugin.reduce import plan, points
from tb_reduce_plugin.reduce.buckets import _Buckets
from tb_reduce_plugin.reduce.plan import default_window


def test_the_first_instants_in_time_order_are_those_the_sort_finds_on_real_traces(oracle_tables,
                                                                                   monkeypatch) -> None:
    compared = 0
    for name, t in oracle_tables:
        if points.instant_count(t) == 0:
            continue
        wi = plan.prepare_window_index(t)
        ts, ph = np.asarray(t.ts), np.asarray(t.ph)
        inst = np.asarray(wi.instants)
        want_all = np.flatnonzero(ph_in(ph, INSTANT_PHASES) & ~np.isnan(ts))
        assert np.array_equal(np.sort(inst), want_all), name  # every timed instant, once...
        assert np.all(np.diff(ts[inst]) >= 0), name  # ...by time...
        ties = np.diff(ts[inst]) == 0
        assert np.all(np.diff(inst)[ties] > 0), name  # ...then event
        d0, d1 = default_window(t)
        w = max(d1 - d0, 1e-3)
        for (a, b), r in (((d0, d1), 1600), ((d0, d1), 7), ((d0 + 0.2 * w, d0 + 0.45 * w), 97)):
            bk = _Buckets(a, b, r)
            within = wi.instants_within(t, a, b)
            assert np.array_equal(np.sort(within), want_all[(ts[want_all] >= a) & (ts[want_all] <= b)]), name
            want = np.sort(points._first_instants(t, within, bk, t.track_pid()))
            ways = [("numpy", None)]
            if available():
                monkeypatch.setenv("TB_REDUCE_NATIVE", "1")  # natively, also where the suite runs pure
                ways.append(("native", points.scanner_module()))
                monkeypatch.delenv("TB_REDUCE_NATIVE")
            for way, module in ways:
                monkeypatch.setattr(points, "scanner_module", lambda m=module: m)
                got = points.first_instants_by_time(t, within, bk, t.track_pid())
                monkeypatch.undo()
                assert got.dtype == np.int64 and np.array_equal(got, want), (name, way, a, b, r)
            compared += 1
    assert compared >= 6


@pytest.mark.parametrize("seed", range(30))
def test_the_native_firsts_by_key_are_the_first_row_of_each_key_and_bucket(seed: int, monkeypatch) -> None:
    if not available():
        pytest.skip("the native extension is not built here")
    monkeypatch.setenv("TB_REDUCE_NATIVE", "1")  # also where the suite runs pure
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 3000))
    nkeys = int(rng.integers(1, 50))
    key = rng.integers(0, nkeys, n).astype(np.int64)
    bucket = np.sort(rng.integers(0, int(rng.integers(1, 200)), n)).astype(np.int64)  # time order: never back
    out = np.empty(n, dtype=np.int64)
    k = points.scanner_module().firsts_by_key(key, bucket, nkeys, out) if n else 0
    seen, want = set(), []
    for i in range(n):
        if (key[i], bucket[i]) not in seen:
            seen.add((key[i], bucket[i]))
            want.append(i)
    assert out[:k].tolist() == want


def test_the_native_firsts_by_key_refuse_what_they_cannot_find(monkeypatch) -> None:
    """A bucket that goes back within its key, a key outside [0, nkeys), too many keys: -1
    (`first_instants_by_time` then sorts)."""
    if not available():
        pytest.skip("the native extension is not built here")
    monkeypatch.setenv("TB_REDUCE_NATIVE", "1")
    mod = points.scanner_module()
    out = np.empty(4, dtype=np.int64)
    assert mod.firsts_by_key(np.array([0, 1, 0, 1]), np.array([1, 1, 0, 2]), 2, out) == -1
    assert mod.firsts_by_key(np.array([0, 2, 0, 1]), np.array([0, 0, 0, 0]), 2, out) == -1
    assert mod.firsts_by_key(np.array([0, -1, 0, 1]), np.array([0, 0, 0, 0]), 2, out) == -1
    assert mod.firsts_by_key(np.array([0, 0, 0, 0]), np.array([0, 0, 0, 0]), 1 << 27, out) == -1
    assert mod.firsts_by_key(np.array([0, 1, 0, 1]), np.array([0, 0, 0, 3]), 2, out) == 3
    assert out[:3].tolist() == [0, 1, 3]
    with pytest.raises(ValueError):
        mod.firsts_by_key(np.array([0, 1]), np.array([0]), 2, out)


def test_a_trace_of_more_scopes_than_its_instants_can_pay_for_sorts_them(oracle_tables, monkeypatch) -> None:
    """The native pass keeps 8 B a (scope, who): past its bound (a trace of millions of
    threads and few instants) the instants are sorted, never a table of every thread."""
    if not available():
        pytest.skip("the native extension is not built here")
    monkeypatch.setenv("TB_REDUCE_NATIVE", "1")
    monkeypatch.setattr(points, "_KEYS_PER_INSTANT", 0)
    monkeypatch.setattr(points, "_KEYS_MIN", 0)
    called = []
    module = points.scanner_module()

    class Spy:
        def __getattr__(self, name):
            return getattr(module, name)

        def firsts_by_key(self, *args):
            called.append(1)
            return module.firsts_by_key(*args)

    monkeypatch.setattr(points, "scanner_module", lambda: Spy())
    for name, t in oracle_tables:
        if points.instant_count(t) == 0:
            continue
        wi = plan.prepare_window_index(t)
        d0, d1 = default_window(t)
        bk = _Buckets(d0, max(d1, d0 + 1e-3), 100)
        inst = wi.instants_within(t, d0, d1)
        got = points.first_instants_by_time(t, inst, bk, t.track_pid())
        assert np.array_equal(got, np.sort(points._first_instants(t, inst, bk, t.track_pid()))), name
    assert not called
