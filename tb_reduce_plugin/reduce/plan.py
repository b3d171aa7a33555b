"""Deciding what a reduced trace keeps: a pure function of (event table, level, window).

The rules are SPEC §4 made precise in docs/SEMANTICS.md; every step is vectorised
over the event columns. The result is a `Plan`: the sorted indices of input events
to write unchanged (args aside) and the summary slices to add.

This module is the plan itself: the window and its checks, the pass over the whole table
and the plan of a window through the window index, and the prepared state only plans read.
The rules of each kind of event are the modules below it: the slices not kept folded into
summaries (`summaries`, G3), counters and instants (`points`, G4 and G5), flows (`flows`,
G7); what they share of a table is in `shared`, the bucket grid in `buckets`. None of them
imports this one.
"""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np

from ..errors import TraceError
from ..index.prepared import prepared_of
from ..model.mapped import spilling_strictly
from ..model.read_advice import cold, random_reads, will_need
from ..model.slices import SliceTable
from ..model.sorting import KeysThrough, sample_bytes, search_by
from ..model.table import PH_B, PH_C, PH_E, PH_M, PH_X, EventTable, ph_in, time_span
from ..native import scanner_module
from ..scan_pieces import usable_cores
from . import shared
from .buckets import _Buckets
from .flows import _ahead, _ahead_lock, _BindingAhead, _flow_binding, _flow_keep, _flow_keep_window, _flows_leaving
from .levels import LEVELS, MAX_RESOLUTION, RESOLUTION
from .points import _counter_keep, _instant_keep, first_instants_by_time
from .shared import _event_chunks, _slice_chunks, _Static, _static, slices_of
from .summaries import Grow, Summaries, _no_summaries, _reduce_slices
from .window_index import WindowIndex, build_window_index

MIN_WINDOW_US = 1e-6


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


def _default_window(t: EventTable) -> tuple[float, float]:
    """First time and last end of the timed events (`M` aside): the span its reader found
    as it built the table, or else found a chunk of events at a time (the same min and max
    as over all of them at once, without ~30 B an event of temporaries)."""
    t0, t1 = t.span if t.span is not None else (math.inf, -math.inf)
    for a in range(0, len(t.ts) if t.span is None else 0, shared.CHUNK_EVENTS):
        c0, c1 = time_span(*(np.asarray(c[a:a + shared.CHUNK_EVENTS]) for c in (t.ph, t.ts, t.dur)))
        t0, t1 = min(t0, c0), max(t1, c1)
    if t0 > t1:  # no timed event
        return 0.0, 1.0
    # A span under the finest time any input holds is one instant, as a span of zero: a
    # window must be 1 ps wide at least (`check_window`), so it would be refused otherwise.
    return (t0, t1) if t1 - t0 >= MIN_WINDOW_US else (t0, t0 + 1.0)


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
    return SLICES_SPILLED_BYTES_PER_EVENT * len(t) + SLICES_BYTES_PER_CHUNK_EVENT * min(len(t), shared.CHUNK_EVENTS)


def static_bytes(t: EventTable) -> int:
    """What making the plans' masks and slice order would hold at its peak; 0 once made."""
    if prepared_of(t).static is not None:
        return 0
    if t.scratch is None:
        return STATIC_BYTES_PER_EVENT * len(t)
    return (STATIC_SPILLED_BYTES_PER_EVENT * len(t) + SLICES_BYTES_PER_CHUNK_EVENT * min(len(t), shared.CHUNK_EVENTS)
            + sample_bytes(len(t)))


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


def _plan_table(t: EventTable, sl: SliceTable, st: _Static, level: int, t0: float, t1: float, whole: bool,
                resolution: Optional[int], grow: Optional[Grow], max_keep: Optional[int]) -> Optional[Plan]:
    """`plan_within` over the whole table (every event tested against the window)."""
    has_ts = st.has_ts
    wi = window_index(t)  # where it is made, the window's instants in time order: their firsts without a sort
    in_window = None
    if level == 0 or wi is None:
        in_window = np.empty(len(t), dtype=bool)  # per-event flags made a chunk at a time: no temporaries per event
        for c in _event_chunks(len(t)):
            ts = t.ts[c]
            in_window[c] = has_ts[c] & (ts >= t0) & (ts <= t1)
    overlaps = (sl.start <= t1) & (sl.end >= t0)

    keep = np.array(st.always)
    if level == 0:
        assert in_window is not None
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
    rows = np.asarray(st.track_rows).tolist()  # each track's rows of the slice order: the same for every plan
    runs = [(a, b) for a, b in zip(rows[:-1], rows[1:]) if b > a]
    kept_slice, summaries = _reduce_slices(sl, overlaps, bk, name_rank(t), st.slice_order, grow, runs)
    keep[sl.event[kept_slice]] = True
    keep[sl.partner[kept_slice & (sl.partner >= 0)]] = True
    keep[_counter_keep(t, bk)] = True
    keep[_instant_keep(t, in_window, bk) if in_window is not None
         else first_instants_by_time(t, wi.instants_within(t, t0, t1), bk, t.track_pid())] = True
    keep[_flow_keep(t, sl, kept_slice)] = True
    sampled = np.zeros(len(t), dtype=bool)
    sampled[t.counter_event] = True
    _keep_other_phases(t, st, sampled, t0, t1, keep)
    return Plan(level, bk.r, t0, t1, np.flatnonzero(keep), summaries)


def _keep_other_phases(t: EventTable, st: _Static, sampled: np.ndarray, t0: float, t1: float,
                       keep: np.ndarray) -> None:
    """Keep the events in [t0, t1] of phases without a rule of their own, and counters with
    no series (`sampled`: those with one): natively one pass a chunk of events
    (`_scan.window_keep`), else numpy's passes."""
    native = scanner_module()
    for c in _event_chunks(len(t)):
        ts, ph = np.ascontiguousarray(t.ts[c], dtype=np.float64), np.ascontiguousarray(t.ph[c])
        if native is not None and ph.dtype == np.uint8:  # (a column of one value is kept once: made whole here)
            native.window_keep(ts, ph, np.ascontiguousarray(st.handled[c]).view(np.uint8),
                               sampled[c].view(np.uint8), float(t0), float(t1), keep[c].view(np.uint8))
            continue
        keep[c] |= st.has_ts[c] & (ts >= t0) & (ts <= t1) & (~st.handled[c] | ((ph == PH_C) & ~sampled[c]))


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
    ov, order, runs = _window_slices(t, sl, wi, t0, t1)
    if narrow and (cold(t.ph, pts) or cold(sl.track, ov)):  # the pages of its few rows asked for at once
        for column in (t.ph, t.ts, t.track, t.flow_key, _static(t, sl).handled):  # (`read_advice`)
            will_need(column, pts)
        for column in (sl.start, sl.end, sl.dur, sl.track, sl.name, sl.event, sl.partner):
            will_need(column, ov)
    partner = sl.partner[ov]
    ph = np.asarray(t.ph[pts])
    parts = [np.asarray(wi.always)]
    if level == 0:
        overlaps = np.zeros(len(sl), dtype=bool)  # read by the flows' binding, by slice
        overlaps[ov] = True
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
    if order is None:
        order = ov[np.lexsort((sl.event[ov], sl.start[ov], sl.track[ov]))]  # the plans' slice order, of these
    kept_slice, summaries = _reduce_slices(sl, None, bk, name_rank(t), order, grow, runs)  # its own slices: all overlap
    ks = ov[kept_slice[ov]]
    kp = sl.partner[ks]
    rows, sampled = _samples_of(np.asarray(t.counter_event), pts)
    other = ~np.asarray(_static(t, sl).handled[pts]) | ((ph == PH_C) & ~sampled)
    parts += [sl.event[ks], kp[kp >= 0], _counter_keep(t, bk, rows),
              first_instants_by_time(t, wi.instants_within(t, t0, t1), bk, t.track_pid()),
              _flow_keep_window(t, sl, wi, kept_slice, ks), pts[other]]
    return Plan(level, bk.r, t0, t1, np.unique(np.concatenate(parts)), summaries)


# A table with more tracks than this orders a window's slices by sorting them: finding each
# track's run of the slice order costs a search a track, whatever the window holds.
WINDOW_ORDER_MAX_TRACKS = 1 << 12


def _window_slices(t: EventTable, sl: SliceTable, wi: WindowIndex, t0: float, t1: float,
                   ) -> tuple[np.ndarray, Optional[np.ndarray], Optional[list[tuple[int, int]]]]:
    """The slices overlapping [t0, t1] (`WindowIndex.slices_overlapping`'s set, in no order),
    them in the plans' slice order (track, start, event) and each track's rows of that
    order (`summaries._track_runs`), or None for both where the caller sorts them. Those
    starting in [t0, t1] are, per track, one run of the prepared slice order
    (`shared.slice_order`), found by two searches a track; those starting before
    (`WindowIndex.straddlers`, few) go before their track's run. A 10 % window of an 8 GiB
    trace sorted its 1.75 M slices by three gathered keys (~50 ms) to get that order."""
    tracks = len(t.tracks)
    if tracks > WINDOW_ORDER_MAX_TRACKS or len(sl) >= 1 << 62:
        return wi.slices_overlapping(sl, t0, t1), None, None
    st = _static(t, sl)
    so = np.asarray(st.slice_order)
    bounds = np.asarray(st.track_rows)[:tracks + 1]  # each track's run of the order (prepared)
    lohi = search_by(KeysThrough(sl.start, st.slice_order), np.tile(bounds[:-1], 2), np.tile(bounds[1:], 2),
                     np.repeat([t0, t1], tracks), np.repeat([False, True], tracks))  # both ends step together
    lo, hi = lohi[:tracks], lohi[tracks:]
    strad = wi.straddlers(sl, t0)
    strad = strad[np.lexsort((sl.event[strad], sl.start[strad], sl.track[strad]))]
    cut = np.searchsorted(np.asarray(sl.track[strad]), np.arange(tracks + 1), "left")
    pieces, runs, at = [], [], 0
    for k in np.flatnonzero((hi > lo) | (cut[1:] > cut[:-1])).tolist():
        pieces += [strad[cut[k]:cut[k + 1]], so[lo[k]:hi[k]]]
        n = int(cut[k + 1] - cut[k] + hi[k] - lo[k])
        runs.append((at, at + n))
        at += n
    if not pieces:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), []
    order = np.concatenate(pieces).astype(np.int64, copy=False)
    return order, order, runs


def _samples_of(ce: np.ndarray, pts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The counter samples of the events `pts` (ascending): the rows of `ce` (each sample's
    event, ascending) that are theirs, ascending, and whether each event has any. Found from
    the samples' side, each searched among the events (a 10 % window of an 8 GiB trace
    searched each of its ~700 k events among the samples twice: ~10 ms)."""
    if not len(pts) or not len(ce):
        return np.zeros(0, dtype=np.int64), np.zeros(len(pts), dtype=bool)
    a, b = int(np.searchsorted(ce, pts[0], "left")), int(np.searchsorted(ce, pts[-1], "right"))
    at = np.searchsorted(pts, ce[a:b])
    hit = pts[np.minimum(at, len(pts) - 1)] == ce[a:b]
    sampled = np.zeros(len(pts), dtype=bool)
    sampled[at[hit]] = True
    return a + np.flatnonzero(hit), sampled


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
