// The step overview strip, above the timeline: one bar per training step, its height
// the step's time (from zero, so heights compare honestly), like XProf's step-time
// graph — a stalled or slow step stands out at a glance. The steps that stand out by a
// robust margin (median + max(3·MAD, 5 % of the median): the server's `slowest`, the
// same rule here for steps found in the trace) say so in their tooltip, and the slowest
// of them is red and named ("slowest: #5, 260 ms"); when none does the strip says "no
// step stands out" and nothing is red, rather than crown noise
// (104.5 ms against a 104 ms median, one of any three). When a step's time that no op
// accounts for stands out (the server's `unaccounted_stands_out`), a third line names it
// ("step 17: 545 ms no op accounts for"): a stall inside a `record_function` that need
// not make the step one of the slowest. A dashed line marks the median, and the part of each
// step the timeline shows is drawn solid, the rest faint, with a band under it: the
// strip doubles as a minimap. Hover says a step's number and time; a click (or ←/→
// and Enter on the focused strip) zooms the timeline to that step.
//
// Steps come from the derived per-step series (the `waveforms` route: the markers real
// profilers write, on the main thread), else from the step markers the loaded trace
// carries (`ProfilerStep#N` slices, an XProf "Steps" line) — an older server, or a
// failed derivation. A trace without steps gets one line saying why, and no strip.
import {fetchWaveforms} from '../api.js';
import {el, setChildren, setText, sizeCanvas, visible} from '../dom.js';
import {formatCount, formatDuration} from '../format.js';
import {FLAG_SUMMARY} from '../model.js';
import {COLORS, FONT} from '../tracks/common.js';
import {slowSteps} from './series_draw.js';

export const STRIP_H = 40;
const PAD_X = 4;
const PAD_TOP = 4;
const PAD_BOTTOM = 4; // room for the band under the steps in view
const LABEL_H = 11; // the row of step numbers above wide bars
const PROFILER_STEP = /^ProfilerStep#(\d+)$/;
const LABEL_FONT = '10px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';

/** A step's time in ms (a number, NaN when the server sent none). */
function stepMs(s) {
  const v = s.step_time_ms;
  if (typeof v === 'number' && Number.isFinite(v)) return v;
  const d = Number(s.end_us) - Number(s.start_us);
  return Number.isFinite(d) ? d / 1000 : NaN;
}

/**
 * The step markers a loaded model carries, on one track (the one holding the most):
 * PyTorch's `ProfilerStep#N` slices, else the slices of an XProf "Steps" line whose
 * names are step numbers. Returns [{step, start_us, end_us, step_time_ms}, …] by start
 * (absolute µs), and the marker kind; summaries (folded slices) are never steps.
 */
export function stepsFromModel(model) {
  if (!model || !model.slices || !model.slices.count) return {steps: [], marker: null};
  const s = model.slices;
  const numberOf = new Map(); // name id → step number
  model.names.forEach((name, id) => {
    const m = PROFILER_STEP.exec(name);
    if (m) numberOf.set(id, Number(m[1]));
  });
  let marker = 'ProfilerStep#N';
  let onTrack = null;
  if (!numberOf.size) {
    const stepsTracks = new Set();
    model.tracks.forEach((t, i) => {
      if (String(t.label).trim() === 'Steps') stepsTracks.add(i);
    });
    if (!stepsTracks.size) return {steps: [], marker: null};
    model.names.forEach((name, id) => {
      if (/^\d+$/.test(name)) numberOf.set(id, Number(name));
    });
    marker = 'Steps line';
    onTrack = stepsTracks;
  }
  const byTrack = new Map();
  for (let i = 0; i < s.count; i += 1) {
    if (s.flags[i] & FLAG_SUMMARY || !numberOf.has(s.name[i])) continue;
    const track = s.rowTrack[s.row[i]];
    if (onTrack && !onTrack.has(track)) continue;
    if (!byTrack.has(track)) byTrack.set(track, []);
    byTrack.get(track).push(i);
  }
  let best = null;
  for (const rows of byTrack.values()) if (!best || rows.length > best.length) best = rows;
  if (!best) return {steps: [], marker: null};
  const steps = best.map((i) => ({
    step: numberOf.get(s.name[i]),
    start_us: s.ts[i] + model.origin,
    end_us: s.ts[i] + s.dur[i] + model.origin,
    step_time_ms: s.dur[i] / 1000,
  }));
  steps.sort((a, b) => a.start_us - b.start_us);
  return {steps, marker};
}

/** The index of the slowest step (the first of equals), or -1. */
export function slowestIndex(steps) {
  let best = -1;
  for (let i = 0; i < steps.length; i += 1) {
    const v = stepMs(steps[i]);
    if (Number.isFinite(v) && (best < 0 || v > stepMs(steps[best]))) best = i;
  }
  return best;
}

/** The indices of the steps that stand out as slow, slowest first (at most three): `slowSteps`. */
export function standingOut(steps) {
  return slowSteps(steps.map(stepMs));
}

/** A step's time no op accounts for, in ms (the `unaccounted` series), or NaN. */
function unaccountedMs(s) {
  const v = s && s.busy_ms ? s.busy_ms.unaccounted : undefined;
  return typeof v === 'number' && Number.isFinite(v) ? v : NaN;
}

function median(values) {
  const v = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (!v.length) return NaN;
  const mid = v.length >> 1;
  return v.length % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

export class StepStrip {
  /**
   * `onStep(step)`: a step was clicked (or chosen with Enter): {step, start_us, end_us, …}.
   * `fetchSteps(run, host)`: a promise of the `waveforms` route's JSON (the waveform
   *   panel's, so both ask once); `gutter()`: the timeline's gutter width, which the
   *   strip's heading takes so the bars start where the timeline's plot does.
   */
  constructor(container, {onStep, fetchSteps, gutter} = {}) {
    this.onStep = onStep || (() => {});
    this.fetchSteps = fetchSteps || ((run, host) => fetchWaveforms(run, host));
    this.gutter = gutter || (() => 180);
    this.run = null;
    this.host = null;
    this.seq = 0;
    this.derived = {status: 'idle'}; // 'loading' | 'ok' | 'none' (reason) | 'error' (message)
    this.fromTrace = new Map(); // start_us → step, from the loaded models of this run/host
    this.traceMarker = null;
    this.view = null;
    this.steps = [];
    this.source = null; // 'waveforms' | 'trace'
    this.slowest = -1; // the slowest of the steps that stand out, or -1 when none does
    this.marked = new Set(); // the steps that stand out as slow (the slowest of them red)
    this.unaccounted = -1; // the step whose unaccounted time stands out most, or -1
    this.median = NaN;
    this.hover = -1;
    this.focus = -1;
    this.geom = null;
    this.frameRequested = false;
    this.build(container);
  }

  build(container) {
    this.title = el('span', {class: 'tbr-steps-title'}, 'Steps');
    this.facts = el('span', {class: 'tbr-steps-facts', 'data-testid': 'steps-facts'});
    this.slowLabel = el('span', {class: 'tbr-steps-slowest', 'data-testid': 'steps-slowest'});
    this.unaccLabel = el('span', {class: 'tbr-steps-unaccounted', 'data-testid': 'steps-unaccounted'});
    this.head = el('div', {class: 'tbr-steps-head'},
      el('div', {class: 'tbr-steps-line'}, this.title, ' ', this.facts), this.slowLabel, this.unaccLabel);
    this.canvas = el('canvas', {class: 'tbr-steps-canvas', 'data-testid': 'steps-canvas', tabindex: '0', role: 'group',
      'aria-roledescription': 'step overview', 'aria-label': 'Step times'});
    this.tooltip = el('div', {class: 'tbr-steps-tooltip', role: 'tooltip', hidden: true});
    this.live = el('div', {class: 'tbr-sr-only', 'aria-live': 'polite'});
    this.plot = el('div', {class: 'tbr-steps-plot'}, this.canvas, this.tooltip, this.live);
    this.reason = el('div', {class: 'tbr-steps-reason', 'data-testid': 'steps-reason', role: 'status'});
    this.root = el('section', {class: 'tbr-steps', 'data-testid': 'steps', 'data-state': 'idle',
      'aria-label': 'Step overview'}, this.head, this.plot, this.reason);
    this.root.hidden = true;
    container.append(this.root);
    this.ctx = this.canvas.getContext('2d');
    this.canvas.addEventListener('pointermove', (e) => this.onMove(e));
    this.canvas.addEventListener('pointerleave', () => this.setHover(-1));
    this.canvas.addEventListener('click', (e) => this.onClick(e));
    this.canvas.addEventListener('keydown', (e) => this.onKey(e));
    this.canvas.addEventListener('focus', () => {
      if (this.focus < 0 && this.steps.length) this.setFocus(this.slowest >= 0 ? this.slowest : 0);
      else this.requestDraw();
    });
    this.canvas.addEventListener('blur', () => {
      this.hideTooltip();
      this.requestDraw();
    });
    new ResizeObserver(() => this.requestDraw()).observe(this.plot);
  }

  // ---- data --------------------------------------------------------------------
  /** The timeline's run and host changed: forget the steps, ask for the new ones. */
  setContext({run, host}) {
    if (run === this.run && host === this.host) return;
    this.run = run;
    this.host = host;
    this.fromTrace = new Map();
    this.traceMarker = null;
    this.hover = this.focus = -1;
    const seq = ++this.seq;
    if (!run || !host) {
      this.derived = {status: 'idle'};
      this.update();
      return;
    }
    this.derived = {status: 'loading'};
    this.update();
    Promise.resolve().then(() => this.fetchSteps(run, host)).then((doc) => {
      if (seq !== this.seq) return;
      const all = doc && Array.isArray(doc.steps) ? doc.steps : [];
      // a step without a place in time (a hostile trace's) has no bar; the server's slowest index then no longer holds
      const steps = all.filter((s) => s && Number.isFinite(Number(s.start_us)) && Number.isFinite(Number(s.end_us)));
      const whole = steps.length === all.length;
      const indices = (list) => (whole && Array.isArray(list)
        ? list.map(Number).filter((i) => Number.isInteger(i) && i >= 0 && i < steps.length) : null);
      this.derived = steps.length
        ? {status: 'ok', steps, marker: doc.marker || null, slowest: indices(doc.slowest),
          unaccounted: indices(doc.unaccounted_stands_out) || []}
        : {status: 'none', reason: (doc && doc.reason) || 'the trace has no step markers'};
      this.update();
    }, (err) => {
      if (seq !== this.seq) return;
      this.derived = {status: 'error', message: err && err.message ? err.message : String(err)};
      this.update();
    });
  }

  /** A model of the current run/host arrived: its step markers, for when the route has none. */
  setModel(model) {
    const {steps, marker} = stepsFromModel(model);
    if (!steps.length) return;
    for (const s of steps) this.fromTrace.set(s.start_us, s);
    this.traceMarker = marker;
    if (this.derived.status !== 'ok') this.update();
  }

  /** The timeline's visible window [t0, t1] (absolute µs), or null. */
  setView(view) {
    this.view = view ? [view[0], view[1]] : null;
    this.requestDraw();
  }

  /** Picks the steps to show (the route's, else the trace's) and what the heading says. */
  update() {
    const d = this.derived;
    let steps = [];
    let source = null;
    let marker = null;
    let marked = [];
    let unaccounted = -1;
    if (d.status === 'ok') {
      [steps, source, marker] = [d.steps, 'waveforms', d.marker];
      marked = d.slowest || standingOut(steps); // the server's, unless some steps were dropped
      unaccounted = d.unaccounted.length ? d.unaccounted[0] : -1;
    } else if (this.fromTrace.size && d.status !== 'loading') {
      steps = [...this.fromTrace.values()].sort((a, b) => a.start_us - b.start_us);
      [source, marker] = ['trace', this.traceMarker];
      marked = standingOut(steps);
    }
    const slowest = marked.length ? marked[0] : -1;
    this.steps = steps;
    this.source = source;
    this.slowest = slowest;
    this.marked = new Set(marked);
    this.unaccounted = unaccounted;
    this.median = median(steps.map(stepMs));
    if (this.focus >= steps.length) this.focus = -1;
    if (this.hover >= steps.length) this.hover = -1;
    const state = steps.length ? 'ready' : d.status === 'loading' ? 'loading' : d.status === 'idle' ? 'idle' : 'none';
    this.root.dataset.state = state;
    this.root.dataset.count = String(steps.length);
    this.root.dataset.source = source || '';
    this.root.dataset.slowest = slowest >= 0 ? String(steps[slowest].step) : '';
    this.root.hidden = state === 'idle';
    if (state === 'loading') { // the strip's place is kept while the steps are found: no jump when they arrive
      setChildren(this.facts, 'finding the steps…');
      this.slowLabel.textContent = '';
      this.unaccLabel.textContent = '';
      this.canvas.setAttribute('aria-label', 'Step times: finding the steps');
      this.ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
    }
    if (!steps.length) {
      setText(this.reason, state === 'loading' ? ''
        : d.status === 'error' ? `No step overview — could not derive the steps (${d.message}).`
          : `No step overview — ${d.reason || 'the trace has no step markers'}.`.replace(/\.\.$/, '.'));
      this.reason.title = this.reason.textContent;
      this.hideTooltip();
      return;
    }
    this.reason.textContent = '';
    const n = steps.length;
    setChildren(this.facts, `${formatCount(n)} step${n === 1 ? '' : 's'}`,
      Number.isFinite(this.median) ? ` · median ${formatDuration(this.median * 1000)}` : '');
    this.title.title = visible(`from ${marker || 'step markers'}${source === 'trace' ? ' in the loaded trace' : ''}`);
    const slow = slowest >= 0 ? steps[slowest] : null;
    const rule = 'a step stands out when its time is above median + max(3 × MAD, 5 % of the median)';
    this.slowLabel.textContent = slow ? `slowest: #${slow.step}, ${formatDuration(stepMs(slow) * 1000)}`
      : n >= 3 ? 'no step stands out' : '';
    this.slowLabel.classList.toggle('tbr-steps-calm', !slow);
    this.slowLabel.title = slow && Number.isFinite(this.median) && this.median > 0
      ? `${(stepMs(slow) / this.median).toFixed(1)}× the median step${marked.length > 1 ? ` · ${marked.length} steps stand out` : ''} (${rule})`
      : slow ? rule : `the slowest is within the run's spread (${rule})`;
    const stall = unaccounted >= 0 ? steps[unaccounted] : null;
    const stallText = stall ? `step ${stall.step}: ${formatDuration(unaccountedMs(stall) * 1000)} no op accounts for` : '';
    this.unaccLabel.textContent = stallText;
    this.unaccLabel.title = stall ? `${formatDuration(unaccountedMs(stall) * 1000)} of step ${stall.step}'s ${formatDuration(stepMs(stall) * 1000)} ` +
      'is covered by no op on its thread (a sleep, a blocking read, a lock — inside a record_function too); ' +
      'the waveform panel overlays the unaccounted series' : '';
    this.head.classList.toggle('tbr-steps-head-dense', !!stall);
    this.root.dataset.unaccounted = stall ? String(stall.step) : '';
    this.canvas.setAttribute('aria-label', `Step times: ${n} steps${slow ? `, slowest #${slow.step} at ${formatDuration(stepMs(slow) * 1000)}` : n >= 3 ? ', no step stands out' : ''}` +
      `${Number.isFinite(this.median) ? `, median ${formatDuration(this.median * 1000)}` : ''}${stall ? `; ${stallText}` : ''}. ` +
      'Left and right arrows pick a step, Enter zooms the timeline to it.');
    this.requestDraw();
  }

  // ---- drawing -----------------------------------------------------------------
  requestDraw() {
    if (this.frameRequested) return;
    this.frameRequested = true;
    requestAnimationFrame(() => this.draw());
  }

  /** Where step i's bar is: {x, w} in canvas px (its slot, gaps excluded). */
  slot(i) {
    const g = this.geom;
    const x = PAD_X + i * g.slotW;
    return {x: x + g.gap / 2, w: Math.max(g.slotW - g.gap, Math.min(1, g.slotW))};
  }

  /** The fraction of step i the view shows: [a, b] within 0..1, or null. */
  visiblePart(i) {
    const v = this.view;
    const s = this.steps[i];
    const t0 = Number(s.start_us);
    const t1 = Number(s.end_us);
    if (!v) return [0, 1];
    const a = Math.max(t0, v[0]);
    const b = Math.min(t1, v[1]);
    if (b < a || (b === a && t1 > t0)) return null;
    return t1 > t0 ? [(a - t0) / (t1 - t0), (b - t0) / (t1 - t0)] : [0, 1];
  }

  draw() {
    this.frameRequested = false;
    this.head.style.width = `${Math.round(this.gutter())}px`;
    if (this.root.hidden || !this.steps.length) return;
    const rect = this.plot.getBoundingClientRect();
    const W = Math.max(60, Math.floor(rect.width));
    const H = STRIP_H;
    const ctx = sizeCanvas(this.canvas, this.ctx, W, H);
    const steps = this.steps;
    const n = steps.length;
    const values = steps.map(stepMs);
    const vmax = Math.max(...values.filter(Number.isFinite), 1e-9);
    const slotW = (W - 2 * PAD_X) / n;
    const gap = slotW >= 5 ? Math.min(4, Math.max(1, slotW * 0.12)) : 0;
    const base = H - PAD_BOTTOM;
    const labelled = slotW >= 24; // wide bars: a row of step numbers above them
    const usable = base - PAD_TOP - (labelled ? LABEL_H : 0);
    const hOf = (v) => (Number.isFinite(v) && v > 0 ? Math.max(2, (v / vmax) * usable) : 0);
    this.geom = {W, H, slotW, gap, base, usable, vmax};

    // the steps in view: a band under them (only when the view leaves some out)
    const parts = steps.map((_, i) => this.visiblePart(i));
    const allShown = parts.every((p) => p && p[0] <= 0 && p[1] >= 1);
    let bandA = Infinity;
    let bandB = -Infinity;
    if (!allShown) {
      parts.forEach((p, i) => {
        if (!p) return;
        const {x, w} = this.slot(i);
        bandA = Math.min(bandA, x + p[0] * w);
        bandB = Math.max(bandB, x + p[1] * w);
      });
      if (bandB >= bandA) {
        ctx.fillStyle = COLORS.window;
        ctx.fillRect(bandA - 1, 0, bandB - bandA + 2, H);
        ctx.fillStyle = COLORS.windowEdge;
        ctx.fillRect(bandA - 1, H - 2, bandB - bandA + 2, 2);
      }
    }
    this.band = bandB >= bandA ? [bandA, bandB] : null;

    if (slotW >= 1.5) {
      for (let i = 0; i < n; i += 1) {
        const h = hOf(values[i]);
        if (!h) continue;
        const {x, w} = this.slot(i);
        const color = i === this.slowest ? COLORS.slowest : COLORS.bar;
        const p = parts[i];
        ctx.fillStyle = color;
        ctx.globalAlpha = allShown || (p && p[0] <= 0 && p[1] >= 1) ? 1 : 0.35;
        ctx.fillRect(x, base - h, w, h);
        if (!allShown && p && !(p[0] <= 0 && p[1] >= 1)) {
          ctx.globalAlpha = 1; // the part the timeline shows, solid
          const xa = x + p[0] * w;
          ctx.fillRect(xa, base - h, Math.max(1, (p[1] - p[0]) * w), h);
        }
      }
      ctx.globalAlpha = 1;
    } else {
      // more steps than pixels: per pixel column the slowest of its steps (a spike always shows)
      for (let px = 0; px < W - 2 * PAD_X; px += 1) {
        const a = Math.floor((px * n) / (W - 2 * PAD_X));
        const b = Math.max(a + 1, Math.floor(((px + 1) * n) / (W - 2 * PAD_X)));
        let top = -1;
        let shown = false;
        for (let i = a; i < b && i < n; i += 1) {
          if (top < 0 || values[i] > values[top]) top = i;
          if (parts[i]) shown = true;
        }
        const h = top >= 0 ? hOf(values[top]) : 0;
        if (!h) continue;
        const red = this.slowest >= a && this.slowest < b; // the column holding the slowest step that stands out
        ctx.fillStyle = red ? COLORS.slowest : COLORS.bar;
        ctx.globalAlpha = allShown || shown ? 1 : 0.35;
        ctx.fillRect(PAD_X + px, base - h, 1, h);
      }
      ctx.globalAlpha = 1;
    }

    // step numbers in a row of their own above wide bars; the slowest with its time, in its colour
    if (labelled) {
      ctx.font = LABEL_FONT;
      ctx.textBaseline = 'top';
      for (let i = 0; i < n; i += 1) {
        const {x, w} = this.slot(i);
        const full = i === this.slowest ? `#${steps[i].step} · ${formatDuration(values[i] * 1000)}` : `#${steps[i].step}`;
        const text = ctx.measureText(full).width <= w - 4 ? full : `#${steps[i].step}`;
        if (ctx.measureText(text).width > w - 4) continue;
        const p = parts[i];
        ctx.globalAlpha = allShown || p ? 1 : 0.6;
        ctx.fillStyle = i === this.slowest ? COLORS.slowest : COLORS.mutedText;
        ctx.fillText(text, x + 2, PAD_TOP - 2);
      }
      ctx.globalAlpha = 1;
      ctx.textBaseline = 'alphabetic';
    }

    // the median, dashed
    if (n >= 3 && Number.isFinite(this.median) && this.median > 0) {
      const y = Math.round(base - (this.median / vmax) * usable) + 0.5;
      ctx.strokeStyle = COLORS.median;
      ctx.lineWidth = 1;
      ctx.setLineDash([3, 3]);
      ctx.beginPath();
      ctx.moveTo(PAD_X, y);
      ctx.lineTo(W - PAD_X, y);
      ctx.stroke();
      ctx.setLineDash([]);
    }

    // hover and keyboard focus: an outline around the step's slot
    for (const [i, color, width] of [[this.hover, COLORS.text, 1], [document.activeElement === this.canvas ? this.focus : -1, COLORS.selected, 2]]) {
      if (i < 0 || i >= n) continue;
      const {x, w} = this.slotFor(i);
      const h = Math.max(hOf(values[i]), 4);
      ctx.strokeStyle = color;
      ctx.lineWidth = width;
      ctx.strokeRect(x - width / 2 - 0.5, base - h - width / 2 - 0.5, w + width + 1, h + width + 1);
    }
    ctx.font = FONT;
  }

  /** Step i's slot, at least 3 px wide (dense strips draw one column for many steps). */
  slotFor(i) {
    const g = this.geom;
    if (g.slotW >= 1.5) return this.slot(i);
    return {x: PAD_X + this.columnOf(i) - 1, w: 3};
  }

  /** The pixel column (from the first bar's left) that draws step i when columns hold many steps. */
  columnOf(i) {
    const n = this.steps.length;
    const span = this.geom.W - 2 * PAD_X;
    const first = (px) => Math.floor((px * n) / span);
    let px = Math.floor((i * span) / n);
    const end = (px) => Math.max(first(px) + 1, first(px + 1));
    while (px > 0 && first(px) > i) px -= 1;
    while (px < span - 1 && end(px) <= i) px += 1;
    return px;
  }

  // ---- hover, click, keys ------------------------------------------------------
  /** The step under canvas x (the slowest of a dense column), or -1. */
  pick(x) {
    const g = this.geom;
    if (!g || !this.steps.length) return -1;
    const n = this.steps.length;
    if (x < PAD_X - 2 || x > g.W - PAD_X + 2) return -1;
    if (g.slotW >= 1.5) return Math.min(n - 1, Math.max(0, Math.floor((x - PAD_X) / g.slotW)));
    const px = Math.floor(x - PAD_X);
    const a = Math.max(0, Math.floor((px * n) / (g.W - 2 * PAD_X)));
    const b = Math.min(n, Math.max(a + 1, Math.floor(((px + 1) * n) / (g.W - 2 * PAD_X))));
    if (this.slowest >= a && this.slowest < b) return this.slowest;
    let top = a;
    for (let i = a; i < b; i += 1) if (stepMs(this.steps[i]) > stepMs(this.steps[top])) top = i;
    return Math.min(top, n - 1);
  }

  onMove(e) {
    const r = this.canvas.getBoundingClientRect();
    this.setHover(this.pick(e.clientX - r.left));
  }

  setHover(i) {
    if (i === this.hover) return;
    this.hover = i;
    this.canvas.style.cursor = i >= 0 ? 'pointer' : 'default';
    if (i >= 0) this.showTooltip(i);
    else if (document.activeElement === this.canvas && this.focus >= 0) this.showTooltip(this.focus);
    else this.hideTooltip();
    this.requestDraw();
  }

  onClick(e) {
    const r = this.canvas.getBoundingClientRect();
    const i = this.pick(e.clientX - r.left);
    if (i < 0) return;
    this.focus = i;
    this.choose(i);
  }

  choose(i) {
    const s = this.steps[i];
    if (s) this.onStep(s);
  }

  setFocus(i) {
    if (!this.steps.length) return;
    this.focus = Math.max(0, Math.min(this.steps.length - 1, i));
    setText(this.live, this.stepLines(this.focus)[0]);
    if (this.hover < 0) this.showTooltip(this.focus);
    this.requestDraw();
  }

  /** ←/→ (Home/End) pick a step, Enter or Space zooms the timeline to it. */
  onKey(e) {
    if (!this.steps.length || e.ctrlKey || e.metaKey || e.altKey) return;
    const moves = {ArrowLeft: -1, ArrowRight: 1};
    if (e.key in moves) this.setFocus((this.focus < 0 ? (this.slowest >= 0 ? this.slowest : 0) : this.focus + moves[e.key]));
    else if (e.key === 'Home') this.setFocus(0);
    else if (e.key === 'End') this.setFocus(this.steps.length - 1);
    else if ((e.key === 'Enter' || e.key === ' ') && this.focus >= 0) this.choose(this.focus);
    else return;
    e.preventDefault();
  }

  /** A step's tooltip lines: its number and time first. */
  stepLines(i) {
    const s = this.steps[i];
    const ms = stepMs(s);
    const tag = i === this.slowest ? ' · the slowest' : this.marked.has(i) ? ' · stands out' : '';
    const lines = [`step #${s.step} · ${formatDuration(ms * 1000)}${tag}`];
    if (Number.isFinite(this.median) && this.median > 0 && Number.isFinite(ms)) {
      lines.push(`${(ms / this.median).toFixed(ms / this.median >= 10 ? 0 : 2)}× the median (${formatDuration(this.median * 1000)})`);
    }
    const u = unaccountedMs(s);
    if (Number.isFinite(u)) lines.push(`${formatDuration(u * 1000)} no op accounts for${i === this.unaccounted ? ' — it stands out' : ''}`);
    const p = this.visiblePart(i);
    if (this.view && p && !(p[0] <= 0 && p[1] >= 1)) lines.push(`${Math.round((p[1] - p[0]) * 100)} % of it in the timeline's view`);
    else if (this.view && p) lines.push('in the timeline\'s view');
    lines.push('click: zoom the timeline to this step');
    return lines;
  }

  showTooltip(i) {
    if (!this.geom || i < 0 || i >= this.steps.length) return;
    setText(this.tooltip, this.stepLines(i).join('\n'));
    this.tooltip.hidden = false;
    const {x, w} = this.slotFor(i);
    const tw = this.tooltip.offsetWidth;
    const left = Math.max(0, Math.min(x + w / 2 - tw / 2, this.geom.W - tw));
    this.tooltip.style.transform = `translate(${Math.round(left)}px, ${STRIP_H + 4}px)`;
  }

  hideTooltip() {
    this.tooltip.hidden = true;
  }

  // ---- test handles ------------------------------------------------------------
  /** Where step i's bar is drawn, in page px (its middle, half-way up), or null. */
  locate(i) {
    if (!this.geom || i < 0 || i >= this.steps.length || this.root.hidden) return null;
    const r = this.canvas.getBoundingClientRect();
    const {x, w} = this.slotFor(i);
    const v = stepMs(this.steps[i]);
    const h = Number.isFinite(v) ? Math.max(2, (v / this.geom.vmax) * this.geom.usable) : 0;
    return {clientX: r.left + x + w / 2, clientY: r.top + this.geom.base - Math.max(2, h / 2), top: r.top + this.geom.base - h};
  }

  /** What the strip shows: its state, source, steps, the slowest and the steps in view. */
  debug() {
    return {
      state: this.root.dataset.state, hidden: this.root.hidden, source: this.source, reason: this.reason.textContent,
      slowest: this.slowest, slowestStep: this.slowest >= 0 ? this.steps[this.slowest].step : null,
      marked: [...this.marked].sort((a, b) => a - b), label: this.slowLabel.textContent,
      unaccounted: this.unaccounted, unaccountedStep: this.unaccounted >= 0 ? this.steps[this.unaccounted].step : null,
      unaccountedLabel: this.unaccLabel.textContent,
      median: this.median, band: this.band || null,
      steps: this.steps.map((s, i) => ({step: s.step, start_us: Number(s.start_us), end_us: Number(s.end_us),
        ms: stepMs(s), visible: this.visiblePart(i)})),
    };
  }
}
