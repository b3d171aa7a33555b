"""The dashboard's Live mode in a real headless Chromium against a real TensorBoard.

The logdir holds one window run written by the sidecar's own `WindowWriter` and a
run kept around an anomaly (`live/<window>-anomaly-<time>-<kind>/`). The test turns
Live on, writes a second window while the page is open, and checks that the
dashboard shows it (the catalog walks the logdir every 5 s, the page asks every 2 s)
without reloading, keeping the level and the waveform panel's series. Screenshots land
in /tmp/shots/live_*.png (and test-artifacts/) for a person to look at.
"""

from __future__ import annotations

import gzip
import json
import shutil
import time
from pathlib import Path

import pytest
from dashboard_support import CHROMIUM, ROOT, TensorBoardServer, checked_page, save_shot, wait_loaded

from tb_reduce_plugin.live.windows import WindowWriter

RAW = ROOT / "tests" / "fixtures" / "traces" / "torch_stalled_step.pt.trace.json.gz"
T0 = 1_795_000_000.0  # 2026-11-18, epoch seconds

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: install the Debian package `chromium` (CI does)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("live_dash")
    logdir = root / "logdir"
    logdir.mkdir()
    writer = WindowWriter(str(logdir), keep=50)
    window = writer.write(RAW, T0, T0 + 1.0, host="w").name
    anomaly = logdir / "live" / f"{window}-anomaly-20261118T000000.500Z-stall"
    anomaly.mkdir()
    shutil.copyfile(RAW, anomaly / "w.pt.trace.json.gz")
    (anomaly / "anomaly.json").write_text(json.dumps({"trigger": "step_time", "kind": "stall", "value": 900.0,
                                                      "threshold": 300.0, "unit": "ms", "reason": "test", "step": 3,
                                                      "window": window}))
    tb = TensorBoardServer(logdir, root / "cache")
    try:
        yield tb, writer, f"live/{window}", f"live/{anomaly.name}"
    finally:
        tb.stop()


def shot(page, name: str) -> None:
    save_shot(page, name)


def options(page) -> list[dict]:
    return page.evaluate("""() => Array.from(document.querySelectorAll('[data-testid=run-select] option'),
      (o) => ({value: o.value, label: o.textContent, anomaly: o.classList.contains('tbr-anomaly')}))""")


def test_live_mode_follows_the_newest_window_without_a_reload(setup, browser):
    tb, writer, first_run, anomaly_run = setup
    with checked_page(browser, height=1000) as page:
        page.goto(tb.plugin_url(f"view?run={first_run}&host=w&level=3"))
        wait_loaded(page, "3")
        assert page.is_visible("[data-testid=live-toggle]")
        opts = {o["value"]: o for o in options(page)}
        assert opts[anomaly_run]["anomaly"] and opts[anomaly_run]["label"].startswith("⚠ ")
        assert not opts[first_run]["anomaly"] and not opts[first_run]["label"].startswith("⚠")
        # the waveform panel's series, as the user left it, must survive the switch
        page.wait_for_function("() => document.querySelectorAll('[data-testid=wave-series] option').length > 0",
                               timeout=60000)
        series = page.eval_on_selector("[data-testid=wave-series]", "s => s.value")
        page.evaluate("() => { window.__marker = 'still here'; }")
        page.check("[data-testid=live-toggle]")
        assert page.eval_on_selector("[data-testid=run-select]", "s => s.value") == first_run
        shot(page, "live_1")

        second = writer.write(RAW, T0 + 5.0, T0 + 6.0, host="w").run
        started = time.monotonic()
        page.wait_for_function(
            f"() => {{ const v = document.querySelector('[data-testid=run-select]').value;"
            f" return v.startsWith('live/') && v !== {json.dumps(first_run)} && !v.includes('-anomaly-'); }}",
            timeout=15000)
        took = time.monotonic() - started
        wait_loaded(page, "3")
        new_run = page.eval_on_selector("[data-testid=run-select]", "s => s.value")
        assert new_run == second and new_run > first_run, (new_run, first_run)
        assert page.evaluate("() => window.__marker") == "still here"  # no reload
        assert page.eval_on_selector("[data-testid=level-select]", "s => s.value") == "3"
        assert page.eval_on_selector("[data-testid=host-select]", "s => s.value") == "w"
        assert page.is_checked("[data-testid=live-toggle]")
        page.wait_for_function("() => document.querySelectorAll('[data-testid=wave-series] option').length > 0",
                               timeout=60000)
        assert page.eval_on_selector("[data-testid=wave-series]", "s => s.value") == series
        assert page.evaluate("() => window.tbReduceDashboard.waveforms.run") == new_run
        page.wait_for_timeout(1500)
        shot(page, "live_2")
        print(f"switched to {new_run} {took:.1f} s after it was written")

        # picking a run by hand stops following (the run list is still asked, less often: new runs show up)
        page.select_option("[data-testid=run-select]", first_run)
        assert not page.is_checked("[data-testid=live-toggle]")
        assert page.evaluate("() => window.tbReduceDashboard.live") is False
        assert page.evaluate("() => window.tbReduceDashboard.poller.interval()") == 5000
        assert page.eval_on_selector("[data-testid=run-select]", "s => s.value") == first_run


def test_the_live_toggle_polls_every_2_s_with_an_etag_and_every_5_s_when_off(setup, browser):
    tb, _, first_run, _ = setup
    with checked_page(browser) as page:
        asked: list[tuple[int, str]] = []
        page.on("response", lambda r: asked.append((r.status, r.request.headers.get("if-none-match", "")))
                if r.url.endswith("/runs") else None)
        page.goto(tb.plugin_url(f"view?run={first_run}&host=w&level=3"))
        wait_loaded(page)
        page.check("[data-testid=live-toggle]")
        page.wait_for_timeout(5000)
        polled = asked[1:]  # the first is the page's own listing
        assert 2 <= len(polled) <= 5, polled  # every ~2 s, not a busy loop
        assert any(status == 304 and tag for status, tag in polled), polled
        page.uncheck("[data-testid=live-toggle]")
        page.wait_for_timeout(2500)  # the turn asked at the 2 s pace, if one was on its way
        n = len(asked)
        page.wait_for_timeout(11000)
        assert 1 <= len(asked) - n <= 3, asked[n:]  # off: every ~5 s (new runs still show up), not every 2 s
        assert all(status == 304 for status, _ in asked[n:]), asked[n:]


def test_in_live_mode_the_sidecars_scalar_series_grows_in_the_panel(tmp_path, browser):
    """A real sidecar writes the windows and their `live/step_time_ms` scalars; with that series
    shown and Live on, the panel's points grow as windows land, without a reload."""
    import os

    from tb_reduce_plugin.live.sidecar import LiveConfig, Sidecar

    watch, logdir = tmp_path / "profiles", tmp_path / "logdir"
    watch.mkdir()
    car = Sidecar(LiveConfig(logdir=str(logdir), watch=str(watch), settle_s=0.0, triggers=["name:^never$:1s"]))

    def land(name: str, later: int = 0) -> None:
        """The recorded window, its steps renumbered `later` steps on and its clock moved as far
        (the next window of the same training: one source, steps going forward)."""
        doc = json.loads(gzip.decompress(RAW.read_bytes()))
        events = doc["traceEvents"]
        span = max(e["ts"] + e.get("dur", 0) for e in events if "ts" in e) - min(e["ts"] for e in events if "ts" in e)
        for e in events:
            if "ts" in e and later:
                e["ts"] += span + 1000
            if isinstance(e.get("name"), str) and e["name"].startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{int(e['name'][13:]) + later}"
        (watch / f".{name}").write_bytes(gzip.compress(json.dumps(doc).encode()))
        os.utime(watch / f".{name}", (time.time() - 5, time.time() - 5))
        os.rename(watch / f".{name}", watch / name)
        assert len(car.step()) == 1

    land("window000001.vm_1.pt.trace.json.gz")
    tb = TensorBoardServer(logdir, tmp_path / "cache")
    try:
        with checked_page(browser, height=1000) as page:
            first = f"live/{car.writer.windows()[-1]}"
            page.goto(tb.plugin_url(f"view?run={first}&host=vm_1&level=3"))
            wait_loaded(page, "3")
            page.wait_for_function("() => [...document.querySelectorAll('[data-testid=wave-series] option')]"
                                   ".some((o) => o.value === 's:live/step_time_ms')", timeout=60000)
            page.select_option("[data-testid=wave-series]", "s:live/step_time_ms")
            page.evaluate("() => { window.__marker = 'still here'; }")
            page.check("[data-testid=live-toggle]")
            points = ("() => { const d = window.tbReduceDashboard.waveforms.debug()"
                      ".filter((e) => e.status === 'ok'); return d.length ? d[d.length - 1].points : 0; }")
            page.wait_for_function(f"() => ({points})() === 8", timeout=30000)
            land("window000002.vm_1.pt.trace.json.gz", later=8)  # one source: its series grows in one run
            page.wait_for_function(f"() => ({points})() === 16", timeout=30000)
            assert page.evaluate("() => window.__marker") == "still here"
            assert page.eval_on_selector("[data-testid=wave-series]", "s => s.value") == "s:live/step_time_ms"
            shot(page, "live_series_grew")
    finally:
        car.finish()
        tb.stop()
