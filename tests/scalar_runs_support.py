"""Logdirs of runs with TensorBoard event files only, written as users write them: with
`torch.utils.tensorboard.SummaryWriter` (the product's second seed, case D: `runs/a` and
`runs/b` each logging `Loss/train`), for the route and browser suites of such runs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

STEPS = 50
TAG = "Loss/train"
# Each run's own curve (different values, so an overlay shows two lines, not one on another).
CURVES = {"runs/a": (2.0, 12.0, 0.0), "runs/b": (1.2, 25.0, 0.3)}


def loss(run: str, step: int) -> float:
    """The value `run` logs at `step`: a decaying loss with a run-specific wiggle, as float32
    (what `add_scalar` stores)."""
    scale, tau, phase = CURVES.get(run, (1.0, 10.0, 0.5))
    import numpy as np

    return float(np.float32(scale * math.exp(-step / tau) + 0.05 * math.sin(step + phase)))


def write_loss_run(logdir: Path, run: str, steps: int = STEPS, tag: str = TAG) -> Path:
    """`run` (a folder under `logdir`) logging `tag` for `steps` steps with SummaryWriter, closed."""
    writer_mod = pytest.importorskip("torch.utils.tensorboard")
    folder = logdir / run
    writer = writer_mod.SummaryWriter(log_dir=str(folder))
    try:
        for step in range(steps):
            writer.add_scalar(tag, loss(run, step), step)
    finally:
        writer.close()
    return folder


def event_file(folder: Path) -> Path:
    [path] = sorted(folder.glob("*tfevents*"))
    return path
