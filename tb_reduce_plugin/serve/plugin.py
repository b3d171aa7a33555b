"""The TensorBoard plugin: the Trace Reduce tab and its routes (SPEC §6).

Routes, under `/data/plugin/tb_reduce/`:
- `runs` — every run and host found in the logdir, with format and size (a PyTorch rank's
  `rank` and `world_size`; a run joining JAX session folders lists them in `joins`); then
  the runs of TensorBoard event files without traces, `{"run", "hosts": [], "scalars_only": true}`
  (their `tags` and `scalars` answer; the trace routes say they have scalars only)
- `trace?run=&host=&level=&start_us=&end_us=` — the reduced trace (gzip on the
  wire; `&download=1` sends the `.json.gz` file itself; `&args=0` leaves out the
  kept events' args, which the dashboard fetches per event from `event`;
  `&resolution=N` cuts the window into at most N buckets, as the dashboard sizes it
  from its canvas: at `auto` on the level the budget picks, at levels 1-4 into
  min(N, the level's own count); level 0 ignores it)
- `stats?run=&host=&level=&start_us=&end_us=&resolution=` — the `tb_reduce` object, sizes, timings
- `trace` and `stats` with `hosts=a,b,…` or `hosts=*` instead of `host`: a merged view of
  several hosts of the run on one timeline, aligned on real time (`multihost/`); the
  window is on the merged clock (µs from the earliest host's first event); above 32 hosts
  each host is one busy/idle lane but those named in `expand=a,b,…`; the per-host work runs
  where `--tb_reduce_workers` says (local processes by default, or a Dask cluster)
- `event?run=&host=&i=` — one input event with its full args
- `progress?run=&host=` — what the server is doing to that file now: `{"stage": "reading"
  | "reducing" | "idle", "done", "total", "seconds", "bytes_per_s"}` (a viewer waiting on a
  first open shows it)
- `search?run=&host=&q=&re=&icase=&start_us=&end_us=&limit=&offset=` — events by name over
  the whole trace (folded ones too), in time order, a page at a time
- `aggregate?run=&host=&start_us=&end_us=&pid=&tid=&limit=` — exact per-name counts, wall,
  self and longest time of a range, from every original slice
- `memory?run=&host=&start_us=&end_us=&resolution=` — the allocator's totals from Kineto's
  `[memory]` events over a window as counter series, reduced by the counter rule (`pending`,
  with `retry_after_s`, until a gzip's text is kept)
- `compare?run=&host=&base_run=&base_host=&steps=&base_steps=&limit=` — the trace against a baseline
  trace, as `tb-reduce diff --format json` gives it: per-step series and the names' exact
  sums, the `limit` (default 5,000) that changed most
- `view?run=&host=&level=&start_us=&end_us=` — a standalone page that opens that view
- `waveforms?run=&host=` — the per-step series derived from the trace (step time and
  busy time per category; `steps` empty with a `reason` when it has no step markers)
- `waveforms?run=&hosts=a,b|*` — the hosts' per-step series lined up by step number: per
  step and series the min, median and max across hosts, the straggler and each host's value
- `tags?run=` — the run's scalar tags (its TensorBoard event files) and, per host, the
  derived series, and an `id` per tag; `scalars?run=&tag=` (or `&tag_id=`, for a tag too
  long for a URL) — a tag's points, with the damaged records skipped: every point
  (`points=all`, the default), or `&width=N` those a plot N pixels wide needs (per pixel
  column the first, last, lowest and highest; `summary` counts over every point)
- `info` — what this server does besides the tab: whether it answers the Profile tab
- `index.js` and `static/…` — the dashboard (plain ES modules from `frontend/`)

With XProf (`tensorboard-plugin-profile`) installed (`--tb_reduce_profile_tab=auto`,
the default, or `on`), the Profile tab's Trace Viewer requests for the runs tb-reduce
serves are answered here too, in XProf's JSON (`profile_tab/`): its `runs`,
`run_tools` and `hosts` gain the runs XProf cannot open (Chrome traces only), and its
`data?tag=trace_viewer@…` views, event details and searches come from tb-reduce's
index and caches. Everything else goes to XProf unchanged. Every response tb-reduce
answers there carries `X-Served-By: tb-reduce/<version>`.

Errors are JSON `{"error": "…"}`: 400 bad parameter, 404 unknown run, host or
event (or a file that changed since it was listed), 413 input over the limit or
needing more memory than `--tb_reduce_memory_mb`, 422 unreadable file (with the
reason), 503 with `Retry-After` when the server is busy, 500 for anything else —
never a traceback. This module alone maps the service's domain errors to statuses.

Reduced traces are streamed from the disk cache (or, when it cannot be written, from
memory counted against the budget), gzip as stored; a client that does not accept
gzip gets it inflated on the fly.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import mimetypes
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from isal import isal_zlib
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from .. import __version__
from ..budget import BudgetBusy, OverBudget
from ..compare.steps import BadCompare, parse_step_range
from ..errors import BadQuery, FileChanged, IndexDamaged, InflationLimit, InputTooLarge, ObjectStoreError, TraceError
from ..multihost.executor import DEFAULT as DEFAULT_WORKERS
from ..multihost.executor import BadWorkers, check_workers
from ..multihost.selection import BadHosts
from ..multihost.spread import host_waveforms
from ..profile_tab import asks
from ..profile_tab.answers import ProfileTabAnswers
from ..profile_tab.hook import MODES, ProfileTabHook, WsgiApp
from ..reduce.levels import MAX_RESOLUTION, RESOLUTION
from ..reduce.pipeline import check_window, parse_level
from ..waveforms.scalars import is_tag_id
from .cache import Body
from .gate import ServerBusy
from .service import NotFound, TraceService, default_cache_dir

MAX_COMPARE_NAMES = 100_000  # names one comparison may answer (`compare?limit=`)

log = logging.getLogger(__name__)
PLUGIN_NAME = "tb_reduce"
MAX_PARAM_CHARS = 4096
MAX_SCALARS_WIDTH = 65536  # pixels: more than any screen, fewer than a storm could abuse
MIN_MB = 0.001  # the least memory or input limit taken (1 kB): 0, negative or NaN mean nothing
DEFAULT_LEVEL = 2  # what the command line does; `auto` can pick lossless views far too big for a browser
SERVED_BY = f"tb-reduce/{__version__}"  # the header on every Profile-tab response tb-reduce answers


def frontend_dir() -> Path:
    """The dashboard's files: installed as `tb_reduce_plugin/frontend`, or `frontend/` in a checkout."""
    package = Path(__file__).resolve().parent.parent  # this module is `tb_reduce_plugin/serve/plugin.py`
    for candidate in (package / "frontend", package.parent / "frontend"):
        if (candidate / "index.js").is_file():
            return candidate
    return package / "frontend"


Handler = Callable[[wrappers.Request], wrappers.Response]


class RequestError(Exception):
    """A bad request parameter (400), or a refusal this module decides itself."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = " ".join(str(message).split())


def _json(request: wrappers.Request, obj: Any, code: int = 200, headers: Optional[list] = None) -> wrappers.Response:
    return http_util.Respond(request, json.dumps(obj, separators=(",", ":"), allow_nan=False),
                             "application/json", code=code, headers=headers)


def _error(request: wrappers.Request, status: int, message: str) -> wrappers.Response:
    return _json(request, {"error": message}, code=status)


def _text_param(request: wrappers.Request, name: str, required: bool = True) -> Optional[str]:
    value = request.args.get(name)
    if value is None or value == "":
        if required:
            raise RequestError(400, f"missing parameter {name!r}")
        return None
    if len(value) > MAX_PARAM_CHARS or "\x00" in value or any(ord(c) < 32 for c in value):
        raise RequestError(400, f"parameter {name!r} holds control characters or is too long")
    return value


def _float_param(request: wrappers.Request, name: str) -> Optional[float]:
    raw = _text_param(request, name, required=False)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise RequestError(400, f"parameter {name!r} must be a number, not {raw[:40]!r}") from None
    if not math.isfinite(value):
        raise RequestError(400, f"parameter {name!r} must be finite")
    return value


def view_params(request: wrappers.Request) -> tuple[str, str, Any, Optional[float], Optional[float]]:
    """run, host (or, for a merged view, the `hosts` it names), level and window."""
    run = _text_param(request, "run")
    if request.args.get("hosts") is not None:
        if request.args.get("host") is not None:
            raise RequestError(400, "give host (one host) or hosts (a merged view), not both")
        host = _text_param(request, "hosts")
    else:
        host = _text_param(request, "host")
    assert run is not None and host is not None
    raw_level = _text_param(request, "level", required=False) or DEFAULT_LEVEL
    try:
        level = parse_level(raw_level)
    except TraceError as exc:
        raise RequestError(400, str(exc)) from None
    start, end = _range_params(request)
    return run, host, level, start, end


def _range_params(request: wrappers.Request) -> tuple[Optional[float], Optional[float]]:
    """`start_us`/`end_us` of `search` and `aggregate`: both or neither, in the trace's own
    clock (as `trace` takes them); None, None: the whole trace."""
    start, end = _float_param(request, "start_us"), _float_param(request, "end_us")
    if (start is None) != (end is None):
        raise RequestError(400, "give both start_us and end_us, or neither")
    try:
        check_window(start, end)
    except TraceError as exc:
        raise RequestError(400, str(exc)) from None
    return start, end


def _bit_param(request: wrappers.Request, name: str) -> bool:
    """A 0/1 switch (absent: 0)."""
    raw = request.args.get(name, "0") or "0"
    if raw not in ("0", "1"):
        raise RequestError(400, f"parameter {name!r} must be 0 or 1, not {raw[:40]!r}")
    return raw == "1"


def _count_param(request: wrappers.Request, name: str) -> Optional[int]:
    """A whole number as written in ASCII digits (absent: None); its range is the service's to check."""
    raw = _text_param(request, name, required=False)
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
        raise RequestError(400, f"parameter {name!r} must be a whole number, not {raw[:40]!r}")
    return int(raw)


def _resolution_param(request: wrappers.Request, level: Any) -> Optional[int]:
    """`resolution`: the bucket count a viewer sizes from its pixels, 1..MAX_RESOLUTION,
    checked whatever the level. `auto` takes it as given (the budget picks the level, then
    at most N buckets); levels 1-4 cut the window into min(N, the level's own count), so it
    is None where N is no fewer: the answer, its ETag and its cache entry are then exactly
    the level's, as the command line and downloads make it. Level 0 has no buckets: None."""
    raw = _text_param(request, "resolution", required=False)
    if raw is None:
        return None
    value = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 7 else 0
    if not 1 <= value <= MAX_RESOLUTION:
        raise RequestError(400, f"parameter 'resolution' must be a whole number of buckets from 1 to "
                                f"{MAX_RESOLUTION:,}, not {raw[:40]!r}")
    if level == "auto":
        return value
    return value if level in RESOLUTION and value < RESOLUTION[level] else None


class TraceReducePlugin(base_plugin.TBPlugin):
    """Serves the traces of a logdir reduced on the fly (see the module docstring)."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext, service: Optional[TraceService] = None) -> None:
        flags = context.flags
        self.service = service or TraceService(
            context.logdir or "",
            cache_dir=getattr(flags, "tb_reduce_cache_dir", None) or os.environ.get("TB_REDUCE_CACHE_DIR")
            or default_cache_dir(),
            cache_mb=_flag(flags, "tb_reduce_cache_mb", 1024),
            index_mb=_flag(flags, "tb_reduce_index_mb", 0) or None,
            max_input_mb=_flag(flags, "tb_reduce_max_input_mb", 4096, least=MIN_MB),
            memory_mb=_flag(flags, "tb_reduce_memory_mb", 2048, least=MIN_MB),
            follow_symlinks=_switch(flags, "tb_reduce_follow_symlinks", True),
            host_workers=_workers_flag(flags),
        )
        self.frontend = frontend_dir()
        self.shipped = shipped_files(self.frontend)
        self.profile_answers = ProfileTabAnswers(self.service)
        self.profile_hook = ProfileTabHook(
            str(getattr(flags, "tb_reduce_profile_tab", None) or "auto"),
            {"/runs": self._front_runs, "/run_tools": self._front_run_tools, "/hosts": self._front_hosts,
             "/data": self._front_data},
            lambda: bool(self.profile_answers.chrome_runs()),
        )

    def is_active(self) -> bool:
        try:
            return self.service.has_runs()  # runs of scalars only too: their waveforms
        except Exception:  # never break TensorBoard's plugin listing
            log.exception("tb_reduce: discovery failed")
            return False

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Trace Reduce", disable_reload=True)

    def get_plugin_apps(self) -> dict[str, Handler]:
        # Every plugin is loaded by now: if XProf's loaded after this one, front it here
        # (TensorBoard asks plugins for their routes in load order; see profile_tab/hook.py).
        self.profile_hook.install()
        routes = {
            "/runs": self._runs,
            "/trace": self._trace,
            "/stats": self._stats,
            "/event": self._event,
            "/progress": self._progress,
            "/view": self._view,
            "/waveforms": self._waveforms,
            "/tags": self._tags,
            "/scalars": self._scalars,
            "/search": self._search,
            "/aggregate": self._aggregate,
            "/compare": self._compare,
            "/memory": self._memory,
            "/info": self._info,
            "/index.js": self._index_js,
            "/static/*": self._static,
        }
        return {path: self._guarded(fn) for path, fn in routes.items()}

    # ---- plumbing ------------------------------------------------------------
    def _guarded(self, fn: Handler) -> Any:
        @wrappers.Request.application
        def app(request: wrappers.Request) -> wrappers.Response:
            try:
                return fn(request)
            except Exception as exc:
                return self._failure(request, exc)

        return app

    def _failure(self, request: wrappers.Request, exc: Exception) -> wrappers.Response:
        """The one place a domain error becomes a status (and never a traceback)."""
        if isinstance(exc, RequestError):
            return _error(request, exc.status, exc.message)
        if isinstance(exc, (BadQuery, BadHosts, BadCompare)):  # the request's own: before TraceError
            return _error(request, 400, str(exc))
        if isinstance(exc, BadWorkers):  # the workers' cluster cannot be reached (or used) now
            return _busy(request, str(exc), 30)
        if isinstance(exc, asks.BadAsk):
            return _error(request, 400, str(exc))
        if isinstance(exc, (NotFound, FileChanged)):
            return _error(request, 404, str(exc))
        if isinstance(exc, (InputTooLarge, InflationLimit, OverBudget)):
            return _error(request, 413, str(exc))
        if isinstance(exc, ServerBusy):
            return _busy(request, str(exc), exc.retry_after_s)
        if isinstance(exc, IndexDamaged):  # cut twice in one request: the next try parses the trace
            return _busy(request, str(exc), 1)
        if isinstance(exc, BudgetBusy):
            return _busy(request, str(exc), self.service.gate.retry_after())
        if isinstance(exc, ObjectStoreError):  # the logdir's object store failed, not the trace
            return _error(request, 502, str(exc))
        if isinstance(exc, TraceError):
            return _error(request, 422, str(exc))
        if isinstance(exc, MemoryError):
            log.warning("tb_reduce: %s ran out of memory", request.path)
            return _busy(request, "the server ran out of memory for this request; try again", 10)
        log.exception("tb_reduce: %s failed", request.path, exc_info=exc)
        return _error(request, 500, "internal error in tb_reduce; the server log has the details")

    # ---- routes --------------------------------------------------------------
    def _runs(self, request: wrappers.Request) -> wrappers.Response:
        # An ETag (hash of the listing) so the dashboard's Live mode can poll with
        # If-None-Match and get an empty 304 while nothing changed.
        body = json.dumps(self.service.runs(), separators=(",", ":"), allow_nan=False)
        etag = f'"runs-{hashlib.sha1(body.encode()).hexdigest()[:20]}"'
        if etag in request.headers.get("If-None-Match", ""):
            return _NotModified(status=304, headers={"ETag": etag, "X-Content-Type-Options": "nosniff"})
        return http_util.Respond(request, body, "application/json", headers=[("ETag", etag)])

    def _view_request(self, request: wrappers.Request
                      ) -> tuple[str, str, Any, Optional[float], Optional[float], bool, Optional[int]]:
        run, host, level, start, end = view_params(request)
        args = request.args.get("args", "1")
        if args not in ("0", "1"):
            raise RequestError(400, f"parameter 'args' must be 0 or 1, not {args[:40]!r}")
        return run, host, level, start, end, args == "0", _resolution_param(request, level)

    def _views(self, request: wrappers.Request) -> tuple[Any, dict]:
        """Who answers a view, and what else it takes: the service for one host; for `hosts=`,
        its merged views, with the hosts to draw in full in a lane view (`expand=`)."""
        if request.args.get("hosts") is None:
            if request.args.get("expand") is not None:
                raise RequestError(400, "expand names hosts of a merged view: give hosts= too")
            return self.service, {}
        self.service.refuse_scalars_only(request.args.get("run", ""))  # no hosts to merge: say why
        return self.service.merged, {"expand": _text_param(request, "expand", required=False)}

    def _trace(self, request: wrappers.Request) -> wrappers.Response:
        run, host, level, start, end, drop_args, resolution = self._view_request(request)
        download = request.args.get("download") in ("1", "true")
        views, extra = self._views(request)
        # The ETag names the file as listed and the view asked; reductions are deterministic,
        # so a revalidation is answered without computing or reading anything.
        tag = views.etag(run, host, level, start, end, drop_args, resolution, **extra)
        etag = f'"{tag}{"-d" if download else ""}"'
        # Responses made here, not by `Respond`, carry the headers TensorBoard's security validator requires.
        if etag in request.headers.get("If-None-Match", ""):
            return _NotModified(status=304, headers={"ETag": etag, "X-Content-Type-Options": "nosniff"})
        r = views.reduction(run, host, level, start, end, drop_args=drop_args, resolution=resolution, **extra)
        assert r.body is not None
        headers = [("ETag", f'"{r.etag}{"-d" if download else ""}"'), ("X-Tb-Reduce-Level", str(r.stats.get("level")))]
        if download:
            name = _download_name("merged" if views is not self.service else host, r.stats)
            headers.append(("Content-Disposition", f'attachment; filename="{name}"'))
            return _stream(r.body, "application/gzip", headers, gzip=False)
        gzip_ok = "gzip" in request.headers.get("Accept-Encoding", "").lower()
        return _stream(r.body, "application/json", headers, gzip=gzip_ok,
                       inflated_length=None if gzip_ok else r.stats["output"]["json_bytes"])

    def _stats(self, request: wrappers.Request) -> wrappers.Response:
        run, host, level, start, end, drop_args, resolution = self._view_request(request)
        views, extra = self._views(request)
        return _json(request, views.reduction(run, host, level, start, end, drop_args=drop_args, with_body=False,
                                              resolution=resolution, **extra).stats)

    def _event(self, request: wrappers.Request) -> wrappers.Response:
        run = _text_param(request, "run")
        host = _text_param(request, "host")
        raw = _text_param(request, "i")
        assert run is not None and host is not None and raw is not None
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 12:  # `isdigit` alone takes '²', which int() refuses
            raise RequestError(400, f"parameter 'i' must be an event index, not {raw[:40]!r}")
        body = self.service.event(run, host, int(raw))
        return http_util.Respond(request, body, "application/json")

    def _progress(self, request: wrappers.Request) -> wrappers.Response:
        run = _text_param(request, "run")
        host = _text_param(request, "host")
        assert run is not None and host is not None
        return _json(request, self.service.progress(run, host))

    def _waveforms(self, request: wrappers.Request) -> wrappers.Response:
        run = _text_param(request, "run")
        if request.args.get("hosts") is not None:  # several hosts: their per-step spread (multihost/spread.py)
            if request.args.get("host") is not None:
                raise RequestError(400, "give host (one host) or hosts (the spread across hosts), not both")
            hosts = _text_param(request, "hosts")
            assert run is not None and hosts is not None
            self.service.refuse_scalars_only(run)
            return _json(request, host_waveforms(self.service, run, hosts))
        host = _text_param(request, "host")
        assert run is not None and host is not None
        return _json(request, self.service.waveforms(run, host))

    def _tags(self, request: wrappers.Request) -> wrappers.Response:
        run = _text_param(request, "run")
        assert run is not None
        return _json(request, self.service.tags(run))

    def _scalars(self, request: wrappers.Request) -> wrappers.Response:
        run = _text_param(request, "run")
        assert run is not None
        # A tag by its id (from `tags`): a tag may be longer than any URL can carry.
        tag_id = _text_param(request, "tag_id", required=False)
        if tag_id is not None and request.args.get("tag") is not None:
            raise RequestError(400, "give tag or tag_id, not both")
        tag = None if tag_id is not None else _text_param(request, "tag")
        if tag_id is not None and not is_tag_id(tag_id):
            raise RequestError(400, f"parameter 'tag_id' must be a tag id from the tags route, not {tag_id[:40]!r}")
        points = request.args.get("points")
        if points is not None and points != "all":
            raise RequestError(400, f"parameter 'points' must be 'all' (or give width=N), not {points[:40]!r}")
        width = _count_param(request, "width")
        if width is not None and not 1 <= width <= MAX_SCALARS_WIDTH:
            raise RequestError(400, f"parameter 'width' must be 1 to {MAX_SCALARS_WIDTH} pixels, not {width}")
        if width is not None and points is not None:
            raise RequestError(400, "give points=all (every point) or width=N (what N pixels show), not both")
        answer = self.service.scalars(run, tag, tag_id, width)
        gzip_ok = "gzip" in request.headers.get("Accept-Encoding", "").lower()
        return _stream(answer.body, "application/json", [], gzip=gzip_ok,
                       inflated_length=None if gzip_ok else answer.json_bytes)

    def _search(self, request: wrappers.Request) -> wrappers.Response:
        run = _text_param(request, "run")
        host = _text_param(request, "host")
        q = _text_param(request, "q")
        assert run is not None and host is not None and q is not None
        start, end = _range_params(request)
        page = {k: v for k in ("limit", "offset") if (v := _count_param(request, k)) is not None}
        return _json(request, self.service.search(run, host, q, _bit_param(request, "re"), _bit_param(request, "icase"),
                                                  start, end, **page))

    def _aggregate(self, request: wrappers.Request) -> wrappers.Response:
        run = _text_param(request, "run")
        host = _text_param(request, "host")
        assert run is not None and host is not None
        start, end = _range_params(request)
        limit = _count_param(request, "limit")
        return _json(request, self.service.aggregate(run, host, start, end, _text_param(request, "pid", required=False),
                                                     _text_param(request, "tid", required=False),
                                                     **({} if limit is None else {"limit": limit})))

    def _memory(self, request: wrappers.Request) -> wrappers.Response:
        run, host = _text_param(request, "run"), _text_param(request, "host")
        assert run is not None and host is not None
        start, end = _range_params(request)
        resolution = _count_param(request, "resolution")
        if resolution is not None and not 1 <= resolution <= MAX_RESOLUTION:
            raise RequestError(400, f"resolution must be 1 to {MAX_RESOLUTION:,}")
        return _json(request, self.service.memory(run, host, start, end, resolution))

    def _compare(self, request: wrappers.Request) -> wrappers.Response:
        run, host = _text_param(request, "run"), _text_param(request, "host")
        base_run, base_host = _text_param(request, "base_run"), _text_param(request, "base_host")
        assert run is not None and host is not None and base_run is not None and base_host is not None
        ranges = []
        for name in ("steps", "base_steps"):
            text = _text_param(request, name, required=False)
            try:
                ranges.append(None if text is None else parse_step_range(text))
            except ValueError as exc:
                raise RequestError(400, f"{name}: {exc}") from None
        steps, base_steps = ranges
        limit = _count_param(request, "limit")
        if limit is not None and not 1 <= limit <= MAX_COMPARE_NAMES:
            raise RequestError(400, f"limit must be 1 to {MAX_COMPARE_NAMES:,}")
        return _json(request, self.service.compare(base_run, base_host, run, host, steps,
                                                   **({} if limit is None else {"limit": limit}),
                                                   base_steps=base_steps))

    def _info(self, request: wrappers.Request) -> wrappers.Response:
        store = self.service.store
        return _json(request, {"version": __version__, "profile_tab": self.profile_hook.status(),
                               "discovery": self.service.catalog.discovery(),
                               "index_store": store.info().as_dict() if store is not None else None})

    # ---- the Profile tab (XProf's routes, fronted: see profile_tab/hook.py) ----------
    def _fronted(self, xprof_app: WsgiApp,
                 answer: Callable[[wrappers.Request, WsgiApp], Optional[wrappers.Response]]) -> WsgiApp:
        """XProf's app for a route, with tb-reduce answering first: `answer` gives a
        response, or None to let XProf's app answer the request untouched."""

        def app(environ: dict, start_response: Callable) -> Any:
            request = wrappers.Request(environ)
            try:
                response = answer(request, xprof_app)
            except Exception as exc:
                response = self._failure(request, exc)
            if response is None:
                return xprof_app(environ, start_response)
            response.headers["X-Served-By"] = SERVED_BY
            return response(environ, start_response)

        return app

    def _front_runs(self, xprof_app: WsgiApp) -> WsgiApp:
        def answer(request: wrappers.Request, xprof_app: WsgiApp) -> Optional[wrappers.Response]:
            ours = self.profile_answers.chrome_runs()
            if not ours:
                return None
            status, headers, body = _call_wsgi(xprof_app, request.environ)
            listed: list = []
            if status.startswith("200"):
                try:
                    if dict(headers).get("Content-Encoding", "").lower() == "gzip":
                        body = isal_zlib.decompress(body, 31)
                    listed = json.loads(body)
                except (ValueError, isal_zlib.error):
                    listed = []
                if not isinstance(listed, list):
                    listed = []
            return _json(request, sorted(set(map(str, listed)) | set(ours), reverse=True))

        return self._fronted(xprof_app, answer)

    def _front_run_tools(self, xprof_app: WsgiApp) -> WsgiApp:
        def answer(request: wrappers.Request, _: WsgiApp) -> Optional[wrappers.Response]:
            run = request.args.get("run") or ""
            if not self.profile_answers.is_chrome_run(run):
                return None
            return _json(request, ["trace_viewer@"])

        return self._fronted(xprof_app, answer)

    def _front_hosts(self, xprof_app: WsgiApp) -> WsgiApp:
        def answer(request: wrappers.Request, _: WsgiApp) -> Optional[wrappers.Response]:
            run = request.args.get("run") or ""
            if not self.profile_answers.is_chrome_run(run):
                return None
            tag = request.args.get("tag")
            return _json(request, self.profile_answers.hosts(run) if tag in asks.TRACE_TOOLS else [])

        return self._fronted(xprof_app, answer)

    def _front_data(self, xprof_app: WsgiApp) -> WsgiApp:
        def answer(request: wrappers.Request, _: WsgiApp) -> Optional[wrappers.Response]:
            run = request.args.get("run") or ""
            chrome = self.profile_answers.is_chrome_run(run)
            try:
                ask = asks.read(request.args)
            except asks.BadAsk:
                if not chrome:
                    return None  # XProf's run: XProf says what it makes of it
                raise
            if isinstance(ask, asks.Declined):
                if chrome:
                    raise RequestError(400, f"tb-reduce answers this run's Trace Viewer (JSON, one host) "
                                            f"only: {ask.reason}")
                return None
            tf = self.profile_answers.file_for(ask.run, ask.host)
            if tf is None:
                if chrome:
                    raise NotFound(f"no trace for host {ask.host!r} in run {run!r}")
                return None
            # A file tb-reduce refuses (a bomb, over a limit, not a profile) is refused here too,
            # with its reason: handing it to XProf would have XProf hold it whole in memory,
            # which is what the limits are there to prevent.
            found = self.profile_answers.answer(tf, ask)
            headers = [(f"X-Tb-Reduce-{k.replace('_', '-').title()}", str(v)) for k, v in found.info.items()
                       if k in ("level", "resolution", "bucket_us", "cached", "kind")]
            if "gzip" in request.headers.get("Accept-Encoding", "").lower():
                return _stream(found.body, "application/json", headers, gzip=True)
            return _stream(found.body, "application/json", headers, gzip=False,
                           inflated_length=found.info.get("json_bytes"))

        return self._fronted(xprof_app, answer)

    def _view(self, request: wrappers.Request) -> wrappers.Response:
        view_params(request)  # a bad link says so at once
        return self._file(request, "view.html")

    def _index_js(self, request: wrappers.Request) -> wrappers.Response:
        return self._file(request, "index.js")

    def _static(self, request: wrappers.Request) -> wrappers.Response:
        name = request.path.rsplit("/static/", 1)[-1]
        return self._file(request, name)

    def _file(self, request: wrappers.Request, name: str) -> wrappers.Response:
        """A shipped dashboard file, by its path in `frontend/` (`tracks/slices.js`).

        The name is only ever looked up in the list of files the dashboard ships
        (`shipped_files`): it is never joined to a path, so no spelling of `..`, no
        absolute path and no link can reach anything else.
        """
        path = self.shipped.get(name) if isinstance(name, str) and len(name) <= 255 else None
        try:
            body = path.read_bytes() if path is not None else None
        except OSError:
            body = None
        if body is None:
            raise RequestError(404, "no such dashboard file")
        mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if name.endswith(".js"):
            mime = "text/javascript"
        return http_util.Respond(request, body, mime)


_SHIPPED_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*){0,3}")
_SHIPPED_SUFFIXES = (".js", ".html", ".css")


def shipped_files(root: Path) -> dict[str, Path]:
    """The dashboard's files by their path under `root`, found once: regular files with
    a dashboard suffix and a plain name, at most three folders deep, no links."""
    files: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_"))
                             and not os.path.islink(os.path.join(dirpath, d)))
        for f in filenames:
            rel = f if rel_dir == "." else f"{rel_dir}/{f}".replace(os.sep, "/")
            full = Path(dirpath) / f
            if (f.endswith(_SHIPPED_SUFFIXES) and _SHIPPED_NAME.fullmatch(rel)
                    and full.is_file() and not full.is_symlink()):
                files[rel] = full
    return files


def _call_wsgi(app: WsgiApp, environ: dict) -> tuple[str, list, bytes]:
    """Status, headers and body of a WSGI app's answer (XProf's run list, to add to it)."""
    got: dict = {}
    chunks: list[bytes] = []

    def start_response(status: str, headers: list, exc_info: Any = None) -> Callable[[bytes], None]:
        got["status"], got["headers"] = status, headers
        return chunks.append

    result = app(environ, start_response)
    try:
        for chunk in result:
            chunks.append(chunk)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    return got.get("status", "500"), list(got.get("headers", [])), b"".join(chunks)


def _busy(request: wrappers.Request, message: str, retry_after_s: int) -> wrappers.Response:
    """503 with `Retry-After`: the dashboard waits that long and asks again."""
    return _json(request, {"error": message}, code=503, headers=[("Retry-After", str(int(retry_after_s)))])


def _stream(body: Body, content_type: str, headers: list, gzip: bool,
            inflated_length: Optional[int] = None) -> wrappers.Response:
    """A response that reads its body chunk by chunk from the cache: never whole in memory.

    `inflated_length` (the JSON's size, from the stats): send the body inflated, for a
    client that does not take gzip."""
    headers = list(headers) + [
        ("X-Content-Type-Options", "nosniff"),
        ("Expires", "0"),
        ("Cache-Control", "no-cache, must-revalidate"),
    ]
    if inflated_length is not None:
        chunks: Iterator[bytes] = _inflated(body.chunks())
        headers.append(("Content-Length", str(inflated_length)))
    else:
        chunks = body.chunks()
        headers.append(("Content-Length", str(body.length)))
        if gzip:
            headers.append(("Content-Encoding", "gzip"))
    return wrappers.Response(chunks, content_type=content_type, headers=headers, direct_passthrough=True)


def _inflated(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Gzip chunks inflated as they stream, for the rare client without gzip."""
    inflater = isal_zlib.decompressobj(31)
    for chunk in chunks:
        out = inflater.decompress(chunk)
        if out:
            yield out
    tail = inflater.flush()
    if tail:
        yield tail


class _NotModified(wrappers.Response):
    """A 304 that keeps a Content-Type: werkzeug drops it from 304s, and TensorBoard's security
    validator then logs a warning for every trace the browser revalidates."""

    def get_wsgi_headers(self, environ: Any) -> Any:
        headers = super().get_wsgi_headers(environ)
        headers["Content-Type"] = "application/json"
        return headers


def _flag(flags: Any, name: str, default: float, least: float = 0.0) -> float:
    """A numeric flag; 0 is a value where `least` allows it (no disk cache), only an absent
    flag takes the default. Flags set without TensorBoard's parser (which refuses
    nonsense at start) may hold anything: those fall back to the default, with a warning."""
    value = getattr(flags, name, None)
    if value is None:
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and number >= least):
        log.warning("tb_reduce: --%s %r makes no sense; using %g", name, value, default)
        return default
    return number


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _boolean(text: str) -> bool:
    """An argparse type for TensorBoard-style switches (`--flag=false`)."""
    word = str(text).strip().lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise argparse.ArgumentTypeError(f"must be true or false, not {text!r}")


def _switch(flags: Any, name: str, default: bool) -> bool:
    """A true/false flag; flags set without TensorBoard's parser may hold anything: those
    fall back to the default, with a warning."""
    value = getattr(flags, name, None)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    try:
        return _boolean(value)
    except argparse.ArgumentTypeError:
        log.warning("tb_reduce: --%s %r makes no sense; using %s", name, value, str(default).lower())
        return default


def _workers_spec(text: str) -> str:
    """An argparse type for `--tb_reduce_workers`: refused at TensorBoard's start if it names nothing."""
    try:
        check_workers(text)
    except BadWorkers as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _workers_flag(flags: Any) -> str:
    """`--tb_reduce_workers`, or the default where flags were set without the parser and hold nonsense."""
    value = getattr(flags, "tb_reduce_workers", None)
    if value is None:
        return DEFAULT_WORKERS
    try:
        check_workers(str(value))
    except BadWorkers as exc:
        log.warning("tb_reduce: %s; using %s", exc, DEFAULT_WORKERS)
        return DEFAULT_WORKERS
    return str(value)


def _megabytes(least: float) -> Callable[[str], float]:
    """An argparse type: a finite number of MB, at least `least`; TensorBoard then refuses
    nonsense when it starts, with the flag's name, instead of a plugin failing later."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number of MB, not {text!r}") from None
        if not math.isfinite(value) or value < least:
            raise argparse.ArgumentTypeError(f"must be a finite number of MB, at least {least:g}, not {text!r}")
        return value

    return parse


def _download_name(host: str, stats: dict) -> str:
    """`<host>.level<L>.json.gz`, and for a window its span from the trace start, as the
    dashboard shows time: `<host>.level2.42.1s-46.3s.json.gz`."""
    # ASCII only: HTTP headers are Latin-1, and a host named in another script must not break the response.
    safe = "".join(c if (c.isascii() and c.isalnum()) or c in "-_." else "_" for c in host)[:80] or "trace"
    window, whole = stats.get("window_us"), stats.get("trace_us")
    span = ""
    if isinstance(window, list) and isinstance(whole, list) and window != whole and len(window) == len(whole) == 2:
        try:
            span = f".{_seconds_name(window[0] - whole[0])}-{_seconds_name(window[1] - whole[0])}"
        except (TypeError, ValueError, OverflowError):
            span = ""
    return f"{safe}.level{stats.get('level')}{span}.json.gz"


def _seconds_name(us: float) -> str:
    """A time from the trace start for a file name: seconds, to the µs, without trailing zeros."""
    s = us / 1e6
    if not math.isfinite(s):
        raise ValueError(s)
    return f"{s:.6f}".rstrip("0").rstrip(".") + "s"


class TraceReduceLoader(base_plugin.TBLoader):
    """Registers the plugin and its flags with TensorBoard."""

    def define_flags(self, parser: Any) -> None:
        group = parser.add_argument_group("tb_reduce")
        group.add_argument("--tb_reduce_cache_dir", metavar="DIR", default=None,
                           help="Where reduced traces are cached (default: $TB_REDUCE_CACHE_DIR, else "
                                "~/.cache/tb-reduce).")
        group.add_argument("--tb_reduce_cache_mb", metavar="MB", type=_megabytes(0), default=1024,
                           help="Disk cache size for reduced traces, least recently used first out (default 1024).")
        group.add_argument("--tb_reduce_index_mb", metavar="MB", type=_megabytes(0), default=0,
                           help="Disk kept for parsed traces' indexes (in DIR/index of --tb_reduce_cache_dir), "
                                "so a restarted TensorBoard reopens a trace instead of parsing it again; least "
                                "recently used out, never one in use (default 0: a quarter of that disk's free "
                                "space, at least 1024).")
        group.add_argument("--tb_reduce_max_input_mb", metavar="MB", type=_megabytes(MIN_MB), default=4096,
                           help="Refuse trace files larger than this, before reading them (default 4096).")
        group.add_argument("--tb_reduce_memory_mb", metavar="MB", type=_megabytes(MIN_MB), default=2048,
                           help="Memory tb_reduce may use in all: parses, parsed traces kept for zooming (least "
                                "recently used first out), concurrent reductions. A trace that needs more is "
                                "refused with a 413 (default 2048).")
        group.add_argument("--tb_reduce_profile_tab", metavar="MODE", choices=MODES, default="auto",
                           help="Answer the Profile tab's Trace Viewer (XProf) from tb-reduce for the runs it "
                                "serves, and list there the Chrome-trace runs XProf cannot open: auto (when "
                                "tensorboard-plugin-profile is installed), on, or off (default auto).")
        group.add_argument("--tb_reduce_follow_symlinks", metavar="BOOL", type=_boolean, default=True,
                           help="Follow symbolic links in the logdir, as TensorBoard does (loops guarded; a "
                                "file swapped after it was listed is still refused). false: list only links "
                                "that resolve inside the logdir, for logdirs untrusted jobs write into "
                                "(default true).")
        group.add_argument("--tb_reduce_workers", metavar="WHERE", type=_workers_spec, default="local",
                           help="Where the per-host work of a merged multi-host view runs: local:N (N worker "
                                "processes on this machine, each with 1/N of --tb_reduce_memory_mb; local = one "
                                "per core, the default), local:0 (in the server itself), or tcp://HOST:8786 (an "
                                "existing Dask cluster whose workers run this tb-reduce version and can read the "
                                "logdir; the scheduler must be trusted: Dask unpickles what it receives).")

    def load(self, context: base_plugin.TBContext) -> base_plugin.TBPlugin:
        plugin = TraceReducePlugin(context)
        # XProf's plugin, if TensorBoard loaded it before this one (else `get_plugin_apps` finds it).
        plugin.profile_hook.watch(getattr(context, "plugin_name_to_instance", None))
        return plugin
