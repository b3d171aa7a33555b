"""Live waveforms as TensorBoard scalars, so the standard Scalars dashboard moves too.

Each window's per-step series (`StepSeries`) is appended to an event file in the
live run's folder with TensorBoard's own writer (`EventFileWriter`), flushed once
per window, so TensorBoard and tb-reduce's `scalars` route see a window's points as
soon as it is written. Tags, all under `live/`:

- `live/step_time_ms`, `live/<category>_ms` at each step's number (TensorBoard step);
- `live/overhead_pct` at a step (`write_overhead`): what watching costs;
- `live/window_reduce_s`, `live/window_events` (events read) at the window's sequence
  number.

A step's wall time is the capture start plus the step's offset from the window's
first step: traces carry the profiler's clock, not the wall clock, so the capture
start anchors them.

Why this survives SIGKILL: TensorBoard's writer frames each event as one record
(length, checksums, payload) written by one `write` in append mode, so a kill leaves
whole records plus at most one torn last record, which readers take as a record
still being written (`RunScalars.pending_bytes`), never as damage. Each `LiveSeries`
opens a NEW file (TensorBoard names it by time, host, pid and a counter), so a
restart never rewrites what an earlier process wrote.
"""

from __future__ import annotations

import math
import os
import time
from typing import TYPE_CHECKING, Optional, Union

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from ..errors import TraceError
from ..waveforms.steps import StepSeries
from .windows import LiveWriteError

if TYPE_CHECKING:
    from .windows import WindowRecord

PREFIX = "live/"
STEP_TIME = PREFIX + "step_time_ms"
OVERHEAD = PREFIX + "overhead_pct"
WINDOW_REDUCE_S = PREFIX + "window_reduce_s"
WINDOW_EVENTS = PREFIX + "window_events"


def _value(tag: str, x: float) -> summary_pb2.Summary.Value:
    return summary_pb2.Summary.Value(tag=tag, simple_value=x)


class LiveSeries:
    """Appends live scalars to a new TensorBoard event file in `run_dir` (created if absent).

    `LiveWriteError` (one line naming the folder) when the folder or file cannot be
    written, at creation or at a write or flush (a full disk). After one, this writer
    stays stopped (every later call raises it again): a failed append may have left a
    torn record, and nothing must follow it in that file. Go on with a new
    `LiveSeries`, which opens a new file. (TensorBoard's writer thread also prints the
    failure's traceback to stderr when it stops; that is its behaviour, not an error.)
    """

    def __init__(self, run_dir: Union[str, os.PathLike], filename_suffix: str = "") -> None:
        self.run_dir = os.path.abspath(os.fspath(run_dir))
        try:
            os.makedirs(self.run_dir, exist_ok=True)
            self._writer = EventFileWriter(self.run_dir, max_queue_size=100, flush_secs=120,
                                           filename_suffix=filename_suffix)
        except Exception as exc:  # OSError, or the gfile layer's own errors (TensorFlow's when installed)
            raise self._error(exc) from None

    @property
    def event_file(self) -> Optional[str]:
        """The event file this writes (TensorBoard chose its name)."""
        return getattr(self._writer, "_file_name", None)

    def _add(self, step: int, wall_time: float, values: list) -> None:
        event = event_pb2.Event(wall_time=wall_time, step=int(step), summary=summary_pb2.Summary(value=values))
        try:
            self._writer.add_event(event)
        except Exception as exc:  # the writer's thread failed (a full disk): it says so on the next call
            raise self._error(exc) from None

    def write_steps(self, steps: StepSeries, wall_time: float) -> int:
        """One event per step: its step time and busy time per category. Returns the
        number of steps written (steps with no finite integer number are skipped:
        TensorBoard steps are integers)."""
        if not len(steps):
            return 0
        numbers = steps.step.tolist()
        start = steps.start_us
        first = float(np.nanmin(start)) if np.isfinite(start).any() else 0.0
        offsets = np.where(np.isfinite(start), (start - first) / 1e6, 0.0).tolist()
        columns = [(STEP_TIME, steps.step_time_ms.tolist())]
        columns += [(f"{PREFIX}{c}_ms", v.tolist()) for c, v in steps.busy_ms.items()]
        written = 0
        for i, number in enumerate(numbers):  # per step, not per event: tens a window
            if not (math.isfinite(number) and float(number).is_integer()):
                continue
            self._add(int(number), wall_time + offsets[i], [_value(tag, col[i]) for tag, col in columns])
            written += 1
        return written

    def write_window(self, sequence: int, wall_time: float, reduce_s: float, events: int) -> None:
        """The window's own numbers, at its sequence number."""
        self._add(sequence, wall_time, [_value(WINDOW_REDUCE_S, reduce_s), _value(WINDOW_EVENTS, events)])

    def write_overhead(self, step: int, pct: float, wall_time: Optional[float] = None) -> None:
        """The sidecar's measured cost at `step`, in percent of step time."""
        self._add(step, time.time() if wall_time is None else wall_time, [_value(OVERHEAD, pct)])

    def add(self, record: WindowRecord) -> int:
        """A written window's steps and numbers, flushed: visible to readers on return."""
        n = self.write_steps(record.steps, record.captured_t0)
        self.write_window(record.sequence, record.captured_t0, record.reduce_s, record.events_in)
        self.flush()
        return n

    def flush(self) -> None:
        """Block until everything added is in the file."""
        try:
            self._writer.flush()
        except Exception as exc:
            raise self._error(exc) from None

    def close(self) -> None:
        try:
            self._writer.close()
        except Exception as exc:
            raise self._error(exc) from None

    def __enter__(self) -> LiveSeries:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _error(self, exc: Exception) -> TraceError:
        reason = getattr(exc, "strerror", None) or getattr(exc, "message", None) or str(exc) or type(exc).__name__
        return LiveWriteError(f"cannot write live scalars into {self.run_dir}: {reason}")
