// The multi-host picker: a button that opens a checkbox list of the run's hosts, with
// "All" and "None". One host checked is the single-host view (the host select shows it);
// several are the merged view (`trace?hosts=…`). Native checkboxes and buttons, so Tab,
// Space and Enter work as everywhere; Esc closes the list and gives the button focus back.
import {bdi, el, setChildren} from '../dom.js';

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
    this.toggle.textContent = n > 1 ? `Hosts: ${n} of ${this.hosts.length}` : 'Hosts…';
    this.toggle.classList.toggle('tbr-primary', n > 1);
  }
}
