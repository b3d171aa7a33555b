"""The Profile tab's routes attacked as the Trace Reduce tab's are (`test_hostile_server.py`):
a real TensorBoard with XProf 2.24.2 and tb-reduce, a storm of distinct Trace Viewer
windows mixed with hostile parameters, and a bomb laid out as an XProf run. The server
stays up, answers each with a clear status, and its peak RSS (`VmHWM`) stays within
`--tb_reduce_memory_mb` of where it started (with the same wide margin as there)."""

from __future__ import annotations

import collections
import gzip
import json
import threading
from pathlib import Path

import hostile_files as hf
import pytest
from hostile_support import MARGIN_MB, error_of
from tensorboard_process import start_tensorboard, storm

pytest.importorskip("xprof", reason="tensorboard-plugin-profile is a test dependency (setup.py extras 'test')")

PROFILE = "data/plugin/profile/"
BUDGET_MB = 384
HOSTILE = [
    dict(run="run", host="s\x00", tag="trace_viewer@"),
    dict(run="../../etc", host="passwd", tag="trace_viewer@"),
    dict(run="run", host="..%2F..%2Fetc%2Fpasswd", tag="trace_viewer@"),
    dict(run="run", host="s", tag="trace_viewer@", resolution="999999999999"),
    dict(run="run", host="s", tag="trace_viewer@", unique_id="tbr-999999999999", event_name="x"),
    dict(run="run", host="s", tag="trace_viewer@", start_time_ms="1e308", end_time_ms="inf"),
    dict(run="run", host="s", tag="trace_viewer@", search_prefix=""),
]


def test_a_storm_of_trace_viewer_windows_and_hostile_asks_stays_within_the_budget(tmp_path: Path) -> None:
    logdir = tmp_path / "logdir"
    (logdir / "run").mkdir(parents=True)
    hf.tiny_events_gz(logdir / "run" / "s.json.gz", 1_000_000)  # a Chrome trace: the Profile tab's via tb-reduce
    tb = start_tensorboard(logdir, tmp_path / "cache", "--load_fast=false", "--tb_reduce_memory_mb", str(BUDGET_MB),
                           order="xprof-first", cgroup_mb=4096)
    try:
        got, headers, body = tb.get(PROFILE + "data", gz=True, run="run", host="s", tag="trace_viewer@",
                                    resolution=1000)
        assert got == 200 and headers["x-served-by"].startswith("tb-reduce/"), (got, body[:300], tb.tail())
        t0, t1 = json.loads(gzip.decompress(body))["fullTimespan"]
        idle = tb.peak_mb()
        statuses: collections.Counter = collections.Counter()
        lock = threading.Lock()

        def ask(k: int) -> None:
            if k % 8 == 0:
                params = HOSTILE[(k // 8) % len(HOSTILE)]
            else:
                a = t0 + (t1 - t0) * (k % 97) / 100
                params = dict(run="run", host="s", tag="trace_viewer@", resolution=500 + 37 * k,
                              start_time_ms=a, end_time_ms=a + (t1 - t0) * (1 + k % 13) / 400)
            got, headers, body = tb.get(PROFILE + "data", gz=True, **params)
            if got != 200 and "x-served-by" in headers:
                error_of(got, body)  # one clear line, never a traceback
            if "x-served-by" not in headers:  # a run tb-reduce does not list: XProf's to refuse (it does)
                assert got == 404 and params["run"] == "../../etc", (got, params, body[:200])
            with lock:
                statuses[got] += 1

        runs_s = storm(tb, ask, 80, PROFILE + "runs")
        assert tb.alive(), tb.tail()
        # 413: a resolution of 10^12 buckets is cut to 200,000, whose conversion would pass the budget
        assert set(statuses) <= {200, 400, 404, 413, 503} and statuses[200] >= 2 and statuses[400] >= 2, statuses
        assert tb.peak_mb() <= idle + BUDGET_MB + MARGIN_MB, (tb.peak_mb(), idle)
        assert runs_s and max(runs_s) < 10, max(runs_s)  # a hang detector, not a timing
        assert "Traceback" not in tb.tail()
    finally:
        tb.stop()


def test_a_bomb_laid_out_as_an_xprof_run_is_refused_in_the_trace_viewer_not_handed_to_xprof(tmp_path: Path) -> None:
    logdir = tmp_path / "logdir"
    session = logdir / "bomb" / "plugins" / "profile" / "s"
    session.mkdir(parents=True)
    hf.xspace_events_bomb(session / "h.xplane.pb", 6_000_000)  # 12 MB: 6 M empty events
    budget = 64
    tb = start_tensorboard(logdir, tmp_path / "cache", "--load_fast=false", "--tb_reduce_memory_mb", str(budget),
                           order="tb_reduce-first", cgroup_mb=4096)
    try:
        idle = tb.peak_mb()
        got, headers, body = tb.get(PROFILE + "data", gz=True, run="bomb/s", host="h", tag="trace_viewer@",
                                    resolution=8000)
        assert got == 413 and headers["x-served-by"].startswith("tb-reduce/"), (got, body[:300])
        assert "--tb_reduce_memory_mb" in error_of(got, body)
        assert tb.alive() and tb.peak_mb() <= idle + budget + MARGIN_MB, (tb.peak_mb(), idle)
    finally:
        tb.stop()
