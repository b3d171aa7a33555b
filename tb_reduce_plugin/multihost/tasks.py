"""The per-host work of a merged view, as pure functions a worker process runs.

A task names a file (a local path, or an object-store URL read through `objectstore`),
the identity the server's listing saw, and the view (level, window on the host's own
clock, bucket count); its answer is the host's reduced trace (gzip bytes, exactly what
the server computes in-process for the same view: reductions are deterministic, G8) and
its stats, or the reason it could not be made. Nothing here reaches back to the server:
the same function runs in a local process pool or on a Dask worker.

A worker keeps the indexes it parsed (a per-process cache under the task's memory
share), so the clock task and the reduce task of one host, and later windows of it,
parse its file once when they reach the same worker (the local pool routes a host to
the same worker every time).

Errors of the trace (corrupt, too large, changed since listed) come back as values
(`HostResult.error`), never as exceptions: an exception type with its own constructor
arguments does not always survive pickling, and only a worker's death should count as
a failure to retry. `passing` marks an error that is not the file's own (the worker's
version, its memory, a read that failed, the object store): the server does not cache
a view that lacks a host for such a reason.
"""

from __future__ import annotations

import io
import json
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar

from .. import FORMAT_VERSION, __version__
from ..budget import MB, MemoryBudget
from ..errors import IndexDamaged, ObjectStoreError, TraceError
from ..formats.sources import FileIdentity
from ..index.store import IndexStore, default_index_bytes, indexed
from ..model import mapped
from ..reduce.pipeline import TraceIndex, index_file, reduce_index
from ..reduce.plan import default_window
from ..serve.cache import IndexCache
from .clock import host_clock

# The code a task needs: a worker of another version refuses it (its reductions could differ).
CODE_VERSION = f"{__version__}/{FORMAT_VERSION}"


@dataclass(frozen=True)
class HostTask:
    """One host's part of a merged view. `identity` is (dev, ino, size, mtime_ns) as listed."""

    path: str
    identity: tuple[int, int, int, int]
    level: Any = 2
    start_us: Optional[float] = None
    end_us: Optional[float] = None
    drop_args: bool = False
    resolution: Optional[int] = None
    memory_bytes: int = 512 * MB  # the worker's memory share (its index cache and this task)
    max_input_bytes: int = 4096 * MB
    stage_dir: Optional[str] = None  # where an object-store file is copied to be read
    version: str = CODE_VERSION
    index_dir: Optional[str] = None  # the server's index store: a worker reopens what is stored there


@dataclass
class ClockResult:
    origin_ns: Optional[int] = None
    source: str = "none"
    start_us: float = 0.0
    end_us: float = 0.0
    error: Optional[str] = None
    passing: bool = False


@dataclass
class HostResult:
    """`meta`: the stats as JSON; `body`: the reduced trace, gzip; or `error`, one line;
    `clock`: the host's clock, read from the index the reduction used (so a view of the
    whole run needs no separate round of clock tasks)."""

    meta: bytes = b""
    body: bytes = b""
    error: Optional[str] = None
    worker: str = ""
    clock: Optional[ClockResult] = None
    passing: bool = False


class _WorkerState:
    """What a worker process keeps between tasks: its budget and the indexes it parsed."""

    def __init__(self, memory_bytes: int) -> None:
        self.budget = MemoryBudget(memory_bytes, flag="the worker's share of --tb_reduce_memory_mb")
        self.indexes: IndexCache[TraceIndex] = IndexCache(self.budget)


_state: Optional[_WorkerState] = None
_state_lock = threading.Lock()


def _worker_state(memory_bytes: int) -> _WorkerState:
    global _state
    with _state_lock:
        if _state is None or _state.budget.limit != memory_bytes:
            _state = _WorkerState(memory_bytes)
        return _state


def _local_file(task: HostTask) -> tuple[str, Optional[FileIdentity]]:
    """The local path to read and the identity it must have: an object is copied first."""
    expect = FileIdentity(*task.identity)
    if "://" in task.path:
        from ..formats import objectstore  # an optional extra: only object-store logdirs need it

        local = objectstore.local_copy(task.path, expect, task.stage_dir or _default_stage(), task.max_input_bytes)
        return local, None
    return task.path, expect


def _default_stage() -> str:
    return os.path.join(os.path.expanduser("~"), ".cache", "tb-reduce", "objects")


def _index(task: HostTask) -> TraceIndex:
    state = _worker_state(task.memory_bytes)
    key = (task.path, task.identity)
    found = state.indexes.get(key)
    if found is not None:
        return found
    state.indexes.discard_where(lambda k: k[0] == task.path)  # an older version of the file
    path, expect = _local_file(task)
    account = state.budget.account(f"reading {os.path.basename(task.path)}")
    try:
        options = dict(max_inflated_bytes=max(task.max_input_bytes * 64, 1 << 30), expect=expect,
                       max_file_bytes=task.max_input_bytes)
        store = _store(task.index_dir)
        idx = (indexed(store, path, account=account, **options) if store is not None and expect is not None
               else index_file(path, account=account, **options))
        account.settle(idx.memory_bytes(), "the parsed trace")
    except BaseException:
        account.close()
        raise
    account.keep_until_collected(idx)
    idx.account = account
    state.indexes.put(key, idx)
    return idx


T = TypeVar("T")


def _on_index(task: HostTask, fn: Callable[[TraceIndex], T]) -> T:
    """`fn` on the task's index, checked before and after as the server checks its own
    (`TraceService._check_intact`): a stored index with a file cut while in use (a shrunk
    file, or a guarded read that met zeros) is dropped from this worker and from the
    store, what was read from it thrown away, and the work done again from the trace, once."""
    key = (task.path, task.identity)
    for _ in range(2):
        idx = _index(task)
        before = mapped.faults()
        if mapped.shrunk(idx.arrays()) is None and not idx.damaged:
            out = fn(idx)
            if mapped.shrunk(idx.arrays()) is None and mapped.faults() == before and not idx.damaged:
                return out
        idx.damaged = True
        _worker_state(task.memory_bytes).indexes.discard_where(lambda k: k == key)
        store = _store(task.index_dir)
        if store is not None:
            store.discard(idx)
    raise IndexDamaged(f"the stored index of {os.path.basename(task.path)} was cut on disk while in use; try again")


_stores: dict[str, Optional[IndexStore]] = {}


def _store(directory: Optional[str]) -> Optional[IndexStore]:
    """The index store at `directory` (the server's), opened once per worker process; None
    where it cannot be used here (a Dask worker on another machine, say)."""
    if not directory:
        return None
    with _state_lock:
        if directory not in _stores:
            store = IndexStore(directory, default_index_bytes(directory))
            _stores[directory] = store if store.usable else None
        return _stores[directory]


def _check_version(task: HostTask) -> Optional[str]:
    if task.version != CODE_VERSION:
        return (f"this worker runs tb-reduce {CODE_VERSION}, the server {task.version}: "
                f"install the server's version on every worker")
    return None


def _passing(exc: BaseException) -> bool:
    """Whether a task's error may be gone next time: anything but the trace's own content."""
    return not isinstance(exc, TraceError) or isinstance(exc, (ObjectStoreError, IndexDamaged))


def _reason(exc: BaseException, task: HostTask) -> str:
    name = os.path.basename(task.path)
    if isinstance(exc, MemoryError):
        return f"{name} is too large to read in a worker's memory share"
    text = str(exc) or type(exc).__name__
    return text if name in text else f"cannot read {name}: {text}"


def ping(_: object = None) -> str:
    """What a worker answers when it is started and has this package loaded: its code version."""
    return CODE_VERSION


def host_clock_task(task: HostTask) -> ClockResult:
    """Where the host's trace sits in real time (`clock.host_clock`), and its extent."""
    wrong = _check_version(task)
    if wrong:
        return ClockResult(error=wrong, passing=True)
    try:
        c = _on_index(task, lambda idx: host_clock(idx.metadata, *default_window(idx.table)))
    except (TraceError, OSError, MemoryError) as exc:
        return ClockResult(error=_reason(exc, task), passing=_passing(exc))
    return ClockResult(c.origin_ns, c.source, c.start_us, c.end_us)


def reduce_host_task(task: HostTask) -> HostResult:
    """The host's reduction for the task's view: the bytes `TraceService.reduction_of` makes."""
    wrong = _check_version(task)
    worker = f"{os.uname().nodename}:{os.getpid()}" if hasattr(os, "uname") else str(os.getpid())
    if wrong:
        return HostResult(error=wrong, worker=worker, passing=True)
    state = _worker_state(task.memory_bytes)

    def reduce_on(idx: TraceIndex) -> tuple[dict, bytes, Any]:
        out = io.BytesIO()
        with state.budget.account(f"reducing {os.path.basename(task.path)}") as account:
            try:
                stats = reduce_index(idx, out, task.level, task.start_us, task.end_us, gzip=True,
                                     with_input_index=True, drop_args=task.drop_args, account=account,
                                     resolution=task.resolution)
            finally:
                try:
                    idx.settle_memory()
                except TraceError:
                    pass
        return stats, out.getvalue(), host_clock(idx.metadata, *default_window(idx.table))

    try:
        stats, body, c = _on_index(task, reduce_on)
        stats["input"]["file"] = os.path.basename(task.path)
        stats["worker"] = worker
    except (TraceError, OSError, MemoryError) as exc:
        return HostResult(error=_reason(exc, task), worker=worker, passing=_passing(exc))
    return HostResult(json.dumps(stats, separators=(",", ":")).encode(), body, None, worker,
                      ClockResult(c.origin_ns, c.source, c.start_us, c.end_us))
