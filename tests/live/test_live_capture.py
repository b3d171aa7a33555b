"""Capturing windows from a real JAX training loop on the CPU, handed to the sidecar's watch source."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tb_reduce_plugin.live.capture import jax_windows
from tb_reduce_plugin.live.sidecar import LiveConfig, Sidecar

jax = pytest.importorskip("jax")


def test_jax_windows_are_captured_off_the_training_thread_and_reduced_with_their_steps(tmp_path: Path) -> None:
    import jax.numpy as jnp

    @jax.jit
    def train_step(w, x):
        return w - 0.01 * jax.grad(lambda w: jnp.mean((x @ w) ** 2))(w)

    w, x = jnp.ones((64, 64)), jnp.ones((128, 64))
    w = train_step(w, x).block_until_ready()
    folder = tmp_path / "profiles"
    step = 0
    with jax_windows(folder, every_s=1.0, window_s=0.5):
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline:
            with jax.profiler.StepTraceAnnotation("train", step_num=step):
                w = train_step(w, x).block_until_ready()
                time.sleep(0.01)
            step += 1
    windows = sorted(folder.glob("*.xplane.pb"))
    assert len(windows) >= 2, list(folder.iterdir())
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # scratch folders are gone
    car = Sidecar(LiveConfig(logdir=str(tmp_path / "logdir"), watch=str(folder), settle_s=0.0,
                             triggers=["name:^never$:1s"]))
    records = car.step()
    car.finish()
    assert len(records) == len(windows)
    numbers = [n for r in records for n in r.step_numbers]
    assert numbers and all(0 <= n < step for n in numbers) and numbers == sorted(numbers)


def test_a_bad_window_setting_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="window_s"):
        with jax_windows(tmp_path, every_s=1.0, window_s=2.0):
            pass
