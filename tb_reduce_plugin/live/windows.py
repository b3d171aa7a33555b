"""Reduced live windows in the logdir: each a run `live/<time>`, never seen half-written.

The sidecar reduces each captured window into `LOGDIR/live/<time>/<host>.trace.json.gz`
beside a `window.json` that says what it holds. `<time>` is the capture start in UTC
to the millisecond plus a sequence number (`20261201T041530.123Z-000042`), so names
sort by time and never clash. The plugin's logdir walk makes each folder a run.

Why a folder is renamed into place, not written in place: the walk lists whatever
is in the logdir at any moment, so a window is reduced into a hidden temp folder
beside it (`.window-<pid>-<seq>`, skipped by discovery as every dot name is) and
renamed whole when its trace and `window.json` are complete. A rename within a
folder is atomic, so a SIGKILL at any moment leaves either the complete run or no
run, plus a temp folder the next writer removes. Pruning renames a folder to a dot
name first, then deletes it, for the same reason. No `fsync`: a killed process loses
nothing the kernel holds; only a power loss could, and then a window is lost, never
seen torn by a process that survives.

Restarting resumes: sequence numbers continue after the highest one found (in the
folders and in the ledger), and the raw files already written are remembered by
key (path, size, mtime) in each `window.json` and in an append-only ledger
`live/.seen.jsonl` (which outlives pruned windows), so `seen()` tells a restarted
sidecar which raw windows it already wrote. One writer per logdir.

A window is done only when every output of it is: a caller that makes more of a
window than its folder (the sidecar: raw ring, triggers, scalars) writes with
`commit=False` and calls `done(record)` at the end. The ledger says so in a line's
`state`: `started` before the reduction begins, `done` at the end (a line without a
state, as older writers wrote them, is done), `refused` for a raw file that cannot
be a window (not a trace, over the memory budget): it is not tried again after a
restart either; `failed` for a window the filesystem failed (a full disk): tried
again. A key started but never done is a window a kill interrupted: a restart does
it again (its folder, if it appeared, is replaced by the new one), but a key started
`CRASH_LIMIT` times without an end is taken as one that kills its reader (a crash
loop: an OOM kill, a fault) and refused. The ledger is compacted
while it is written, so it stays bounded however long the sidecar runs.

Filesystem failures (a full disk, a logdir that cannot be written) raise one
`LiveWriteError` naming the folder, after removing what was partly written.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, NamedTuple, Optional, Union

import numpy as np

from ..budget import MemoryBudget, Unlimited
from ..errors import TraceError
from ..formats.sources import FileIdentity
from ..index.store import parse_spilling_to_temp
from ..model.table import PH_M
from ..reduce.pipeline import TraceIndex, derive_index, parse_level, reduce_index
from ..waveforms.steps import StepSeries

Level = Union[int, str]

LIVE_FOLDER = "live"
WINDOW_JSON = "window.json"
LEDGER = ".seen.jsonl"
TRACE_SUFFIX = ".trace.json.gz"
WINDOW_VERSION = 1
SEQ_DIGITS = 6  # as the patterns below say
# A window's folder name, exactly: only these are pruned (anomaly runs and anything else are left alone).
WINDOW_NAME = re.compile(r"^\d{8}T\d{6}\.\d{3}Z-(\d{6,})$")
# Any folder named after a window (anomaly runs `<window>-anomaly-<time>` too): sequence numbers continue after them.
SEQ_PREFIX = re.compile(r"^\d{8}T\d{6}\.\d{3}Z-(\d{6,})(?:$|-)")
TEMP_PREFIXES = (".window-", ".pruned-")
ANOMALY_INFIX = "-anomaly-"  # an anomaly run is `<window>-anomaly-<time>-<kind>`
# The ledger keeps the newest keys; compacted when it holds more than twice this many.
LEDGER_KEEP = 50_000
CRASH_LIMIT = 2  # starts without an end after which a raw file is refused (it killed the process each time)
DONE, STARTED, REFUSED, FAILED = "done", "started", "refused", "failed"


class LiveWriteError(TraceError):
    """The live folder cannot be written (missing permission, a file in the way, a full
    disk): one line naming the folder; nothing partly written is left visible."""


class RawKey(NamedTuple):
    """Which raw file, and which version of it, a window was reduced from."""

    path: str  # absolute
    size: int
    mtime_ns: int


@dataclass
class WindowRecord:
    """One written window: where it is, what it holds, and its per-step series (for
    `LiveSeries`, without parsing the trace again)."""

    sequence: int
    name: str  # the folder name `<time>-<seq>`
    run: str  # `live/<name>`, as discovery names it
    folder: str
    trace_path: str
    host: str
    captured_t0: float  # epoch seconds
    captured_t1: float
    raw: RawKey
    events_in: int
    events_out: int
    truncated: bool  # the raw trace was cut off (a writer still writing, or one that died)
    level: Level  # the level the reduction used (auto's choice)
    reduce_s: float
    steps: StepSeries
    # The window's index (its parsed events, and the temporary folder they may be mapped
    # from), for the drive recorder's triggers without a second parse; the caller drops
    # the record (and them, and the folder) when done with the window.
    table: Any = field(default=None, repr=False, compare=False)

    @property
    def step_numbers(self) -> list[int]:
        return _step_numbers(self.steps)


def _step_numbers(steps: StepSeries) -> list:
    return [int(s) if math.isfinite(s) and float(s).is_integer() else None for s in steps.step.tolist()]


def window_time(t: float) -> str:
    """A capture time as the sortable UTC stamp of window names (millisecond precision)."""
    stamp = datetime.fromtimestamp(t, tz=timezone.utc)
    return stamp.strftime("%Y%m%dT%H%M%S.") + f"{stamp.microsecond // 1000:03d}Z"


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # someone else's process, or a system that cannot tell: leave its folder
    return True


def _temp_owner(name: str) -> Optional[int]:
    """The pid in a temp folder's name (`.window-<pid>-<seq>`), or None if not ours."""
    for prefix in TEMP_PREFIXES:
        if name.startswith(prefix):
            pid = name[len(prefix):].split("-", 1)[0]
            return int(pid) if pid.isdigit() else None
    return None


def _remove(path: str) -> None:
    """Delete a temp folder (or file), as far as possible: what is left, the next writer removes."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
        return
    try:
        os.unlink(path)
    except OSError:
        pass


class WindowWriter:
    """Writes reduced windows into `logdir/live/`, keeping the newest `keep` (None: all).

    `level`: the reduction level (0-4 or "auto"); `max_memory_bytes`: the memory one
    window's reduction promises not to exceed (`OverBudget` past it), as `reduce_file`.
    Creating one checks the folder can be written (`LiveWriteError` at once, not at the
    first window), removes temp folders left by a killed writer and loads the keys of
    the windows already written.
    """

    def __init__(self, logdir: Union[str, os.PathLike], keep: Optional[int] = 50, level: Level = "auto",
                 max_memory_bytes: Optional[int] = None) -> None:
        if keep is not None and (not isinstance(keep, int) or keep < 1):
            raise TraceError(f"keep must be a whole number of windows, at least 1, not {keep!r}")
        self.logdir = os.path.abspath(os.fspath(logdir))
        self.live_dir = os.path.join(self.logdir, LIVE_FOLDER)
        self.keep = keep
        self.level = parse_level(level)
        self.max_memory_bytes = max_memory_bytes
        self._seen: set[RawKey] = set()
        # Keys a kill interrupted (started, never done), with their folder if it appeared.
        self.incomplete: dict[RawKey, Optional[str]] = {}
        self.refused_on_resume: list[RawKey] = []  # keys refused now: started CRASH_LIMIT times, never ended
        # Windows never pruned while named here (the sidecar's: an anomaly still to be preserved).
        self.protected: set[str] = set()
        self._seq = 0
        self._ledger_lines = 0
        try:
            os.makedirs(self.live_dir, exist_ok=True)
            probe = os.path.join(self.live_dir, f".window-{os.getpid()}-probe")
            os.mkdir(probe)
            os.rmdir(probe)
        except OSError as exc:
            raise self._error(exc) from None
        self._resume()

    # -- resuming -----------------------------------------------------------------------

    def _resume(self) -> None:
        """Remove dead writers' temp folders; continue numbering; remember written raw files
        (and those a kill interrupted, to be done again)."""
        folders: dict[RawKey, str] = {}
        for name in self._names():
            owner = _temp_owner(name)
            if owner is not None and not _pid_alive(owner):
                _remove(os.path.join(self.live_dir, name))
                continue
            m = SEQ_PREFIX.match(name)
            if m is None:
                continue
            self._seq = max(self._seq, int(m.group(1)))
            if WINDOW_NAME.match(name):
                key = self._key_in(os.path.join(self.live_dir, name, WINDOW_JSON))
                if key is not None:
                    folders[key] = os.path.join(self.live_dir, name)
        states = self._load_ledger()
        for key in folders:
            if key not in states:  # a folder the ledger does not know (an older writer, a lost ledger): done
                self._seen.add(key)
        for key, (state, starts) in states.items():
            if state in (DONE, REFUSED):
                self._seen.add(key)
            elif starts >= CRASH_LIMIT:
                self._seen.add(key)
                self.refused_on_resume.append(key)
                self._append_ledger(0, key, REFUSED)
            else:
                self.incomplete[key] = folders.get(key)

    def _names(self) -> list[str]:
        try:
            return sorted(os.listdir(self.live_dir))
        except OSError as exc:
            raise self._error(exc) from None

    @staticmethod
    def _key_in(path: str) -> Optional[RawKey]:
        try:
            with open(path, "rb") as f:
                raw = json.loads(f.read(1 << 20))["raw"]
            return RawKey(str(raw["path"]), int(raw["size"]), int(raw["mtime_ns"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _ledger_path(self) -> str:
        return os.path.join(self.live_dir, LEDGER)

    def _read_ledger(self) -> tuple[dict[RawKey, tuple[str, int, int]], int]:
        """key -> (last state, starts since its last end, highest seq), in the order last
        written, and the number of lines read."""
        try:
            with open(self._ledger_path(), "rb") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return {}, 0
        except OSError as exc:
            raise self._error(exc) from None
        states: dict[RawKey, tuple[str, int, int]] = {}
        for line in lines:
            try:  # a line cut by a kill, or damage: skipped, the rest is good
                d = json.loads(line)
                key = RawKey(str(d["path"]), int(d["size"]), int(d["mtime_ns"]))
                seq, state = int(d["seq"]), str(d.get("state", DONE))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            _, starts, top = states.pop(key, (DONE, 0, 0))
            starts = starts + 1 if state == STARTED else 0
            states[key] = (state, starts, max(top, seq))  # re-inserted: the dict keeps the order last written
        return states, len(lines)

    def _load_ledger(self) -> dict[RawKey, tuple[str, int]]:
        states, lines = self._read_ledger()
        self._ledger_lines = lines
        if states:
            self._seq = max(self._seq, max(top for _, _, top in states.values()))
        kept = dict(list(states.items())[-LEDGER_KEEP:])
        if lines > 2 * LEDGER_KEEP:
            self._compact_ledger(kept)
        return {key: (state, starts) for key, (state, starts, _) in kept.items()}

    def _compact_ledger(self, states: dict[RawKey, tuple[str, int, int]]) -> None:
        """Rewrite the ledger with one line per key (its last state; a start count kept as
        that many `started` lines) for the newest `LEDGER_KEEP` keys."""
        tmp = os.path.join(self.live_dir, f".window-{os.getpid()}-ledger")
        lines = []
        for key, (state, starts, seq) in list(states.items())[-LEDGER_KEEP:]:
            lines.extend([_ledger_line(seq, key, STARTED)] * starts if state == STARTED else
                         [_ledger_line(seq, key, state)])
        try:
            with open(tmp, "wb") as f:
                f.write(b"".join(lines))
            os.replace(tmp, self._ledger_path())
            self._ledger_lines = len(lines)
        except OSError:  # the old ledger still holds every key: compaction can wait
            try:
                os.unlink(tmp)
            except OSError:
                pass

    # -- writing ------------------------------------------------------------------------

    def seen(self, raw_path: Union[str, os.PathLike], size: int, mtime_ns: int) -> bool:
        """Whether this version of this raw file was written as a window already (by this
        writer or one before it on the same logdir)."""
        return RawKey(os.path.abspath(os.fspath(raw_path)), int(size), int(mtime_ns)) in self._seen

    def write(self, raw_path: Union[str, os.PathLike], captured_t0: Optional[float], captured_t1: float,
              host: str = "window", key: Optional[RawKey] = None, *, expect: Optional[FileIdentity] = None,
              commit: bool = True, series: Optional[str] = None) -> WindowRecord:
        """Reduce `raw_path` into a new window run and prune old windows.

        `captured_t0`/`captured_t1`: the capture interval, epoch seconds (the folder is
        named by `captured_t0`). `captured_t0=None`: `captured_t1` minus the trace's own
        span (`trace_span_s`), known once it is read — for a file whose modification
        time is all that says when it was captured: it was written at the capture's end,
        so naming or stamping its steps from it would place them in the future.
        `key`: the version of the raw file this window stands for, as `seen()` will be
        asked about it (a watcher's listing); by default the version read.
        Raises `TraceError` for a raw file that is not a trace, and
        `LiveWriteError` when the window cannot be written; either way no folder appears.

        `expect`: the identity the caller's listing saw: a raw file swapped since (for a
        symlink out of the watched folder, a FIFO) is refused (`FileChanged`), never read.
        `commit`: whether the window is done once its folder is; a caller with more
        outputs to make passes False and calls `done(record)` when they are made.
        `series`: the run (relative to `live/`) holding this window's scalars, said in its
        `window.json` so readers find them (`discovery.Catalog.event_files`).
        """
        raw_path = os.path.abspath(os.fspath(raw_path))
        if not ((captured_t0 is None or math.isfinite(captured_t0)) and math.isfinite(captured_t1)):
            raise TraceError(f"capture times must be finite, not {captured_t0!r}..{captured_t1!r}")
        if not host or host.startswith(".") or os.sep in host or "/" in host or "\0" in host:
            raise TraceError(f"host must be a plain file name, not {host!r}")
        self._seq += 1
        seq = self._seq
        if key is not None:  # the attempt is on record before it can kill the process
            self._append_ledger(seq, key, STARTED)
        tmp = os.path.join(self.live_dir, f".window-{os.getpid()}-{seq}")
        began = time.perf_counter()
        try:
            os.mkdir(tmp)
            trace_path = os.path.join(tmp, host + TRACE_SUFFIX)
            stats, steps, identity, index = self._reduce(raw_path, trace_path, expect)
            reduce_s = time.perf_counter() - began
            if captured_t0 is None:
                captured_t0 = captured_t1 - trace_span_s(steps, index.table)
            name = f"{window_time(captured_t0)}-{seq:0{SEQ_DIGITS}d}"
            final = os.path.join(self.live_dir, name)
            if key is None:
                key = RawKey(raw_path, identity.size, identity.mtime_ns)
            record = WindowRecord(
                sequence=seq, name=name, run=f"{LIVE_FOLDER}/{name}", folder=final,
                trace_path=os.path.join(final, host + TRACE_SUFFIX), host=host, captured_t0=float(captured_t0),
                captured_t1=float(captured_t1), raw=key, events_in=int(stats["input"]["events"]),
                events_out=int(stats["output"]["events"]), truncated=bool(stats["input"].get("truncated")),
                level=stats["level"], reduce_s=reduce_s, steps=steps, table=index)
            with open(os.path.join(tmp, WINDOW_JSON), "w", encoding="utf-8") as f:
                doc = _window_json(record, os.path.getsize(trace_path))
                if series:
                    doc["series"] = series
                json.dump(doc, f, indent=1)
            if os.path.lexists(final):  # only a clock gone back onto another writer's name: never replace it
                raise OSError(errno.EEXIST, "a window of that name exists", final)
            os.rename(tmp, final)
        except OSError as exc:
            _remove(tmp)
            if key is not None:  # the filesystem's fault, not the file's: a later try may succeed
                self._append_ledger(seq, key, FAILED)
            raise self._error(exc) from None
        except TraceError:
            _remove(tmp)
            if key is not None:  # not a trace, over the budget, swapped since listed: never tried again
                self.refuse(key)
            raise
        except BaseException:
            _remove(tmp)
            raise
        replaced = self.incomplete.pop(key, None)
        if replaced and os.path.isdir(replaced):  # the folder an interrupted run of this window left
            self._remove_window(replaced, f"redone-{seq}")
        if commit:
            self.done(record)
        self.prune()
        return record

    def done(self, record: WindowRecord) -> None:
        """The window's every output is made: a restart will not do it again."""
        self._seen.add(record.raw)
        self._append_ledger(record.sequence, record.raw, DONE)

    def refuse(self, key: RawKey) -> None:
        """This raw file cannot be a window (not a trace, over the memory budget): never
        try it again, after a restart either."""
        self._seen.add(key)
        self.incomplete.pop(key, None)
        self._append_ledger(self._seq, key, REFUSED)

    def _reduce(self, raw_path: str, trace_path: str,
                expect: Optional[FileIdentity] = None) -> tuple[dict[str, Any], StepSeries, Any, TraceIndex]:
        """Index once; reduce and derive the steps from the same index. A big window (an
        XSpace of hundreds of MB) is parsed into a temporary folder and mapped, as the CLI
        parses without --cache-dir (`parse_spilling_to_temp`): file-backed pages, not the
        sidecar's memory; the folder goes with the window's table."""
        budget = MemoryBudget(self.max_memory_bytes, flag="--max-memory-mb") if self.max_memory_bytes else Unlimited()
        reading = budget.account(f"reading {os.path.basename(raw_path)}")
        index = parse_spilling_to_temp(raw_path, account=reading, expect=expect)
        index.account = reading
        with open(trace_path, "wb") as out, budget.account(f"reducing {os.path.basename(raw_path)}") as reducing:
            stats = reduce_index(index, out, self.level, gzip=True, account=reducing)
        with budget.account(f"deriving the steps of {os.path.basename(raw_path)}") as deriving:
            steps = derive_index(index, deriving)
        return stats, steps, index.identity, index

    def _append_ledger(self, seq: int, key: RawKey, state: str = DONE) -> None:
        """One whole line per change of a window's state, appended (compacted past twice
        `LEDGER_KEEP` lines); a failure here loses nothing the window's own `window.json`
        does not hold, so it is not an error."""
        try:
            fd = os.open(self._ledger_path(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            try:
                os.write(fd, _ledger_line(seq, key, state))
            finally:
                os.close(fd)
        except OSError:
            return
        self._ledger_lines += 1
        if self._ledger_lines > 2 * LEDGER_KEEP:
            try:
                states, _ = self._read_ledger()
            except LiveWriteError:
                return
            self._compact_ledger(states)

    # -- pruning ------------------------------------------------------------------------

    def windows(self) -> list[str]:
        """The window folders' names, oldest first (anomaly runs and others not included)."""
        return [n for n in self._names() if WINDOW_NAME.match(n)]

    def prune(self) -> list[str]:
        """Delete all but the newest `keep` windows (by name: capture time, then sequence);
        returns the names deleted. A window that holds an anomaly is never pruned: one an
        anomaly run beside it names (`<window>-anomaly-…`; it goes when that run is
        pruned, `anomalies.prune_anomalies`) or one in `protected` (an anomaly whose raw
        windows are still to be preserved); `keep` counts the others. A folder leaves the
        listing by one rename before it is deleted, so no run is seen half-deleted; a
        failure is left for the next prune."""
        if self.keep is None:
            return []
        names = self._names()
        held = self.protected | {n.split(ANOMALY_INFIX, 1)[0] for n in names if ANOMALY_INFIX in n}
        names = [n for n in names if WINDOW_NAME.match(n) and n not in held]
        gone = names[: max(0, len(names) - self.keep)]
        for i, name in enumerate(gone):
            self._remove_window(os.path.join(self.live_dir, name), f"{self._seq}-{i}")
        return gone

    def remove(self, name: str) -> None:
        """Delete one window (a newer version of its raw file superseded it); no-op if gone."""
        if WINDOW_NAME.match(name):
            self._remove_window(os.path.join(self.live_dir, name), f"{self._seq}-{name}")

    def written(self, key: RawKey) -> Optional[tuple[str, float, float]]:
        """(window name, captured t0, t1) of the window this raw version made, if it is still
        there (read from the windows' `window.json`, newest first)."""
        for name in reversed(self.windows()):
            path = os.path.join(self.live_dir, name, WINDOW_JSON)
            if self._key_in(path) != key:
                continue
            try:
                with open(path, "rb") as f:
                    captured = json.loads(f.read(1 << 20))["captured"]
                return name, float(captured["t0"]), float(captured["t1"])
            except (OSError, ValueError, KeyError, TypeError):
                return None
        return None

    def _remove_window(self, folder: str, tag: str) -> None:
        """Out of the listing by one rename, then deleted; a failure is left for later."""
        doomed = os.path.join(self.live_dir, f".pruned-{os.getpid()}-{tag}")
        try:
            os.rename(folder, doomed)
        except OSError:
            return
        _remove(doomed)

    def _error(self, exc: OSError) -> LiveWriteError:
        reason = exc.strerror or str(exc)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            reason += " (the disk is full)"
        return LiveWriteError(f"cannot write live windows into {self.live_dir}: {reason}")


def trace_span_s(steps: StepSeries, table: Any = None) -> float:
    """A window's span in seconds, from its own clock: its events' extent (the first
    start to the last end of its timed events; metadata at time 0 left out), else its
    steps' extent, else 0."""
    if table is not None and len(getattr(table, "ts", ())):
        ts = np.asarray(table.ts, dtype=np.float64)
        end = ts + np.nan_to_num(np.asarray(table.dur, dtype=np.float64), nan=0.0)
        timed = np.isfinite(ts) & np.isfinite(end) & (np.asarray(table.ph) != PH_M)
        if timed.any():
            return max(0.0, float(end[timed].max() - ts[timed].min()) / 1e6)
    if len(steps):
        return max(0.0, float(np.nanmax(steps.end_us) - np.nanmin(steps.start_us)) / 1e6)
    return 0.0


def _ledger_line(seq: int, key: RawKey, state: str = DONE) -> bytes:
    return (json.dumps({"seq": seq, "path": key.path, "size": key.size, "mtime_ns": key.mtime_ns, "state": state})
            + "\n").encode()


def _window_json(record: WindowRecord, file_bytes: int) -> dict[str, Any]:
    """What `window.json` says: enough to tell what the window holds without reading it."""
    return {
        "version": WINDOW_VERSION,
        "sequence": record.sequence,
        "run": record.run,
        "host": record.host,
        "captured": {"t0": record.captured_t0, "t1": record.captured_t1,
                     "t0_utc": datetime.fromtimestamp(record.captured_t0, tz=timezone.utc).isoformat(),
                     "seconds": record.captured_t1 - record.captured_t0},
        "raw": {"name": os.path.basename(record.raw.path), "path": record.raw.path, "size": record.raw.size,
                "mtime_ns": record.raw.mtime_ns, "truncated": record.truncated},
        "events": {"in": record.events_in, "out": record.events_out},
        "level": record.level,
        "steps": record.step_numbers,
        "marker": record.steps.marker,
        "reduce_s": record.reduce_s,
        "output": {"file": os.path.basename(record.trace_path), "file_bytes": file_bytes},
    }
