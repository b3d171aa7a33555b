// Chrome trace JSON → a compact, drawable model.
//
// Runs in a worker (see worker.js) or, as a fallback, on the main thread. The
// parsed JSON objects are dropped once this returns: everything the timeline
// draws lives in typed arrays (transferred, not copied, from the worker), so the
// page's JS heap stays small however many events a view holds.
//
// Layout of the result:
// - processes and tracks (threads) in display order: sort index, then pid/tid;
// - slices (X events and matched B/E pairs, summaries included) sorted by
//   (track, depth, ts): each (track, depth) is a "row" whose slices never overlap,
//   so a row is sorted by start and by end at once and a binary search culls it;
// - counters as one series per (pid, name, id, arg key);
// - instants per thread track, per process (scope "p") and global (scope "g");
// - flow arrows between consecutive events of one flow (cat, id).

export const SUMMARY_CAT = 'tb_reduce.summary';
export const FLAG_SUMMARY = 1;

const EPS = 1e-9; // µs: float noise when a child ends exactly where its parent does

/** Dedupes strings into ids, so each name is stored (and coloured) once. */
class Interner {
  constructor() {
    this.ids = new Map();
    this.list = [];
  }
  id(value) {
    const text = value === undefined || value === null ? '' : String(value);
    let id = this.ids.get(text);
    if (id === undefined) {
      id = this.list.length;
      this.list.push(text);
      this.ids.set(text, id);
    }
    return id;
  }
}

/** pid 1 and pid "1" are different processes (docs/SEMANTICS.md), so the key keeps the type. */
function idKey(value) {
  return `${typeof value}:${value}`;
}

/** Display order: numbers first by value, then anything else by its text. */
function compareIds(a, b) {
  const na = typeof a === 'number';
  const nb = typeof b === 'number';
  if (na && nb) return a - b;
  if (na !== nb) return na ? -1 : 1;
  return String(a) < String(b) ? -1 : String(a) > String(b) ? 1 : 0;
}

function num(value) {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/** First index in [lo, hi) whose arr value is >= x (arr ascending there). */
export function lowerBound(arr, x, lo, hi) {
  let a = lo;
  let b = hi;
  while (a < b) {
    const mid = (a + b) >>> 1;
    if (arr[mid] < x) a = mid + 1;
    else b = mid;
  }
  return a;
}

/**
 * Builds the model. `doc` is a parsed Chrome trace (Object or Array format).
 * Returns a plain object of typed arrays, strings and small objects
 * (structured-clone friendly); `transferables(model)` lists its buffers.
 */
export function buildModel(doc) {
  const events = Array.isArray(doc) ? doc : doc && Array.isArray(doc.traceEvents) ? doc.traceEvents : [];
  const tb = doc && !Array.isArray(doc) && doc.tb_reduce && typeof doc.tb_reduce === 'object' ? doc.tb_reduce : null;
  const inputIndex = tb && Array.isArray(tb.input_index) ? tb.input_index : null;
  const nKept = inputIndex ? inputIndex.length : events.length;

  const names = new Interner();
  const procByKey = new Map();
  const procs = [];
  const trackByKey = new Map();
  const tracks = [];

  function procOf(pid) {
    const key = idKey(pid);
    let p = procByKey.get(key);
    if (!p) {
      p = {pid, name: null, sort: null, labels: null, used: false, threadMeta: new Map()};
      procByKey.set(key, p);
      procs.push(p);
    }
    return p;
  }
  function trackOf(pid, tid) {
    const key = `${idKey(pid)}|${idKey(tid)}`;
    let t = trackByKey.get(key);
    if (t === undefined) {
      const p = procOf(pid);
      p.used = true;
      t = tracks.length;
      tracks.push({pid, tid, proc: p});
      trackByKey.set(key, t);
    }
    return t;
  }

  // Slices, collected in input order; sorted into rows below.
  const sTs = [];
  const sDur = [];
  const sTrack = [];
  const sName = [];
  const sK = [];
  const sFlag = [];
  // Summary args, flat (a Map of small objects would cost ~300 bytes of JS heap
  // per summary; level 1 of a 2 M-event trace has 144,000 of them).
  const sum = {k: [], count: [], topStart: [0], topName: [], topCount: [], busyStart: [0], busy: []};
  const beByTrack = new Map();
  const series = new Map();
  const inst = {ts: [], name: [], k: [], owner: []}; // owner: track id, or -1 - procIndex, or GLOBAL
  const flows = new Map();
  let tMin = Infinity;
  let tMax = -Infinity;

  for (let k = 0; k < events.length; k += 1) {
    const e = events[k];
    if (!e || typeof e !== 'object') continue;
    const ph = e.ph;
    if (ph === 'M') {
      readMetadata(e, procOf);
      continue;
    }
    const ts = num(e.ts);
    if (ts === null) continue;
    if (ph === 'X') {
      const dur = Math.max(0, num(e.dur) ?? 0);
      sTs.push(ts);
      sDur.push(dur);
      sTrack.push(trackOf(e.pid, e.tid));
      sName.push(names.id(e.name));
      sK.push(k);
      const isSummary = e.cat === SUMMARY_CAT && k >= nKept;
      sFlag.push(isSummary ? FLAG_SUMMARY : 0);
      if (isSummary) addSummary(sum, k, e.args, names);
      if (ts < tMin) tMin = ts;
      if (ts + dur > tMax) tMax = ts + dur;
    } else if (ph === 'B' || ph === 'E') {
      const t = trackOf(e.pid, e.tid);
      let list = beByTrack.get(t);
      if (!list) beByTrack.set(t, (list = []));
      list.push(k);
    } else if (ph === 'C') {
      addCounter(series, procOf, names, e, ts, k);
    } else if (ph === 'i' || ph === 'I' || ph === 'R') {
      let owner;
      if (e.s === 'g') owner = GLOBAL;
      else if (e.s === 'p') owner = -1 - procIndex(procOf(e.pid), procs);
      else owner = trackOf(e.pid, e.tid);
      if (e.s === 'p') procOf(e.pid).used = true;
      inst.ts.push(ts);
      inst.name.push(names.id(e.name));
      inst.k.push(k);
      inst.owner.push(owner);
    } else if (ph === 's' || ph === 't' || ph === 'f') {
      const id = e.id !== undefined ? e.id : e.id2;
      if (id === undefined) continue;
      const key = `${e.cat ?? ''}\u0001${JSON.stringify(id)}`;
      let list = flows.get(key);
      if (!list) flows.set(key, (list = []));
      list.push({ts, track: trackOf(e.pid, e.tid), ph, bindEnd: ph !== 'f' || e.bp === 'e', name: names.id(e.name ?? e.cat)});
    }
    if (ts < tMin) tMin = ts;
    if (ts > tMax) tMax = ts;
  }

  pairBeginEnd(events, beByTrack, {sTs, sDur, sTrack, sName, sK, sFlag}, inst, names);

  // Display order of processes and tracks.
  const shownProcs = procs.filter((p) => p.used || hasSeries(series, p));
  shownProcs.sort((a, b) => compareSort(a.sort, b.sort) || compareIds(a.pid, b.pid));
  const procRank = new Map(shownProcs.map((p, i) => [p, i]));
  const trackOrder = tracks.map((_, i) => i);
  trackOrder.sort((a, b) => {
    const ta = tracks[a];
    const tb2 = tracks[b];
    const byProc = procRank.get(ta.proc) - procRank.get(tb2.proc);
    if (byProc) return byProc;
    const ma = ta.proc.threadMeta.get(idKey(ta.tid));
    const mb = tb2.proc.threadMeta.get(idKey(tb2.tid));
    return compareSort(ma && ma.sort, mb && mb.sort) || compareIds(ta.tid, tb2.tid);
  });
  const trackRank = new Int32Array(tracks.length);
  trackOrder.forEach((t, rank) => {
    trackRank[t] = rank;
  });

  const origin = tb && Array.isArray(tb.window_us) && Number.isFinite(tb.window_us[0]) ? tb.window_us[0]
    : Number.isFinite(tMin) ? tMin : 0;
  const slices = packSlices({sTs, sDur, sTrack, sName, sK, sFlag}, trackRank, tracks.length, origin);
  const instants = packInstants(inst, trackRank, tracks.length, shownProcs.length, procs, procRank, origin);
  const counters = packCounters(series, procRank, origin);
  const arrows = packFlows(flows, trackRank, slices, origin);

  const outTracks = trackOrder.map((t) => {
    const {pid, tid, proc} = tracks[t];
    const meta = proc.threadMeta.get(idKey(tid));
    const rank = trackRank[t];
    return {
      pid, tid, proc: procRank.get(proc),
      label: meta && meta.name ? meta.name : `${tid ?? '(no tid)'}`,
      rowBase: slices.trackRowBase[rank], depthCount: slices.trackRowBase[rank + 1] - slices.trackRowBase[rank],
    };
  });
  const outProcs = shownProcs.map((p) => ({
    pid: p.pid,
    label: processLabel(p, !!(tb && tb.merged)),
  }));
  const firstTrack = new Int32Array(outProcs.length + 1);
  for (const t of outTracks) firstTrack[t.proc + 1] += 1;
  for (let i = 0; i < outProcs.length; i += 1) firstTrack[i + 1] += firstTrack[i];

  let window = tb && Array.isArray(tb.window_us) ? tb.window_us.slice(0, 2) : null;
  if (!window || !window.every(Number.isFinite)) {
    window = Number.isFinite(tMin) ? [tMin, tMax > tMin ? tMax : tMin + 1] : [0, 1];
  }
  const info = tb ? Object.fromEntries(Object.entries(tb).filter(([key]) => key !== 'input_index')) : null;
  return {
    origin,
    window,
    tb: info,
    names: names.list,
    processes: outProcs,
    processTracks: firstTrack,
    tracks: outTracks,
    slices,
    summaries: {
      k: Int32Array.from(sum.k), count: Float64Array.from(sum.count), topStart: Int32Array.from(sum.topStart),
      topName: Uint32Array.from(sum.topName), topCount: Float64Array.from(sum.topCount), size: sum.k.length,
      busyStart: Int32Array.from(sum.busyStart), busy: Uint8Array.from(sum.busy),
    },
    instants,
    counters,
    arrows,
    inputIndex: inputIndex ? Float64Array.from(inputIndex) : null,
    nKept,
    eventCount: events.length,
  };
}

const GLOBAL = -2147483648;

function procIndex(p, procs) {
  return procs.indexOf(p);
}

function compareSort(a, b) {
  const na = typeof a === 'number' && Number.isFinite(a);
  const nb = typeof b === 'number' && Number.isFinite(b);
  if (na && nb) return a - b;
  if (na !== nb) return na ? -1 : 1;
  return 0;
}

function readMetadata(e, procOf) {
  const args = e.args && typeof e.args === 'object' ? e.args : {};
  const p = procOf(e.pid);
  switch (e.name) {
    case 'process_name':
      if (args.name !== undefined) p.name = String(args.name);
      break;
    case 'process_labels':
      if (args.labels !== undefined) p.labels = String(args.labels);
      break;
    case 'process_sort_index':
      p.sort = num(args.sort_index);
      break;
    case 'thread_name':
    case 'thread_sort_index': {
      const key = idKey(e.tid);
      let meta = p.threadMeta.get(key);
      if (!meta) p.threadMeta.set(key, (meta = {name: null, sort: null}));
      if (e.name === 'thread_name' && args.name !== undefined) meta.name = String(args.name);
      if (e.name === 'thread_sort_index') meta.sort = num(args.sort_index);
      break;
    }
    default:
      break;
  }
}

/** A process's label; in a merged view (multihost/merge.py) with its host's own pid, not rank·2^32 + pid. */
function processLabel(p, merged = false) {
  const name = p.name || 'Process';
  const labels = p.labels ? ` (${p.labels})` : '';
  const pid = merged && typeof p.pid === 'number' ? p.pid % 2 ** 32 : p.pid;
  return `${name}${labels} ${pid ?? ''}`.trim();
}

function addSummary(sum, k, args, names) {
  const a = args && typeof args === 'object' ? args : {};
  sum.k.push(k);
  sum.count.push(num(a.count) ?? 0);
  if (Array.isArray(a.top)) {
    for (const entry of a.top) {
      if (!Array.isArray(entry)) continue;
      sum.topName.push(names.id(entry[0]));
      sum.topCount.push(num(entry[1]) ?? 0);
    }
  }
  sum.topStart.push(sum.topName.length);
  // args.busy: per bucket the summary touches, how busy its folded slices keep it, in
  // tenths ("0".."9"); anything else there is ignored (no shading).
  if (typeof a.busy === 'string' && /^[0-9]+$/.test(a.busy)) {
    for (let j = 0; j < a.busy.length; j += 1) sum.busy.push(a.busy.charCodeAt(j) - 48);
  }
  sum.busyStart.push(sum.busy.length);
}

/** Index of the summary slice with event index k in `model.summaries`, or -1. */
export function summaryIndex(model, k) {
  const sm = model.summaries;
  const i = lowerBound(sm.k, k, 0, sm.size);
  return i < sm.size && sm.k[i] === k ? i : -1;
}

/**
 * A summary slice's {count, top: [[name, count], …], busy} by its event index k, or null;
 * busy: the mean of its buckets' busy shares (0–1, from args.busy), or null when it has none.
 */
export function summaryInfo(model, k) {
  const sm = model.summaries;
  const i = summaryIndex(model, k);
  if (i < 0) return null;
  const top = [];
  for (let j = sm.topStart[i]; j < sm.topStart[i + 1]; j += 1) top.push([model.names[sm.topName[j]], sm.topCount[j]]);
  const a = sm.busyStart[i];
  const b = sm.busyStart[i + 1];
  let busy = null;
  if (b > a) {
    let total = 0;
    for (let j = a; j < b; j += 1) total += sm.busy[j] + 0.5; // a digit d says d to d+1 tenths
    busy = total / (10 * (b - a));
  }
  return {count: sm.count[i], top, busy};
}

/**
 * The allocator's totals of Kineto's `[memory]` events (the `memory` route: per device, MB
 * over the view's window, reduced by the counter rule) added to `model`'s counters as rows
 * of the process that allocated (one the view shows), in the order `packCounters` keeps:
 * k = -1, no trace event behind a sample. Returns whether any was added.
 */
export function withMemory(model, series) {
  let added = false;
  for (const m of Array.isArray(series) ? series : []) {
    if (!m || !Array.isArray(m.ts) || !Array.isArray(m.mb) || m.ts.length !== m.mb.length) continue;
    const proc = model.processes.findIndex((p) => idKey(p.pid) === idKey(m.pid));
    if (proc < 0) continue;
    const label = String(m.label ?? 'memory');
    if (model.counters.some((c) => c.proc === proc && c.label === label)) continue;
    const ts = [];
    const val = [];
    for (let i = 0; i < m.ts.length; i += 1) {
      const t = num(m.ts[i]);
      const v = num(m.mb[i]);
      if (t === null || v === null) continue;
      ts.push(t - model.origin);
      val.push(v);
    }
    if (!ts.length) continue;
    const order = ts.map((_, i) => i).sort((x, y) => ts[x] - ts[y]);
    model.counters.push({proc, label, ts: Float64Array.from(order, (i) => ts[i]), val: Float64Array.from(order, (i) => val[i]),
      k: new Int32Array(ts.length).fill(-1), min: Math.min(...val), max: Math.max(...val)});
    added = true;
  }
  if (added) model.counters.sort((a, b) => a.proc - b.proc || (a.label < b.label ? -1 : a.label > b.label ? 1 : 0));
  return added;
}

function hasSeries(series, p) {
  for (const s of series.values()) if (s.proc === p) return true;
  return false;
}

function addCounter(series, procOf, names, e, ts, k) {
  const args = e.args && typeof e.args === 'object' ? e.args : {};
  const p = procOf(e.pid);
  for (const [key, value] of Object.entries(args)) {
    const v = num(value);
    if (v === null) continue;
    const id = e.id === undefined ? '' : String(e.id);
    const skey = `${idKey(e.pid)}\u0001${e.name}\u0001${id}\u0001${key}`;
    let s = series.get(skey);
    if (!s) {
      const base = `${e.name ?? ''}${id ? ` ${id}` : ''}`;
      series.set(skey, (s = {proc: p, label: key === 'value' || key === base ? base : `${base} ${key}`, ts: [], val: [], k: []}));
    }
    s.ts.push(ts);
    s.val.push(v);
    s.k.push(k);
  }
}

/** B/E pairs become slices: per track, by ts (input order breaks ties), E closes the latest open B. */
function pairBeginEnd(events, beByTrack, s, inst, names) {
  for (const [track, ks] of beByTrack) {
    ks.sort((a, b) => events[a].ts - events[b].ts || a - b);
    const open = [];
    for (const k of ks) {
      const e = events[k];
      if (e.ph === 'B') {
        open.push(k);
      } else if (open.length) {
        const b = open.pop();
        const begin = events[b];
        s.sTs.push(begin.ts);
        s.sDur.push(Math.max(0, e.ts - begin.ts));
        s.sTrack.push(track);
        s.sName.push(names.id(begin.name ?? e.name));
        s.sK.push(b);
        s.sFlag.push(0);
      } else {
        pushInstant(inst, e, k, track, names); // an E with nothing open: show where it is
      }
    }
    for (const b of open) pushInstant(inst, events[b], b, track, names); // never closed
  }
}

function pushInstant(inst, e, k, track, names) {
  inst.ts.push(e.ts);
  inst.name.push(names.id(e.name));
  inst.k.push(k);
  inst.owner.push(track);
}

/**
 * Nesting depth per track from ts/dur alone (the file's order means nothing):
 * sorted by start, longer first, a slice sits one below the innermost open
 * slice that has not ended when it starts.
 */
function packSlices(s, trackRank, nTracks, origin) {
  const n = sTsLength(s);
  const order = new Uint32Array(n);
  for (let i = 0; i < n; i += 1) order[i] = i;
  const rank = new Int32Array(n);
  for (let i = 0; i < n; i += 1) rank[i] = trackRank[s.sTrack[i]];
  order.sort((a, b) => rank[a] - rank[b] || s.sTs[a] - s.sTs[b] || s.sDur[b] - s.sDur[a] || s.sK[a] - s.sK[b]);

  // Real traces nest improperly at times (PyTorch's Python frames overlap their
  // neighbours), so: drop every open slice that has ended (not only the top of
  // the stack, or stale entries would push later slices ever deeper), sit one
  // below the innermost open slice that encloses this one, and take the first
  // row from there that is free at this start, so a row never overlaps itself.
  const depth = new Uint16Array(n);
  const openEnd = [];
  const openDepth = [];
  const rowEnd = [];
  let current = -1;
  const depthCount = new Int32Array(nTracks);
  for (const i of order) {
    if (rank[i] !== current) {
      current = rank[i];
      openEnd.length = openDepth.length = rowEnd.length = 0;
    }
    const ts = s.sTs[i];
    const end = ts + s.sDur[i];
    let kept = 0;
    for (let j = 0; j < openEnd.length; j += 1) {
      if (openEnd[j] > ts + EPS) {
        openEnd[kept] = openEnd[j];
        openDepth[kept] = openDepth[j];
        kept += 1;
      }
    }
    openEnd.length = openDepth.length = kept;
    let d = 0;
    for (let j = kept - 1; j >= 0; j -= 1) {
      if (openEnd[j] >= end - EPS) {
        d = openDepth[j] + 1;
        break;
      }
    }
    while (d < rowEnd.length && rowEnd[d] > ts + EPS) d += 1;
    d = Math.min(d, 65535);
    rowEnd[d] = end;
    depth[i] = d;
    openEnd.push(end);
    openDepth.push(d);
    if (d + 1 > depthCount[current]) depthCount[current] = d + 1;
  }

  // Rows: (track, depth) in display order, each sorted by ts.
  const trackRowBase = new Int32Array(nTracks + 1);
  for (let t = 0; t < nTracks; t += 1) trackRowBase[t + 1] = trackRowBase[t] + depthCount[t];
  const nRows = trackRowBase[nTracks];
  const rowOf = (i) => trackRowBase[rank[i]] + depth[i];
  const rowCount = new Int32Array(nRows + 1);
  for (let i = 0; i < n; i += 1) rowCount[rowOf(i) + 1] += 1;
  for (let r = 0; r < nRows; r += 1) rowCount[r + 1] += rowCount[r];
  const rowStart = Int32Array.from(rowCount);
  const fill = rowCount.slice(0, nRows);
  const out = {
    ts: new Float64Array(n), dur: new Float64Array(n), name: new Uint32Array(n),
    k: new Int32Array(n), flags: new Uint8Array(n), depth: new Uint16Array(n), row: new Int32Array(n),
  };
  // `order` is by start within each track, so rows fill in start order too.
  for (const i of order) {
    const r = rowOf(i);
    const j = fill[r]++;
    out.ts[j] = s.sTs[i] - origin;
    out.dur[j] = s.sDur[i];
    out.name[j] = s.sName[i];
    out.k[j] = s.sK[i];
    out.flags[j] = s.sFlag[i];
    out.depth[j] = depth[i];
    out.row[j] = r;
  }
  const rowTrack = new Int32Array(nRows);
  for (let t = 0; t < nTracks; t += 1) rowTrack.fill(t, trackRowBase[t], trackRowBase[t + 1]);
  return {...out, rowStart, trackRowBase, rowTrack, count: n};
}

function sTsLength(s) {
  return s.sTs.length;
}

/** Instants grouped by owner (tracks in display order, then processes, then global), each by ts. */
function packInstants(inst, trackRank, nTracks, nProcs, procs, procRank, origin) {
  const n = inst.ts.length;
  const groupOf = new Int32Array(n);
  const nGroups = nTracks + nProcs + 1;
  for (let i = 0; i < n; i += 1) {
    const owner = inst.owner[i];
    if (owner === GLOBAL) groupOf[i] = nGroups - 1;
    else if (owner < 0) groupOf[i] = nTracks + (procRank.get(procs[-1 - owner]) ?? 0);
    else groupOf[i] = trackRank[owner];
  }
  const order = new Uint32Array(n);
  for (let i = 0; i < n; i += 1) order[i] = i;
  order.sort((a, b) => groupOf[a] - groupOf[b] || inst.ts[a] - inst.ts[b] || inst.k[a] - inst.k[b]);
  const start = new Int32Array(nGroups + 1);
  for (let i = 0; i < n; i += 1) start[groupOf[i] + 1] += 1;
  for (let g = 0; g < nGroups; g += 1) start[g + 1] += start[g];
  const ts = new Float64Array(n);
  const name = new Uint32Array(n);
  const k = new Int32Array(n);
  order.forEach((i, j) => {
    ts[j] = inst.ts[i] - origin;
    name[j] = inst.name[i];
    k[j] = inst.k[i];
  });
  return {ts, name, k, start, trackBase: 0, procBase: nTracks, globalGroup: nGroups - 1, count: n};
}

function packCounters(series, procRank, origin) {
  const out = [];
  for (const s of series.values()) {
    const proc = procRank.get(s.proc);
    if (proc === undefined) continue;
    const n = s.ts.length;
    const order = Array.from({length: n}, (_, i) => i).sort((a, b) => s.ts[a] - s.ts[b] || s.k[a] - s.k[b]);
    const ts = new Float64Array(n);
    const val = new Float64Array(n);
    const k = new Int32Array(n);
    let min = Infinity;
    let max = -Infinity;
    order.forEach((i, j) => {
      ts[j] = s.ts[i] - origin;
      val[j] = s.val[i];
      k[j] = s.k[i];
      if (s.val[i] < min) min = s.val[i];
      if (s.val[i] > max) max = s.val[i];
    });
    out.push({proc, label: s.label, ts, val, k, min, max});
  }
  out.sort((a, b) => a.proc - b.proc || (a.label < b.label ? -1 : a.label > b.label ? 1 : 0));
  return out;
}

/** The depth of the innermost slice of `track` (display rank) enclosing t, or 0. */
function depthAt(slices, rank, t) {
  const base = slices.trackRowBase[rank];
  const rows = slices.trackRowBase[rank + 1] - base;
  for (let d = rows - 1; d >= 0; d -= 1) {
    const a = slices.rowStart[base + d];
    const b = slices.rowStart[base + d + 1];
    const i = lowerBound(slices.ts, t + EPS, a, b) - 1;
    if (i >= a && slices.ts[i] + slices.dur[i] >= t - EPS) return d;
  }
  return 0;
}

/**
 * Consecutive events of a flow (by ts, s → t → f) become arrows, sorted by
 * start time; `pair` numbers each (from track, to track) so the timeline can
 * thin dense arrows per pair without allocating.
 */
function packFlows(flows, trackRank, slices, origin) {
  const PHASE = {s: 0, t: 1, f: 2};
  const from = [];
  const to = [];
  for (const list of flows.values()) {
    list.sort((a, b) => a.ts - b.ts || PHASE[a.ph] - PHASE[b.ph]);
    for (let i = 0; i + 1 < list.length; i += 1) {
      from.push(list[i]);
      to.push(list[i + 1]);
    }
  }
  const n = from.length;
  const order = Array.from({length: n}, (_, i) => i).sort((a, b) => from[a].ts - from[b].ts);
  const out = {
    fromTs: new Float64Array(n), toTs: new Float64Array(n), fromTrack: new Int32Array(n), toTrack: new Int32Array(n),
    fromDepth: new Uint16Array(n), toDepth: new Uint16Array(n), name: new Uint32Array(n), pair: new Int32Array(n),
    count: n, pairs: 0,
  };
  const pairs = new Map();
  order.forEach((src, i) => {
    const a = from[src];
    const b = to[src];
    const ra = trackRank[a.track];
    const rb = trackRank[b.track];
    out.fromTs[i] = a.ts - origin;
    out.toTs[i] = b.ts - origin;
    out.fromTrack[i] = ra;
    out.toTrack[i] = rb;
    out.fromDepth[i] = depthAt(slices, ra, a.ts - origin);
    out.toDepth[i] = depthAt(slices, rb, b.ts - origin);
    out.name[i] = a.name;
    const key = ra * 1e6 + rb;
    let p = pairs.get(key);
    if (p === undefined) pairs.set(key, (p = pairs.size));
    out.pair[i] = p;
  });
  out.pairs = pairs.size;
  return out;
}

/** Every ArrayBuffer of a model, for postMessage's transfer list. */
export function transferables(model) {
  const out = [];
  const add = (obj) => {
    for (const value of Object.values(obj)) if (ArrayBuffer.isView(value)) out.push(value.buffer);
  };
  add(model.slices);
  add(model.instants);
  add(model.arrows);
  add(model.summaries);
  for (const c of model.counters) add(c);
  if (model.inputIndex) out.push(model.inputIndex.buffer);
  out.push(model.processTracks.buffer);
  return [...new Set(out)];
}

/** The input event index (for the `event` route) of the k-th event of the response, or null for a summary. */
export function inputIndexOf(model, k) {
  if (k < 0 || k >= model.nKept) return null;
  return model.inputIndex ? model.inputIndex[k] : k;
}
