// Instants: chevrons over other rows (a process's band, the top of a thread
// track) and global instants as thin lines across the whole plot. No rows of
// their own.
import {formatDuration} from '../format.js';
import {lowerBound} from '../model.js';
import {COLORS, RULER_H, defineTrack} from './common.js';

/** How far below a thread track's top its chevrons are picked before its slices. */
const PICK_H = 6;

export const instantTrack = defineTrack({
  kind: 'instant',
  row: null,

  draw(tl, f, item, y) {
    const m = f.m;
    if (item.kind === 'proc') {
      drawChevrons(tl, f, m.instants.procBase + item.index, y + 3);
    } else if (item.kind === 'track') {
      drawChevrons(tl, f, m.instants.trackBase + item.index, y);
    }
  },

  /** Global instants: a thin line across every row, at most one per pixel column. */
  drawOver(tl, f) {
    const {m, X0, scale, vs, ve} = f;
    const inst = m.instants;
    const g = inst.globalGroup;
    const a = inst.start[g];
    const b = inst.start[g + 1];
    if (a === b) return;
    const ctx = tl.ctx;
    ctx.fillStyle = COLORS.globalInstant;
    let lastPx = -1;
    for (let i = lowerBound(inst.ts, vs, a, b); i < b && inst.ts[i] <= ve; i += 1) {
      const px = Math.round(X0 + (inst.ts[i] - vs) * scale);
      if (px === lastPx) continue;
      lastPx = px;
      ctx.fillRect(px, RULER_H, 1, tl.height - RULER_H);
    }
  },

  hitTest(tl, f, item, p) {
    const m = f.m;
    const {cy, t, tol} = p;
    if (item.kind === 'proc') return hitGroup(m, m.instants.procBase + item.index, t, tol);
    // the chevrons sit on top of the track's first row
    if (item.kind === 'track' && cy - item.y <= PICK_H) return hitGroup(m, m.instants.trackBase + item.index, t, tol);
    return null;
  },

  describe(m, hit, origin) {
    const inst = m.instants;
    return [['tbr-tip-name', m.names[inst.name[hit.index]]], ['', `instant at ${formatDuration(inst.ts[hit.index] + m.origin - origin)}`]];
  },

  details(m, hit, origin) {
    const inst = m.instants;
    return {
      name: m.names[inst.name[hit.index]],
      rows: [['time', formatDuration(inst.ts[hit.index] + m.origin - origin)]],
      k: inst.k[hit.index],
      summary: null,
      span: null,
    };
  },
});

/** A group's instant marks: a small chevron each, at most one per 2 px. */
function drawChevrons(tl, f, group, y) {
  const {m, X0, scale, vs, ve} = f;
  const inst = m.instants;
  const a = inst.start[group];
  const b = inst.start[group + 1];
  if (a === b) return;
  const ctx = tl.ctx;
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

function hitGroup(m, group, t, tol) {
  const inst = m.instants;
  const a = inst.start[group];
  const b = inst.start[group + 1];
  const i = lowerBound(inst.ts, t - tol, a, b);
  if (i < b && inst.ts[i] <= t + tol) return {kind: 'instant', index: i, model: m};
  return null;
}
