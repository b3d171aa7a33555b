"""The memory a process has promised not to exceed, as a ledger every heavy step charges.

Why a ledger: `--tb_reduce_memory_mb` (and the CLI's `--max-memory-mb`) is a promise
about everything tb-reduce holds — parses in progress, parsed indexes kept for
zooming, concurrent reductions, response buffers. numpy and upb allocate outside
Python's view, so nothing measures this for us: each step charges what it is about
to hold (an estimate measured per event or per byte, never below reality) *before*
allocating it, and gives it back when it lets go. A parse therefore stops with a
clear error the moment its trace turns out to need more than was promised, instead
of growing until the kernel kills the server.

A charge that does not fit first asks the reclaimers (the index cache) to drop what
is idle. If the task alone needs more than the whole budget, it fails with
`OverBudget` (a 413: this trace cannot be served within the promise); if other
tasks hold the rest, with `BudgetBusy` (a 503: try again when they are done).

Accounts are per task: `with budget.account("parse x") as acct: acct.charge(n)`
gives everything back on exit, whatever happens. A task whose result outlives it (a
parsed index) keeps its account open and ties its closing to the result's lifetime
(`keep_until_collected`), so memory is counted until it is really freed — not when
a cache forgets it while a request still holds it.
"""

from __future__ import annotations

import ctypes
import threading
import time
import weakref
from typing import Callable, Optional

from .errors import TraceError

MB = 1024 * 1024


class OverBudget(TraceError):
    """One task needs more memory than the whole budget: it can never be served as asked."""


class BudgetBusy(TraceError):
    """The memory is held by other tasks right now: the same request can succeed later."""


Reclaimer = Callable[[int], None]


def _mb(n: int) -> str:
    return f"{n / MB:,.0f} MB" if n >= 10 * MB else f"{n / MB:,.1f} MB" if n >= MB // 10 else f"{n:,} bytes"


class MemoryBudget:
    """Bytes promised, bytes charged. Thread-safe; charges never block."""

    def __init__(self, limit_bytes: int, flag: str = "--tb_reduce_memory_mb") -> None:
        self.limit = max(0, int(limit_bytes))
        self.flag = flag
        self.used = 0
        self.peak = 0
        self.refused = 0
        self._lock = threading.Lock()
        self._freed = threading.Condition()
        self._reclaimers: list[Reclaimer] = []

    def add_reclaimer(self, reclaim: Reclaimer) -> None:
        """`reclaim(n)` is asked to free about `n` bytes of idle caches when a charge does not fit."""
        self._reclaimers.append(reclaim)

    def account(self, label: str) -> Account:
        return Account(self, label)

    @property
    def free(self) -> int:
        return max(0, self.limit - self.used)

    def _take(self, n: int, acct: Account, what: str, alongside: int, wait_s: float) -> None:
        if self._try_take(n):
            return
        if acct.total + alongside + n > self.limit:
            self.refused += 1
            raise OverBudget(
                f"{acct.label} needs more than {self.flag} {_mb(self.limit)}"
                f" ({_mb(acct.total + alongside + n)} at least, for {what or 'its data'})"
            )
        deadline = time.monotonic() + wait_s
        while True:
            for reclaim in self._reclaimers:  # outside the lock: reclaiming frees and releases
                reclaim(n)
                if self._try_take(n):
                    return
            left = deadline - time.monotonic()
            if left <= 0:
                break
            with self._freed:
                if self.used + n > self.limit:
                    self._freed.wait(min(left, 0.5))
            if self._try_take(n):
                return
        self.refused += 1
        raise BudgetBusy(
            f"the server's memory ({self.flag} {_mb(self.limit)}) is in use by other requests;"
            " try again in a moment"
        )

    def _try_take(self, n: int) -> bool:
        with self._lock:
            if self.used + n > self.limit:
                return False
            self.used += n
            self.peak = max(self.peak, self.used)
            return True

    def _give(self, n: int) -> None:
        with self._lock:
            self.used = max(0, self.used - n)
        with self._freed:
            self._freed.notify_all()


class Account:
    """One task's share of a budget; `close()` (or leaving the `with`) gives it all back.

    Thread-safe: an index's account is settled by every reduction that prepared state
    on it. A charge that arrives after `close()` (a finalizer ran meanwhile) is given
    back at once, so nothing stays counted for an account nobody holds.
    """

    def __init__(self, budget: MemoryBudget, label: str) -> None:
        self.budget = budget
        self.label = label
        self.total = 0
        self._lock = threading.RLock()
        self._closed = False

    def charge(self, n: int, what: str = "", alongside: int = 0, wait_s: float = 0.0) -> None:
        """Hold `n` more bytes, or raise `OverBudget`/`BudgetBusy` holding nothing more.

        `alongside`: bytes this task needs that others hold for it (the index it
        reduces), so a task that can never fit is told so (`OverBudget`) instead of
        being asked to come back. `wait_s`: how long to wait for other tasks to give
        memory back before `BudgetBusy`.
        """
        n = int(n)
        if n <= 0:
            return
        self.budget._take(n, self, what, alongside, wait_s)
        with self._lock:
            if not self._closed:
                self.total += n
                return
        self.budget._give(n)

    def release(self, n: int) -> None:
        with self._lock:
            n = min(int(n), self.total)
            if n <= 0:
                return
            self.total -= n
        self.budget._give(n)

    def settle(self, n: int, what: str = "") -> None:
        """Hold exactly `n` bytes from now on (what the task turned out to keep)."""
        n = int(n)
        with self._lock:  # reentrant: one settle at a time, its charge or release included
            if n > self.total:
                self.charge(n - self.total, what)
            else:
                self.release(self.total - n)

    def close(self) -> None:
        with self._lock:
            n, self.total, self._closed = self.total, 0, True
        if n:
            self.budget._give(n)

    def keep_until_collected(self, owner: object) -> None:
        """Give this account's bytes back only when `owner` is garbage-collected."""
        weakref.finalize(owner, self.close)

    def __enter__(self) -> Account:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Unlimited(MemoryBudget):
    """No promise: for library callers that pass no budget (tests, small scripts)."""

    def __init__(self) -> None:
        super().__init__(1 << 62, flag="(no limit)")


def machine_memory_bytes() -> Optional[int]:
    """Physical memory of this machine (or of its cgroup, when smaller)."""
    total = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    total = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                raw = f.read().strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) < (1 << 60):
            total = min(total, int(raw)) if total else int(raw)
    return total


# ---- the allocator -------------------------------------------------------------------
# What the budget gives back must go back to the system too, or the server's RSS stays
# at its high-water mark after every burst. glibc keeps freed heap pages, and raises its
# mmap threshold (up to 32 MB) each time a large block is freed, so numpy's temporaries
# land on the heap and stay there. A fixed threshold stops the raising: blocks from it up
# go by mmap and back to the system when freed; smaller ones are reused from the heap
# within a computation (a fresh mapping costs a page fault per 4 kB touched: at 1 MB,
# a cold view of a 2.3 M-event XSpace took 430 k faults and 1.6 s instead of 1.15 s), and
# `release_free_memory` hands them back when the server's computations are over.

_M_MMAP_THRESHOLD = -3


def _libc() -> Optional[ctypes.CDLL]:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: its allocator returns memory its own way
        return None


def release_free_memory() -> None:
    """Hand freed heap pages back to the system (after a parse, a refusal, a computation)."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def return_large_blocks(threshold: int = 16 << 20) -> None:
    """Serve every allocation of `threshold` bytes or more by mmap, for good: freeing it
    then unmaps it at once, so a computation's arrays leave no RSS behind."""
    libc = _libc()
    if libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(_M_MMAP_THRESHOLD, threshold)
