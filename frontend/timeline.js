// The canvas timeline's core: the view (zoom, pan, scroll), the layout of rows,
// the ruler, grid, gutter and scrollbar, and the interaction (wheel/drag/W-A-S-D
// zoom and pan, hover, click). What each kind of track draws, picks and says is
// in its own module under tracks/ (slices, counters, instants, flows, waveform),
// listed in tracks/index.js; the core only loops over that list.
//
// Performance rules, so pan/zoom stay smooth with 100k+ events:
// - draw only on demand (one requestAnimationFrame per change), only the rows
//   that are on screen, and per row only the marks in the view (binary search);
// - marks narrower than a pixel are merged per pixel column (chrome://tracing
//   merges < 2 px; Perfetto keeps one slice per pixel bucket) — so a frame costs
//   O(pixels), not O(events);
// - no allocation per mark per frame: colours are precomputed per name, labels
//   cached.
//
// Times: the view is in absolute µs (as the server's routes take them); a
// model's arrays are relative to model.origin, so float precision holds even
// for epoch-µs traces (5e12 µs).
import {el, showControls} from './dom.js';
import {formatDuration, formatTick, niceStep} from './format.js';
import {FLAG_SUMMARY, inputIndexOf, lowerBound} from './model.js';
import {BOLD_FONT, COLORS, FONT, PROC_H, ROW_H, RULER_H, SLICE_H, fitText} from './tracks/common.js';
import {shortHostNames, shortLabel} from './merged.js';
import {KIND_OF_HIT, TRACK_KINDS} from './tracks/index.js';

const MIN_SPAN_US = 1e-3;
/** <input> types that take no text: W/A/S/D on them are not typing. */
const NON_TEXT_INPUTS = new Set(['checkbox', 'radio', 'button', 'submit', 'reset', 'range', 'color', 'file', 'image']);
/** Framing an event (a search hit, the selection): its span with this much of it on each side… */
const FRAME_PAD = 1;
/** …and at least this wide a window (µs), so an instant or a 100 ns kernel has context. */
const FRAME_MIN_US = 20;
/** The query layer's colours: CSS variables of the dashboard (light and dark), else these. */
const QUERY_COLORS = {
  '--tbr-highlight': '#f9ab00', // search hits
  '--tbr-accent': '#1a73e8', // the range, the current hit
  '--tbr-fg': '#1b1b1f',
  '--tbr-bg': '#ffffff',
  '--tbr-mark': '#a142f4', // marks
};

/** A (pid, tid) key that holds the same for the model's ids and a route's JSON (null = absent). */
function idPart(value) {
  return value === null || value === undefined ? '-' : `${typeof value}:${value}`;
}

export class Timeline {
  constructor(container, {onViewChange, onSelect, onRange} = {}) {
    this.container = container;
    this.onViewChange = onViewChange || (() => {});
    this.onSelect = onSelect || (() => {});
    // onRange([t0, t1] absolute µs, final): a shift+drag selecting a time range (final on release)
    this.onRange = onRange || (() => {});
    this.canvas = el('canvas', {class: 'tbr-canvas', tabindex: '0', role: 'img',
      'aria-label': 'Trace timeline: wheel or W/S to zoom, drag or A/D to pan, shift+drag to measure a range, click a slice for details'});
    this.tooltip = el('div', {class: 'tbr-tooltip', role: 'tooltip', hidden: true});
    container.append(this.canvas, this.tooltip);
    this.ctx = this.canvas.getContext('2d', {alpha: false});

    this.model = null;
    this.view = null;
    this.extent = null; // the whole trace's [t0, t1], once known
    this.displayOrigin = null; // ruler zero
    this.dataWindow = null; // where the model holds data (absolute µs)
    this.items = []; // the layout: {kind, index, y, h, owner} top to bottom, y in content px
    this.rowItems = new Map(); // row kind → (index → item)
    this.contentH = 0;
    this.scrollY = 0;
    this.showFlows = false;
    this.hover = null;
    this.selected = null;
    this.width = 0;
    this.height = 0;
    this.dpr = 1;
    this.gutter = 180;
    this.charW = 6.2;
    this.frameRequested = false;
    this.frames = 0; // draws so far, and their total time: read by the benchmark
    this.drawMsTotal = 0;
    this.lastDrawMs = 0;
    this.firstDataPaint = null; // performance.now() when data was first on screen
    this.mouse = {x: -1, y: -1, inside: false};
    this.drag = null;
    this.keys = new Set();
    this.keyLoop = 0;
    // The query layer (search hits, the current one, marks, a selected range), all as input
    // events {i, ts, dur, pid, tid, …} in absolute µs: found again in each model (resolve).
    this.searchHits = [];
    this.currentHit = null;
    this.marks = [];
    this.range = null;
    this.resolved = new Map(); // hit object → resolve(hit), for this.model
    this.trackKeys = null; // {model, map: 'pid|tid' → track index}
    this.frameColors = null; // the query layer's colours, read once a frame (queryColors)

    this.kinds = TRACK_KINDS;
    this.trackState = new Map(this.kinds.map((k) => [k, k.init(this)]));

    this.resize();
    new ResizeObserver(() => this.resize()).observe(container);
    this.bindEvents();
  }

  /** What track kind `kind` keeps for this timeline (made by its init). */
  stateOf(kind) {
    return this.trackState.get(kind);
  }

  /** The layout row of kind `rowKind` ('track', 'counter', 'waveform') and index, if laid out. */
  rowItem(rowKind, index) {
    const rows = this.rowItems.get(rowKind);
    return rows ? rows.get(index) : undefined;
  }

  // ---- data ----------------------------------------------------------------
  /** Shows a model (keeping the view): the data for `dataWindow` at one level. */
  setModel(model, dataWindow) {
    this.model = model;
    this.dataWindow = dataWindow || model.window;
    this.resolved.clear();
    for (const k of this.kinds) k.prepare(this, model);
    this.hover = null;
    this.layout();
    if (!this.view) this.view = model.window.slice();
    if (this.displayOrigin === null) this.displayOrigin = model.window[0];
    this.requestDraw();
  }

  /**
   * The waveform row above the processes; `wave` is null (no row) or
   *   {name: string, label: string (the gutter's text),
   *    points: [{t0: µs, t1: µs, value: number, step: int}, …]  (absolute µs, like setView),
   *    marked: Set<int> | Array<int>  (indices into points: the slowest steps, ringed in red)}.
   * Each point is a dot at the middle of t0..t1, its value scaled between the min and max
   * of the finite values; consecutive points are joined; a non-finite value is a gap with
   * a mark at the baseline. Hovering shows the step, its value and duration; a click calls
   * onSelect({kind: 'waveform', index, point, step, value, t0, t1, marked}). The row stays
   * across setModel (zoom, level) and goes with clear() (another run or host).
   */
  setWaveform(wave) {
    this.setTrackData('waveform', wave);
  }

  /** Gives track kind `kind` (a hit kind: 'waveform') its own data, and lays the rows out again. */
  setTrackData(kind, data) {
    const k = KIND_OF_HIT.get(kind);
    if (!k) throw new Error(`no track kind ${kind}`);
    k.setData(this, data);
    if (this.hover && this.hover.kind === kind) this.setHover(null, 0, 0);
    if (this.selected && this.selected.kind === kind) this.selected = null;
    if (this.model) this.layout();
    this.requestDraw();
  }

  /** Forgets everything (another run or host), the waveform included. */
  clear() {
    this.model = null;
    this.view = null;
    this.extent = null;
    this.displayOrigin = null;
    this.dataWindow = null;
    this.items = [];
    this.rowItems = new Map();
    this.selected = null;
    this.hover = null;
    this.scrollY = 0;
    this.resolved.clear();
    for (const k of this.kinds) k.setData(this, null);
    this.hideTooltip();
    this.requestDraw();
  }

  setExtent(extent) {
    this.extent = extent;
    if (extent) this.displayOrigin = extent[0];
  }

  setShowFlows(on) {
    this.showFlows = on;
    this.requestDraw();
  }

  setSelected(hit) {
    this.selected = hit;
    this.requestDraw();
  }

  // ---- the query layer: search hits, the current hit, marks, a range (issue 13) ----
  /** Search hits to highlight: [{i, name, ph, ts, dur, pid, tid}, …] (absolute µs), or [] for none. */
  setSearchHits(hits) {
    this.searchHits = Array.isArray(hits) ? hits : [];
    this.resolved.clear();
    this.requestDraw();
  }

  /** The hit stepped to (drawn stronger, pointed at on the ruler), or null. */
  setCurrentHit(hit) {
    this.currentHit = hit || null;
    this.requestDraw();
  }

  /** Persistent marks: [{i, name, ts, dur, pid, tid}, …] — a band across the plot and a flag on the ruler each. */
  setMarks(marks) {
    this.marks = Array.isArray(marks) ? marks : [];
    this.requestDraw();
  }

  /** A selected time range [t0, t1] (absolute µs), shaded with its duration; null clears it. */
  setRange(range) {
    this.range = range && range[1] > range[0] ? [range[0], range[1]] : null;
    this.requestDraw();
  }

  /** The model's track index of (pid, tid), or -1. */
  trackIndexOf(pid, tid) {
    const m = this.model;
    if (!m) return -1;
    if (!this.trackKeys || this.trackKeys.model !== m) {
      const map = new Map();
      m.tracks.forEach((t, i) => map.set(`${idPart(t.pid)}|${idPart(t.tid)}`, i));
      this.trackKeys = {model: m, map};
    }
    const t = this.trackKeys.map.get(`${idPart(pid)}|${idPart(tid)}`);
    return t === undefined ? -1 : t;
  }

  /**
   * Where input event `hit` ({i, ts, dur, pid, tid}) is in the shown model:
   *   {state: 'kept', track, index}     its own slice (index into model.slices)
   *   {state: 'instant', track, index}  its own instant (index into model.instants)
   *   {state: 'folded', track, index}   folded into the summary slice `index` covering its time
   *   {state: 'track', track}           on this track, but drawn by no slice of it (a counter, an end)
   *   {state: 'unloaded'}               outside the data this model holds
   *   {state: 'absent'}                 no track of this model holds it
   * or null without a model. Each slice row is searched by time (binary search), not scanned.
   */
  resolve(hit) {
    const m = this.model;
    if (!m || !hit) return null;
    const cached = this.resolved.get(hit);
    if (cached) return cached;
    const out = this.resolveUncached(m, hit);
    if (this.resolved.size > 50000) this.resolved.clear();
    this.resolved.set(hit, out);
    return out;
  }

  resolveUncached(m, hit) {
    const ts = Number(hit.ts);
    const dur = Math.max(0, Number(hit.dur) || 0);
    if (!Number.isFinite(ts)) return {state: 'absent'};
    const dw = this.dataWindow || m.window;
    if (ts > dw[1] || ts + dur < dw[0]) return {state: 'unloaded'};
    const t = this.trackIndexOf(hit.pid, hit.tid);
    if (t < 0) return {state: 'absent'};
    const rel = ts - m.origin;
    const eps = 2e-3 + Math.abs(ts) * 4e-16; // 2 ns, and float noise at epoch-µs times
    const s = m.slices;
    const track = m.tracks[t];
    for (let d = 0; d < track.depthCount; d += 1) {
      const row = track.rowBase + d;
      const b = s.rowStart[row + 1];
      for (let j = lowerBound(s.ts, rel - eps, s.rowStart[row], b); j < b && s.ts[j] <= rel + eps; j += 1) {
        if (!(s.flags[j] & FLAG_SUMMARY) && inputIndexOf(m, s.k[j]) === hit.i) return {state: 'kept', track: t, index: j};
      }
    }
    const inst = m.instants;
    for (const g of [inst.trackBase + t, inst.procBase + track.proc, inst.globalGroup]) {
      const b = inst.start[g + 1];
      for (let j = lowerBound(inst.ts, rel - eps, inst.start[g], b); j < b && inst.ts[j] <= rel + eps; j += 1) {
        if (inputIndexOf(m, inst.k[j]) === hit.i) return {state: 'instant', track: t, index: j};
      }
    }
    // Not drawn as itself: the summary slice of its track covering its time (the shallowest
    // one covering all of it, else any covering its start).
    let any = -1;
    for (let d = 0; d < track.depthCount; d += 1) {
      const row = track.rowBase + d;
      const a = s.rowStart[row];
      const j = lowerBound(s.ts, rel + eps, a, s.rowStart[row + 1]) - 1;
      if (j < a || !(s.flags[j] & FLAG_SUMMARY) || s.ts[j] + s.dur[j] < rel - eps) continue;
      if (s.ts[j] + s.dur[j] >= rel + dur - eps) return {state: 'folded', track: t, index: j};
      if (any < 0) any = j;
    }
    if (any >= 0) return {state: 'folded', track: t, index: any};
    return {state: 'track', track: t};
  }

  /** The hit as a timeline selection ({kind, index, model}) when the model draws it as itself, else null. */
  hitOf(hit) {
    const r = this.resolve(hit);
    if (!r) return null;
    if (r.state === 'kept') return {kind: 'slice', index: r.index, model: this.model};
    if (r.state === 'instant') return {kind: 'instant', index: r.index, model: this.model};
    return null;
  }

  /** Shows [t0, t1] (absolute µs) with its span again on each side, at least FRAME_MIN_US wide. */
  frameSpan(t0, t1) {
    if (!(Number.isFinite(t0) && Number.isFinite(t1))) return;
    const span = Math.max(0, t1 - t0);
    const pad = Math.max(span * FRAME_PAD, (FRAME_MIN_US - span) / 2, 0);
    this.setView(t0 - pad, t1 + pad);
  }

  /** Scrolls the rows so that input event `hit`'s track (and its depth, when drawn) is on screen. */
  reveal(hit) {
    const r = this.resolve(hit);
    if (!r || r.track === undefined) return;
    const item = this.rowItem('track', r.track);
    if (!item) return;
    const depth = r.state === 'kept' || r.state === 'folded' ? this.model.slices.depth[r.index] : 0;
    const top = item.y + depth * ROW_H;
    const visible = this.height - RULER_H;
    if (top >= this.scrollY && top + ROW_H <= this.scrollY + visible) return;
    this.scrollY = top - visible / 3;
    this.clampScroll();
    this.requestDraw();
  }

  /** Scrolls process `p` (its index in the model) to the top third of the plot. */
  revealProcess(p) {
    const item = this.rowItem('proc', p);
    if (!item) return;
    this.scrollY = item.y - (this.height - RULER_H) / 3;
    this.clampScroll();
    this.requestDraw();
  }

  /** Test hook: the page x of absolute time `t` (µs) on the plot. */
  clientXOf(t) {
    if (!this.view) return null;
    const rect = this.canvas.getBoundingClientRect();
    return rect.left + this.gutter + ((t - this.view[0]) * this.plotWidth()) / (this.view[1] - this.view[0]);
  }

  /** The query layer's colours, from the dashboard's CSS variables (light or dark) when set. */
  queryColors() {
    const style = getComputedStyle(this.container);
    const out = {};
    for (const [name, fallback] of Object.entries(QUERY_COLORS)) {
      out[name.slice(6)] = style.getPropertyValue(name).trim() || fallback;
    }
    return out;
  }

  /** y (canvas px) of the top of a track's slice row at `depth`, or null when the track is not laid out. */
  rowTop(track, depth) {
    const item = this.rowItem('track', track);
    return item ? RULER_H + item.y - this.scrollY + depth * ROW_H + 1 : null;
  }

  /** Over the rows: the range's band, marks, search hits (tinted and outlined; a folded one pointed at in its summary). */
  drawQuery(f) {
    if (!this.range && !this.marks.length && !this.searchHits.length && !this.currentHit) return;
    const ctx = this.ctx;
    const c = this.queryColors();
    this.frameColors = c; // read once a frame: getComputedStyle is not free
    const x = (t) => f.X0 + (t - f.view0) * f.scale;
    const [v0, v1] = this.view;
    ctx.save();
    if (this.range) {
      const xa = Math.max(f.X0 - 2, x(this.range[0]));
      const xb = Math.min(this.width + 2, x(this.range[1]));
      if (xb > xa) {
        ctx.globalAlpha = 0.12;
        ctx.fillStyle = c.accent;
        ctx.fillRect(xa, RULER_H, xb - xa, this.height - RULER_H);
        ctx.globalAlpha = 0.9;
        ctx.fillRect(Math.round(xa), RULER_H, 1, this.height - RULER_H);
        ctx.fillRect(Math.round(xb) - 1, RULER_H, 1, this.height - RULER_H);
      }
    }
    for (const mark of this.marks) {
      const t0 = Number(mark.ts);
      const t1 = t0 + Math.max(0, Number(mark.dur) || 0);
      if (t1 < v0 || t0 > v1) continue;
      const xa = x(t0);
      const w = Math.max(1, x(t1) - xa);
      ctx.globalAlpha = 0.08;
      ctx.fillStyle = c.mark;
      ctx.fillRect(xa, RULER_H, w, this.height - RULER_H);
      ctx.globalAlpha = 0.7;
      ctx.fillRect(Math.round(xa), RULER_H, 1, this.height - RULER_H);
      if (w > 2) ctx.fillRect(Math.round(xa + w) - 1, RULER_H, 1, this.height - RULER_H);
      ctx.globalAlpha = 1;
      this.drawHitBox(f, mark, c.mark, 2, 0);
    }
    for (const hit of this.searchHits) {
      const t0 = Number(hit.ts);
      if (t0 > v1 || t0 + (Number(hit.dur) || 0) < v0 || hit === this.currentHit) continue;
      this.drawHitBox(f, hit, c.highlight, 2, 0.2);
    }
    if (this.currentHit) this.drawHitBox(f, this.currentHit, c.accent, 2.5, 0.15, true);
    ctx.restore();
  }

  /**
   * One input event where the model draws it: its slice (or instant) outlined, with a tint;
   * folded, a marker over its own time span inside the summary slice, with a caret above;
   * else a tick on its track.
   */
  drawHitBox(f, hit, color, lineWidth, tint, strong = false) {
    const r = this.resolve(hit);
    if (!r || r.track === undefined) return;
    const ctx = this.ctx;
    const s = f.m.slices;
    const t0 = Number(hit.ts);
    const dur = Math.max(0, Number(hit.dur) || 0);
    const x = (t) => f.X0 + (t - f.view0) * f.scale;
    ctx.strokeStyle = color;
    ctx.fillStyle = color;
    ctx.lineWidth = lineWidth;
    if (r.state === 'kept') {
      const y = this.rowTop(r.track, s.depth[r.index]);
      if (y === null || y + SLICE_H < RULER_H || y > this.height) return;
      const xa = x(s.ts[r.index] + f.m.origin);
      const w = Math.max(2, s.dur[r.index] * f.scale);
      const x0 = Math.max(xa, f.X0 - 4);
      const x1 = Math.min(xa + w, this.width + 4);
      if (tint) {
        ctx.globalAlpha = tint;
        ctx.fillRect(x0, y, x1 - x0, SLICE_H);
        ctx.globalAlpha = 1;
      }
      ctx.strokeRect(x0 - lineWidth / 2, y - lineWidth / 2, x1 - x0 + lineWidth, SLICE_H + lineWidth);
      if (x1 - x0 < 6) this.drawCaret(x0 + (x1 - x0) / 2, y - 1, color, strong ? 6 : 4);
    } else if (r.state === 'folded') {
      const y = this.rowTop(r.track, s.depth[r.index]);
      if (y === null || y + SLICE_H < RULER_H || y > this.height) return;
      // the summary's own extent, thin; the event's span inside it, solid
      const sa = x(s.ts[r.index] + f.m.origin);
      const sw = Math.max(1, s.dur[r.index] * f.scale);
      ctx.lineWidth = 1;
      ctx.setLineDash([3, 2]);
      ctx.strokeRect(Math.max(sa, f.X0 - 4) + 0.5, y + 0.5, Math.min(sw, this.width + 8) - 1, SLICE_H - 1);
      ctx.setLineDash([]);
      const xa = x(t0);
      const w = Math.max(strong ? 4 : 3, dur * f.scale);
      ctx.fillRect(xa, y + 3, w, SLICE_H - 6);
      ctx.strokeStyle = this.frameColors.fg;
      ctx.lineWidth = 1;
      ctx.strokeRect(xa - 0.5, y + 2.5, w + 1, SLICE_H - 5);
      this.drawCaret(xa + w / 2, y - 1, color, strong ? 6 : 4);
    } else if (r.state === 'instant' || r.state === 'track') {
      const y = this.rowTop(r.track, 0);
      if (y === null || y + SLICE_H < RULER_H || y > this.height) return;
      const xa = Math.round(x(t0));
      ctx.fillRect(xa - 1, y, 2, SLICE_H);
      this.drawCaret(xa, y - 1, color, strong ? 6 : 4);
    }
  }

  /** A small downward triangle whose tip is at (x, y). */
  drawCaret(x, y, color, size) {
    const ctx = this.ctx;
    ctx.fillStyle = color;
    ctx.beginPath();
    ctx.moveTo(x - size, y - size - 1);
    ctx.lineTo(x + size, y - size - 1);
    ctx.lineTo(x, y);
    ctx.closePath();
    ctx.fill();
  }

  /** On the ruler: a tick per search hit in view, the marks' flags, the range's duration. */
  drawQueryRuler() {
    if (!this.view || (!this.range && !this.marks.length && !this.searchHits.length && !this.currentHit)) return;
    const ctx = this.ctx;
    const c = this.queryColors();
    const X0 = this.gutter;
    const scale = this.plotWidth() / (this.view[1] - this.view[0]);
    const x = (t) => X0 + (t - this.view[0]) * scale;
    ctx.save();
    ctx.beginPath();
    ctx.rect(X0, 0, this.width - X0, RULER_H);
    ctx.clip();
    ctx.fillStyle = c.highlight;
    let last = -2;
    for (const hit of this.searchHits) {
      const px = Math.round(x(Number(hit.ts)));
      if (px < X0 || px > this.width || px === last) continue;
      last = px;
      ctx.fillRect(px, RULER_H - 6, 2, 5);
    }
    for (const mark of this.marks) {
      const px = Math.round(x(Number(mark.ts)));
      if (px < X0 - 8 || px > this.width) continue;
      ctx.fillStyle = c.mark;
      ctx.fillRect(px, 3, 1, RULER_H - 4);
      ctx.beginPath();
      ctx.moveTo(px + 1, 3);
      ctx.lineTo(px + 8, 6);
      ctx.lineTo(px + 1, 9);
      ctx.closePath();
      ctx.fill();
    }
    if (this.currentHit) {
      const px = x(Number(this.currentHit.ts));
      if (px >= X0 - 6 && px <= this.width + 6) this.drawCaret(px, RULER_H - 1, c.accent, 5);
    }
    if (this.range && x(this.range[1]) >= X0 && x(this.range[0]) <= this.width) {
      const xa = x(this.range[0]);
      const xb = x(this.range[1]);
      const label = formatDuration(this.range[1] - this.range[0]);
      ctx.font = BOLD_FONT;
      const w = ctx.measureText(label).width + 12;
      const mid = Math.min(Math.max((Math.max(xa, X0) + Math.min(xb, this.width)) / 2, X0 + w / 2 + 2), this.width - w / 2 - 2);
      ctx.fillStyle = c.accent;
      ctx.fillRect(Math.max(xa, X0), RULER_H - 3, Math.max(1, Math.min(xb, this.width) - Math.max(xa, X0)), 2);
      ctx.fillRect(mid - w / 2, 3, w, RULER_H - 8);
      ctx.fillStyle = c.bg;
      ctx.textAlign = 'center';
      ctx.fillText(label, mid, 3 + (RULER_H - 8) / 2 + 0.5);
      ctx.textAlign = 'start';
    }
    ctx.restore();
    ctx.font = FONT;
  }

  /**
   * Rows of the layout, y in content px: the rows above the processes (the waveform),
   * then per process its band and each kind's rows in it (counters, thread tracks).
   */
  layout() {
    const m = this.model;
    const items = [];
    let y = 0;
    const place = (proc) => {
      for (const k of this.kinds) {
        if (!k.row) continue;
        for (const index of k.rows(this, m, proc)) {
          const h = k.height(this, m, index);
          items.push({kind: k.row, index, y, h, owner: k});
          y += h;
        }
      }
    };
    place(-1);
    for (let p = 0; p < m.processes.length; p += 1) {
      items.push({kind: 'proc', index: p, y, h: PROC_H, owner: null});
      y += PROC_H;
      place(p);
    }
    this.items = items;
    this.rowItems = new Map();
    for (const item of items) {
      if (!this.rowItems.has(item.kind)) this.rowItems.set(item.kind, new Map());
      this.rowItems.get(item.kind).set(item.index, item);
    }
    this.contentH = y;
    this.clampScroll();
  }

  // ---- view ----------------------------------------------------------------
  getView() {
    return this.view ? this.view.slice() : null;
  }

  /** Sets the visible window (absolute µs), clamped to a sane zoom and to the trace. */
  setView(start, end, {silent = false} = {}) {
    let span = end - start;
    if (!(span > 0) || !Number.isFinite(span)) return;
    let maxSpan = 1e13;
    if (this.extent) maxSpan = Math.max(this.extent[1] - this.extent[0], MIN_SPAN_US);
    const clamped = Math.min(Math.max(span, MIN_SPAN_US), maxSpan);
    let s = start + (span - clamped) / 2;
    span = clamped;
    if (this.extent) {
      // keep the centre on the trace, so a user can never pan into the void
      const mid = Math.min(Math.max(s + span / 2, this.extent[0]), this.extent[1]);
      s = mid - span / 2;
      if (span >= this.extent[1] - this.extent[0]) s = this.extent[0];
    }
    this.view = [s, s + span];
    this.requestDraw();
    if (!silent) this.onViewChange(this.getView());
  }

  plotWidth() {
    return Math.max(1, this.width - this.gutter);
  }

  zoomAt(factor, px) {
    if (!this.view) return;
    const [s, e] = this.view;
    const span = e - s;
    const frac = Math.min(1, Math.max(0, (px - this.gutter) / this.plotWidth()));
    const t = s + frac * span;
    const next = span * factor;
    this.setView(t - frac * next, t - frac * next + next);
  }

  /** Shows [t0, t1] (absolute µs) with `pad` of its span on each side (a step, a summary slice). */
  zoomTo(t0, t1, {pad = 0.1} = {}) {
    if (!(Number.isFinite(t0) && Number.isFinite(t1) && t1 >= t0)) return;
    const margin = (t1 - t0) * pad || 1;
    this.setView(t0 - margin, t1 + margin);
  }

  panPx(dx) {
    if (!this.view) return;
    const [s, e] = this.view;
    const dt = (dx * (e - s)) / this.plotWidth();
    this.setView(s + dt, e + dt);
  }

  scrollBy(dy) {
    this.scrollY += dy;
    this.clampScroll();
    this.requestDraw();
  }

  clampScroll() {
    const visible = this.height - RULER_H;
    this.scrollY = Math.max(0, Math.min(this.scrollY, Math.max(0, this.contentH - visible)));
  }

  // ---- drawing -------------------------------------------------------------
  resize() {
    const rect = this.container.getBoundingClientRect();
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(50, Math.floor(rect.width));
    const h = Math.max(50, Math.floor(rect.height));
    if (w === this.width && h === this.height && dpr === this.dpr) return;
    this.width = w;
    this.height = h;
    this.dpr = dpr;
    // The backing store in device pixels, the CSS size in CSS pixels: sharp on HiDPI.
    this.canvas.width = Math.round(w * dpr);
    this.canvas.height = Math.round(h * dpr);
    this.canvas.style.width = `${w}px`;
    this.canvas.style.height = `${h}px`;
    this.gutter = Math.round(Math.min(260, Math.max(120, w * 0.18)));
    this.ctx.font = FONT;
    this.charW = this.ctx.measureText('abcdefghijklmnopqrstuvwxyz_:').width / 28;
    this.clampScroll();
    this.draw();
  }

  requestDraw() {
    if (this.frameRequested) return;
    this.frameRequested = true;
    requestAnimationFrame(() => this.draw());
  }

  /** What the track kinds draw and pick with: the model, the scale and the view (see tracks/index.js). */
  frame() {
    const m = this.model;
    const X0 = this.gutter;
    const scale = this.plotWidth() / (this.view[1] - this.view[0]);
    const vs = this.view[0] - m.origin; // view start, model-relative
    const right = this.width;
    return {m, ctx: this.ctx, X0, scale, vs, ve: vs + (right - X0) / scale, view0: this.view[0], right};
  }

  draw() {
    this.frameRequested = false;
    const started = performance.now();
    const {ctx, width: W, height: H, dpr} = this;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = COLORS.bg;
    ctx.fillRect(0, 0, W, H);
    ctx.font = FONT;
    ctx.textBaseline = 'middle';
    const m = this.model;
    if (m && this.view) {
      const f = this.frame();
      ctx.save();
      ctx.beginPath();
      ctx.rect(f.X0, RULER_H, W - f.X0, H - RULER_H);
      ctx.clip();
      this.drawGrid(f.X0, f.scale);
      this.drawItems(f);
      for (const k of this.kinds) k.drawOver(this, f);
      this.drawNotLoaded(f.X0, f.scale);
      this.drawQuery(f);
      this.drawHighlights(f);
      ctx.restore();
      this.drawGutter(m);
      this.drawScrollbar();
    }
    this.drawRuler();
    this.drawQueryRuler();
    const now = performance.now();
    this.frames += 1;
    this.lastDrawMs = now - started;
    this.drawMsTotal += this.lastDrawMs;
    if (m && this.firstDataPaint === null) this.firstDataPaint = now;
  }

  visibleItems(fn) {
    const top = this.scrollY;
    const bottom = this.scrollY + this.height - RULER_H;
    for (const item of this.items) {
      if (item.y + item.h < top) continue;
      if (item.y > bottom) break;
      fn(item, RULER_H + item.y - this.scrollY);
    }
  }

  /** Each row on screen: a process's band, then what every kind draws in it, then its bottom line. */
  drawItems(f) {
    const ctx = this.ctx;
    this.visibleItems((item, y) => {
      if (item.kind === 'proc') {
        ctx.fillStyle = COLORS.procBand;
        ctx.fillRect(f.X0, y, this.width - f.X0, item.h);
      }
      for (const k of this.kinds) k.draw(this, f, item, y);
      if (item.kind !== 'proc') {
        ctx.fillStyle = COLORS.gutterLine;
        ctx.fillRect(f.X0, y + item.h - 1, this.width - f.X0, 1);
      }
    });
  }

  /** Greys out the parts of the view the current data does not cover (a fetch is coming). */
  drawNotLoaded(X0, scale) {
    if (!this.dataWindow) return;
    const ctx = this.ctx;
    const xa = X0 + (this.dataWindow[0] - this.view[0]) * scale;
    const xb = X0 + (this.dataWindow[1] - this.view[0]) * scale;
    ctx.fillStyle = COLORS.notLoaded;
    if (xa > X0) ctx.fillRect(X0, RULER_H, xa - X0, this.height - RULER_H);
    if (xb < this.width) ctx.fillRect(Math.max(X0, xb), RULER_H, this.width - Math.max(X0, xb), this.height - RULER_H);
  }

  drawHighlights(f) {
    for (const [hit, color, width] of [[this.hover, COLORS.hover, 1], [this.selected, COLORS.selected, 2]]) {
      const k = hit && KIND_OF_HIT.get(hit.kind);
      if (k) k.highlight(this, f, hit, color, width);
    }
  }

  drawGrid(X0, scale) {
    const ctx = this.ctx;
    const step = niceStep(100 / scale);
    const origin = this.displayOrigin ?? this.view[0];
    const first = Math.ceil((this.view[0] - origin) / step) * step;
    ctx.fillStyle = COLORS.grid;
    for (let t = first; ; t += step) {
      const x = X0 + (t + origin - this.view[0]) * scale;
      if (x > this.width) break;
      ctx.fillRect(Math.round(x), RULER_H, 1, this.height - RULER_H);
    }
  }

  drawGutter(m) {
    const ctx = this.ctx;
    const G = this.gutter;
    ctx.fillStyle = COLORS.gutter;
    ctx.fillRect(0, RULER_H, G, this.height - RULER_H);
    ctx.fillStyle = COLORS.gutterLine;
    ctx.fillRect(G - 1, RULER_H, 1, this.height - RULER_H);
    ctx.save();
    ctx.beginPath();
    ctx.rect(0, RULER_H, G - 1, this.height - RULER_H);
    ctx.clip();
    this.visibleItems((item, y) => {
      let text;
      let indent = 18;
      if (item.kind === 'proc') {
        ctx.fillStyle = COLORS.procBand;
        ctx.fillRect(0, y, G - 1, item.h);
        ctx.font = BOLD_FONT;
        text = m.processes[item.index].label;
        if (m.tb && m.tb.merged) { // a merged view: the hosts' names without what they all share
          if (this.shortFor !== m) [this.shortFor, this.shortHosts] = [m, shortHostNames(m.tb)];
          text = shortLabel(text, this.shortHosts);
        }
        indent = 6;
      } else {
        ctx.font = FONT;
        text = item.owner.label(this, m, item.index);
      }
      ctx.fillStyle = COLORS.text;
      const maxChars = Math.floor((G - indent - 6) / this.charW);
      const ty = item.kind === 'proc' ? y + item.h / 2 : y + Math.min(item.h, ROW_H) / 2 + 1;
      ctx.fillText(fitText(showControls(text), maxChars), indent, ty); // a name's bidi controls shown, not obeyed
      const note = item.owner && item.h >= 2 * ROW_H ? item.owner.note(this, m, item.index) : '';
      if (note) {
        ctx.fillStyle = COLORS.mutedText;
        ctx.fillText(fitText(showControls(note), maxChars), indent, ty + ROW_H - 2);
      }
      if (item.kind !== 'proc') {
        ctx.fillStyle = COLORS.gutterLine;
        ctx.fillRect(0, y + item.h - 1, G - 1, 1);
      }
    });
    ctx.restore();
    ctx.font = FONT;
  }

  drawScrollbar() {
    const visible = this.height - RULER_H;
    if (this.contentH <= visible) return;
    const h = Math.max(20, (visible * visible) / this.contentH);
    const y = RULER_H + ((visible - h) * this.scrollY) / (this.contentH - visible);
    this.ctx.fillStyle = COLORS.scrollbar;
    this.ctx.fillRect(this.width - 6, y, 4, h);
  }

  drawRuler() {
    const ctx = this.ctx;
    ctx.fillStyle = COLORS.gutter;
    ctx.fillRect(0, 0, this.width, RULER_H);
    ctx.fillStyle = COLORS.gutterLine;
    ctx.fillRect(0, RULER_H - 1, this.width, 1);
    if (!this.view) return;
    const X0 = this.gutter;
    const scale = this.plotWidth() / (this.view[1] - this.view[0]);
    const step = niceStep(100 / scale);
    const origin = this.displayOrigin ?? this.view[0];
    const first = Math.ceil((this.view[0] - origin) / step) * step;
    ctx.font = FONT;
    for (let t = first; ; t += step) {
      const x = X0 + (t + origin - this.view[0]) * scale;
      if (x > this.width) break;
      ctx.fillStyle = COLORS.mutedText;
      ctx.fillRect(Math.round(x), RULER_H - 7, 1, 6);
      ctx.fillStyle = COLORS.text;
      ctx.fillText(formatTick(t, step), Math.round(x) + 3, RULER_H / 2 - 2);
    }
    ctx.fillStyle = COLORS.gutter;
    ctx.fillRect(0, 0, X0, RULER_H - 1);
    ctx.fillStyle = COLORS.mutedText;
    ctx.fillText(`span ${formatDuration(this.view[1] - this.view[0])}`, 6, RULER_H / 2);
  }

  // ---- hit testing ---------------------------------------------------------
  /** What is under canvas point (x, y): {kind, index, model, …} or null; the kind drawn last is asked first. */
  hitTest(x, y) {
    const m = this.model;
    if (!m || !this.view || x < this.gutter || y < RULER_H) return null;
    const cy = y - RULER_H + this.scrollY;
    const item = this.items.find((it) => cy >= it.y && cy < it.y + it.h);
    if (!item) return null;
    const f = this.frame();
    const t = f.vs + (x - this.gutter) / f.scale;
    const p = {x, y, cy, t, tol: 3 / f.scale}; // a few pixels, so sub-pixel slices can be picked
    for (let i = this.kinds.length - 1; i >= 0; i -= 1) {
      const hit = this.kinds[i].hitTest(this, f, item, p);
      if (hit) return hit;
    }
    return null;
  }

  /** The tooltip's lines for a hit: [[cssClass, text], …]. */
  describe(hit) {
    return describeHit(this.model, hit, this.displayOrigin ?? (this.model ? this.model.origin : 0));
  }

  /**
   * What a details panel shows for a hit, times from the ruler's zero:
   * {name, rows: [[key, text], …], k (the event's key in the model, null if none),
   *  summary ({count, top} for a summary slice, else null), span ([t0, t1] absolute µs, or null)}.
   */
  details(hit) {
    const k = hit && KIND_OF_HIT.get(hit.kind);
    if (!k) return null;
    const m = hit.model || this.model;
    return k.details(m, hit, this.displayOrigin ?? (m ? m.origin : 0));
  }

  /** Test hook: where kind `kind` draws `query` (slice: a name; waveform: a point's index), in canvas and page px. */
  locate(kind, query) {
    const k = KIND_OF_HIT.get(kind);
    const where = k ? k.locate(this, query) : null;
    if (!where) return null;
    const rect = this.canvas.getBoundingClientRect();
    return {...where, clientX: rect.left + where.x, clientY: rect.top + where.y};
  }

  /**
   * Where the first visible slice named `name` is drawn (test hook):
   * {x, y} relative to the canvas and {clientX, clientY} in the page.
   */
  locateSlice(name) {
    return this.locate('slice', name);
  }

  // ---- interaction ---------------------------------------------------------
  bindEvents() {
    const c = this.canvas;
    c.addEventListener('wheel', (e) => this.onWheel(e), {passive: false});
    c.addEventListener('pointerdown', (e) => this.onPointerDown(e));
    c.addEventListener('pointermove', (e) => this.onPointerMove(e));
    c.addEventListener('pointerup', (e) => this.onPointerUp(e));
    c.addEventListener('pointercancel', () => {
      this.drag = null;
      this.canvas.classList.remove('tbr-dragging', 'tbr-ranging');
    });
    c.addEventListener('pointerleave', () => {
      this.mouse.inside = false;
      if (!this.drag) this.setHover(null, 0, 0);
    });
    window.addEventListener('keydown', (e) => this.onKey(e, true));
    window.addEventListener('keyup', (e) => this.onKey(e, false));
    window.addEventListener('blur', () => this.keys.clear());
  }

  localPoint(e) {
    const rect = this.canvas.getBoundingClientRect();
    return [e.clientX - rect.left, e.clientY - rect.top];
  }

  /**
   * Wheel: vertical wheel zooms around the pointer (as the W/S keys do), a
   * horizontal wheel or trackpad swipe pans, shift+wheel scrolls the tracks.
   */
  onWheel(e) {
    if (!this.view) return;
    e.preventDefault();
    const unit = e.deltaMode === 1 ? 16 : e.deltaMode === 2 ? this.height : 1;
    const dx = e.deltaX * unit;
    const dy = e.deltaY * unit;
    const [x] = this.localPoint(e);
    if (e.shiftKey) {
      this.scrollBy(dy || dx);
    } else if (Math.abs(dx) > Math.abs(dy)) {
      this.panPx(dx);
    } else if (dy) {
      this.zoomAt(Math.exp(dy * (e.ctrlKey ? 0.01 : 0.002)), x);
    }
  }

  onPointerDown(e) {
    if (e.button !== 0) return;
    this.canvas.focus({preventScroll: true});
    const [x, y] = this.localPoint(e);
    // shift+drag over the plot selects a time range; a plain drag pans
    const range = e.shiftKey && !!this.view && x >= this.gutter && y >= 0;
    this.drag = {x, y, lastX: x, lastY: y, moved: false, id: e.pointerId, range, anchor: range ? this.timeAt(x) : 0};
    this.canvas.setPointerCapture(e.pointerId);
  }

  /** The absolute time (µs) at canvas x. */
  timeAt(x) {
    return this.view[0] + ((x - this.gutter) * (this.view[1] - this.view[0])) / this.plotWidth();
  }

  onPointerMove(e) {
    const [x, y] = this.localPoint(e);
    this.mouse.x = x;
    this.mouse.y = y;
    this.mouse.inside = true;
    const d = this.drag;
    if (d) {
      if (!d.moved && Math.abs(x - d.x) + Math.abs(y - d.y) > 3) {
        d.moved = true;
        this.canvas.classList.add(d.range ? 'tbr-ranging' : 'tbr-dragging');
        this.setHover(null, 0, 0);
      }
      if (d.moved && d.range) {
        const t = this.timeAt(Math.min(Math.max(x, this.gutter), this.width));
        this.setRange([Math.min(d.anchor, t), Math.max(d.anchor, t)]);
        if (this.range) this.onRange(this.range.slice(), false);
        return;
      }
      if (d.moved) {
        this.panPx(d.lastX - x);
        this.scrollBy(d.lastY - y);
        d.lastX = x;
        d.lastY = y;
      }
      return;
    }
    this.setHover(this.hitTest(x, y), x, y);
  }

  onPointerUp(e) {
    const d = this.drag;
    this.drag = null;
    this.canvas.classList.remove('tbr-dragging', 'tbr-ranging');
    if (this.canvas.hasPointerCapture(e.pointerId)) this.canvas.releasePointerCapture(e.pointerId);
    if (d && d.moved && d.range) {
      if (this.range) this.onRange(this.range.slice(), true);
      return;
    }
    if (!d || d.moved) return;
    const [x, y] = this.localPoint(e);
    const hit = this.hitTest(x, y);
    this.setSelected(hit);
    this.onSelect(hit);
  }

  setHover(hit, x, y) {
    const same = hit && this.hover && hit.kind === this.hover.kind && hit.index === this.hover.index;
    if (!same) {
      this.hover = hit;
      this.requestDraw();
    }
    if (!hit) {
      this.hideTooltip();
      return;
    }
    if (!same) this.fillTooltip(hit);
    this.placeTooltip(x, y);
  }

  hideTooltip() {
    this.tooltip.hidden = true;
  }

  /** Tooltip lines as text nodes: names come from the trace and are never parsed as HTML. */
  fillTooltip(hit) {
    const lines = describeHit(this.model, hit, this.displayOrigin ?? this.model.origin);
    this.tooltip.replaceChildren(...lines.map(([cls, text]) => el('div', {class: cls}, text)));
    this.tooltip.hidden = false;
  }

  placeTooltip(x, y) {
    const tip = this.tooltip;
    const w = tip.offsetWidth;
    const h = tip.offsetHeight;
    let left = x + 14;
    let top = y + 14;
    if (left + w > this.width) left = Math.max(0, x - w - 10);
    if (top + h > this.height) top = Math.max(0, y - h - 10);
    tip.style.transform = `translate(${Math.round(left)}px, ${Math.round(top)}px)`;
  }

  /**
   * Whether a keydown on `target` is the timeline's: always with the focus on the canvas, never
   * in a text field (the search box keeps its letters wherever the pointer rests). A picker or a
   * button that still has the focus after a click (the run select) gives its keys to the timeline
   * while the pointer is over it: a <select> would otherwise take W/A/S/D as type-ahead and switch
   * the run (it did, on D). Elsewhere, as before, the keys are the timeline's.
   * keys.js asks the same of its own shortcuts.
   */
  ownsKey(target) {
    if (!target || target.nodeType !== 1 || target === this.canvas) return true;
    if (target.isContentEditable || target.tagName === 'TEXTAREA') return false;
    if (target.tagName === 'INPUT' && !NON_TEXT_INPUTS.has(String(target.type || 'text').toLowerCase())) return false;
    if (/^(INPUT|SELECT|BUTTON|OPTION)$/.test(target.tagName)) return this.mouse.inside;
    return true;
  }

  /** W/S zoom around the pointer, A/D pan: smooth while held, like Perfetto and chrome://tracing. */
  onKey(e, down) {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const key = e.key.toLowerCase();
    if (!'wasd'.includes(key) || key.length !== 1) return;
    if (!down) { // a release ends the key wherever it lands (the focus may have moved while it was held)
      if (this.keys.delete(key)) e.preventDefault();
      return;
    }
    if (!this.ownsKey(e.target)) return;
    if (!this.view) return;
    e.preventDefault(); // never the focused picker's type-ahead
    const fresh = !this.keys.has(key); // a new press, not the key's auto-repeat
    this.keys.add(key);
    if (fresh) { // one immediate step, so a tap does something even between frames (and while the loop of an
      // earlier tap is still to see its last frame: a tap then was lost, its release landing before that frame)
      const x = this.mouse.inside ? this.mouse.x : this.gutter + this.plotWidth() / 2;
      if (key === 'w') this.zoomAt(0.9, x);
      if (key === 's') this.zoomAt(1 / 0.9, x);
      if (key === 'a') this.panPx(-this.plotWidth() * 0.05);
      if (key === 'd') this.panPx(this.plotWidth() * 0.05);
    }
    if (!this.keyLoop) {
      let last = performance.now();
      const step = (now) => {
        if (!this.keys.size) {
          this.keyLoop = 0;
          return;
        }
        const dt = Math.min(0.05, Math.max(0.001, (now - last) / 1000));
        last = now;
        const x = this.mouse.inside ? this.mouse.x : this.gutter + this.plotWidth() / 2;
        if (this.keys.has('w')) this.zoomAt(Math.exp(-3 * dt), x);
        if (this.keys.has('s')) this.zoomAt(Math.exp(3 * dt), x);
        if (this.keys.has('a')) this.panPx(-this.plotWidth() * 0.9 * dt);
        if (this.keys.has('d')) this.panPx(this.plotWidth() * 0.9 * dt);
        this.keyLoop = requestAnimationFrame(step);
      };
      this.keyLoop = requestAnimationFrame(step);
    }
  }
}

/** The hover text of a hit: [[cssClass, text], …]. Exported for the details panel. */
export function describeHit(m, hit, origin) {
  const k = hit && KIND_OF_HIT.get(hit.kind);
  return k ? k.describe(m, hit, origin) : [];
}
