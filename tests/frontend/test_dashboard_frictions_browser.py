"""Issue 25: the dashboard's interaction frictions, in a real headless Chromium against a
real TensorBoard serving copies of the bundled real PyTorch profiles.

1. A view that reaches past the trace's start or end (a search hit near t=0, framed with its
   span on each side) is covered by a fetch clipped to the trace: it must not be fetched
   again and again (it was: 140 status changes in 20 s, the server reducing all the while).
2. W/A/S/D over the timeline move the timeline, never the run picker that still has focus
   (its type-ahead switched the run on D).
3. A tab opened on a logdir with no traces yet shows the first one once it lands, without a
   reload; new runs appear in the picker while a view stays as it is.
4. The toolbar does not reflow when the level select's label changes length.

Screenshots go to /tmp/shots-timeline/ (and test-artifacts/) for a person to look at.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from urllib.parse import urlencode

import pytest
from dashboard_support import ARTIFACTS, CHROMIUM, ROOT, TensorBoardServer, checked_page, wait_loaded

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: install the Debian package `chromium` (CI does)", allow_module_level=True)
STALLED = ROOT / "demo_logdir" / "stalled_step"
PYTORCH = ROOT / "demo_logdir" / "pytorch_cnn"
if not STALLED.is_dir() or not PYTORCH.is_dir():
    pytest.skip("demo_logdir/ is incomplete (bench/make_demo_logdir.py makes it)", allow_module_level=True)
pytest.importorskip("playwright.sync_api")
from playwright.sync_api import TimeoutError as PlaywrightTimeout  # noqa: E402

SHOTS = Path("/tmp/shots-timeline")
# Hits at the trace's start, framed (their span again on each side, 20 µs at least) into a view
# that starts before the trace's first event and is far narrower than the trace, so it is fetched:
# stalled_step's profiler instant at t=0 (a 20 µs view of a 997 ms trace), and pytorch_cnn's
# `_transit_action`, 127 µs after the start and 3.5 ms long (an 11 ms view of a 487 ms trace).
RUN, HOST, START_INSTANT = "stalled_step", "torch_stalled_step", "Iteration Start: PyTorch Profiler"
CNN_RUN, CNN_HOST, CNN_NEAR_START = "pytorch_cnn", "vm_12922.1795977935943642718", "profiler.py(1262): _transit_action"
DDP_RUN = "ddp_two_ranks"
# How long a page is watched for fetches nobody asked for (the loop refetched every ~150 ms).
WATCH_MS = 4000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("frictions")
    shutil.copytree(STALLED, root / "logdir" / RUN)
    shutil.copytree(PYTORCH, root / "logdir" / CNN_RUN)
    # a run whose name starts with D, as `pytorch_cnn` is followed by `stalled_step` (S): the run
    # select's type-ahead would jump to them on D and S
    shutil.copytree(ROOT / "demo_logdir" / "ddp_two_ranks", root / "logdir" / DDP_RUN)
    tb = TensorBoardServer(root / "logdir", root / "cache")
    try:
        yield tb
    finally:
        tb.stop()


def shot(page, name: str) -> Path:
    """A screenshot into /tmp/shots-timeline/, copied to test-artifacts/."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    ARTIFACTS.mkdir(exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    shutil.copyfile(path, ARTIFACTS / path.name)
    return path


def settle(page) -> None:
    """Until the panels above the timeline have filled in and the canvas stops moving."""
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


def open_view(page, server, run: str = RUN, host: str | None = HOST, **params) -> None:
    query = {"run": run, **({"host": host} if host else {}), **params}
    page.goto(server.plugin_url(f"view?{urlencode(query)}"))
    wait_loaded(page)
    settle(page)


class ViewFetches:
    """The requests a page sends to the plugin's `trace` route (the reduced view; the loader's
    worker sends them, and Playwright reports a dedicated worker's requests on its page)."""

    def __init__(self, page) -> None:
        self.urls: list[str] = []
        page.on("request", lambda r: self.urls.append(r.url) if "/data/plugin/tb_reduce/trace?" in r.url else None)

    def since(self, mark: int) -> list[str]:
        return self.urls[mark:]


def extent_of(page) -> list[float]:
    return page.evaluate("() => { const a = window.tbReduceDashboard; return a.extents.get(a.key()); }")


def view_of(page) -> list[float]:
    return page.evaluate("() => window.tbReduceDashboard.timeline.getView()")


def enter_on_hit(page, query: str) -> None:
    """Types `query` in the search box (a single hit) and steps to it with Enter."""
    page.fill("[data-testid=search-input]", query)
    page.locator("[data-testid=search-count]").filter(has_text=re.compile(r"^1 hit\b")).wait_for()
    page.press("[data-testid=search-input]", "Enter")
    page.wait_for_function("() => window.tbReduceDashboard.queryState().currentHit !== null")


@pytest.mark.parametrize(("run", "host", "query"), [(RUN, HOST, START_INSTANT), (CNN_RUN, CNN_HOST, CNN_NEAR_START)])
def test_enter_on_a_search_hit_at_the_trace_start_fetches_at_most_twice(server, browser, run, host, query):
    with checked_page(browser) as page:
        fetches = ViewFetches(page)
        open_view(page, server, run=run, host=host)
        mark = len(fetches.urls)
        enter_on_hit(page, query)
        ext, view = extent_of(page), view_of(page)
        assert view[0] < ext[0], (view, ext)  # the framed hit reaches past the trace's start: the case at hand
        page.wait_for_timeout(WATCH_MS)
        asked = fetches.since(mark)
        assert 1 <= len(asked) <= 2, (asked, fetches.urls)
        wait_loaded(page)
        state = page.evaluate("() => window.tbReduceDashboard.queryState()")
        assert query in state["selected"]["name"]
        shot(page, f"hit_at_start_{run}")


def test_a_linked_view_entirely_before_or_after_the_trace_fetches_at_most_twice(server, browser):
    with checked_page(browser) as page:
        open_view(page, server)
        ext = extent_of(page)
        span = ext[1] - ext[0]
        for name, window in (("before", (ext[0] - 3 * span, ext[0] - 2 * span)), ("after", (ext[1] + span, ext[1] + 1.5 * span))):
            fetches = ViewFetches(page)
            query = {"run": RUN, "host": HOST, "start_us": window[0], "end_us": window[1]}
            page.goto(server.plugin_url(f"view?{urlencode(query)}"))
            wait_loaded(page)
            page.wait_for_timeout(WATCH_MS)
            assert 1 <= len(fetches.urls) <= 2, (name, fetches.urls)
            shot(page, f"view_{name}_the_trace")


@pytest.mark.parametrize("level", ["2", "0"])
def test_a_zoom_past_the_finest_level_at_the_trace_start_fetches_at_most_twice(server, browser, level):
    with checked_page(browser) as page:
        fetches = ViewFetches(page)
        open_view(page, server, level=level)
        ext = extent_of(page)
        mark = len(fetches.urls)
        # 1 ns (the timeline's narrowest) centred on the first event: half of it before the trace
        page.evaluate("(t) => window.tbReduceDashboard.timeline.setView(t - 5e-4, t + 5e-4)", ext[0])
        page.wait_for_timeout(WATCH_MS)
        assert len(fetches.since(mark)) <= 2, fetches.since(mark)
        wait_loaded(page)
        # and W held there (zooming further in than the timeline goes) asks nothing more
        mark = len(fetches.urls)
        box = page.locator("[data-testid=timeline] canvas").bounding_box()
        page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
        page.keyboard.down("w")
        page.wait_for_timeout(500)
        page.keyboard.up("w")
        page.wait_for_timeout(WATCH_MS)
        assert len(fetches.since(mark)) <= 2, fetches.since(mark)
        shot(page, f"zoom_past_finest_level{level}")


# Every view a user can reach and more (before, across and after the trace, 1 ns to twice the
# trace, on an epoch-µs clock and on one from zero), each level, through the real policy module:
# the fetch loop the dashboard runs (fetch when needsFetch, ask fetchWindow, answer as the server
# does: the asked window, or the whole trace) settles after at most one fetch.
POLICY_SWEEP_JS = """
async (url) => {
  const {needsFetch, fetchWindow} = await import(url);
  const RESOLUTION = {0: null, 1: 100000, 2: 20000, 3: 5000, 4: 1000};
  const plotWidth = 1220, screen = 1400;
  const answer = (asked, extent, level) => {
    const window = asked || extent.slice();
    const r = RESOLUTION[level] === null ? null : Math.min(RESOLUTION[level], screen);
    return {window, full: asked === null, level, bucketUs: r ? (window[1] - window[0]) / r : 0};
  };
  const worst = [];
  for (const extent of [[5237674687000.244, 5237675683935.975], [0, 996935.73], [134.5, 20134.5]]) {
    const T = extent[1] - extent[0];
    for (const span of [1e-3, 0.02, 20, 0.01 * T, 0.3 * T, T, 2 * T]) {
      for (const mid of [extent[0] - 2 * span, extent[0] - span / 2, extent[0], extent[0] + span / 4, (extent[0] + extent[1]) / 2,
                         extent[1] - span / 4, extent[1], extent[1] + span / 2, extent[1] + 2 * span]) {
        const view = [mid - span / 2, mid + span / 2];
        for (const level of [0, 1, 2, 3, 4]) {
          for (const start of [null, answer(null, extent, level)]) {
            let data = start;
            let n = 0;
            while (n < 10 && needsFetch(view, data, plotWidth, extent)) {
              data = answer(fetchWindow(view, extent), extent, level);
              n += 1;
            }
            if (n > 1) worst.push({extent, span, mid, level, start: !!start, fetches: n});
          }
        }
      }
    }
  }
  return worst;
}
"""


def test_no_view_fetches_more_than_once_before_it_is_covered(server, browser):
    with checked_page(browser) as page:
        page.goto(server.plugin_url("view"))  # the module is the page's own, served as the dashboard loads it
        worst = page.evaluate(POLICY_SWEEP_JS, server.plugin_url("static/policy.js"))
        assert worst == [], worst[:10]


def run_select_state(page) -> dict:
    return page.evaluate("""() => ({run: document.querySelector('[data-testid=run-select]').value,
      focused: document.activeElement && document.activeElement.dataset.testid || null,
      view: window.tbReduceDashboard.timeline.getView(), shown: window.tbReduceDashboard.sel.run})""")


def test_timeline_keys_over_the_timeline_move_it_and_never_switch_the_focused_run_select(server, browser):
    with checked_page(browser) as page:
        open_view(page, server)
        # pick a run with the select, as a user does (the select keeps the focus afterwards)
        page.focus("[data-testid=run-select]")
        page.select_option("[data-testid=run-select]", CNN_RUN)
        wait_loaded(page)
        settle(page)
        assert run_select_state(page)["focused"] == "run-select"
        box = page.locator("[data-testid=timeline] canvas").bounding_box()
        page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] * 0.5)
        page.keyboard.press("w")  # zoom in first: a pan of the whole trace is clamped to it
        for key in ("w", "a", "d", "s", "d"):  # no pan right after a zoom out, which may reach the trace's edge
            before = run_select_state(page)
            page.keyboard.press(key)
            try:  # the timeline moves on its next frames (a loaded machine draws them late)
                page.wait_for_function("v => window.tbReduceDashboard.timeline.getView().some((x, i) => x !== v[i])",
                                       arg=before["view"], timeout=10000)
            except PlaywrightTimeout:
                pass  # said by the assertion below
            after = run_select_state(page)
            assert after["run"] == CNN_RUN and after["shown"] == CNN_RUN, (key, after)
            assert after["view"] != before["view"], (key, before, after)  # the timeline moved
            assert after["focused"] == "run-select", key  # the keys went by the select, not through it
        # the dashboard's own shortcuts too: ? opens the help over the focused select
        page.keyboard.press("?")
        assert page.locator("[data-testid=keys-help]").is_visible()
        shot(page, "keys_over_timeline_with_select_focused")
        page.keyboard.press("Escape")
        # with the pointer away from the timeline the select is the user's again (its type-ahead works)
        page.mouse.move(5, 5)
        page.focus("[data-testid=run-select]")
        page.keyboard.press("d")
        assert run_select_state(page)["run"] == DDP_RUN


@pytest.fixture
def empty_server(tmp_path):
    """TensorBoard on a logdir with no trace yet (the tab is opened before the first one lands)."""
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    tb = TensorBoardServer(logdir, tmp_path / "cache")
    try:
        yield tb, logdir
    finally:
        tb.stop()


def test_a_tab_opened_on_an_empty_logdir_shows_the_first_trace_and_new_runs_without_a_reload(empty_server, browser):
    tb, logdir = empty_server
    with checked_page(browser) as page:
        listings: list[int] = []
        page.on("response", lambda r: listings.append(r.status) if r.url.endswith("/tb_reduce/runs") else None)
        page.goto(f"{tb.base}/#tb_reduce")  # the tab in TensorBoard, as the user had it open
        frame = page.wait_for_selector("iframe", timeout=30000).content_frame()
        frame.get_by_text("No profiler traces found").wait_for()
        frame.evaluate("() => { window.__sameDocument = true; }")  # gone if the tab reloads
        shot(page, "empty_logdir_before")
        shutil.copytree(STALLED, logdir / RUN)
        # the catalog walks the logdir every 5 s, the tab asks every 2 s while it shows nothing
        wait_loaded(frame, timeout=60000)
        settle(frame)
        assert frame.evaluate("() => window.__sameDocument === true")
        assert run_select_state(frame)["run"] == RUN
        assert frame.locator(".tbr-message").is_hidden()
        shot(page, "empty_logdir_first_trace_landed")

        # a new run later appears in the picker, and the view the user zoomed to stays
        frame.evaluate("() => { const t = window.tbReduceDashboard.timeline; const [a, b] = t.getView();"
                       " t.setView(a + (b - a) * 0.4, a + (b - a) * 0.5); }")
        wait_loaded(frame)
        frame.wait_for_timeout(500)
        view = view_of(frame)
        shutil.copytree(PYTORCH, logdir / CNN_RUN)
        frame.wait_for_function("(run) => Array.from(document.querySelectorAll('[data-testid=run-select] option'),"
                                " (o) => o.value).includes(run)", arg=CNN_RUN, timeout=60000)
        after = run_select_state(frame)
        assert after["run"] == RUN and after["shown"] == RUN
        assert view_of(frame) == view
        assert frame.evaluate("() => window.__sameDocument === true")
        assert 304 in listings, listings  # an unchanged list is a 304 (the route's ETag), not the list again
        shot(page, "empty_logdir_second_run_listed")


def test_the_run_list_is_not_asked_while_the_page_is_hidden_and_at_once_when_shown(server, browser):
    with checked_page(browser) as page:
        asked: list[str] = []
        page.on("request", lambda r: asked.append(r.url) if r.url.endswith("/tb_reduce/runs") else None)
        open_view(page, server)
        # hide the page as a background tab is (what Chromium's document.hidden would say)
        page.evaluate("""() => {
          Object.defineProperty(document, 'hidden', {configurable: true, get: () => window.__hidden === true});
          window.__hidden = true;
          document.dispatchEvent(new Event('visibilitychange'));
        }""")
        page.wait_for_timeout(500)
        n = len(asked)
        page.wait_for_timeout(11000)  # two turns of the 5 s poll
        assert len(asked) == n, asked[n:]
        # shown again: a request is on its way at once (the poller's tick runs in the event), not after a turn
        on_its_way = page.evaluate("""() => {
          window.__hidden = false;
          document.dispatchEvent(new Event('visibilitychange'));
          return window.tbReduceDashboard.poller.controller !== null;
        }""")
        assert on_its_way
        page.wait_for_timeout(1000)
        assert len(asked) == n + 1, asked[n:]


TOOLBAR_JS = """() => {
  const bar = document.querySelector('.tbr-bar');
  const level = document.querySelector('[data-testid=level-select]');
  const after = [...bar.querySelectorAll('input, select, button, a')].filter((n) => n.offsetParent !== null
    && (level.compareDocumentPosition(n) & Node.DOCUMENT_POSITION_FOLLOWING));
  const r = (n) => { const b = n.getBoundingClientRect(); return [Math.round(b.left), Math.round(b.top), Math.round(b.width)]; };
  return {height: Math.round(bar.getBoundingClientRect().height), level: r(level),
          label: level.options[level.selectedIndex].textContent,
          after: after.map((n) => [n.dataset.testid || n.textContent.trim() || n.tagName, ...r(n)])};
}"""


@pytest.mark.parametrize("width", [1400, 1000])
def test_the_toolbar_keeps_its_height_and_controls_in_place_when_the_level_label_changes(server, browser, width):
    with checked_page(browser, width=width) as page:
        open_view(page, server)  # the default level: its label names the screen's bucket count
        seen = [page.evaluate(TOOLBAR_JS)]
        shot(page, f"toolbar_{width}_default")
        for level in ("4", "0", "auto", "2"):  # explicit picks: the labels are the levels' own
            page.select_option("[data-testid=level-select]", level)
            wait_loaded(page)
            seen.append(page.evaluate(TOOLBAR_JS))
        shot(page, f"toolbar_{width}_level2_picked")
        labels = {s["label"] for s in seen}
        assert len({len(label) for label in labels}) >= 3, labels  # the labels did change length
        first = seen[0]
        for s in seen[1:]:
            assert s["height"] == first["height"], (s["label"], s["height"], first["height"])
            assert s["level"] == first["level"], (s["label"], s["level"], first["level"])
            assert s["after"] == first["after"], (s["label"], s["after"], first["after"])
