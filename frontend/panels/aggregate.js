// Range statistics under the timeline (issue 13): shift+drag selects a time range and
// the server's `aggregate` route answers, per name, how many slices lie in it and their
// wall, self, average and longest time — exact, from the whole index, whatever level
// the timeline shows. A sortable table: click a column to sort, a row to search its
// name, the ↦ beside a maximum to go to that slice.
import {fetchAggregate} from '../api.js';
import {bdi, el, isolated, setChildren} from '../dom.js';
import {formatCount, formatDuration} from '../format.js';
import {roundUs} from '../state.js';

export const AGGREGATE_LIMIT = 500;

const COLUMNS = [
  {key: 'name', label: 'name', title: 'Event name', numeric: false},
  {key: 'count', label: 'count', title: 'Slices of this name in the range', numeric: true},
  {key: 'wall_us', label: 'wall', title: 'Total time of these slices inside the range (their overlap with it)', numeric: true},
  {key: 'self_us', label: 'self', title: 'Wall time minus the time of their children on the same track', numeric: true},
  {key: 'avg_us', label: 'avg', title: 'Average wall time per slice', numeric: true},
  {key: 'max_us', label: 'max', title: 'The longest one (↦ goes to it)', numeric: true},
];

/** Seconds from the trace's start, to the microsecond, as the ruler counts. */
export function relSeconds(us) {
  return `${(us / 1e6).toFixed(6)} s`;
}

export class AggregatePanel {
  /**
   * The panel is `element` (hidden until a range is shown). onClose(): the close button. onName(name): a row clicked (search that name).
   * onGoto({i, ts, dur, name}): a maximum's ↦ clicked (select that slice).
   */
  constructor({onClose, onName, onGoto} = {}) {
    this.onClose = onClose || (() => {});
    this.onName = onName || (() => {});
    this.onGoto = onGoto || (() => {});
    this.sort = {key: 'wall_us', dir: -1};
    this.answer = null;
    this.controller = null;
    this.seq = 0;
    this.head = el('div', {class: 'tbr-agg-head'});
    this.body = el('div', {class: 'tbr-agg-scroll'});
    this.element = el('section', {class: 'tbr-agg', 'data-testid': 'aggregate', 'aria-label': 'Statistics of the selected range',
      hidden: true, 'data-state': 'empty'}, this.head, this.body);
  }

  /** Asks for and shows the statistics of [t0, t1] (absolute µs); `origin` is the ruler's zero. */
  show({run, host, range, origin}) {
    this.abort();
    const seq = ++this.seq;
    const [t0, t1] = range;
    this.range = [t0, t1];
    this.origin = origin;
    this.answer = null;
    this.element.hidden = false;
    this.element.dataset.state = 'loading';
    this.renderHead('computing…');
    setChildren(this.body);
    const controller = new AbortController();
    this.controller = controller;
    fetchAggregate({run, host, startUs: roundUs(t0), endUs: roundUs(t1), limit: AGGREGATE_LIMIT}, controller.signal)
      .then((answer) => {
        if (seq !== this.seq) return;
        this.answer = answer;
        this.element.dataset.state = 'ready';
        this.render();
      }, (err) => {
        if (seq !== this.seq || err.name === 'AbortError') return;
        this.element.dataset.state = 'error';
        this.renderHead('');
        setChildren(this.body, el('p', {class: 'tbr-error tbr-agg-error'}, `Could not compute the range's statistics: ${err.message}`));
      }).finally(() => {
        if (this.controller === controller) this.controller = null;
      });
  }

  clear() {
    this.abort();
    this.seq += 1;
    this.answer = null;
    this.range = null;
    this.element.hidden = true;
    this.element.dataset.state = 'empty';
    setChildren(this.head);
    setChildren(this.body);
  }

  abort() {
    if (this.controller) this.controller.abort();
    this.controller = null;
  }

  /** The rows in the table's order (for tests): [{name, count, wall_us, …}, …]. */
  rows() {
    return this.answer ? this.sorted() : [];
  }

  sorted() {
    const rows = Array.isArray(this.answer.rows) ? this.answer.rows.slice() : [];
    const {key, dir} = this.sort;
    if (key === 'name') rows.sort((a, b) => dir * String(a.name).localeCompare(String(b.name)));
    else rows.sort((a, b) => dir * ((Number(a[key]) || 0) - (Number(b[key]) || 0)) || String(a.name).localeCompare(String(b.name)));
    return rows;
  }

  setSort(key) {
    if (this.sort.key === key) this.sort = {key, dir: -this.sort.dir};
    else this.sort = {key, dir: key === 'name' ? 1 : -1};
    this.render();
  }

  renderHead(note) {
    const [t0, t1] = this.range;
    const a = this.answer;
    const facts = [];
    if (a) {
      facts.push(`${formatCount(a.slices)} slices`, `${formatCount(a.names)} names`, `${formatCount(a.tracks)} tracks`);
      if (a.clipped) facts.push(`${formatCount(a.clipped)} cut by the range's edges (counted inside it only)`);
    }
    setChildren(this.head,
      el('span', {class: 'tbr-agg-title'}, 'Range'),
      el('span', {class: 'tbr-agg-span', 'data-testid': 'aggregate-span'}, formatDuration(t1 - t0)),
      el('span', {class: 'tbr-muted'}, `${relSeconds(t0 - this.origin)} → ${relSeconds(t1 - this.origin)}`),
      facts.length ? el('span', {class: 'tbr-agg-facts'}, facts.join(' · ')) : null,
      note ? el('span', {class: 'tbr-muted'}, note) : null,
      el('button', {type: 'button', class: 'tbr-agg-close', 'data-testid': 'aggregate-close',
        'aria-label': 'Close the range statistics (Esc)', title: 'Close (Esc)', onclick: () => this.onClose()}, '\u00d7'));
  }

  render() {
    const a = this.answer;
    if (!a) return;
    this.renderHead('');
    const rows = this.sorted();
    const maxWall = rows.reduce((m, r) => Math.max(m, Number(r.wall_us) || 0), 0);
    const head = el('tr', {}, COLUMNS.map((c) => {
      const active = this.sort.key === c.key;
      return el('th', {scope: 'col', class: c.numeric ? 'tbr-num' : '',
        'aria-sort': active ? (this.sort.dir > 0 ? 'ascending' : 'descending') : 'none'},
      el('button', {type: 'button', class: 'tbr-agg-sort', 'data-testid': `aggregate-sort-${c.label}`, title: `${c.title} — click to sort`,
        onclick: () => this.setSort(c.key)}, c.label, el('span', {class: 'tbr-agg-arrow', 'aria-hidden': 'true'},
        active ? (this.sort.dir > 0 ? ' \u25b4' : ' \u25be') : '')));
    }));
    const body = rows.map((r) => {
      const share = maxWall > 0 ? Math.max(0, Math.min(1, (Number(r.wall_us) || 0) / maxWall)) : 0;
      const wall = el('td', {class: 'tbr-num tbr-agg-wall'}, formatDuration(r.wall_us));
      wall.style.setProperty('--tbr-share', `${(share * 100).toFixed(1)}%`);
      const go = Number.isFinite(r.max_i) ? el('button', {type: 'button', class: 'tbr-agg-go', 'data-testid': 'aggregate-go',
        'aria-label': `Go to the longest ${r.name}`, title: `Go to the longest one (at ${relSeconds((r.max_ts ?? 0) - this.origin)})`,
        onclick: (e) => {
          e.stopPropagation();
          this.onGoto({i: r.max_i, ts: r.max_ts, dur: r.max_us, name: r.name});
        }}, '\u21a6') : null;
      return el('tr', {class: 'tbr-agg-row', tabindex: '0', 'data-name': r.name, title: `Search “${isolated(r.name)}”`,
        onclick: () => this.onName(r.name),
        onkeydown: (e) => {
          if (e.key === 'Enter' || e.key === ' ') {
            e.preventDefault();
            this.onName(r.name);
          }
        }},
      el('td', {class: 'tbr-agg-name'}, bdi(r.name)),
      el('td', {class: 'tbr-num'}, formatCount(r.count)),
      wall,
      el('td', {class: 'tbr-num'}, formatDuration(r.self_us)),
      el('td', {class: 'tbr-num'}, formatDuration(r.avg_us)),
      el('td', {class: 'tbr-num tbr-agg-max'}, formatDuration(r.max_us), go));
    });
    const other = a.other && typeof a.other === 'object' && (Number(a.other.count) || 0) > 0 ? a.other : null;
    const foot = other ? el('tfoot', {}, el('tr', {class: 'tbr-agg-other'},
      el('td', {}, `… ${formatCount(other.names ?? 0)} other names`),
      el('td', {class: 'tbr-num'}, formatCount(other.count)),
      el('td', {class: 'tbr-num'}, formatDuration(other.wall_us)),
      el('td', {class: 'tbr-num'}, formatDuration(other.self_us)),
      el('td', {class: 'tbr-num'}, other.count ? formatDuration((Number(other.wall_us) || 0) / other.count) : '—'),
      el('td', {class: 'tbr-num'}, formatDuration(other.max_us)))) : null;
    setChildren(this.body, rows.length || other ? el('table', {class: 'tbr-agg-table', 'data-testid': 'aggregate-table'},
      el('caption', {}, 'Exact over all events in the range, at any level (folded ones included) · ',
        el('span', {class: 'tbr-muted'}, 'click a column to sort, a row to search its name')),
      el('thead', {}, head), el('tbody', {}, body), foot)
      : el('p', {class: 'tbr-muted tbr-agg-empty'}, 'No slices in this range.'));
  }
}
