// What a (step, value) series looks like on screen, as numbers: which records join
// into lines, which stand alone as dots, where NaN/Inf leave gaps, where the step
// goes back, and which points survive per pixel column. Pure (no DOM, no canvas):
// the waveform panel paints what these functions return, and the browser tests
// check them directly.

/**
 * Counts and segments of one series, in record order.
 *
 * - `xs` steps, `ys` values (numbers; NaN/±Infinity allowed), same length;
 * - a reversal is a record whose step is not above the one before it (repeated or
 *   decreasing): drawn in record order the line goes back there;
 * - a segment is a run of consecutive finite values, [i0, i1) — a non-finite value
 *   ends it (a visible gap) and, with `split`, so does each reversal (each restart
 *   is its own line). A segment of one record is a lone dot.
 */
export function analyzeSeries(xs, ys, {split = false} = {}) {
  const n = Math.min(xs.length, ys.length);
  let nan = 0;
  let posInf = 0;
  let negInf = 0;
  const reversals = [];
  const segments = [];
  let start = -1;
  for (let i = 0; i < n; i += 1) {
    const reversal = i > 0 && !(xs[i] > xs[i - 1]);
    if (reversal) reversals.push(i);
    const y = ys[i];
    if (Number.isFinite(y)) {
      if (start >= 0 && reversal && split) {
        segments.push([start, i]);
        start = -1;
      }
      if (start < 0) start = i;
      continue;
    }
    if (Number.isNaN(y)) nan += 1;
    else if (y > 0) posInf += 1;
    else negInf += 1;
    if (start >= 0) segments.push([start, i]);
    start = -1;
  }
  if (start >= 0) segments.push([start, n]);
  const lines = segments.filter(([a, b]) => b - a > 1).length;
  return {n, finite: n - nan - posInf - negInf, nan, posInf, negInf, reversals, segments, lines,
    dots: segments.length - lines};
}

/**
 * The indices of records [i0, i1) to draw so that no spike vanishes: consecutive
 * records falling in the same pixel column (floor of `px`) are replaced by their
 * first, lowest, highest and last (in record order) — the column's vertical extent
 * and its joins to the neighbours are exactly those of the full polyline.
 * `py` is what is compared (pixel y or the value: either order works).
 */
export function pixelDecimate(px, py, i0, i1) {
  const keep = [];
  let i = i0;
  while (i < i1) {
    const col = Math.floor(px[i]);
    let lo = i;
    let hi = i;
    let j = i + 1;
    while (j < i1 && Math.floor(px[j]) === col) {
      if (py[j] < py[lo]) lo = j;
      if (py[j] > py[hi]) hi = j;
      j += 1;
    }
    const last = j - 1;
    keep.push(i);
    const a = Math.min(lo, hi);
    const b = Math.max(lo, hi);
    if (a !== i && a !== last) keep.push(a);
    if (b !== a && b !== i && b !== last) keep.push(b);
    if (last !== i) keep.push(last);
    i = j;
  }
  return keep;
}

/**
 * The geometry of one series in pixels: `lines` (flat [x0, y0, x1, y1, …] arrays,
 * one per segment of two or more records, decimated per pixel column), `dots`
 * ([x, y] of lone records), `vertices` (how many points the lines hold) and `gaps`
 * ({index, x, kind: 'NaN' | '+Inf' | '-Inf'}, one per non-finite record).
 * `toX`/`toY` map a step/value to pixels.
 */
export function planSeries(xs, ys, segments, toX, toY) {
  const n = segments.length ? segments[segments.length - 1][1] : 0;
  const px = new Float64Array(n);
  const py = new Float64Array(n);
  const lines = [];
  const dots = [];
  let vertices = 0;
  for (const [a, b] of segments) {
    for (let i = a; i < b; i += 1) {
      px[i] = toX(xs[i]);
      py[i] = toY(ys[i]);
    }
    if (b - a === 1) {
      dots.push([px[a], py[a]]);
      continue;
    }
    const keep = pixelDecimate(px, py, a, b);
    const flat = new Float64Array(keep.length * 2);
    keep.forEach((k, j) => {
      flat[2 * j] = px[k];
      flat[2 * j + 1] = py[k];
    });
    vertices += keep.length;
    lines.push(flat);
  }
  const gaps = [];
  for (let i = 0; i < Math.min(xs.length, ys.length); i += 1) {
    const y = ys[i];
    if (Number.isFinite(y)) continue;
    gaps.push({index: i, x: toX(xs[i]), kind: Number.isNaN(y) ? 'NaN' : y > 0 ? '+Inf' : '-Inf'});
  }
  return {lines, dots, vertices, gaps};
}

/** [min, max] of the finite numbers of several arrays, or null if there are none. */
export function finiteRange(arrays) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const arr of arrays) {
    for (let i = 0; i < arr.length; i += 1) {
      const v = arr[i];
      if (!Number.isFinite(v)) continue;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  return lo <= hi ? [lo, hi] : null;
}

/** A range with room: a single value gets ±1 (or ±10 % of itself), a span gets `pad` of itself each side. */
export function padRange(range, pad = 0.05) {
  if (!range) return [0, 1];
  const [lo, hi] = range;
  if (hi > lo) {
    const d = (hi - lo) * pad;
    return [lo - d, hi + d];
  }
  const d = lo === 0 ? 1 : Math.abs(lo) * 0.1;
  return [lo - d, hi + d];
}

/**
 * Round tick values (1/2/5 × 10^k apart, at least `minStep`) covering [lo, hi],
 * about `count` of them; each is k × step, computed afresh (no drift).
 */
export function niceTicks(lo, hi, count = 5, minStep = 0) {
  if (!(hi > lo) || !Number.isFinite(hi - lo)) return [lo];
  const raw = Math.max((hi - lo) / Math.max(1, count), minStep);
  const power = 10 ** Math.floor(Math.log10(raw));
  let step = 10 * power;
  for (const m of [1, 2, 5, 10]) {
    if (m * power >= raw * (1 - 1e-12)) {
      step = m * power;
      break;
    }
  }
  const ticks = [];
  const first = Math.ceil(lo / step - 1e-9);
  const last = Math.floor(hi / step + 1e-9);
  for (let k = first; k <= last && ticks.length <= 100; k += 1) {
    ticks.push(k === 0 ? 0 : Number((k * step).toPrecision(12)));
  }
  return ticks;
}

/** A value for an axis or a tooltip: 4 significant digits, k/M/G/T above 10,000, exponents below 1e-4. */
export function formatValue(v) {
  if (typeof v !== 'number') return String(v);
  if (Number.isNaN(v)) return 'NaN';
  if (!Number.isFinite(v)) return v > 0 ? '+Inf' : '-Inf';
  const abs = Math.abs(v);
  if (abs === 0) return '0';
  if (abs >= 1e4) {
    for (const [s, u] of [[1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']]) {
      if (abs >= s) return `${Number((v / s).toPrecision(4))}${u}`;
    }
  }
  if (abs < 1e-4) return v.toExponential(2);
  return String(Number(v.toPrecision(4)));
}

/** A distinct colour for the i-th series shown: ten well-separated hues, then golden-angle steps. */
export const SERIES_COLORS = ['#1a73e8', '#e8710a', '#188038', '#d01884', '#9334e6',
  '#12b5cb', '#b06000', '#5f6368', '#c5221f', '#7cb342'];

export function seriesColor(i) {
  if (i < SERIES_COLORS.length) return SERIES_COLORS[i];
  return `hsl(${Math.round((i * 137.508) % 360)} 70% 40%)`;
}

/**
 * The anomalies the live sidecar kept about `run` (run list entries with an `anomaly`
 * report, SPEC §live): those whose `anomaly.window` is the run's window name (the part
 * after `live/`), and the run's own report when it is an anomaly run itself. Each is
 * {run (the anomaly run), step, trigger, kind, value, threshold, unit, reason}, by step.
 */
export function anomaliesOf(runs, run) {
  if (typeof run !== 'string') return [];
  const name = run.startsWith('live/') ? run.slice(5) : run;
  const out = [];
  for (const r of Array.isArray(runs) ? runs : []) {
    const a = r && r.anomaly;
    if (!a || typeof a !== 'object') continue;
    const step = Number(a.step);
    if (!Number.isFinite(step)) continue;
    if (a.window !== name && r.run !== run) continue;
    out.push({run: r.run, step, trigger: String(a.trigger || a.kind || 'anomaly'), kind: String(a.kind || ''),
      value: Number(a.value), threshold: Number(a.threshold), unit: String(a.unit || ''), reason: String(a.reason || '')});
  }
  return out.sort((p, q) => p.step - q.step || (p.run < q.run ? -1 : 1));
}

/** The legend's line for a run's anomalies: "1 anomaly: step:2x at step 5" ('' when none). */
export function anomalySummary(marks) {
  if (!marks || !marks.length) return '';
  const what = marks.map((m) => `${m.trigger} at step ${m.step}`).join(', ');
  return `${marks.length} ${marks.length === 1 ? 'anomaly' : 'anomalies'}: ${what}`;
}

/**
 * The median and the MAD (median of |v − median|) of the finite values, or null when none is.
 * The robust centre and spread the "stands out" rules measure against (docs/SEMANTICS.md,
 * Waveforms): one huge stall moves neither, as it would a mean and a standard deviation.
 */
export function robustSpread(values) {
  const v = Array.from(values).filter(Number.isFinite).sort((a, b) => a - b);
  if (!v.length) return null;
  const mid = (arr) => (arr.length % 2 ? arr[arr.length >> 1] : (arr[arr.length / 2 - 1] + arr[arr.length / 2]) / 2);
  const median = mid(v);
  const dev = v.map((x) => Math.abs(x - median)).sort((a, b) => a - b);
  return {median, mad: mid(dev)};
}

/** Indices of the finite values above `bound(median, mad)`, the largest first (ties: the earlier), at most `k`. */
export function standOut(values, bound, k = 3) {
  const s = robustSpread(values);
  if (!s) return [];
  const limit = bound(s.median, s.mad);
  const over = [];
  for (let i = 0; i < values.length; i += 1) if (Number.isFinite(values[i]) && values[i] > limit) over.push(i);
  over.sort((a, b) => values[b] - values[a] || a - b);
  return over.slice(0, k);
}

/**
 * The steps that stand out as slow (the server's `slowest` rule, for steps the dashboard
 * found itself): a time above median + max(3·MAD, 5 % of the median), slowest first, at
 * most `k`. A steady run has none; a three-step window at most one.
 */
export function slowSteps(times, k = 3) {
  return standOut(times, (median, mad) => median + Math.max(3 * mad, 0.05 * median), k);
}
