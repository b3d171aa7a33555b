"""The live sidecar and its drive recorder (SPEC §7). Writes into the logdir; never imports the serving side.

- `sidecar`: the loop: each window a source hands over is reduced, kept raw in the ring, checked, written as scalars.
- `capture`: windows captured inside a training script (`torch_schedule`, `jax_windows`), handed to the watch source.
- `watch`: the watch source: trace files landing under a folder (any profiler), partial while written, final when stable.
- `windows`: reduced windows as runs `LOGDIR/live/<time>-<seq>/`, atomic, pruned, resumable without duplicates.
- `series`: per-window step series as TensorBoard scalars (TensorBoard's own writer), flushed per window.
- `triggers`: what makes the drive recorder keep raw windows (`step:2x`, `stall:250ms`, `name:REGEX:300ms`), rate-limited.
- `ring`: the raw ring: recent raw trace windows on disk, bounded in bytes, preserved around anomalies.
"""

from .capture import jax_windows, torch_schedule

__all__ = ["jax_windows", "torch_schedule"]
