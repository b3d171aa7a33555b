"""What the plan and its parts (summaries, flows, points) share of a table, below them all.

The sizes of the chunks their passes work in (`CHUNK_EVENTS`, `CHUNK_SLICES`: the other
modules read them here at run time, as `shared.CHUNK_EVENTS`, so a test that makes them
small sets them in this one place), the table's slices (`slices_of`) and what every plan
of a table shares whatever the level and window (`_static`: the masks and the slice
order), each prepared once per table. The flow binding is made in the plans' slice order
(`flows._flow_binding`), so that order lives here and not in the plan, which the flows may
not import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np

from ..index.prepared import prepared_of
from ..model import slices as slices_module
from ..model.mapped import Appended
from ..model.slices import SliceTable, build_slices
from ..model.sorting import order_by
from ..model.table import FLOW_PHASES, INSTANT_PHASES, PH_B, PH_C, PH_E, PH_M, PH_X, EventTable, ph_in

# Events (or flow events) worked on at once by the passes that prepare state for a whole
# table: their temporaries stay this size (some 60 B a row) however long the trace.
CHUNK_EVENTS = slices_module.CHUNK_EVENTS
# Slices worked on at once within one track: the plan's temporaries stay this size
# (some 100 B a slice) however long the track, the trace's own arrays aside.
CHUNK_SLICES = 1 << 18


def slices_of(t: EventTable) -> SliceTable:
    """Slices are level- and window-independent: prepared once per table."""
    p = prepared_of(t)
    sl = p.slices
    if sl is None:
        sl = p.slices = build_slices(t)
    return sl


def _event_chunks(n: int) -> Iterator[slice]:
    for a in range(0, n, CHUNK_EVENTS):
        yield slice(a, min(a + CHUNK_EVENTS, n))


def _slice_chunks(n: int) -> Iterator[slice]:
    for a in range(0, n, CHUNK_SLICES):
        yield slice(a, min(a + CHUNK_SLICES, n))


@dataclass
class _Static:
    """What every plan of a table shares, whatever the level and window."""

    has_ts: np.ndarray
    always: np.ndarray  # kept at every level: M, unpaired B/E, untimed events (flows aside)
    handled: np.ndarray  # phases with their own rule (the rest are kept when in the window)
    slice_order: np.ndarray  # slices by (track, start, event)
    # Track k's rows of `slice_order`: track_rows[k]:track_rows[k + 1] (one more than the tracks).
    # Kept with the state, so a restarted server's first window does not search them out
    # through the order (~0.1 s of page faults with the page cache cold, 8 GiB trace).
    track_rows: np.ndarray


def _static(t: EventTable, sl: SliceTable) -> _Static:
    """What every plan of `t` shares, made a chunk of events at a time and written into the
    table's scratch folder when it has one (`Appended`): held, it was 3 B an event, and its
    making some 10 B an event more (500 MB at 50 M events)."""
    p = prepared_of(t)
    st = p.static
    if st is None:
        masks = Appended(t.scratch, {"has_ts": np.bool_, "always": np.bool_, "handled": np.bool_}, "the plans' masks")
        unpaired = np.asarray(sl.unpaired)
        for c in _event_chunks(len(t)):
            ph, ts = np.asarray(t.ph[c]), np.asarray(t.ts[c])
            has_ts = ~np.isnan(ts)
            always = (ph == PH_M) | (~has_ts & ~ph_in(ph, FLOW_PHASES))  # a flow needs a time to bind
            always[unpaired[np.searchsorted(unpaired, c.start):np.searchsorted(unpaired, c.stop)] - c.start] = True
            masks.append({"has_ts": has_ts, "always": always,
                          "handled": ph_in(ph, (PH_X, PH_B, PH_E, PH_M, PH_C) + INSTANT_PHASES + FLOW_PHASES)})
        m = masks.finish()
        st = p.static = _Static(m["has_ts"], m["always"], m["handled"], _track_start_order(sl, t.scratch),
                                _track_rows(sl, len(t.tracks)))
    return st


def _track_rows(sl: SliceTable, tracks: int) -> np.ndarray:
    """Where each track's run of the slice order begins, and where the last one ends: its
    slices counted a chunk at a time (the order is by track first)."""
    count = np.zeros(max(tracks, 1), dtype=np.int64)
    for c in _slice_chunks(len(sl)):
        got = np.bincount(np.asarray(sl.track[c]), minlength=len(count))
        if len(got) > len(count):  # a track id past the table's tracks: counted all the same
            count = np.concatenate((count, np.zeros(len(got) - len(count), dtype=np.int64)))
        count[:len(got)] += got
    rows = np.zeros(len(count) + 1, dtype=np.int64)
    np.cumsum(count, out=rows[1:])
    return rows


def slice_order(t: EventTable) -> np.ndarray:
    """The table's slices by (track, start, event), as plans walk them: prepared once."""
    return _static(t, slices_of(t)).slice_order


def _track_start_order(sl: SliceTable, folder: Optional[str] = None) -> np.ndarray:
    """Slices by (track, start, event) — what `np.lexsort((event, start, track))` gives (the
    events are distinct, so the order is total) — made without sorting every slice at once
    (`sorting.order_by`: checked first, XSpace lines come sorted already)."""
    return order_by(sl.start, sl.event, sl.track, folder, CHUNK_SLICES, "the slice order")
