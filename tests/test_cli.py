"""`tb-reduce reduce`: output, summary line, stats, exit codes — run as a real process."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

DEMO = ROOT / "demo_logdir" / "pytorch_cnn" / "vm_12922.1795977935943642718.pt.trace.json.gz"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tb_reduce_plugin", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_reduce_writes_gzip_json_and_prints_one_summary_line(tmp_path: Path) -> None:
    out = tmp_path / "out.json.gz"
    stats = tmp_path / "stats.json"
    r = run("reduce", str(DEMO), "-o", str(out), "--level", "3", "--stats-json", str(stats))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and "level 3" in lines[0] and "events" in lines[0]
    assert r.stderr == ""  # no progress bar when stderr is not a terminal
    doc = json.loads(gzip.decompress(out.read_bytes()))
    s = json.loads(stats.read_text())
    assert doc["tb_reduce"]["level"] == 3 and doc["tb_reduce"]["resolution"] == 5000
    assert s["output"]["events"] == len(doc["traceEvents"]) < s["input"]["events"]
    assert s["input"]["format"] == "chrome-json" and s["timings_s"]["total"] > 0


def test_plain_json_output_by_name_and_auto_level(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    r = run("reduce", str(DEMO), "-o", str(out), "--level", "auto")
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["tb_reduce"]["level"] == 0 and "auto" in doc["tb_reduce"]  # small: lossless fits the budget


def test_a_window_reduces_to_events_in_it(tmp_path: Path) -> None:
    out = tmp_path / "w.json"
    full = json.loads(gzip.decompress(DEMO.read_bytes()))
    ts = sorted(e["ts"] for e in full["traceEvents"] if e.get("ph") == "X")
    lo, hi = ts[len(ts) // 3], ts[2 * len(ts) // 3]
    r = run("reduce", str(DEMO), "-o", str(out), "--level", "2", "--start-us", str(lo), "--end-us", str(hi))
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["tb_reduce"]["window_us"] == [lo, hi]
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            assert e["ts"] <= hi and e["ts"] + max(e.get("dur", 0), 0) >= lo


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"", "empty"),
        (b"\x1f\x8b\x08\x00garbage-garbage-garbage", "gzip"),
        (b'{"rocprofiler-sdk": {"agents": []}}', "not a Chrome trace"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1}, {"ph": ', None),
        (b"\x00\x01\x02 binary", "not a trace"),
    ],
)
def test_bad_input_exits_non_zero_with_one_line_and_writes_nothing(tmp_path: Path, content: bytes, needle) -> None:
    src = tmp_path / "in.json"
    src.write_bytes(content)
    out = tmp_path / "out.json.gz"
    r = run("reduce", str(src), "-o", str(out))
    if needle is None:  # a truncated Object-format file is read up to its last complete event
        assert r.returncode == 0 and "truncated" in r.stdout
        return
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and needle in r.stderr and "Traceback" not in r.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == [src]


def test_bad_arguments_are_reported_without_a_traceback(tmp_path: Path) -> None:
    for args in (["--level", "7"], ["--level", "x"], ["--start-us", "5"], ["--start-us", "5", "--end-us", "1"]):
        r = run("reduce", str(DEMO), "-o", str(tmp_path / "o.json"), *args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (args, r.stderr)
    r = run("reduce", str(tmp_path / "missing.json"), "-o", str(tmp_path / "o.json"))
    assert r.returncode == 2 and "cannot open" in r.stderr


@pytest.mark.parametrize(
    "content, needle",
    [
        (b'{"traceEvents":[{"ph":"X","ts":1,"dur":1,"args":' + b"[" * 100000 + b"]" * 100000 + b"}]}", "nested too deeply"),
        (b'{"meta":' + b"[" * 100000 + b"]" * 100000 + b',"traceEvents":[]}', "nested too deeply"),
        (b'{"traceEvents":[{"ph":"X","ts":NaN,"dur":1}]}', "malformed JSON"),
        ('{"traceEvents":[]}'.encode("utf-16"), "not a trace"),
    ],
    ids=["deep-args", "deep-top-level", "nan", "utf16"],
)
def test_hostile_json_gets_a_one_line_error(tmp_path: Path, content: bytes, needle: str) -> None:
    src = tmp_path / "in.json"
    src.write_bytes(content)
    r = run("reduce", str(src), "-o", str(tmp_path / "o.json"))
    assert r.returncode == 2 and needle in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_an_infinite_timestamp_counts_as_none(tmp_path: Path) -> None:
    src = tmp_path / "in.json"
    src.write_bytes(b'{"traceEvents":[{"ph":"X","ts":1e400,"dur":1},{"ph":"X","ts":5,"dur":2}]}')
    out = tmp_path / "o.json"
    assert run("reduce", str(src), "-o", str(out), "--level", "2").returncode == 0
    doc = json.loads(out.read_text())
    assert doc["tb_reduce"]["window_us"] == [5.0, 7.0] and len(doc["traceEvents"]) == 2

