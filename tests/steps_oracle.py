"""The per-step series as the whole-array code of the stop before derived them: every
slice classified at once, each category's union sorted whole. Kept as the oracle of the
chunked `waveforms.steps.derive` (`test_waveforms_steps_chunks.py`)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from tb_reduce_plugin.model.table import EventTable
from tb_reduce_plugin.reduce.shared import slices_of
from tb_reduce_plugin.waveforms.categories import (
    BACKWARD_OP,
    CATEGORIES,
    DEVICE,
    DEVICE_IDLE,
    HOST_ONLY_TRACE,
    NONE,
    PYTHON_FRAME,
    RULES,
    UNACCOUNTED,
    WRAPPER_CATS,
    _search,
    device_tracks,
)
from tb_reduce_plugin.waveforms.steps import (
    MARKER_PYTORCH,
    MARKER_STEP_NUM,
    MARKER_STEPS_LINE,
    NO_MARKERS,
    PROFILER_STEP,
    STEPS_LINE,
    StepSeries,
    _number,
)


def whole_derive(t: EventTable) -> StepSeries:
    """The per-step series of a trace (see the module docstring)."""
    sl = slices_of(t)
    on_device = device_tracks(t)
    marks = _markers(t, sl.event, sl.track, sl.name, on_device)
    if marks is None:
        empty = np.zeros(0)
        return StepSeries(empty, empty, empty, reason=NO_MARKERS)
    rows, numbers, marker = marks
    order = np.lexsort((sl.event[rows], sl.start[rows]))  # time order; file order on ties
    rows, numbers = rows[order], numbers[order]
    start, end = sl.start[rows], sl.end[rows]
    category = classify(t, sl.event, sl.track, sl.name, on_device)
    busy: dict[str, np.ndarray] = {}
    for k, name in enumerate(CATEGORIES):
        mine = category == k
        busy[name] = _covered(*_union(sl.start[mine], sl.end[mine]), start, end) / 1000.0
    if on_device.any():
        work = (category != NONE) & on_device[sl.track]
        busy[DEVICE_IDLE] = (end - start - _covered(*_union(sl.start[work], sl.end[work]), start, end)) / 1000.0
    own = int(sl.track[rows[0]])
    if not on_device[own]:
        threads = backward_tracks(t, sl.track, sl.name) & ~on_device
        threads &= np.fromiter((pid == t.tracks[own][0] for pid, _ in t.tracks), dtype=bool, count=len(t.tracks))
        threads[own] = True
        ops = threads[sl.track] & ~wrappers(t, sl.event, sl.name)
        ops[rows] = False  # the step markers themselves
        busy[UNACCOUNTED] = np.maximum(end - start - _covered(*_union(sl.start[ops], sl.end[ops]), start, end),
                                       0.0) / 1000.0
    return StepSeries(numbers, start, end, busy, marker=marker, track=t.tracks[own])


def _markers(t: EventTable, events: np.ndarray, tracks: np.ndarray, names: np.ndarray,
             on_device: np.ndarray) -> Optional[tuple[np.ndarray, np.ndarray, str]]:
    """Slice rows of the step markers on the chosen track, their step numbers, and their kind."""
    # PyTorch: the step number is in the name.
    numbers_by_name = np.full(len(t.names), np.nan)
    used = np.zeros(len(t.names), dtype=bool)
    used[names] = True
    for i in np.flatnonzero(used).tolist():
        v = t.names[i]
        m = PROFILER_STEP.match(v) if isinstance(v, str) else None
        if m:
            numbers_by_name[i] = float(m.group(1))
    rows = np.flatnonzero(~np.isnan(numbers_by_name[names]))
    if len(rows):
        return _on_one_track(rows, numbers_by_name[names[rows]], tracks, on_device) + (MARKER_PYTORCH,)
    # StepTraceAnnotation: the step number is the event's step_num.
    if len(t.step_event):
        at = np.searchsorted(t.step_event, events)
        at = np.minimum(at, len(t.step_event) - 1)
        rows = np.flatnonzero(t.step_event[at] == events)
        if len(rows):
            return _on_one_track(rows, t.step_value[at[rows]], tracks, on_device) + (MARKER_STEP_NUM,)
    # XProf: a device plane's "Steps" line, whose events are named by their step number.
    steps_tracks = np.zeros(len(t.tracks), dtype=bool)
    for i, name in t.thread_names.items():
        steps_tracks[i] = name == STEPS_LINE
    rows = np.flatnonzero(steps_tracks[tracks])
    if len(rows):
        numbers = np.asarray([_number(t.names[i]) for i in names[rows].tolist()])
        keep = ~np.isnan(numbers)
        if keep.any():
            return _on_one_track(rows[keep], numbers[keep], tracks, on_device) + (MARKER_STEPS_LINE,)
    return None


def _on_one_track(rows: np.ndarray, numbers: np.ndarray, tracks: np.ndarray,
                  on_device: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The markers of one track: a host track before a device one, then the most markers,
    then the lowest track id."""
    trk = tracks[rows]
    ids, counts = np.unique(trk, return_counts=True)
    best = ids[np.lexsort((ids, -counts, on_device[ids]))[0]]
    keep = trk == best
    return rows[keep], numbers[keep]


def _union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as sorted, disjoint intervals (vectorised: a running max)."""
    if not len(start):
        return start, end
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], reach[last]


def _covered(gs: np.ndarray, ge: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Length of [a_i, b_i] covered by the disjoint sorted intervals [gs, ge], per i."""
    if not len(gs):
        return np.zeros(len(a))
    lengths = ge - gs
    before = np.concatenate(([0.0], np.cumsum(lengths)))

    def upto(x: np.ndarray) -> np.ndarray:  # covered length of (-inf, x]
        k = np.searchsorted(gs, x, side="right")  # intervals starting at or before x
        j = np.maximum(k - 1, 0)
        part = np.clip(x - gs[j], 0.0, lengths[j])
        return np.where(k > 0, before[j] + part, 0.0)

    return np.maximum(upto(b) - upto(a), 0.0)



def wrappers(t: EventTable, slice_events: np.ndarray, slice_names: np.ndarray) -> np.ndarray:
    """Per slice: does it only wrap work (a user annotation or a Python frame, see
    `WRAPPER_CATS`, `PYTHON_FRAME`)? Decided once per distinct cat and name."""
    out = np.zeros(len(slice_events), dtype=bool)
    if not len(out):
        return out
    cat_wraps = np.fromiter((c in WRAPPER_CATS for c in t.cats), dtype=bool, count=len(t.cats))
    out |= cat_wraps[t.cat[slice_events]]
    used = np.zeros(len(t.names), dtype=bool)
    used[slice_names] = True
    frame = np.zeros(len(t.names), dtype=bool)
    ids = np.flatnonzero(used)
    frame[ids] = _search(PYTHON_FRAME.pattern, [t.names[i] for i in ids.tolist()])
    return out | frame[slice_names]


def backward_tracks(t: EventTable, slice_tracks: np.ndarray, slice_names: np.ndarray) -> np.ndarray:
    """Per track: does it run autograd's backward ops (`BACKWARD_OP`)? One regex per distinct name."""
    out = np.zeros(len(t.tracks), dtype=bool)
    if not len(slice_names):
        return out
    used = np.zeros(len(t.names), dtype=bool)
    used[slice_names] = True
    backward = np.zeros(len(t.names), dtype=bool)
    ids = np.flatnonzero(used)
    backward[ids] = _search(BACKWARD_OP.pattern, [t.names[i] for i in ids.tolist()])
    out[np.unique(slice_tracks[backward[slice_names]])] = True
    return out


def classify(t: EventTable, slice_events: np.ndarray, slice_tracks: np.ndarray, slice_names: np.ndarray,
             on_device: np.ndarray) -> np.ndarray:
    """The category of each slice (an index into CATEGORIES, or NONE), by RULES."""
    out = np.full(len(slice_events), NONE, dtype=np.int8)
    if not len(out):
        return out
    has_device = bool(on_device.any())
    thread_names = [t.thread_names.get(i, "") for i in range(len(t.tracks))]
    slice_cats = t.cat[slice_events]
    slice_device = on_device[slice_tracks]
    used_names = np.zeros(len(t.names), dtype=bool)
    used_names[slice_names] = True
    for rule in RULES:
        if rule.where == HOST_ONLY_TRACE and has_device:
            continue
        open_ = out == NONE
        if not open_.any():
            break
        where = slice_device if rule.where == DEVICE else ~slice_device
        ok = open_ & where
        if rule.cats:
            ok &= rule.matches_cat(t.cats)[slice_cats]
        if rule.name is not None:
            ok &= rule.matches_name(t.names, used_names)[slice_names]
        if rule.thread is not None:
            ok &= rule.matches_thread(thread_names)[slice_tracks]
        out[ok] = CATEGORIES.index(rule.category)
    return out
