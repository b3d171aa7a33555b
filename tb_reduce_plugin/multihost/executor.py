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

import hashlib
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
TASK_TIMEOUT_S = 600.0  # a task's answer (on a cluster: all of a view's tasks together)
CONNECT_TIMEOUT_S = 3.0  # reaching a Dask scheduler: a refused or silent address is told after this
UNREACHABLE_S = 5.0  # a failed attempt to reach it is remembered this long, and told at once meanwhile
INFO_TIMEOUT_S = 10.0  # a question to a connected scheduler (which workers it has)
FETCH_TIMEOUT_S = 120.0  # a finished task's answer, fetched from its worker
POLL_S = 0.5  # how often a view waiting on a cluster looks at which workers are alive
NO_WORKERS_S = 30.0  # a cluster with no worker (or a silent scheduler) this long fails the view's tasks
MOVES = 2  # a task whose worker left is pinned to a live one once, then sent to any worker


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
    """An existing Dask cluster (`distributed`, an optional extra: `pip install tb-reduce-plugin[dask]`).

    Every wait on the cluster is bounded, so a merged view always ends with its answer or
    a 503 that names the cluster: reaching the scheduler (`CONNECT_TIMEOUT_S`; one attempt
    at a time, shared by the views that ask meanwhile, its failure remembered for
    `UNREACHABLE_S` and told at once to the views after it), each question to it
    (`INFO_TIMEOUT_S`), and a view's tasks (`TASK_TIMEOUT_S` in all). A task is pinned to
    a worker alive when it is sent, and sent again to another if that worker leaves before
    it is done: the scheduler keeps a task whose only allowed worker left waiting in
    `no-worker` for good (it does not let a worker that joins later take a task pinned
    elsewhere, even with `allow_other_workers`), and a nanny restarts a killed worker at
    a new address."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.name = address
        self._client: Any = None
        self._lock = threading.Lock()  # held for bookkeeping only, never across a wait on the network
        self._connecting: Optional[threading.Event] = None
        self._failed: Optional[tuple[float, str]] = None  # (until, reason) of the last failed attempt
        self._stuck: Optional[threading.Thread] = None  # a Client() that never returned
        self.moves = 0  # tasks sent again because their worker left

    def client(self) -> Any:
        """The connected client; raises `BadWorkers` (at once while a recent attempt's failure
        is remembered) if the scheduler cannot be reached."""
        stale = None
        with self._lock:
            current = self._client
            if current is not None and current.status == "running":
                return current
            if current is not None and current.status in ("connecting", "newly-created"):
                raise BadWorkers(f"lost the connection to the Dask scheduler at {self.address}; reconnecting")
            stale, self._client = current, None
            if self._failed is not None and time.monotonic() < self._failed[0]:
                raise BadWorkers(self._failed[1])
            attempt = self._connecting
            leader = attempt is None
            if attempt is None:
                attempt = self._connecting = threading.Event()
        if stale is not None:
            threading.Thread(target=_close_quietly, args=(stale,), daemon=True).start()
        if not leader:
            attempt.wait(3 * CONNECT_TIMEOUT_S + 1)  # the leader's attempt is bounded by less
            with self._lock:
                if self._client is not None and self._client.status == "running":
                    return self._client
                reason = self._failed[1] if self._failed is not None else None
            raise BadWorkers(reason or f"cannot reach the Dask scheduler at {self.address}: still connecting")
        try:
            made = self._connect()
        except BadWorkers as exc:
            with self._lock:
                self._failed = (time.monotonic() + UNREACHABLE_S, str(exc))
            raise
        else:
            with self._lock:
                self._client, self._failed = made, None
            return made
        finally:
            with self._lock:
                self._connecting = None
            attempt.set()

    def _connect(self) -> Any:
        try:
            from distributed import Client
        except ImportError:
            raise BadWorkers(f"--tb_reduce_workers={self.address} needs Dask's distributed package "
                             f"(pip install 'tb-reduce-plugin[dask]')") from None
        if self._stuck is not None and self._stuck.is_alive():
            raise BadWorkers(f"the Dask scheduler at {self.address} accepted a connection but did not answer")
        try:
            _reach(self.address, CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            if isinstance(exc, TimeoutError) and not str(exc):
                raise BadWorkers(f"the Dask scheduler at {self.address} accepted a connection but did not "
                                 f"answer within {CONNECT_TIMEOUT_S:.0f} s") from None
            raise BadWorkers(f"cannot reach the Dask scheduler at {self.address}: {exc}") from None
        # It answered the handshake; the client's own connect (which waits on the scheduler
        # without a bound of its own) still runs where a silence cannot hold this request.
        box: dict = {}
        abandoned = threading.Event()

        def make() -> None:
            try:
                box["client"] = Client(self.address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
            except BaseException as exc:  # handed to the waiting request
                box["error"] = exc
            if abandoned.is_set() and "client" in box:
                _close_quietly(box["client"])

        t = threading.Thread(target=make, name="tb-reduce-dask-connect", daemon=True)
        t.start()
        t.join(2 * CONNECT_TIMEOUT_S)
        if t.is_alive():
            abandoned.set()
            self._stuck = t
            raise BadWorkers(f"the Dask scheduler at {self.address} accepted a connection but did not "
                             f"answer within {2 * CONNECT_TIMEOUT_S:.0f} s")
        if "error" in box:
            exc = box["error"]
            raise BadWorkers(f"cannot reach the Dask scheduler at {self.address}: {type(exc).__name__}: {exc}")
        return box["client"]

    def _live(self, client: Any) -> list[str]:
        """The workers the scheduler knows now, by address; raises `BadWorkers` if it does not say."""
        try:
            info = client.sync(client.scheduler.identity, n_workers=-1, callback_timeout=INFO_TIMEOUT_S)
        except Exception as exc:
            raise BadWorkers(f"the Dask scheduler at {self.address} did not say which workers it has "
                             f"({type(exc).__name__}: {exc})") from None
        return sorted(info.get("workers", {}))

    @property
    def workers(self) -> int:  # type: ignore[override]
        try:
            return max(1, len(self._live(self.client())))
        except BadWorkers:
            return 1

    def run(self, fn: Callable[[Any], Any], args: Sequence[Any], keys: Sequence[str],
            routes: Sequence[int], on_done: Optional[Callable[[int, Outcome], None]] = None) -> list[Outcome]:
        client = self.client()
        live = self._live(client)
        # A host goes to the same worker each time, as on the local pool (its clock task, its
        # reduce task and its next windows then parse its file once there); any other worker
        # takes it if that one is busy past the scheduler's patience. The pin is part of the
        # key: identical work sent by several servers that see the same workers runs once,
        # and a key pinned to a worker that has left is never asked for again.
        pins: list[Optional[str]] = [live[r % len(live)] if live else None for r in routes]
        moves = [0] * len(args)
        wake = threading.Event()

        def submit(k: int) -> Any:
            pin = pins[k]
            where = hashlib.sha1(pin.encode()).hexdigest()[:8] if pin is not None else "any"
            fut = client.submit(fn, args[k], key=f"tb-reduce-{fn.__name__}-{keys[k]}-{where}", pure=False,
                                retries=1, workers=[pin] if pin is not None else None,
                                allow_other_workers=True)
            fut.add_done_callback(lambda _: wake.set())
            return fut

        futures: list[Any] = [submit(k) for k in range(len(args))]
        out: list[Outcome] = [Outcome(failure="not run")] * len(args)
        pending = set(range(len(args)))
        deadline = time.monotonic() + TASK_TIMEOUT_S
        alone_since = None if live else time.monotonic()  # since when the cluster has had no worker
        silent_since: Optional[float] = None  # since when the scheduler has not said which workers it has

        def settle(k: int, outcome: Outcome) -> None:
            fut, futures[k] = futures[k], None
            if fut is not None:
                fut.release()  # the scheduler may forget it now
            pending.discard(k)
            out[k] = outcome
            if on_done is not None:
                on_done(k, outcome)

        try:
            while pending:
                wake.wait(POLL_S)
                wake.clear()
                for k in sorted(k for k in pending if futures[k].done()):
                    try:
                        outcome = Outcome(futures[k].result(timeout=max(1.0, min(deadline - time.monotonic(),
                                                                                 FETCH_TIMEOUT_S))))
                    except Exception as exc:  # KilledWorker after the scheduler's own retries, a lost connection
                        outcome = Outcome(failure=f"its Dask task failed: {type(exc).__name__}: {exc}")
                    settle(k, outcome)
                if not pending:
                    break
                now = time.monotonic()
                if now > deadline:
                    for k in sorted(pending):
                        settle(k, Outcome(failure=f"its Dask task did not finish within {TASK_TIMEOUT_S:.0f} s"))
                    break
                try:
                    live = self._live(client)
                    silent_since = None
                except BadWorkers as exc:
                    silent_since = silent_since or now
                    if now - silent_since > NO_WORKERS_S:
                        for k in sorted(pending):
                            settle(k, Outcome(failure=str(exc)))
                    continue
                if not live:
                    alone_since = alone_since or now
                    if now - alone_since > NO_WORKERS_S:
                        for k in sorted(pending):
                            settle(k, Outcome(failure=f"the Dask cluster at {self.address} has had no worker "
                                                      f"for {NO_WORKERS_S:.0f} s"))
                    continue
                alone_since = None
                alive = set(live)
                for k in sorted(pending):
                    if pins[k] is not None and pins[k] not in alive:
                        # Its worker left (killed, restarted at a new address): to a live one, and
                        # past `MOVES` moves to any worker, so it can never be stranded again.
                        moves[k] += 1
                        self.moves += 1
                        pins[k] = live[routes[k] % len(live)] if moves[k] < MOVES else None
                        old, futures[k] = futures[k], submit(k)
                        old.release()
        finally:
            for fut in futures:
                if fut is not None:
                    fut.release()
        return out

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


def _reach(address: str, timeout_s: float) -> None:
    """Opens a connection to the scheduler and waits for its handshake, `timeout_s` at most
    in all (distributed's own connect waits for the handshake without a bound: a server that
    accepts and never answers would hold the request for good). Raises OSError when refused
    (distributed's connect retries that for `timeout_s`),
    TimeoutError (without a message) when it accepted and did not answer."""
    import asyncio

    from distributed.comm import connect
    from distributed.security import Security

    async def once() -> None:
        try:
            comm = await asyncio.wait_for(
                connect(address, timeout=timeout_s, **Security().get_connection_args("client")), timeout_s + 1)
        except asyncio.TimeoutError:
            raise TimeoutError() from None
        await comm.close()

    asyncio.run(once())


def _close_quietly(client: Any) -> None:
    try:
        client.close(timeout=CONNECT_TIMEOUT_S)
    except Exception:  # a client that cannot even close is left to the garbage collector
        pass


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
