"""XProf's Profile tab, its Trace Viewer answered by tb-reduce, in a real headless Chromium.

One TensorBoard (XProf's plugin loaded first, then tb-reduce) serves a logdir of two
Chrome-JSON-only PyTorch runs — which XProf alone cannot open — and, once it is
recorded, a JAX XSpace of over a million events (the recording `jax_export_support`
makes once per machine and shares with the suites of JAX's export cap: one JAX run
fewer per CI). Each test opens TensorBoard at `#profile` and acts as a user: picks a
session, clicks a slice, types in "Find Events...", zooms with `w`. What tb-reduce answers carries `X-Served-By: tb-reduce/…`;
XProf's own answers carry no such header.

The viewer is XProf 2.24's catapult-based `trace_viewer_index.html` (an iframe inside
XProf's iframe); the tests read its `tf-trace-viewer` element (`_model`: the catapult
model, `_traceViewer.trackView`: the viewport) to find where slices are drawn, then
click there as a user would. Screenshots land in /tmp/shots and test-artifacts/.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from urllib.parse import parse_qs, quote, urlparse

import pytest
from dashboard_support import CHROMIUM, PYTORCH_DEMO, ROOT, save_shot
from jax_export_support import record_capped_jax_run
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from tensorboard_process import start_tensorboard

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: install the Debian package `chromium` (CI does)", allow_module_level=True)
pytest.importorskip("xprof", reason="XProf (tensorboard-plugin-profile) is not installed")
pytest.importorskip("playwright.sync_api")

STALLED_DEMO = ROOT / "demo_logdir" / "stalled_step"
if not PYTORCH_DEMO.is_dir() or not STALLED_DEMO.is_dir():
    pytest.skip("demo_logdir's PyTorch profiles are absent", allow_module_level=True)

PT_RUN = "pytorch_cnn"
PT_HOST = sorted(p.name for p in PYTORCH_DEMO.glob("*.pt.trace.json*"))[0].split(".pt.trace.json")[0]
XS_RUN_DIR = "jax_big"
SERVED_BY = "tb-reduce"
DATA_PATH = "/data/plugin/profile/data"
LOAD_TIMEOUT_MS = 180_000  # the first view of the XSpace indexes over a million events (~10 s here; CI may be slower)

# The viewer's state: is it loading, how many slices the catapult model holds, its processes.
VIEWER_STATE_JS = """() => {
  const tv = document.querySelector('tf-trace-viewer');
  if (!tv || !tv._model || !tv._traceViewer || !tv._traceViewer.trackView) return null;
  let slices = 0;
  const processes = [];
  for (const p of Object.values(tv._model.processes)) {
    processes.push(p.name);
    for (const t of Object.values(p.threads)) slices += t.sliceGroup.slices.length;
  }
  const trackView = tv._traceViewer.trackView;
  const dt = trackView.viewport.currentDisplayTransform;
  // Catapult sets the first viewport (the whole profile) once the track view is laid out.
  const placed = trackView.pollIfViewportAttachedInterval_ === undefined && (dt.scaleX !== 1 || dt.panX !== 0);
  const range = tv._trackViewRange(trackView);
  return {loading: tv._isLoading, placed, slices, processes, range, full: tv._fullBounds};
}"""

# Thread slices whose title starts with `prefix`, drawn at least 6 px wide inside the
# timeline's canvas: where they are (in the frame's viewport) and what the view sent of them.
VISIBLE_SLICES_JS = """(prefix) => {
  const tv = document.querySelector('tf-trace-viewer');
  const trackView = tv._traceViewer.trackView;
  const vp = trackView.viewport;
  const dt = vp.currentDisplayTransform;
  const canvas = trackView.modelTrackContainer_.canvas;
  const cr = canvas.getBoundingClientRect();
  const dpr = window.devicePixelRatio || 1;
  const out = [];
  for (const p of Object.values(tv._model.processes)) {
    for (const t of Object.values(p.threads)) {
      for (const s of t.sliceGroup.slices) {
        if (!s.title.startsWith(prefix) || s.category === 'tb_reduce.summary') continue;
        const track = vp.trackForEvent(s);
        if (!track) continue;
        const r = track.getBoundingClientRect();
        const x0 = Math.max(cr.left + dt.xWorldToView(s.start) / dpr, cr.left);
        const x1 = Math.min(cr.left + dt.xWorldToView(s.end) / dpr, cr.right - 40);
        const y = r.top + r.height / 2;
        if (x1 - x0 < 6 || y < cr.top + 30 || y > cr.bottom - 4 || r.height < 6) continue;
        out.push({title: s.title, start: s.start, duration: s.duration, args: s.args,
                  x: (x0 + x1) / 2, y, width: x1 - x0});
      }
    }
  }
  out.sort((a, b) => b.width - a.width);
  return out.slice(0, 5);
}"""

# Coloured pixels in the timeline's canvas: slices are drawn in colour, the track
# backgrounds and rulers in greys.
CANVAS_COLOUR_JS = """() => {
  const canvas = document.querySelector('tf-trace-viewer')._traceViewer.trackView.modelTrackContainer_.canvas;
  const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let coloured = 0;
  for (let i = 0; i < data.length; i += 4) {
    const r = data[i], g = data[i + 1], b = data[i + 2];
    if (Math.max(r, g, b) - Math.min(r, g, b) > 40) coloured += 1;
  }
  return {coloured, total: canvas.width * canvas.height};
}"""

# A world time (ms) -> x in the frame's viewport.
WORLD_TO_X_JS = """(ms) => {
  const trackView = document.querySelector('tf-trace-viewer')._traceViewer.trackView;
  const cr = trackView.modelTrackContainer_.canvas.getBoundingClientRect();
  return cr.left + trackView.viewport.currentDisplayTransform.xWorldToView(ms) / (window.devicePixelRatio || 1);
}"""


# ---- the server and its logdir --------------------------------------------------------
class ProfileTabServer:
    """TensorBoard with XProf then tb-reduce, over a logdir the XSpace is moved into once recorded."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.logdir = root / "logdir"
        shutil.copytree(PYTORCH_DEMO, self.logdir / PT_RUN)
        shutil.copytree(STALLED_DEMO, self.logdir / STALLED_DEMO.name)
        self.xspace_run: str | None = None
        self.xspace_host = ""
        self.record_s = 0.0
        self.tb = start_tensorboard(self.logdir, root / "cache", "--tb_reduce_memory_mb", "4096",
                                    order="xprof-first")
        self.url = self.tb.url

    def xspace(self) -> str:
        """The shared JAX recording (made now if no suite has made it yet), its session moved
        into the logdir whole: neither XProf nor tb-reduce ever sees a half-written XSpace.
        Returns the run's name in the Profile tab (`jax_big/<session>`), once both plugins list it."""
        if self.xspace_run is not None:
            return self.xspace_run
        began = time.monotonic()
        session = record_capped_jax_run(self.root / "recording")  # links to the shared files
        self.record_s = time.monotonic() - began
        xplanes = list(session.glob("*.xplane.pb"))
        assert len(xplanes) == 1 and xplanes[0].stat().st_size > 30_000_000, xplanes
        self.xspace_host = xplanes[0].name[: -len(".xplane.pb")]
        for extra in session.glob("*.trace.json.gz"):  # JAX's own capped JSON: the run is XSpace only
            extra.unlink()
        target = self.logdir / XS_RUN_DIR / "plugins" / "profile" / session.name
        target.parent.mkdir(parents=True)
        os.rename(session, target)
        run = f"{XS_RUN_DIR}/{session.name}"
        deadline = time.monotonic() + 30  # tb-reduce walks the logdir again at most 5 s later
        while True:
            ours = {r["run"] for r in self.tb.json("data/plugin/tb_reduce/runs")}
            xprofs = set(self.tb.json("data/plugin/profile/runs"))
            if run in ours and run in xprofs:
                break
            assert time.monotonic() < deadline, (run, ours, xprofs)
            time.sleep(0.5)
        self.xspace_run = run
        return run

    def stop(self) -> None:
        self.tb.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ProfileTabServer(tmp_path_factory.mktemp("profile_tab"))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def xspace_run(server) -> str:
    return server.xspace()


# ---- the page ------------------------------------------------------------------------
class Responses:
    """The Profile tab's API responses the page saw (XProf's routes under /data/plugin/profile/)."""

    def __init__(self, page) -> None:
        self.seen: list = []
        page.on("response", self._record)

    def _record(self, response) -> None:
        head, _, route = urlparse(response.url).path.rpartition("/")
        if head == "/data/plugin/profile" and route in ("runs", "run_tools", "hosts", "data"):
            self.seen.append(response)

    def data(self, run: str | None = None) -> list:
        return [r for r in self.seen if urlparse(r.url).path == DATA_PATH
                and (run is None or query(r.url).get("run") == run)]


def query(url: str) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlparse(url).query, keep_blank_values=True).items()}


def served_by(response) -> str:
    return response.headers.get("x-served-by") or ""


def is_data(response, run: str, **having: bool):
    """A Trace Viewer data response for `run` whose query has (True) or lacks (False) each parameter."""
    if urlparse(response.url).path != DATA_PATH:
        return False
    q = query(response.url)
    return (q.get("run") == run and q.get("tag") == "trace_viewer@"
            and all((name in q) == want for name, want in having.items()))


def assert_ours(response) -> dict:
    """The response is tb-reduce's, a 200 of JSON; returns the JSON."""
    assert response.status == 200, (response.url, response.status, response.text()[:500])
    assert served_by(response).startswith(SERVED_BY), (response.url, response.headers)
    return response.json()


def xprof_frame(page):
    """XProf's app: the iframe TensorBoard's Profile tab holds."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for f in page.frames:
            path = urlparse(f.url).path
            if path.startswith("/data/plugin/profile/") and "trace_viewer_index" not in path:
                if f.locator("mat-select").count() >= 3:
                    return f
        page.wait_for_timeout(250)
    raise AssertionError(f"XProf's app did not load: {[f.url for f in page.frames]}")


def viewer_frame(page, run: str, timeout_s: float = 60):
    """The Trace Viewer's iframe (inside XProf's) showing `run`."""
    wanted = quote(f"run={run}&", safe="")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for f in page.frames:
            if "trace_viewer_index.html" in f.url and wanted in f.url:
                return f
        page.wait_for_timeout(250)
    raise AssertionError(f"no Trace Viewer for {run}: {[f.url for f in page.frames]}")


def open_profile_tab(page, server: ProfileTabServer):
    page.goto(server.url + "#profile")
    return xprof_frame(page)


def pick(page, xprof, select_index: int, option: str) -> None:
    """Chooses `option` in one of the left panel's selects (0: sessions, 1: tools, 2: hosts)."""
    xprof.locator("mat-select").nth(select_index).click()
    xprof.get_by_role("option", name=option, exact=True).click()


def wait_drawn(frame, min_slices: int, timeout_ms: float = 60_000) -> dict:
    """Until the viewer's model holds `min_slices` slices, its viewport is placed and nothing
    is loading; its state."""
    try:
        frame.wait_for_function(f"() => {{ const s = ({VIEWER_STATE_JS})(); return !!s && !s.loading && "
                                f"s.placed && s.slices >= {min_slices}; }}", timeout=timeout_ms)
    except PlaywrightTimeout:
        state = frame.evaluate(VIEWER_STATE_JS)
        raise AssertionError(f"the viewer did not draw {min_slices} slices in {timeout_ms / 1000:.0f} s: "
                             f"{ {k: v for k, v in (state or {}).items() if k != 'processes'} }") from None
    return frame.evaluate(VIEWER_STATE_JS)


def to_page(frame, x: float, y: float) -> tuple[float, float]:
    """A point in the viewer frame's viewport -> the page's (the frame's box is in page coordinates)."""
    box = frame.frame_element().bounding_box()
    assert box is not None
    return box["x"] + x, box["y"] + y


def open_xspace(page, server: ProfileTabServer, run: str):
    """The Profile tab with the XSpace run picked in Sessions; its first view's response,
    the Trace Viewer's frame and the viewer's state once drawn."""
    xprof = open_profile_tab(page, server)
    with page.expect_response(lambda r: is_data(r, run, resolution=True, start_time_ms=False),
                              timeout=LOAD_TIMEOUT_MS) as first:
        pick(page, xprof, 0, run)
    viewer = viewer_frame(page, run)
    # Every complete event sent becomes one slice of the viewer's model: wait for all of them
    # (how many depends on the recording: its length and threads vary with the machine's load).
    sent = sum(1 for e in assert_ours(first.value)["traceEvents"] if e.get("ph") == "X")
    assert sent >= 50, sent
    return first.value, viewer, wait_drawn(viewer, sent)


def zoom_in(page, viewer, at_ms: float, factor: float) -> None:
    """Presses `w` (catapult's zoom, centred on the mouse) with the mouse over `at_ms` until
    the viewport is `factor` times narrower than the whole profile."""
    state = viewer.evaluate(VIEWER_STATE_JS)
    full = state["full"]
    x = viewer.evaluate(WORLD_TO_X_JS, at_ms)
    bottom = viewer.evaluate("() => document.querySelector('tf-trace-viewer')._traceViewer"
                             ".trackView.modelTrackContainer_.canvas.getBoundingClientRect().bottom")
    # Focus the viewer without selecting anything: a click below every track.
    page.mouse.click(*to_page(viewer, x, bottom - 10))
    assert viewer.evaluate("() => document.hasFocus()"), "the click did not focus the Trace Viewer"
    for _ in range(80):
        page.keyboard.down("w")
        page.wait_for_timeout(60)
        page.keyboard.up("w")
        r = viewer.evaluate(VIEWER_STATE_JS)["range"]
        if r["max"] - r["min"] < (full["max"] - full["min"]) / factor:
            return
    raise AssertionError(f"`w` did not zoom in {factor}x: {r}")


@pytest.fixture
def profile_page(page):
    page.responses = Responses(page)
    return page


# ---- the tests -------------------------------------------------------------------------
def test_the_trace_viewer_draws_a_chrome_json_run_from_tb_reduce_and_its_clicks_and_searches_are_answered_too(
        profile_page, server):
    page = profile_page
    xprof = open_profile_tab(page, server)
    # The sessions (runs sorted in reverse) open on stalled_step; pick the CNN profile.
    with page.expect_response(lambda r: is_data(r, PT_RUN, resolution=True), timeout=LOAD_TIMEOUT_MS) as first:
        pick(page, xprof, 0, PT_RUN)
    view = assert_ours(first.value)
    assert view["traceEvents"] and view["fullTimespan"][1] > view["fullTimespan"][0]
    viewer = viewer_frame(page, PT_RUN)
    state = wait_drawn(viewer, 500)
    # tb-reduce names each process after its host: the viewer finds a clicked event's host there.
    assert any(p.startswith(f"{PT_HOST} python") for p in state["processes"]), state["processes"]
    viewer.get_by_text(f"{PT_HOST} python").locator("visible=true").first.wait_for(timeout=10_000)
    ink = viewer.evaluate(CANVAS_COLOUR_JS)
    assert ink["coloured"] > 0.02 * ink["total"], ink
    save_shot(page, "profile_tab_chrome_json")

    # Click the widest aten:: slice drawn: the view carried only its uid; the click fetches its args.
    slices = viewer.evaluate(VISIBLE_SLICES_JS, "aten::")
    assert slices, "no aten:: slice is drawn wide enough to click"
    target = slices[0]
    assert set(target["args"]) == {"uid"}, target
    with page.expect_response(lambda r: is_data(r, PT_RUN, unique_id=True), timeout=60_000) as clicked:
        page.mouse.click(*to_page(viewer, target["x"], target["y"]))
    asked = query(clicked.value.url)
    assert asked["event_name"] == target["title"] and asked["unique_id"] == str(target["args"]["uid"]), asked
    detail = assert_ours(clicked.value)
    event = detail["traceEvents"][-1]
    assert event["ph"] == "X" and event["name"] == target["title"], event
    extra = {k: v for k, v in event["args"].items() if k != "uid"}
    assert "External id" in extra, event["args"]
    panel = viewer.locator("#analysis")
    panel.get_by_text("External id", exact=True).wait_for(timeout=30_000)
    text = panel.inner_text()
    assert target["title"] in text and str(extra["External id"]) in text, text[:1000]
    assert sum(key in text for key in extra) >= min(3, len(extra)), (list(extra), text[:1000])
    save_shot(page, "profile_tab_chrome_json_details")

    # "Find Events...": the viewer asks the server for every event whose name starts so.
    prefix = "aten::conv"
    find = viewer.locator("#filter")
    with page.expect_response(lambda r: is_data(r, PT_RUN, search_prefix=True)
                              and query(r.url)["search_prefix"] == prefix, timeout=60_000) as searched:
        find.click()
        find.press_sequentially(prefix, delay=20)  # typing searches after a pause; Enter at once
        find.press("Enter")
    found = assert_ours(searched.value)
    hits = [e for e in found["traceEvents"] if e.get("ph") != "M"]
    assert hits and all(e["name"].startswith(prefix) for e in hits), hits[:5]
    # The find box counts the matching slices the viewer now holds: at least every hit sent.
    viewer.wait_for_function("() => / of [1-9]/.test(document.querySelector('#hitCount').textContent)",
                             timeout=30_000)
    counted = viewer.locator("#hitCount").inner_text()
    assert int(counted.rsplit(" of ", 1)[1]) >= len({e["z"] for e in hits}), (counted, len(hits))
    save_shot(page, "profile_tab_chrome_json_search")

    # Every Profile-tab request the page made for the Chrome-JSON runs (the run list, their tools,
    # hosts and Trace Viewer data) was tb-reduce's, and a 200.
    assert page.responses.data()
    for r in page.responses.seen:
        assert r.status == 200 and served_by(r).startswith(SERVED_BY), (r.url, r.status, r.headers)


def test_the_trace_viewer_draws_a_million_event_xspace_from_tb_reduce_and_zooming_in_asks_tb_reduce_for_the_window(
        profile_page, xspace_run, server):
    page = profile_page
    began = time.monotonic()
    first, viewer, state = open_xspace(page, server, xspace_run)
    first_view_s = time.monotonic() - began
    view = assert_ours(first)
    assert view["tb_reduce"]["input"]["events"] > 1_000_000, view["tb_reduce"]  # past JAX's own JSON export
    host = server.xspace_host
    assert query(page.url).get("tag") == "trace_viewer@" and query(page.url).get("hosts") == host, page.url
    assert any(p.startswith(f"{host} ") for p in state["processes"]), state["processes"]
    ink = viewer.evaluate(CANVAS_COLOUR_JS)
    assert ink["coloured"] > 0.01 * ink["total"], ink
    save_shot(page, "profile_tab_xspace")

    # Zoom in with `w` around 40% into the profile until the viewer asks for that window.
    full = state["full"]
    before = state["slices"]
    with page.expect_response(lambda r: is_data(r, xspace_run, start_time_ms=True, end_time_ms=True,
                                                unique_id=False, search_prefix=False),
                              timeout=LOAD_TIMEOUT_MS) as windowed:
        zoom_in(page, viewer, full["min"] + 0.4 * (full["max"] - full["min"]), 200)
    asked = query(windowed.value.url)
    start, end = float(asked["start_time_ms"]), float(asked["end_time_ms"])
    assert full["min"] <= start < end and end - start < (full["max"] - full["min"]) / 8, asked
    window = assert_ours(windowed.value)
    assert window["tb_reduce"]["window_us"][1] - window["tb_reduce"]["window_us"][0] < (end - start) * 1000 * 1.01
    zoomed = [e for e in window["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "tb_reduce.summary"]
    assert zoomed, window["tb_reduce"]
    state = wait_drawn(viewer, before + 1)
    assert state["range"]["max"] - state["range"]["min"] < end - start, (state["range"], asked)
    ink = viewer.evaluate(CANVAS_COLOUR_JS)
    assert ink["coloured"] > 0.01 * ink["total"], ink
    save_shot(page, "profile_tab_xspace_zoomed")

    for r in page.responses.data(xspace_run):
        assert r.status == 200 and served_by(r).startswith(SERVED_BY), (r.url, r.status, r.headers)
    print(f"\nXSpace recorded in {server.record_s:.1f} s; first view {first_view_s:.1f} s after picking it")


def test_xprof_answers_its_other_tools_for_the_xspace_run_itself(profile_page, xspace_run, server):
    page = profile_page
    first, _, _ = open_xspace(page, server, xspace_run)
    assert_ours(first)
    xprof = xprof_frame(page)
    with page.expect_response(lambda r: urlparse(r.url).path == DATA_PATH and query(r.url).get("tag") == "op_profile",
                              timeout=LOAD_TIMEOUT_MS) as tool:
        pick(page, xprof, 1, "HLO Op Profile")
    response = tool.value
    assert query(response.url)["run"] == xspace_run
    assert response.status == 200, (response.url, response.status, response.text()[:500])
    assert "x-served-by" not in response.headers, response.headers
    json.loads(response.body())
    # XProf's own page drew it.
    xprof.get_by_text("FLOPS utilization").locator("visible=true").first.wait_for(timeout=30_000)
    save_shot(page, "profile_tab_xspace_op_profile")
    # So are the tool list and the hosts of an XSpace run: XProf's, untouched.
    for r in page.responses.seen:
        q = query(r.url)
        if q.get("run") == xspace_run and urlparse(r.url).path.endswith(("/run_tools", "/hosts")):
            assert "x-served-by" not in r.headers, (r.url, r.headers)


# ---- faults found here and fixed ----------------------------------------------------------------
# The details answer once left out `args` for an event that has none (XProf sends `"args": {}`): the
# viewer then stored `event.args = undefined`, and selecting that slice again threw.
def test_a_slice_without_args_can_be_selected_again_after_its_details_were_fetched(browser, xspace_run, server):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        _, viewer, _ = open_xspace(page, server, xspace_run)
        # JAX's Python-tracer slices at the profile's end (`$profiler.py:… stop_trace`) carry no stats.
        slices = viewer.evaluate(VISIBLE_SLICES_JS, "$")
        assert len(slices) >= 2, slices
        bare = other = None
        for candidate in slices:
            with page.expect_response(lambda r: is_data(r, xspace_run, unique_id=True), timeout=60_000) as clicked:
                page.mouse.click(*to_page(viewer, candidate["x"], candidate["y"]))
            event = assert_ours(clicked.value)["traceEvents"][-1]
            if bare is None and not event.get("args"):
                bare = candidate
            elif other is None:
                other = candidate
            if bare is not None and other is not None:
                break
        if bare is None or other is None:
            pytest.skip(f"no two clickable slices, one without args: {slices}")
        # Select the other slice, then the argless one again.
        page.mouse.click(*to_page(viewer, other["x"], other["y"]))
        viewer.wait_for_function("(t) => document.querySelector('#analysis').innerText.includes(t)", arg=other["title"])
        page.mouse.click(*to_page(viewer, bare["x"], bare["y"]))
        page.wait_for_timeout(1500)
        panel = viewer.locator("#analysis").inner_text()
        assert not errors, errors
        assert bare["title"] in panel, panel[:300]
    finally:
        context.close()


# Real (not summary) slices inside the visible window that are drawn nested under a tb-reduce summary.
NESTED_UNDER_SUMMARY_JS = """() => {
  const tv = document.querySelector('tf-trace-viewer');
  const range = tv._trackViewRange(tv._traceViewer.trackView);
  const nested = [];
  let visible = 0;
  for (const p of Object.values(tv._model.processes)) {
    for (const t of Object.values(p.threads)) {
      for (const s of t.sliceGroup.slices) {
        if (s.category === 'tb_reduce.summary' || s.end < range.min || s.start > range.max) continue;
        visible += 1;
        for (let a = s.parentSlice; a; a = a.parentSlice) {
          if (a.category !== 'tb_reduce.summary') continue;
          nested.push([s.title, s.start, a.title, a.start, a.duration]);
          break;
        }
      }
    }
  }
  return {visible, nested: nested.length, examples: nested.slice(0, 3)};
}"""

# The widest summary the viewer holds: [its middle (ms), its title].
WIDEST_SUMMARY_JS = """() => {
  const tv = document.querySelector('tf-trace-viewer');
  let best = null;
  for (const p of Object.values(tv._model.processes)) {
    for (const t of Object.values(p.threads)) {
      for (const s of t.sliceGroup.slices) {
        if (s.category === 'tb_reduce.summary' && (!best || s.duration > best.duration)) best = s;
      }
    }
  }
  return best && [best.start + best.duration / 2, best.title];
}"""


# The viewer merges each zoom's answer into what it holds (replace_model=false) and never drops an
# event: summaries sent for the coarse first view once stayed drawn over the zoomed window, the
# window's real slices nested a row below them. Summaries now have a row of their own per thread.
def test_zoomed_in_slices_are_not_drawn_under_a_summary_from_the_coarser_view(profile_page, xspace_run, server):
    page = profile_page
    _, viewer, state = open_xspace(page, server, xspace_run)
    assert viewer.evaluate(NESTED_UNDER_SUMMARY_JS)["nested"] == 0  # one answer alone nests nothing under a summary
    widest = viewer.evaluate(WIDEST_SUMMARY_JS)
    assert widest, "the first view folded nothing"
    with page.expect_response(lambda r: is_data(r, xspace_run, start_time_ms=True, unique_id=False,
                                                search_prefix=False), timeout=LOAD_TIMEOUT_MS) as windowed:
        zoom_in(page, viewer, widest[0], 200)
    assert_ours(windowed.value)
    wait_drawn(viewer, state["slices"] + 1)
    save_shot(page, "profile_tab_xspace_zoomed_under_summary")
    drawn = viewer.evaluate(NESTED_UNDER_SUMMARY_JS)
    assert drawn["visible"] > 0 and drawn["nested"] == 0, (widest, drawn)


def test_the_trace_reduce_tab_says_it_also_serves_the_profile_tab(page, server):
    page.goto(f"{server.url}#tb_reduce")
    frame = page.wait_for_selector("iframe", timeout=30_000).content_frame()
    badge = frame.locator("[data-testid=profile-tab-badge]")
    badge.wait_for(state="visible", timeout=30_000)
    assert badge.inner_text() == "also serving the Profile tab"
    assert "XProf 2.24.2" in badge.get_attribute("title")
    save_shot(frame.locator("header.tbr-bar"), "trace_reduce_tab_profile_badge")
