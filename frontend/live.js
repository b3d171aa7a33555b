// Live mode: which runs the `tb-reduce live` sidecar writes, and a poller of the run
// list. Window runs are `live/<time>-<seq>` (`20261201T041530.123Z-000042`), so the
// newest sorts last by name; anomaly runs are `live/<window>-anomaly-<time>-<kind>`.
// No DOM here: the dashboard (app.js) decides what a new listing changes.

export const LIVE_PREFIX = 'live/';
const WINDOW_RUN = /^live\/\d{8}T\d{6}\.\d{3}Z-\d{6,}$/;
export const POLL_MS = 2000;
/**
 * Outside Live mode the run list is still asked, less often: a tab opened before the first
 * trace existed, or kept open while new runs land, shows them without a reload (TensorBoard's
 * own ⟳ does not reach a plugin's iframe). An unchanged list costs a 304 (the route's ETag).
 */
export const IDLE_POLL_MS = 5000;

/** A reduced live window (not an anomaly run, not anything else under live/). */
export function isWindowRun(name) {
  return typeof name === 'string' && WINDOW_RUN.test(name);
}

/** A run the sidecar kept around an anomaly (raw traces + anomaly.json). */
export function isAnomalyRun(name) {
  return typeof name === 'string' && name.startsWith(LIVE_PREFIX) && name.includes('-anomaly-');
}

/** Whether the listing holds anything the sidecar wrote (the Live toggle shows then). */
export function hasLiveRuns(runs) {
  return Array.isArray(runs) && runs.some((r) => r && typeof r.run === 'string' && r.run.startsWith(LIVE_PREFIX));
}

function newestBy(runs, test) {
  let best = null;
  for (const r of Array.isArray(runs) ? runs : []) {
    if (r && test(r.run) && Array.isArray(r.hosts) && r.hosts.length && (best === null || r.run > best)) best = r.run;
  }
  return best;
}

/** The newest window run's name, or null. */
export function newestWindow(runs) {
  return newestBy(runs, isWindowRun);
}

/** The newest anomaly run's name, or null (its window's name, then its time, sort it). */
export function newestAnomaly(runs) {
  return newestBy(runs, isAnomalyRun);
}

/**
 * Asks `fetchRuns(etag, signal)` → {changed, etag, runs} every `everyMs` after the
 * previous answer (never two at once, no busy loop) and hands a changed listing to
 * `onRuns`; failures go to `onError` and polling goes on. `everyMs` is a number or a
 * function read before each wait (the dashboard asks faster in Live mode and while it has
 * no runs). A hidden tab asks nothing; it asks at once when it is shown again.
 */
export class RunPoller {
  constructor({fetchRuns, onRuns, onError = () => {}, everyMs = POLL_MS}) {
    this.fetchRuns = fetchRuns;
    this.onRuns = onRuns;
    this.onError = onError;
    this.everyMs = everyMs;
    this.etag = null;
    this.timer = 0;
    this.controller = null;
    this.running = false;
    this.onVisibility = () => {
      if (this.running && !document.hidden && !this.controller) this.poke();
    };
  }

  start() {
    if (this.running) return;
    this.running = true;
    if (typeof document !== 'undefined') document.addEventListener('visibilitychange', this.onVisibility);
    this.tick();
  }

  stop() {
    this.running = false;
    clearTimeout(this.timer);
    this.timer = 0;
    if (this.controller) this.controller.abort();
    this.controller = null;
    if (typeof document !== 'undefined') document.removeEventListener('visibilitychange', this.onVisibility);
  }

  /** Asks now (unless a request is on its way): the next wait starts from its answer. */
  poke() {
    if (!this.running || this.controller) return;
    clearTimeout(this.timer);
    this.tick();
  }

  /** The wait before the next ask, in ms. */
  interval() {
    const ms = typeof this.everyMs === 'function' ? this.everyMs() : this.everyMs;
    return Number(ms) > 0 ? Number(ms) : POLL_MS;
  }

  schedule() {
    if (this.running) this.timer = setTimeout(() => this.tick(), this.interval());
  }

  async tick() {
    this.timer = 0;
    if (!this.running) return;
    if (typeof document !== 'undefined' && document.hidden) {
      this.schedule();
      return;
    }
    const controller = new AbortController();
    this.controller = controller;
    try {
      const answer = await this.fetchRuns(this.etag, controller.signal);
      if (!this.running || controller !== this.controller) return;
      if (answer.etag) this.etag = answer.etag;
      if (answer.changed) this.onRuns(answer.runs);
    } catch (err) {
      if (!this.running || controller !== this.controller) return;
      if (!(err && err.name === 'AbortError')) this.onError(err);
    }
    this.controller = null;
    this.schedule();
  }
}
