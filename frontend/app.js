// The dashboard: pickers, level control, stats, timeline, details, sharing.
// Wires the other modules together; owns when to fetch (see policy.js).
import {BASE, fetchEvent, fetchRunsIfChanged, getJson, routeUrl} from './api.js';
import {el, ensureStylesheet, isolated, setChildren, setText, visible} from './dom.js';
import {formatBytes, formatCount, formatDuration, formatRatio, formatSeconds, formatSummaryName} from './format.js';
import {TraceLoader} from './loader.js';
import {IDLE_POLL_MS, POLL_MS, RunPoller, hasLiveRuns, isAnomalyRun, newestAnomaly, newestWindow} from './live.js';
import {FLAG_SUMMARY, inputIndexOf, withMemory} from './model.js';
import {WaveformPanel} from './panels/waveforms.js';
import {fetchWindow, needsFetch, screenResolution} from './policy.js';
import {LEVELS, downloadUrl, linkParams, parseViewState, roundUs, shareUrl, viewParams} from './state.js';
import {Timeline} from './timeline.js';
import {AggregatePanel, relSeconds} from './panels/aggregate.js';
import {ComparePanel} from './panels/compare.js';
import {SearchBar} from './panels/search.js';
import {StepStrip} from './panels/steps.js';
import {HostNotes, HostPicker, cappedWindowText, hostLabel} from './panels/hosts.js';
import {SpreadPanel} from './panels/spread.js';
import {hostEventOf, hostOfPid, isMerged, mergedNote} from './merged.js';
import {installKeys} from './keys.js';
import {installTheme} from './theme.js';

/** Level 0 of a file this large would send every event to the tab: ask first. */
export const HUGE_BYTES = 50e6;
const FETCH_DEBOUNCE_MS = 180;
/** A selected event's track is scrolled into view on this many loads, or until one draws it. */
const REVEAL_LOADS = 3;
const LEVEL_LABELS = {
  auto: 'auto — the least reduced that fits',
  0: '0 — lossless, every event',
  1: '1 — 100,000 buckets',
  2: '2 — 20,000 buckets, long args cut',
  3: '3 — 5,000 buckets, no args',
  4: '4 — 1,000 buckets, no args',
};

export async function mountDashboard(root, {search = '', standalone = false} = {}) {
  ensureStylesheet(new URL('static/dashboard.css', BASE).href);
  ensureStylesheet(new URL('static/query.css', BASE).href);
  const app = new Dashboard(root, parseViewState(search), standalone);
  // A handle for tests and the benchmark (state, locating slices, frame counts).
  window.tbReduceDashboard = app;
  await app.start();
  // The run list is asked from now on, in Live mode or not (live.js): new runs show up, and a
  // tab opened before the first trace existed shows it once it lands, without a reload.
  app.poller.start();
  return app;
}

class Dashboard {
  constructor(root, initial, standalone) {
    this.initial = initial;
    this.standalone = standalone;
    this.runs = []; // the runs with traces: the timeline's picker
    this.allRuns = []; // every run listed, runs of scalars only too: the waveform panel's
    // explicitLevel: the user picked the level, or the link named it (state.js); until then
    // the default level is cut to the screen's resolution, as `auto` always is (load()).
    this.sel = {run: null, host: null, level: initial.level, explicitLevel: initial.explicitLevel};
    this.sel.hosts = null; // several hosts: the merged view (merged.js), sel.host its first
    this.sel.expand = initial.expand.slice(); // merged lanes opened (a click on a host's busy lane)
    this.data = null; // {key, level, window, full, bucketUs, model}
    this.extents = new Map(); // run/host → the whole trace's window, once seen
    this.extentAsked = new Set();
    this.insisted = new Set(); // run/host where the user asked for level 0 despite the size
    this.loader = new TraceLoader();
    this.inflight = null;
    this.seq = 0;
    this.stats = null;
    this.selected = null; // {kind, input, event, reveal} of the clicked or searched event, kept across refetches
    this.detailsSeq = 0;
    this.marksByKey = new Map(); // run/host → (mark id → event): marks stay per trace
    this.markCursor = -1;
    this.range = null; // [t0, t1] shift+dragged on the timeline
    this.fetchTimer = 0;
    this.live = false;
    this.poller = new RunPoller({
      fetchRuns: fetchRunsIfChanged,
      onRuns: (runs) => {
        this.runsChanged(runs);
        if (this.sel.run === null && this.runs.length) this.showFirstRuns();
      },
      onError: (err) => this.setLiveNote(`run list: ${err.message}`, true),
      // every 2 s in Live mode and while no trace is shown yet, every 5 s otherwise
      everyMs: () => (this.live || this.sel.run === null ? POLL_MS : IDLE_POLL_MS),
    });
    this.build(root);
  }

  key() {
    return `${this.sel.run}\u0000${this.multi() ? this.sel.hosts.join(',') : this.sel.host}`;
  }

  /** Several hosts chosen: the timeline is their merged view. */
  multi() {
    return Array.isArray(this.sel.hosts) && this.sel.hosts.length > 1;
  }

  /** What the view routes are asked about: {host} or, merged, {hosts, expand}. */
  target() {
    return this.multi() ? {host: this.sel.host, hosts: this.sel.hosts, expand: this.sel.expand} : {host: this.sel.host};
  }

  hostInfo() {
    const run = this.runs.find((r) => r.run === this.sel.run);
    return run ? run.hosts.find((h) => h.host === this.sel.host) : null;
  }

  // ---- DOM -----------------------------------------------------------------
  build(root) {
    this.runSelect = el('select', {'data-testid': 'run-select', 'aria-label': 'Run', onchange: () => {
      this.setLive(false); // the user picked a run: stop following the newest window
      this.selectRun(this.runSelect.value);
    }});
    this.liveToggle = el('input', {type: 'checkbox', 'data-testid': 'live-toggle', onchange: () => this.setLive(this.liveToggle.checked)});
    this.liveNote = el('span', {class: 'tbr-live-note', 'data-testid': 'live-note', 'aria-live': 'polite'});
    this.liveLabel = el('label', {class: 'tbr-check tbr-live', hidden: true,
      title: 'Follow the newest window the `tb-reduce live` sidecar writes (the run list is asked every 2 s)'},
    this.liveToggle, ' Live', this.liveNote);
    this.hostSelect = el('select', {'data-testid': 'host-select', 'aria-label': 'Host', onchange: () => {
      if (this.hostSelect.value) this.selectHost(this.hostSelect.value);
    }});
    this.hostPicker = new HostPicker({onChange: (hosts) => this.hostsPicked(hosts)});
    this.hostNotes = new HostNotes({onOpen: (host) => this.selectHost(host)}); // under the bar: a capped export, a cut file
    this.levelSelect = el('select', {'data-testid': 'level-select', 'aria-label': 'Level', onchange: () => this.setLevel(this.levelSelect.value)},
      LEVELS.map((l) => el('option', {value: l}, LEVEL_LABELS[l])));
    this.levelSelect.value = this.sel.level;
    this.flows = el('input', {type: 'checkbox', 'data-testid': 'flows-toggle', onchange: () => this.timeline.setShowFlows(this.flows.checked)});
    this.shareLink = el('a', {'data-testid': 'share-link', class: 'tbr-button', href: '#', target: '_blank', rel: 'noopener',
      title: 'Copy a link that reopens this run, host, level and window', onclick: (e) => this.copyLink(e)}, 'Copy link');
    this.downloadLink = el('a', {'data-testid': 'download-link', class: 'tbr-button', href: '#', download: '',
      title: 'Download the reduced trace (.json.gz) of this level and window; it opens in Perfetto and chrome://tracing'}, 'Download .json.gz');
    this.fitButton = el('button', {type: 'button', class: 'tbr-button', title: 'Show the whole trace', onclick: () => this.fit()}, 'Fit');
    this.compareButton = el('button', {type: 'button', class: 'tbr-button', 'data-testid': 'compare-open',
      title: 'Compare this trace with another run or host: per-step series and every name, exact', onclick: () => this.toggleCompare()},
    'Compare');
    this.copied = el('span', {class: 'tbr-copied', 'aria-live': 'polite'});
    this.status = el('div', {class: 'tbr-status', role: 'status', 'data-testid': 'status'});
    this.progressBar = el('div', {class: 'tbr-progress-bar'});
    this.progress = el('div', {class: 'tbr-progress', hidden: true}, this.progressBar);
    this.statsBox = el('section', {'data-testid': 'stats', class: 'tbr-stats', 'aria-label': 'Reduction statistics'});
    this.timelineBox = el('div', {'data-testid': 'timeline', class: 'tbr-timeline', 'data-loading': '0'});
    this.message = el('div', {class: 'tbr-message', hidden: true});
    this.details = el('section', {'data-testid': 'details', class: 'tbr-details', 'aria-label': 'Event details'},
      el('p', {class: 'tbr-muted'}, 'Click a slice to see its arguments.'));

    this.buildQuery();
    this.profileBadge = el('span', {class: 'tbr-badge', hidden: true, 'data-testid': 'profile-tab-badge'});
    const bar = el('header', {class: 'tbr-bar'},
      el('span', {class: 'tbr-title'}, 'Trace Reduce'), this.profileBadge,
      el('label', {}, 'Run ', this.runSelect), this.liveLabel,
      el('label', {}, 'Host ', this.hostSelect), this.hostPicker.element,
      el('label', {}, 'Level ', this.levelSelect),
      el('label', {class: 'tbr-check'}, this.flows, ' Flows'),
      this.search.element, this.marksBox,
      this.fitButton, this.compareButton, this.shareLink, this.downloadLink, this.copied,
      el('span', {class: 'tbr-help'}, 'wheel or W/S zoom · drag or A/D pan · shift+wheel scrolls tracks · click for details'));
    this.waveBox = el('div', {class: 'tbr-wave-slot'});
    this.spreadBox = el('div', {class: 'tbr-spread-slot'});
    this.stepsBox = el('div', {class: 'tbr-steps-slot'});
    this.app = el('div', {class: 'tbr-app', 'data-compact': this.initial.compact ? '1' : '0'}, bar, this.hostNotes.element, this.statsBox,
      el('div', {class: 'tbr-statusline'}, this.status, this.progress),
      this.spreadBox, this.waveBox, this.stepsBox, this.timelineBox, this.aggregate.element, this.compare.element, this.details);
    root.replaceChildren(this.app);
    // light or dark, as TensorBoard (or the system) is; before the canvases draw
    this.theme = installTheme(this.app, () => this.themeChanged());
    this.timelineBox.append(this.message);
    this.timeline = new Timeline(this.timelineBox, {
      onViewChange: () => this.viewChanged(),
      onSelect: (hit) => this.showDetails(hit),
      onRange: (range, final) => this.rangeChanged(range, final),
    });
    this.waveforms = new WaveformPanel(this.waveBox, {
      onStep: (run, host, step) => this.showStep(run, host, step),
      onRun: (run) => { // an anomaly's ⚠ clicked: show the raw window kept around it
        if (!this.runs.some((r) => r.run === run)) return;
        this.setLive(false);
        this.runSelect.value = run;
        this.selectRun(run);
      },
      onWaveform: (wave) => { // one host's steps on its own clock: not on a merged view's
        if (typeof this.timeline.setWaveform === 'function') this.timeline.setWaveform(this.multi() ? null : wave);
      },
    });
    this.steps = new StepStrip(this.stepsBox, {
      onStep: (step) => this.showStep(this.sel.run, this.sel.host, step),
      fetchSteps: (run, host) => this.waveforms.waves(run, host), // one request for both
      gutter: () => this.timeline.gutter,
    });
    this.spread = new SpreadPanel(this.spreadBox, {onStep: (t0, t1) => this.timeline.zoomTo(t0, t1)});
    this.shortcuts = installKeys(this, root);
  }

  /** The theme switched (theme.js): the canvases draw again in its colours. */
  themeChanged() {
    for (const part of [this.timeline, this.waveforms, this.steps]) if (part) part.requestDraw();
  }

  /** A step clicked in the waveforms: the timeline shows that run and host, zoomed to the step's window. */
  showStep(run, host, step) {
    const t0 = Number(step.start_us);
    const t1 = Number(step.end_us);
    if (!(t1 > t0)) return;
    if (run !== this.sel.run || host !== this.sel.host) {
      if (run !== this.sel.run) this.setLive(false);
      const info = this.runs.find((r) => r.run === run);
      if (!info || !info.hosts.some((h) => h.host === host)) return;
      if (run !== this.sel.run) {
        this.runSelect.value = run;
        this.fillHosts(info);
      }
      this.selectHost(host, run);
    }
    if (typeof this.timeline.zoomTo === 'function') this.timeline.zoomTo(t0, t1);
    else this.timeline.setView(t0, t1);
  }

  setStatus(text, kind = '') {
    setText(this.status, text); // names in it show their bidi controls, reverse nothing
    this.status.className = `tbr-status ${kind}`;
    this.status.setAttribute('role', kind === 'tbr-error' ? 'alert' : 'status');
  }

  setProgress(fraction) {
    this.progress.hidden = fraction === null;
    if (fraction !== null) this.progressBar.style.width = `${Math.round(Math.min(1, Math.max(0.02, fraction)) * 100)}%`;
  }

  /** A message over the timeline (empty, failed, too big); `actions` are [label, fn] buttons. */
  showMessage(title, text, actions = [], kind = '') {
    setChildren(this.message,
      el('h3', {}, title),
      text ? el('p', {}, text) : null,
      actions.length ? el('div', {class: 'tbr-actions'}, actions.map(([label, fn, cls]) =>
        el('button', {type: 'button', class: `tbr-button ${cls || ''}`, onclick: fn}, label))) : null);
    this.message.className = `tbr-message ${kind}`;
    this.message.hidden = false;
  }

  hideMessage() {
    this.message.hidden = true;
  }

  // ---- runs and hosts ------------------------------------------------------
  /** Say so when this server also answers the Profile tab's Trace Viewer (XProf). */
  async showProfileTab() {
    let info = null;
    try {
      info = await getJson('info');
    } catch {
      return; // an older server, or none: nothing to say
    }
    const tab = info && info.profile_tab;
    if (!tab || !tab.active) return;
    this.profileBadge.textContent = 'also serving the Profile tab';
    this.profileBadge.title = `tb-reduce answers the Profile tab's Trace Viewer (XProf ${tab.xprof}) for these ` +
      'runs too, and lists there the PyTorch and other Chrome traces XProf cannot open ' +
      '(--tb_reduce_profile_tab=off to leave it to XProf)';
    this.profileBadge.hidden = false;
  }

  /** Under the empty state: what the server's walk of the logdir found and left out, and why. */
  async explainEmpty() {
    let found = null;
    try {
      found = (await getJson('info')).discovery;
    } catch {
      return; // an older server: the generic message stands
    }
    if (!found || !found.skipped || !found.skipped.length || this.message.hidden) return;
    const more = found.skipped_total - found.skipped.length;
    this.message.append(
      el('p', {}, `Found but left out (${formatCount(found.skipped_total)}):`),
      el('ul', {class: 'tbr-skipped', 'data-testid': 'skipped'}, found.skipped.map((s) =>
        el('li', {}, el('code', {}, s.path), ` — ${s.reason}`))),
      ...(more > 0 ? [el('p', {}, `…and ${formatCount(more)} more.`)] : []));
  }

  async start() {
    this.showProfileTab();
    this.setStatus('Listing traces…');
    try {
      const listed = await getJson('runs');
      this.allRuns = Array.isArray(listed) ? listed : [];
      this.runs = traceRuns(this.allRuns);
    } catch (err) {
      this.setStatus(`Could not list traces: ${err.message}`, 'tbr-error');
      this.showMessage('Could not list the traces', err.message, [], 'tbr-error');
      this.waveforms.setContext({runs: [], run: null, host: null});
      return;
    }
    if (!this.runs.length && this.allRuns.length) { // event files only: their waveforms, no timeline
      this.setStatus(`No profiler traces in this logdir: its ${formatCount(this.allRuns.length)} run(s) have scalars only; see the waveform panel.`);
      this.showMessage('These runs have scalars only',
        'They hold TensorBoard event files and no profiler trace: their scalars are plotted in the waveform panel above ' +
        '(tick runs there to overlay them). A timeline needs a trace: XProf, JAX, TensorFlow under <logdir>/…/plugins/profile/<run>/, PyTorch in a run directory.');
      this.runSelect.disabled = this.hostSelect.disabled = true;
      this.waveforms.setContext({runs: this.allRuns, run: this.allRuns[0].run, host: null});
      this.updateLinks();
      return;
    }
    if (!this.runs.length) {
      this.setStatus('No profiler traces in this logdir.');
      this.showMessage('No profiler traces found',
        'Put traces under <logdir>/…/plugins/profile/<run>/ (XProf, JAX, TensorFlow: *.xplane.pb, *.trace.json.gz) ' +
        'or in a run directory (PyTorch: *.pt.trace.json[.gz]); this page shows them as soon as they land.');
      this.explainEmpty();
      this.runSelect.disabled = this.hostSelect.disabled = true;
      this.waveforms.setContext({runs: [], run: null, host: null});
      this.updateLinks();
      return;
    }
    this.fillRuns();
    const {run, host} = this.initial;
    const wanted = this.runs.find((r) => r.run === run);
    // A link to a run of scalars only: the waveform panel plots it, the timeline shows the first trace.
    const scalarsOnly = run && !wanted && this.allRuns.some((r) => r.run === run) ? run : null;
    const scalarsNote = `Run “${run}” has scalars only (no profiler trace): its scalars are in the waveform panel; the timeline shows the first trace.`;
    if (run && (!wanted || (host && !wanted.hosts.some((h) => h.host === host)))) {
      this.setStatus(scalarsOnly ? scalarsNote
        : `This link names ${wanted ? `host “${host}” in ` : ''}run “${run}”, which this logdir does not have; showing the first trace instead.`, 'tbr-error');
    }
    const first = wanted || this.runs[0];
    this.runSelect.value = first.run;
    this.fillHosts(first);
    const hostOk = wanted && first.hosts.some((h) => h.host === host);
    this.hostSelect.value = hostOk ? host : first.hosts[0].host;
    this.sel.run = first.run;
    this.sel.host = this.hostSelect.value;
    const several = wanted && this.initial.hosts ? first.hosts.map((h) => h.host).filter((h) => this.initial.hosts.includes(h)) : [];
    if (several.length > 1) { // a link to a merged view
      this.sel.hosts = several;
      this.sel.host = several[0];
    }
    this.syncHostControls(first);
    this.compare.setRuns(this.runs);
    if (this.initial.compare && !this.multi()) { // a link to a comparison
      const {baseRun, baseHost, steps, baseSteps} = this.initial.compare;
      this.compare.open({target: {run: this.sel.run, host: this.sel.host}, base: {run: baseRun, host: baseHost}, steps,
        baseSteps});
    }
    const linked = hostOk || this.multi();
    let firstLoad;
    if (linked && this.initial.window) {
      // a shared link: show exactly its window, fetch around it
      this.timeline.setView(this.initial.window[0], this.initial.window[1], {silent: true});
      firstLoad = this.load(fetchWindow(this.initial.window, null));
    } else {
      firstLoad = this.load(null);
    }
    if (hostOk && !this.multi() && this.initial.event !== null) this.openEvent(this.initial.event);
    // The waveforms and the step strip ask only once the first timeline has arrived: on a
    // cold server their requests (the steps of the same trace, the run's event files) would
    // share its CPUs with the timeline's reduction, and the timeline is what the user waits for.
    const panels = () => {
      if (this.waveforms.run !== null && this.waveforms.run !== undefined) return; // a run picked meanwhile set them
      this.waveforms.setContext({runs: this.allRuns, run: scalarsOnly || this.sel.run, host: scalarsOnly ? null : this.sel.host});
      if (scalarsOnly) this.setStatus(scalarsNote); // after the first timeline's own status line
      this.steps.setContext({run: this.sel.run, host: this.sel.host});
      if (this.data) this.steps.setModel(this.data.model); // the strip's fallback: the loaded trace's markers
      this.showPanels();
    };
    if (firstLoad) firstLoad.then(panels, panels);
    else panels();
    this.updateLinks();
  }

  /** The run picker's options; runs kept around an anomaly are marked ⚠. */
  fillRuns() {
    const keep = this.runSelect.value;
    setChildren(this.runSelect, this.runs.map((r) => (isAnomalyRun(r.run)
      ? el('option', {value: r.run, class: 'tbr-anomaly', title: 'raw traces kept around an anomaly'}, `⚠ ${isolated(r.run)}`)
      : el('option', {value: r.run}, isolated(r.run)))));
    if (keep && this.runs.some((r) => r.run === keep)) this.runSelect.value = keep;
    this.runSelect.classList.toggle('tbr-anomaly', isAnomalyRun(keep));
    this.liveLabel.hidden = !hasLiveRuns(this.runs);
  }

  // ---- live mode (live.js) -------------------------------------------------
  /** On: ask the run list every ~2 s and show each newer `live/<time>-<seq>` window as it lands. */
  setLive(on) {
    on = !!on;
    this.liveToggle.checked = on;
    if (on === this.live) return;
    this.live = on;
    this.app.dataset.live = on ? '1' : '0';
    if (on) {
      this.setLiveNote('');
      this.followNewest();
      this.poller.start();
      this.poller.poke(); // the newest window now, not in 5 s
    } else {
      this.setLiveNote(''); // the poller goes on, at its slower pace: new runs still show up
    }
  }

  /** The run list gained traces while none was shown (an empty logdir, a failed listing): show them as a load does. */
  showFirstRuns() {
    if (this.reopening) return; // the listing before is still on its way
    this.reopening = true;
    this.hideMessage();
    this.runSelect.disabled = this.hostSelect.disabled = false;
    this.start().finally(() => {
      this.reopening = false;
    });
  }

  setLiveNote(text, error = false) {
    this.liveNote.textContent = text ? ` · ${visible(text)}` : '';
    this.liveNote.classList.toggle('tbr-error', error);
  }

  runsChanged(runs) {
    if (!traceRuns(runs).length) return;
    this.allRuns = runs;
    this.runs = traceRuns(runs);
    this.fillRuns();
    this.compare.setRuns(this.runs);
    if (this.sel.run !== null && !this.followNewest() && !runs.some((r) => r.run === this.sel.run)) {
      this.setLiveNote(`run ${this.sel.run} is gone from the logdir`, true);
    }
  }

  /** Switches to the newest window if it is newer than the one shown; the level and the panel's series stay. */
  followNewest() {
    if (!this.live) return false;
    const anomaly = newestAnomaly(this.runs);
    this.app.dataset.anomaly = anomaly || '';
    const newest = newestWindow(this.runs);
    if (!newest) return false;
    this.setLiveNote(`newest ${newest.slice('live/'.length)}${anomaly ? ` · ⚠ ${anomaly.slice('live/'.length)}` : ''}`);
    if (newest === this.sel.run) return false;
    const info = this.runs.find((r) => r.run === newest);
    const host = info.hosts.some((h) => h.host === this.sel.host) ? this.sel.host : info.hosts[0].host;
    this.runSelect.value = newest;
    this.runSelect.classList.remove('tbr-anomaly');
    this.fillHosts(info);
    this.selectHost(host, newest);
    return true;
  }

  fillHosts(runInfo) {
    // JAX's export says whether its cap cut it, and comes after the XSpace it was made from (the server's order).
    setChildren(this.hostSelect, runInfo.hosts.map((h) => el('option', {value: h.host,
      title: h.capped ? h.capped.note : h.export ? h.export.note : ''}, hostLabel(h))));
    this.hostPicker.setHosts(runInfo.hosts, [this.sel.host]);
  }

  /** The host select and the picker say what is shown: one host, or "N hosts" when merged. */
  syncHostControls(runInfo = this.runs.find((r) => r.run === this.sel.run)) {
    if (!runInfo) return;
    const old = this.hostSelect.querySelector('option[data-merged]');
    if (old) old.remove();
    if (this.multi()) {
      this.hostSelect.append(el('option', {value: '', 'data-merged': true, disabled: true},
        `${formatCount(this.sel.hosts.length)} hosts, merged`));
      this.hostSelect.value = '';
    } else {
      this.hostSelect.value = this.sel.host;
    }
    this.hostPicker.setHosts(runInfo.hosts, this.multi() ? this.sel.hosts : [this.sel.host]);
  }

  /** The picker's hosts changed: none waits for one, one is the single-host view, several are merged. */
  hostsPicked(hosts) {
    if (!hosts.length) {
      this.setStatus('No host chosen: check at least one in Hosts.');
      return;
    }
    if (hosts.length === 1) {
      this.selectHost(hosts[0]);
      return;
    }
    this.sel.hosts = hosts.slice();
    this.sel.expand = this.sel.expand.filter((h) => hosts.includes(h));
    this.showHosts(hosts[0]);
  }

  /** A merged view: the spread across hosts where the waveforms and the step strip stand for one host. */
  showPanels() {
    const multi = this.multi();
    this.waveBox.hidden = this.stepsBox.hidden = multi;
    if (multi && typeof this.timeline.setWaveform === 'function') this.timeline.setWaveform(null);
    this.search.input.disabled = multi;
    this.search.input.title = multi ? 'Search reads one host: choose one host to search its events' : '';
    this.spread.setContext({run: this.sel.run, hosts: multi ? this.sel.hosts : null});
  }

  selectRun(run) {
    const info = this.runs.find((r) => r.run === run);
    if (!info) return;
    this.runSelect.classList.toggle('tbr-anomaly', isAnomalyRun(run));
    this.fillHosts(info);
    this.selectHost(info.hosts[0].host, run);
  }

  selectHost(host, run = this.sel.run) {
    this.sel.hosts = null;
    this.showHosts(host, run);
  }

  /** Shows `host` of `run`, or the merged view of `sel.hosts` when several are chosen (host: the first). */
  showHosts(host, run = this.sel.run) {
    this.sel.run = run;
    this.sel.host = host;
    this.syncHostControls();
    this.data = null;
    this.stats = null;
    this.selected = null;
    this.timeline.clear();
    this.renderStats();
    this.showDetails(null);
    this.queryHostChanged();
    const ext = this.extents.get(this.key());
    if (ext) this.timeline.setExtent(ext);
    this.load(null);
    this.waveforms.setContext({runs: this.allRuns, run, host});
    this.steps.setContext({run, host});
    if (this.multi()) this.compare.close(); // one trace against another: not a merged view
    else this.compare.follow({run, host});
    this.unstack(); // aligned with the trace shown before
    this.showPanels();
    this.updateLinks();
  }

  /**
   * The baseline's timeline under this one (the `view` page, compact, in a frame of the same
   * origin), the start of its step `firstBase` under the start of this one's step `first`
   * (the same number, comparing runs; absolute times differ between runs): one zoom and pan
   * for both, whichever is moved.
   */
  async stackTimelines(base, first, firstBase = first) {
    this.unstack();
    let mine = null;
    let theirs = null;
    try {
      [mine, theirs] = await Promise.all([this.waveforms.waves(this.sel.run, this.sel.host),
        this.waveforms.waves(base.run, base.host)]);
    } catch (err) {
      this.setStatus(`Could not stack the timelines: ${err.message}`, 'tbr-error');
      return;
    }
    const at = (doc, n) => (doc && Array.isArray(doc.steps) ? doc.steps.find((s) => Number(s.step) >= n) : null);
    const a = at(mine, first);
    const b = a ? at(theirs, firstBase === first ? Number(a.step) : firstBase) : null;
    if (!a || !b) {
      this.setStatus('Could not stack the timelines: no step both traces show', 'tbr-error');
      return;
    }
    const offset = Number(b.start_us) - Number(a.start_us);
    const view = this.timeline.getView() || [Number(a.start_us), Number(a.end_us)];
    const params = new URLSearchParams({run: base.run, host: base.host, level: this.sel.level, compact: '1',
      start_us: String(roundUs(view[0] + offset)), end_us: String(roundUs(view[1] + offset))});
    const frame = el('iframe', {class: 'tbr-stack-frame', 'data-testid': 'stack-frame', title: 'Baseline timeline',
      src: new URL(`view?${params}`, BASE).href});
    const box = el('section', {class: 'tbr-stack', 'data-testid': 'stack', 'aria-label': 'The baseline\'s timeline'},
      el('div', {class: 'tbr-cmp-head'}, el('span', {class: 'tbr-agg-title'}, 'Baseline'),
        el('span', {}, `${base.run} · ${base.host}, its step ${b.step} under step ${a.step} (${formatDuration(offset)} apart)`),
        el('button', {type: 'button', class: 'tbr-agg-close', 'data-testid': 'stack-close', 'aria-label': 'Unstack',
          title: 'Unstack', onclick: () => this.unstack()}, '\u00d7')), frame);
    this.timelineBox.after(box);
    this.stack = {box, frame, offset, step: a.step, pushing: false};
    frame.addEventListener('load', () => this.hookStack());
  }

  /** The frame's dashboard, once it exists: its view moves this one, as this one moves it. */
  hookStack() {
    const st = this.stack;
    const other = st && st.frame.contentWindow && st.frame.contentWindow.tbReduceDashboard;
    if (!other || !other.timeline) {
      if (st) st.wait = setTimeout(() => this.hookStack(), 100);
      return;
    }
    const own = other.timeline.onViewChange;
    other.timeline.onViewChange = (v) => {
      own(v);
      if (this.stack !== st || st.pushing || !v) return;
      st.pushing = true;
      try {
        this.timeline.setView(v[0] - st.offset, v[1] - st.offset);
      } finally {
        st.pushing = false;
      }
    };
    st.box.dataset.ready = '1';
    this.pushStack();
  }

  /** This view, shifted by the alignment, into the stacked timeline. */
  pushStack() {
    const st = this.stack;
    const other = st && st.frame.contentWindow && st.frame.contentWindow.tbReduceDashboard;
    const v = this.timeline.getView();
    if (!st || st.pushing || !other || !other.timeline || !v) return;
    st.pushing = true;
    try {
      other.timeline.setView(v[0] + st.offset, v[1] + st.offset);
    } finally {
      st.pushing = false;
    }
  }

  unstack() {
    if (!this.stack) return;
    clearTimeout(this.stack.wait);
    this.stack.box.remove();
    this.stack = null;
  }

  /**
   * The allocator's totals as counter rows (`memory` route), for a view that shows Kineto's
   * `[memory]` events (the counter rule keeps some in every bucket that has them): asked
   * after the view is drawn, added to its model when they come, the view drawn again.
   */
  askMemory(model, key, window, resolution, tries = 0) {
    if (this.multi() || !model.names.includes('[memory]') || tries > 30) return;
    const params = {run: this.sel.run, host: this.sel.host};
    const w = window || model.window;
    if (window) Object.assign(params, {start_us: String(roundUs(w[0])), end_us: String(roundUs(w[1]))});
    if (resolution) params.resolution = String(resolution);
    else if (model.tb && model.tb.resolution) params.resolution = String(model.tb.resolution);
    getJson('memory', params).then((answer) => {
      if (!this.data || this.data.model !== model || this.data.key !== key) return; // another view meanwhile
      if (answer && answer.pending) { // read once the trace's text is kept: ask again then
        const ms = 1000 * Math.min(10, Math.max(1, Number(answer.retry_after_s) || 2));
        setTimeout(() => this.askMemory(model, key, window, resolution, tries + 1), ms);
        return;
      }
      if (withMemory(model, answer && answer.series)) this.timeline.setModel(model, this.data.window);
    }, () => {}); // no memory rows: the view stands as it is
  }

  /** A comparison's baseline run ticked in the waveform panel, beside the trace shown. */
  overlayRun(run) {
    this.waveforms.setCollapsed(false);
    this.waveforms.setTicked(run, true);
    this.waveforms.renderRuns();
    this.waveforms.refresh(false);
    this.waveBox.scrollIntoView({block: 'nearest'});
  }

  /** The Compare button: opens the comparison of the trace shown with another (or closes it). */
  toggleCompare() {
    if (this.compare.isOpen) {
      this.compare.close();
      return;
    }
    if (this.sel.run === null || this.multi()) return;
    this.compare.open({target: {run: this.sel.run, host: this.sel.host}});
    this.compare.element.scrollIntoView({block: 'nearest'});
  }

  /**
   * The level select says what is shown: the default level cut to the screen's width names its
   * bucket count, not the level's own (which an explicit pick of it gives).
   */
  labelLevels(tb, asked) {
    for (const opt of this.levelSelect.options) opt.textContent = LEVEL_LABELS[opt.value];
    if (!asked || this.sel.explicitLevel || this.sel.level === 'auto' || !tb.resolution) return;
    const opt = Array.from(this.levelSelect.options).find((o) => o.value === String(this.sel.level));
    if (opt) {
      const args = LEVEL_LABELS[opt.value].split(', ').slice(1).join(', ');
      opt.textContent = `${opt.value} — ${formatCount(tb.resolution)} buckets, fit to the screen${args ? `, ${args}` : ''}`;
    }
  }

  /** The user picked `level` (the select, or a button naming one): it is explicit from now on. */
  setLevel(level, {keepSelection = false} = {}) {
    if (!keepSelection) this.clearSelection(); // what was selected at one level is not what the next draws
    this.sel.level = level;
    this.sel.explicitLevel = true;
    this.levelSelect.value = level;
    const view = this.timeline.getView();
    const ext = this.extents.get(this.key());
    this.load(view ? fetchWindow(view, ext) : null);
    this.updateLinks();
  }

  fit() {
    const ext = this.extents.get(this.key()) || (this.data && this.data.window);
    if (ext) this.timeline.setView(ext[0], ext[1]);
  }

  // ---- loading -------------------------------------------------------------
  /** Loads the reduced trace of the selected host at the selected level; window null = whole trace. */
  load(window) {
    const host = this.hostInfo();
    if (!host) return;
    const key = this.key();
    const level = this.sel.level;
    if (this.inflight) this.abortInflight();
    if (level === '0' && host.bytes > HUGE_BYTES && !this.insisted.has(key)) {
      this.warnHuge(host, window);
      return;
    }
    this.hideMessage();
    const seq = ++this.seq;
    // `auto`, and the default level until the user picks one, ask for the buckets the screen
    // can show (XProf's `resolution`): one per device pixel of the canvas, the whole trace or
    // a zoomed window alike (levels 1-4 get min(that, their own count)). An explicit level
    // 0-4 (picked, or from a link) is exactly that level, as its download is.
    const resolution = level === 'auto' || !this.sel.explicitLevel ? this.canvasResolution() : null;
    const params = viewParams({run: this.sel.run, ...this.target(), level, window, resolution});
    // The timeline draws no args; a click asks the `event` route for them. Leaving
    // them out makes each window cheaper to write, send and parse.
    params.set('args', '0');
    const controller = new AbortController();
    const started = performance.now();
    const job = this.loader.load(routeUrl('trace', params), {
      onProgress: (received) => this.onProgress(seq, received, started),
      onPhase: (phase, received) => {
        if (seq !== this.seq) return;
        this.setStatus(`Parsing ${formatBytes(received)} of JSON…`);
        this.setProgress(1);
      },
    });
    this.inflight = {seq, job, controller, window, level, key, resolution, receiving: false};
    this.timelineBox.dataset.loading = '1';
    this.setStatus(`Reducing ${this.multi() ? `${formatCount(this.sel.hosts.length)} hosts` : this.sel.host} at level ${level} on the server…`);
    this.setProgress(0);
    if (!this.multi()) this.watchProgress(seq, this.sel.run, this.sel.host, level, controller.signal);
    this.pendingStats = null;
    getJson('stats', params, controller.signal).then((stats) => {
      if (seq !== this.seq) return;
      this.pendingStats = stats;
      if (!this.inflight) this.applyStats(stats);
    }).catch(() => {}); // the trace request reports failures
    return job.promise.then((model) => this.loaded(seq, model, window, level, key, started, resolution),
      (err) => this.failed(seq, err));
  }

  /**
   * Until the first byte of a view arrives, say what the server is doing for it (`progress`
   * route, every 400 ms): a first open of a big trace parses the whole file, which takes
   * seconds; the line says how much of the file is read, of how much, and how fast.
   */
  watchProgress(seq, run, host, level, signal) {
    const waiting = () => seq === this.seq && this.inflight && this.inflight.seq === seq && !this.inflight.receiving;
    const tick = () => {
      if (!waiting()) return;
      getJson('progress', {run, host}, signal).then((p) => {
        if (!waiting()) return;
        if (p.stage === 'reading' && p.total > 0) {
          this.setStatus(`Reading ${host} on the server: ${formatBytes(p.done)} of ${formatBytes(p.total)}` +
            `${p.bytes_per_s > 0 ? ` at ${formatBytes(p.bytes_per_s)}/s` : ''} (${formatSeconds(p.seconds)})…`);
          this.setProgress(Math.min(1, p.done / p.total));
        } else if (p.stage === 'reducing') {
          // Planning tells no fraction; copying the kept events out of the file's text does.
          const copying = p.total > 0 ? `: copying its kept events, ${formatBytes(p.done)} of ${formatBytes(p.total)} read` : '';
          this.setStatus(`Reducing ${host} at level ${level} on the server${copying} (${formatSeconds(p.seconds)})…`);
          this.setProgress(p.total > 0 ? Math.min(1, p.done / p.total) : 0); // a bar of its own, from empty
        }
        setTimeout(tick, 400);
      }, () => {
        if (waiting()) setTimeout(tick, 1000); // a passing failure: the view's own request reports real ones
      });
    };
    setTimeout(tick, 250);
  }

  /** The screen's bucket count: the timeline canvas's CSS width × devicePixelRatio, clamped (policy.js). */
  canvasResolution() {
    const css = this.timeline.canvas.getBoundingClientRect().width || this.timeline.width;
    return screenResolution(css, window.devicePixelRatio || 1);
  }

  abortInflight() {
    const f = this.inflight;
    this.inflight = null;
    f.controller.abort();
    f.job.abort();
    this.timelineBox.dataset.loading = '0';
    this.setProgress(null);
  }

  onProgress(seq, received, started) {
    if (seq !== this.seq) return;
    if (this.inflight && this.inflight.seq === seq) this.inflight.receiving = true;
    const expected = this.pendingStats && this.pendingStats.output ? this.pendingStats.output.json_bytes : null;
    const secs = ((performance.now() - started) / 1000).toFixed(1);
    this.setStatus(expected ? `Receiving ${formatBytes(received)} of ${formatBytes(expected)} (${secs} s)…`
      : `Receiving ${formatBytes(received)} (${secs} s)…`);
    this.setProgress(expected ? received / expected : 0.5);
  }

  loaded(seq, model, window, level, key, started, resolution = null) {
    if (seq !== this.seq) return;
    this.inflight = null;
    this.timelineBox.dataset.loading = '0';
    this.setProgress(null);
    const tb = model.tb || {};
    const full = window === null;
    const dataWindow = model.window;
    if (full) {
      this.extents.set(key, dataWindow.slice());
      this.timeline.setExtent(dataWindow.slice());
      this.refreshDetailTimes(); // details shown before the trace's start was known count from it now
    }
    this.data = {key, level: typeof tb.level === 'number' ? tb.level : Number(level), requested: level, window: dataWindow,
      full, bucketUs: typeof tb.bucket_us === 'number' ? tb.bucket_us : 0, asked: resolution, model};
    this.labelLevels(tb, resolution);
    groupSummaryCounts(model);
    this.timeline.setModel(model, dataWindow);
    this.askMemory(model, key, window, resolution);
    this.steps.setModel(model);
    this.steps.setView(this.timeline.getView());
    this.restoreSelection(model);
    const total = ((performance.now() - started) / 1000).toFixed(2);
    const shown = model.slices.count + model.instants.count;
    this.setStatus(`Level ${this.data.level}${level === 'auto' ? ' (auto)' : ''}: ${formatCount(model.eventCount)} events in ` +
      `${full ? 'the whole trace' : `a ${formatDuration(dataWindow[1] - dataWindow[0])} window`} · loaded in ${total} s` +
      (isMerged(model) ? ` · ${mergedNote(tb)}` : ''));
    this.timelineBox.dataset.hosts = isMerged(model) ? String((tb.hosts || []).length) : '';
    if (isMerged(model)) this.spread.setOffsets(tb.hosts);
    if (isMerged(model) && this.revealHost) {
      const p = model.processes.findIndex((proc) => (hostOfPid(tb, proc.pid) || {}).host === this.revealHost);
      if (p >= 0) this.timeline.revealProcess(p);
      this.revealHost = null;
    }
    if (!shown && !model.counters.length) {
      this.showMessage('Nothing to draw', full ? 'This trace holds no slices, counters or instants.'
        : 'No events in this window: zoom out or press Fit.');
    }
    if (!full && !this.extents.has(key)) this.discoverExtent(key);
    this.timelineBox.dataset.level = String(this.data.level);
    this.timelineBox.dataset.events = String(model.eventCount);
    this.timelineBox.dataset.buckets = tb.resolution ? String(tb.resolution) : '';
    this.stats = this.pendingStats && this.pendingStats.level === this.data.level ? this.pendingStats : null;
    this.renderStats();
    this.updateLinks();
    this.maybeFetch(); // the view may have moved while this was loading
  }

  failed(seq, err) {
    if (seq !== this.seq || err.name === 'AbortError') return;
    this.inflight = null;
    this.timelineBox.dataset.loading = '0';
    this.setProgress(null);
    const what = `${this.sel.run} / ${this.multi() ? `${formatCount(this.sel.hosts.length)} hosts` : this.sel.host}`;
    this.setStatus(`Could not load ${what}: ${err.message}`, 'tbr-error');
    if (!this.data) {
      const hint = err.status === 413 ? 'The file is over the server\'s input limit (--tb_reduce_max_input_mb).'
        : err.status === 422 ? 'The server could not read this file.' : '';
      this.showMessage(`Could not load ${what}`, err.message, [], 'tbr-error');
      if (hint) this.message.append(el('p', {class: 'tbr-muted'}, hint));
    }
  }

  /**
   * A shared link opens on a window, so the trace's extent (for Fit, the zoom-out
   * limit and a ruler that starts at the trace's start, as the sender saw it)
   * is unknown: ask the cheapest level's stats for it, once.
   */
  discoverExtent(key) {
    if (this.extentAsked.has(key)) return;
    this.extentAsked.add(key);
    getJson('stats', viewParams({run: this.sel.run, ...this.target(), level: '4'})).then((st) => {
      const w = st && st.window_us;
      if (!Array.isArray(w) || !(w[1] > w[0]) || this.extents.has(key)) return;
      this.extents.set(key, w.slice());
      if (key === this.key()) {
        this.timeline.setExtent(w.slice());
        this.timeline.requestDraw();
        this.updateLinks();
        this.refreshDetailTimes(); // the ruler's zero moved to the trace's start
      }
    }).catch(() => this.extentAsked.delete(key));
  }

  warnHuge(host, window) {
    this.setStatus(`Level 0 of a ${formatBytes(host.bytes)} trace: waiting for your choice.`);
    this.showMessage(`${this.sel.host} is ${formatBytes(host.bytes)} (${host.format})`,
      'Level 0 sends every event to this tab, which may freeze or crash it. ' +
      'Level 2 (the default) keeps every slice you can see at this zoom and folds the rest into counted summaries; ' +
      'auto picks the least reduced level that fits a budget; zooming in brings the detail back.',
      [['Use level 2', () => this.setLevel('2'), 'tbr-primary'],
        ['Use auto', () => this.setLevel('auto')],
        ['Load level 0 anyway', () => {
          this.insisted.add(this.key());
          this.load(window);
        }, 'tbr-danger']], 'tbr-warning');
    this.timelineBox.dataset.loading = '0';
  }

  // ---- view changes: links now, fetches debounced ----------------------------
  viewChanged() {
    this.steps.setView(this.timeline.getView());
    this.pushStack();
    clearTimeout(this.fetchTimer);
    this.fetchTimer = setTimeout(() => {
      this.updateLinks();
      this.maybeFetch();
    }, FETCH_DEBOUNCE_MS);
  }

  maybeFetch() {
    const view = this.timeline.getView();
    if (!view || !this.data || this.data.key !== this.key()) return;
    const width = this.timeline.plotWidth();
    const f = this.inflight;
    if (f && f.key === this.key()) {
      // a request already on its way will do if it covers the view finely enough
      const win = f.window || this.extents.get(f.key) || this.data.window;
      const pending = {window: win, full: !f.window, level: f.level === '0' ? 0 : -1, bucketUs: 0};
      if (!needsFetch(view, pending, width, this.extents.get(this.key()))) return;
    } else if (this.data.requested === this.sel.level && !needsFetch(view, this.data, width, this.extents.get(this.key()))) {
      return;
    }
    this.load(fetchWindow(view, this.extents.get(this.key())));
  }

  /** The visible window, or null when it shows the whole trace (shorter links, better cached). */
  currentWindow() {
    const view = this.timeline.getView();
    if (!view) return this.initial.window;
    const ext = this.extents.get(this.key());
    if (ext && view[0] <= ext[0] + 1e-6 && view[1] >= ext[1] - 1e-6) return null;
    return view;
  }

  updateLinks() {
    if (!this.sel.host) {
      this.shareLink.removeAttribute('href');
      this.downloadLink.removeAttribute('href');
      return;
    }
    const state = {run: this.sel.run, ...this.target(), level: this.sel.level, explicitLevel: this.sel.explicitLevel,
      window: this.currentWindow(), event: this.selected && !this.multi() ? this.selected.input : null,
      compare: this.compare ? this.compare.state() : null};
    this.shareLink.href = shareUrl(BASE, state);
    this.downloadLink.href = downloadUrl(BASE, state);
    const view = this.timeline.getView();
    if (view) {
      this.timelineBox.dataset.startUs = String(roundUs(view[0]));
      this.timelineBox.dataset.endUs = String(roundUs(view[1]));
    }
    if (this.standalone) {
      // the view page's own address follows the view, so reload and bookmarks keep it
      history.replaceState(null, '', `?${linkParams(state)}`);
    }
  }

  async copyLink(e) {
    if (e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return; // let the browser open it
    e.preventDefault();
    this.updateLinks();
    const url = this.shareLink.href;
    try {
      await navigator.clipboard.writeText(url);
      this.copied.textContent = 'Link copied';
    } catch {
      // clipboard blocked (iframe permissions, http): show the link to copy by hand
      const input = el('input', {class: 'tbr-linkbox', readonly: true, value: url, 'aria-label': 'Link to this view'});
      setChildren(this.copied, input);
      input.select();
    }
    clearTimeout(this.copiedTimer);
    this.copiedTimer = setTimeout(() => this.copied.replaceChildren(), 8000);
  }

  // ---- stats ---------------------------------------------------------------
  applyStats(stats) {
    if (stats) this.stats = stats;
    this.renderStats();
  }

  renderStats() {
    const d = this.data;
    this.renderHostNotes();
    if (!d) {
      setChildren(this.statsBox);
      return;
    }
    const tb = d.model.tb || {};
    const st = this.stats && this.stats.level === tb.level ? this.stats : null;
    const input = {...(tb.input || {}), ...(st ? st.input : {})};
    const output = {...(tb.output || {}), ...(st ? st.output : {})};
    const host = this.hostInfo();
    const fileBytes = input.bytes ?? (host ? host.bytes : undefined);
    const original = [
      ['events', formatCount(input.events)],
      ['file', `${formatBytes(fileBytes)} (${input.format || (host && host.format) || '?'})`],
    ];
    if (input.json_bytes && input.format !== 'xspace') original.push(['JSON', formatBytes(input.json_bytes)]);
    const screen = tb.merged && tb.resolution ? ` per host, ${formatCount((tb.hosts || []).length)} hosts`
      : d.asked && tb.resolution === d.asked ? ', one per screen pixel' : '';
    const reduced = [
      ['level', `${tb.level ?? '?'}${d.requested === 'auto' ? ' (picked by auto)' : ''}${tb.resolution ? ` · ${formatCount(tb.resolution)} buckets${tb.bucket_us ? ` of ${formatDuration(tb.bucket_us)}` : ''}${screen}`
        : tb.merged && tb.lanes && tb.level !== 0 ? ` · the buckets shared by ${formatCount(tb.lanes.lanes)} lanes and the expanded hosts` : ' · lossless'}`],
      ['events', `${formatCount(output.events)} (${formatRatio(output.events, input.events)})` +
        (output.summaries ? `, of which ${formatCount(output.summaries)} summaries` : '')],
      ['JSON', output.json_bytes !== undefined ? `${formatBytes(output.json_bytes)}${input.json_bytes && input.format !== 'xspace' ? ` (${formatRatio(output.json_bytes, input.json_bytes)})` : ''}` : '…'],
      ['window', host && host.capped && !this.multi() ? this.cappedWindow(host, d)
        : d.full ? `whole trace, ${formatDuration(d.window[1] - d.window[0])}` : `${formatDuration(d.window[1] - d.window[0])} of the trace`],
    ];
    const t = st && st.timings_s ? st.timings_s : null;
    const timing = [
      ['server', t ? `${formatSeconds(t.request)}${st.cached ? ' (cached earlier)' : ''}` : '…'],
    ];
    if (t && t.index !== undefined) timing.push(['steps', `index ${formatSeconds(t.index)} · plan ${formatSeconds(t.plan)} · write ${formatSeconds(t.write)}`]);
    if (d.model.timing) timing.push(['browser', `receive ${formatDuration(d.model.timing.receive_ms * 1000)} · parse ${formatDuration(d.model.timing.parse_ms * 1000)}`]);
    const card = (title, rows, cls) => el('div', {class: `tbr-card ${cls}`, 'data-testid': `card-${cls.slice('tbr-card-'.length)}`}, el('h4', {}, title),
      el('dl', {}, rows.map(([k, v]) => [el('dt', {}, k), el('dd', {}, v)])));
    setChildren(this.statsBox, card('Original', original, 'tbr-card-in'), el('div', {class: 'tbr-arrow', 'aria-hidden': 'true'}, '→'),
      card('Reduced', reduced, 'tbr-card-out'), card('Reduction took', timing, 'tbr-card-time'));
  }

  /** The line under the pickers (panels/hosts.js HostNotes): a capped JAX export's note, a file cut mid-event. */
  renderHostNotes() {
    const host = this.multi() ? null : this.hostInfo();
    const d = this.data;
    const tb = d ? d.model.tb || {} : {};
    const st = d && this.stats && this.stats.level === tb.level ? this.stats : null;
    const truncated = !!((tb.input && tb.input.truncated) || (st && st.input && st.input.truncated));
    this.hostNotes.show({host, truncated});
  }

  /**
   * The Reduced card's window for JAX's capped export: the span it covers of its XSpace's, which
   * is the XSpace host's extent (known once it was shown, else asked once of its stats: it indexes
   * the XSpace, which the run opens first anyway).
   */
  cappedWindow(host, d) {
    const xspace = host.capped.of;
    const key = `${this.sel.run}\u0000${xspace}`;
    const ext = this.extents.get(key);
    if (!ext && !this.extentAsked.has(key)) {
      this.extentAsked.add(key);
      getJson('stats', viewParams({run: this.sel.run, host: xspace, level: '4'})).then((st) => {
        const w = st && st.window_us;
        if (Array.isArray(w) && w[1] > w[0] && !this.extents.has(key)) this.extents.set(key, w.slice());
        this.renderStats();
      }).catch(() => this.extentAsked.delete(key));
    }
    const own = this.extents.get(this.key()) || d.window;
    return el('span', {'data-testid': 'capped-window', class: 'tbr-capped-window'},
      cappedWindowText(own[1] - own[0], ext ? ext[1] - ext[0] : null), ' ',
      el('button', {type: 'button', class: 'tbr-linkish', onclick: () => this.selectHost(xspace)}, 'open it'));
  }

  // ---- search, range statistics, marks (issue 13) ---------------------------------
  // keys.js binds `/`, `f`, `m` and Esc to focusSearch, frameSelected, markSelected and
  // clearAll; Enter / Shift+Enter in the search box step with searchNext / searchPrev.

  /** The search box, the marks' count and the range statistics panel (placed by build()). */
  buildQuery() {
    this.search = new SearchBar({
      // search and range statistics read one host's index on its own clock: not a merged view's
      context: () => ({run: this.multi() ? null : this.sel.run, host: this.sel.host, view: this.timeline.getView()}),
      onHits: (hits) => this.timeline.setSearchHits(hits),
      onGo: (hit) => this.goToHit(hit),
      onEscape: () => this.clearAll(),
    });
    this.marksCount = el('button', {type: 'button', 'data-testid': 'marks', onclick: () => this.nextMark()});
    this.marksBox = el('span', {class: 'tbr-marks', hidden: true}, this.marksCount,
      el('button', {type: 'button', 'data-testid': 'marks-clear', 'aria-label': 'Remove all marks', title: 'Remove all marks',
        onclick: () => {
          this.currentMarks().clear();
          this.renderMarks();
        }}, '\u00d7'));
    this.compare = new ComparePanel({
      onName: (name) => { // highlighted where they are in this trace, and in the baseline's stacked under it
        this.search.setQuery(name);
        const other = this.stack && this.stack.frame.contentWindow && this.stack.frame.contentWindow.tbReduceDashboard;
        if (other && other.search) other.search.setQuery(name);
      },
      onChange: () => this.updateLinks(),
      onOverlay: (run) => this.overlayRun(run),
      onStack: ({base, first, firstBase}) => this.stackTimelines(base, first, firstBase ?? first),
    });
    this.aggregate = new AggregatePanel({
      onClose: () => this.clearRange(),
      onName: (name) => this.search.setQuery(name), // highlighted where they are; Enter steps from the view
      onGoto: (event) => this.openEvent(event.i, {frame: true, known: event}),
    });
  }

  focusSearch() {
    this.search.focus();
  }

  searchNext() {
    return this.search.next();
  }

  searchPrev() {
    return this.search.prev();
  }

  /** Zooms the timeline to the selected event: its span with as much again on each side. */
  frameSelected() {
    const ev = this.selected && this.selected.event;
    if (!ev) return;
    const ts = Number(ev.ts);
    this.timeline.frameSpan(ts, ts + (Number(ev.dur) || 0));
    this.timeline.reveal(ev);
    this.selected.reveal = REVEAL_LOADS;
  }

  /** Marks the selected event, or unmarks it: a band and a flag on the timeline, kept per trace. */
  markSelected() {
    const ev = this.selected && this.selected.event;
    if (!ev) return;
    const marks = this.currentMarks();
    const id = ev.i !== null && ev.i !== undefined ? `#${ev.i}` : `${ev.pid}|${ev.tid}|${ev.ts}`;
    if (marks.has(id)) marks.delete(id);
    else marks.set(id, ev);
    this.renderMarks();
  }

  /** Esc: the selection, the range and the search's highlight go; the query text stays. */
  clearAll() {
    this.clearSelection();
    this.clearRange();
    this.search.clear();
  }

  clearSelection() {
    this.timeline.setSelected(null);
    this.timeline.setCurrentHit(null);
    this.showDetails(null);
  }

  /** The ruler's zero (the trace's start, as the timeline counts). */
  origin() {
    return this.timeline.displayOrigin ?? (this.data ? this.data.model.origin : 0);
  }

  /** Another run or host: its own marks, no range, the same query searched there. */
  queryHostChanged() {
    this.clearRange();
    this.timeline.setCurrentHit(null);
    this.timeline.setSearchHits([]);
    this.search.refresh();
    this.markCursor = -1;
    this.renderMarks();
  }

  /** A search hit stepped to: zoom to it, select and highlight it, show its details. */
  goToHit(hit) {
    this.timeline.setCurrentHit(hit);
    this.selectEvent(hit, {frame: true});
  }

  /**
   * Selects input event `ev` ({i, name, ph, ts, dur, pid, tid}, absolute µs), which the view
   * may draw as itself, fold into a summary or not hold yet: the timeline finds it again in
   * every model it loads (restoreSelection). `full`: the event route's answer, if at hand.
   */
  selectEvent(ev, {frame = false, full = null} = {}) {
    const event = {...ev, ts: Number(ev.ts), dur: ev.dur === null || ev.dur === undefined ? null : Number(ev.dur)};
    this.selected = {kind: /^[iIR]$/.test(event.ph || '') ? 'instant' : 'slice', input: event.i ?? null, event,
      reveal: REVEAL_LOADS};
    if (frame) this.timeline.frameSpan(event.ts, event.ts + (event.dur || 0));
    const hit = this.timeline.hitOf(event);
    this.timeline.setSelected(hit);
    this.timeline.reveal(event);
    if (hit && !frame) this.selected.reveal = 0;
    this.showEventDetails(event, full);
    this.updateLinks();
  }

  /**
   * Selects input event #i (a shared link's `event=`, a table's longest slice): its place
   * comes from the event route. The selection holds at once, so the link keeps it and the
   * timeline outlines it as soon as a view draws it.
   */
  openEvent(i, {frame = false, known = null} = {}) {
    const key = this.key();
    this.selected = {kind: 'slice', input: i, event: null, reveal: REVEAL_LOADS};
    this.timeline.setSelected(null);
    if (this.data) this.restoreSelection(this.data.model);
    setChildren(this.details, el('h3', {class: 'tbr-detail-name'}, known && known.name ? known.name : `Event #${i}`),
      el('p', {class: 'tbr-muted'}, `Loading event #${i}…`));
    this.updateLinks();
    const seq = ++this.detailsSeq;
    fetchEvent(this.sel.run, this.sel.host, i).then((e) => {
      if (key !== this.key() || seq !== this.detailsSeq || !this.selected || this.selected.input !== i) return;
      const event = {i, name: e.name ?? (known && known.name) ?? '', ph: e.ph, ts: e.ts ?? (known && known.ts),
        dur: e.dur ?? (known && known.dur) ?? null, pid: e.pid, tid: e.tid};
      this.selectEvent(event, {frame, full: e});
    }, (err) => {
      if (key !== this.key() || seq !== this.detailsSeq) return;
      setChildren(this.details, el('p', {class: 'tbr-error'}, `Could not load event #${i}: ${err.message}`));
    });
  }

  /** The details of an input event known by place (a search hit, a link's event), then its args. */
  showEventDetails(ev, full = null) {
    const seq = ++this.detailsSeq;
    const rows = [['start', relSeconds(ev.ts - this.origin()), ev.ts], ['ts', `${roundUs(ev.ts)} µs`]];
    if (ev.dur !== null && ev.dur !== undefined) rows.push(['duration', formatDuration(ev.dur)]);
    rows.push(['track', this.trackLabel(ev)]);
    this.foldNote = el('div', {class: 'tbr-fold-note', 'data-testid': 'fold-note', role: 'note', hidden: true});
    const body = el('div', {class: 'tbr-args'});
    setChildren(this.details, el('h3', {class: 'tbr-detail-name'}, ev.name), detailList(rows), this.foldNote, body);
    this.updateFoldNote();
    if (ev.i === null || ev.i === undefined) return;
    if (full) {
      setChildren(body, renderEvent(full, ev.i));
      return;
    }
    setChildren(body, el('p', {class: 'tbr-muted'}, `Loading event #${ev.i}…`));
    fetchEvent(this.sel.run, this.sel.host, ev.i).then((event) => {
      if (seq === this.detailsSeq) setChildren(body, renderEvent(event, ev.i));
    }, (err) => {
      if (seq === this.detailsSeq) setChildren(body, el('p', {class: 'tbr-error'}, `Could not load the event's arguments: ${err.message}`));
    });
  }

  /** The details' times from the ruler's zero, again (a shared link learns the trace's start late). */
  refreshDetailTimes() {
    for (const dd of this.details.querySelectorAll('dd[data-ts]')) {
      dd.textContent = relSeconds(Number(dd.dataset.ts) - this.origin());
    }
  }

  /** "process › thread" of an event: the search route's names, else the model's labels, else the ids. */
  trackLabel(ev) {
    if (ev.process || ev.thread) return `${ev.process ?? ev.pid} › ${ev.thread ?? ev.tid}`;
    const m = this.timeline.model;
    const t = m ? this.timeline.trackIndexOf(ev.pid, ev.tid) : -1;
    if (t >= 0) return `${m.processes[m.tracks[t].proc].label} › ${m.tracks[t].label}`;
    return `pid ${ev.pid ?? '—'} · tid ${ev.tid ?? '—'}`;
  }

  /** Says so in the details when the view folds the selected event into a summary (or has not loaded it). */
  updateFoldNote() {
    const note = this.foldNote;
    const ev = this.selected && this.selected.event;
    if (!note || !ev || !note.isConnected) return;
    const r = this.timeline.resolve(ev);
    const state = r ? r.state : 'unloaded';
    note.dataset.state = state;
    if (state === 'folded') {
      const level = this.data ? this.data.level : '?';
      setChildren(note, el('span', {}, `Folded into a summary at level ${level} — zoom in or pick level 0.`),
        el('button', {type: 'button', class: 'tbr-button', onclick: () => this.frameSelected()}, 'Zoom in'),
        level !== 0 ? el('button', {type: 'button', class: 'tbr-button', onclick: () => this.setLevel('0', {keepSelection: true})},
          'Level 0') : null);
      note.hidden = false;
    } else if (state === 'unloaded' && this.data) {
      setChildren(note, el('span', {}, 'Outside the loaded window: loading it…'));
      note.hidden = !this.inflight;
    } else {
      note.hidden = true;
    }
  }

  /** The input event a timeline hit draws, {i, name, ph, ts, dur, pid, tid} (absolute µs), or null. */
  eventOfHit(hit, input, name) {
    const m = hit.model;
    if (!m) return null;
    if (hit.kind === 'slice') {
      const s = m.slices;
      const track = m.tracks[s.rowTrack[s.row[hit.index]]];
      return {i: input, name, ph: 'X', ts: s.ts[hit.index] + m.origin, dur: s.dur[hit.index], pid: track.pid, tid: track.tid};
    }
    if (hit.kind === 'instant') {
      const inst = m.instants;
      let g = 0;
      while (g + 1 < inst.start.length && inst.start[g + 1] <= hit.index) g += 1;
      const track = g < inst.procBase ? m.tracks[g] : null;
      const proc = !track && g < inst.globalGroup ? m.processes[g - inst.procBase] : null;
      return {i: input, name, ph: 'i', ts: inst.ts[hit.index] + m.origin, dur: null,
        pid: track ? track.pid : proc ? proc.pid : null, tid: track ? track.tid : null};
    }
    return null;
  }

  currentMarks() {
    const key = this.key();
    if (!this.marksByKey.has(key)) this.marksByKey.set(key, new Map());
    return this.marksByKey.get(key);
  }

  renderMarks() {
    const marks = [...this.currentMarks().values()];
    this.timeline.setMarks(marks);
    this.marksBox.hidden = !marks.length;
    this.marksCount.textContent = `\u2691 ${formatCount(marks.length)}`;
    const label = `${formatCount(marks.length)} ${marks.length === 1 ? 'mark' : 'marks'}`;
    this.marksCount.setAttribute('aria-label', `${label}: go to the next one`);
    this.marksCount.title = `${label} (m toggles one on the selected slice) — click to go to the next:\n` +
      marks.map((mk) => `• ${mk.name} at ${relSeconds(mk.ts - this.origin())}`).join('\n');
  }

  /** The marks' button: selects and frames each mark in time order, in turn. */
  nextMark() {
    const marks = [...this.currentMarks().values()].sort((a, b) => a.ts - b.ts);
    if (!marks.length) return;
    this.markCursor = (this.markCursor + 1) % marks.length;
    this.selectEvent(marks[this.markCursor], {frame: true});
  }

  /** Shift+drag on the timeline: the band follows the pointer; on release, the range's statistics. */
  rangeChanged(range, final) {
    this.range = range;
    if (!final) return;
    if (this.multi()) {
      this.setStatus('Range statistics are per host: choose one host to see them.');
      return;
    }
    this.aggregate.show({run: this.sel.run, host: this.sel.host, range, origin: this.origin()});
  }

  clearRange() {
    this.range = null;
    this.timeline.setRange(null);
    this.aggregate.clear();
  }

  /** For tests: the query layer's state in plain values. */
  queryState() {
    const sel = this.selected;
    const ev = sel && sel.event;
    return {
      search: this.search.state(),
      selected: sel ? {input: sel.input, kind: sel.kind, ts: ev ? ev.ts : null, name: ev ? ev.name : null} : null,
      timelineSelected: this.timeline.selected ? {kind: this.timeline.selected.kind, index: this.timeline.selected.index} : null,
      resolved: ev ? this.timeline.resolve(ev) : null,
      currentHit: this.timeline.currentHit ? this.timeline.currentHit.i : null,
      highlighted: this.timeline.searchHits.length,
      range: this.range ? this.range.slice() : null,
      rows: this.aggregate.rows().map((r) => ({name: r.name, count: r.count, wall_us: r.wall_us, self_us: r.self_us})),
      marks: [...this.currentMarks().values()].map((mk) => mk.i),
      view: this.timeline.getView(),
      level: this.data ? this.data.level : null,
    };
  }

  // ---- details ---------------------------------------------------------------
  /** Re-finds the clicked event in a new response, by its input index. */
  restoreSelection(model) {
    const sel = this.selected;
    if (!sel || sel.input === null) {
      this.timeline.setSelected(null);
      return;
    }
    if (sel.event) {
      // where it is known (its track and time): found by a binary search, not a scan
      const hit = this.timeline.hitOf(sel.event);
      this.timeline.setSelected(hit);
      if (sel.reveal) {
        // scrolled to, until a view draws it as itself (a few loads at most: the user may scroll away)
        this.timeline.reveal(sel.event);
        sel.reveal = hit ? 0 : sel.reveal - 1;
      }
      this.updateFoldNote();
      return;
    }
    const s = model.slices;
    for (let i = 0; i < s.count; i += 1) {
      if (!(s.flags[i] & FLAG_SUMMARY) && inputIndexOf(model, s.k[i]) === sel.input) {
        this.timeline.setSelected({kind: 'slice', index: i, model});
        return;
      }
    }
    this.timeline.setSelected(null);
  }

  /** A click on a host's busy lane (a merged view of many hosts): that host's tracks, fetched again. */
  expandLane(host) {
    if (this.sel.expand.includes(host)) return;
    this.sel.expand = [...this.sel.expand, host];
    this.revealHost = host; // its tracks are scrolled to once they arrive
    this.setStatus(`Expanding ${host}…`);
    const view = this.timeline.getView();
    this.load(view ? fetchWindow(view, this.extents.get(this.key())) : null);
    this.updateLinks();
  }

  showDetails(hit) {
    const seq = ++this.detailsSeq;
    if (!hit) {
      this.selected = null;
      this.foldNote = null;
      setChildren(this.details, el('p', {class: 'tbr-muted'}, 'Click a slice to see its arguments.'));
      this.updateLinks();
      return;
    }
    // What to show comes from the hit's track module (tracks/*.js): no per-kind switch here.
    const m = hit.model;
    const {name, rows, k, summary, span} = this.timeline.details(hit);
    if (hit.kind === 'waveform') {
      this.selected = null;
      setChildren(this.details, el('h3', {class: 'tbr-detail-name'}, name),
        el('dl', {class: 'tbr-detail-basics'}, rows.map(([a, b]) => [el('dt', {}, a), el('dd', {}, b)])),
        el('button', {type: 'button', class: 'tbr-button', onclick: () => this.timeline.zoomTo(span[0], span[1])},
          'Zoom to this step'));
      return;
    }
    const input = summary ? null : inputIndexOf(m, k);
    const event = this.eventOfHit(hit, input, name);
    // A merged view's event is one of its host's: that host's own index asks the event route.
    const place = isMerged(m) && event && input !== null ? hostEventOf(m.tb, event.pid, input) : null;
    if (place && place.lane) {
      this.expandLane(place.host);
      return;
    }
    this.selected = {kind: hit.kind, input, event};
    this.foldNote = null;
    this.updateLinks();
    const body = el('div', {class: 'tbr-args'});
    const basics = withTimes(rows, event ? event.ts : NaN, this.origin());
    if (place) basics.unshift(['host', place.host]);
    setChildren(this.details, el('h3', {class: 'tbr-detail-name'}, name), detailList(basics), body);
    this.details.dataset.host = place ? place.host : this.sel.host || '';
    if (summary) {
      const [t0, t1] = span;
      setChildren(body,
        el('p', {}, `${formatCount(summary.count)} events folded here (a summary slice: they were each narrower than one bucket at this level).`),
        summary.busy === null ? null
          : el('p', {class: 'tbr-summary-busy'}, `They keep its span ${Math.round(summary.busy * 100)}% busy on average; the shading shows where (more solid: busier).`),
        el('table', {class: 'tbr-top'}, el('tr', {}, el('th', {}, 'count'), el('th', {}, 'name')),
          summary.top.map(([n, c]) => el('tr', {}, el('td', {}, formatCount(c)), el('td', {}, n)))),
        el('button', {type: 'button', class: 'tbr-button', onclick: () => {
          const pad = (t1 - t0) * 0.1 || 1;
          this.timeline.setView(t0 - pad, t1 + pad);
        }}, 'Zoom to these events'));
      return;
    }
    // (a merged view's event no host owns, a global instant, has no event to ask for)
    const [host, i] = place ? [place.host, place.i] : isMerged(m) ? [null, null] : [this.sel.host, input];
    if (i === null || i === undefined) return;
    setChildren(body, el('p', {class: 'tbr-muted'}, `Loading event #${i}…`));
    getJson('event', {run: this.sel.run, host, i: String(i)}).then((event) => {
      if (seq !== this.detailsSeq) return;
      setChildren(body, renderEvent(event, i));
    }, (err) => {
      if (seq !== this.detailsSeq) return;
      setChildren(body, el('p', {class: 'tbr-error'}, `Could not load the event's arguments: ${err.message}`));
    });
  }
}

/** The details' basic rows, [[key, text], …], as a definition list (each with its key, for tests). */
function detailList(rows) {
  return el('dl', {class: 'tbr-detail-basics'}, rows.map(([a, b, ts]) => [el('dt', {}, a),
    el('dd', {'data-key': a, 'data-ts': ts, class: a === 'ts' ? 'tbr-detail-abs' : ''}, b)]));
}

/**
 * A track's rows with its time as the ruler counts it (seconds from the trace's start) and
 * as the trace's own clock says (`ts`, µs), where it had one start or time row.
 */
function withTimes(rows, ts, origin) {
  const out = [];
  for (const [key, value] of rows) {
    if ((key === 'start' || key === 'time') && Number.isFinite(ts)) out.push([key, relSeconds(ts - origin), ts], ['ts', `${roundUs(ts)} µs`]);
    else out.push([key, value]);
  }
  return out;
}

/**
 * Summary slices' names ("<top> (+N more)", as the server writes them) with N grouped as every
 * count shown (format.js formatSummaryName), once per loaded model: the canvas label, the tooltip
 * and the details all read `model.names`. Only the names summaries use are rewritten.
 */
function groupSummaryCounts(model) {
  const s = model.slices;
  if (!s || !Array.isArray(model.names)) return;
  const done = new Set();
  for (let i = 0; i < s.count; i += 1) {
    if (!(s.flags[i] & FLAG_SUMMARY) || done.has(s.name[i])) continue;
    done.add(s.name[i]);
    model.names[s.name[i]] = formatSummaryName(model.names[s.name[i]]);
  }
}

/** The runs with traces, the timeline's: a run of TensorBoard event files only (`scalars_only`) is the waveform panel's. */
function traceRuns(runs) {
  return Array.isArray(runs) ? runs.filter((r) => r && !r.scalars_only && Array.isArray(r.hosts) && r.hosts.length) : [];
}

/** An event's fields and args as a key/value table; values are text (JSON for structures). */
function renderEvent(event, input) {
  const fields = Object.entries(event || {}).filter(([key]) => key !== 'args');
  const args = event && event.args && typeof event.args === 'object' ? Object.entries(event.args) : [];
  const row = ([key, value]) => el('tr', {}, el('th', {}, key),
    el('td', {}, typeof value === 'string' ? value : el('code', {}, JSON.stringify(value))));
  return [
    el('h4', {}, `Arguments (${formatCount(args.length)})`),
    args.length ? el('table', {class: 'tbr-kv', 'data-testid': 'details-args'}, args.map(row)) : el('p', {class: 'tbr-muted'}, 'none'),
    el('h4', {}, `Event #${input}`),
    el('table', {class: 'tbr-kv'}, fields.map(row)),
  ];
}
