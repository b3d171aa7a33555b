"""Search and range statistics over every real trace of ../shared/corpus: no trace makes them
fail, and their totals add up to what the event model holds (every slice counted once, its
wall time whole or clipped at a window's edges, self time never negative nor above wall)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from corpus_support import CORPUS, TRACES

from tb_reduce_plugin.model.table import INSTANT_PHASES
from tb_reduce_plugin.query.aggregate import aggregate
from tb_reduce_plugin.query.search import MAX_LIMIT, compile_query, name_text, search
from tb_reduce_plugin.reduce.pipeline import index_file
from tb_reduce_plugin.reduce.plan import default_window
from tb_reduce_plugin.reduce.shared import slices_of

pytestmark = [
    pytest.mark.corpus,
    pytest.mark.skipif(not CORPUS.is_dir(), reason=f"{CORPUS} is absent: no real traces to sweep"),
]


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6 * max(1.0, abs(b)) * 1e-3)


@pytest.mark.parametrize("trace", TRACES)
def test_every_corpus_trace_answers_search_and_range_statistics_that_add_up(trace: str) -> None:
    t = index_file(CORPUS / trace).table
    sl = slices_of(t)
    whole = aggregate(t, limit=MAX_LIMIT)
    rows, other = whole["rows"], whole["other"]
    assert whole["slices"] == len(sl) == sum(r["count"] for r in rows) + other["count"]
    wall = sum(r["wall_us"] for r in rows) + other["wall_us"]
    assert _close(wall, float(np.sum(sl.dur))), (wall, float(np.sum(sl.dur)))
    for r in rows:
        assert -1e-6 <= r["self_us"] <= r["wall_us"] + 1e-6 * max(1.0, r["wall_us"]), r
        assert r["max_us"] <= r["wall_us"] + 1e-6 and r["count"] >= 1
    if len(sl) == 0:
        return
    t0, t1 = default_window(t)
    lo, hi = t0 + (t1 - t0) / 3, t0 + 2 * (t1 - t0) / 3
    part = aggregate(t, lo, hi, limit=MAX_LIMIT)
    inside = (sl.start <= hi) & (sl.end >= lo)
    clipped = np.minimum(sl.end, hi) - np.maximum(sl.start, lo)
    want = float(np.sum(np.where(inside & ((sl.start < lo) | (sl.end > hi)), np.maximum(clipped, 0.0), sl.dur)[inside]))
    got = sum(r["wall_us"] for r in part["rows"]) + part["other"]["wall_us"]
    assert part["slices"] == int(np.count_nonzero(inside)) and _close(got, want), (got, want)

    # The most frequent slice name, searched as a substring: every searchable event whose name holds it.
    top = name_text(t.names[int(np.bincount(sl.name, minlength=len(t.names)).argmax())])
    if not top or "\x00" in top or len(top) > 1000 or any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in top):
        return
    holds = np.array([top in name_text(n) for n in t.names], dtype=bool)
    instants = np.isin(t.ph, np.array(INSTANT_PHASES, dtype=t.ph.dtype)) & ~np.isnan(t.ts)
    expected = int(np.count_nonzero(holds[sl.name])) + int(np.count_nonzero(holds[t.name[instants]]))
    found = search(t, compile_query(top), limit=1)
    assert found["complete"] and found["total"] == expected, (top, found["total"], expected)
    if found["hits"]:
        assert top in found["hits"][0]["name"]
