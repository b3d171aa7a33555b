"""Lookalike text in the dashboard (issue 24, item 14), in headless Chromium against a real
TensorBoard: an unterminated U+202E (RIGHT-TO-LEFT OVERRIDE) in a host name, an event
name and a scalar tag is shown as a visible ⟨U+202E⟩ marker and reverses none of the
dashboard's own text after it (the host menu showed `abc(BM 71.3 ,nosj-emorhc) xabcd`);
a 100,000-character scalar tag (more than a URL can carry) is fetched by its id and drawn."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlencode

import pytest
from dashboard_support import CHROMIUM, TensorBoardServer, checked_page, chromium, save_shot, wait_loaded

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: install the Debian package `chromium` (CI does)", allow_module_level=True)
pytest.importorskip("playwright.sync_api")
from tensorboard.compat.proto import event_pb2, summary_pb2  # noqa: E402
from tensorboard.summary.writer.event_file_writer import EventFileWriter  # noqa: E402

RLO = "\u202e"
RUN = "bidi"
HOST = f"abc{RLO}xabcd"
EVENT = f"step{RLO}kcab"
RLO_TAG = f"loss{RLO}ssol"
LONG_TAG = "long/" + "t" * 100_000
MARKER = "\u27e8U+202E\u27e9"
CONTROLS = "[\u202a-\u202e\u2066\u2067\u200e\u200f\u061c]"


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("bidi")
    run = root / "logdir" / RUN
    run.mkdir(parents=True)
    events = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": f"proc{RLO}corp"}},
              {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": f"thread{RLO}daerht"}}]
    events += [{"ph": "X", "pid": 1, "tid": 1, "ts": 1000 * i, "dur": 800, "name": EVENT if i % 2 else "plain",
                "args": {"note": f"arg{RLO}gra"}} for i in range(40)]
    (run / f"{HOST}.pt.trace.json").write_text(json.dumps({"traceEvents": events}))
    w = EventFileWriter(str(run))
    for step in range(30):
        for tag in (RLO_TAG, LONG_TAG):
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=1.0 / (1 + step))])
            w.add_event(event_pb2.Event(step=step, wall_time=1_700_000_000.0 + step, summary=summary))
    w.close()
    tb = TensorBoardServer(root / "logdir", root / "cache")
    try:
        yield tb
    finally:
        tb.stop()


@pytest.fixture
def page(browser):
    with checked_page(browser, height=1000) as pg:
        yield pg


def open_view(page, server) -> None:
    page.goto(server.plugin_url(f"view?{urlencode({'run': RUN, 'host': HOST, 'level': '0'})}"))
    wait_loaded(page)
    page.wait_for_function("() => ['ready', 'error'].includes(document.querySelector('[data-testid=waveforms]')"
                           "?.dataset.state)", timeout=60000)


def raw_controls(page) -> list[str]:
    """Every shown text and title of the page that still holds a raw bidi control."""
    return page.evaluate(f"""() => {{
      const re = /{CONTROLS}/;
      const bad = [];
      const text = document.body.innerText;
      if (re.test(text)) bad.push('body text: ' + text.match(/.{{0,40}}{CONTROLS}.{{0,40}}/)[0]);
      for (const node of document.querySelectorAll('[title], [aria-label], option')) {{
        const option = node.tagName === 'OPTION' ? node.text : null;
        for (const v of [node.getAttribute('title'), node.getAttribute('aria-label'), option]) {{
          if (v && re.test(v)) bad.push(node.tagName + ': ' + v.slice(0, 80));
        }}
      }}
      return bad;
    }}""")


def choose_series(page, key: str) -> None:
    page.select_option("[data-testid=wave-series]", key)
    page.wait_for_function("() => document.querySelector('[data-testid=waveforms]').dataset.state === 'ready'"
                           " && document.querySelector('[data-testid=waveforms]').dataset.drawn === 'true'",
                           timeout=60000)


def test_a_host_name_with_a_right_to_left_override_shows_its_marker_and_reverses_nothing_after_it(page, server):
    open_view(page, server)
    option = page.locator("[data-testid=host-select] option").first.inner_text()
    # the name isolated (U+2068 … U+2069), its override shown; the menu's own words read forwards
    assert option.startswith(f"\u2068abc{MARKER}xabcd\u2069 (chrome-json, ") and option.endswith(")")
    assert raw_controls(page) == []
    save_shot(page.locator("header, .tbr-bar, [data-testid=host-select]").first, "bidi_host_menu")
    save_shot(page, "bidi_page")


def test_the_range_table_and_the_series_picker_show_the_override_as_a_marker(page, server):
    open_view(page, server)
    box = page.locator("[data-testid=timeline] canvas").bounding_box()
    gutter = page.evaluate("() => window.tbReduceDashboard.timeline.gutter")
    plot = box["width"] - gutter
    page.keyboard.down("Shift")
    page.mouse.move(box["x"] + gutter + 0.02 * plot, box["y"] + 70)
    page.mouse.down()
    page.mouse.move(box["x"] + gutter + 0.5 * plot, box["y"] + 70, steps=4)
    page.mouse.move(box["x"] + gutter + 0.98 * plot, box["y"] + 70, steps=4)
    page.mouse.up()
    page.keyboard.up("Shift")
    table = page.locator("[data-testid=aggregate-table]")
    table.wait_for(timeout=60000)
    names = table.locator(".tbr-agg-name").all_inner_texts()
    assert f"step{MARKER}kcab" in names and "plain" in names
    row = table.locator(".tbr-agg-row", has_text=f"step{MARKER}kcab").inner_text()
    assert row.index(f"step{MARKER}kcab") < row.index("20")  # the count comes after the name, not reversed
    assert raw_controls(page) == []
    save_shot(table, "bidi_range_table")
    choose_series(page, f"s:{RLO_TAG}")
    legend = page.locator("[data-testid=wave-legend] li").first
    assert legend.get_attribute("data-status") == "ok" and "30 points" in legend.inner_text()
    assert raw_controls(page) == []
    save_shot(page.locator("[data-testid=waveforms]"), "bidi_waveforms")


def test_a_100000_character_tag_is_fetched_by_its_id_and_drawn(page, server):
    open_view(page, server)
    with page.expect_response(lambda r: "/data/plugin/tb_reduce/scalars?" in r.url) as response:
        choose_series(page, f"s:{LONG_TAG}")
    assert response.value.status == 200 and "tag_id=" in response.value.url and len(response.value.url) < 1000
    [entry] = page.evaluate("() => window.tbReduceDashboard.waveforms.debug()")
    assert entry["status"] == "ok" and entry["points"] == 30 and entry["lines"] == 1
