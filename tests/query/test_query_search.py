"""Search over the whole trace (`query/search.py`), through the plugin behind TensorBoard's own
WSGI app and as a function: what a reduced view folded away is still found, with the times
the file holds, and no query can make matching run away."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ROOT
from plugin_support import body_json, client, get, make_plugin
from werkzeug.test import Client

from tb_reduce_plugin.errors import BadQuery
from tb_reduce_plugin.query import search as search_module
from tb_reduce_plugin.query.search import compile_query, search
from tb_reduce_plugin.reduce.pipeline import index_file

pytestmark = pytest.mark.usefixtures("no_background_work")  # their traced peaks: no other thread's work in them

STALLED = ROOT / "demo_logdir" / "stalled_step" / "torch_stalled_step.pt.trace.json.gz"
RUN, HOST = "stalled_step", "torch_stalled_step"
STALLED_STEP = "ProfilerStep#5"  # the step that slept (tests/fixtures/make_step_traces.py)
FOLDED = "Optimizer.zero_grad#SGD.zero_grad"  # runs once per step, well under a level-4 bucket


def file_events(path: Path = STALLED) -> list[dict]:
    """The trace's events as the json module reads them: the independent record of what the file holds."""
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


@pytest.fixture
def c(tmp_path: Path) -> Client:
    logdir = tmp_path / "logdir"
    (logdir / RUN).mkdir(parents=True)
    shutil.copyfile(STALLED, logdir / RUN / STALLED.name)
    return client(make_plugin(logdir, tmp_path / "cache"))


def ok(c: Client, route: str, **params: Any) -> Any:
    r = get(c, route, gz=True, **params)
    assert r.status_code == 200, r.get_data()[:300]
    return body_json(r)


def the_folded_event() -> tuple[int, dict, dict]:
    """(input index, event, its step) of the one `FOLDED` event inside the stalled step, read from the file."""
    events = file_events()
    step = next(e for e in events if e.get("name") == STALLED_STEP and e.get("ph") == "X")
    inside = [(i, e) for i, e in enumerate(events) if e.get("name") == FOLDED and e.get("ph") == "X"
              and step["ts"] <= e["ts"] <= step["ts"] + step["dur"]]
    assert len(inside) == 1, inside
    return inside[0][0], inside[0][1], step


def test_search_finds_an_event_the_level_4_view_folded_with_the_times_the_file_holds(c: Client) -> None:
    i, event, step = the_folded_event()
    view = ok(c, "trace", run=RUN, host=HOST, level=4)
    own = [e for e in view["traceEvents"] if e.get("name") == FOLDED and e.get("ts") == event["ts"]]
    assert own == [], "the event is drawn as itself at level 4: pick one the view folds"
    end = event["ts"] + event["dur"]
    folding = [e for e in view["traceEvents"] if e.get("cat") == "tb_reduce.summary" and e["tid"] == event["tid"]
               and e["ts"] <= event["ts"] and end <= e["ts"] + e["dur"] and FOLDED in dict(e["args"]["top"])]
    assert len(folding) == 1  # folded into a summary that names it

    found = ok(c, "search", run=RUN, host=HOST, q=FOLDED)
    hit = next(h for h in found["hits"] if h["i"] == i)
    assert (hit["name"], hit["ph"], hit["ts"], hit["dur"]) == (FOLDED, "X", event["ts"], event["dur"])
    assert (hit["pid"], hit["tid"]) == (event["pid"], event["tid"])
    assert json.loads(get(c, "event", run=RUN, host=HOST, i=i).get_data())["ts"] == event["ts"]  # `i` opens it

    in_step = ok(c, "search", run=RUN, host=HOST, q=FOLDED, start_us=step["ts"], end_us=step["ts"] + step["dur"])
    assert in_step["total"] == 1 and in_step["hits"][0]["i"] == i
    assert in_step["window"] == [step["ts"], step["ts"] + step["dur"]]


def test_hits_are_every_matching_slice_and_instant_in_time_order_and_pages_join_up(c: Client) -> None:
    events = file_events()
    expected = sorted(((e["ts"], i) for i, e in enumerate(events)
                       if e.get("ph") in ("X", "i", "I", "R") and isinstance(e.get("ts"), (int, float))
                       and "aten::" in str(e.get("name"))))
    whole = ok(c, "search", run=RUN, host=HOST, q="aten::", limit=10_000)
    assert whole["total"] == len(expected) == len(whole["hits"])
    assert [(h["ts"], h["i"]) for h in whole["hits"]] == expected
    assert whole["names"] == len({events[i]["name"] for _, i in expected})
    pages = [ok(c, "search", run=RUN, host=HOST, q="aten::", limit=100, offset=o)
             for o in range(0, len(expected) + 100, 100)]
    assert [h for p in pages for h in p["hits"]] == whole["hits"]
    assert {p["total"] for p in pages} == {len(expected)} and pages[-1]["hits"] == []


def test_a_regular_expression_matches_anywhere_in_a_name_unless_anchored(c: Client) -> None:
    events = file_events()
    for pattern in (r"^aten::(conv2d|relu)$", r"Backward\d", r"zero_grad$"):
        expected = sum(1 for e in events if e.get("ph") == "X" and re.search(pattern, str(e.get("name"))))
        found = ok(c, "search", run=RUN, host=HOST, q=pattern, re=1)
        assert found["regex"] is True and found["total"] == expected > 0
    assert ok(c, "search", run=RUN, host=HOST, q=r"^aten::(conv2d|relu)$")["total"] == 0  # not a regex without re=1


def test_icase_finds_the_same_events_in_any_case_and_plain_search_is_case_sensitive(c: Client) -> None:
    plain = ok(c, "search", run=RUN, host=HOST, q=FOLDED)
    shouted = FOLDED.upper()
    assert ok(c, "search", run=RUN, host=HOST, q=shouted)["total"] == 0
    loud = ok(c, "search", run=RUN, host=HOST, q=shouted, icase=1)
    assert loud["icase"] is True and loud["hits"] == plain["hits"] and plain["total"] == 8
    assert ok(c, "search", run=RUN, host=HOST, q="optimizer\\.ZERO", re=1, icase=1)["total"] == 8


def test_instants_are_searched_and_have_no_duration(c: Client) -> None:
    events = file_events()
    instants = [(i, e) for i, e in enumerate(events) if e.get("ph") == "i"]
    assert instants
    i, e = instants[0]
    hits = ok(c, "search", run=RUN, host=HOST, q=e["name"])["hits"]
    hit = next(h for h in hits if h["i"] == i)
    assert (hit["ph"], hit["ts"], hit["dur"]) == ("i", e["ts"], None)


def test_counters_metadata_and_flows_are_not_searched() -> None:
    idx = index_file(STALLED)
    for name in ("process_name", "thread_name", "fwdbwd"):  # M events and the flow events' name
        assert search(idx.table, compile_query(name))["total"] == 0
    assert any(e.get("name") == "fwdbwd" and e.get("ph") in ("s", "f") for e in file_events())


def test_matched_b_e_pairs_are_found_by_their_b_with_the_pairs_duration(corpus: Path) -> None:
    path = corpus / "public" / "catapult" / "tracing__test_data__flow.json"
    events = json.loads(path.read_bytes())["traceEvents"]
    idx = index_file(path)
    name = "SyncChannel::SendWithTimeout"
    hits = search(idx.table, compile_query(name), limit=10_000)["hits"]
    assert hits and all(h["ph"] == "B" for h in hits)
    for h in hits:  # its E: the next E of the track closing it (per track, by time, file order on ties)
        b = events[h["i"]]
        assert (b["name"], b["ts"]) == (name, h["ts"])
        track = [(e["ts"], k, e["ph"]) for k, e in enumerate(events)
                 if e.get("ph") in ("B", "E") and (e["pid"], e["tid"]) == (b["pid"], b["tid"])]
        depth, end = 0, None
        for ts, k, ph in sorted(track):
            if k == h["i"]:
                depth = 1
            elif depth:
                depth += 1 if ph == "B" else -1
                if depth == 0:
                    end = ts
                    break
        assert end is not None and h["dur"] == end - b["ts"]


@pytest.mark.parametrize("q, regex, why", [
    ("", False, "empty"),
    ("x" * 1001, False, "1,001 characters"),
    ("a\x00b", False, "control character"),
    ("a\x7fb", True, "control character"),
    ("a\u0085b", False, "control character"),
    (r"(a)\1", True, "RE2"),
    (r"(?=a)b", True, "RE2"),
    ("(unclosed", True, "RE2"),
])
def test_a_query_that_cannot_be_answered_is_refused_with_the_reason(q: str, regex: bool, why: str) -> None:
    with pytest.raises(BadQuery, match=re.escape(why)):
        compile_query(q, regex=regex)


def test_a_pattern_that_backtracks_exponentially_elsewhere_answers_over_names_of_long_runs(tmp_path: Path) -> None:
    events = file_events()
    ts = events[-1].get("ts", 0)
    events += [{"ph": "X", "name": "a" * n + tail, "pid": 1, "tid": 1, "ts": ts, "dur": 1}
               for n in (30, 1000, 100_000) for tail in ("", "!")]
    path = tmp_path / "runs_of_a.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t = index_file(path).table
    found = search(t, compile_query("(a+)+$", regex=True), limit=10_000)
    # `(a+)+$` finds the names that end in "a" (said without the pattern: Python's own
    # engine would take exponential time on the runs followed by "!")
    expected = sorted(i for i, e in enumerate(events) if e.get("ph") in ("X", "i") and str(e["name"]).endswith("a"))
    assert found["complete"] and sorted(h["i"] for h in found["hits"]) == expected
    assert {len(h["name"]) for h in found["hits"]} >= {30, 1000, 100_000}


def test_matching_stops_at_its_time_limit_and_says_the_answer_is_incomplete(monkeypatch: pytest.MonkeyPatch) -> None:
    t = index_file(STALLED).table
    monkeypatch.setattr(search_module, "_CHUNK", 10)
    query = compile_query("aten", icase=True)
    complete = search(t, query)
    assert complete["complete"] and complete["names_scanned"] == complete["names_total"] == len(t.names)
    monkeypatch.setattr(search_module, "MATCH_SECONDS", 0.0)
    cut = search(t, query)
    assert not cut["complete"] and cut["names_scanned"] == 10 < cut["names_total"]
    assert cut["total"] <= complete["total"]


def test_what_a_search_charges_the_memory_budget_counts_the_state_it_prepares_the_first_time() -> None:
    t = index_file(STALLED).table
    cold = search_module.working_bytes(t)  # slices and time order still to build
    search(t, compile_query("no such name"))
    warm = search_module.working_bytes(t)
    assert cold > warm == (search_module.WARM_BYTES_PER_EVENT * len(t) + search_module.HIT_BYTES * search_module.MAX_LIMIT
                           + search_module.CHUNK_BYTES_PER_ROW * min(len(t), search_module.CHUNK_ROWS)) > 0


def _slices_and_instants(tmp_path: Path, n: int) -> Path:
    events = []
    for i in range(n):
        if i % 4 == 3:
            events.append({"ph": "i", "name": f"mark{i % 7}", "pid": 1, "tid": i % 3, "ts": float(n - i), "s": "t"})
        else:
            events.append({"ph": "X", "name": f"op{i % 50}", "pid": 1, "tid": i % 3, "ts": float((i * 7919) % n),
                           "dur": 3.0})
    path = tmp_path / "si.json.gz"
    with gzip.open(path, "wt", compresslevel=1) as f:
        json.dump({"traceEvents": events}, f)
    return path


@pytest.mark.parametrize("chunk", [4096, None])
@pytest.mark.parametrize("scratch", [False, True])
def test_a_searchs_traced_peak_first_and_warm_stays_within_what_working_bytes_charges(tmp_path, monkeypatch,
                                                                                       chunk, scratch) -> None:
    """The first search (making the slices and the time order), then warm ones matching
    nothing, a few names and every name, over the whole trace and a window: each peak
    within the charge, the time order mapped from the scratch folder when there is one."""
    import tracemalloc

    from tb_reduce_plugin.model import slices as slices_module
    from tb_reduce_plugin.reduce import shared

    if chunk is not None:
        for module, name in ((search_module, "CHUNK_ROWS"), (shared, "CHUNK_EVENTS"),
                             (shared, "CHUNK_SLICES"), (slices_module, "CHUNK_EVENTS")):
            monkeypatch.setattr(module, name, chunk)
    t = index_file(_slices_and_instants(tmp_path, 200_000)).table
    if scratch:
        (tmp_path / "scratch").mkdir()
        t.scratch = str(tmp_path / "scratch")
    for q, window in (("op1", None), ("nothing at all", None), ("op", None), ("", (1000.0, 90_000.0))):
        charged = search_module.working_bytes(t)
        tracemalloc.start()
        try:
            out = search(t, compile_query(q) if q else compile_query("."), *(window or (None, None)),
                         limit=search_module.MAX_LIMIT)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak <= charged, (q, peak, charged)
        assert out["total"] >= 0
    if scratch:
        assert isinstance(t.prepared.searchable.event, np.memmap)


def test_a_search_read_in_chunks_of_rows_pages_and_counts_as_one_pass(tmp_path, monkeypatch) -> None:
    """Pages across chunk edges, windows, distinct names: the same answer at chunks of 7
    and 1000 rows as in one chunk."""
    t = index_file(_slices_and_instants(tmp_path, 5_000)).table
    asks = [("op1", None, 50, 0), ("op", None, 100, 333), ("mark", (100.0, 4000.0), 7, 5), ("op4", None, 1000, 0),
            ("op", (0.0, 10.0), 10, 0), ("op", None, 10, 4990)]
    whole = [search(t, compile_query(q), *(w or (None, None)), limit, offset) for q, w, limit, offset in asks]
    for chunk in (7, 1000):
        monkeypatch.setattr(search_module, "CHUNK_ROWS", chunk)
        got = [search(t, compile_query(q), *(w or (None, None)), limit, offset) for q, w, limit, offset in asks]
        assert got == whole, chunk
