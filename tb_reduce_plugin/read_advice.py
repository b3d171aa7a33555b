"""How the kernel should read mapped index files while a narrow window is planned.

Why: a page of a mapped file that is not in memory is read on first touch, and Linux
reads `read_ahead_kb` around it (8 MiB on this project's VMs, 128 KiB on many desktops)
in case the next touches follow. A narrow window's plan after a restart touches pages
at random: its searches bisect orders and the times read through them, ~20 pages a
search, each far from the last. On an 8 GiB Kineto trace's index with the page cache
cold, a 0.1 % window took ~100 such faults and read 660-680 MB to use ~10 MB (0.41-0.50 s).
Advised `MADV_RANDOM` for the plan, the same window read 10-12 MB in ~1,000 one-page
faults (0.11-0.12 s).

The same advice makes a long sequential read slow (a page a fault: a 10 % window took
2.3-2.5 s against 1.0-1.1 s), so it is given only for the searches and for plans whose
rows are few (`random_reads` and `Advised.leave`), and taken back after: the whole-table
passes of queries and plans keep the kernel's read-ahead. Mappings are shared by every
request of a process, so the advice is counted per mapped range: it goes back to normal
when the last plan that asked for it is done. It only changes what is read ahead, never
what a read returns (a no-op where `madvise` is not to be had).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import sys
import threading
from typing import Any, Iterable, Iterator, Optional

import numpy as np

MADV_NORMAL, MADV_RANDOM, MADV_WILLNEED = 0, 1, 3  # Linux's values (sys/mman.h)
# `will_need` asks for at most this many runs of pages (a syscall each), or this many bytes.
MAX_RUNS = 1 << 14
MAX_PREFETCH_BYTES = 256 << 20
_PAGE = mmap.PAGESIZE

_libc: Optional[Any] = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    except (OSError, AttributeError):  # no libc to call: no advice, as elsewhere
        _libc = None

_lock = threading.Lock()
_users: dict[tuple[int, int], int] = {}  # page-aligned range -> plans advising it random now


def _mapping(a: Any) -> Optional[mmap.mmap]:
    """The file mapping `a` is (a view of), or None (memory of the process's own)."""
    while a is not None:
        if isinstance(a, mmap.mmap):
            return a
        a = getattr(a, "_mmap", None) if isinstance(a, np.memmap) and a.base is None else getattr(a, "base", None)
    return None


def _ranges(arrays: Iterable[Any]) -> list[tuple[int, int]]:
    """The address ranges of the whole mappings under the mapped arrays among `arrays`,
    each once (views of one mapping share its count)."""
    found = set()
    for a in arrays:
        m = _mapping(a) if isinstance(a, np.ndarray) else None
        if m is not None and not m.closed and len(m):
            at = np.frombuffer(m, dtype=np.uint8).ctypes.data  # a view: no copy; mappings start on a page
            found.add((at, at + -(-len(m) // _PAGE) * _PAGE))
    return sorted(found)


def _advise(ranges: list[tuple[int, int]], advice: int) -> None:
    if _libc is None:
        return
    for lo, hi in ranges:
        _libc.madvise(lo, hi - lo, advice)  # an error (a range unmapped meanwhile) changes nothing read


class Advised:
    """The random-read advice a plan holds (`random_reads`); `leave` gives it back early."""

    def __init__(self, ranges: list[tuple[int, int]]) -> None:
        self._ranges: Optional[list[tuple[int, int]]] = ranges

    def leave(self) -> None:
        """Back to the kernel's read-ahead for this plan's reads from now on (a plan that
        found many rows to read: they lie in runs a page at a time would read slowly)."""
        with _lock:
            ranges, self._ranges = self._ranges, None
            if ranges is None:
                return
            back = []
            for r in ranges:
                n = _users.get(r, 0) - 1
                if n > 0:
                    _users[r] = n
                else:
                    _users.pop(r, None)
                    back.append(r)
            _advise(back, MADV_NORMAL)


@contextlib.contextmanager
def random_reads(arrays: Iterable[Any]) -> Iterator[Advised]:
    """For the length of a `with`: the mapped arrays among `arrays` read a page at a
    touch, without read-ahead (counted, so concurrent plans over the same mappings
    share the advice)."""
    ranges = _ranges(arrays)
    with _lock:
        fresh = [r for r in ranges if _users.get(r, 0) == 0]
        for r in ranges:
            _users[r] = _users.get(r, 0) + 1
        _advise(fresh, MADV_RANDOM)
    advised = Advised(ranges)
    try:
        yield advised
    finally:
        advised.leave()


def will_need(a: np.ndarray, rows: np.ndarray) -> bool:
    """Ask the kernel to read, at once and in the background, the pages of the mapped
    1-d array `a` that hold `a[rows]`, run by run: a gather of a few rows then waits for
    those pages only, in one round of I/O, instead of a fault after another. Only while
    `a` is advised random (`random_reads`): a wide window's rows lie in long runs the
    kernel's read-ahead reads in big pieces (asked for in ~16 k small runs, an 8 GiB
    trace's cold 10 % window took 1.8-2.0 s against 1.1-1.2). False where nothing was
    asked: `a` is not mapped or not advised random, there is no `madvise`, or the runs
    are more than `MAX_RUNS` or `MAX_PREFETCH_BYTES`."""
    if _libc is None or not len(rows) or a.ndim != 1 or not a.nbytes:
        return False
    ranges = _ranges([a])
    with _lock:
        if not ranges or ranges[0] not in _users:  # read with read-ahead: its runs are the kernel's to read
            return False
    at = np.asarray(rows, dtype=np.int64) * a.strides[0] + a.ctypes.data
    pages = at // _PAGE
    pages = np.concatenate((pages, (at + a.itemsize - 1) // _PAGE))  # an item across a page's end
    pages = np.unique(pages)
    cut = np.flatnonzero(np.diff(pages) > 2) + 1  # runs, with gaps of two pages read through
    first, last = pages[np.concatenate(([0], cut))], pages[np.concatenate((cut - 1, [len(pages) - 1]))]
    if len(first) > MAX_RUNS or int((last - first + 1).sum()) * _PAGE > MAX_PREFETCH_BYTES:
        return False
    for lo, hi in zip(first.tolist(), last.tolist()):
        _libc.madvise(lo * _PAGE, (hi - lo + 1) * _PAGE, MADV_WILLNEED)
    return True


def will_need_span(a: np.ndarray, lo: int, hi: int) -> bool:
    """`will_need` of the rows lo..hi-1 of `a` (one run)."""
    if hi <= lo:
        return False
    return will_need(a, np.array([lo, hi - 1], dtype=np.int64)) if hi - lo <= 2 else \
        will_need(a, np.arange(lo, hi, max(1, _PAGE // max(1, a.strides[0] if a.ndim == 1 else 1)), dtype=np.int64))


def advised_random() -> int:
    """How many mapped ranges are advised random now (for tests)."""
    with _lock:
        return len(_users)
