"""Runs of TensorBoard event files only, in the dashboard: a real headless Chromium against a
real TensorBoard, on logdirs written by `torch.utils.tensorboard.SummaryWriter`.

- Case D of the second seed: `runs/a` and `runs/b` each log `Loss/train` over 50 steps and
  the logdir holds no trace. The tab opens (its plugin is active), says the runs have
  scalars only, and its waveform panel lists both; ticking both draws two lines on one plot.
- The mixed case: a real PyTorch trace run (with a `Loss/train` of its own) beside a run of
  scalars only. The timeline's run picker offers the trace run alone; the waveform panel
  overlays the scalar run's `Loss/train` on the trace run's; a link naming the scalar run
  says where its data is.

Checks read what the panel exposes (its legend, `tbReduceDashboard.waveforms.debug()`) and
the plot's own pixels (each line's colour is drawn); screenshots land in /tmp/shots/scalar_runs_*.png.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from urllib.parse import urlencode

import pytest
from dashboard_support import CHROMIUM, ROOT, TensorBoardServer, save_shot, wait_loaded
from scalar_runs_support import STEPS, TAG, loss, write_loss_run

TORCH_SMALL = ROOT.parent / "shared" / "corpus" / "generated" / "torch_cpu_cnn_small"

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: install the Debian package `chromium` (CI does)", allow_module_level=True)
if not TORCH_SMALL.is_dir():
    pytest.skip("../shared/corpus is absent (CI has it)", allow_module_level=True)
pytest.importorskip("playwright.sync_api")
pytest.importorskip("torch.utils.tensorboard")

TRACE_RUN = "torch_small"
HOST = sorted(p.name for p in TORCH_SMALL.glob("*.pt.trace.json*"))[0].split(".pt.trace.json")[0]

# Per entry of the panel: how many plot pixels are drawn in its colour (within a small distance).
INK_BY_COLOUR_JS = """
() => {
  const w = window.tbReduceDashboard.waveforms;
  const c = w.canvas, ctx = c.getContext('2d');
  const data = ctx.getImageData(0, 0, c.width, c.height).data;
  const probe = document.createElement('canvas').getContext('2d');
  const rgb = (css) => { probe.fillStyle = '#000'; probe.fillStyle = css; const h = probe.fillStyle;
    return [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16)); };
  return w.entries.map((e) => {
    const [r, g, b] = rgb(e.color);
    let n = 0;
    for (let i = 0; i < data.length; i += 4) {
      if (Math.abs(data[i] - r) + Math.abs(data[i + 1] - g) + Math.abs(data[i + 2] - b) < 24) n += 1;
    }
    return {run: e.run, colour: e.color, ink: n};
  });
}
"""


@pytest.fixture(scope="module")
def scalars_server(tmp_path_factory):
    """Case D: runs/a and runs/b of SummaryWriter, no trace anywhere."""
    root = tmp_path_factory.mktemp("scalar-only")
    for run in ("runs/a", "runs/b"):
        write_loss_run(root / "logdir", run)
    tb = TensorBoardServer(root / "logdir", root / "cache")
    try:
        yield tb
    finally:
        tb.stop()


@pytest.fixture(scope="module")
def mixed_server(tmp_path_factory):
    """A real PyTorch trace run logging Loss/train too (case A), and runs/b of scalars only."""
    root = tmp_path_factory.mktemp("mixed")
    logdir = root / "logdir"
    shutil.copytree(TORCH_SMALL, logdir / TRACE_RUN)
    write_loss_run(logdir, TRACE_RUN)
    write_loss_run(logdir, "runs/b")
    tb = TensorBoardServer(logdir, root / "cache")
    try:
        yield tb
    finally:
        tb.stop()


def wait_panel(frame, timeout: float = 60000) -> None:
    """Until the panel has fetched what it shows (no entry still loading), and drawn it."""
    frame.wait_for_function("""() => {
      const p = document.querySelector('[data-testid=waveforms]');
      return p && !p.hidden && p.dataset.state !== 'loading' && p.dataset.state !== 'idle'
        && p.dataset.drawn === 'true'  // the frame showing it, drawn
        && !document.querySelector('[data-testid=wave-legend] [data-status=loading]');
    }""", timeout=timeout)
    # a frame requested before now (a change of smoothing, of ticks) runs before this one
    frame.evaluate("() => new Promise((done) => requestAnimationFrame(() => done()))")


def legend(frame) -> list[dict]:
    return frame.evaluate("""() => [...document.querySelectorAll('[data-testid=wave-legend] li')].map((li) => ({
      text: li.innerText, ...li.dataset}))""")


def panel_runs(frame) -> list[str]:
    return frame.eval_on_selector_all("[data-testid=wave-runs] input[data-run]", "bs => bs.map(b => b.dataset.run)")


def tick(frame, run: str) -> None:
    frame.check(f"[data-testid=wave-runs] input[data-run={json.dumps(run)}]")
    wait_panel(frame)


def shot(target, name: str) -> Path:
    return save_shot(target, f"scalar_runs_{name}")


def assert_two_lines(frame, runs: list[str]) -> None:
    """Both runs' Loss/train on one plot: each entry read its 50 points, is one line of its own
    colour, and that colour is on the canvas."""
    entries = frame.evaluate("() => window.tbReduceDashboard.waveforms.debug({values: true})")
    assert [e["run"] for e in entries] == runs, entries
    for e in entries:
        assert e["status"] == "ok" and not e["derived"] and e["name"] == TAG, e
        assert e["points"] == STEPS and e["lines"] == 1 and e["dots"] == 0, e
        assert e["xs"] == list(range(STEPS))
        assert e["ys"] == pytest.approx([loss(e["run"], s) for s in range(STEPS)], rel=1e-6)
    assert len({e["color"] for e in entries}) == 2
    ink = frame.evaluate(INK_BY_COLOUR_JS)
    assert all(i["ink"] > 200 for i in ink), ink  # a 50-point line is hundreds of pixels of its colour
    assert {e["run"]: int(e["points"]) for e in legend(frame)} == {r: STEPS for r in runs}


def test_a_logdir_of_scalars_only_opens_the_tab_and_overlays_both_runs(page, scalars_server) -> None:
    page.goto(f"{scalars_server.base}/#tb_reduce")  # the tab as a user opens it
    frame = page.wait_for_selector("iframe", timeout=60000).content_frame()
    wait_panel(frame)
    message = frame.locator(".tbr-message")
    assert message.is_visible() and "scalars only" in message.inner_text()
    assert "No profiler traces found" not in message.inner_text()
    assert "scalars only" in frame.locator("[data-testid=status]").inner_text()
    # no trace to offer the timeline: its picker is empty and off
    assert frame.locator("[data-testid=run-select] option").count() == 0
    assert frame.locator("[data-testid=run-select]").is_disabled()
    assert panel_runs(frame) == ["runs/a", "runs/b"]
    assert frame.input_value("[data-testid=wave-series]") == f"s:{TAG}"
    assert [e["run"] for e in legend(frame)] == ["runs/a"]
    shot(page, "scalars_only_one_run")
    tick(frame, "runs/b")
    assert_two_lines(frame, ["runs/a", "runs/b"])
    shot(page, "scalars_only_overlaid")
    shot(frame.locator("[data-testid=waveforms]"), "scalars_only_overlaid_panel")


def test_a_scalar_run_overlays_on_a_trace_runs_scalars_and_is_no_timeline_choice(page, mixed_server) -> None:
    page.goto(mixed_server.plugin_url(f"view?{urlencode({'run': TRACE_RUN, 'host': HOST, 'level': '2'})}"))
    wait_loaded(page)
    wait_panel(page)
    options = page.eval_on_selector_all("[data-testid=run-select] option", "os => os.map(o => o.value)")
    assert options == [TRACE_RUN]  # the picker offers traces only
    assert panel_runs(page) == [TRACE_RUN, "runs/b"]
    page.select_option("[data-testid=wave-series]", f"s:{TAG}")
    wait_panel(page)
    tick(page, "runs/b")
    assert_two_lines(page, [TRACE_RUN, "runs/b"])
    shot(page, "mixed_overlaid")
    # a series derived from the trace: the scalar run has none, and says so in its legend line
    page.select_option("[data-testid=wave-series]", "d:step_time_ms")
    wait_panel(page)
    entries = {e["run"]: e for e in legend(page)}
    assert entries[TRACE_RUN]["status"] == "ok"
    assert entries["runs/b"]["status"] == "missing" and "no trace host" in entries["runs/b"]["text"]
    shot(page.locator("[data-testid=waveforms]"), "mixed_derived")


def test_a_link_to_a_scalar_run_says_where_its_data_is(page, mixed_server) -> None:
    page.goto(mixed_server.plugin_url(f"view?{urlencode({'run': 'runs/b', 'host': 'x'})}"))
    wait_loaded(page)
    wait_panel(page)
    status = page.locator("[data-testid=status]").inner_text()
    assert "scalars only" in status and "waveform panel" in status, status
    assert page.input_value("[data-testid=run-select]") == TRACE_RUN  # the timeline: the first trace instead
    # the panel plots the linked run's scalars
    assert page.input_value("[data-testid=wave-series]") == f"s:{TAG}"
    [entry] = page.evaluate("() => window.tbReduceDashboard.waveforms.debug()")
    assert entry["run"] == "runs/b" and entry["status"] == "ok" and entry["points"] == STEPS, entry
    shot(page, "link_to_scalar_run")
