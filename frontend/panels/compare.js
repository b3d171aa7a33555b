// Compare two runs (issue 27): the trace shown against a baseline — another run, or another
// host of this one — over a range of step numbers. The server's `compare` route answers
// as `tb-reduce diff` does: each per-step series as the median, p90 and slowest step of
// both sides, and every name's exact count, self and wall time (a step, when both traces
// have steps), the largest change in self time first. Steps are matched by number, so two
// runs whose profilers started at different steps compare the same steps of training.
import {getJson} from '../api.js';
import {bdi, el, isolated, setChildren} from '../dom.js';
import {formatCount, formatDuration} from '../format.js';

// Names shown before "show all": a table of thousands of rows is no reading.
export const COMPARE_ROWS = 200;
const STEPS = /^\s*(-?\d+)?\s*:\s*(-?\d+)?\s*$/;

const NAME_COLUMNS = [
  {key: 'name', label: 'name', title: 'Event name (click: search it in the timeline)', numeric: false},
  {key: 'count_b', label: 'count base', title: 'Slices of this name in the baseline (a step)', numeric: true},
  {key: 'count_c', label: 'count', title: 'Slices of this name in this trace (a step)', numeric: true},
  {key: 'self_b', label: 'self base', title: 'Self time in the baseline: wall minus direct children', numeric: true},
  {key: 'self_c', label: 'self', title: 'Self time in this trace', numeric: true},
  {key: 'delta', label: 'Δ self', title: 'This trace minus the baseline (sorted by its size by default)', numeric: true},
  {key: 'ratio', label: 'ratio', title: 'Self time here ÷ in the baseline', numeric: true},
  {key: 'wall_b', label: 'wall base', title: 'Wall time in the baseline', numeric: true},
  {key: 'wall_c', label: 'wall', title: 'Wall time in this trace', numeric: true},
];

/** `A:B`, `A:` or `:B` step numbers (both included), or '' for every step; null when not one. */
export function parseSteps(text) {
  const t = String(text ?? '').trim();
  if (!t) return '';
  const m = STEPS.exec(t);
  if (!m || (m[1] === undefined && m[2] === undefined)) return null;
  if (m[1] !== undefined && m[2] !== undefined && Number(m[2]) < Number(m[1])) return null;
  return `${m[1] ?? ''}:${m[2] ?? ''}`;
}

function ms(x) {
  return typeof x === 'number' && Number.isFinite(x) ? formatDuration(x * 1000) : '—';
}

function mb(x) {
  return typeof x === 'number' && Number.isFinite(x) ? `${x.toFixed(x < 10 ? 2 : 1)} MB` : '—';
}

function signedMb(x) {
  if (typeof x !== 'number' || !Number.isFinite(x)) return '—';
  return x > 0 ? `+${mb(x)}` : x < 0 ? `−${mb(-x)}` : '0';
}

function signed(us) {
  if (typeof us !== 'number' || !Number.isFinite(us)) return '—';
  return us > 0 ? `+${formatDuration(us)}` : us < 0 ? `−${formatDuration(-us)}` : '0';
}

function ratio(x) {
  if (typeof x !== 'number' || !Number.isFinite(x)) return '—';
  return x >= 100 ? `${Math.round(x).toLocaleString('en-US')}×` : `${x.toFixed(2)}×`;
}

function change(delta) {
  return delta > 0 ? 'tbr-cmp-up' : delta < 0 ? 'tbr-cmp-down' : '';
}

export class ComparePanel {
  /**
   * onName(name): a name clicked (search it). onChange(): the comparison asked changed
   * (the share link follows it). onOverlay(run): plot the baseline run's steps beside this
   * one's in the waveform panel (aligned by step number there).
   */
  constructor({onName, onChange, onOverlay, onStack} = {}) {
    this.onName = onName || (() => {});
    this.onChange = onChange || (() => {});
    this.onOverlay = onOverlay || (() => {});
    this.onStack = onStack || (() => {});
    this.runs = [];
    this.target = null; // {run, host}: the trace shown
    this.base = null; // {run, host}: the baseline
    this.steps = '';
    this.baseSteps = ''; // the baseline's own step numbers ('' : the same as this trace's)
    this.answer = null;
    this.all = false;
    this.sort = {key: 'delta', dir: -1};
    this.seq = 0;
    this.controller = null;
    this.baseSelect = el('select', {'data-testid': 'compare-base', 'aria-label': 'Baseline', onchange: () => {
      const [run, host] = JSON.parse(this.baseSelect.value);
      this.base = {run, host};
      this.ask();
    }});
    this.stepsInput = el('input', {type: 'text', 'data-testid': 'compare-steps', class: 'tbr-cmp-steps', size: 9,
      placeholder: 'all steps', 'aria-label': 'Step numbers, FIRST:LAST',
      title: 'Step numbers to compare in both, first:last (both included), e.g. 10:50, 10: or :50; empty: every step',
      onkeydown: (e) => {
        if (e.key === 'Enter') this.stepsEntered();
      },
      onchange: () => this.stepsEntered()});
    this.baseStepsInput = el('input', {type: 'text', 'data-testid': 'compare-base-steps', class: 'tbr-cmp-steps', size: 9,
      placeholder: 'the same', 'aria-label': 'The baseline\'s own step numbers, FIRST:LAST',
      title: 'The baseline\'s own step numbers, e.g. 10:20 (empty: the same as this trace\'s): with this trace as its ' +
        'own baseline, one range of its steps against another',
      onkeydown: (e) => {
        if (e.key === 'Enter') this.stepsEntered();
      },
      onchange: () => this.stepsEntered()});
    this.head = el('div', {class: 'tbr-cmp-head'},
      el('span', {class: 'tbr-agg-title'}, 'Compare with'), this.baseSelect,
      el('label', {}, 'its steps ', this.baseStepsInput),
      el('label', {}, 'steps ', this.stepsInput),
      el('span', {class: 'tbr-muted', 'data-testid': 'compare-note'}),
      el('button', {type: 'button', class: 'tbr-agg-close', 'data-testid': 'compare-close',
        'aria-label': 'Close the comparison', title: 'Close', onclick: () => this.close()}, '\u00d7'));
    this.note = this.head.querySelector('[data-testid=compare-note]');
    this.body = el('div', {class: 'tbr-agg-scroll tbr-cmp-body'});
    this.element = el('section', {class: 'tbr-agg tbr-cmp', 'data-testid': 'compare', hidden: true,
      'data-state': 'empty', 'aria-label': 'Comparison with a baseline'}, this.head, this.body);
  }

  get isOpen() {
    return !this.element.hidden;
  }

  /** The runs with traces (the baseline picker's choices): every host of every run. */
  setRuns(runs) {
    this.runs = Array.isArray(runs) ? runs : [];
    this.fillBase();
  }

  fillBase() {
    const options = [];
    for (const r of this.runs) {
      for (const h of r.hosts || []) {
        const mine = this.target && r.run === this.target.run && h.host === this.target.host;
        options.push(el('option', {value: JSON.stringify([r.run, h.host])},
          `${r.run} · ${h.host}${mine ? ' (this trace: give its steps)' : ''}`));
      }
    }
    setChildren(this.baseSelect, options);
    if (this.base) this.baseSelect.value = JSON.stringify([this.base.run, this.base.host]);
  }

  /** Opens (or follows) the comparison of `target` with `base` (default: another trace) over `steps`. */
  open({target, base = null, steps = null, baseSteps = null}) {
    this.target = target;
    if (base) this.base = base;
    if (steps !== null) this.steps = parseSteps(steps) ?? '';
    if (baseSteps !== null) this.baseSteps = parseSteps(baseSteps) ?? '';
    const itself = this.base && this.base.run === target.run && this.base.host === target.host;
    if (!this.base || (itself && !this.baseSteps)) this.base = this.otherThan(target) || this.base;
    this.fillBase();
    this.stepsInput.value = this.steps;
    this.baseStepsInput.value = this.baseSteps;
    this.element.hidden = false;
    if (!this.base) {
      this.element.dataset.state = 'error';
      setChildren(this.body, el('p', {class: 'tbr-muted tbr-agg-empty'}, 'No other trace to compare with: this logdir holds one.'));
      this.onChange();
      return;
    }
    this.ask();
  }

  /** The trace shown changed: the comparison follows it. */
  follow(target) {
    if (!this.isOpen) return;
    if (this.target && target.run === this.target.run && target.host === this.target.host) return;
    this.open({target});
  }

  otherThan(target) {
    const others = [];
    for (const r of this.runs) {
      for (const h of r.hosts || []) if (r.run !== target.run || h.host !== target.host) others.push({run: r.run, host: h.host});
    }
    // another run first (a change against the one before), else another host of this run
    return others.find((o) => o.run !== target.run) || others[0] || null;
  }

  close() {
    this.abort();
    this.seq += 1;
    this.element.hidden = true;
    this.element.dataset.state = 'empty';
    this.answer = null;
    this.onChange();
  }

  /** What a share link carries: null when closed. */
  state() {
    if (!this.isOpen || !this.base) return null;
    return {baseRun: this.base.run, baseHost: this.base.host, steps: this.steps, baseSteps: this.baseSteps};
  }

  stepsEntered() {
    const steps = parseSteps(this.stepsInput.value);
    const baseSteps = parseSteps(this.baseStepsInput.value);
    for (const [input, value] of [[this.stepsInput, steps], [this.baseStepsInput, baseSteps]]) {
      if (value === null) input.setAttribute('aria-invalid', 'true');
      else input.removeAttribute('aria-invalid');
    }
    if (steps === null || baseSteps === null) {
      this.note.textContent = 'steps: give first:last step numbers, e.g. 10:50';
      return;
    }
    if (steps === this.steps && baseSteps === this.baseSteps && this.answer) return;
    this.steps = steps;
    this.baseSteps = baseSteps;
    this.ask();
  }

  abort() {
    if (this.controller) this.controller.abort();
    this.controller = null;
  }

  ask() {
    if (!this.target || !this.base) return;
    this.abort();
    const seq = ++this.seq;
    const controller = new AbortController();
    this.controller = controller;
    this.element.dataset.state = 'loading';
    this.note.textContent = 'comparing…';
    this.onChange();
    const params = {run: this.target.run, host: this.target.host, base_run: this.base.run, base_host: this.base.host};
    if (this.steps) params.steps = this.steps;
    if (this.baseSteps) params.base_steps = this.baseSteps;
    getJson('compare', params, controller.signal).then((answer) => {
      if (seq !== this.seq) return;
      this.answer = answer;
      this.all = false;
      this.element.dataset.state = 'ready';
      this.render();
    }, (err) => {
      if (seq !== this.seq || err.name === 'AbortError') return;
      this.answer = null;
      this.element.dataset.state = 'error';
      this.note.textContent = '';
      setChildren(this.body, el('p', {class: 'tbr-error tbr-agg-error', 'data-testid': 'compare-error'},
        `Could not compare: ${err.message}`));
    }).finally(() => {
      if (this.controller === controller) this.controller = null;
    });
  }

  /** The names' rows in the table's order (for tests). */
  rows() {
    return this.answer ? this.sorted() : [];
  }

  sorted() {
    const rows = (Array.isArray(this.answer.names) ? this.answer.names : []).map((r) => {
      const b = r.base || {};
      const c = r.candidate || {};
      return {...r, count_b: b.count, count_c: c.count, self_b: b.self_us, self_c: c.self_us, wall_b: b.wall_us,
        wall_c: c.wall_us, delta: r.delta_self_us, ratio: r.ratio_self};
    });
    const {key, dir} = this.sort;
    const value = (r) => (key === 'delta' ? Math.abs(Number(r.delta) || 0) : Number(r[key]));
    if (key === 'name') rows.sort((a, b) => dir * String(a.name).localeCompare(String(b.name)));
    else {
      rows.sort((a, b) => (a.marker === b.marker ? 0 : a.marker ? 1 : -1) ||
        dir * ((Number.isFinite(value(a)) ? value(a) : -Infinity) - (Number.isFinite(value(b)) ? value(b) : -Infinity)) ||
        String(a.name).localeCompare(String(b.name)));
    }
    return rows;
  }

  setSort(key) {
    if (this.sort.key === key) this.sort = {key, dir: -this.sort.dir};
    else this.sort = {key, dir: key === 'name' ? 1 : -1};
    this.render();
  }

  render() {
    const a = this.answer;
    if (!a) return;
    const side = (s) => (s.steps ? `${formatCount(s.steps)} steps, ${s.first_step} to ${s.last_step}` :
      'no steps: the whole trace');
    this.note.textContent = '';
    const summary = el('p', {class: 'tbr-cmp-sides', 'data-testid': 'compare-sides'},
      el('span', {class: 'tbr-cmp-tag'}, 'baseline'), ' ', bdi(a.base.trace), ` (${side(a.base)}) · `,
      el('span', {class: 'tbr-cmp-tag'}, 'this trace'), ' ', bdi(a.candidate.trace), ` (${side(a.candidate)})`,
      a.per_step ? el('span', {class: 'tbr-muted'}, ' · names per step') :
        el('span', {class: 'tbr-muted'}, ' · names in all (a side has no steps)'),
      this.base && this.target && this.base.run !== this.target.run && a.base.steps && a.candidate.steps
        ? el('button', {type: 'button', class: 'tbr-button tbr-cmp-overlay', 'data-testid': 'compare-overlay',
          title: 'Tick the baseline run in the waveform panel: both runs\' steps on one axis, by step number',
          onclick: () => this.onOverlay(this.base.run)}, 'Overlay steps in the waveforms') : null,
      this.base && a.base.steps && a.candidate.steps
        ? el('button', {type: 'button', class: 'tbr-button tbr-cmp-overlay', 'data-testid': 'compare-stack',
          title: 'The baseline\'s timeline under this one, zoomed and panned with it, aligned at the first step both show',
          onclick: () => this.onStack(this.baseSteps
            // one range of steps against another: each side's own first step under the other's
            ? {base: this.base, first: Number(a.candidate.first_step), firstBase: Number(a.base.first_step)}
            // the same steps of two runs: the first step number both show, under itself
            : {base: this.base, first: Math.max(Number(a.base.first_step), Number(a.candidate.first_step))})},
        'Stack the timelines') : null);
    const seriesRows = (a.series || []).map((r) => {
      const b = r.base || {};
      const c = r.candidate || {};
      const memory = r.unit === 'MB';
      const value = memory ? mb : ms;
      const delta = typeof r.delta === 'number' ? r.delta : NaN;
      return el('tr', {'data-series': r.series},
        el('td', {}, memory ? `${r.series.replace(/^memory_peak_mb_/, 'memory peak, ')} (MB)` : r.series),
        el('td', {class: 'tbr-num'}, value(b.median)),
        el('td', {class: 'tbr-num'}, value(c.median)),
        el('td', {class: `tbr-num ${change(delta)}`}, memory ? signedMb(delta) : signed(delta * 1000)),
        el('td', {class: `tbr-num ${change(delta)}`}, ratio(r.ratio)),
        el('td', {class: 'tbr-num'}, value(b.p90)),
        el('td', {class: 'tbr-num'}, value(c.p90)),
        el('td', {class: 'tbr-num'}, c.slowest === undefined ? '—' : `${value(c.slowest)} (step ${c.slowest_step})`));
    });
    const series = seriesRows.length ? el('table', {class: 'tbr-agg-table tbr-cmp-series', 'data-testid': 'compare-series'},
      el('caption', {}, 'Per step: medians over the chosen steps of each, so one slow step moves them little'),
      el('thead', {}, el('tr', {}, ['series', 'base median', 'median', 'Δ', 'ratio', 'base p90', 'p90', 'largest (step)'].map(
        (h, i) => el('th', {scope: 'col', class: i ? 'tbr-num' : ''}, h)))),
      el('tbody', {}, seriesRows)) : null;
    const rows = this.sorted();
    const shown = this.all ? rows : rows.slice(0, COMPARE_ROWS);
    const head = el('tr', {}, NAME_COLUMNS.map((c) => {
      const active = this.sort.key === c.key;
      return el('th', {scope: 'col', class: c.numeric ? 'tbr-num' : '',
        'aria-sort': active ? (this.sort.dir > 0 ? 'ascending' : 'descending') : 'none'},
      el('button', {type: 'button', class: 'tbr-agg-sort', 'data-testid': `compare-sort-${c.key}`, title: `${c.title} — click to sort`,
        onclick: () => this.setSort(c.key)}, c.label, el('span', {class: 'tbr-agg-arrow', 'aria-hidden': 'true'},
        active ? (this.sort.dir > 0 ? ' \u25b4' : ' \u25be') : '')));
    }));
    const body = shown.map((r) => el('tr', {class: `tbr-agg-row${r.marker ? ' tbr-cmp-marker' : ''}`, tabindex: '0',
      'data-name': r.name, title: `Search “${isolated(r.name)}”`, onclick: () => this.onName(r.name),
      onkeydown: (e) => {
        if (e.key === 'Enter' || e.key === ' ') {
          e.preventDefault();
          this.onName(r.name);
        }
      }},
    el('td', {class: 'tbr-agg-name'}, bdi(r.name),
      r.only_in ? el('span', {class: 'tbr-cmp-only', 'data-testid': 'compare-only'}, r.only_in === 'base' ? ' gone' : ' new') : null,
      r.marker ? el('span', {class: 'tbr-cmp-only'}, ' marker') : null),
    el('td', {class: 'tbr-num'}, r.count_b === undefined ? '—' : formatCount(r.count_b)),
    el('td', {class: 'tbr-num'}, r.count_c === undefined ? '—' : formatCount(r.count_c)),
    el('td', {class: 'tbr-num'}, formatDuration(r.self_b)),
    el('td', {class: 'tbr-num'}, formatDuration(r.self_c)),
    el('td', {class: `tbr-num ${change(r.delta)}`}, signed(r.delta)),
    el('td', {class: `tbr-num ${change(r.delta)}`}, ratio(r.ratio)),
    el('td', {class: 'tbr-num'}, formatDuration(r.wall_b)),
    el('td', {class: 'tbr-num'}, formatDuration(r.wall_c))));
    const more = rows.length > shown.length ? el('button', {type: 'button', class: 'tbr-button', 'data-testid': 'compare-all',
      onclick: () => {
        this.all = true;
        this.render();
      }}, `show all ${formatCount(rows.length)} names`) : null;
    const names = el('table', {class: 'tbr-agg-table tbr-cmp-names', 'data-testid': 'compare-names'},
      el('caption', {}, a.names_total > rows.length
        ? `The ${formatCount(rows.length)} names of ${formatCount(a.names_total)} that changed most, exact over the chosen steps · `
        : 'Every name, exact over the chosen steps (folded events included) · ',
        el('span', {class: 'tbr-muted'}, 'largest change in self time first; click a column to sort, a row to search its name')),
      el('thead', {}, head), el('tbody', {}, body));
    setChildren(this.body, summary, series, names, more);
  }
}
