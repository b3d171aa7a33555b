// TensorBoard's scalar smoothing, exactly: `classicSmoothing` of
// webapp/widgets/line_chart_v2/data_transformer.ts, a debiased exponential moving
// average (1st-order IIR low-pass filter). The Python twin is
// tb_reduce_plugin/waveforms/smoothing.py; tests/fixtures/smoothing_cases.json
// holds the cases both must give. Pure: no DOM.

/** The slider's default, as TensorBoard's. */
export const DEFAULT_SMOOTHING = 0.6;
/** The slider's top: at 1 the average never moves off its first value. */
export const MAX_SMOOTHING = 0.999;

/**
 * Smooths `values` (numbers, in record order) with `weight` in [0, 1].
 *
 * - a non-finite weight is 0; a weight outside [0, 1] is clamped;
 * - a series whose every value equals the first (`==`, as TensorBoard) is returned
 *   unsmoothed (TensorBoard #786: float error would make a flat line wobble);
 * - a non-finite value (NaN, ±Infinity) is passed through as it is and does not
 *   count towards the debiasing;
 * - every finite value v: last = last·w + (1−w)·v, n += 1, emitted as
 *   last / (1 − wⁿ) (last itself when w is exactly 1).
 */
export function classicSmoothing(values, weight) {
  let w = Number(weight);
  if (!Number.isFinite(w)) w = 0;
  w = Math.max(0, Math.min(w, 1));
  const n = values.length;
  if (!n) return [];
  const first = values[0];
  // eslint-disable-next-line eqeqeq -- TensorBoard compares with ==
  if (values.every((v) => v == first)) return Array.from(values);
  const out = new Array(n);
  let last = 0;
  let accum = 0;
  for (let i = 0; i < n; i += 1) {
    const v = values[i];
    if (!Number.isFinite(v)) {
      out[i] = v;
      continue;
    }
    last = last * w + (1 - w) * v;
    accum += 1;
    out[i] = w === 1 ? last : last / (1 - Math.pow(w, accum));
  }
  return out;
}

/** "NaN", "Infinity", "-Infinity" (how the routes write non-finite values) and numbers → numbers. */
export function toNumber(value) {
  return typeof value === 'number' ? value : Number(value);
}
