// Keyboard shortcuts. One table, BINDINGS, says every key and mouse gesture the
// dashboard answers, what it does and where; `?` (or the toolbar's ? button) opens a
// help overlay generated from that same table, so the list cannot drift from what runs.
//
// Bindings with an `action` are handled here, by one keydown listener on the dashboard
// root; the others are handled where they live (the timeline's W/A/S/D and mouse, the
// search box's Enter, the step strip's arrows) and are listed for the overlay only.
// Keys are ignored while the user types in a text field or a select, except Esc; never
// with Ctrl, Alt or Meta (the browser's and TensorBoard's own shortcuts stay theirs). A select
// that kept the focus after a pick is not typed in while the pointer is over the timeline: the
// keys are the dashboard's then (the timeline's ownsKey says so), never the select's type-ahead
// (`f` to frame a slice would otherwise switch to a run whose name starts with f).
// App methods are called only when present (`app.focusSearch?.()`): the search, marks
// and framing are their own modules.
import {el, setChildren} from './dom.js';

/** Where a binding is handled, as the overlay says it (after the description, when its group does not say it). */
const WHERE = {
  anywhere: '',
  search: 'in the search box',
  timeline: 'on the timeline',
  steps: 'on the step strip (focused)',
};

/** Each group's heading note, and where its bindings are handled unless a row says otherwise. */
const GROUPS = {
  'General': {where: 'anywhere', note: ''},
  'Search': {where: 'anywhere', note: ''},
  'Selection': {where: 'anywhere', note: 'the slice clicked on the timeline'},
  'Timeline': {where: 'timeline', note: 'with the pointer over the timeline'},
  'Step overview': {where: 'steps', note: 'the strip of step times above the timeline (Tab to it for the keys)'},
};

/**
 * Every binding: {group, key (as shown), on (the KeyboardEvent.key values it answers, for
 * those handled here), description, action(app, keys) (null: handled elsewhere), where}.
 */
export const BINDINGS = [
  {group: 'General', key: '?', on: ['?'], description: 'Show or hide this list of shortcuts', where: 'anywhere',
    action: (app, keys) => keys.toggleHelp()},
  {group: 'General', key: 'Esc', on: ['Escape', 'Esc'], description: 'Close this list; otherwise clear the search highlight, selection and range (marks stay)',
    where: 'anywhere', typing: true,
    action: (app, keys) => (keys.helpOpen() ? keys.closeHelp() : app.clearAll?.())},
  {group: 'Search', key: '/', on: ['/'], description: 'Focus the search box', where: 'anywhere',
    action: (app) => app.focusSearch?.()},
  {group: 'Search', key: 'Enter', description: 'Next match', where: 'search', action: null},
  {group: 'Search', key: 'Shift+Enter', description: 'Previous match', where: 'search', action: null},
  {group: 'Search', key: 'n', on: ['n'], description: 'Next search match', where: 'anywhere',
    action: (app) => app.searchNext?.()},
  {group: 'Search', key: 'Shift+N', on: ['N'], description: 'Previous search match', where: 'anywhere',
    action: (app) => app.searchPrev?.()},
  {group: 'Selection', key: 'Click', description: 'Select a slice: its arguments under the timeline', where: 'timeline', action: null},
  {group: 'Selection', key: 'f', on: ['f'], description: 'Frame the selected event: zoom the timeline to it', where: 'anywhere',
    action: (app) => app.frameSelected?.()},
  {group: 'Selection', key: 'm', on: ['m'], description: 'Mark the selected event (a flag on the ruler)', where: 'anywhere',
    action: (app) => app.markSelected?.()},
  {group: 'Timeline', key: 'W / S', description: 'Zoom in / out around the pointer (hold for a smooth zoom)', where: 'timeline', action: null},
  {group: 'Timeline', key: 'A / D', description: 'Pan left / right (hold to keep panning)', where: 'timeline', action: null},
  {group: 'Timeline', key: 'Wheel', description: 'Zoom around the pointer; a sideways swipe pans', where: 'timeline', action: null},
  {group: 'Timeline', key: 'Drag', description: 'Pan the time axis and scroll the tracks', where: 'timeline', action: null},
  {group: 'Timeline', key: 'Shift+Wheel', description: 'Scroll the tracks up and down', where: 'timeline', action: null},
  {group: 'Timeline', key: 'Shift+Drag', description: 'Select a time range: statistics of every slice in it', where: 'timeline', action: null},
  {group: 'Step overview', key: 'Click', description: 'Zoom the timeline to that step', where: 'steps', action: null},
  {group: 'Step overview', key: '← / →', description: 'Pick the previous / next step', where: 'steps', action: null},
  {group: 'Step overview', key: 'Home / End', description: 'Pick the first / last step', where: 'steps', action: null},
  {group: 'Step overview', key: 'Enter', description: 'Zoom the timeline to the picked step', where: 'steps', action: null},
];

const NON_TEXT_INPUTS = new Set(['checkbox', 'radio', 'button', 'submit', 'reset', 'range', 'color', 'file', 'image']);

/** Whether a keydown on `target` is typing (a text field, a textarea, a select, contenteditable). */
export function isTyping(target) {
  if (!target || target.nodeType !== 1) return false;
  if (target.isContentEditable) return true;
  const tag = target.tagName;
  if (tag === 'TEXTAREA' || tag === 'SELECT') return true;
  if (tag === 'INPUT') return !NON_TEXT_INPUTS.has(String(target.type || 'text').toLowerCase());
  return false;
}

/** The binding handled here that answers a keydown, or null. */
export function bindingFor(e) {
  if (e.ctrlKey || e.metaKey || e.altKey) return null;
  return BINDINGS.find((b) => b.action && b.on && b.on.includes(e.key)) || null;
}

/** Keyboard shortcuts of one dashboard: the listener, the help overlay and its toolbar button. */
export class Keys {
  constructor(app, root) {
    this.app = app;
    this.root = root;
    this.host = app.app || root; // the overlay goes in the dashboard root: its CSS variables (theme) apply
    this.overlay = null;
    this.returnFocus = null;
    this.onKeyDown = (e) => this.keydown(e);
    root.addEventListener('keydown', this.onKeyDown);
    this.button = el('button', {type: 'button', class: 'tbr-button tbr-keys-button', 'data-testid': 'keys-button',
      'aria-label': 'Keyboard shortcuts', 'aria-haspopup': 'dialog', 'aria-expanded': 'false',
      title: 'Keyboard shortcuts (?)', onclick: () => this.toggleHelp()}, '?');
    const bar = this.host.querySelector('.tbr-bar');
    if (bar) bar.append(this.button);
  }

  keydown(e) {
    if (e.defaultPrevented || e.isComposing) return;
    const b = bindingFor(e);
    if (!b) {
      if (e.key === 'Tab' && this.helpOpen()) this.trapTab(e);
      return;
    }
    if (isTyping(e.target) && !b.typing && !this.timelineOwns(e.target)) return;
    e.preventDefault();
    e.stopPropagation(); // handled: the timeline's window listener does not see it
    b.action(this.app, this);
  }

  /** A key on `target` (a picker with the focus) belongs to the timeline under the pointer (timeline.js). */
  timelineOwns(target) {
    const tl = this.app.timeline;
    return !!tl && typeof tl.ownsKey === 'function' && target.tagName === 'SELECT' && tl.ownsKey(target);
  }

  helpOpen() {
    return !!this.overlay && !this.overlay.hidden;
  }

  toggleHelp() {
    if (this.helpOpen()) this.closeHelp();
    else this.openHelp();
  }

  /** The overlay: every binding of the table, by group, in a modal dialog. */
  openHelp() {
    if (this.helpOpen()) return;
    this.returnFocus = document.activeElement;
    if (!this.overlay) this.overlay = this.buildHelp();
    this.overlay.hidden = false;
    this.button.setAttribute('aria-expanded', 'true');
    this.closeButton.focus({preventScroll: true});
  }

  closeHelp() {
    if (!this.helpOpen()) return;
    this.overlay.hidden = true;
    this.button.setAttribute('aria-expanded', 'false');
    const back = this.returnFocus;
    this.returnFocus = null;
    if (back && back.isConnected && typeof back.focus === 'function' && back !== document.body) back.focus({preventScroll: true});
    else if (this.root.contains(document.activeElement)) document.activeElement.blur(); // focus was nowhere: so again
  }

  buildHelp() {
    const groups = [];
    for (const b of BINDINGS) {
      let g = groups.find((x) => x.name === b.group);
      if (!g) groups.push(g = {name: b.group, rows: []});
      g.rows.push(b);
    }
    this.closeButton = el('button', {type: 'button', class: 'tbr-keys-close', 'aria-label': 'Close', title: 'Close (Esc)',
      'data-testid': 'keys-close', onclick: () => this.closeHelp()}, '×');
    this.list = el('div', {class: 'tbr-keys-groups', tabindex: '0', 'aria-label': 'Shortcuts'});
    setChildren(this.list, groups.map((g, gi) => el('section', {class: 'tbr-keys-group', 'aria-labelledby': `tbr-keys-g${gi}`},
      el('h3', {id: `tbr-keys-g${gi}`}, g.name,
        GROUPS[g.name] && GROUPS[g.name].note ? el('span', {class: 'tbr-keys-group-note'}, ` · ${GROUPS[g.name].note}`) : null),
      el('table', {class: 'tbr-keys-table'}, el('tbody', {}, g.rows.map((b) => el('tr', {'data-testid': 'keys-row',
        'data-key': b.key, 'data-group': b.group, 'data-handled': b.action ? 'here' : b.where},
      el('th', {scope: 'row'}, keyCaps(b.key)),
      el('td', {}, el('span', {class: 'tbr-keys-desc'}, b.description),
        WHERE[b.where] && b.where !== (GROUPS[b.group] || {}).where
          ? el('span', {class: 'tbr-keys-where'}, ` — ${WHERE[b.where]}`) : null))))))));
    const dialog = el('div', {class: 'tbr-keys-dialog', role: 'dialog', 'aria-modal': 'true', 'aria-labelledby': 'tbr-keys-title',
      'data-testid': 'keys-help'},
    el('div', {class: 'tbr-keys-head'}, el('h2', {id: 'tbr-keys-title'}, 'Keyboard shortcuts'), this.closeButton),
    el('p', {class: 'tbr-keys-note'}, 'Keys work anywhere in the dashboard except while you type in a field (Esc always works).'),
    this.list);
    const overlay = el('div', {class: 'tbr-keys-backdrop', hidden: true, onclick: (e) => {
      if (e.target === overlay) this.closeHelp(); // a click beside the dialog closes it
    }}, dialog);
    this.host.append(overlay);
    return overlay;
  }

  /** Tab stays in the dialog while it is open (the close button, the list). */
  trapTab(e) {
    const stops = [this.closeButton, this.list];
    const at = stops.indexOf(document.activeElement);
    e.preventDefault();
    const next = at < 0 ? 0 : (at + (e.shiftKey ? stops.length - 1 : 1)) % stops.length;
    stops[next].focus({preventScroll: true});
  }

  stop() {
    this.root.removeEventListener('keydown', this.onKeyDown);
    if (this.overlay) this.overlay.remove();
    this.button.remove();
  }
}

/** "Shift+Enter" → <kbd>Shift</kbd>+<kbd>Enter</kbd>; "W / S" → <kbd>W</kbd> / <kbd>S</kbd>. */
function keyCaps(key) {
  const out = [];
  key.split(' / ').forEach((alt, i) => {
    if (i) out.push(' / ');
    alt.split('+').forEach((part, j) => {
      if (j) out.push('+');
      out.push(el('kbd', {}, part));
    });
  });
  return out;
}

/** Installs the shortcuts on a dashboard (`app`, whose root element is `root`). */
export function installKeys(app, root) {
  return new Keys(app, root);
}
