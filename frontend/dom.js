// Building DOM nodes without ever parsing HTML: trace data (event, thread, host
// names) can hold anything, so every string goes in as a text node.

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
      node.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(node, children);
  return node;
}

/** Appends strings as text nodes, nodes as themselves; skips null/false. */
export function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
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
