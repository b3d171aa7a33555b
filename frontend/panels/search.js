// The search box in the toolbar (issue 13): a query by event name, answered by the
// server's `search` route from the whole index — folded events included — so a hit
// is found whatever the level shows. The box shows the count, steps through the
// hits (Enter / Shift+Enter, or the arrows) and pages through them (`offset`) when
// there are more than one answer holds. What a step does (zoom, select, highlight)
// is the dashboard's: `onGo(hit, index)`; the hits loaded so far go to `onHits`.
import {fetchSearch} from '../api.js';
import {el, isolated, setText, visible} from '../dom.js';
import {formatCount} from '../format.js';

export const SEARCH_DEBOUNCE_MS = 250;
export const PAGE = 1000;

export class SearchBar {
  /**
   * context() → {run, host, view}: where to search (null run: nowhere); the first step goes to
   *   the first hit in `view` ([t0, t1] µs, if given), as a find bar starts from where you are.
   * onHits(hits): the hits loaded so far, to highlight (an empty list clears them).
   * onGo(hit, index): the user stepped to hit number `index` (0-based, of all `total`).
   * onEscape(): Esc pressed in the box.
   */
  constructor({context, onHits, onGo, onEscape} = {}) {
    this.context = context || (() => ({run: null, host: null}));
    this.onHits = onHits || (() => {});
    this.onGo = onGo || (() => {});
    this.onEscape = onEscape || (() => {});
    this.icase = true;
    this.re = false;
    this.results = null; // {key, q, total, names, pageSize, pages: Map(offset → hits)}
    this.current = -1;
    this.error = '';
    this.busy = false;
    this.controller = null;
    this.pending = null; // the promise of the search on its way
    this.timer = 0;
    this.seq = 0;
    this.stepSeq = 0;

    this.input = el('input', {type: 'search', class: 'tbr-search-input', 'data-testid': 'search-input',
      'aria-label': 'Search events by name', placeholder: 'Search events  ( / )', autocomplete: 'off', spellcheck: 'false',
      title: 'Search every event of this trace by name, folded ones included. Enter: next hit, Shift+Enter: previous',
      oninput: () => this.typed(), onkeydown: (e) => this.onKey(e)});
    this.caseButton = el('button', {type: 'button', class: 'tbr-search-toggle', 'data-testid': 'search-case',
      'aria-pressed': 'false', 'aria-label': 'Match case', title: 'Match case (off: ignore case)',
      onclick: () => this.toggle('icase')}, 'Aa');
    this.reButton = el('button', {type: 'button', class: 'tbr-search-toggle tbr-search-re', 'data-testid': 'search-regex',
      'aria-pressed': 'false', 'aria-label': 'Regular expression', title: 'Regular expression (off: the name contains the text)',
      onclick: () => this.toggle('re')}, '.*');
    this.prevButton = el('button', {type: 'button', class: 'tbr-search-step', 'data-testid': 'search-prev',
      'aria-label': 'Previous hit', title: 'Previous hit (Shift+Enter)', onclick: () => this.prev()}, '\u2191');
    this.nextButton = el('button', {type: 'button', class: 'tbr-search-step', 'data-testid': 'search-next',
      'aria-label': 'Next hit', title: 'Next hit (Enter)', onclick: () => this.next()}, '\u2193');
    this.count = el('span', {class: 'tbr-search-count', 'data-testid': 'search-count', 'aria-live': 'polite'});
    this.element = el('div', {class: 'tbr-search', role: 'search', 'data-testid': 'search'},
      el('span', {class: 'tbr-search-field'}, this.input, this.caseButton, this.reButton),
      this.prevButton, this.nextButton, this.count);
    this.render();
  }

  // ---- what the dashboard calls -------------------------------------------------
  focus() {
    this.input.focus();
    this.input.select();
  }

  /** Puts `text` in the box and searches it now. */
  setQuery(text) {
    this.input.value = text;
    clearTimeout(this.timer);
    return this.run();
  }

  /** Steps to the next hit (the first one after a new query); wraps around. */
  next() {
    return this.step(1);
  }

  prev() {
    return this.step(-1);
  }

  /** Forgets the results and their highlight; the query text stays (Enter searches it again). */
  clear() {
    clearTimeout(this.timer);
    this.abort();
    this.results = null;
    this.current = -1;
    this.error = '';
    this.input.removeAttribute('aria-invalid');
    this.onHits([]);
    this.render();
  }

  /** Another run or host: the same query, asked there (or nothing when the box is empty). */
  refresh() {
    this.clear();
    if (this.input.value.trim()) this.run();
  }

  /** Every hit loaded so far, in order. */
  loadedHits() {
    const r = this.results;
    if (!r) return [];
    return [...r.pages.keys()].sort((a, b) => a - b).flatMap((offset) => r.pages.get(offset));
  }

  /** For tests and the dashboard: {query, total, names, loaded, current, hit, error, busy}. */
  state() {
    const r = this.results;
    return {
      query: this.input.value, total: r ? r.total : null, names: r ? r.names : null, loaded: r ? this.loadedCount() : 0,
      current: this.current, hit: r && this.current >= 0 ? this.cachedHit(this.current) : null, error: this.error,
      busy: this.busy, icase: this.icase, re: this.re,
    };
  }

  // ---- input ------------------------------------------------------------------
  typed() {
    clearTimeout(this.timer);
    if (!this.input.value.trim()) {
      this.clear();
      return;
    }
    this.timer = setTimeout(() => this.run(), SEARCH_DEBOUNCE_MS);
  }

  toggle(which) {
    this[which] = !this[which];
    this.caseButton.setAttribute('aria-pressed', String(!this.icase));
    this.reButton.setAttribute('aria-pressed', String(this.re));
    if (this.input.value.trim()) {
      clearTimeout(this.timer);
      this.run();
    }
  }

  onKey(e) {
    if (e.key === 'Enter') {
      e.preventDefault();
      if (e.shiftKey) this.prev();
      else this.next();
    } else if (e.key === 'Escape') {
      // the same as Esc anywhere (keys.js hears it too: clearing twice is clearing)
      e.preventDefault();
      this.onEscape();
      this.input.blur();
    }
  }

  /** The query as asked: what identifies its results. */
  key() {
    const {run, host} = this.context();
    return JSON.stringify([run, host, this.input.value.trim(), this.icase, this.re]);
  }

  fresh() {
    return !!this.results && this.results.key === this.key();
  }

  abort() {
    if (this.controller) this.controller.abort();
    this.controller = null;
    this.pending = null;
    this.busy = false;
  }

  // ---- asking the server ----------------------------------------------------------
  /** Searches the box's text (the first page); resolves when its answer is in. */
  run() {
    const {run, host} = this.context();
    const q = this.input.value.trim();
    this.abort();
    this.results = null;
    this.current = -1;
    this.error = '';
    this.input.removeAttribute('aria-invalid');
    if (!q || !run || !host) {
      this.onHits([]);
      this.render();
      return Promise.resolve();
    }
    const seq = ++this.seq;
    const key = this.key();
    const controller = new AbortController();
    this.controller = controller;
    this.busy = true;
    this.render();
    const promise = fetchSearch({run, host, q, icase: this.icase, re: this.re, offset: 0, limit: PAGE}, controller.signal)
      .then((answer) => {
        if (seq !== this.seq) return;
        const hits = Array.isArray(answer.hits) ? answer.hits : [];
        const total = Number.isFinite(answer.total) ? answer.total : hits.length;
        const pageSize = total > hits.length && hits.length ? Math.min(hits.length, Number(answer.limit) || PAGE) : PAGE;
        this.results = {key, q, total, names: answer.names ?? null, pageSize, pages: new Map([[0, hits]])};
        this.onHits(this.loadedHits());
      }, (err) => {
        if (seq !== this.seq || err.name === 'AbortError') return;
        this.error = err.message || String(err);
        this.input.setAttribute('aria-invalid', 'true');
        this.onHits([]);
      }).finally(() => {
        if (seq !== this.seq) return;
        this.busy = false;
        this.controller = null;
        this.pending = null;
        this.render();
      });
    this.pending = promise;
    return promise;
  }

  /** Hit number `g` of all `total`, fetching its page when it is not loaded yet; null if gone. */
  async hitAt(g) {
    const r = this.results;
    if (!r) return null;
    const hit = this.cachedHit(g);
    if (hit) return hit;
    const offset = Math.floor(g / r.pageSize) * r.pageSize;
    const {run, host} = this.context();
    const controller = new AbortController();
    this.controller = controller;
    this.busy = true;
    this.render();
    try {
      const answer = await fetchSearch({run, host, q: r.q, icase: this.icase, re: this.re, offset, limit: r.pageSize},
        controller.signal);
      if (this.results !== r) return null;
      r.pages.set(offset, Array.isArray(answer.hits) ? answer.hits : []);
      if (Number.isFinite(answer.total)) r.total = answer.total;
      this.onHits(this.loadedHits());
      return this.cachedHit(g);
    } catch (err) {
      if (err.name !== 'AbortError' && this.results === r) this.error = err.message || String(err);
      return null;
    } finally {
      if (this.controller === controller) {
        this.controller = null;
        this.busy = false;
      }
      this.render();
    }
  }

  /**
   * Where a first step lands: the first hit overlapping the view (going back: the last one),
   * else the first (last) of all. Hits come in time order, so a loaded hit in view is the
   * first one when the hit before it is loaded too (and not in view), or it is hit 0.
   */
  firstStep(dir) {
    const r = this.results;
    const view = this.context().view;
    const fallback = dir > 0 ? 0 : r.total - 1;
    if (!view) return fallback;
    const inView = (h) => Number(h.ts) <= view[1] && Number(h.ts) + (Number(h.dur) || 0) >= view[0];
    const offsets = [...r.pages.keys()].sort((a, b) => (dir > 0 ? a - b : b - a));
    for (const offset of offsets) {
      const page = r.pages.get(offset);
      const j = dir > 0 ? page.findIndex(inView) : findLastIndex(page, inView);
      if (j < 0) continue;
      const g = offset + j;
      const neighbour = g - dir;
      const known = neighbour < 0 || neighbour >= r.total || !!this.cachedHit(neighbour);
      return known ? g : fallback;
    }
    return fallback;
  }

  cachedHit(g) {
    const r = this.results;
    if (!r) return null;
    const offset = Math.floor(g / r.pageSize) * r.pageSize;
    const page = r.pages.get(offset);
    return page && page[g - offset] ? page[g - offset] : null;
  }

  loadedCount() {
    let n = 0;
    for (const page of this.results.pages.values()) n += page.length;
    return n;
  }

  /** One step through the hits: a new query is searched first, then its first (or last) hit is shown. */
  async step(dir) {
    const seq = ++this.stepSeq;
    clearTimeout(this.timer);
    if (!this.fresh()) {
      if (this.pending && this.busy) await this.pending;
      if (!this.fresh()) await this.run();
      if (seq !== this.stepSeq) return;
    }
    const r = this.results;
    if (!r || !r.total) return;
    let g = this.current < 0 ? this.firstStep(dir) : this.current + dir;
    if (g >= r.total) g = 0;
    if (g < 0) g = r.total - 1;
    const hit = await this.hitAt(g);
    if (!hit || seq !== this.stepSeq || this.results !== r) return;
    this.current = g;
    this.render();
    this.onGo(hit, g);
  }

  // ---- the count ----------------------------------------------------------------
  render() {
    const r = this.results;
    let text = '';
    let title = '';
    if (this.error) {
      text = this.error;
    } else if (this.busy && !r) {
      text = 'searching…';
    } else if (r) {
      const loaded = this.loadedCount();
      const total = r.total;
      if (!total) {
        text = 'no hits';
      } else {
        text = this.current >= 0 ? `${formatCount(this.current + 1)} of ${formatCount(total)} hits`
          : `${formatCount(total)} ${total === 1 ? 'hit' : 'hits'}`;
        if (loaded < total) {
          text += r.pages.size === 1 && r.pages.has(0) ? ` · first ${formatCount(loaded)} of ${formatCount(total)} shown`
            : ` · ${formatCount(loaded)} of ${formatCount(total)} loaded`;
        }
      }
      if (Number.isFinite(r.names)) title = `${formatCount(total)} events with ${formatCount(r.names)} distinct names match “${isolated(r.q)}”`;
    }
    setText(this.count, text);
    this.count.title = visible(title);
    this.count.classList.toggle('tbr-error', !!this.error);
    this.element.dataset.busy = this.busy ? '1' : '0';
    const steppable = !!this.input.value.trim();
    this.prevButton.disabled = this.nextButton.disabled = !steppable || (!!r && !r.total);
  }
}

function findLastIndex(list, test) {
  for (let j = list.length - 1; j >= 0; j -= 1) if (test(list[j])) return j;
  return -1;
}
