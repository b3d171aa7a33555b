// The shareable part of the dashboard's state (run, host or hosts, level, window, the
// selected event and a comparison's baseline) and its round trip through a URL query string: the `view` page
// reads it back, so a copied link reopens exactly what the sender saw.
//
// A level is *explicit* once the user picks it (the level select) or a link names it
// (`level=`); until then the view is the default one: level 2's args and keep rules
// cut to the screen's `resolution` (app.js). A link from a default view names no level,
// so it reopens as a default view on the receiver's screen rather than pinning level 2.

export const LEVELS = ['auto', '0', '1', '2', '3', '4'];
// Level 2, as the command line and the plugin's routes: `auto` aims at a file's
// budget (500 k events) and would hand a zoomed window far more than a screen shows.
export const DEFAULT_LEVEL = '2';

/**
 * Reads {run, host, level, explicitLevel, window, event} from a query string; bad values
 * are ignored, not fatal. `explicitLevel`: the query names a valid level.
 */
export function parseViewState(search) {
  const q = new URLSearchParams(search);
  const level = q.get('level');
  const start = Number(q.get('start_us'));
  const end = Number(q.get('end_us'));
  const hasWindow = q.has('start_us') && q.has('end_us') && Number.isFinite(start) && Number.isFinite(end) && start < end;
  return {
    run: q.get('run') || null,
    host: q.get('host') || null,
    hosts: parseHosts(q.get('hosts')),
    expand: parseHosts(q.get('expand')) || [],
    level: LEVELS.includes(level) ? level : DEFAULT_LEVEL,
    explicitLevel: LEVELS.includes(level),
    window: hasWindow ? [start, end] : null,
    event: parseEventIndex(q.get('event')),
    compare: parseCompare(q),
    compact: q.get('compact') === '1', // a timeline stacked under another's (panels/compare.js): the timeline alone
  };
}

/** `base_run=&base_host=&steps=`: a comparison with a baseline (panels/compare.js), or null. */
export function parseCompare(q) {
  const baseRun = q.get('base_run');
  const baseHost = q.get('base_host');
  if (!baseRun || !baseHost) return null;
  return {baseRun, baseHost, steps: q.get('steps') || '', baseSteps: q.get('base_steps') || ''};
}

/** `hosts=a,b,…` (a merged view's hosts, in the run's order): the names, or null. */
export function parseHosts(text) {
  if (!text) return null;
  const names = text.split(',').filter((n) => n);
  return names.length ? names : null;
}

/** `event=<input index>`: a non-negative integer, else null. */
export function parseEventIndex(text) {
  if (text === null || !/^\d{1,15}$/.test(text.trim())) return null;
  const i = Number(text.trim());
  return Number.isSafeInteger(i) ? i : null;
}

/**
 * Times in a URL are rounded to 1 ns: enough for any view (the server's
 * guarantees are to 1 ns) and short enough to paste.
 */
export function roundUs(us) {
  return Math.round(us * 1000) / 1000;
}

/**
 * The query parameters every route shares: run, host, level and, if any, the window;
 * `resolution` (the timeline's bucket count, policy.js: at `auto`, and at the default
 * level until one is picked) only where given.
 */
export function viewParams({run, host, hosts, expand, level, window, resolution}) {
  const params = new URLSearchParams();
  params.set('run', run);
  // several hosts: the merged view (its window on the merged clock), and the lanes opened in it
  if (Array.isArray(hosts) && hosts.length > 1) {
    params.set('hosts', hosts.join(','));
    if (Array.isArray(expand) && expand.length) params.set('expand', expand.join(','));
  } else {
    params.set('host', host);
  }
  params.set('level', level || DEFAULT_LEVEL);
  if (Number.isSafeInteger(resolution) && resolution > 0) params.set('resolution', String(resolution));
  if (window) {
    params.set('start_us', String(roundUs(window[0])));
    params.set('end_us', String(roundUs(window[1])));
  }
  return params;
}

/**
 * A link's parameters: the view's, plus `event` (the selected event's input index) if any.
 * Never a `resolution`: it is the sender's screen, and the receiver's sizes its own. No
 * `level` either where `state.explicitLevel` is false (a default view): the receiver's is
 * then a default view too, sized to its own screen, not a pinned level 2.
 */
export function linkParams(state) {
  const params = viewParams({...state, resolution: null});
  if (state.explicitLevel === false) params.delete('level');
  if (Number.isSafeInteger(state.event) && state.event >= 0) params.set('event', String(state.event));
  if (state.compare && state.compare.baseRun) {
    params.set('base_run', state.compare.baseRun);
    params.set('base_host', state.compare.baseHost);
    if (state.compare.steps) params.set('steps', state.compare.steps);
    if (state.compare.baseSteps) params.set('base_steps', state.compare.baseSteps);
  }
  return params;
}

/** An absolute `view?…` link: works in a new tab, outside TensorBoard's iframe. */
export function shareUrl(base, state) {
  return new URL(`view?${linkParams(state)}`, base).href;
}

/**
 * The reduced `.json.gz` of this level and window, as a file download: at the level's own
 * bucket count (no screen `resolution`), as the command line makes it.
 */
export function downloadUrl(base, state) {
  const params = viewParams({...state, resolution: null});
  params.set('download', '1');
  return new URL(`trace?${params}`, base).href;
}
