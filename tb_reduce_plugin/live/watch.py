"""The watch source: trace files appearing under a folder, from any profiler, as they land.

A profiler writes its trace over seconds (Kineto's JSON export of a big window, a
gzip stream) and may die half-way, and nothing says when a file is done. So a file
is judged by its size and mtime, polled:

- **settled** — its (size, mtime) has not changed for `settle_s` (a file first seen
  with an mtime at least `settle_s` old is settled at once): handed out with
  `final=True`, once per version. A writer that died leaves a truncated file: it
  settles too and is handed out final, and `index_file` reads it up to its last
  complete event (`index.truncated`). A settled file that changes again (a writer
  that only paused) is new again: handed out again, partial while it grows, final
  once it settles.
- **growing** — changed within `settle_s`: handed out with `final=False` when it is
  a plain (not gzip) Chrome JSON file, it is larger than when last handed out, and
  it was not handed out partial in the last `every_s` (the first partial goes out at
  the first poll that sees it growing, and again after each final hand-out). `index_file` reads such a file up to its
  last complete event; a file too short to hold one yet raises `TraceError`, which a
  consumer takes as "nothing yet" (it is handed out again as it grows). A gzip
  stream or an XSpace protobuf cannot be read before its end, so it is handed out
  only final. Nor is a file past `partial_max_bytes`: each partial hand-out is read
  whole again, so a big file still growing is left until it settles (read once,
  within the memory budget) rather than parsed again and again as it grows.

Each `Ready` is one version (path, size, mtime); `poll()` returns them oldest mtime
first. What is walked is what the plugin's discovery would list: the same trace
suffixes (`.json(.gz)` only if its content looks like a trace), no names starting
with '.', directories never followed through symlinks, a file symlink only if it
resolves inside the watched folder, only regular files (a FIFO or device is
skipped without being opened; `open_regular` opens what is read), a bounded walk.
What is left out is said: `skips` holds (path, reason) for each trace-named file
skipped (a FIFO, a symlink out of the watched folder) and each folder not walked to
its end, once while it lasts, for the sidecar to log.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

from ..errors import TraceError
from ..formats.logdir import TreeWalk, looks_like_chrome_trace, split_trace_name
from ..formats.sources import GZIP_MAGIC, FileIdentity, open_regular
from .windows import RawKey

Version = tuple[int, int, int, int]  # dev, ino, size, mtime_ns


@dataclass(frozen=True)
class Ready:
    """A version of a trace file to reduce: `final` when it has settled, else partial."""

    path: str  # absolute
    size: int
    mtime_ns: int
    final: bool
    dev: int = 0
    ino: int = 0

    @property
    def mtime(self) -> float:
        return self.mtime_ns / 1e9

    @property
    def key(self) -> RawKey:
        """The key `WindowWriter.write(key=…)` records and `WindowWriter.seen` asks about."""
        return RawKey(self.path, self.size, self.mtime_ns)

    def identity(self) -> FileIdentity:
        """For `index_file(expect=…)`: a file replaced since it was listed is refused."""
        return FileIdentity(self.dev, self.ino, self.size, self.mtime_ns)


@dataclass
class _State:
    version: Version
    stable_since: float  # monotonic time its version was first seen
    fmt: str
    handed_size: int = 0  # size when last handed out (partial or final)
    handed_final: Optional[Version] = None
    partial_at: Optional[float] = None
    gzip: Optional[bool] = None  # known once it holds 2 bytes
    sniffed: dict = field(default_factory=dict)  # version -> looks like a trace (`.json(.gz)` only)


class Watcher:
    """Polls `path` (a folder, walked recursively, or one file) for trace files to reduce.

    `exclude`: folders not to walk (the logdir the windows are written to, when it is
    under `path`: the sidecar must not reduce its own output). `partial=False` hands
    out only settled files.
    """

    def __init__(self, path: Union[str, os.PathLike], settle_s: float = 1.0, every_s: float = 5.0,
                 exclude: Sequence[Union[str, os.PathLike]] = (), partial: bool = True,
                 clock: Callable[[], float] = time.monotonic, partial_max_bytes: Optional[int] = None) -> None:
        if not settle_s >= 0 or not every_s >= 0:
            raise TraceError(f"settle_s and every_s must be >= 0 seconds, not {settle_s!r}, {every_s!r}")
        self.path = os.path.abspath(os.fspath(path))
        self.settle_s = float(settle_s)
        self.every_s = float(every_s)
        self.partial = partial
        self.partial_max_bytes = partial_max_bytes  # None: no bound
        self.skips: list[tuple[str, str]] = []  # new since the caller last emptied it
        self._skipped: set[tuple[str, str]] = set()  # reported, and still so
        self._clock = clock
        self._exclude = {os.path.realpath(os.fspath(p)) for p in exclude}
        self._files: dict[str, _State] = {}
        self.truncated = False  # the last walk stopped at MAX_ENTRIES

    def poll(self) -> list[Ready]:
        """The trace files to reduce now (see the module docstring for when)."""
        now = self._clock()
        wall = time.time()
        found = self._walk()
        for gone in set(self._files) - set(found):
            del self._files[gone]
        ready: list[Ready] = []
        for path, (st, fmt) in found.items():
            version = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            s = self._files.get(path)
            if s is None:
                age = max(0.0, wall - st.st_mtime_ns / 1e9)
                s = self._files[path] = _State(version, now - age, fmt)
            elif s.version != version:
                if s.version[:2] != version[:2] or version[2] < s.version[2]:  # replaced, or rewritten shorter
                    s = self._files[path] = _State(version, now, fmt)
                else:
                    s.version, s.stable_since = version, now
            size = version[2]
            if size == 0:
                continue
            if now - s.stable_since >= self.settle_s:
                if s.handed_final != version and self._is_trace(path, s, st):
                    s.handed_final, s.handed_size, s.partial_at = version, size, None
                    ready.append(Ready(path, size, st.st_mtime_ns, True, st.st_dev, st.st_ino))
                continue
            if (self.partial and size > s.handed_size and s.fmt != "xspace"
                    and (self.partial_max_bytes is None or size <= self.partial_max_bytes)
                    and (s.partial_at is None or now - s.partial_at >= self.every_s)
                    and not self._is_gzip(path, s, st) and self._is_trace(path, s, st)):
                s.partial_at, s.handed_size = now, size
                ready.append(Ready(path, size, st.st_mtime_ns, False, st.st_dev, st.st_ino))
        ready.sort(key=lambda r: (r.mtime_ns, r.path))
        return ready

    def retry(self, ready: Ready) -> None:
        """Hand this version out again at a later poll (its window failed for a reason of
        the filesystem's, a full disk, not of the file's)."""
        s = self._files.get(ready.path)
        if s is not None and s.handed_final == (ready.dev, ready.ino, ready.size, ready.mtime_ns):
            s.handed_final = None
        elif s is not None and not ready.final:
            s.handed_size = 0

    def _skip(self, now: set[tuple[str, str]], path: str, reason: str) -> None:
        key = (path, reason)
        now.add(key)
        if key not in self._skipped:
            self.skips.append(key)

    def _is_gzip(self, path: str, s: _State, st: os.stat_result) -> bool:
        """Whether the file is a gzip stream (by its magic number, as readers decide)."""
        if s.gzip is None and st.st_size >= 2:
            try:
                f, _ = open_regular(path, expect=FileIdentity.from_stat(st))
                with f:
                    s.gzip = f.read(2) == GZIP_MAGIC
            except (OSError, TraceError):
                return True  # unreadable now: not handed out partial
        return bool(s.gzip)

    def _is_trace(self, path: str, s: _State, st: os.stat_result) -> bool:
        """`.json(.gz)` files are traces if their content looks like one (as discovery
        decides), judged once per version; other suffixes name their format."""
        if s.fmt != "chrome-json?":
            return True
        version = s.version
        if version not in s.sniffed:
            s.sniffed = {version: looks_like_chrome_trace(path, expect=FileIdentity.from_stat(st))}
        return s.sniffed[version]

    def _walk(self) -> dict[str, tuple[os.stat_result, str]]:
        """path -> (stat, format) of the candidate files now."""
        found: dict[str, tuple[os.stat_result, str]] = {}
        self.truncated = False
        try:
            root_st = os.stat(self.path)
        except OSError:
            return found  # not there (yet): a profiler creates its folder when it first writes
        root = os.path.realpath(self.path)
        if stat.S_ISREG(root_st.st_mode):
            split = split_trace_name(os.path.basename(self.path))
            if split is not None:
                found[self.path] = (root_st, split[1])
            return found
        walk = TreeWalk(self.path, exclude=self._exclude)
        skipped: set[tuple[str, str]] = set()
        for _, entry in walk:
            try:
                split = split_trace_name(entry.name)
                if split is None:
                    continue
                if entry.is_symlink():
                    real = os.path.realpath(entry.path)
                    if not real.startswith(root + os.sep):
                        self._skip(skipped, entry.path, "a symlink out of the watched folder: not read")
                        continue
                st = entry.stat()  # through an inside symlink
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):  # not a FIFO, device or socket: never opened
                found[entry.path] = (st, split[1])
            else:
                self._skip(skipped, entry.path, "not a regular file (a FIFO, device or socket): not read")
        for folder, reason in walk.skipped:
            self._skip(skipped, folder, reason)
        self._skipped = skipped
        self.truncated = walk.truncated
        return found
