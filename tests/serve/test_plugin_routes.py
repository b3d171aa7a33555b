"""The plugin's routes through TensorBoard's own WSGI app, on a logdir of real traces:
what each route returns, its errors, and that the caches do their work."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
from plugin_support import (
    CORRUPT_XPLANE,
    JAX_HOST,
    JAX_JSON_HOST,
    JAX_RUN,
    JAX_SMALL,
    JAX_TS,
    TORCH_FILE,
    TORCH_HOST,
    TORCH_RUN,
    assert_json_error,
    body_json,
    client,
    get,
    make_logdir,
    make_plugin,
    torch_trace_gz,
)
from werkzeug.test import Client

from tb_reduce_plugin.serve import service as service_module
from tb_reduce_plugin.serve.plugin import DEFAULT_LEVEL, TraceReducePlugin

RESOLUTION = {1: 100_000, 2: 20_000, 3: 5_000, 4: 1_000}  # SPEC §3
HOSTS = [(JAX_RUN, JAX_HOST), (JAX_RUN, JAX_JSON_HOST), (TORCH_RUN, TORCH_HOST)]
FILES = {JAX_HOST: "vm.xplane.pb", JAX_JSON_HOST: "vm.trace.json.gz", TORCH_HOST: TORCH_FILE}


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    return make_logdir(tmp_path)


@pytest.fixture
def plugin(logdir: Path, tmp_path: Path) -> TraceReducePlugin:
    return make_plugin(logdir, tmp_path / "cache")


@pytest.fixture
def c(plugin: TraceReducePlugin) -> Client:
    return client(plugin)


class Counter:
    """Counts calls of a function of the service module, and still calls it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        self.calls = 0
        real: Callable[..., Any] = getattr(service_module, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(service_module, name, counted)


def trace_doc(c: Client, run: str, host: str, **params: Any) -> dict:
    r = get(c, "trace", gz=True, run=run, host=host, **params)
    assert r.status_code == 200, r.get_data()[:300]
    return body_json(r)


def source_events(path: Path) -> list:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)["traceEvents"]


# ---- listing ------------------------------------------------------------------------


def test_the_plugins_listing_shows_the_trace_reduce_tab_loaded_in_an_iframe(c: Client) -> None:
    r = c.get("/data/plugins_listing")
    assert r.status_code == 200
    entry = json.loads(r.get_data())["tb_reduce"]
    assert entry["tab_name"] == "Trace Reduce" and entry["enabled"] is True and entry["disable_reload"] is True
    assert entry["loading_mechanism"] == {"type": "IFRAME", "module_path": "/data/plugin/tb_reduce/index.js"}


def test_a_logdir_without_traces_lists_the_tab_as_disabled(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    c = client(make_plugin(tmp_path / "empty", tmp_path / "cache"))
    assert json.loads(c.get("/data/plugins_listing").get_data())["tb_reduce"]["enabled"] is False
    assert body_json(get(c, "runs")) == []


def test_runs_lists_every_run_and_host_with_its_format_and_size(c: Client, logdir: Path) -> None:
    r = get(c, "runs")
    assert r.status_code == 200 and r.mimetype == "application/json"
    jax = logdir / "jax" / "plugins" / "profile" / JAX_TS
    runs = body_json(r)
    # JAX's export beside its XSpace, listed after it: the corpus's is whole (under JAX's cap), so not `capped`
    export = runs[0]["hosts"][1].pop("export")
    assert export["of"] == JAX_HOST and export["cap"] == 1_000_000 and 0 < export["events"] < export["cap"]
    assert "whole" in export["note"]
    assert runs == [
        {"run": JAX_RUN, "hosts": [
            {"host": JAX_HOST, "format": "xspace", "bytes": (jax / "vm.xplane.pb").stat().st_size},
            {"host": JAX_JSON_HOST, "format": "chrome-json", "bytes": (jax / "vm.trace.json.gz").stat().st_size},
        ]},
        {"run": TORCH_RUN, "hosts": [
            {"host": TORCH_HOST, "format": "chrome-json", "bytes": (logdir / TORCH_RUN / TORCH_FILE).stat().st_size},
        ]},
    ]


def test_a_profile_written_while_tensorboard_runs_appears_in_runs(c: Client, logdir: Path) -> None:
    shutil.copyfile(JAX_SMALL / "vm.xplane.pb", logdir / TORCH_RUN / "later.xplane.pb")
    hosts = {h["host"] for r in body_json(get(c, "runs")) if r["run"] == TORCH_RUN for h in r["hosts"]}
    assert hosts == {TORCH_HOST, "later"}
    assert trace_doc(c, TORCH_RUN, "later", level=4)["tb_reduce"]["input"]["format"] == "xspace"


# ---- trace ---------------------------------------------------------------------------


@pytest.mark.parametrize("run, host", HOSTS)
def test_a_trace_is_sent_gzip_encoded_and_decodes_to_a_reduced_trace(c: Client, run: str, host: str) -> None:
    r = get(c, "trace", gz=True, run=run, host=host, level=2)
    assert r.status_code == 200 and r.mimetype == "application/json"
    assert r.headers["Content-Encoding"] == "gzip" and r.headers["X-Tb-Reduce-Level"] == "2"
    assert int(r.headers["Content-Length"]) == len(r.get_data())
    doc = json.loads(gzip.decompress(r.get_data()))
    meta = doc["tb_reduce"]
    assert meta["level"] == 2 and meta["resolution"] == RESOLUTION[2] and meta["version"] == 1
    events = doc["traceEvents"]
    summaries = [e for e in events if e.get("cat") == "tb_reduce.summary"]
    assert meta["output"] == {"events": len(events), "summaries": len(summaries)}
    assert 0 < meta["output"]["events"] < meta["input"]["events"]
    index = meta["input_index"]
    assert len(index) == len(events) - len(summaries) and len(set(index)) == len(index)
    assert all(0 <= i < meta["input"]["events"] for i in index)
    assert all(e.get("cat") != "tb_reduce.summary" for e in events[: len(index)])  # summaries follow


def test_without_accept_encoding_tensorboard_sends_the_trace_decompressed(c: Client) -> None:
    zipped = get(c, "trace", gz=True, run=TORCH_RUN, host=TORCH_HOST, level=3)
    plain = get(c, "trace", run=TORCH_RUN, host=TORCH_HOST, level=3)
    assert plain.status_code == 200 and "Content-Encoding" not in plain.headers
    data = plain.get_data()
    assert data == gzip.decompress(zipped.get_data()) and int(plain.headers["Content-Length"]) == len(data)
    assert json.loads(data)["tb_reduce"]["level"] == 3


def test_an_etag_that_matches_gives_304_without_a_body(c: Client) -> None:
    params = dict(run=TORCH_RUN, host=TORCH_HOST, level=2)
    etag = get(c, "trace", gz=True, **params).headers["ETag"]
    assert etag.startswith('"') and etag.endswith('"') and len(etag) > 10
    again = get(c, "trace", gz=True, headers={"If-None-Match": etag}, **params)
    assert again.status_code == 304 and again.get_data() == b"" and again.headers["ETag"] == etag
    stale = get(c, "trace", gz=True, headers={"If-None-Match": '"0123456789abcdef"'}, **params)
    assert stale.status_code == 200 and stale.headers["ETag"] == etag
    other_level = get(c, "trace", gz=True, headers={"If-None-Match": etag}, run=TORCH_RUN, host=TORCH_HOST, level=3)
    assert other_level.status_code == 200 and other_level.headers["ETag"] != etag


def test_download_sends_the_json_gz_file_as_an_attachment(c: Client) -> None:
    r = get(c, "trace", run=JAX_RUN, host=JAX_HOST, level=3, download=1)
    assert r.status_code == 200 and r.mimetype == "application/gzip"
    assert r.headers["Content-Disposition"] == 'attachment; filename="vm.level3.json.gz"'
    assert "Content-Encoding" not in r.headers  # a file, not a transfer encoding: the browser keeps it zipped
    doc = json.loads(gzip.decompress(r.get_data()))
    assert doc["tb_reduce"]["level"] == 3 and doc["tb_reduce"]["input"]["format"] == "xspace"
    view = get(c, "trace", gz=True, run=JAX_RUN, host=JAX_HOST, level=3)
    assert r.get_data() == view.get_data() and r.headers["ETag"] != view.headers["ETag"]


def test_a_windowed_download_says_its_window_from_the_trace_start_in_its_file_name(c: Client) -> None:
    whole = body_json(get(c, "stats", run=JAX_RUN, host=JAX_HOST, level=2))
    first, last = whole["trace_us"]
    assert whole["window_us"] == [first, last]
    lo, hi = first + 125_000.0, first + 250_500.0
    r = get(c, "trace", run=JAX_RUN, host=JAX_HOST, level=2, start_us=repr(lo), end_us=repr(hi), download=1)
    assert r.headers["Content-Disposition"] == 'attachment; filename="vm.level2.0.125s-0.2505s.json.gz"'
    doc = json.loads(gzip.decompress(r.get_data()))
    assert doc["tb_reduce"]["window_us"] == [lo, hi] and doc["tb_reduce"]["trace_us"] == [first, last]


def test_the_same_request_gives_byte_identical_traces(c: Client, logdir: Path, tmp_path: Path) -> None:
    first = get(c, "trace", gz=True, run=JAX_RUN, host=JAX_HOST, level=2).get_data()
    fresh = client(make_plugin(logdir, tmp_path / "other-cache"))  # computed again, not from the cache
    assert get(fresh, "trace", gz=True, run=JAX_RUN, host=JAX_HOST, level=2).get_data() == first


# ---- stats and levels ------------------------------------------------------------------


@pytest.mark.parametrize("run, host", HOSTS)
def test_stats_for_every_level_reduce_more_as_the_level_rises(c: Client, run: str, host: str) -> None:
    stats = {}
    for level in range(5):
        r = get(c, "stats", run=run, host=host, level=level)
        assert r.status_code == 200
        s = stats[level] = body_json(r)
        assert s["level"] == level and s["resolution"] == RESOLUTION.get(level) and "input_index" not in s
        assert s["output"]["json_bytes"] > 0 and s["timings_s"]["request"] >= 0 and s["cached"] is False
        assert s["input"]["file"] == FILES[host]
    assert stats[0]["output"]["events"] == stats[0]["input"]["events"] and stats[0]["output"]["summaries"] == 0
    counts = [stats[level]["output"]["events"] for level in range(5)]
    assert counts == sorted(counts, reverse=True) and counts[4] < counts[0]
    auto = body_json(get(c, "stats", run=run, host=host, level="auto"))
    assert "auto" in auto and auto["level"] in range(5)
    assert auto["output"]["events"] == stats[auto["level"]]["output"]["events"]


def test_a_request_without_level_uses_the_default_level(c: Client) -> None:
    plain = body_json(get(c, "stats", run=TORCH_RUN, host=TORCH_HOST))
    explicit = body_json(get(c, "stats", run=TORCH_RUN, host=TORCH_HOST, level=DEFAULT_LEVEL))
    assert plain["level"] == explicit["level"] and plain["output"] == explicit["output"]


def test_a_window_gives_finer_detail_inside_it_than_the_whole_view(c: Client, logdir: Path) -> None:
    whole = trace_doc(c, TORCH_RUN, TORCH_HOST, level=4)
    t0, t1 = whole["tb_reduce"]["window_us"]
    lo, hi = t0 + 0.1 * (t1 - t0), t0 + 0.2 * (t1 - t0)
    part = trace_doc(c, TORCH_RUN, TORCH_HOST, level=4, start_us=repr(lo), end_us=repr(hi))
    assert part["tb_reduce"]["window_us"] == [lo, hi]
    theta = part["tb_reduce"]["bucket_us"]
    assert theta == pytest.approx((hi - lo) / RESOLUTION[4]) and theta < whole["tb_reduce"]["bucket_us"] / 5

    def slices(events: list) -> set[tuple[str, float]]:
        """The real (not summary) slices overlapping the window, by name and start."""
        return {(e["name"], round(e["ts"], 3)) for e in events if e.get("ph") == "X" and e.get("cat") != "tb_reduce.summary"
                and e["ts"] <= hi and e["ts"] + e.get("dur", 0) >= lo}

    in_part, in_whole = slices(part["traceEvents"]), slices(whole["traceEvents"])
    assert len(in_part) > len(in_whole) and in_whole <= in_part
    source = source_events(logdir / TORCH_RUN / TORCH_FILE)
    long_enough = slices([e for e in source if e.get("dur", 0) >= theta])  # G1 at the window's resolution
    assert long_enough <= in_part and long_enough - in_whole  # detail the whole view folded comes back
    assert all(lo <= e["ts"] + e.get("dur", 0) and e["ts"] <= hi for e in part["traceEvents"] if e.get("ph") == "X")


# ---- event -----------------------------------------------------------------------------


@pytest.mark.parametrize("run, host, file", [(TORCH_RUN, TORCH_HOST, f"{TORCH_RUN}/{TORCH_FILE}"),
                                             (JAX_RUN, JAX_JSON_HOST, f"jax/plugins/profile/{JAX_TS}/vm.trace.json.gz")])
def test_clicking_an_event_of_a_chrome_trace_gives_the_input_event_itself(c: Client, logdir: Path, run: str, host: str,
                                                                          file: str) -> None:
    doc = trace_doc(c, run, host, level=3)
    source = source_events(logdir / file)
    index = doc["tb_reduce"]["input_index"]
    for pos in range(0, len(index), max(1, len(index) // 60)):
        k = index[pos]
        r = get(c, "event", run=run, host=host, i=k)
        assert r.status_code == 200 and r.mimetype == "application/json"
        event = body_json(r)
        assert event == source[k]
        assert event.get("name") == doc["traceEvents"][pos].get("name") and event.get("ph") == doc["traceEvents"][pos].get("ph")


def test_clicking_an_event_of_an_xspace_gives_it_with_all_its_args(c: Client) -> None:
    doc = trace_doc(c, JAX_RUN, JAX_HOST, level=3)
    index = doc["tb_reduce"]["input_index"]
    slices = [pos for pos, e in enumerate(doc["traceEvents"][: len(index)]) if e.get("ph") == "X"]
    assert slices
    for pos in slices[:: max(1, len(slices) // 40)]:
        shown = doc["traceEvents"][pos]
        event = body_json(get(c, "event", run=JAX_RUN, host=JAX_HOST, i=index[pos]))
        assert (event["name"], event["ph"], event["pid"], event["tid"]) == (shown["name"], "X", shown["pid"], shown["tid"])
        assert event["ts"] == pytest.approx(shown["ts"], abs=1e-3) and event["dur"] == pytest.approx(shown["dur"], abs=1e-3)
        assert set(shown.get("args", {})) <= set(event.get("args", {}))  # level 3 drops args; the click brings them back


def test_an_event_index_past_the_end_is_404_and_a_non_index_is_400(c: Client) -> None:
    events = body_json(get(c, "stats", run=TORCH_RUN, host=TORCH_HOST, level=0))["input"]["events"]
    assert get(c, "event", run=TORCH_RUN, host=TORCH_HOST, i=events - 1).status_code == 200
    assert f"{events:,}" in assert_json_error(get(c, "event", run=TORCH_RUN, host=TORCH_HOST, i=events), 404)
    for bad in ("-1", "1.0", "1e3", "0x10", "x", "²", "١٢", "9" * 13, " 1"):
        assert_json_error(get(c, "event", run=TORCH_RUN, host=TORCH_HOST, i=bad), 400)
    assert_json_error(get(c, "event", run=TORCH_RUN, host=TORCH_HOST), 400)
    assert_json_error(get(c, "event", run=TORCH_RUN, host="nope", i=0), 404)


# ---- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["trace", "stats", "view"])
@pytest.mark.parametrize("params, needle", [
    ({"level": "5"}, "level"),
    ({"level": "-1"}, "level"),
    ({"level": "two"}, "level"),
    ({"level": "2.5"}, "level"),
    ({"start_us": "abc", "end_us": "10"}, "start_us"),
    ({"start_us": "0", "end_us": "inf"}, "end_us"),
    ({"start_us": "nan", "end_us": "10"}, "start_us"),
    ({"start_us": "-1e400", "end_us": "10"}, "start_us"),
    ({"start_us": "10"}, "both"),
    ({"end_us": "10"}, "both"),
    ({"start_us": "10", "end_us": "10"}, "below"),
    ({"start_us": "20", "end_us": "10"}, "below"),
    ({"run": None}, "run"),
    ({"host": None}, "host"),
    ({"run": ""}, "run"),
])
def test_bad_parameters_are_400_with_a_json_error(c: Client, route: str, params: dict, needle: str) -> None:
    query = {"run": TORCH_RUN, "host": TORCH_HOST, **params}
    r = get(c, route, **{k: v for k, v in query.items() if v is not None})
    assert needle in assert_json_error(r, 400)


@pytest.mark.parametrize("route", ["trace", "stats", "event"])
def test_an_unknown_run_or_host_is_404(c: Client, route: str) -> None:
    assert "run 'nope'" in assert_json_error(get(c, route, run="nope", host=TORCH_HOST, i=0), 404)
    assert "host 'nope'" in assert_json_error(get(c, route, run=TORCH_RUN, host="nope", i=0), 404)
    assert_json_error(get(c, route, run=JAX_TS, host=JAX_HOST, i=0), 404)  # the run is `jax/<ts>`, not `<ts>`


def test_a_file_over_the_input_limit_is_413_and_is_never_read(logdir: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    built = Counter(monkeypatch, "index_file")
    plugin = make_plugin(logdir, tmp_path / "cache", "--tb_reduce_max_input_mb", "0.01")
    c = client(plugin)
    assert len(body_json(get(c, "runs"))) == 2  # still listed, with its size
    for route in ("trace", "stats", "event"):
        message = assert_json_error(get(c, route, run=TORCH_RUN, host=TORCH_HOST, level=2, i=0), 413)
        assert TORCH_FILE in message and "--tb_reduce_max_input_mb" in message
    assert built.calls == 0 and len(plugin.service.indexes) == 0
    assert os.listdir(tmp_path / "cache") == []


@pytest.mark.parametrize("name, content", [
    ("w0.pt.trace.json.gz", lambda: b"\x1f\x8b\x08\x00" + b"not deflate data at all" * 20),
    ("w1.pt.trace.json.gz", lambda: torch_trace_gz()[:5000]),  # a gzip cut short, as a crash leaves it
    ("tpu.xplane.pb", lambda: CORRUPT_XPLANE.read_bytes()),  # real, with mangled bytes
    ("cut.xplane.pb", lambda: (JAX_SMALL / "vm.xplane.pb").read_bytes()[:100_000]),
    ("empty.pt.trace.json", lambda: b""),
    ("binary.trace.json", lambda: bytes(range(256)) * 10),
])
def test_an_unreadable_file_is_422_with_the_reason_and_no_path(logdir: Path, tmp_path: Path, name: str,
                                                              content: Callable[[], bytes]) -> None:
    if name.startswith("tpu") and not CORRUPT_XPLANE.is_file():
        pytest.skip("the corpus's corrupt XSpace is absent")
    bad = logdir / "bad"
    bad.mkdir()
    (bad / name).write_bytes(content())
    c = client(make_plugin(logdir, tmp_path / "cache"))
    host = name.split(".")[0]
    for route in ("trace", "stats", "event"):
        message = assert_json_error(get(c, route, run="bad", host=host, level=2, i=0), 422)
        assert name in message and str(logdir) not in message and str(tmp_path) not in message
    assert get(c, "runs").status_code == 200  # the rest of the logdir is unharmed
    assert get(c, "stats", run=TORCH_RUN, host=TORCH_HOST, level=4).status_code == 200


def test_a_broken_file_that_is_fixed_is_read_again(logdir: Path, tmp_path: Path) -> None:
    path = logdir / TORCH_RUN / "w.pt.trace.json.gz"
    path.write_bytes(torch_trace_gz()[:3000])
    c = client(make_plugin(logdir, tmp_path / "cache"))
    assert_json_error(get(c, "stats", run=TORCH_RUN, host="w", level=2), 422)
    path.write_bytes(torch_trace_gz())  # the profiler finished writing it
    assert get(c, "stats", run=TORCH_RUN, host="w", level=2).status_code == 200


# ---- caches ----------------------------------------------------------------------------


def test_a_second_request_is_a_cache_hit_and_survives_a_restart(logdir: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    reduced = Counter(monkeypatch, "reduce_index")
    built = Counter(monkeypatch, "index_file")
    c = client(make_plugin(logdir, tmp_path / "cache"))
    params = dict(run=JAX_RUN, host=JAX_HOST, level=2)
    first = body_json(get(c, "stats", **params))
    second = body_json(get(c, "stats", **params))
    assert first["cached"] is False and second["cached"] is True
    assert {k: v for k, v in first.items() if k != "cached"} == {k: v for k, v in second.items() if k != "cached"}
    trace = get(c, "trace", gz=True, **params)  # stats and trace share one reduction
    assert json.loads(gzip.decompress(trace.get_data()))["tb_reduce"]["output"]["events"] == first["output"]["events"]
    restarted = client(make_plugin(logdir, tmp_path / "cache"))
    assert body_json(get(restarted, "stats", **params))["cached"] is True
    assert get(restarted, "trace", gz=True, **params).get_data() == trace.get_data()
    assert reduced.calls == 1 and built.calls == 1


def test_the_index_is_built_once_for_every_level_and_window(c: Client, plugin: TraceReducePlugin,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    reduced = Counter(monkeypatch, "reduce_index")
    built = Counter(monkeypatch, "index_file")
    t0, t1 = body_json(get(c, "stats", run=TORCH_RUN, host=TORCH_HOST, level=4))["window_us"]
    for level in (0, 1, 2, 3, "auto"):
        assert get(c, "stats", run=TORCH_RUN, host=TORCH_HOST, level=level).status_code == 200
    for k in range(3):
        lo, hi = t0 + k * (t1 - t0) / 4, t0 + (k + 1) * (t1 - t0) / 4
        assert get(c, "trace", gz=True, run=TORCH_RUN, host=TORCH_HOST, level=2, start_us=lo, end_us=hi).status_code == 200
    assert get(c, "event", run=TORCH_RUN, host=TORCH_HOST, i=7).status_code == 200
    assert built.calls == 1 and reduced.calls == 9 and len(plugin.service.indexes) == 1


def test_a_file_that_changes_is_reduced_again_not_served_from_the_cache(c: Client, plugin: TraceReducePlugin, logdir: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    built = Counter(monkeypatch, "index_file")
    params = dict(run=TORCH_RUN, host=TORCH_HOST, level=3)
    before = body_json(get(c, "stats", **params))
    path = logdir / TORCH_RUN / TORCH_FILE
    doc = json.loads(gzip.decompress(path.read_bytes()))
    doc["traceEvents"] = doc["traceEvents"][: len(doc["traceEvents"]) // 2]  # the profiler rewrote it
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    after = body_json(get(c, "stats", **params))
    assert after["cached"] is False and after["input"]["events"] < before["input"]["events"]
    assert built.calls == 2 and len(plugin.service.indexes) == 1  # the old version's index is dropped


# ---- dashboard files --------------------------------------------------------------------


def test_index_js_is_served_as_a_javascript_module(c: Client, plugin: TraceReducePlugin) -> None:
    r = get(c, "index.js")
    assert r.status_code == 200 and r.mimetype == "text/javascript"
    assert r.get_data() == (plugin.frontend / "index.js").read_bytes() and b"export" in r.get_data()


def test_view_is_an_html_page_with_a_content_security_policy(c: Client) -> None:
    r = get(c, "view", run=TORCH_RUN, host=TORCH_HOST, level=2, start_us=10, end_us=20)
    assert r.status_code == 200 and r.mimetype == "text/html"
    csp = r.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    page = r.get_data(as_text=True)
    assert "<html" in page.lower() and 'src="static/view.js"' in page


def test_the_view_page_of_an_unknown_run_is_the_page_itself_which_reports_it(c: Client, plugin: TraceReducePlugin) -> None:
    """The page checks the run list itself (and says "no traces" or "not found"): the server
    sends the same static page, with nothing from the query in it."""
    r = get(c, "view", run="gone", host="<b>x</b>", level=2)
    assert r.status_code == 200 and r.get_data() == (plugin.frontend / "view.html").read_bytes()


def test_static_files_of_the_dashboard_are_served(c: Client, plugin: TraceReducePlugin) -> None:
    r = get(c, "static/view.js")
    assert r.status_code == 200 and r.mimetype == "text/javascript"
    assert r.get_data() == (plugin.frontend / "view.js").read_bytes()
    assert_json_error(get(c, "static/missing.js"), 404)


def test_every_response_passes_tensorboards_security_validator(c: Client, caplog: pytest.LogCaptureFixture) -> None:
    """TensorBoard logs (and will refuse, in 3.0) responses without Content-Type or `nosniff`."""
    params = dict(run=TORCH_RUN, host=TORCH_HOST, level=2)
    etag = get(c, "trace", gz=True, **params).headers["ETag"]
    with caplog.at_level("WARNING", logger="tensorboard"):
        responses = [
            get(c, "trace", gz=True, **params), get(c, "trace", **params),
            get(c, "trace", gz=True, headers={"If-None-Match": etag}, **params),
            get(c, "trace", download=1, **params), get(c, "stats", **params), get(c, "runs"),
            get(c, "event", run=TORCH_RUN, host=TORCH_HOST, i=3), get(c, "view", **params), get(c, "index.js"),
            get(c, "static/view.js"), get(c, "stats", run="nope", host="x"),
            get(c, "trace", run=TORCH_RUN, host=TORCH_HOST, level=9),
        ]
    assert [r.status_code for r in responses] == [200, 200, 304, 200, 200, 200, 200, 200, 200, 200, 404, 400]
    assert all(r.headers.get("X-Content-Type-Options") == "nosniff" and r.headers.get("Content-Type") for r in responses)
    assert not [rec.getMessage() for rec in caplog.records if "will become an error" in rec.getMessage()]


def test_a_view_without_args_leaves_them_to_the_event_route(c: Client) -> None:
    """`args=0`: the dashboard draws without args and fetches one event's args on click."""
    params = dict(run=TORCH_RUN, host=TORCH_HOST, level=1)
    full, bare = trace_doc(c, **params), trace_doc(c, **params, args=0)
    assert bare["tb_reduce"]["input_index"] == full["tb_reduce"]["input_index"]
    kept = len(bare["tb_reduce"]["input_index"])
    with_args = [pos for pos, e in enumerate(full["traceEvents"][:kept]) if e.get("ph") == "X" and e.get("args")]
    assert with_args and not any(bare["traceEvents"][pos].get("args") for pos in with_args)
    pos = with_args[0]
    event = body_json(get(c, "event", run=TORCH_RUN, host=TORCH_HOST, i=bare["tb_reduce"]["input_index"][pos]))
    assert event["args"] == full["traceEvents"][pos]["args"]
    for bad in ("2", "yes", "false", "0\x00"):
        assert "args" in assert_json_error(get(c, "trace", **params, args=bad), 400)
