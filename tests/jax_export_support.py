"""A real JAX profile whose `trace.json.gz` export reached JAX's 1,000,000-event cap, recorded
on the CPU by bench/make_jax_xspace.py (the loop test_xspace's cap test records): ~25 s, 41 MB
of XSpace, 2.15 M events of which the export keeps the first million."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CAPPED_STEPS = 26_000  # past the cap: the loop writes ~41 complete events a step


def record_capped_jax_run(out: Path) -> Path:
    """Records the profile under `out` (`plugins/profile/<ts>/vm.xplane.pb` and its export);
    returns the session folder."""
    pytest.importorskip("jax", reason="jax is a test dependency (setup.py extras 'test')")
    subprocess.run([sys.executable, str(ROOT / "bench" / "make_jax_xspace.py"), "--steps", str(CAPPED_STEPS),
                    "--out", str(out)], check=True, capture_output=True, timeout=600)
    return next(out.glob("plugins/profile/*/vm.xplane.pb")).parent
