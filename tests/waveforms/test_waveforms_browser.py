"""The waveform panel (SPEC §8) in a real headless Chromium against a real TensorBoard.

The logdir is built here: a real PyTorch trace with `ProfilerStep#N` markers and,
beside it, an event file written with TensorBoard's own writer holding each edge
case (a lone point, NaN in the middle, ±Inf, a step that restarts and repeats, a
long series with one spike); a second run (the demo PyTorch profile) with its own
`loss`; the demo JAX run; a real Chrome trace without step markers. Each test acts
as a user would and checks what the panel exposes (legend text and data attributes,
`tbReduceDashboard.waveforms.debug()`), never pixels; screenshots land in
/tmp/shots/wave_*.png (and test-artifacts/) for a person to look at.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from urllib.parse import urlencode

import pytest
from dashboard_support import CHROMIUM, PYTORCH_DEMO, ROOT, TensorBoardServer, checked_page, save_shot, wait_loaded

CORPUS = ROOT.parent / "shared" / "corpus"
TORCH_SMALL = CORPUS / "generated" / "torch_cpu_cnn_small"
NO_STEPS = CORPUS / "public" / "catapult" / "tracing__test_data__x_event_trace.json"
JAX_DEMO = ROOT / "demo_logdir" / "jax_mlp"
STALLED_TRACE = ROOT / "tests" / "fixtures" / "traces" / "torch_stalled_step.pt.trace.json.gz"  # step 5 sleeps 150 ms
MEMORY_TRACE = ROOT / "tests" / "fixtures" / "compare" / "memory.pt.trace.json.gz"  # keeps 4 MiB more a step from step 6

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: install the Debian package `chromium` (CI does)", allow_module_level=True)
if not PYTORCH_DEMO.is_dir() or not TORCH_SMALL.is_dir() or not NO_STEPS.is_file():
    pytest.skip("the demo profiles or ../shared/corpus are absent (CI has both)", allow_module_level=True)

sync_api = pytest.importorskip("playwright.sync_api")
event_pb2 = pytest.importorskip("tensorboard.compat.proto.event_pb2")
summary_pb2 = pytest.importorskip("tensorboard.compat.proto.summary_pb2")
from tensorboard.summary.writer.event_file_writer import EventFileWriter  # noqa: E402

RUN = "torch_small"
HOST = sorted(p.name for p in TORCH_SMALL.glob("*.pt.trace.json*"))[0].split(".pt.trace.json")[0]
OTHER = "pytorch_cnn"
STALLED = "stalled"
STALLED_HOST = "torch_stalled_step"
LONG_N = 20_000
SPIKE_AT = 12_345

# tag -> [(step, value)] in record order: the edge cases, written as TensorBoard writes them
EDGE = {
    "edge/lone": [(5, 0.42)],
    "edge/nan": [(s, 1.0 + 0.1 * s) if s != 4 else (s, math.nan) for s in range(10)],
    "edge/inf": [(s, 2.0 - 0.1 * s) if s not in (3, 7) else (s, math.inf if s == 3 else -math.inf) for s in range(10)],
    # steps 0..5, a restart at 3 (5 -> 3), on to 7, and 7 written twice: 2 reversals
    "edge/restart": [(s, 10.0 - s) for s in range(6)] + [(s, 9.5 - s) for s in range(3, 8)] + [(7, 2.0)],
    "edge/long": [(s, 50.0 if s == SPIKE_AT else math.sin(s / 300.0)) for s in range(LONG_N)],
}
LOSS_A = [(s, 2.0 * math.exp(-s / 15.0) + 0.15 * math.sin(s)) for s in range(0, 60, 2)]
LOSS_B = [(s, 1.6 * math.exp(-s / 25.0) + 0.1 * math.cos(1.3 * s)) for s in range(0, 60, 3)]


def write_scalars(folder: Path, series: dict[str, list]) -> None:
    """One event file in `folder`, records interleaved by position as a training loop writes them."""
    writer = EventFileWriter(str(folder))
    longest = max(len(points) for points in series.values())
    wall = 1_700_000_000.0
    for i in range(longest):
        for tag, points in series.items():
            if i < len(points):
                step, value = points[i]
                wall += 0.01
                summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
                writer.add_event(event_pb2.Event(step=step, wall_time=wall, summary=summary))
    writer.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("waveforms")
    logdir = root / "logdir"
    shutil.copytree(TORCH_SMALL, logdir / RUN)
    write_scalars(logdir / RUN, {**EDGE, "loss": LOSS_A})
    shutil.copytree(PYTORCH_DEMO, logdir / OTHER)
    write_scalars(logdir / OTHER, {"loss": LOSS_B})
    if JAX_DEMO.is_dir():
        shutil.copytree(JAX_DEMO, logdir / "jax_mlp")
    (logdir / STALLED).mkdir()
    shutil.copyfile(STALLED_TRACE, logdir / STALLED / STALLED_TRACE.name)
    (logdir / "nosteps").mkdir()
    shutil.copyfile(NO_STEPS, logdir / "nosteps" / NO_STEPS.name)
    (logdir / "memory").mkdir()
    shutil.copyfile(MEMORY_TRACE, logdir / "memory" / "mem.pt.trace.json.gz")
    tb = TensorBoardServer(logdir, root / "cache")
    try:
        yield tb
    finally:
        tb.stop()


@pytest.fixture
def page(browser):
    with checked_page(browser, height=1000) as pg:
        yield pg


def shot(target, name: str) -> None:
    save_shot(target, f"wave_{name}")


def wait_panel(page, timeout: float = 60000) -> None:
    """Until the panel has fetched what it shows (no entry still loading)."""
    page.wait_for_function("""() => {
      const p = document.querySelector('[data-testid=waveforms]');
      return p && p.dataset.state !== 'loading' && p.dataset.state !== 'idle'
        && p.dataset.drawn === 'true'  // the frame showing it, drawn
        && !document.querySelector('[data-testid=wave-legend] [data-status=loading]');
    }""", timeout=timeout)
    # a frame requested before now (a change of smoothing, of ticks) runs before this one
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => done()))")


def open_view(page, server, run: str = RUN, host: str = HOST, series: str | None = None):
    page.goto(server.plugin_url(f"view?{urlencode({'run': run, 'host': host, 'level': '2'})}"))
    wait_loaded(page)
    wait_panel(page)
    if series is not None:
        choose(page, series)
    return page


def choose(page, key: str) -> None:
    page.select_option("[data-testid=wave-series]", key)
    wait_panel(page)


def debug(page, values: bool = False) -> list[dict]:
    return page.evaluate("(v) => window.tbReduceDashboard.waveforms.debug({values: v})", values)


def legend(page) -> list[dict]:
    return page.evaluate("""() => [...document.querySelectorAll('[data-testid=wave-legend] li')].map((li) => ({
      text: li.innerText, ...li.dataset}))""")


def panel(page):
    return page.locator("[data-testid=waveforms]")


def set_smoothing(page, weight: float) -> None:
    page.evaluate("""(w) => {
      const s = document.querySelector('[data-testid=wave-smoothing]');
      s.value = String(w);
      s.dispatchEvent(new Event('input', {bubbles: true}));
    }""", weight)
    page.wait_for_timeout(80)


# ---- the routes the panel reads, as it reads them ---------------------------------------------------

def test_routes_list_the_series_the_panel_offers(server):
    status, tags = server.get_json(f"tags?{urlencode({'run': RUN})}")
    assert status == 200, tags
    have = {s["tag"]: s["points"] for s in tags["scalars"]}
    for tag, points in {**EDGE, "loss": LOSS_A}.items():
        assert have.get(tag) == len(points), (tag, have)
    host = next(h for h in tags["hosts"] if h["host"] == HOST)
    assert "step_time_ms" in host["series"]
    status, wave = server.get_json(f"waveforms?{urlencode({'run': RUN, 'host': HOST})}")
    assert status == 200 and wave["marker"] == "ProfilerStep#N" and len(wave["steps"]) == 5, wave


# ---- derived series: steps of the trace ---------------------------------------------------------------

def test_step_time_of_a_real_trace_is_plotted_with_the_slowest_marked(page, server):
    # five steps that drift (38–153 ms): none stands out by the robust margin, and the legend says so
    open_view(page, server, series="d:step_time_ms")
    _, wave = server.get_json(f"waveforms?{urlencode({'run': RUN, 'host': HOST})}")
    [entry] = debug(page, values=True)
    assert entry["status"] == "ok" and entry["derived"]
    assert entry["points"] == len(wave["steps"]) == 5
    assert entry["xs"] == [s["step"] for s in wave["steps"]]
    assert entry["ys"] == pytest.approx([s["step_time_ms"] for s in wave["steps"]])
    assert entry["slowest"] == wave["slowest"] == []
    assert entry["lines"] == 1 and entry["dots"] == 0 and entry["segments"] == [[0, 5]]
    [li] = legend(page)
    assert "5 points" in li["text"] and "no step stands out" in li["text"], li
    # the timeline's step-time track: fed while a derived series is shown, emptied for a scalar
    page.evaluate("""() => {
      const tl = window.tbReduceDashboard.timeline;
      window.__waves = [];
      if (typeof tl.setWaveform !== 'function') tl.setWaveform = () => {};
      const orig = tl.setWaveform.bind(tl);
      tl.setWaveform = (w) => { window.__waves.push(w && {name: w.name, points: w.points, marked: w.marked}); orig(w); };
    }""")
    choose(page, "s:loss")
    assert page.evaluate("() => window.__waves.at(-1)") is None
    choose(page, "d:compute_ms")
    fed = page.evaluate("() => window.__waves.at(-1)")
    assert fed["name"] == "step_time_ms" and fed["marked"] == wave["slowest"]
    windows = [(s["start_us"], s["end_us"], s["step"]) for s in wave["steps"]]
    assert [(p["t0"], p["t1"], p["step"]) for p in fed["points"]] == windows
    assert [p["value"] for p in fed["points"]] == pytest.approx([s["step_time_ms"] for s in wave["steps"]])
    # the stalled run: its slept step stands out and is marked (the server's list, slowest first)
    open_view(page, server, run=STALLED, host=STALLED_HOST, series="d:step_time_ms")
    _, stalled = server.get_json(f"waveforms?{urlencode({'run': STALLED, 'host': STALLED_HOST})}")
    entry = next(e for e in debug(page) if not e["overlay"])
    assert entry["slowest"] == stalled["slowest"] and entry["slowest"][0] == 5
    li = next(li for li in legend(page) if not li.get("overlay"))
    assert "slowest: step 5" in li["text"], li
    shot(page, "derived_step_time")


def test_each_derived_series_is_offered_and_reads_busy_time(page, server):
    open_view(page, server)
    _, wave = server.get_json(f"waveforms?{urlencode({'run': RUN, 'host': HOST})}")
    options = page.eval_on_selector_all("[data-testid=wave-series] option", "os => os.map(o => o.value)")
    for name in wave["series"]:
        assert f"d:{name}" in options
    assert "s:loss" in options and "s:edge/lone" in options
    busy = [n for n in wave["series"] if n != "step_time_ms"]
    assert busy, wave["series"]
    choose(page, f"d:{busy[0]}")
    [entry] = debug(page, values=True)
    key = busy[0][: -len("_ms")]
    assert entry["ys"] == pytest.approx([s["busy_ms"][key] for s in wave["steps"]])
    shot(panel(page), f"derived_{busy[0]}")


def test_peak_memory_per_step_is_offered_in_mb_and_plotted(page, server):
    open_view(page, server, run="memory", host="mem")
    labels = page.eval_on_selector_all("[data-testid=wave-series] option", "os => os.map(o => [o.value, o.text])")
    assert ["d:memory_peak_mb_cpu", "memory peak, cpu (MB)"] in labels, labels
    choose(page, "d:memory_peak_mb_cpu")
    [entry] = debug(page, values=True)
    _, wave = server.get_json(f"waveforms?{urlencode({'run': 'memory', 'host': 'mem'})}")
    assert entry["ys"] == pytest.approx([s["memory_mb"]["memory_peak_mb_cpu"] for s in wave["steps"]])
    assert entry["ys"][-1] - entry["ys"][0] > 30  # 8 steps of 4 MiB kept
    shot(panel(page), "derived_memory_peak")


def test_allocated_memory_is_a_counter_row_of_the_process_that_allocated(page, server):
    """Kineto's `[memory]` totals as a counter in the timeline (issue 27, item 4), reduced
    by the server as counters are, drawn by the counter track; its samples lead to no event."""
    open_view(page, server, run="memory", host="mem")
    page.wait_for_function("() => window.tbReduceDashboard.data.model.counters.some((c) => c.label.startsWith('memory'))",
                           timeout=30000)  # asked once the view is drawn (pending until the gzip's text is kept)
    counters = page.evaluate("""() => window.tbReduceDashboard.data.model.counters.map((c) => ({
      label: c.label, n: c.ts.length, max: c.max, min: c.min, k: Array.from(c.k).slice(0, 3)}))""")
    mem = [c for c in counters if c["label"] == "memory allocated (cpu, MB)"]
    assert len(mem) == 1 and not any("reserved" in c["label"] for c in counters), counters
    assert mem[0]["n"] > 100 and mem[0]["max"] > 35 and mem[0]["k"] == [-1, -1, -1]
    shot(page.locator("[data-testid=timeline]"), "memory_counter")


def test_clicking_a_step_zooms_the_timeline_to_that_step(page, server):
    open_view(page, server, series="d:step_time_ms")
    [entry] = debug(page)
    i = 2
    step = entry["steps"][i]
    where = page.evaluate(f"() => window.tbReduceDashboard.waveforms.locate({json.dumps(RUN)}, {i})")
    page.mouse.move(where["clientX"], where["clientY"])
    tip = page.locator(".tbr-wave-tooltip")
    tip.wait_for(state="visible")
    assert f"step {step['step']}" in tip.inner_text() and "click" in tip.inner_text()
    page.mouse.click(where["clientX"], where["clientY"])
    # the view is the step's window (`timeline.zoomTo` may leave a margin around it: at most 10 % a side)
    a, b = step["start_us"], step["end_us"]
    page.wait_for_function("""([a, b]) => {
      const t = document.querySelector('[data-testid=timeline]');
      const s = Number(t.dataset.startUs), e = Number(t.dataset.endUs), pad = 0.1 * (b - a) + 1e-3;
      return s <= a + 1e-3 && e >= b - 1e-3 && s >= a - pad && e <= b + pad;
    }""", arg=[a, b], timeout=15000)
    wait_loaded(page)
    view = page.evaluate("() => window.tbReduceDashboard.timeline.getView()")
    assert (view[0] + view[1]) / 2 == pytest.approx((a + b) / 2, abs=1e-3)
    assert b - a <= view[1] - view[0] <= 1.2 * (b - a) + 2e-3
    # the window is the trace's own ProfilerStep#N slice: same µs as the timeline
    marker = page.evaluate("""(name) => {
      const m = window.tbReduceDashboard.timeline.model, s = m.slices;
      for (let i = 0; i < s.count; i += 1) {
        if (m.names[s.name[i]] === name) return [s.ts[i] + m.origin, s.ts[i] + s.dur[i] + m.origin];
      }
      return null;
    }""", f"ProfilerStep#{step['step']}")
    assert marker is not None
    assert marker[0] == pytest.approx(step["start_us"], abs=1e-3) and marker[1] == pytest.approx(step["end_us"], abs=1e-3)
    shot(page, "click_zoomed_timeline")


def test_clicking_a_step_in_the_timelines_waveform_row_shows_that_step(page, server):
    open_view(page, server, run=STALLED, host=STALLED_HOST, series="d:step_time_ms")
    entry = next(e for e in debug(page) if not e["overlay"])
    slowest = entry["slowest"][0] if entry.get("slowest") else 0
    step = entry["steps"][slowest]
    where = page.evaluate(f"""() => {{
      const tl = window.tbReduceDashboard.timeline, p = tl.locate('waveform', {slowest});
      const r = tl.canvas.getBoundingClientRect();
      return p && {{x: r.left + p.x, y: r.top + p.y}};
    }}""")
    assert where, "the timeline has no waveform row"
    page.mouse.click(where["x"], where["y"])
    details = page.locator(".tbr-detail-name")
    details.wait_for(state="visible")
    assert details.inner_text() == f"step {step['step']}"
    assert "one of the slowest steps" in page.locator(".tbr-detail-basics").inner_text()
    page.get_by_role("button", name="Zoom to this step").click()
    view = page.evaluate("() => window.tbReduceDashboard.timeline.getView()")
    assert view[0] <= step["start_us"] + 1e-3 and view[1] >= step["end_us"] - 1e-3
    shot(page, "timeline_row_clicked_step")


def test_a_trace_without_step_markers_says_no_steps(page, server):
    _, runs = server.get_json("runs")
    host = next(r for r in runs if r["run"] == "nosteps")["hosts"][0]["host"]
    _, wave = server.get_json(f"waveforms?{urlencode({'run': 'nosteps', 'host': host})}")
    assert wave["steps"] == [] and wave["reason"].startswith("no step markers")
    open_view(page, server, run="nosteps", host=host)
    options = page.eval_on_selector_all("[data-testid=wave-series] option", "os => os.map(o => o.value)")
    if "d:step_time_ms" in options:
        choose(page, "d:step_time_ms")
        [entry] = debug(page)
        assert entry["status"] == "nosteps" and entry["points"] == 0
        [li] = legend(page)
        assert f"no steps: {wave['reason']}" in li["text"]
        empty = page.locator("[data-testid=wave-empty]")
        assert empty.is_visible() and "no steps: no step markers" in empty.inner_text()
    else:  # the route lists no derived series for it: the panel says it has nothing to plot
        assert "no series" in page.locator("[data-testid=wave-empty]").inner_text().lower()
    shot(panel(page), "no_steps")


# ---- scalar edge cases, drawn as the numbers are -----------------------------------------------------

def test_a_lone_point_is_a_dot(page, server):
    open_view(page, server, series="s:edge/lone")
    [entry] = debug(page)
    assert entry["points"] == 1 and entry["lines"] == 0 and entry["dots"] == 1 and entry["segments"] == [[0, 1]]
    [li] = legend(page)
    assert "1 point" in li["text"] and li["dots"] == "1"
    shot(panel(page), "lone_point")


def test_nan_in_the_middle_leaves_a_counted_gap(page, server):
    open_view(page, server, series="s:edge/nan")
    [entry] = debug(page, values=True)
    assert entry["ys"][4] == "NaN" and entry["smooth"][4] == "NaN"
    assert entry["nan"] == 1 and entry["segments"] == [[0, 4], [5, 10]] and entry["lines"] == 2
    assert entry["gaps"] == ["NaN"]
    [li] = legend(page)
    assert "1 NaN" in li["text"] and li["segments"] == "2"
    shot(panel(page), "nan_gap")


def test_infinities_leave_gaps_with_markers(page, server):
    open_view(page, server, series="s:edge/inf")
    [entry] = debug(page, values=True)
    assert entry["ys"][3] == "Infinity" and entry["ys"][7] == "-Infinity"
    assert entry["posInf"] == 1 and entry["negInf"] == 1 and entry["segments"] == [[0, 3], [4, 7], [8, 10]]
    assert entry["gaps"] == ["+Inf", "-Inf"]
    text = legend(page)[0]["text"]
    assert "1 +Inf" in text and "1 -Inf" in text
    # the finite values set the axis: the line is drawn within the plot, not squashed by ±Inf
    assert entry["topPx"] == pytest.approx(entry["maxPx"]) and entry["bottomPx"] == pytest.approx(entry["minPx"])
    shot(panel(page), "inf_gaps")


def test_a_restarting_step_back_tracks_and_is_counted_and_can_split(page, server):
    open_view(page, server, series="s:edge/restart")
    [entry] = debug(page, values=True)
    assert entry["xs"] == [s for s, _ in EDGE["edge/restart"]]  # record order, as written
    assert entry["reversals"] == 2 and entry["segments"] == [[0, 12]] and entry["lines"] == 1
    [li] = legend(page)
    assert "2 reversals" in li["text"]
    shot(panel(page), "restart_backtracks")
    page.check("[data-testid=wave-split]")
    page.wait_for_timeout(80)
    [entry] = debug(page)
    assert entry["segments"] == [[0, 6], [6, 11], [11, 12]] and entry["lines"] == 2 and entry["dots"] == 1
    assert legend(page)[0]["segments"] == "3"
    shot(panel(page), "restart_split")


def test_a_long_series_keeps_its_spike(page, server):
    open_view(page, server, series="s:edge/long")
    [entry] = debug(page)
    assert entry["points"] == LONG_N
    width = page.evaluate("() => document.querySelector('[data-testid=wave-canvas]').clientWidth")
    assert entry["vertices"] <= 4 * width < LONG_N  # per pixel column: first, min, max, last
    assert entry["topPx"] == pytest.approx(entry["maxPx"])  # the one spike is drawn to its height
    assert entry["bottomPx"] == pytest.approx(entry["minPx"])
    assert "20,000 points" in legend(page)[0]["text"]
    shot(panel(page), "long_spike")


def test_the_pixel_reduction_is_exact_on_random_data(page, server):
    """The pure function behind long series, in the browser: every pixel column keeps its
    vertical extent and the polyline's joins, on random data with spikes."""
    open_view(page, server)
    result = page.evaluate("""async () => {
      const m = await import(new URL('static/panels/series_draw.js', document.baseURI).href);
      let seed = 7;
      const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
      const bad = [];
      for (let trial = 0; trial < 30; trial += 1) {
        const n = 1 + Math.floor(rnd() * 5000), px = [], py = [];
        for (let i = 0; i < n; i += 1) {
          px.push(rnd() < 0.02 ? rnd() * 300 : (i / n) * 300);
          py.push(rnd() < 0.01 ? 1e6 * rnd() : rnd());
        }
        const keep = m.pixelDecimate(px, py, 0, n);
        const cols = (idx) => { const c = new Map(); for (const i of idx) { const k = Math.floor(px[i]);
          const v = c.get(k) || [Infinity, -Infinity]; c.set(k, [Math.min(v[0], py[i]), Math.max(v[1], py[i])]); } return c; };
        const all = cols([...Array(n).keys()]), kept = cols(keep);
        for (const [k, v] of all) { const w = kept.get(k); if (!w || w[0] !== v[0] || w[1] !== v[1]) bad.push([trial, k]); }
        if (keep[0] !== 0 || keep[keep.length - 1] !== n - 1) bad.push([trial, 'ends']);
        for (let j = 1; j < keep.length; j += 1) if (!(keep[j] > keep[j - 1])) bad.push([trial, 'order']);
      }
      const lone = m.analyzeSeries([3], [1]);
      const mixed = m.analyzeSeries([0, 1, 2, 3, 4, 5], [1, NaN, 2, Infinity, -Infinity, 4]);
      return {bad, lone: [lone.lines, lone.dots], mixed: [mixed.nan, mixed.posInf, mixed.negInf, mixed.dots, mixed.segments]};
    }""")
    assert result["bad"] == []
    assert result["lone"] == [0, 1]
    assert result["mixed"] == [1, 1, 1, 3, [[0, 1], [2, 3], [5, 6]]]


# ---- smoothing, hover, overlay, collapse, errors --------------------------------------------------------

def test_smoothing_matches_the_python_twin_and_the_slider_changes_it(page, server):
    smoothing = pytest.importorskip("tb_reduce_plugin.waveforms.smoothing")
    open_view(page, server, series="s:loss")
    assert page.input_value("[data-testid=wave-smoothing]") == "0.6"
    [entry] = debug(page, values=True)
    assert entry["smooth"] == pytest.approx(smoothing.smooth(entry["ys"], 0.6).tolist(), rel=1e-12)
    where = page.evaluate(f"() => window.tbReduceDashboard.waveforms.locate({json.dumps(RUN)}, 10)")
    page.mouse.move(where["clientX"], where["clientY"])
    tip = page.locator(".tbr-wave-tooltip")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    assert f"step {LOSS_A[10][0]}" in text and "value" in text and "smoothed" in text, text
    shot(panel(page), "loss_smoothed_hover")
    set_smoothing(page, 0.95)
    [entry] = debug(page, values=True)
    assert entry["smooth"] == pytest.approx(smoothing.smooth(entry["ys"], 0.95).tolist(), rel=1e-12)
    shot(panel(page), "loss_smoothing_095")
    set_smoothing(page, 0)
    [entry] = debug(page, values=True)
    assert entry["smooth"] == pytest.approx(entry["ys"])


def test_two_runs_overlay_in_distinct_colours(page, server):
    open_view(page, server, series="s:loss")
    page.check(f"[data-testid=wave-runs] input[data-run={json.dumps(OTHER)}]")
    wait_panel(page)
    entries = legend(page)
    assert {e["run"] for e in entries} == {RUN, OTHER}
    assert len({e["color"] for e in entries}) == 2
    points = {e["run"]: int(e["points"]) for e in entries}
    assert points == {RUN: len(LOSS_A), OTHER: len(LOSS_B)}
    shot(panel(page), "overlay_loss")
    # a derived series overlays too, each run from its own trace (the demo PyTorch run is the
    # same profile as this one, so its line lies on this one's; the JAX run's steps differ)
    choose(page, "d:step_time_ms")
    entries = legend(page)
    assert {e["run"] for e in entries} == {RUN, OTHER} and all(e["status"] == "ok" for e in entries), entries
    assert len({e["color"] for e in entries}) == 2
    _, runs = server.get_json("runs")
    jax = next((r for r in runs if r["run"].startswith("jax_mlp")), None)
    if jax is None:
        return
    page.check(f"[data-testid=wave-runs] input[data-run={json.dumps(jax['run'])}]")
    wait_panel(page)
    entries = legend(page)
    assert len(entries) == 3 and len({e["color"] for e in entries}) == 3
    mine = next(e for e in debug(page, values=True) if e["run"] == jax["run"])
    assert mine["status"] == "ok" and mine["points"] > 5, mine
    shot(page, "overlay_step_time")
    # a step of the overlaid run (its longest): the timeline switches to that run and host, at that step
    i = max(range(len(mine["ys"])), key=lambda k: mine["ys"][k])
    step = mine["steps"][i]
    where = page.evaluate(f"() => window.tbReduceDashboard.waveforms.locate({json.dumps(jax['run'])}, {i})")
    page.mouse.click(where["clientX"], where["clientY"])
    page.wait_for_function("""([run, a, b]) => {
      const t = document.querySelector('[data-testid=timeline]');
      const s = Number(t.dataset.startUs), e = Number(t.dataset.endUs), pad = 0.1 * (b - a) + 1e-3;
      return document.querySelector('[data-testid=run-select]').value === run
        && s <= a + 1e-3 && e >= b - 1e-3 && s >= a - pad && e <= b + pad;
    }""", arg=[jax["run"], step["start_us"], step["end_us"]], timeout=30000)
    assert page.input_value("[data-testid=host-select]") == mine["host"]
    wait_loaded(page)
    wait_panel(page)
    # the overlay stays as it was: the three runs, the clicked one now the timeline's
    assert {e["run"] for e in legend(page)} == {RUN, OTHER, jax["run"]}
    shot(page, "overlay_clicked_other_run")


def test_a_tag_missing_from_an_overlaid_run_says_so(page, server):
    open_view(page, server, series="s:edge/nan")
    page.check(f"[data-testid=wave-runs] input[data-run={json.dumps(OTHER)}]")
    wait_panel(page)
    other = next(e for e in legend(page) if e["run"] == OTHER)
    assert other["status"] == "missing" and "no tag" in other["text"]


def test_the_panel_collapses(page, server):
    open_view(page, server)
    canvas = page.locator("[data-testid=wave-canvas]")
    before = page.locator("[data-testid=timeline]").bounding_box()["height"]
    page.click("[data-testid=wave-toggle]")
    assert not canvas.is_visible() and panel(page).get_attribute("data-collapsed") == "1"
    page.wait_for_timeout(100)
    assert page.locator("[data-testid=timeline]").bounding_box()["height"] > before + 100
    shot(page, "collapsed")
    page.click("[data-testid=wave-toggle]")
    assert canvas.is_visible()


def test_route_failures_show_one_line_in_the_panel(page, server):
    page.route("**/data/plugin/tb_reduce/waveforms?*", lambda route: route.fulfill(
        status=422, content_type="application/json", body=json.dumps({"error": "cannot read the steps: boom"})))
    open_view(page, server, series="d:step_time_ms")
    note = page.locator("[data-testid=wave-note]")
    assert "cannot read the steps: boom" in note.inner_text()
    assert note.get_attribute("role") == "alert"
    assert "\n" not in note.inner_text().strip()
    assert legend(page)[0]["status"] == "error"
    shot(panel(page), "route_error")
    page.unroute("**/data/plugin/tb_reduce/waveforms?*")
    page.route("**/data/plugin/tb_reduce/tags?*", lambda route: route.fulfill(
        status=404, content_type="application/json", body=json.dumps({"error": "no run named 'x'"})))
    page.reload()
    wait_loaded(page)
    wait_panel(page)
    assert "Could not list the series" in note.inner_text() and "no run named 'x'" in note.inner_text()


def test_the_panel_works_inside_tensorboards_iframe(page, server):
    """TensorBoard's own page, CSP and all: the panel lists, fetches and draws there too."""
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    page.goto(f"{server.base}/#tb_reduce")
    frame = page.wait_for_selector("iframe", timeout=30000).content_frame()
    frame.wait_for_function("() => document.querySelectorAll('[data-testid=run-select] option').length >= 4")
    frame.select_option("[data-testid=run-select]", RUN)
    wait_loaded(frame)
    wait_panel(frame)
    choose(frame, "s:edge/nan")
    [li] = legend(frame)
    assert li["status"] == "ok" and "1 NaN" in li["text"]
    swatch = frame.evaluate("() => getComputedStyle(document.querySelector('.tbr-wave-swatch')).backgroundColor")
    assert swatch not in ("", "rgba(0, 0, 0, 0)"), swatch  # set through the CSSOM, which the CSP allows
    assert violations == []
    shot(page, "in_tensorboard")
