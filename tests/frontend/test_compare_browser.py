"""Compare two runs in the dashboard (issue 27, item 1), in a real headless Chromium against
a real TensorBoard serving real PyTorch runs of one training loop (a base run, a rerun, a
run with an extra matmul a step; tests/fixtures/make_compare_traces.py): the Compare
button opens the trace shown against another run, the changed op first; a step range
narrows both sides; the baseline can be another run; a copied link reopens the
comparison; a name clicked is searched. Screenshots go to /tmp/shots and test-artifacts/.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
from dashboard_support import CHROMIUM, ROOT, TensorBoardServer, checked_page, save_shot, wait_loaded

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: install the Debian package `chromium` (CI does)", allow_module_level=True)
pytest.importorskip("playwright.sync_api")

RUNS = ROOT / "tests" / "fixtures" / "compare"
HOST = "worker0.1"
READY = "() => document.querySelector('[data-testid=compare]').dataset.state === 'ready'"
ROWS = "() => window.tbReduceDashboard.compare.rows().map((r) => r.name)"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    for name in ("base", "rerun", "slow_matmul"):
        (root / "logdir" / name).mkdir(parents=True)
        shutil.copyfile(RUNS / f"{name}.pt.trace.json.gz", root / "logdir" / name / f"{HOST}.pt.trace.json.gz")
    tb = TensorBoardServer(root / "logdir", root / "cache")
    try:
        yield tb
    finally:
        tb.stop()


def open_view(page, server, **params) -> None:
    page.goto(server.plugin_url(f"view?{urlencode({'run': 'slow_matmul', 'host': HOST, **params})}"))
    wait_loaded(page)


def test_compare_opens_against_another_run_with_the_changed_op_first(server, browser) -> None:
    with checked_page(browser) as page:
        open_view(page, server)
        page.click("[data-testid=compare-open]")
        page.wait_for_function(READY, timeout=30000)
        panel = page.locator("[data-testid=compare]")
        assert "base · worker0.1" in panel.locator("[data-testid=compare-sides]").inner_text()
        assert "12 steps, 2 to 13" in panel.locator("[data-testid=compare-sides]").inner_text()
        names = page.evaluate(ROWS)
        assert names[0] == "aten::mm", names[:5]
        step = panel.locator("[data-testid=compare-series] tr[data-series=step_time] td")
        cells = step.all_inner_texts()
        assert cells[0] == "step_time" and cells[4].endswith("×") and float(cells[4][:-1]) > 1.5, cells
        assert "tbr-cmp-up" in (step.nth(3).get_attribute("class") or "")
        save_shot(page, "compare-against-base")

        page.click("[data-testid=compare-overlay]")  # both runs' step times on one axis, in the waveform panel
        page.wait_for_function("() => document.querySelector('[data-testid=wave-runs-list] input[data-run=base]')"
                               "?.checked", timeout=10000)
        page.wait_for_function("() => [...document.querySelectorAll('[data-testid=wave-legend]')]"
                               ".some((e) => e.textContent.includes('base / worker0.1'))", timeout=30000)

        page.fill("[data-testid=compare-steps]", "5:8")
        page.press("[data-testid=compare-steps]", "Enter")
        page.wait_for_function("() => document.querySelector('[data-testid=compare-sides]')"
                               "?.textContent.includes('4 steps, 5 to 8')", timeout=30000)
        assert page.evaluate(ROWS)[0] == "aten::mm"

        link = page.get_attribute("[data-testid=share-link]", "href")
        q = parse_qs(urlparse(link).query)
        assert q["base_run"] == ["base"] and q["base_host"] == [HOST] and q["steps"] == ["5:8"]
        with checked_page(browser) as other:
            other.goto(link)
            wait_loaded(other)
            other.wait_for_function(READY, timeout=30000)
            assert other.input_value("[data-testid=compare-steps]") == "5:8"
            assert "4 steps, 5 to 8" in other.locator("[data-testid=compare-sides]").inner_text()
            assert other.evaluate(ROWS)[0] == "aten::mm"

        page.fill("[data-testid=compare-steps]", "9:3")
        page.press("[data-testid=compare-steps]", "Enter")
        assert page.get_attribute("[data-testid=compare-steps]", "aria-invalid") == "true"


def test_the_baseline_can_be_a_rerun_and_a_name_clicked_is_searched(server, browser) -> None:
    with checked_page(browser) as page:
        open_view(page, server, run="rerun")
        page.click("[data-testid=compare-open]")
        page.wait_for_function(READY, timeout=30000)
        page.select_option("[data-testid=compare-base]", value=f'["base","{HOST}"]')
        page.wait_for_function(READY + " && document.querySelector('[data-testid=compare-sides]')"
                               ".textContent.includes('rerun')", timeout=30000)
        rows = page.evaluate("() => window.tbReduceDashboard.compare.rows()")
        mm = next(r for r in rows if r["name"] == "aten::mm")
        assert abs(mm["delta_self_us"]) < 0.25 * mm["base"]["self_us"]  # a rerun: the same work
        save_shot(page.locator("[data-testid=compare]"), "compare-rerun-against-base")
        page.click("[data-testid=compare] tr[data-name='aten::addmm']")
        page.wait_for_function("() => window.tbReduceDashboard.queryState().search.query === 'aten::addmm'", timeout=10000)
        page.click("[data-testid=compare-close]")
        assert page.locator("[data-testid=compare]").is_hidden()
        assert "base_run" not in (page.get_attribute("[data-testid=share-link]", "href") or "")


def test_both_runs_steps_overlaid_in_the_waveforms_look_right(server, browser) -> None:
    """A screenshot for a person: the slowed run's step times over the base run's."""
    with checked_page(browser) as page:
        open_view(page, server)
        page.click("[data-testid=compare-open]")
        page.wait_for_function(READY, timeout=30000)
        page.click("[data-testid=compare-overlay]")
        page.wait_for_function("() => [...document.querySelectorAll('[data-testid=wave-legend]')]"
                               ".some((e) => e.textContent.includes('base / worker0.1'))", timeout=30000)
        legend = page.locator("[data-testid=wave-legend]").inner_text()
        assert "slow_matmul / worker0.1" in legend and "base / worker0.1" in legend
        save_shot(page, "compare-overlay-waveforms")


def _stacked_frame(page):
    """The stacked baseline's frame, by its element, not its URL: the dashboard inside rewrites
    its own address to the view's share link (dropping `compact=1`) as soon as it shows one, so
    a search by URL races that rewrite."""
    frame = page.query_selector("[data-testid=stack-frame]").content_frame()
    assert frame is not None
    frame.wait_for_function("() => window.tbReduceDashboard && window.tbReduceDashboard.timeline", timeout=30000)
    return frame


def test_the_baselines_timeline_stacks_under_this_one_aligned_at_a_step_with_one_zoom(server, browser) -> None:
    with checked_page(browser, height=1200) as page:
        open_view(page, server)
        page.click("[data-testid=compare-open]")
        page.wait_for_function(READY, timeout=30000)
        page.click("[data-testid=compare-stack]")
        page.wait_for_function("() => document.querySelector('[data-testid=stack]')?.dataset.ready === '1'",
                               timeout=30000)
        frame = page.frame_locator("[data-testid=stack-frame]")
        inner = _stacked_frame(page)
        wait_loaded(inner)
        mine = server.get_json(f"waveforms?{urlencode({'run': 'slow_matmul', 'host': HOST})}")[1]["steps"]
        base = server.get_json(f"waveforms?{urlencode({'run': 'base', 'host': HOST})}")[1]["steps"]
        s2 = next(s for s in mine if s["step"] == 2)
        b2 = next(s for s in base if s["step"] == 2)
        offset = b2["start_us"] - s2["start_us"]  # aligned at the first step both show
        page.evaluate("([a, b]) => window.tbReduceDashboard.timeline.setView(a, b)", [s2["start_us"] - 3000,
                                                                                      s2["start_us"] + 3000])
        view = page.evaluate("() => window.tbReduceDashboard.timeline.getView()")
        other = inner.evaluate("() => window.tbReduceDashboard.timeline.getView()")
        assert other[0] - view[0] == pytest.approx(offset, abs=1e-3) and other[1] - view[1] == pytest.approx(offset, abs=1e-3)
        assert (b2["start_us"] - other[0]) == pytest.approx(s2["start_us"] - view[0], abs=1e-3)  # step 2 under step 2
        # panned below: the timeline above follows
        inner.evaluate("([a, b]) => window.tbReduceDashboard.timeline.setView(a, b)", [other[0] + 500, other[1] + 500])
        view2 = page.evaluate("() => window.tbReduceDashboard.timeline.getView()")
        assert view2[0] == pytest.approx(view[0] + 500, abs=1e-3)
        assert frame.locator("[data-testid=timeline]").is_visible()
        assert inner.evaluate("() => getComputedStyle(document.querySelector('[data-testid=stats]')).display") == "none"
        wait_loaded(inner)
        page.click("[data-testid=compare] tr[data-name='aten::mm']")  # a name: searched in both timelines
        for f in (page, inner):
            f.wait_for_function("() => window.tbReduceDashboard.queryState().search.query === 'aten::mm'",
                                timeout=10000)
        save_shot(page, "compare-stacked-timelines")
        page.click("[data-testid=stack-close]")
        assert page.locator("[data-testid=stack]").count() == 0


def test_a_trace_against_an_earlier_range_of_its_own_steps(server, browser) -> None:
    with checked_page(browser) as page:
        open_view(page, server)
        page.click("[data-testid=compare-open]")
        page.wait_for_function(READY, timeout=30000)
        page.select_option("[data-testid=compare-base]", value=f'["slow_matmul","{HOST}"]')
        page.fill("[data-testid=compare-base-steps]", "2:5")
        page.fill("[data-testid=compare-steps]", "9:13")
        page.press("[data-testid=compare-steps]", "Enter")
        # the baseline's range is compared as soon as it is typed: wait for both ranges' answer
        page.wait_for_function("() => ['4 steps, 2 to 5', '5 steps, 9 to 13'].every(t => document.querySelector("
                               "'[data-testid=compare-sides]')?.textContent.includes(t))", timeout=30000)
        sides = page.locator("[data-testid=compare-sides]").inner_text()
        assert "5 steps, 9 to 13" in sides and sides.count("slow_matmul") == 2
        q = parse_qs(urlparse(page.get_attribute("[data-testid=share-link]", "href")).query)
        assert q["base_steps"] == ["2:5"] and q["steps"] == ["9:13"] and q["base_run"] == ["slow_matmul"]
