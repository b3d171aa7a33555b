// Numbers for people: sizes, counts and times. Pure functions, no DOM.

const BYTE_UNITS = ['B', 'kB', 'MB', 'GB', 'TB'];

/** 1234567 → "1.23 MB" (SI units, like the server's messages and `ls -h --si`). */
export function formatBytes(n) {
  if (typeof n !== 'number' || !Number.isFinite(n)) return '—';
  let value = n;
  let unit = 0;
  while (Math.abs(value) >= 1000 && unit < BYTE_UNITS.length - 1) {
    value /= 1000;
    unit += 1;
  }
  if (unit === 0) return `${value} B`;
  return `${value.toFixed(Math.abs(value) < 10 ? 2 : Math.abs(value) < 100 ? 1 : 0)} ${BYTE_UNITS[unit]}`;
}

/** 1234567 → "1,234,567". */
export function formatCount(n) {
  if (typeof n !== 'number' || !Number.isFinite(n)) return '—';
  return Math.round(n).toLocaleString('en-US');
}

/** A duration in µs, in the unit that reads best: "850 ns", "12.3 µs", "4.56 ms", "2.10 s". */
export function formatDuration(us) {
  if (typeof us !== 'number' || !Number.isFinite(us)) return '—';
  const abs = Math.abs(us);
  if (abs === 0) return '0';
  if (abs < 1) return `${trim(us * 1000)} ns`;
  if (abs < 1e3) return `${trim(us)} µs`;
  if (abs < 1e6) return `${trim(us / 1e3)} ms`;
  return `${trim(us / 1e6)} s`;
}

/** Seconds (the server's timings) → the same style as formatDuration. */
export function formatSeconds(s) {
  return formatDuration(typeof s === 'number' ? s * 1e6 : NaN);
}

/** 3 significant digits at most, no trailing zeros. */
function trim(v) {
  const abs = Math.abs(v);
  const digits = abs >= 100 ? 1 : abs >= 10 ? 2 : 3;
  return String(Number(v.toFixed(digits)));
}

/**
 * An axis tick (µs since the origin) in the unit of its magnitude, with as many
 * decimals as the tick step needs: "105.55 ms" rather than "105550 µs".
 */
export function formatTick(us, stepUs) {
  const mag = Math.max(Math.abs(us), Math.abs(stepUs));
  let scale = 1;
  let unit = 'µs';
  if (mag >= 1e6) [scale, unit] = [1e6, 's'];
  else if (mag >= 1e3) [scale, unit] = [1e3, 'ms'];
  else if (mag < 1) [scale, unit] = [1e-3, 'ns'];
  const step = Math.abs(stepUs) / scale;
  const decimals = Math.max(0, Math.min(9, -Math.floor(Math.log10(step) + 1e-9)));
  return `${(us / scale).toFixed(decimals)} ${unit}`;
}

/** The smallest 1/2/5 × 10^k at or above `raw`: tick spacing for the time ruler. */
export function niceStep(raw) {
  if (!(raw > 0) || !Number.isFinite(raw)) return 1;
  const power = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) {
    if (m * power >= raw) return m * power;
  }
  return 10 * power;
}

/** "2,239 of 4,747 (47 %)". */
export function formatRatio(part, whole) {
  if (!(whole > 0)) return '';
  const pct = (100 * part) / whole;
  return `${pct < 1 ? pct.toFixed(2) : pct < 10 ? pct.toFixed(1) : pct.toFixed(0)} %`;
}

/**
 * A summary slice's name as the server writes it, "<top name> (+N more)" (writer.py: the wire
 * format Perfetto and the reference checker read), with N grouped as every count the dashboard
 * shows: "aten::add (+326,585 more)". Any other name is returned as it is.
 */
export function formatSummaryName(name) {
  const text = String(name);
  const m = /^([\s\S]*) \(\+(\d+) more\)$/.exec(text);
  return m ? `${m[1]} (+${formatCount(Number(m[2]))} more)` : text;
}
