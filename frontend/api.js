// Talking to the plugin's routes. Every URL is relative to the plugin's base
// (`/data/plugin/tb_reduce/`), which holds both inside TensorBoard's iframe and
// on the standalone `view` page; this file is served as `static/api.js`.

export const BASE = new URL('../', import.meta.url);

/** An HTTP failure carrying the server's own `{"error": …}` text for the user. */
export class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.name = 'HttpError';
    this.status = status;
  }
}

export function routeUrl(path, params) {
  const url = new URL(path, BASE);
  if (params) url.search = new URLSearchParams(params).toString();
  return url.href;
}

/** The server's error text if the body is `{"error": …}`, else the status line. */
async function errorFrom(response) {
  let message = `${response.status} ${response.statusText}`.trim();
  try {
    const body = await response.json();
    if (body && typeof body.error === 'string') message = body.error;
  } catch {
    // not JSON: keep the status line
  }
  return new HttpError(response.status, message);
}

/** How long to wait before asking again, from a 503's `Retry-After` (seconds), bounded. */
export function retryDelayMs(response, attempt) {
  const said = Number.parseFloat(response.headers.get('Retry-After') || '');
  const seconds = Number.isFinite(said) && said > 0 ? said : 2 ** attempt;
  return Math.min(30, seconds) * 1000;
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    if (signal) {
      signal.addEventListener('abort', () => {
        clearTimeout(timer);
        reject(new DOMException('aborted', 'AbortError'));
      }, {once: true});
    }
  });
}

/**
 * `fetch`, asking again when the server answers 503 (busy: too many computations at
 * once, or its memory is taken by other requests) after the `Retry-After` it gives,
 * a few times, then giving up with the server's own message.
 */
export async function fetchPatiently(url, {signal, attempts = 6, onWait} = {}) {
  for (let attempt = 0; ; attempt++) {
    const response = await fetch(url, {signal});
    if (response.status !== 503 || attempt + 1 >= attempts) return response;
    const ms = retryDelayMs(response, attempt);
    if (onWait) onWait(ms);
    await sleep(ms, signal);
  }
}

export async function getJson(path, params, signal) {
  const response = await fetchPatiently(routeUrl(path, params), {signal});
  if (!response.ok) throw await errorFrom(response);
  return response.json();
}

/**
 * The run list, revalidated: with the `etag` of the last answer the server says 304
 * while nothing changed. Resolves {changed, etag, runs} (runs null when unchanged).
 */
export async function fetchRunsIfChanged(etag, signal) {
  const headers = etag ? {'If-None-Match': etag} : {};
  const response = await fetch(routeUrl('runs'), {signal, headers, cache: 'no-store'});
  if (response.status === 304) return {changed: false, etag, runs: null};
  if (!response.ok) throw await errorFrom(response);
  const runs = await response.json();
  return {changed: true, etag: response.headers.get('ETag'), runs: Array.isArray(runs) ? runs : []};
}

/**
 * Reads a response body as text while reporting progress: the browser inflates
 * the gzip itself, so `received` counts JSON bytes, comparable with the server's
 * `output.json_bytes`. The text is decoded chunk by chunk so the raw bytes
 * never need to be held twice.
 */
export async function fetchText(url, {signal, onProgress} = {}) {
  const response = await fetchPatiently(url, {signal});
  if (!response.ok) throw await errorFrom(response);
  if (!response.body || !response.body.getReader) {
    const text = await response.text();
    if (onProgress) onProgress(text.length);
    return text;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const parts = [];
  let received = 0;
  let lastReport = 0;
  for (;;) {
    const {done, value} = await reader.read();
    if (done) break;
    received += value.byteLength;
    parts.push(decoder.decode(value, {stream: true}));
    const now = Date.now();
    if (onProgress && now - lastReport > 80) {
      lastReport = now;
      onProgress(received);
    }
  }
  parts.push(decoder.decode());
  if (onProgress) onProgress(received);
  return parts.join('');
}

/** A plain-object description of a failure (it must cross postMessage). */
export function describeFailure(err) {
  const aborted = !!err && err.name === 'AbortError';
  let message = err && err.message ? String(err.message) : String(err);
  if (err instanceof RangeError || /Invalid string length|out of memory/i.test(message)) {
    message = `the reduced trace is too large for this browser tab (${message}); choose auto or a higher level`;
  } else if (err instanceof SyntaxError) {
    message = `the server's answer is not valid JSON (${message})`;
  }
  return {aborted, status: err && err.status ? err.status : 0, message};
}

// ---- waveforms (SPEC §8) -----------------------------------------------------

/** `tags?run=`: the run's scalar tags (event files) and, per trace host, its derived series names. */
export function fetchTags(run, signal) {
  return getJson('tags', {run}, signal);
}

/**
 * `scalars?run=&tag_id=&width=`: [[step, wall_time, value], …] in record order (non-finite
 * numbers arrive as strings). By the tag's id from `tags` when it has one (a tag can be
 * longer than a URL may be), else by its name; with `width` (pixels) only the points a
 * plot that wide needs (per pixel column the first, last, lowest and highest), with
 * `summary` counting every point.
 */
export function fetchScalars(run, tag, {id, width, signal} = {}) {
  const params = id ? {run, tag_id: id} : {run, tag};
  if (width) params.width = String(width);
  return getJson('scalars', params, signal);
}

/** `waveforms?run=&host=`: per step of the trace, its window, step time and busy time per category. */
export function fetchWaveforms(run, host, signal) {
  return getJson('waveforms', {run, host}, signal);
}

/**
 * `waveforms?run=&hosts=a,b`: the hosts' steps lined up by step number, with per step and series
 * {min, median, max, straggler, values} (multihost/spread.py) and each host's reason when it has none.
 */
export function fetchSpread(run, hosts, signal) {
  return getJson('waveforms', {run, hosts: hosts.join(',')}, signal);
}

// ---- search and range statistics (issue 13) -----------------------------------

/**
 * `search?run=&host=&q=`: the input events whose name matches `q`, from the whole index
 * (folded ones included): {total, names, offset, limit, hits: [{i, name, ph, ts, dur, pid, tid,
 * process, thread}, …]}; `ts`/`dur` in µs on the trace's clock. `icase` and `re` as 0/1.
 */
export function fetchSearch({run, host, q, icase = true, re = false, offset = 0, limit = 1000}, signal) {
  const params = {run, host, q, icase: icase ? '1' : '0', limit: String(limit)};
  if (re) params.re = '1';
  if (offset) params.offset = String(offset);
  return getJson('search', params, signal);
}

/**
 * `aggregate?run=&host=&start_us=&end_us=`: exact statistics per name of every slice in
 * the range, at any level: {window, slices, clipped, names, tracks,
 * rows: [{name, count, wall_us, self_us, avg_us, max_us, max_i, max_ts}, …], other}.
 */
export function fetchAggregate({run, host, startUs, endUs, limit = 500}, signal) {
  return getJson('aggregate', {run, host, start_us: String(startUs), end_us: String(endUs), limit: String(limit)}, signal);
}

/** `event?run=&host=&i=`: one input event with all its args. */
export function fetchEvent(run, host, i, signal) {
  return getJson('event', {run, host, i: String(i)}, signal);
}
