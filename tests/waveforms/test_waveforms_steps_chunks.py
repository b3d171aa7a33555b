"""The per-step series derived a chunk of slices at a time (markers, categories, busy
unions in time order, covered lengths) equal the whole-array derivation of the stop before
(`steps_oracle.py`), float for float, at chunks of every size, held or written to a scratch
folder; and deriving holds what `derive_bytes` charges."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from conftest import TESTS
from oracle_traces import TORCH_GPU, oracle_traces
from steps_oracle import whole_derive

from tb_reduce_plugin.model import slices as slices_module
from tb_reduce_plugin.model import sorting
from tb_reduce_plugin.reduce import shared
from tb_reduce_plugin.reduce.pipeline import derive_bytes, index_file
from tb_reduce_plugin.waveforms import categories, steps
from tb_reduce_plugin.waveforms.steps import derive

pytestmark = pytest.mark.usefixtures("no_background_work")  # their traced peaks: no other thread's work in them

FIXTURES = TESTS / "fixtures"


def traces() -> list[Path]:
    found = oracle_traces() + sorted((FIXTURES / "traces").glob("*.json.gz")) + sorted((FIXTURES / "multihost").rglob("*.pb"))
    return list(dict.fromkeys(found))


def assert_same(a, b, name: str) -> None:
    assert (a.reason, a.marker, a.track) == (b.reason, b.marker, b.track), name
    for f in ("step", "start_us", "end_us"):
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), (name, f)
    assert list(a.busy_ms) == list(b.busy_ms), name
    for k in a.busy_ms:
        assert np.array_equal(a.busy_ms[k], b.busy_ms[k], equal_nan=True), (name, k)


@pytest.fixture(scope="module")
def tables() -> list:
    found = []
    for path in traces():
        try:
            found.append((path.name, index_file(path).table))
        except Exception:  # a corpus file the readers refuse is the sweep's concern, not this one's
            continue
    return found


def small_chunks(monkeypatch, chunk: int) -> None:
    for module, name in ((steps, "CHUNK_ROWS"), (categories, "CHUNK_ROWS"), (shared, "CHUNK_EVENTS"),
                         (shared, "CHUNK_SLICES"), (slices_module, "CHUNK_EVENTS")):
        monkeypatch.setattr(module, name, chunk)


@pytest.mark.parametrize("chunk", [1, 7, 1000, None])
def test_steps_derived_in_chunks_of_any_size_equal_the_whole_array_derivation(tables, monkeypatch, tmp_path,
                                                                              chunk) -> None:
    compared = 0
    for i, (name, t) in enumerate(tables):
        if chunk is not None and len(t) > {1: 2_000, 7: 5_000}.get(chunk, 1 << 62):
            continue
        want = whole_derive(t)
        if chunk is not None:
            small_chunks(monkeypatch, chunk)
        for scratch in (None, tmp_path / f"s{i}"):
            if scratch is not None:
                scratch.mkdir()
            t.scratch = None if scratch is None else str(scratch)
            assert_same(derive(t), want, name)
        t.scratch = None
        monkeypatch.undo()
        compared += int(len(want) > 0)
    assert compared >= 4  # traces with steps: the stalled ones, the GPU fixture, JAX's


def test_a_union_carried_across_parts_is_the_union_of_them_all(tmp_path) -> None:
    """Touching, nested, equal and disjoint intervals, split into parts at every place."""
    rng = np.random.default_rng(4)
    s = np.sort(rng.integers(0, 200, 300).astype(float))
    e = s + rng.integers(0, 12, 300)
    order = np.argsort(s, kind="stable")
    reach = np.maximum.accumulate(e[order])
    new = np.r_[True, s[order][1:] > reach[:-1]]
    first = np.flatnonzero(new)
    want = (s[order][first], reach[np.append(first[1:] - 1, len(s) - 1)])
    for cut in (1, 2, 17, 150, 299):
        for folder in (None, str(tmp_path)):
            u = steps._Union(folder)
            for a in range(0, len(s), cut):
                u.add(s[a:a + cut], e[a:a + cut])
            got = u.finish()
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), cut


@pytest.mark.parametrize("chunk", [4096, None])
def test_derivings_traced_peak_stays_within_what_derive_bytes_charges(tmp_path, monkeypatch, chunk) -> None:
    """The GPU fixture (device idle, categories, markers) with and without a scratch
    folder, the slices made first or by the derivation itself."""
    if chunk is not None:
        small_chunks(monkeypatch, chunk)
        monkeypatch.setattr(sorting, "SAMPLE_ROWS", 1024)
    for scratch in (False, True):
        for slices_first in (False, True):
            idx = index_file(TORCH_GPU)
            if scratch:
                folder = tmp_path / f"{scratch}-{slices_first}"
                folder.mkdir()
                idx.table.scratch = str(folder)
            if slices_first:
                shared.slices_of(idx.table)
            charged = derive_bytes(idx)
            tracemalloc.start()
            try:
                series = derive(idx.table)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert len(series) > 0
            assert peak <= charged, (scratch, slices_first, peak, charged)
