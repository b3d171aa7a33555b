// The waveform: one per-step series (step time, say) in a row above the processes,
// each step a dot at the middle of its time span, consecutive steps joined by a line.
//
// Set through `timeline.setWaveform(wave)` (see timeline.js), where `wave` is null
// (no row) or
//   {name: string, label: string,
//    points: [{t0: µs, t1: µs, value: number, step: int}, …],   // absolute µs, as the view
//    marked: Set<int> | Array<int>}                                // indices into points: the slowest steps
//
// - y: the value between the min and max of the finite values (a flat series: the middle);
// - a NaN/±Infinity value (or null) is a gap in the line with a small mark at the baseline;
// - a point whose t0/t1 is not a finite number has no place in time and is left out;
// - segments join consecutive points in the given order;
// - marked steps get a red ring;
// - more points than pixels: per pixel column one vertical stroke through the first,
//   min, max and last values (M4), so a one-step spike always reaches its height;
// - a click yields {kind: 'waveform', index, point, step, value, t0, t1, marked}
//   (`point` is the caller's own object), passed to the timeline's onSelect.
import {formatDuration} from '../format.js';
import {lowerBound} from '../model.js';
import {COLORS, RULER_H, WAVEFORM_H, defineTrack, trimNumber} from './common.js';

const PAD = 8; // above the max and below the min, px: room for the rings
const DOT_R = 3;
const RING_R = 5;
const PICK_PX = 6;
const CLIP_PX = 16; // segments are cut this far outside the plot, so no coordinate is huge

export const waveformTrack = defineTrack({
  kind: 'waveform',
  row: 'waveform',

  init() {
    return {wave: null};
  },

  setData(tl, wave) {
    tl.stateOf(this).wave = prepareWave(wave);
  },

  rows(tl, m, proc) {
    return proc < 0 && tl.stateOf(this).wave ? [0] : [];
  },

  height() {
    return WAVEFORM_H;
  },

  label(tl) {
    const w = tl.stateOf(this).wave;
    return w ? w.label : '';
  },

  /** The range the row spans, bottom to top (the baseline is the min, not zero). */
  note(tl) {
    const w = tl.stateOf(this).wave;
    if (!w || !w.n) return w ? 'no steps' : '';
    if (!w.finite) return 'no finite values';
    return w.max > w.min ? `${trimNumber(w.min)} – ${trimNumber(w.max)}` : `all ${trimNumber(w.min)}`;
  },

  draw(tl, f, item, y) {
    if (item.kind !== 'waveform') return;
    const w = tl.stateOf(this).wave;
    if (!w) return;
    const ctx = tl.ctx;
    const {X0, scale, right} = f;
    ctx.fillStyle = COLORS.waveBand;
    ctx.fillRect(X0, y, right - X0, item.h - 1);
    if (!w.n) return;
    const g = geometry(w, y, item.h);
    const vs = f.view0 - w.origin;
    const [lo, hi] = visibleRange(w, vs, vs + (right - X0) / scale);
    const xOf = (i) => X0 + (w.c[i] - vs) * scale;
    const dense = hi - lo > (right - X0) / 4;

    const lone = drawLine(ctx, w, lo, hi, xOf, g.yOf, X0 - CLIP_PX, right + CLIP_PX);

    // dots: every point while they are apart, else only those no segment shows
    ctx.fillStyle = COLORS.wave;
    ctx.beginPath();
    const dot = (x, yy) => {
      ctx.moveTo(x + DOT_R, yy);
      ctx.arc(x, yy, DOT_R, 0, 2 * Math.PI);
    };
    if (dense) {
      for (let j = 0; j < lone.length; j += 2) dot(lone[j], lone[j + 1]);
    } else {
      for (let i = lo; i < hi; i += 1) {
        const x = xOf(i);
        if (Number.isFinite(w.val[i]) && x > X0 - 4 && x < right + 4) dot(x, g.yOf(w.val[i]));
      }
    }
    ctx.fill();

    // gaps: a small mark at the baseline, at most one per 2 px
    ctx.fillStyle = COLORS.waveGap;
    ctx.beginPath();
    let lastGap = -10;
    for (let i = lo; i < hi; i += 1) {
      if (Number.isFinite(w.val[i]) || w.c[i] !== w.c[i]) continue;
      const x = xOf(i);
      if (x < X0 - 4 || x > right + 4 || Math.abs(x - lastGap) < 2) continue;
      lastGap = x;
      ctx.moveTo(x - 3.5, g.base + 4);
      ctx.lineTo(x + 3.5, g.base + 4);
      ctx.lineTo(x, g.base - 2);
      ctx.closePath();
    }
    ctx.fill();

    // the slowest steps
    ctx.strokeStyle = COLORS.waveMarked;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    for (const i of w.markedList) {
      if (w.c[i] !== w.c[i]) continue;
      const x = xOf(i);
      if (x < X0 - 8 || x > right + 8) continue;
      const yy = g.pointY(i);
      ctx.moveTo(x + RING_R, yy);
      ctx.arc(x, yy, RING_R, 0, 2 * Math.PI);
    }
    ctx.stroke();

  },

  hitTest(tl, f, item, p) {
    if (item.kind !== 'waveform') return null;
    const w = tl.stateOf(this).wave;
    if (!w || !w.n) return null;
    const g = geometry(w, RULER_H + item.y - tl.scrollY, item.h);
    const scale = f.scale;
    const tw = f.view0 - w.origin + (p.x - f.X0) / scale; // µs since the wave's origin
    const reach = PICK_PX / scale;
    // the nearest point (in px, both ways) within a few pixels of the pointer
    let best = -1;
    let bestD = Infinity;
    const consider = (i) => {
      if (w.c[i] !== w.c[i]) return;
      const dx = (w.c[i] - tw) * scale;
      if (Math.abs(dx) > PICK_PX) return;
      const dy = g.pointY(i) - p.y;
      const d = dx * dx + dy * dy;
      if (d < bestD) [best, bestD] = [i, d];
    };
    if (w.sorted) {
      const end = Math.min(w.n, lowerBound(w.c, tw - reach, 0, w.n) + 4096);
      for (let i = lowerBound(w.c, tw - reach, 0, w.n); i < end && w.c[i] <= tw + reach; i += 1) consider(i);
    } else {
      for (let i = 0; i < w.n; i += 1) consider(i);
    }
    if (best < 0) {
      // else the step whose span holds the pointer's time
      const inside = (i) => w.t0[i] <= tw && tw <= w.t1[i];
      if (w.sorted) {
        const i = lowerBound(w.c, tw, 0, w.n);
        if (i < w.n && inside(i)) best = i;
        else if (i > 0 && inside(i - 1)) best = i - 1;
      } else {
        for (let i = 0; i < w.n && best < 0; i += 1) if (inside(i)) best = i;
      }
    }
    return best < 0 ? null : makeHit(w, best);
  },

  /** A hovered or selected step: a ring round its point and a bar under its time span. */
  highlight(tl, f, hit, color, width) {
    const w = tl.stateOf(this).wave;
    if (!w || hit.wave !== w) return;
    const item = tl.rowItem('waveform', 0);
    if (!item) return;
    const y = RULER_H + item.y - tl.scrollY;
    const g = geometry(w, y, item.h);
    const vs = f.view0 - w.origin;
    const i = hit.index;
    const clip = (x) => Math.min(Math.max(x, f.X0 - 4), f.right + 4);
    const x = clip(f.X0 + (w.c[i] - vs) * f.scale);
    const xa = clip(f.X0 + (w.t0[i] - vs) * f.scale);
    const xb = clip(f.X0 + (w.t1[i] - vs) * f.scale);
    const ctx = tl.ctx;
    ctx.fillStyle = color;
    ctx.fillRect(xa, y + item.h - 3, Math.max(1, xb - xa), 2);
    ctx.strokeStyle = color;
    ctx.lineWidth = width;
    ctx.beginPath();
    ctx.arc(x, g.pointY(i), RING_R + 1.5, 0, 2 * Math.PI);
    ctx.stroke();
  },

  describe(m, hit, origin) {
    const d = hit.wave;
    const i = hit.index;
    const lines = [['tbr-tip-name', `step ${stepText(d, i)}`], ['', `${d.label}: ${valueText(d.val[i])}`],
      ['', `start ${formatDuration(d.t0[i] + d.origin - origin)} · duration ${formatDuration(d.t1[i] - d.t0[i])}`]];
    if (!Number.isFinite(d.val[i])) lines.push(['tbr-tip-hint', 'no value here: a gap in the series']);
    if (d.marked[i]) lines.push(['tbr-tip-summary', 'one of the slowest steps']);
    return lines;
  },

  details(m, hit, origin) {
    const d = hit.wave;
    const i = hit.index;
    const rows = [['series', d.label], ['value', valueText(d.val[i])], ['start', formatDuration(d.t0[i] + d.origin - origin)],
      ['duration', formatDuration(d.t1[i] - d.t0[i])]];
    if (d.marked[i]) rows.push(['note', 'one of the slowest steps']);
    return {name: `step ${stepText(d, i)}`, rows, k: null, summary: null, span: [hit.t0, hit.t1]};
  },

  /** Test hook: where point `index` is drawn, {x, y} on the canvas, or null. */
  locate(tl, index) {
    const w = tl.stateOf(this).wave;
    const item = tl.rowItem('waveform', 0);
    if (!w || !item || !tl.view || !(index >= 0 && index < w.n) || w.c[index] !== w.c[index]) return null;
    const scale = tl.plotWidth() / (tl.view[1] - tl.view[0]);
    const y = RULER_H + item.y - tl.scrollY;
    const g = geometry(w, y, item.h);
    return {x: tl.gutter + (w.c[index] - (tl.view[0] - w.origin)) * scale, y: g.pointY(index), top: g.top, base: g.base,
      rowTop: y, rowBottom: y + item.h};
  },
});

/** The caller's wave as typed arrays, times relative to its first point (µs), or null. */
function prepareWave(wave) {
  if (!wave || typeof wave !== 'object' || !Array.isArray(wave.points)) return null;
  const points = wave.points;
  const n = points.length;
  let origin = 0;
  for (const p of points) {
    const t = p && Number(p.t0);
    if (Number.isFinite(t)) {
      origin = t;
      break;
    }
  }
  const c = new Float64Array(n);
  const t0 = new Float64Array(n);
  const t1 = new Float64Array(n);
  const val = new Float64Array(n);
  let sorted = true;
  let min = Infinity;
  let max = -Infinity;
  for (let i = 0; i < n; i += 1) {
    const p = points[i] || {};
    const a = Number(p.t0);
    const b = Number(p.t1);
    if (Number.isFinite(a) && Number.isFinite(b)) {
      t0[i] = a - origin;
      t1[i] = b - origin;
      c[i] = (t0[i] + t1[i]) / 2;
    } else {
      t0[i] = t1[i] = c[i] = NaN;
    }
    if (!(c[i] >= (i ? c[i - 1] : -Infinity))) sorted = false; // NaN times: no binary search
    const v = typeof p.value === 'number' ? p.value : p.value === null || p.value === undefined ? NaN : Number(p.value);
    val[i] = v;
    if (Number.isFinite(v)) {
      if (v < min) min = v;
      if (v > max) max = v;
    }
  }
  const marked = new Uint8Array(n);
  const given = wave.marked instanceof Set ? [...wave.marked] : Array.isArray(wave.marked) ? wave.marked : [];
  for (const i of given) if (Number.isInteger(i) && i >= 0 && i < n) marked[i] = 1;
  const markedList = [];
  for (let i = 0; i < n; i += 1) if (marked[i]) markedList.push(i);
  const name = typeof wave.name === 'string' ? wave.name : '';
  return {
    source: wave, points, n, origin, c, t0, t1, val, sorted, marked, markedList, name,
    label: typeof wave.label === 'string' && wave.label ? wave.label : name || 'waveform',
    finite: min <= max, min, max,
  };
}

/** Where values go in a row at canvas y: yOf(value); pointY(i) puts gaps on the baseline. */
function geometry(w, y, h) {
  const top = y + PAD;
  const height = h - 2 * PAD;
  const base = top + height;
  const range = w.max - w.min;
  const yOf = range > 0 ? (v) => base - ((v - w.min) / range) * height : () => top + height / 2;
  const pointY = (i) => (Number.isFinite(w.val[i]) ? yOf(w.val[i]) : base);
  return {top, base, yOf, pointY};
}

/** [lo, hi): the points in [vs, ve] (relative µs) plus one on each side, so lines leave the edges. */
function visibleRange(w, vs, ve) {
  if (!w.sorted) return [0, w.n];
  return [Math.max(0, lowerBound(w.c, vs, 0, w.n) - 1), Math.min(w.n, lowerBound(w.c, ve, 0, w.n) + 1)];
}

/**
 * The series' line, one path: consecutive finite points joined, a gap where a value
 * is not finite. Points in one pixel column fold into one vertical stroke through
 * their first, min, max and last y; segments are cut at [left, right]. Returns the
 * points no segment reaches ([x, y, x, y, …]) so they can get a dot.
 */
function drawLine(ctx, w, lo, hi, xOf, yOf, left, right) {
  const lone = [];
  let runN = 0; // points in the current pixel column
  let col = 0;
  let fx = 0;
  let first = 0;
  let last = 0;
  let mn = 0;
  let mx = 0;
  let pen = false; // the path goes on from the last vertex
  let segs = 0; // visible strokes since the last moveTo
  let sx = 0;
  let sy = 0;
  const flush = () => {
    if (!runN) return;
    const x = runN === 1 ? fx : col + 0.5;
    if (pen) {
      ctx.lineTo(x, first);
      segs += 1;
    } else {
      ctx.moveTo(x, first);
      [pen, segs, sx, sy] = [true, 0, x, first];
    }
    if (runN > 1) {
      if (mx > mn) {
        ctx.lineTo(x, mn);
        ctx.lineTo(x, mx);
        segs += 1;
      }
      ctx.lineTo(x, last);
    }
    runN = 0;
  };
  const lift = () => {
    flush();
    if (pen && segs === 0) lone.push(sx, sy);
    pen = false;
  };
  const add = (x, y) => {
    const px = Math.floor(x);
    if (runN && px === col) {
      if (y < mn) mn = y;
      if (y > mx) mx = y;
      last = y;
      runN += 1;
      return;
    }
    flush();
    [col, runN, fx, first, last, mn, mx] = [px, 1, x, y, y, y, y];
  };
  const at = (xa, ya, xb, yb, x) => ya + ((yb - ya) * (x - xa)) / (xb - xa);

  ctx.strokeStyle = COLORS.wave;
  ctx.lineWidth = 1.25;
  ctx.beginPath();
  let prev = false; // a finite point before this one, with no gap between
  let px = 0;
  let py = 0;
  for (let i = lo; i < hi; i += 1) {
    if (w.c[i] !== w.c[i]) continue; // no place in time
    const v = w.val[i];
    if (!Number.isFinite(v)) {
      lift();
      prev = false;
      continue;
    }
    const x = xOf(i);
    const y = yOf(v);
    const inside = x >= left && x <= right;
    if (!prev) {
      lift();
      if (inside) add(x, y);
    } else if ((px < left && x < left) || (px > right && x > right)) {
      lift(); // the segment is wholly off to one side
    } else {
      const prevInside = px >= left && px <= right;
      if (!prevInside) {
        const edge = px < left ? left : right; // coming in
        lift();
        add(edge, at(px, py, x, y, edge));
      }
      if (inside) {
        add(x, y);
      } else {
        const edge = x > right ? right : left; // going out
        add(edge, at(px, py, x, y, edge));
        lift();
      }
    }
    [prev, px, py] = [true, x, y];
  }
  lift();
  ctx.stroke();
  return lone;
}

function makeHit(w, i) {
  return {kind: 'waveform', index: i, point: w.points[i], step: w.points[i] && w.points[i].step, value: w.val[i],
    t0: w.t0[i] + w.origin, t1: w.t1[i] + w.origin, marked: !!w.marked[i], wave: w};
}

function stepText(w, i) {
  const s = w.points[i] && w.points[i].step;
  return typeof s === 'number' && Number.isFinite(s) ? String(s) : `#${i}`;
}

function valueText(v) {
  return Number.isFinite(v) ? trimNumber(v) : String(v);
}
