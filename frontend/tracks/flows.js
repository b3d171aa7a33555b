// Flows: arrows between the slices of one flow, over every row, drawn when the
// Flows box is ticked. No rows of their own; not picked (a click goes to the
// slice under the arrow).
import {COLORS, RULER_H, defineTrack} from './common.js';
import {sliceRowY} from './slices.js';

export const flowTrack = defineTrack({
  kind: 'flow',
  row: null,

  init() {
    return {lastX: null};
  },

  /**
   * Flow arrows, thinned where dense: per (from track, to track), an arrow
   * starting within 8 px of the last one drawn is skipped (zoom in to see each).
   */
  drawOver(tl, f) {
    if (!tl.showFlows) return;
    const {m, X0, scale, vs, ve, right} = f;
    const a = m.arrows;
    if (!a.count) return;
    const ctx = tl.ctx;
    const st = tl.stateOf(this);
    if (!st.lastX || st.lastX.length < a.pairs) st.lastX = new Float64Array(a.pairs);
    const lastX = st.lastX;
    lastX.fill(-Infinity);
    ctx.strokeStyle = COLORS.flow;
    ctx.fillStyle = COLORS.flow;
    ctx.lineWidth = 1;
    // arrows are sorted by start: skip those that start after the view, and (cheaply) most that end before it
    for (let i = 0; i < a.count && a.fromTs[i] <= ve; i += 1) {
      const xa = X0 + (a.fromTs[i] - vs) * scale;
      const xb = X0 + (a.toTs[i] - vs) * scale;
      if ((xa < X0 && xb < X0) || (xa > right && xb > right)) continue;
      const p = a.pair[i];
      if (xa - lastX[p] < 8) continue;
      const ya = sliceRowY(tl, a.fromTrack[i], a.fromDepth[i]);
      const yb = sliceRowY(tl, a.toTrack[i], a.toDepth[i]);
      if (ya === null || yb === null) continue;
      if ((ya < RULER_H && yb < RULER_H) || (ya > tl.height && yb > tl.height)) continue;
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
  },

  hitTest: () => null, // not picked: a click goes to the slice under the arrow
});
