// The waveform panel above the timeline (SPEC §8): one series — derived from the
// trace per step (step time, busy time per category) or a scalar tag of the run's
// event files — for each ticked run, as (step, value) dots joined by straight
// segments, with TensorBoard's smoothing over the faint raw curve. The edge cases
// are drawn as the numbers are and counted in the legend: a lone point is a dot,
// NaN/Inf leave a gap with a marker, a step that goes back is drawn going back.
// Clicking a step of a derived series shows that step in the timeline. A step the
// live sidecar kept as an anomaly (an anomaly run whose report names the shown
// window) gets an orange ⚠ above the plot; clicking it opens that anomaly run.
//
// Unaccounted time (the `unaccounted_ms` series: step time no op on the step's thread
// covers, docs/SEMANTICS.md rule 12) is shown without being asked for when it stands
// out (the server's `unaccounted_stands_out`): with step time selected, the current
// run's unaccounted series is overlaid dashed, its standing-out steps ringed and named,
// and a line under the plot says why (a "hide" button takes it away). A stall inside a
// `record_function` need not make its step one of the slowest in a run whose steps
// drift; this is where it shows. "Slowest" rings mark only the steps the server found
// to stand out by a robust margin; the legend says "no step stands out" otherwise.
//
// The Runs checklist holds any number of runs: a scrolling grid at most eight rows
// high, a filter box past ten runs, and "all"/"none" for the runs the filter shows.
import {fetchTags, fetchScalars, fetchWaveforms} from '../api.js';
import {bdi, el, isolated, setChildren, setText, showControls, sizeCanvas} from '../dom.js';
import {formatCount, formatDuration} from '../format.js';
import {COLORS} from '../tracks/common.js';
import {classicSmoothing, DEFAULT_SMOOTHING, MAX_SMOOTHING, toNumber} from '../smoothing.js';
import {analyzeSeries, anomaliesOf, anomalySummary, finiteRange, formatValue, niceTicks, padRange, planSeries,
  robustSpread, seriesColor} from './series_draw.js';

const PLOT_H = 170;
const MARGIN = {left: 58, right: 14, top: 16, bottom: 22};
const FONT = '11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
const HOVER_PX = 28;
const ANOMALY_COLOR = '#e8710a';
const ANOMALY_PX = 8; // half-width of an anomaly's ⚠ above the plot, for hover and click
const STORE = 'tbReduce.waveforms';
const DERIVED_LABELS = {
  step_time_ms: 'step time',
  compute_ms: 'compute',
  communication_ms: 'communication',
  memory_ms: 'memory',
  data_loading_ms: 'data loading',
  device_idle_ms: 'device idle',
  unaccounted_ms: 'unaccounted',
};
const UNACCOUNTED = 'unaccounted_ms';
const RUN_FILTER_FROM = 11; // the checklist gets a filter box from this many runs

/** "compute_ms" → "compute (ms)", "memory_peak_mb_cpu" → "memory peak, cpu (MB)": derived series names read as words. */
export function derivedLabel(name) {
  const memory = /^memory_peak_mb_(.+)$/.exec(name);
  if (memory) return `memory peak, ${memory[1]} (MB)`;
  const base = DERIVED_LABELS[name] || name.replace(/_ms$/, '').replace(/_/g, ' ');
  return /_ms$/.test(name) ? `${base} (ms)` : base;
}

/**
 * A derived series' value of one step: step_time_ms itself, X_ms the busy time of category X,
 * memory_peak_mb_<device> the step's peak allocated memory on that device.
 */
export function derivedValue(step, name) {
  if (name === 'step_time_ms') return toNumber(step.step_time_ms);
  if (/^memory_peak_mb_/.test(name)) {
    const memory = step.memory_mb || {};
    return name in memory ? toNumber(memory[name]) : NaN;
  }
  const busy = step.busy_ms || {};
  const key = name.replace(/_ms$/, '');
  return key in busy ? toNumber(busy[key]) : NaN;
}

function load(key, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(`${STORE}.${key}`));
    return v === null ? fallback : v;
  } catch {
    return fallback;
  }
}

function save(key, value) {
  try {
    localStorage.setItem(`${STORE}.${key}`, JSON.stringify(value));
  } catch {
    // storage blocked (sandboxed iframe): the setting lasts this page only
  }
}

/**
 * The counts of a series' analysis over every point: from the server's `summary` when
 * it sent only the points the plot's pixels show (their own counts would be fewer).
 */
export function withSummary(a, summary) {
  const out = {...a, reversalCount: a.reversals.length};
  if (!summary) return out;
  const num = (v, d) => (Number.isFinite(Number(v)) ? Number(v) : d);
  out.n = num(summary.points, a.n);
  out.nan = num(summary.nan, a.nan);
  out.posInf = num(summary.pos_inf, a.posInf);
  out.negInf = num(summary.neg_inf, a.negInf);
  out.finite = out.n - out.nan - out.posInf - out.negInf;
  out.reversalCount = num(summary.reversals, out.reversalCount);
  return out;
}

export class WaveformPanel {
  /**
   * `onStep(run, host, step)`: a step of a derived series was clicked.
   * `onWaveform(wave | null)`: the step-time series of the timeline's run and host, for its track.
   * `onRun(run)`: an anomaly's ⚠ (or its link in the legend) was clicked: show that anomaly run.
   */
  constructor(container, {onStep, onWaveform, onRun} = {}) {
    this.onStep = onStep || (() => {});
    this.onRun = onRun || (() => {});
    this.onWaveform = onWaveform || (() => {});
    this.runs = [];
    this.run = null;
    this.host = null;
    this.ticked = new Set(); // runs overlaid besides the current one, ticked by the user
    this.unticked = false; // the user unticked the current run
    this.seriesKey = load('series', null); // 'd:step_time_ms' or 's:<tag>'
    this.hideUnaccounted = !!load('hideUnaccounted', false); // the user took the overlay away
    this.runFilter = '';
    this.weight = Math.min(MAX_SMOOTHING, Math.max(0, Number(load('smoothing', DEFAULT_SMOOTHING)) || 0));
    this.split = false;
    this.cache = new Map(); // request key → promise of its JSON
    this.known = new Map(); // run/host → its waveforms JSON, once arrived
    this.lastTags = null;
    this.entries = [];
    this.seq = 0;
    this.hover = null;
    this.plan = null;
    this.anomalyMarks = []; // the ⚠ drawn: {entry, mark, index, x, y}
    this.frameRequested = false;
    this.build(container, !!load('collapsed', false));
  }

  // ---- DOM -----------------------------------------------------------------
  build(container, collapsed) {
    this.toggle = el('button', {type: 'button', class: 'tbr-wave-toggle', 'data-testid': 'wave-toggle',
      'aria-expanded': String(!collapsed), title: 'Show or hide the waveforms', onclick: () => this.setCollapsed(!this.collapsed)},
    'Waveforms');
    this.seriesSelect = el('select', {'data-testid': 'wave-series', 'aria-label': 'Series',
      onchange: () => this.pickSeries(this.seriesSelect.value)});
    this.slider = el('input', {type: 'range', min: '0', max: String(MAX_SMOOTHING), step: '0.001', value: String(this.weight),
      'data-testid': 'wave-smoothing', 'aria-label': 'Smoothing', oninput: () => this.setWeight(Number(this.slider.value))});
    this.sliderValue = el('output', {class: 'tbr-wave-weight'}, this.weight.toFixed(3));
    this.splitBox = el('input', {type: 'checkbox', 'data-testid': 'wave-split', onchange: () => this.setSplit(this.splitBox.checked)});
    this.runList = el('div', {class: 'tbr-wave-runs-list', 'data-testid': 'wave-runs-list'});
    this.runFilterBox = el('input', {type: 'search', class: 'tbr-wave-runs-filter', 'data-testid': 'wave-runs-filter',
      placeholder: 'filter runs', 'aria-label': 'Filter the runs', oninput: () => this.setRunFilter(this.runFilterBox.value)});
    this.runCount = el('span', {class: 'tbr-wave-runs-count', 'data-testid': 'wave-runs-count'});
    const bulk = (on) => el('button', {type: 'button', class: 'tbr-button tbr-wave-runs-bulk', 'data-testid': `wave-runs-${on ? 'all' : 'none'}`,
      title: on ? 'Tick every run the filter shows' : 'Untick every run the filter shows', onclick: () => this.tickShown(on)}, on ? 'all' : 'none');
    this.runHead = el('div', {class: 'tbr-wave-runs-head'}, el('span', {class: 'tbr-wave-runs-title'}, 'Runs'), this.runCount,
      this.runFilterBox, bulk(true), bulk(false));
    this.runBox = el('div', {class: 'tbr-wave-runs', 'data-testid': 'wave-runs', role: 'group', 'aria-label': 'Runs to overlay'},
      this.runHead, this.runList);
    this.reload = el('button', {type: 'button', class: 'tbr-button tbr-wave-reload', title: 'Read the series again (event files grow while training)',
      onclick: () => this.refresh(true)}, 'Reload');
    this.canvas = el('canvas', {class: 'tbr-wave-canvas', 'data-testid': 'wave-canvas', role: 'img',
      'aria-label': 'Waveforms: hover for values, click a step of a derived series to show it in the timeline'});
    this.tooltip = el('div', {class: 'tbr-wave-tooltip', role: 'tooltip', hidden: true});
    this.empty = el('div', {class: 'tbr-wave-empty', 'data-testid': 'wave-empty', hidden: true});
    this.plot = el('div', {class: 'tbr-wave-plot'}, this.canvas, this.tooltip, this.empty);
    this.legend = el('ul', {class: 'tbr-wave-legend', 'data-testid': 'wave-legend', 'aria-label': 'Legend'});
    this.note = el('div', {class: 'tbr-wave-note', 'data-testid': 'wave-note', role: 'status'});
    this.unaccText = el('span', {});
    this.unaccButton = el('button', {type: 'button', class: 'tbr-wave-anomaly-link', 'data-testid': 'wave-unaccounted-toggle',
      onclick: () => this.setHideUnaccounted(!this.hideUnaccounted)});
    this.unaccNote = el('div', {class: 'tbr-wave-note tbr-wave-unaccounted', 'data-testid': 'wave-unaccounted', role: 'status',
      hidden: true}, this.unaccText, ' ', this.unaccButton);
    this.body = el('div', {class: 'tbr-wave-body'}, this.plot, this.legend);
    this.root = el('section', {class: 'tbr-wave', 'data-testid': 'waveforms', 'data-state': 'idle', 'aria-label': 'Waveforms'},
      el('div', {class: 'tbr-wave-head'}, this.toggle,
        el('label', {}, 'Series ', this.seriesSelect),
        el('label', {title: 'TensorBoard\'s smoothing: a debiased exponential moving average; the raw curve stays faint behind'},
          'Smoothing ', this.slider, this.sliderValue),
        el('label', {class: 'tbr-check', title: 'Draw each restart (a step not above the one before it) as its own line'},
          this.splitBox, ' Split at restarts'),
        this.reload, this.runBox),
      this.body, this.unaccNote, this.note);
    container.append(this.root);
    this.ctx = this.canvas.getContext('2d');
    this.setCollapsed(collapsed, false);
    this.canvas.addEventListener('pointermove', (e) => this.onMove(e));
    this.canvas.addEventListener('pointerleave', () => this.setHover(null));
    this.canvas.addEventListener('click', (e) => this.onClick(e));
    new ResizeObserver(() => this.requestDraw()).observe(this.plot);
  }

  setCollapsed(collapsed, remember = true) {
    this.collapsed = collapsed;
    this.root.dataset.collapsed = collapsed ? '1' : '0';
    this.toggle.setAttribute('aria-expanded', String(!collapsed));
    this.body.hidden = collapsed;
    if (remember) save('collapsed', collapsed);
    if (!collapsed) this.requestDraw();
  }

  /** One line under the plot: what failed, or what the reader skipped. */
  setNote(text, kind = '') {
    setText(this.note, text);
    this.note.className = `tbr-wave-note ${kind}`;
    this.note.setAttribute('role', kind === 'tbr-error' ? 'alert' : 'status');
  }

  // ---- context and choices -------------------------------------------------
  /** The timeline's run and host changed (or the run list arrived). */
  setContext({runs, run, host}) {
    const previous = this.run;
    if (run !== previous) {
      // Switching to an overlaid run (a click on one of its steps) keeps the overlay
      // as it was; picking another run in the bar starts from that run alone.
      if (this.ticked.has(run) && previous && !this.unticked) this.ticked.add(previous);
      this.ticked.delete(run);
      this.unticked = false;
    }
    this.runs = runs || [];
    this.run = run;
    this.host = host;
    this.onWaveform(null);
    this.renderRuns();
    this.refresh(false);
  }

  shownRuns() {
    return this.runs.map((r) => r.run).filter((r) => (r === this.run ? !this.unticked : this.ticked.has(r)));
  }

  /** The Runs checklist: a scrolling grid of checkboxes, filtered by the filter box (shown past ten runs). */
  renderRuns() {
    const many = this.runs.length > 1;
    this.runBox.hidden = !many;
    const filtering = this.runs.length >= RUN_FILTER_FROM;
    this.runFilterBox.hidden = !filtering;
    if (!filtering && this.runFilter) this.runFilter = this.runFilterBox.value = '';
    setChildren(this.runList, many ? this.runs.map((r) => {
      const on = r.run === this.run ? !this.unticked : this.ticked.has(r.run);
      const box = el('input', {type: 'checkbox', checked: on, 'data-run': r.run, onchange: () => {
        this.setTicked(r.run, box.checked);
        this.renderRunCount();
        this.refresh(false);
      }});
      return el('label', {class: `tbr-check${r.run === this.run ? ' tbr-wave-current' : ''}`, 'data-run': r.run,
        title: `${r.run}\n${r.run === this.run ? 'the run in the timeline' : 'overlay this run'}`}, box, ' ', bdi(r.run));
    }) : null);
    this.applyRunFilter();
  }

  /** Ticks or unticks one run (the current run's box says whether it is shown). */
  setTicked(run, on) {
    if (run === this.run) this.unticked = !on;
    else if (on) this.ticked.add(run);
    else this.ticked.delete(run);
  }

  setRunFilter(text) {
    this.runFilter = String(text || '');
    this.applyRunFilter();
  }

  /** The runs the filter shows (case-insensitive substring; all when empty). */
  filteredRuns() {
    const q = this.runFilter.trim().toLowerCase();
    return this.runs.map((r) => r.run).filter((run) => !q || run.toLowerCase().includes(q));
  }

  applyRunFilter() {
    const keep = new Set(this.filteredRuns());
    for (const label of this.runList.children) label.hidden = !keep.has(label.dataset.run);
    this.renderRunCount();
  }

  renderRunCount() {
    const shown = this.shownRuns().length;
    const listed = this.filteredRuns().length;
    const n = this.runs.length;
    setText(this.runCount, `${formatCount(shown)} of ${formatCount(n)} ticked${listed < n ? ` · ${formatCount(listed)} match` : ''}`);
  }

  /** "all"/"none": tick or untick every run the filter shows, then plot once. */
  tickShown(on) {
    for (const run of this.filteredRuns()) this.setTicked(run, on);
    for (const box of this.runList.querySelectorAll('input[data-run]')) {
      box.checked = box.dataset.run === this.run ? !this.unticked : this.ticked.has(box.dataset.run);
    }
    this.renderRunCount();
    this.refresh(false);
  }

  setHideUnaccounted(hide) {
    this.hideUnaccounted = hide;
    save('hideUnaccounted', hide);
    this.refresh(false);
  }

  pickSeries(key) {
    this.seriesKey = key;
    save('series', key);
    this.refresh(false);
  }

  setWeight(w) {
    this.weight = Math.min(MAX_SMOOTHING, Math.max(0, Number.isFinite(w) ? w : 0));
    this.sliderValue.textContent = this.weight.toFixed(3);
    save('smoothing', this.weight);
    for (const e of this.entries) if (e.ys) e.smooth = classicSmoothing(e.ys, this.weight);
    this.renderLegend();
    this.requestDraw();
  }

  setSplit(on) {
    this.split = on;
    for (const e of this.entries) if (e.xs) e.analysis = withSummary(analyzeSeries(e.xs, e.ys, {split: on}), e.summary);
    this.renderLegend();
    this.requestDraw();
  }

  // ---- fetching --------------------------------------------------------------
  cached(key, fn) {
    if (!this.cache.has(key)) {
      const p = fn();
      this.cache.set(key, p);
      p.catch(() => this.cache.delete(key)); // a failure is asked again next time
    }
    return this.cache.get(key);
  }

  /** The width scalars are asked at: the plot's, in device pixels, rounded up to 256 (a resize by a few pixels asks nothing again). */
  fetchWidth() {
    const css = Math.max(256, Math.floor(this.plot.getBoundingClientRect().width) || 1024);
    return Math.min(65536, Math.ceil((css * (window.devicePixelRatio || 1)) / 256) * 256);
  }

  tags(run) {
    return this.cached(`t\u0000${run}`, () => fetchTags(run));
  }

  /** The per-step series of a run's host; remembered once they arrive (for the series picker). */
  waves(run, host) {
    return this.cached(`w\u0000${run}\u0000${host}`, () => fetchWaveforms(run, host).then((doc) => {
      this.known.set(`${run}\u0000${host}`, doc);
      return doc;
    }));
  }

  /** The host a derived series of `run` is read from: the timeline's, else one of the same name, else the first. */
  hostFor(run) {
    if (run === this.run) return this.host;
    const info = this.runs.find((r) => r.run === run);
    if (!info || !info.hosts.length) return null;
    return (info.hosts.find((h) => h.host === this.host) || info.hosts[0]).host;
  }

  /** Lists the series (a changed run re-lists), then loads the chosen one for every ticked run. */
  async refresh(reload) {
    const seq = ++this.seq;
    if (reload) {
      this.cache.clear();
      this.known.clear();
    }
    this.hover = null;
    this.hideTooltip();
    this.root.hidden = !this.run; // no runs: the timeline's message says why
    if (!this.run) {
      this.entries = [];
      this.setState('ready');
      setChildren(this.seriesSelect);
      this.renderLegend();
      this.showEmpty('No runs to plot.');
      return;
    }
    this.setState('loading');
    this.setNote('');
    // The host's derived series are known once its steps are (the `tags` route lists
    // them only when they have been derived already): ask for them at once, and
    // re-list the series when they arrive.
    const run = this.run;
    const host = this.host;
    if (host) {
      this.waves(run, host).then((doc) => {
        if (seq !== this.seq || run !== this.run || host !== this.host) return;
        const before = this.seriesKey;
        this.fillSeries(this.lastTags, doc);
        if (this.seriesKey !== before) this.refresh(false);
      }, () => {}); // a derived entry shows the failure
    }
    let tags;
    this.tagsError = '';
    try {
      tags = await this.tags(this.run);
    } catch (err) {
      if (seq !== this.seq) return;
      tags = null;
      this.tagsError = `Could not list the series of ${this.run}: ${err.message}`;
      this.setNote(this.tagsError, 'tbr-error');
    }
    if (seq !== this.seq) return;
    this.lastTags = tags;
    this.fillSeries(tags, this.known.get(`${run}\u0000${host}`));
    const key = this.seriesKey;
    if (!key) {
      this.entries = [];
      this.setState(tags ? 'ready' : 'error');
      this.renderLegend();
      this.showEmpty(tags ? 'This run has no series: no scalar tags in its event files and no trace host.' : 'No series.');
      this.requestDraw();
      return;
    }
    const derived = key.startsWith('d:');
    const name = key.slice(2);
    const runs = this.shownRuns();
    // The timeline's step-time track goes with a derived series of its own run (fed when its steps arrive).
    if (!derived || !runs.includes(this.run)) this.onWaveform(null);
    // A run keeps its colour whatever else is ticked: its place in the run list picks it.
    const colorOf = (run) => seriesColor(Math.max(0, this.runs.findIndex((r) => r.run === run)));
    this.entries = runs.map((run) => ({run, host: derived ? this.hostFor(run) : null, derived, name,
      color: colorOf(run), status: 'loading', message: 'loading…', anomalies: anomaliesOf(this.runs, run)}));
    // Step time of the current run: its unaccounted time rides along, shown only if it stands out (`fill`).
    if (derived && name === 'step_time_ms' && runs.includes(this.run) && this.host) {
      this.entries.push({run: this.run, host: this.host, derived, name: UNACCOUNTED, overlay: true,
        color: colorOf(this.run), status: 'loading', message: 'loading…', anomalies: []});
    }
    this.renderLegend();
    this.showEmpty(runs.length ? 'Loading…' : 'Tick a run to plot.');
    this.requestDraw();
    if (!runs.length) {
      this.setState('ready');
      return;
    }
    await Promise.all(this.entries.map((entry) => this.fill(entry, seq, tags)));
    if (seq !== this.seq) return;
    this.setState(this.entries.some((e) => e.status === 'error') ? 'error' : 'ready');
    this.noteAll();
  }

  /**
   * The series picker: the host's derived series (from its steps when known, else as
   * `tags` lists them, else step time alone, which says why when there are no
   * steps), then the run's scalar tags.
   */
  fillSeries(tags, wave) {
    const host = tags && Array.isArray(tags.hosts) ? tags.hosts.find((h) => h.host === this.host) : null;
    let derived = [];
    if (wave && Array.isArray(wave.series) && wave.series.length) derived = wave.series;
    else if (host && Array.isArray(host.series) && host.series.length) derived = host.series;
    else if (this.host) derived = ['step_time_ms'];
    const scalars = tags && Array.isArray(tags.scalars) ? tags.scalars : [];
    const keys = [...derived.map((s) => `d:${s}`), ...scalars.map((s) => `s:${s.tag}`)];
    setChildren(this.seriesSelect,
      derived.length ? el('optgroup', {label: `From the trace of ${this.host}, per step`},
        derived.map((s) => el('option', {value: `d:${s}`}, derivedLabel(s)))) : null,
      scalars.length ? el('optgroup', {label: 'Scalars (event files)'},
        scalars.map((s) => el('option', {value: `s:${s.tag}`}, `${isolated(s.tag)} (${formatCount(s.points)})`))) : null);
    if (!keys.includes(this.seriesKey)) {
      const sameTag = this.seriesKey && keys.find((k) => k.slice(2) === this.seriesKey.slice(2));
      this.seriesKey = sameTag || keys[0] || null;
    }
    this.seriesSelect.disabled = !keys.length;
    if (this.seriesKey) this.seriesSelect.value = this.seriesKey;
  }

  async fill(entry, seq, currentTags) {
    const {run, host, derived, name} = entry;
    try {
      if (derived) {
        if (!host) throw Object.assign(new Error('no trace host in this run'), {missing: true});
        const doc = await this.waves(run, host);
        if (seq !== this.seq) return;
        const steps = Array.isArray(doc.steps) ? doc.steps : [];
        entry.steps = steps;
        entry.marker = doc.marker;
        const indices = (list) => (Array.isArray(list) ? list.filter((i) => Number.isInteger(i) && i >= 0 && i < steps.length) : []);
        entry.slowest = entry.overlay || name === UNACCOUNTED ? [] : indices(doc.slowest);
        entry.standsOut = indices(doc.unaccounted_stands_out); // steps whose unaccounted time stands out
        if (entry.overlay && (this.hideUnaccounted || !entry.standsOut.length)) {
          entry.status = 'off'; // nothing to say: the overlay stays away
          entry.xs = entry.ys = entry.smooth = null;
          this.renderUnaccounted();
          return;
        }
        entry.xs = steps.map((s) => s.step);
        entry.ys = steps.map((s) => derivedValue(s, name));
        if (!steps.length) {
          entry.status = 'nosteps';
          entry.message = `no steps: ${doc.reason || 'the trace has no step markers'}`;
        }
        if (run === this.run && host === this.host && !entry.overlay) this.feedTimeline(doc);
      } else {
        const tags = run === this.run && currentTags ? currentTags : await this.tags(run);
        if (seq !== this.seq) return;
        const listed = (tags.scalars || []).find((s) => s.tag === name);
        if (!listed) {
          throw Object.assign(new Error(`no tag “${isolated(name)}” in this run`), {missing: true});
        }
        // By id (a tag may be too long for a URL), at the plot's width: a 2 M-point tag
        // arrives as the few thousand points its pixel columns show (the legend's counts
        // come from the server's summary of every point).
        const width = this.fetchWidth();
        const doc = await this.cached(`s\u0000${run}\u0000${name}\u0000${width}`,
          () => fetchScalars(run, name, {id: listed.id, width}));
        if (seq !== this.seq) return;
        const points = Array.isArray(doc.points) ? doc.points : [];
        entry.xs = points.map((p) => Number(p[0]));
        entry.wall = points.map((p) => Number(p[1]));
        entry.ys = points.map((p) => toNumber(p[2]));
        entry.gaps = doc.gaps || [];
        entry.pending = doc.pending_bytes || 0;
        entry.summary = doc.downsampled && doc.summary ? doc.summary : null;
      }
      entry.smooth = classicSmoothing(entry.ys, this.weight);
      entry.analysis = withSummary(analyzeSeries(entry.xs, entry.ys, {split: this.split}), entry.summary);
      if (entry.status === 'loading') {
        entry.status = entry.xs.length ? 'ok' : 'empty';
        entry.message = entry.xs.length ? '' : 'empty series: no points';
      }
    } catch (err) {
      if (seq !== this.seq) return;
      if (entry.overlay) { // the step-time entry says what failed
        entry.status = 'off';
        entry.xs = entry.ys = entry.smooth = null;
        return;
      }
      entry.status = err.missing ? 'missing' : 'error';
      entry.message = err.missing ? err.message : `could not load: ${err.message}`;
      entry.xs = entry.ys = entry.smooth = null;
    }
    this.renderLegend();
    this.renderUnaccounted();
    this.requestDraw();
  }

  /** The entries on show: an overlay that stays away (or is not there yet) is not one. */
  visibleEntries() {
    return this.entries.filter((e) => !e.overlay || e.status === 'ok');
  }

  /**
   * The line under the plot when unaccounted time stands out in a shown entry: which step,
   * how much, against what, and that it is overlaid (with a button to hide or show it).
   */
  renderUnaccounted() {
    const source = this.entries.find((e) => e.overlay && e.status === 'ok')
      || this.entries.find((e) => e.name === UNACCOUNTED && e.status === 'ok' && e.standsOut && e.standsOut.length);
    const hidden = this.entries.find((e) => e.overlay && e.status === 'off' && e.standsOut && e.standsOut.length);
    const e = source || (this.hideUnaccounted ? hidden : null);
    this.unaccNote.hidden = !e;
    this.root.dataset.unaccounted = e ? String(e.steps[e.standsOut[0]].step) : '';
    if (!e) return;
    const i = e.standsOut[0];
    const ms = derivedValue(e.steps[i], UNACCOUNTED);
    const spread = robustSpread(e.steps.map((st) => toNumber(st.step_time_ms)));
    const median = spread ? spread.median : NaN;
    const more = e.standsOut.length > 1 ? ` (and step${e.standsOut.length > 2 ? 's' : ''} ${e.standsOut.slice(1).map((j) => e.steps[j].step).join(', ')})` : '';
    setText(this.unaccText, `Unaccounted time stands out: step ${e.steps[i].step} has ${formatDuration(ms * 1000)} that no op on its thread ` +
      `accounts for${more}, against a median step of ${formatDuration(median * 1000)}` +
      (e.name === UNACCOUNTED && !e.overlay ? '.' : e.status === 'ok' ? ' — overlaid dashed on step time.' : ' — hidden.'));
    this.unaccButton.hidden = !(e.overlay || hidden);
    setText(this.unaccButton, this.hideUnaccounted ? 'show it' : 'hide it');
  }

  /** The step-time track of the timeline: its run and host's steps, slowest marked. */
  feedTimeline(doc) {
    const steps = Array.isArray(doc.steps) ? doc.steps : [];
    if (!steps.length) {
      this.onWaveform(null);
      return;
    }
    this.onWaveform({
      name: 'step_time_ms',
      label: `step time (ms)${doc.marker ? ` · ${doc.marker}` : ''}`,
      points: steps.map((s) => ({t0: s.start_us, t1: s.end_us, value: toNumber(s.step_time_ms), step: s.step})),
      marked: Array.isArray(doc.slowest) ? doc.slowest.slice() : [],
    });
  }

  /** What the event-file reader skipped or has not read yet, as one line. */
  noteAll() {
    const errors = [this.tagsError, ...this.entries.filter((e) => e.status === 'error').map((e) => `${e.run}: ${e.message}`)]
      .filter(Boolean);
    if (errors.length) {
      this.setNote(errors.join(' · '), 'tbr-error');
      return;
    }
    const parts = [];
    for (const e of this.entries) {
      if (e.gaps && e.gaps.length) {
        const skipped = e.gaps.reduce((a, g) => a + (Number(g.skipped) || 0), 0);
        parts.push(`${e.run}: ${e.gaps.length} damaged stretch${e.gaps.length > 1 ? 'es' : ''} of event file skipped (${formatCount(skipped)} bytes; ${e.gaps[0].reason})`);
      }
      if (e.pending) parts.push(`${e.run}: ${formatCount(e.pending)} bytes at the end of an event file not read yet (a record being written)`);
    }
    this.setNote(parts.join(' · '), parts.length ? 'tbr-warn' : '');
  }

  // ---- legend ----------------------------------------------------------------
  renderLegend() {
    setChildren(this.legend, this.visibleEntries().map((e) => {
      const a = e.analysis;
      const swatch = el('span', {class: 'tbr-wave-swatch', 'aria-hidden': 'true'});
      swatch.style.background = e.color; // CSSOM, not a style attribute: TensorBoard's CSP allows it
      if (e.overlay) swatch.style.background = `repeating-linear-gradient(90deg, ${e.color} 0 3px, transparent 3px 5px)`;
      const li = el('li', {class: 'tbr-wave-entry', 'data-run': e.run, 'data-host': e.host || '', 'data-status': e.status,
        'data-color': e.color, 'data-series': e.name, 'data-overlay': e.overlay ? '1' : ''}, swatch,
      el('span', {class: 'tbr-wave-name'}, e.host ? [bdi(e.run), ' / ', bdi(e.host)] : bdi(e.run),
        e.overlay ? ` — ${derivedLabel(e.name)}, dashed` : ''));
      const bits = [];
      if (a && e.status === 'ok') {
        bits.push(a.n === 1 ? '1 point' : `${formatCount(a.n)} points`);
        if (a.nan) bits.push(`${formatCount(a.nan)} NaN`);
        if (a.posInf) bits.push(`${formatCount(a.posInf)} +Inf`);
        if (a.negInf) bits.push(`${formatCount(a.negInf)} -Inf`);
        if (a.reversalCount) bits.push(`${formatCount(a.reversalCount)} reversal${a.reversalCount > 1 ? 's' : ''}`);
        if (e.slowest && e.slowest.length) {
          bits.push(`slowest: step ${e.slowest.slice(0, 3).map((i) => e.steps[i].step).join(', ')}${e.slowest.length > 3 ? ', …' : ''}`);
        } else if (e.derived && e.name === 'step_time_ms' && a.finite >= 3) {
          bits.push('no step stands out');
        }
        if ((e.overlay || e.name === UNACCOUNTED) && e.standsOut && e.standsOut.length) {
          bits.push(`stands out: ${e.standsOut.map((i) => `step ${e.steps[i].step} (${formatDuration(derivedValue(e.steps[i], UNACCOUNTED) * 1000)})`).join(', ')}`);
        }
        Object.assign(li.dataset, {points: a.n, nan: a.nan, posInf: a.posInf, negInf: a.negInf,
          reversals: a.reversalCount, segments: a.segments.length, lines: a.lines, dots: a.dots});
        if (this.plan && this.plan.has(e)) li.dataset.vertices = String(this.plan.get(e).raw.vertices);
      } else {
        bits.push(e.message);
      }
      li.append(el('span', {class: `tbr-wave-counts${e.status === 'error' ? ' tbr-error' : ''}`}, bits.join(' · ')));
      if (e.anomalies && e.anomalies.length) li.append(this.anomalyLine(e));
      return li;
    }));
  }

  /** "⚠ 1 anomaly: step:2x at step 5", each anomaly a link to its run (the raw window kept around it). */
  anomalyLine(e) {
    const [head] = anomalySummary(e.anomalies).split(': ');
    const parts = e.anomalies.map((m, i) => {
      const text = `${m.trigger} at step ${m.step}`;
      const item = m.run === e.run ? el('span', {}, text) : el('button', {type: 'button', class: 'tbr-wave-anomaly-link',
        'data-anomaly-run': m.run, title: `${m.reason ? `${m.reason}\n` : ''}open ${m.run} (the raw window kept around it)`,
        onclick: () => this.onRun(m.run)}, text);
      return i ? [', ', item] : [item];
    });
    return el('span', {class: 'tbr-wave-anomalies', 'data-testid': 'wave-anomalies', 'data-run': e.run},
      el('span', {class: 'tbr-wave-anomaly-icon', 'aria-hidden': 'true'}, '⚠ '), `${head}: `, parts);
  }

  showEmpty(text) {
    setText(this.empty, text || '');
    this.empty.hidden = !text;
  }

  // ---- drawing -----------------------------------------------------------------
  /**
   * The panel's state (`data-state`), and whether the frame showing it has been drawn
   * (`data-drawn`): what a reader sees lags the data by one frame, and a check of
   * the canvas must wait for that frame, not for a guessed delay.
   */
  setState(state) {
    this.root.dataset.state = state;
    this.root.dataset.drawn = 'false';
    this.requestDraw();
  }

  requestDraw() {
    if (this.frameRequested) return;
    this.frameRequested = true;
    requestAnimationFrame(() => this.draw());
  }

  /** The scales of the current entries: steps across, values up; null when nothing has a point. */
  scales(W, H) {
    const shown = this.entries.filter((e) => e.xs && e.xs.length);
    if (!shown.length) return null;
    const xr = padRange(finiteRange(shown.map((e) => e.xs)), 0.02);
    const yr = padRange(finiteRange(shown.map((e) => e.ys)), 0.08);
    const x0 = MARGIN.left;
    const x1 = W - MARGIN.right;
    const y0 = MARGIN.top;
    const y1 = H - MARGIN.bottom;
    const toX = (x) => x0 + ((x - xr[0]) / (xr[1] - xr[0])) * (x1 - x0);
    const toY = (y) => y1 - ((y - yr[0]) / (yr[1] - yr[0])) * (y1 - y0);
    return {xr, yr, x0, x1, y0, y1, toX, toY, shown};
  }

  draw() {
    this.frameRequested = false;
    if (this.root.dataset.state !== 'loading') this.root.dataset.drawn = 'true';
    if (this.collapsed) return;
    const rect = this.plot.getBoundingClientRect();
    const W = Math.max(100, Math.floor(rect.width));
    const H = PLOT_H;
    const ctx = sizeCanvas(this.canvas, this.ctx, W, H);
    ctx.font = FONT;
    const sc = this.scales(W, H);
    this.sc = sc;
    this.plan = new Map();
    this.anomalyMarks = [];
    const loading = this.entries.some((e) => e.status === 'loading');
    if (!sc) {
      const said = this.visibleEntries().filter((e) => e.message && e.status !== 'loading').map((e) => `${e.run}: ${e.message}`);
      if (this.entries.length) this.showEmpty(loading ? 'Loading…' : said.join('\n') || 'Nothing to plot.');
      this.renderLegendGeometry();
      return;
    }
    this.showEmpty('');
    this.drawAxes(sc);
    ctx.save();
    ctx.beginPath();
    ctx.rect(sc.x0 - 4, sc.y0 - 12, sc.x1 - sc.x0 + 8, sc.y1 - sc.y0 + 24);
    ctx.clip();
    const smoothing = this.weight > 0;
    for (const e of sc.shown) {
      const a = e.analysis;
      const raw = planSeries(e.xs, e.ys, a.segments, sc.toX, sc.toY);
      const smooth = smoothing ? planSeries(e.xs, e.smooth, a.segments, sc.toX, sc.toY) : raw;
      this.plan.set(e, {raw, smooth});
      const sparse = a.n <= (sc.x1 - sc.x0) / 6;
      const dash = e.overlay ? [5, 3] : null;
      this.paint(raw, e.color, smoothing ? 0.3 : 1, smoothing ? 1 : 1.5, sparse, dash);
      if (smoothing) this.paint(smooth, e.color, 1, 1.6, false, dash);
      this.paintGaps(raw.gaps, e.color, sc);
      this.paintReversals(e, sc);
      if (e.derived && e.slowest) this.paintSlowest(e, sc);
      if ((e.overlay || e.name === UNACCOUNTED) && e.standsOut) this.paintStandsOut(e, sc);
    }
    ctx.restore();
    this.paintAnomalies(sc);
    this.paintHover(sc);
    this.renderLegendGeometry();
  }

  /** Lines, then dots: every record of a sparse series, lone records always (a lone point is a dot, never nothing). */
  paint(plan, color, alpha, width, sparse, dash = null) {
    const ctx = this.ctx;
    ctx.setLineDash(dash || []);
    ctx.globalAlpha = alpha;
    ctx.strokeStyle = color;
    ctx.fillStyle = color;
    ctx.lineWidth = width;
    ctx.lineJoin = 'round';
    for (const flat of plan.lines) {
      ctx.beginPath();
      ctx.moveTo(flat[0], flat[1]);
      for (let j = 2; j < flat.length; j += 2) ctx.lineTo(flat[j], flat[j + 1]);
      ctx.stroke();
      ctx.setLineDash([]);
      if (sparse) {
        ctx.globalAlpha = Math.max(alpha, 0.6); // the records themselves stay legible behind the smoothed line
        for (let j = 0; j < flat.length; j += 2) {
          ctx.beginPath();
          ctx.arc(flat[j], flat[j + 1], 2.2, 0, 2 * Math.PI);
          ctx.fill();
        }
        ctx.globalAlpha = alpha;
      }
      ctx.setLineDash(dash || []);
    }
    ctx.setLineDash([]);
    ctx.globalAlpha = Math.max(alpha, 0.55); // a lone record is a dot, never nothing
    for (const [x, y] of plan.dots) {
      ctx.beginPath();
      ctx.arc(x, y, 3.5, 0, 2 * Math.PI);
      ctx.fill();
    }
    ctx.globalAlpha = 1;
  }

  /** A dashed line where a value is NaN or infinite, and a mark: ✕ for NaN, ▲ at the top for +Inf, ▼ at the bottom for -Inf. */
  paintGaps(gaps, color, sc) {
    if (!gaps.length) return;
    const ctx = this.ctx;
    const labelled = gaps.length <= 24;
    ctx.strokeStyle = color;
    ctx.fillStyle = color;
    for (const g of gaps) {
      const x = Math.round(g.x) + 0.5;
      ctx.globalAlpha = 0.45;
      ctx.setLineDash([3, 3]);
      ctx.lineWidth = 1;
      ctx.beginPath();
      ctx.moveTo(x, sc.y0);
      ctx.lineTo(x, sc.y1);
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.globalAlpha = 1;
      ctx.lineWidth = 1.6;
      ctx.beginPath();
      let ty;
      if (g.kind === 'NaN') {
        const y = (sc.y0 + sc.y1) / 2;
        ctx.moveTo(x - 4, y - 4);
        ctx.lineTo(x + 4, y + 4);
        ctx.moveTo(x + 4, y - 4);
        ctx.lineTo(x - 4, y + 4);
        ctx.stroke();
        ty = y;
      } else if (g.kind === '+Inf') {
        ctx.moveTo(x, sc.y0 - 6);
        ctx.lineTo(x - 5, sc.y0 + 3);
        ctx.lineTo(x + 5, sc.y0 + 3);
        ctx.fill();
        ty = sc.y0;
      } else {
        ctx.moveTo(x, sc.y1 + 6);
        ctx.lineTo(x - 5, sc.y1 - 3);
        ctx.lineTo(x + 5, sc.y1 - 3);
        ctx.fill();
        ty = sc.y1;
      }
      if (labelled) {
        ctx.textBaseline = 'middle';
        ctx.fillText(g.kind, x + 7, ty);
      }
    }
  }

  /** A ring where the step goes back (a restart, a repeated step): the line visibly back-tracks from there. */
  paintReversals(e, sc) {
    const rev = e.analysis.reversals;
    if (!rev.length || rev.length > 200) return;
    const ctx = this.ctx;
    ctx.strokeStyle = e.color;
    ctx.lineWidth = 1.2;
    for (const i of rev) {
      if (!Number.isFinite(e.ys[i])) continue;
      ctx.beginPath();
      ctx.arc(sc.toX(e.xs[i]), sc.toY(e.ys[i]), 5.5, 0, 2 * Math.PI);
      ctx.stroke();
    }
  }

  /** The slowest steps (by step time, from the server): a red ring on the point and a tick above it. */
  paintSlowest(e, sc) {
    const ctx = this.ctx;
    ctx.strokeStyle = COLORS.slowest;
    ctx.fillStyle = COLORS.slowest;
    ctx.lineWidth = 1.6;
    for (const i of e.slowest) {
      const x = sc.toX(e.xs[i]);
      const v = e.ys[i];
      const y = Number.isFinite(v) ? sc.toY(v) : sc.y0;
      ctx.beginPath();
      ctx.arc(x, y, 5, 0, 2 * Math.PI);
      ctx.stroke();
      ctx.beginPath();
      ctx.moveTo(x, y - 8);
      ctx.lineTo(x - 4, y - 14);
      ctx.lineTo(x + 4, y - 14);
      ctx.fill();
    }
  }

  /** Where unaccounted time stands out: a double ring on the point and its time beside it ("152 ms no op"). */
  paintStandsOut(e, sc) {
    const ctx = this.ctx;
    ctx.strokeStyle = e.color;
    ctx.fillStyle = e.color;
    ctx.textBaseline = 'middle';
    for (const i of e.standsOut) {
      const v = e.ys[i];
      if (!Number.isFinite(v)) continue;
      const x = sc.toX(e.xs[i]);
      const y = sc.toY(v);
      for (const [r, w] of [[5, 1.6], [8.5, 1]]) {
        ctx.lineWidth = w;
        ctx.beginPath();
        ctx.arc(x, y, r, 0, 2 * Math.PI);
        ctx.stroke();
      }
      const text = `${formatDuration(v * 1000)} no op`;
      const tw = ctx.measureText(text).width;
      ctx.textAlign = x + 12 + tw > sc.x1 ? 'right' : 'left';
      ctx.fillText(text, ctx.textAlign === 'right' ? x - 12 : x + 12, y);
      ctx.textAlign = 'left';
    }
  }

  /**
   * The anomalies of each shown run: an orange ⚠ in the margin above the plot at the
   * step, a dashed orange line down to the point and an orange ring around it.
   */
  paintAnomalies(sc) {
    const ctx = this.ctx;
    for (const e of sc.shown) {
      for (const m of e.anomalies || []) {
        const index = e.xs.indexOf(m.step);
        if (index < 0 && !(m.step >= sc.xr[0] && m.step <= sc.xr[1])) continue; // off the plot: the legend says it
        const x = Math.round(sc.toX(m.step)) + 0.5;
        const v = index >= 0 ? e.ys[index] : NaN;
        const y = Number.isFinite(v) ? sc.toY(v) : null;
        this.anomalyMarks.push({entry: e, mark: m, index, x, y});
        ctx.strokeStyle = ANOMALY_COLOR;
        ctx.fillStyle = ANOMALY_COLOR;
        ctx.globalAlpha = 0.7;
        ctx.lineWidth = 1;
        ctx.setLineDash([4, 3]);
        ctx.beginPath();
        ctx.moveTo(x, sc.y0 - 1);
        ctx.lineTo(x, y === null ? sc.y1 : y - 7);
        ctx.stroke();
        ctx.setLineDash([]);
        ctx.globalAlpha = 1;
        if (y !== null) {
          ctx.lineWidth = 2;
          ctx.beginPath();
          ctx.arc(x, y, 7, 0, 2 * Math.PI);
          ctx.stroke();
        }
        ctx.beginPath(); // ⚠: a triangle in the top margin with a white "!"
        ctx.moveTo(x, 1);
        ctx.lineTo(x - ANOMALY_PX, sc.y0 - 1);
        ctx.lineTo(x + ANOMALY_PX, sc.y0 - 1);
        ctx.closePath();
        ctx.fill();
        ctx.fillStyle = '#fff';
        ctx.fillRect(x - 1, 5, 2, sc.y0 - 11);
        ctx.fillRect(x - 1, sc.y0 - 4, 2, 2);
      }
    }
  }

  drawAxes(sc) {
    const ctx = this.ctx;
    const {x0, x1, y0, y1} = sc;
    ctx.fillStyle = COLORS.plotBg;
    ctx.fillRect(x0, y0, x1 - x0, y1 - y0);
    ctx.textBaseline = 'middle';
    ctx.lineWidth = 1;
    // A grid line and its label per tick: (x, y) of the line's two ends and of the label.
    const grid = (ticks, line) => {
      for (const t of ticks) {
        const [ax, ay, bx, by, lx, ly] = line(t);
        ctx.strokeStyle = COLORS.plotGrid;
        ctx.beginPath();
        ctx.moveTo(ax, ay);
        ctx.lineTo(bx, by);
        ctx.stroke();
        ctx.fillStyle = COLORS.mutedText;
        ctx.fillText(formatValue(t), lx, ly);
      }
    };
    ctx.textAlign = 'right';
    grid(niceTicks(sc.yr[0], sc.yr[1], Math.max(2, Math.floor((y1 - y0) / 34))), (t) => {
      const y = Math.round(sc.toY(t)) + 0.5;
      return [x0, y, x1, y, x0 - 6, y];
    });
    ctx.textAlign = 'center';
    ctx.textBaseline = 'top';
    grid(niceTicks(sc.xr[0], sc.xr[1], Math.max(2, Math.floor((x1 - x0) / 90)), 1), (t) => { // steps are whole numbers
      const x = Math.round(sc.toX(t)) + 0.5;
      return [x, y0, x, y1, x, y1 + 5];
    });
    ctx.strokeStyle = COLORS.plotBorder;
    ctx.strokeRect(x0 + 0.5, y0 + 0.5, x1 - x0 - 1, y1 - y0 - 1);
    ctx.textAlign = 'left';
    ctx.fillStyle = COLORS.mutedText;
    ctx.textBaseline = 'middle';
    ctx.fillText('step', 6, y1 + 11);
    const e = this.entries.find((en) => en.name && !en.overlay);
    if (e) {
      const over = sc.shown.some((en) => en.overlay) ? ` · dashed: ${derivedLabel(UNACCOUNTED)}` : '';
      ctx.fillText(`${e.derived ? derivedLabel(e.name) : showControls(e.name)}${over}`, x0 + 6, y0 - 8);
    }
  }

  /** Per entry, what the lines hold after per-pixel reduction (the tests read it). */
  renderLegendGeometry() {
    for (const li of this.legend.children) {
      const e = this.entries.find((en) => en.run === li.dataset.run && en.name === li.dataset.series);
      const p = e && this.plan ? this.plan.get(e) : null;
      if (p) li.dataset.vertices = String(p.raw.vertices);
    }
  }

  // ---- hover and click ---------------------------------------------------------
  /** The record nearest to a canvas point: {entry, index} or null (within a few pixels in x). */
  pick(x, y) {
    const sc = this.sc;
    if (!sc || x < sc.x0 - HOVER_PX || x > sc.x1 + HOVER_PX) return null;
    let best = null;
    let bestD = Infinity;
    for (const e of sc.shown) {
      for (let i = 0; i < e.xs.length; i += 1) {
        const dx = sc.toX(e.xs[i]) - x;
        if (Math.abs(dx) > HOVER_PX) continue;
        const v = e.ys[i];
        const py = Number.isFinite(v) ? sc.toY(v) : Number.isNaN(v) ? (sc.y0 + sc.y1) / 2 : v > 0 ? sc.y0 : sc.y1;
        const d = dx * dx + 0.25 * (py - y) * (py - y);
        if (d < bestD) {
          bestD = d;
          best = {entry: e, index: i};
        }
      }
    }
    return best;
  }

  /** The anomaly ⚠ under a canvas point (above the plot, within a few pixels of its step), or null. */
  pickMark(x, y) {
    const sc = this.sc;
    if (!sc || y > sc.y0 + 2) return null;
    let best = null;
    for (const mk of this.anomalyMarks) {
      if (Math.abs(mk.x - x) <= ANOMALY_PX + 2 && (!best || Math.abs(mk.x - x) < Math.abs(best.x - x))) best = mk;
    }
    return best;
  }

  /** The tooltip lines of one anomaly. */
  anomalyLines(m, current) {
    const lines = [`⚠ anomaly ${m.trigger}${m.kind && m.kind !== m.trigger ? ` (${m.kind})` : ''} at step ${m.step}`];
    if (Number.isFinite(m.value)) {
      lines.push(`value ${formatValue(m.value)}${m.unit ? ` ${m.unit}` : ''}${Number.isFinite(m.threshold) ? ` · threshold ${formatValue(m.threshold)}${m.unit ? ` ${m.unit}` : ''}` : ''}`);
    }
    if (m.reason) lines.push(m.reason);
    lines.push(m.run === current ? `this run is the raw window kept around it` : `click: open ${m.run} (the raw window kept around it)`);
    return lines;
  }

  onMove(e) {
    const r = this.canvas.getBoundingClientRect();
    const x = e.clientX - r.left;
    const y = e.clientY - r.top;
    const mk = this.pickMark(x, y);
    if (mk) {
      if (this.hover) {
        this.hover = null;
        this.requestDraw();
      }
      this.canvas.style.cursor = mk.mark.run !== mk.entry.run ? 'pointer' : 'default';
      this.showTooltip(this.anomalyLines(mk.mark, mk.entry.run), x, y);
      return;
    }
    this.setHover(this.pick(x, y), x, y);
  }

  setHover(hit, x, y) {
    const same = hit && this.hover && hit.entry === this.hover.entry && hit.index === this.hover.index;
    this.hover = hit;
    this.canvas.style.cursor = hit && hit.entry.derived ? 'pointer' : 'default';
    if (!hit) {
      this.hideTooltip();
      if (!same) this.requestDraw();
      return;
    }
    const {entry: e, index: i} = hit;
    const lines = [`${e.host ? `${isolated(e.run)} / ${isolated(e.host)}` : isolated(e.run)} — ${e.derived ? derivedLabel(e.name) : isolated(e.name)}`,
      `step ${e.xs[i]} · value ${formatValue(e.ys[i])}${this.weight > 0 && Number.isFinite(e.ys[i]) ? ` · smoothed ${formatValue(e.smooth[i])}` : ''}`];
    if (e.analysis.reversals.includes(i)) lines.push(`the step goes back here (after step ${e.xs[i - 1]})`);
    if (e.derived) {
      const s = e.steps[i];
      lines.push(`window ${formatDuration(s.end_us - s.start_us)}${e.slowest.includes(i) ? ' · one of the slowest steps' : ''}`);
      const u = derivedValue(s, UNACCOUNTED);
      if (e.name !== UNACCOUNTED && Number.isFinite(u)) lines.push(`${formatDuration(u * 1000)} no op accounts for`);
      if ((e.overlay || e.name === UNACCOUNTED) && e.standsOut && e.standsOut.includes(i)) lines.push('its unaccounted time stands out');
      lines.push('click: show this step in the timeline');
    } else if (e.wall && Number.isFinite(e.wall[i])) {
      lines.push(`wall time ${new Date(e.wall[i] * 1000).toISOString().replace('T', ' ').replace('Z', ' UTC')}`);
    }
    for (const m of e.anomalies || []) if (m.step === e.xs[i]) lines.push(...this.anomalyLines(m, e.run).slice(0, -1));
    this.showTooltip(lines, x, y);
    if (!same) this.requestDraw();
  }

  showTooltip(lines, x, y) {
    setText(this.tooltip, lines.join('\n'));
    this.tooltip.hidden = false;
    const pr = this.plot.getBoundingClientRect();
    const tw = this.tooltip.offsetWidth;
    const left = x + 14 + tw > pr.width ? Math.max(0, x - 14 - tw) : x + 14;
    this.tooltip.style.transform = `translate(${Math.round(left)}px, ${Math.round(Math.max(0, y - 10))}px)`;
  }

  hideTooltip() {
    this.tooltip.hidden = true;
  }

  paintHover(sc) {
    const h = this.hover;
    if (!h || !sc.shown.includes(h.entry)) return;
    const e = h.entry;
    const ctx = this.ctx;
    const x = Math.round(sc.toX(e.xs[h.index])) + 0.5;
    ctx.strokeStyle = COLORS.plotHoverLine;
    ctx.lineWidth = 1;
    ctx.beginPath();
    ctx.moveTo(x, sc.y0);
    ctx.lineTo(x, sc.y1);
    ctx.stroke();
    for (const [vals, r] of [[e.ys, 4], [this.weight > 0 ? e.smooth : null, 3]]) {
      if (!vals || !Number.isFinite(vals[h.index])) continue;
      ctx.beginPath();
      ctx.arc(x, sc.toY(vals[h.index]), r, 0, 2 * Math.PI);
      ctx.fillStyle = COLORS.plotBg;
      ctx.fill();
      ctx.strokeStyle = e.color;
      ctx.lineWidth = 2;
      ctx.stroke();
    }
  }

  onClick(ev) {
    const r = this.canvas.getBoundingClientRect();
    const mk = this.pickMark(ev.clientX - r.left, ev.clientY - r.top);
    if (mk) {
      if (mk.mark.run !== mk.entry.run) this.onRun(mk.mark.run);
      return;
    }
    const hit = this.pick(ev.clientX - r.left, ev.clientY - r.top);
    if (hit && hit.entry.derived) this.onStep(hit.entry.run, hit.entry.host, hit.entry.steps[hit.index]);
  }

  /** A test handle: where a record is drawn, in client pixels (null when not drawn). */
  locate(run, index) {
    const sc = this.sc;
    const e = this.entries.find((en) => en.run === run && !en.overlay);
    if (!sc || !e || !e.xs || index >= e.xs.length) return null;
    const r = this.canvas.getBoundingClientRect();
    const v = e.ys[index];
    const y = Number.isFinite(v) ? sc.toY(v) : (sc.y0 + sc.y1) / 2;
    return {clientX: r.left + sc.toX(e.xs[index]), clientY: r.top + y};
  }

  /**
   * A test handle: per entry, its counts and what was drawn — `topPx`/`bottomPx` the
   * highest and lowest pixel any line or dot reaches, `maxPx`/`minPx` where the largest
   * and smallest finite values belong (equal when no extreme was dropped) — and, with
   * `values`, the numbers themselves (non-finite as strings, as the routes send them).
   */
  /** Per anomaly of an entry: its report's gist, and where its ⚠ is drawn (client pixels; drawn false when not). */
  debugAnomalies(e) {
    const r = this.canvas.getBoundingClientRect();
    return (e.anomalies || []).map((m) => {
      const mk = this.anomalyMarks.find((k) => k.entry === e && k.mark === m);
      return {...m, drawn: !!mk, index: mk ? mk.index : -1,
        ...(mk ? {clientX: r.left + mk.x, clientY: r.top + 8, pointY: mk.y === null ? null : r.top + mk.y} : {})};
    });
  }

  debug({values = false} = {}) {
    const enc = (arr) => (arr ? Array.from(arr, (v) => (Number.isFinite(v) ? v : String(v))) : null);
    return this.visibleEntries().map((e) => {
      const p = this.plan && this.plan.get(e);
      const a = e.analysis;
      const extent = {};
      if (p && this.sc) {
        let top = Infinity;
        let bottom = -Infinity;
        for (const flat of p.raw.lines) {
          for (let j = 1; j < flat.length; j += 2) {
            top = Math.min(top, flat[j]);
            bottom = Math.max(bottom, flat[j]);
          }
        }
        for (const [, y] of p.raw.dots) {
          top = Math.min(top, y);
          bottom = Math.max(bottom, y);
        }
        const r = finiteRange([e.ys]);
        if (r) Object.assign(extent, {topPx: top, bottomPx: bottom, maxPx: this.sc.toY(r[1]), minPx: this.sc.toY(r[0])});
      }
      return {run: e.run, host: e.host, name: e.name, derived: e.derived, status: e.status, message: e.message, color: e.color,
        points: a ? a.n : 0, nan: a ? a.nan : 0, posInf: a ? a.posInf : 0, negInf: a ? a.negInf : 0,
        reversals: a ? a.reversalCount : 0, segments: a ? a.segments.map((s) => s.slice()) : [],
        lines: p ? p.raw.lines.length : 0, dots: p ? p.raw.dots.length : 0, vertices: p ? p.raw.vertices : 0,
        gaps: p ? p.raw.gaps.map((g) => g.kind) : [], slowest: e.slowest || [], anomalies: this.debugAnomalies(e),
        overlay: !!e.overlay, standsOut: e.standsOut || [],
        steps: e.steps ? e.steps.map((s) => ({step: s.step, start_us: s.start_us, end_us: s.end_us})) : null,
        ...extent, ...(values ? {xs: e.xs ? Array.from(e.xs) : null, ys: enc(e.ys), smooth: enc(e.smooth)} : {})};
    });
  }
}
