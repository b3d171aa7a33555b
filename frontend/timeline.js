// The canvas timeline: drawing a model (see model.js) and the interaction
// (wheel/drag/W-A-S-D zoom and pan, hover, click).
//
// Performance rules, so pan/zoom stay smooth with 100k+ events:
// - draw only on demand (one requestAnimationFrame per change), only the rows
//   that are on screen, and per row only the slices in the view (binary search);
// - slices narrower than a pixel are merged per pixel column, with a binary
//   search to jump past the rest of the column (chrome://tracing merges < 2 px;
//   Perfetto keeps one slice per pixel bucket) — so a frame costs O(pixels),
//   not O(events);
// - no allocation per slice per frame: colours are precomputed per name, labels
//   cached, the hit object reused.
//
// Times: the view is in absolute µs (as the server's routes take them); a
// model's arrays are relative to model.origin, so float precision holds even
// for epoch-µs traces (5e12 µs).
import {colorForName, strokeForName} from './color.js';
import {el} from './dom.js';
import {formatCount, formatDuration, formatTick, niceStep} from './format.js';
import {FLAG_SUMMARY, lowerBound, summaryInfo} from './model.js';

const RULER_H = 26;
const PROC_H = 20;
const ROW_H = 18;
const SLICE_H = 16;
const TRACK_PAD = 4;
const EMPTY_TRACK_H = 10;
const COUNTER_H = 40;
const MIN_SPAN_US = 1e-3;
const LABEL_MIN_PX = 22;
const FONT = '11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
const BOLD_FONT = `bold ${FONT}`;
const COLORS = {
  bg: '#ffffff',
  gutter: '#f7f7f8',
  gutterLine: '#d9d9de',
  procBand: '#eceef2',
  text: '#1b1b1f',
  mutedText: '#5f6368',
  grid: 'rgba(0,0,0,0.06)',
  summary: '#d5d5d8',
  summaryStripe: '#9b9ba3',
  notLoaded: 'rgba(120,120,130,0.10)',
  instant: 'rgba(38,50,56,0.8)',
  globalInstant: 'rgba(198,40,40,0.55)',
  flow: 'rgba(40,40,70,0.5)',
  hover: '#000000',
  selected: '#1a73e8',
};

export class Timeline {
  constructor(container, {onViewChange, onSelect} = {}) {
    this.container = container;
    this.onViewChange = onViewChange || (() => {});
    this.onSelect = onSelect || (() => {});
    this.canvas = el('canvas', {class: 'tbr-canvas', tabindex: '0', role: 'img',
      'aria-label': 'Trace timeline: wheel or W/S to zoom, drag or A/D to pan, click a slice for details'});
    this.tooltip = el('div', {class: 'tbr-tooltip', role: 'tooltip', hidden: true});
    container.append(this.canvas, this.tooltip);
    this.ctx = this.canvas.getContext('2d', {alpha: false});
    this.hatch = makeHatch(this.ctx);

    this.model = null;
    this.view = null;
    this.extent = null; // the whole trace's [t0, t1], once known
    this.displayOrigin = null; // ruler zero
    this.dataWindow = null; // where the model holds data (absolute µs)
    this.items = [];
    this.contentH = 0;
    this.scrollY = 0;
    this.showFlows = false;
    this.hover = null;
    this.selected = null;
    this.colors = [];
    this.labels = new Map();
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

    this.resize();
    new ResizeObserver(() => this.resize()).observe(container);
    this.bindEvents();
  }

  // ---- data ----------------------------------------------------------------
  /** Shows a model (keeping the view): the data for `dataWindow` at one level. */
  setModel(model, dataWindow) {
    this.model = model;
    this.dataWindow = dataWindow || model.window;
    this.colors = model.names.map(colorForName);
    this.counterColors = model.counters.map((c) => strokeForName(c.label));
    this.labels.clear();
    this.hover = null;
    this.layout();
    if (!this.view) this.view = model.window.slice();
    if (this.displayOrigin === null) this.displayOrigin = model.window[0];
    this.requestDraw();
  }

  /** Forgets everything (another run or host). */
  clear() {
    this.model = null;
    this.view = null;
    this.extent = null;
    this.displayOrigin = null;
    this.dataWindow = null;
    this.items = [];
    this.selected = null;
    this.hover = null;
    this.scrollY = 0;
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

  /** Rows of the layout: process bands, counter tracks, thread tracks; y in content px. */
  layout() {
    const m = this.model;
    const items = [];
    let y = 0;
    for (let p = 0; p < m.processes.length; p += 1) {
      items.push({kind: 'proc', index: p, y, h: PROC_H});
      y += PROC_H;
      for (let c = 0; c < m.counters.length; c += 1) {
        if (m.counters[c].proc !== p) continue;
        items.push({kind: 'counter', index: c, y, h: COUNTER_H});
        y += COUNTER_H;
      }
      for (let t = m.processTracks[p]; t < m.processTracks[p + 1]; t += 1) {
        const rows = m.tracks[t].depthCount;
        const h = rows ? rows * ROW_H + TRACK_PAD : EMPTY_TRACK_H + TRACK_PAD;
        items.push({kind: 'track', index: t, y, h});
        y += h;
      }
    }
    this.items = items;
    this.trackItem = new Map(items.filter((i) => i.kind === 'track').map((i) => [i.index, i]));
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
      const X0 = this.gutter;
      const scale = this.plotWidth() / (this.view[1] - this.view[0]);
      const vs = this.view[0] - m.origin; // view start, model-relative
      ctx.save();
      ctx.beginPath();
      ctx.rect(X0, RULER_H, W - X0, H - RULER_H);
      ctx.clip();
      this.drawGrid(X0, scale);
      this.drawItems(m, X0, scale, vs);
      this.drawGlobalInstants(m, X0, scale, vs);
      if (this.showFlows) this.drawFlows(m, X0, scale, vs);
      this.drawNotLoaded(X0, scale);
      this.drawHighlights(m, X0, scale, vs);
      ctx.restore();
      this.drawGutter(m);
      this.drawScrollbar();
    }
    this.drawRuler();
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

  drawItems(m, X0, scale, vs) {
    const ctx = this.ctx;
    this.visibleItems((item, y) => {
      if (item.kind === 'proc') {
        ctx.fillStyle = COLORS.procBand;
        ctx.fillRect(X0, y, this.width - X0, item.h);
        this.drawInstants(m, m.instants.procBase + item.index, X0, scale, vs, y + 3, item.h - 6);
      } else if (item.kind === 'counter') {
        this.drawCounter(m, item.index, X0, scale, vs, y, item.h);
      } else {
        const track = m.tracks[item.index];
        for (let d = 0; d < track.depthCount; d += 1) {
          const ry = y + d * ROW_H + 1;
          if (ry + ROW_H < RULER_H || ry > this.height) continue;
          this.drawRow(m, track.rowBase + d, X0, scale, vs, ry);
        }
        const rows = Math.max(1, track.depthCount);
        this.drawInstants(m, m.instants.trackBase + item.index, X0, scale, vs, y, rows * ROW_H);
        ctx.fillStyle = COLORS.gutterLine;
        ctx.fillRect(X0, y + item.h - 1, this.width - X0, 1);
      }
    });
  }

  /** One (track, depth) row: slices never overlap, so starts and ends are both sorted. */
  drawRow(m, row, X0, scale, vs, y) {
    const ctx = this.ctx;
    const s = m.slices;
    const a = s.rowStart[row];
    const b = s.rowStart[row + 1];
    const right = this.width;
    const ve = vs + (right - X0) / scale;
    // first slice ending at or after the view start: ends are sorted within a row
    let lo = a;
    let hi = b;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (s.ts[mid] + s.dur[mid] < vs) lo = mid + 1;
      else hi = mid;
    }
    let i = lo;
    let style = null;
    while (i < b) {
      const ts = s.ts[i];
      if (ts > ve) break;
      const xa = X0 + (ts - vs) * scale;
      const w = s.dur[i] * scale;
      const summary = s.flags[i] & FLAG_SUMMARY;
      if (w >= 1) {
        const x0 = Math.max(xa, X0 - 2);
        const x1 = Math.min(xa + w, right + 2);
        if (summary) {
          ctx.fillStyle = COLORS.summary;
          ctx.fillRect(x0, y, x1 - x0, SLICE_H);
          ctx.fillStyle = this.hatch;
          ctx.fillRect(x0, y, x1 - x0, SLICE_H);
          style = null;
        } else {
          const c = this.colors[s.name[i]];
          if (c !== style) ctx.fillStyle = style = c;
          ctx.fillRect(x0, y, x1 - x0, SLICE_H);
        }
        if (x1 - x0 >= LABEL_MIN_PX) {
          this.drawLabel(m, i, x0, x1, y);
          style = null;
        }
        i += 1;
        continue;
      }
      // Sub-pixel slices: one mark per pixel column, then jump past the column.
      const px = Math.floor(xa);
      const tNext = vs + (px + 1 - X0) / scale;
      const j = lowerBound(s.ts, tNext, i + 1, b);
      const last = j - 1;
      const c = summary ? COLORS.summaryStripe : this.colors[s.name[i]];
      if (c !== style) ctx.fillStyle = style = c;
      if (last > i && s.dur[last] * scale >= 1) {
        ctx.fillRect(px, y, 1, SLICE_H); // the next one is wide: draw it on its own
        i = last;
      } else {
        const xe = X0 + (s.ts[last] + s.dur[last] - vs) * scale;
        ctx.fillRect(px, y, Math.max(1, Math.min(xe, right) - px), SLICE_H);
        i = j;
      }
    }
  }

  drawLabel(m, i, x0, x1, y) {
    const ctx = this.ctx;
    const left = Math.max(x0, this.gutter) + 3;
    const maxChars = Math.floor((Math.min(x1, this.width) - left - 3) / this.charW);
    if (maxChars < 2) return;
    const summary = m.slices.flags[i] & FLAG_SUMMARY;
    const key = (summary ? (m.names.length + i) : m.slices.name[i]) * 1024 + Math.min(maxChars, 1023);
    let text = this.labels.get(key);
    if (text === undefined) {
      let full = m.names[m.slices.name[i]];
      if (summary) {
        const info = summaryInfo(m, m.slices.k[i]);
        full = `${info ? formatCount(info.count) : '?'} folded · ${full}`;
      }
      text = full.length <= maxChars ? full : `${full.slice(0, Math.max(1, maxChars - 1))}…`;
      if (this.labels.size > 50000) this.labels.clear();
      this.labels.set(key, text);
    }
    ctx.fillStyle = summary ? '#303036' : COLORS.text;
    ctx.fillText(text, left, y + SLICE_H / 2 + 0.5);
  }

  /** Instant marks: a small chevron and a faint tick, at most one per pixel column. */
  drawInstants(m, group, X0, scale, vs, y, h) {
    const inst = m.instants;
    const a = inst.start[group];
    const b = inst.start[group + 1];
    if (a === b) return;
    const ctx = this.ctx;
    const ve = vs + (this.width - X0) / scale;
    let i = lowerBound(inst.ts, vs - 4 / scale, a, b);
    let lastPx = -10;
    ctx.fillStyle = COLORS.instant;
    ctx.beginPath();
    for (; i < b; i += 1) {
      const t = inst.ts[i];
      if (t > ve + 4 / scale) break;
      const px = Math.round(X0 + (t - vs) * scale);
      if (px - lastPx < 2) continue; // chevrons closer than 2 px merge
      lastPx = px;
      ctx.moveTo(px - 3, y);
      ctx.lineTo(px + 4, y);
      ctx.lineTo(px + 0.5, y + 5);
      ctx.closePath();
    }
    ctx.fill();
  }

  drawGlobalInstants(m, X0, scale, vs) {
    const inst = m.instants;
    const g = inst.globalGroup;
    const a = inst.start[g];
    const b = inst.start[g + 1];
    if (a === b) return;
    const ctx = this.ctx;
    const ve = vs + (this.width - X0) / scale;
    ctx.fillStyle = COLORS.globalInstant;
    let lastPx = -1;
    for (let i = lowerBound(inst.ts, vs, a, b); i < b && inst.ts[i] <= ve; i += 1) {
      const px = Math.round(X0 + (inst.ts[i] - vs) * scale);
      if (px === lastPx) continue;
      lastPx = px;
      ctx.fillRect(px, RULER_H, 1, this.height - RULER_H);
    }
  }

  /** A counter as a step line; dense stretches become one min–max bar per pixel column. */
  drawCounter(m, index, X0, scale, vs, y, h) {
    const c = m.counters[index];
    const ctx = this.ctx;
    const n = c.ts.length;
    if (!n) return;
    const top = y + 4;
    const height = h - 8;
    const range = c.max - c.min || 1;
    const yOf = (v) => top + height - ((v - c.min) / range) * height;
    const ve = vs + (this.width - X0) / scale;
    let i = Math.max(0, lowerBound(c.ts, vs, 0, n) - 1);
    ctx.strokeStyle = this.counterColors[index];
    ctx.lineWidth = 1;
    ctx.beginPath();
    let px = Math.round(X0 + (c.ts[i] - vs) * scale);
    let lastY = yOf(c.val[i]);
    let minY = lastY;
    let maxY = lastY;
    ctx.moveTo(Math.max(px, X0 - 2), lastY);
    for (i += 1; i < n; i += 1) {
      const x = Math.round(X0 + (c.ts[i] - vs) * scale);
      const yy = yOf(c.val[i]);
      if (x === px) {
        if (yy < minY) minY = yy;
        if (yy > maxY) maxY = yy;
        lastY = yy;
        continue;
      }
      if (maxY > minY) {
        ctx.lineTo(px, minY);
        ctx.lineTo(px, maxY);
        ctx.lineTo(px, lastY);
      }
      ctx.lineTo(x, lastY);
      ctx.lineTo(x, yy);
      px = x;
      lastY = minY = maxY = yy;
      if (c.ts[i] > ve) break;
    }
    if (i >= n) ctx.lineTo(Math.min(this.width, X0 + (m.window[1] - m.origin - vs) * scale), lastY);
    ctx.stroke();
    ctx.fillStyle = COLORS.mutedText;
    ctx.fillText(`max ${trimNumber(c.max)}`, X0 + 4, top + 5);
    ctx.fillStyle = COLORS.gutterLine;
    ctx.fillRect(X0, y + h - 1, this.width - X0, 1);
  }

  /** y (canvas px) of a row's middle, or null when its track is not laid out. */
  rowY(track, depth) {
    const item = this.trackItem.get(track);
    if (!item) return null;
    return RULER_H + item.y - this.scrollY + depth * ROW_H + 1 + SLICE_H / 2;
  }

  /**
   * Flow arrows, thinned where dense: per (from track, to track), an arrow
   * starting within 8 px of the last one drawn is skipped (zoom in to see each).
   */
  drawFlows(m, X0, scale, vs) {
    const f = m.arrows;
    if (!f.count) return;
    const ctx = this.ctx;
    const right = this.width;
    if (!this.flowLastX || this.flowLastX.length < f.pairs) this.flowLastX = new Float64Array(f.pairs);
    const lastX = this.flowLastX;
    lastX.fill(-Infinity);
    ctx.strokeStyle = COLORS.flow;
    ctx.fillStyle = COLORS.flow;
    ctx.lineWidth = 1;
    const ve = vs + (right - X0) / scale;
    // arrows are sorted by start: skip those that start after the view, and (cheaply) most that end before it
    for (let i = 0; i < f.count && f.fromTs[i] <= ve; i += 1) {
      const xa = X0 + (f.fromTs[i] - vs) * scale;
      const xb = X0 + (f.toTs[i] - vs) * scale;
      if ((xa < X0 && xb < X0) || (xa > right && xb > right)) continue;
      const p = f.pair[i];
      if (xa - lastX[p] < 8) continue;
      const ya = this.rowY(f.fromTrack[i], f.fromDepth[i]);
      const yb = this.rowY(f.toTrack[i], f.toDepth[i]);
      if (ya === null || yb === null) continue;
      if ((ya < RULER_H && yb < RULER_H) || (ya > this.height && yb > this.height)) continue;
      lastX[p] = xa;
      const bend = Math.max(12, Math.min(60, Math.abs(xb - xa) / 2));
      ctx.beginPath();
      ctx.moveTo(xa, ya);
      ctx.bezierCurveTo(xa + bend, ya, xb - bend, yb, xb, yb);
      ctx.stroke();
      ctx.beginPath();
      ctx.moveTo(xb, yb);
      ctx.lineTo(xb - 6, yb - 3.5);
      ctx.lineTo(xb - 6, yb + 3.5);
      ctx.fill();
    }
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

  drawHighlights(m, X0, scale, vs) {
    for (const [hit, color, width] of [[this.hover, COLORS.hover, 1], [this.selected, COLORS.selected, 2]]) {
      if (!hit || hit.kind !== 'slice' || hit.model !== m) continue;
      const s = m.slices;
      const i = hit.index;
      const item = this.trackItem.get(s.rowTrack[s.row[i]]);
      if (!item) continue;
      const y = RULER_H + item.y - this.scrollY + s.depth[i] * ROW_H + 1;
      const xa = X0 + (s.ts[i] - vs) * scale;
      const w = Math.max(1, s.dur[i] * scale);
      this.ctx.strokeStyle = color;
      this.ctx.lineWidth = width;
      this.ctx.strokeRect(Math.max(xa, X0 - 4) - 0.5, y - 0.5, Math.min(w, this.width + 8) + 1, SLICE_H + 1);
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
        indent = 6;
      } else if (item.kind === 'counter') {
        ctx.font = FONT;
        text = m.counters[item.index].label;
      } else {
        ctx.font = FONT;
        text = m.tracks[item.index].label;
      }
      ctx.fillStyle = COLORS.text;
      const maxChars = Math.floor((G - indent - 6) / this.charW);
      const shown = text.length > maxChars ? `${text.slice(0, Math.max(1, maxChars - 1))}…` : text;
      const ty = item.kind === 'proc' ? y + item.h / 2 : y + Math.min(item.h, ROW_H) / 2 + 1;
      ctx.fillText(shown, indent, ty);
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
    this.ctx.fillStyle = 'rgba(0,0,0,0.25)';
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
  /** What is under canvas point (x, y): {kind, index, model, …} or null. */
  hitTest(x, y) {
    const m = this.model;
    if (!m || !this.view || x < this.gutter || y < RULER_H) return null;
    const cy = y - RULER_H + this.scrollY;
    const item = this.items.find((it) => cy >= it.y && cy < it.y + it.h);
    if (!item) return null;
    const scale = this.plotWidth() / (this.view[1] - this.view[0]);
    const t = this.view[0] - m.origin + (x - this.gutter) / scale;
    const tol = 3 / scale; // a few pixels, so sub-pixel slices can be picked
    if (item.kind === 'counter') {
      const c = m.counters[item.index];
      const i = lowerBound(c.ts, t, 0, c.ts.length) - 1;
      if (i < 0) return null;
      return {kind: 'counter', index: item.index, sample: i, model: m};
    }
    if (item.kind === 'proc') return this.hitInstant(m, m.instants.procBase + item.index, t, tol);
    const track = m.tracks[item.index];
    if (cy - item.y <= 6) {
      // the instants' chevrons sit on top of the track's first row
      const instant = this.hitInstant(m, m.instants.trackBase + item.index, t, tol);
      if (instant) return instant;
    }
    const depth = Math.floor((cy - item.y - 1) / ROW_H);
    if (depth >= 0 && depth < track.depthCount && cy - item.y - 1 - depth * ROW_H <= SLICE_H) {
      const s = m.slices;
      const row = track.rowBase + depth;
      const a = s.rowStart[row];
      const b = s.rowStart[row + 1];
      const i = lowerBound(s.ts, t + tol, a, b) - 1;
      // nearest of the candidates around t: the one containing t wins
      let best = -1;
      let bestDist = Infinity;
      for (let j = Math.max(a, i - 1); j <= Math.min(b - 1, i + 1); j += 1) {
        const dist = t < s.ts[j] ? s.ts[j] - t : Math.max(0, t - (s.ts[j] + s.dur[j]));
        if (dist < bestDist) [best, bestDist] = [j, dist];
      }
      if (best >= 0 && bestDist <= tol) return {kind: 'slice', index: best, model: m};
    }
    return null;
  }

  hitInstant(m, group, t, tol) {
    const inst = m.instants;
    const a = inst.start[group];
    const b = inst.start[group + 1];
    const i = lowerBound(inst.ts, t - tol, a, b);
    if (i < b && inst.ts[i] <= t + tol) return {kind: 'instant', index: i, model: m};
    return null;
  }

  /**
   * Where the first visible slice named `name` is drawn (test hook):
   * {x, y} relative to the canvas and {clientX, clientY} in the page.
   */
  locateSlice(name) {
    const m = this.model;
    if (!m || !this.view) return null;
    const id = m.names.indexOf(name);
    if (id < 0) return null;
    const s = m.slices;
    const scale = this.plotWidth() / (this.view[1] - this.view[0]);
    const rect = this.canvas.getBoundingClientRect();
    for (let i = 0; i < s.count; i += 1) {
      if (s.name[i] !== id) continue;
      const item = this.trackItem.get(s.rowTrack[s.row[i]]);
      const vs = this.view[0] - m.origin;
      const xa = Math.max(this.gutter, this.gutter + (s.ts[i] - vs) * scale);
      const xb = Math.min(this.width, this.gutter + (s.ts[i] + s.dur[i] - vs) * scale);
      const y = RULER_H + item.y - this.scrollY + s.depth[i] * ROW_H + 1 + SLICE_H / 2;
      if (xb <= xa || y < RULER_H || y > this.height) continue;
      const x = (xa + xb) / 2;
      return {x, y, clientX: rect.left + x, clientY: rect.top + y};
    }
    return null;
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
    this.drag = {x, y, lastX: x, lastY: y, moved: false, id: e.pointerId};
    this.canvas.setPointerCapture(e.pointerId);
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
        this.canvas.classList.add('tbr-dragging');
        this.setHover(null, 0, 0);
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
    this.canvas.classList.remove('tbr-dragging');
    if (this.canvas.hasPointerCapture(e.pointerId)) this.canvas.releasePointerCapture(e.pointerId);
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

  /** W/S zoom around the pointer, A/D pan: smooth while held, like Perfetto and chrome://tracing. */
  onKey(e, down) {
    const target = e.target;
    if (target && /^(INPUT|SELECT|TEXTAREA|BUTTON)$/.test(target.tagName)) return;
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const key = e.key.toLowerCase();
    if (!'wasd'.includes(key) || key.length !== 1) return;
    if (!this.view) return;
    e.preventDefault();
    if (down) this.keys.add(key);
    else this.keys.delete(key);
    if (down && !this.keyLoop) {
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
      // one immediate step, so a tap does something even between frames
      const x = this.mouse.inside ? this.mouse.x : this.gutter + this.plotWidth() / 2;
      if (key === 'w') this.zoomAt(0.9, x);
      if (key === 's') this.zoomAt(1 / 0.9, x);
      if (key === 'a') this.panPx(-this.plotWidth() * 0.05);
      if (key === 'd') this.panPx(this.plotWidth() * 0.05);
      this.keyLoop = requestAnimationFrame(step);
    }
  }
}

function trimNumber(v) {
  if (Math.abs(v) >= 1e6 || (Math.abs(v) < 1e-3 && v !== 0)) return v.toExponential(2);
  return String(Number(v.toFixed(3)));
}

/** The hover text of a hit: [[cssClass, text], …]. Exported for the details panel. */
export function describeHit(m, hit, origin) {
  const rel = (t) => formatDuration(t + m.origin - origin);
  if (hit.kind === 'slice') {
    const s = m.slices;
    const i = hit.index;
    const lines = [['tbr-tip-name', m.names[s.name[i]]]];
    lines.push(['', `start ${rel(s.ts[i])} · duration ${formatDuration(s.dur[i])}`]);
    if (s.flags[i] & FLAG_SUMMARY) {
      const info = summaryInfo(m, s.k[i]) || {count: 0, top: []};
      lines.push(['tbr-tip-summary', `${formatCount(info.count)} events folded here (summary slice)`]);
      for (const [name, count] of info.top) lines.push(['tbr-tip-top', `${formatCount(count)} × ${name}`]);
      lines.push(['tbr-tip-hint', 'zoom in to see them']);
    }
    return lines;
  }
  if (hit.kind === 'instant') {
    const inst = m.instants;
    return [['tbr-tip-name', m.names[inst.name[hit.index]]], ['', `instant at ${rel(inst.ts[hit.index])}`]];
  }
  if (hit.kind === 'counter') {
    const c = m.counters[hit.index];
    return [['tbr-tip-name', c.label], ['', `${trimNumber(c.val[hit.sample])} at ${rel(c.ts[hit.sample])}`]];
  }
  return [];
}

/** Diagonal stripes over grey: summary slices read as "many events folded here", not as one event. */
function makeHatch(ctx) {
  const tile = document.createElement('canvas');
  tile.width = tile.height = 6;
  const t = tile.getContext('2d');
  t.strokeStyle = COLORS.summaryStripe;
  t.lineWidth = 1.2;
  t.beginPath();
  t.moveTo(-1, 7);
  t.lineTo(7, -1);
  t.moveTo(-1, 1);
  t.lineTo(1, -1);
  t.moveTo(5, 7);
  t.lineTo(7, 5);
  t.stroke();
  return ctx.createPattern(tile, 'repeat');
}
