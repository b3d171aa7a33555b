// The per-step spread across hosts (`waveforms?run=&hosts=`): with several hosts chosen it
// stands where the waveforms and the step strip stand for one. Per step a band from the
// least to the most any host took, the median as a line, each host a faint dot and the
// straggler (the host that took the most) in red; hover names it, a click zooms the
// timeline to the step (its extent over the hosts, on the merged clock).
import {fetchSpread} from '../api.js';
import {el, setChildren, sizeCanvas} from '../dom.js';
import {formatCount, formatDuration} from '../format.js';

const H = 132;
const PAD = {l: 56, r: 12, t: 10, b: 22};

/** A series' label: `step_time_ms` → "step time", `compute_ms` → "compute". */
function label(name) {
  return name === 'step_time_ms' ? 'step time' : name.replace(/_ms$/, '').replace(/_/g, ' ');
}

export class SpreadPanel {
  /** `onStep(t0, t1)`: a step clicked, its window on the merged clock. */
  constructor(container, {onStep} = {}) {
    this.onStep = onStep || (() => {});
    this.doc = null;
    this.series = 'step_time_ms';
    this.offsets = new Map(); // host → offset_us of the merged view last loaded
    this.hover = -1;
    this.seq = 0;
    this.seriesSelect = el('select', {'data-testid': 'spread-series', 'aria-label': 'Series',
      onchange: () => {
        this.series = this.seriesSelect.value;
        this.requestDraw();
      }});
    this.facts = el('span', {class: 'tbr-spread-facts', 'data-testid': 'spread-facts'});
    this.canvas = el('canvas', {class: 'tbr-spread-canvas', 'data-testid': 'spread-canvas', role: 'img', tabindex: '0',
      'aria-label': 'Per step: the band from the fastest to the slowest host, the median line, the straggler in red; ' +
        'hover names it, click zooms the timeline to the step'});
    this.tooltip = el('div', {class: 'tbr-spread-tooltip', role: 'tooltip', hidden: true});
    this.notes = el('ul', {class: 'tbr-spread-notes', 'data-testid': 'spread-notes'});
    this.root = el('section', {class: 'tbr-spread', 'data-testid': 'spread', 'data-state': 'idle', hidden: true,
      'aria-label': 'Steps across hosts'},
    el('div', {class: 'tbr-wave-head'}, el('strong', {}, 'Steps across hosts'), el('label', {}, 'Series ', this.seriesSelect),
      this.facts),
    this.plot = el('div', {class: 'tbr-spread-plot'}, this.canvas, this.tooltip), this.notes);
    container.append(this.root);
    this.ctx = this.canvas.getContext('2d');
    this.canvas.addEventListener('pointermove', (e) => this.setHover(this.pick(e.offsetX), e.offsetX, e.offsetY));
    this.canvas.addEventListener('pointerleave', () => this.setHover(-1));
    this.canvas.addEventListener('click', (e) => this.choose(this.pick(e.offsetX)));
    this.canvas.addEventListener('keydown', (e) => this.onKey(e));
    new ResizeObserver(() => this.requestDraw()).observe(this.root);
  }

  /** Several hosts of `run` (null: hidden). */
  setContext({run, hosts}) {
    const key = run && hosts && hosts.length > 1 ? `${run}\u0000${hosts.join(',')}` : null;
    if (key === this.key) return;
    this.key = key;
    this.doc = null;
    this.hover = -1;
    const seq = ++this.seq;
    this.root.hidden = !key;
    if (!key) {
      this.root.dataset.state = 'idle';
      return;
    }
    this.root.dataset.state = 'loading';
    setChildren(this.facts, `finding the steps of ${formatCount(hosts.length)} hosts…`);
    setChildren(this.notes);
    this.requestDraw();
    fetchSpread(run, hosts).then((doc) => {
      if (seq !== this.seq) return;
      this.doc = doc;
      this.render();
    }, (err) => {
      if (seq !== this.seq) return;
      this.root.dataset.state = 'error';
      setChildren(this.facts, el('span', {class: 'tbr-error'}, `Could not find the steps: ${err.message}`));
      this.requestDraw();
    });
  }

  /** The merged view's hosts (`tb_reduce.hosts`): where each host's own clock sits on the merged one. */
  setOffsets(hosts) {
    this.offsets = new Map((hosts || []).map((h) => [h.host, Number(h.offset_us) || 0]));
  }

  render() {
    const doc = this.doc;
    const series = doc.series || [];
    if (!series.includes(this.series)) this.series = series[0] || 'step_time_ms';
    setChildren(this.seriesSelect, series.map((s) => el('option', {value: s}, label(s))));
    this.seriesSelect.value = this.series;
    const withSteps = doc.hosts.filter((h) => h.steps > 0).length;
    this.root.dataset.state = doc.steps.length ? 'ready' : 'none';
    this.root.dataset.hosts = String(withSteps);
    this.root.dataset.steps = String(doc.steps.length);
    setChildren(this.facts, doc.steps.length
      ? `${formatCount(doc.steps.length)} ${doc.steps.length === 1 ? 'step' : 'steps'} · ${formatCount(withSteps)} of ${formatCount(doc.hosts.length)} hosts have steps`
      : 'none of these hosts has step markers');
    setChildren(this.notes, doc.hosts.filter((h) => h.error || h.reason || h.repeated).map((h) =>
      el('li', {class: h.error ? 'tbr-error' : 'tbr-muted', 'data-host': h.host},
        `${h.host}: ${h.error || h.reason || `${h.repeated} repeated step numbers (the first of each is used)`}`)));
    this.requestDraw();
  }

  requestDraw() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.draw();
    });
  }

  geometry() {
    const W = Math.max(200, this.plot.clientWidth);
    const steps = this.doc ? this.doc.steps : [];
    let top = 0;
    for (const s of steps) {
      const v = s.series[this.series];
      if (v && Number.isFinite(v.max)) top = Math.max(top, v.max);
    }
    top = top > 0 ? top * 1.08 : 1;
    const slot = (W - PAD.l - PAD.r) / Math.max(1, steps.length);
    const x = (i) => PAD.l + (i + 0.5) * slot;
    const y = (v) => PAD.t + (H - PAD.t - PAD.b) * (1 - v / top);
    return {W, steps, top, slot, x, y};
  }

  draw() {
    if (this.root.hidden) return;
    const g = this.geometry();
    const ctx = sizeCanvas(this.canvas, this.ctx, g.W, H);
    const ink = getComputedStyle(this.root).color || '#444';
    ctx.font = '11px sans-serif';
    ctx.fillStyle = ink;
    ctx.strokeStyle = ink;
    ctx.globalAlpha = 0.35;
    ctx.beginPath();
    ctx.moveTo(PAD.l, PAD.t);
    ctx.lineTo(PAD.l, H - PAD.b);
    ctx.lineTo(g.W - PAD.r, H - PAD.b);
    ctx.stroke();
    ctx.globalAlpha = 1;
    ctx.textAlign = 'right';
    ctx.fillText(formatDuration(g.top * 1000 / 1.08), PAD.l - 4, PAD.t + 8);
    ctx.fillText('0', PAD.l - 4, H - PAD.b);
    const bw = Math.max(2, Math.min(40, g.slot * 0.6));
    const names = this.doc ? this.doc.hosts.map((h) => h.host) : [];
    const median = [];
    g.steps.forEach((s, i) => {
      const v = s.series[this.series];
      if (!v || !Number.isFinite(v.min)) return;
      const cx = g.x(i);
      ctx.fillStyle = i === this.hover ? 'rgba(66, 133, 244, 0.45)' : 'rgba(66, 133, 244, 0.25)';
      const y0 = g.y(v.max);
      ctx.fillRect(cx - bw / 2, y0, bw, Math.max(1, g.y(v.min) - y0));
      v.values.forEach((value, k) => {
        if (value === null || value === undefined) return;
        const straggler = names[k] === v.straggler;
        ctx.fillStyle = straggler ? '#d93025' : 'rgba(95, 99, 104, 0.7)';
        ctx.beginPath();
        ctx.arc(cx, g.y(value), straggler ? 3.5 : 2, 0, 2 * Math.PI);
        ctx.fill();
      });
      median.push([cx, g.y(v.median)]);
    });
    ctx.strokeStyle = '#1a73e8';
    ctx.lineWidth = 2;
    ctx.beginPath();
    for (const [cx, cy] of median) {
      ctx.moveTo(cx - bw / 2, cy);
      ctx.lineTo(cx + bw / 2, cy);
    }
    median.forEach(([cx, cy], i) => (i ? ctx.lineTo(cx, cy) : ctx.moveTo(cx, cy)));
    ctx.stroke();
    ctx.lineWidth = 1;
    ctx.fillStyle = ink;
    ctx.textAlign = 'center';
    const every = Math.max(1, Math.ceil(40 / g.slot));
    g.steps.forEach((s, i) => {
      if (i % every === 0) ctx.fillText(String(s.step), g.x(i), H - 6);
    });
  }

  pick(x) {
    const g = this.geometry();
    if (!g.steps.length) return -1;
    const i = Math.floor((x - PAD.l) / g.slot);
    return i >= 0 && i < g.steps.length ? i : -1;
  }

  /** The lines a step's hover shows. */
  stepLines(i) {
    const s = this.doc.steps[i];
    const v = s.series[this.series];
    const ms = (x) => (Number.isFinite(x) ? formatDuration(x * 1000) : '—');
    return [`step ${s.step} · ${label(this.series)} · ran on ${formatCount(s.hosts)} of ${formatCount(this.doc.hosts.length)} hosts`,
      `min ${ms(v.min)} · median ${ms(v.median)} · max ${ms(v.max)}`,
      v.straggler ? `straggler: ${v.straggler} (${ms(v.max)})` : 'no host has this series here'];
  }

  setHover(i, x = 0, y = 0) {
    if (i !== this.hover) {
      this.hover = i;
      this.requestDraw();
    }
    if (i < 0) {
      this.tooltip.hidden = true;
      return;
    }
    setChildren(this.tooltip, this.stepLines(i).map((line, k) => el('div', {class: k ? '' : 'tbr-tip-name'}, line)));
    this.tooltip.hidden = false;
    this.tooltip.dataset.step = String(this.doc.steps[i].step);
    this.tooltip.style.transform = `translate(${Math.max(0, Math.min(x + 12, this.plot.clientWidth - 320))}px, ${y + 12}px)`;
  }

  /** A step's window on the merged clock: from the first host's start to the last one's end. */
  windowOf(i) {
    const s = this.doc.steps[i];
    let t0 = Infinity;
    let t1 = -Infinity;
    this.doc.hosts.forEach((h, k) => {
      const off = this.offsets.get(h.host);
      if (off === undefined || s.start_us[k] === null || s.end_us[k] === null) return;
      t0 = Math.min(t0, s.start_us[k] + off);
      t1 = Math.max(t1, s.end_us[k] + off);
    });
    return t1 > t0 ? [t0, t1] : null;
  }

  choose(i) {
    if (i < 0) return;
    const w = this.windowOf(i);
    if (w) this.onStep(w[0], w[1]);
  }

  onKey(e) {
    if (!this.doc || !this.doc.steps.length) return;
    const n = this.doc.steps.length;
    if (e.key === 'ArrowRight' || e.key === 'ArrowLeft') {
      e.preventDefault();
      const i = this.hover < 0 ? 0 : (this.hover + (e.key === 'ArrowRight' ? 1 : n - 1)) % n;
      const g = this.geometry();
      this.setHover(i, g.x(i), 20);
    } else if (e.key === 'Enter') {
      this.choose(this.hover);
    }
  }

  /** For tests: where step `i` is drawn (canvas CSS px), or null. */
  locate(i) {
    if (!this.doc || i < 0 || i >= this.doc.steps.length || this.root.hidden) return null;
    const g = this.geometry();
    const v = this.doc.steps[i].series[this.series];
    return {x: g.x(i), y: Number.isFinite(v.median) ? g.y(v.median) : H / 2};
  }

  /** For tests: the panel's state in plain values. */
  debug() {
    const d = this.doc;
    return {state: this.root.dataset.state, hidden: this.root.hidden, series: this.series,
      hosts: d ? d.hosts.map((h) => ({host: h.host, steps: h.steps, error: h.error || null, reason: h.reason || null})) : [],
      steps: d ? d.steps.map((s) => ({step: s.step, hosts: s.hosts, ...s.series[this.series]})) : []};
  }
}
