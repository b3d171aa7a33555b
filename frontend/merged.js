// Reading a merged view (`trace?hosts=…`, multihost/merge.py): which host an event of it
// belongs to, that host's own input index of it (for the `event` route), and what the
// status line says about how the hosts were placed in time.
import {formatCount} from './format.js';

/** Host rank r's pids are r·2^32 + (pid mod 2^32); a string pid is "host/pid". */
export const PID_STRIDE = 2 ** 32;

export function isMerged(model) {
  return !!(model && model.tb && model.tb.merged);
}

/** The `tb_reduce.hosts` entry an event's pid belongs to, or null. */
export function hostOfPid(tb, pid) {
  const hosts = tb && Array.isArray(tb.hosts) ? tb.hosts : [];
  if (typeof pid === 'string') return hosts.find((h) => pid.startsWith(`${h.host}/`)) || null;
  if (typeof pid !== 'number' || !Number.isFinite(pid)) return null;
  const rank = Math.floor(pid / PID_STRIDE);
  return hosts.find((h) => h.rank === rank) || null;
}

/**
 * Event `k` of the merged trace (its index in traceEvents), drawn on process `pid`: its host,
 * the host's own input index of it (what `event?host=&i=` takes: through the host's
 * `input_index`, as a single-host view's is found) and whether it is a host's busy lane.
 */
export function hostEventOf(tb, pid, k) {
  const entry = hostOfPid(tb, pid);
  if (!entry) return null;
  const local = k - Number(entry.first_event);
  if (!(local >= 0 && local < Number(entry.events))) return null;
  let i = local;
  if (Array.isArray(entry.input_index)) i = local < entry.input_index.length ? entry.input_index[local] : null;
  return {host: entry.host, entry, i: entry.lane ? null : i, lane: !!entry.lane};
}

/** The status line's words for a merged view: how many hosts, how they are placed, who failed. */
export function mergedNote(tb) {
  const hosts = Array.isArray(tb.hosts) ? tb.hosts : [];
  const a = tb.alignment || {};
  const parts = [`${formatCount(hosts.length)} hosts merged, ${a.absolute ? 'placed by real time' : 'lined up by their first events, not real time'}`];
  const lanes = hosts.filter((h) => h.lane).length;
  if (lanes) parts.push(`${formatCount(lanes)} shown as busy lanes (click one to expand it)`);
  for (const h of hosts) if (h.error) parts.push(`${h.host} could not be read: ${h.error}`);
  return parts.join(' · ');
}

/**
 * The hosts' names as a merged view's process labels draw them in a narrow gutter: `rank N`
 * when every host's trace names its own rank (PyTorch's `distributedInfo`, kept in the
 * host's metadata), else without the prefix they all share (a job's ranks differ late:
 * `…worker3_step_12…`), an ellipsis marking the cut; a map host → short name, empty when
 * nothing is shared. Details and tooltips keep the whole name.
 */
export function shortHostNames(tb) {
  const hosts = tb && Array.isArray(tb.hosts) ? tb.hosts : [];
  const names = hosts.map((h) => String(h.host));
  const out = new Map();
  if (names.length < 2) return out;
  const ranks = hosts.map((h) => {
    const info = h.metadata && h.metadata.distributedInfo;
    return info && Number.isInteger(info.rank) ? info.rank : null;
  });
  if (ranks.every((r) => r !== null) && new Set(ranks).size === ranks.length) {
    names.forEach((h, k) => out.set(h, `rank ${ranks[k]}`));
    return out;
  }
  let n = names[0].length;
  for (const h of names) {
    let i = 0;
    while (i < n && i < h.length && h[i] === names[0][i]) i += 1;
    n = i;
  }
  if (n < 4) return out;
  for (const h of names) if (h.length > n) out.set(h, `…${h.slice(n)}`);
  return out;
}

/** A merged process label `host · name` with the host's short name. */
export function shortLabel(label, short) {
  const cut = label.indexOf(' · ');
  if (cut < 0 || !short.size) return label;
  const host = short.get(label.slice(0, cut));
  return host ? `${host}${label.slice(cut)}` : label;
}
