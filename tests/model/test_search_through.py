"""Searches through an order (`sorting.search_by` with `KeysThrough`): both ends of a span
searched at once, each query from its own side, and a cold step's pages asked for together."""

from __future__ import annotations

import numpy as np
import pytest

from tb_reduce_plugin.model import read_advice, sorting
from tb_reduce_plugin.model.sorting import KeysThrough, search_by


def _stored(rng, n: int, tmp_path=None):
    """Sorted keys (NaN last, infinities, repeats), stored out of order behind `order`;
    mapped from files when `tmp_path` is given."""
    keys = np.round(rng.normal(size=n), 1)
    if n:
        keys[rng.integers(0, n, size=min(n, 3))] = rng.choice([np.nan, np.inf, -np.inf], size=min(n, 3))
    keys = np.sort(keys)
    order = rng.permutation(n).astype(np.int32)
    stored = np.empty(n)
    stored[order] = keys
    if tmp_path is not None and n:
        np.save(tmp_path / "k.npy", stored)
        np.save(tmp_path / "o.npy", order)
        stored, order = np.load(tmp_path / "k.npy", mmap_mode="r"), np.load(tmp_path / "o.npy", mmap_mode="r")
    return keys, stored, order


@pytest.mark.parametrize("mapped", [False, True])
def test_queries_each_from_its_own_side_find_what_searchsorted_finds(tmp_path, mapped) -> None:
    rng = np.random.default_rng(11)
    for trial in range(150):
        n = int(rng.integers(0, 90))
        keys, stored, order = _stored(rng, n, tmp_path if mapped and trial % 10 == 0 else None)
        m = int(rng.integers(1, 12))
        lo = rng.integers(0, n + 1, m)
        hi = np.array([int(rng.integers(a, n + 1)) for a in lo.tolist()], dtype=np.int64)
        x = rng.choice(np.r_[np.round(rng.normal(size=8), 1), np.nan, np.inf, -np.inf, keys[:3]], m)
        right = rng.random(m) < 0.5
        want = [a + int(np.searchsorted(keys[a:b], v, "right" if r else "left"))
                for a, b, v, r in zip(lo.tolist(), hi.tolist(), x.tolist(), right.tolist())]
        got = search_by(KeysThrough(stored, order), lo, hi, x, right)
        assert got.tolist() == want, (keys, lo, hi, x, right)
        nan_as_inf = KeysThrough(stored, order, nan_as_inf=True)
        assert np.array_equal(nan_as_inf(np.arange(n)), np.where(np.isnan(keys), np.inf, keys))
        for a, b, v, r in zip(lo.tolist(), hi.tolist(), x.tolist(), right.tolist()):  # one query, a side as a flag
            assert int(search_by(KeysThrough(stored, order), a, b, v, np.bool_(r))) == \
                a + int(np.searchsorted(keys[a:b], v, "right" if r else "left"))


def test_a_cold_search_asks_for_each_steps_pages_of_the_order_and_the_keys_and_finds_the_same(
        tmp_path, monkeypatch) -> None:
    rng = np.random.default_rng(3)
    keys, stored, order = _stored(rng, 50_000, tmp_path)
    asked = []
    monkeypatch.setattr(sorting, "in_memory", lambda a, row: False)  # as after a restart
    monkeypatch.setattr(sorting, "ask_for", lambda a, rows: asked.append((a, np.array(rows))))
    x = np.sort(rng.normal(size=7))
    lo, hi = np.zeros(7, dtype=np.int64), np.full(7, 50_000)
    got = search_by(KeysThrough(stored, order), lo, hi, x, "left")
    assert np.array_equal(got, np.searchsorted(keys, x, "left"))
    assert len(asked) >= 2 * 15  # each step of the ~16: the order's rows, then their keys
    assert all(a is order for a, _ in asked[0::2]) and all(a is stored for a, _ in asked[1::2])
    for (_, rows), (_, at) in zip(asked[0::2], asked[1::2]):
        assert np.array_equal(np.asarray(order)[rows], at)  # the keys' rows are those the order names


def test_a_warm_search_asks_nothing_after_its_first_look(tmp_path, monkeypatch) -> None:
    """Pages just written are in memory: the looks (at the first step and a deep one) find them so, and no page is asked for."""
    rng = np.random.default_rng(5)
    keys, stored, order = _stored(rng, 50_000, tmp_path)
    looks, asked = [], []
    real = read_advice.in_memory
    monkeypatch.setattr(sorting, "in_memory", lambda a, row: looks.append(1) or real(a, row))
    monkeypatch.setattr(sorting, "ask_for", lambda a, rows: asked.append(1))
    x = np.sort(rng.normal(size=5))
    got = search_by(KeysThrough(stored, order), 0, 50_000, x, "right")
    assert np.array_equal(got, np.searchsorted(keys, x, "right"))
    assert asked == [] and 1 <= len(looks) <= 4  # at the first step and at a deep one


def test_ask_for_asks_each_page_of_a_mapped_arrays_rows_once(tmp_path, monkeypatch) -> None:
    np.save(tmp_path / "a.npy", np.arange(100_000, dtype=np.int64))
    a = np.load(tmp_path / "a.npy", mmap_mode="r")
    calls = []

    class Libc:
        def madvise(self, at, size, advice):
            calls.append((at, size, advice))
            return 0
    monkeypatch.setattr(read_advice, "_libc", Libc())
    rows = np.array([0, 1, 600, 601, 50_000, 99_999, 600])
    read_advice.ask_for(a, rows)
    pages = np.unique((rows * 8 + a.ctypes.data) // read_advice._PAGE)
    assert [c[0] // read_advice._PAGE for c in calls] == pages.tolist()
    assert all(size == read_advice._PAGE and adv == read_advice.MADV_WILLNEED for _, size, adv in calls)
    calls.clear()
    read_advice.ask_for(np.arange(10), np.array([1, 2]))  # memory of the process's own: nothing asked
    assert calls == []


def test_in_memory_looks_at_the_one_page_of_a_mapped_row(tmp_path, monkeypatch) -> None:
    np.save(tmp_path / "a.npy", np.arange(100_000, dtype=np.int64))
    a = np.load(tmp_path / "a.npy", mmap_mode="r")
    assert read_advice.in_memory(a, 50_000)  # just written: in the page cache
    looked = []

    class Libc:
        def mincore(self, at, size, vec):
            looked.append((at, size))
            return 0  # leaves the byte zero: not in memory
    monkeypatch.setattr(read_advice, "_libc", Libc())
    assert not read_advice.in_memory(a, 50_000)
    assert looked == [((50_000 * 8 + a.ctypes.data) // read_advice._PAGE * read_advice._PAGE, read_advice._PAGE)]
    assert read_advice.in_memory(np.arange(10), 3) and read_advice.in_memory(a, 10 ** 6)  # not mapped; past it


native_only = pytest.mark.skipif(sorting.scanner_module() is None, reason="the native scanner is not built")


@native_only
@pytest.mark.parametrize("width", [np.int32, np.int64])
def test_native_steps_find_what_the_numpy_steps_find_for_either_order_width_and_nan_as_inf(monkeypatch, width) -> None:
    rng = np.random.default_rng(17)
    for trial in range(200):
        n = int(rng.integers(0, 300))
        keys, stored, order = _stored(rng, n)
        order = order.astype(width)
        m = int(rng.integers(1, 20))
        lo = rng.integers(0, n + 1, m)
        hi = np.array([int(rng.integers(a, n + 1)) for a in lo.tolist()], dtype=np.int64)
        x = rng.choice(np.r_[np.round(rng.normal(size=8), 1), np.nan, np.inf, -np.inf, keys[:3]], m)
        right = rng.random(m) < 0.5
        for nan_as_inf in (False, True):
            through = KeysThrough(stored, order, nan_as_inf=nan_as_inf)
            assert through.stepper() is not None
            native = search_by(through, lo, hi, x, right)
            with monkeypatch.context() as m_:
                m_.setenv("TB_REDUCE_NATIVE", "0")
                assert through.stepper() is None
                plain = search_by(through, lo, hi, x, right)
            assert native.tolist() == plain.tolist(), (trial, nan_as_inf)
            if not nan_as_inf:
                want = [a + int(np.searchsorted(keys[a:b], v, "right" if r else "left"))
                        for a, b, v, r in zip(lo.tolist(), hi.tolist(), x.tolist(), right.tolist())]
                assert native.tolist() == want


@native_only
def test_a_search_found_cold_at_its_deep_look_goes_on_asking_from_where_the_native_steps_left_it(
        tmp_path, monkeypatch) -> None:
    rng = np.random.default_rng(23)
    keys, stored, order = _stored(rng, 200_000, tmp_path)
    looks, asked = [], []
    monkeypatch.setattr(sorting, "in_memory", lambda a, row: looks.append(row) or len(looks) <= 2)  # warm at step 0 only
    monkeypatch.setattr(sorting, "ask_for", lambda a, rows: asked.append(np.array(rows)))
    x = np.sort(rng.normal(size=9))
    got = search_by(KeysThrough(stored, order), 0, 200_000, x, "left")
    assert np.array_equal(got, np.searchsorted(keys, x, "left"))
    assert len(asked) >= 2 * 4  # asked from step 12 on, each step to the ~18th


@native_only
def test_native_steps_refuse_a_span_or_a_row_outside_their_arrays() -> None:
    native = sorting.scanner_module()
    keys, order = np.arange(10, dtype=np.float64), np.arange(10, dtype=np.int64)
    x, right = np.array([3.0]), np.zeros(1, dtype=np.uint8)
    for lo, hi in ((-1, 5), (0, 11), (6, 5)):
        with pytest.raises(ValueError, match="outside"):
            native.search_through(keys, order, 8, np.array([lo]), np.array([hi]), x, right, False, 64)
    bad = order.copy()
    bad[4] = 10  # the first step reads row 4 of the order
    with pytest.raises(ValueError, match="outside"):
        native.search_through(keys, bad, 8, np.array([0]), np.array([10]), x, right, False, 64)
    with pytest.raises(ValueError, match="do not match"):
        native.search_through(keys, order, 8, np.array([0, 0]), np.array([10]), x, right, False, 64)
    with pytest.raises(ValueError, match="do not match"):
        native.search_through(keys, order, 2, np.array([0]), np.array([10]), x, right, False, 64)
    lo, hi = np.array([0]), np.array([10])
    assert native.search_through(keys, order, 8, lo, hi, x, right, False, 2) == 1  # two steps: still open
    assert (lo[0], hi[0]) == (3, 5)  # mids 5 (not below 3.0), then 2 (below)
