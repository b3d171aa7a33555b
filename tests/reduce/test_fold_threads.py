"""Tracks folded on two threads at once (`summaries._on_two_cores`) give, byte for byte, the
plan of folding them in turn: the same kept events and the same summaries in track order
(names, counts, busy digits), whichever thread folded which track, at any chunk size; and
an error in either thread is the plan's."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tb_reduce_plugin.reduce import plan as plan_module
from tb_reduce_plugin.reduce import shared, summaries
from tb_reduce_plugin.reduce.plan import default_window, plan


def two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two usable cores for the fold (`summaries._on_two_cores`) and, as ever, the plan's binding made ahead."""
    for module in (summaries, plan_module):
        monkeypatch.setattr(module, "usable_cores", lambda: 2)


def _plans(t, monkeypatch: pytest.MonkeyPatch, apart: bool, chunk: int) -> list:
    monkeypatch.setattr(summaries, "_FOLD_APART_FROM", 0 if apart else 1 << 62)
    two_cores(monkeypatch)
    monkeypatch.setattr(shared, "CHUNK_SLICES", chunk)
    d0, d1 = default_window(t)
    out = [plan(t, level, *w) for level in (1, 2, 4) for w in ((None, None), (d0 + 0.1 * (d1 - d0), d1))]
    monkeypatch.undo()
    return out


@pytest.mark.parametrize("chunk", [997, 1 << 18])
def test_tracks_folded_on_two_threads_give_the_plan_of_folding_them_in_turn(oracle_tables, monkeypatch,
                                                                          chunk) -> None:
    compared = 0
    for _, t in oracle_tables:
        if len(np.unique(shared.slices_of(t).track)) < 2:
            continue
        for a, b in zip(_plans(t, monkeypatch, True, chunk), _plans(t, monkeypatch, False, chunk)):
            assert np.array_equal(a.keep, b.keep)
            for f in a.summaries.__dataclass_fields__:
                x, y = getattr(a.summaries, f), getattr(b.summaries, f)
                assert x.dtype == y.dtype and np.array_equal(x, y), f
            compared += 1
    assert compared >= 6 * 3


def test_an_error_while_folding_on_the_second_thread_is_raised_by_the_plan(oracle_tables, monkeypatch) -> None:
    """The memory budget refusing a summary (`grow`) while the second thread folds."""
    t = next(t for _, t in oracle_tables if len(np.unique(shared.slices_of(t).track)) >= 3)
    monkeypatch.setattr(summaries, "_FOLD_APART_FROM", 0)
    two_cores(monkeypatch)

    def grow(n: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise MemoryError("over the budget on the fold's thread")

    with pytest.raises(MemoryError, match="fold's thread"):
        plan(t, 2, grow=grow)
