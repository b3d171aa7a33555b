// When to ask the server again, and for which window. Pure functions.
//
// Like Perfetto and XProf's trace viewer, a fetch covers 3× the visible span
// (the view in the middle), so panning by up to a screen on either side needs no
// request. A new request is due when the view leaves the data's window, or when
// the user has zoomed in far enough that the data's resolution no longer fills
// the screen with detail (XProf refetches after an 8× zoom; coarse levels
// sooner, when one of their buckets grows wider than ~2 px and a new fetch would
// bring buckets at least 2× finer).

export const PREFETCH_FACTOR = 3;
export const ZOOM_REFETCH = 8;
/** The bucket counts a `resolution` may ask for: the server's MAX_RESOLUTION (reduce/levels.py) at most. */
export const MIN_RESOLUTION = 256;
export const MAX_RESOLUTION = 1_000_000;

/**
 * The `resolution` an `auto` view asks for, as XProf's trace viewer sizes it from its
 * pixels: one bucket per device pixel of the timeline's canvas (its CSS width × the
 * device pixel ratio), rounded and clamped to [MIN_RESOLUTION, MAX_RESOLUTION]. Each
 * fetch, the whole trace or a zoomed window, asks for the same count; the data's
 * `bucketUs` then says when a zoom has made its buckets too coarse (needsFetch).
 */
export function screenResolution(cssWidth, dpr) {
  const px = Math.round((Number(cssWidth) || 0) * (Number(dpr) > 0 ? Number(dpr) : 1));
  return Math.min(MAX_RESOLUTION, Math.max(MIN_RESOLUTION, Number.isFinite(px) ? px : MIN_RESOLUTION));
}

/**
 * @param view [t0, t1] visible µs
 * @param data {window: [t0, t1], level: resolved level (0..4), bucketUs, full: bool} or null;
 *   `bucketUs` is the answer's own (`tb_reduce.bucket_us`): a level's bucket count or, at
 *   `auto`, the screen's `resolution`, so both refetch by the same rule
 * @param plotWidth visible plot width in px
 * @param extent the whole trace's [t0, t1] when known (the one fetchWindow clipped the fetch to)
 *
 * The data covers the view when it holds the part of the view the trace has: view ∩ extent.
 * A view may reach past the trace's start or end (setView keeps only its centre on the trace:
 * a search hit at t≈0 framed with its span on each side), and fetchWindow clips the fetch to
 * the trace, so asking for the view itself would never be satisfied and refetch forever (it
 * did: 100 fetches in 4 s). A view with nothing of the trace in it needs no fetch either.
 */
export function needsFetch(view, data, plotWidth, extent = null) {
  if (!data) return true;
  const [v0, v1] = view;
  const [d0, d1] = data.window;
  const span = v1 - v0;
  let c0 = v0;
  let c1 = v1;
  if (extent) {
    c0 = Math.max(v0, extent[0]);
    c1 = Math.min(v1, extent[1]);
    if (!(c1 >= c0)) return false; // the view shows none of the trace: nothing to fetch
  }
  // float noise at epoch-µs times (a double holds ~16 digits) and the 1 ns rounding of URLs; not more:
  // a relative 1e-6 would be 5 s at PyTorch's 5e12 µs clock, so panning out of the data never refetched
  const slack = 1e-15 * Math.max(Math.abs(d0), Math.abs(d1), 1) + 2e-3;
  const inside = data.full ? c1 >= d0 && c0 <= d1 : c0 >= d0 - slack && c1 <= d1 + slack;
  if (!inside) return true;
  if (data.level === 0) return false; // lossless: nothing finer to get
  const zoom = (d1 - d0) / span;
  if (zoom >= ZOOM_REFETCH) return true;
  const pxUs = span / Math.max(1, plotWidth);
  // A fetch covers PREFETCH_FACTOR × the view, so its buckets are only finer than the data's
  // once the view is that many times narrower than the data: asking sooner brings the same
  // buckets back, and at level 4 (a bucket ≈ 3.3 px of a fetched window) would ask forever.
  return data.bucketUs > 2 * pxUs && zoom >= 2 * PREFETCH_FACTOR;
}

/**
 * The window to ask for: 3× the view around its centre, clipped to the trace's
 * extent when known; null (the whole trace, the best-cached request) when that
 * covers the extent anyway.
 */
export function fetchWindow(view, extent) {
  const [v0, v1] = view;
  const half = ((v1 - v0) * PREFETCH_FACTOR) / 2;
  const mid = (v0 + v1) / 2;
  let w0 = mid - half;
  let w1 = mid + half;
  if (extent) {
    if (w0 <= extent[0] && w1 >= extent[1]) return null;
    w0 = Math.max(w0, extent[0]);
    w1 = Math.min(w1, extent[1]);
    if (!(w1 > w0)) return null;
  }
  return [w0, w1];
}
