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
2.3-2.5 s against 1.0-1.1 s), so it is given for a window's searches and for the plan of
a narrow window (`random_reads`, `Advised.leave`), whose rows are then asked for at once
when a sample of their pages is not in memory (`cold`, `will_need`); the whole-table
passes of queries and plans, and a wide window's rows, keep the kernel's read-ahead.
Mappings are shared by every request of a process, so the advice is counted per mapping:
it goes back to normal when the last plan that asked for it is done. It only changes
what is read ahead, never what a read returns (a no-op where `madvise` is not to be had).
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
MAX_RUNS = 1 << 12
MAX_PREFETCH_BYTES = 256 << 20
_GAP_PAGES = 8  # pages between two wanted ones read through rather than asked for apart
_PAGE = mmap.PAGESIZE

_libc: Optional[Any] = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        _libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
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
        try:
            if m is not None and not m.closed and len(m):
                at = np.frombuffer(m, dtype=np.uint8).ctypes.data  # a view: no copy; mappings start on a page
                found.add((at, at + -(-len(m) // _PAGE) * _PAGE))
        except (ValueError, BufferError):  # closed meanwhile (its index let go): nothing to advise
            continue
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
    1-d array `a` that hold `a[rows]` and are not in memory (`mincore`), run by run: a
    gather of a few rows then waits for those pages only, in one round of I/O, instead
    of a fault after another, each with the read-ahead around it (a page asked for is
    there when touched: no read-ahead starts). For the few rows of a narrow window: a
    wide window's rows lie in long runs the kernel's read-ahead reads in big pieces
    (asked for in ~16 k small runs, an 8 GiB trace's cold 10 % window took 1.8-2.0 s
    against 1.1-1.2). False where nothing could be asked: `a` is not mapped, there is no
    `madvise`, or the runs are more than `MAX_RUNS` or `MAX_PREFETCH_BYTES`."""
    if _libc is None or not len(rows) or a.ndim != 1 or not a.nbytes:
        return False
    if _mapping(a) is None:
        return False
    at = np.asarray(rows, dtype=np.int64) * a.strides[0] + a.ctypes.data
    pages = at // _PAGE
    if a.ctypes.data % a.itemsize or _PAGE % a.itemsize:  # an item may run past its page's end
        pages = np.concatenate((pages, (at + a.itemsize - 1) // _PAGE))
    if len(pages) > 1 and not bool(np.all(pages[1:] >= pages[:-1])):
        pages = np.sort(pages)
    pages = pages[np.concatenate(([True], pages[1:] != pages[:-1]))]  # each page once, in order
    resident = _resident(pages)
    if resident is None:
        return False
    pages = pages[~resident]  # in memory already (a warm zoom): nothing to ask for
    if not len(pages):
        return True
    first, last = _runs(pages)
    if len(first) > MAX_RUNS or int((last - first + 1).sum()) * _PAGE > MAX_PREFETCH_BYTES:
        return False
    for lo, hi in zip(first.tolist(), last.tolist()):
        _libc.madvise(lo * _PAGE, (hi - lo + 1) * _PAGE, MADV_WILLNEED)
    return True


# A `mincore` costs about this many pages of its range a call (~1 µs a call from Python, ~75 ns
# a page looked at on this project's VMs).
_PAGES_A_CALL = 16


def _runs(pages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first and last page of each run of `pages` (sorted, distinct, not empty), gaps of
    up to `_GAP_PAGES` read through."""
    cut = np.flatnonzero(np.diff(pages) > _GAP_PAGES) + 1
    return pages[np.concatenate(([0], cut))], pages[np.concatenate((cut - 1, [len(pages) - 1]))]


def _resident(pages: np.ndarray) -> Optional[np.ndarray]:
    """Whether each of `pages` (sorted, distinct page numbers of a mapping) is in memory, by
    `mincore` over each run of them (gaps of up to `_GAP_PAGES` looked at through), or over
    their whole span where that costs less; None where a call fails. Why runs: a narrow
    window's rows of a column lie in a few runs of pages far apart (37 pages in 3 runs over
    a span of 28 k pages, the slices of a 0.1 % window of an 8 GiB trace); looking at the
    span cost ~2 ms a column, twelve columns a window."""
    lo = int(pages[0])
    span = int(pages[-1]) - lo + 1
    first, last = _runs(pages)
    if len(first) * _PAGES_A_CALL >= span:
        runs = [(lo, span)]
    else:
        runs = [(a, b - a + 1) for a, b in zip(first.tolist(), last.tolist())]
    vec = np.zeros(span, dtype=np.uint8)
    for a, n in runs:
        if _libc.mincore(a * _PAGE, n * _PAGE, vec[a - lo:].ctypes.data) != 0:
            return None
    return (vec[pages - lo] & 1) == 1


def cold(a: np.ndarray, rows: np.ndarray, sample: int = 16) -> bool:
    """Whether some of `sample` rows of `rows` (evenly spread) lie on a page of the mapped
    `a` not in memory: a cheap look (a `mincore` a page) before asking for pages, which a
    warm zoom need not pay for (sorting and looking up every page of its rows cost a warm
    1 % window of an 8 GiB trace ~50 ms)."""
    if _libc is None or not len(rows) or a.ndim != 1 or not a.nbytes or _mapping(a) is None:
        return False
    picks = np.asarray(rows, dtype=np.int64)[np.linspace(0, len(rows) - 1, min(sample, len(rows))).astype(np.int64)]
    vec = np.zeros(1, dtype=np.uint8)
    for page in ((picks * a.strides[0] + a.ctypes.data) // _PAGE).tolist():
        if _libc.mincore(page * _PAGE, _PAGE, vec.ctypes.data) == 0 and not vec[0] & 1:
            return True
    return False


def in_memory(a: np.ndarray, row: int) -> bool:
    """Whether the page of the mapped 1-d array `a` holding `a[row]` is in memory (True where
    `a` is not mapped or nothing can tell): one `mincore`, for a search's look at its first
    step (`sorting.KeysThrough`), cheaper than `cold`'s sample."""
    if _libc is None or a.ndim != 1 or not 0 <= row < len(a) or _mapping(a) is None:
        return True
    vec = np.zeros(1, dtype=np.uint8)
    page = (row * a.strides[0] + a.ctypes.data) // _PAGE
    return _libc.mincore(page * _PAGE, _PAGE, vec.ctypes.data) != 0 or bool(vec[0] & 1)


def ask_for(a: np.ndarray, rows: np.ndarray) -> None:
    """Ask the kernel for the pages of the mapped 1-d array `a` that hold `a[rows]`, a call
    a page, without looking which are in memory first (`will_need` does, for a window's many
    rows): for the few rows of a search's step, found out of memory (`in_memory`), whose gather would
    otherwise wait for one page after another. Nothing where `a` is not mapped."""
    if _libc is None or not len(rows) or a.ndim != 1 or not a.nbytes or _mapping(a) is None:
        return
    pages = np.unique((np.asarray(rows, dtype=np.int64) * a.strides[0] + a.ctypes.data) // _PAGE)
    for page in pages.tolist():
        _libc.madvise(page * _PAGE, _PAGE, MADV_WILLNEED)


def advised_random() -> int:
    """How many mapped ranges are advised random now (for tests)."""
    with _lock:
        return len(_users)
