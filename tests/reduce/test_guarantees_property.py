"""SPEC §4 guarantees on random and hand-made traces, judged by the reference checker.

The property tests generate the trace shapes the corpus shows and the ones that
break naive reducers (improper nesting, zero and negative durations, unmatched B/E,
sub-ns float timestamps, string pids, events out of order), reduce them with the
real pipeline and let `reference_checker.check_reduction` judge the output. The
checker-self tests at the end prove the oracle is not vacuous: a correct output
written by hand passes, and each way of breaking it is caught.
"""

from __future__ import annotations

import copy
import gzip
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.reduce.pipeline import reduce_to_bytes
from tb_reduce_plugin.reduce.plan import MIN_WINDOW_US
from tests.reference_checker import RESOLUTION, SUMMARY_CAT, check_reduction, load_trace

# ----------------------------------------------------------------- generators

PIDS = [1, 2, "1", "Spans"]
TIDS = [1, 7, "1", "main"]
# Eight names so that a summary's top-5 is cut and ties are broken by name.
NAMES = ["a", "b", "c", "d", "e", "aten::mm", "é€𝄞 op", "x" * 300]
# 1.7e12 µs is an epoch-like base where one ulp is 0.24 ns: sub-ns digits get rounded.
BASES = [0.0, 12.5, 1.7e12]
LONG_ARGS: list[dict[str, Any]] = [
    {},
    {"External id": 3, "Sequence number": 12},
    {"long": "y" * 300, "short": "z"},
    {"shapes": list(range(40)), "nested": {"deep": ["q" * 400, list(range(50))]}},
    {"bind_id": 5, "flow_in": True, "flow_out": False, "Input Dims": [[1, 2]]},
    {"unicode": "é€𝄞" * 120},
]


def _maybe(draw: Callable, d: dict, key: str, value: Any, p_missing: float = 0.1) -> None:
    """Set d[key] unless the draw says to leave the key out (missing pid/tid/dur)."""
    if draw(st.floats(0, 1)) >= p_missing:
        d[key] = value


@st.composite
def trace_docs(draw: Callable) -> tuple[Any, str]:
    """A random trace document and its format ("object" or "array")."""
    scale = draw(st.sampled_from([1.0, 1000.0, 1e6]))
    base = draw(st.sampled_from(BASES))
    hot = draw(st.lists(st.floats(0, scale), min_size=1, max_size=3))

    def a_time() -> float:
        kind = draw(st.integers(0, 2))
        if kind == 0:  # on a coarse grid: lands on bucket edges
            return base + scale * draw(st.integers(0, 100)) / 100
        if kind == 1:  # clustered: many slices per bucket, sub-ns digits
            return base + draw(st.sampled_from(hot)) + draw(st.floats(0, scale * 1e-3))
        return base + draw(st.floats(0, scale))

    def a_dur() -> float:
        kind = draw(st.integers(0, 5))
        if kind == 0:
            return 0
        if kind == 1:
            return -draw(st.floats(0.001, 5))
        if kind == 2:
            return draw(st.floats(scale * 1e-7, scale * 1e-4))
        if kind == 3:
            return draw(st.integers(1, 3))
        return draw(st.floats(scale * 1e-3, scale * 0.5))

    def track(d: dict) -> dict:
        _maybe(draw, d, "pid", draw(st.sampled_from(PIDS)), 0.05)
        _maybe(draw, d, "tid", draw(st.sampled_from(TIDS)), 0.05)
        return d

    def args() -> dict:
        return copy.deepcopy(draw(st.sampled_from(LONG_ARGS)))

    events: list[Any] = []
    slices: list[dict] = []
    for _ in range(draw(st.integers(0, 25))):  # X slices, some nested inside a parent
        ev = track({"ph": "X", "cat": "cpu_op", "ts": a_time()})
        _maybe(draw, ev, "name", draw(st.sampled_from(NAMES)), 0.05)
        _maybe(draw, ev, "dur", a_dur())
        if draw(st.booleans()):
            ev["args"] = args()
        events.append(ev)
        slices.append(ev)
        if draw(st.integers(0, 3)) == 0 and ev.get("dur", 0) > 0:
            for _ in range(draw(st.integers(1, 4))):
                u, v = draw(st.floats(0, 1)), draw(st.floats(0, 1))
                ts = ev["ts"] + u * ev["dur"]
                child = {k: ev[k] for k in ("pid", "tid") if k in ev}
                child.update(ph="X", name=draw(st.sampled_from(NAMES)), ts=ts, dur=v * (ev["ts"] + ev["dur"] - ts))
                events.append(child)
                slices.append(child)
    for _ in range(draw(st.integers(0, 6))):  # B/E pairs, some unmatched
        b = track({"ph": "B", "name": draw(st.sampled_from(NAMES)), "ts": a_time()})
        e = {k: b[k] for k in ("pid", "tid") if k in b}
        e.update(ph="E", ts=b["ts"] + abs(a_dur()))
        kind = draw(st.integers(0, 4))
        if kind != 1:
            events.append(b)
        if kind != 2:
            events.append(e)
        if kind > 2:  # a flow may bind to a B/E pair too
            slices.append(b)
        if draw(st.booleans()):
            b["args"] = args()
    for _ in range(draw(st.integers(0, 8))):  # counters, several series
        c = {"ph": "C", "name": draw(st.sampled_from(["mem", "queue"])), "ts": a_time()}
        _maybe(draw, c, "pid", draw(st.sampled_from(PIDS)), 0.05)
        if draw(st.booleans()):
            c["id"] = draw(st.sampled_from([1, "1"]))
        c["args"] = {
            "a": draw(st.integers(-5, 5)),
            "b": draw(st.floats(-10, 10)),
            "label": "not a number",
        }
        events.append(c)
    for _ in range(draw(st.integers(0, 8))):  # instants with g/p/t scopes
        i = track({"ph": draw(st.sampled_from(["i", "I", "R"])), "name": "mark", "ts": a_time()})
        scope = draw(st.sampled_from(["g", "p", "t", None]))
        if scope:
            i["s"] = scope
        events.append(i)
    for fid in range(draw(st.integers(0, 4))):  # flows s/t/f, often on slice starts
        cat = draw(st.sampled_from(["ac2g", "fwdbwd"]))
        ident: dict[str, Any] = {"id": fid} if draw(st.booleans()) else {"id2": {"local": hex(fid)}}
        steps = ["s", *(["t"] if draw(st.booleans()) else []), "f"]
        for ph in steps:
            if slices and draw(st.integers(0, 3)) > 0:
                anchor = draw(st.sampled_from(slices))
                fl = {k: anchor[k] for k in ("pid", "tid") if k in anchor}
                fl["ts"] = anchor["ts"]
            else:
                fl = track({"ts": a_time()})
            fl.update(ph=ph, cat=cat, name="flow", **ident)
            if ph == "f" and draw(st.booleans()):
                fl["bp"] = "e"
            events.append(fl)
    for pid in draw(st.lists(st.sampled_from(PIDS), max_size=3, unique=True)):  # metadata
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"proc {pid}"}})
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "ts": 0, "args": {"name": "t"}})
    others = [
        track({"ph": "b", "cat": "async", "id": "0x1", "name": "req", "ts": a_time()}),
        track({"ph": "e", "cat": "async", "id": "0x1", "name": "req", "ts": a_time()}),
        track({"ph": "O", "id": "0x2", "name": "obj", "ts": a_time(), "args": {"snapshot": {}}}),
        track({"ph": "P", "name": "sample", "ts": a_time()}),
        track({"name": "no ph", "ts": a_time()}),
        {"ph": "X", "name": "no ts", "pid": 1, "tid": 1},
        {},
        7,  # SEMANTICS: every element of the event list counts, even one that is no object
    ]
    events.extend(draw(st.lists(st.sampled_from(others), max_size=4)))
    events = draw(st.permutations(events))
    if draw(st.booleans()):
        return events, "array"
    extra = [("schemaVersion", 1), ("displayTimeUnit", "ms"), ("deviceProperties", [{"id": 0, "name": "GPU"}])]
    extra = draw(st.permutations(extra))[: draw(st.integers(0, 3))]
    at = draw(st.integers(0, len(extra)))
    items = [*extra[:at], ("traceEvents", events), *extra[at:]]
    return dict(items), "object"


@st.composite
def cases(draw: Callable) -> dict[str, Any]:
    """A trace, how it is written to disk, and the (level, window) asked for."""
    doc, fmt = draw(trace_docs())
    case: dict[str, Any] = {"doc": doc, "level": draw(st.integers(0, 4)), "gzip": draw(st.booleans())}
    case["truncate"] = fmt == "array" and draw(st.integers(0, 3)) == 0
    case["window"] = None
    times = sorted(_boundaries(doc if isinstance(doc, list) else doc["traceEvents"]))
    if len(times) >= 2 and times[0] < times[-1] and draw(st.booleans()):
        if draw(st.booleans()):  # edges exactly on event boundaries
            a, b = sorted(draw(st.lists(st.sampled_from(times), min_size=2, max_size=2, unique=True)))
        else:
            lo, hi = times[0], times[-1]
            a = lo + (hi - lo) * draw(st.floats(-0.1, 0.9))
            b = a + (hi - lo) * draw(st.floats(0.01, 0.6))
        if b - a >= MIN_WINDOW_US:  # narrower windows are refused (check_window), not reduced
            case["window"] = (a, b)
    return case


def _boundaries(events: list) -> list[float]:
    """Starts and ends of the timed events: windows cut there test the edge rules."""
    out = []
    for e in events:
        if isinstance(e, dict) and e.get("ph") != "M" and isinstance(e.get("ts"), (int, float)):
            out.append(e["ts"])
            dur = e.get("dur")
            if isinstance(dur, (int, float)) and dur > 0:
                out.append(e["ts"] + dur)
    return out


def _write(case: dict[str, Any], folder: Path) -> Path:
    """Write the trace as a live profiler might: gzip or not, Array files maybe cut short."""
    doc = case["doc"]
    if case["truncate"]:
        parts = [json.dumps(e) for e in doc]
        text = "[" + ",\n".join(parts) + ",\n" + '{"ph": "X", "name": "cut sh'
    else:
        text = json.dumps(doc)
    data = text.encode()
    path = folder / ("trace.json.gz" if case["gzip"] else "trace.json")
    path.write_bytes(gzip.compress(data, mtime=0) if case["gzip"] else data)
    return path


@settings(
    max_examples=130,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=cases())
def test_random_traces_keep_every_guarantee_and_reduce_deterministically(case: dict[str, Any]) -> None:
    """G1–G7 and G9 via the checker on random traces; G8: a second run gives the same bytes."""
    start, end = case["window"] or (None, None)
    with tempfile.TemporaryDirectory() as folder:
        path = _write(case, Path(folder))
        doc = load_trace(path)
        if not case["truncate"]:
            assert doc == case["doc"]
        first = reduce_to_bytes(path, level=case["level"], start_us=start, end_us=end)
        second = reduce_to_bytes(path, level=case["level"], start_us=start, end_us=end)
    check_reduction(doc, json.loads(first), case["level"], start, end)
    assert first == second, "G8: two runs on the same input gave different bytes"


# ------------------------------------------------------- hand-written traces


def _reduce(tmp_path: Path, doc: Any, level: int, start: float | None = None, end: float | None = None) -> dict:
    """Reduce `doc` through a real file and check the result with the oracle."""
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    out = json.loads(reduce_to_bytes(path, level=level, start_us=start, end_us=end))
    check_reduction(doc, out, level, start, end)
    return out


def _summaries(out: dict) -> list[dict]:
    return [e for e in out["traceEvents"] if e.get("cat") == SUMMARY_CAT]


def _span(ts: float, dur: float, name: str = "small", tid: int = 1) -> dict:
    return {"ph": "X", "name": name, "cat": "cpu_op", "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def test_a_big_slice_is_kept_as_itself(tmp_path: Path) -> None:
    big = _span(0, 1000, "step")
    small = [_span(10 + k * 0.01, 0.005) for k in range(20)]
    out = _reduce(tmp_path, {"traceEvents": [big, *small]}, level=4)
    assert big in out["traceEvents"]
    assert len(_summaries(out)) == 1


def test_small_slices_in_one_bucket_fold_into_one_summary(tmp_path: Path) -> None:
    frame = _span(0, 1000, "frame", tid=2)
    small = [_span(500 + k * 0.05, 0.04, "k" if k % 3 else "j") for k in range(12)]
    out = _reduce(tmp_path, {"traceEvents": [frame, *small]}, level=4)
    (summary,) = _summaries(out)
    assert summary["args"]["count"] == 12
    assert summary["args"]["top"] == [["k", 8], ["j", 4]]
    assert (summary["pid"], summary["tid"]) == (1, 1)


def test_an_idle_gap_between_busy_buckets_stays_idle(tmp_path: Path) -> None:
    frame = _span(0, 1000, "frame", tid=2)
    left = [_span(100 + k * 0.1, 0.05) for k in range(5)]
    right = [_span(700 + k * 0.1, 0.05) for k in range(5)]
    out = _reduce(tmp_path, {"traceEvents": [frame, *left, *right]}, level=4)
    spans = sorted((s["ts"], s["ts"] + s["dur"]) for s in _summaries(out))
    assert len(spans) == 2 and spans[0][1] < 200 < 600 < spans[1][0]


def test_metadata_and_top_level_keys_survive_every_level(tmp_path: Path) -> None:
    meta = {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "trainer " + "n" * 300}}
    doc = {"schemaVersion": 1, "traceEvents": [meta, _span(0, 10), _span(3, 0.001)], "baseTimeNanoseconds": 17}
    for level in range(5):
        out = _reduce(tmp_path, doc, level)
        assert list(out) == ["traceEvents", "schemaVersion", "baseTimeNanoseconds", "tb_reduce"]
        assert meta in out["traceEvents"]


def test_counter_extremes_and_ends_survive(tmp_path: Path) -> None:
    values = [5, 9, 7, 1, 8, 2]
    counters = [
        {"ph": "C", "name": "mem", "pid": 1, "ts": 100 + k * 0.1, "args": {"used": v, "free": -v}} for k, v in enumerate(values)
    ]
    out = _reduce(tmp_path, {"traceEvents": [_span(0, 1000, "frame"), *counters]}, level=4)
    kept = [e["args"]["used"] for e in out["traceEvents"] if e.get("ph") == "C"]
    assert {5, 9, 1, 2} <= set(kept)


def test_the_first_instant_of_each_bucket_survives(tmp_path: Path) -> None:
    marks = [{"ph": "i", "s": "t", "name": f"m{k}", "pid": 1, "tid": 1, "ts": 300 + k * 0.1} for k in range(5)]
    glob = [{"ph": "i", "s": "g", "name": f"g{k}", "pid": 2, "tid": 3, "ts": 300.05 + k * 0.1} for k in range(5)]
    out = _reduce(tmp_path, {"traceEvents": [_span(0, 1000, "frame"), *marks, *glob]}, level=4)
    names = {e["name"] for e in out["traceEvents"] if e.get("ph") == "i"}
    assert {"m0", "g0"} <= names


def test_a_flow_between_kept_slices_is_kept_and_one_to_a_folded_slice_is_dropped(tmp_path: Path) -> None:
    launch, kernel, tiny = _span(100, 50, "launch"), _span(400, 60, "kernel", tid=2), _span(700, 0.01, "tiny", tid=3)
    kept_flow = [
        {"ph": "s", "id": 1, "cat": "ac2g", "name": "f", "pid": 1, "tid": 1, "ts": 100},
        {"ph": "f", "id": 1, "cat": "ac2g", "name": "f", "pid": 1, "tid": 2, "ts": 400, "bp": "e"},
    ]
    lost_flow = [
        {"ph": "s", "id": 2, "cat": "ac2g", "name": "f", "pid": 1, "tid": 1, "ts": 120},
        {"ph": "f", "id": 2, "cat": "ac2g", "name": "f", "pid": 1, "tid": 3, "ts": 700, "bp": "e"},
    ]
    doc = {"traceEvents": [_span(0, 1000, "frame", tid=9), launch, kernel, tiny, *kept_flow, *lost_flow]}
    out = _reduce(tmp_path, doc, level=4)
    assert all(f in out["traceEvents"] for f in kept_flow)
    assert not any(f in out["traceEvents"] for f in lost_flow)


def test_level_zero_writes_every_event_unchanged(tmp_path: Path) -> None:
    events = [_span(0, 10), {"ph": "B", "pid": 1, "tid": 1, "ts": 1.00000012345}, {}, {"ph": "E", "pid": "x", "ts": 3}]
    out = _reduce(tmp_path, events, level=0)
    assert out["traceEvents"] == events


def test_unpaired_begin_and_end_events_are_kept(tmp_path: Path) -> None:
    events = [
        _span(0, 1000, "frame", tid=2),
        {"ph": "E", "pid": 1, "tid": 1, "ts": 5},
        {"ph": "B", "name": "open", "pid": 1, "tid": 1, "ts": 10},
        {"ph": "B", "name": "pair", "pid": 1, "tid": 1, "ts": 20},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 20.001},
    ]
    out = _reduce(tmp_path, {"traceEvents": events}, level=4)
    assert events[1] in out["traceEvents"] and events[2] in out["traceEvents"]


def test_level_two_cuts_long_strings_and_lists_and_marks_the_cut(tmp_path: Path) -> None:
    ev = _span(0, 1000, "frame")
    ev["args"] = {"long": "y" * 300, "dims": list(range(40)), "ok": "short"}
    out = _reduce(tmp_path, {"traceEvents": [ev]}, level=2)
    (kept,) = [e for e in out["traceEvents"] if e.get("name") == "frame"]
    assert kept["args"]["long"] == "y" * 256 + "…"
    assert kept["args"]["dims"] == list(range(32))
    assert kept["args"]["tb_reduce.cut"] is True


def test_level_three_drops_args_but_keeps_what_pairs_events(tmp_path: Path) -> None:
    ev = _span(0, 1000, "frame")
    ev["args"] = {"External id": 4, "bind_id": 9, "flow_out": True}
    out = _reduce(tmp_path, {"traceEvents": [ev]}, level=3)
    (kept,) = [e for e in out["traceEvents"] if e.get("name") == "frame"]
    assert kept["args"] == {"bind_id": 9, "flow_out": True}


def test_a_truncated_array_file_is_read_up_to_its_last_complete_event(tmp_path: Path) -> None:
    path = tmp_path / "live.json"
    path.write_text('[{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2},\n{"ph": "X", "na')
    doc = load_trace(path)
    assert doc == [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]
    for level in range(5):
        check_reduction(doc, json.loads(reduce_to_bytes(path, level=level)), level)


def test_a_file_that_is_not_a_trace_raises_a_one_line_trace_error(tmp_path: Path) -> None:
    for name, data in [("a.json", b'{"rocprofiler-sdk-tool": []}'), ("b.json", b"\x00garbage\n{")]:
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(TraceError) as err:
            reduce_to_bytes(path, level=2)
        assert "\n" not in str(err.value)


# ------------------------------------------------- the checker catches breakage


def _hand_case() -> tuple[dict, dict]:
    """A small input and its correct level-4 output, both written by hand from SEMANTICS.

    Window [0, 1000] (the big slice), θ = 1 µs. Kept: M, the big slice, k, g, the
    flow that binds to kept slices at both ends, counter min/max/first/last, the
    first instant of its bucket, the ts-less `{}`. Folded: a, a, b (one summary), c
    (inside k), t (track 1/3).
    """
    ev = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "proc"}},
        {"ph": "X", "name": "big", "pid": 1, "tid": 1, "ts": 0, "dur": 1000, "args": {"External id": 7, "bind_id": 3}},
        {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 100, "dur": 0.2},
        {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 100.3, "dur": 0.2},
        {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 100.6, "dur": 0.1},
        {"ph": "X", "name": "k", "pid": 1, "tid": 1, "ts": 300, "dur": 5},
        {"ph": "X", "name": "c", "pid": 1, "tid": 1, "ts": 301, "dur": 0.5},
        {"ph": "s", "id": 1, "cat": "fl", "name": "f", "pid": 1, "tid": 1, "ts": 300.5},
        {"ph": "f", "id": 1, "cat": "fl", "name": "f", "pid": 1, "tid": 2, "ts": 500, "bp": "e"},
        {"ph": "X", "name": "g", "pid": 1, "tid": 2, "ts": 499, "dur": 3},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 10, "args": {"v": 5}},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 10.2, "args": {"v": 9}},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 10.5, "args": {"v": 7}},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 900, "args": {"v": 1}},
        {"ph": "i", "s": "t", "name": "mark", "pid": 1, "tid": 1, "ts": 200.1},
        {"ph": "i", "s": "t", "name": "mark", "pid": 1, "tid": 1, "ts": 200.5},
        {"ph": "s", "id": 2, "cat": "fl", "name": "f", "pid": 1, "tid": 3, "ts": 50.05},
        {"ph": "X", "name": "t", "pid": 1, "tid": 3, "ts": 50, "dur": 0.1},
        {"ph": "f", "id": 2, "cat": "fl", "name": "f", "pid": 1, "tid": 2, "ts": 500.5, "bp": "e"},
        {},
    ]
    doc = {"schemaVersion": 1, "traceEvents": ev, "displayTimeUnit": "ms"}
    big = dict(ev[1], args={"bind_id": 3})
    kept = [ev[0], big, ev[5], ev[7], ev[8], ev[9], ev[10], ev[11], ev[13], ev[14], ev[19]]

    def summary(tid: int, folded: list[dict], top: list) -> dict:
        lo = min(e["ts"] for e in folded)
        hi = max(e["ts"] + e["dur"] for e in folded)
        name = f"{top[0][0]} (+{len(folded) - 1} more)"
        args = {"count": len(folded), "top": top}
        return {"ph": "X", "cat": SUMMARY_CAT, "name": name, "pid": 1, "tid": tid, "ts": lo, "dur": hi - lo, "args": args}

    summaries = [
        summary(1, ev[2:5], [["a", 2], ["b", 1]]),
        summary(1, [ev[6]], [["c", 1]]),
        summary(3, [ev[17]], [["t", 1]]),
    ]
    out_events = kept + summaries
    tb = {
        "version": 1,
        "level": 4,
        "resolution": RESOLUTION[4],
        "bucket_us": 1.0,
        "window_us": [0, 1000],
        "input": {"format": "chrome-json", "events": len(ev), "bytes": 0},
        "output": {"events": len(out_events), "summaries": len(summaries)},
    }
    out = {"traceEvents": out_events, "schemaVersion": 1, "displayTimeUnit": "ms", "tb_reduce": tb}
    return doc, out


def test_the_checker_accepts_a_correct_hand_written_reduction() -> None:
    doc, out = _hand_case()
    check_reduction(doc, out, 4)


def _drop(out: dict, pred: Callable[[dict], bool]) -> None:
    events = out["traceEvents"]
    (k,) = [j for j, e in enumerate(events) if pred(e)]
    del events[k]
    out["tb_reduce"]["output"]["events"] = len(events)


def _move_summary_across_kept_boundary(out: dict) -> None:
    (s,) = [e for e in out["traceEvents"] if e.get("cat") == SUMMARY_CAT and e["args"]["top"][0][0] == "c"]
    s["ts"], s["dur"] = 304.6, 0.8  # now straddles the end (305) of kept slice k


def _fold_counter_max(out: dict) -> None:
    _drop(out, lambda e: e.get("ph") == "C" and e["args"]["v"] == 9)


def _change_top_level_key(out: dict) -> None:
    out["displayTimeUnit"] = "ns"


def _miscount_summary(out: dict) -> None:
    _summary = [e for e in out["traceEvents"] if e.get("cat") == SUMMARY_CAT][0]
    _summary["args"]["count"] += 1


def _keep_a_small_slice_whole(out: dict) -> None:
    events = out["traceEvents"]
    events.insert(3, {"ph": "X", "name": "c", "pid": 1, "tid": 1, "ts": 301, "dur": 0.5})
    out["tb_reduce"]["output"]["events"] = len(events)


BREAKAGES: dict[str, tuple[Callable[[dict], None], str]] = {
    "drop a big slice": (lambda o: _drop(o, lambda e: e.get("name") == "big"), "G1"),
    "move a summary across a kept boundary": (_move_summary_across_kept_boundary, "G3"),
    "drop a flow partner": (lambda o: _drop(o, lambda e: e.get("ph") == "f"), "G7"),
    "drop an M event": (lambda o: _drop(o, lambda e: e.get("ph") == "M"), "G6"),
    "drop a counter maximum": (_fold_counter_max, "G4"),
    "drop the first instant": (lambda o: _drop(o, lambda e: e.get("ph") == "i"), "G5"),
    "change a top-level key": (_change_top_level_key, "G6"),
    "miscount a summary": (_miscount_summary, "G3"),
    "keep a folded slice as well": (_keep_a_small_slice_whole, "kept as itself"),
    "drop a summary": (lambda o: _drop(o, lambda e: e.get("cat") == SUMMARY_CAT and e["args"]["top"][0][0] == "t"), "G3"),
}


@pytest.mark.parametrize("source", ["hand-written", "tool"])
@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_the_checker_rejects_a_broken_reduction(breakage: str, source: str, tmp_path: Path) -> None:
    """Each breakage of a correct output is caught, whether the output is ours or the tool's."""
    doc, out = _hand_case()
    if source == "tool":
        out = _reduce(tmp_path, doc, level=4)
    mutate, guarantee = BREAKAGES[breakage]
    out["tb_reduce"]["output"]["summaries"] = sum(1 for e in out["traceEvents"] if e.get("cat") == SUMMARY_CAT)
    mutate(out)
    out["tb_reduce"]["output"]["summaries"] = sum(1 for e in out["traceEvents"] if e.get("cat") == SUMMARY_CAT)
    with pytest.raises(AssertionError, match=guarantee):
        check_reduction(doc, out, 4)


def test_the_checker_rejects_a_lossy_level_zero_output() -> None:
    doc, _ = _hand_case()
    events = doc["traceEvents"]
    tb = {
        "level": 0,
        "resolution": None,
        "window_us": [0, 1000],
        "input": {"events": len(events)},
        "output": {"events": len(events) - 1, "summaries": 0},
    }
    out = {"traceEvents": events[:-1], "schemaVersion": 1, "displayTimeUnit": "ms", "tb_reduce": tb}
    with pytest.raises(AssertionError, match="G9"):
        check_reduction(doc, out, 0)
    out["traceEvents"] = list(events)
    tb["output"]["events"] = len(events)
    check_reduction(doc, out, 0)


def test_the_checker_reads_truncated_array_files(tmp_path: Path) -> None:
    one = {"ph": "X", "ts": 1, "dur": 1, "args": {"s": "a,]}"}}
    for tail in ["]", ",", ",\n", ", {", ',\n{"ph": "X", "args": {"a": [1, ']:
        path = tmp_path / "t.json"
        path.write_text("[" + json.dumps(one) + tail)
        assert load_trace(path) == [one]
        path.write_bytes(gzip.compress(path.read_bytes()))
        assert load_trace(path) == [one]


def test_a_trace_whose_whole_span_is_under_a_picosecond_is_shown_as_one_instant(tmp_path: Path) -> None:
    """Found by the random traces above: two flow events 4e-15 µs apart made a default window
    no reduction may take (a window is 1 ps wide at least), and the trace was refused."""
    doc = {"traceEvents": [{"ts": 0.0, "ph": "s", "cat": "ac2g", "name": "flow", "id2": {"local": "0x0"}},
                           {"ts": 4e-15, "ph": "f", "cat": "ac2g", "name": "flow", "id2": {"local": "0x0"}},
                           {"ts": 2e-15, "ph": "i", "name": "tick", "pid": 1, "tid": 1, "s": "t"}]}
    for level in (0, 2):
        out = _reduce(tmp_path, doc, level)  # the reference checker agrees
        assert [e["name"] for e in out["traceEvents"] if e.get("ph") == "i"] == ["tick"]
