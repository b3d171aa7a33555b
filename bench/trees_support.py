"""What the benchmarks that compare this tree with another share (`bench_zoom_trees.py`,
`bench_first_view.py`): a logdir holding the trace (hard-linked, not a copy of gigabytes),
and a child process run in a given tree (its code first on the path), answering JSON."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path


def linked_logdir(trace: Path, work: Path) -> tuple[Path, str, str, Path]:
    """`work/logs` holding the trace as a run holds it, and the run, the host name the server
    gives it, and the linked file: a Chrome trace in `run/`, an XSpace in
    `run/plugins/profile/bench/` (the run is then `run/bench`, as XProf's sessions are)."""
    xspace = trace.name.endswith(".xplane.pb")
    logdir = work / "logs" / "run" / "plugins" / "profile" / "bench" if xspace else work / "logs" / "run"
    logdir.mkdir(parents=True)
    local = logdir / trace.name
    try:
        os.link(trace, local)
    except OSError:
        shutil.copyfile(trace, local)
    if xspace:
        return work / "logs", "run/bench", trace.name[:-len(".xplane.pb")], local
    host = trace.name.split(".pt.trace.json")[0].split(".trace.json")[0].split(".json")[0]
    return work / "logs", "run", host, local


def run_in(tree: Path, child: str, *args: object) -> dict:
    """The JSON the last line of `python -c child args...` prints, run with `tree`'s code."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", child, *map(str, args)], cwd=tree, env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
