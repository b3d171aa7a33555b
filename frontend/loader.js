// Loading a reduced trace: in a module worker when the browser allows one
// (TensorBoard's CSP does: `script-src 'self'` covers same-origin workers),
// otherwise on the main thread with the same code.
import {describeFailure, fetchText} from './api.js';
import {buildModel} from './model.js';

export class TraceLoader {
  constructor() {
    this.nextId = 1;
    this.pending = new Map();
    this.worker = null;
    try {
      this.worker = new Worker(new URL('./worker.js', import.meta.url), {type: 'module'});
      this.worker.addEventListener('message', (e) => this.onMessage(e.data));
      this.worker.addEventListener('error', () => this.workerFailed());
    } catch {
      this.worker = null;
    }
  }

  /**
   * Starts loading `url`; returns {promise, abort}. `onProgress(received)` gets
   * JSON bytes received so far; `onPhase('parsing')` when the body is complete.
   */
  load(url, {onProgress, onPhase} = {}) {
    const id = this.nextId++;
    let resolve;
    let reject;
    const promise = new Promise((res, rej) => {
      resolve = res;
      reject = rej;
    });
    const job = {id, url, onProgress, onPhase, resolve, reject, controller: null};
    this.pending.set(id, job);
    if (this.worker) this.worker.postMessage({id, url});
    else this.runInline(job);
    const abort = () => {
      if (!this.pending.has(id)) return;
      if (job.controller) job.controller.abort();
      else if (this.worker) this.worker.postMessage({type: 'abort', id});
      this.pending.delete(id);
      const err = new Error('aborted');
      err.name = 'AbortError';
      reject(err);
    };
    return {promise, abort};
  }

  onMessage(msg) {
    const job = this.pending.get(msg.id);
    if (!job) return;
    if (msg.type === 'progress') {
      if (job.onProgress) job.onProgress(msg.received);
    } else if (msg.type === 'parsing') {
      if (job.onPhase) job.onPhase('parsing', msg.received);
    } else if (msg.type === 'done') {
      this.pending.delete(msg.id);
      job.resolve(msg.model);
    } else if (msg.type === 'error') {
      this.pending.delete(msg.id);
      const err = new Error(msg.message);
      err.status = msg.status;
      if (msg.aborted) err.name = 'AbortError';
      job.reject(err);
    }
  }

  /** A worker that cannot start (a strict CSP, an old browser): redo its jobs here. */
  workerFailed() {
    this.worker = null;
    for (const job of this.pending.values()) this.runInline(job);
  }

  async runInline(job) {
    job.controller = new AbortController();
    try {
      const t0 = performance.now();
      const text = await fetchText(job.url, {signal: job.controller.signal, onProgress: job.onProgress});
      const t1 = performance.now();
      if (job.onPhase) job.onPhase('parsing', text.length);
      await new Promise((r) => setTimeout(r, 0)); // let the "parsing" status paint first
      const model = buildModel(JSON.parse(text));
      model.timing = {receive_ms: t1 - t0, parse_ms: performance.now() - t1};
      if (this.pending.get(job.id) === job) {
        this.pending.delete(job.id);
        job.resolve(model);
      }
    } catch (err) {
      if (this.pending.get(job.id) === job) {
        this.pending.delete(job.id);
        const info = describeFailure(err);
        const out = new Error(info.message);
        out.status = info.status;
        if (info.aborted) out.name = 'AbortError';
        job.reject(out);
      }
    }
  }
}
