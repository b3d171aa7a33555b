// Light or dark: the dashboard follows TensorBoard's own dark mode when it runs in
// TensorBoard's iframe (TensorBoard toggles `dark-mode` on its document's <body>; the
// iframe is same-origin, so its class is read and observed), and the system's
// `prefers-color-scheme` otherwise (the standalone `view` page, a cross-origin host).
//
// The theme is applied in two places: `data-theme` on the dashboard root, which picks
// the CSS variables (--tbr-bg, --tbr-fg, … in dashboard.css), and the canvas palette
// (tracks/common.js COLORS), after which `onChange` redraws the canvases.
import {setCanvasTheme} from './tracks/common.js';

/** TensorBoard's <body> when this page is its plugin iframe (same origin), else null. */
export function tensorBoardBody(win = window) {
  try {
    if (!win.parent || win.parent === win) return null;
    const doc = win.parent.document; // throws when the parent is another origin
    if (!doc || !doc.body) return null;
    // TensorBoard's Angular app (tb-webapp), or its Polymer predecessor
    return doc.querySelector('tb-webapp, tf-tensorboard') ? doc.body : null;
  } catch {
    return null;
  }
}

/**
 * Applies the theme to `root` now and whenever it changes; `onChange(name)` is called
 * after each application ('light' or 'dark'), the first included.
 * Returns {name (the current one), source ('tensorboard' | 'system'), refresh(), stop()}.
 */
export function installTheme(root, onChange = () => {}) {
  const media = typeof window.matchMedia === 'function' ? window.matchMedia('(prefers-color-scheme: dark)') : null;
  const tbBody = tensorBoardBody();
  const state = {name: null, source: tbBody ? 'tensorboard' : 'system'};
  const isDark = () => (tbBody ? tbBody.classList.contains('dark-mode') : !!(media && media.matches));
  const apply = () => {
    const name = isDark() ? 'dark' : 'light';
    if (name === state.name) return;
    state.name = name;
    root.dataset.theme = name;
    root.dataset.themeSource = state.source;
    document.documentElement.dataset.tbrTheme = name; // the page around the root (its background, scrollbars)
    setCanvasTheme(name);
    onChange(name);
  };
  let observer = null;
  if (tbBody) {
    observer = new MutationObserver(apply);
    observer.observe(tbBody, {attributes: true, attributeFilter: ['class']});
  } else if (media) {
    media.addEventListener('change', apply);
  }
  apply();
  return {
    get name() { return state.name; },
    get source() { return state.source; },
    refresh: apply,
    stop() {
      if (observer) observer.disconnect();
      else if (media) media.removeEventListener('change', apply);
    },
  };
}
