"""The Profile tab (XProf 2.24.2) answered by tb-reduce, against real TensorBoard processes.

Each server is a real `tensorboard` with the real `tensorboard-plugin-profile` loaded
beside tb-reduce, in both load orders and with `--load_fast` true and false
(`tensorboard_with_order.py`); XProf alone is the baseline its answers are compared
with. The logdir holds a JAX XSpace run (XProf's own layout) and a PyTorch run that
XProf cannot open; each server gets its own copy, since XProf writes caches into it.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest
from plugin_support import JAX_HOST, JAX_RUN, TORCH_HOST, TORCH_RUN, add_torch_run, make_logdir
from tensorboard_process import TensorBoard, start_tensorboard

pytest.importorskip("xprof", reason="tensorboard-plugin-profile is a test dependency (setup.py extras 'test')")

PROFILE = "data/plugin/profile/"
XPROF_KEYS = ["displayTimeUnit", "metadata", "codeLink", "useNewBackend", "details", "returnedEventsSize",
              "filteredByVisibility", "fullTimespan", "stackFrames", "traceEvents", "showCounterMessage",
              "totalCounterEvents"]
VIEWER = {"replace_model": "true", "new_backend": "false"}  # what the Profile tab's viewer adds to each view


def _server(tmp: Path, order: str, *flags: str) -> TensorBoard:
    logdir = make_logdir(tmp)  # a JAX XSpace run in XProf's layout and a PyTorch run
    return start_tensorboard(logdir, None if order == "xprof-only" else tmp / "cache", *flags, order=order)


def _body(headers: dict, data: bytes) -> Any:
    if headers.get("content-encoding") == "gzip":
        data = gzip.decompress(data)
    return json.loads(data)


def _get(tb: TensorBoard, route: str, **params: Any) -> tuple[int, dict, Any]:
    status, headers, data = tb.get(PROFILE + route, gz=True, **params)
    try:
        doc = _body(headers, data)
    except ValueError:
        doc = data
    return status, headers, doc


@pytest.fixture(scope="module", params=[("xprof-first", "true"), ("xprof-first", "false"),
                                        ("tb_reduce-first", "true"), ("tb_reduce-first", "false")],
                ids=lambda p: f"{p[0]}-load_fast={p[1]}")
def both(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TensorBoard]:
    order, load_fast = request.param
    tb = _server(tmp_path_factory.mktemp(f"{order}-{load_fast}"), order, f"--load_fast={load_fast}")
    try:
        yield tb
    finally:
        tb.stop()


@pytest.fixture(scope="module")
def xprof_alone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TensorBoard]:
    tb = _server(tmp_path_factory.mktemp("xprof-only"), "xprof-only")
    try:
        yield tb
    finally:
        tb.stop()


def test_the_profile_tab_lists_the_pytorch_run_beside_xprofs_own(both: TensorBoard) -> None:
    status, headers, runs = _get(both, "runs")
    assert status == 200 and headers.get("x-served-by", "").startswith("tb-reduce/")
    assert runs == sorted(runs, reverse=True) and set(runs) == {JAX_RUN, TORCH_RUN}
    status, headers, tools = _get(both, "run_tools", run=TORCH_RUN)
    assert (status, tools) == (200, ["trace_viewer@"]) and headers["x-served-by"].startswith("tb-reduce/")
    status, _, hosts = _get(both, "hosts", run=TORCH_RUN, tag="trace_viewer@")
    assert (status, hosts) == (200, [{"hostname": TORCH_HOST}])
    listing = json.loads(both.get("data/plugins_listing")[2])
    assert listing["profile"]["enabled"] and listing["tb_reduce"]["enabled"]


def test_xprofs_own_run_keeps_xprofs_tools_and_hosts(both: TensorBoard) -> None:
    status, headers, tools = _get(both, "run_tools", run=JAX_RUN)
    assert status == 200 and "x-served-by" not in headers
    assert "trace_viewer@" in tools and "overview_page" in tools
    status, headers, hosts = _get(both, "hosts", run=JAX_RUN, tag="trace_viewer@")
    assert (status, hosts) == (200, [{"hostname": JAX_HOST}]) and "x-served-by" not in headers


def _check_view(doc: dict, host: str) -> list[dict]:
    assert list(doc)[:len(XPROF_KEYS)] == XPROF_KEYS
    assert doc["filteredByVisibility"] is True and doc["returnedEventsSize"] > 0
    events = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    drawn = [e for e in events if e.get("ph") != "M"]
    assert {e["pid"] for e in drawn} <= set(names) and all(n.startswith(host + " ") for n in names.values())
    assert all("ts" not in e for e in events if e.get("ph") == "M")
    for e in drawn:
        assert "z" in e
        if e.get("cat") != "tb_reduce.summary" and e["ph"] == "X":
            assert set(e["args"]) == {"uid"}, e  # args come on click, as XProf sends them
    return drawn


def test_the_trace_viewer_of_an_xspace_comes_from_tb_reduce_in_xprofs_form(both: TensorBoard,
                                                                          xprof_alone: TensorBoard) -> None:
    params = dict(run=JAX_RUN, tag="trace_viewer@", host=JAX_HOST, hosts=JAX_HOST, resolution=8000, **VIEWER)
    status, headers, ours = _get(both, "data", **params)
    assert status == 200 and headers["x-served-by"].startswith("tb-reduce/"), (status, headers)
    assert headers["content-type"].startswith("application/json")
    drawn = _check_view(ours, JAX_HOST)
    status, headers, theirs = _get(xprof_alone, "data", **params)
    assert status == 200 and "x-served-by" not in headers
    assert list(ours)[:len(XPROF_KEYS)] == list(theirs)
    # The same event form: every key tb-reduce writes on a slice is one XProf writes too
    # (besides `cat`, which XProf writes on some), and the clock is XProf's.
    their_keys = set().union(*(set(e) for e in theirs["traceEvents"] if e.get("ph") == "X"))
    assert set().union(*(set(e) for e in drawn if e["ph"] == "X")) <= their_keys | {"cat"}
    assert ours["fullTimespan"][0] == pytest.approx(theirs["fullTimespan"][0], abs=1e-3)
    assert ours["fullTimespan"][1] == pytest.approx(theirs["fullTimespan"][1], rel=1e-3)
    theirs_by_key = {(e["name"], round(e["ts"], 3)) for e in theirs["traceEvents"] if e.get("ph") == "X"}
    kept = [e for e in drawn if e["ph"] == "X" and e.get("cat") != "tb_reduce.summary"]
    assert sum((e["name"], round(e["ts"], 3)) in theirs_by_key for e in kept) >= 0.9 * len(kept)


def test_a_pytorch_run_opens_with_details_on_click_and_search(both: TensorBoard) -> None:
    base = dict(run=TORCH_RUN, tag="trace_viewer@", host=TORCH_HOST, hosts=TORCH_HOST)
    status, headers, view = _get(both, "data", resolution=2000, **base, **VIEWER)
    assert status == 200 and headers["x-served-by"].startswith("tb-reduce/")
    drawn = _check_view(view, TORCH_HOST)
    step = next(e for e in drawn if e["name"].startswith("ProfilerStep#"))
    status, headers, detail = _get(both, "data", **base, replace_model="false", event_name=step["name"],
                                   start_time_ms=step["ts"] / 1000, duration_ms=step["dur"] / 1000,
                                   unique_id=step["args"]["uid"])
    assert status == 200 and headers["x-served-by"].startswith("tb-reduce/")
    last = detail["traceEvents"][-1]
    assert (last["ph"], last["name"], last["ts"], last["dur"]) == ("X", step["name"], step["ts"], step["dur"])
    assert "uid" not in last["args"] and last["args"]  # the event's own args, all of them
    status, _, found = _get(both, "data", **base, resolution=0, replace_model="false", search_prefix="aten::")
    hits = [e for e in found["traceEvents"] if e.get("ph") != "M"]
    assert status == 200 and hits and all(e["name"].startswith("aten::") for e in hits if e["ph"] == "X")
    assert found["returnedEventsSize"] == len(hits)
    # A zoomed window is asked in the viewer's clock (ms): what comes back lies in it.
    lo, hi = step["ts"] / 1000, (step["ts"] + step["dur"]) / 1000
    status, _, zoomed = _get(both, "data", resolution=2000, start_time_ms=lo, end_time_ms=hi, **base, **VIEWER)
    inside = [e for e in zoomed["traceEvents"] if e.get("ph") == "X"]
    assert status == 200 and inside
    assert all(e["ts"] <= hi * 1000 + 1e-3 and e["ts"] + e.get("dur", 0) >= lo * 1000 - 1e-3 for e in inside)
    assert len(inside) > sum(1 for e in drawn if e["ph"] == "X" and lo * 1000 <= e["ts"] <= hi * 1000)


def test_other_xprof_tools_still_answer_from_xprof(both: TensorBoard) -> None:
    status, headers, doc = _get(both, "data", run=JAX_RUN, tag="overview_page", host=JAX_HOST)
    assert status == 200 and "x-served-by" not in headers and doc
    status, headers, _ = _get(both, "data", run=JAX_RUN, tag="framework_op_stats", host=JAX_HOST)
    assert status == 200 and "x-served-by" not in headers


def test_a_click_on_an_event_xprof_sent_is_answered_by_xprof(both: TensorBoard, xprof_alone: TensorBoard) -> None:
    """A view tb-reduce leaves to XProf (several hosts, a filter) carries XProf's own event
    ids: the details request for one of them must reach XProf, not be read as tb-reduce's."""
    view = _get(xprof_alone, "data", run=JAX_RUN, tag="trace_viewer@", host=JAX_HOST, resolution=8000)[2]
    event = next(e for e in view["traceEvents"] if e.get("ph") == "X" and "group_id" in e["args"])
    params = dict(run=JAX_RUN, tag="trace_viewer@", host=JAX_HOST, hosts=JAX_HOST, replace_model="false",
                  event_name=event["name"], start_time_ms=event["ts"] / 1000, duration_ms=event["dur"] / 1000,
                  unique_id=event["args"]["uid"])
    status, headers, detail = _get(both, "data", **params)
    assert status == 200 and "x-served-by" not in headers
    assert detail["traceEvents"][-1]["name"] == event["name"]


def test_the_trace_reduce_tab_says_it_serves_the_profile_tab(both: TensorBoard) -> None:
    status, _, data = both.get("data/plugin/tb_reduce/info")
    info = json.loads(data)
    assert status == 200 and info["profile_tab"]["active"] is True and info["profile_tab"]["xprof"] == "2.24.2"


@pytest.mark.parametrize("params, status", [
    (dict(resolution=-5), 400),
    (dict(resolution="1e999"), 400),
    (dict(unique_id="tbr-abc", event_name="x"), 400),
    (dict(unique_id="tbr-99999999", event_name="x"), 404),
    (dict(unique_id="3", event_name="x"), 400),  # XProf's kind of id: not an event tb-reduce sent
    (dict(start_time_ms=5), 400),
    (dict(format="pb"), 400),
    (dict(tag="overview_page"), 400),
    (dict(host="nobody"), 404),
    (dict(host="../../etc/passwd"), 404),
    (dict(search_prefix="x" * 5000), 400),
])
def test_bad_trace_viewer_requests_for_a_pytorch_run_get_a_clear_error(both: TensorBoard, params: dict,
                                                                        status: int) -> None:
    query = dict(dict(run=TORCH_RUN, tag="trace_viewer@", host=TORCH_HOST), **params)
    got, headers, data = both.get(PROFILE + "data", **query)
    assert got == status, (got, data[:300])
    error = json.loads(gzip.decompress(data) if headers.get("content-encoding") == "gzip" else data)["error"]
    assert error and "Traceback" not in error and headers["x-served-by"].startswith("tb-reduce/")
    assert both.alive()


def _same_flows(data: bytes) -> bytes:
    """XProf numbers flows at random in each process (two XProf-alone servers differ there
    and only there): number them in order of appearance, leaving every other byte as sent."""
    ids: dict[bytes, bytes] = {}
    return re.sub(rb'"bind_id":(\d+)', lambda m: b'"bind_id":' + ids.setdefault(m.group(1), str(len(ids)).encode()),
                  data)


def test_with_the_flag_off_xprof_answers_byte_for_byte_as_alone(xprof_alone: TensorBoard,
                                                               tmp_path: Path) -> None:
    off = _server(tmp_path, "tb_reduce-first", "--tb_reduce_profile_tab=off")
    try:
        asks = [("runs", {}), ("run_tools", dict(run=JAX_RUN)), ("hosts", dict(run=JAX_RUN, tag="trace_viewer@")),
                ("data", dict(run=JAX_RUN, tag="trace_viewer@", host=JAX_HOST, resolution=8000)),
                ("data", dict(run=JAX_RUN, tag="overview_page", host=JAX_HOST)),
                ("run_tools", dict(run=TORCH_RUN))]
        for route, params in asks:
            a_status, a_headers, a_data = xprof_alone.get(PROFILE + route, gz=True, **params)
            b_status, b_headers, b_data = off.get(PROFILE + route, gz=True, **params)
            assert "x-served-by" not in b_headers
            assert (b_status, b_headers.get("content-type")) == (a_status, a_headers.get("content-type")), route
            # gzip headers carry a time; what they hold is the answer
            unzip = [_same_flows(gzip.decompress(d) if h.get("content-encoding") == "gzip" else d)
                     for h, d in ((a_headers, a_data), (b_headers, b_data))]
            assert unzip[0] == unzip[1], (route, params)
        info = json.loads(off.get("data/plugin/tb_reduce/info")[2])["profile_tab"]
        assert (info["mode"], info["active"]) == ("off", False)
    finally:
        off.stop()


def test_a_logdir_with_only_pytorch_traces_shows_the_profile_tab(tmp_path: Path) -> None:
    logdir = tmp_path / "logdir"
    add_torch_run(logdir)
    tb = start_tensorboard(logdir, tmp_path / "cache", order="xprof-first")
    try:
        listing = json.loads(tb.get("data/plugins_listing")[2])
        assert listing["profile"]["enabled"]
        status, _, runs = _get(tb, "runs")
        assert (status, runs) == (200, [TORCH_RUN])
    finally:
        tb.stop()
    shutil.rmtree(logdir, ignore_errors=True)
