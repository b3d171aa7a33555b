"""Capturing windows from inside a training script, for the live sidecar's watch source.

`torch_schedule(folder, every=10, window_steps=3)` profiles `window_steps` of every
`every` training steps with `torch.profiler` (a `schedule` with repeat=0). It is the
`on_trace_ready` handler, or, as a context manager, owns the profiler too. Each
finished window's results are saved off the training thread (the profiler has moved
on: only the results object is kept), into a dot-named file, then renamed into
`folder` as `windowNNNNNN.<host>_<pid>.pt.trace.json`, so the sidecar sees it complete or not at
all. Used as a context manager, it also times every step, captured or not, and
writes `windowNNNNNN.<host>_<pid>.overhead.json` beside each window (median step time captured vs
uncaptured): the sidecar turns it into the `live/overhead_pct` series, so users see
what watching costs.

`jax_windows(folder, every_s, window_s)` owns JAX's profiler (one trace at a time:
JAX raises on a second `start_trace`): a background thread starts a trace every
`every_s`, stops it after `window_s`, and moves the XSpace it wrote into `folder`
as `windowNNNNNN.<host>_<pid>.xplane.pb` with a rename, so the sidecar (`tb-reduce live --watch FOLDER`) sees each window
complete or not at all. The training thread only runs its steps (mark them with
`jax.profiler.StepTraceAnnotation("train", step_num=i)` so windows have steps); a
capture that fails is logged and the next one tried, never raised into training.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import queue
import shutil
import socket
import statistics
import tempfile
import threading
import time
from collections import deque
from typing import Any, Iterator, Optional, Union

log = logging.getLogger(__name__)


@contextlib.contextmanager
def jax_windows(folder: Union[str, os.PathLike], every_s: float = 10.0, window_s: float = 2.0) -> Iterator[None]:
    """Capture a `window_s` JAX trace every `every_s` into `folder` while the block runs."""
    import jax

    if not (0 < window_s <= every_s):
        raise ValueError(f"need 0 < window_s <= every_s, not window_s={window_s}, every_s={every_s}")
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    stop = threading.Event()
    count = [0]

    def capture_once() -> None:
        scratch = tempfile.mkdtemp(prefix=".tb-reduce-capture-", dir=folder)  # a dot folder: not watched
        try:
            jax.profiler.start_trace(scratch)
            try:
                stop.wait(window_s)
            finally:
                ended = time.time()  # the windows' mtime: when the capture ended (the sidecar's wall clock for them)
                jax.profiler.stop_trace()
            for path in glob.glob(os.path.join(scratch, "**", "*.xplane.pb"), recursive=True):
                count[0] += 1
                host = os.path.basename(path)[: -len(".xplane.pb")] or "host"
                os.utime(path, (ended, ended))
                os.rename(path, os.path.join(folder, f"window{count[0]:06d}.{host}_{os.getpid()}.xplane.pb"))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def loop() -> None:
        while not stop.is_set():
            try:
                capture_once()
            except Exception as exc:  # never into the training step: say so and try the next window
                log.warning("tb-reduce live: a JAX capture failed: %s", exc)
            stop.wait(every_s - window_s)

    thread = threading.Thread(target=loop, name="tb-reduce-jax-capture", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


OVERHEAD_SUFFIX = ".overhead.json"
TIMED_STEPS = 200  # recent steps whose times the overhead compares


class TorchWindows:
    """`on_trace_ready` for `torch.profiler`, saving each window off the training thread."""

    def __init__(self, folder: Union[str, os.PathLike], every: int = 10, window_steps: int = 3,
                 warmup: int = 1) -> None:
        if not (window_steps >= 1 and warmup >= 0 and every >= window_steps + warmup + 1):
            raise ValueError(f"need window_steps >= 1 and every >= window_steps + warmup + 1, not every={every}, "
                             f"window_steps={window_steps}, warmup={warmup}")
        self.folder = os.fspath(folder)
        os.makedirs(self.folder, exist_ok=True)
        self.every, self.window_steps, self.warmup = every, window_steps, warmup
        # In each window's name, as Kineto's own handler names them: ranks (or a restarted
        # training) writing into one folder never overwrite each other, and the sidecar
        # keeps each one's series apart (`series.source_of`).
        self.worker = f"{_safe(socket.gethostname())}_{os.getpid()}"
        self.windows = 0
        self.failures = 0
        self._queue: queue.Queue = queue.Queue(maxsize=4)  # a slow disk drops windows, never blocks training
        self._saver = threading.Thread(target=self._save_loop, name="tb-reduce-torch-save", daemon=True)
        self._saver.start()
        self._prof: Any = None
        self._times: deque = deque(maxlen=TIMED_STEPS)  # (seconds, captured)
        self._last: Optional[float] = None

    @property
    def schedule(self) -> Any:
        import torch.profiler

        return torch.profiler.schedule(wait=self.every - self.window_steps - self.warmup, warmup=self.warmup,
                                       active=self.window_steps, repeat=0)

    def __call__(self, prof: Any) -> None:
        """`on_trace_ready`: hand the finished window's results to the saver; return at once."""
        self.windows += 1
        overhead = self.overhead()
        try:
            self._queue.put_nowait((self.windows, prof.profiler.kineto_results, overhead, time.time()))
        except queue.Full:
            self.failures += 1
            log.warning("tb-reduce live: window %d dropped: the previous ones are still being saved", self.windows)

    # ---- as a context manager: owns the profiler and times the steps ----------------
    def __enter__(self) -> TorchWindows:
        import torch.profiler

        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._prof = torch.profiler.profile(activities=activities, schedule=self.schedule, on_trace_ready=self)
        self._prof.__enter__()
        self._last = time.perf_counter()
        return self

    def step(self) -> None:
        """Call once per training step (it calls the profiler's `step`)."""
        now = time.perf_counter()
        captured = self._captured()
        if self._last is not None:
            self._times.append((now - self._last, captured))
        self._prof.step()
        self._last = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        try:
            self._prof.__exit__(*exc)
        finally:
            self.close()

    def _captured(self) -> bool:
        from torch.profiler import ProfilerAction

        return self._prof is not None and self._prof.current_action in (ProfilerAction.RECORD,
                                                                        ProfilerAction.RECORD_AND_SAVE)

    def overhead(self) -> Optional[dict]:
        """Median step time while captured and while not, over the recent steps (None until both exist)."""
        on = [t for t, c in self._times if c]
        off = [t for t, c in self._times if not c]
        if not on or not off:
            return None
        a, b = statistics.median(on), statistics.median(off)
        return {"captured_ms": a * 1e3, "uncaptured_ms": b * 1e3, "overhead_pct": (a / b - 1) * 100 if b > 0 else None,
                "captured_steps": len(on), "uncaptured_steps": len(off)}

    # ---- saving, off the training thread -----------------------------------------------
    def close(self, timeout_s: float = 60.0) -> None:
        """Wait for the windows being saved (at most `timeout_s`)."""
        self._queue.put(None)
        self._saver.join(timeout_s)

    def _save_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            n, results, overhead, ended = item
            try:
                self._save(n, results, overhead, ended)
            except Exception as exc:  # a full disk, a folder gone: say so, never into training
                self.failures += 1
                log.warning("tb-reduce live: window %d could not be saved: %s", n, exc)

    def _save(self, n: int, results: Any, overhead: Optional[dict], ended: Optional[float] = None) -> None:
        """The window's trace as `<stem>.pt.trace.json`, whole or not at all, its mtime set to
        `ended` (when the capture ended): the sidecar reads a window's wall-clock place from
        its file's mtime, which a save that took seconds would otherwise push later."""
        stem = os.path.join(self.folder, f"window{n:06d}.{self.worker}")
        tmp = os.path.join(self.folder, f".window{n:06d}.{os.getpid()}.tmp")
        try:
            if overhead is not None:
                with open(tmp, "w", encoding="utf-8") as f:
                    json.dump(overhead, f)
                os.replace(tmp, stem + OVERHEAD_SUFFIX)
            results.save(tmp)
            if ended is not None:
                os.utime(tmp, (ended, ended))
            os.replace(tmp, stem + ".pt.trace.json")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


def _safe(name: str) -> str:
    """A host name as a file name part: no dots (they separate the parts), no path characters."""
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name) or "host"


def torch_schedule(folder: Union[str, os.PathLike], every: int = 10, window_steps: int = 3,
                   warmup: int = 1) -> TorchWindows:
    """Profile `window_steps` of every `every` steps into `folder` for `tb-reduce live --watch FOLDER`.

    As `on_trace_ready`: `profile(schedule=w.schedule, on_trace_ready=w)` and `prof.step()` per
    step. As a context manager: `with torch_schedule(folder) as w: ...; w.step()` (also
    measures what the capture costs).
    """
    return TorchWindows(folder, every, window_steps, warmup)
