"""`mapped.Appended`: arrays made part by part, whole at the end, whatever was announced."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tb_reduce_plugin.model import mapped
from tb_reduce_plugin.model.mapped import Appended

DTYPES = {"start": np.float64, "event": np.int32, "flag": np.uint8}


def _parts(rng: np.random.Generator, sizes: list[int]) -> list[dict[str, np.ndarray]]:
    return [{"start": rng.random(n), "event": rng.integers(-5, 2**40, n), "flag": rng.integers(0, 300, n)}
            for n in sizes]


def _expected(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([np.asarray(p[k], dtype=d) for p in parts]) if parts else np.zeros(0, dtype=d)
            for k, d in DTYPES.items()}


@pytest.mark.parametrize("sizes", [[], [0], [5], [3, 0, 7], [1000, 1, 999]])
@pytest.mark.parametrize("announced", ["exact", "fewer came", "more came", "none"])
def test_parts_appended_give_their_concatenation_whatever_rows_were_announced(sizes: list[int], announced: str) -> None:
    """Announced rows are made at once and filled in place; rows that do not come leave
    the result as long as what came, and rows past the announcement are joined after."""
    parts = _parts(np.random.default_rng(len(sizes)), sizes)
    total = sum(sizes)
    rows = {"exact": total, "fewer came": total + 3, "more came": max(total - 2, 0), "none": None}[announced]
    out = Appended(None, DTYPES, "a test", rows=rows)
    for p in parts:
        out.append(p)
    got, want = out.finish(), _expected(parts)
    assert set(got) == set(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]), (k, announced)


def test_announced_rows_are_ignored_with_a_folder_and_the_parts_still_spill(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(mapped, "SPILL_AT_LEAST", 1)
    parts = _parts(np.random.default_rng(1), [40, 60])
    out = Appended(str(tmp_path), DTYPES, "a test", rows=100)
    for p in parts:
        out.append(p)
    got = out.finish()
    assert all(isinstance(v, np.memmap) for v in got.values())
    for k, v in _expected(parts).items():
        assert np.array_equal(got[k], v)
