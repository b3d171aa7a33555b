// Counters: one row per series, drawn as a step line; dense stretches become one
// min–max bar per pixel column. Owns the layout rows of kind 'counter'.
import {hashString, strokeForName} from '../color.js';
import {formatDuration} from '../format.js';
import {lowerBound} from '../model.js';
import {COLORS, COUNTER_H, THEME, defineTrack, trimNumber} from './common.js';

/** A series' line colour: darker on the light background, lighter on the dark one. */
function counterStroke(label) {
  return THEME.dark ? `hsl(${hashString(String(label)) % 360} 65% 70%)` : strokeForName(label);
}

export const counterTrack = defineTrack({
  kind: 'counter',
  row: 'counter',

  init() {
    return {colors: [], theme: -1};
  },

  prepare(tl, m) {
    const st = tl.stateOf(this);
    st.colors = m.counters.map((c) => counterStroke(c.label));
    st.theme = THEME.version;
  },

  rows(tl, m, proc) {
    const out = [];
    if (proc < 0) return out;
    for (let c = 0; c < m.counters.length; c += 1) {
      if (m.counters[c].proc === proc) out.push(c);
    }
    return out;
  },

  height() {
    return COUNTER_H;
  },

  label(tl, m, index) {
    return m.counters[index].label;
  },

  draw(tl, f, item, y) {
    if (item.kind !== 'counter') return;
    const {m, X0, scale, vs, ve} = f;
    const h = item.h;
    const c = m.counters[item.index];
    const ctx = tl.ctx;
    const n = c.ts.length;
    if (!n) return;
    const top = y + 4;
    const height = h - 8;
    const range = c.max - c.min || 1;
    const yOf = (v) => top + height - ((v - c.min) / range) * height;
    let i = Math.max(0, lowerBound(c.ts, vs, 0, n) - 1);
    const st = tl.stateOf(this);
    if (st.theme !== THEME.version) this.prepare(tl, m);
    ctx.strokeStyle = st.colors[item.index];
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
    if (i >= n) ctx.lineTo(Math.min(tl.width, X0 + (m.window[1] - m.origin - vs) * scale), lastY);
    ctx.stroke();
    ctx.fillStyle = COLORS.mutedText;
    ctx.fillText(`max ${trimNumber(c.max)}`, X0 + 4, top + 5);
  },

  /** The sample in force at t (the last one at or before it). */
  hitTest(tl, f, item, p) {
    if (item.kind !== 'counter') return null;
    const c = f.m.counters[item.index];
    const i = lowerBound(c.ts, p.t, 0, c.ts.length) - 1;
    if (i < 0) return null;
    return {kind: 'counter', index: item.index, sample: i, model: f.m};
  },

  describe(m, hit, origin) {
    const c = m.counters[hit.index];
    return [['tbr-tip-name', c.label], ['', `${trimNumber(c.val[hit.sample])} at ${formatDuration(c.ts[hit.sample] + m.origin - origin)}`]];
  },

  details(m, hit, origin) {
    const c = m.counters[hit.index];
    return {
      name: c.label,
      rows: [['time', formatDuration(c.ts[hit.sample] + m.origin - origin)], ['value', String(c.val[hit.sample])]],
      k: c.k[hit.sample],
      summary: null,
      span: null,
    };
  },
});
