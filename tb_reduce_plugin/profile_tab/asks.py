"""What a Profile-tab Trace Viewer request asks, in tb-reduce's terms — or why it is XProf's.

XProf's `data?run=&tag=trace_viewer@&host=…` comes in three forms (XProf 2.24,
`trace_viewer_index.html`): a view (`resolution`, optionally `start_time_ms` and
`end_time_ms`), one event's details (`event_name`, `start_time_ms`, `duration_ms`,
`unique_id`) and a search (`search_prefix`, `resolution=0`). Each maps onto tb-reduce:
`resolution` is the window's bucket count (XProf: "visible events per row", i.e. the
window cut into that many slots; 0 means every event), the window is the same
interval in the viewer's clock, and `unique_id` is what tb-reduce put in the event it
sent: `tbr-<input index>`. XProf's own ids are small numbers, so a click on an event
XProf sent (a view tb-reduce left to it, e.g. of several hosts) goes to XProf.

Anything else — another tool, the newer viewer's protobuf `format=pb`, several hosts
at once, filters and paths that only XProf knows (`trace_filter_config`,
`selected_group_ids`, `session_path`, `run_path`, `perfetto`, `search_metadata`), or a
parameter tb-reduce has never seen — is `Declined`: XProf answers it unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Union

TRACE_TOOLS = ("trace_viewer", "trace_viewer@")
DEFAULT_RESOLUTION = 8000  # XProf's, when a request names none
MAX_SEARCH_CHARS = 1024
UID_PREFIX = "tbr-"  # an event id tb-reduce sent (`args.uid`), before its input index
MAX_PARAM_CHARS = 4096  # as the Trace Reduce tab's routes
# Parameters that do not change the answer (cache and UI hints), or that a single
# host's answer already satisfies.
_IGNORED = frozenset({"run", "tag", "host", "hosts", "resolution", "start_time_ms", "end_time_ms", "event_name",
                      "duration_ms", "unique_id", "search_prefix", "format", "use_saved_result", "replace_model",
                      "full_dma", "host_index", "mpmd_pipeline_view", "new_backend"})
_XPROF_ONLY = ("session_path", "run_path", "trace_filter_config", "selected_group_ids", "perfetto",
               "search_metadata", "names_only", "module_name", "program_id", "group_by")


class BadAsk(ValueError):
    """A Trace Viewer parameter tb-reduce takes, with a value it cannot (400)."""


@dataclass(frozen=True)
class Declined:
    reason: str


@dataclass(frozen=True)
class Ask:
    kind: str  # "view", "event" or "search"
    run: str
    host: str
    resolution: int = DEFAULT_RESOLUTION
    start_ms: Optional[float] = None
    end_ms: Optional[float] = None
    uid: Optional[int] = None
    event_name: Optional[str] = None
    prefix: Optional[str] = None


def _number(args: Mapping[str, str], name: str) -> Optional[float]:
    raw = args.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise BadAsk(f"parameter {name!r} must be a number, not {raw[:40]!r}") from None
    if not math.isfinite(value):
        raise BadAsk(f"parameter {name!r} must be finite")
    return value


def _check_plain(args: Mapping[str, str]) -> None:
    for name in ("run", "host", "hosts", "event_name", "search_prefix"):
        value = args.get(name)
        if value is not None and (len(value) > MAX_PARAM_CHARS or any(ord(c) < 32 for c in value)):
            raise BadAsk(f"parameter {name!r} holds control characters or is too long")


def read(args: Mapping[str, str]) -> Union[Ask, Declined]:
    """The ask of a `data` request's query (`request.args`), or why XProf keeps it."""
    tag = args.get("tag")
    if tag not in TRACE_TOOLS:
        return Declined(f"tool {tag!r} is XProf's")
    if args.get("format", "json") != "json":
        return Declined("the newer viewer's protobuf format is XProf's")
    for name in _XPROF_ONLY:
        if args.get(name) not in (None, "", "false", "0"):
            return Declined(f"{name} is XProf's")
    unknown = sorted(k for k in args.keys() if k not in _IGNORED)
    if unknown:
        return Declined(f"unknown parameter {unknown[0]!r}")
    _check_plain(args)
    run = args.get("run") or ""
    hosts = [h for h in (args.get("hosts") or "").split(",") if h]
    if len(hosts) > 1:
        return Declined("several hosts in one view are XProf's")
    host = hosts[0] if hosts else (args.get("host") or "")
    if not run or not host:
        return Declined("no run or host named")

    raw_res = _number(args, "resolution")
    if raw_res is None:
        resolution = DEFAULT_RESOLUTION
    elif raw_res < 0 or raw_res != int(raw_res):
        raise BadAsk(f"parameter 'resolution' must be a whole number of events, not {args.get('resolution')!r}")
    else:
        resolution = int(raw_res)
    start, end = _number(args, "start_time_ms"), _number(args, "end_time_ms")

    if args.get("event_name") is not None or args.get("unique_id") is not None:
        raw_uid = args.get("unique_id") or ""
        if not raw_uid.startswith(UID_PREFIX):
            return Declined("an event XProf sent")
        digits = raw_uid[len(UID_PREFIX):]
        if not (digits.isascii() and digits.isdigit()) or len(digits) > 12:
            raise BadAsk(f"parameter 'unique_id' must be an event id tb-reduce sent, not {raw_uid[:40]!r}")
        return Ask("event", run, host, resolution, start, None, int(digits), args.get("event_name"))
    if args.get("search_prefix") is not None:
        prefix = args.get("search_prefix") or ""
        if len(prefix) > MAX_SEARCH_CHARS:
            raise BadAsk(f"parameter 'search_prefix' is longer than {MAX_SEARCH_CHARS} characters")
        return Ask("search", run, host, resolution, start, end, prefix=prefix)
    if (start is None) != (end is None):
        raise BadAsk("give both start_time_ms and end_time_ms, or neither")
    if start is not None and end is not None and not end > start:
        raise BadAsk("end_time_ms must be after start_time_ms")
    return Ask("view", run, host, resolution, start, end)
