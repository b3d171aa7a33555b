"""A host drawn as one busy/idle lane: how a run of hundreds of hosts opens.

A lane is the union, over all of a host's tracks, of the time its reduced slices
(kept ones and summaries) cover: a stretch of time is busy in the lane iff some track
of the host is busy then, to the host's bucket width (stretches closer than one bucket
are one, as a reduction's summaries are). Each busy stretch is one slice, `cat`
`tb_reduce.lane`, named `busy`, its `args.count` the input slices it covers (a summary
counts the slices it folds). The dashboard expands a lane into the host's own tracks
on a click (`expand=`).

Computed from the host's own reduction (a screen's worth of events), with numpy for
the union.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

LANE_CAT = "tb_reduce.lane"


def _slices(events: Iterable[dict]) -> tuple[list[float], list[float], list[int], set]:
    """Start, end and folded count of each slice (X, or a B/E pair per track), and the tracks."""
    starts: list[float] = []
    ends: list[float] = []
    counts: list[int] = []
    tracks: set = set()
    open_: dict = {}
    for ev in events:
        ph = ev.get("ph")
        ts = ev.get("ts")
        if ph not in ("X", "B", "E") or not isinstance(ts, (int, float)) or isinstance(ts, bool):
            continue
        track = (str(ev.get("pid")), str(ev.get("tid")))
        if ph == "X":
            dur = ev.get("dur")
            dur = dur if isinstance(dur, (int, float)) and not isinstance(dur, bool) and dur > 0 else 0.0
            args = ev.get("args")
            n = args.get("count") if isinstance(args, dict) and ev.get("cat") == "tb_reduce.summary" else 1
            starts.append(float(ts))
            ends.append(float(ts) + float(dur))
            counts.append(int(n) if isinstance(n, int) and n > 0 else 1)
            tracks.add(track)
        elif ph == "B":
            open_.setdefault(track, []).append(float(ts))
            tracks.add(track)
        elif open_.get(track):
            t0 = open_[track].pop()
            starts.append(t0)
            ends.append(max(t0, float(ts)))
            counts.append(1)
    return starts, ends, counts, tracks


def busy_stretches(starts: Any, ends: Any, counts: Any, gap_us: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The union of [start, end] intervals, stretches less than `gap_us` apart joined:
    (begin, end, slices covered) per stretch, in time order."""
    s = np.asarray(starts, dtype=np.float64)
    e = np.asarray(ends, dtype=np.float64)
    c = np.asarray(counts, dtype=np.int64)
    ok = np.isfinite(s) & np.isfinite(e)
    s, e, c = s[ok], e[ok], c[ok]
    if not len(s):
        return s, e, c
    order = np.argsort(s, kind="stable")
    s, e, c = s[order], e[order], c[order]
    reach = np.maximum.accumulate(e)  # the furthest end so far
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1] + max(gap_us, 0.0)
    group = np.cumsum(new) - 1
    begins = s[new]
    finish = np.maximum.reduceat(e, np.flatnonzero(new))
    covered = np.bincount(group, weights=c).astype(np.int64)
    return begins, finish, covered


def lane_events(events: Iterable[dict], pid: Any, host: str, gap_us: float) -> tuple[list[dict], int]:
    """The lane of a host whose reduced events are `events` (already on the merged clock),
    on process `pid`: its metadata and busy slices; and how many tracks it stands for."""
    starts, ends, counts, tracks = _slices(events)
    begins, finish, covered = busy_stretches(starts, ends, counts, gap_us)
    out: list[dict] = [
        {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": f"{host} · busy ({len(tracks)} tracks)"}},
        {"ph": "M", "pid": pid, "tid": 0, "name": "thread_name", "args": {"name": "busy"}},
    ]
    for t0, t1, n in zip(begins.tolist(), finish.tolist(), covered.tolist()):
        out.append({"ph": "X", "pid": pid, "tid": 0, "ts": t0, "dur": t1 - t0, "name": "busy", "cat": LANE_CAT,
                    "args": {"count": n, "host": host}})
    return out, len(tracks)
