"""Issue 11: the anomalies the live sidecar kept are marked on the waveform at their step.

A real sidecar reduces the stalled-step trace (step 5 fires `step:2x`) into a window run
and keeps an anomaly run around it; a real TensorBoard serves the logdir and a headless
Chromium opens the window run with its step-time series. The panel's debug handle
(`tbReduceDashboard.waveforms.debug()`) says where the ⚠ is drawn, the legend says
"1 anomaly: step:2x at step 5", and clicking the ⚠ opens the anomaly run. The screenshot
lands in /tmp/shots/live_anomaly_mark.png (and test-artifacts/) for a person to look at.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from dashboard_support import CHROMIUM, ROOT, TensorBoardServer, checked_page, save_shot, wait_loaded

from tb_reduce_plugin.live.sidecar import LiveConfig, Sidecar

RAW = ROOT / "tests" / "fixtures" / "traces" / "torch_stalled_step.pt.trace.json.gz"  # step 5 stalls

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: install the Debian package `chromium` (CI does)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("live_anomaly")
    logdir = root / "logdir"
    watch = root / "profiles"
    watch.mkdir()
    tmp = watch / ".w.pt.trace.json.gz"
    shutil.copyfile(RAW, tmp)
    os.utime(tmp, (time.time() - 5, time.time() - 5))  # written a while ago: complete
    os.rename(tmp, watch / "w.pt.trace.json.gz")
    car = Sidecar(LiveConfig(logdir=str(logdir), watch=str(watch), settle_s=0.0, triggers=["step:2x"]))
    [record] = car.step()
    car.finish()
    [anomaly] = car.anomalies
    tb = TensorBoardServer(logdir, root / "cache")
    try:
        yield tb, record.run, f"live/{os.path.basename(anomaly)}"
    finally:
        tb.stop()


def shot(page, name: str) -> None:
    save_shot(page, name)


def current_entry(page, run: str) -> dict:
    page.wait_for_function(
        f"""() => {{ const d = window.tbReduceDashboard && window.tbReduceDashboard.waveforms.debug();
          const e = d && d.find((x) => x.run === {json.dumps(run)});
          return !!e && e.status === 'ok' && e.anomalies.length > 0 && e.anomalies.every((a) => a.drawn); }}""",
        timeout=60000)
    return next(e for e in page.evaluate("() => window.tbReduceDashboard.waveforms.debug()") if e["run"] == run)


def test_the_anomaly_is_marked_at_its_step_and_opens_its_run(setup, browser):
    tb, window_run, anomaly_run = setup
    _, listed = tb.get_json("runs")
    runs = {r["run"]: r for r in listed["runs"]} if isinstance(listed, dict) else {r["run"]: r for r in listed}
    assert runs[anomaly_run]["anomaly"]["window"] == window_run.removeprefix("live/")
    with checked_page(browser, height=1000) as page:
        page.goto(tb.plugin_url(f"view?run={window_run}&host=w&level=3"))
        wait_loaded(page, "3")
        entry = current_entry(page, window_run)
        assert page.eval_on_selector("[data-testid=wave-series]", "s => s.value") == "d:step_time_ms"
        [mark] = entry["anomalies"]
        assert mark["step"] == 5 and mark["trigger"] == "step:2x" and mark["run"] == anomaly_run
        assert mark["drawn"] and mark["index"] == [s["step"] for s in entry["steps"]].index(5)
        assert mark["value"] > mark["threshold"] > 0 and mark["unit"] == "ms"
        # the ⚠ is at step 5's point, above the plot
        point = page.evaluate(f"() => window.tbReduceDashboard.waveforms.locate({json.dumps(window_run)}, {mark['index']})")
        assert abs(point["clientX"] - mark["clientX"]) < 1.5 and abs(point["clientY"] - mark["pointY"]) < 1.5
        assert mark["clientY"] < mark["pointY"]
        legend = page.inner_text(f"[data-testid=wave-anomalies][data-run='{window_run}']")
        assert "1 anomaly: step:2x at step 5" in legend, legend
        # hovering the ⚠ says what fired
        page.mouse.move(mark["clientX"], mark["clientY"])
        page.wait_for_selector(".tbr-wave-tooltip:not([hidden])")
        tip = page.inner_text(".tbr-wave-tooltip")
        assert "step:2x" in tip and "step 5" in tip and anomaly_run in tip, tip
        shot(page, "live_anomaly_mark")

        # clicking it opens the anomaly run (the raw window kept around it)
        page.mouse.click(mark["clientX"], mark["clientY"])
        page.wait_for_function(f"() => document.querySelector('[data-testid=run-select]').value === {json.dumps(anomaly_run)}",
                               timeout=10000)
        wait_loaded(page)
        assert page.evaluate("() => window.tbReduceDashboard.waveforms.run") == anomaly_run
        # the anomaly run marks its own step too, without a link to itself
        own = current_entry(page, anomaly_run)
        assert [(a["step"], a["run"]) for a in own["anomalies"]] == [(5, anomaly_run)]
        assert page.query_selector_all("[data-testid=wave-anomalies] button") == []

        # back to the window: the legend's link opens the anomaly run as well
        page.select_option("[data-testid=run-select]", window_run)
        current_entry(page, window_run)
        page.click(f"[data-testid=wave-anomalies] button[data-anomaly-run='{anomaly_run}']")
        page.wait_for_function(f"() => document.querySelector('[data-testid=run-select]').value === {json.dumps(anomaly_run)}",
                               timeout=10000)
