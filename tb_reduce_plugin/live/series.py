"""Live waveforms as TensorBoard scalars, so the standard Scalars dashboard moves too.

Each window's per-step series (`StepSeries`) is appended to an event file in the
live run's folder with TensorBoard's own writer (`EventFileWriter`), flushed once
per window, so TensorBoard and tb-reduce's `scalars` route see a window's points as
soon as it is written. Tags, all under `live/`:

- `live/step_time_ms`, `live/<category>_ms` at each step's number (TensorBoard step);
- `live/overhead_pct` at a step (`write_overhead`): what watching costs;
- `live/window_reduce_s`, `live/window_events` (events read) at the window's sequence
  number.

A step's wall time is the capture start plus the step's offset from the window's
first step: traces carry the profiler's clock, not the wall clock, so the capture
start anchors them.

Why this survives SIGKILL: TensorBoard's writer frames each event as one record
(length, checksums, payload) written by one `write` in append mode, so a kill leaves
whole records plus at most one torn last record, which readers take as a record
still being written (`RunScalars.pending_bytes`), never as damage. Each `LiveSeries`
opens a NEW file (TensorBoard names it by time, host, pid and a counter), so a
restart never rewrites what an earlier process wrote.

Why the files rotate, and why the oldest are deleted: a sidecar runs as long as the
training (weeks), and one event file per process would grow without limit. So once a
file holds `max_file_bytes` (default 64 MiB, checked at each flush) it is closed and a
new one opened: TensorBoard reads every event file of a run, in name order, as one
series, so splitting it loses nothing (and tb-reduce's `scalars` does the same).
Then, and whenever a `LiveSeries` opens its first file (a restart), only the newest
`keep_files` event files of the folder (default 16) are kept, the oldest deleted: the
series then take at most `keep_files` × `max_file_bytes` (1 GiB by default; a file
goes past its size by at most one flush's records) whatever the uptime. What is lost
is the oldest points only, and only for a reader that starts afresh: a running
TensorBoard keeps the points it read from a file deleted since. Note that a sidecar
restarted `keep_files` times in a row opens as many (small) files, and keeps the
series of those restarts only.

A file is closed for a new one only once the clock's second has moved past the one in
its name: TensorBoard names files `events.out.tfevents.<second>.<host>.<pid>.<counter>`
and reads a run's files in name order, taking no file that sorts before the one it
reads; two files of one process within one second would sort by the counter as text
(`.10` before `.9`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import stat
import time
from typing import TYPE_CHECKING, Optional, Union

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from ..errors import TraceError
from ..formats.logdir import split_trace_name
from ..waveforms.steps import StepSeries
from .windows import LiveWriteError

if TYPE_CHECKING:
    from .windows import WindowRecord

log = logging.getLogger(__name__)

PREFIX = "live/"
STEP_TIME = PREFIX + "step_time_ms"
OVERHEAD = PREFIX + "overhead_pct"
WINDOW_REDUCE_S = PREFIX + "window_reduce_s"
WINDOW_EVENTS = PREFIX + "window_events"
EVENT_FILE_PREFIX = "events.out.tfevents."  # as TensorBoard's writer names its files
DEFAULT_MAX_FILE_BYTES = 64 << 20  # an event file is closed for a new one past this
DEFAULT_KEEP_FILES = 16  # event files kept in the folder, the newest (the oldest are deleted)


def _value(tag: str, x: float) -> summary_pb2.Summary.Value:
    return summary_pb2.Summary.Value(tag=tag, simple_value=x)


class LiveSeries:
    """Appends live scalars to a new TensorBoard event file in `run_dir` (created if absent).

    `LiveWriteError` (one line naming the folder) when the folder or file cannot be
    written, at creation or at a write or flush (a full disk). After one, this writer
    stays stopped (every later call raises it again): a failed append may have left a
    torn record, and nothing must follow it in that file. Go on with a new
    `LiveSeries`, which opens a new file. (TensorBoard's writer thread also prints the
    failure's traceback to stderr when it stops; that is its behaviour, not an error.)

    `max_file_bytes`, `keep_files`: the rotation and the bound on disk (see the module
    docstring); `rotations` counts the files this writer closed for new ones.
    """

    def __init__(self, run_dir: Union[str, os.PathLike], filename_suffix: str = "",
                 max_file_bytes: int = DEFAULT_MAX_FILE_BYTES, keep_files: int = DEFAULT_KEEP_FILES) -> None:
        for what, n in (("max_file_bytes", max_file_bytes), ("keep_files", keep_files)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise TraceError(f"{what} must be a whole number, at least 1, not {n!r}")
        self.run_dir = os.path.abspath(os.fspath(run_dir))
        self.filename_suffix = filename_suffix
        self.max_file_bytes = max_file_bytes
        self.keep_files = keep_files
        self.rotations = 0
        self._open()

    def _open(self) -> None:
        """A new event file (TensorBoard names it); then the folder pruned to the newest `keep_files`."""
        try:
            os.makedirs(self.run_dir, exist_ok=True)
            self._writer = EventFileWriter(self.run_dir, max_queue_size=100, flush_secs=120,
                                           filename_suffix=self.filename_suffix)
        except Exception as exc:  # OSError, or the gfile layer's own errors (TensorFlow's when installed)
            raise self._error(exc) from None
        self.prune()

    def event_files(self) -> list[str]:
        """The folder's event files (TensorBoard's names, regular files), oldest first: by
        modification time, then name. The open file is the newest."""
        found = []
        try:
            with os.scandir(self.run_dir) as it:
                for e in it:
                    if not e.name.startswith(EVENT_FILE_PREFIX):
                        continue
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISREG(st.st_mode):
                        found.append((st.st_mtime_ns, e.name))
        except OSError as exc:
            raise self._error(exc) from None
        current = self.event_file
        paths = [os.path.join(self.run_dir, n) for _, n in sorted(found)]
        if current in paths:  # the open file last, whatever the clock says of the others
            paths.remove(current)
            paths.append(current)
        return paths

    def prune(self) -> list[str]:
        """Delete all but the newest `keep_files` event files (never the open one); the paths deleted."""
        files = self.event_files()
        gone = []
        for path in files[: max(0, len(files) - self.keep_files)]:
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
            except OSError as exc:  # left for the next prune; the series go on
                log.warning("tb-reduce live: cannot delete the old event file %s: %s", path, exc.strerror or exc)
                continue
            log.info("tb-reduce live: deleted the old event file %s (the newest %d are kept)",
                     os.path.basename(path), self.keep_files)
            gone.append(path)
        return gone

    @property
    def event_file(self) -> Optional[str]:
        """The event file this writes (TensorBoard chose its name)."""
        return getattr(self._writer, "_file_name", None)

    def _add(self, step: int, wall_time: float, values: list) -> None:
        event = event_pb2.Event(wall_time=wall_time, step=int(step), summary=summary_pb2.Summary(value=values))
        try:
            self._writer.add_event(event)
        except Exception as exc:  # the writer's thread failed (a full disk): it says so on the next call
            raise self._error(exc) from None

    def write_steps(self, steps: StepSeries, wall_time: float, keep: Optional[np.ndarray] = None) -> int:
        """One event per step: its step time, busy time per category and peak memory per device
        (where the trace records memory), stamped
        `wall_time` (the window's first step) plus the step's offset. Returns the
        number of steps written (steps with no finite integer number are skipped:
        TensorBoard steps are integers; so are those `keep`, a mask per step, leaves out)."""
        if not len(steps):
            return 0
        numbers = steps.step.tolist()
        start = steps.start_us
        first = float(np.nanmin(start)) if np.isfinite(start).any() else 0.0
        offsets = np.where(np.isfinite(start), (start - first) / 1e6, 0.0).tolist()
        columns = [(STEP_TIME, steps.step_time_ms.tolist())]
        columns += [(f"{PREFIX}{c}_ms", v.tolist()) for c, v in steps.busy_ms.items()]
        columns += [(f"{PREFIX}{name}", v.tolist()) for name, v in steps.memory_mb.items()]
        written = 0
        for i, number in enumerate(numbers):  # per step, not per event: tens a window
            if not (math.isfinite(number) and float(number).is_integer()) or (keep is not None and not keep[i]):
                continue
            self._add(int(number), wall_time + offsets[i], [_value(tag, col[i]) for tag, col in columns])
            written += 1
        return written

    def write_window(self, sequence: int, wall_time: float, reduce_s: float, events: int) -> None:
        """The window's own numbers, at its sequence number."""
        self._add(sequence, wall_time, [_value(WINDOW_REDUCE_S, reduce_s), _value(WINDOW_EVENTS, events)])

    def write_overhead(self, step: int, pct: float, wall_time: Optional[float] = None) -> None:
        """The sidecar's measured cost at `step`, in percent of step time."""
        self._add(step, time.time() if wall_time is None else wall_time, [_value(OVERHEAD, pct)])

    def add(self, record: WindowRecord) -> int:
        """A written window's steps and numbers, flushed: visible to readers on return."""
        n = self.write_steps(record.steps, record.captured_t0)
        self.write_window(record.sequence, record.captured_t0, record.reduce_s, record.events_in)
        self.flush()
        return n

    def flush(self) -> None:
        """Block until everything added is in the file; then, if the file holds
        `max_file_bytes` or more, close it and go on in a new one."""
        try:
            self._writer.flush()
        except Exception as exc:
            raise self._error(exc) from None
        self._rotate_if_full()

    def _rotate_if_full(self) -> None:
        path = self.event_file
        if path is None:
            return
        try:
            size = os.path.getsize(path)
        except OSError as exc:
            raise self._error(exc) from None
        if size < self.max_file_bytes or int(time.time()) <= _name_second(path):
            return  # within its size, or a new file would not sort after it yet (see the module docstring)
        self.close()
        self._open()
        self.rotations += 1
        log.info("tb-reduce live: the event file %s reached %d bytes; the series go on in %s",
                 os.path.basename(path), size, os.path.basename(self.event_file or ""))

    def close(self) -> None:
        try:
            self._writer.close()
        except Exception as exc:
            raise self._error(exc) from None

    def __enter__(self) -> LiveSeries:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _error(self, exc: Exception) -> TraceError:
        reason = getattr(exc, "strerror", None) or getattr(exc, "message", None) or str(exc) or type(exc).__name__
        return LiveWriteError(f"cannot write live scalars into {self.run_dir}: {reason}")


def _name_second(path: str) -> int:
    """The second in an event file's name (`events.out.tfevents.<second>.…`); 0 when it has none."""
    rest = os.path.basename(path)[len(EVENT_FILE_PREFIX):]
    head = rest.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


# ---- one TensorBoard run per source --------------------------------------------------

SERIES_FOLDER = "series"  # LOGDIR/live/series/<source>/: one run per source
SERIES_STATE = ".state.json"  # in LOGDIR/live/series/: each source's run and last step, across restarts
MAX_OPEN = 32  # event file writers kept open at once (the sources written to most recently)
_WINDOW_TOKEN = re.compile(r"^window\d+$")
_SAFE = re.compile(r"[^A-Za-z0-9_.@+-]+")


def source_of(raw_path: str, root: str) -> str:
    """The source a raw window comes from, as a run name: its folder under the watched one
    and its file name without the parts that change from window to window.

    Profilers name each window of one process by what is fixed (host, pid, rank) and what
    counts (a timestamp, a window number): Kineto's handler `<host>_<pid>.<ms>.pt.trace.json`,
    tb-reduce's helpers `window<N>.<host>_<pid>.…`. Dropping the all-digit and `window<N>`
    parts of the stem leaves what is fixed: two ranks, or a training restarted with a new
    pid, are two sources, each its own run, so no reader sees one series' steps go back.
    """
    split = split_trace_name(os.path.basename(raw_path))
    stem = split[0] if split else os.path.basename(raw_path)
    parts = [t for t in stem.split(".") if t and not t.isdigit() and not _WINDOW_TOKEN.match(t)]
    try:
        rel = os.path.relpath(os.path.dirname(os.path.abspath(raw_path)), os.path.abspath(root))
    except ValueError:
        rel = "."
    folder = [] if rel == "." or rel.startswith("..") else [p for p in rel.split(os.sep) if p]
    name = ".".join(folder + parts) or "trace"
    name = _SAFE.sub("_", name).lstrip(".") or "trace"
    return name[:120]


class SourceSeries:
    """The live scalars, one TensorBoard run per source (`LOGDIR/live/series/<source>/`).

    Why per source: TensorBoard's default (fast) loader keeps a run's points only while
    steps go forward: a record whose step is lower than one before it drops every point
    at or after it. Two sources sharing one run (two ranks, two models in one watched
    folder) interleave their step numbers, and a training restarted in place starts
    again at step 0; either way points are lost. So each source has its own run, and a
    source whose steps go back anyway (a new raw file starting below the steps already
    written: a restart that kept its name) goes on in a new run `<source>.run<N>`. A
    source's steps already written (a file handed out again as it grew) are not written
    twice. Each source's run and last step are kept in `live/series/.state.json`, so a
    restarted sidecar goes on in the same runs.
    """

    def __init__(self, live_dir: Union[str, os.PathLike], **kw: object) -> None:
        self.root = os.path.join(os.path.abspath(os.fspath(live_dir)), SERIES_FOLDER)
        self._kw = kw
        self._open: dict[str, LiveSeries] = {}
        self._state: dict[str, dict] = self._load()

    def run_of(self, source: str) -> str:
        """The run (relative to `live/`) the source's points go to now."""
        st = self._state.get(source)
        return f"{SERIES_FOLDER}/{st['run'] if st else source}"

    def add(self, record: WindowRecord, source: str, raw_path: str) -> int:
        """A written window's steps (those not written before) and numbers, flushed."""
        st = self._state.get(source)
        numbers = [n for n in record.step_numbers if n is not None]
        if st is not None and numbers and st.get("raw") != raw_path and min(numbers) <= st["last"]:
            segment = int(st.get("segment", 1)) + 1  # a new file starting below what is written: a restart
            st = {"run": f"{source}.run{segment}", "segment": segment, "last": None, "raw": raw_path}
            self._close(source)
        if st is None:
            st = {"run": source, "segment": 1, "last": None, "raw": raw_path}
        series = self._series(source, st["run"])
        last = st["last"]
        keep = np.ones(len(record.steps), dtype=bool)
        if last is not None:
            keep = np.asarray([n is not None and n > last for n in record.step_numbers], dtype=bool)
        n = series.write_steps(record.steps, record.captured_t0, keep)
        series.write_window(record.sequence, record.captured_t1, record.reduce_s, record.events_in)
        series.flush()
        st["last"] = max([last] * (last is not None) + numbers) if numbers else last
        st["raw"] = raw_path
        self._state[source] = st
        self._save()
        return n

    def write_overhead(self, source: str, step: int, pct: float, wall_time: Optional[float] = None) -> None:
        st = self._state.get(source) or {"run": source}
        series = self._series(source, st["run"])
        series.write_overhead(step, pct, wall_time)
        series.flush()

    def _series(self, source: str, run: str) -> LiveSeries:
        """The source's open writer (the most recently used `MAX_OPEN` stay open: each is a
        file and a thread, and a profiler that names every window differently makes a source
        of each; one reopened later writes a new file in its run, which loses nothing)."""
        series = self._open.pop(source, None)
        if series is not None and os.path.basename(series.run_dir) != run:
            series.close()
            series = None
        if series is None:
            series = LiveSeries(os.path.join(self.root, run), **self._kw)  # type: ignore[arg-type]
        self._open[source] = series  # last: the most recently used
        while len(self._open) > MAX_OPEN:
            self._close(next(iter(self._open)))
        return series

    def _close(self, source: str) -> None:
        series = self._open.pop(source, None)
        if series is not None:
            series.close()

    def close(self) -> None:
        errors = []
        for source in list(self._open):
            try:
                self._close(source)
            except TraceError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def _load(self) -> dict[str, dict]:
        try:
            with open(os.path.join(self.root, SERIES_STATE), encoding="utf-8") as f:
                doc = json.load(f)
            return {str(k): v for k, v in doc.items() if isinstance(v, dict) and isinstance(v.get("run"), str)
                    and _SAFE.sub("_", v["run"]) == v["run"] and not v["run"].startswith(".")}
        except (OSError, ValueError, AttributeError):
            return {}

    def _save(self) -> None:
        path = os.path.join(self.root, SERIES_STATE)
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self._state, f)
            os.replace(tmp, path)
        except OSError:  # the event files still hold every point; only a restart's choice of run is at stake
            try:
                os.unlink(tmp)
            except OSError:
                pass
