"""Deciding what a reduced trace keeps: a pure function of (event table, level, window).

The rules are SPEC §4 made precise in docs/SEMANTICS.md; every step is vectorised
over the event columns. The result is a `Plan`: the sorted indices of input events
to write unchanged (args aside) and the summary slices to add.

Summaries: small slices of a track are sorted by start and cut into groups wherever
an idle bucket lies between them, or a boundary of a kept slice of that track lies
in the gap. A small slice that itself straddles a kept boundary is kept instead, so
no group hull ever contains a kept boundary strictly inside it — summaries nest
properly even where the input's own slices do not. Comparisons happen on integer
ranks of the slice endpoints, offset per track, which makes per-track running
maxima and boundary look-ups single numpy calls over all tracks at once.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import threading
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import numpy as np

from ..errors import TraceError
from ..index.prepared import prepared_of
from ..model import slices as slices_module
from ..model.mapped import Appended, scratch_array, spill, spill_or_fail, spilling_strictly, unlink_scratch
from ..model.read_advice import cold, random_reads, will_need
from ..model.slices import SliceTable, build_slices, chunk_end
from ..model.sorting import order_by, row_dtype, sample_bytes
from ..model.table import (
    FLOW_PHASES,
    INSTANT_PHASES,
    PH_B,
    PH_C,
    PH_E,
    PH_M,
    PH_X,
    SCOPE_GLOBAL,
    SCOPE_PROCESS,
    EventTable,
    ph_in,
    time_span,
)
from ..scan_pieces import usable_cores
from .busy import digits_of, group_busy
from .levels import LEVELS, MAX_RESOLUTION, RESOLUTION
from .window_index import WindowIndex, build_window_index

TOP_NAMES = 5
MIN_WINDOW_US = 1e-6
Grow = Callable[[int], None]


@dataclass
class Summaries:
    track: np.ndarray
    start: np.ndarray
    end: np.ndarray
    count: np.ndarray
    # Summary k's most frequent names: top_name/top_count[top_offsets[k]:top_offsets[k + 1]].
    top_offsets: np.ndarray
    top_name: np.ndarray
    top_count: np.ndarray
    # Summary k's busy share per bucket it touches, as ASCII digits (`busy.py`):
    # busy[busy_offsets[k]:busy_offsets[k + 1]], empty for one within a bucket. None: not made.
    busy_offsets: Optional[np.ndarray] = None
    busy: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.start)


@dataclass
class Plan:
    level: int
    resolution: Optional[int]
    t0: float
    t1: float
    keep: np.ndarray  # sorted input event indices
    summaries: Summaries

    @property
    def bucket_us(self) -> Optional[float]:
        return (self.t1 - self.t0) / self.resolution if self.resolution else None

    @property
    def events(self) -> int:
        return len(self.keep) + len(self.summaries)


def _no_summaries() -> Summaries:
    z = np.zeros(0)
    return Summaries(z.astype(np.int32), z, z, z.astype(np.int64), np.zeros(1, dtype=np.int64),
                     z.astype(np.int64), z.astype(np.int64), np.zeros(1, dtype=np.int64), z.astype(np.uint8))


def check_window(start_us: Optional[float], end_us: Optional[float]) -> None:
    """Refuse a window no reduction can honour, before any work is done on it.

    Every surface (command line, plugin, `reduce_index`) calls this one check so
    they agree on what a window is. A bound left out (None) is the trace's own
    edge, checked by the plan. Both bounds must be finite numbers; with both
    given, start must be below end, and the width must itself be finite
    (-1e308..1e308 overflows to inf, which makes every bucket infinite) and at
    least `MIN_WINDOW_US`.
    """
    for name, value in (("start_us", start_us), ("end_us", end_us)):
        if value is not None and not math.isfinite(value):
            raise TraceError(f"{name} must be a finite number, not {value}")
    if start_us is None or end_us is None:
        return
    if not start_us < end_us:
        raise TraceError(f"start_us must be below end_us (got {start_us} and {end_us})")
    width = end_us - start_us
    if not math.isfinite(width):
        raise TraceError(f"the window {start_us}..{end_us} is too wide: its width overflows a float")
    if width < MIN_WINDOW_US:
        raise TraceError(
            f"the window {start_us}..{end_us} is {width:.3g} µs wide; it must be at least "
            f"{MIN_WINDOW_US:g} µs (1 ps, the finest time a trace holds)"
        )


def default_window(t: EventTable) -> tuple[float, float]:
    """The whole trace: first timestamp to last end. Prepared once per table."""
    p = prepared_of(t)
    window = p.default_window
    if window is None:
        window = p.default_window = _default_window(t)
    return window


def events_in_window(t: EventTable, t0: float, t1: float) -> int:
    """How many timed events a window shows: those whose time falls in it, and the slices
    that began before it and are still open in it (as a plan keeps them)."""
    inside = 0
    for c in _event_chunks(len(t)):  # a chunk at a time: no flags per event
        ts = np.asarray(t.ts[c])
        inside += int(np.count_nonzero((np.asarray(t.ph[c]) != PH_M) & (ts >= t0) & (ts <= t1)))  # NaN: neither
    sl = slices_of(t)
    return inside + sum(int(np.count_nonzero((sl.start[c] < t0) & (sl.end[c] >= t0))) for c in _slice_chunks(len(sl)))


# Events (or flow events) worked on at once by the passes that prepare state for a whole
# table: their temporaries stay this size (some 60 B a row) however long the trace.
CHUNK_EVENTS = slices_module.CHUNK_EVENTS


def _default_window(t: EventTable) -> tuple[float, float]:
    """First time and last end of the timed events (`M` aside): the span its reader found
    as it built the table, or else found a chunk of events at a time (the same min and max
    as over all of them at once, without ~30 B an event of temporaries)."""
    t0, t1 = t.span if t.span is not None else (math.inf, -math.inf)
    for a in range(0, len(t.ts) if t.span is None else 0, CHUNK_EVENTS):
        c0, c1 = time_span(*(np.asarray(c[a:a + CHUNK_EVENTS]) for c in (t.ph, t.ts, t.dur)))
        t0, t1 = min(t0, c0), max(t1, c1)
    if t0 > t1:  # no timed event
        return 0.0, 1.0
    # A span under the finest time any input holds is one instant, as a span of zero: a
    # window must be 1 ps wide at least (`check_window`), so it would be refused otherwise.
    return (t0, t1) if t1 - t0 >= MIN_WINDOW_US else (t0, t0 + 1.0)


def slices_of(t: EventTable) -> SliceTable:
    """Slices are level- and window-independent: prepared once per table."""
    p = prepared_of(t)
    sl = p.slices
    if sl is None:
        sl = p.slices = build_slices(t)
    return sl


# What making the slices holds at its peak (`build_slices`), for the queries that may be
# the first to ask for them: in memory, the slices themselves and their temporaries (~72 B
# an event); with a scratch folder, a chunk of events (~75 B an event of one chunk) and
# ~2 B an event (tracemalloc, `test_query_search`).
SLICES_BYTES_PER_EVENT = 72
SLICES_SPILLED_BYTES_PER_EVENT = 2
SLICES_BYTES_PER_CHUNK_EVENT = 96
# ... and the plans' masks and slice order (`_static`): ~40 B a slice sorted in memory; a
# chunk's worth and 1 B an event with a scratch folder.
STATIC_BYTES_PER_EVENT = 48
STATIC_SPILLED_BYTES_PER_EVENT = 2


def slices_bytes(t: EventTable) -> int:
    """What making `t`'s slices would hold at its peak; 0 once they are made."""
    if prepared_of(t).slices is not None:
        return 0
    if t.scratch is None:
        return SLICES_BYTES_PER_EVENT * len(t)
    return SLICES_SPILLED_BYTES_PER_EVENT * len(t) + SLICES_BYTES_PER_CHUNK_EVENT * min(len(t), CHUNK_EVENTS)


def static_bytes(t: EventTable) -> int:
    """What making the plans' masks and slice order would hold at its peak; 0 once made."""
    if prepared_of(t).static is not None:
        return 0
    if t.scratch is None:
        return STATIC_BYTES_PER_EVENT * len(t)
    return (STATIC_SPILLED_BYTES_PER_EVENT * len(t) + SLICES_BYTES_PER_CHUNK_EVENT * min(len(t), CHUNK_EVENTS)
            + sample_bytes(len(t)))


class _Buckets:
    def __init__(self, t0: float, t1: float, r: int) -> None:
        self.t0, self.t1, self.r = t0, t1, r
        self.theta = (t1 - t0) / r

    def of(self, t: np.ndarray) -> np.ndarray:
        b = np.floor((np.asarray(t, dtype=np.float64) - self.t0) / self.theta)
        return np.clip(b, 0, self.r - 1).astype(np.int64)

    def clipped(self, t: np.ndarray) -> np.ndarray:
        return self.of(np.clip(t, self.t0, self.t1))


def plan(t: EventTable, level: int, start_us: Optional[float] = None, end_us: Optional[float] = None,
         resolution: Optional[int] = None, grow: Optional[Grow] = None) -> Plan:
    """What to write for `level` over the window (the whole trace by default): `plan_within`
    with no limit on the events kept."""
    p = plan_within(t, level, start_us, end_us, resolution, grow)
    assert p is not None
    return p


# A window whose plan would read more than this share of the table's rows through the
# window index is planned by the chunked pass over the whole table instead (the same plan:
# the tests compare): gathering, sorting and testing most of a table's slices row by row
# held ~1.1 GB and took 6.3 s for the whole of a 27.7 M-event XSpace, where the chunked
# pass held 0.3 GB and took 4.4 s; at 16 GiB a tenth of the trace costs the two alike.
WINDOW_PATH_SHARE = 0.125
# A window plan reading at most this many rows through the window index reads them without
# read-ahead, their pages asked for at once when not in memory (`read_advice`); more are
# left to the kernel's read-ahead (an 8 GiB trace's cold 10 % window, ~2.5 M rows, took
# 2.3-2.5 s a page a fault and 1.8-2.0 s asked for in small runs, against 1.0-1.2 s).
RANDOM_READ_ROWS = 1 << 20


def _table_arrays(t: EventTable) -> list:
    """The arrays a window plan may read: the table's columns and its prepared state."""
    return [v for v in vars(t).values() if isinstance(v, np.ndarray)] + prepared_of(t).arrays()


def plan_within(t: EventTable, level: int, start_us: Optional[float] = None, end_us: Optional[float] = None,
                resolution: Optional[int] = None, grow: Optional[Grow] = None,
                max_keep: Optional[int] = None) -> Optional[Plan]:
    """What to write for `level` over the window (the whole trace by default).

    `resolution`: the window's bucket count instead of the level's (levels 1-4), for a
    viewer that sizes it from its pixels, as XProf's Trace Viewer does.
    `grow(n)`: told of each `n` bytes the summaries will hold before they hold them
    (their count follows the window's shape, not the trace's size, and is known only
    as they are made); it may raise to stop the plan (a memory budget).
    `max_keep`: at level 0, None instead of a plan that keeps more events than this (`auto`
    then tries the next level), found before the kept events' indices are made."""
    if level not in LEVELS:
        raise TraceError(f"level must be one of 0-4 or auto, not {level!r}")
    if resolution is not None and not (isinstance(resolution, int) and 1 <= resolution <= MAX_RESOLUTION):
        raise TraceError(f"resolution must be a bucket count from 1 to {MAX_RESOLUTION:,}, not {resolution!r}")
    d0, d1 = default_window(t)
    t0 = d0 if start_us is None else float(start_us)
    t1 = d1 if end_us is None else float(end_us)
    if start_us is None or end_us is None:  # a bound from the trace itself: say so if it is the odd one
        try:
            check_window(t0, t1)
        except TraceError as exc:
            raise TraceError(f"the trace's own time span {d0}..{d1} cannot be bucketed ({exc}); "
                             "ask for a window (start_us, end_us)") from None
    check_window(t0, t1)
    if start_us is not None or end_us is not None:  # a window: its rows found by search, not a pass
        wi = window_index(t)
        if wi is not None:
            # Its searches touch pages at random: no read-ahead for them, nor for the rest of a
            # narrow window's plan (`read_advice`); the rows of a wide one are read with it.
            with random_reads(_table_arrays(t)) as advised:
                rows = wi.rows_within(t, slices_of(t), t0, t1)
                if rows <= WINDOW_PATH_SHARE * len(t):
                    if rows > RANDOM_READ_ROWS:
                        advised.leave()
                    return _plan_window(t, wi, level, t0, t1, resolution, grow, max_keep,
                                        narrow=rows <= RANDOM_READ_ROWS)
    sl = slices_of(t)
    st = _static(t, sl)
    whole = start_us is None and end_us is None
    with _binding_ahead(t, sl, wanted=level != 0 or not whole):
        return _plan_table(t, sl, st, level, t0, t1, whole, resolution, grow, max_keep)


@contextlib.contextmanager
def _binding_ahead(t: EventTable, sl: SliceTable, wanted: bool) -> Iterator[None]:
    """For the length of a `with`: the table's flow binding (`_flow_binding`) made on a
    second core, when it is wanted, not made yet, and the process may use two cores.

    It is level- and window-independent prepared state, and the plan of the whole table
    needs it only at its end (`_flow_keep`); making it meanwhile, beside the fold of the
    slices, counters and instants, overlaps the two (numpy lets go of the GIL in its sorts,
    searches and gathers): the binding was ~40 % of a 2 GiB trace's first plan, on one core
    while the other was idle. `_flow_binding` waits for it, on any thread but its own (a
    second plan of the table meanwhile too, rather than make it again); an error it met is
    raised there, as if met there. Leaving the `with` waits for it too: nothing is still
    writing the table's scratch folder once the plan is over, whatever ended it."""
    prep = prepared_of(t)
    if not wanted or prep.flow_binding is not None or usable_cores() < 2:
        yield
        return
    ahead = _BindingAhead(t, sl, strict=spilling_strictly())
    with _ahead_lock:
        started = id(prep) not in _ahead
        if started:
            try:
                ahead.worker.start()
            except RuntimeError:  # a process out of threads: the plan makes it itself, as on one core
                started = False
            else:
                _ahead[id(prep)] = ahead
    if not started:
        yield
        return
    try:
        yield
    finally:
        ahead.worker.join()
        with _ahead_lock:
            _ahead.pop(id(prep), None)


class _BindingAhead:
    """A flow binding being made on a thread of its own (`_binding_ahead`)."""

    def __init__(self, t: EventTable, sl: SliceTable, strict: bool) -> None:
        self.done = threading.Event()
        self.failed: list[BaseException] = []
        self.worker = threading.Thread(target=self._make, args=(t, sl, strict), name="tb-reduce-flow-binding",
                                       daemon=True)

    def _make(self, t: EventTable, sl: SliceTable, strict: bool) -> None:
        try:
            with spill_or_fail() if strict else contextlib.nullcontext():  # as strict as the plan's thread
                _flow_binding(t, sl)
        except BaseException as exc:  # raised by the plan's thread, where it waits
            self.failed.append(exc)
        finally:
            self.done.set()

    def wait(self) -> None:
        """Until it is made (or failed: its error raised here), unless called by its own thread."""
        if threading.current_thread() is not self.worker:
            self.done.wait()
            if self.failed:
                raise self.failed[0]


# Flow bindings being made by `_binding_ahead`, by the id of their table's prepared state:
# what `_flow_binding` waits for rather than making the same again.
_ahead: dict[int, _BindingAhead] = {}
_ahead_lock = threading.Lock()


def _plan_table(t: EventTable, sl: SliceTable, st: _Static, level: int, t0: float, t1: float, whole: bool,
                resolution: Optional[int], grow: Optional[Grow], max_keep: Optional[int]) -> Optional[Plan]:
    """`plan_within` over the whole table (every event tested against the window)."""
    has_ts = st.has_ts
    in_window = np.empty(len(t), dtype=bool)  # per-event flags made a chunk at a time: no temporaries per event
    for c in _event_chunks(len(t)):
        ts = t.ts[c]
        in_window[c] = has_ts[c] & (ts >= t0) & (ts <= t1)
    overlaps = (sl.start <= t1) & (sl.end >= t0)

    keep = np.array(st.always)
    if level == 0:
        for c in _event_chunks(len(t)):
            keep[c] |= ~has_ts[c] | (in_window[c] & ~ph_in(np.asarray(t.ph[c]), (PH_X, PH_B, PH_E)))
        keep[sl.event[overlaps]] = True
        keep[sl.partner[overlaps & (sl.partner >= 0)]] = True
        if not whole:  # flows are written whole: inside the window, or bound to kept slices
            keep[_flows_leaving(t, in_window)] = False
            keep[_flow_keep(t, sl, overlaps)] = True
        if max_keep is not None and int(np.count_nonzero(keep)) > max_keep:
            return None
        return Plan(0, None, t0, t1, np.flatnonzero(keep), _no_summaries())

    bk = _Buckets(t0, t1, resolution or RESOLUTION[level])
    kept_slice, summaries = _reduce_slices(sl, overlaps, bk, name_rank(t), st.slice_order, grow)
    keep[sl.event[kept_slice]] = True
    keep[sl.partner[kept_slice & (sl.partner >= 0)]] = True
    keep[_counter_keep(t, bk)] = True
    keep[_instant_keep(t, in_window, bk)] = True
    keep[_flow_keep(t, sl, kept_slice)] = True
    sampled = np.zeros(len(t), dtype=bool)
    sampled[t.counter_event] = True
    for c in _event_chunks(len(t)):  # other phases in the window, and counters with no series
        keep[c] |= in_window[c] & (~st.handled[c] | ((np.asarray(t.ph[c]) == PH_C) & ~sampled[c]))
    return Plan(level, bk.r, t0, t1, np.flatnonzero(keep), summaries)


def window_index(t: EventTable) -> Optional[WindowIndex]:
    """The table's window index (`window_index.py`) if it has been prepared
    (`prepare_window_index`) and can serve: plans of a window then find their rows by
    search. None: they read the whole table, as before it (a plan never makes it on the
    side: at 50 M events it takes some 15 s, ten whole-table plans)."""
    wi = prepared_of(t).window_index
    return wi if wi is not None and wi.counters_sorted else None


def prepare_window_index(t: EventTable) -> WindowIndex:
    """Make the table's window index, once (with the state every plan shares, if missing):
    where the server has a folder for it, in the background after the table's first plan
    (`service.py`); in memory, ~33 B an event (`window_index_bytes` while it is made). Where
    counter samples are not in event order (never from our readers), it is made but not
    used: their rows could not be found by search."""
    p = prepared_of(t)
    wi = p.window_index
    if wi is None:
        sl = slices_of(t)
        wi = p.window_index = build_window_index(t, sl, _static(t, sl).always, _flow_binding(t, sl))
    return wi


def _plan_window(t: EventTable, wi: WindowIndex, level: int, t0: float, t1: float, resolution: Optional[int],
                 grow: Optional[Grow], max_keep: Optional[int], narrow: bool = False) -> Optional[Plan]:
    """`plan_within` of a window, from the rows the window index finds in it: the events in
    the window other than slices, and the slices overlapping it. Each rule is the whole
    table's, on those rows; what it keeps is the same, event for event (the tests compare)."""
    sl = slices_of(t)
    pts = wi.points_within(t, t0, t1)  # in_window, less the slices' own events
    ov = wi.slices_overlapping(sl, t0, t1)
    if narrow and (cold(t.ph, pts) or cold(sl.track, ov)):  # the pages of its few rows asked for at once
        for column in (t.ph, t.ts, t.track, t.flow_key, _static(t, sl).handled):  # (`read_advice`)
            will_need(column, pts)
        for column in (sl.start, sl.end, sl.dur, sl.track, sl.name, sl.event, sl.partner):
            will_need(column, ov)
    overlaps = np.zeros(len(sl), dtype=bool)
    overlaps[ov] = True
    partner = sl.partner[ov]
    ph = np.asarray(t.ph[pts])
    parts = [np.asarray(wi.always)]
    if level == 0:
        key = np.asarray(t.flow_key[pts])
        flow = key >= 0
        whole = ~flow  # flows are written whole: those with every event in the window...
        if flow.any():
            keys, inv, count = np.unique(key[flow], return_inverse=True, return_counts=True)
            whole[flow] = (count == wi.flow_size[keys])[inv]
        if max_keep is not None and int(np.count_nonzero(whole)) + len(ov) > max_keep:
            return None  # those alone (distinct: points are no slice's event) are more than the limit
        parts += [pts[whole], sl.event[ov], partner[partner >= 0],
                  _flow_keep_window(t, sl, wi, overlaps, ov)]  # ...or bound to kept slices
        keep = np.unique(np.concatenate(parts))
        if max_keep is not None and len(keep) > max_keep:
            return None
        return Plan(0, None, t0, t1, keep, _no_summaries())

    bk = _Buckets(t0, t1, resolution or RESOLUTION[level])
    order = ov[np.lexsort((sl.event[ov], sl.start[ov], sl.track[ov]))]  # the plans' slice order, of these
    kept_slice, summaries = _reduce_slices(sl, overlaps, bk, name_rank(t), order, grow)
    ks = ov[kept_slice[ov]]
    kp = sl.partner[ks]
    ce = t.counter_event
    lo, hi = np.searchsorted(ce, pts, "left"), np.searchsorted(ce, pts, "right")  # each event's samples
    rows = np.repeat(hi - np.cumsum(hi - lo), hi - lo) + np.arange(int((hi - lo).sum()))
    other = ~np.asarray(_static(t, sl).handled[pts]) | ((ph == PH_C) & (hi == lo))
    parts += [sl.event[ks], kp[kp >= 0], _counter_keep(t, bk, rows),
              _first_instants(t, pts[ph_in(ph, INSTANT_PHASES)], bk, t.track_pid()),
              _flow_keep_window(t, sl, wi, kept_slice, ks), pts[other]]
    return Plan(level, bk.r, t0, t1, np.unique(np.concatenate(parts)), summaries)


def instant_count(t: EventTable) -> int:
    """How many instant events the table holds, counted once (every request's charge asks:
    a pass over the phases of 50 M events each time was a tenth of a second or more)."""
    p = prepared_of(t)
    n = p.instants
    if n is None:
        n = p.instants = sum(int(np.count_nonzero(ph_in(np.asarray(t.ph[c]), INSTANT_PHASES)))
                             for c in _event_chunks(len(t)))
    return n


def _event_chunks(n: int) -> Iterator[slice]:
    for a in range(0, n, CHUNK_EVENTS):
        yield slice(a, min(a + CHUNK_EVENTS, n))


def _flows_leaving(t: EventTable, in_window: np.ndarray) -> np.ndarray:
    """The flow events whose flow has an event outside the window: one flag per flow key
    (keys are small non-negative ids), no sort of the keys, so a narrow window of a long
    trace costs a pass over the events, not a sort of every flow outside it."""
    flows = np.flatnonzero(t.flow_key >= 0)
    if len(flows) == 0:
        return flows
    keys = t.flow_key[flows]
    leaves = np.zeros(int(keys.max()) + 1, dtype=bool)
    leaves[keys[~in_window[flows]]] = True
    return flows[leaves[keys]]


@dataclass
class _Static:
    """What every plan of a table shares, whatever the level and window."""

    has_ts: np.ndarray
    always: np.ndarray  # kept at every level: M, unpaired B/E, untimed events (flows aside)
    handled: np.ndarray  # phases with their own rule (the rest are kept when in the window)
    slice_order: np.ndarray  # slices by (track, start, event)


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
        st = p.static = _Static(m["has_ts"], m["always"], m["handled"], _track_start_order(sl, t.scratch))
    return st


def slice_order(t: EventTable) -> np.ndarray:
    """The table's slices by (track, start, event), as plans walk them: prepared once."""
    return _static(t, slices_of(t)).slice_order


def _track_start_order(sl: SliceTable, folder: Optional[str] = None) -> np.ndarray:
    """Slices by (track, start, event) — what `np.lexsort((event, start, track))` gives (the
    events are distinct, so the order is total) — made without sorting every slice at once
    (`sorting.order_by`: checked first, XSpace lines come sorted already)."""
    return order_by(sl.start, sl.event, sl.track, folder, CHUNK_SLICES, "the slice order")


def _slice_chunks(n: int) -> Iterator[slice]:
    for a in range(0, n, CHUNK_SLICES):
        yield slice(a, min(a + CHUNK_SLICES, n))


def name_rank(t: EventTable) -> np.ndarray:
    """Rank of each name id in name order (strings by value, then others by JSON),
    the tie-break of a summary's top names. Distinct names only: prepared once per table."""
    p = prepared_of(t)
    rank = p.name_rank
    if rank is None:
        def key(i: int) -> tuple:
            v = t.names[i]
            return (0, v) if isinstance(v, str) else (1, json.dumps(v, sort_keys=True, separators=(",", ":")))

        rank = np.empty(len(t.names), dtype=np.int64)
        rank[sorted(range(len(t.names)), key=key)] = np.arange(len(t.names))
        p.name_rank = rank
    return rank


# Slices worked on at once within one track: the plan's temporaries stay this size
# (some 100 B a slice) however long the track, the trace's own arrays aside.
CHUNK_SLICES = 1 << 18
# ...and by the fold (`_reduce_slices`), whose two threads each hold a chunk's temporaries
# at the plan's peak: half as many (`CHUNK_SLICES // FOLD_SHARE`, at least one).
FOLD_SHARE = 2


def _reduce_slices(sl: SliceTable, overlaps: np.ndarray, bk: _Buckets,
                   rank: np.ndarray, slice_order: np.ndarray,
                   grow: Optional[Grow] = None) -> tuple[np.ndarray, Summaries]:
    """Keep big slices (and straddlers); fold the rest into summaries, track by track.

    Each track is read in chunks of half `CHUNK_SLICES` of its slices in start order, twice:
    once to promote straddlers to a fixpoint, once to fold the small slices, carrying
    the running end and the open group from chunk to chunk. What is held for the whole
    trace is a flag per slice and the summaries themselves (SPEC: memory bounded as
    traces grow); the result is the same as folding each track whole.
    """
    if len(slice_order) < len(sl):  # a window's slices (`_plan_window`): only theirs are read
        kept = np.zeros(len(sl), dtype=bool)
        idx = np.asarray(slice_order)
        idx = idx[overlaps[idx]]
        kept[idx] = sl.dur[idx] >= bk.theta
    else:
        kept = overlaps & (sl.dur >= bk.theta)
    runs = _track_runs(sl.track, slice_order)
    parts = [_SummaryParts(grow) for _ in runs]
    step = max(1, CHUNK_SLICES // FOLD_SHARE)

    def fold(k: int) -> None:
        lo, hi = runs[k]

        def chunks():  # this track's overlapping slices, by (start, event)
            for a in range(lo, hi, step):
                idx = slice_order[a:min(a + step, hi)]
                idx = idx[overlaps[idx]]
                if len(idx):
                    yield idx
        bounds = _promote_straddlers(sl, kept, chunks)
        _fold_track(sl, kept, bounds, bk, rank, chunks, parts[k])

    _on_two_cores(fold, [hi - lo for lo, hi in runs])
    out = _SummaryParts(grow)
    for part in parts:  # in track order, whichever thread folded it
        out.extend(part)
    return kept, out.summaries()


# Tracks are folded on two threads at once (`_on_two_cores`) when the slices are at least
# this many: each thread holds one chunk of a track's slices (half `CHUNK_SLICES`) at a time.
FOLD_THREADS = 2
_FOLD_APART_FROM = 2 * CHUNK_SLICES


def _on_two_cores(work: Callable[[int], None], sizes: list[int]) -> None:
    """`work(k)` for every k, on this thread and a second one where two cores may be used:
    the biggest first, each to the thread with the less so far. Folding a track is numpy
    on chunks of 262,144 slices (the GIL let go in each step), and a track's kept flags and
    summaries are its own (`kept` rows of its slices, its own `_SummaryParts`): the result
    is the one of folding them in turn."""
    if len(sizes) < 2 or sum(sizes) < _FOLD_APART_FROM or usable_cores() < 2:
        for k in range(len(sizes)):
            work(k)
        return
    load, mine = [0, 0], [[], []]
    for k in sorted(range(len(sizes)), key=lambda k: -sizes[k]):
        t = int(load[1] < load[0])
        mine[t].append(k)
        load[t] += sizes[k]
    errors: list[BaseException] = []

    def run(ks: list) -> None:
        try:
            for k in ks:
                if errors:
                    return
                work(k)
        except BaseException as exc:  # raised again on the caller's thread
            errors.append(exc)

    worker = threading.Thread(target=run, args=(mine[1],), name="tb-reduce-fold", daemon=True)
    try:
        worker.start()
    except RuntimeError:  # a process out of threads: in turn, on this one
        run(mine[1])
        worker = None
    run(mine[0])
    if worker is not None:
        worker.join()
    if errors:
        raise errors[0]


def _promote_straddlers(sl: SliceTable, kept: np.ndarray, chunks) -> np.ndarray:
    """Keep the small slices of a track that straddle a boundary of a kept one, to a
    fixpoint (each pass with the boundaries of the one before); the kept boundaries."""
    parts = []
    for idx in chunks():
        k = idx[kept[idx]]
        parts += [sl.start[k], sl.end[k]]
    bounds = np.unique(np.concatenate(parts)) if parts else np.zeros(0)
    while True:
        parts = []
        for idx in chunks():
            cand = idx[~kept[idx]]
            straddle = cand[_bound_between(bounds, sl.start[cand], sl.end[cand], open_interval=True)]
            if len(straddle):
                parts += [sl.start[straddle], sl.end[straddle]]
                kept[straddle] = True
        if not parts:
            return bounds
        bounds = np.unique(np.concatenate([bounds] + parts))


@dataclass
class _OpenGroup:
    """A track's last summary so far, which the next chunk may still extend."""

    start: float
    end: float
    count: int
    names: np.ndarray  # distinct name ids
    counts: np.ndarray  # how many of its slices bear each
    busy_first: int  # the bucket of its start...
    busy: np.ndarray  # ...and from there, its slices' busy time per bucket (`busy.group_busy`)


class _SummaryParts:
    """Summaries as they are completed, in order: columns per batch, top names made at once.
    `grow` is told twice the bytes of each batch before it is kept (the batches, then their
    concatenation)."""

    def __init__(self, grow: Optional[Grow] = None) -> None:
        self.grow = grow
        self.track: list = []
        self.start: list = []
        self.end: list = []
        self.count: list = []
        self.offsets: list = [np.zeros(1, dtype=np.int64)]
        self.top_name: list = []
        self.top_count: list = []
        self.busy_offsets: list = [np.zeros(1, dtype=np.int64)]
        self.busy: list = []
        self.n = self.ntop = self.nbusy = 0

    def add(self, track: int, start: np.ndarray, end: np.ndarray, count: np.ndarray,
            g: np.ndarray, name: np.ndarray, cnt: np.ndarray, rank: np.ndarray,
            busy_span: np.ndarray, busy_sums: np.ndarray, theta: float) -> None:
        """Completed summaries of `track`, with their names' counts as triples (group
        0..len-1 of this batch, name id, count), one per distinct (group, name), and their
        busy time per bucket (`busy_span[j]` buckets each, back to back in `busy_sums`)."""
        if len(start) == 0:
            return
        offsets, top_name, top_count = _top_of_counts(g, name, cnt, rank, len(start))
        ndigits, digits = digits_of(busy_sums, busy_span, theta)
        if self.grow is not None:
            self.grow(2 * (len(start) * (4 + 8 + 8 + 8 + 8 + 8) + top_name.nbytes + top_count.nbytes + digits.nbytes))
        self.track.append(np.full(len(start), track, dtype=np.int32))
        self.start.append(start)
        self.end.append(end)
        self.count.append(count)
        self.offsets.append(offsets[1:] + self.ntop)
        self.top_name.append(top_name)
        self.top_count.append(top_count)
        self.busy_offsets.append(np.cumsum(ndigits) + self.nbusy)
        self.busy.append(digits)
        self.n += len(start)
        self.ntop += len(top_name)
        self.nbusy += len(digits)

    def extend(self, other: _SummaryParts) -> None:
        """`other`'s summaries after these (their name and busy offsets moved on)."""
        if other.n == 0:
            return
        for name in ("track", "start", "end", "count", "top_name", "top_count", "busy"):
            getattr(self, name).extend(getattr(other, name))
        self.offsets.extend(o + self.ntop for o in other.offsets[1:])
        self.busy_offsets.extend(o + self.nbusy for o in other.busy_offsets[1:])
        self.n += other.n
        self.ntop += other.ntop
        self.nbusy += other.nbusy

    def add_open(self, track: int, grp: _OpenGroup, rank: np.ndarray, theta: float) -> None:
        self.add(track, np.array([grp.start]), np.array([grp.end]), np.array([grp.count], dtype=np.int64),
                 np.zeros(len(grp.names), dtype=np.int64), grp.names, grp.counts, rank,
                 np.array([len(grp.busy)]), grp.busy, theta)

    def summaries(self) -> Summaries:
        if self.n == 0:
            return _no_summaries()
        return Summaries(track=np.concatenate(self.track), start=np.concatenate(self.start),
                         end=np.concatenate(self.end), count=np.concatenate(self.count),
                         top_offsets=np.concatenate(self.offsets), top_name=np.concatenate(self.top_name),
                         top_count=np.concatenate(self.top_count), busy_offsets=np.concatenate(self.busy_offsets),
                         busy=np.concatenate(self.busy) if self.busy else np.zeros(0, dtype=np.uint8))


def _fold_track(sl: SliceTable, kept: np.ndarray, bounds: np.ndarray, bk: _Buckets, rank: np.ndarray,
                chunks, out: _SummaryParts) -> None:
    """Cut a track's small slices (by start) into summaries: a new one wherever the
    slice starts after all before it ended and an idle bucket or a kept boundary lies
    in that gap."""
    track = -1
    run_end: Optional[float] = None  # the latest end of the track's small slices so far
    grp: Optional[_OpenGroup] = None
    for idx in chunks():
        small = idx[~kept[idx]]
        if len(small) == 0:
            continue
        track = int(sl.track[small[0]])
        ss, se = sl.start[small], sl.end[small]
        new = np.ones(len(small), dtype=bool)
        if run_end is None:
            prev_end, cand, at = np.maximum.accumulate(se)[:-1], ss[1:], 1
        else:
            prev_end, cand, at = np.maximum.accumulate(np.concatenate(([run_end], se)))[:-1], ss, 0
        new[at:] = (cand >= prev_end) & (
            (bk.clipped(cand) > bk.clipped(prev_end) + 1)  # an idle bucket between
            | _bound_between(bounds, prev_end, cand, open_interval=False)  # a kept boundary
        )
        del cand
        part = ss.copy()  # what each adds to the busy time: from its start or the latest end before it
        np.maximum(part[at:], prev_end, out=part[at:])
        del prev_end
        run_end = float(se.max()) if run_end is None else max(run_end, float(se.max()))
        first = new.copy()
        first[0] = True
        seg = np.flatnonzero(first)  # this chunk's parts of summaries; the first may go on the open one
        seg_start, seg_end = ss[seg], np.maximum.reduceat(se, seg)
        seg_count = np.diff(np.append(seg, len(small)))
        group = np.cumsum(first) - 1
        busy_first, busy_last = bk.clipped(seg_start), bk.clipped(seg_end)
        carried = None
        if not new[0]:  # the open summary goes on: its buckets, and the busy time it has
            assert grp is not None
            busy_first[0] = grp.busy_first
            busy_last[0] = bk.clipped(np.array([max(grp.end, float(seg_end[0]))]))[0]
            carried = grp.busy
        sums, at_sums = group_busy(part, se, group, busy_first, busy_last, carried, bk.t0, bk.t1, bk.theta,
                                   bk.r - 1)
        del part
        span = busy_last - busy_first + 1
        nm = sl.name[small].astype(np.int64)
        nn = int(nm.max()) + 1
        combo, cnt = np.unique(group * nn + nm, return_counts=True)
        g, nm = combo // nn, combo % nn
        del combo, group
        if not new[0]:  # the chunk goes on with the open summary
            head = g == 0
            names, inv = np.unique(np.concatenate((grp.names, nm[head])), return_inverse=True)
            grp = _OpenGroup(grp.start, max(grp.end, float(seg_end[0])), grp.count + int(seg_count[0]), names,
                             np.bincount(inv, weights=np.concatenate((grp.counts, cnt[head])),
                                         minlength=len(names)).astype(np.int64),
                             grp.busy_first, sums[:at_sums[1]])
            g, nm, cnt = g[~head], nm[~head], cnt[~head]
            done = 1
        else:
            if grp is not None:
                out.add_open(track, grp, rank, bk.theta)
            done = 0
        last = len(seg) - 1
        if last >= done:  # summaries done..last-1 are complete; the last stays open
            if grp is not None and done:
                out.add_open(track, grp, rank, bk.theta)
            in_last = g == last
            out.add(track, seg_start[done:last], seg_end[done:last], seg_count[done:last],
                    g[~in_last] - done, nm[~in_last], cnt[~in_last], rank,
                    span[done:last], sums[at_sums[done]:at_sums[last]], bk.theta)
            grp = _OpenGroup(float(seg_start[last]), float(seg_end[last]), int(seg_count[last]),
                             nm[in_last], cnt[in_last].astype(np.int64), int(busy_first[last]),
                             sums[at_sums[last]:].copy())
    if grp is not None:
        out.add_open(track, grp, rank, bk.theta)


def _track_runs(track: np.ndarray, slice_order: np.ndarray, chunk: int = 1 << 20) -> list[tuple[int, int]]:
    """The rows lo:hi of `slice_order` (slices by track first) that hold each track, found
    a chunk at a time so that no track id is gathered for every slice at once."""
    cuts = [0]
    for lo in range(0, len(slice_order), chunk):
        trk = track[slice_order[lo:lo + chunk + 1]]
        cuts.extend((np.flatnonzero(trk[1:] != trk[:-1]) + 1 + lo).tolist())
    cuts.append(len(slice_order))
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def _bound_between(bounds: np.ndarray, lo: np.ndarray, hi: np.ndarray, open_interval: bool) -> np.ndarray:
    """Whether some value of sorted `bounds` lies in (lo, hi) (open) or [lo, hi] (closed).

    One binary search per element: the first bound past `lo` (at or past it, when
    closed), then one comparison with `hi`.
    """
    if len(bounds) == 0:
        return np.zeros(len(lo), dtype=bool)
    at = np.searchsorted(bounds, lo, "right" if open_interval else "left")
    inside = at < len(bounds)
    first = bounds[np.minimum(at, len(bounds) - 1)]
    return inside & ((first < hi) if open_interval else (first <= hi))


def _top_of_counts(g: np.ndarray, name: np.ndarray, count: np.ndarray, rank: np.ndarray,
                   ngroups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group, the most frequent names (ties by name order), as flat arrays (offsets
    per group, name ids, counts), from one (group, name, count) triple per distinct
    (group, name) pair, groups 0..ngroups-1 in ascending order."""
    order = np.lexsort((rank[name], -count, g))
    g, name, count = g[order], name[order], count[order]
    pos = np.arange(len(g)) - np.searchsorted(g, g, "left")
    sel = pos < TOP_NAMES
    g, name, count = g[sel], name[sel], count[sel]
    offsets = np.searchsorted(g, np.arange(ngroups + 1), "left")
    return offsets, name, count.astype(np.int64)


def _group_firsts(order: np.ndarray, cols: list) -> np.ndarray:
    first = np.zeros(len(order), dtype=bool)
    if len(order):
        first[0] = True
        for c in cols:
            cs = c[order]
            first[1:] |= cs[1:] != cs[:-1]
    return first


def _counter_keep(t: EventTable, bk: _Buckets, rows: Optional[np.ndarray] = None) -> np.ndarray:
    """M4-style: per series and bucket the min and max samples; first and last. `rows`: the
    samples to look at (ascending: a window's), else all."""
    ev, series, value = t.counter_event, t.counter_series, t.counter_value
    if rows is not None:
        ev, series, value = ev[rows], series[rows], value[rows]
    ts = t.ts[ev]
    w = (ts >= bk.t0) & (ts <= bk.t1)
    ev, series, value, ts = ev[w], series[w], value[w], ts[w]
    if len(ev) == 0:
        return ev
    b = bk.of(ts)
    out = []
    for v in (value, -value):
        order = np.lexsort((ev, ts, v, b, series))
        out.append(ev[order][_group_firsts(order, [series, b])])
    order = np.lexsort((ev, ts, series))
    firsts = _group_firsts(order, [series])
    out.append(ev[order][firsts])
    lasts = np.append(firsts[1:], True)
    out.append(ev[order][lasts])
    return np.concatenate(out)


def _instant_keep(t: EventTable, in_window: np.ndarray, bk: _Buckets) -> np.ndarray:
    """Per scope (thread, process or global) and bucket, the first instant (by time, then
    event). Found a chunk of events at a time: each chunk's firsts per group, then the
    first of those — the same instants as one sort of them all, holding a chunk."""
    pid_of_track = t.track_pid()
    firsts = [_first_instants(t, np.flatnonzero(ph_in(np.asarray(t.ph[a:a + CHUNK_EVENTS]), INSTANT_PHASES)
                                                & in_window[a:a + CHUNK_EVENTS]) + a, bk, pid_of_track)
              for a in range(0, len(t.ph), CHUNK_EVENTS)]
    found = np.concatenate(firsts) if firsts else np.zeros(0, dtype=np.int64)
    return _first_instants(t, found, bk, pid_of_track) if len(firsts) > 1 else found


def _first_instants(t: EventTable, idx: np.ndarray, bk: _Buckets, pid_of_track: np.ndarray) -> np.ndarray:
    """Of the instants `idx`, the first of each (scope, who, bucket), in that order."""
    if len(idx) == 0:
        return idx
    kind = t.scope[idx].astype(np.int64)
    who = np.where(kind == SCOPE_GLOBAL, 0, np.where(kind == SCOPE_PROCESS, pid_of_track[t.track[idx]], t.track[idx]))
    ts = t.ts[idx]
    b = bk.of(ts)
    order = np.lexsort((idx, ts, b, who, kind))
    return idx[order][_group_firsts(order, [kind, who, b])]


def _flow_keep(t: EventTable, sl: SliceTable, kept_slice: np.ndarray) -> np.ndarray:
    """Whole flows whose every event binds to a kept slice of its own track.

    Binding (docs/SEMANTICS.md): `s`, `t` and `f` with `bp: e` bind to the deepest
    slice enclosing their time — the latest-starting one, shortest on ties — and
    other `f` to the first slice starting at or after it. When the latest-starting
    slice does not enclose the time (the event sits between siblings), the event is
    taken as bound to a kept slice iff any kept slice encloses it. A flow is written
    whole or not at all, so no end ever dangles.

    Where each flow event lands among its track's slices does not depend on the
    level or the window, so it is prepared once per table (`_flow_binding`); a plan
    only looks up which of those slices it keeps, a track's kept slices and a chunk of
    its flow events at a time (a flag per flow event and per slice of one track held).
    """
    fb = _flow_binding(t, sl)
    n = len(fb.fidx)
    if n == 0 or not kept_slice.any():
        return fb.fidx[:0]
    ok_sorted = np.zeros(n, dtype=bool)
    for seg in fb.segments:
        rows = np.asarray(fb.order[seg.a:seg.b])
        kept = kept_slice[rows]
        n_kept = int(np.count_nonzero(kept))
        if 2 * n_kept > len(kept):  # "how many kept before row r": a running count when dense (4 B a slice)
            count = np.zeros(len(kept) + 1, dtype=row_dtype(len(kept)))
            np.cumsum(kept, out=count[1:])
            kept_before = count.__getitem__
        else:  # the kept rows when sparse (8 B a kept slice)
            kept_before = functools.partial(np.searchsorted, np.flatnonzero(kept), side="left")
        k_starts = k_run_end = None
        if n_kept and seg.between.any():
            k_starts = np.asarray(sl.start[rows[kept]])
            k_run_end = np.maximum.accumulate(np.asarray(sl.end[rows[kept]]))
        for c0 in range(0, seg.hi_f - seg.lo_f, CHUNK_EVENTS):
            c = slice(c0, c0 + CHUNK_EVENTS)
            ok = seg.direct[c] & kept[seg.pc[c]]
            between = np.asarray(seg.between[c])
            if between.any():
                if k_starts is not None:
                    ts, tol = _segment_times(t, fb, seg, np.arange(c0, c0 + len(ok))[between])
                    q = np.searchsorted(k_starts, ts + tol, "right") - 1
                    ok[between] = (q >= 0) & (k_run_end[np.maximum(q, 0)] >= ts - tol)
                else:
                    ok[between] = False
            next_ok = kept_before(np.asarray(seg.hi_next[c])) > kept_before(np.asarray(seg.lo_next[c]))
            ok_sorted[seg.lo_f + c0:seg.lo_f + c0 + len(ok)] = np.where(seg.enclosing[c], ok, next_ok)
    ok = np.empty(n, dtype=bool)
    bad = np.zeros(0, dtype=bool)
    for a in range(0, n, CHUNK_EVENTS):
        ok[np.asarray(fb.forder[a:a + CHUNK_EVENTS])] = ok_sorted[a:a + CHUNK_EVENTS]
    del ok_sorted
    for a in range(0, n, CHUNK_EVENTS):  # a flow with any event not bound to a kept slice goes whole
        keys = t.flow_key[np.asarray(fb.fidx[a:a + CHUNK_EVENTS])]
        if len(bad) <= int(keys.max()):
            bad = np.concatenate((bad, np.zeros(int(keys.max()) + 1 - len(bad), dtype=bool)))
        bad[keys[~ok[a:a + CHUNK_EVENTS]]] = True
    parts = []
    for a in range(0, n, CHUNK_EVENTS):
        fidx = np.asarray(fb.fidx[a:a + CHUNK_EVENTS])
        parts.append(fidx[~bad[t.flow_key[fidx]]])
    return np.concatenate(parts)


def _flow_keep_window(t: EventTable, sl: SliceTable, wi: WindowIndex, kept_slice: np.ndarray,
                      ks: np.ndarray) -> np.ndarray:
    """`_flow_keep` of a window's plan, whose kept slices `ks` (flagged in `kept_slice`) all
    overlap it. A flow event binds to a slice of its own track, within its span (or, bound
    to the next slice, at most the track's reach before it): so only flows with every event
    near a kept slice of its track can be kept, and only they are looked at, found among
    the window index's flow events by (track, time). Each event's binding is the prepared
    one (its row in the flow binding, `wi.flow_row`), tested against the kept slices of
    its track as `_flow_keep` tests it. The same flow events, in the same (ascending) order."""
    fb = _flow_binding(t, sl)
    if len(fb.fidx) == 0 or len(ks) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((sl.start[ks], sl.track[ks]))  # the kept slices by track, then start
    k_start, k_end, k_track = sl.start[ks][order], sl.end[ks][order], sl.track[ks][order]
    heads = np.r_[0, np.flatnonzero(k_track[1:] != k_track[:-1]) + 1, len(ks)]
    found = []
    for h0, h1 in zip(heads[:-1].tolist(), heads[1:].tolist()):  # a track's flow events near its kept slices
        tr = int(k_track[h0])
        r0, r1 = int(wi.flow_tracks[tr]), int(wi.flow_tracks[tr + 1])
        if r1 == r0:
            continue
        starts, ends = k_start[h0:h1], k_end[h0:h1]
        tol = 2e-6 + 4e-15 * max(abs(float(starts[0])), float(np.abs(ends).max()))  # above `_landing`'s own
        a = wi.flow_rows(t, tr, starts - float(wi.flow_reach[tr]) - tol, "left")  # ascending, as the starts
        b = np.maximum.accumulate(wi.flow_rows(t, tr, ends + tol, "right"))
        new = np.r_[True, a[1:] > b[:-1]]  # runs of rows that overlap merged into one
        lo, hi = a[new], b[np.r_[np.flatnonzero(new)[1:] - 1, len(a) - 1]]
        if int((hi - lo).sum()):
            n = hi - lo
            rows = np.repeat(hi - np.cumsum(n), n) + np.arange(int(n.sum()))
            found.append(np.asarray(wi.flow_event[r0 + rows]))
    if not found:
        return np.zeros(0, dtype=np.int64)
    near = np.sort(np.concatenate(found))
    key = np.asarray(t.flow_key[near])
    keys, inv, count = np.unique(key, return_inverse=True, return_counts=True)
    whole = (count == wi.flow_size[keys])[inv]  # flows with every event in the span
    ev, key = near[whole], key[whole]
    if len(ev) == 0:
        return ev.astype(np.int64)
    row = np.asarray(wi.flow_row[np.searchsorted(fb.fidx, ev)])
    seg_lo = np.array([seg.lo_f for seg in fb.segments] + [np.iinfo(np.int64).max], dtype=np.int64)
    seg_of = np.searchsorted(seg_lo, row, "right") - 1
    ok = np.zeros(len(ev), dtype=bool)
    for s in np.unique(seg_of[seg_of >= 0]).tolist():
        seg = fb.segments[s]
        at = np.flatnonzero(seg_of == s)
        r = row[at] - seg.lo_f
        inside = r < seg.hi_f - seg.lo_f
        at, r = at[inside], r[inside]
        if len(at) == 0:
            continue
        a, b = np.searchsorted(k_track, int(t.track[ev[at[0]]]), "left"), \
            np.searchsorted(k_track, int(t.track[ev[at[0]]]), "right")
        starts, run_end = k_start[a:b], np.maximum.accumulate(k_end[a:b]) if b > a else k_end[a:b]
        pc = np.asarray(seg.pc[r])
        ts, tl = _segment_times(t, fb, seg, r)
        direct = np.asarray(seg.direct[r]) & kept_slice[np.asarray(fb.order[seg.a + pc])]
        q = np.searchsorted(starts, ts + tl, "right") - 1
        between = np.asarray(seg.between[r]) & (q >= 0)
        if len(starts):
            between &= run_end[np.maximum(q, 0)] >= ts - tl
        lo_n, hi_n = np.asarray(seg.lo_next[r]), np.asarray(seg.hi_next[r])
        nxt = hi_n > lo_n
        if nxt.any() and len(starts):
            s_lo = np.asarray(sl.start[np.asarray(fb.order[seg.a + np.where(nxt, lo_n, 0)])])
            s_hi = np.asarray(sl.start[np.asarray(fb.order[seg.a + np.where(nxt, hi_n - 1, 0)])])
            nxt &= np.searchsorted(starts, s_lo, "left") < np.searchsorted(starts, s_hi, "right")
        else:
            nxt[:] = False
        ok[at] = np.where(np.asarray(seg.enclosing[r]), direct | between, nxt)
    bad = np.unique(key[~ok])
    return ev[~np.isin(key, bad)]


@dataclass
class _FlowSegment:
    """The flow events of one track (rows lo_f:hi_f of the track-sorted flows) and
    where each lands among that track's slices (rows a:b of the sorted slices)."""

    lo_f: int
    hi_f: int
    a: int
    b: int
    pc: np.ndarray  # the latest-starting slice at or before ts (0 when none)
    direct: np.ndarray  # it exists and encloses ts
    between: np.ndarray  # it exists and does not enclose ts
    lo_next: np.ndarray  # next-slice binding: candidates lo_next:hi_next
    hi_next: np.ndarray
    enclosing: np.ndarray  # binds to an enclosing slice (else to the next one)


@dataclass
class _FlowBinding:
    """The flow events (`fidx`), them by (track, time) (`forder`), the slices by (track,
    start, -end) (`order`: their starts and ends are `sl.start[order]`, read so, not kept
    a second time) and each track's `_FlowSegment`."""

    fidx: np.ndarray
    forder: np.ndarray
    order: np.ndarray
    segments: list


def _flow_binding(t: EventTable, sl: SliceTable) -> _FlowBinding:
    """Where each flow event lands among its track's slices, prepared once per table.

    Made a chunk at a time into the table's scratch folder when it has one (`Appended`):
    the slices in binding order (by track, start, then longest first) from the plans'
    slice order, each run of equal (track, start) re-sorted inside its chunk, and the flow
    events of each track a chunk of them at a time, so what is held while it is made is a
    chunk, not ~60 B a slice and ~90 B a flow event (1.8 GB for a 50 M-event trace). The
    result is the same as sorting every slice and every flow at once."""
    prep = prepared_of(t)
    ahead = _ahead.get(id(prep))
    if ahead is not None:
        ahead.wait()  # being made on another core (`_binding_ahead`)
    if prep.flow_binding is not None:
        return prep.flow_binding
    folder = t.scratch  # the per-slice arrays beside the table's columns, if it has a folder for them
    fidx = _flow_events(t, folder)
    if len(fidx):
        order, sstart, send, rows = _binding_order(sl, slice_order(t), folder)
    else:
        order, sstart, send, rows = np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), {}
    forder, cuts = _flow_track_order(t, fidx, folder)
    parts = Appended(folder, _SEGMENT_DTYPES, "the flow binding")
    spans = []  # (lo_f, hi_f, a, b) of each track with flows and slices
    for lo_f, hi_f in zip(cuts[:-1], cuts[1:]):
        if hi_f <= lo_f:
            continue
        tr = int(t.track[int(fidx[int(forder[lo_f])])])
        if tr not in rows:
            continue
        a, b = rows[tr]
        starts, ends = sstart[a:b], send[a:b]
        for c0 in range(lo_f, hi_f, CHUNK_EVENTS):
            fs = fidx[np.asarray(forder[c0:min(c0 + CHUNK_EVENTS, hi_f)])]
            parts.append(_landing(t, fs, starts, ends))
        spans.append((lo_f, hi_f, a, b))
    cat = parts.finish()
    segments, at = [], 0
    for lo_f, hi_f, a, b in spans:
        n = hi_f - lo_f
        # views of the mapped whole; copies when held in memory, so the state's size counts them
        segments.append(_FlowSegment(lo_f, hi_f, a, b, **{k: v[at:at + n] if isinstance(v, np.memmap)
                                                         else v[at:at + n].copy() for k, v in cat.items()}))
        at += n
    unlink_scratch(sstart, send)  # read through `order` from now on
    fb = prep.flow_binding = _FlowBinding(fidx, forder, order, segments)  # level- and window-independent
    return fb


_SEGMENT_DTYPES = {"pc": np.int64, "direct": np.bool_, "between": np.bool_, "lo_next": np.int64,
                   "hi_next": np.int64, "enclosing": np.bool_}


def _flow_events(t: EventTable, folder: Optional[str]) -> np.ndarray:
    """The flow events' indices (`flow_key >= 0`), found a chunk of events at a time."""
    out = Appended(folder, {"fidx": np.int64}, "the flow events")
    for a in range(0, len(t.flow_key), CHUNK_EVENTS):
        out.append({"fidx": np.flatnonzero(np.asarray(t.flow_key[a:a + CHUNK_EVENTS]) >= 0) + a})
    return out.finish()["fidx"]


def _binding_order(sl: SliceTable, by_start: np.ndarray, folder: Optional[str]
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, tuple[int, int]]]:
    """The slices by (track, start, -end, slice) — what `np.lexsort((-end, start, track))`
    gives — with their starts and ends in that order, and each track's rows in it.

    `by_start` (the plans' order: track, start, event) already has every (track, start)
    in place; only the slices sharing one are ordered otherwise, and a chunk never cuts
    such a run (`chunk_end`), so each chunk is sorted alone."""
    out = Appended(folder, {"order": np.int64, "sstart": np.float64, "send": np.float64}, "the flow binding")
    rows: dict[int, list[int]] = {}
    a, m = 0, len(by_start)
    while a < m:
        b = chunk_end(by_start, sl.track, sl.start, a, CHUNK_SLICES)
        idx = np.asarray(by_start[a:b], dtype=np.int64)
        trk, start, end = sl.track[idx], sl.start[idx], sl.end[idx]
        o = _longest_first_within_ties(idx, trk, start, end)
        trk = trk[o]
        out.append({"order": idx[o], "sstart": start[o], "send": end[o]})
        firsts = np.r_[0, np.flatnonzero(trk[1:] != trk[:-1]) + 1]
        for i, tr in zip((firsts + a).tolist(), trk[firsts].tolist()):
            rows.setdefault(tr, [i, i])
        for i, tr in zip((np.r_[firsts[1:], len(trk)] + a).tolist(), trk[firsts].tolist()):
            rows[tr][1] = i
        a = b
    cols = out.finish()
    return cols["order"], cols["sstart"], cols["send"], {k: (v[0], v[1]) for k, v in rows.items()}


def _longest_first_within_ties(idx: np.ndarray, trk: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """`np.lexsort((idx, -end, start, trk))` of rows already by (trk, start): only the runs
    of rows sharing a (track, start) move (by -end, then slice), so only those are sorted
    (a few thousand of 4 M slices in a Kineto trace, against a sort of every row). A start
    that is NaN ties with another NaN here, as in the sort."""
    both_nan = np.isnan(start[1:]) & np.isnan(start[:-1])
    same = (trk[1:] == trk[:-1]) & ((start[1:] == start[:-1]) | both_nan)
    o = np.arange(len(idx))
    if not same.any():
        return o
    in_run = np.zeros(len(idx), dtype=bool)
    in_run[1:] |= same
    in_run[:-1] |= same
    run = np.cumsum(np.r_[True, ~same])  # a number per run of equal (track, start), ascending
    rows = np.flatnonzero(in_run)
    o[rows] = rows[np.lexsort((idx[rows], -end[rows], run[rows]))]
    return o


def _flow_track_order(t: EventTable, fidx: np.ndarray, folder: Optional[str]) -> tuple[np.ndarray, list[int]]:
    """The flow events by track, stable (`np.argsort(track[fidx], kind="stable")`), made by
    counting: each track's rows follow the tracks before it, and a chunk of flow events at
    a time is placed behind what its tracks hold so far. With the rows where each track's
    flows begin (and the end)."""
    n = len(fidx)
    tracks = max(len(t.tracks), 1)
    counts = np.zeros(tracks, dtype=np.int64)
    for a in range(0, n, CHUNK_EVENTS):
        counts += np.bincount(t.track[np.asarray(fidx[a:a + CHUNK_EVENTS])], minlength=tracks)[:tracks]
    begins = np.zeros(tracks + 1, dtype=np.int64)
    np.cumsum(counts, out=begins[1:])
    filled = begins[:-1].copy()
    with scratch_array(folder, "flow_forder", n, np.int64) as forder:
        for a in range(0, n, CHUNK_EVENTS):
            trk = t.track[np.asarray(fidx[a:a + CHUNK_EVENTS])]
            o = np.argsort(trk, kind="stable")
            ts = trk[o]
            first = np.r_[0, np.flatnonzero(ts[1:] != ts[:-1]) + 1]
            within = np.arange(len(ts)) - np.repeat(first, np.diff(np.r_[first, len(ts)]))
            forder[filled[ts] + within] = o + a
            np.add.at(filled, ts[first], np.diff(np.r_[first, len(ts)]))
        kept = spill(folder, "flow_forder", forder)
    cuts = [int(c) for c in np.unique(begins)]
    return kept, cuts if cuts and cuts[0] == 0 else [0] + cuts


def _landing(t: EventTable, fs: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> dict[str, np.ndarray]:
    """For flow events `fs` of one track, where each lands among that track's slices
    (`starts`/`ends` in binding order): the fields of `_FlowSegment`."""
    ts = t.ts[fs]
    tol = _flow_tolerance(ts)
    p = np.searchsorted(starts, ts + tol, "right") - 1
    pc = np.maximum(p, 0)
    direct = (p >= 0) & (ends[pc] >= ts - tol)
    between = (p >= 0) & ~direct
    # Next-slice binding: any kept slice from ts − tol up to the first start at
    # or after ts (the slices sharing that start included).
    lo_next = np.searchsorted(starts, ts - tol, "left")
    exact = np.searchsorted(starts, ts, "left")
    hi_next = np.searchsorted(starts, starts[np.minimum(exact, len(starts) - 1)], "right")
    hi_next = np.where(exact < len(starts), hi_next, len(starts))
    return {"pc": pc, "direct": direct, "between": between, "lo_next": lo_next, "hi_next": hi_next,
            "enclosing": t.bind_enclosing[fs]}


def _flow_tolerance(ts: np.ndarray) -> np.ndarray:
    """Within float noise: a flow written at its slice's start may differ by an ulp."""
    return 1e-6 + np.abs(ts) * 2e-15


def _segment_times(t: EventTable, fb: _FlowBinding, seg: _FlowSegment, rows: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The times of a segment's flow events `rows` (counted from its first) and their
    tolerance, as `_landing` met them: read through the binding's orders, not kept (a
    copy of `ts` and a value derived from it, 16 B a flow event on disk)."""
    ts = np.asarray(t.ts[np.asarray(fb.fidx[np.asarray(fb.forder[seg.lo_f + np.asarray(rows, dtype=np.int64)])])])
    return ts, _flow_tolerance(ts)
