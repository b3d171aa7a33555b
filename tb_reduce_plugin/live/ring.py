"""The raw ring: the drive recorder's recent raw trace windows, bounded in bytes on disk.

The sidecar keeps every window reduced, and the raw windows of the last minutes here,
so that when a trigger fires the raw evidence around it still exists (`preserve`).
The cap (`cap_bytes`) is a disk budget, so it holds at every moment, not only after
an add: room is made (oldest entries evicted first) BEFORE a window is copied in, and
a window that alone is over the cap is refused and the ring left as it was. A window
whose copy then fails has cost the entries evicted for it; that is the price of never
exceeding the cap.

On disk, in `directory` (one writer: one sidecar process owns a ring):

- `<seq>-<name>`: a window's bytes (`seq` ten digits, `name` the original file name
  made safe, its suffix kept so the file still reads as a trace);
- `<seq>.ring.json`: its record (sequence number, wall-clock capture interval
  [t0, t1] in seconds since the epoch, trace-time interval if known, original name,
  bytes, the caller's `meta`). The record is the commit: it is written (temp file,
  fsync, rename) only after the data file is complete under its final name, so an
  entry either exists whole or not at all;
- `.ring-tmp-*`: temp files of an add in progress. Nothing is ever visible under a
  final name before it is complete.

The cap counts what the files take on disk, not their bytes: each file (data and
record alike) counts as its size rounded up to whole blocks of the ring's filesystem
(`os.statvfs` `f_frsize`, 4096 on ext4 and tmpfs), since that is what a file holds
however few bytes it has. Counted in bytes, a 1 MB ring of small windows held 2,548
files taking 11 MB on disk; counted in blocks it takes at most its cap (the folder's
own entries aside). The rounding is known before a file is written, so the cap still
holds at every moment.

The ring counts a record's blocks with its data's. A new `RawRing` on an existing
directory (a restarted sidecar) picks its entries up: sequence numbers continue, temp
files of a killed process are removed, and so are data files without a record (killed
between the two renames) and records whose data is missing or of the wrong size; then
the cap is enforced. Files that are not the ring's are left alone.

Errors of the filesystem (a full disk, a read-only folder) are `RingError`s: one line
naming what failed, for the sidecar to log while training goes on; nothing
half-written stays behind.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
import secrets
import shutil
import stat
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, TypeVar, Union

from ..errors import TraceError
from ..formats.sources import FileIdentity, open_regular

log = logging.getLogger(__name__)
T = TypeVar("T")

TEMP_PREFIX = ".ring-tmp-"
RECORD_SUFFIX = ".ring.json"
_DATA = re.compile(r"^(\d{10})-.")
_RECORD = re.compile(r"^(\d{10})\.ring\.json$")
_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_NAME_MAX = 120  # characters of the original name kept in the data file's name (its end: the suffix)
_CHUNK = 1 << 20
_VERSION = 1
DEFAULT_BLOCK = 4096  # when the filesystem does not say what its block is
MAX_BLOCK = 1 << 20  # a larger reported block is no allocation unit (some network filesystems report their I/O size)

PathLike = Union[str, "os.PathLike[str]"]


class RingError(OSError):
    """A filesystem failure of the ring, as one line (`str(err)`); `errno` and
    `filename` as the OS gave them (`errno.ENOSPC` for a full disk)."""

    def __init__(self, message: str, err: Optional[int] = None, filename: Optional[str] = None) -> None:
        super().__init__(err, " ".join(str(message).split()), filename)

    def __str__(self) -> str:
        return str(self.strerror)


@dataclass
class RingEntry:
    """One raw window in the ring (or, with `kept` False, one the ring refused, and why)."""

    seq: int
    t0: float  # wall-clock capture interval, seconds since the epoch
    t1: float
    name: str  # the original file name
    bytes: int  # the window's bytes
    path: str  # its file in the ring ("" when not kept)
    trace_us: Optional[tuple[float, float]] = None  # trace-time interval, when known
    meta: dict = field(default_factory=dict)
    record_bytes: int = 0  # its record's bytes (counted towards the cap too)
    kept: bool = True
    note: str = ""
    block_bytes: int = 1  # the filesystem's block: each file takes whole blocks

    @property
    def disk_bytes(self) -> int:
        """What the data and record files take on disk: each rounded up to whole blocks."""
        return _on_disk(self.bytes, self.block_bytes) + _on_disk(self.record_bytes, self.block_bytes)

    @property
    def record_path(self) -> str:
        return os.path.join(os.path.dirname(self.path), _record_name(self.seq)) if self.path else ""

    def overlaps(self, t_from: float, t_to: float) -> bool:
        return self.t0 <= t_to and self.t1 >= t_from

    def to_json(self) -> dict[str, Any]:
        return {"version": _VERSION, "seq": self.seq, "t0": self.t0, "t1": self.t1,
                "trace_us": list(self.trace_us) if self.trace_us is not None else None, "name": self.name,
                "file": os.path.basename(self.path), "bytes": self.bytes, "meta": self.meta}


def _on_disk(size: int, block: int) -> int:
    """`size` bytes rounded up to whole `block`s (an empty file takes none)."""
    return -(-size // block) * block


def _block_size(directory: str) -> int:
    """The allocation unit of `directory`'s filesystem (`f_frsize`, else `f_bsize`); 4096 when
    the system does not say (the common block size: an estimate that rarely undercounts)."""
    try:
        st = os.statvfs(directory)
    except (OSError, AttributeError):  # AttributeError: no statvfs on this system
        return DEFAULT_BLOCK
    block = int(st.f_frsize or st.f_bsize or 0)
    return block if 0 < block <= MAX_BLOCK else DEFAULT_BLOCK


def _record_name(seq: int) -> str:
    return f"{seq:010d}{RECORD_SUFFIX}"


def _data_name(seq: int, name: str) -> str:
    safe = _SAFE.sub("_", name).lstrip(".")[-_NAME_MAX:] or "window"
    return f"{seq:010d}-{safe}"


def _record_text(entry: RingEntry) -> bytes:
    return (json.dumps(entry.to_json(), allow_nan=False, sort_keys=True) + "\n").encode()


def _write_all(fd: int, data: Union[bytes, memoryview]) -> None:
    """Every byte of `data` to `fd` (a short write continues; an error raises)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:  # nothing more can be done; the next start retries
        log.warning("raw ring: cannot remove %s: %s", path, exc.strerror or exc)


def _message(what: str, exc: OSError) -> str:
    reason = "disk full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
    return f"{what}: {reason}"


class RawRing:
    """Raw trace windows in `directory`, at most `cap_bytes` on disk (see the module docstring)."""

    def __init__(self, directory: PathLike, cap_bytes: int, *, durable: bool = True) -> None:
        if isinstance(cap_bytes, bool) or not isinstance(cap_bytes, int) or cap_bytes <= 0:
            raise ValueError(f"the ring's cap must be a whole number of bytes above 0, not {cap_bytes!r}")
        self.directory = os.fspath(directory)
        self.cap_bytes = cap_bytes
        self.durable = durable  # fsync before each rename: an entry survives a power cut whole, or not at all
        self.evicted = 0  # entries evicted since this object was made
        self._lock = threading.RLock()
        self._entries: list[RingEntry] = []
        self._total = 0
        self._next_seq = 0
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as exc:
            raise RingError(_message(f"cannot create the raw ring folder {self.directory}", exc), exc.errno,
                            self.directory) from None
        self.block_bytes = _block_size(self.directory)  # each file counts as whole blocks of this
        self._recover()

    # ---- reading -------------------------------------------------------------------

    def entries(self) -> list[RingEntry]:
        """The entries, oldest first."""
        with self._lock:
            return list(self._entries)

    @property
    def total_bytes(self) -> int:
        """Bytes on disk of the entries (data and records, each in whole blocks); never over `cap_bytes`."""
        return self._total

    def __len__(self) -> int:
        return len(self._entries)

    # ---- adding --------------------------------------------------------------------

    def add(self, path: PathLike, t0: float, t1: float, move: bool = False, meta: Optional[Mapping[str, Any]] = None,
            *, trace_us: Optional[tuple[float, float]] = None, expect: Optional[FileIdentity] = None) -> RingEntry:
        """Put the window `path` (captured from `t0` to `t1`) into the ring; evict the oldest
        entries to make room first.

        `move`: rename it in (copy and remove it when on another filesystem) instead of
        copying. Returns the entry; `kept` False (and `note` saying why, also logged)
        when the window alone is over the cap: then the ring and `path` are unchanged.
        A filesystem failure raises `RingError`; then nothing of the window is in the
        ring, and a moved `path` is put back where it was.

        `expect`: the identity the caller's listing saw (`Ready.identity()`). The path is
        opened without blocking and the open descriptor checked: a FIFO, or anything but
        the listed file (swapped for a symlink out of the watched folder, replaced), is a
        `RingError`, so nothing from outside the watched folder is ever copied in.
        """
        src = os.fspath(path)
        t0, t1 = float(t0), float(t1)
        if not (math.isfinite(t0) and math.isfinite(t1) and t0 <= t1):
            raise ValueError(f"the capture interval must be finite with t0 <= t1, not [{t0}, {t1}]")
        if trace_us is not None:
            trace_us = (float(trace_us[0]), float(trace_us[1]))
        name = os.path.basename(src)
        meta_doc = dict(meta or {})
        try:
            json.dumps(meta_doc, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"meta must be JSON (finite numbers, strings, lists, dicts): {exc}") from None
        with self._lock:
            try:  # non-blocking, and the descriptor's fstat decides: no FIFO hangs it, no swap fools it
                f, st = open_regular(src, expect=expect)
            except TraceError as exc:
                raise RingError(f"cannot read the trace window {name}: {exc}", errno.EINVAL, src) from None
            with f:
                return self._add(f.fileno(), src, st.st_size, name, t0, t1, move, meta_doc, trace_us)

    def _add(self, fd: int, src: str, size: int, name: str, t0: float, t1: float, move: bool, meta: dict,
             trace_us: Optional[tuple[float, float]]) -> RingEntry:
        seq = self._next_seq
        final = os.path.join(self.directory, _data_name(seq, name))
        entry = RingEntry(seq, t0, t1, name, size, final, trace_us, meta, block_bytes=self.block_bytes)
        entry.record_bytes = len(_record_text(entry))
        if not self._make_room(entry.disk_bytes):
            note = (f"raw window {name} ({entry.disk_bytes} bytes on disk with its record) is over the ring's cap "
                    f"of {self.cap_bytes} bytes; not kept")
            log.warning("raw ring: %s", note)
            return RingEntry(-1, t0, t1, name, size, "", trace_us, meta, entry.record_bytes, kept=False, note=note)
        self._next_seq += 1  # never reused in this process, even when the add fails
        moved = False
        try:
            if move:
                moved = self._rename_in(src, final)
            if moved:
                actual = os.stat(final).st_size  # a writer may have appended since the fstat
            else:
                actual = self._copy_in(fd, size, final)
            if actual != entry.bytes:
                entry.bytes = actual
                entry.record_bytes = len(_record_text(entry))
                if not self._make_room(entry.disk_bytes):
                    raise _Refused()
            self._write_file(os.path.join(self.directory, _record_name(seq)), _record_text(entry))
        except _Refused:
            self._undo(src, final, moved)
            note = f"raw window {name} grew to {entry.bytes} bytes while added, over the ring's cap; not kept"
            log.warning("raw ring: %s", note)
            return RingEntry(-1, t0, t1, name, entry.bytes, "", trace_us, meta, entry.record_bytes, kept=False, note=note)
        except OSError as exc:
            self._undo(src, final, moved)
            raise RingError(_message(f"cannot add the trace window {name} to the raw ring {self.directory}", exc),
                            exc.errno, self.directory) from None
        if move and not moved:  # copied across filesystems: the move completes by removing the source
            _unlink(src)
        self._entries.append(entry)
        self._total += entry.disk_bytes
        return entry

    def _make_room(self, need: int) -> bool:
        """Evict the oldest entries until `need` more bytes fit; False (nothing evicted) if they never can."""
        if need > self.cap_bytes:
            return False
        while self._entries and self._total + need > self.cap_bytes:
            self._evict(self._entries[0])
        return True

    def _evict(self, entry: RingEntry) -> None:
        # The record goes first: a data file without a record is no entry (and a restart removes it).
        _unlink(entry.record_path)
        _unlink(entry.path)
        self._entries.remove(entry)
        self._total -= entry.disk_bytes
        self.evicted += 1
        log.debug("raw ring: evicted window %d (%s, %d bytes)", entry.seq, entry.name, entry.disk_bytes)

    def _rename_in(self, src: str, final: str) -> bool:
        """Rename `src` to `final`; False when they are on different filesystems (copy instead)."""
        try:
            os.rename(src, final)
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                return False
            raise
        return True

    def _undo(self, src: str, final: str, moved: bool) -> None:
        if moved:
            try:
                os.rename(final, src)
                return
            except OSError as exc:
                log.warning("raw ring: cannot put %s back at %s: %s", final, src, exc.strerror or exc)
        _unlink(final)

    def _temp(self, directory: str) -> tuple[int, str]:
        while True:
            tmp = os.path.join(directory, f"{TEMP_PREFIX}{secrets.token_hex(8)}")
            try:
                return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
            except FileExistsError:
                continue

    def _copy_in(self, src_fd: int, size: int, final: str) -> int:
        """Copy at most `size` bytes of `src_fd` (from its start) to `final`, via a temp file."""
        return self._atomic(final, lambda out: _copy_fd(src_fd, out, size))

    def _write_file(self, final: str, data: bytes) -> None:
        self._atomic(final, lambda out: _write_all(out, data))

    def _atomic(self, final: str, fill: Callable[[int], T]) -> T:
        """`final` written whole or not at all: `fill` writes a temp file beside it (synced
        when durable), which then replaces it; on any failure the temp file goes."""
        out, tmp = self._temp(os.path.dirname(final))
        try:
            try:
                result = fill(out)
                if self.durable:
                    os.fsync(out)
            finally:
                os.close(out)
            os.replace(tmp, final)
        except BaseException:
            _unlink(tmp)
            raise
        return result

    # ---- preserving ----------------------------------------------------------------

    def preserve(self, t_from: float, t_to: float, dest_dir: PathLike,
                 files: Optional[Mapping[str, bytes]] = None) -> list[str]:
        """Copy every entry captured (partly) within [t_from, t_to] into `dest_dir`, a new folder.

        Each window's data and record are hard-linked (copied when that fails: another
        filesystem), so evicting them from the ring later removes nothing preserved,
        and the copies do not count towards the cap. `files` ({name: bytes}, e.g.
        `anomaly.json`) are written beside them. The folder is built under a temp name
        beside `dest_dir` and renamed, so it appears complete or not at all; an
        existing `dest_dir` is refused. Returns the preserved data files' paths,
        oldest first.
        """
        dest = os.fspath(dest_dir)
        parent = os.path.dirname(os.path.abspath(dest))
        for fname in files or {}:
            if fname != os.path.basename(fname) or fname in ("", ".", "..") or fname.startswith(TEMP_PREFIX):
                raise ValueError(f"preserve: {fname!r} is not a plain file name")
        with self._lock:
            chosen = [e for e in self._entries if e.overlaps(t_from, t_to)]
            if os.path.lexists(dest):
                raise RingError(f"cannot preserve raw windows into {dest}: it exists already", errno.EEXIST, dest)
            tmp = ""
            try:
                os.makedirs(parent, exist_ok=True)
                tmp = self._temp_dir(parent)
                for e in chosen:
                    for path in (e.path, e.record_path):
                        self._link_or_copy(path, os.path.join(tmp, os.path.basename(path)))
                for fname, data in (files or {}).items():
                    self._write_file(os.path.join(tmp, fname), data)
                if self.durable:
                    _fsync_dir(tmp)
                os.rename(tmp, dest)
            except OSError as exc:
                if tmp:
                    shutil.rmtree(tmp, ignore_errors=True)
                raise RingError(_message(f"cannot preserve raw windows into {dest}", exc), exc.errno, dest) from None
        return [os.path.join(dest, os.path.basename(e.path)) for e in chosen]

    def _temp_dir(self, parent: str) -> str:
        while True:
            tmp = os.path.join(parent, f"{TEMP_PREFIX}{secrets.token_hex(8)}")
            try:
                os.mkdir(tmp, 0o777)
                return tmp
            except FileExistsError:
                continue

    def _link_or_copy(self, src: str, dst: str) -> None:
        try:
            os.link(src, dst)
            return
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP,
                                 errno.EACCES):
                raise
        fd = os.open(src, os.O_RDONLY)
        try:
            out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            try:
                _copy_fd(fd, out, os.fstat(fd).st_size)
                if self.durable:
                    os.fsync(out)
            finally:
                os.close(out)
        finally:
            os.close(fd)

    # ---- restart -------------------------------------------------------------------

    def _recover(self) -> None:
        """Pick up the entries a previous process left (see the module docstring)."""
        try:
            names = os.listdir(self.directory)
        except OSError as exc:
            raise RingError(_message(f"cannot read the raw ring folder {self.directory}", exc), exc.errno,
                            self.directory) from None
        seen_seq = -1
        records: dict[int, str] = {}
        data: dict[str, int] = {}
        for n in names:
            path = os.path.join(self.directory, n)
            if n.startswith(TEMP_PREFIX):  # an add that a killed process never finished
                log.info("raw ring: removing %s, left by an interrupted add", n)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    _unlink(path)
            elif m := _RECORD.match(n):
                records[int(m.group(1))] = n
                seen_seq = max(seen_seq, int(m.group(1)))
            elif m := _DATA.match(n):
                data[n] = int(m.group(1))
                seen_seq = max(seen_seq, int(m.group(1)))
        self._next_seq = seen_seq + 1
        kept_data: set[str] = set()
        for seq in sorted(records):
            entry = self._load(seq, records[seq], data)
            if entry is None:
                log.warning("raw ring: dropping damaged entry %s", records[seq])
                _unlink(os.path.join(self.directory, records[seq]))
                continue
            kept_data.add(os.path.basename(entry.path))
            self._entries.append(entry)
            self._total += entry.disk_bytes
        for n in data:
            if n not in kept_data:  # killed between the data's rename and its record's
                log.info("raw ring: removing %s, which has no record", n)
                _unlink(os.path.join(self.directory, n))
        while self._entries and self._total > self.cap_bytes:
            self._evict(self._entries[0])

    def _load(self, seq: int, record: str, data: Mapping[str, int]) -> Optional[RingEntry]:
        path = os.path.join(self.directory, record)
        try:
            with open(path, "rb") as f:
                raw = f.read(1 << 20)
            doc = json.loads(raw)
            file = doc["file"]
            if not (isinstance(file, str) and data.get(file) == seq and doc["seq"] == seq):
                return None
            st = os.lstat(os.path.join(self.directory, file))
            if not stat.S_ISREG(st.st_mode) or st.st_size != doc["bytes"]:
                return None
            tr = doc.get("trace_us")
            trace_us = (float(tr[0]), float(tr[1])) if isinstance(tr, list) and len(tr) == 2 else None
            meta = doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
            return RingEntry(seq, float(doc["t0"]), float(doc["t1"]), str(doc["name"]), int(doc["bytes"]),
                             os.path.join(self.directory, file), trace_us, meta, record_bytes=len(raw),
                             block_bytes=self.block_bytes)
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return None


class _Refused(Exception):
    """A moved window turned out over the cap (it grew while being added)."""


def _copy_fd(src: int, dst: int, size: int) -> int:
    """Copy up to `size` bytes from the start of `src` to `dst`; the bytes copied."""
    done = 0
    while done < size:
        chunk = os.pread(src, min(_CHUNK, size - done), done)
        if not chunk:
            break
        _write_all(dst, chunk)
        done += len(chunk)
    return done


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems cannot fsync a folder: the files are synced already
        pass
    finally:
        os.close(fd)

