"""`tb-reduce waveforms`: one row per step, CSV or JSON, run as a real process."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

from conftest import TESTS, write_trace

FIXTURES = TESTS / "fixtures" / "traces"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tb_reduce_plugin", *args], capture_output=True, text=True,
                          timeout=300)


def test_csv_has_one_row_per_step_with_a_column_per_category() -> None:
    p = run("waveforms", str(FIXTURES / "torch_stalled_step.pt.trace.json.gz"))
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    assert [int(r["step"]) for r in rows] == list(range(8))
    assert list(rows[0]) == ["step", "start_us", "step_time_ms", "compute_ms", "communication_ms", "memory_ms",
                             "data_loading_ms", "unaccounted_ms"]
    # the stalled step slept 150 ms outside any op: unaccounted, and only there
    unaccounted = {r["step"]: float(r["unaccounted_ms"]) for r in rows}
    assert unaccounted["5"] >= 140 and max(v for k, v in unaccounted.items() if k != "5") < 20
    slowest = max(rows, key=lambda r: float(r["step_time_ms"]))
    assert slowest["step"] == "5" and float(slowest["step_time_ms"]) >= 150
    assert p.stderr == ""


def test_json_has_steps_with_busy_time_by_category_and_the_series_names() -> None:
    p = run("waveforms", str(FIXTURES / "jax_stalled_step.xplane.pb"), "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["series"] == ["step_time_ms", "compute_ms", "communication_ms", "memory_ms", "data_loading_ms",
                             "unaccounted_ms"]
    assert [s["step"] for s in doc["steps"]] == list(range(8)) and doc["marker"] == "step_num"
    first = doc["steps"][0]
    assert set(first) == {"step", "start_us", "end_us", "step_time_ms", "busy_ms"}
    assert set(first["busy_ms"]) == {"compute", "communication", "memory", "data_loading", "unaccounted"}
    assert doc["slowest"][0] == 5
    assert doc["unaccounted_stands_out"][0] == 5  # the 150 ms sleep: in the Python tracer's `$time sleep`, no op


def test_a_trace_without_step_markers_prints_a_header_and_says_why_on_stderr(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "plain.json", [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 1}])
    p = run("waveforms", str(path))
    assert p.returncode == 0
    assert p.stdout.strip() == "step,start_us,step_time_ms"
    assert p.stderr.count("\n") == 1 and "no step markers" in p.stderr


def test_an_unreadable_trace_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "rocprof.json").write_bytes(b'{"rocprofiler-sdk-tool": [1, 2, 3]}')
    for path in (tmp_path / "missing.json", tmp_path / "rocprof.json"):
        p = run("waveforms", str(path))
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
