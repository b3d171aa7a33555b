"""Search, range statistics, the details' times and event links (issue 13), in a real
headless Chromium against a real TensorBoard serving a copy of the bundled real PyTorch
profiles (`demo_logdir/stalled_step`: 8 training steps, step 5 stalled; `pytorch_cnn`).

The search box asks the server's `search` route (the whole index, folded events included),
steps through the hits (zoom, select, details with both times), marks a hit folded into a
summary inside that summary; shift+drag asks `aggregate` for exact per-name statistics
in a sortable table; a shared link carries the selected event. Screenshots go to the
test's tmp_path and to /tmp/shots13/ for a person to look at.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
from dashboard_support import ARTIFACTS, CHROMIUM, ROOT, TensorBoardServer, checked_page, dashboard_state, wait_loaded

STALLED = ROOT / "demo_logdir" / "stalled_step"
PYTORCH = ROOT / "demo_logdir" / "pytorch_cnn"

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: install the Debian package `chromium` (CI does)", allow_module_level=True)
if not STALLED.is_dir() or not PYTORCH.is_dir():
    pytest.skip("demo_logdir/ is incomplete (bench/make_demo_logdir.py makes it)", allow_module_level=True)
pytest.importorskip("playwright.sync_api")

RUN = "stalled_step"
HOST = "torch_stalled_step"
STEPS = "ProfilerStep"  # PyTorch's step markers: 8, each ~100 ms, kept at every level
FOLDED = "aten::threshold_backward"  # 8 of ~0.1-1 ms: at level 4 over the whole trace, most are folded
SHOTS13 = Path("/tmp/shots13")
QS = "() => window.tbReduceDashboard.queryState()"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("search")
    shutil.copytree(STALLED, root / "logdir" / RUN)
    shutil.copytree(PYTORCH, root / "logdir" / "pytorch_cnn")
    tb = TensorBoardServer(root / "logdir", root / "cache")
    try:
        yield tb
    finally:
        tb.stop()


@pytest.fixture
def page(browser):
    """A 1400×900 page failing the test on uncaught errors and on console errors."""
    with checked_page(browser) as pg:
        console: list[str] = []

        pg.expected_errors = []  # URL parts of requests a test makes fail on purpose

        def on_console(m) -> None:
            where = (m.location or {}).get("url", "")
            if m.type != "error" or where.endswith("/favicon.ico"):  # the browser's own ask, not the page's
                return
            if m.text.startswith("Failed to load resource") and any(part in where for part in pg.expected_errors):
                return
            console.append(f"{m.text} ({where})")

        pg.on("console", on_console)
        yield pg
        assert not console, f"console errors: {console}"


def shot(target, tmp_path: Path, name: str) -> Path:
    """A screenshot into tmp_path, copied to /tmp/shots13/ and test-artifacts/."""
    path = tmp_path / f"{name}.png"
    target.screenshot(path=str(path))
    for folder in (SHOTS13, ARTIFACTS):
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, folder / path.name)
    return path


def open_view(page, server, **params):
    page.goto(server.plugin_url(f"view?{urlencode({'run': RUN, 'host': HOST, **params})}"))
    wait_loaded(page)
    settle(page)
    return page


def settle(page) -> None:
    """Until the timeline stops moving on the page: the waveform panel and the step strip above
    it fill in after the trace, and a pointer gesture aimed before that would land elsewhere."""
    page.wait_for_function("""() => ['waveforms', 'steps'].every((id) => {
      const node = document.querySelector(`[data-testid=${id}]`);
      return !node || !['idle', 'loading'].includes(node.dataset.state);
    })""", timeout=30000)
    last = None
    for _ in range(40):
        box = page.locator("[data-testid=timeline] canvas").bounding_box()
        if box == last:
            return
        last = box
        page.wait_for_timeout(250)


def search_route(server, q: str) -> dict:
    status, body = server.get_json(f"search?{urlencode({'run': RUN, 'host': HOST, 'q': q, 'icase': 1, 'limit': 1000})}")
    assert status == 200, body
    return body


def type_query(page, q: str, total: int) -> None:
    page.fill("[data-testid=search-input]", q)
    count = page.locator("[data-testid=search-count]")
    count.filter(has_text=re.compile(rf"^{total:,} hits?\b")).wait_for()


def qs(page) -> dict:
    return page.evaluate(QS)


def wait_current(page, index: int) -> dict:
    """Until the search stands on hit `index` and the view it zoomed to is loaded."""
    page.wait_for_function(f"() => {QS[6:]}.search.current === {index}")
    page.wait_for_timeout(250)  # the view's fetch starts after a debounce
    wait_loaded(page)
    return qs(page)


def wait_drawn(page, state: dict) -> dict:
    """Until the view loaded around the current hit draws it as itself, selected."""
    i = state["search"]["hit"]["i"]
    page.wait_for_function(f"""() => {{ const q = {QS[6:]};
      return q.selected && q.selected.input === {i} && q.resolved && q.resolved.state === 'kept'
        && q.timelineSelected !== null; }}""", timeout=30000)
    view = dashboard_state(page)
    hit = state["search"]["hit"]
    assert view["start"] <= hit["ts"] <= view["end"], (view, hit)
    return qs(page)


def times_of(page, ts: float) -> tuple[str, str]:
    """The details' two times of absolute `ts`: seconds from the trace's start, and the trace's µs."""
    origin = page.evaluate("() => window.tbReduceDashboard.origin()")
    return f"{(ts - origin) / 1e6:.6f} s", f"{round(ts * 1000) / 1000!r} µs"


def test_search_counts_zooms_selects_and_cycles_at_level_4(page, server, tmp_path):
    answer = search_route(server, STEPS)
    assert answer["total"] == 8, answer
    open_view(page, server, level="4")
    type_query(page, STEPS, 8)
    assert page.get_attribute("[data-testid=search-input]", "aria-label")
    assert qs(page)["highlighted"] == 8

    page.press("[data-testid=search-input]", "Enter")
    state = wait_current(page, 0)
    hit = state["search"]["hit"]
    assert hit["i"] == answer["hits"][0]["i"] and hit["name"] == "ProfilerStep#0"
    view = dashboard_state(page)
    assert view["start"] <= hit["ts"] <= view["end"], (view, hit)
    assert view["end"] - view["start"] < 0.9 * (answer["hits"][-1]["ts"] - answer["hits"][0]["ts"])  # zoomed in
    assert view["end"] - view["start"] >= hit["dur"]  # with room around it
    page.wait_for_function(f"() => {QS[6:]}.timelineSelected !== null")
    state = qs(page)
    assert state["selected"]["input"] == hit["i"] and state["resolved"]["state"] == "kept"
    assert page.inner_text("[data-testid=search-count]").startswith("1 of 8 hits")
    details = page.locator("[data-testid=details]")
    details.get_by_text("Arguments").wait_for()
    rel, absolute = times_of(page, hit["ts"])
    assert page.inner_text("[data-testid=details] h3") == hit["name"]
    assert page.inner_text("[data-testid=details] dd[data-key=start]") == rel
    assert page.inner_text("[data-testid=details] dd[data-key=ts]") == absolute
    shot(page, tmp_path, "search_step_selected")

    # each step zooms to its hit, which the view loaded there draws as itself, selected
    page.click("[data-testid=search-next]")
    assert wait_drawn(page, wait_current(page, 1))["search"]["hit"]["name"] == "ProfilerStep#1"
    page.press("[data-testid=search-input]", "Shift+Enter")
    assert wait_drawn(page, wait_current(page, 0))["search"]["hit"]["name"] == "ProfilerStep#0"
    page.press("[data-testid=search-input]", "Shift+Enter")  # wraps around to the last
    last = wait_drawn(page, wait_current(page, 7))
    assert last["search"]["hit"]["name"] == "ProfilerStep#7"
    assert page.inner_text("[data-testid=search-count]").startswith("8 of 8 hits")
    page.press("[data-testid=search-input]", "Enter")  # and forward past the last, to the first
    assert wait_drawn(page, wait_current(page, 0))["search"]["hit"]["name"] == "ProfilerStep#0"

    # the case toggle asks again, case-sensitively: no step marker is spelt in lower case
    with page.expect_request(lambda r: "/search?" in r.url and "icase=0" in r.url):
        page.click("[data-testid=search-case]")
    page.locator("[data-testid=search-count]").filter(has_text="hits").wait_for()
    page.fill("[data-testid=search-input]", STEPS.lower())
    page.locator("[data-testid=search-count]").filter(has_text=re.compile("^no hits$")).wait_for()
    assert page.get_attribute("[data-testid=search-case]", "aria-pressed") == "true"


def test_a_folded_hit_is_marked_inside_its_summary_and_said_so(page, server, tmp_path):
    answer = search_route(server, FOLDED)
    total = answer["total"]
    open_view(page, server, level="4")
    type_query(page, FOLDED, total)
    page.wait_for_timeout(150)  # one frame
    found = page.evaluate("""() => {
      const d = window.tbReduceDashboard, tl = d.timeline, m = tl.model, s = m.slices;
      return d.search.loadedHits().map((h) => {
        const r = tl.resolve(h);
        const out = {i: h.i, state: r.state};
        if (r.state === 'folded') {
          out.summary = !!(s.flags[r.index] & 1);
          out.covers = s.ts[r.index] + m.origin <= h.ts + 1e-3 && h.ts <= s.ts[r.index] + s.dur[r.index] + m.origin + 1e-3;
          const x = tl.gutter + (h.ts - tl.view[0]) * tl.plotWidth() / (tl.view[1] - tl.view[0]) + 1.5;
          const y = tl.rowTop(r.track, s.depth[r.index]) + 8;
          const px = tl.ctx.getImageData(Math.round(x * tl.dpr), Math.round(y * tl.dpr), 1, 1).data;
          out.pixel = [px[0], px[1], px[2]];
        }
        return out;
      });
    }""")
    assert len(found) == total
    folded = [f for f in found if f["state"] == "folded"]
    assert folded, found  # at level 4 over the whole trace, these ~0.1 ms ops are folded
    assert any(f["state"] == "kept" for f in found), found  # the longest one is kept as itself
    for f in folded:
        assert f["summary"] and f["covers"], f
        r, g, b = f["pixel"]
        assert r > 200 and 130 < g < 200 and b < 90, f  # the highlight's amber marker, over the grey hatch
    shot(page, tmp_path, "search_highlights")

    # While the zoomed view is on its way, the current hit is still folded in the view shown: the
    # details say so; once the zoomed view arrives, the hit is drawn as itself and selected.
    held = []
    page.route("**/data/plugin/tb_reduce/trace?*", lambda route: held.append(route))
    first_folded = next(j for j, f in enumerate(found) if f["state"] == "folded")
    for _ in range(first_folded + 1):
        page.press("[data-testid=search-input]", "Enter")
    page.wait_for_function(f"() => {QS[6:]}.search.current === {first_folded}")
    note = page.locator("[data-testid=fold-note]")
    note.wait_for(state="visible")
    assert "Folded into a summary at level 4 — zoom in or pick level 0" in note.inner_text()
    assert qs(page)["resolved"]["state"] == "folded"
    shot(page, tmp_path, "search_folded_hit")
    page.unroute("**/data/plugin/tb_reduce/trace?*")
    for route in held:
        try:
            route.continue_()
        except Exception:  # the dashboard dropped it for a newer one
            pass
    page.wait_for_function(f"() => {QS[6:]}.resolved && {QS[6:]}.resolved.state === 'kept'", timeout=30000)
    wait_loaded(page)
    state = qs(page)
    assert state["timelineSelected"] is not None and state["selected"]["input"] == found[first_folded]["i"]
    assert note.is_hidden()


def shift_drag(page, x0: float, x1: float, y: float) -> None:
    page.keyboard.down("Shift")
    page.mouse.move(x0, y)
    page.mouse.down()
    page.mouse.move((x0 + x1) / 2, y, steps=4)
    page.mouse.move(x1, y, steps=4)
    page.mouse.up()
    page.keyboard.up("Shift")


def test_shift_drag_gives_exact_sortable_statistics_and_a_row_searches_its_name(page, server, tmp_path):
    open_view(page, server, level="4")
    before = dashboard_state(page)
    box = page.locator("[data-testid=timeline] canvas").bounding_box()
    gutter = page.evaluate("() => window.tbReduceDashboard.timeline.gutter")
    plot = box["width"] - gutter
    with page.expect_response(lambda r: "/data/plugin/tb_reduce/aggregate?" in r.url) as response:
        shift_drag(page, box["x"] + gutter + 0.15 * plot, box["x"] + gutter + 0.45 * plot, box["y"] + 130)
    assert response.value.status == 200
    table = page.locator("[data-testid=aggregate-table]")
    table.wait_for()
    # a shift+drag selects, it does not pan
    after = dashboard_state(page)
    assert (after["start"], after["end"]) == (before["start"], before["end"])
    assert "Exact over all events in the range, at any level" in table.locator("caption").inner_text()
    state = qs(page)
    t0, t1 = state["range"]
    span = before["end"] - before["start"]
    assert abs((t1 - t0) - 0.3 * span) < 0.02 * span, (t0, t1, span)
    rows = state["rows"]
    assert len(rows) >= 5 and all(r["count"] > 0 for r in rows), rows
    walls = [r["wall_us"] for r in rows]
    assert walls == sorted(walls, reverse=True)  # by wall time first
    # the same answer as the route's for the range the dashboard asked (exact, at any level)
    q = parse_qs(urlparse(response.value.url).query)
    asked = {"run": RUN, "host": HOST, "start_us": q["start_us"][0], "end_us": q["end_us"][0], "limit": 500}
    status, body = server.get_json(f"aggregate?{urlencode(asked)}")
    assert status == 200
    assert sorted((r["name"], r["count"]) for r in body["rows"]) == sorted((r["name"], r["count"]) for r in rows)
    assert page.locator("[data-testid=aggregate] .tbr-agg-row").count() == len(rows)
    shot(page, tmp_path, "range_table")

    page.click("[data-testid=aggregate-sort-count]")
    by_count = qs(page)["rows"]
    counts = [r["count"] for r in by_count]
    assert counts == sorted(counts, reverse=True) and [r["name"] for r in by_count] != [r["name"] for r in rows]
    assert page.get_attribute("th:has([data-testid=aggregate-sort-count])", "aria-sort") == "descending"
    first_row = page.locator("[data-testid=aggregate] .tbr-agg-row").first
    assert first_row.get_attribute("data-name") == by_count[0]["name"]
    page.click("[data-testid=aggregate-sort-count]")
    assert [r["count"] for r in qs(page)["rows"]] == sorted(counts)
    page.click("[data-testid=aggregate-sort-name]")
    names = [r["name"] for r in qs(page)["rows"]]
    assert names == sorted(names, key=lambda n: n.lower()) or names == sorted(names)

    # a row puts its name in the search box and searches it
    name = by_count[0]["name"]
    total = search_route(server, name)["total"]
    page.locator(f"[data-testid=aggregate] .tbr-agg-row[data-name='{name}']").click()
    assert page.input_value("[data-testid=search-input]") == name
    page.locator("[data-testid=search-count]").filter(has_text=re.compile(rf"^{total:,} hits?")).wait_for()
    assert qs(page)["highlighted"] == min(total, 1000)
    shot(page, tmp_path, "range_row_searched")

    # Esc clears the selection, the range and the highlight; the query text stays
    page.press("[data-testid=search-input]", "Enter")
    page.wait_for_function(f"() => {QS[6:]}.selected !== null")
    page.press("[data-testid=search-input]", "Escape")
    state = qs(page)
    assert state["range"] is None and state["selected"] is None and state["highlighted"] == 0
    assert state["currentHit"] is None
    assert page.locator("[data-testid=aggregate]").is_hidden()
    assert page.input_value("[data-testid=search-input]") == name
    assert "Click a slice" in page.inner_text("[data-testid=details]")

    # Esc anywhere (keys.js) does the same, and the close button closes the table too
    shift_drag(page, box["x"] + gutter + 0.5 * plot, box["x"] + gutter + 0.6 * plot, box["y"] + 130)
    table.wait_for()
    page.focus("[data-testid=timeline] canvas")
    page.keyboard.press("Escape")
    page.locator("[data-testid=aggregate]").wait_for(state="hidden")
    assert qs(page)["range"] is None
    shift_drag(page, box["x"] + gutter + 0.5 * plot, box["x"] + gutter + 0.6 * plot, box["y"] + 130)
    table.wait_for()
    page.click("[data-testid=aggregate-close]")
    assert page.locator("[data-testid=aggregate]").is_hidden() and qs(page)["range"] is None


def test_a_shared_link_reopens_with_the_event_selected_and_level_or_run_changes_clear_it(page, server, browser, tmp_path):
    open_view(page, server, level="4")
    type_query(page, "ProfilerStep#5", 1)
    page.press("[data-testid=search-input]", "Enter")
    hit = wait_current(page, 0)["search"]["hit"]
    page.wait_for_timeout(300)  # links follow the view after a debounce
    link = page.get_attribute("[data-testid=share-link]", "href")
    assert parse_qs(urlparse(link).query)["event"] == [str(hit["i"])]

    # marks: `m` toggles one on the selected slice (counted in the toolbar); `f` frames it
    page.focus("[data-testid=timeline] canvas")
    page.keyboard.press("m")  # keys.js → markSelected()
    marks = page.locator("[data-testid=marks]")
    marks.wait_for()
    assert marks.inner_text().strip() == "\u2691 1" and qs(page)["marks"] == [hit["i"]]
    page.get_by_role("button", name="Fit", exact=True).click()
    page.wait_for_timeout(300)
    page.focus("[data-testid=timeline] canvas")
    page.keyboard.press("f")  # keys.js → frameSelected()
    page.wait_for_timeout(300)  # the view's data attributes follow after a debounce
    view = dashboard_state(page)
    assert view["start"] <= hit["ts"] and hit["ts"] + hit["dur"] <= view["end"], (view, hit)
    assert view["end"] - view["start"] <= 3.5 * hit["dur"]

    with checked_page(browser) as other:
        other.goto(link)
        wait_loaded(other, level="4")
        other.wait_for_function(f"() => {QS[6:]}.timelineSelected !== null", timeout=30000)
        state = other.evaluate(QS)
        assert state["selected"]["input"] == hit["i"]
        assert other.evaluate("() => window.tbReduceDashboard.timeline.selected.kind") == "slice"
        other.locator("[data-testid=details]").get_by_text("Arguments").wait_for()
        assert other.inner_text("[data-testid=details] h3") == "ProfilerStep#5"
        # from the trace's start, as the sender's ruler counts: the link's view learns that start
        # late (the ruler counts from the link's window until then), so the expected text is
        # computed once the whole trace's extent is known, never from the interim origin
        other.wait_for_function("() => window.tbReduceDashboard.timeline.extent != null", timeout=30000)
        rel, absolute = times_of(other, hit["ts"])
        assert rel == times_of(page, hit["ts"])[0]  # the sender's ruler counts the same
        assert other.inner_text("[data-testid=details] dd[data-key=ts]") == absolute
        other.wait_for_function("r => document.querySelector('[data-testid=details] dd[data-key=start]').textContent === r",
                                arg=rel)
        shot(other, tmp_path, "share_link_event_selected")
        # the link keeps naming the event while it is selected
        assert parse_qs(urlparse(other.get_attribute("[data-testid=share-link]", "href")).query)["event"] == [str(hit["i"])]

    page.keyboard.press("/")  # keys.js → focusSearch()
    assert page.evaluate("() => document.activeElement.dataset.testid") == "search-input"

    # another level: the details and the selection go (and the link no longer names the event)
    page.select_option("[data-testid=level-select]", "3")
    wait_loaded(page, level="3")
    assert qs(page)["selected"] is None and "Click a slice" in page.inner_text("[data-testid=details]")
    assert "event" not in parse_qs(urlparse(page.get_attribute("[data-testid=share-link]", "href")).query)
    assert qs(page)["marks"] == [hit["i"]]  # marks stay

    # a click selects again; another run clears it, and the query is asked there
    page.press("[data-testid=search-input]", "Enter")
    page.wait_for_function(f"() => {QS[6:]}.selected !== null")
    with page.expect_request(lambda r: "/search?" in r.url and "run=pytorch_cnn" in r.url):
        page.select_option("[data-testid=run-select]", "pytorch_cnn")
    wait_loaded(page)
    state = qs(page)
    assert state["selected"] is None and state["marks"] == [] and "Click a slice" in page.inner_text("[data-testid=details]")
    assert page.input_value("[data-testid=search-input]") == "ProfilerStep#5"


def test_a_clicked_slice_shows_both_times_and_a_bad_regex_says_why(page, server):
    open_view(page, server, level="2")
    where = page.evaluate("n => window.tbReduceDashboard.timeline.locateSlice(n)", "ProfilerStep#2")
    assert where
    with page.expect_response(lambda r: "/data/plugin/tb_reduce/event?" in r.url) as response:
        page.locator("[data-testid=timeline] canvas").click(position={"x": where["x"], "y": where["y"]})
    event = response.value.json()
    page.locator("[data-testid=details]").get_by_text("Arguments").wait_for()
    rel, absolute = times_of(page, event["ts"])
    assert page.inner_text("[data-testid=details] dd[data-key=start]") == rel
    assert page.inner_text("[data-testid=details] dd[data-key=ts]") == absolute
    link = page.get_attribute("[data-testid=share-link]", "href")
    assert parse_qs(urlparse(link).query)["event"] == [str(qs(page)["selected"]["input"])]

    page.expected_errors.append("/search?")  # the bad pattern's 400, which the browser logs
    page.click("[data-testid=search-regex]")
    assert page.get_attribute("[data-testid=search-regex]", "aria-pressed") == "true"
    with page.expect_response(lambda r: "/search?" in r.url and "re=1" in r.url) as bad:
        page.fill("[data-testid=search-input]", "ProfilerStep#(")
    assert bad.value.status == 400
    message = json.loads(bad.value.body())["error"]
    count = page.locator("[data-testid=search-count]")
    count.filter(has_text=message[:20]).wait_for()
    assert page.get_attribute("[data-testid=search-input]", "aria-invalid") == "true"
    page.fill("[data-testid=search-input]", r"ProfilerStep#[0-3]$")
    count.filter(has_text=re.compile("^4 hits$")).wait_for()
    assert page.get_attribute("[data-testid=search-input]", "aria-invalid") is None


def test_steps_away_refetch_once_at_level_4_on_an_epoch_clock(page, server):
    """Stepping zooms and pans: the view must be fetched where it lands (PyTorch's clock is
    ~5e12 µs, where a relative float slack of 1e-6 is 5 s), and once (a level-4 bucket is
    ~3.3 px of a fetched window: asking again while that holds brings the same buckets)."""
    open_view(page, server, level="4")
    urls: list[str] = []
    page.on("request", lambda r: urls.append(r.url) if "/data/plugin/tb_reduce/trace?" in r.url else None)
    extent = dashboard_state(page)
    span = extent["end"] - extent["start"]
    # a 20 ms view at 10 %, then one at 70 %: far outside the first one's data
    for at in (0.1, 0.7):
        t0 = extent["start"] + at * span
        page.evaluate("([a, b]) => window.tbReduceDashboard.timeline.setView(a, b)", [t0, t0 + 20e3])
        page.wait_for_timeout(300)
        wait_loaded(page)
        page.wait_for_timeout(700)  # time for a loop of requests to show
        data = page.evaluate("() => window.tbReduceDashboard.data.window")
        assert data[0] <= t0 and t0 + 20e3 <= data[1], (data, t0)
    assert len(urls) == 2, urls


def test_more_hits_than_a_page_are_paged_in_when_stepped_to(page, server):
    """`aten` matches 1,420 events here: the first answer holds 1,000; stepping back from the
    start goes to the very last hit, asking the route for the page that holds it."""
    answer = search_route(server, "aten")
    total = answer["total"]
    assert total > 1000 and len(answer["hits"]) == 1000
    asked = {"run": RUN, "host": HOST, "q": "aten", "icase": 1, "offset": total - 1, "limit": 1}
    status, last = server.get_json(f"search?{urlencode(asked)}")
    assert status == 200
    open_view(page, server, level="4")
    type_query(page, "aten", total)
    count = page.locator("[data-testid=search-count]")
    assert count.inner_text() == f"{total:,} hits · first 1,000 of {total:,} shown"
    with page.expect_request(lambda r: "/search?" in r.url and "offset=1000" in r.url):
        page.press("[data-testid=search-input]", "Shift+Enter")
    state = wait_current(page, total - 1)
    assert state["search"]["hit"]["i"] == last["hits"][0]["i"]
    assert state["search"]["loaded"] == total and state["highlighted"] == total
    assert count.inner_text() == f"{total:,} of {total:,} hits"
    page.press("[data-testid=search-input]", "Enter")  # wraps to the first, already loaded
    assert wait_current(page, 0)["search"]["hit"]["i"] == answer["hits"][0]["i"]
