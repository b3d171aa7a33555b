// Trace Reduce dashboard entry point. TensorBoard loads this module in the
// plugin's iframe and calls `render()`; the standalone `view` page calls it too.
// Plain ES modules served by the plugin (`static/NAME` is `frontend/NAME`):
// no CDN, no bundler, nothing remote (TensorBoard's CSP allows 'self' only).
import {mountDashboard} from './static/app.js';

export async function render() {
  const standalone = /\/view$/.test(location.pathname);
  // In TensorBoard's iframe the query string is TensorBoard's (?name=tb_reduce)
  // and carries no view; on the `view` page it is the shared view.
  return mountDashboard(document.body, {search: standalone ? location.search : '', standalone});
}
