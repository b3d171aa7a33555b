"""Plans of a window read through the window index (`reduce/window_index.py`: the events
in the window and the slices overlapping it, found by search) keep exactly what the
whole-table path keeps — the same events, summaries, top names and busy digits — at every
level, resolution and event limit, over the oracle traces and windows at their edges."""

from __future__ import annotations

import numpy as np
import pytest

from tb_reduce_plugin.index.prepared import Prepared
from tb_reduce_plugin.reduce import reduction, window_index
from tb_reduce_plugin.reduce.reduction import default_window, plan_within, slices_of


def _same(a, b, what: str) -> None:
    if a is None or b is None:
        assert a is None and b is None, what
        return
    assert (a.level, a.resolution, a.t0, a.t1) == (b.level, b.resolution, b.t0, b.t1), what
    assert a.keep.dtype == b.keep.dtype and np.array_equal(a.keep, b.keep), what
    for f in ("track", "start", "end", "count", "top_offsets", "top_name", "top_count", "busy_offsets", "busy"):
        x, y = getattr(a.summaries, f), getattr(b.summaries, f)
        assert (x is None) == (y is None), (what, f)
        if x is not None:
            assert x.dtype == y.dtype and np.array_equal(x, y), (what, f)


def _windows(t) -> list[tuple]:
    """Windows in the middle, at the edges, past them, narrow ones at slice bounds, and one
    bound left to the trace."""
    d0, d1 = default_window(t)
    w = d1 - d0
    out = [(d0 + 0.3 * w, d0 + 0.31 * w), (d0 + 0.1 * w, d0 + 0.7 * w), (d0, d1), (d0 - w, d0 + 0.05 * w),
           (d1 - 0.02 * w, d1 + w), (d1 + 1, d1 + 2), (None, d0 + 0.4 * w), (d0 + 0.6 * w, None)]
    sl = slices_of(t)
    if len(sl):
        rng = np.random.default_rng(len(sl))
        for i in rng.integers(0, len(sl), 3).tolist():
            s, e = float(sl.start[i]), float(sl.end[i])
            out += [(s, s + max(e - s, 1e-3) / 2), (e, e + 1.0)]
    return out


def _whole(t, *args, **kw):
    """The same plan by the whole-table path (as before the window index)."""
    real = reduction.window_index
    reduction.window_index = lambda t: None
    try:
        return plan_within(t, *args, **kw)
    finally:
        reduction.window_index = real


def test_plans_of_a_window_from_the_window_index_are_those_of_the_whole_table(oracle_tables) -> None:
    compared = 0
    for name, t in oracle_tables:
        d0, d1 = default_window(t)
        for window in _windows(t):
            if window[0] is not None and window[1] is not None and not window[1] - window[0] >= 1e-6:
                continue
            for level, resolution, limit in ((0, None, None), (0, None, 50), (1, None, None), (2, 37, None),
                                             (3, None, None), (4, None, None)):
                fast = plan_within(t, level, *window, resolution=resolution, max_keep=limit)
                assert t.prepared.window_index is not None
                slow = _whole(t, level, *window, resolution=resolution, max_keep=limit)
                _same(fast, slow, f"{name} {window} level {level}")
                compared += 1
    assert compared >= 40 * 6


@pytest.mark.parametrize("chunk", [3, 1000])
def test_the_window_index_made_in_chunks_finds_what_one_pass_finds(oracle_tables, monkeypatch, chunk) -> None:
    """Chunks of 3 rows on the small traces and 1000 on all: the same points, tiers and flows."""
    for name, t in oracle_tables:
        if chunk < 100 and len(t) > 5_000:
            continue
        sl = slices_of(t)
        always = reduction._static(t, sl).always
        whole = window_index.build_window_index(t, sl, always)
        monkeypatch.setattr(window_index, "CHUNK_ROWS", chunk)
        chunked = window_index.build_window_index(t, sl, always)
        monkeypatch.undo()
        for f in ("points", "point_ts", "tier_order", "tier_start", "tier_rows", "tier_extent", "always", "flow_size"):
            assert np.array_equal(np.asarray(getattr(whole, f)), np.asarray(getattr(chunked, f))), (name, f)
        assert whole.counters_sorted == chunked.counters_sorted
        ph = np.asarray(t.ph)
        expect = np.flatnonzero(~np.isnan(np.asarray(t.ts)) & ~np.isin(ph, [ord("X"), ord("B"), ord("E")]))
        assert np.array_equal(np.sort(np.asarray(whole.points)), expect), name
        assert np.all(np.diff(np.asarray(whole.point_ts)) >= 0)


def test_a_slice_reaching_far_into_a_window_from_before_it_is_found_in_its_tier() -> None:
    """Tiers by duration: a 1 s slice starting long before a 1 µs window still overlaps it,
    as do a slice of no length at its start and one of infinite length."""
    from tb_reduce_plugin.slices import SliceTable

    start = np.array([0.0, 999_999.5, 1_000_000.0, 1_000_002.0, -5.0])
    dur = np.array([1_000_000.5, 0.25, 0.0, 3.0, np.inf])
    n = len(start)
    sl = SliceTable(start=start, end=start + dur, dur=dur, track=np.zeros(n, dtype=np.int32),
                    name=np.zeros(n, dtype=np.int32), event=np.arange(n), partner=np.full(n, -1),
                    unpaired=np.zeros(0, dtype=np.int64))

    class Table:  # the columns build_window_index reads
        ph = np.full(n, ord("X"), dtype=np.uint8)
        ts = start
        flow_key = np.full(n, -1, dtype=np.int32)
        counter_event = np.zeros(0, dtype=np.int64)
        scratch = None
        prepared = Prepared()

        def __len__(self) -> int:
            return n

    wi = window_index.build_window_index(Table(), sl, np.zeros(n, dtype=bool))
    found = wi.slices_overlapping(sl, 1_000_000.0, 1_000_001.0)
    assert found.tolist() == [0, 2, 4]
    assert wi.slices_overlapping(sl, 1_000_002.5, 1_000_002.6).tolist() == [3, 4]
    assert wi.slices_overlapping(sl, -10.0, -6.0).tolist() == []
