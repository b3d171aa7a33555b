"""Range tables read a chunk of slices at a time: every answer equals the table made from
whole arrays (the engine's way before chunks, kept here as written then, as the oracle),
whatever the chunk, the window and the filter; and what a table holds at its peak stays
within what `working_bytes` charges, however long the trace.
"""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
from oracle_traces import TORCH_GPU, write_trace

from tb_reduce_plugin.model.table import EventTable
from tb_reduce_plugin.query import aggregate as query_aggregate
from tb_reduce_plugin.query.aggregate import DEFAULT_LIMIT, _longest_occurrence, _track_mask, aggregate, check_aggregate
from tb_reduce_plugin.query.nesting import parents_of
from tb_reduce_plugin.query.search import name_text
from tb_reduce_plugin.reduce import shared
from tb_reduce_plugin.reduce.pipeline import index_file
from tb_reduce_plugin.reduce.plan import default_window, name_rank
from tb_reduce_plugin.reduce.shared import slices_of

pytestmark = pytest.mark.usefixtures("no_background_work")  # their traced peaks: no other thread's work in them


def whole_table_aggregate(t: EventTable, start_us: Optional[float] = None, end_us: Optional[float] = None,
              pid: Optional[str] = None, tid: Optional[str] = None, limit: int = DEFAULT_LIMIT) -> dict:
    """Per-name statistics of the slices overlapping [start_us, end_us] (all, when absent).

    Rows are sorted by wall time (then count, descending; then name); `other` sums the
    rows past `limit`.
    """
    window = check_aggregate(start_us, end_us, pid, tid, limit)
    tracks = _track_mask(t, pid, tid)
    sl = slices_of(t)
    parent = parents_of(t)
    start, end = sl.start, sl.end
    if window is None:
        wall = sl.dur  # plain durations, as written (end - start loses digits at epoch times)
        cut = np.zeros(len(sl), dtype=bool)
        selected = None
    else:
        lo, hi = window
        inside = (start <= hi) & (end >= lo)
        cut = inside & ((start < lo) | (end > hi))
        wall = np.where(cut, np.minimum(end, hi) - np.maximum(start, lo), sl.dur)
        wall = np.where(inside, np.maximum(wall, 0.0), 0.0)  # out of the window: nothing to give a parent
        selected = inside
    if tracks is not None:
        on_track = tracks[sl.track]
        selected = on_track if selected is None else selected & on_track
    # Direct children's time, summed onto their parents (a child out of the window adds 0).
    has_parent = np.flatnonzero(parent >= 0)
    children = np.bincount(parent[has_parent], weights=wall[has_parent], minlength=len(sl))
    own = np.maximum(wall - children, 0.0)

    if selected is None:
        which = None
        name, w, s, c = sl.name, wall, own, cut
    else:
        which = np.flatnonzero(selected)
        name, w, s, c = sl.name[which], wall[which], own[which], cut[which]
    k = len(t.names)
    count = np.bincount(name, minlength=k)
    wall_sum = np.bincount(name, weights=w, minlength=k)
    self_sum = np.bincount(name, weights=s, minlength=k)
    clipped = np.bincount(name[c], minlength=k) if c.any() else np.zeros(k, dtype=np.int64)
    longest = np.full(k, -np.inf)
    np.maximum.at(longest, name, w)
    max_slice = _longest_occurrence(sl.event if which is None else sl.event[which],
                                    start if which is None else start[which], name, w, longest, k)
    if which is not None and len(which):
        max_slice = np.where(max_slice >= 0, which[np.maximum(max_slice, 0)], -1)

    present = np.flatnonzero(count)
    rank = name_rank(t)
    present = present[np.lexsort((rank[present], -count[present], -wall_sum[present]))]
    shown, rest = present[:limit], present[limit:]
    rows = [{
        "name": name_text(t.names[n]),
        "count": int(count[n]),
        "wall_us": float(wall_sum[n]),
        "self_us": float(self_sum[n]),
        "avg_us": float(wall_sum[n] / count[n]),
        "max_us": float(longest[n]),
        "max_i": int(sl.event[max_slice[n]]),
        "max_ts": float(start[max_slice[n]]),
        "clipped": int(clipped[n]),
    } for n in shown.tolist()]
    slice_tracks = sl.track if which is None else sl.track[which]
    return {
        "window": list(window) if window is not None else None,
        "pid": pid,
        "tid": tid,
        "slices": int(len(name)),
        "tracks": int(np.count_nonzero(np.bincount(slice_tracks, minlength=len(t.tracks)))) if len(name) else 0,
        "names": int(len(present)),
        "clipped": int(np.count_nonzero(c)),
        "limit": limit,
        "rows": rows,
        "other": {
            "names": int(len(rest)),
            "count": int(count[rest].sum()),
            "wall_us": float(wall_sum[rest].sum()),
            "self_us": float(self_sum[rest].sum()),
            "max_us": float(longest[rest].max()) if len(rest) else 0.0,
            "clipped": int(clipped[rest].sum()),
        },
    }




def _asks(t: EventTable) -> list[dict]:
    """The whole trace, a narrow window, a wide one; all tracks, one process, one thread."""
    d0, d1 = default_window(t)
    w = d1 - d0
    windows = [{}, {"start_us": d0 + 0.3 * w, "end_us": d0 + 0.31 * w},
               {"start_us": d0 + 0.1 * w, "end_us": d0 + 0.7 * w}]
    sl = slices_of(t)
    filters = [{}]
    if len(sl):
        pid, tid = t.tracks[int(sl.track[len(sl) // 2])]
        filters += [{"pid": query_aggregate.id_text(pid)},
                    {"pid": query_aggregate.id_text(pid), "tid": query_aggregate.id_text(tid)}]
    return [{**w_, **f, "limit": limit} for w_ in windows for f in filters for limit in (DEFAULT_LIMIT, 3)]


@pytest.fixture()
def tables(oracle_tables) -> list:
    return oracle_tables


@pytest.mark.parametrize("chunk", [1, 5, 997, None])
def test_a_range_table_read_in_chunks_of_any_size_equals_the_table_of_whole_arrays(
        tables: list, chunk: Optional[int]) -> None:
    """Chunks of 1 and 5 slices on the traces small enough for them to be quick; 997 (a
    chunk edge inside every long track) and the default on all. Exact: the same JSON."""
    compared = 0
    for name, t in tables:
        if chunk is not None and len(t) > {1: 2_000, 5: 5_000}.get(chunk, 1 << 62):
            continue
        for ask in _asks(t):
            got = aggregate(t, chunk=chunk, **ask)
            want = whole_table_aggregate(t, **ask)
            assert json.dumps(got) == json.dumps(want), (name, ask)
            compared += 1
    assert compared >= 3 * 18



def test_ties_for_the_longest_slice_across_chunks_keep_the_earliest_as_whole_arrays_do(tmp_path: Path) -> None:
    """Every slice as long as its name's longest, starts repeated across chunk edges, and
    slices out of file order: the row's `max_i`/`max_ts` are the same slice either way."""
    rng = np.random.default_rng(3)
    n = 3_000
    ts = rng.integers(0, 400, n).astype(float).tolist()
    events = [{"ph": "X", "name": f"op{i % 7}", "pid": 1, "tid": i % 3, "ts": ts[i], "dur": 4.0} for i in range(n)]
    events += [{"ph": "B", "name": "pair", "pid": 1, "tid": 9, "ts": 1000.0 - i} for i in range(50)]
    events += [{"ph": "E", "pid": 1, "tid": 9, "ts": 2000.0 + i} for i in range(50)]
    t = index_file(write_trace(tmp_path / "ties.json.gz", events)).table
    for chunk in (1, 2, 64, 1000):
        for ask in _asks(t):
            assert json.dumps(aggregate(t, chunk=chunk, **ask)) == json.dumps(whole_table_aggregate(t, **ask))


def _one_track(tmp_path: Path, n: int) -> EventTable:
    """`n` nested slices on few tracks and many names: the shape of a long profile."""
    rng = np.random.default_rng(7)
    ts = np.cumsum(rng.integers(4, 20, n)).astype(float).tolist()
    events = []
    for i in range(0, n - 1, 2):
        events.append({"ph": "X", "name": f"op{i % 300}", "pid": 1, "tid": i % 4, "ts": ts[i], "dur": 30.0})
        events.append({"ph": "X", "name": f"k{i % 40}", "pid": 1, "tid": i % 4, "ts": ts[i] + 1, "dur": 3.0})
    return index_file(write_trace(tmp_path / "x.json.gz", events)).table


@pytest.mark.parametrize("chunk", [4096, None])
def test_a_range_tables_traced_peak_stays_within_what_working_bytes_charges(tmp_path: Path, monkeypatch,
                                                                           chunk: Optional[int]) -> None:
    """The first table (making the parents, and the slice order no plan made) and later
    ones, over the whole trace and a window; with chunks made small once, so the per-chunk
    charge does not hide a per-slice cost."""
    if chunk is not None:
        monkeypatch.setattr(shared, "CHUNK_SLICES", chunk)
    t = _one_track(tmp_path, 120_000)
    slices_of(t)  # what a first view makes: charged by that view
    d0, d1 = default_window(t)
    for window in ((None, None), (d0 + 0.2 * (d1 - d0), d0 + 0.9 * (d1 - d0)), (None, None)):
        charged = query_aggregate.working_bytes(t)
        tracemalloc.start()
        try:
            aggregate(t, *window)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak <= charged, (window, peak, charged)
    assert query_aggregate.working_bytes(t) < charged * 2  # later tables: no parents to make


def test_the_children_time_of_a_spilled_table_is_a_scratch_file_gone_once_the_table_is_made(tmp_path: Path) -> None:
    from tb_reduce_plugin.index.store import IndexStore, parse_spilling

    store = IndexStore(str(tmp_path / "cache"), 1 << 34)
    idx = parse_spilling(store, str(TORCH_GPU))
    scratch = idx.table.scratch
    assert scratch is not None
    parents_of(idx.table)
    before = sorted(os.listdir(scratch))
    got = aggregate(idx.table)
    assert sorted(os.listdir(scratch)) == before  # the file was unlinked as soon as it was mapped
    assert json.dumps(got) == json.dumps(whole_table_aggregate(index_file(TORCH_GPU).table))
    assert query_aggregate.working_bytes(idx.table) < query_aggregate.working_bytes(index_file(TORCH_GPU).table)


@pytest.mark.parametrize("fails", ["posix_fallocate", "open"])
def test_a_full_or_read_only_scratch_disk_makes_the_table_in_memory_with_the_same_answer(
        tmp_path: Path, monkeypatch, fails: str) -> None:
    """No room for the children's time (ENOSPC at allocation), or no file at all (EROFS):
    the table is made in memory, the same, and leaves no file behind."""
    import builtins
    import errno

    from tb_reduce_plugin.index.store import IndexStore, parse_spilling
    from tb_reduce_plugin.model import mapped

    idx = parse_spilling(IndexStore(str(tmp_path / "cache"), 1 << 34), str(TORCH_GPU))
    parents_of(idx.table)
    before = sorted(os.listdir(idx.table.scratch))
    if fails == "posix_fallocate":
        def no_room(*args):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(mapped.os, "posix_fallocate", no_room)
    else:
        real_open = builtins.open

        def read_only(path, mode="r", *args, **kwargs):
            if str(path).startswith(idx.table.scratch) and "x" in mode:
                raise OSError(errno.EROFS, "Read-only file system")
            return real_open(path, mode, *args, **kwargs)
        monkeypatch.setattr(builtins, "open", read_only)
    got = aggregate(idx.table)
    monkeypatch.undo()
    assert sorted(os.listdir(idx.table.scratch)) == before
    assert json.dumps(got) == json.dumps(whole_table_aggregate(index_file(TORCH_GPU).table))
