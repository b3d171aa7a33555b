"""The `search` and `aggregate` routes of a real TensorBoard process (started on a free port),
on real PyTorch traces: the answers' fields as the dashboard reads them, paging, bad
parameters refused with one-line JSON errors, and a hostile pattern that leaves the
server answering."""

from __future__ import annotations

import gzip
import json
import shutil
from typing import Any, Iterator

import pytest
from conftest import ROOT
from tensorboard_process import TensorBoard, start_tensorboard

STALLED = ROOT / "demo_logdir" / "stalled_step" / "torch_stalled_step.pt.trace.json.gz"
RUN, HOST = "stalled_step", "torch_stalled_step"
HOSTILE_RUN, HOSTILE_HOST = "runs_of_a", "runs_of_a"
ROUTE = "data/plugin/tb_reduce/"
HIT_FIELDS = {"i", "name", "ph", "ts", "dur", "pid", "tid", "process", "thread"}
SEARCH_FIELDS = {"run", "host", "q", "regex", "icase", "window", "total", "names", "offset", "limit", "complete",
                 "names_scanned", "names_total", "hits"}
ROW_FIELDS = {"name", "count", "wall_us", "self_us", "avg_us", "max_us", "max_i", "max_ts", "clipped"}
AGGREGATE_FIELDS = {"run", "host", "window", "pid", "tid", "slices", "tracks", "names", "clipped", "limit", "rows",
                    "other"}


@pytest.fixture(scope="module")
def tb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TensorBoard]:
    root = tmp_path_factory.mktemp("query_routes")
    logdir = root / "logdir"
    (logdir / RUN).mkdir(parents=True)
    shutil.copyfile(STALLED, logdir / RUN / STALLED.name)
    # The same real trace with names made of long runs of "a", the input on which `(a+)+$`
    # takes exponential time in a backtracking engine.
    doc = json.loads(gzip.decompress(STALLED.read_bytes()))
    ts = doc["traceEvents"][-1].get("ts", 0)
    doc["traceEvents"] += [{"ph": "X", "name": "a" * n + "!", "pid": 1, "tid": 1, "ts": ts, "dur": 1}
                           for n in (64, 4096, 300_000)]
    (logdir / HOSTILE_RUN).mkdir()
    (logdir / HOSTILE_RUN / f"{HOSTILE_HOST}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode(), mtime=0))
    server = start_tensorboard(logdir, root / "cache", "--load_fast=false")
    try:
        yield server
    finally:
        server.stop()


def answer(tb: TensorBoard, route: str, **params: Any) -> Any:
    return tb.json(ROUTE + route, **params)


def error(tb: TensorBoard, route: str, status: int, **params: Any) -> str:
    code, headers, body = tb.get(ROUTE + route, **params)
    assert code == status, (route, params, code, body[:300])
    assert headers.get("content-type", "").startswith("application/json")
    doc = json.loads(body)
    assert set(doc) == {"error"} and doc["error"] and "\n" not in doc["error"] and "Traceback" not in doc["error"]
    return doc["error"]


def test_search_answers_with_the_fields_the_dashboard_reads(tb: TensorBoard) -> None:
    doc = answer(tb, "search", run=RUN, host=HOST, q="ProfilerStep#")
    assert set(doc) == SEARCH_FIELDS
    assert (doc["run"], doc["host"], doc["q"], doc["regex"], doc["icase"]) == (RUN, HOST, "ProfilerStep#", False, False)
    assert (doc["total"], doc["names"], doc["offset"], doc["limit"], doc["window"]) == (8, 8, 0, 1000, None)
    assert doc["complete"] is True
    assert all(set(h) == HIT_FIELDS for h in doc["hits"])
    assert [h["name"] for h in doc["hits"]] == [f"ProfilerStep#{k}" for k in range(8)]
    first = doc["hits"][0]
    assert first["ph"] == "X" and first["dur"] > 0 and first["process"] == "python"
    assert json.loads(tb.get(ROUTE + "event", run=RUN, host=HOST, i=first["i"])[2])["name"] == "ProfilerStep#0"


def test_search_pages_regex_and_icase_over_http(tb: TensorBoard) -> None:
    every = answer(tb, "search", run=RUN, host=HOST, q="aten::", limit=10_000)
    pages = [answer(tb, "search", run=RUN, host=HOST, q="aten::", limit=500, offset=o)
             for o in range(0, every["total"], 500)]
    assert [h for p in pages for h in p["hits"]] == every["hits"] and every["total"] > 500
    steps = answer(tb, "search", run=RUN, host=HOST, q=r"^profilerstep#[0-3]$", re=1, icase=1)
    assert (steps["regex"], steps["icase"], steps["total"]) == (True, True, 4)
    step5 = answer(tb, "search", run=RUN, host=HOST, q="ProfilerStep#5")["hits"][0]
    inside = answer(tb, "search", run=RUN, host=HOST, q="aten::", start_us=step5["ts"],
                    end_us=step5["ts"] + step5["dur"], limit=10_000)
    assert 0 < inside["total"] < every["total"] and inside["window"] == [step5["ts"], step5["ts"] + step5["dur"]]
    assert all(h["ts"] <= step5["ts"] + step5["dur"] for h in inside["hits"])


def test_aggregate_answers_with_the_fields_the_dashboard_reads(tb: TensorBoard) -> None:
    doc = answer(tb, "aggregate", run=RUN, host=HOST)
    assert set(doc) == AGGREGATE_FIELDS
    assert (doc["run"], doc["host"], doc["window"], doc["pid"], doc["tid"], doc["limit"]) == (RUN, HOST, None, None,
                                                                                              None, 500)
    assert all(set(r) == ROW_FIELDS for r in doc["rows"]) and doc["names"] == len(doc["rows"])
    assert set(doc["other"]) == {"names", "count", "wall_us", "self_us", "max_us", "clipped"}
    step5 = next(r for r in doc["rows"] if r["name"] == "ProfilerStep#5")
    # the stalled step's own time: it slept, with nothing under it, for 150 ms of its ~260
    assert step5["count"] == 1 and 140_000 < step5["self_us"] < step5["wall_us"]
    pid = str(answer(tb, "search", run=RUN, host=HOST, q="ProfilerStep#5")["hits"][0]["pid"])
    window = dict(start_us=step5["max_ts"], end_us=step5["max_ts"] + step5["wall_us"] / 2)
    half = answer(tb, "aggregate", run=RUN, host=HOST, pid=pid, tid=pid, limit=3, **window)
    assert half["tracks"] == 1 and len(half["rows"]) == 3 and half["other"]["names"] == half["names"] - 3
    assert half["clipped"] >= 1 and half["window"] == [window["start_us"], window["end_us"]]


@pytest.mark.parametrize("route, params, status", [
    ("search", dict(run=RUN, host=HOST), 400),  # no q
    ("search", dict(run=RUN, host=HOST, q=""), 400),
    ("search", dict(run=RUN, host=HOST, q="x" * 1001), 400),
    ("search", dict(run=RUN, host=HOST, q="x" * 5000), 400),
    ("search", dict(run=RUN, host=HOST, q="a\x00b"), 400),
    ("search", dict(run=RUN, host=HOST, q="a\x1bb"), 400),
    ("search", dict(run=RUN, host=HOST, q=r"(a)\1", re=1), 400),
    ("search", dict(run=RUN, host=HOST, q="([", re=1), 400),
    ("search", dict(run=RUN, host=HOST, q="a", re=2), 400),
    ("search", dict(run=RUN, host=HOST, q="a", icase="yes"), 400),
    ("search", dict(run=RUN, host=HOST, q="a", limit=0), 400),
    ("search", dict(run=RUN, host=HOST, q="a", limit=10_001), 400),
    ("search", dict(run=RUN, host=HOST, q="a", limit="ten"), 400),
    ("search", dict(run=RUN, host=HOST, q="a", offset=-1), 400),
    ("search", dict(run=RUN, host=HOST, q="a", start_us=1), 400),
    ("search", dict(run=RUN, host=HOST, q="a", start_us=2, end_us=1), 400),
    ("search", dict(run=RUN, host=HOST, q="a", start_us="nan", end_us=1), 400),
    ("search", dict(run="../" + RUN, host=HOST, q="a"), 404),
    ("search", dict(run="no such run", host=HOST, q="a"), 404),
    ("search", dict(run=RUN, host="no such host", q="a"), 404),
    ("aggregate", dict(run=RUN), 400),  # no host
    ("aggregate", dict(run=RUN, host=HOST, tid="1"), 400),
    ("aggregate", dict(run=RUN, host=HOST, limit=0), 400),
    ("aggregate", dict(run=RUN, host=HOST, limit=10_001), 400),
    ("aggregate", dict(run=RUN, host=HOST, end_us=5), 400),
    ("aggregate", dict(run=RUN, host=HOST, pid="1\x00"), 400),
    ("aggregate", dict(run="../" + RUN, host=HOST), 404),
    ("aggregate", dict(run="no such run", host=HOST), 404),
])
def test_bad_parameters_get_a_one_line_json_error(tb: TensorBoard, route: str, params: dict, status: int) -> None:
    error(tb, route, status, **params)


def test_a_pattern_that_backtracks_exponentially_elsewhere_answers_and_the_server_stays_up(tb: TensorBoard) -> None:
    code, _, body = tb.get(ROUTE + "search", run=HOSTILE_RUN, host=HOSTILE_HOST, q="(a+)+$", re=1, timeout=60)
    assert code in (200, 400), body[:300]
    if code == 200:
        doc = json.loads(body)
        assert doc["complete"] and all(h["name"].endswith("a") for h in doc["hits"])
    for q in ("(a|aa)+$", "(a*)*b", "(?:a+)+!$"):
        assert tb.get(ROUTE + "search", run=HOSTILE_RUN, host=HOSTILE_HOST, q=q, re=1, timeout=60)[0] in (200, 400)
    found = answer(tb, "search", run=HOSTILE_RUN, host=HOSTILE_HOST, q="^a+!$", re=1)
    assert sorted(len(h["name"]) for h in found["hits"]) == [65, 4097, 300_001]
    assert tb.alive()
    assert {r["run"] for r in tb.json(ROUTE + "runs")} >= {RUN, HOSTILE_RUN}
