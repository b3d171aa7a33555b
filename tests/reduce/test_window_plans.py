"""Plans of a window read through the window index (`reduce/window_index.py`: the events
in the window and the slices overlapping it, found by search) keep exactly what the
whole-table path keeps — the same events, summaries, top names and busy digits — at every
level, resolution and event limit, over the oracle traces and windows at their edges."""

from __future__ import annotations

import numpy as np
import pytest

from tb_reduce_plugin.index.prepared import Prepared, prepared_of
from tb_reduce_plugin.reduce import flows, plan, shared, summaries, window_index
from tb_reduce_plugin.reduce.plan import default_window, plan_within
from tb_reduce_plugin.reduce.shared import slices_of


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
    real = plan.window_index
    plan.window_index = lambda t: None
    try:
        return plan_within(t, *args, **kw)
    finally:
        plan.window_index = real


@pytest.fixture(autouse=True)
def every_window_through_the_index(monkeypatch) -> None:
    """Every window planned through the window index, however wide (a server plans a wide
    one by the whole-table pass: `plan.WINDOW_PATH_SHARE`), so the two are compared."""
    monkeypatch.setattr(plan, "WINDOW_PATH_SHARE", float("inf"))


def test_plans_of_a_window_from_the_window_index_are_those_of_the_whole_table(oracle_tables) -> None:
    """Each window of a trace at three of the six views, the other three on the next trace
    (alternating: every view of every kind of window is compared on half the traces, at
    half the time of all six on each)."""
    compared = 0
    views = ((0, None, None), (0, None, 50), (1, None, None), (2, 37, None), (3, None, None), (4, None, None))
    for k, (name, t) in enumerate(oracle_tables):
        plan.prepare_window_index(t)
        for v, window in enumerate(_windows(t)):
            if window[0] is not None and window[1] is not None and not window[1] - window[0] >= 1e-6:
                continue
            for level, resolution, limit in views[(k + v) % 2::2]:
                fast = plan_within(t, level, *window, resolution=resolution, max_keep=limit)
                assert t.prepared.window_index is not None
                slow = _whole(t, level, *window, resolution=resolution, max_keep=limit)
                _same(fast, slow, f"{name} {window} level {level}")
                compared += 1
    assert compared >= 40 * 3


@pytest.mark.parametrize("chunk", [3, 1000])
def test_the_window_index_made_in_chunks_finds_what_one_pass_finds(oracle_tables, monkeypatch, chunk) -> None:
    """Chunks of 3 rows on the small traces and 1000 on all: the same points, tiers and flows."""
    for name, t in oracle_tables:
        if chunk < 100 and len(t) > 5_000:
            continue
        sl = slices_of(t)
        always = shared._static(t, sl).always
        binding = flows._flow_binding(t, sl)
        whole = window_index.build_window_index(t, sl, always, binding)
        monkeypatch.setattr(window_index, "CHUNK_ROWS", chunk)
        chunked = window_index.build_window_index(t, sl, always, binding)
        monkeypatch.undo()
        for f in ("points", "tier_order", "tier_rows", "tier_extent", "always", "flow_size",
                  "flow_row", "flow_reach", "flow_event", "flow_tracks"):
            assert np.array_equal(np.asarray(getattr(whole, f)), np.asarray(getattr(chunked, f))), (name, f)
        assert whole.counters_sorted == chunked.counters_sorted
        # each row's binding row names that row's flow event (`flow_row` lies beside `flow_event`)
        assert np.array_equal(np.asarray(binding.fidx)[np.asarray(binding.forder)[np.asarray(whole.flow_row)]],
                              np.asarray(whole.flow_event))
        assert np.array_equal(np.sort(np.asarray(whole.flow_row)), np.arange(len(binding.fidx)))
        ph = np.asarray(t.ph)
        expect = np.flatnonzero(~np.isnan(np.asarray(t.ts)) & ~np.isin(ph, [ord("X"), ord("B"), ord("E")]))
        assert np.array_equal(np.sort(np.asarray(whole.points)), expect), name
        assert np.all(np.diff(np.asarray(t.ts)[np.asarray(whole.points)]) >= 0)


def test_a_slice_reaching_far_into_a_window_from_before_it_is_found_in_its_tier() -> None:
    """Tiers by duration: a 1 s slice starting long before a 1 µs window still overlaps it,
    as do a slice of no length at its start and one of infinite length."""
    from tb_reduce_plugin.model.slices import SliceTable

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
        track = np.zeros(n, dtype=np.int32)
        tracks = [(1, 1)]
        scratch = None
        prepared = Prepared()

        def __len__(self) -> int:
            return n

    class NoFlows:
        fidx = forder = np.zeros(0, dtype=np.int64)
        segments: list = []

    wi = window_index.build_window_index(Table(), sl, np.zeros(n, dtype=bool), NoFlows())
    found = wi.slices_overlapping(sl, 1_000_000.0, 1_000_001.0)
    assert found.tolist() == [0, 2, 4]
    assert wi.slices_overlapping(sl, 1_000_002.5, 1_000_002.6).tolist() == [3, 4]
    assert wi.slices_overlapping(sl, -10.0, -6.0).tolist() == []


def test_flows_bound_to_a_long_slice_or_to_a_next_slice_far_away_are_kept_as_the_whole_table_keeps_them(
        tmp_path) -> None:
    """Flows whose events lie far outside a narrow window yet bind to slices kept in it: to
    a long slice enclosing the window (both ends inside it, far from the window), and to
    the next slice of a track from long before it (a flow end without `bp: e`). The window
    path finds them by the kept slices' span and the binding's reach, as the whole table
    does by a pass over every flow; others, with an end nowhere near, are dropped by both."""
    from oracle_traces import write_trace

    from tb_reduce_plugin.reduce.pipeline import index_file

    events = [{"ph": "X", "name": "long", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
              {"ph": "X", "name": "step", "pid": 1, "tid": 2, "ts": 505, "dur": 3},
              {"ph": "X", "name": "late", "pid": 1, "tid": 2, "ts": 900, "dur": 3},
              {"ph": "X", "name": "tiny", "pid": 1, "tid": 1, "ts": 20, "dur": 1}]
    for i in range(40):  # flows from inside `long` (far from the window) to `step` (a next-slice binding)
        events += [{"ph": "s", "id": i, "name": "f", "cat": "c", "pid": 1, "tid": 1, "ts": 10 + i},
                   {"ph": "f", "id": i, "name": "f", "cat": "c", "pid": 1, "tid": 2, "ts": 100 + i}]
    for i in range(40, 50):  # ends after `step`: bound to `late`, kept only when it is
        events += [{"ph": "s", "id": i, "name": "f", "cat": "c", "pid": 1, "tid": 1, "ts": 50 + i},
                   {"ph": "f", "id": i, "name": "f", "cat": "c", "pid": 1, "tid": 2, "ts": 700 + i}]
    for i in range(50, 55):  # both ends inside `long`, bound to it by `bp: e`
        events += [{"ph": "s", "id": i, "name": "g", "cat": "c", "pid": 1, "tid": 1, "ts": 300 + i},
                   {"ph": "f", "bp": "e", "id": i, "name": "g", "cat": "c", "pid": 1, "tid": 1, "ts": 800 + i}]
    events += [{"ph": "X", "name": "other", "pid": 1, "tid": 3, "ts": 1000.5, "dur": 20},
               {"ph": "X", "name": "far", "pid": 1, "tid": 4, "ts": 1003, "dur": 1}]
    for i in range(60, 70):  # from `other`, past `long`, to `far`: bound to it from ~950 µs before
        events += [{"ph": "s", "id": i, "name": "h", "cat": "c", "pid": 1, "tid": 3, "ts": 1005 + 0.1 * i},
                   {"ph": "f", "id": i, "name": "h", "cat": "c", "pid": 1, "tid": 4, "ts": 50 + i}]
    t = index_file(write_trace(tmp_path / "flows.json.gz", events)).table
    plan.prepare_window_index(t)
    kept_any = 0
    for window in ((500.0, 510.0), (505.5, 506.0), (899.0, 904.0), (10.0, 12.0), (1001.0, 1002.0), (1001.0, 1010.0),
                   (0.0, 1000.0)):
        for level, resolution in ((0, None), (1, None), (2, 37), (4, None)):
            fast = plan_within(t, level, *window, resolution=resolution)
            slow = _whole(t, level, *window, resolution=resolution)
            _same(fast, slow, f"{window} level {level}")
            kept_any += int(np.count_nonzero(np.asarray(t.flow_key)[fast.keep] >= 0))
    assert t.prepared.window_index.flow_reach.max() >= 890
    assert kept_any > 100


@pytest.mark.parametrize("field,value", [("points", 10 ** 9), ("flow_event", 10 ** 9), ("tier_order", -1),
                                         ("flow_tracks", 10 ** 6)])
def test_a_kept_window_index_that_names_rows_past_the_table_is_dropped_and_made_again(tmp_path, field, value,
                                                                                      caplog) -> None:
    """Checksums made consistent (`_resum`): what the rows say is checked against the table,
    never indexed past it; the state is prepared again and plans as before."""
    import json

    from index_support import _resum, chrome_traces, reduced, stored_folder
    from plugin_support import require_corpus

    from tb_reduce_plugin.index.store import IndexStore, indexed
    from tb_reduce_plugin.reduce.pipeline import index_file

    require_corpus()
    path = next(p for p in chrome_traces() if "flow" in p.name)  # catapult's flows
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    parsed = index_file(path)
    store.save(parsed)
    d0, d1 = default_window(parsed.table)
    window = (d0 + 0.2 * (d1 - d0), d0 + 0.6 * (d1 - d0))
    plan.prepare_window_index(parsed.table)
    expected = reduced(parsed, 2, window)
    assert parsed.prepared.window_index is not None and len(parsed.prepared.window_index.flow_event)
    assert store.save_prepared(parsed)
    folder = stored_folder(store, path)
    manifest = json.loads((folder / "prepared.json").read_text())
    name = f"p{manifest['gen']}_{manifest['spec']['window_index']['f'][field]['a']}.npy"
    a = np.load(folder / name)
    a[-1] = value
    np.save(folder / name, a)
    _resum(manifest, folder, name)
    (folder / "prepared.json").write_text(json.dumps(manifest))
    reopened = indexed(store, str(path))
    assert reopened.extra.get("stored_index") and reopened.prepared.window_index is None
    assert "window index" in caplog.text
    assert reduced(reopened, 2, window) == expected


def test_plans_of_a_window_read_the_whole_table_until_the_window_index_is_prepared(oracle_tables) -> None:
    """A plan never makes the window index on the side (at 50 M events it takes ~15 s): the
    server prepares it in the background; until then, and in the CLI, the whole table."""
    name, t = next((n, t) for n, t in oracle_tables if len(t) > 1000)
    prepared_of(t).window_index = None
    d0, d1 = default_window(t)
    before = plan_within(t, 2, d0, (d0 + d1) / 2)
    assert prepared_of(t).window_index is None and plan.window_index(t) is None
    assert plan.prepare_window_index(t) is prepared_of(t).window_index is plan.window_index(t)
    _same(plan_within(t, 2, d0, (d0 + d1) / 2), before, name)


def _logdir(tmp_path):
    import shutil

    from oracle_traces import TORCH_GPU

    run = tmp_path / "logs" / "run"
    run.mkdir(parents=True)
    shutil.copyfile(TORCH_GPU, run / TORCH_GPU.name)
    return tmp_path / "logs", TORCH_GPU.name.split(".pt.trace.json")[0]


def _body(r) -> bytes:
    import gzip

    data = r.body.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def test_a_server_prepares_the_window_index_after_the_first_view_and_a_restart_zooms_from_it(tmp_path) -> None:
    """The first view's plan reads the whole table; the window index is then made in the
    background and kept with the prepared state; a restarted server maps it and plans its
    first zoom from it, for the bytes a server without it writes."""
    import json

    from tb_reduce_plugin.serve.service import TraceService

    logs, host = _logdir(tmp_path)
    first = TraceService(str(logs), cache_dir=str(tmp_path / "cache"))
    first.reduction("run", host, 2, None, None)
    first.wait_saved()
    tf = first.trace_file("run", host)
    assert first.on_index(tf, lambda i: i.prepared.window_index is not None)
    kept = json.loads(next((tmp_path / "cache" / "index").glob("*/prepared.json")).read_text())
    assert "window_index" in kept["spec"]
    lo, hi = first.on_index(tf, lambda i: default_window(i.table))
    window = (lo + 0.4 * (hi - lo), lo + 0.45 * (hi - lo))

    restarted = TraceService(str(logs), cache_dir=str(tmp_path / "cache"))
    rtf = restarted.trace_file("run", host)
    assert restarted.on_index(rtf, lambda i: plan.window_index(i.table) is not None)
    zoom = restarted.reduction("run", host, 2, *window)
    assert zoom.stats["index"] == "stored"
    fresh = TraceService(str(logs), cache_dir=str(tmp_path / "fresh"))  # parses; its first plan: the whole table
    assert _body(zoom) == _body(fresh.reduction("run", host, 2, *window))


def test_a_budget_without_room_for_the_window_index_leaves_zooms_on_the_whole_table(tmp_path, monkeypatch) -> None:
    """The background making is charged to the budget: where it does not fit, it is not
    made, nothing fails, and zooms are planned as before it."""
    from tb_reduce_plugin.reduce import window_index
    from tb_reduce_plugin.serve.service import TraceService

    monkeypatch.setattr(window_index, "WINDOW_INDEX_SPILLED_BYTES_PER_EVENT", 10 ** 6)  # more than any budget
    logs, host = _logdir(tmp_path)
    service = TraceService(str(logs), cache_dir=str(tmp_path / "cache"))
    service.reduction("run", host, 2, None, None)
    service.wait_saved()
    tf = service.trace_file("run", host)
    assert service.on_index(tf, lambda i: i.prepared.window_index is None and i.window_index_asked)
    lo, hi = service.on_index(tf, lambda i: default_window(i.table))
    zoom = service.reduction("run", host, 3, lo + 0.1 * (hi - lo), lo + 0.2 * (hi - lo))
    assert zoom.stats["output"]["events"] > 0


def test_a_window_index_left_unmade_by_a_busy_budget_is_asked_again_by_the_next_plan(tmp_path, monkeypatch) -> None:
    """Memory held by requests for a moment (`BudgetBusy`) is no reason to give up: the next
    plan of the index asks for the window index again, and then it is made."""
    from tb_reduce_plugin.budget import BudgetBusy
    from tb_reduce_plugin.serve import service as service_module
    from tb_reduce_plugin.serve.service import TraceService

    real, calls = service_module.prepare_window_index, []

    def busy_once(t):
        calls.append(t)
        if len(calls) == 1:
            raise BudgetBusy("the memory is held by other tasks right now")
        return real(t)

    monkeypatch.setattr(service_module, "prepare_window_index", busy_once)
    logs, host = _logdir(tmp_path)
    service = TraceService(str(logs), cache_dir=str(tmp_path / "cache"))
    service.reduction("run", host, 2, None, None)
    service.wait_saved()
    tf = service.trace_file("run", host)
    assert len(calls) == 1 and service.on_index(tf, lambda i: i.prepared.window_index is None)
    service.reduction("run", host, 3, None, None)  # the next plan
    service.wait_saved()
    assert len(calls) == 2 and service.on_index(tf, lambda i: plan.window_index(i.table) is not None)


def test_a_disk_that_fails_the_window_index_files_leaves_it_unmade_not_held_in_memory(tmp_path, monkeypatch) -> None:
    """Its charge counts its rows as files; a full or read-only disk must not turn them into
    memory nobody charged (`mapped.spill_or_fail`): no index, nothing fails, zooms as before.
    Elsewhere a failing disk still means memory, as it always did."""
    import errno

    from tb_reduce_plugin.model import mapped
    from tb_reduce_plugin.serve.service import TraceService

    logs, host = _logdir(tmp_path)
    service = TraceService(str(logs), cache_dir=str(tmp_path / "cache"))
    service.reduction("run", host, 2, None, None)  # parsed and planned with a working disk
    service.wait_saved()
    tf = service.trace_file("run", host)
    service.on_index(tf, lambda i: setattr(i.prepared, "window_index", None) or setattr(i, "window_index_asked", False))

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    def full_files(*args, **kwargs):
        raise mapped.SpillFailed("the window index could not be written: No space left on device")

    monkeypatch.setattr(mapped.ColumnFiles, "__init__", full_files)
    monkeypatch.setattr(mapped.os, "posix_fallocate", full)
    monkeypatch.setattr(mapped.np.lib.format, "write_array", full)
    lo, hi = service.on_index(tf, lambda i: default_window(i.table))
    service.reduction("run", host, 3, lo + 0.1 * (hi - lo), lo + 0.2 * (hi - lo))  # asks again, in the background
    service.wait_saved()
    assert service.on_index(tf, lambda i: i.prepared.window_index is None and i.window_index_asked)
    with mapped.spill_or_fail():
        with pytest.raises(mapped.SpillFailed):
            with mapped.scratch_array(str(tmp_path), "x", 1 << 20, np.int64):
                pass
    with mapped.scratch_array(str(tmp_path), "x", 1 << 20, np.int64) as a:  # outside: memory, as before
        assert len(a) == 1 << 20


def test_a_window_holding_more_than_a_share_of_the_rows_is_planned_by_the_whole_table_pass(
        oracle_tables, monkeypatch) -> None:
    """Gathering most of a table row by row costs more than the chunked pass over it: a
    window whose rows (points and candidate slices, counted by search) are more than
    `WINDOW_PATH_SHARE` of the table's goes the whole-table way, with the same plan."""
    monkeypatch.setattr(plan, "WINDOW_PATH_SHARE", 0.125)
    name, t = max(oracle_tables, key=lambda nt: len(nt[1]))
    plan.prepare_window_index(t)
    wi = t.prepared.window_index
    d0, d1 = default_window(t)
    narrow, wide = (d0 + 0.5 * (d1 - d0), d0 + 0.5001 * (d1 - d0)), (d0 + 0.05 * (d1 - d0), d0 + 0.95 * (d1 - d0))
    sl = slices_of(t)
    assert wi.rows_within(t, sl, *narrow) <= 0.125 * len(t) < wi.rows_within(t, sl, *wide), name
    used = []
    real = plan._plan_window
    monkeypatch.setattr(plan, "_plan_window", lambda *a, **k: used.append(a[3:5]) or real(*a, **k))
    for window in (narrow, wide):
        for level in (0, 2):
            _same(plan_within(t, level, *window), _whole(t, level, *window), f"{name} {window} level {level}")
    assert used == [narrow, narrow]
    # the count bounds what the index path reads: the rows it finds are among those counted
    assert len(wi.points_within(t, *wide)) + len(wi.slices_overlapping(sl, *wide)) <= wi.rows_within(t, sl, *wide)


def test_a_windows_slices_read_from_the_slice_order_are_those_the_index_finds_in_the_plans_order(
        oracle_tables, monkeypatch) -> None:
    """`plan._window_slices`: the slices overlapping a window (straddlers from the tiers, the
    rest one run a track of the prepared slice order) are `slices_overlapping`'s, in the
    order sorting them by (track, start, event) gives; and with more tracks than
    `WINDOW_ORDER_MAX_TRACKS` it leaves the sorting to the plan."""
    compared = 0
    for name, t in oracle_tables:
        wi = plan.prepare_window_index(t)
        sl = slices_of(t)
        for window in _windows(t):
            d0, d1 = default_window(t)
            t0 = d0 if window[0] is None else window[0]
            t1 = d1 if window[1] is None else window[1]
            if not t1 - t0 >= 1e-6:
                continue
            want = wi.slices_overlapping(sl, t0, t1)
            ov, order, runs = plan._window_slices(t, sl, wi, t0, t1)
            assert np.array_equal(np.sort(ov), want), (name, window)
            sorted_ = want[np.lexsort((sl.event[want], sl.start[want], sl.track[want]))]
            assert order is not None and np.array_equal(order, sorted_), (name, window)
            assert runs == summaries._track_runs(sl.track, order), (name, window)
            compared += 1
        monkeypatch.setattr(plan, "WINDOW_ORDER_MAX_TRACKS", 0)
        ov, order, runs = plan._window_slices(t, sl, wi, *default_window(t))
        monkeypatch.undo()
        assert order is None and runs is None and np.array_equal(ov, wi.slices_overlapping(sl, *default_window(t)))
    assert compared >= 40


@pytest.mark.parametrize("seed", range(30))
def test_a_windows_counter_samples_found_from_the_samples_side_are_those_each_events_search_finds(seed) -> None:
    """`plan._samples_of` against each event's own two searches among the samples (the way
    it was found before): the same rows in the same order, the same events with samples."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 200))
    ce = np.sort(rng.integers(0, 300, int(rng.integers(0, 120)))).astype(np.int64)  # repeats: several series
    pts = np.unique(rng.integers(0, 300, n)).astype(np.int64)
    lo, hi = np.searchsorted(ce, pts, "left"), np.searchsorted(ce, pts, "right")
    want = np.repeat(hi - np.cumsum(hi - lo), hi - lo) + np.arange(int((hi - lo).sum()))
    rows, sampled = plan._samples_of(ce, pts)
    assert rows.dtype == np.int64 and np.array_equal(rows, want)
    assert np.array_equal(sampled, hi > lo)


def test_each_track_s_rows_of_the_slice_order_are_where_a_search_finds_them(oracle_tables) -> None:
    """`shared._Static.track_rows` (prepared once, kept with the state): track k's slices
    are rows track_rows[k]:track_rows[k + 1] of the slice order, as a search of the tracks
    through the order finds them (what a window's plan did each time)."""
    for name, t in oracle_tables:
        sl = slices_of(t)
        st = shared._static(t, sl)
        track = np.asarray(sl.track)[np.asarray(st.slice_order)]
        want = np.searchsorted(track, np.arange(len(t.tracks) + 1), "left")
        assert np.array_equal(np.asarray(st.track_rows)[:len(t.tracks) + 1], want), name
        assert int(st.track_rows[-1]) == len(sl), name


def _random_flow_trace(rng) -> list[dict]:
    """Slices nested and overlapping on four tracks, gaps between them, and flows whose ends
    land inside slices, between them (after a slice, in none) and before the next one (an
    end without `bp: e`), so every binding a flow event can have is met in a window."""
    events = []
    for tid in range(1, 5):
        at = 0.0
        for _ in range(int(rng.integers(5, 25))):
            at += float(rng.exponential(30))
            dur = float(rng.exponential(40))
            events.append({"ph": "X", "name": f"n{int(rng.integers(0, 6))}", "pid": 1, "tid": tid,
                           "ts": round(at, 3), "dur": round(dur, 3)})
            if rng.random() < 0.5:  # a child inside it
                events.append({"ph": "X", "name": "child", "pid": 1, "tid": tid,
                               "ts": round(at + dur * 0.25, 3), "dur": round(dur * 0.5, 3)})
    span = max(e["ts"] + e["dur"] for e in events)
    for i in range(int(rng.integers(10, 60))):
        f = {"ph": "f", "id": i, "name": "fl", "cat": "c", "pid": 1, "tid": int(rng.integers(1, 5)),
             "ts": round(float(rng.uniform(0, span)), 3)}
        if rng.random() < 0.5:
            f["bp"] = "e"
        events += [{"ph": "s", "id": i, "name": "fl", "cat": "c", "pid": 1, "tid": int(rng.integers(1, 5)),
                    "ts": round(float(rng.uniform(0, span)), 3)}, f]
        if rng.random() < 0.3:  # a step between
            events.append({"ph": "t", "id": i, "name": "fl", "cat": "c", "pid": 1, "tid": int(rng.integers(1, 5)),
                           "ts": round(float(rng.uniform(0, span)), 3)})
    return events


@pytest.mark.parametrize("seed", range(12))
def test_random_flows_in_random_windows_are_kept_as_the_whole_table_keeps_them(tmp_path, seed) -> None:
    """Flows bound every way (enclosing slice kept or not, between slices within a kept
    slice's run, to a next slice near or far) in random windows at every level: the window
    path keeps what the whole table keeps, and some flows are kept."""
    from oracle_traces import write_trace

    from tb_reduce_plugin.reduce.pipeline import index_file

    rng = np.random.default_rng(seed)
    t = index_file(write_trace(tmp_path / "flows.json.gz", _random_flow_trace(rng))).table
    plan.prepare_window_index(t)
    d0, d1 = default_window(t)
    kept = 0
    for _ in range(8):
        a, b = np.sort(rng.uniform(d0 - 10, d1 + 10, 2))
        if not b - a >= 1e-3:
            continue
        for level, resolution in ((0, None), (1, 7), (2, 13), (3, None), (4, 5)):
            fast = plan_within(t, level, float(a), float(b), resolution=resolution)
            slow = _whole(t, level, float(a), float(b), resolution=resolution)
            _same(fast, slow, f"seed {seed} ({a}, {b}) level {level}")
            if level:
                kept += int(np.count_nonzero(np.asarray(t.flow_key)[fast.keep] >= 0))
    assert kept > 0  # some flows bound to kept slices, at a level that drops others


@pytest.mark.parametrize("queries", [1, 3, 400, 5000])
def test_a_tracks_flow_rows_are_where_a_search_of_its_flow_times_finds_them(tmp_path, queries) -> None:
    """`WindowIndex.flow_rows`: a few queries over many flow events searched one by one, many
    read the times between them once; either way `np.searchsorted` over the track's flow
    times, both sides, queries within, before and past them, repeats included."""
    from oracle_traces import write_trace

    from tb_reduce_plugin.reduce.pipeline import index_file

    rng = np.random.default_rng(queries)
    times = np.round(np.sort(rng.uniform(0, 1000, 3000)), 1)  # repeats
    events = [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 1000}]
    for i, ts in enumerate(times.tolist()):
        events.append({"ph": "s" if i % 2 == 0 else "f", "id": i // 2, "name": "f", "cat": "c", "pid": 1,
                       "tid": 1 + i % 2, "ts": ts})
    t = index_file(write_trace(tmp_path / "flows.json.gz", events)).table
    wi = plan.prepare_window_index(t)
    for track in range(len(t.tracks)):
        r0, r1 = int(wi.flow_tracks[track]), int(wi.flow_tracks[track + 1])
        if r1 == r0:
            continue
        mine = np.asarray(t.ts)[np.asarray(wi.flow_event[r0:r1])]
        lo = np.sort(rng.choice(np.r_[mine, rng.uniform(-50, 1050, 50)], queries))
        hi = lo + np.where(rng.random(queries) < 0.5, 0.0, rng.uniform(0, 600, queries))  # some on a time
        a, b = wi.flow_rows(t, track, ((lo, "left"), (hi, "right")))
        assert np.array_equal(a, np.searchsorted(mine, lo, "left"))
        assert np.array_equal(b, np.searchsorted(mine, hi, "right"))
