"""The state planning and the queries prepare once per table: one object, counted by the index."""

from __future__ import annotations

import dataclasses
import gc
import io
import threading
import weakref

import numpy as np
from conftest import ROOT

from tb_reduce_plugin.budget import MemoryBudget
from tb_reduce_plugin.index.prepared import Prepared, prepared_of
from tb_reduce_plugin.model.table import EventTable
from tb_reduce_plugin.query.aggregate import aggregate
from tb_reduce_plugin.query.search import compile_query, search
from tb_reduce_plugin.reduce.pipeline import index_file, reduce_index, reduction_bytes
from tb_reduce_plugin.reduce.plan import default_window, name_rank, plan, prepare_window_index
from tb_reduce_plugin.reduce.shared import slices_of

STALLED = ROOT / "demo_logdir" / "stalled_step" / "torch_stalled_step.pt.trace.json.gz"
XSPACE = ROOT / "tests" / "fixtures" / "traces" / "jax_stalled_step.xplane.pb"


def test_a_fresh_index_has_nothing_prepared_and_its_prepared_state_counts_no_bytes() -> None:
    idx = index_file(STALLED)
    assert idx.prepared is prepared_of(idx.table)
    assert all(getattr(idx.prepared, f.name) is None for f in dataclasses.fields(Prepared))
    assert idx.prepared.nbytes() == 0


def test_memory_bytes_grows_by_exactly_the_prepared_objects_nbytes_after_a_plan() -> None:
    idx = index_file(STALLED)
    before = idx.memory_bytes()
    plan(idx.table, 2)
    grown = idx.prepared.nbytes()
    assert grown > 0
    assert idx.memory_bytes() == before + grown


def test_a_second_plan_reuses_the_prepared_state_and_adds_no_memory() -> None:
    idx = index_file(STALLED)
    first = plan(idx.table, 3)
    p = idx.prepared
    held = (p.slices, p.static, p.name_rank, p.flow_binding, p.default_window)
    assert all(x is not None for x in held)
    size = idx.memory_bytes()
    second = plan(idx.table, 3)
    other_level = plan(idx.table, 1)
    assert idx.prepared is p
    now = (p.slices, p.static, p.name_rank, p.flow_binding, p.default_window)
    assert all(a is b for a, b in zip(now, held))  # the same objects, not recomputed
    assert idx.memory_bytes() == size
    assert np.array_equal(first.keep, second.keep) and len(other_level.keep) >= len(first.keep)
    # a window's plan adds nothing; the window index, once prepared, is counted, and a plan
    # through it (the whole trace's bounds) keeps what the plan of the whole trace keeps
    windowed = plan(idx.table, 1, *default_window(idx.table))
    assert p.window_index is None and idx.memory_bytes() == size
    prepare_window_index(idx.table)
    assert p.window_index is not None and idx.memory_bytes() == size + Prepared(window_index=p.window_index).nbytes()
    again = plan(idx.table, 1, *default_window(idx.table))
    assert idx.memory_bytes() == size + Prepared(window_index=p.window_index).nbytes()
    assert np.array_equal(windowed.keep, other_level.keep) and np.array_equal(again.keep, windowed.keep)


def test_searches_and_range_tables_prepare_into_the_same_object_and_the_index_counts_it() -> None:
    idx = index_file(XSPACE)
    base = idx.memory_bytes() - idx.prepared.nbytes()
    search(idx.table, compile_query("a"))
    assert idx.prepared.searchable is not None and idx.prepared.parents is None
    after_search = idx.memory_bytes()
    aggregate(idx.table)
    assert idx.prepared.parents is not None
    assert idx.memory_bytes() == base + idx.prepared.nbytes() > after_search


def test_settle_memory_charges_the_index_account_exactly_its_columns_plus_the_prepared_state() -> None:
    budget = MemoryBudget(1 << 30)
    account = budget.account("reading")
    idx = index_file(STALLED, account=account)
    idx.account = account
    idx.settle_memory()
    unprepared = account.total
    assert unprepared == idx.memory_bytes()
    need_cold = reduction_bytes(idx, 2)
    reduce_index(idx, io.BytesIO(), 2, gzip=False)
    idx.settle_memory()
    assert account.total == idx.memory_bytes() == unprepared + idx.prepared.nbytes()
    assert reduction_bytes(idx, 2) < need_cold  # the next plan need not prepare it again


def test_nbytes_counts_each_array_once_and_a_view_not_at_all() -> None:
    a = np.zeros(1000, dtype=np.int64)
    p = Prepared(name_rank=a, parents=a, searchable=[a[10:], np.ones(10, dtype=np.int8)],
                 default_window=(0.0, 1.0))
    assert p.nbytes() == a.nbytes + 10


def test_the_table_itself_carries_no_prepared_attributes() -> None:
    t = index_file(STALLED).table
    plan(t, 4)
    slices_of(t)
    name_rank(t)
    aggregate(t)
    search(t, compile_query("aten"))
    assert set(vars(t)) == {f.name for f in dataclasses.fields(EventTable)}


def test_the_prepared_state_goes_when_its_table_is_collected() -> None:
    t = index_file(STALLED).table
    plan(t, 2)
    state = weakref.ref(prepared_of(t))
    assert t.prepared is state()
    del t
    gc.collect()
    assert state() is None


def test_threads_planning_a_fresh_table_at_once_share_one_prepared_object_and_agree() -> None:
    t = index_file(STALLED).table
    results: list = [None] * 8
    seen: list = [None] * 8
    start = threading.Barrier(8)

    def work(k: int) -> None:
        start.wait()
        seen[k] = prepared_of(t)
        results[k] = plan(t, 1 + k % 4).keep

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert all(s is seen[0] for s in seen)
    for k in range(8):
        assert np.array_equal(results[k], plan(t, 1 + k % 4).keep)
