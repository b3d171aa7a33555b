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

A window is done (and not done again after a restart) only once all four are: a kill
between them leaves it to be done again by the next sidecar (`WindowWriter.done`).

Faults never stop the loop: a window that is not a trace, a full disk, an unwritable
folder are one line each on the log, naming the file and the reason (rate-limited:
`LOG_LINES` a minute, then one line counting the rest), and the next window is tried;
a window the filesystem failed (a full disk) is tried again `RETRY_S` later. Every
file a window is read from is the one the watcher listed (device and inode), opened
without blocking, so a FIFO or a symlink swapped in hangs nothing and leaks nothing
into the logdir. Memory: each window's reduction is bounded by `max_memory_mb` (three
quarters of the machine's by default, as the CLI's), a window over it is refused and
remembered as refused across restarts, and a file that killed the sidecar twice while
being reduced is not tried a third time.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from ..budget import MemoryBudget, machine_memory_bytes
from ..errors import TraceError, display_name
from ..formats.logdir import split_trace_name
from ..formats.sources import open_regular
from ..reduce.pipeline import derive_index, index_file
from .anomalies import prune_anomalies
from .capture import OVERHEAD_SUFFIX
from .ring import RawRing, RingError
from .series import SourceSeries, source_of
from .triggers import BASELINE, Baseline, Firing, RateLimiter, StepHistory, evaluate, parse_triggers, summarize_suppressed
from .watch import Ready, Watcher
from .windows import CRASH_LIMIT, LIVE_FOLDER, LiveWriteError, RawKey, WindowRecord, WindowWriter, window_time

log = logging.getLogger(__name__)
RING_FOLDER = ".tb-reduce-ring"
HISTORY_FILE = ".history.json"  # in LOGDIR/live/: the step history, so a restart judges steps as before
ANOMALY_JSON = "anomaly.json"
POLL_S = 1.0  # how often the source is asked for new windows, at most
RETRY_S = 10.0  # a window the filesystem failed (a full disk) is tried again this much later
GRACE_S = 5.0  # an anomaly is preserved at most this long after its `after_s` even if no later window came
LOG_LINES = 20  # lines about skipped files or failed windows a minute, at most; then one counts the rest
PARTIAL_MAX_BYTES = 64 * 1024 * 1024  # a growing file is reduced partially only up to this (and a quarter of the budget)


def default_memory_bytes() -> int:
    """Three quarters of the machine's (or container's) memory, as the CLI's default."""
    total = machine_memory_bytes()
    return int(max(256.0 * 1024 * 1024, 0.75 * total)) if total else 8192 * 1024 * 1024


class LineLimiter:
    """At most `lines` log lines per `per_s`; past them one line, when the minute is over,
    says how many were left out: a folder of 20,000 bad files must not flood the log."""

    def __init__(self, lines: int = LOG_LINES, per_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.lines, self.per_s, self._clock = lines, per_s, clock
        self._since = clock()
        self._said = 0
        self.dropped = 0

    def warn(self, message: str, *args: object) -> None:
        now = self._clock()
        if now - self._since >= self.per_s:
            if self.dropped:
                log.warning("tb-reduce live: %d more such line(s) in the last %.0f s were left out", self.dropped,
                            now - self._since)
            self._since, self._said, self.dropped = now, 0, 0
        if self._said < self.lines:
            self._said += 1
            log.warning(message, *args)
        else:
            self.dropped += 1


@dataclass
class LiveConfig:
    logdir: str
    watch: str
    every_s: float = 10.0  # how often a file still being written is reduced again (partial windows)
    level: str = "auto"
    keep: int = 50
    ring_mb: float = 2048.0
    triggers: Optional[Sequence[str]] = None  # None: the defaults (step:2x, stall:250ms)
    baseline: Optional[str] = None  # a trace (or a run's folder, or a run of the logdir by name) `baseline:` triggers use
    before_s: float = 10.0  # raw windows kept before an anomaly
    after_s: float = 10.0  # and after it
    settle_s: float = 1.0  # a file unchanged this long is complete
    max_per_hour: int = 6
    cooldown_s: float = 60.0
    max_memory_mb: Optional[float] = None  # one window's reduction promises no more (None: unbounded), as the CLI's
    keep_anomalies: Optional[int] = 20  # anomaly runs kept, newest first (None: all)
    # Move each final raw window into the ring instead of copying it (and delete the capture
    # helper's `.overhead.json` once read): for a folder only tb-reduce's capture helpers
    # write (`--source torch|jax`), which would otherwise grow by a file every window and be
    # walked whole every second; never for a profiler's own folder (`--source watch`).
    move_raw: bool = False


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
        if cfg.max_memory_mb is not None and not cfg.max_memory_mb > 0:
            raise TraceError(f"max_memory_mb must be above 0, not {cfg.max_memory_mb!r}")
        self.memory_bytes = int(cfg.max_memory_mb * 1024 * 1024) if cfg.max_memory_mb else default_memory_bytes()
        self.baseline = self._baseline()
        self.writer = WindowWriter(self.logdir, keep=cfg.keep, level=cfg.level, max_memory_bytes=self.memory_bytes)
        for key in self.writer.refused_on_resume:
            log.warning("tb-reduce live: %s: not tried again: reducing it ended the sidecar %d times",
                        display_name(key.path), CRASH_LIMIT)
        self.watcher = Watcher(cfg.watch, settle_s=cfg.settle_s, every_s=cfg.every_s, exclude=[self.logdir],
                               partial_max_bytes=min(PARTIAL_MAX_BYTES, self.memory_bytes // 4))
        try:
            cap = int(cfg.ring_mb * 1024 * 1024)
            self.ring = RawRing(os.path.join(self.logdir, RING_FOLDER), cap)
        except (ValueError, OverflowError) as exc:
            raise TraceError(f"ring_mb: {exc}") from None
        self.limiter = RateLimiter(cfg.max_per_hour, cfg.cooldown_s)
        self.history = self._load_history()
        self.pending: list[_Pending] = []
        self.series: Optional[SourceSeries] = None
        self.lines = LineLimiter()
        self._retry: list[tuple[float, Ready]] = []
        self._partial: dict[RawKey, tuple[str, float, float]] = {}  # reduced before it settled: (window, t0, t1)
        self._latest: dict[str, str] = {}  # raw path -> the window its newest version made
        self.anomalies_pruned = 0
        self._prune_anomalies()

    # ---- the loop ---------------------------------------------------------------------
    def run(self, stop: Callable[[], bool] = lambda: False) -> None:
        """Poll the source every second (sooner windows cost nothing when none is ready) until
        `stop()`, asked between windows too (a backlog of thousands of files must not delay
        a SIGTERM); preserve what is pending at the end."""
        try:
            while not stop():
                began = time.monotonic()
                self.step(stop)
                pause = max(0.05, min(self.config.every_s, POLL_S) - (time.monotonic() - began))
                while pause > 0 and not stop():
                    time.sleep(min(pause, 0.1))
                    pause -= 0.1
        finally:
            self.finish()

    def step(self, stop: Callable[[], bool] = lambda: False) -> list[WindowRecord]:
        """One poll: every window the source has ready (until `stop()`), then the
        preservations now due. Windows left by a stop are not done: a restart does them."""
        done = []
        now = time.monotonic()
        for _, ready in [r for r in self._retry if r[0] <= now]:
            self.watcher.retry(ready)
        self._retry = [r for r in self._retry if r[0] > now]
        for ready in self.watcher.poll():
            if stop():
                break
            record = self.handle(ready)
            if record is not None:
                done.append(record)
        for path, reason in self.watcher.skips:
            self.lines.warn("tb-reduce live: skipped %s: %s", self._name(path), reason)
        self.watcher.skips.clear()
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
    def _name(self, path: str) -> str:
        """A file as the log names it: relative to the watched folder, control characters shown."""
        try:
            rel = os.path.relpath(path, self.watcher.path)
        except ValueError:
            rel = path
        return display_name(path if rel == "." or rel.startswith("..") else rel)

    def handle(self, ready: Ready) -> Optional[WindowRecord]:
        if self.writer.seen(ready.path, ready.size, ready.mtime_ns):
            if ready.final:  # this very version was reduced while it might still grow: it is complete now
                self._finalize(ready)
            return None
        host = _host_of(ready.path)
        source = source_of(ready.path, self.watcher.path)
        t1 = ready.mtime
        name = self._name(ready.path)
        self.writer.protected = {p.window for p in self.pending}  # never pruned before it is preserved
        try:  # t0 None: the file's mtime is the capture's end, its start is that minus the trace's span
            record = self.writer.write(ready.path, None, t1, host=host, key=ready.key, expect=ready.identity(),
                                       commit=False, series=self._series().run_of(source) if self._series() else None)
        except LiveWriteError as exc:  # the filesystem's fault (a full disk): this file is tried again later
            self.failures += 1
            self._retry.append((time.monotonic() + RETRY_S, ready))
            self.lines.warn("tb-reduce live: %s: not written, tried again in %.0f s: %s", name, RETRY_S, exc)
            return None
        except TraceError as exc:  # not a trace, over the budget, swapped: said once, never tried again
            self.failures += 1
            if ready.final:
                self.lines.warn("tb-reduce live: skipped %s: %s", name, exc)
            else:
                log.debug("tb-reduce live: %s not readable yet: %s", name, exc)
            return None
        t0 = record.captured_t0
        self.windows += 1
        self._supersede(ready, record)
        if ready.final:
            self._keep_raw(ready, record.name, t0, t1)
        else:
            self._partial[ready.key] = (record.name, t0, t1)
        self._check(record, t0, t1, ready.path)
        self._write_series(record, ready.path, source)
        record.table = None  # the window's events are no longer needed
        self.writer.done(record)
        self._save_history()  # after done: a window a kill interrupted is judged again, not lost as judged
        return record

    def _supersede(self, ready: Ready, record: WindowRecord) -> None:
        """A newer version of a raw file replaces the window its earlier, partial version made
        (one window per raw file: the run list would otherwise hold each version of a file
        still being written) — unless that window holds an anomaly, which stays."""
        earlier = self._latest.get(ready.path)
        self._latest[ready.path] = record.name
        self._partial = {k: v for k, v in self._partial.items() if k.path != ready.path}
        if earlier is not None and earlier not in self.writer.protected and not self._anomaly_of(earlier):
            self.writer.remove(earlier)

    def _anomaly_of(self, window: str) -> bool:
        return any(os.path.basename(a).startswith(window + "-anomaly-") for a in self.anomalies)

    def _finalize(self, ready: Ready) -> None:
        """A version first reduced partial (a plain JSON file handed out before it settled)
        has settled unchanged: its window holds all of it, so it is not reduced again, but
        it is complete now, so it is kept raw in the ring as every final window is."""
        known = self._partial.pop(ready.key, None) or self.writer.written(ready.key)
        if known is None:  # its window is gone (pruned) and this process never saw it: nothing to refer to
            return
        window, t0, t1 = known
        self._keep_raw(ready, window, t0, t1)
        if self.config.move_raw and not os.path.exists(ready.path):
            _overhead_pct(ready.path, remove=True)  # read with its partial window already: only removed now

    def _keep_raw(self, ready: Ready, window: str, t0: float, t1: float) -> None:
        """The raw window into the ring, once per raw version (a window done again after a
        kill finds its raw file there already)."""
        raw = [ready.path, ready.size, ready.mtime_ns]
        if any(e.meta.get("raw") == raw for e in self.ring.entries()):
            return
        try:
            self.ring.add(ready.path, t0, t1, meta={"window": window, "raw": raw}, expect=ready.identity(),
                          move=self.config.move_raw)
        except (RingError, ValueError) as exc:
            self.lines.warn("tb-reduce live: the drive recorder could not keep %s: %s", self._name(ready.path), exc)

    def _check(self, record: WindowRecord, t0: float, t1: float, raw_path: str) -> None:
        """The triggers on one window (each step of a raw file judged once, however many
        versions of it are handed out); what the rate limiter holds back is one line per
        window, not one per firing."""
        if record.table is None:
            return
        firings = evaluate(self.triggers, record.table, self.history, steps=record.steps, source=raw_path,
                           baseline=self.baseline)
        held = []
        for firing in firings:
            if not self.limiter.allow(firing, time.monotonic()):  # a much larger one breaks through a cool-down
                held.append(firing)
                continue
            at = _anomaly_time(firing, record, t0, t1)
            self.pending.append(_Pending(firing, record.name, at, at + self.config.after_s))
            log.warning("tb-reduce live: %s: %s", record.name, firing.reason)
        line = summarize_suppressed(held)
        if line is not None:
            log.info("tb-reduce live: %s: %s", record.name, line)

    def _baseline(self) -> Optional[Baseline]:
        """The `--baseline` run's medians, read once at start; `baseline:` triggers need one."""
        wanted = [t.spec for t in self.triggers if t.kind == BASELINE]
        path = self.config.baseline
        if path is None:
            if wanted:
                raise TraceError(f"trigger {wanted[0]!r} compares with a baseline run: give --baseline "
                                 f"(a trace of that run)")
            return None
        if not os.path.exists(path) and os.path.exists(os.path.join(self.logdir, path)):
            path = os.path.join(self.logdir, path)  # a run of the logdir, by its name
        if os.path.isdir(path):
            found = sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if split_trace_name(f))
            if len(found) != 1:
                raise TraceError(f"--baseline {display_name(path)}: give one trace file ({len(found)} traces in "
                                 f"this folder)")
            path = found[0]
        with MemoryBudget(self.memory_bytes, flag="--max-memory-mb").account("reading the baseline") as account:
            index = index_file(path, account=account)
            steps = derive_index(index)
        if not len(steps):
            raise TraceError(f"--baseline {display_name(path)}: {steps.reason}")
        base = Baseline.of(display_name(os.path.basename(path)), steps)
        log.info("tb-reduce live: baseline %s: %d steps, median step time %.1f ms", base.name, base.steps,
                 base.medians.get("step_time_ms", math.nan))
        return base

    def _series(self) -> Optional[SourceSeries]:
        """The live scalars' writer (one run per source), opened on first use; None when
        the folder cannot be written now (said once per window that tries)."""
        if self.series is None:
            try:
                self.series = SourceSeries(os.path.join(self.logdir, LIVE_FOLDER))
            except TraceError as exc:
                log.warning("tb-reduce live: %s", exc)
        return self.series

    def _write_series(self, record: WindowRecord, raw_path: str, source: str) -> None:
        series = self._series()
        if series is None:
            return
        try:
            series.add(record, source, raw_path)
            pct = _overhead_pct(raw_path, remove=self.config.move_raw and not os.path.exists(raw_path))
            if pct is not None:  # what the capture cost, measured by the capture helper (`capture.TorchWindows`)
                numbers = [n for n in record.step_numbers if n is not None]
                series.write_overhead(source, numbers[-1] if numbers else record.sequence, pct, record.captured_t1)
        except TraceError as exc:
            log.warning("tb-reduce live: %s", exc)
            try:
                series.close()
            except TraceError:
                pass
            self.series = None  # new writers (new event files) next time

    # ---- the drive recorder ---------------------------------------------------------
    def _preserve_due(self, final: bool) -> None:
        """Preserve each pending anomaly once the ring holds a window captured after its
        `after_s`, or once `after_s` + `GRACE_S` have passed on the wall clock without one (a
        training that hung at the anomaly writes no later window: its run must appear
        anyway, while it hangs), or at shutdown."""
        newest = max((e.t1 for e in self.ring.entries()), default=float("-inf"))
        now = time.time()
        keep = []
        for p in self.pending:
            if final or newest >= p.due or now >= p.due + GRACE_S:
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
        self._prune_anomalies()

    def _prune_anomalies(self) -> None:
        """Only the newest `keep_anomalies` anomaly runs stay (each pruned one is a log line)."""
        keep = self.config.keep_anomalies
        if keep is None:
            return
        live = os.path.join(self.logdir, LIVE_FOLDER)
        gone = {os.path.join(live, n) for n in prune_anomalies(live, keep)}
        self.anomalies_pruned += len(gone)
        self.anomalies = [a for a in self.anomalies if a not in gone]

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


def _overhead_pct(raw_path: str, remove: bool = False) -> Optional[float]:
    """`overhead_pct` from the `<window>.overhead.json` a capture helper wrote beside the window
    (deleted once read when `remove`: its window has been moved into the ring)."""
    split = split_trace_name(os.path.basename(raw_path))
    stem = os.path.join(os.path.dirname(raw_path), split[0]) if split else raw_path
    try:  # non-blocking and regular only: a FIFO named like it hangs nothing
        f, _ = open_regular(stem + OVERHEAD_SUFFIX, max_file_bytes=1 << 16)
        with f:
            pct = json.loads(f.read(1 << 16)).get("overhead_pct")
    except (OSError, TraceError, ValueError, AttributeError):
        return None
    finally:
        if remove:
            try:
                os.unlink(stem + OVERHEAD_SUFFIX)
            except OSError:
                pass
    return float(pct) if isinstance(pct, (int, float)) and math.isfinite(pct) else None


def _host_of(path: str) -> str:
    """The window's host: its source's name (the raw file's name without its trace suffix
    and without the parts that number windows, `series.source_of`)."""
    return source_of(path, os.path.dirname(path)) or "window"


def _anomaly_time(firing: Firing, record: WindowRecord, t0: float, t1: float) -> float:
    """Epoch seconds of the anomaly: its trace time placed within the window's capture interval."""
    s = record.steps
    if len(s) and firing.start_us == firing.start_us:
        offset = (firing.start_us - float(s.start_us.min())) / 1e6
        return min(t1, max(t0, t0 + offset))
    return t1
