// Slices: one row per thread track (nested slices, one line per depth), coloured
// by name, summary slices hatched and shaded by how busy each bucket they span is (their
// args.busy, see busy.py). Owns the layout rows of kind 'track'.
//
// Per row only the slices in the view are visited (binary search: slices never
// overlap within a (track, depth) row, so starts and ends are both sorted), and
// slices narrower than a pixel are merged per pixel column with a binary search
// to jump past the rest of the column, so a frame costs O(pixels), not O(events).
import {colorForName} from '../color.js';
import {showControls} from '../dom.js';
import {formatCount, formatDuration} from '../format.js';
import {FLAG_SUMMARY, lowerBound, summaryIndex, summaryInfo} from '../model.js';
import {COLORS, EMPTY_TRACK_H, LABEL_MIN_PX, ROW_H, RULER_H, SLICE_H, THEME, TRACK_PAD, defineTrack, fitLabel, fitText, shortForms} from './common.js';

/** y (canvas px) of a slice row's middle, or null when its track is not laid out (flows draw to it). */
export function sliceRowY(tl, track, depth) {
  const item = tl.rowItem('track', track);
  if (!item) return null;
  return RULER_H + item.y - tl.scrollY + depth * ROW_H + 1 + SLICE_H / 2;
}

export const sliceTrack = defineTrack({
  kind: 'slice',
  row: 'track',

  /** Per timeline: a colour per name, the label cache, the summary hatch (made per theme). */
  init(tl) {
    return {colors: [], labels: new Map(), hatch: makeHatch(tl.ctx), hatchTheme: THEME.version};
  },

  prepare(tl, m) {
    const st = tl.stateOf(this);
    st.colors = m.names.map(colorForName);
    st.labels.clear();
  },

  rows(tl, m, proc) {
    if (proc < 0) return [];
    const out = [];
    for (let t = m.processTracks[proc]; t < m.processTracks[proc + 1]; t += 1) out.push(t);
    return out;
  },

  height(tl, m, t) {
    const rows = m.tracks[t].depthCount;
    return rows ? rows * ROW_H + TRACK_PAD : EMPTY_TRACK_H + TRACK_PAD;
  },

  label(tl, m, t) {
    return m.tracks[t].label;
  },

  draw(tl, f, item, y) {
    if (item.kind !== 'track') return;
    const track = f.m.tracks[item.index];
    for (let d = 0; d < track.depthCount; d += 1) {
      const ry = y + d * ROW_H + 1;
      if (ry + ROW_H < RULER_H || ry > tl.height) continue;
      drawRow(tl, tl.stateOf(this), f, track.rowBase + d, ry);
    }
  },

  hitTest(tl, f, item, p) {
    if (item.kind !== 'track') return null;
    const {cy, t, tol} = p;
    const m = f.m;
    const track = m.tracks[item.index];
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
  },

  /** A hovered or selected slice: its outline. */
  highlight(tl, f, hit, color, width) {
    const m = f.m;
    if (hit.model !== m) return;
    const s = m.slices;
    const i = hit.index;
    const item = tl.rowItem('track', s.rowTrack[s.row[i]]);
    if (!item) return;
    const y = RULER_H + item.y - tl.scrollY + s.depth[i] * ROW_H + 1;
    const xa = f.X0 + (s.ts[i] - f.vs) * f.scale;
    const w = Math.max(1, s.dur[i] * f.scale);
    tl.ctx.strokeStyle = color;
    tl.ctx.lineWidth = width;
    tl.ctx.strokeRect(Math.max(xa, f.X0 - 4) - 0.5, y - 0.5, Math.min(w, tl.width + 8) + 1, SLICE_H + 1);
  },

  describe(m, hit, origin) {
    const s = m.slices;
    const i = hit.index;
    const lines = [['tbr-tip-name', m.names[s.name[i]]]];
    lines.push(['', `start ${formatDuration(s.ts[i] + m.origin - origin)} · duration ${formatDuration(s.dur[i])}`]);
    if (s.flags[i] & FLAG_SUMMARY) {
      const info = summaryInfo(m, s.k[i]) || {count: 0, top: []};
      lines.push(['tbr-tip-summary', `${formatCount(info.count)} events folded here (summary slice)`]);
      if (info.busy !== null) lines.push(['', `busy ${Math.round(info.busy * 100)}% of its span (more solid: busier)`]);
      for (const [name, count] of info.top) lines.push(['tbr-tip-top', `${formatCount(count)} × ${name}`]);
      lines.push(['tbr-tip-hint', 'zoom in to see them']);
    }
    return lines;
  },

  details(m, hit, origin) {
    const s = m.slices;
    const i = hit.index;
    const track = m.tracks[s.rowTrack[s.row[i]]];
    const summary = s.flags[i] & FLAG_SUMMARY ? summaryInfo(m, s.k[i]) || {count: 0, top: []} : null;
    return {
      name: m.names[s.name[i]],
      rows: [['start', formatDuration(s.ts[i] + m.origin - origin)], ['duration', formatDuration(s.dur[i])],
        ['track', `${m.processes[track.proc].label} › ${track.label}`]],
      k: s.k[i],
      summary,
      span: [s.ts[i] + m.origin, s.ts[i] + s.dur[i] + m.origin],
    };
  },

  /** Test hook: where the first visible slice named `name` is drawn, {x, y} on the canvas. */
  locate(tl, name) {
    const m = tl.model;
    if (!m || !tl.view) return null;
    const id = m.names.indexOf(name);
    if (id < 0) return null;
    const s = m.slices;
    const scale = tl.plotWidth() / (tl.view[1] - tl.view[0]);
    for (let i = 0; i < s.count; i += 1) {
      if (s.name[i] !== id) continue;
      const item = tl.rowItem('track', s.rowTrack[s.row[i]]);
      const vs = tl.view[0] - m.origin;
      const xa = Math.max(tl.gutter, tl.gutter + (s.ts[i] - vs) * scale);
      const xb = Math.min(tl.width, tl.gutter + (s.ts[i] + s.dur[i] - vs) * scale);
      const y = RULER_H + item.y - tl.scrollY + s.depth[i] * ROW_H + 1 + SLICE_H / 2;
      if (xb <= xa || y < RULER_H || y > tl.height) continue;
      return {x: (xa + xb) / 2, y};
    }
    return null;
  },
});

/** One (track, depth) row: slices never overlap, so starts and ends are both sorted. */
function drawRow(tl, st, f, row, y) {
  const {ctx} = tl;
  const {m, X0, scale, vs, ve, right} = f;
  const s = m.slices;
  const a = s.rowStart[row];
  const b = s.rowStart[row + 1];
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
  if (st.hatchTheme !== THEME.version) { // the theme changed: the hatch's stripes follow it
    st.hatch = makeHatch(ctx);
    st.hatchTheme = THEME.version;
  }
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
        if (!drawBusy(tl, f, i, x0, x1, y)) ctx.fillRect(x0, y, x1 - x0, SLICE_H);
        ctx.fillStyle = st.hatch;
        ctx.fillRect(x0, y, x1 - x0, SLICE_H);
        style = null;
      } else {
        const c = st.colors[s.name[i]];
        if (c !== style) ctx.fillStyle = style = c;
        ctx.fillRect(x0, y, x1 - x0, SLICE_H);
      }
      if (x1 - x0 >= LABEL_MIN_PX) {
        drawLabel(tl, st, m, i, x0, x1, y);
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
    const c = summary ? COLORS.summaryStripe : st.colors[s.name[i]];
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

// Opacity of a summary's fill for a bucket busy 0–10 % (digit 0) … 90–100 % (digit 9).
const BUSY_ALPHA_MIN = 0.18;

/**
 * Fills summary slice i over [x0, x1] bucket by bucket, opaque as the bucket is busy
 * (its args.busy digits; buckets narrower than a pixel averaged per pixel column).
 * False when the summary has no digits or the view has no bucket grid: then it is filled
 * plain, as before. The fill style is set by the caller.
 */
function drawBusy(tl, f, i, x0, x1, y) {
  const {ctx} = tl;
  const {m, X0, scale, vs} = f;
  const theta = m.tb ? m.tb.bucket_us : null;
  const r = m.tb ? m.tb.resolution : null;
  if (!(theta > 0) || !(r >= 1)) return false;
  const s = m.slices;
  const j = summaryIndex(m, s.k[i]);
  if (j < 0) return false;
  const sm = m.summaries;
  const a = sm.busyStart[j];
  const n = sm.busyStart[j + 1] - a;
  if (n < 2) return false;
  // Its first digit is the bucket of its start, as the server counts buckets (window start = origin).
  const first = Math.min(r - 1, Math.max(0, Math.floor(Math.max(s.ts[i], 0) / theta)));
  const kFrom = Math.max(0, Math.floor((vs + (x0 - X0) / scale) / theta) - first);
  const kTo = Math.min(n - 1, Math.floor((vs + (x1 - X0) / scale) / theta) - first);
  let px = -1;
  let total = 0;
  let count = 0;
  const flush = (until) => {
    if (count === 0) return;
    ctx.globalAlpha = BUSY_ALPHA_MIN + (1 - BUSY_ALPHA_MIN) * (total / count + 0.5) / 10;
    ctx.fillRect(px, y, Math.max(1, until - px), SLICE_H);
  };
  for (let k = kFrom; k <= kTo; k += 1) {
    const xa = Math.max(x0, X0 + ((first + k) * theta - vs) * scale);
    const xb = Math.min(x1, X0 + ((first + k + 1) * theta - vs) * scale);
    if (xb <= xa) continue;
    const p = Math.floor(xa);
    if (p !== px) {
      flush(p);
      px = p;
      total = 0;
      count = 0;
    }
    total += sm.busy[a + k];
    count += 1;
    if (xb - p >= 1) { // the bucket reaches past this column: draw it through, start afresh
      flush(xb);
      px = Math.floor(xb);
      total = 0;
      count = 0;
    }
  }
  flush(x1);
  ctx.globalAlpha = 1;
  return true;
}

/**
 * A slice's name (summaries: "N folded · name") in its width: when the whole name does not
 * fit, its most telling short form that does (`ProfilerStep#17` → `#17`, `aten::conv2d` →
 * `conv2d`, see common.js shortForms), else cut; labels are cached per name and width.
 */
function drawLabel(tl, st, m, i, x0, x1, y) {
  const {ctx} = tl;
  const left = Math.max(x0, tl.gutter) + 3;
  const maxChars = Math.floor((Math.min(x1, tl.width) - left - 3) / tl.charW);
  if (maxChars < 2) return;
  const summary = m.slices.flags[i] & FLAG_SUMMARY;
  const key = (summary ? (m.names.length + i) : m.slices.name[i]) * 1024 + Math.min(maxChars, 1023);
  let text = st.labels.get(key);
  if (text === undefined) {
    const name = m.names[m.slices.name[i]];
    if (summary) {
      const info = summaryInfo(m, m.slices.k[i]);
      const count = info ? formatCount(info.count) : '?';
      const forms = [name, ...shortForms(name)];
      const candidates = [...forms.map((f) => `${count} folded · ${f}`), ...forms.map((f) => `${count}× ${f}`)];
      text = candidates.find((c) => c.length <= maxChars) || fitText(candidates[candidates.length - 1], maxChars);
    } else {
      text = fitLabel(name, maxChars);
    }
    if (st.labels.size > 50000) st.labels.clear();
    st.labels.set(key, text);
  }
  ctx.fillStyle = summary ? COLORS.summaryText : COLORS.sliceText;
  ctx.fillText(showControls(text), left, y + SLICE_H / 2 + 0.5); // a name's bidi controls shown, not obeyed
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
