"""One Chrome trace of several hosts, from each host's own reduction.

Each host's reduction already keeps the guarantees of SPEC §4 on each of its tracks
(a track is a (pid, tid) of one host); the merge keeps every track apart and moves it
in time as a whole, so they still hold per track:

- **pids**: a host's pid `p` becomes `rank × 2^32 + (p mod 2^32)`, where `rank` is the
  host's place in its run's host list (stable whatever hosts a view picks; exact in a
  JavaScript number up to 2^21 hosts); a string pid `p` becomes `"<host>/<p>"`. Its
  `process_name` is prefixed with the host (`"host · name"`; a pid without one gets
  `"host · pid p"`) and `process_sort_index` orders hosts first, then their processes (a
  process without one gets one in its host's range, after those that have one).
- **time**: every timestamp gets the host's offset (`clock.align`): µs from the earliest
  first event of the hosts, on the wall clock when the hosts' origins are known.
- **flows and async ids** (`id`, `id2`, `bind_id`) are prefixed with the host's rank
  (`"rank:id"`), so two hosts' flows never join.
- **top-level keys** of each host (G6) are kept in `tb_reduce.hosts[k].metadata`.
- **lanes**: a host marked `lane` is drawn as one busy/idle lane (`lanes`) on process
  `rank × 2^32`, in place of its tracks.

The rewrite is a Python pass over the reduced events (a screen's worth per host at the
levels a merged view is asked for); the inputs' millions of events never reach it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from ..reduce.writer import Sink, dumps
from .clock import Alignment, HostClock
from .lanes import lane_events

PID_STRIDE = 1 << 32
SORT_STRIDE = 1 << 20
_ID_KEYS = ("id", "bind_id")


@dataclass
class HostPart:
    """One host of a merged view: how to load its reduction, or why it has none."""

    host: str
    rank: int
    clock: HostClock
    load: Optional[Callable[[], dict]] = None  # the host's reduced trace, parsed when its turn comes
    error: Optional[str] = None
    lane: bool = False  # drawn as one busy/idle lane (`lanes`), not as its tracks


def merged_pid(rank: int, host: str, pid: Any) -> Any:
    if isinstance(pid, bool) or pid is None:
        return rank * PID_STRIDE
    if isinstance(pid, int):
        return rank * PID_STRIDE + pid % PID_STRIDE
    if isinstance(pid, float) and pid.is_integer():
        return rank * PID_STRIDE + int(pid) % PID_STRIDE
    return f"{host}/{pid}"


def _rewrite(ev: dict, part: HostPart, offset: float, named: set) -> dict:
    ev = dict(ev)
    pid = ev.get("pid")
    ev["pid"] = merged_pid(part.rank, part.host, pid)
    ts = ev.get("ts")
    if isinstance(ts, (int, float)) and not isinstance(ts, bool):
        ev["ts"] = ts + offset
    for key in _ID_KEYS:
        if key in ev and ev[key] is not None:
            ev[key] = f"{part.rank}:{ev[key]}"
    id2 = ev.get("id2")
    if isinstance(id2, dict):
        ev["id2"] = {k: f"{part.rank}:{v}" for k, v in id2.items()}
    args = ev.get("args")
    if isinstance(args, dict) and "bind_id" in args:
        ev["args"] = dict(args, bind_id=f"{part.rank}:{args['bind_id']}")
    if ev.get("ph") == "M" and isinstance(args, dict):
        if ev.get("name") == "process_name":
            named.add(ev["pid"])
            ev["args"] = dict(args, name=f"{part.host} · {args.get('name', '')}")
        elif ev.get("name") == "process_sort_index":
            idx = args.get("sort_index")
            idx = int(idx) if isinstance(idx, (int, float)) and not isinstance(idx, bool) else 0
            ev["args"] = dict(args, sort_index=part.rank * SORT_STRIDE + min(max(idx, 0), SORT_STRIDE - 1))
    return ev


def _host_events(evs: list, part: HostPart, offset: float) -> list:
    """A host's events, moved and renamed (the rules above), a name for each unnamed process."""
    named: set = set()
    pids: dict = {}
    out = []
    for ev in evs:
        if not isinstance(ev, dict):
            continue
        new = _rewrite(ev, part, offset, named)
        pids.setdefault(new["pid"], ev.get("pid"))
        out.append(new)
    sorted_ = {e["pid"] for e in out if e.get("ph") == "M" and e.get("name") == "process_sort_index"}
    unsorted = []
    for pid, local in pids.items():  # a process the host never named is named by its host and pid
        if pid not in named:
            out.append({"ph": "M", "pid": pid, "name": "process_name",
                        "args": {"name": f"{part.host} · pid {local}"}})
        if pid not in sorted_:
            unsorted.append(pid)
    # A process without a sort index is placed among its host's, after those that have one
    # (viewers order processes by it, then by pid: pids alone would not keep hosts together).
    for k, pid in enumerate(sorted(unsorted, key=str)):
        out.append({"ph": "M", "pid": pid, "name": "process_sort_index",
                    "args": {"sort_index": part.rank * SORT_STRIDE + SORT_STRIDE // 2 + min(k, SORT_STRIDE // 2 - 1)}})
    return out


def write_merged(parts: Sequence[HostPart], alignment: Alignment, sink: Sink, view: dict) -> dict:
    """Writes the merged trace of `parts` (in rank order) to `sink`; returns its `tb_reduce`
    object. `view` holds what the request asked (level, window on the merged clock,
    buckets in all) and goes into that object as is."""
    sink.write(b'{"traceEvents":[')
    first = True
    hosts_out = []
    events = summaries = input_events = input_bytes = lanes = 0
    lo = hi = None
    display_unit = None
    for part, offset in zip(parts, alignment.offsets_us):
        entry: dict = {"host": part.host, "rank": part.rank, "offset_us": offset, "clock": part.clock.describe()}
        doc = part.load() if part.load is not None else None
        if not isinstance(doc, dict):
            entry["error"] = part.error or "not reduced"
            hosts_out.append(entry)
            continue
        raw = doc.get("traceEvents")
        evs = raw if isinstance(raw, list) else []
        tb = doc.get("tb_reduce") if isinstance(doc.get("tb_reduce"), dict) else {}
        if part.lane:
            moved = [dict(ev, ts=ev["ts"] + offset) for ev in evs
                     if isinstance(ev, dict) and isinstance(ev.get("ts"), (int, float))]
            bucket = tb.get("bucket_us")
            out, tracks = lane_events(moved, part.rank * PID_STRIDE, part.host,
                                      bucket if isinstance(bucket, (int, float)) else 0.0)
            out.append({"ph": "M", "pid": part.rank * PID_STRIDE, "name": "process_sort_index",
                        "args": {"sort_index": part.rank * SORT_STRIDE}})
            entry["lane"] = True
            entry["tracks"] = tracks
            lanes += 1
        else:
            out = _host_events(evs, part, offset)
        if out:
            body = dumps(out)[1:-1]
            if not first:
                sink.write(b",")
            sink.write(body)
            first = False
        entry["metadata"] = {k: v for k, v in doc.items() if k not in ("traceEvents", "tb_reduce")}
        if display_unit is None and isinstance(entry["metadata"].get("displayTimeUnit"), str):
            display_unit = entry["metadata"]["displayTimeUnit"]
        entry["first_event"] = events
        entry["events"] = len(out)
        for key in ("level", "resolution", "bucket_us", "input", "output", "window_us", "trace_us", "input_index"):
            if key in tb and not (part.lane and key == "input_index"):
                entry[key] = tb[key]
        span = tb.get("trace_us")
        if isinstance(span, list) and len(span) == 2 and all(isinstance(x, (int, float)) for x in span):
            a, b = span[0] + offset, span[1] + offset
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
        inp = tb.get("input") if isinstance(tb.get("input"), dict) else {}
        input_events += int(inp.get("events") or 0)
        input_bytes += int(inp.get("bytes") or 0)
        outp = tb.get("output") if isinstance(tb.get("output"), dict) else {}
        summaries += int(outp.get("summaries") or 0)
        events += len(out)
        hosts_out.append(entry)
        del doc, evs, out, raw  # one host's events in memory at a time
    obj = {
        "version": 1,
        **view,
        "merged": True,
        "alignment": {"absolute": alignment.absolute, "epoch_ns": alignment.epoch_ns,
                      "note": ("hosts placed by real time" if alignment.absolute else
                               "some hosts have no known start in real time: they are lined up by their first event")},
        "trace_us": [lo, hi] if lo is not None else None,
        "input": {"format": "merged", "hosts": len(parts), "events": input_events, "bytes": input_bytes},
        "output": {"events": events, "summaries": summaries},
        "hosts": hosts_out,
    }
    if lanes:
        obj["lanes"] = {"threshold": view.get("lane_threshold"), "lanes": lanes,
                        "note": "hosts drawn as one busy/idle lane each; expand=host,… shows their tracks"}
    obj.pop("lane_threshold", None)
    sink.write(b"]")
    if display_unit is not None:
        sink.write(b',"displayTimeUnit":' + dumps(display_unit))
    sink.write(b',"tb_reduce":')
    sink.write(dumps(obj))
    sink.write(b"}")
    obj["output"]["json_bytes"] = sink.bytes
    return obj
