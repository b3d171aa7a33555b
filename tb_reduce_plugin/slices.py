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

from .mapped import spill
from .model import PH_B, PH_E, PH_X, EventTable

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


def build_slices(t: EventTable) -> SliceTable:
    has_ts = ~np.isnan(t.ts)
    xs = np.flatnonzero((t.ph == PH_X) & has_ts)
    dur_x = np.nan_to_num(t.dur[xs], nan=0.0)
    x_start = t.ts[xs]
    with np.errstate(over="ignore"):  # an end past 1.8e308 is the largest float
        x_end = np.minimum(x_start + np.maximum(dur_x, 0.0), _LARGEST)

    be = np.flatnonzero(((t.ph == PH_B) | (t.ph == PH_E)) & has_ts)
    b_idx = e_idx = np.zeros(0, dtype=np.int64)
    unpaired = np.zeros(0, dtype=np.int64)
    if len(be):
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
        unpaired = be[~matched[be]]

    # Written one at a time into the table's scratch folder, if it has one (`mapped.spill`),
    # so the slices' columns are never all in memory at once.
    folder = t.scratch
    index_type = np.int32 if len(t.ph) < 2**31 else np.int64  # 8 bytes a slice saved
    start = spill(folder, "slice_start", np.concatenate((x_start, t.ts[b_idx])))
    del x_start
    end = spill(folder, "slice_end", np.concatenate((x_end, t.ts[e_idx])))
    del x_end
    dur = spill(folder, "slice_dur", np.concatenate((np.maximum(dur_x, 0.0), t.ts[e_idx] - t.ts[b_idx])))
    del dur_x
    event = spill(folder, "slice_event", np.concatenate((xs, b_idx)).astype(index_type))
    del xs
    return SliceTable(
        start=start,
        end=end,
        dur=dur,
        track=spill(folder, "slice_track", t.track[event]),
        name=spill(folder, "slice_name", t.name[event]),
        event=event,
        partner=spill(folder, "slice_partner", np.concatenate((np.full(len(event) - len(e_idx), -1, dtype=np.int64),
                                                                e_idx)).astype(index_type)),
        unpaired=np.sort(unpaired),
    )
