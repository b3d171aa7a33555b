"""Real profiles recorded on the spot, for tests that need one bigger than the corpus's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIG_STEPS = 14_000  # ~41 events a step: past auto's 500,000-event budget


def record_big_xspace(out: Path, steps: int = BIG_STEPS) -> Path:
    """A real JAX profile of `steps` training steps (`bench/make_jax_xspace.py`): its xplane.pb."""
    pytest.importorskip("jax", reason="jax is a test dependency (setup.py extras 'test')")
    subprocess.run([sys.executable, str(ROOT / "bench" / "make_jax_xspace.py"), "--steps", str(steps),
                    "--out", str(out)], check=True, capture_output=True, timeout=600, cwd=str(ROOT))
    return next(out.glob("plugins/profile/*/*.xplane.pb"))
