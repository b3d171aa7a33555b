"""Finding the profiler traces in a logdir, without TensorBoard's run list.

TensorBoard calls a directory a run only if it holds a `tfevents` file, and
profile folders (`plugins/profile/<run>/`) and PyTorch trace-handler folders
usually hold none. So the logdir is walked here: cheaply (names and `stat` only,
a bounded number of entries), cached, and walked again when the cache is older
than `max_age_s`, so new profiles appear while TensorBoard runs.

Symbolic links are followed as TensorBoard follows them (`follow_symlinks`, the
default): a run folder or a trace file linked in from elsewhere is listed. Loops are
guarded (a linked folder already walked, or one holding the logdir, is not entered
again) and a link to a folder inside the logdir is not walked twice. With
`follow_symlinks=False` (`--tb_reduce_follow_symlinks=false`, for logdirs that
untrusted jobs write into) only links that resolve inside the logdir are listed.
Either way a file is read only if it is still the one the walk saw (device and inode
of the link's target, see below). What the walk found and left out (a link not
followed, a broken link, a loop, a `.json` that is no trace, a folder too deep or
unreadable, the entry limit) is kept in `skipped`, so an empty tab can say why.

JAX writes `<host>.trace.json.gz` beside `<host>.xplane.pb`: an export of the same
profile, which JAX caps at 1,000,000 events (a long run's export covers only its start).
Such a file is listed after the XSpace, as its `export`; it is marked `capped` only when
it is: its complete events (`"ph":"X"`, what JAX's cap counts) are counted once per
version of the file, by a scan of its inflated bytes for that pattern (no JSON parse;
stopped at the cap, so at most ~0.5 s for a capped export) — an export holding fewer than
the cap holds every event of its XSpace. One that could not be counted (an object in a
store, a file that will not inflate) keeps the mark, said to be unchecked
(see `TraceFile.describe`).

Naming (SPEC §2): a file in `…/plugins/profile/<run>/` belongs to run
`<prefix>/<run>` (`<prefix>` = the path above `plugins/profile`, if any); any
other trace file belongs to the run named by its directory's path in the logdir
(`.` for the logdir itself). The host is the file name without its trace suffix.

Hosts of one job. XProf's layout already makes one run of many hosts: one session
folder, one `<host>.xplane.pb` per host. PyTorch's `tensorboard_trace_handler` writes
each rank's `<worker>.<id>.pt.trace.json(.gz)` into the one run folder; each such host
is listed with the `rank` and `world_size` of its trace's `distributedInfo` (read from
the file's head, once per version of the file: `distributed_info`), and the hosts of a
run are listed in rank order (hosts without a rank after them, by name).
JAX names a session folder by the second its profile was written
(`<prefix>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host>.xplane.pb`), so the processes of
one job that stop tracing in different seconds land in different folders. Such folders
are joined into one more run, `<prefix>/<ts1>+<ts2>[+…]` (`<ts1>+<ts2>` with no prefix),
whose hosts are the union and whose `runs` entry says `"joins": [the runs]`; the folders
stay listed as runs of their own. The rule is conservative: session folders of the same
`<prefix>`, taken in time order, are joined while each is named within `MAX_JOIN_GAP_S`
seconds of the group's first, holds only XSpaces (and JAX's exports of them), and shares
no host name with the folders joined so far (one host profiled twice is two profiles, not
one job); a real folder with the joined run's name wins over it.

The walk also notes TensorBoard event files (`*tfevents*`), for the run's scalars:
a run's event files are those of the TensorBoard run folder its traces belong to
(the folder above `plugins/profile`, or the trace's own folder).

Runs of scalars only. A folder with event files whose scalars no trace run serves (a plain
`torch.utils.tensorboard.SummaryWriter` run: `runs/a/events.out.tfevents.…`) is a run too,
named as TensorBoard names it, by its path in the logdir (`runs/a`, `.` for the logdir
itself), so the waveform panel can plot and overlay it. Found by the same walk (no second
one), listed after the trace runs (a client that opens the first run still gets a trace),
in name order, as `{"run", "hosts": [], "scalars_only": true}`; `find` never returns one.
Left out: the event files a trace run already reads (its events folder, the sidecar's
`live/` for its windows), TensorBoard profile markers (`*.profile-empty`, which hold no
scalars), and whatever the walk never enters (dot folders: the sidecar's ring and temp
folders). A folder's event files are not read to list it (a listing must stay cheap): one
whose files hold no scalar (only images, say) is listed, and its `tags` say it has none.
A name a trace run already has stays the trace run's (the folder is noted in `skipped`).
Object-store logdirs list none (their event files are not read).

A logdir on an object store (`s3://bucket/prefix`, `gs://…`) is listed through fsspec
(`objectstore.walk`: folder by folder, bounded as the local walk) and named by the same
rules, so the same objects give the same runs and hosts; an object's path is its URL
and its identity its size, modification time and version tag (see `_walk_store`).

Every (run, host) maps to a path found by the walk; requests name a (run, host)
and never a path, so no query parameter can reach a file outside the logdir. Each
listed file keeps the device and inode the walk saw (`TraceFile.identity()`), so a
reader can refuse a file swapped in after the walk (`sources.open_regular`).

Names are shown as `errors.display_name` writes them: a control character or an
undecodable byte in a file or directory name becomes `\\xNN`, so every run and host
listed can be sent back as a request parameter (the plugin refuses control
characters, and a browser cannot URL-encode a lone surrogate). Shown names stay
unique: when two differ only by that escaping, the one that needed none keeps its
name and the other gets `~2` (`~3`, …), in a fixed order.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
import zlib
from calendar import timegm
from dataclasses import dataclass, replace
from typing import Optional

from ..errors import TraceError, display_name
from ..formats import objectstore
from ..formats.logdir import MAX_DEPTH, MAX_ENTRIES, TreeWalk, content, looks_like_chrome_trace, open_head, split_trace_name
from ..formats.sources import FileIdentity, open_regular

# (suffix, format), most specific first; `.json(.gz)` files are checked by content.
FORMAT_RANK = {"xspace": 0, "chrome-json": 1}
LIVE_FOLDER = "live"  # where `tb-reduce live` writes its windows and their scalars
# TensorBoard's profile plugin writes an empty event file beside a profile (so TensorBoard sees
# a run there); it holds no scalars, so a folder with only such files is no scalar run.
PROFILE_EMPTY_SUFFIX = ".profile-empty"
# The live drive recorder's report in an anomaly run's folder, listed with the run (its short fields).
ANOMALY_REPORT = "anomaly.json"
MAX_REPORT_BYTES = 64 * 1024
REPORT_KEYS = ("trigger", "kind", "value", "threshold", "unit", "reason", "step", "window")
# Longest run or host name listed: what the plugin takes in a parameter (plugin.MAX_PARAM_CHARS).
MAX_NAME_CHARS = 4096
# What a JAX export beside its XSpace holds at most (the profiler's trace-events cap).
JAX_EXPORT_CAP = 1_000_000
# What JAX writes for each of the events its cap counts (compact JSON: `{"ph":"X",…}`), and how
# much of an export's inflated content is scanned for them at most (1 M events of ~200 bytes
# in real exports; past this the export is left unchecked).
JAX_EXPORT_EVENT = b'"ph":"X"'
EXPORT_SCAN_BYTES = 2 << 30
JAX_EXPORT_SUFFIXES = (".trace.json.gz", ".trace.json")
MAX_SKIPPED = 100  # entries of `Catalog.skipped` kept (the count goes on)
# A PyTorch rank's `distributedInfo` is looked for in this much of its file's head (Kineto writes
# it before `traceEvents`, after `deviceProperties`: 5-30 KB for 8 GPUs in the corpus).
RANK_SCAN_BYTES = 256 * 1024
# JAX's session folders (`plugins/profile/<ts>`) are named by the local time their profile was
# written; those of one job's processes within this many seconds of the first are joined.
SESSION_FORMAT = "%Y_%m_%d_%H_%M_%S"
MAX_JOIN_GAP_S = 5
JOIN_MARK = "+"  # `<prefix>/<ts1>+<ts2>`: the run joining session folders <ts1> and <ts2>


@dataclass(frozen=True)
class TraceFile:
    run: str
    host: str
    path: str
    format: str
    bytes: int
    mtime_ns: int
    dev: int = 0
    ino: int = 0
    events_dir: str = ""  # the TensorBoard run folder whose event files hold this run's scalars
    export_of: str = ""  # the host whose XSpace this file is JAX's export of, if it is one
    export_events: Optional[int] = None  # its events JAX's cap counts, up to the cap (None: not counted)
    rank: Optional[int] = None  # a PyTorch rank's `distributedInfo.rank` (see `distributed_info`)
    world_size: Optional[int] = None

    def describe(self) -> dict:
        out: dict = {"host": self.host, "format": self.format, "bytes": self.bytes}
        if self.export_of:
            out["export"] = export = {"of": self.export_of, "events": self.export_events, "cap": JAX_EXPORT_CAP}
            xspace = f"{self.export_of}.xplane.pb"
            if self.export_events is None:
                export["note"] = (f"JAX's export of {xspace}, not checked against JAX's {JAX_EXPORT_CAP:,}-event "
                                  f"cap: a long run's export covers only its start; the XSpace holds every event")
                out["capped"] = {"events": JAX_EXPORT_CAP, "of": self.export_of, "checked": False,
                                 "note": export["note"]}
            elif self.export_events >= JAX_EXPORT_CAP:
                export["note"] = (f"JAX's export of {xspace}, capped at {JAX_EXPORT_CAP:,} events: it covers "
                                  f"only the run's start; the XSpace holds every event")
                out["capped"] = {"events": JAX_EXPORT_CAP, "of": self.export_of, "checked": True,
                                 "note": export["note"]}
            else:
                export["note"] = (f"JAX's export of {xspace}, whole: {self.export_events:,} events, "
                                  f"under JAX's {JAX_EXPORT_CAP:,}-event cap")
        if self.rank is not None:
            out["rank"], out["world_size"] = self.rank, self.world_size
        return out

    def identity(self) -> FileIdentity:
        """The file the walk saw, for `TraceStream(expect=…)`: another one at the path
        later (replaced, a symlink swapped in) is refused, not read."""
        return FileIdentity(self.dev, self.ino, self.bytes, self.mtime_ns)


def distributed_info(path: str, expect: Optional[FileIdentity] = None) -> Optional[tuple[int, int]]:
    """(rank, world_size) of a PyTorch rank's trace, from its `distributedInfo` key, or None.

    Kineto writes `distributedInfo` among the keys before `traceEvents`, so only the file's
    head is read (at most `RANK_SCAN_BYTES` of its content, gunzipped), up to the
    `traceEvents` key: an event's args further on can never be taken for it. Opened as
    every reader opens (`open_regular`, `expect`: the version the walk saw).
    """
    head = b""
    try:
        f = open_head(path, expect, RANK_SCAN_BYTES)
        with f:
            for chunk in content(f, RANK_SCAN_BYTES):
                head += chunk
                if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] not in (b"{", b""):
                    return None  # Array format: no top-level keys
                if b'"traceEvents"' in head:
                    break
    except (OSError, zlib.error, EOFError, gzip.BadGzipFile, TraceError):
        return None
    end = head.find(b'"traceEvents"')
    at = head.find(b'"distributedInfo"', 0, end if end >= 0 else len(head))
    if at < 0:
        return None
    text = head[at + len(b'"distributedInfo"'):].decode("utf-8", "replace").lstrip()
    if not text.startswith(":"):
        return None
    try:
        info, _ = json.JSONDecoder().raw_decode(text[1:].lstrip())
    except ValueError:
        return None
    if not isinstance(info, dict):
        return None
    rank, world = info.get("rank"), info.get("world_size")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (rank, world)) or not 0 <= rank < world:
        return None
    return rank, world


def session_time(folder: str) -> Optional[int]:
    """Seconds (UTC-naive, for differences only) a `plugins/profile/<YYYY_MM_DD_HH_MM_SS>`
    session folder is named by, or None for any other name."""
    if len(folder) != 19 or not folder.replace("_", "").isdigit() or folder.count("_") != 5:
        return None
    try:
        return timegm(time.strptime(folder, SESSION_FORMAT))
    except ValueError:
        return None


def count_export_events(path: str, expect: Optional[FileIdentity] = None) -> Optional[int]:
    """How many of the events JAX's export cap counts a JAX `trace.json(.gz)` holds, counted
    up to `JAX_EXPORT_CAP` (reaching it means capped), or None when it cannot be told (an
    object in a store, not read here; a file that will not open or inflate; past
    `EXPORT_SCAN_BYTES`). A scan of the inflated bytes for `JAX_EXPORT_EVENT`, no JSON parse:
    the pattern cannot hide inside a JSON string (its quotes would be escaped there)."""
    if objectstore.is_url(path):
        return None
    n = 0
    keep = len(JAX_EXPORT_EVENT) - 1  # a pattern cut by a chunk's end is found with the next one
    tail = b""
    try:
        with open_regular(path, expect=expect)[0] as f:
            gz = f.read(2) == b"\x1f\x8b"
            f.seek(0)
            inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if gz else None
            seen = 0
            while n < JAX_EXPORT_CAP:
                raw = f.read(1 << 20)
                if not raw:
                    break
                chunk = tail + (inflate.decompress(raw) if inflate is not None else raw)
                seen += len(chunk) - len(tail)
                if seen > EXPORT_SCAN_BYTES:
                    return None
                n += chunk.count(JAX_EXPORT_EVENT)
                tail = chunk[-keep:]
                if inflate is not None and inflate.eof:
                    break
    except (OSError, zlib.error, TraceError):
        return None
    return min(n, JAX_EXPORT_CAP)


def run_name(rel_dir: str) -> str:
    parts = [] if rel_dir in ("", ".") else rel_dir.split(os.sep)
    for i in range(len(parts) - 2):
        if parts[i] == "plugins" and parts[i + 1] == "profile":
            parts = parts[:i] + parts[i + 2:]
            break
    return "/".join(parts) if parts else "."


def events_folder(trace_dir: str) -> str:
    """The TensorBoard run folder of a trace's folder: above `plugins/profile/<run>`, or itself."""
    parts = trace_dir.split(os.sep)
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] == "plugins" and parts[i + 1] == "profile":
            return os.sep.join(parts[:i]) or os.sep
    return trace_dir


def _window_series(window_dir: str) -> Optional[str]:
    """The series run a live window's `window.json` names (relative to `live/`), if a safe one."""
    try:
        f, _ = open_regular(os.path.join(window_dir, "window.json"), max_file_bytes=1 << 20)
        with f:
            series = json.loads(f.read(1 << 20)).get("series")
    except (OSError, TraceError, ValueError, AttributeError):
        return None
    if not isinstance(series, str) or not series or "\0" in series or series.startswith("/"):
        return None
    parts = series.split("/")
    return os.path.join(*parts) if all(p and not p.startswith(".") and "\\" not in p for p in parts) else None


class Catalog:
    """The traces under one logdir, refreshed at most every `max_age_s`."""

    def __init__(self, logdir: str, max_age_s: float = 5.0, follow_symlinks: bool = True) -> None:
        self.logdir = _logdir(logdir)
        self.max_age_s = max_age_s
        self.follow_symlinks = follow_symlinks
        self._lock = threading.Lock()
        self._files: dict[tuple[str, str], TraceFile] = {}
        self._walked_at = float("-inf")
        self._sniffed: dict[str, tuple[FileIdentity, bool]] = {}  # path -> (the version sniffed, is a trace)
        self._event_files: dict[str, list[str]] = {}  # folder -> its event files, in name order
        self._anomalies: dict[str, str] = {}  # folder -> its drive recorder report (`anomaly.json`)
        self._reports: dict[str, tuple[tuple[int, int], Optional[dict]]] = {}  # path -> (size, mtime), report
        self._ranks: dict[str, tuple[FileIdentity, Optional[tuple[int, int]]]] = {}  # path -> (version, rank info)
        self._joins: dict[str, list[str]] = {}  # a run joining split JAX session folders -> the runs it joins
        self._exports: dict[str, tuple[FileIdentity, Optional[int]]] = {}  # JAX export -> (version, its events)
        self._scalar_runs: dict[str, str] = {}  # a run of scalars only (shown name) -> its folder, in name order
        self.truncated = False
        self.skipped: list[dict] = []  # what the last walk left out, and why (at most MAX_SKIPPED)
        self.skipped_total = 0

    def files(self) -> dict[tuple[str, str], TraceFile]:
        with self._lock:
            if time.monotonic() - self._walked_at > self.max_age_s:
                self._files = self._walk()
                self._walked_at = time.monotonic()
            return self._files

    def invalidate(self) -> None:
        """Walk again on the next call, whatever the cache's age: for a reader that found
        a listed file changed or gone (`FileChanged`), so the next answer is current."""
        with self._lock:
            self._walked_at = float("-inf")

    def runs(self) -> list[dict]:
        by_run: dict[str, list[TraceFile]] = {}
        for f in self.files().values():
            by_run.setdefault(f.run, []).append(f)
        out = []
        for run, fs in sorted(by_run.items()):
            # A capped JAX export after the XSpace it was made from: the first host is the one shown.
            # Ranks of one job in rank order (PyTorch's `distributedInfo`), hosts without one after, by name.
            ordered = sorted(fs, key=lambda f: (bool(f.export_of), f.rank is None, f.rank or 0, f.host))
            entry: dict = {"run": run, "hosts": [f.describe() for f in ordered]}
            if run in self._joins:
                entry["joins"] = list(self._joins[run])
            report = self._anomaly_of(os.path.dirname(fs[0].path))
            if report is not None:
                entry["anomaly"] = report
            out.append(entry)
        # After the trace runs: clients that open the first run listed get a trace. Those the
        # walk above found (not `scalar_runs()`, which may walk again).
        with self._lock:
            scalar_runs = list(self._scalar_runs)
        out.extend({"run": run, "hosts": [], "scalars_only": True} for run in scalar_runs)
        return out

    def scalar_runs(self) -> list[str]:
        """The runs of scalars only (event files, no trace: module docstring), in name order."""
        self.files()
        with self._lock:
            return list(self._scalar_runs)

    def scalars_folder(self, run: str) -> Optional[str]:
        """The folder whose event files hold a listed run's scalars (a trace run's or a run
        of scalars only), or None for a name that is no listed run."""
        files = self.files()
        with self._lock:
            for f in files.values():
                if f.run == run:
                    return f.events_dir
            return self._scalar_runs.get(run)

    def _anomaly_of(self, folder: str) -> Optional[dict]:
        """The live drive recorder's report of an anomaly run (its `anomaly.json`), read once per version."""
        path = self._anomalies.get(folder)
        if path is None:
            return None
        try:
            f, st = open_regular(path)
            with f:
                key = (st.st_size, st.st_mtime_ns)
                seen = self._reports.get(path)
                if seen is not None and seen[0] == key:
                    return seen[1]
                data = f.read(MAX_REPORT_BYTES + 1)
        except (OSError, TraceError):
            return None
        report = None
        if len(data) <= MAX_REPORT_BYTES:
            try:
                doc = json.loads(data)
            except ValueError:
                doc = None
            if isinstance(doc, dict):
                report = {k: doc[k] for k in REPORT_KEYS if k in doc and isinstance(doc[k], (str, int, float, type(None)))}
        self._reports[path] = (key, report)
        return report

    def discovery(self) -> dict:
        """What the last walk left out and why, for an empty tab to explain itself."""
        self.files()
        with self._lock:
            return {"skipped": list(self.skipped), "skipped_total": self.skipped_total,
                    "truncated": self.truncated, "follow_symlinks": self.follow_symlinks}

    def find(self, run: str, host: str) -> Optional[TraceFile]:
        return self.files().get((run, host))

    def event_files(self, run: str) -> list[str]:
        """Paths of the TensorBoard event files of a listed run (its scalars), in name order.

        A live window (`<logdir>/live/<window>/`, written by `tb-reduce live`) holds none of
        its own: its scalars are the sidecar's series of its source (`_scalars_dir`).
        """
        files = self.files()
        with self._lock:
            for f in files.values():
                if f.run == run:
                    return list(self._event_files.get(self._scalars_dir(f), []))
            folder = self._scalar_runs.get(run)
            return list(self._event_files.get(folder, [])) if folder is not None else []

    def _scalars_dir(self, f: TraceFile) -> str:
        """The folder whose event files a trace file's run reads: its events folder, or for a
        live window without event files of its own, the sidecar's series of its source, in
        the run its `window.json` names (`live/series/<source>/`; `live/` for windows written
        before there was one run per source)."""
        parent = os.path.dirname(f.events_dir)
        if not self._event_files.get(f.events_dir) and os.path.basename(parent) == LIVE_FOLDER:
            series = _window_series(f.events_dir)
            return os.path.join(parent, series) if series is not None else parent
        return f.events_dir

    def _find_scalar_runs(self, files: dict[tuple[str, str], TraceFile], skipped: list[tuple[str, str]]) -> None:
        """The runs of scalars only, from the folders of event files this walk noted (module docstring)."""
        served = {self._scalars_dir(f) for f in files.values()}
        raw: dict[str, str] = {}  # TensorBoard's name of the folder -> the folder
        for folder, paths in self._event_files.items():
            if folder in served or all(p.endswith(PROFILE_EMPTY_SUFFIX) for p in paths):
                continue
            # The walk's folders are the logdir's path and its children's (`os.path.relpath` costs
            # ~30 µs a folder: more than the rest of this for thousands of runs).
            rel = folder[len(self.logdir) + 1:] if folder.startswith(self.logdir + os.sep) \
                else os.path.relpath(folder, self.logdir)
            raw[rel.replace(os.sep, "/") if rel not in ("", os.curdir) else "."] = folder
        traced = {run for run, _ in files}
        shown: dict[str, str] = {}
        for name, name_shown in _showable(set(raw)).items():
            if name_shown in traced:
                skipped.append((raw[name], "event files of a folder named as a run with traces: "
                                           "listed with that run's name, not as a run of their own"))
                continue
            shown[name_shown] = raw[name]
        self._scalar_runs = dict(sorted(shown.items()))

    def _walk(self) -> dict[tuple[str, str], TraceFile]:
        found: list[tuple[str, str, str, str, os.stat_result, str]] = []  # run, stem, name, format, stat, path
        self._scalar_runs = {}
        if objectstore.is_url(self.logdir):
            return self._walk_store()
        if not self.logdir or not os.path.isdir(self.logdir):
            return {}
        self.truncated = False
        event_files: dict[str, list[str]] = {}
        anomalies: dict[str, str] = {}
        sniffed: dict[str, tuple[FileIdentity, bool]] = {}
        skipped: list[tuple[str, str]] = []
        walk = TreeWalk(self.logdir, follow_symlinks=self.follow_symlinks)
        for directory, entry in walk:
            try:
                split = split_trace_name(entry.name)
                linked = entry.is_symlink()
                if linked and (split is not None or "tfevents" in entry.name):
                    why = self._link_refusal(entry.path)
                    if why is not None:
                        skipped.append((entry.path, why))
                        continue
                if not entry.is_file():
                    if split is not None and not entry.is_dir():
                        skipped.append((entry.path, "not a regular file"))
                    continue
                if "tfevents" in entry.name:  # TensorBoard's own rule
                    event_files.setdefault(directory, []).append(entry.path)
                    continue
                if entry.name == ANOMALY_REPORT and (self.follow_symlinks or self._inside(entry.path)):
                    anomalies[directory] = entry.path
                    continue
                if split is None:
                    continue
                stem, fmt = split
                st = entry.stat()
                if fmt == "chrome-json?":  # sniffed once per version of the file, not on every walk
                    version = FileIdentity.from_stat(st)
                    seen = self._sniffed.get(entry.path)
                    if seen is not None and seen[0] == version:
                        is_trace = seen[1]
                    else:
                        is_trace = looks_like_chrome_trace(entry.path, expect=version)
                    sniffed[entry.path] = (version, is_trace)
                    if not is_trace:
                        skipped.append((entry.path, "not a Chrome trace (no traceEvents near its start)"))
                        continue
                    fmt = "chrome-json"
            except OSError as exc:
                skipped.append((entry.path, f"cannot be read ({exc.strerror or exc})"))
                continue
            rel = os.path.relpath(directory, self.logdir)
            found.append((run_name(rel), stem, entry.name, fmt, st, entry.path))
        self.truncated = walk.truncated
        self._sniffed = sniffed
        self._event_files = {d: sorted(paths) for d, paths in event_files.items()}
        self._anomalies = anomalies
        files = self._join_split_sessions(self._with_ranks(self._name_hosts(found)))
        self._find_scalar_runs(files, skipped)
        everything = walk.skipped + skipped
        self.skipped_total = len(everything)
        self.skipped = [{"path": display_name(os.path.relpath(p, self.logdir)), "reason": why}
                        for p, why in everything[:MAX_SKIPPED]]
        return files

    def _with_ranks(self, files: dict[tuple[str, str], TraceFile]) -> dict[tuple[str, str], TraceFile]:
        """Each Chrome trace's rank and world size (`distributed_info`), read once per version
        of the file (as `_sniffed`): a walk that finds the same file reads nothing again."""
        seen: dict[str, tuple[FileIdentity, Optional[tuple[int, int]]]] = {}
        for key, tf in files.items():
            if tf.format != "chrome-json" or tf.export_of:
                continue
            version = tf.identity()
            known = self._ranks.get(tf.path)
            info = known[1] if known is not None and known[0] == version else distributed_info(tf.path, version)
            seen[tf.path] = (version, info)
            if info is not None:
                files[key] = replace(tf, rank=info[0], world_size=info[1])
        self._ranks = seen
        return files

    def _join_split_sessions(self, files: dict[tuple[str, str], TraceFile]) -> dict[tuple[str, str], TraceFile]:
        """Adds a run for each job that JAX split across session folders (module docstring)."""
        sessions: dict[str, dict[str, list[TraceFile]]] = {}  # prefix -> session run -> its files
        for tf in files.values():
            parts = tf.path.split(os.sep)
            if len(parts) >= 4 and parts[-4:-2] == ["plugins", "profile"]:
                prefix, _, folder = tf.run.rpartition("/")
                if session_time(folder) is not None:
                    sessions.setdefault(prefix, {}).setdefault(tf.run, []).append(tf)
        joins: dict[str, tuple[str, list[str]]] = {}  # joined run -> (its prefix, the runs it joins)
        for prefix, runs in sessions.items():
            group: list[str] = []
            hosts: set[str] = set()
            for run in sorted(runs, key=lambda r: (session_time(r.rpartition("/")[2]), r)) + [""]:
                fs = runs.get(run, [])
                xspace_only = bool(fs) and all(f.format == "xspace" or f.export_of for f in fs)
                names = {f.host for f in fs}
                t = session_time(run.rpartition("/")[2]) if run else None
                if group and t is not None and xspace_only and hosts.isdisjoint(names) \
                        and t - session_time(group[0].rpartition("/")[2]) <= MAX_JOIN_GAP_S:  # type: ignore[operator]
                    group.append(run)
                    hosts |= names
                    continue
                if len(group) > 1:
                    name = (prefix + "/" if prefix else "") + JOIN_MARK.join(r.rpartition("/")[2] for r in group)
                    if len(name) <= MAX_NAME_CHARS and not any(r == name for r, _ in files):
                        joins[name] = (prefix, group)
                group, hosts = ([run], names) if xspace_only else ([], set())
        for name, (prefix, group) in joins.items():
            for run in group:
                for tf in sessions[prefix][run]:
                    files[(name, tf.host)] = replace(tf, run=name)
        self._joins = {name: group for name, (_, group) in joins.items()}
        return files

    def _walk_store(self) -> dict[tuple[str, str], TraceFile]:
        """`_walk` for a logdir on an object store (`s3://`, `gs://`): its listing through
        fsspec (`objectstore.walk`, bounded as the local walk), named by the same rules,
        so the same objects give the same runs and hosts as the same files on disk.

        An object keeps its URL as `path`; its identity is its size, modification time and
        version tag (`objectstore.ObjectStat`), so a rewritten object is another version.
        `.json(.gz)` objects are sniffed from a range read of their head. Event files and
        drive-recorder reports are not read from a store (no scalars there). A logdir that
        cannot be listed (unreachable, no such bucket, refused) lists nothing and says why
        in `skipped`, in one line.
        """
        self.truncated = False
        self._event_files, self._anomalies = {}, {}
        try:
            walk = objectstore.walk(self.logdir, MAX_ENTRIES, MAX_DEPTH)
        except TraceError as exc:
            self.skipped, self.skipped_total = [{"path": ".", "reason": str(exc)}], 1
            return {}
        found: list[tuple] = []  # run, stem, name, format, stat, path (as `_walk`)
        sniffed: dict[str, tuple[FileIdentity, bool]] = {}
        skipped = list(walk.skipped)
        for folder, name, ost in walk.entries:
            split = split_trace_name(name)
            if split is None or "tfevents" in name:
                continue
            stem, fmt = split
            path = f"{folder}/{name}"
            if fmt == "chrome-json?":  # sniffed once per version of the object, as files are
                version = ost.identity()
                seen = self._sniffed.get(path)
                is_trace = seen[1] if seen is not None and seen[0] == version else looks_like_chrome_trace(path, version)
                sniffed[path] = (version, is_trace)
                if not is_trace:
                    skipped.append((path, "not a Chrome trace (no traceEvents near its start)"))
                    continue
                fmt = "chrome-json"
            rel = folder[len(self.logdir) + 1:] if folder != self.logdir else "."
            found.append((run_name(rel.replace("/", os.sep)), stem, name, fmt, ost, path))
        self.truncated = walk.truncated
        self._sniffed = sniffed
        self.skipped_total = len(skipped)
        self.skipped = [{"path": display_name(p[len(self.logdir) + 1:] or "."), "reason": why}
                        for p, why in skipped[:MAX_SKIPPED]]
        return self._join_split_sessions(self._with_ranks(self._name_hosts(found)))

    def _link_refusal(self, path: str) -> Optional[str]:
        """Why a symlinked file is not listed, or None: broken, or (links not followed) out of the logdir."""
        if not os.path.exists(path):
            return "a broken link"
        if not self.follow_symlinks and not self._inside(path):
            return "a link out of the logdir, not followed (--tb_reduce_follow_symlinks=false)"
        return None

    def _inside(self, path: str) -> bool:
        real = os.path.realpath(path)
        return real.startswith(self.logdir + os.sep)

    def _name_hosts(self, found: list) -> dict[tuple[str, str], TraceFile]:
        """Host = file stem; when two files of a run share it (JAX writes `vm.xplane.pb`
        and `vm.trace.json.gz` side by side), the XSpace keeps it and the others are
        named by their whole file name. Then the names are made showable (see the
        module docstring)."""
        found.sort(key=lambda r: (r[0], r[1], FORMAT_RANK[r[3]], r[2]))
        raw: dict[tuple[str, str], tuple[str, os.stat_result, str, str]] = {}
        for run, stem, name, fmt, st, path in found:
            host = stem if (run, stem) not in raw else name
            if (run, host) in raw:
                continue
            raw[(run, host)] = (fmt, st, path, _export_of(raw.get((run, stem)), stem, name, path))
        runs = _showable({run for run, _ in raw})
        hosts_of: dict[str, set[str]] = {}
        for run, host in raw:
            hosts_of.setdefault(run, set()).add(host)
        out: dict[tuple[str, str], TraceFile] = {}
        for run, hosts in hosts_of.items():
            shown_run = runs.get(run)
            if shown_run is None:
                continue
            for host, shown_host in _showable(hosts).items():
                fmt, st, path, export_of = raw[(run, host)]
                shown_of = _showable(hosts).get(export_of, "") if export_of else ""
                out[(shown_run, shown_host)] = TraceFile(shown_run, shown_host, path, fmt, st.st_size,
                                                         st.st_mtime_ns, st.st_dev, st.st_ino,
                                                         events_folder(os.path.dirname(path)), shown_of)
        return self._with_export_counts(out)

    def _with_export_counts(self, files: dict[tuple[str, str], TraceFile]) -> dict[tuple[str, str], TraceFile]:
        """Each JAX export's events up to the cap (`count_export_events`), counted once per version
        of the file (as `_with_ranks`), so that only an export that reached the cap is called capped."""
        seen: dict[str, tuple[FileIdentity, Optional[int]]] = {}
        for key, tf in files.items():
            if not tf.export_of:
                continue
            version = tf.identity()
            known = self._exports.get(tf.path)
            events = known[1] if known is not None and known[0] == version else count_export_events(tf.path, version)
            seen[tf.path] = (version, events)
            files[key] = replace(tf, export_events=events)
        self._exports = seen
        return files


def _logdir(logdir: str) -> str:
    """The logdir as walked: a local one by its real path; an object store's URL as given,
    without a trailing '/' (`objectstore.is_url`)."""
    if not logdir:
        return ""
    if objectstore.is_url(logdir):
        return logdir.rstrip("/")
    return os.path.realpath(logdir)


def _export_of(first: Optional[tuple], stem: str, name: str, path: str) -> str:
    """`stem` when this file is JAX's `<stem>.trace.json(.gz)` beside `<stem>.xplane.pb` in the same
    folder (`first`: what the run's host `stem` already is), else ''."""
    if first is None or first[0] != "xspace" or not name.endswith(JAX_EXPORT_SUFFIXES) \
            or name.endswith((".pt.trace.json.gz", ".pt.trace.json")):
        return ""
    return stem if os.path.dirname(first[2]) == os.path.dirname(path) else ""


def _showable(names: set[str]) -> dict[str, str]:
    """Each name -> a unique shown name (`display_name`, then `~2`, `~3`, … on a clash).

    Names that need no escaping are placed first, so a plain name always means its
    own file, whatever odd names appear beside it; the others follow in code point
    order, so the same set of names always gets the same shown names. A name longer
    than `MAX_NAME_CHARS` once shown could never be asked for, so it is left out.
    """
    out: dict[str, str] = {}
    taken: set[str] = set()
    displayed = {n: display_name(n) for n in names}  # once per name: a logdir may hold thousands of runs
    for name in sorted(names, key=lambda n: (displayed[n] != n, n)):
        base = displayed[name]
        shown, k = base, 1
        while shown in taken:
            k += 1
            shown = f"{base}~{k}"
        if len(shown) > MAX_NAME_CHARS:
            continue
        taken.add(shown)
        out[name] = shown
    return out
