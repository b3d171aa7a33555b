"""The dashboard asks for what its screen can show, in a real headless Chromium against a
real TensorBoard.

At level `auto`, and at the default level 2 until a level is explicit (picked in the
select, or named by the link that opened the page), the timeline sends `resolution` = its
canvas's CSS width × devicePixelRatio (XProf's trace viewer sizes its requests the same
way), for the whole trace and for each zoomed window; an explicit level 0-4 sends none,
and neither "Copy link" nor the download carries it (a link from a default view names no
level). The trace is a real JAX profile recorded here past `auto`'s 500,000-event budget
(`bench/make_jax_xspace.py`), where `auto` alone sends level 1's 100,000 buckets and
level 2 its 20,000. Screenshots land in /tmp/resolution_view.png (auto) and
/tmp/resolution_default.png, /tmp/resolution_default_zoomed.png (the default view).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
from dashboard_support import ARTIFACTS, CANVAS_PIXELS_JS, CHROMIUM, TensorBoardServer, wait_loaded
from recorded_profiles import record_big_xspace

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: install the Debian package `chromium` (CI does)", allow_module_level=True)

sync_api = pytest.importorskip("playwright.sync_api")

RUN, HOST = "big", "vm"
SHOT = Path("/tmp/resolution_view.png")
DEFAULT_SHOT = Path("/tmp/resolution_default.png")
ZOOMED_SHOT = Path("/tmp/resolution_default_zoomed.png")
TRACE_PATH = "/data/plugin/tb_reduce/trace"
STATS_PATH = "/data/plugin/tb_reduce/stats"
# The canvas's device pixels, as the page measures them.
SCREEN_PX_JS = """() => {
  const c = window.tbReduceDashboard.timeline.canvas;
  return {css: c.getBoundingClientRect().width, dpr: window.devicePixelRatio || 1,
          px: c.getBoundingClientRect().width * (window.devicePixelRatio || 1)};
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("resolution_browser")
    xplane = record_big_xspace(root / "recording")
    (root / "logdir" / RUN).mkdir(parents=True)
    shutil.copyfile(xplane, root / "logdir" / RUN / f"{HOST}.xplane.pb")
    tb = TensorBoardServer(root / "logdir", root / "cache")
    try:
        yield tb
    finally:
        tb.stop()


def query(url: str) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(url).query).items()}


class Requests:
    """Every `trace` and `stats` request the page (and its worker) sends, by URL."""

    def __init__(self, page) -> None:
        self.traces: list[str] = []
        self.stats: list[str] = []
        page.on("request", self.seen)

    def seen(self, request) -> None:
        path = urlparse(request.url).path
        if path.endswith(TRACE_PATH):
            self.traces.append(request.url)
        elif path.endswith(STATS_PATH):
            self.stats.append(request.url)


def open_view(page, server, **params) -> Requests:
    seen = Requests(page)
    page.goto(server.plugin_url(f"view?{urlencode(params)}"))
    wait_loaded(page, timeout=120_000)  # the first view indexes the XSpace
    return seen


def json_bytes(page, url: str) -> int:
    """The JSON bytes of a `trace` answer (the browser inflates the gzip)."""
    r = page.request.get(url, timeout=120_000)
    assert r.ok, r.text()[:300]
    return len(r.body())


def without(url: str, *names: str) -> str:
    parsed = urlparse(url)
    q = [(k, v) for k, v in parse_qs(parsed.query).items() if k not in names]
    return parsed._replace(query=urlencode([(k, v[0]) for k, v in q])).geturl()


def test_auto_asks_for_the_canvas_width_in_device_pixels_and_gets_a_screenful(page, server):
    seen = open_view(page, server, run=RUN, host=HOST, level="auto")
    screen = page.evaluate(SCREEN_PX_JS)
    first = query(seen.traces[0])
    assert first["level"] == "auto" and "start_us" not in first
    assert abs(int(first["resolution"]) - screen["px"]) <= 1, (first, screen)
    assert 1300 <= int(first["resolution"]) <= 1400  # the 1,400-px viewport, less the page's margins
    assert any(query(u).get("resolution") == first["resolution"] for u in seen.stats)  # one cache entry for both

    timeline = page.locator("[data-testid=timeline]")
    assert timeline.get_attribute("data-level") == "1"  # auto's pick for 570 k events, as without a resolution
    assert timeline.get_attribute("data-buckets") == first["resolution"]
    page.wait_for_function("() => document.querySelector('[data-testid=stats]').innerText.includes('steps')")
    stats = page.inner_text("[data-testid=stats]")
    assert f"{int(first['resolution']):,} buckets of" in stats and "picked by auto" in stats, stats

    # what it saves: the same view without the resolution is auto's whole level 1
    with_res = json_bytes(page, seen.traces[0])
    without_res = json_bytes(page, without(seen.traces[0], "resolution"))
    assert with_res * 10 < without_res, (with_res, without_res)
    print(f"\nauto view JSON: {with_res:,} B with resolution={first['resolution']}, {without_res:,} B without")

    # links and the download stay level-based
    for testid in ("share-link", "download-link"):
        href = page.get_attribute(f"[data-testid={testid}]", "href")
        assert href and "resolution" not in query(href) and query(href)["level"] == "auto", href

    page.wait_for_timeout(150)  # a frame after the data arrived
    pixels = page.evaluate(CANVAS_PIXELS_JS)
    assert pixels["ink"] > 0.03 * pixels["total"], pixels
    page.screenshot(path=str(SHOT))
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(SHOT, ARTIFACTS / "resolution_view.png")


def is_trace(r, **want) -> bool:
    return urlparse(r.url).path.endswith(TRACE_PATH) and all(query(r.url).get(k) == v for k, v in want.items())


def zoom_in(page, times: int = 6) -> None:
    box = page.locator("[data-testid=timeline] canvas").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + 120)
    for _ in range(times):
        page.mouse.wheel(0, -400)
        page.wait_for_timeout(30)


def test_the_default_view_asks_level_2_at_the_screens_resolution(page, server):
    """First open, no level picked (as the TensorBoard tab opens): level 2 cut to the canvas."""
    seen = open_view(page, server, run=RUN, host=HOST)
    screen = page.evaluate(SCREEN_PX_JS)
    first = query(seen.traces[0])
    assert first["level"] == "2" and "start_us" not in first
    assert abs(int(first["resolution"]) - screen["px"]) <= 1, (first, screen)
    assert any(query(u).get("resolution") == first["resolution"] and query(u)["level"] == "2" for u in seen.stats)
    assert page.input_value("[data-testid=level-select]") == "2"

    timeline = page.locator("[data-testid=timeline]")
    assert timeline.get_attribute("data-level") == "2"
    assert timeline.get_attribute("data-buckets") == first["resolution"]
    page.wait_for_function("() => document.querySelector('[data-testid=stats]').innerText.includes('steps')")
    stats = page.inner_text("[data-testid=stats]")
    assert f"2 · {int(first['resolution']):,} buckets of" in stats and "one per screen pixel" in stats, stats
    assert "picked by auto" not in stats
    label = page.inner_text("[data-testid=level-select] option[value='2']")
    assert label == f"2 — {int(first['resolution']):,} buckets, fit to the screen, long args cut", label

    # what it saves: the same view without the resolution is level 2's 20,000 buckets
    with_res = json_bytes(page, seen.traces[0])
    without_res = json_bytes(page, without(seen.traces[0], "resolution"))
    assert with_res * 2 < without_res, (with_res, without_res)
    print(f"\ndefault view JSON: {with_res:,} B with resolution={first['resolution']}, {without_res:,} B without")

    # a link from the default view names no level (the receiver's is a default view too);
    # the download is level 2's own, as the command line writes it
    share = query(page.get_attribute("[data-testid=share-link]", "href"))
    assert "level" not in share and "resolution" not in share and share["run"] == RUN, share
    download = query(page.get_attribute("[data-testid=download-link]", "href"))
    assert download["level"] == "2" and "resolution" not in download, download
    assert "level" not in query(page.url)  # the view page's own address follows the same rule

    page.wait_for_timeout(150)  # a frame after the data arrived
    pixels = page.evaluate(CANVAS_PIXELS_JS)
    assert pixels["ink"] > 0.03 * pixels["total"], pixels
    page.screenshot(path=str(DEFAULT_SHOT))
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(DEFAULT_SHOT, ARTIFACTS / DEFAULT_SHOT.name)

    # a zoom asks the same resolution for the new window: finer buckets, detail comes back
    whole_bucket = page.evaluate("() => window.tbReduceDashboard.data.bucketUs")
    with page.expect_request(lambda r: is_trace(r, level="2") and "start_us" in query(r.url), timeout=60_000) as req:
        zoom_in(page)
    q = query(req.value.url)
    assert q["resolution"] == first["resolution"]
    wait_loaded(page, timeout=60_000)
    page.wait_for_function("() => !window.tbReduceDashboard.data.full")
    data = page.evaluate("() => { const d = window.tbReduceDashboard.data; return {bucketUs: d.bucketUs, window: d.window}; }")
    assert data["bucketUs"] * 2 < whole_bucket, (data, whole_bucket)  # a window is 3× a view 6× or more narrower
    page.wait_for_timeout(150)
    assert page.evaluate(CANVAS_PIXELS_JS)["ink"] > 1000
    page.screenshot(path=str(ZOOMED_SHOT))
    shutil.copyfile(ZOOMED_SHOT, ARTIFACTS / ZOOMED_SHOT.name)


def test_picking_level_2_explicitly_sends_no_resolution(page, server):
    seen = open_view(page, server, run=RUN, host=HOST)
    assert "resolution" in query(seen.traces[0])
    with page.expect_request(lambda r: is_trace(r, level="2")) as req:
        page.select_option("[data-testid=level-select]", "2")  # the same level, now explicit
    assert "resolution" not in query(req.value.url)
    page.wait_for_function("() => document.querySelector('[data-testid=timeline]').dataset.buckets === '20000'"
                           " && document.querySelector('[data-testid=timeline]').dataset.loading === '0'",
                           timeout=60_000)
    stats = [query(u) for u in seen.stats[1:] if query(u)["level"] == "2"]
    assert stats and all("resolution" not in q for q in stats)
    assert "one per screen pixel" not in page.inner_text("[data-testid=stats]")
    assert page.inner_text("[data-testid=level-select] option[value='2']") == "2 — 20,000 buckets, long args cut"
    # the link now names the level it chose; a zoom still sends none
    assert query(page.get_attribute("[data-testid=share-link]", "href"))["level"] == "2"
    with page.expect_request(lambda r: is_trace(r, level="2") and "start_us" in query(r.url), timeout=60_000) as z:
        zoom_in(page)
    assert "resolution" not in query(z.value.url)


def test_a_link_from_the_default_view_reopens_as_a_default_view(page, server, browser):
    open_view(page, server, run=RUN, host=HOST)
    link = page.get_attribute("[data-testid=share-link]", "href")
    other = browser.new_context(viewport={"width": 1000, "height": 700}).new_page()
    try:
        seen = Requests(other)
        other.goto(link)
        wait_loaded(other, timeout=120_000)
        q = query(seen.traces[0])
        screen = other.evaluate(SCREEN_PX_JS)
        assert q["level"] == "2" and abs(int(q["resolution"]) - screen["px"]) <= 1, (q, screen)
        assert int(q["resolution"]) <= 1000  # the receiver's own, narrower screen, not the sender's
        assert other.input_value("[data-testid=level-select]") == "2"
    finally:
        other.context.close()


def test_a_zoom_at_auto_asks_the_same_resolution_for_the_new_window(page, server):
    seen = open_view(page, server, run=RUN, host=HOST, level="auto")
    resolution = query(seen.traces[0])["resolution"]
    box = page.locator("[data-testid=timeline] canvas").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + 120)
    with page.expect_request(lambda r: urlparse(r.url).path.endswith(TRACE_PATH) and "start_us" in query(r.url),
                             timeout=60_000) as req:
        for _ in range(6):
            page.mouse.wheel(0, -400)
            page.wait_for_timeout(30)
    q = query(req.value.url)
    assert q["level"] == "auto" and q["resolution"] == resolution
    wait_loaded(page, timeout=60_000)
    view = page.evaluate("() => window.tbReduceDashboard.timeline.getView()")
    assert float(q["start_us"]) <= view[0] and float(q["end_us"]) >= view[1]
    page.wait_for_timeout(150)
    assert page.evaluate(CANVAS_PIXELS_JS)["ink"] > 1000


def test_an_explicit_level_sends_no_resolution_and_auto_sends_it_again(page, server):
    seen = open_view(page, server, run=RUN, host=HOST, level="auto")
    auto_bytes = json_bytes(page, seen.traces[0])
    with page.expect_request(lambda r: urlparse(r.url).path.endswith(TRACE_PATH) and query(r.url)["level"] == "2"
                             ) as req:
        page.select_option("[data-testid=level-select]", "2")
    assert "resolution" not in query(req.value.url)
    wait_loaded(page, level="2", timeout=60_000)
    stats = [query(u) for u in seen.stats if query(u)["level"] == "2"]
    assert stats and all("resolution" not in q for q in stats)
    level2_bytes = json_bytes(page, req.value.url)
    assert auto_bytes < level2_bytes, (auto_bytes, level2_bytes)  # the screen's buckets beat level 2's 20,000 too
    with page.expect_request(lambda r: urlparse(r.url).path.endswith(TRACE_PATH) and query(r.url)["level"] == "auto"
                             ) as again:
        page.select_option("[data-testid=level-select]", "auto")
    assert "resolution" in query(again.value.url)


def test_a_link_with_an_explicit_level_sends_none(page, server):
    seen = open_view(page, server, run=RUN, host=HOST, level="3")
    assert seen.traces and all("resolution" not in query(u) for u in seen.traces)
    assert all("resolution" not in query(u) for u in seen.stats if query(u)["level"] == "3")


def test_a_hidpi_screen_asks_for_its_device_pixels(browser, server):
    context = browser.new_context(viewport={"width": 1000, "height": 700}, device_scale_factor=2)
    errors: list[str] = []
    try:
        pg = context.new_page()
        pg.on("pageerror", lambda e: errors.append(str(e)))
        seen = open_view(pg, server, run=RUN, host=HOST, level="auto")
        screen = pg.evaluate(SCREEN_PX_JS)
        assert screen["dpr"] == 2
        assert abs(int(query(seen.traces[0])["resolution"]) - screen["px"]) <= 1, (seen.traces[0], screen)
        assert int(query(seen.traces[0])["resolution"]) > 1800  # twice the CSS width, near enough
    finally:
        context.close()
    assert not errors, errors
