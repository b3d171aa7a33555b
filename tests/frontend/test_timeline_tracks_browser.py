"""The timeline's track kinds (frontend/tracks/) in a real headless Chromium against a real TensorBoard.

Each kind of track is its own ES module served from `static/tracks/`; the timeline's core
loops over their registry. These tests check that the modules are what the page runs, that
slices, counters, instants and flows are picked and described as before the split (positions
and expected texts come from the model, never from hard-coded pixels), and the waveform row
that `timeline.setWaveform(wave)` adds: a lone point, a gap, a 10k-point series with one
spike, a hovered and a clicked step. Screenshots land in /tmp/shots (or $TB_REDUCE_SHOTS).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlencode

import pytest
from dashboard_support import CHROMIUM, TensorBoardServer, wait_loaded

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: install the Debian package `chromium` (CI does)", allow_module_level=True)

sync_api = pytest.importorskip("playwright.sync_api")

SHOTS = Path(os.environ.get("TB_REDUCE_SHOTS", "/tmp/shots"))
RUN, HOST = "tracks", "syn"
MODULES = ("index", "common", "slices", "counters", "instants", "flows", "waveform")


def synthetic_trace() -> dict:
    """20 ms of every kind: nested slices, two counter series, thread, process and global
    instants, flows from one process to the other, and a track of sub-pixel slices."""
    ev: list[dict] = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "P1"}},
                      {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "P2"}}]
    for i in range(200):
        ev.append({"ph": "X", "pid": 1, "tid": 1, "ts": i * 100, "dur": 80, "name": f"op{i % 7}"})
        ev.append({"ph": "X", "pid": 1, "tid": 1, "ts": i * 100 + 10, "dur": 30, "name": f"inner{i % 3}"})
        ev.append({"ph": "X", "pid": 2, "tid": 5, "ts": i * 100 + 40, "dur": 50, "name": f"k{i % 5}"})
        ev.append({"ph": "C", "pid": 1, "ts": i * 100, "name": "mem", "args": {"bytes": (i * 37) % 101, "other": i % 13}})
        if i % 10 == 0:
            ev.append({"ph": "i", "pid": 1, "tid": 1, "ts": i * 100 + 5, "s": "t", "name": "tick"})
            ev.append({"ph": "i", "pid": 2, "ts": i * 100 + 7, "s": "p", "name": "pmark"})
        if i % 50 == 0:
            ev.append({"ph": "i", "ts": i * 100 + 3, "s": "g", "name": "glob"})
        if i % 4 == 0:
            ev.append({"ph": "s", "pid": 1, "tid": 1, "ts": i * 100 + 15, "id": i, "name": "fl", "cat": "c"})
            ev.append({"ph": "f", "pid": 2, "tid": 5, "ts": i * 100 + 45, "id": i, "name": "fl", "cat": "c", "bp": "e"})
    for i in range(3000):
        ev.append({"ph": "X", "pid": 2, "tid": 6, "ts": i * 6.7, "dur": 2, "name": f"tiny{i % 4}"})
    return {"traceEvents": ev}


SHAPE_RUN = "shape"


def dense_then_sparse_trace() -> dict:
    """One second of one thread's 9 µs slices: every 10 µs for the first half (90 % busy),
    every 100 µs for the second (9 %). No bucket is idle at any level, so the whole view
    folds them into one summary; only its busy digits tell the halves apart."""
    ev = [{"ph": "X", "pid": 1, "tid": 1, "ts": t, "dur": 9, "name": f"work{t % 3}"}
          for t in list(range(0, 500_000, 10)) + list(range(500_000, 1_000_000, 100))]
    return {"traceEvents": ev}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("tracks")
    run = root / "logdir" / RUN
    run.mkdir(parents=True)
    (run / f"{HOST}.pt.trace.json").write_text(json.dumps(synthetic_trace()))
    shape = root / "logdir" / SHAPE_RUN
    shape.mkdir()
    (shape / f"{HOST}.pt.trace.json").write_text(json.dumps(dense_then_sparse_trace()))
    tb = TensorBoardServer(root / "logdir", root / "cache")
    try:
        yield tb
    finally:
        tb.stop()


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def open_view(page, server, level="0"):
    page.goto(server.plugin_url(f"view?{urlencode({'run': RUN, 'host': HOST, 'level': level})}"))
    wait_loaded(page)
    return page


# Page-side helpers, on `window.T`: the timeline, the shared constants and format.js (imported
# from the same URLs the page uses, so they are the very modules it runs), a view of a fraction
# of the data window, the canvas's own pixels, and the tooltip a real mouse shows.
HELPERS = """async () => {
  const tl = window.tbReduceDashboard.timeline;
  const here = (p) => new URL(p, location.href).href;
  const common = await import(here('static/tracks/common.js'));
  const format = await import(here('static/format.js'));
  // The app's waveform panel feeds setWaveform from the server; these tests feed their own.
  const setWave = tl.setWaveform.bind(tl);
  tl.setWaveform = () => {};
  window.T = {
    tl, common, format,
    setWave(w) { setWave(w); tl.draw(); },
    viewFrac(a, b) {
      const [w0, w1] = tl.model.window;
      tl.setView(w0 + (w1 - w0) * a, w0 + (w1 - w0) * b, {silent: true});
      tl.draw();
    },
    abs(tRel) { return tRel + tl.model.origin; },
    xOf(tAbs) { return tl.gutter + (tAbs - tl.view[0]) * tl.plotWidth() / (tl.view[1] - tl.view[0]); },
    rowTop(kind, index) {
      const item = tl.rowItem(kind, index);
      return item ? common.RULER_H + item.y - tl.scrollY : null;
    },
    client(x, y) { const r = tl.canvas.getBoundingClientRect(); return {x: r.left + x, y: r.top + y}; },
    pixels(x0, y0, w, h) {
      const d = tl.dpr;
      const img = tl.canvas.getContext('2d').getImageData(Math.round(x0 * d), Math.round(y0 * d),
        Math.max(1, Math.round(w * d)), Math.max(1, Math.round(h * d)));
      return {w: img.width, h: img.height, data: img.data, d};
    },
    // pixels of a class in a box: 'wave' (the series' blue), 'ring' (red), 'gap' (orange), 'ink' (any)
    find(cls, x0, y0, w, h) {
      const {w: W, h: H, data, d} = T.pixels(x0, y0, w, h);
      const test = {
        wave: (r, g, b) => b - r > 50 && b > 120,
        ring: (r, g, b) => r > 150 && g < 90 && b < 90,
        gap: (r, g, b) => r > 180 && g > 90 && g < 170 && b < 80,
        ink: (r, g, b) => r < 235 || g < 235 || b < 235,
      }[cls];
      const out = [];
      for (let j = 0; j < H; j += 1) for (let i = 0; i < W; i += 1) {
        const k = (j * W + i) * 4;
        if (test(data[k], data[k + 1], data[k + 2])) out.push([x0 + i / d, y0 + j / d]);
      }
      return out;
    },
    // how many pixels of a box differ from an earlier T.pixels() of it
    differ(before, x0, y0, w, h) {
      const now = T.pixels(x0, y0, w, h).data;
      let n = 0;
      for (let k = 0; k < now.length; k += 4) {
        if (now[k] !== before[k] || now[k + 1] !== before[k + 1] || now[k + 2] !== before[k + 2]) n += 1;
      }
      return n;
    },
    tooltip() { return tl.tooltip.hidden ? null : [...tl.tooltip.children].map((c) => c.textContent); },
  };
  return true;
}"""


def setup(page, server, level="0"):
    open_view(page, server, level)
    page.evaluate(HELPERS)
    return page


def hover(page, x: float, y: float):
    """A real mouse over canvas point (x, y), coming from the gutter (so the hover is new);
    returns the tooltip's lines."""
    c = page.evaluate("([x, y]) => T.client(x, y)", [8, 40])
    page.mouse.move(c["x"], c["y"])
    c = page.evaluate("([x, y]) => T.client(x, y)", [x, y])
    page.mouse.move(c["x"], c["y"])
    return page.evaluate("() => T.tooltip()")


def pick(page, x: float, y: float, *extra: str):
    """What the timeline's hitTest gives at canvas (x, y): [kind, index, *extra fields]."""
    return page.evaluate("([x, y, extra]) => { const h = T.tl.hitTest(x, y); "
                         "return h && [h.kind, h.index, ...extra.map((k) => h[k])]; }", [x, y, list(extra)])


def test_each_track_kind_is_a_module_from_static_tracks(page, server):
    loaded: dict[str, tuple[int, str]] = {}
    page.on("response", lambda r: loaded.__setitem__(r.url.split("?")[0], (r.status, r.headers.get("content-type", ""))))
    setup(page, server)
    base = server.plugin_url("static/tracks/")
    for name in MODULES:
        status, mime = loaded.get(f"{base}{name}.js", (None, ""))
        assert status == 200 and "javascript" in mime, (name, status, mime, sorted(loaded))
    # import() of the same URLs gives the very objects the timeline loops over, each with the interface
    kinds = page.evaluate("""async () => {
      const here = (p) => new URL(p, location.href).href;
      const reg = await import(here('static/tracks/index.js'));
      const mods = {
        slice: (await import(here('static/tracks/slices.js'))).sliceTrack,
        counter: (await import(here('static/tracks/counters.js'))).counterTrack,
        instant: (await import(here('static/tracks/instants.js'))).instantTrack,
        flow: (await import(here('static/tracks/flows.js'))).flowTrack,
        waveform: (await import(here('static/tracks/waveform.js'))).waveformTrack,
      };
      const api = ['height', 'draw', 'hitTest', 'describe', 'rows', 'label', 'highlight', 'details'];
      return T.tl.kinds.map((k, i) => ({kind: k.kind, same: mods[k.kind] === k && reg.TRACK_KINDS[i] === k,
                                        api: api.every((f) => typeof k[f] === 'function')}));
    }""")
    assert [k["kind"] for k in kinds] == ["waveform", "counter", "slice", "instant", "flow"]
    assert all(k["same"] and k["api"] for k in kinds), kinds


def test_slice_counter_instant_and_flow_are_picked_and_described_as_before(page, server):
    setup(page, server)
    page.evaluate("() => T.viewFrac(0.25, 0.35)")  # ~2 ms: every kind has room
    page.check("[data-testid=flows-toggle]")
    page.evaluate("() => T.tl.draw()")

    # A slice: the first "op3" in the view, hovered at its middle.
    s = page.evaluate("""() => {
      const {tl, common: C, format: F} = T, m = tl.model, s = m.slices, id = m.names.indexOf('op3');
      for (let i = 0; i < s.count; i += 1) {
        const a = T.abs(s.ts[i]);
        if (s.name[i] !== id || a < tl.view[0] || a + s.dur[i] > tl.view[1]) continue;
        const y = T.rowTop('track', s.rowTrack[s.row[i]]) + s.depth[i] * C.ROW_H + 1 + C.SLICE_H / 2;
        return {index: i, x: T.xOf(a + s.dur[i] / 2), y,
                want: ['op3', `start ${F.formatDuration(a - tl.displayOrigin)} · duration ${F.formatDuration(s.dur[i])}`]};
      }
    }""")
    assert pick(page, s["x"], s["y"]) == ["slice", s["index"]]
    assert hover(page, s["x"], s["y"]) == s["want"]

    # A counter: the middle sample in the view, hovered halfway to the next one.
    c = page.evaluate("""() => {
      const {tl, common: C, format: F} = T, m = tl.model, k = m.counters.findIndex((c) => c.label === 'mem bytes');
      const c = m.counters[k];
      const inView = [...c.ts.keys()].filter((i) => i + 1 < c.ts.length && T.abs(c.ts[i]) > tl.view[0]
                                                    && T.abs(c.ts[i + 1]) < tl.view[1]);
      const i = inView[inView.length >> 1];
      return {counter: k, sample: i, x: T.xOf(T.abs((c.ts[i] + c.ts[i + 1]) / 2)), y: T.rowTop('counter', k) + C.COUNTER_H / 2,
              want: ['mem bytes', `${c.val[i]} at ${F.formatDuration(T.abs(c.ts[i]) - tl.displayOrigin)}`]};
    }""")
    assert pick(page, c["x"], c["y"], "sample") == ["counter", c["counter"], c["sample"]]
    assert hover(page, c["x"], c["y"]) == c["want"]

    # Instants: a thread's chevron (picked before the slice under it) and a process's.
    for name, group, row in (("tick", "trackBase", "track"), ("pmark", "procBase", "proc")):
        inst = page.evaluate("""([name, group, row]) => {
          const {tl, format: F} = T, m = tl.model, inst = m.instants, id = m.names.indexOf(name);
          for (let i = 0; i < inst.count; i += 1) {
            const a = T.abs(inst.ts[i]);
            if (inst.name[i] !== id || a < tl.view[0] || a > tl.view[1]) continue;
            let owner = -1;
            for (let g = 0; g + 1 < inst.start.length; g += 1) if (inst.start[g] <= i && i < inst.start[g + 1]) owner = g;
            const index = owner - inst[group];
            const top = row === 'proc' ? tl.items.filter((it) => it.kind === 'proc')[index].y + T.common.RULER_H - tl.scrollY
                                       : T.rowTop(row, index);
            return {index: i, x: T.xOf(a), y: top + (row === 'proc' ? 5 : 2),
                    want: [name, `instant at ${F.formatDuration(a - tl.displayOrigin)}`]};
          }
        }""", [name, group, row])
        assert pick(page, inst["x"], inst["y"]) == ["instant", inst["index"]], name
        assert hover(page, inst["x"], inst["y"]) == inst["want"], name

    # A flow: drawn (ink at its curve's middle that is not there with flows off), not picked:
    # its head sits on the slice it points to, and that slice is what a pointer there gets.
    f = page.evaluate("""() => {
      const {tl, common: C} = T, m = tl.model, a = m.arrows;
      const rowY = (track, depth) => T.rowTop('track', track) + depth * C.ROW_H + 1 + C.SLICE_H / 2;
      for (let i = 0; i < a.count; i += 1) {
        const xa = T.xOf(T.abs(a.fromTs[i])), xb = T.xOf(T.abs(a.toTs[i]));
        if (xa < tl.gutter + 20 || xb > tl.width - 20) continue;
        const ya = rowY(a.fromTrack[i], a.fromDepth[i]), yb = rowY(a.toTrack[i], a.toDepth[i]);
        const bend = Math.max(12, Math.min(60, Math.abs(xb - xa) / 2));
        // the cubic's point at t = 1/2: (P0 + 3 P1 + 3 P2 + P3) / 8
        const mx = (xa + 3 * (xa + bend) + 3 * (xb - bend) + xb) / 8, my = (ya + 3 * ya + 3 * yb + yb) / 8;
        const s = m.slices;
        let under = -1;
        for (let j = 0; j < s.count; j += 1) {
          const there = s.rowTrack[s.row[j]] === a.toTrack[i] && s.depth[j] === a.toDepth[i];
          if (there && s.ts[j] <= a.toTs[i] && a.toTs[i] <= s.ts[j] + s.dur[j]) under = j;
        }
        return {mx, my, xb, yb, under, name: m.names[s.name[under]]};
      }
    }""")
    box = [f["mx"] - 3, f["my"] - 3, 7, 7]
    page.evaluate("(b) => { window.flowBox = T.pixels(...b).data; }", box)
    page.uncheck("[data-testid=flows-toggle]")
    page.evaluate("() => T.tl.draw()")
    assert page.evaluate("(b) => T.differ(window.flowBox, ...b)", box) >= 3, "no flow arrow drawn there"
    page.check("[data-testid=flows-toggle]")
    page.evaluate("() => T.tl.draw()")
    assert pick(page, f["xb"] - 1, f["yb"]) == ["slice", f["under"]]
    assert hover(page, f["xb"] - 1, f["yb"])[0] == f["name"]
    shot(page, "tracks_kinds_hover")


def wave_points(n: int, values, steps=None) -> str:
    """JS for `n` steps evenly over the data window: points [{t0, t1, value, step}]."""
    return f"""(() => {{
      const [w0, w1] = T.tl.model.window, n = {n}, d = (w1 - w0) / n, values = {values};
      const steps = {json.dumps(steps) if steps is not None else 'null'};
      return Array.from({{length: n}}, (_, i) => ({{t0: w0 + i * d, t1: w0 + (i + 1) * d, value: values(i),
                                                    step: steps ? steps[i] : i}}));
    }})()"""


def test_waveform_lone_point_is_a_dot_without_a_line(page, server):
    setup(page, server)
    page.evaluate(f"() => T.setWave({{name: 'x', label: 'lone', points: {wave_points(1, '() => 5')}, marked: []}})")
    page.evaluate("() => T.viewFrac(0, 1)")
    where = page.evaluate("() => T.tl.locate('waveform', 0)")
    assert where and where["rowTop"] == page.evaluate("() => T.rowTop('waveform', 0)")
    # the layout: the waveform row first, then the processes as before
    assert page.evaluate("() => T.tl.items.slice(0, 2).map((i) => i.kind)") == ["waveform", "proc"]
    blue = page.evaluate("(w) => T.find('wave', T.tl.gutter, w.rowTop, T.tl.width - T.tl.gutter, w.rowBottom - w.rowTop)", where)
    assert len(blue) >= 8, "no dot"
    xs = [p[0] for p in blue]
    ys = [p[1] for p in blue]
    assert max(xs) - min(xs) <= 9 and max(ys) - min(ys) <= 9, "more than a dot: a line?"
    assert abs((max(xs) + min(xs)) / 2 - where["x"]) <= 2 and abs((max(ys) + min(ys)) / 2 - where["y"]) <= 2
    shot(page, "waveform_lone_point")
    # no wave, no row: the layout is what it was
    page.evaluate("() => T.setWave(null)")
    layout = page.evaluate("() => [T.tl.items[0].kind, T.tl.items[0].y, T.tl.rowItem('waveform', 0) === undefined]")
    assert layout == ["proc", 0, True]


def test_waveform_nan_is_a_gap_with_a_mark_at_the_baseline(page, server):
    setup(page, server)
    values = "(i) => [10, 30, NaN, 20, 40][i]"
    page.evaluate(f"() => T.setWave({{name: 'x', label: 'with a gap', points: {wave_points(5, values)}, marked: []}})")
    page.evaluate("() => T.viewFrac(0, 1)")
    p = page.evaluate("() => [0, 1, 2, 3, 4].map((i) => T.tl.locate('waveform', i))")
    assert p[2] is not None and p[2]["y"] == p[2]["base"]  # the NaN sits on the baseline
    top, bottom = p[0]["rowTop"], p[0]["rowBottom"]

    def blue_between(a, b):
        return page.evaluate("([x0, x1, y0, y1]) => T.find('wave', x0, y0, x1 - x0, y1 - y0).length",
                             [a["x"] + 6, b["x"] - 6, top, bottom])

    assert blue_between(p[0], p[1]) > 20, "the line from point 0 to point 1 is missing"
    assert blue_between(p[3], p[4]) > 20, "the line from point 3 to point 4 is missing"
    assert blue_between(p[1], p[3]) == 0, "a line across the NaN"
    mark = page.evaluate("(q) => T.find('gap', q.x - 5, q.base - 4, 10, 10).length", p[2])
    assert mark >= 6, "no mark at the NaN's baseline"
    tip = hover(page, p[2]["x"], p[2]["base"])
    assert tip[0] == "step 2" and tip[1] == "with a gap: NaN" and "gap" in tip[-1], tip
    shot(page, "waveform_nan_gap")


def test_waveform_spike_in_10k_points_reaches_the_top(page, server):
    setup(page, server)
    values = "(i) => i === 6789 ? 100 : 10 + (i % 7) * 0.5"
    page.evaluate(f"() => T.setWave({{name: 'x', label: 'spiky', points: {wave_points(10000, values)}, marked: []}})")
    page.evaluate("() => T.viewFrac(0, 1)")
    info = page.evaluate("() => ({where: T.tl.locate('waveform', 6789), plot: T.tl.plotWidth()})")
    where = info["where"]
    assert info["plot"] < 10000 / 2  # many points per pixel: the per-column path
    assert where["y"] == where["top"]
    # the spike's column has ink at the top; nothing else gets near it
    at_top = page.evaluate("(w) => T.find('wave', T.tl.gutter, w.top - 1, T.tl.width - T.tl.gutter, 3)", where)
    assert at_top, "the spike vanished"
    assert all(abs(x - where["x"]) <= 3 for x, _ in at_top), at_top[:10]
    # the rest of the series fills the bottom half: the line is drawn all along
    low = page.evaluate("(w) => { const mid = (w.top + w.base) / 2; "
                        "return T.find('wave', T.tl.gutter, mid, T.tl.width - T.tl.gutter, w.base - mid + 2); }", where)
    assert len({round(x) for x, _ in low}) > 0.9 * info["plot"], "gaps in the dense line"
    hit = page.evaluate("(w) => { const h = T.tl.hitTest(w.x, w.top); return h && [h.kind, h.index, h.step, h.value]; }", where)
    assert hit == ["waveform", 6789, 6789, 100]
    shot(page, "waveform_spike_10k")
    # zoomed in on a third of the window, it is still there (and nothing is drawn off the row)
    page.evaluate("() => T.viewFrac(0.6, 0.75)")
    where = page.evaluate("() => T.tl.locate('waveform', 6789)")
    assert page.evaluate("(w) => T.find('wave', w.x - 2, w.top - 1, 5, 3).length", where) > 0


def test_waveform_hover_describes_a_step_and_a_click_selects_it(page, server):
    setup(page, server)
    steps = list(range(100, 120))
    page.evaluate(f"""() => {{
      window.picked = [];
      T.tl.onSelect = (hit) => window.picked.push(hit && {{kind: hit.kind, index: hit.index, step: hit.step, t0: hit.t0,
                                                            t1: hit.t1, point: hit.point, marked: hit.marked}});
      T.setWave({{name: 'step_time_ms', label: 'step time (ms)', points: {wave_points(20, '(i) => 50 + i', steps)},
                 marked: new Set([4, 9])}});
    }}""")
    page.evaluate("() => T.viewFrac(0, 1)")
    # the marked steps have red rings, the others do not
    rings = page.evaluate("() => [4, 9, 7].map((i) => { const w = T.tl.locate('waveform', i); "
                          "return T.find('ring', w.x - 8, w.y - 8, 17, 17).length; })")
    assert rings[0] > 10 and rings[1] > 10 and rings[2] == 0, rings

    want = page.evaluate("""() => {
      const {tl, format: F} = T, [w0, w1] = tl.model.window, d = (w1 - w0) / 20, t0 = w0 + 7 * d;
      return ['step 107', 'step time (ms): 57',
              `start ${F.formatDuration(t0 - tl.displayOrigin)} · duration ${F.formatDuration(d)}`];
    }""")
    w7 = page.evaluate("() => T.tl.locate('waveform', 7)")
    assert hover(page, w7["x"], w7["y"]) == want
    shot(page, "waveform_hover_step")
    w4 = page.evaluate("() => T.tl.locate('waveform', 4)")
    tip = hover(page, w4["x"] + 1, w4["y"] - 1)
    assert tip[0] == "step 104" and tip[-1] == "one of the slowest steps", tip
    # between two dots, the step whose span holds the pointer
    between = page.evaluate("() => { const a = T.tl.locate('waveform', 11), b = T.tl.locate('waveform', 12); "
                            "return [(a.x + b.x) / 2 - 3, a.rowTop + 10]; }")
    assert page.evaluate("([x, y]) => T.tl.hitTest(x, y).index", between) == 11

    c = page.evaluate("(w) => T.client(w.x, w.y)", w7)
    page.mouse.click(c["x"], c["y"])
    picked = page.evaluate("() => window.picked")
    assert len(picked) == 1 and picked[0]["kind"] == "waveform" and picked[0]["index"] == 7 and picked[0]["step"] == 107
    assert picked[0]["point"]["step"] == 107 and picked[0]["point"]["value"] == 57 and picked[0]["marked"] is False
    details = page.evaluate("() => T.tl.details(T.tl.selected)")
    assert details["name"] == "step 107" and ["value", "57"] in details["rows"] and details["k"] is None

    # zoomTo: the step with a tenth of its span either side; the row stays through the refetch
    t0, t1 = picked[0]["t0"], picked[0]["t1"]
    page.evaluate("([a, b]) => T.tl.zoomTo(a, b)", [t0, t1])
    view = page.evaluate("() => T.tl.getView()")
    pad = (t1 - t0) * 0.1
    assert abs(view[0] - (t0 - pad)) < 1e-6 * (t1 - t0) + 1e-6 and abs(view[1] - (t1 + pad)) < 1e-6 * (t1 - t0) + 1e-6, view
    wait_loaded(page)
    page.wait_for_timeout(100)
    w7 = page.evaluate("() => T.tl.locate('waveform', 7)")
    assert w7 and abs(w7["x"] - page.evaluate("() => T.tl.gutter + T.tl.plotWidth() / 2")) < 1.5
    shot(page, "waveform_zoomed_to_step")


def test_a_summary_over_work_that_thins_out_is_shaded_darker_where_it_is_busier(page, server):
    """The whole view at level 4 holds one summary for the thread; its fill is darker over
    the busy half than over the sparse one, and the tooltip and details say how busy it is."""
    page.goto(server.plugin_url(f"view?{urlencode({'run': SHAPE_RUN, 'host': HOST, 'level': '4'})}"))
    wait_loaded(page)
    # The waveform panel and the tags are asked as the view lands: the page's layout settles
    # once they are in (a hover placed before that could miss the row on a loaded machine).
    page.wait_for_load_state("networkidle")
    page.evaluate(HELPERS)
    row = page.evaluate("""() => {
      const {tl, common: C} = T, m = tl.model, s = m.slices;
      const sums = [...Array(s.count).keys()].filter((i) => s.flags[i] & 1);
      if (sums.length !== 1) return {summaries: sums.length};
      const i = sums[0];
      const sm = m.summaries, j = sm.k.indexOf(s.k[i]);
      const digits = Array.from(sm.busy.slice(sm.busyStart[j], sm.busyStart[j + 1]));
      const a = T.abs(s.ts[i]), b = a + s.dur[i];
      return {summaries: 1, digits, y: T.rowTop('track', s.rowTrack[s.row[i]]) + s.depth[i] * C.ROW_H + 1 + C.SLICE_H / 2,
              x0: T.xOf(a), x1: T.xOf(b), xMid: T.xOf((a + b) / 2)};
    }""")
    assert row["summaries"] == 1, row
    digits = row["digits"]
    assert len(digits) == 1000 and min(digits[:495]) >= 8 and max(digits[505:]) <= 1, digits[490:510]  # 90 %, 9 %

    def lightness(x_from: float, x_to: float) -> float:
        """Mean luminance of the summary's row between two x (canvas px)."""
        return page.evaluate("""([x0, x1, y]) => {
          const {data} = T.pixels(x0, y - 2, x1 - x0, 4);
          let total = 0;
          for (let k = 0; k < data.length; k += 4) total += 0.2126 * data[k] + 0.7152 * data[k + 1] + 0.0722 * data[k + 2];
          return total / (data.length / 4);
        }""", [x_from, x_to, row["y"]])

    width = row["x1"] - row["x0"]
    busy, sparse = lightness(row["x0"] + 0.1 * width, row["x0"] + 0.4 * width), \
        lightness(row["x0"] + 0.6 * width, row["x0"] + 0.9 * width)
    assert busy < sparse - 25, (busy, sparse)
    tip = hover(page, row["x0"] + 0.25 * width, row["y"])
    assert tip and any(line.startswith("busy ") and line.endswith("% of its span (more solid: busier)") for line in tip), tip
    mean = sum(d + 0.5 for d in digits) / (10 * len(digits))
    assert f"busy {round(mean * 100)}% of its span (more solid: busier)" in tip
    shot(page, "summary_busy_shading")
    c = page.evaluate("([x, y]) => T.client(x, y)", [row["x0"] + 0.25 * width, row["y"]])
    page.mouse.click(c["x"], c["y"])
    page.wait_for_selector(".tbr-summary-busy")
    assert f"{round(mean * 100)}% busy on average" in page.inner_text(".tbr-summary-busy")

    # Dark: the fill is lighter than the background, so busier is lighter: "more solid" either way.
    page.emulate_media(color_scheme="dark")
    page.wait_for_function("() => document.querySelector('.tbr-app').dataset.theme === 'dark'")
    page.evaluate("() => T.tl.draw()")
    busy, sparse = lightness(row["x0"] + 0.1 * width, row["x0"] + 0.4 * width), \
        lightness(row["x0"] + 0.6 * width, row["x0"] + 0.9 * width)
    assert busy > sparse + 10, (busy, sparse)
    shot(page, "summary_busy_shading_dark")
    page.emulate_media(color_scheme="light")
