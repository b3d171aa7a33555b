"""A real JAX profile whose `trace.json.gz` export reached JAX's 1,000,000-event cap, recorded
on the CPU by bench/make_jax_xspace.py: ~25 s, 40 MB of XSpace, ~1.07 M events (JAX 0.10) of
which the export keeps the first million.

Recorded once per machine and shared: four suites need it (the cap in discovery, the
dashboard's capped label, the XSpace reader past the cap, the Profile tab's Trace Viewer
drawing a big XSpace), all in `make test`, and a recording costs 25-45 s of a 2-core CI
machine each time. The first test process to need it records it under the temp folder,
holding a lock (`fcntl.flock`) so parallel pytest workers wait for that one recording instead
of making their own; the folder's name carries what it depends on (JAX's version, the steps,
the recorder script's contents), and a recording is only used once its `done` marker is
written. Each caller gets hard links (or copies) of the files in its own folder, so nothing a
test does touches the shared one.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CAPPED_STEPS = 26_000  # past the cap: the loop writes ~41 complete events a step
RECORDER = ROOT / "bench" / "make_jax_xspace.py"


def _shared_recording() -> Path:
    """The shared recording's root (holding `plugins/profile/<ts>/vm.xplane.pb` and its export)."""
    jax = pytest.importorskip("jax", reason="jax is a test dependency (setup.py extras 'test')")
    key = hashlib.sha256(f"{jax.__version__}|{CAPPED_STEPS}|".encode() + RECORDER.read_bytes()).hexdigest()[:16]
    root = Path(tempfile.gettempdir()) / f"tb-reduce-test-jax-capped-{key}"
    done = root / "done"
    lock_path = Path(tempfile.gettempdir()) / f"tb-reduce-test-jax-capped-{key}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_file():
            shutil.rmtree(root, ignore_errors=True)  # a recording a killed process left half-made
            subprocess.run([sys.executable, str(RECORDER), "--steps", str(CAPPED_STEPS), "--out", str(root / "rec")],
                           check=True, capture_output=True, timeout=600)
            done.write_text("ok")
    return root / "rec"


def record_capped_jax_run(out: Path) -> Path:
    """The capped profile under `out` (`plugins/profile/<ts>/vm.xplane.pb` and its export, linked
    from the shared recording); returns the session folder."""
    shared = _shared_recording()
    for src in shared.rglob("*"):
        if not src.is_file():
            continue
        dst = out / src.relative_to(shared)
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dst)
        except OSError:  # another filesystem
            shutil.copy2(src, dst)
    return next(out.glob("plugins/profile/*/vm.xplane.pb")).parent
