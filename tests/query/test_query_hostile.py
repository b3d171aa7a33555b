"""Search and range statistics attacked as the other routes are (`test_hostile_server.py`): a
real TensorBoard process, a storm of distinct searches (hostile regular expressions among
them), full-range and windowed tables and hostile parameters, over a 1 M-event trace with
200,000 distinct names and a trace of names built to make backtracking regex engines explode.
The server stays up, answers each with a clear status, keeps answering `runs`, and its peak
RSS (`VmHWM`) stays within `--tb_reduce_memory_mb` of where it started (same margin as there)."""

from __future__ import annotations

import collections
import json
import threading
from pathlib import Path

import hostile_files as hf
from hostile_support import MARGIN_MB, error_of
from tensorboard_process import start_tensorboard, storm

ROUTE = "data/plugin/tb_reduce/"
BUDGET_MB = 384
# Patterns a backtracking engine takes exponential (or unbounded) time on, and ones RE2 refuses.
REGEXES = [r"(a+)+$", r"(a|aa)+$", r"(a*)*b$", r"^(([a-z])+.)+[A-Z]([a-z])+$", r"(x+x+)+y", r"(.*a){20}",
           r"(\w+\s?)*$", r"(a|a?)+$"]
REFUSED = [r"(a)\1", r"(?=a)", r"a{1001}", "a**", "[", r"(?<=a)b"]
HOSTILE = [
    dict(q="a\x00"), dict(q="x" * 5000), dict(q=""), dict(q="op1", limit="-1"), dict(q="op1", limit="1e9"),
    dict(q="op1", offset="1e30"), dict(q="op1", start_us="nan", end_us="1"), dict(q="op1", re="2"),
    dict(q="op1", start_us="5", end_us="1"), dict(q="op1", icase="yes"),
]


def _long_names_trace(path: Path, events: int = 400, length: int = 20_000) -> None:
    """Events named by long runs of 'a' ending in a character no pattern above wants."""
    evs = [{"ph": "X", "name": "a" * (length + k) + "!", "pid": 1, "tid": 1, "ts": 10.0 * k, "dur": 5.0}
           for k in range(events)]
    path.write_text(json.dumps({"traceEvents": evs}))


def test_a_storm_of_searches_and_tables_with_hostile_patterns_stays_within_the_budget(tmp_path: Path) -> None:
    logdir = tmp_path / "logdir"
    (logdir / "run").mkdir(parents=True)
    (logdir / "names").mkdir()
    hf.tiny_events_gz(logdir / "run" / "s.json.gz", 1_000_000, distinct_names=200_000)
    _long_names_trace(logdir / "names" / "a.json")
    tb = start_tensorboard(logdir, tmp_path / "cache", "--load_fast=false", "--tb_reduce_memory_mb", str(BUDGET_MB),
                           cgroup_mb=4096)
    try:
        first = tb.json(ROUTE + "aggregate", run="run", host="s")  # parses the trace, prepares the parents
        assert first["slices"] == 1_000_000 and 190_000 <= first["names"] <= 200_000  # names drawn at random
        t0, t1 = tb.json(ROUTE + "stats", run="run", host="s", level=4)["trace_us"]
        assert tb.json(ROUTE + "search", run="names", host="a", q="a", limit=1)["total"] == 400
        idle = tb.peak_mb()
        statuses: collections.Counter = collections.Counter()
        lock = threading.Lock()

        def ask(k: int) -> None:
            kind = k % 6
            if kind == 0:
                route, params = "search", dict(run="names", host="a", q=REGEXES[(k // 6) % len(REGEXES)], re=1)
            elif kind == 1:
                route, params = "search", dict(run="run", host="s", q=REFUSED[(k // 6) % len(REFUSED)], re=1)
            elif kind == 2:
                route, params = "search", dict(run="run", host="s", **HOSTILE[(k // 6) % len(HOSTILE)])
            elif kind == 3:  # distinct patterns over 200,000 names, a full page each
                route, params = "search", dict(run="run", host="s", q=f"op{k % 97}[0-9]*$", re=1, icase=1,
                                               limit=10_000, offset=k)
            elif kind == 4:
                a = t0 + (t1 - t0) * (k % 89) / 100
                route, params = "aggregate", dict(run="run", host="s", start_us=a, end_us=a + (t1 - t0) * (1 + k % 7) / 50,
                                                  limit=10_000)
            else:
                route, params = "aggregate", dict(run="run", host="s", pid=1, tid=1 + k % 8)
            got, _, body = tb.get(ROUTE + route, **params)
            if got != 200:
                error_of(got, body)  # one clear line, never a traceback
            if kind in (0, 3, 4, 5):
                assert got in (200, 503), (got, params, body[:300])
            if kind == 1:
                assert got == 400 and "regular expression" in error_of(got, body), (params, body[:300])
            with lock:
                statuses[got] += 1

        runs_s = storm(tb, ask, 90, ROUTE + "runs")  # 503s (come back later) are the storm's expected answer
        assert tb.alive(), tb.tail()
        print(f"statuses {dict(statuses)}; VmHWM idle {idle:.0f} MB, peak {tb.peak_mb():.0f} MB; "
              f"runs polled {len(runs_s)}x, slowest {max(runs_s):.3f} s")
        assert set(statuses) <= {200, 400, 503} and statuses[200] >= 10 and statuses[400] >= 20, statuses
        assert tb.peak_mb() <= idle + BUDGET_MB + MARGIN_MB, (tb.peak_mb(), idle)
        assert runs_s and max(runs_s) < 10, max(runs_s)  # a hang detector, not a timing
        assert "Traceback" not in tb.tail()
    finally:
        tb.stop()
