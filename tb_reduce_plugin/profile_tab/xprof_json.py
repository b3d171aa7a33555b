"""tb-reduce's reduced traces in the JSON form XProf's Trace Viewer reads.

XProf's streaming Trace Viewer (`trace_viewer_index.html`, the Profile tab's default)
reads one object per request with XProf's top-level keys (`XPROF_KEYS`, in that order)
and events in XProf's form:

- metadata (`M`) events without `ts`; each process named `"<host> <name>"`: the viewer
  finds the host of a clicked event from the first word of its process's name, and
  asks for its details only if that host is one it knows;
- every other event carries `args.uid` — what the viewer sends back as `unique_id` to
  ask for the event's full args on click; here `tbr-<its index in the input>`, so a
  details request names exactly one event, and one for an event XProf sent (a small
  number) is told apart and left to XProf — and `z`, which the viewer appends to
  `pid$ts` to tell apart events it already holds when it merges the answer of a zoom
  (here the same index, so an event is never taken for another, and an event sent
  again is never drawn twice);
- kept events come without their args (fetched on click), as XProf sends them.

Time: the viewer keeps the clock it is given (`shiftWorldToZero` off) and asks for
windows in it (`start_time_ms`/`end_time_ms`). XSpace times are already relative to
the profile's start, as XProf writes them; Chrome JSON times (Kineto writes µs since
an epoch, ~5e12) are shifted by a whole number of µs (`Clock.origin_us`) so the ruler
starts near 0, and rounded to the ns the viewer shows.

tb-reduce's summaries (`cat: tb_reduce.summary`, complete events spanning the slices
they fold, with `args.count` and `args.top`) are drawn on a row of their own under
each thread, `<thread> · folded by tb-reduce`: the viewer merges every zoom's answer
into what it holds and never drops an event, so a summary from a coarser view left
in the thread's row would sit on top of the slices a zoom brings. On its own row it
stays a true statement (these stretches were folded at some zoom) and the thread's
row holds real slices only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from .asks import UID_PREFIX

# XProf 2.24's trace_viewer@ answer, keys in its order (checked against its own output).
XPROF_KEYS = ("displayTimeUnit", "metadata", "codeLink", "useNewBackend", "details", "returnedEventsSize",
              "filteredByVisibility", "fullTimespan", "stackFrames", "traceEvents", "showCounterMessage",
              "totalCounterEvents")
SUMMARY_CAT = "tb_reduce.summary"
FOLDED = " · folded by tb-reduce"  # the row of a thread's summaries: its tid and name end with it
# Phases whose events get a `uid` (the viewer fetches details for thread slices only:
# X, B/E pairs and thread-scoped instants). A counter's args are its series: no uid there.
_DETAILED = frozenset("XBiI")


@dataclass(frozen=True)
class Clock:
    """Input µs <-> the viewer's clock (µs in events, ms in requests)."""

    origin_us: float = 0.0

    def out(self, ts: Any) -> Any:
        if not self.origin_us or not isinstance(ts, (int, float)) or isinstance(ts, bool):
            return ts
        return round(ts - self.origin_us, 3)

    def to_input_us(self, ms: float) -> float:
        return ms * 1000.0 + self.origin_us

    def ms(self, us: float) -> float:
        return round((us - self.origin_us) / 1000.0, 6)


def clock_for(fmt: str, first_us: float) -> Clock:
    """XSpace: as XProf (times already relative); Chrome JSON: from the whole µs before its first event."""
    if fmt == "xspace" or not math.isfinite(first_us):
        return Clock(0.0)
    return Clock(float(math.floor(first_us)) if abs(first_us) >= 1e6 else 0.0)


def process_label(host: str, name: Any) -> str:
    """`<host> <name>`: the viewer takes the host from the first word (a nameless process too)."""
    text = "" if name is None else str(name)
    return f"{host} {text if text.strip() else '(unnamed)'}"


def envelope(events: list, full_span_ms: tuple[float, float], filtered: bool,
             extra: Optional[dict] = None) -> dict:
    """XProf's answer object around `events` (metadata first, as XProf sends them)."""
    returned = sum(1 for e in events if e.get("ph") != "M")
    counters = sum(1 for e in events if e.get("ph") == "C")
    out: dict[str, Any] = {
        "displayTimeUnit": "ns",
        "metadata": {"highres-ticks": True},
        "codeLink": "",
        "useNewBackend": False,
        "details": [],
        "returnedEventsSize": returned,
        "filteredByVisibility": bool(filtered),
        "fullTimespan": [full_span_ms[0], full_span_ms[1]],
        "stackFrames": {},
        "traceEvents": events,
        "showCounterMessage": "",
        "totalCounterEvents": counters,
    }
    if extra:
        out.update(extra)
    return out


def metadata_event(e: dict, host: str) -> dict:
    """An `M` event in XProf's form: no time, processes named after their host."""
    out = {k: v for k, v in e.items() if k not in ("ts", "cat", "dur")}
    if e.get("name") == "process_name":
        args = dict(e.get("args") or {})
        args["name"] = process_label(host, args.get("name"))
        out["args"] = args
    return out


def trace_event(e: dict, uid: Optional[int], clock: Clock) -> dict:
    """One written event in XProf's form: `uid` (its input index) and `z`, the viewer's clock."""
    out = dict(e)
    if "ts" in out:
        out["ts"] = clock.out(out["ts"])
    ph = out.get("ph")
    if uid is None:  # a summary: on its thread's folded row, keyed by its extent (sent twice, drawn once)
        out["tid"] = folded_tid(out.get("tid"))
        out["z"] = f"s{out.get('dur')}"
        return out
    if ph in _DETAILED:
        args = out.get("args")
        tag = f"{UID_PREFIX}{uid}"
        out["args"] = dict(args, uid=tag) if isinstance(args, dict) else {"uid": tag}
    out["z"] = uid
    return out


def folded_tid(tid: Any) -> str:
    return f"{tid}{FOLDED}"


def folded_rows(summaries: Iterable[dict], meta: list[dict]) -> list[dict]:
    """`thread_name` (and `thread_sort_index`) events for the folded rows the summaries
    use: named after their thread, sorted with it (the viewer orders threads by sort
    index, then name, so `<name> · folded…` comes right after `<name>`)."""
    names = {(m.get("pid"), m.get("tid")): (m.get("args") or {}).get("name") for m in meta
             if m.get("name") == "thread_name"}
    sorts = {(m.get("pid"), m.get("tid")): (m.get("args") or {}).get("sort_index") for m in meta
             if m.get("name") == "thread_sort_index"}
    out: list[dict] = []
    seen: set = set()
    for e in summaries:
        pid, tid = e.get("pid"), e.get("tid")
        if (pid, tid) in seen or not isinstance(tid, str) or not tid.endswith(FOLDED):
            continue
        seen.add((pid, tid))
        base = tid[:-len(FOLDED)]
        key = next((k for k in names if k[0] == pid and str(k[1]) == base), None)
        name = names.get(key) if key is not None else None
        out.append({"args": {"name": f"{name if name is not None else base}{FOLDED}"}, "name": "thread_name",
                    "ph": "M", "pid": pid, "tid": tid})
        sort = sorts.get(key) if key is not None else None
        if isinstance(sort, (int, float)) and not isinstance(sort, bool):
            out.append({"args": {"sort_index": sort}, "name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid})
    return out


def missing_process_names(events: Iterable[dict], named: set, host: str) -> list[dict]:
    """`process_name` events for pids that have none: the viewer reads the host from them."""
    out, seen = [], set(named)
    for e in events:
        pid = e.get("pid")
        if pid is not None and pid not in seen and not isinstance(pid, (dict, list)):
            seen.add(pid)
            out.append({"args": {"name": process_label(host, pid)}, "name": "process_name", "ph": "M", "pid": pid})
    return out


def view(doc: dict, host: str, clock: Clock, full_span_ms: tuple[float, float], filtered: bool) -> dict:
    """A reduced trace (written `with_input_index`) as XProf's Trace Viewer answer.

    Output-sized work: the reduction already chose what is written."""
    events = doc.get("traceEvents") or []
    info = doc.get("tb_reduce") or {}
    index = info.get("input_index") or []
    n_indexed = len(index)
    meta: list[dict] = []
    rest: list[dict] = []
    named: set = set()
    for k, e in enumerate(events):
        if not isinstance(e, dict):
            continue
        if e.get("ph") == "M":
            m = metadata_event(e, host)
            if m.get("name") == "process_name":
                named.add(m.get("pid"))
            meta.append(m)
        else:
            rest.append(trace_event(e, index[k] if k < n_indexed else None, clock))
    meta.extend(missing_process_names(rest, named, host))
    meta.extend(folded_rows((e for e in rest if e.get("cat") == SUMMARY_CAT), meta))
    summary = {k: v for k, v in info.items() if k != "input_index"}
    return envelope(meta + rest, full_span_ms, filtered, {"tb_reduce": summary})


def detail(event: dict, uid: int, dur: Optional[float], host: str, clock: Clock, meta: list[dict],
           full_span_ms: tuple[float, float]) -> dict:
    """One event with all its args, last in the list as the viewer reads it: a thread
    slice as a complete (`X`) event, its duration from its matching end when it was a `B`."""
    out = dict(event)
    out["ts"] = clock.out(out.get("ts"))
    if not isinstance(out.get("args"), dict):
        out["args"] = {}  # the viewer replaces the slice's args with these: never with nothing
    if out.get("ph") in ("B", "i", "I"):
        out["ph"] = "X"
        out["dur"] = dur if dur is not None else 0
        out.pop("s", None)
    out["z"] = uid
    return envelope([metadata_event(m, host) for m in meta] + [out], full_span_ms, True)
