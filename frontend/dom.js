// Building DOM nodes without ever parsing HTML: trace data (event, thread, host
// names) can hold anything, so every string goes in as a text node.
//
// Names can hold bidirectional controls too: an unterminated U+202E (RIGHT-TO-LEFT
// OVERRIDE) in a host name reversed the dashboard's own text after it. So every string
// shown — text children, titles, labels, canvas text — has its bidi controls replaced
// by a visible marker (`⟨U+202E⟩`, see `visible`), and a user string set among the
// dashboard's own words is isolated: `bdi(name)` in the DOM, `isolated(name)` in
// attributes and on canvases (U+2068 … U+2069 around it, its own controls shown).

// The embeddings, overrides and isolates, the marks (LRM, RLM, ALM): what reorders text.
const BIDI = /[\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C]/g;
// One isolate of ours: FSI, text holding no bidi control, PDI (see `isolated`).
const OURS = /\u2068[^\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C]*\u2069/g;
const SHOWN_ATTRS = new Set(['title', 'aria-label', 'label', 'placeholder', 'alt']);

function marker(c) {
  return `\u27E8U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}\u27E9`;
}

/** `s` with each bidi control replaced by a visible marker (`⟨U+202E⟩`): it reorders nothing. */
export function showControls(s) {
  return String(s).replace(BIDI, marker);
}

/**
 * A string as it may be shown: bidi controls as markers, except the balanced isolates
 * `isolated` made (they hold no control, so they can only contain, never reorder).
 */
export function visible(s) {
  const text = String(s);
  let out = '';
  let at = 0;
  for (const m of text.matchAll(OURS)) {
    out += showControls(text.slice(at, m.index)) + m[0];
    at = m.index + m[0].length;
  }
  return out + showControls(text.slice(at));
}

// Right-to-left letters (Hebrew, Arabic, Syriac, Thaana, N'Ko…, their presentation
// forms, the RTL scripts beyond the BMP) and the controls: what can reorder its neighbours.
const REORDERS = /[\u0590-\u08FF\uFB1D-\uFDFF\uFE70-\uFEFF\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C]|\uD802[\uDC00-\uDFFF]|\uD803[\uDC00-\uDFFF]|\uD83A[\uDC00-\uDFFF]|\uD83B[\uDC00-\uDFFF]/;

/**
 * A user string for text set among the dashboard's words where no <bdi> can go (an
 * option, a title, a template string): between U+2068 and U+2069, its controls shown.
 * A string that cannot reorder anything (no right-to-left letter, no control) is
 * returned as it is, so plain names read, copy and compare unchanged.
 */
export function isolated(s) {
  const text = String(s);
  return REORDERS.test(text) ? `\u2068${showControls(text)}\u2069` : text;
}

/** A user string among the dashboard's own words, in the DOM: a <bdi> (isolated), its controls shown. */
export function bdi(s) {
  const node = document.createElement('bdi');
  node.textContent = showControls(s);
  return node;
}

/** Sets a node's text (as `textContent =` would), shown safely (see `visible`). */
export function setText(node, text) {
  node.textContent = visible(text);
}

/**
 * el('div', {class: 'x', 'data-testid': 'y', onclick: fn}, 'text', child)
 * Keys starting with "on" become listeners; everything else an attribute.
 */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      node.addEventListener(key.slice(2), value);
    } else {
      const text = value === true ? '' : String(value);
      node.setAttribute(key, SHOWN_ATTRS.has(key) ? visible(text) : text);
    }
  }
  append(node, children);
  return node;
}

/** Appends strings as text nodes (shown safely, see `visible`), nodes as themselves; skips null/false. */
export function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(visible(child)));
  }
  return node;
}

/** Replaces a node's children (text-safe, see append). */
export function setChildren(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

/** Loads a stylesheet once per address: a <link>, since CSP allows 'self' styles. */
export function ensureStylesheet(href) {
  const want = new URL(href, document.baseURI).href;
  if ([...document.querySelectorAll('link[data-tbr-css]')].some((l) => l.href === want)) return;
  const link = el('link', {rel: 'stylesheet', href, 'data-tbr-css': true});
  document.head.append(link);
}

/**
 * Sizes a canvas to W×H CSS pixels with a backing store in device pixels (sharp on HiDPI),
 * only when that changes (a resize clears it); returns its 2D context, scaled and cleared.
 */
export function sizeCanvas(canvas, ctx, W, H) {
  const dpr = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(W * dpr) || canvas.height !== Math.round(H * dpr)) {
    canvas.width = Math.round(W * dpr);
    canvas.height = Math.round(H * dpr);
    canvas.style.width = `${W}px`;
    canvas.style.height = `${H}px`;
  }
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, W, H);
  return ctx;
}
