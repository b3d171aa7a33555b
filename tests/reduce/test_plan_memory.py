"""A plan's memory: tracks folded in chunks give the plan of whole tracks, its summaries are
charged as they are made, and `reduction_bytes` covers what a plan really holds.

The oracle is the fold of each whole track (the engine's way before chunks), kept here as
written then: chunking must never change a byte of any plan.
"""

from __future__ import annotations

import io
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from oracle_traces import STALLED, TORCH_GPU, XSPACE, write_trace

from tb_reduce_plugin.budget import MemoryBudget, OverBudget
from tb_reduce_plugin.model.mapped import SPILL_AT_LEAST
from tb_reduce_plugin.model.table import INSTANT_PHASES
from tb_reduce_plugin.query.aggregate import aggregate
from tb_reduce_plugin.query.search import compile_query, search
from tb_reduce_plugin.reduce import flows as flows_module
from tb_reduce_plugin.reduce import plan as plan_module
from tb_reduce_plugin.reduce import shared
from tb_reduce_plugin.reduce import summaries as summaries_module
from tb_reduce_plugin.reduce.fold_steps import bound_between
from tb_reduce_plugin.reduce.pipeline import (
    PLAN_BYTES_PER_CHUNK_EVENT,
    PLAN_BYTES_PER_CHUNK_SLICE,
    PLAN_BYTES_PER_EVENT,
    PLAN_BYTES_PER_INSTANT,
    PLAN_BYTES_PER_SAMPLE,
    choose_level,
    index_file,
    reduce_index,
    reduction_bytes,
)
from tb_reduce_plugin.reduce.plan import default_window, name_rank, plan
from tb_reduce_plugin.reduce.shared import slices_of
from tb_reduce_plugin.reduce.summaries import Summaries

pytestmark = pytest.mark.usefixtures("no_background_work")  # their traced peaks: no other thread's work in them


def _whole_track_fold(sl, overlaps, bk, rank, slice_order) -> tuple[np.ndarray, Summaries]:
    """The oracle: every overlapping slice of a track at once, the top names of all tracks together."""
    kept = overlaps & (sl.dur >= bk.theta)
    order = slice_order[overlaps[slice_order]]
    trk_sorted = sl.track[order]
    cuts = np.flatnonzero(trk_sorted[1:] != trk_sorted[:-1]) + 1
    out_track, out_start, out_end, out_count, members = [], [], [], [], []
    ngroups = 0
    for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(order)].tolist()):
        idx = order[lo:hi]
        s, e, k = sl.start[idx], sl.end[idx], kept[idx]
        while True:
            bounds = np.unique(np.concatenate((s[k], e[k])))
            straddle = ~k & bound_between(bounds, s, e, open_interval=True)
            if not straddle.any():
                break
            k |= straddle
        kept[idx] = k
        small = np.flatnonzero(~k)
        if len(small) == 0:
            continue
        ss, se = s[small], e[small]
        prev_end = np.maximum.accumulate(se)[:-1]
        new = np.ones(len(small), dtype=bool)
        new[1:] = (ss[1:] >= prev_end) & ((bk.clipped(ss[1:]) > bk.clipped(prev_end) + 1)
                                          | bound_between(bounds, prev_end, ss[1:], open_interval=False))
        heads = np.flatnonzero(new)
        out_track.append(np.full(len(heads), sl.track[idx[0]], dtype=np.int32))
        out_start.append(ss[heads])
        out_end.append(np.maximum.reduceat(se, heads))
        out_count.append(np.diff(np.append(heads, len(small))))
        members.append((ngroups + np.cumsum(new) - 1, sl.name[idx[small]]))
        ngroups += len(heads)
    if ngroups == 0:
        return kept, summaries_module._no_summaries()
    group = np.concatenate([g for g, _ in members])
    names = np.concatenate([n for _, n in members])
    nn = int(names.max()) + 1
    combo, counts = np.unique(group.astype(np.int64) * nn + names, return_counts=True)
    offsets, top_name, top_count = summaries_module._top_of_counts(combo // nn, combo % nn, counts, rank, ngroups)
    return kept, Summaries(np.concatenate(out_track), np.concatenate(out_start), np.concatenate(out_end),
                           np.concatenate(out_count), offsets, top_name, top_count)


def _assert_same_plan(a: plan_module.Plan, b: plan_module.Plan) -> None:
    assert (a.level, a.resolution, a.t0, a.t1) == (b.level, b.resolution, b.t0, b.t1)
    assert np.array_equal(a.keep, b.keep)
    for f in ("track", "start", "end", "count", "top_offsets", "top_name", "top_count"):
        x, y = getattr(a.summaries, f), getattr(b.summaries, f)
        assert x.dtype == y.dtype and np.array_equal(x, y), f


def _windows(t) -> list[tuple]:
    d0, d1 = default_window(t)
    w = d1 - d0
    return [(None, None), (d0 + 0.3 * w, d0 + 0.31 * w), (d0 + 0.1 * w, d0 + 0.7 * w)]



@pytest.mark.parametrize("chunk", [1, 5, 997, 1 << 18])
def test_folding_tracks_in_chunks_of_any_size_gives_the_plan_of_whole_tracks(oracle_tables, monkeypatch, chunk) -> None:
    """Chunks of 1 and 5 slices (and events) on the traces small enough for a chunk of one
    to be quick (a chunk's edge falls between every slice of them); 997 (a chunk boundary
    in every long track) and the default on all. Every level and window at both
    resolutions; the resolution each trace starts with alternates from trace to trace, so
    that each of the 18 views is compared on half the traces, at half the time of all 18
    on each."""
    compared = 0
    for k, (_, t) in enumerate(oracle_tables):
        if len(t) > (2_000 if chunk == 1 else 4_500) and chunk < 100:
            continue
        plan(t, 1)  # the shared state made at the default chunks: the fold's chunks are what is tested here
        for v, (level, window) in enumerate((lv, w) for lv in (1, 2, 4) for w in _windows(t)):
            resolution = (None, 37)[(k + v) % 2]
            monkeypatch.setattr(shared, "CHUNK_SLICES", chunk)
            # the per-event flags, instants and flows too (chunks of a few events are
            # test_prepared_in_chunks' concern: here 997 at least, to stay quick)
            monkeypatch.setattr(shared, "CHUNK_EVENTS", max(chunk, 997))
            chunked = plan(t, level, *window, resolution=resolution)
            monkeypatch.setattr(shared, "CHUNK_EVENTS", 1 << 62)  # one chunk: whole arrays
            monkeypatch.setattr(plan_module, "_reduce_slices",
                                lambda sl, ov, bk, rank, order, grow=None, runs=None: _whole_track_fold(sl, ov, bk, rank, order))
            whole = plan(t, level, *window, resolution=resolution)
            monkeypatch.undo()
            _assert_same_plan(chunked, whole)
            compared += 1
    assert compared >= 3 * 3 * 3


@pytest.mark.parametrize("chunk", [4, 61, 997])
def test_busy_digits_read_in_chunks_of_any_size_are_those_of_one_pass(monkeypatch, chunk) -> None:
    """The busy share of each summary's buckets sums each slice's part in slice order, so
    a chunk's edge changes no digit (the reference checker holds the digits to the trace).
    Chunks of 4 on the small traces only (on the 46 k-event GPU trace they took 20 s of
    CI for what chunks of 61 show there too)."""
    compared = 0
    for path in (TORCH_GPU, STALLED, XSPACE):
        t = index_file(path).table
        if chunk < 10 and len(t) > 5_000:
            continue
        for level in (1, 2, 4):
            for window in _windows(t):
                whole = plan(t, level, *window)
                monkeypatch.setattr(shared, "CHUNK_SLICES", chunk)
                chunked = plan(t, level, *window)
                monkeypatch.undo()
                assert np.array_equal(chunked.summaries.busy_offsets, whole.summaries.busy_offsets)
                assert np.array_equal(chunked.summaries.busy, whole.summaries.busy)
                compared += len(whole.summaries.busy)
    assert compared > (1000 if chunk >= 10 else 100)



@pytest.fixture(scope="module")
def kinds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The traces of each kind, written once for the suites that measure plans' peaks."""
    return _kinds(tmp_path_factory.mktemp("kinds"), 120_000)


def _kinds(tmp_path: Path, n: int) -> dict[str, Path]:
    rng = np.random.default_rng(7)
    ts = np.cumsum(rng.integers(1, 20, n)).astype(float).tolist()
    dur = rng.integers(1, 15, n).tolist()
    return {
        "one track of slices": write_trace(tmp_path / "x.json.gz", [
            {"ph": "X", "name": f"op{i % 300}", "pid": 1, "tid": 1, "ts": ts[i], "dur": dur[i]} for i in range(n)]),
        "slices out of order": write_trace(tmp_path / "o.json.gz", [  # the slice order is sorted, not found
            {"ph": "X", "name": f"op{i % 300}", "pid": 1, "tid": i % 3, "ts": ts[(i * 7919) % n], "dur": dur[i]}
            for i in range(n)]),
        "counters": write_trace(tmp_path / "c.json.gz", [
            {"ph": "C", "name": f"mem{i % 3}", "pid": 1, "tid": 1, "ts": ts[i], "args": {"a": i % 977, "b": i % 13}}
            for i in range(n)]),
        "instants": write_trace(tmp_path / "i.json.gz", [
            {"ph": "i", "name": f"m{i % 50}", "pid": 1, "tid": i % 4, "ts": ts[i], "s": "t"} for i in range(n)]),
        "flows": write_trace(tmp_path / "f.json.gz", [
            e for i in range(n // 2) for e in (
                {"ph": "X", "name": "k", "pid": 1, "tid": 1, "ts": ts[i], "dur": 5},
                {"ph": "s" if i % 2 == 0 else "f", "id": i // 2, "name": "f", "cat": "c", "pid": 1, "tid": 1,
                 "ts": ts[i] + 1})]),
    }


@pytest.mark.parametrize("chunk", [4096, None])
def test_a_plans_traced_peak_stays_within_what_reduction_bytes_charges_for_each_kind_of_event(
        kinds, monkeypatch, chunk) -> None:
    """Per event, per counter sample and per instant, and per slice of a chunk (made small
    once, so it does not hide the per-event costs); the prepared state is built first."""
    if chunk is not None:
        monkeypatch.setattr(shared, "CHUNK_SLICES", chunk)
        monkeypatch.setattr(shared, "CHUNK_EVENTS", chunk)
    for kind, path in kinds.items():
        idx = index_file(path)
        plan(idx.table, 2)  # prepares the table's state: later plans hold only their own
        t = idx.table
        instants = sum(int(np.count_nonzero(t.ph == ph)) for ph in INSTANT_PHASES)
        charged = (PLAN_BYTES_PER_EVENT * len(t) + PLAN_BYTES_PER_SAMPLE * len(t.counter_event)
                   + PLAN_BYTES_PER_INSTANT * instants
                   + PLAN_BYTES_PER_CHUNK_SLICE * min(len(t), shared.CHUNK_SLICES)
                   + PLAN_BYTES_PER_CHUNK_EVENT * min(len(t), shared.CHUNK_EVENTS))
        for level in ("auto", 1, 4):
            tracemalloc.start()
            try:
                p = choose_level(idx, None, None) if level == "auto" else plan(t, level)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            summaries = sum(getattr(p.summaries, f).nbytes for f in ("track", "start", "end", "count",
                                                                       "top_offsets", "top_name", "top_count"))
            busy = 10 * p.summaries.busy.nbytes + 2 * p.summaries.busy_offsets.nbytes  # sums, digits, joined
            held = p.keep.nbytes + 2 * summaries + busy  # the output, charged apart (kept events; summaries as made)
            assert peak <= charged + held, (kind, level, peak, charged, held)


@pytest.mark.parametrize("chunk", [4096, None])
@pytest.mark.parametrize("scratch", [False, True])
def test_a_first_plans_traced_peak_preparing_the_tables_state_stays_within_the_cold_charge(
        kinds, tmp_path, monkeypatch, chunk, scratch) -> None:
    """The first plan of a table makes the slices, their order, the masks and the flow
    binding, in memory or (with a scratch folder) a chunk at a time into files: its peak,
    for each kind of event, is within what `reduction_bytes` charges before it starts."""
    from tb_reduce_plugin.model import slices as slices_module

    if chunk is not None:
        for module, name in ((shared, "CHUNK_SLICES"), (shared, "CHUNK_EVENTS"), (slices_module, "CHUNK_EVENTS")):
            monkeypatch.setattr(module, name, chunk)
    for kind, path in kinds.items():
        idx = index_file(path)
        if scratch:
            folder = tmp_path / f"scratch-{kind.replace(' ', '-')}"
            folder.mkdir()
            idx.table.scratch = str(folder)
        charged = reduction_bytes(idx, 2)
        tracemalloc.start()
        try:
            p = plan(idx.table, 2)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        summaries = sum(getattr(p.summaries, f).nbytes for f in ("track", "start", "end", "count",
                                                                   "top_offsets", "top_name", "top_count"))
        held = p.keep.nbytes + 2 * summaries + 10 * p.summaries.busy.nbytes + 2 * p.summaries.busy_offsets.nbytes
        assert peak <= charged + held, (kind, scratch, peak, charged, held)
        if scratch:  # the state is in files: what stays held is small
            assert idx.prepared.nbytes() <= 4 * len(idx.table) + (1 << 20), kind


def test_the_estimate_of_a_levels_size_counts_events_per_block_as_the_sum_over_events_did() -> None:
    idx = index_file(TORCH_GPU)
    t = idx.table
    per = np.repeat(np.asarray(t.block_bytes, dtype=np.float64) / np.maximum(np.asarray(t.block_events), 1),
                    t.block_events)
    for level in (0, 1, 2, 4):
        keep = plan(t, level).keep
        assert idx.estimated_bytes(keep) == pytest.approx(float(per[keep].sum()), rel=1e-12)
        assert idx.estimated_bytes(keep, 200.0) == pytest.approx(float(np.minimum(per[keep], 200.0).sum()),
                                                                 rel=1e-12)
    assert idx.estimated_bytes(np.zeros(0, dtype=np.int64)) == 0.0


def test_summaries_are_charged_as_they_are_made_and_a_window_whose_summaries_overflow_the_budget_is_refused(
        tmp_path) -> None:
    """Many small slices far apart on many threads: at level 1 nearly each is a summary of
    its own. The charge before planning cannot know that; the charge as they are made does."""
    rng = np.random.default_rng(3)
    n = 60_000
    ts = np.cumsum(rng.integers(50, 80, n)).astype(float).tolist()
    path = write_trace(tmp_path / "sparse.json.gz", [
        {"ph": "X", "name": f"op{i % 7}", "pid": 1, "tid": i % 64, "ts": ts[i], "dur": 1} for i in range(n)])
    idx = index_file(path)
    seen: list[int] = []
    p = plan(idx.table, 1, grow=seen.append)
    made = sum(getattr(p.summaries, f).nbytes for f in ("track", "start", "end", "count", "top_name", "top_count"))
    assert len(p.summaries) > n // 4 and sum(seen) >= made  # each batch told before it was kept

    need = reduction_bytes(idx, 1)
    budget = MemoryBudget(need + made // 4)  # room for the plan, not for its summaries
    with budget.account("reduce") as acct:
        with pytest.raises(OverBudget, match="summaries"):
            reduce_index(idx, io.BytesIO(), 1, account=acct)
        assert acct.total == 0  # all given back
    assert budget.used == 0
    roomy = MemoryBudget(need + 4 * made + (64 << 20))
    with roomy.account("reduce") as acct:
        stats = reduce_index(idx, io.BytesIO(), 1, account=acct)
        assert stats["output"]["events"] >= len(p.summaries)
    assert roomy.used == 0 and roomy.peak >= need + made


def test_name_ranks_and_slices_are_shared_by_the_chunked_fold() -> None:
    idx = index_file(STALLED)
    t = idx.table
    plan(t, 2)
    assert idx.prepared.slices is slices_of(t) and idx.prepared.name_rank is name_rank(t)


def test_a_table_with_a_scratch_folder_writes_its_slices_there_and_plans_exactly_as_one_without(tmp_path):
    """The slices, their order, the flow binding's per-slice arrays (and the parse's event
    positions) are mapped from files: the prepared state held in memory shrinks, and every
    plan and reduced trace is the same."""
    from tb_reduce_plugin.index.store import IndexStore, parse_spilling

    store = IndexStore(str(tmp_path / "cache"), 1 << 34)
    for path in (STALLED, TORCH_GPU):
        spilled = parse_spilling(store, str(path))
        plain = index_file(path)
        assert spilled.table.scratch is not None and plain.table.scratch is None
        big = len(spilled.table) * 8 >= SPILL_AT_LEAST  # smaller arrays stay in memory
        positions = spilled.source.positions  # the pure-Python path keeps none: it reads blocks again
        assert positions is None or isinstance(positions.starts, np.memmap)  # written as read, as the columns
        for level in ("auto", 0, 1, 3):
            a, b = io.BytesIO(), io.BytesIO()
            reduce_index(spilled, a, level, gzip=False, with_input_index=True)
            reduce_index(plain, b, level, gzip=False, with_input_index=True)
            assert a.getvalue() == b.getvalue(), (path.name, level)
        if big:
            sl = spilled.prepared.slices
            assert all(isinstance(getattr(sl, f), np.memmap) for f in ("start", "end", "dur", "event"))
            assert Path(sl.start.filename).parent == Path(spilled.table.scratch)
            assert spilled.prepared.nbytes() < plain.prepared.nbytes() / 2
            for idx in (spilled, plain):  # the queries' state goes there too, and answers the same
                idx.answers = (search(idx.table, compile_query("aten"), None, None, 50, 0),
                               aggregate(idx.table, None, None, None, None, 50))
            assert spilled.answers == plain.answers
            assert isinstance(spilled.prepared.parents, np.memmap)
            assert isinstance(spilled.prepared.searchable.event, np.memmap)
    assert big  # the GPU trace was


def test_level_0_within_a_limit_is_refused_exactly_when_it_keeps_more_events_than_the_limit() -> None:
    idx = index_file(TORCH_GPU)
    t = idx.table
    for window in _windows(t):
        kept = len(plan(t, 0, *window).keep)
        assert plan_module.plan_within(t, 0, *window, max_keep=kept) is not None
        assert kept == 0 or plan_module.plan_within(t, 0, *window, max_keep=kept - 1) is None
        assert plan_module.plan_within(t, 2, *window, max_keep=0) is not None  # a limit for level 0 only


def test_a_query_or_steps_that_fit_the_budget_only_without_their_own_index_are_refused_not_busy(
        tmp_path, monkeypatch) -> None:
    """Nothing else runs: the memory is held by the index the request itself needs, so
    "try again in a moment" (503) would never come true; the answer is a 413 that says why."""
    from tb_reduce_plugin.budget import BudgetBusy
    from tb_reduce_plugin.query import aggregate as query_aggregate
    from tb_reduce_plugin.reduce import pipeline
    from tb_reduce_plugin.serve.service import TraceService

    logdir = tmp_path / "logs" / "run"
    logdir.mkdir(parents=True)
    (logdir / TORCH_GPU.name).write_bytes(TORCH_GPU.read_bytes())
    svc = TraceService(str(tmp_path / "logs"), cache_dir=str(tmp_path / "cache"), memory_mb=64)
    host = svc.runs()[0]["hosts"][0]["host"]
    svc.reduction("run", host, 2, None, None)  # the index, held and charged
    tf = svc.trace_file("run", host)
    held = svc.warm_index(tf).account.total
    assert held > 0
    room = 64 * 1024 * 1024 - held
    monkeypatch.setattr(pipeline, "derive_bytes", lambda index: room + held // 2)
    with pytest.raises(OverBudget, match="deriving the per-step series"):
        svc.waveforms("run", host)
    monkeypatch.setattr(query_aggregate, "working_bytes", lambda t: room + held // 2)
    with pytest.raises(OverBudget) as refused:
        svc.aggregate("run", host)
    assert not isinstance(refused.value, BudgetBusy)


def test_flows_leaving_a_window_are_found_by_one_flag_per_key_as_by_sorting_the_keys() -> None:
    """Level 0 of a window drops flows with an event outside it; the flags per flow key
    replace a sort of every flow key outside the window (4 s of a narrow window's 5.6 s
    on the 8 GiB trace), with the same events."""
    checked = 0
    for path in (TORCH_GPU, STALLED):
        t = index_file(path).table
        d0, d1 = default_window(t)
        w = d1 - d0
        for a, b in ((0.3, 0.31), (0.1, 0.7), (0.0, 0.5), (0.45, 0.4501)):
            in_window = ~np.isnan(t.ts) & (t.ts >= d0 + a * w) & (t.ts <= d0 + b * w)
            flows = t.flow_key >= 0
            by_sort = np.flatnonzero(flows & np.isin(t.flow_key, np.unique(t.flow_key[flows & ~in_window])))
            assert np.array_equal(flows_module._flows_leaving(t, in_window), by_sort)
            checked += len(by_sort)
    assert checked > 0


@pytest.mark.parametrize("chunk", [4096, None])
@pytest.mark.parametrize("scratch", [False, True])
def test_making_the_window_index_stays_within_its_charge_and_a_plan_through_it_within_a_plans(
        kinds, tmp_path, monkeypatch, chunk, scratch) -> None:
    """The window index (its points in time order, its slices in tiers, its flows by track
    and time) is made in memory, or a chunk at a time into the scratch folder: its peak is
    within `window_index_bytes`; a plan of a window through it within `reduction_bytes`."""
    from tb_reduce_plugin.reduce import window_index

    if chunk is not None:
        monkeypatch.setattr(window_index, "CHUNK_ROWS", chunk)
    for kind, path in kinds.items():
        idx = index_file(path)
        if scratch:
            folder = tmp_path / f"scratch-w-{kind.replace(' ', '-')}"
            folder.mkdir()
            idx.table.scratch = str(folder)
        plan(idx.table, 2)  # the state every plan shares: what is measured is the window index
        charged = window_index.window_index_bytes(idx.table)
        tracemalloc.start()
        try:
            plan_module.prepare_window_index(idx.table)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak <= charged, (kind, scratch, peak, charged)
        assert window_index.window_index_bytes(idx.table) == 0  # made once
        if scratch:
            assert idx.prepared.nbytes() <= 4 * len(idx.table) + (1 << 20), kind
        d0, d1 = default_window(idx.table)
        charged = reduction_bytes(idx, 2)
        tracemalloc.start()
        try:
            p = plan(idx.table, 2, d0 + 0.2 * (d1 - d0), d0 + 0.7 * (d1 - d0))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        summaries = sum(getattr(p.summaries, f).nbytes for f in ("track", "start", "end", "count",
                                                                   "top_offsets", "top_name", "top_count"))
        held = p.keep.nbytes + 2 * summaries + 10 * p.summaries.busy.nbytes + 2 * p.summaries.busy_offsets.nbytes
        assert peak <= charged + held, (kind, scratch, peak, charged, held)
