"""Where the per-host work of a merged view runs: the seam `--tb_reduce_workers` picks.

- `local:N` (the default, `local` = one per core): a pool of N worker processes on this
  machine. Each worker is its own single-process lane and a host always goes to the same
  lane (by its rank), so the index a worker parsed for one view serves the next window
  of that host. A lane whose process dies is started again.
- `local:0` (or `inline`): no workers; the server reduces each host itself, in threads
  under its own computation gate (what a single-host view does).
- `tcp://scheduler:8786` (or `tls://…`): an existing Dask cluster. Tasks go with the cache
  digest as their key, so identical work submitted by several servers runs once on the
  cluster, each host preferring one worker (as on the local pool). Workers need the same
  tb-reduce version (a task from another version is refused with that reason) and read
  access to the logdir's files (a shared file system, or an object-store logdir). The
  scheduler must be trusted: Dask unpickles what it receives, so never point a server at
  a scheduler others control.

Every task is a pure function (`tasks.reduce_host_task`, `tasks.host_clock_task`) of
values; a task whose worker dies is sent once more (Dask retries on its own), and if it
fails again its host is reported with the reason while the others are served.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import weakref
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

INLINE = "local:0"
DEFAULT = "local"
IDLE_S = 120.0  # an idle local pool's processes exit after this long
TASK_TIMEOUT_S = 600.0


class BadWorkers(ValueError):
    """`--tb_reduce_workers` names no executor this server can use."""


@dataclass
class Outcome:
    """A task's value, or why it has none (a one-line reason)."""

    value: Any = None
    failure: Optional[str] = None


class HostExecutor:
    """Runs tasks; `run` waits for all of them, retrying a task whose worker died once."""

    name = "executor"
    workers = 1

    def run(self, fn: Callable[[Any], Any], args: Sequence[Any], keys: Sequence[str],
            routes: Sequence[int], on_done: Optional[Callable[[int, Outcome], None]] = None) -> list[Outcome]:
        raise NotImplementedError

    def describe(self) -> str:
        return self.name

    def warm_up(self) -> list[str]:
        """Start every worker and load the package there (what the first view would pay);
        returns each worker's code version."""
        from .tasks import ping

        n = self.workers
        got = self.run(ping, [None] * n, [f"ping-{os.getpid()}-{time.monotonic_ns()}-{i}" for i in range(n)],
                       list(range(n)))
        return [o.value if o.failure is None else o.failure for o in got]

    def worker_pids(self) -> list[int]:
        """The worker processes on this machine (for measuring them), where known."""
        return []

    def close(self) -> None:
        pass


class LocalPool(HostExecutor):
    """N single-process lanes (`ProcessPoolExecutor`s of one worker each), started when first
    needed from a fork server (fast, and no copy of the server's threads or locks)."""

    def __init__(self, processes: int) -> None:
        self.workers = max(1, int(processes))
        self.name = f"local:{self.workers}"
        self._lanes: list[Optional[ProcessPoolExecutor]] = [None] * self.workers
        self._lock = threading.Lock()
        self._busy = 0
        self._last_used = time.monotonic()
        self._reaper: Optional[threading.Timer] = None
        self.restarts = 0

    def _context(self) -> Any:
        methods = multiprocessing.get_all_start_methods()
        if "forkserver" in methods:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["tb_reduce_plugin.multihost.tasks"])
            return ctx
        return multiprocessing.get_context("spawn")

    def _lane(self, i: int) -> ProcessPoolExecutor:
        with self._lock:
            pool = self._lanes[i]
            if pool is None:
                pool = self._lanes[i] = ProcessPoolExecutor(max_workers=1, mp_context=self._context())
            return pool

    def _restart(self, i: int, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._lanes[i] is broken:
                self._lanes[i] = None
                self.restarts += 1
        broken.shutdown(wait=False, cancel_futures=True)

    def run(self, fn: Callable[[Any], Any], args: Sequence[Any], keys: Sequence[str],
            routes: Sequence[int], on_done: Optional[Callable[[int, Outcome], None]] = None) -> list[Outcome]:
        with self._lock:
            self._busy += 1
        try:
            return self._run(fn, args, routes, on_done)
        finally:
            with self._lock:
                self._busy -= 1
                self._last_used = time.monotonic()
            self._schedule_reap()

    def _run(self, fn: Callable[[Any], Any], args: Sequence[Any], routes: Sequence[int],
             on_done: Optional[Callable[[int, Outcome], None]]) -> list[Outcome]:
        """Each lane runs its tasks one at a time, so a worker that dies names its task: that
        one is run again on a new worker, and the tasks queued behind it are not disturbed."""
        out: list[Outcome] = [Outcome(failure="not run")] * len(args)
        by_lane: dict[int, list[int]] = {}
        for k, route in enumerate(routes):
            by_lane.setdefault(route % self.workers, []).append(k)
        done_lock = threading.Lock()

        def drive(lane: int) -> None:
            for k in by_lane[lane]:
                outcome = self._one(lane, fn, args[k])
                out[k] = outcome
                if on_done is not None:
                    with done_lock:  # the caller's bookkeeping sees one answer at a time
                        on_done(k, outcome)

        lanes = sorted(by_lane)
        if len(lanes) == 1:
            drive(lanes[0])
        else:
            threads = [threading.Thread(target=drive, args=(lane,), name=f"tb-reduce-lane-{lane}", daemon=True)
                       for lane in lanes]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        return out

    def _one(self, lane: int, fn: Callable[[Any], Any], arg: Any) -> Outcome:
        for attempt in (1, 2):
            pool = self._lane(lane)
            try:
                fut = pool.submit(fn, arg)
            except (BrokenProcessPool, RuntimeError):  # broken, or shut down by the reaper meanwhile
                self._restart(lane, pool)
                pool = self._lane(lane)
                fut = pool.submit(fn, arg)
            try:
                return Outcome(fut.result(timeout=TASK_TIMEOUT_S))
            except BrokenProcessPool:
                self._restart(lane, pool)
                if attempt == 2:
                    return Outcome(failure="its worker process died twice while reducing it (killed, or out of memory)")
            except FutureTimeout:
                self._restart(lane, pool)  # a worker that hangs is not given the next task
                return Outcome(failure=f"its worker took longer than {TASK_TIMEOUT_S:.0f} s")
            except Exception as exc:  # the task itself raised: a bug, reported, not retried
                return Outcome(failure=f"its worker failed: {type(exc).__name__}: {exc}")
        return Outcome(failure="not run")

    def _schedule_reap(self) -> None:
        # The timer holds the pool weakly: a server (or a test's) that lets its pool go lets its
        # worker processes go with it, not two minutes later.
        timer = threading.Timer(IDLE_S, _reap_if_alive, args=(weakref.ref(self),))
        timer.daemon = True
        with self._lock:
            if self._reaper is not None:
                self._reaper.cancel()
            self._reaper = timer
        timer.start()

    def _reap(self) -> None:
        """Let idle worker processes go: an idle TensorBoard holds no worker memory."""
        with self._lock:
            if self._busy or time.monotonic() - self._last_used < IDLE_S - 1:
                return
            lanes, self._lanes = self._lanes, [None] * self.workers
        for pool in lanes:
            if pool is not None:
                pool.shutdown(wait=False)

    def worker_pids(self) -> list[int]:
        with self._lock:
            return [pid for pool in self._lanes if pool is not None for pid in (pool._processes or {})]

    def close(self) -> None:
        with self._lock:
            lanes, self._lanes = self._lanes, [None] * self.workers
            if self._reaper is not None:
                self._reaper.cancel()
        for pool in lanes:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)


def _reap_if_alive(ref: weakref.ref[LocalPool]) -> None:
    pool = ref()
    if pool is not None:
        pool._reap()


class DaskCluster(HostExecutor):
    """An existing Dask cluster (`distributed`, an optional extra: `pip install tb-reduce-plugin[dask]`)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.name = address
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                try:
                    from distributed import Client
                except ImportError:
                    raise BadWorkers(f"--tb_reduce_workers={self.address} needs Dask's distributed package "
                                     f"(pip install 'tb-reduce-plugin[dask]')") from None
                try:
                    self._client = Client(self.address, timeout=10, set_as_default=False)
                except (OSError, TimeoutError) as exc:
                    raise BadWorkers(f"cannot reach the Dask scheduler at {self.address}: {exc}") from None
            return self._client

    @property
    def workers(self) -> int:  # type: ignore[override]
        try:
            return max(1, len(self.client().scheduler_info().get("workers", {})))
        except Exception:
            return 1

    def run(self, fn: Callable[[Any], Any], args: Sequence[Any], keys: Sequence[str],
            routes: Sequence[int], on_done: Optional[Callable[[int, Outcome], None]] = None) -> list[Outcome]:
        client = self.client()
        # A host goes to the same worker each time, as on the local pool (its clock task, its
        # reduce task and its next windows then parse its file once there); any other worker
        # takes it if that one is gone or busy past the scheduler's patience.
        try:
            workers = sorted(client.scheduler_info().get("workers", {}))
        except Exception:
            workers = []
        futures = [client.submit(fn, a, key=f"tb-reduce-{fn.__name__}-{key}", pure=False, retries=1,
                                 workers=[workers[r % len(workers)]] if workers else None,
                                 allow_other_workers=True)
                   for a, key, r in zip(args, keys, routes)]
        out: list[Outcome] = []
        for k, fut in enumerate(futures):
            try:
                outcome = Outcome(fut.result(timeout=TASK_TIMEOUT_S))
            except Exception as exc:  # KilledWorker after the scheduler's own retries, a timeout, a lost connection
                outcome = Outcome(failure=f"its Dask task failed: {type(exc).__name__}: {exc}")
            futures[k] = None  # type: ignore[call-overload]  # the scheduler may forget it now
            fut.release()
            out.append(outcome)
            if on_done is not None:
                on_done(k, outcome)
        return out

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


def default_processes() -> int:
    return max(1, os.cpu_count() or 1)


def check_workers(spec: str) -> None:
    """Raises `BadWorkers` if `spec` names no executor (without starting or reaching one)."""
    spec = spec.strip()
    if spec in ("inline", INLINE, "local") or spec.startswith(("tcp://", "tls://", "ucx://", "inproc://")):
        return
    n = spec[len("local:"):] if spec.startswith("local:") else ""
    if not (n.isdigit() and 0 <= int(n) <= 1024):
        raise BadWorkers(f"--tb_reduce_workers={spec[:80]!r}: give local:N (N worker processes, 0-1024), "
                         f"local:0 (in the server) or a Dask scheduler address tcp://host:8786")


def make_executor(spec: Optional[str]) -> Optional[HostExecutor]:
    """The executor `--tb_reduce_workers` names; None for in-process (`local:0`)."""
    spec = (spec or DEFAULT).strip()
    check_workers(spec)
    if spec in ("inline", INLINE):
        return None
    if spec == "local":
        return LocalPool(default_processes())
    if spec.startswith("local:"):
        n = int(spec[len("local:"):])
        return LocalPool(n) if n else None
    return DaskCluster(spec)
