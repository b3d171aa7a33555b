"""Columns mapped from files (the index store's, a parse's spill), and what keeps a reader
alive when such a file shrinks under it.

Why: a mapped page past the end of a truncated file raises SIGBUS on access, which
Python cannot catch, so one `truncate` of a cache file by anyone would kill the server.
With the native extension (`_guard`), every range mapped here is registered: a fault in
one reads as zero pages and is counted (`faults`), and the work that met it is thrown
away by its caller (`TraceService`) and done again from the trace. Without it (the
pure-Python install), `shrunk` still catches a file cut while it was idle, before the
index is read; a cut in the middle of a request is then fatal, as it always was.
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
import os
import threading
import weakref
from typing import Any, Iterable, Iterator, Optional

import numpy as np

from ..native import guard_module


def map_array(path: str) -> np.ndarray:
    """The `.npy` file at `path`, mapped read-only and guarded."""
    a = np.load(path, mmap_mode="r", allow_pickle=False)
    if isinstance(a, np.memmap):
        st = os.stat(path)
        a.file_identity = (st.st_dev, st.st_ino)  # which file `shrunk` checks, whatever takes its name later
    guard = guard_module()
    if guard is not None and isinstance(a, np.memmap) and a.nbytes:
        slot = guard.guard(a.ctypes.data, a.nbytes)
        if slot >= 0:
            weakref.finalize(a, guard.unguard, slot)  # before its mapping goes with it
    return a


def held_bytes(a: np.ndarray) -> int:
    """The process's own memory `a` holds: none for a mapped file's pages (file-backed, the
    kernel takes them back at will) or for one value broadcast to every row (a stored index's
    repeated values); its bytes otherwise."""
    if isinstance(a, np.memmap) or (a.ndim == 1 and len(a) > 1 and a.strides[0] == 0):
        return 0
    return a.nbytes


def map_bytes(path: str) -> np.ndarray:
    """The raw file at `path` as read-only uint8, mapped and guarded like `map_array`'s
    columns (its `.base` is the mapping itself: sliced as bytes, searched, given to upb)."""
    a = np.memmap(path, dtype=np.uint8, mode="r")
    st = os.stat(path)
    a.file_identity = (st.st_dev, st.st_ino)
    guard = guard_module()
    if guard is not None and a.nbytes:
        slot = guard.guard(a.ctypes.data, a.nbytes)
        if slot >= 0:
            weakref.finalize(a, guard.unguard, slot)
    return a


def map_in_place(fd: int, size: int, pad: int) -> Optional[tuple[mmap.mmap, np.ndarray]]:
    """The first `size` bytes of the open file `fd`, mapped read-only where they lie and
    guarded: the mapping (sliced as bytes) and a uint8 array over it with `pad` zero bytes
    after them, read as the same bytes read into memory with `pad` zeros joined on. Its
    pages are the file's, read when touched and taken back by the kernel: a reader that
    has walked the bytes once and then reads a few events again holds none of them.

    The zeros are the rest of the file's last page, which a mapping holds and the kernel
    fills with zeros past the file's end. So None where the last page has fewer than
    `pad` bytes past the end (one file in 4096/`pad`), where the file is not `size` bytes
    long now (a longer one's next bytes would stand where the zeros must), and without
    the guard (`_guard`): a file cut short under the mapping must not kill the process;
    with it, the pages past the cut read as zeros and `faults()` counts them.
    """
    guard = guard_module()
    if guard is None or size <= 0 or (-size) % mmap.PAGESIZE < pad:
        return None
    try:
        if os.fstat(fd).st_size != size:
            return None
        mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    exact = np.frombuffer(mm, dtype=np.uint8)
    padded = np.lib.stride_tricks.as_strided(exact, shape=(size + pad,), strides=(1,), writeable=False)
    slot = guard.guard(padded.ctypes.data, size + pad)
    if slot < 0:  # no slot left: not guarded, so not used
        del exact, padded
        mm.close()
        return None
    weakref.finalize(mm, guard.unguard, slot)  # the mapping goes with the last of its users
    return mm, padded


def unlink_scratch(*arrays: Any) -> None:
    """Remove the scratch files of mapped arrays a caller used only while making
    something else: the disk is freed once the arrays go, not when their folder does."""
    for a in arrays:
        name = getattr(a, "filename", None) if isinstance(a, np.memmap) else None
        if name:
            with contextlib.suppress(OSError):
                os.unlink(name)


# Arrays smaller than this stay in memory: a map costs a file and a page at least.
SPILL_AT_LEAST = 1 << 16

_strict = threading.local()


@contextlib.contextmanager
def spill_or_fail() -> Iterator[None]:
    """For the length of a `with` (in this thread): a write into a folder that fails (a full
    or read-only disk) raises `SpillFailed` instead of holding the arrays in memory. For
    work charged as if its rows were in files (a server's background window index): held
    in memory instead, they would be memory nobody charged."""
    before = getattr(_strict, "on", False)
    _strict.on = True
    try:
        yield
    finally:
        _strict.on = before


def spilling_strictly() -> bool:
    """Whether this thread is inside `spill_or_fail` (a thread it starts is not, unless told)."""
    return bool(getattr(_strict, "on", False))


def _memory_instead(what: str, folder: str, *written: str) -> None:
    """Where a write into `folder` failed: the files it had begun (`written`) removed, go on
    in memory, unless `spill_or_fail` is on."""
    for path in written:
        with contextlib.suppress(OSError):
            os.unlink(path)
    if getattr(_strict, "on", False):
        raise SpillFailed(f"{what} could not be written to {folder} (a full or read-only disk?)")
_names = itertools.count()


def scratch_path(folder: str, name: str) -> str:
    """A file name in `folder` no other array of this process (or another) has taken."""
    return os.path.join(folder, f"{name}-{os.getpid()}-{threading.get_ident()}-{next(_names)}.npy")


def spill(folder: Optional[str], name: str, a: np.ndarray) -> np.ndarray:
    """`a` written into `folder` and mapped from there (file-backed pages the kernel can
    take back: not the process's memory), or `a` itself when there is no folder, it is
    small, or the write fails (a full disk: held in memory, as without a folder)."""
    if folder is None or a.nbytes < SPILL_AT_LEAST:
        return a
    path = scratch_path(folder, name)
    try:
        with open(path, "xb") as f:
            np.lib.format.write_array(f, np.ascontiguousarray(a), allow_pickle=False)
        return map_array(path)
    except (OSError, ValueError):
        _memory_instead(name, folder, path)
        return a


@contextlib.contextmanager
def scratch_array(folder: Optional[str], name: str, n: int, dtype: Any) -> Iterator[np.ndarray]:
    """`n` zeros for the length of a `with`, in a file of `folder` when there is one and
    they are not small (file-backed pages the kernel can write out and take back), else
    in memory. The file is gone as soon as it is mapped: nobody else can open, cut or
    swap it, and a process that dies leaves nothing behind."""
    size = n * np.dtype(dtype).itemsize
    if folder is None or size < SPILL_AT_LEAST:
        yield np.zeros(n, dtype=dtype)
        return
    path = os.path.join(folder, f"{name}-{os.getpid()}-{threading.get_ident()}-{next(_names)}.tmp")
    try:
        with open(path, "xb+") as f:
            os.unlink(path)
            os.posix_fallocate(f.fileno(), 0, size)  # the disk taken now: a full one fails here, not in a write
            a = np.memmap(f, dtype=dtype, mode="r+", shape=(n,))
    except (OSError, ValueError):
        _memory_instead(name, folder, path)
        a = np.zeros(n, dtype=dtype)  # a full disk: in memory, as without a folder
    try:
        yield a
    finally:
        del a


def faults() -> int:
    """Faults in guarded ranges answered with zeros so far in this process (0 without the guard)."""
    guard = guard_module()
    return guard.faults() if guard is not None else 0


def shrunk(arrays: Iterable[Any]) -> Optional[str]:
    """The name of a file some mapped array of `arrays` reaches past the end of, if any (a
    file removed or replaced by another keeps its mapping whole: only a cut one is)."""
    for a in arrays:
        if not isinstance(a, np.memmap) or not a.filename:
            continue
        base = a.base if isinstance(a.base, np.memmap) else a
        try:
            st = os.stat(a.filename)
        except OSError:
            continue
        if getattr(base, "file_identity", (st.st_dev, st.st_ino)) != (st.st_dev, st.st_ino):
            continue  # another file under the name now: the mapped one is not reachable to cut by it
        if st.st_size < base.offset + base.nbytes:
            return os.path.basename(a.filename)
    return None


# ---- columns written block by block, then mapped ----------------------------------------

_NPY_HEADER = 128  # bytes reserved for a column file's `.npy` header, written once its length is known


def npy_header(dtype: Any, n: int) -> bytes:
    """A `.npy` (version 1.0) header of exactly `_NPY_HEADER` bytes for `n` values of `dtype`."""
    text = f"{{'descr': {np.dtype(dtype).str!r}, 'fortran_order': False, 'shape': ({n},), }}"
    body = text.ljust(_NPY_HEADER - 10 - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body.encode("latin1")


class SpillFailed(Exception):
    """Writing the columns to disk failed (`TableBuilder(spill_dir=...)`): not the trace's fault."""


class ColumnFiles:
    """Columns written to `.npy` files block by block, then mapped: the event table's
    (`model.table.SPILL_FILES`), a Chrome trace's event positions, prepared state made a part at
    a time (`Appended`), so none of them is held whole in memory while it is made."""

    def __init__(self, folder: str, files: dict[str, str], dtypes: dict[str, Any], what: str) -> None:
        self.folder = folder
        self.names = dict(files)
        self._dtypes = dict(dtypes)
        self.what = what
        self._files = {}
        try:
            os.makedirs(folder, exist_ok=True)
            for key, name in self.names.items():
                f = open(os.path.join(folder, name), "wb")
                self._files[key] = f
                f.write(b"\0" * _NPY_HEADER)  # the header's place
        except OSError as exc:
            self.close()
            raise SpillFailed(f"{what} could not be written to {folder}: {exc.strerror or exc}") from None

    def append(self, block: dict[str, np.ndarray]) -> None:
        try:
            for key, values in block.items():
                np.ascontiguousarray(values, dtype=self._dtypes[key]).tofile(self._files[key])
        except OSError as exc:  # a full or failing disk: the caller reads again without spilling
            self.close()
            raise SpillFailed(f"{self.what} could not be written to {self.folder}: {exc.strerror or exc}") from None

    def rewrite(self, key: str, row: int, values: np.ndarray) -> None:
        """Write `values` again over column `key` from `row` on (rows written already)."""
        f = self._files[key]
        dtype = np.dtype(self._dtypes[key])
        try:
            end = f.tell()
            f.seek(_NPY_HEADER + row * dtype.itemsize)
            np.ascontiguousarray(values, dtype=dtype).tofile(f)
            f.seek(end)
        except OSError as exc:
            self.close()
            raise SpillFailed(f"{self.what} could not be written to {self.folder}: {exc.strerror or exc}") from None

    def finish(self, n: int) -> dict[str, np.ndarray]:
        """The columns, each mapped read-only (an empty one in memory: nothing to map)."""
        out = {}
        try:
            for f in self._files.values():
                f.flush()
        except OSError as exc:
            self.close()
            raise SpillFailed(f"{self.what} could not be written to {self.folder}: {exc.strerror or exc}") from None
        for key, f in self._files.items():
            f.seek(0)
            f.write(npy_header(self._dtypes[key], n))
            f.close()
            path = os.path.join(self.folder, self.names[key])
            out[key] = (map_array(path) if n
                        else np.zeros(0, dtype=self._dtypes[key]))
        self._files = {}
        return out

    def close(self) -> None:
        for f in self._files.values():
            try:
                f.close()
            except OSError:
                pass
        self._files = {}

    def discard(self) -> None:
        """Closed and removed: what was written is not wanted (nothing is mapped yet)."""
        self.close()
        for name in self.names.values():
            try:
                os.unlink(os.path.join(self.folder, name))
            except OSError:
                pass


class Appended:
    """Arrays made part by part (a track, a chunk at a time) and wanted whole at the end:
    once they outgrow `SPILL_AT_LEAST`, written to unique files in `folder` as they come and
    mapped by `finish`, so the whole is never held in memory; in memory when small or
    without a folder. A disk that fails a write brings what it holds back into memory and
    goes on there: the arrays are the same either way."""

    def __init__(self, folder: Optional[str], dtypes: dict[str, Any], what: str, rows: Optional[int] = None) -> None:
        """`rows`: how many rows will come, when known and there is no folder: the arrays are
        then made at once and the parts written into them, so `finish` neither copies them
        again nor the process faults in a second set of pages (the slices of a 2 M-event
        table, 85 MB: ~0.1 s of a first view in a fresh process). Rows past it are kept as
        parts and joined at the end, as without it."""
        self._folder = folder
        self._what = what
        self._dtypes = {k: np.dtype(d) for k, d in dtypes.items()}
        self._parts: dict[str, list[np.ndarray]] = {k: [] for k in dtypes}
        self._held = 0  # bytes of the parts in memory
        self._n = 0  # rows in all
        self._files: Optional[ColumnFiles] = None
        self._whole: Optional[dict[str, np.ndarray]] = None  # the arrays of `rows` rows, filled from the front
        if rows is not None and folder is None:
            self._whole = {k: np.empty(rows, dtype=d) for k, d in self._dtypes.items()}

    def append(self, parts: dict[str, np.ndarray]) -> None:
        lengths = {len(v) for v in parts.values()}
        assert len(lengths) == 1 and set(parts) == set(self._dtypes), "one length, every array"
        n = lengths.pop()
        whole = self._whole
        if whole is not None and not self._held and self._n + n <= len(next(iter(whole.values()), ())):
            for k, v in parts.items():
                whole[k][self._n:self._n + n] = v
            self._n += n
            return
        if self._files is not None:
            try:
                self._files.append(parts)
                self._n += n
                return
            except SpillFailed:
                self._back_to_memory()
        for k, v in parts.items():
            a = np.asarray(v, dtype=self._dtypes[k])
            self._parts[k].append(a)
            self._held += a.nbytes
        self._n += n
        if self._folder is not None and self._held >= SPILL_AT_LEAST:
            self._to_files()

    def _to_files(self) -> None:
        """What is held so far written out; later parts follow it there."""
        folder, self._folder = self._folder, None  # one try: a disk that fails stays in memory
        assert folder is not None
        names = {k: os.path.basename(scratch_path(folder, k)) for k in self._dtypes}
        try:
            files = ColumnFiles(folder, names, self._dtypes, self._what)
            files.append({k: np.concatenate(v) for k, v in self._parts.items()})
        except SpillFailed:
            _memory_instead(self._what, folder, *(os.path.join(folder, name) for name in names.values()))
            return
        self._files = files
        self._parts = {k: [] for k in self._dtypes}
        self._held = 0

    def _back_to_memory(self) -> None:
        files, self._files = self._files, None
        assert files is not None
        _memory_instead(files.what, files.folder)
        for k, name in files.names.items():
            path = os.path.join(files.folder, name)
            try:
                with open(path, "rb") as f:
                    f.seek(_NPY_HEADER)
                    back = np.fromfile(f, dtype=self._dtypes[k], count=self._n)
                if len(back) != self._n:  # the disk lost what it had taken: nothing to go on from
                    raise SpillFailed(f"{files.what} could not be read back from {files.folder}")
                self._parts[k] = [back]
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(path)

    def finish(self) -> dict[str, np.ndarray]:
        if self._files is not None:
            try:
                return self._files.finish(self._n)
            except SpillFailed:
                self._back_to_memory()
        whole, self._whole = self._whole, None
        if whole is not None:
            filled = self._n - sum(len(p) for p in next(iter(self._parts.values()), []))
            if not self._held and filled == len(next(iter(whole.values()), ())):
                return whole
            for k in self._parts:
                self._parts[k].insert(0, whole[k][:filled])
        return {k: (np.concatenate(v) if v else np.zeros(0, dtype=self._dtypes[k])) for k, v in self._parts.items()}
