"""Exact range statistics (`query/aggregate.py`) against an independent computation from the
input file: plain Python over the json-loaded events, with its own B/E pairing, its own
stack for nesting and its own clipping. Real traces: a PyTorch profile (nested X) and a
Chrome trace of B/E pairs."""

from __future__ import annotations

import gzip
import json
import math
import random
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tb_reduce_plugin.errors import BadQuery
from tb_reduce_plugin.query.aggregate import aggregate
from tb_reduce_plugin.query.nesting import direct_parents
from tb_reduce_plugin.reduce.pipeline import index_file

PYTORCH = ("public", "kineto", "tb_plugin__samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz")
BE_PAIRS = ("public", "catapult", "tracing__test_data__flow.json")


def load(path: Path) -> list[dict]:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def text(v: Any) -> str:
    return v if isinstance(v, str) else ("" if v is None else json.dumps(v))


def number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def slices_of(events: list[dict]) -> list[dict]:
    """X events, and B/E pairs matched per (pid, tid) in time order (file order on ties),
    each E closing the latest open B, as docs/SEMANTICS.md says."""
    out = []
    for i, e in enumerate(events):
        if e.get("ph") == "X" and number(e.get("ts")):
            d = e.get("dur")
            d = max(float(d), 0.0) if number(d) else 0.0
            out.append({"i": i, "kind": 0, "track": (e.get("pid"), e.get("tid")), "name": text(e.get("name")),
                        "start": float(e["ts"]), "end": float(e["ts"]) + d, "dur": d})
    stacks: dict = defaultdict(list)
    be = [(e.get("pid"), e.get("tid"), float(e["ts"]), i) for i, e in enumerate(events)
          if e.get("ph") in ("B", "E") and number(e.get("ts"))]
    for pid, tid, ts, i in sorted(be, key=lambda r: (json.dumps(r[:2]), r[2], r[3])):
        stack = stacks[(pid, tid)]
        if events[i]["ph"] == "B":
            stack.append(i)
        elif stack:
            b = stack.pop()
            out.append({"i": b, "kind": 1, "track": (pid, tid), "name": text(events[b].get("name")),
                        "start": float(events[b]["ts"]), "end": ts, "dur": ts - float(events[b]["ts"])})
    return out


def expected_table(events: list[dict], window: Optional[tuple[float, float]] = None,
                   pid: Optional[str] = None, tid: Optional[str] = None) -> dict[str, dict]:
    """Per name: count, wall, self, max (+ where), clipped — computed the plain way."""
    sl = slices_of(events)
    lo, hi = window if window is not None else (-math.inf, math.inf)
    for s in sl:
        s["in"] = s["start"] <= hi and s["end"] >= lo
        s["cut"] = s["in"] and (s["start"] < lo or s["end"] > hi)
        s["wall"] = (min(s["end"], hi) - max(s["start"], lo)) if s["cut"] else (s["dur"] if s["in"] else 0.0)
        s["children"] = 0.0
    by_track: dict = defaultdict(list)
    for s in sl:
        by_track[s["track"]].append(s)
    for track in by_track.values():
        stack: list[dict] = []
        for s in sorted(track, key=lambda s: (s["start"], -s["end"], s["kind"], s["i"])):
            while stack and stack[-1]["end"] <= s["start"]:
                stack.pop()
            if stack:
                stack[-1]["children"] += s["wall"]
            stack.append(s)
    rows: dict[str, dict] = {}
    for s in sl:
        if not s["in"] or (pid is not None and text(s["track"][0]) != pid) or (tid is not None and text(s["track"][1]) != tid):
            continue
        r = rows.setdefault(s["name"], {"count": 0, "wall_us": 0.0, "self_us": 0.0, "clipped": 0, "best": None})
        r["count"] += 1
        r["wall_us"] += s["wall"]
        r["self_us"] += max(s["wall"] - s["children"], 0.0)
        r["clipped"] += s["cut"]
        key = (-s["wall"], s["start"], s["i"])
        if r["best"] is None or key < r["best"]:
            r["best"] = key
    return rows


def assert_same(got: dict, want: dict[str, dict]) -> None:
    assert got["names"] == len(want) and got["other"]["names"] == 0
    assert got["slices"] == sum(r["count"] for r in want.values())
    assert got["clipped"] == sum(r["clipped"] for r in want.values())
    close = dict(rel_tol=1e-9, abs_tol=1e-6)
    by_name = {r["name"]: r for r in got["rows"]}
    assert set(by_name) == set(want)
    for name, w in want.items():
        g = by_name[name]
        assert (g["count"], g["clipped"]) == (w["count"], w["clipped"]), name
        assert math.isclose(g["wall_us"], w["wall_us"], **close), name
        assert math.isclose(g["self_us"], w["self_us"], **close), name
        assert math.isclose(g["avg_us"], w["wall_us"] / w["count"], **close), name
        assert (g["max_us"], g["max_ts"], g["max_i"]) == (-w["best"][0], w["best"][1], w["best"][2]), name
    walls = [r["wall_us"] for r in got["rows"]]
    assert walls == sorted(walls, reverse=True)


@pytest.fixture(params=[PYTORCH, BE_PAIRS], ids=["pytorch-nested-x", "chrome-b-e-pairs"])
def trace(request: pytest.FixtureRequest, corpus: Path) -> tuple[list[dict], Any]:
    path = corpus.joinpath(*request.param)
    return load(path), index_file(path).table


def span(events: list[dict]) -> tuple[float, float]:
    times = [float(e["ts"]) for e in events if e.get("ph") in ("X", "B", "E") and number(e.get("ts"))]
    return min(times), max(times)


def test_whole_trace_totals_equal_an_independent_computation_from_the_file(trace: tuple) -> None:
    events, t = trace
    got = aggregate(t, limit=10_000)
    assert got["window"] is None and got["clipped"] == 0
    want = expected_table(events)
    assert_same(got, want)
    assert any(w["self_us"] < w["wall_us"] for w in want.values())  # nesting really is there to subtract


def test_a_window_counts_only_the_overlap_of_the_slices_it_cuts(trace: tuple) -> None:
    events, t = trace
    first, last = span(events)
    window = (first + 0.37 * (last - first), first + 0.61 * (last - first))
    got = aggregate(t, *window, limit=10_000)
    assert got["window"] == list(window) and got["clipped"] > 0
    assert_same(got, expected_table(events, window))


def test_a_pid_and_tid_filter_keeps_one_thread_and_a_pid_alone_its_process(trace: tuple) -> None:
    events, t = trace
    counts: dict = defaultdict(int)
    for s in slices_of(events):
        counts[s["track"]] += 1
    pid, tid = (text(v) for v in max(counts, key=counts.get))
    first, last = span(events)
    window = (first + 0.2 * (last - first), first + 0.9 * (last - first))
    thread = aggregate(t, *window, pid=pid, tid=tid, limit=10_000)
    assert thread["tracks"] == 1 and (thread["pid"], thread["tid"]) == (pid, tid)
    assert_same(thread, expected_table(events, window, pid, tid))
    process = aggregate(t, pid=pid, limit=10_000)
    assert_same(process, expected_table(events, None, pid))
    assert aggregate(t, pid="no such process")["slices"] == 0


def test_rows_past_the_limit_are_summed_in_other(trace: tuple) -> None:
    events, t = trace
    whole = aggregate(t, limit=10_000)
    limit = whole["names"] // 2
    assert limit >= 1
    top = aggregate(t, limit=limit)
    assert top["rows"] == whole["rows"][:limit] and top["names"] == whole["names"]
    rest = whole["rows"][limit:]
    assert top["other"]["names"] == len(rest)
    assert top["other"]["count"] == sum(r["count"] for r in rest)
    assert math.isclose(top["other"]["wall_us"], sum(r["wall_us"] for r in rest), rel_tol=1e-9)
    assert math.isclose(top["other"]["self_us"], sum(r["self_us"] for r in rest), rel_tol=1e-9)
    assert top["other"]["max_us"] == max(r["max_us"] for r in rest)
    assert top["other"]["clipped"] == sum(r["clipped"] for r in rest) == 0


@pytest.mark.parametrize("kwargs, why", [
    (dict(limit=0), "limit"), (dict(limit=10_001), "limit"), (dict(tid="1"), "tid needs pid"),
    (dict(start_us=5.0), "both"), (dict(start_us=5.0, end_us=5.0), "below end_us"),
])
def test_a_range_that_cannot_be_answered_is_refused_with_the_reason(kwargs: dict, why: str, corpus: Path) -> None:
    t = index_file(corpus.joinpath(*BE_PAIRS)).table
    with pytest.raises(BadQuery, match=why):
        aggregate(t, **kwargs)


def stack_parents(track: list[int], start: list[float], end: list[float]) -> list[int]:
    order = sorted(range(len(start)), key=lambda i: (track[i], start[i], -end[i], i))
    parent, stack, current = [-1] * len(start), [], None
    for i in order:
        if track[i] != current:
            stack, current = [], track[i]
        while stack and end[stack[-1]] <= start[i]:
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    return parent


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40), st.sampled_from([0, 0, 1, 2, 5, 13, 40])),
                max_size=300))
def test_a_slices_parent_is_the_top_of_its_tracks_stack_of_open_slices(rows: list) -> None:
    """Malformed overlaps and zero-length slices included: the vectorised search agrees with a stack."""
    import numpy as np

    track = [r[0] for r in rows]
    start = [float(r[1]) for r in rows]
    end = [float(r[1] + r[2]) for r in rows]
    got = direct_parents(np.asarray(track, dtype=np.int32), np.asarray(start), np.asarray(end))
    assert got.tolist() == stack_parents(track, start, end)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40), st.sampled_from([0, 0, 1, 2, 5, 13, 40])),
                max_size=300), st.integers(1, 40))
def test_parents_found_a_chunk_at_a_time_equal_the_stack_however_small_the_chunks(rows: list, chunk: int) -> None:
    """A chunk carries the slices still open into the next: chunks of 1 to 40 slices,
    equal starts across a chunk's edge and malformed overlaps included."""
    import numpy as np

    track = [r[0] for r in rows]
    start = [float(r[1]) for r in rows]
    end = [float(r[1] + r[2]) for r in rows]
    got = direct_parents(np.asarray(track, dtype=np.int32), np.asarray(start), np.asarray(end), chunk=chunk)
    assert got.tolist() == stack_parents(track, start, end)


def test_parents_are_found_below_and_above_the_point_where_numpy_rounds_give_way_to_a_loop() -> None:
    import numpy as np

    rng = random.Random(7)
    n = 20_000  # deep chains that end together, then siblings that must climb them
    track, start, end = [], [], []
    for chain in range(40):
        depth = rng.randint(1, 600)
        base = chain * 10_000.0
        for d in range(depth):
            track.append(chain % 3)
            start.append(base + d)
            end.append(base + 5_000.0)
        for k in range(rng.randint(0, 300)):
            track.append(chain % 3)
            start.append(base + 5_000.0 + 2 * k)
            end.append(base + 5_001.0 + 2 * k)
    assert len(start) < n * 2
    want = stack_parents(track, start, end)
    for chunk in (1 << 18, 1_000, 97):  # deep chains carried from chunk to chunk too
        got = direct_parents(np.asarray(track), np.asarray(start), np.asarray(end), chunk=chunk)
        assert got.tolist() == want
