"""The Profile tab's answers without HTTP: which requests are tb-reduce's, what it sends
back in XProf's form, and how XProf's plugin gets fronted whatever the load order."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import write_trace
from plugin_support import JAX_HOST, JAX_RUN, TORCH_HOST, TORCH_RUN, make_logdir

from tb_reduce_plugin.profile_tab import asks, xprof_json
from tb_reduce_plugin.profile_tab.answers import ProfileTabAnswers
from tb_reduce_plugin.profile_tab.hook import ProfileTabHook
from tb_reduce_plugin.serve.service import NotFound, TraceService


def _doc(answer: Any) -> dict:
    return json.loads(gzip.decompress(answer.body.read()))


def _ask(**params: Any) -> asks.Ask:
    got = asks.read({k: str(v) for k, v in params.items()})
    assert isinstance(got, asks.Ask), got
    return got


@pytest.fixture
def answers(tmp_path: Path) -> ProfileTabAnswers:
    service = TraceService(str(make_logdir(tmp_path)), cache_dir=str(tmp_path / "cache"))
    service.catalog.max_age_s = 0
    return ProfileTabAnswers(service)


# ---- asks -------------------------------------------------------------------------
def test_the_three_forms_of_a_trace_viewer_request_are_read_as_xprof_sends_them() -> None:
    view = _ask(run="r", tag="trace_viewer@", host="h", hosts="h", resolution=3240, replace_model="true",
                new_backend="false", start_time_ms=1.5, end_time_ms=9)
    assert (view.kind, view.resolution, view.start_ms, view.end_ms) == ("view", 3240, 1.5, 9.0)
    event = _ask(run="r", tag="trace_viewer@", host="h", event_name="op", start_time_ms=2, duration_ms=1,
                 unique_id="tbr-42", replace_model="false")
    assert (event.kind, event.uid, event.event_name) == ("event", 42, "op")
    search = _ask(run="r", tag="trace_viewer", host="h", resolution=0, search_prefix="dot")
    assert (search.kind, search.prefix, search.resolution) == ("search", "dot", 0)
    assert _ask(run="r", tag="trace_viewer@", host="h").resolution == asks.DEFAULT_RESOLUTION


@pytest.mark.parametrize("params", [
    dict(tag="overview_page"),
    dict(format="pb"),
    dict(hosts="a,b"),
    dict(unique_id="0", event_name="op"),  # XProf's own id: a click on an event XProf sent
    dict(trace_filter_config='{"x":1}'),
    dict(selected_group_ids="1,2"),
    dict(session_path="/somewhere"),
    dict(perfetto="true"),
    dict(some_new_option="1"),
    dict(host=""),
])
def test_requests_tb_reduce_cannot_answer_exactly_are_left_to_xprof(params: dict) -> None:
    got = asks.read(dict(dict(run="r", tag="trace_viewer@", host="h"), **params))
    assert isinstance(got, asks.Declined) and got.reason


@pytest.mark.parametrize("params", [
    dict(resolution="-1"), dict(resolution="2.5"), dict(resolution="nan"), dict(start_time_ms="3"),
    dict(start_time_ms="5", end_time_ms="5"), dict(unique_id="tbr--3", event_name="x"), dict(unique_id="tbr-" + "1" * 13),
    dict(run="r\x00"), dict(search_prefix="x" * (asks.MAX_SEARCH_CHARS + 1)),
])
def test_bad_values_of_parameters_tb_reduce_takes_are_refused(params: dict) -> None:
    with pytest.raises(asks.BadAsk):
        asks.read(dict(dict(run="r", tag="trace_viewer@", host="h"), **params))


# ---- answers ------------------------------------------------------------------------
def test_the_pytorch_run_is_a_trace_viewer_run_and_the_jax_run_stays_xprofs(answers: ProfileTabAnswers) -> None:
    assert list(answers.chrome_runs()) == [TORCH_RUN]
    assert answers.hosts(TORCH_RUN) == [{"hostname": TORCH_HOST}]
    assert answers.file_for(JAX_RUN, JAX_HOST).path.endswith("vm.xplane.pb")  # the XSpace, not JAX's JSON
    assert answers.file_for(JAX_RUN, "elsewhere") is None
    assert answers.file_for("no-such-run", "h") is None


def test_search_finds_events_the_view_folded_into_summaries(answers: ProfileTabAnswers) -> None:
    tf = answers.file_for(TORCH_RUN, TORCH_HOST)
    view = _doc(answers.answer(tf, _ask(run=TORCH_RUN, tag="trace_viewer@", host=TORCH_HOST, resolution=50)))
    drawn = {e["name"] for e in view["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "tb_reduce.summary"}
    summaries = [e for e in view["traceEvents"] if e.get("cat") == "tb_reduce.summary"]
    folded = sum(e["args"]["count"] for e in summaries)
    assert folded > 0
    # On a row of their own under their thread, named after it: zooms never stack real slices under them.
    rows = {(e["pid"], e["tid"]): e["args"]["name"] for e in view["traceEvents"] if e.get("name") == "thread_name"}
    assert all(e["tid"].endswith(xprof_json.FOLDED) and rows[e["pid"], e["tid"]].endswith(xprof_json.FOLDED)
               for e in summaries)
    found = _doc(answers.answer(tf, _ask(run=TORCH_RUN, tag="trace_viewer@", host=TORCH_HOST,
                                         search_prefix="aten::")))
    hits = [e for e in found["traceEvents"] if e.get("ph") == "X"]
    assert hits and all(e["name"].startswith("aten::") for e in hits)
    assert {e["name"] for e in hits} - drawn  # names only the search brings: they were folded
    assert all(set(e["args"]) == {"uid"} and e["args"]["uid"] == f"tbr-{e['z']}" for e in hits)
    pids = {e["pid"] for e in found["traceEvents"] if e.get("ph") == "M" and e["name"] == "process_name"}
    assert {e["pid"] for e in hits} <= pids
    nothing = _doc(answers.answer(tf, _ask(run=TORCH_RUN, tag="trace_viewer@", host=TORCH_HOST,
                                           search_prefix="no such event name")))
    assert nothing["returnedEventsSize"] == 0


def test_a_begin_end_pair_is_detailed_as_one_complete_event_with_its_args(tmp_path: Path) -> None:
    logdir = tmp_path / "logdir" / "run"
    logdir.mkdir(parents=True)
    write_trace(logdir / "h.trace.json", {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "trainer"}},
        {"ph": "B", "name": "step", "pid": 1, "tid": 2, "ts": 1000.5, "args": {"step": 7, "note": "slow"}},
        {"ph": "X", "name": "inner", "pid": 1, "tid": 2, "ts": 1001, "dur": 3, "args": {"k": 1}},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 1010.5},
    ]})
    service = TraceService(str(tmp_path / "logdir"), cache_dir=str(tmp_path / "cache"))
    answers = ProfileTabAnswers(service)
    tf = answers.file_for("run", "h")
    view = _doc(answers.answer(tf, _ask(run="run", tag="trace_viewer@", host="h", resolution=8000)))
    begin = next(e for e in view["traceEvents"] if e.get("ph") == "B")
    end = next(e for e in view["traceEvents"] if e.get("ph") == "E")
    assert begin["args"] == {"uid": "tbr-1"} and "uid" not in end.get("args", {})  # the slice's uid is its B's
    assert view["fullTimespan"] == [1.0005, 1.0105]
    detail = _doc(answers.answer(tf, _ask(run="run", tag="trace_viewer@", host="h", event_name="step",
                                          unique_id=begin["args"]["uid"])))
    last = detail["traceEvents"][-1]
    assert (last["ph"], last["ts"], last["dur"], last["args"]) == ("X", 1000.5, 10.0, {"step": 7, "note": "slow"})
    assert detail["traceEvents"][0]["args"]["name"] == "h trainer"
    with pytest.raises(NotFound):  # a uid naming another event: the view is stale
        answers.answer(tf, _ask(run="run", tag="trace_viewer@", host="h", event_name="step", unique_id="tbr-2"))
    with pytest.raises(NotFound):
        answers.answer(tf, _ask(run="run", tag="trace_viewer@", host="h", event_name="step", unique_id="tbr-99"))


def test_a_view_asked_again_is_read_from_the_disk_cache(answers: ProfileTabAnswers) -> None:
    tf = answers.file_for(JAX_RUN, JAX_HOST)
    ask = _ask(run=JAX_RUN, tag="trace_viewer@", host=JAX_HOST, resolution=4000)
    first = answers.answer(tf, ask)
    again = answers.answer(tf, ask)
    assert (first.info["cached"], again.info["cached"]) == (False, True)
    assert _doc(first) == _doc(again)


def test_kineto_epoch_times_are_shifted_to_whole_microseconds_and_back() -> None:
    clock = xprof_json.clock_for("chrome-json", 5120909437315.761)
    assert clock.origin_us == 5120909437315.0
    assert clock.out(5120909440688.65) == 3373.65
    assert clock.to_input_us(3.37365) == pytest.approx(5120909440688.65, abs=1e-3)
    assert xprof_json.clock_for("xspace", 12.596).out(12.596) == 12.596


# ---- the hook -------------------------------------------------------------------------
class _FakeXProf:
    """Stands in for XProf's plugin instance: routes and an activity check."""

    plugin_name = "profile"

    def get_plugin_apps(self) -> dict:
        return {"/data": "xprof-data", "/runs": "xprof-runs", "/config": "xprof-config"}

    def is_active(self) -> bool:
        return False


@pytest.mark.parametrize("xprof_first", [True, False])
def test_xprofs_routes_are_fronted_whichever_plugin_loads_first(xprof_first: bool) -> None:
    plugins: dict = {}
    hook = ProfileTabHook("on", {"/data": lambda app: ("front", app), "/runs": lambda app: ("front", app)},
                          lambda: True)
    xprof = _FakeXProf()
    if xprof_first:
        plugins["profile"] = xprof
        hook.watch(plugins)  # tb-reduce's load() finds XProf's plugin
    else:
        hook.watch(plugins)  # tb-reduce loads first: nothing to front yet
        assert not hook.installed
        plugins["profile"] = xprof
        hook.install()  # what tb-reduce's get_plugin_apps does, before TensorBoard asks XProf
    apps = xprof.get_plugin_apps()
    assert apps == {"/data": ("front", "xprof-data"), "/runs": ("front", "xprof-runs"), "/config": "xprof-config"}
    assert xprof.is_active() is True and hook.status()["active"] is True
    assert _FakeXProf().get_plugin_apps()["/data"] == "xprof-data"  # the class is untouched
    hook.install()
    assert xprof.get_plugin_apps()["/data"] == ("front", "xprof-data")  # fronted once, not twice


def test_the_hook_stays_out_when_off_or_without_xprof(monkeypatch: pytest.MonkeyPatch) -> None:
    plugins = {"profile": _FakeXProf()}
    off = ProfileTabHook("off", {"/data": lambda app: ("front", app)}, lambda: True)
    off.watch(plugins)
    assert plugins["profile"].get_plugin_apps()["/data"] == "xprof-data" and off.status()["active"] is False
    monkeypatch.setattr("tb_reduce_plugin.profile_tab.hook.xprof_version", lambda: None)
    auto = ProfileTabHook("auto", {"/data": lambda app: ("front", app)}, lambda: True)
    auto.watch(plugins)
    assert not auto.installed and "not installed" in auto.status()["status"]
