"""The dashboard in a real headless Chromium against a real TensorBoard process.

One TensorBoard serves a temporary logdir of real traces (a PyTorch profile, a JAX
XSpace) plus a hostile, a broken and a sparse "huge" file; each test opens the
Trace Reduce tab (or its standalone `view` page) and acts as a user would.
Screenshots land in `test-artifacts/`.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
from dashboard_support import (
    ARTIFACTS,
    CANVAS_PIXELS_JS,
    CHROMIUM,
    HOSTILE_IMG,
    HOSTILE_SCRIPT,
    JAX_SMALL,
    PYTORCH_DEMO,
    TensorBoardServer,
    build_logdir,
    dashboard_state,
    wait_loaded,
)

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: install the Debian package `chromium` (CI does)", allow_module_level=True)
if not PYTORCH_DEMO.is_dir() or not JAX_SMALL.is_file():
    pytest.skip("the demo PyTorch profile or ../shared/corpus is absent (CI has both)", allow_module_level=True)

sync_api = pytest.importorskip("playwright.sync_api")

PT_RUN = "pytorch_cnn"
PT_HOST = sorted(p.name for p in PYTORCH_DEMO.glob("*.pt.trace.json*"))[0].split(".pt.trace.json")[0]
HUGE_BYTES = 60_000_000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("dashboard")
    logdir = build_logdir(root, huge_bytes=HUGE_BYTES)
    tb = TensorBoardServer(logdir, root / "cache")
    try:
        yield tb
    finally:
        tb.stop()


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def open_view(page, server, wait=True, **params):
    """The standalone `view` page (what a shared link opens), loaded."""
    page.goto(server.plugin_url(f"view?{urlencode(params)}"))
    if wait:
        wait_loaded(page)
        # The waveforms ask once the first timeline is there, and their step row then takes the
        # timeline's top: a slice located before that moves down under the pointer.
        page.wait_for_function("""() => { const w = window.tbReduceDashboard.waveforms;
          return w.run !== null && w.run !== undefined && w.root.dataset.state !== 'loading'; }""")
        page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
    return page


def open_tab(page, server):
    """TensorBoard's UI with the Trace Reduce tab; returns the plugin's iframe once its pickers are filled."""
    page.goto(f"{server.base}/#tb_reduce")
    frame = page.wait_for_selector("iframe", timeout=30000).content_frame()
    frame.wait_for_function("() => document.querySelectorAll('[data-testid=run-select] option').length >= 4")
    return frame


def is_trace(url: str, **want) -> bool:
    parsed = urlparse(url)
    if not parsed.path.endswith("/data/plugin/tb_reduce/trace"):
        return False
    q = parse_qs(parsed.query)
    return all((q.get(k) or [None])[0] == v if v is not True else k in q for k, v in want.items())


def test_tab_appears_in_tensorboard_and_timeline_paints(page, server):
    frame = open_tab(page, server)
    # the tab in TensorBoard's own header (outside the iframe)
    page.get_by_text(re.compile(r"^\s*trace reduce\s*$", re.I)).first.wait_for(timeout=30000)
    frame.select_option("[data-testid=run-select]", PT_RUN)
    wait_loaded(frame)
    frame.wait_for_timeout(100)  # one animation frame after the data arrived
    pixels = frame.evaluate(CANVAS_PIXELS_JS)
    shot(page, "tensorboard_tab")
    assert pixels["ink"] > 0.05 * pixels["total"], pixels
    assert pixels["colours"] >= 12, pixels
    for testid in ("run-select", "host-select", "level-select", "timeline", "stats", "share-link",
                   "download-link", "details"):
        assert frame.locator(f"[data-testid={testid}]").count() == 1, testid
    # the trace was parsed in a worker: TensorBoard's CSP (script-src 'self') allows it
    assert any(w.url.endswith("/data/plugin/tb_reduce/static/worker.js") for w in page.workers)
    stats = frame.text_content("[data-testid=stats]")
    assert "Original" in stats and "Reduced" in stats and "Reduction took" in stats


def test_level_change_refetches_and_updates_stats(page, server):
    open_view(page, server, run=PT_RUN, host=PT_HOST, level="auto")
    before = page.inner_text("[data-testid=stats]")
    assert "picked by auto" in before
    with page.expect_response(lambda r: is_trace(r.url, level="3")) as response:
        page.select_option("[data-testid=level-select]", "3")
    assert response.value.status == 200
    wait_loaded(page, level="3")
    page.wait_for_function("() => document.querySelector('[data-testid=stats]').innerText.includes('steps')")
    after = page.inner_text("[data-testid=stats]")
    assert after != before
    assert re.search(r"level\s+3 · 5,000 buckets", after), after
    assert "summaries" in after
    shot(page, "level3_stats")


def test_wheel_and_w_key_zoom_fetch_the_visible_window(page, server):
    open_view(page, server, run="jax/r1", host="vm", level="2")
    canvas = page.locator("[data-testid=timeline] canvas")
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + 120)
    start = dashboard_state(page)
    with page.expect_request(lambda r: is_trace(r.url, level="2", start_us=True, end_us=True)) as req:
        for _ in range(4):
            page.mouse.wheel(0, -400)
            page.wait_for_timeout(30)
    q = parse_qs(urlparse(req.value.url).query)
    wait_loaded(page, level="2")
    zoomed = dashboard_state(page)
    assert zoomed["end"] - zoomed["start"] < (start["end"] - start["start"]) / 8
    # the request covers the view (3× it, for panning without a refetch)
    assert float(q["start_us"][0]) <= zoomed["start"] and float(q["end_us"][0]) >= zoomed["end"]

    page.locator("[data-testid=timeline] canvas").click(position={"x": box["width"] * 0.6, "y": 6})
    with page.expect_request(lambda r: is_trace(r.url, start_us=True)) as req2:
        page.keyboard.down("w")
        page.wait_for_timeout(900)
        page.keyboard.up("w")
    wait_loaded(page, level="2")
    deeper = dashboard_state(page)
    assert deeper["end"] - deeper["start"] < (zoomed["end"] - zoomed["start"]) / 4
    q2 = parse_qs(urlparse(req2.value.url).query)
    assert float(q2["end_us"][0]) - float(q2["start_us"][0]) < float(q["end_us"][0]) - float(q["start_us"][0])
    page.wait_for_timeout(100)
    assert page.evaluate(CANVAS_PIXELS_JS)["ink"] > 1000
    shot(page, "zoomed_level2")


def test_share_link_reopens_the_same_view(page, server, browser):
    frame = open_tab(page, server)
    frame.select_option("[data-testid=run-select]", "jax/r1")
    wait_loaded(frame)
    with page.expect_response(lambda r: is_trace(r.url, level="2")):
        frame.select_option("[data-testid=level-select]", "2")
    wait_loaded(frame, level="2")
    box = frame.locator("[data-testid=timeline] canvas").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.4, box["y"] + 100)
    page.mouse.wheel(0, -500)
    page.wait_for_timeout(400)  # links follow the view after the debounce
    wait_loaded(frame)
    state = dashboard_state(frame)
    link = frame.get_attribute("[data-testid=share-link]", "href")
    assert link.startswith(f"{server.base}/data/plugin/tb_reduce/view?"), link
    q = parse_qs(urlparse(link).query)
    assert q["run"] == ["jax/r1"] and q["host"] == ["vm"] and q["level"] == ["2"]

    other = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    try:
        other.goto(link)
        wait_loaded(other, level="2")
        reopened = dashboard_state(other)
        shot(other, "share_link_reopened")
        for key in ("run", "host", "level"):
            assert reopened[key] == state[key], (key, reopened, state)
        span = state["end"] - state["start"]
        assert abs(reopened["start"] - state["start"]) < 1e-6 * span + 1e-3, (reopened, state)
        assert abs(reopened["end"] - state["end"]) < 1e-6 * span + 1e-3, (reopened, state)
        assert other.evaluate(CANVAS_PIXELS_JS)["ink"] > 1000
    finally:
        other.context.close()

    download = frame.get_attribute("[data-testid=download-link]", "href")
    dq = parse_qs(urlparse(download).query)
    assert dq["download"] == ["1"] and dq["level"] == ["2"] and "start_us" in dq
    response = page.request.get(download)
    assert response.status == 200
    assert "attachment" in response.headers["content-disposition"]
    doc = json.loads(gzip.decompress(response.body()))
    assert doc["tb_reduce"]["level"] == 2
    assert doc["tb_reduce"]["window_us"] == [float(dq["start_us"][0]), float(dq["end_us"][0])]


def test_click_on_a_slice_shows_its_args_from_the_event_route(page, server):
    open_view(page, server, run=PT_RUN, host=PT_HOST, level="0")
    # the widest profiler step (a real PyTorch profile has them), else the widest slice
    name = page.evaluate("""() => {
      const m = window.tbReduceDashboard.timeline.model, s = m.slices;
      let best = -1, step = -1;
      for (let i = 0; i < s.count; i += 1) {
        if (best < 0 || s.dur[i] > s.dur[best]) best = i;
        if (m.names[s.name[i]].startsWith('ProfilerStep#') && (step < 0 || s.dur[i] > s.dur[step])) step = i;
      }
      return m.names[s.name[step >= 0 ? step : best]];
    }""")
    where = page.evaluate("n => window.tbReduceDashboard.timeline.locateSlice(n)", name)
    assert where, f"{name} is not on screen"
    with page.expect_response(lambda r: "/data/plugin/tb_reduce/event?" in r.url) as response:
        page.mouse.click(where["clientX"], where["clientY"])
    event = response.value.json()
    assert event["name"] == name
    if name.startswith("ProfilerStep#"):
        assert event["args"], event  # PyTorch annotates steps with External id etc.
    details = page.locator("[data-testid=details]")
    details.get_by_text("Arguments").wait_for()
    text = details.inner_text()
    assert name in text
    for key, value in event["args"].items():
        assert key in text
        if isinstance(value, (str, int)):
            assert str(value) in text
    shot(page, "details_after_click")


def test_hostile_event_names_are_shown_as_text(page, server):
    open_view(page, server, run="hostile", host="evil", level="0")
    where = page.evaluate("n => window.tbReduceDashboard.timeline.locateSlice(n)", HOSTILE_IMG)
    assert where
    page.mouse.move(where["clientX"], where["clientY"])
    tooltip = page.locator(".tbr-tooltip")
    tooltip.wait_for(state="visible")
    assert HOSTILE_IMG in tooltip.inner_text()
    with page.expect_response(lambda r: "/event?" in r.url):
        page.mouse.click(where["clientX"], where["clientY"])
    details = page.locator("[data-testid=details]")
    details.get_by_text("Arguments").wait_for()
    assert details.locator("h3").inner_text() == HOSTILE_IMG
    assert "<iframe src=javascript:alert(1)>" in details.inner_text()
    script = page.evaluate("n => window.tbReduceDashboard.timeline.locateSlice(n)", HOSTILE_SCRIPT)
    page.mouse.click(script["clientX"], script["clientY"])
    page.wait_for_function("n => document.querySelector('[data-testid=details] h3').textContent === n",
                           arg=HOSTILE_SCRIPT)
    page.wait_for_timeout(200)
    assert page.evaluate("() => window.__pwned") is None
    assert page.locator("img, iframe, svg, [data-testid=details] script").count() == 0
    shot(page, "hostile_names")


def test_broken_file_shows_the_servers_error(page, server):
    status, body = server.get_json("trace?run=broken&host=bad&level=auto")
    assert status == 422 and body["error"]
    open_view(page, server, wait=False, run="broken", host="bad")
    message = page.locator(".tbr-message")
    message.wait_for(state="visible")
    assert body["error"] in message.inner_text()
    assert body["error"] in page.inner_text("[data-testid=status]")
    shot(page, "broken_file")


def test_huge_trace_at_level_0_asks_first(page, server):
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if is_trace(r.url) else None)
    page.goto(server.plugin_url("view?run=huge&host=big&level=0"))
    message = page.locator(".tbr-message")
    message.wait_for(state="visible")
    text = message.inner_text()
    assert "60.0 MB" in text and "auto" in text
    shot(page, "huge_warning")
    assert requests == []  # nothing fetched before the user chose
    with page.expect_request(lambda r: is_trace(r.url, level="auto")):
        message.get_by_role("button", name="Use auto").click()
    assert page.input_value("[data-testid=level-select]") == "auto"
    page.select_option("[data-testid=level-select]", "0")
    page.locator(".tbr-message").get_by_role("button", name="Load level 0 anyway").wait_for()
    with page.expect_request(lambda r: is_trace(r.url, level="0")):
        page.get_by_role("button", name="Load level 0 anyway").click()


def test_empty_logdir_says_so(page, server):
    page.route("**/data/plugin/tb_reduce/runs", lambda route: route.fulfill(
        status=200, content_type="application/json", body="[]"))
    page.goto(server.plugin_url("view?run=none&host=none"))
    page.get_by_text("No profiler traces found").wait_for()
    assert page.is_disabled("[data-testid=run-select]")


def busy_for(answers: int):
    """A route handler that answers the first `answers` trace requests 503 (busy, Retry-After: 1), as
    the server does when its computation slots and line are full; later ones go through."""
    seen: list[str] = []

    def handle(route):
        seen.append(route.request.url)
        if len(seen) <= answers:
            route.fulfill(status=503, headers={"Retry-After": "1"}, content_type="application/json",
                          body=json.dumps({"error": "the server is busy with 2 computations and 32 waiting"}))
        else:
            route.continue_()

    return handle, seen


def test_a_busy_server_is_asked_again_after_retry_after_and_the_view_loads(page, server):
    handle, seen = busy_for(2)
    page.context.route("**/data/plugin/tb_reduce/trace?*", handle)
    open_view(page, server, run=PT_RUN, host=PT_HOST, level=3)
    assert len(seen) == 3 and dashboard_state(page)["level"] == "3"
    shot(page, "busy_then_loaded")


def test_a_server_that_stays_busy_shows_its_message_after_a_few_tries(page, server):
    handle, seen = busy_for(1000)
    page.context.route("**/data/plugin/tb_reduce/trace?*", handle)
    open_view(page, server, wait=False, run=PT_RUN, host=PT_HOST, level=4)
    message = page.locator(".tbr-message")
    message.wait_for(state="visible", timeout=60000)
    assert "busy" in message.inner_text() and len(seen) == 6
    shot(page, "busy_gave_up")
