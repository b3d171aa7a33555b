"""A trace big enough that a first open visibly takes a while, for the progress tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def make_big_logdir(root: Path) -> Path:
    """`root/logs/run/big.pt.trace.json.gz`: a 256 MiB (JSON) Kineto-style trace, gzip (~25 MB);
    a first open parses it for a second or more."""
    logdir = root / "logs"
    (logdir / "run").mkdir(parents=True)
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_kineto_trace.py"), "--size-mb", "256", "-o",
                    str(logdir / "run" / "big.pt.trace.json.gz"), "-q"], check=True, timeout=600)
    return logdir
