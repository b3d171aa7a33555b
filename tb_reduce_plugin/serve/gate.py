"""A bounded pool for computations: a few run, a few wait in line, the rest are told to come back.

Why: TensorBoard serves each request on its own thread, without limit. Two hundred
zoom requests for different windows would otherwise plan two hundred reductions at
once — memory without bound, and a GIL so contended that even the run list takes
half a minute. Here at most `workers` computations run (sized from the cores and the
memory budget), at most `max_waiting` wait in line, first come first served, each at
most `wait_s`; anyone else gets `ServerBusy` (a 503 with Retry-After) at once.
Cheap answers (the run list, static files, cached reductions) never come here.
"""

from __future__ import annotations

import math
import os
import threading
import time
from contextlib import contextmanager
from typing import Iterator, Optional


class ServerBusy(Exception):
    """Too many computations in progress or waiting; `retry_after_s` says when to try again."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def default_workers(memory_bytes: int, per_worker_bytes: int = 128 * 1024 * 1024,
                    cores: Optional[int] = None) -> int:
    """One computation per core, but no more than the budget gives each a fair share."""
    cores = cores or os.cpu_count() or 1
    return max(1, min(cores, memory_bytes // max(per_worker_bytes, 1)))


class ComputeGate:
    def __init__(self, workers: int, max_waiting: int = 32, wait_s: float = 60.0) -> None:
        self.workers = max(1, int(workers))
        self.max_waiting = max(0, int(max_waiting))
        self.wait_s = wait_s
        self._cond = threading.Condition()
        self._running = 0
        self._next_ticket = 0
        self._serving = 0  # the ticket at the head of the line
        self._abandoned: set[int] = set()
        self._mean_s = 1.0  # moving mean of how long a computation holds its slot
        self.turned_away = 0
        self.completed = 0

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return self._next_ticket - self._serving - len(self._abandoned)

    def retry_after(self) -> int:
        """Seconds until a new request would likely get a slot: the line ahead of it, drained."""
        ahead = self.waiting + self._running
        return max(1, min(60, math.ceil(self._mean_s * (ahead + 1) / self.workers)))

    @contextmanager
    def slot(self) -> Iterator[None]:
        self._acquire()
        began = time.monotonic()
        try:
            yield
        finally:
            held = time.monotonic() - began
            with self._cond:
                self._running -= 1
                self.completed += 1
                self._mean_s = 0.8 * self._mean_s + 0.2 * held
                self._cond.notify_all()

    def _acquire(self) -> None:
        with self._cond:
            if self._running < self.workers and self.waiting == 0:
                self._running += 1
                return
            if self.waiting >= self.max_waiting:
                self.turned_away += 1
                raise ServerBusy(
                    f"the server is busy with {self._running} computations and {self.waiting} waiting;"
                    " try again shortly", self.retry_after())
            ticket = self._next_ticket
            self._next_ticket += 1
            deadline = time.monotonic() + self.wait_s
            while not (ticket == self._serving and self._running < self.workers):
                left = deadline - time.monotonic()
                if left <= 0:
                    self._abandon(ticket)
                    self.turned_away += 1
                    raise ServerBusy(f"waited {self.wait_s:.0f} s for a free computation slot; try again",
                                     self.retry_after())
                try:
                    self._cond.wait(left)
                except BaseException:  # interrupted while waiting: leave the line, never block it
                    self._abandon(ticket)
                    raise
            self._serving += 1
            self._skip_abandoned()
            self._running += 1
            self._cond.notify_all()

    def _abandon(self, ticket: int) -> None:
        """A waiter that gave up leaves the line without blocking the ones behind it."""
        if ticket == self._serving:
            self._serving += 1
            self._skip_abandoned()
        else:
            self._abandoned.add(ticket)
        self._cond.notify_all()

    def _skip_abandoned(self) -> None:
        while self._serving in self._abandoned:
            self._abandoned.discard(self._serving)
            self._serving += 1
