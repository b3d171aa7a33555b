// The multi-host picker: a button that opens a checkbox list of the run's hosts, with
// "All" and "None". One host checked is the single-host view (the host select shows it);
// several are the merged view (`trace?hosts=…`). Native checkboxes and buttons, so Tab,
// Space and Enter work as everywhere; Esc closes the list and gives the button focus back.
import {bdi, el, isolated, setChildren} from '../dom.js';
import {formatBytes, formatCount, formatDuration} from '../format.js';

/** What a half-written file (a profiler still writing, or one that died) is shown as: the server read it
 * up to its last complete event and said so (`truncated` in the trace's and the stats' `input`). */
export const INCOMPLETE_NOTE = 'incomplete: the file ends mid-event (still being written, or its writer died); ' +
  'shown up to its last complete event';

/**
 * A host's option in the host select: its name, format and size, and, for JAX's export of an
 * XSpace, whether JAX's event cap cut it (the server counted: `capped` only when it did).
 */
export function hostLabel(h) {
  const kind = h.capped ? `, JAX export capped at ${formatCount(h.capped.events)} events`
    : h.export ? ', JAX export, whole' : '';
  return `${isolated(h.host)} (${h.format}, ${formatBytes(h.bytes)}${kind})`;
}

/**
 * The Reduced card's window for a capped export: how much of its XSpace's span the export
 * covers (both in µs; the XSpace's null while unknown), and where the whole run is.
 */
export function cappedWindowText(exportSpanUs, xspaceSpanUs) {
  const of = Number.isFinite(xspaceSpanUs) && xspaceSpanUs > 0 ? ` of ${formatDuration(xspaceSpanUs)}` : ' of its XSpace\'s span';
  return `export capped: covers ${formatDuration(exportSpanUs)}${of}; open the XSpace host for the whole run`;
}

/**
 * The line under the pickers: what the picker's option can only hint at, whole and readable —
 * a capped JAX export's note (a select's option is cut to its width, a title shows only on
 * hover) and an incomplete file's. `onOpen(host)`: the capped export's "open the XSpace" button.
 */
export class HostNotes {
  constructor({onOpen} = {}) {
    this.onOpen = onOpen || (() => {});
    this.element = el('div', {class: 'tbr-host-notes', 'data-testid': 'host-notes', hidden: true});
  }

  /** `host`: the shown host's listing ({capped, export, …}) or null; `truncated`: its file was cut mid-event. */
  show({host = null, truncated = false} = {}) {
    const lines = [];
    if (host && host.capped) {
      lines.push(el('p', {class: 'tbr-host-note tbr-host-capped', 'data-testid': 'capped-note'},
        '\u26a0 ', host.capped.note, ' ',
        el('button', {type: 'button', class: 'tbr-linkish', 'data-testid': 'open-xspace',
          onclick: () => this.onOpen(host.capped.of)}, 'Open ', bdi(host.capped.of), ' (the XSpace)')));
    }
    if (truncated) {
      lines.push(el('p', {class: 'tbr-host-note tbr-host-incomplete', 'data-testid': 'incomplete-note'},
        '\u26a0 ', host ? [bdi(host.host), ': '] : '', INCOMPLETE_NOTE));
    }
    setChildren(this.element, lines);
    this.element.hidden = !lines.length;
  }
}

export class HostPicker {
  /** `onChange(hosts)`: the checked hosts, in the run's order (possibly none). */
  constructor({onChange} = {}) {
    this.onChange = onChange || (() => {});
    this.hosts = [];
    this.checked = new Set();
    this.toggle = el('button', {type: 'button', class: 'tbr-button tbr-hosts-toggle', 'data-testid': 'hosts-toggle',
      'aria-haspopup': 'true', 'aria-expanded': 'false', title: 'Show several hosts of the run on one timeline',
      onclick: () => this.setOpen(this.list.hidden)}, 'Hosts…');
    this.boxes = el('div', {class: 'tbr-hosts-boxes', role: 'group', 'aria-label': 'Hosts to show'});
    this.list = el('div', {class: 'tbr-hosts-list', 'data-testid': 'hosts-picker', hidden: true,
      onkeydown: (e) => {
        if (e.key !== 'Escape') return;
        e.stopPropagation();
        this.setOpen(false);
        this.toggle.focus();
      }},
    el('div', {class: 'tbr-hosts-actions'},
      el('button', {type: 'button', class: 'tbr-button', 'data-testid': 'hosts-all', onclick: () => this.setAll(true)}, 'All'),
      el('button', {type: 'button', class: 'tbr-button', 'data-testid': 'hosts-none', onclick: () => this.setAll(false)}, 'None')),
    this.boxes);
    this.element = el('span', {class: 'tbr-hosts'}, this.toggle, this.list);
    document.addEventListener('pointerdown', (e) => {
      if (!this.list.hidden && !this.element.contains(e.target)) this.setOpen(false);
    });
  }

  /** The run's hosts ([{host, …}]) and which are checked. */
  setHosts(hosts, checked) {
    this.hosts = hosts.map((h) => h.host);
    this.checked = new Set(checked.filter((h) => this.hosts.includes(h)));
    this.toggle.hidden = this.hosts.length < 2;
    setChildren(this.boxes, hosts.map((h) => el('label', {class: 'tbr-check tbr-hosts-item', title: h.host},
      el('input', {type: 'checkbox', value: h.host, 'data-host': h.host, checked: this.checked.has(h.host),
        onchange: (e) => this.flip(h.host, e.target.checked)}), ' ', bdi(h.host))));
    this.label();
  }

  setOpen(open) {
    this.list.hidden = !open;
    this.toggle.setAttribute('aria-expanded', String(open));
    if (open) {
      const first = this.boxes.querySelector('input');
      if (first) first.focus();
    }
  }

  flip(host, on) {
    if (on) this.checked.add(host);
    else this.checked.delete(host);
    this.changed();
  }

  setAll(on) {
    this.checked = new Set(on ? this.hosts : []);
    for (const box of this.boxes.querySelectorAll('input')) box.checked = on;
    this.changed();
  }

  chosen() {
    return this.hosts.filter((h) => this.checked.has(h));
  }

  changed() {
    this.label();
    this.onChange(this.chosen());
  }

  label() {
    const n = this.checked.size;
    this.toggle.textContent = n > 1 ? `Hosts: ${formatCount(n)} of ${formatCount(this.hosts.length)}` : 'Hosts…';
    this.toggle.classList.toggle('tbr-primary', n > 1);
  }
}
