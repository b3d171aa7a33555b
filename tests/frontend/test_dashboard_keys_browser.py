"""Issue 13, parts 3 and 4, in a real headless Chromium against a real TensorBoard:
the keyboard shortcuts and their help overlay (keys.js), the step overview strip
(panels/steps.js), slice labels that fall back to their most telling short form
(tracks/common.js), and dark mode (theme.js, dashboard.css, the canvas palettes).

Screenshots go to the test's tmp_path and to /tmp/shots13/ for a person to look at.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path
from urllib.parse import urlencode

import pytest
from dashboard_support import CHROMIUM, PYTORCH_DEMO, ROOT, TensorBoardServer, wait_loaded

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: install the Debian package `chromium` (CI does)", allow_module_level=True)
STALLED = ROOT / "demo_logdir" / "stalled_step"
STALLED_TRACE = STALLED / "torch_stalled_step.pt.trace.json.gz"
if not STALLED_TRACE.is_file() or not PYTORCH_DEMO.is_dir():
    pytest.skip("demo_logdir/stalled_step or the demo PyTorch profile is absent", allow_module_level=True)

sync_api = pytest.importorskip("playwright.sync_api")

SHOTS = Path("/tmp/shots13")
RUN = "stalled_step"
HOST = "torch_stalled_step"
PLAIN_RUN = "plain"  # a trace without step markers
PLAIN_HOST = "worker"


def profiler_steps() -> list[tuple[int, float, float]]:
    """(step, ts, dur) of the ProfilerStep#N slices of the stalled run, read from the file itself."""
    doc = json.loads(gzip.decompress(STALLED_TRACE.read_bytes()))
    out = []
    for e in doc["traceEvents"]:
        m = re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name", "")))
        if m and e.get("ph") == "X":
            out.append((int(m.group(1)), float(e["ts"]), float(e["dur"])))
    return sorted(out, key=lambda s: s[1])


def plain_trace() -> dict:
    """No step markers; long names that are cut in a narrow slice."""
    events = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "trainer"}},
        {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "main"}},
    ]
    names = ["aten::convolution_backward_overrideable", "torch.nn.functional.scaled_dot_product_attention",
             "jit_train_step(f32[8,128], s32[8])", "ProfilerLikeMarker#12345"]
    t = 0
    for k in range(40):
        name = names[k % len(names)]
        events.append({"ph": "X", "pid": 1, "tid": 1, "ts": t, "dur": 900, "name": name})
        t += 1000
    return {"traceEvents": events, "displayTimeUnit": "ms"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("keys")
    logdir = root / "logdir"
    shutil.copytree(STALLED, logdir / RUN)
    shutil.copytree(PYTORCH_DEMO, logdir / "pytorch_cnn")
    (logdir / PLAIN_RUN).mkdir()
    (logdir / PLAIN_RUN / f"{PLAIN_HOST}.pt.trace.json").write_text(json.dumps(plain_trace()))
    tb = TensorBoardServer(logdir, root / "cache")
    try:
        yield tb
    finally:
        tb.stop()


def shot(target, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    target.screenshot(path=str(path))
    SHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, SHOTS / path.name)
    return path


def open_view(page, server, run=RUN, host=HOST, level="0"):
    page.goto(server.plugin_url(f"view?{urlencode({'run': run, 'host': host, 'level': level})}"))
    wait_loaded(page)
    return page


def open_tab(page, server):
    """TensorBoard's UI with the Trace Reduce tab; returns the plugin's iframe once it has loaded a trace."""
    page.goto(f"{server.base}/#tb_reduce")
    frame = page.wait_for_selector("iframe", timeout=30000).content_frame()
    frame.wait_for_function("() => document.querySelectorAll('[data-testid=run-select] option').length >= 3")
    wait_loaded(frame)
    return frame


def wait_steps(target, state="ready"):
    target.wait_for_function(
        "() => { const s = document.querySelector('[data-testid=steps]'); "
        f"return s && s.dataset.state === {json.dumps(state)}; }}",
        timeout=30000)


# The canvas's own pixels: the share of the plot (right of the gutter, under the ruler) that is dark.
DARK_SHARE_JS = """() => {
  const tl = window.tbReduceDashboard.timeline;
  const c = tl.canvas;
  const x0 = Math.ceil(tl.gutter * tl.dpr), y0 = Math.ceil(30 * tl.dpr);
  const data = c.getContext('2d').getImageData(x0, y0, c.width - x0, c.height - y0).data;
  let dark = 0;
  for (let i = 0; i < data.length; i += 4) {
    const lum = 0.2126 * data[i] + 0.7152 * data[i + 1] + 0.0722 * data[i + 2];
    if (lum < 80) dark += 1;
  }
  const ruler = c.getContext('2d').getImageData(2, 2, 1, 1).data;
  return {dark: dark / (data.length / 4), ruler: Array.from(ruler.slice(0, 3))};
}"""

THEME_JS = """() => {
  const app = document.querySelector('.tbr-app');
  return {theme: app.dataset.theme, source: app.dataset.themeSource,
          bg: getComputedStyle(app).backgroundColor, fg: getComputedStyle(app).color,
          bar: getComputedStyle(document.querySelector('.tbr-bar')).backgroundColor,
          accent: getComputedStyle(app).getPropertyValue('--tbr-accent').trim()};
}"""


def luminance(css: str) -> float:
    r, g, b = (int(v) for v in re.findall(r"\d+", css)[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


# ---- keyboard ------------------------------------------------------------------------


def test_question_mark_opens_a_dialog_listing_every_binding_and_esc_closes_it(page, server, tmp_path):
    open_view(page, server)
    page.locator("body").click(position={"x": 5, "y": 880})  # nothing focused but the page
    page.keyboard.press("?")
    dialog = page.locator("[data-testid=keys-help]")
    dialog.wait_for(state="visible")
    assert dialog.get_attribute("role") == "dialog" and dialog.get_attribute("aria-modal") == "true"
    assert page.evaluate("() => document.querySelector('[data-testid=keys-help]').contains(document.activeElement)")
    assert page.get_attribute("[data-testid=keys-button]", "aria-expanded") == "true"
    table = page.evaluate("""async () => {
      const {BINDINGS} = await import(new URL('static/keys.js', location.href).href);
      return BINDINGS.map((b) => ({key: b.key, description: b.description, group: b.group, here: !!b.action}));
    }""")
    rows = page.evaluate("""() => [...document.querySelectorAll('[data-testid=keys-row]')].map((r) => ({
      key: r.dataset.key, group: r.dataset.group, shown: r.querySelector('th').innerText.replace(/\\s+/g, ''),
      text: r.querySelector('td').innerText}))""")
    # every binding of the table, in its order, and nothing else
    assert [(r["key"], r["group"]) for r in rows] == [(b["key"], b["group"]) for b in table]
    for r, b in zip(rows, table):
        assert b["description"] in r["text"], (r, b)
        assert r["shown"] == b["key"].replace(" ", ""), (r, b)
    keys = {b["key"] for b in table}
    # the app's own keys, the timeline's (timeline.js), the search box's and the range drag
    assert {"?", "Esc", "/", "f", "m", "n", "Shift+N"} <= keys
    assert {"W / S", "A / D", "Wheel", "Shift+Wheel", "Drag", "Shift+Drag", "Click"} <= keys
    assert {"Enter", "Shift+Enter"} <= keys
    shot(page, tmp_path, "help_overlay_light")

    page.keyboard.press("Tab")  # focus stays in the dialog
    assert page.evaluate("() => document.querySelector('[data-testid=keys-help]').contains(document.activeElement)")
    page.keyboard.press("Escape")
    dialog.wait_for(state="hidden")
    assert page.get_attribute("[data-testid=keys-button]", "aria-expanded") == "false"

    # the toolbar's ? button opens it too; a click beside the dialog closes it, focus back on the button
    page.click("[data-testid=keys-button]")
    dialog.wait_for(state="visible")
    page.mouse.click(8, 8)
    dialog.wait_for(state="hidden")
    assert page.evaluate("() => document.activeElement === document.querySelector('[data-testid=keys-button]')")


def test_keys_call_the_app_and_are_ignored_while_typing(page, server):
    open_view(page, server)
    page.evaluate("""() => {
      const app = window.tbReduceDashboard;
      window.__calls = [];
      for (const m of ['focusSearch', 'searchNext', 'searchPrev', 'frameSelected', 'markSelected', 'clearAll']) {
        app[m] = () => window.__calls.push(m);
      }
      const input = document.createElement('input');
      input.id = 'scratch';
      input.setAttribute('aria-label', 'scratch');
      document.querySelector('.tbr-bar').append(input);
      document.activeElement.blur();
    }""")
    for key in ["/", "f", "m", "n", "Shift+N", "Escape"]:
        page.keyboard.press(key)
    assert page.evaluate("window.__calls") == ["focusSearch", "frameSelected", "markSelected", "searchNext",
                                               "searchPrev", "clearAll"]
    # Esc with the overlay open closes it and clears nothing
    page.keyboard.press("?")
    page.locator("[data-testid=keys-help]").wait_for(state="visible")
    page.keyboard.press("Escape")
    page.locator("[data-testid=keys-help]").wait_for(state="hidden")
    assert page.evaluate("window.__calls.length") == 6
    # typing in a field: letters and ? are text, Esc still works
    page.focus("#scratch")
    page.keyboard.type("f/m?n")
    assert page.input_value("#scratch") == "f/m?n"
    assert page.locator("[data-testid=keys-help]").is_hidden()
    page.keyboard.press("Escape")
    assert page.evaluate("window.__calls") [-1] == "clearAll" and page.evaluate("window.__calls.length") == 7
    # methods that are not there (yet) are skipped without an error (checked_page fails on one)
    page.evaluate("""() => { const app = window.tbReduceDashboard;
      const names = ['focusSearch', 'searchNext', 'searchPrev', 'frameSelected', 'markSelected', 'clearAll'];
      for (const m of names) app[m] = undefined;
      document.activeElement.blur(); }""")
    for key in ["/", "f", "m", "n", "Shift+N", "Escape"]:
        page.keyboard.press(key)


# ---- the step overview strip ----------------------------------------------------------


def test_step_strip_marks_the_stalled_step_and_a_click_zooms_to_it(page, server, tmp_path):
    steps = profiler_steps()
    slowest = max(steps, key=lambda s: s[2])
    open_view(page, server)
    wait_steps(page)
    d = page.evaluate("() => window.tbReduceDashboard.steps.debug()")
    assert d["source"] == "waveforms" and not d["hidden"]
    assert [s["step"] for s in d["steps"]] == [s[0] for s in steps]
    assert d["slowestStep"] == slowest[0]
    for got, (_, ts, dur) in zip(d["steps"], steps):
        assert abs(got["start_us"] - ts) < 1e-3 and abs(got["ms"] - dur / 1000) < 1e-3
    label = page.inner_text("[data-testid=steps-slowest]")
    assert label == f"slowest: #{slowest[0]}, {slowest[2] / 1000:.1f} ms", label
    strip = page.locator("[data-testid=steps]")
    box = strip.bounding_box()
    assert 36 <= box["height"] <= 48, box  # compact
    # the bars: one per step, the slowest one the tallest and red
    pixels = page.evaluate("""() => {
      const st = window.tbReduceDashboard.steps, c = st.canvas, d = window.devicePixelRatio || 1;
      const ctx = c.getContext('2d');
      return st.steps.map((_, i) => { const p = st.locate(i); const r = c.getBoundingClientRect();
        const px = ctx.getImageData(Math.round((p.clientX - r.left) * d), Math.round((p.clientY - r.top) * d), 1, 1).data;
        return {top: p.top, rgb: [px[0], px[1], px[2]]}; });
    }""")
    i_slow = d["slowest"]
    assert min(range(len(pixels)), key=lambda i: pixels[i]["top"]) == i_slow
    r, g, b = pixels[i_slow]["rgb"]
    assert r > 150 and g < 90 and b < 90, pixels[i_slow]
    assert all(p["rgb"][2] > p["rgb"][0] for i, p in enumerate(pixels) if i != i_slow), pixels

    # hover says the step's number and time
    where = page.evaluate(f"() => window.tbReduceDashboard.steps.locate({i_slow})")
    page.mouse.move(where["clientX"], where["clientY"])
    tip = page.locator(".tbr-steps-tooltip")
    tip.wait_for(state="visible")
    assert f"step #{slowest[0]}" in tip.inner_text() and f"{slowest[2] / 1000:.1f} ms" in tip.inner_text()
    shot(page, tmp_path, "step_strip_hover")

    # a click zooms the timeline to that step's span (10 % of it on each side)
    page.mouse.click(where["clientX"], where["clientY"])
    page.wait_for_function(f"""() => {{ const v = window.tbReduceDashboard.timeline.getView();
      return v && v[1] - v[0] < {slowest[2] * 1.5}; }}""")
    view = page.evaluate("() => window.tbReduceDashboard.timeline.getView()")
    pad = slowest[2] * 0.1
    assert abs(view[0] - (slowest[1] - pad)) < 1 and abs(view[1] - (slowest[1] + slowest[2] + pad)) < 1, (view, slowest)
    wait_loaded(page)
    page.wait_for_timeout(250)
    d = page.evaluate("() => window.tbReduceDashboard.steps.debug()")
    vis = {s["step"]: s["visible"] for s in d["steps"]}
    assert vis[slowest[0]] == [0, 1]  # the step in full
    assert all(v is None or v[1] - v[0] < 0.5 for k, v in vis.items() if k != slowest[0]), vis
    assert d["band"] is not None
    shot(page, tmp_path, "step_strip_zoomed")
    shot(page.locator("[data-testid=steps]"), tmp_path, "step_strip_only")

    # the keyboard: the focused strip picks steps with the arrows and zooms with Enter
    page.focus("[data-testid=steps-canvas]")
    page.keyboard.press("Home")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Enter")
    first = steps[1]
    page.wait_for_function(f"""() => {{ const v = window.tbReduceDashboard.timeline.getView();
      return v && Math.abs(v[0] - {first[1] - first[2] * 0.1}) < 1; }}""")


def test_step_strip_falls_back_to_the_traces_markers_and_says_why_when_there_are_none(page, server, tmp_path):
    # a server whose waveforms route has nothing (an older one, a failed derivation): the loaded trace's markers
    page.route(re.compile(r".*/data/plugin/tb_reduce/waveforms\?.*"),
               lambda route: route.fulfill(status=500, content_type="application/json", body='{"error": "no derivation"}'))
    open_view(page, server)
    wait_steps(page)
    d = page.evaluate("() => window.tbReduceDashboard.steps.debug()")
    assert d["source"] == "trace"
    steps = profiler_steps()
    assert [s["step"] for s in d["steps"]] == [s[0] for s in steps]
    assert d["slowestStep"] == max(steps, key=lambda s: s[2])[0]
    page.unroute(re.compile(r".*/data/plugin/tb_reduce/waveforms\?.*"))

    # a trace without markers: no strip, one line saying why
    page.select_option("[data-testid=run-select]", PLAIN_RUN)
    wait_loaded(page)
    wait_steps(page, "none")
    reason = page.locator("[data-testid=steps-reason]")
    assert reason.is_visible()
    assert "no step markers" in reason.inner_text().lower()
    assert page.locator("[data-testid=steps-canvas]").is_hidden()
    assert page.locator("[data-testid=steps]").bounding_box()["height"] < 26
    shot(page, tmp_path, "step_strip_none")


def test_step_strip_with_more_steps_than_pixels_keeps_every_spike(page, server, tmp_path):
    open_view(page, server)
    d = page.evaluate("""async () => {
      const {StepStrip} = await import(new URL('static/panels/steps.js', location.href).href);
      const box = document.createElement('div');
      box.style.width = '600px';
      document.querySelector('.tbr-app').prepend(box);
      const steps = [];
      for (let i = 0; i < 20000; i += 1) {
        const ms = i === 13579 ? 900 : 100 + (i % 7);
        steps.push({step: i, start_us: i * 1000, end_us: i * 1000 + ms * 1000, step_time_ms: ms});
      }
      const strip = new StepStrip(box, {fetchSteps: async () => ({steps, slowest: [13579], marker: 'ProfilerStep#N'}),
        gutter: () => 150});
      strip.setContext({run: 'r', host: 'h'});
      await new Promise((r) => setTimeout(r, 300));
      strip.setView([5e6, 6e6]);
      strip.draw();
      const c = strip.canvas, dpr = window.devicePixelRatio || 1, p = strip.locate(13579), r = c.getBoundingClientRect();
      const px = Math.floor((p.clientX - r.left) * dpr), py = Math.floor((p.top - r.top + 1) * dpr);
      const top = c.getContext("2d").getImageData(px, py, 1, 1).data;
      const at = strip.pick(p.clientX - r.left);
      window.__strip = box;
      return {debug: {...strip.debug(), steps: strip.steps.length}, top: Array.from(top.slice(0, 3)), at,
              label: strip.slowLabel.textContent};
    }""")
    assert d["debug"]["steps"] == 20000 and d["debug"]["slowestStep"] == 13579
    assert d["label"] == "slowest: #13579, 900 ms"
    assert d["at"] == 13579  # the pixel column holding the spike picks it
    r, g, b = d["top"]
    assert r > 150 and g < 90 and b < 90, d["top"]  # drawn, red, at its full height
    assert d["debug"]["band"] is not None
    shot(page.locator(".tbr-app > div:first-child"), tmp_path, "step_strip_dense")


# ---- slice labels ---------------------------------------------------------------------

LABEL_CASES = [
    # (name, width in characters, the label)
    ("ProfilerStep#17", 40, "ProfilerStep#17"),
    ("ProfilerStep#17", 10, "#17"),
    ("aten::convolution", 14, "convolution"),
    ("aten::convolution", 30, "aten::convolution"),
    ("jit_train_step(f32[8,128], s32[8])", 20, "jit_train_step"),
    ("PjitFunction(train_step)", 12, "train_step"),
    ("jit(train_step)/jit(main)/dot_general", 20, "dot_general"),
    ("torch.nn.functional.scaled_dot_product_attention", 30, "scaled_dot_product_attention"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int, float*)", 45,
     "at::native::vectorized_elementwise_kernel"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int, float*)", 32,
     "vectorized_elementwise_kernel"),
    ("nn.Module: Conv2d_0", 10, "Conv2d_0"),
    ("train.py(45): forward", 12, "forward"),
    ("$array.py:298 __float__", 12, "__float__"),
    ("Optimizer.step#SGD.step", 12, "SGD.step"),
    ("model/dense_1/MatMul", 10, "MatMul"),
    ("<built-in method conv2d of type object at 0x7f>", 20, "conv2d"),
    ("aten::convolution", 6, "convo…"),  # no short form fits: the shortest one, cut
    ("cudaLaunchKernel", 8, "cudaLau…"),  # no short form at all: the name, cut
    ("Memcpy HtoD (Pageable -> Device)", 14, "Memcpy HtoD"),
]


def test_slice_labels_fall_back_to_their_most_telling_short_form(page, server, tmp_path):
    open_view(page, server, run=PLAIN_RUN, host=PLAIN_HOST)
    got = page.evaluate("""async (cases) => {
      const {fitLabel} = await import(new URL('static/tracks/common.js', location.href).href);
      return cases.map(([name, width]) => fitLabel(name, width));
    }""", [[n, w] for n, w, _ in LABEL_CASES])
    assert got == [want for _, _, want in LABEL_CASES], list(zip(LABEL_CASES, got))

    # the timeline draws them: a view where each slice is ~100 px wide (about 16 characters)
    texts = page.evaluate("""() => {
      const tl = window.tbReduceDashboard.timeline;
      const drawn = [];
      const fill = tl.ctx.fillText;
      tl.ctx.fillText = function (t, ...rest) { drawn.push(String(t)); return fill.call(this, t, ...rest); };
      const [w0] = tl.model.window;
      tl.setView(w0, w0 + 1000 * tl.plotWidth() / 110, {silent: true});
      tl.draw();
      tl.ctx.fillText = fill;
      return drawn;
    }""")
    assert "#12345" in texts and "jit_train_step" in texts, texts
    assert any(t.startswith("convolution_") for t in texts) and any(t.startswith("scaled_dot") for t in texts), texts
    assert not any(t.startswith(("aten::", "torch.nn", "ProfilerLike")) for t in texts), texts
    shot(page, tmp_path, "slice_labels_short_forms")


# ---- dark mode ------------------------------------------------------------------------


def test_dark_mode_follows_prefers_color_scheme(page, server, tmp_path):
    page.emulate_media(color_scheme="dark")
    open_view(page, server)
    wait_steps(page)
    page.wait_for_timeout(150)
    t = page.evaluate(THEME_JS)
    assert t["theme"] == "dark" and t["source"] == "system", t
    assert luminance(t["bg"]) < 50 and luminance(t["fg"]) > 180 and luminance(t["bar"]) < 60, t
    px = page.evaluate(DARK_SHARE_JS)
    assert px["dark"] > 0.5 and max(px["ruler"]) < 80, px
    shot(page, tmp_path, "dashboard_dark")
    page.keyboard.press("?")
    page.locator("[data-testid=keys-help]").wait_for(state="visible")
    dialog_bg = page.evaluate("() => getComputedStyle(document.querySelector('[data-testid=keys-help]')).backgroundColor")
    assert luminance(dialog_bg) < 50, dialog_bg
    shot(page, tmp_path, "help_overlay_dark")
    page.keyboard.press("Escape")

    # the system switches to light: so does the dashboard, canvases included, without a reload
    page.emulate_media(color_scheme="light")
    page.wait_for_function("() => document.querySelector('.tbr-app').dataset.theme === 'light'")
    page.wait_for_timeout(150)
    t = page.evaluate(THEME_JS)
    assert luminance(t["bg"]) > 240 and luminance(t["fg"]) < 60, t
    px = page.evaluate(DARK_SHARE_JS)
    assert px["dark"] < 0.2 and min(px["ruler"]) > 200, px
    shot(page, tmp_path, "dashboard_light")


def test_dark_mode_follows_tensorboards_dark_mode_in_its_iframe(page, server, tmp_path):
    frame = open_tab(page, server)
    frame.select_option("[data-testid=run-select]", RUN)
    wait_loaded(frame)
    wait_steps(frame)
    page.evaluate("() => document.body.classList.remove('dark-mode')")
    frame.wait_for_function("() => document.querySelector('.tbr-app').dataset.theme === 'light'")
    assert frame.evaluate(THEME_JS)["source"] == "tensorboard"
    # TensorBoard's own dark mode (its settings toggle sets body.dark-mode on its document)
    page.evaluate("() => document.body.classList.add('dark-mode')")
    frame.wait_for_function("() => document.querySelector('.tbr-app').dataset.theme === 'dark'")
    frame.wait_for_timeout(150)
    t = frame.evaluate(THEME_JS)
    assert luminance(t["bg"]) < 50 and luminance(t["fg"]) > 180, t
    px = frame.evaluate(DARK_SHARE_JS)
    assert px["dark"] > 0.5 and max(px["ruler"]) < 80, px
    strip = frame.evaluate("() => getComputedStyle(document.querySelector('[data-testid=steps]')).backgroundColor")
    assert luminance(strip) < 60, strip
    shot(page, tmp_path, "tensorboard_dark")
    page.evaluate("() => document.body.classList.remove('dark-mode')")
    frame.wait_for_function("() => document.querySelector('.tbr-app').dataset.theme === 'light'")
    frame.wait_for_timeout(150)
    assert frame.evaluate(DARK_SHARE_JS)["dark"] < 0.2
