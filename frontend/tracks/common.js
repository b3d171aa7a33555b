// What the timeline's core and its track kinds share: geometry, colours, fonts
// and two small text helpers. No state, no DOM.

export const RULER_H = 26;
export const PROC_H = 20;
export const ROW_H = 18;
export const SLICE_H = 16;
export const TRACK_PAD = 4;
export const EMPTY_TRACK_H = 10;
export const COUNTER_H = 40;
export const WAVEFORM_H = 56;
export const LABEL_MIN_PX = 22;
export const FONT = '11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
export const BOLD_FONT = `bold ${FONT}`;
export const COLORS = {
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
  wave: '#3451b2',
  waveBand: '#fafbfd',
  waveMarked: '#d93025',
  waveGap: '#e37400',
};

/** A number for a tooltip: 3 decimals at most, exponent notation when very large or small. */
export function trimNumber(v) {
  if (Math.abs(v) >= 1e6 || (Math.abs(v) < 1e-3 && v !== 0)) return v.toExponential(2);
  return String(Number(v.toFixed(3)));
}

/** `text` cut to `maxChars` characters, an ellipsis marking the cut. */
export function fitText(text, maxChars) {
  return text.length > maxChars ? `${text.slice(0, Math.max(1, maxChars - 1))}…` : text;
}

/**
 * A track kind, with every part of the interface (see tracks/index.js) that `spec`
 * leaves out filled in as "nothing here": no rows, no marks, no hits.
 */
export function defineTrack(spec) {
  return {
    row: null,
    init: () => ({}),
    prepare() {},
    setData() {},
    rows: () => [],
    height: () => 0,
    label: () => '',
    note: () => '',
    draw() {},
    drawOver() {},
    hitTest: () => null,
    highlight() {},
    describe: () => [],
    details: () => null,
    locate: () => null,
    ...spec,
  };
}
