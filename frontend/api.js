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

export async function getJson(path, params, signal) {
  const response = await fetch(routeUrl(path, params), {signal});
  if (!response.ok) throw await errorFrom(response);
  return response.json();
}

/**
 * Reads a response body as text while reporting progress: the browser inflates
 * the gzip itself, so `received` counts JSON bytes, comparable with the server's
 * `output.json_bytes`. The text is decoded chunk by chunk so the raw bytes
 * never need to be held twice.
 */
export async function fetchText(url, {signal, onProgress} = {}) {
  const response = await fetch(url, {signal});
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
