"""The live sidecar: windows in, reduced runs and a drive recorder out (SPEC §7).

Each raw trace window a source hands over (today: `watch`, new trace files under a
folder, from any profiler) is, in order:
1. reduced into `LOGDIR/live/<time>-<seq>/` (`windows.WindowWriter`: atomic, pruned to
   the newest `keep`, resumable without duplicates), a run the plugin discovers;
2. kept raw in the drive recorder's ring (`ring.RawRing`, bounded in bytes, in
   `LOGDIR/.tb-reduce-ring/`: a dot folder, so discovery never lists raw windows);
3. checked by the triggers (`triggers`), steps judged against the previous 20 across
   windows; a firing the rate limiter allows schedules the preservation of the raw
   windows from `before_s` before to `after_s` after it, done once those later windows
   have arrived (or at shutdown), as run `live/<window>-anomaly-<time>/` with
   `anomaly.json` (trigger, measured value, threshold, window, step);
4. written as TensorBoard scalars (`series.LiveSeries`, one event file in
   `LOGDIR/live/`), flushed per window, so TensorBoard's own Scalars dashboard moves;
   with `live/overhead_pct` when the capture helper measured what capturing cost.

Faults never stop the loop: a window that is not a trace, a full disk, an unwritable
folder are one line each on the log, and the next window is tried.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from ..discovery import split_trace_name
from ..errors import TraceError
from .capture import OVERHEAD_SUFFIX
from .ring import RawRing, RingError
from .series import LiveSeries
from .triggers import Firing, RateLimiter, StepHistory, evaluate, parse_triggers
from .watch import Ready, Watcher
from .windows import LIVE_FOLDER, WindowRecord, WindowWriter, window_time

log = logging.getLogger(__name__)
RING_FOLDER = ".tb-reduce-ring"
HISTORY_FILE = ".history.json"  # in LOGDIR/live/: the step history, so a restart judges steps as before
ANOMALY_JSON = "anomaly.json"
POLL_S = 1.0  # how often the source is asked for new windows, at most


@dataclass
class LiveConfig:
    logdir: str
    watch: str
    every_s: float = 10.0  # how often a file still being written is reduced again (partial windows)
    level: str = "auto"
    keep: int = 50
    ring_mb: float = 2048.0
    triggers: Optional[Sequence[str]] = None  # None: the defaults (step:2x, stall:250ms)
    before_s: float = 10.0  # raw windows kept before an anomaly
    after_s: float = 10.0  # and after it
    settle_s: float = 1.0  # a file unchanged this long is complete
    max_per_hour: int = 6
    cooldown_s: float = 60.0
    max_memory_mb: Optional[float] = None  # one window's reduction promises no more (None: unbounded), as the CLI's
    keep_anomalies: Optional[int] = 20  # anomaly runs kept, newest first (None: all)


@dataclass
class _Pending:
    """An anomaly whose raw windows are preserved once the windows after it have arrived."""

    firing: Firing
    window: str
    at: float  # epoch seconds of the anomaly (its window's capture end)
    due: float  # preserve when a window captured after this has arrived, or at shutdown


@dataclass
class Sidecar:
    config: LiveConfig
    anomalies: list[str] = field(default_factory=list)  # preserved run folders
    windows: int = 0
    failures: int = 0

    def __post_init__(self) -> None:
        cfg = self.config
        self.logdir = os.path.abspath(cfg.logdir)
        self.triggers = parse_triggers(cfg.triggers)
        self.writer = WindowWriter(self.logdir, keep=cfg.keep, level=cfg.level)
        self.watcher = Watcher(cfg.watch, settle_s=cfg.settle_s, every_s=cfg.every_s, exclude=[self.logdir])
        self.ring = RawRing(os.path.join(self.logdir, RING_FOLDER), int(cfg.ring_mb * 1024 * 1024))
        self.limiter = RateLimiter(cfg.max_per_hour, cfg.cooldown_s)
        self.history = self._load_history()
        self.pending: list[_Pending] = []
        self.series: Optional[LiveSeries] = None

    # ---- the loop ---------------------------------------------------------------------
    def run(self, stop: Callable[[], bool] = lambda: False) -> None:
        """Poll the source every second (sooner windows cost nothing when none is ready) until
        `stop()`; preserve what is pending at the end."""
        try:
            while not stop():
                began = time.monotonic()
                self.step()
                time.sleep(max(0.05, min(self.config.every_s, POLL_S) - (time.monotonic() - began)))
        finally:
            self.finish()

    def step(self) -> list[WindowRecord]:
        """One poll: every window the source has ready, then the preservations now due."""
        done = []
        for ready in self.watcher.poll():
            record = self.handle(ready)
            if record is not None:
                done.append(record)
        self._preserve_due(final=False)
        return done

    def finish(self) -> None:
        self._preserve_due(final=True)
        if self.series is not None:
            try:
                self.series.close()
            except TraceError as exc:
                log.warning("tb-reduce live: %s", exc)

    # ---- one window -------------------------------------------------------------------
    def handle(self, ready: Ready) -> Optional[WindowRecord]:
        if self.writer.seen(ready.path, ready.size, ready.mtime_ns):
            return None
        host = _host_of(ready.path)
        t1 = ready.mtime
        try:
            record = self.writer.write(ready.path, t1, t1, host=host, key=ready.key)
        except TraceError as exc:  # not a trace, or the window could not be written: say so, go on
            self.failures += 1
            log.warning("tb-reduce live: %s", exc)
            return None
        span_s = _span_s(record)
        t0 = t1 - span_s
        self.windows += 1
        if ready.final:
            try:
                self.ring.add(ready.path, t0, t1, meta={"window": record.name})
            except (RingError, ValueError) as exc:
                log.warning("tb-reduce live: the drive recorder could not keep %s: %s", os.path.basename(ready.path),
                            exc)
        self._check(record, t0, t1)
        self._write_series(record, ready.path)
        record.table = None  # the window's events are no longer needed
        return record

    def _check(self, record: WindowRecord, t0: float, t1: float) -> None:
        if record.table is None:
            return
        firings = evaluate(self.triggers, record.table, self.history, steps=record.steps)
        self._save_history()
        for firing in firings:
            if not self.limiter.allow(firing.trigger, time.monotonic()):
                log.info("tb-reduce live: %s fired in %s (rate-limited)", firing.trigger, record.name)
                continue
            at = _anomaly_time(firing, record, t0, t1)
            self.pending.append(_Pending(firing, record.name, at, at + self.config.after_s))
            log.warning("tb-reduce live: %s: %s", record.name, firing.reason)

    def _write_series(self, record: WindowRecord, raw_path: str) -> None:
        try:
            if self.series is None:
                self.series = LiveSeries(os.path.join(self.logdir, LIVE_FOLDER))
            self.series.add(record)
            pct = _overhead_pct(raw_path)
            if pct is not None:  # what the capture cost, measured by the capture helper (`capture.TorchWindows`)
                numbers = record.step_numbers
                self.series.write_overhead(numbers[-1] if numbers else record.sequence, pct, record.captured_t1)
                self.series.flush()
        except TraceError as exc:
            log.warning("tb-reduce live: %s", exc)
            self.series = None  # a new writer (a new event file) next time

    # ---- the drive recorder ---------------------------------------------------------
    def _preserve_due(self, final: bool) -> None:
        newest = max((e.t1 for e in self.ring.entries()), default=float("-inf"))
        keep = []
        for p in self.pending:
            if final or newest >= p.due:
                self._preserve(p)
            else:
                keep.append(p)
        self.pending = keep

    def _preserve(self, p: _Pending) -> None:
        cfg = self.config
        name = f"{p.window}-anomaly-{window_time(p.at)}-{p.firing.kind}"
        dest = os.path.join(self.logdir, LIVE_FOLDER, name)
        report = {"trigger": p.firing.trigger, "kind": p.firing.kind, "value": p.firing.value,
                  "threshold": p.firing.threshold, "unit": p.firing.unit, "reason": p.firing.reason,
                  "step": p.firing.to_json().get("step"), "window": p.window,
                  "trace_us": [p.firing.start_us, p.firing.end_us],
                  "kept_s": [p.at - cfg.before_s, p.at + cfg.after_s]}
        try:
            files = self.ring.preserve(p.at - cfg.before_s, p.at + cfg.after_s, dest,
                                       files={ANOMALY_JSON: json.dumps(report, indent=1, allow_nan=False).encode()})
        except (RingError, OSError, ValueError) as exc:
            log.warning("tb-reduce live: could not preserve the raw windows of %s: %s", p.window, exc)
            return
        self.anomalies.append(dest)
        log.warning("tb-reduce live: kept %d raw window(s) around %s in %s", len(files), p.firing.trigger, name)

    # ---- resuming ---------------------------------------------------------------------
    def _history_path(self) -> str:
        return os.path.join(self.logdir, LIVE_FOLDER, HISTORY_FILE)

    def _load_history(self) -> StepHistory:
        try:
            with open(self._history_path(), encoding="utf-8") as f:
                return StepHistory.from_json(json.load(f))
        except (OSError, ValueError, TypeError):
            return StepHistory()

    def _save_history(self) -> None:
        path = self._history_path()
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self.history.to_json(), f)
            os.replace(tmp, path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _overhead_pct(raw_path: str) -> Optional[float]:
    """`overhead_pct` from the `<window>.overhead.json` a capture helper wrote beside the window."""
    split = split_trace_name(os.path.basename(raw_path))
    stem = os.path.join(os.path.dirname(raw_path), split[0]) if split else raw_path
    try:
        with open(stem + OVERHEAD_SUFFIX, encoding="utf-8") as f:
            pct = json.load(f).get("overhead_pct")
    except (OSError, ValueError, AttributeError):
        return None
    return float(pct) if isinstance(pct, (int, float)) and math.isfinite(pct) else None


def _host_of(path: str) -> str:
    """The window's host: the raw file's name without its trace suffix (as discovery names it)."""
    split = split_trace_name(os.path.basename(path))
    return (split[0] if split else os.path.basename(path)).lstrip(".") or "window"


def _span_s(record: WindowRecord) -> float:
    """The window's trace span in seconds (its steps', else 0)."""
    s = record.steps
    if len(s):
        return max(0.0, float(s.end_us.max() - s.start_us.min()) / 1e6)
    return 0.0


def _anomaly_time(firing: Firing, record: WindowRecord, t0: float, t1: float) -> float:
    """Epoch seconds of the anomaly: its trace time placed within the window's capture interval."""
    s = record.steps
    if len(s) and firing.start_us == firing.start_us:
        offset = (firing.start_us - float(s.start_us.min())) / 1e6
        return min(t1, max(t0, t0 + offset))
    return t1
