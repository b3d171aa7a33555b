"""A plan of the whole table makes the flow binding on a second core while it folds the
slices (`plan._binding_ahead`): the same plans as on one core, the same binding, an
error met there raised by the plan, and no thread left behind whatever ended the plan."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

from tb_reduce_plugin.budget import OverBudget
from tb_reduce_plugin.index.prepared import prepared_of
from tb_reduce_plugin.reduce import flows, summaries
from tb_reduce_plugin.reduce import plan as plan_module

WORKER = "tb-reduce-flow-binding"


def cores(monkeypatch, n: int) -> None:
    """`n` usable cores for the plan (the binding made ahead) and the fold (`summaries._on_two_cores`) alike."""
    for module in (plan_module, summaries):
        monkeypatch.setattr(module, "usable_cores", lambda: n)


def fresh(t):
    """The table with no flow binding prepared yet (what the thread makes)."""
    prepared_of(t).flow_binding = None
    return t


def plan_fields(p: plan_module.Plan) -> list:
    out = [p.level, p.resolution, p.t0, p.t1, p.keep]
    out += [getattr(p.summaries, f.name) for f in dataclasses.fields(p.summaries)]
    return out


def same(a: list, b: list) -> bool:
    return all(np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y for x, y in zip(a, b))


@pytest.fixture()
def flowing(oracle_tables) -> list:
    found = [(name, t) for name, t in oracle_tables if (t.flow_key >= 0).any()]
    assert len(found) >= 3
    return found


def binding_threads(monkeypatch) -> list[str]:
    """The names of the threads that make a flow binding from now on."""
    made, inner = [], flows._flow_binding

    def recording(t, sl):
        if prepared_of(t).flow_binding is None:
            made.append(threading.current_thread().name)
        return inner(t, sl)

    monkeypatch.setattr(flows, "_flow_binding", recording)
    return made


def test_plans_made_with_the_binding_on_a_second_core_equal_those_made_on_one(flowing, monkeypatch) -> None:
    made = binding_threads(monkeypatch)
    for name, t in flowing:
        d0, d1 = plan_module.default_window(t)
        asks = [(2, None, None), (4, None, None), (0, d0, d0 + (d1 - d0) / 3), (2, d0, (d0 + d1) / 2)]
        for level, a, b in asks:
            cores(monkeypatch, 1)
            one = plan_fields(plan_module.plan(fresh(t), level, a, b))
            binding_one = prepared_of(t).flow_binding
            cores(monkeypatch, 2)
            two = plan_fields(plan_module.plan(fresh(t), level, a, b))
            assert same(one, two), (name, level, a, b)
            got = prepared_of(t).flow_binding
            for f in ("fidx", "forder", "order"):
                assert np.array_equal(getattr(got, f), getattr(binding_one, f)), (name, f)
    assert WORKER in made and "MainThread" in made  # both ways were taken
    assert not [th for th in threading.enumerate() if th.name == WORKER]


def test_an_error_met_making_the_binding_ahead_is_raised_by_the_plan(flowing, monkeypatch) -> None:
    name, t = flowing[0]

    def failing(*args, **kwargs):
        raise OSError(28, "No space left on device")

    cores(monkeypatch, 2)
    monkeypatch.setattr(flows, "_flow_events", failing)
    with pytest.raises(OSError, match="No space left"):
        plan_module.plan(fresh(t), 2)
    assert not [th for th in threading.enumerate() if th.name == WORKER]
    monkeypatch.undo()
    assert plan_module.plan(fresh(t), 2).events > 0  # nothing half-made was kept: the next plan makes it


def test_a_plan_stopped_by_its_budget_leaves_no_thread_writing_behind_it(flowing, monkeypatch) -> None:
    name, t = flowing[0]
    cores(monkeypatch, 2)
    started = threading.Event()
    inner = flows._flow_events

    def slow(*args, **kwargs):
        started.set()
        return inner(*args, **kwargs)

    monkeypatch.setattr(flows, "_flow_events", slow)

    def grow(n: int) -> None:
        started.wait(10)
        raise OverBudget("over the budget (test)")

    with pytest.raises(OverBudget):
        plan_module.plan(fresh(t), 2, grow=grow)
    assert not [th for th in threading.enumerate() if th.name == WORKER]
    assert prepared_of(t).flow_binding is not None  # made to its end, waited for, kept


def test_two_plans_of_one_table_at_once_make_its_binding_once_and_agree(flowing, monkeypatch) -> None:
    cores(monkeypatch, 2)
    made, inner = [], flows._flow_events

    def counted(*args, **kwargs):
        made.append(threading.current_thread().name)
        return inner(*args, **kwargs)

    monkeypatch.setattr(flows, "_flow_events", counted)
    name, t = max(flowing, key=lambda nt: len(nt[1]))
    want = plan_fields(plan_module.plan(fresh(t), 2))
    for _ in range(3):
        made.clear()
        fresh(t)
        got: list = [None, None]
        barrier = threading.Barrier(2)

        def plan(i: int, got: list = got, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            got[i] = plan_fields(plan_module.plan(t, 2))

        threads = [threading.Thread(target=plan, args=(i,)) for i in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert same(got[0], want) and same(got[1], want), name
        assert made == [WORKER]  # made once, on the worker: the other plan waited for it
        assert not flows._ahead


def test_the_binding_order_sorts_only_slices_that_share_a_track_and_start_and_agrees_with_a_whole_sort() -> None:
    """Slices in the plans' order (track, start, slice) reach the binding's (track, start,
    longest first, slice) by sorting only the runs that share a (track, start): the same
    rows as `np.lexsort` over every slice, NaN starts and ends included."""
    rng = np.random.default_rng(7)
    for _ in range(2000):
        n = int(rng.integers(1, 80))
        trk = np.sort(rng.integers(0, 3, n)).astype(np.int32)
        start = rng.choice(np.array([0.0, 1.0, 2.5, np.nan]), n)
        end = start + rng.choice(np.array([0.0, 1.0, 4.0, np.nan]), n)
        idx = rng.permutation(n).astype(np.int64)
        by_start = np.lexsort((idx, start, trk))
        trk, start, end, idx = trk[by_start], start[by_start], end[by_start], idx[by_start]
        assert np.array_equal(flows._longest_first_within_ties(idx, trk, start, end),
                              np.lexsort((idx, -end, start, trk)))
