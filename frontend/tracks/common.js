// What the timeline's core, its track kinds and the panels share: geometry, the
// canvas palettes (light and dark), fonts and small text helpers. No DOM.

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
/**
 * The canvas palettes. Slices keep their pastel fill by name in both themes, so the
 * text drawn on them (`sliceText`, `summaryText`) stays dark on light fills; what
 * surrounds them (background, gutter, ruler, grid, text) follows the theme.
 */
export const LIGHT_COLORS = Object.freeze({
  bg: '#ffffff',
  gutter: '#f7f7f8',
  gutterLine: '#d9d9de',
  procBand: '#eceef2',
  text: '#1b1b1f',
  mutedText: '#5f6368',
  sliceText: '#1b1b1f',
  summaryText: '#303036',
  grid: 'rgba(0,0,0,0.06)',
  summary: '#d5d5d8',
  summaryStripe: '#9b9ba3',
  notLoaded: 'rgba(120,120,130,0.10)',
  instant: 'rgba(38,50,56,0.8)',
  globalInstant: 'rgba(198,40,40,0.55)',
  flow: 'rgba(40,40,70,0.5)',
  hover: '#000000',
  selected: '#1a73e8',
  scrollbar: 'rgba(0,0,0,0.25)',
  wave: '#3451b2',
  waveBand: '#fafbfd',
  waveMarked: '#d93025',
  waveGap: '#e37400',
  plotBg: '#ffffff',
  plotGrid: 'rgba(0,0,0,0.07)',
  plotBorder: '#d9d9de',
  plotHoverLine: 'rgba(0,0,0,0.35)',
  slowest: '#c5221f',
  bar: '#7b93d6',
  barDim: 'rgba(123,147,214,0.35)',
  median: 'rgba(27,27,31,0.45)',
  window: 'rgba(26,115,232,0.10)',
  windowEdge: '#1a73e8',
});

export const DARK_COLORS = Object.freeze({
  bg: '#1e1f22',
  gutter: '#26272b',
  gutterLine: '#3c3e44',
  procBand: '#2e3035',
  text: '#e3e3e6',
  mutedText: '#a0a4ab',
  sliceText: '#1b1b1f',
  summaryText: '#ececef',
  grid: 'rgba(255,255,255,0.07)',
  summary: '#4a4c53',
  summaryStripe: '#72747d',
  notLoaded: 'rgba(0,0,0,0.28)',
  instant: 'rgba(226,232,240,0.85)',
  globalInstant: 'rgba(242,139,130,0.6)',
  flow: 'rgba(200,205,240,0.55)',
  hover: '#ffffff',
  selected: '#8ab4f8',
  scrollbar: 'rgba(255,255,255,0.3)',
  wave: '#8ab4f8',
  waveBand: '#24262a',
  waveMarked: '#f28b82',
  waveGap: '#fcad70',
  plotBg: '#1e1f22',
  plotGrid: 'rgba(255,255,255,0.08)',
  plotBorder: '#3c3e44',
  plotHoverLine: 'rgba(255,255,255,0.4)',
  slowest: '#f28b82',
  bar: '#7c9be0',
  barDim: 'rgba(124,155,224,0.32)',
  median: 'rgba(227,227,230,0.5)',
  window: 'rgba(138,180,248,0.14)',
  windowEdge: '#8ab4f8',
});

/**
 * The colours every canvas draws with (timeline, tracks, panels): the current theme's
 * palette, switched in place by `setCanvasTheme`, so code reads `COLORS.x` at draw time
 * and a redraw after a switch is all a canvas needs.
 */
export const COLORS = {...LIGHT_COLORS};

/** The canvas theme in force: {name: 'light' | 'dark', dark: boolean, version: switches so far}. */
export const THEME = {name: 'light', dark: false, version: 0};

/** Switches the canvas palette ('light' or 'dark'); the caller redraws. */
export function setCanvasTheme(name) {
  const dark = name === 'dark';
  if (THEME.dark === dark && THEME.version) return;
  Object.assign(COLORS, dark ? DARK_COLORS : LIGHT_COLORS);
  THEME.name = dark ? 'dark' : 'light';
  THEME.dark = dark;
  THEME.version += 1;
}

/** A number for a tooltip: 3 decimals at most, exponent notation when very large or small. */
export function trimNumber(v) {
  if (Math.abs(v) >= 1e6 || (Math.abs(v) < 1e-3 && v !== 0)) return v.toExponential(2);
  return String(Number(v.toFixed(3)));
}

/** `text` cut to `maxChars` characters, an ellipsis marking the cut. */
export function fitText(text, maxChars) {
  return text.length > maxChars ? `${text.slice(0, Math.max(1, maxChars - 1))}…` : text;
}

// Wrappers whose argument is the telling part: `PjitFunction(train_step)` → `train_step`.
const WRAPPERS = /^(?:pjit|jit|pmap|xla_pmap|xmap|remat|checkpoint|shard_map|PjitFunction|PmapFunction)$/i;

/** `text` without the balanced (…) and <…> groups it ends with: a signature's arguments and template parameters. */
function stripTrailingGroups(text) {
  let out = text.trim();
  for (;;) {
    const close = out[out.length - 1];
    if (close !== ')' && close !== '>') return out;
    const open = close === ')' ? '(' : '<';
    let depth = 0;
    let i = out.length - 1;
    for (; i >= 0; i -= 1) {
      if (out[i] === close) depth += 1;
      else if (out[i] === open && (depth -= 1) === 0) break;
    }
    if (i <= 0) return out; // unbalanced, or nothing before the group: keep it
    out = out.slice(0, i).trim();
  }
}

/**
 * The shorter forms of an event name that still say what it is, longest first, each
 * shorter than the one before (the name itself is not among them):
 *   `ProfilerStep#17` → `#17`                        a numbered marker: its number
 *   `aten::convolution` → `convolution`              the last `::` component
 *   `jit_train_step(f32[8,128], …)` → `jit_train_step`   a signature: its name
 *   `PjitFunction(train_step)` → `train_step`        a wrapper: what it wraps
 *   `void at::native::elementwise_kernel<4, F>(int, …)` → `at::native::elementwise_kernel` → `elementwise_kernel`
 *   `jit(train_step)/jit(main)/dot_general` → `dot_general`   a scope path: its last part
 *   `nn.Module: Conv2d_0` → `Conv2d_0`, `train.py(45): forward` → `forward`, `$array.py:298 __float__` → `__float__`
 *   `Optimizer.step#SGD.step` → `SGD.step`           after the last `#`
 *   `torch.nn.functional.relu` → `relu`              a dotted path of three parts or more
 *   `<built-in method conv2d of type object at 0x…>` → `conv2d`, `%fusion.1 = f32[8] fusion(…)` → `%fusion.1`
 */
export function shortForms(name) {
  const text = String(name ?? '').trim();
  const forms = [];
  const add = (form) => {
    const f = form.trim();
    const last = forms.length ? forms[forms.length - 1] : text;
    if (f && f.length < last.length) forms.push(f);
  };
  const numbered = /^[^#]*[^#\s]\s*#\s*(\d+)$/.exec(text);
  if (numbered) {
    add(`#${numbered[1]}`);
    return forms;
  }
  const special = /^<built-in (?:method|function) ([\w.]+)/.exec(text) || /^(%?[\w.-]+)\s*=\s/.exec(text);
  if (special) { // `<built-in method conv2d of …>` → `conv2d`; HLO `%fusion.1 = f32[8] fusion(…)` → `%fusion.1`
    add(special[1]);
    return forms;
  }
  let core = text;
  const wrapped = /^([\w.]+)\(\s*([\w.:/-]+)\s*\)$/.exec(text);
  if (wrapped && WRAPPERS.test(wrapped[1])) {
    core = wrapped[2]; // the inner name may be a path: shortened further below
    add(core);
  }
  // `file.py(45): f` (PyTorch), `$file.py:298 f` (JAX), `nn.Module: Conv2d_0`: what follows the location or the kind
  const labelled = /^(?:[^:]*\.py\(\d+\):|\$?[^\s:]+\.py:\d+|[\w. ]*\w:)\s+(\S.*)$/.exec(core);
  if (labelled && !core.includes('::')) {
    core = labelled[1];
    add(core);
  }
  let rest = stripTrailingGroups(core).replace(/^(?:void|static|const|unsigned|struct|class)\s+/, '').trim() || core;
  add(rest);
  for (const sep of ['/', '::', '#']) {
    const cut = rest.lastIndexOf(sep);
    if (cut >= 0 && cut + sep.length < rest.length) {
      rest = stripTrailingGroups(rest.slice(cut + sep.length)) || rest.slice(cut + sep.length);
      add(rest);
    }
  }
  const dotted = rest.split('.');
  if (dotted.length >= 3 && dotted.every(Boolean)) {
    add(/^\d+$/.test(dotted[dotted.length - 1]) ? dotted.slice(-2).join('.') : dotted[dotted.length - 1]);
  }
  return forms;
}

/**
 * A slice's label in `maxChars` characters: the whole name when it fits, else its most
 * telling short form that fits (`shortForms`), else the shortest form cut with an ellipsis.
 */
export function fitLabel(name, maxChars) {
  const text = String(name ?? '');
  if (text.length <= maxChars) return text;
  const forms = shortForms(text);
  for (const f of forms) if (f.length <= maxChars) return f;
  return fitText(forms.length ? forms[forms.length - 1] : text, maxChars);
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
