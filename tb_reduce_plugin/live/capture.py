"""Capturing windows from inside a training script, for the live sidecar's watch source.

`jax_windows(folder, every_s, window_s)` owns JAX's profiler (one trace at a time:
JAX raises on a second `start_trace`): a background thread starts a trace every
`every_s`, stops it after `window_s`, and moves the XSpace it wrote into `folder`
with a rename, so the sidecar (`tb-reduce live --watch FOLDER`) sees each window
complete or not at all. The training thread only runs its steps (mark them with
`jax.profiler.StepTraceAnnotation("train", step_num=i)` so windows have steps); a
capture that fails is logged and the next one tried, never raised into training.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import shutil
import tempfile
import threading
from typing import Iterator, Union

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
                jax.profiler.stop_trace()
            for path in glob.glob(os.path.join(scratch, "**", "*.xplane.pb"), recursive=True):
                count[0] += 1
                os.rename(path, os.path.join(folder, f"window{count[0]:06d}.{os.path.basename(path)}"))
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
