"""The slices, the flow binding and the whole trace's window, prepared a chunk at a time (and
into the table's scratch folder), equal what whole-array code gives: that code is kept here
as the oracle (the slices' is the same code in one chunk), at chunks of every size, on
flows that tie, cross chunk edges and sit on tracks with no slices."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from oracle_traces import TORCH_GPU, write_trace

from tb_reduce_plugin.index.prepared import prepared_of
from tb_reduce_plugin.model import slices as slices_module
from tb_reduce_plugin.model.slices import build_slices
from tb_reduce_plugin.model.table import FLOW_PHASES, PH_M, PH_X, EventTable, ph_in
from tb_reduce_plugin.reduce import flows, plan, shared
from tb_reduce_plugin.reduce.pipeline import index_file
from tb_reduce_plugin.reduce.shared import slices_of

pytestmark = pytest.mark.usefixtures("no_background_work")  # their traced peaks: no other thread's work in them


def whole_flow_binding(t: EventTable) -> dict:
    """Where each flow event lands, as the whole-array code of the stop before made it."""
    sl = slices_of(t)
    fidx = np.flatnonzero(t.flow_key >= 0)
    order = np.lexsort((-sl.end, sl.start, sl.track)) if len(fidx) else np.zeros(0, dtype=np.int64)
    strack, sstart, send = sl.track[order], sl.start[order], sl.end[order]
    forder = np.argsort(t.track[fidx], kind="stable")
    fsorted = fidx[forder]
    ftrack = t.track[fsorted]
    cuts = np.flatnonzero(np.diff(ftrack)) + 1
    segments = []
    for lo_f, hi_f in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(ftrack)].tolist()):
        if hi_f <= lo_f:
            continue
        tr = ftrack[lo_f]
        a, b = int(np.searchsorted(strack, tr, "left")), int(np.searchsorted(strack, tr, "right"))
        if a == b:
            continue
        starts, ends = sstart[a:b], send[a:b]
        ts = t.ts[fsorted[lo_f:hi_f]]
        tol = 1e-6 + np.abs(ts) * 2e-15
        p = np.searchsorted(starts, ts + tol, "right") - 1
        pc = np.maximum(p, 0)
        direct = (p >= 0) & (ends[pc] >= ts - tol)
        lo_next = np.searchsorted(starts, ts - tol, "left")
        exact = np.searchsorted(starts, ts, "left")
        hi_next = np.searchsorted(starts, starts[np.minimum(exact, len(starts) - 1)], "right")
        hi_next = np.where(exact < len(starts), hi_next, len(starts))
        segments.append({"lo_f": lo_f, "hi_f": hi_f, "a": a, "b": b, "pc": pc, "direct": direct,
                         "between": (p >= 0) & ~direct, "lo_next": lo_next, "hi_next": hi_next,
                         "enclosing": t.bind_enclosing[fsorted[lo_f:hi_f]], "ts": ts, "tol": tol})
    return {"fidx": fidx, "forder": forder, "order": order, "sstart": sstart, "send": send, "segments": segments}


def whole_default_window(t: EventTable) -> tuple[float, float]:
    ok = ~np.isnan(t.ts) & (t.ph != PH_M)
    if not ok.any():
        return 0.0, 1.0
    ts = t.ts[ok]
    dur = np.where(t.ph[ok] == PH_X, np.maximum(np.nan_to_num(t.dur[ok], nan=0.0), 0.0), 0.0)
    with np.errstate(over="ignore"):
        t0, t1 = float(ts.min()), float((ts + dur).max())
    return (t0, t1) if t1 > t0 else (t0, t0 + 1.0)


def assert_same_binding(t: EventTable, name: str) -> None:
    got, want = flows._flow_binding(t, slices_of(t)), whole_flow_binding(t)
    for f in ("fidx", "forder", "order"):
        a, b = getattr(got, f), want[f]
        assert a.dtype == b.dtype and np.array_equal(a, b), (name, f)
    assert len(got.segments) == len(want["segments"]), name
    for seg, ref in zip(got.segments, want["segments"]):
        ts, tol = flows._segment_times(t, got, seg, np.arange(seg.hi_f - seg.lo_f))
        assert np.array_equal(ts, ref["ts"], equal_nan=True) and np.array_equal(tol, ref["tol"], equal_nan=True)
        for k, v in ref.items():
            if k in ("ts", "tol"):  # read through the orders, not kept: compared above
                continue
            a = getattr(seg, k)
            if isinstance(v, np.ndarray):
                assert a.dtype == v.dtype and np.array_equal(a, v), (name, k)
            else:
                assert a == v, (name, k)


def fresh(t: EventTable) -> EventTable:
    """The table with nothing prepared (the slices aside: they are not what is tested)."""
    p = prepared_of(t)
    p.flow_binding = p.default_window = None
    return t


def chunked_tables(tables: list, monkeypatch, chunk) -> list:
    """Chunks of `chunk` slices and events; chunks of 1 and 7 only on traces small enough
    for them to be quick."""
    if chunk is not None:
        monkeypatch.setattr(shared, "CHUNK_SLICES", chunk)
        monkeypatch.setattr(shared, "CHUNK_EVENTS", chunk)
    return [(name, t) for name, t in tables
            if chunk is None or len(t) <= {1: 2_000, 7: 5_000}.get(chunk, 1 << 62)]


@pytest.fixture()
def tables(oracle_tables) -> list:
    return oracle_tables


@pytest.mark.parametrize("chunk", [1, 7, 1000, None])
def test_the_flow_binding_made_in_chunks_of_any_size_equals_the_whole_array_one(tables, monkeypatch, chunk) -> None:
    """Chunks of 1 and 7 (slices and flow events) on the traces small enough for them; 1000
    and the default on all of them. Every array the same, dtype included."""
    compared = 0
    for name, t in chunked_tables(tables, monkeypatch, chunk):
        t = fresh(t)
        assert_same_binding(t, name)
        assert plan.default_window(t) == whole_default_window(t), name
        compared += int(np.count_nonzero(t.flow_key >= 0) > 0)
    assert compared >= 3


def test_flows_that_tie_cross_chunk_edges_and_sit_on_tracks_without_slices_bind_as_before(tmp_path: Path,
                                                                                      monkeypatch) -> None:
    """Slices sharing starts (and ends) across chunk edges, flows at those starts, flows on
    a track with no slice, `bp: e` and not, B/E pairs beside X slices; written to a scratch
    folder (files) and held in memory: the same either way, and the same reductions."""
    rng = np.random.default_rng(11)
    events = []
    for i in range(600):
        ts = float(rng.integers(0, 60)) * 10
        events.append({"ph": "X", "name": f"s{i % 5}", "pid": 1, "tid": i % 3, "ts": ts, "dur": float(rng.integers(0, 4)) * 10})
    for i in range(40):
        events += [{"ph": "B", "name": "pair", "pid": 1, "tid": 2, "ts": 100.0 + i},
                   {"ph": "E", "pid": 1, "tid": 2, "ts": 300.0 - i}]
    for k in range(300):
        a, b = float(rng.integers(0, 60)) * 10, float(rng.integers(0, 60)) * 10
        tid = k % 4  # tid 3 holds no slice
        events += [{"ph": "s", "name": "f", "cat": "c", "id": k, "pid": 1, "tid": tid, "ts": a},
                   {"ph": "f", "name": "f", "cat": "c", "id": k, "pid": 1, "tid": (tid + 1) % 4, "ts": b,
                    **({"bp": "e"} if k % 2 else {})}]
    path = write_trace(tmp_path / "flows.json.gz", events)
    for chunk in (1, 2, 5, 64):
        monkeypatch.setattr(shared, "CHUNK_SLICES", chunk)
        monkeypatch.setattr(shared, "CHUNK_EVENTS", chunk)
        for scratch in (None, tmp_path / f"scratch{chunk}"):
            t = index_file(path).table
            if scratch is not None:
                scratch.mkdir()
                t.scratch = str(scratch)
            assert_same_binding(t, f"chunk {chunk}")
            for level in (1, 3):
                kept = plan.plan(t, level).keep
                monkeypatch.setattr(shared, "CHUNK_SLICES", 1 << 18)
                monkeypatch.setattr(shared, "CHUNK_EVENTS", 1 << 22)
                assert np.array_equal(kept, plan.plan(index_file(path).table, level).keep), (chunk, level)
                monkeypatch.setattr(shared, "CHUNK_SLICES", chunk)
                monkeypatch.setattr(shared, "CHUNK_EVENTS", chunk)


def test_a_binding_made_into_a_scratch_folder_is_mapped_and_holds_a_chunk_while_made(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """The GPU trace's binding with small chunks: its arrays are mapped from the folder,
    and what tracemalloc sees at the peak is far less than the whole-array code's."""
    monkeypatch.setattr(shared, "CHUNK_SLICES", 4096)
    monkeypatch.setattr(shared, "CHUNK_EVENTS", 4096)
    t = index_file(TORCH_GPU).table
    t.scratch = str(tmp_path)
    slices_of(t), shared.slice_order(t)  # what a first plan makes before the binding
    tracemalloc.start()
    whole_flow_binding(t)
    whole = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    tracemalloc.start()
    fb = flows._flow_binding(t, slices_of(t))
    chunked = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert all(isinstance(a, np.memmap) for a in (fb.fidx, fb.forder, fb.order))
    assert isinstance(fb.segments[0].pc.base, np.memmap)
    assert chunked < whole / 3, (chunked, whole)


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_slices_made_in_chunks_of_events_of_any_size_equal_those_made_in_one(tables, monkeypatch, tmp_path,
                                                                            chunk) -> None:
    """Every column the same, dtype included, held in memory or written to a scratch folder."""
    compared = 0
    for name, t in tables:
        if len(t) > {1: 2_000, 7: 5_000}.get(chunk, 1 << 62):
            continue
        whole = build_slices(t)
        monkeypatch.setattr(slices_module, "CHUNK_EVENTS", chunk)
        for scratch in (None, tmp_path / f"{compared}"):
            if scratch is not None:
                scratch.mkdir()
            t.scratch = None if scratch is None else str(scratch)
            got = build_slices(t)
            for f in ("start", "end", "dur", "track", "name", "event", "partner", "unpaired"):
                a, b = getattr(got, f), getattr(whole, f)
                assert a.dtype == b.dtype and np.array_equal(a, b), (name, f)
        t.scratch = None
        monkeypatch.undo()
        compared += 1
    assert compared >= 3


def whole_flow_keep(t: EventTable, kept_slice: np.ndarray) -> np.ndarray:
    """The flows a plan keeps, as the whole-array code of the stop before found them."""
    fb = whole_flow_binding(t)
    if len(fb["fidx"]) == 0 or not kept_slice.any():
        return fb["fidx"][:0]
    skept = kept_slice[fb["order"]]
    ok_sorted = np.zeros(len(fb["fidx"]), dtype=bool)
    for seg in fb["segments"]:
        lo_f, hi_f, a, b = seg["lo_f"], seg["hi_f"], seg["a"], seg["b"]
        kept = skept[a:b]
        ok = seg["direct"] & kept[seg["pc"]]
        if seg["between"].any():
            starts, ends = fb["sstart"][a:b], fb["send"][a:b]
            k_starts = starts[kept]
            if len(k_starts):
                k_run_end = np.maximum.accumulate(ends[kept])
                ts, tol = seg["ts"][seg["between"]], seg["tol"][seg["between"]]
                q = np.searchsorted(k_starts, ts + tol, "right") - 1
                ok[seg["between"]] = (q >= 0) & (k_run_end[np.maximum(q, 0)] >= ts - tol)
            else:
                ok[seg["between"]] = False
        kept_cum = np.concatenate(([0], np.cumsum(kept)))
        next_ok = kept_cum[seg["hi_next"]] - kept_cum[seg["lo_next"]] > 0
        ok_sorted[lo_f:hi_f] = np.where(seg["enclosing"], ok, next_ok)
    ok = np.empty(len(fb["fidx"]), dtype=bool)
    ok[fb["forder"]] = ok_sorted
    keys = t.flow_key[fb["fidx"]]
    bad = np.zeros(int(keys.max()) + 1, dtype=bool)
    bad[keys[~ok]] = True
    return fb["fidx"][~bad[keys]]


@pytest.mark.parametrize("chunk", [1, 7, None])
def test_the_flows_a_plan_keeps_found_in_chunks_are_those_whole_arrays_find(tables, monkeypatch, chunk) -> None:
    """For kept-slice masks of every density (none, a few, half, all, random), on every
    trace with flows: the same flow events kept."""
    if chunk is not None:
        monkeypatch.setattr(shared, "CHUNK_EVENTS", chunk)
    rng = np.random.default_rng(5)
    compared = 0
    for name, t in tables:
        if not (t.flow_key >= 0).any() or (chunk is not None and len(t) > 20_000):
            continue
        sl = slices_of(t)
        n = len(sl.start)
        for kept in (np.zeros(n, bool), rng.random(n) < 0.01, rng.random(n) < 0.5, np.ones(n, bool),
                     sl.dur >= np.median(sl.dur) if n else np.zeros(0, bool)):
            got = flows._flow_keep(t, sl, kept)
            assert np.array_equal(np.sort(got), np.sort(whole_flow_keep(t, kept))), name
            compared += 1
    assert compared >= 10


def whole_slice_order(sl) -> np.ndarray:
    return np.lexsort((sl.event, sl.start, sl.track))


@pytest.mark.parametrize("chunk", [1, 7, 1000, None])
def test_the_slice_order_made_in_buckets_equals_one_sort_of_every_slice(tables, monkeypatch, tmp_path, chunk) -> None:
    """Buckets of `chunk` slices (many per track, cut at sampled starts), written to a folder
    or held: the order of one lexsort, and the plans' masks those of whole arrays."""
    compared = 0
    for name, t in chunked_tables(tables, monkeypatch, chunk):
        sl = slices_of(t)
        for folder in (None, str(tmp_path)):
            got = shared._track_start_order(sl, folder)
            assert got.dtype == np.int32 and np.array_equal(got, whole_slice_order(sl)), name  # as stored
        prepared_of(t).static = None
        st = shared._static(t, sl)
        has_ts = ~np.isnan(t.ts)
        always = (t.ph == PH_M) | (~has_ts & ~ph_in(t.ph, FLOW_PHASES))
        always[sl.unpaired] = True
        assert np.array_equal(st.has_ts, has_ts) and np.array_equal(st.always, always), name
        compared += 1
    assert compared >= 3


def test_row_numbers_are_int32_while_every_one_fits_and_int64_past_it() -> None:
    from tb_reduce_plugin.model.sorting import row_dtype

    assert row_dtype(0) is np.int32 and row_dtype(2**31 - 1) is np.int32 and row_dtype(2**31) is np.int64


def test_slices_out_of_order_with_runs_of_one_start_longer_than_a_bucket_sort_as_one_lexsort(tmp_path,
                                                                                           monkeypatch) -> None:
    """Three tracks, starts drawn from few values (runs of one start far longer than a
    bucket), written out of time order: the same order at buckets of 3, 16 and 500."""
    rng = np.random.default_rng(2)
    n = 4_000
    ts = (rng.integers(0, 30, n) * 5.0).tolist()
    events = [{"ph": "X", "name": "a", "pid": 1, "tid": int(rng.integers(0, 3)), "ts": ts[i], "dur": 1.0}
              for i in range(n)]
    t = index_file(write_trace(tmp_path / "runs.json.gz", events)).table
    sl = slices_of(t)
    for chunk in (3, 16, 500):
        monkeypatch.setattr(shared, "CHUNK_SLICES", chunk)
        assert np.array_equal(shared._track_start_order(sl, str(tmp_path)), whole_slice_order(sl)), chunk
