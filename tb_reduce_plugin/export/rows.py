"""The event model as rows: one per event a user would count, with what the index knows of it.

Each row is an event of the trace in file order, with: its input index (`event`),
`name`, `cat`, `ph`, `ts` and `dur` in µs, `pid` and `tid` as text (a trace mixes numbers
and strings; the text is what the search and range-table routes take: a string as it
is, anything else as its JSON), the `process` and `thread` names its metadata gives (null
where none does), and for slices — `X` events and the `B` of each matched `B`/`E` pair,
whose `dur` is the pair's — their nesting `depth` on their thread (0 at the top) and
`self_us`, the duration less their direct children's (at least 0), as the range table
(`query.aggregate`) computes it. `step` is the number of the step (`waveforms.steps`)
the event starts in: the latest-starting step that starts at or before its time and has
not ended, null outside every step. Metadata events (`M`) are not rows: they name the
processes and threads of the rows. The `E` of a matched pair is not a row either (its
time is its `B`'s row's end); an unmatched `B` or `E` is a row, with no `dur`.

A window keeps the rows that overlap it: a slice that ends at or after its start and
starts at or before its end, any other event whose time lies in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np

from ..model.mapped import scratch_array
from ..model.table import PH_E, PH_M, EventTable
from ..query.aggregate import id_text
from ..query.nesting import children_durations
from ..query.search import name_text
from ..reduce import shared
from ..reduce.shared import slices_of
from ..waveforms.steps import StepSeries

# Events turned into rows at once (a row group of the Parquet file), and what a row of a
# chunk holds at most while it is built and written (its numpy columns and their Arrow
# copies); beside one number a slice (children's time) and one an event (its slice).
CHUNK_ROWS = 1 << 20
ROW_BYTES = 160
# Held for the whole export, an event at most: its slice (8 B), and per slice its children's
# time (8 B) and the nesting's order and depth (16 B; held in memory, `SliceTable.depth`).
EVENT_BYTES = 32


@dataclass
class Chunk:
    """Rows of consecutive events: numpy columns, ids into the table's string lists."""

    event: np.ndarray  # int64 input index
    name: np.ndarray  # int32 id into `names` of the table
    cat: np.ndarray  # int32 id into `cats`
    ph: np.ndarray  # uint8 phase letter
    ts: np.ndarray
    dur: np.ndarray  # NaN: none (not a slice)
    track: np.ndarray  # int32 id into the table's tracks
    depth: np.ndarray  # int32, -1: none
    self_us: np.ndarray  # NaN: none
    step: np.ndarray  # float64 step number, NaN: none

    def __len__(self) -> int:
        return len(self.event)


@dataclass
class Strings:
    """The text of each id a chunk's columns hold: names, categories, and per track its
    pid, tid, process and thread (None where the trace does not name it)."""

    names: list[str]
    cats: list[Optional[str]]
    pid: list[str]
    tid: list[str]
    process: list[Optional[str]]
    thread: list[Optional[str]]


def strings_of(t: EventTable) -> Strings:
    """The texts the rows of `t` refer to."""
    process = [t.process_names.get(pid) for pid, _ in t.tracks]
    thread = [t.thread_names.get(k) for k in range(len(t.tracks))]
    return Strings([name_text(n) for n in t.names], [None if c is None else str(c) for c in t.cats],
                   [id_text(pid) for pid, _ in t.tracks], [id_text(tid) for _, tid in t.tracks],
                   [None if p is None else str(p) for p in process], [None if n is None else str(n) for n in thread])


def chunks(t: EventTable, steps: StepSeries, window: Optional[tuple[float, float]] = None,
           rows: Optional[int] = None) -> Iterator[Chunk]:
    """The rows of `t` (in `window`, when given), `rows` events at a time (`CHUNK_ROWS`)."""
    n = len(t)
    if not n:
        return
    rows = rows or CHUNK_ROWS
    sl = slices_of(t)
    m = len(sl)
    depth = sl.depth if m else np.zeros(0, dtype=np.int64)
    by_start = np.argsort(steps.start_us, kind="stable")
    s_sorted, e_sorted = steps.start_us[by_start], steps.end_us[by_start]
    with scratch_array(t.scratch, "export-slice-of", n, np.int64) as slice_of, children_durations(t) as children:
        slice_of[:] = -1
        for a in range(0, m, shared.CHUNK_SLICES):
            b = min(a + shared.CHUNK_SLICES, m)
            slice_of[np.asarray(sl.event[a:b])] = np.arange(a, b)
            partner = np.asarray(sl.partner[a:b])
            slice_of[partner[partner >= 0]] = -2  # the E of a matched pair: its B's row holds it
        for a in range(0, n, rows):
            b = min(a + rows, n)
            ph = np.asarray(t.ph[a:b])
            which = np.asarray(slice_of[a:b])
            keep = (ph != PH_M) & (which != -2)
            ts = np.asarray(t.ts[a:b])
            row = which.copy()
            is_slice = row >= 0
            dur = np.full(b - a, np.nan)
            dur[is_slice] = np.asarray(sl.dur)[row[is_slice]] if m else 0
            if window is not None:
                lo, hi = window
                end = np.where(is_slice, ts + np.nan_to_num(dur), ts)
                keep &= (ts <= hi) & (end >= lo)
            idx = np.flatnonzero(keep)
            if not len(idx):
                continue
            row, is_slice = row[idx], is_slice[idx]
            rows_of = row[is_slice]
            dep = np.full(len(idx), -1, dtype=np.int32)
            own = np.full(len(idx), np.nan)
            if len(rows_of):
                dep[is_slice] = np.asarray(depth)[rows_of]
                own[is_slice] = np.maximum(np.asarray(sl.dur)[rows_of] - children[rows_of], 0.0)
            t_ev = ts[idx]
            step = np.full(len(idx), np.nan)
            if len(s_sorted):
                j = np.searchsorted(s_sorted, t_ev, side="right") - 1
                inside = (j >= 0) & (t_ev < e_sorted[np.maximum(j, 0)])
                step[inside] = steps.step[by_start[j[inside]]]
            unmatched_e = (ph[idx] == PH_E) & ~is_slice
            d = dur[idx]
            d[unmatched_e] = np.nan
            yield Chunk(event=(idx + a).astype(np.int64), name=np.asarray(t.name[a:b])[idx].astype(np.int32),
                        cat=np.asarray(t.cat[a:b])[idx].astype(np.int32), ph=ph[idx], ts=t_ev, dur=d,
                        track=np.asarray(t.track[a:b])[idx].astype(np.int32), depth=dep, self_us=own, step=step)
