"""Slices of a trace: `X` events and matched `B`/`E` pairs, as columns.

B/E matching is done without a per-event loop: per track, events sorted by time get
a stack depth from a cumulative sum reflected at zero (an `E` with nothing open is
ignored, as a viewer does); within one (track, depth) the `B`s and `E`s then
alternate, so each `E` closes the `B` just before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .mapped import Appended
from .sorting import row_dtype
from .table import PH_B, PH_E, PH_X, EventTable

_LARGEST = np.finfo(np.float64).max


@dataclass
class SliceTable:
    start: np.ndarray  # µs
    end: np.ndarray  # start + max(dur, 0)
    dur: np.ndarray  # max(dur, 0) as written (end - start loses digits at epoch times)
    track: np.ndarray
    name: np.ndarray
    event: np.ndarray  # index of the X or B event
    partner: np.ndarray  # index of the E event, -1 for X
    unpaired: np.ndarray  # indices of B/E events that match nothing

    def __len__(self) -> int:
        return len(self.start)

    @cached_property
    def _nesting(self) -> tuple[np.ndarray, np.ndarray]:
        return nesting(self.track, self.start, self.end)

    @property
    def order(self) -> np.ndarray:
        """Slice indices sorted by (track, start, longest first): per-track order."""
        return self._nesting[0]

    @property
    def depth(self) -> np.ndarray:
        """Nesting depth on its track (computed on first use; reduction needs none)."""
        return self._nesting[1]


def nesting(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-track order and nesting depth by a vectorised sweep.

    Starts count +1 and ends −1; at equal times ends go first (a slice that ends
    where the next begins is its sibling) and, among starts, longer slices first
    (a parent before its child). The running sum at a start, minus one, is the
    number of slices open around it: its depth when slices nest properly.
    """
    m = len(start)
    order = np.lexsort((-end, start, track))
    if m == 0:
        return order, np.zeros(0, dtype=np.int32)
    times = np.concatenate((start, end))
    kind = np.concatenate((np.ones(m, np.int8), np.zeros(m, np.int8)))  # 0 = end first
    length = np.concatenate((-(end - start), np.zeros(m)))
    trk = np.concatenate((track, track))
    sweep = np.lexsort((length, kind, times, trk))
    # Every track's starts and ends balance, so the global running sum is already
    # zero at each track's first event: no per-track reset needed.
    running = np.cumsum(np.where(kind[sweep] == 1, 1, -1))
    depth = np.empty(m, dtype=np.int32)
    is_start = sweep < m
    depth[sweep[is_start]] = np.maximum(running[is_start] - 1, 0)
    return order, depth


def _segment_cummin(values: np.ndarray, seg_start: np.ndarray) -> np.ndarray:
    """Running minimum that restarts at every segment start (values are ints)."""
    if len(values) == 0:
        return values
    # Offset each segment far below the previous ones so a global running minimum
    # never carries across a boundary, then remove the offset again.
    seg_id = np.cumsum(seg_start) - 1
    span = int(np.abs(values).max()) * 2 + 2
    shifted = values - seg_id * span
    return np.minimum.accumulate(shifted) + seg_id * span


# Events read at once while the slices are made: the temporaries stay this size (some
# 60 B an event) however long the trace.
CHUNK_EVENTS = 1 << 19


def build_slices(t: EventTable) -> SliceTable:
    """The table's slices: its timed X events (in event order), then its matched B/E pairs.

    The X slices are made a chunk of events at a time and their columns written into the
    table's scratch folder as they are made, if it has one (`mapped.Appended`), so making
    them holds a chunk, not ~30 B an event (1.4 GB for a 50 M-event trace); only B/E
    events, which must be matched per track, are taken whole. The slices are counted
    first: without a folder their columns are then made in place (`Appended`'s `rows`),
    not made in parts and copied whole again; and a table whose slices are one run of X
    rows (an XSpace's) gets views of its own columns (`_x_run`), folder or not."""
    n = len(t.ph)
    index_type = row_dtype(n)  # 8 bytes a slice saved
    be_parts: list[np.ndarray] = []
    # The slices counted first: their columns are then made in place (in memory), or, when
    # they are the X events of one run of rows (an XSpace's), are views of the table's own.
    rows, first, last = 0, n, -1
    for a in range(0, n, CHUNK_EVENTS):
        ph, ts = np.asarray(t.ph[a:a + CHUNK_EVENTS]), np.asarray(t.ts[a:a + CHUNK_EVENTS])
        has_ts = ~np.isnan(ts)
        xs = np.flatnonzero((ph == PH_X) & has_ts)
        if len(xs):
            rows += len(xs)
            first, last = min(first, a + int(xs[0])), a + int(xs[-1])
        be_parts.append(_be_rows(ph, has_ts, a))
    pairs = _pairs(t, np.concatenate(be_parts) if be_parts else np.zeros(0, dtype=np.int64))
    if rows and rows == last - first + 1 and not len(pairs[0]):
        return _x_run(t, first, last + 1, index_type, pairs[2])
    rows += len(pairs[0])
    cols = Appended(t.scratch, {"slice_start": np.float64, "slice_end": np.float64, "slice_dur": np.float64,
                                "slice_event": index_type, "slice_track": t.track.dtype,
                                "slice_name": t.name.dtype, "slice_partner": index_type}, "the slices", rows=rows)
    for a in range(0, n, CHUNK_EVENTS):
        ph, ts, dur = (np.asarray(c[a:a + CHUNK_EVENTS]) for c in (t.ph, t.ts, t.dur))
        has_ts = ~np.isnan(ts)
        xs = np.flatnonzero((ph == PH_X) & has_ts)
        dur_x = _x_dur(dur[xs])
        x_start = ts[xs]
        x_end = _x_end(x_start, dur_x)
        xs += a
        cols.append({"slice_start": x_start, "slice_end": x_end, "slice_dur": dur_x, "slice_event": xs,
                     "slice_track": t.track[xs], "slice_name": t.name[xs],
                     "slice_partner": np.full(len(xs), -1, dtype=index_type)})
    b_idx, e_idx, unpaired = pairs
    cols.append({"slice_start": t.ts[b_idx], "slice_end": t.ts[e_idx], "slice_dur": t.ts[e_idx] - t.ts[b_idx],
                 "slice_event": b_idx, "slice_track": t.track[b_idx], "slice_name": t.name[b_idx],
                 "slice_partner": e_idx})
    c = cols.finish()
    return SliceTable(start=c["slice_start"], end=c["slice_end"], dur=c["slice_dur"], track=c["slice_track"],
                      name=c["slice_name"], event=c["slice_event"], partner=c["slice_partner"],
                      unpaired=np.sort(unpaired))


def _x_run(t: EventTable, a: int, b: int, index_type: type, unpaired: np.ndarray) -> SliceTable:
    """The slices of a table whose slices are the X events of rows a..b-1, every one timed
    (an XSpace's: its metadata rows first, then every event): the table's own times,
    durations (when all are finite and not negative, -0.0 included), tracks and names, as
    read-only views, not copies, and one -1 for every partner. 28 B a slice fewer held (the
    level-2 view of a 2.1 M-event JAX profile peaked ~50 MB lower), and kept: a stored
    index keeps these as views too (`prepared_io`), not a second copy of the columns.
    What is made (the ends, the event rows, durations that need clamping) is made a chunk
    at a time, into the table's scratch folder when it has one, as `build_slices` makes it."""
    def view(column: np.ndarray) -> np.ndarray:
        v = column[a:b]
        v.flags.writeable = False  # the table's own column: never written through a slice
        return v

    m = b - a
    start, dur = view(t.ts), view(t.dur)
    plain = all(_plain_durations(np.asarray(dur[c:c + CHUNK_EVENTS])) for c in range(0, m, CHUNK_EVENTS))
    made = {"slice_end": np.float64, "slice_event": index_type}
    if not plain:  # NaN, infinite, negative or -0.0: as the chunked path writes them
        made["slice_dur"] = np.float64
    cols = Appended(t.scratch, made, "the slices", rows=m)
    for c in range(0, m, CHUNK_EVENTS):
        d = np.asarray(dur[c:c + CHUNK_EVENTS])
        if not plain:
            d = _x_dur(d)
        part = {"slice_end": _x_end(np.asarray(start[c:c + CHUNK_EVENTS]), d),
                "slice_event": np.arange(a + c, a + c + len(d), dtype=index_type)}
        if not plain:
            part["slice_dur"] = d
        cols.append(part)
    done = cols.finish()
    return SliceTable(start=start, end=done["slice_end"], dur=dur if plain else done["slice_dur"],
                      track=view(t.track), name=view(t.name), event=done["slice_event"],
                      partner=np.broadcast_to(np.array(-1, dtype=index_type), (m,)), unpaired=np.sort(unpaired))


def _plain_durations(dur: np.ndarray) -> bool:
    """Whether every duration is finite and not negative (-0.0 is, in its sign bit)."""
    plain = np.isfinite(dur)
    plain &= ~np.signbit(dur)
    return bool(plain.all())


def _be_rows(ph: np.ndarray, has_ts: np.ndarray, a: int) -> np.ndarray:
    """The rows of the timed B and E events of a chunk of events starting at row `a`."""
    return np.flatnonzero(((ph == PH_B) | (ph == PH_E)) & has_ts) + a


def _x_dur(dur: np.ndarray) -> np.ndarray:
    """An X slice's duration: as written, NaN or negative as 0 (an infinite one the largest float)."""
    return np.maximum(np.nan_to_num(dur, nan=0.0), 0.0)


def _x_end(start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # an end past 1.8e308 is the largest float
        return np.minimum(start + dur, _LARGEST)


def _pairs(t: EventTable, be: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The B/E events `be` matched per track as a stack matches them (an E closes the latest
    open B; an E with none open is ignored): the B and E of each pair, and those left over."""
    b_idx = e_idx = np.zeros(0, dtype=np.int64)
    if not len(be):
        return b_idx, e_idx, np.zeros(0, dtype=np.int64)
    order = np.lexsort((be, t.ts[be], t.track[be]))
    ev = be[order]
    trk = t.track[ev]
    delta = np.where(t.ph[ev] == PH_B, 1, -1).astype(np.int64)
    seg_start = np.ones(len(ev), dtype=bool)
    seg_start[1:] = trk[1:] != trk[:-1]
    seg_id = np.cumsum(seg_start) - 1
    cs = np.cumsum(delta)
    cs = cs - np.concatenate(([0], cs))[np.flatnonzero(seg_start)][seg_id]  # per-track cumsum
    m = np.minimum(_segment_cummin(cs, seg_start), 0)
    prev_m = np.where(seg_start, 0, np.concatenate(([0], m[:-1])))
    ignored = (delta < 0) & (cs < prev_m)
    depth_after = cs - m
    level = np.where(delta > 0, depth_after, depth_after + 1)
    live = ~ignored
    ev_l, trk_l, lvl_l, d_l = ev[live], trk[live], level[live], delta[live]
    pos = np.arange(len(ev_l))
    o2 = np.lexsort((pos, lvl_l, trk_l))
    ev2, d2, trk2, lvl2 = ev_l[o2], d_l[o2], trk_l[o2], lvl_l[o2]
    closes = np.zeros(len(ev2), dtype=bool)
    closes[1:] = (d2[1:] < 0) & (d2[:-1] > 0) & (trk2[1:] == trk2[:-1]) & (lvl2[1:] == lvl2[:-1])
    e_pos = np.flatnonzero(closes)
    b_idx, e_idx = ev2[e_pos - 1], ev2[e_pos]
    matched = np.zeros(len(t.ph), dtype=bool)
    matched[b_idx] = True
    matched[e_idx] = True
    return b_idx, e_idx, be[~matched[be]]


def chunk_end(by_start: np.ndarray, track: np.ndarray, start: np.ndarray, a: int, chunk: int) -> int:
    """Where the chunk of `by_start` (slices by track, then start) from row `a` ends:
    `chunk` slices on, moved past any slices that share the (track, start) of the last
    one, so that whatever orders slices within one (track, start) can work chunk by chunk."""
    m = len(by_start)
    b = min(a + chunk, m)
    if b >= m:
        return b
    last = by_start[b - 1]
    step = 64  # a run of one (track, start) is a few slices: look that far first, then further
    while b < m:
        ahead = np.asarray(by_start[b:b + step])
        same = (track[ahead] == track[last]) & (start[ahead] == start[last])
        differ = np.flatnonzero(~same)
        if len(differ):
            return b + int(differ[0])
        b += len(ahead)
        step = min(2 * step, chunk)
    return b
