"""Anomaly runs in the live folder, bounded in number: the oldest are pruned past a cap.

Each trigger firing the rate limiter allows becomes a run `LOGDIR/live/<window>-anomaly-
<time>-<kind>/` holding the raw windows around it (hard links out of the ring, so the
ring's eviction frees none of their space) and `anomaly.json`. The rate limiter bounds
how fast they come (a few an hour per trigger), not how many there are: a sidecar that
runs for weeks would fill the disk with them. `prune_anomalies` keeps the newest `keep`
(the CLI's `--keep-anomalies`, default 20) and deletes the rest, oldest first.

Oldest by name: a run's name starts with its window's name (capture time in UTC, then
sequence number), then the anomaly's time, so names sort as the runs were made, and a
clock that moved does not reorder runs already written.

Why a run is renamed before it is deleted (as `windows.WindowWriter.prune` does): the
plugin's logdir walk lists whatever is there at any moment, and a folder being deleted
file by file would be a run whose files vanish under a reader. The rename to a dot name
(`.pruned-<pid>-anomaly-…`, which discovery skips) is atomic, so the run leaves the
listing whole; if the process is killed before the delete ends, the next `WindowWriter`
removes the leftover, as it removes its own (`.pruned-<pid>-…` of a dead pid).

Only folders named as anomaly runs are touched: windows, files, symlinks (even one named
like a run: its target is never followed) and anything else are left alone.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import stat

from ..errors import TraceError

log = logging.getLogger(__name__)

# `<window>-anomaly-…`, the window's name as `windows.WINDOW_NAME` writes it.
ANOMALY_NAME = re.compile(r"^\d{8}T\d{6}\.\d{3}Z-\d{6,}-anomaly-.")
PRUNED_PREFIX = ".pruned-"  # one of `windows.TEMP_PREFIXES`: a dead process's leftovers are removed on resume


def anomaly_runs(live_dir: str) -> list[str]:
    """The anomaly runs' folder names in `live_dir`, oldest first (real folders only)."""
    try:
        names = os.listdir(live_dir)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        if not ANOMALY_NAME.match(name):
            continue
        try:
            st = os.lstat(os.path.join(live_dir, name))
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            out.append(name)
    return sorted(out)


def prune_anomalies(live_dir: str, keep: int) -> list[str]:
    """Delete all but the newest `keep` anomaly runs in `live_dir`; the names deleted, oldest first.

    One log line per run pruned. A run that cannot be renamed away (a folder it may not
    write) is left, with a warning, for the next prune; a listing that fails
    is a warning and prunes nothing: pruning never stops the sidecar.
    """
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise TraceError(f"keep must be a whole number of anomaly runs, 0 or more, not {keep!r}")
    try:
        names = anomaly_runs(live_dir)
    except OSError as exc:
        log.warning("tb-reduce live: cannot list the anomaly runs in %s: %s", live_dir, exc.strerror or exc)
        return []
    gone = names[: max(0, len(names) - keep)]
    pruned = []
    for name in gone:
        doomed = os.path.join(live_dir, f"{PRUNED_PREFIX}{os.getpid()}-anomaly-{secrets.token_hex(6)}")
        try:
            os.rename(os.path.join(live_dir, name), doomed)
        except FileNotFoundError:  # gone already (removed by hand)
            continue
        except OSError as exc:
            log.warning("tb-reduce live: cannot prune the anomaly run %s: %s", name, exc.strerror or exc)
            continue
        shutil.rmtree(doomed, ignore_errors=True)  # what is left, the next WindowWriter removes
        log.info("tb-reduce live: pruned the anomaly run %s (the newest %d are kept)", name, keep)
        pruned.append(name)
    return pruned
