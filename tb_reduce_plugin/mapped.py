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
import os
import threading
import weakref
from typing import Any, Iterable, Iterator, Optional

import numpy as np

from .native import guard_module


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


# Arrays smaller than this stay in memory: a map costs a file and a page at least.
SPILL_AT_LEAST = 1 << 16
_names = itertools.count()


def spill(folder: Optional[str], name: str, a: np.ndarray) -> np.ndarray:
    """`a` written into `folder` and mapped from there (file-backed pages the kernel can
    take back: not the process's memory), or `a` itself when there is no folder, it is
    small, or the write fails (a full disk: held in memory, as without a folder)."""
    if folder is None or a.nbytes < SPILL_AT_LEAST:
        return a
    path = os.path.join(folder, f"{name}-{os.getpid()}-{threading.get_ident()}-{next(_names)}.npy")
    try:
        with open(path, "xb") as f:
            np.lib.format.write_array(f, np.ascontiguousarray(a), allow_pickle=False)
        return map_array(path)
    except (OSError, ValueError):
        try:
            os.unlink(path)
        except OSError:
            pass
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
        try:
            os.unlink(path)
        except OSError:
            pass
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
