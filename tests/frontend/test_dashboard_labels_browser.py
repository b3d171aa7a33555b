"""What the dashboard's labels say about a host's file, in a real headless Chromium against a
real TensorBoard (issue 25): JAX's export is called capped only when JAX's cap cut it, and a
capped one says so in full under the pickers and in its cards, with the XSpace's span; counts
in summary labels are grouped as every count; a file cut mid-event says it is incomplete; the
share page's console has no errors. Screenshots go to /tmp/shots for a person to look at."""

from __future__ import annotations

import gzip
import re
import shutil
from pathlib import Path
from urllib.parse import urlencode

import pytest
from dashboard_support import CHROMIUM, JAX_SMALL, PYTORCH_DEMO, TensorBoardServer, save_shot, wait_loaded
from jax_export_support import record_capped_jax_run

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: install the Debian package `chromium` (CI does)", allow_module_level=True)
if not JAX_SMALL.is_file():
    pytest.skip("../shared/corpus is absent (CI has it)", allow_module_level=True)
pytest.importorskip("playwright.sync_api")
from playwright.sync_api import TimeoutError as PlaywrightTimeout  # noqa: E402

INCOMPLETE = ("incomplete: the file ends mid-event (still being written, or its writer died); "
              "shown up to its last complete event")
GROUPED = r"\d{1,3}(?:,\d{3})*"  # formatCount: "326,585"


@pytest.fixture(scope="module")
def small_server(tmp_path_factory):
    """The corpus's small JAX run (XSpace and its whole export), a real PyTorch trace and a copy of
    it cut mid-event, as a profiler still writing leaves it."""
    root = tmp_path_factory.mktemp("labels")
    logdir = root / "logdir"
    shutil.copytree(JAX_SMALL.parent, logdir / "jax" / "plugins" / "profile" / "r1")
    trace = next(PYTORCH_DEMO.glob("*.pt.trace.json.gz"))
    data = gzip.decompress(trace.read_bytes())
    (logdir / "whole").mkdir()
    (logdir / "whole" / "cnn.pt.trace.json").write_bytes(data)
    cut = data.index(b'"ph"', len(data) * 3 // 5) + 3  # inside an event, after its first key's name
    (logdir / "writing").mkdir()
    (logdir / "writing" / "cnn.pt.trace.json").write_bytes(data[:cut])
    tb = TensorBoardServer(logdir, root / "cache")
    try:
        yield tb
    finally:
        tb.stop()


@pytest.fixture(scope="module")
def capped_server(tmp_path_factory):
    """A real JAX profile past the cap (recorded on the CPU): its export holds its first million events."""
    root = tmp_path_factory.mktemp("capped")
    session = record_capped_jax_run(root / "logdir")
    tb = TensorBoardServer(root / "logdir", root / "cache")
    tb.run = session.name
    try:
        yield tb
    finally:
        tb.stop()


def open_view(page, server, timeout: float = 30000, **params):
    page.goto(server.plugin_url(f"view?{urlencode(params)}"))
    wait_loaded(page, timeout=timeout)
    return page


def selected_option(page) -> str:
    return page.evaluate("() => { const s = document.querySelector('[data-testid=host-select]');"
                         " return s.options[s.selectedIndex].textContent; }")


def card_row(page, card: str, key: str) -> str:
    return page.evaluate("""([card, key]) => {
      const dts = [...document.querySelectorAll(`[data-testid=card-${card}] dt`)];
      const dt = dts.find((d) => d.textContent === key);
      return dt ? dt.nextElementSibling.textContent : null;
    }""", [card, key])


def duration(page, us: float) -> str:
    """The page's own formatDuration, as its cards write durations."""
    return page.evaluate("async (us) => (await import(new URL('static/format.js', document.baseURI))).formatDuration(us)", us)


def test_a_whole_jax_export_is_not_called_capped_and_its_cards_say_whole_trace(page, small_server):
    open_view(page, small_server, run="jax/r1", host="vm.trace.json.gz")
    label = selected_option(page)
    assert label.startswith("vm.trace.json.gz (chrome-json,") and label.endswith(", JAX export, whole)")
    assert "capped" not in label
    assert page.locator("[data-testid=host-notes]").is_hidden()
    assert card_row(page, "out", "window").startswith("whole trace, ")
    save_shot(page, "labels-whole-export")


def test_a_capped_export_says_so_in_full_under_the_pickers_and_its_cards_give_the_xspaces_span(page, capped_server):
    open_view(page, capped_server, timeout=240000, run=capped_server.run, host="vm.trace.json.gz")
    assert selected_option(page).endswith(", JAX export capped at 1,000,000 events)")
    _, runs = capped_server.get_json("runs")
    note = next(h for r in runs for h in r["hosts"] if h["host"] == "vm.trace.json.gz")["capped"]["note"]
    line = page.locator("[data-testid=capped-note]")
    assert line.is_visible() and note in line.inner_text()
    # readable whole: not cut by its box, and inside the window
    box = line.bounding_box()
    assert page.evaluate("(e) => e.scrollWidth <= e.clientWidth && e.scrollHeight <= e.clientHeight + 1",
                         line.element_handle())
    assert box["x"] >= 0 and box["x"] + box["width"] <= page.viewport_size["width"]

    # the Reduced card: the span the export covers of its XSpace's, once the XSpace's is known
    page.wait_for_function("() => /covers .+ of \\d/.test(document.querySelector('[data-testid=capped-window]')"
                           "?.textContent || '')", timeout=240000)
    status, own = capped_server.get_json(f"stats?run={capped_server.run}&host=vm.trace.json.gz&level=4")
    assert status == 200
    status, xspace = capped_server.get_json(f"stats?run={capped_server.run}&host=vm&level=4")
    assert status == 200
    own_us = own["window_us"][1] - own["window_us"][0]
    xspace_us = xspace["window_us"][1] - xspace["window_us"][0]
    assert own_us < xspace_us
    window = card_row(page, "out", "window")
    assert window.startswith(f"export capped: covers {duration(page, own_us)} of {duration(page, xspace_us)}; "
                             "open the XSpace host for the whole run")
    assert "whole trace" not in page.locator("[data-testid=stats]").inner_text()
    save_shot(page, "labels-capped-export")

    page.locator("[data-testid=open-xspace]").click()
    page.wait_for_function("() => document.querySelector('[data-testid=host-select]').value === 'vm'")
    wait_loaded(page, timeout=240000)
    assert page.locator("[data-testid=host-notes]").is_hidden()
    assert card_row(page, "out", "window") == f"whole trace, {duration(page, xspace_us)}"


def test_a_summary_slices_label_groups_its_counts_as_every_count(page, capped_server):
    open_view(page, capped_server, timeout=240000, run=capped_server.run, host="vm.trace.json.gz", level="2")
    # the widest summary slice folding over a thousand events: its name says "(+N more)"
    found = page.evaluate("""() => {
      const m = window.tbReduceDashboard.timeline.model, s = m.slices, F = 1;
      const names = [];
      let best = -1;
      for (let i = 0; i < s.count; i += 1) {
        if (!(s.flags[i] & F) || !/ more\\)$/.test(m.names[s.name[i]])) continue;
        names.push(m.names[s.name[i]]);
        if (best < 0 || s.dur[i] > s.dur[best]) best = i;
      }
      return {names, widest: best >= 0 ? m.names[s.name[best]] : null};
    }""")
    assert found["names"] and found["widest"]
    big = [n for n in found["names"] if re.search(r"\(\+\d[\d,]{3,} more\)$", n)]
    assert big, "no summary folds over a thousand events"
    bad = [n for n in found["names"] if not re.search(rf" \(\+{GROUPED} more\)$", n)]
    assert not bad, f"summary names with ungrouped counts: {bad[:3]}"
    # the widest one, or else another summary on screen (the widest may sit on a track scrolled below
    # the canvas), once the timeline has drawn them
    order = [found["widest"]] + [n for n in found["names"] if n != found["widest"]]
    page.locator("[data-testid=host-notes]").wait_for()  # the capped note's line: the layout above the canvas is final
    locate = """names => {
      for (const n of names) { const w = window.tbReduceDashboard.timeline.locateSlice(n); if (w) return w; }
      return null;
    }"""
    details = page.locator("[data-testid=details]")
    folded_note = details.get_by_text("events folded here")
    # Panels that arrive after the first timeline (the step strip, the waveforms) can move the
    # canvas between the look and the click, so a click that selected another slice (its details
    # name an event, not a fold) looks again and clicks again.
    for _ in range(20):
        where = None
        for _ in range(50):  # the same place twice in a row: nothing above the canvas is still moving it
            page.wait_for_timeout(100)
            now = page.evaluate(locate, order)
            if now and now == where:
                break
            where = now
        assert where, f"no summary slice of {order[:3]} is on screen"
        page.mouse.click(where["clientX"], where["clientY"])
        try:
            folded_note.wait_for(timeout=3000)
            break
        except PlaywrightTimeout:
            continue
    folded_note.wait_for(timeout=1000)
    title = details.locator(".tbr-detail-name").inner_text()
    assert re.fullmatch(rf".+ \(\+{GROUPED} more\)", title), title
    folded = re.match(r"([\d,]+) events folded here", details.locator("p").first.inner_text()).group(1)
    assert re.fullmatch(GROUPED, folded)
    more = int(re.search(r"\(\+([\d,]+) more\)$", title).group(1).replace(",", ""))
    assert more == int(folded.replace(",", "")) - 1  # the same count, one way of writing it
    for cell in details.locator(".tbr-top td:first-child").all_inner_texts():
        assert re.fullmatch(GROUPED, cell), cell
    save_shot(page, "labels-summary-grouped")


def test_a_trace_cut_mid_event_says_it_is_incomplete_beside_its_host(page, small_server):
    _, stats = small_server.get_json("stats?run=writing&host=cnn&level=2")
    assert stats["input"].get("truncated") is True  # the server read it up to its last complete event
    open_view(page, small_server, run="writing", host="cnn")
    line = page.locator("[data-testid=incomplete-note]")
    line.wait_for()
    assert line.inner_text() == f"\u26a0 cnn: {INCOMPLETE}"
    assert line.bounding_box()["y"] < page.locator("[data-testid=stats]").bounding_box()["y"]  # near the pickers
    save_shot(page, "labels-incomplete")
    open_view(page, small_server, run="whole", host="cnn")
    assert page.locator("[data-testid=host-notes]").is_hidden()


def test_the_share_page_names_its_own_icon_and_logs_no_error_and_no_failed_request(page, small_server):
    """Without an icon of its own the browser asks TensorBoard for /favicon.ico, which it does not
    serve: a 404 in the share page's console (headless Chromium asks only now and then, so the
    icon the page names is checked too, and that it loads)."""
    status, _, _ = small_server.tb.get("favicon.ico", timeout=30)
    assert status == 404  # what the browser would otherwise ask for
    errors: list[str] = []
    failed: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(f"{m.text} {m.location.get('url')}"))
    page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url}"))
    open_view(page, small_server, run="jax/r1", host="vm")
    page.wait_for_load_state("networkidle")
    icon = page.evaluate("""async () => {
      const link = document.querySelector('link[rel~=icon]');
      if (!link) return null;
      const img = new Image(); // as the browser loads an icon: under the page's img-src
      img.src = link.href;
      try { await img.decode(); } catch (err) { return {href: link.href, loaded: false}; }
      return {href: link.href, loaded: img.naturalWidth > 0};
    }""")
    assert icon is not None, "the share page names no icon: the browser asks for /favicon.ico (404)"
    assert icon["loaded"], icon
    assert not failed, failed
    assert not errors, errors
