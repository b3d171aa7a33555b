"""The fold's per-slice steps (`reduce/fold_steps.py`): plans of real traces are the same
byte for byte whether the steps run natively or in numpy, and the names' counts are
`np.unique`'s whether they are counted in a table or sorted."""

from __future__ import annotations

import numpy as np
import pytest

from tb_reduce_plugin.native import available
from tb_reduce_plugin.reduce import fold_steps
from tb_reduce_plugin.reduce.plan import default_window, plan


def _plans(t) -> list:
    d0, d1 = default_window(t)
    w = d1 - d0
    windows = ((None, None), (d0 + 0.1 * w, d1), (d0 + 0.3 * w, d0 + 0.31 * w))
    return [plan(t, level, *win, resolution=res) for level in (1, 2, 4) for win in windows
            for res in (None, 97)]


@pytest.mark.skipif(not available(), reason="the native extension is not built here")
def test_plans_of_real_traces_are_the_same_with_the_native_steps_and_with_numpy(oracle_tables,
                                                                                monkeypatch) -> None:
    compared = 0
    for name, t in oracle_tables:
        monkeypatch.setenv("TB_REDUCE_NATIVE", "1")  # native steps, also where the suite runs pure
        native = _plans(t)
        monkeypatch.setattr(fold_steps, "scanner_module", lambda: None)  # the steps' numpy twins only
        twin = _plans(t)
        monkeypatch.undo()
        for a, b in zip(native, twin):
            assert np.array_equal(a.keep, b.keep), name
            for f in a.summaries.__dataclass_fields__:
                x, y = getattr(a.summaries, f), getattr(b.summaries, f)
                assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), (name, f)
            compared += 1
    assert compared >= 18 * 5


@pytest.mark.parametrize("seed", range(40))
def test_names_counted_in_a_table_or_natively_are_what_unique_finds(seed: int, monkeypatch) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    groups = int(rng.integers(1, max(2, n // int(rng.choice([1, 5, 400])))))
    group = np.sort(rng.integers(0, groups, n))
    group -= group[0]  # ascending from 0, as a chunk's groups are
    name = rng.integers(0, int(rng.choice([1, 7, 700, 70000])), n).astype(np.int64)
    nn = int(name.max()) + 1
    want_combo, want_cnt = np.unique(group * nn + name, return_counts=True)
    module = fold_steps.scanner_module()
    ways = [(None, 0), (None, 1 << 30)]  # numpy: sorted always, counted in a table always
    if available():
        monkeypatch.setenv("TB_REDUCE_NATIVE", "1")  # and natively, also where the suite runs pure
        ways.append((fold_steps.scanner_module(), 0))
        monkeypatch.delenv("TB_REDUCE_NATIVE")
    for module, table_per_row in ways:
        monkeypatch.setattr(fold_steps, "scanner_module", lambda m=module: m)
        monkeypatch.setattr(fold_steps, "_COUNT_TABLE_PER_ROW", table_per_row)
        monkeypatch.setattr(fold_steps, "_COUNT_TABLE_MIN", 0 if table_per_row == 0 else 1 << 30)
        g, nm, cnt = fold_steps.name_counts(group, name)
        assert g.dtype == want_combo.dtype and cnt.dtype == want_cnt.dtype
        assert np.array_equal(g, want_combo // nn) and np.array_equal(nm, want_combo % nn)
        assert np.array_equal(cnt, want_cnt)


def test_the_native_name_count_refuses_what_it_cannot_count_and_numpy_counts_it(monkeypatch) -> None:
    """Groups that go back, names outside [0, nn), too many names: -1, and `name_counts`
    takes the numpy path (same answer as `np.unique`)."""
    if not available():
        pytest.skip("the native extension is not built here")
    monkeypatch.setenv("TB_REDUCE_NATIVE", "1")
    mod = fold_steps.scanner_module()
    out = [np.empty(4, dtype=np.int64) for _ in range(3)]
    assert mod.name_counts(np.array([1, 0, 0, 0]), np.array([0, 0, 1, 1]), 2, *out) == -1
    assert mod.name_counts(np.array([0, 0, 1, 1]), np.array([0, 5, 1, 1]), 2, *out) == -1
    assert mod.name_counts(np.array([0, 0, 1, 1]), np.array([0, -1, 1, 1]), 2, *out) == -1
    assert mod.name_counts(np.array([0, 0, 1, 1]), np.array([0, 1, 1, 1]), 1 << 25, *out) == -1
    assert mod.name_counts(np.array([0, 0, 1, 1]), np.array([1, 0, 1, 1]), 2, *out) == 3
    assert [o[:3].tolist() for o in out] == [[0, 0, 1], [0, 1, 1], [1, 1, 2]]
    with pytest.raises(ValueError):
        mod.name_counts(np.array([0, 0]), np.array([0]), 2, *out)
    g, nm, cnt = fold_steps.name_counts(np.array([0, 0, 1, 1]), np.array([3 << 24, 0, 1, 1]))
    assert g.tolist() == [0, 0, 1] and nm.tolist() == [0, 3 << 24, 1] and cnt.tolist() == [1, 1, 2]
