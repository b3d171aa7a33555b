"""`tb-reduce reduce`: output, summary line, stats, exit codes — run as a real process."""

from __future__ import annotations

import errno
import gzip
import io
import json
import math
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import hostile_files
import pytest
from conftest import ROOT, write_trace

from tb_reduce_plugin.cli import main
from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.reduce.pipeline import check_window, index_file, reduce_index

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



# --- Faults of the output side (issue 9, finding 7) ---------------------------------
# Each one exits 2 with one line on stderr that names the file as the user gave it,
# and leaves nothing behind: no `.tb-reduce-*.part`, no half-written stats file.


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    """A real 1.6 MB PyTorch trace (the corpus's torch_cpu_cnn_small, byte for byte:
    the demo logdir ships it gzipped) in its own folder, so outputs beside it show."""
    folder = tmp_path / "in"
    folder.mkdir()
    return write_trace(folder / "x.pt.trace.json", None, raw=gzip.decompress(DEMO.read_bytes()))


def cli(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str]:
    """Run the real command line in-process; returns (exit status, its one stderr line)."""
    code = main(list(args))
    err = capsys.readouterr().err
    if code != 0:
        assert err.count("\n") == 1 and err.startswith("tb-reduce: error: ") and "Traceback" not in err, err
    return code, err


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_an_output_folder_that_does_not_exist_is_refused_by_the_path_given(
        trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    before = trace.read_bytes()
    code, err = cli(capsys, "reduce", str(trace), "-o", str(tmp_path / "nope" / "x.json.gz"))
    assert code == 2 and f"cannot write {tmp_path / 'nope' / 'x.json.gz'}" in err and "does not exist" in err
    assert listing(tmp_path) == ["in"] and listing(trace.parent) == [trace.name] and trace.read_bytes() == before


def test_an_output_that_is_a_folder_is_refused_and_leaves_no_part_file(
        trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    out.mkdir()
    code, err = cli(capsys, "reduce", str(trace), "-o", str(out))
    assert code == 2 and f"cannot write {out}: is a folder" in err
    assert listing(tmp_path) == ["in", "out"] and listing(out) == []  # no .tb-reduce-*.part beside it


def test_an_output_that_is_not_a_regular_file_is_refused_and_kept(
        trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code, err = cli(capsys, "reduce", str(trace), "-o", str(fifo))
    assert code == 2 and "not a regular file" in err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and listing(tmp_path) == ["in", "pipe"]


@pytest.mark.parametrize("spelling", ["same", "dot-slash", "symlink", "hardlink"])
def test_an_output_that_is_the_input_is_refused_before_any_work(
        trace: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, spelling: str) -> None:
    monkeypatch.chdir(trace.parent)
    before = trace.read_bytes()
    out = {"same": trace.name, "dot-slash": f"./{trace.name}", "symlink": "link.json", "hardlink": "hard.json"}[spelling]
    if spelling == "symlink":
        os.symlink(trace.name, out)
    if spelling == "hardlink":
        os.link(trace.name, out)
    code, err = cli(capsys, "reduce", trace.name, "-o", out)
    assert code == 2 and f"refusing to write {out}: it is the input trace {trace.name}" in err
    assert trace.read_bytes() == before and not any(n.startswith(".tb-reduce-") for n in listing(trace.parent))


@pytest.mark.parametrize("which", ["input", "output"])
def test_a_stats_file_that_is_the_input_or_the_output_is_refused(
        trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture, which: str) -> None:
    out = tmp_path / "o.json"
    stats = trace if which == "input" else tmp_path / "." / "o.json"  # another spelling of a file not yet written
    before = trace.read_bytes()
    code, err = cli(capsys, "reduce", str(trace), "-o", str(out), "--stats-json", str(stats))
    assert code == 2 and f"refusing to write {stats}: it is the {which}" in err
    assert trace.read_bytes() == before and listing(tmp_path) == ["in"]  # refused before the reduction


@pytest.mark.parametrize(
    "where, needle",
    [("missing-folder", "does not exist"), ("a-folder", "is a folder"), ("under-a-file", "is not a folder")],
)
def test_an_unwritable_stats_path_is_refused_before_the_reduction(
        trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture, where: str, needle: str) -> None:
    stats = {"missing-folder": tmp_path / "nope" / "s.json", "a-folder": tmp_path / "in",
             "under-a-file": trace / "s.json"}[where]
    code, err = cli(capsys, "reduce", str(trace), "-o", str(tmp_path / "o.json"), "--stats-json", str(stats))
    assert code == 2 and f"cannot write {stats}:" in err and needle in err
    assert listing(tmp_path) == ["in"] and listing(trace.parent) == [trace.name]  # no output: nothing was reduced


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "1e305", "lots"])
def test_a_max_inflated_mb_that_is_not_a_positive_finite_number_is_one_line(
        trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture, value: str) -> None:
    code, err = cli(capsys, "reduce", str(trace), "-o", str(tmp_path / "o.json"), "--max-inflated-mb", value)
    assert code == 2 and "--max-inflated-mb" in err and repr(value) in err and listing(tmp_path) == ["in"]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["reduce", "IN", "-o", "OUT", "--level"], "argument --level: expected one argument"),
        (["reduce", "IN"], "required: -o/--output"),
        (["reduce"], "required: input, -o/--output"),
        (["reduce", "IN", "-o", ""], "must not be empty"),
        (["shrink", "IN"], "invalid choice: 'shrink'"),
        (["reduce", "IN", "-o", "OUT", "--start-us", "abc", "--end-us", "5"], "invalid float value: 'abc'"),
    ],
)
def test_argument_errors_are_one_line_not_the_usage_block(
        trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture, args: list, needle: str) -> None:
    args = [str(trace) if a == "IN" else str(tmp_path / "o.json") if a == "OUT" else a for a in args]
    code, err = cli(capsys, *args)
    assert code == 2 and needle in err and "usage:" not in err and "--help" in err
    assert listing(tmp_path) == ["in"]


def test_help_still_prints_the_usage_and_exits_zero(capsys: pytest.CaptureFixture) -> None:
    assert main(["reduce", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: tb-reduce reduce") and "--max-inflated-mb" in out


@pytest.mark.parametrize(
    "start, end, needle",
    [
        ("-1e308", "1e308", "too wide"),  # the width overflows to inf
        ("5", "5.0000000001", "at least 1e-06 µs"),
        ("nan", "5", "start_us must be a finite number"),
        ("0", "inf", "end_us must be a finite number"),
        ("7", "7", "below"),
        ("8", "-2.5e3", "below"),  # a negative number in exponent form is a value, not an option
    ],
)
def test_a_window_no_reduction_can_honour_is_refused_before_reading(
        trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture, start: str, end: str, needle: str) -> None:
    code, err = cli(capsys, "reduce", str(trace), "-o", str(tmp_path / "o.json"), "--start-us", start, "--end-us", end)
    assert code == 2 and needle in err and listing(tmp_path) == ["in"]


@pytest.mark.parametrize(
    "start, end",
    [(None, None), (0.0, 1e-6), (-1e300, 1e300), (1.7e12, 1.7e12 + 0.25), (None, 5.0), (-3.0, None)],
)
def test_check_window_accepts_finite_windows_at_least_a_picosecond_wide(start, end) -> None:
    check_window(start, end)  # raises on refusal


@pytest.mark.parametrize(
    "start, end",
    [(-1e308, 1e308), (0.0, 9e-7), (1.0, 1.0), (2.0, 1.0), (math.nan, 1.0), (0.0, math.inf), (None, -math.inf)],
)
def test_check_window_refuses_what_no_reduction_can_honour(start, end) -> None:
    with pytest.raises(TraceError):
        check_window(start, end)


def test_reduce_index_checks_the_window_itself(trace: Path) -> None:
    """Library callers (the plugin, pools) get the same refusal as the command line."""
    index = index_file(trace)
    with pytest.raises(TraceError, match="too wide"):
        reduce_index(index, io.BytesIO(), 2, -1e308, 1e308)


def test_outputs_honour_the_umask_like_open_does(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    old = os.umask(0o027)
    try:
        code, _ = cli(capsys, "reduce", str(trace), "-o", str(tmp_path / "o.json.gz"),
                      "--stats-json", str(tmp_path / "s.json"))
    finally:
        os.umask(old)
    assert code == 0
    assert stat.S_IMODE(os.stat(tmp_path / "o.json.gz").st_mode) == 0o640  # mkstemp would give 0600
    assert stat.S_IMODE(os.stat(tmp_path / "s.json").st_mode) == 0o640


def _strict(constant: str) -> None:
    raise AssertionError(f"not JSON: {constant}")


def test_a_trace_spanning_all_floats_asks_for_a_window_and_its_windowed_stats_are_strict_json(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Events at -1e308 and 1e308 make the default window infinitely wide: no bucket can
    be made of it, so the user is asked for a window (one line, exit 2, no files); with
    one, the stats are strict JSON."""
    src = write_trace(tmp_path / "wide.json", {"traceEvents": [
        {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": -1e308, "dur": 1},
        {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 1e308, "dur": 1},
    ]})
    out, stats_path = tmp_path / "o.json.gz", tmp_path / "s.json"
    code, err = cli(capsys, "reduce", str(src), "-o", str(out), "--stats-json", str(stats_path))
    assert code == 2 and "ask for a window" in err and err.count("\n") == 1
    assert not out.exists() and not stats_path.exists()
    code, _ = cli(capsys, "reduce", str(src), "-o", str(out), "--stats-json", str(stats_path),
                  "--start-us=-1e300", "--end-us=1e300")
    assert code == 0
    stats = json.loads(stats_path.read_text(), parse_constant=_strict)
    assert stats["window_us"] == [-1e300, 1e300] and stats["bucket_us"] == 2e300 / 20_000


def test_stats_json_of_an_empty_trace_is_strict_json(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    src = write_trace(tmp_path / "empty.json", {"traceEvents": []})
    code, _ = cli(capsys, "reduce", str(src), "-o", str(tmp_path / "o.json"), "--stats-json", str(tmp_path / "s.json"))
    stats = json.loads((tmp_path / "s.json").read_text(), parse_constant=_strict)
    assert code == 0 and stats["input"]["events"] == 0 and stats["output"]["file_bytes"] == (tmp_path / "o.json").stat().st_size


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs: a real full disk and, remounted, a real read-only filesystem.

    chmod cannot stand in for them: the suite runs as root, which ignores modes."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root and mount(8) to make a small tmpfs (a real full or read-only filesystem)")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], check=True)


def _fill(folder: Path) -> None:
    """Write until the filesystem says it is full."""
    with open(folder / "fill", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    assert (folder / "fill").stat().st_size > 0


@pytest.mark.parametrize("output", ["o.json", "o.json.gz"])
def test_a_full_disk_is_one_line_and_leaves_no_part_file(
        trace: Path, small_fs: Path, capsys: pytest.CaptureFixture, output: str) -> None:
    before = trace.read_bytes()
    code, err = cli(capsys, "reduce", str(trace), "-o", str(small_fs / output), "--level", "0")  # ≫ 64 KiB
    assert code == 2 and f"cannot write {small_fs / output}: No space left on device" in err
    assert listing(small_fs) == [] and trace.read_bytes() == before


def test_a_full_disk_under_the_stats_file_leaves_no_half_written_stats(
        trace: Path, tmp_path: Path, small_fs: Path, capsys: pytest.CaptureFixture) -> None:
    _fill(small_fs)
    code, err = cli(capsys, "reduce", str(trace), "-o", str(tmp_path / "o.json.gz"), "--stats-json", str(small_fs / "s.json"))
    assert code == 2 and f"cannot write {small_fs / 's.json'}: No space left on device" in err
    assert listing(small_fs) == ["fill"]
    # The trace itself was written whole before the stats failed; it is complete, not partial.
    assert json.loads(gzip.decompress((tmp_path / "o.json.gz").read_bytes()))["tb_reduce"]["level"] == 2


@pytest.mark.parametrize("target", ["-o", "--stats-json"])
def test_a_read_only_filesystem_is_refused_before_the_reduction(
        trace: Path, tmp_path: Path, small_fs: Path, capsys: pytest.CaptureFixture, target: str) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    args = ["-o", str(small_fs / "o.json")] if target == "-o" else ["-o", str(tmp_path / "o.json"), "--stats-json",
                                                                    str(small_fs / "s.json")]
    code, err = cli(capsys, "reduce", str(trace), *args)
    assert code == 2 and "Read-only file system" in err and f"cannot write {small_fs}" in err
    assert listing(small_fs) == [] and listing(tmp_path) == ["in", "mnt"]  # nothing reduced, nothing left


@pytest.mark.parametrize(
    "args, needle",
    [
        (["-o", "/nonexistent/dir/x.json.gz"], "cannot write /nonexistent/dir/x.json.gz: its folder"),
        (["-o", "IN"], "refusing to write"),
        (["-o", "OUT", "--max-inflated-mb", "nan"], "--max-inflated-mb"),
    ],
)
def test_output_faults_exit_2_with_exactly_one_stderr_line_from_a_real_process(
        trace: Path, tmp_path: Path, args: list, needle: str) -> None:
    args = [str(trace) if a == "IN" else str(tmp_path / "o.json") if a == "OUT" else a for a in args]
    r = run("reduce", str(trace), *args)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [r.stderr.rstrip("\n")] and r.stderr.endswith("\n") and needle in r.stderr
    assert listing(tmp_path) == ["in"] and listing(trace.parent) == [trace.name]


def test_a_trace_needing_more_than_max_memory_mb_exits_2_naming_the_flag(trace: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "o.json.gz"
    code, err = cli(capsys, "reduce", str(trace), "-o", str(out), "--max-memory-mb", "1")
    assert code == 2 and "--max-memory-mb" in err and not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".tb-reduce-")]
    code, _ = cli(capsys, "reduce", str(trace), "-o", str(out), "--max-memory-mb", "256")
    assert code == 0 and out.exists()


@pytest.mark.parametrize("build, says", [
    (lambda p: hostile_files.xspace_hostnames_bomb(p, 20_000_000), "inflates"),
    (lambda p: hostile_files.xspace_hostnames_plain(p, 1_000_000), "not a profile"),
    (lambda p: hostile_files.xspace_events_bomb(p, 3_000_000), "--max-memory-mb"),
])
def test_an_xspace_bomb_exits_2_with_one_line_within_the_memory_limit(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                      build, says: str) -> None:  # type: ignore[no-untyped-def]
    bomb = tmp_path / "b.xplane.pb"
    build(bomb)
    code, err = cli(capsys, "reduce", str(bomb), "-o", str(tmp_path / "o.json.gz"), "--max-memory-mb", "64")
    assert code == 2 and says in err


# ---- a window in time from the trace start, as the dashboard shows it -----------------------

STALLED = ROOT / "demo_logdir" / "stalled_step" / "torch_stalled_step.pt.trace.json.gz"


@pytest.mark.parametrize("start, end", [("0.2s", "0.3s"), ("200ms", "300ms"), ("200000us", "300000µs"),
                                        ("2e-1s", "300 ms")])
def test_start_and_end_take_a_time_from_the_trace_start_in_any_unit(tmp_path: Path, start: str, end: str) -> None:
    events = json.loads(gzip.decompress(STALLED.read_bytes()))["traceEvents"]
    first = min(e["ts"] for e in events if e.get("ph") != "M" and isinstance(e.get("ts"), (int, float)))
    out = tmp_path / "w.json"
    r = run("reduce", str(STALLED), "-o", str(out), "--start", start, "--end", end)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    doc = json.loads(out.read_text())
    assert doc["tb_reduce"]["window_us"] == [first + 200_000.0, first + 300_000.0]
    assert doc["tb_reduce"]["trace_us"][0] == first


def test_a_window_that_holds_no_event_is_written_with_a_warning(tmp_path: Path) -> None:
    out = tmp_path / "w.json"
    r = run("reduce", str(STALLED), "-o", str(out), "--start", "100s", "--end", "101s")
    assert r.returncode == 0
    assert r.stderr.startswith("tb-reduce: warning: the window 100 s–101 s from the trace start holds no event")
    assert "the trace spans 0 s–" in r.stderr and len(r.stderr.splitlines()) == 1
    assert json.loads(out.read_text())["tb_reduce"]["output"]["summaries"] == 0


def test_a_window_in_the_trace_clock_that_holds_no_event_is_warned_about_too(tmp_path: Path) -> None:
    r = run("reduce", str(STALLED), "-o", str(tmp_path / "w.json"), "--start-us", "1", "--end-us", "2")
    assert r.returncode == 0 and "holds no event" in r.stderr


@pytest.mark.parametrize("args, needle", [
    (["--start", "42", "--end", "43s"], "not a time from the trace start: '42'"),
    (["--start", "1h", "--end", "2s"], "not a time from the trace start"),
    (["--start", "-1s", "--end", "2s"], "argument --start"),  # no time before the trace start
    (["--start", "1s"], "give both --start and --end"),
    (["--start", "1s", "--end", "2s", "--start-us", "1", "--end-us", "2"], "not both"),
    (["--start", "2s", "--end", "1s"], "below"),
])
def test_bad_relative_windows_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture, args: list,
                                           needle: str) -> None:
    code = main(["reduce", str(STALLED), "-o", str(tmp_path / "w.json"), *args])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.splitlines()) == 1
    assert not (tmp_path / "w.json").exists()


def test_reduce_help_names_every_input_format(capsys: pytest.CaptureFixture) -> None:
    assert main(["reduce", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for fmt in ("Chrome trace JSON", "*.pt.trace.json[.gz]", "*.trace.json.gz", "*.xplane.pb", "--start TIME"):
        assert fmt in out


# ---- live: flags -----------------------------------------------------------------------


@pytest.mark.parametrize("args, needle", [
    # Issue 24: these two ended in "internal error … please report it", exit 1 (a ring cap of
    # int(1e-9 MB) = 0 bytes, Python's re overflowing on the repetition count).
    (["--ring-mb", "1e-9"], "argument --ring-mb: must be a number of MB from 0.01 to 1e300, not '1e-9'"),
    (["--trigger", "name:a{99999999999}:1ms"], "a repetition count is over 1000"),
    (["--trigger", "step:2x", "--trigger", "name:(?=x)y:1ms"], "not a regular expression RE2 takes"),
    (["--trigger", "speed:2x"], "argument --trigger: trigger 'speed:2x': unknown kind"),
    (["--keep-anomalies", "0"], "argument --keep-anomalies: must be at least 1, not '0'"),
    (["--keep-anomalies", "many"], "argument --keep-anomalies: not a whole number: 'many'"),
    (["--max-memory-mb", "0"], "argument --max-memory-mb: must be a number of MB above 0"),
    (["--max-memory-mb", "nan"], "argument --max-memory-mb: must be a number of MB above 0"),
    (["--nice", "-1"], "argument --nice: must be 0 to 19, not '-1'"),
    (["--nice", "20"], "argument --nice: must be 0 to 19, not '20'"),
    (["--nice", "low"], "argument --nice: not a whole number: 'low'"),
])
def test_bad_live_flags_are_one_line_and_exit_2_from_the_real_command(tmp_path: Path, args: list,
                                                                     needle: str) -> None:
    (tmp_path / "watch").mkdir()
    r = run("live", "--logdir", str(tmp_path / "logdir"), "--watch", str(tmp_path / "watch"), *args)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.splitlines()) == 1 and needle in r.stderr, r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "logdir").exists()  # refused before the sidecar made anything


def test_live_passes_max_memory_mb_keep_anomalies_and_the_triggers_to_the_sidecar(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    import signal

    from tb_reduce_plugin.cli import default_memory_mb
    from tb_reduce_plugin.live import sidecar as sidecar_mod

    configs = []

    class Recorded(sidecar_mod.Sidecar):
        def run(self, stop: object = None) -> None:  # the flags are what is tested: no loop
            configs.append(self.config)

    monkeypatch.setattr(sidecar_mod, "Sidecar", Recorded)
    (tmp_path / "watch").mkdir()
    base = ["live", "--logdir", str(tmp_path / "logdir"), "--watch", str(tmp_path / "watch")]
    term = signal.getsignal(signal.SIGTERM)
    try:
        assert main(base) == 0
        assert main([*base, "--max-memory-mb", "512", "--keep-anomalies", "3", "--ring-mb", "0.01",
                     "--trigger", "name:nccl.*AllReduce:300ms"]) == 0
    finally:
        signal.signal(signal.SIGTERM, term)  # _cmd_live installs its own
    default, given = configs
    assert (default.max_memory_mb, default.keep_anomalies, default.triggers) == (default_memory_mb(), 20, None)
    assert (given.max_memory_mb, given.keep_anomalies, given.ring_mb) == (512.0, 3, 0.01)
    assert given.triggers == ["name:nccl.*AllReduce:300ms"]
    assert "triggers: name:nccl.*AllReduce:300ms" in capsys.readouterr().err


def test_live_keeps_its_priority_unless_told_to_run_below_it(tmp_path: Path) -> None:
    """`--nice N` runs the sidecar N niceness steps below where it was started; by default it
    keeps its priority (measured: a niced sidecar is preempted into many slices and costs a
    CPU training loop more, bench/bench_live_blocks.py)."""
    import signal
    import subprocess

    (tmp_path / "watch").mkdir()
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    for flags, expect in (([], mine), (["--nice", "3"], min(19, mine + 3)), (["--nice", "19"], 19)):
        proc = subprocess.Popen([sys.executable, "-m", "tb_reduce_plugin", "live", "--logdir", str(tmp_path / "logdir"),
                                 "--watch", str(tmp_path / "watch"), *flags], stderr=subprocess.PIPE, text=True)
        try:
            assert "watching" in proc.stderr.readline()  # started: past the flags and the priority change
            assert os.getpriority(os.PRIO_PROCESS, proc.pid) == expect, flags
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)


@pytest.mark.parametrize("kind", ["chrome", "xspace"])
def test_a_big_trace_is_parsed_into_a_temporary_folder_gone_when_the_command_ends(kind, tmp_path, monkeypatch):
    """Without --cache-dir, a trace from `SPILL_FROM_BYTES` on has its columns (and what
    plans prepare, and an XSpace's bytes) written to a folder of TMPDIR and mapped, as a
    server's are: the same output as a parse in memory, and the folder removed after."""
    import tempfile

    import numpy as np

    from tb_reduce_plugin.index import store as store_module
    from tb_reduce_plugin.reduce import pipeline

    src = (next((ROOT / "demo_logdir" / "jax_mlp").rglob("*.xplane.pb")) if kind == "xspace"
           else next((ROOT.parent / "shared" / "corpus" / "generated" / "torch_cpu_cnn_small").glob("*.pt.trace.json")))
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    mapped = []
    real = pipeline.index_file

    def spy(*args, **kwargs):
        index = real(*args, **kwargs)
        mapped.append(isinstance(index.table.ts, np.memmap) and bool(list(temp.iterdir())))
        return index

    monkeypatch.setattr(pipeline, "index_file", spy)
    monkeypatch.setattr(store_module, "index_file", spy)
    assert main(["reduce", str(src), "-o", str(tmp_path / "memory.json"), "--level", "2"]) == 0
    monkeypatch.setattr(store_module, "SPILL_FROM_BYTES", 0)
    assert main(["reduce", str(src), "-o", str(tmp_path / "spilled.json"), "--level", "2"]) == 0
    assert mapped == [False, True]
    assert (tmp_path / "memory.json").read_bytes() == (tmp_path / "spilled.json").read_bytes()
    import gc

    gc.collect()
    assert list(temp.iterdir()) == []  # the folder went with its index
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "not-there" / "tmp"))  # a temp dir that fails
    assert main(["reduce", str(src), "-o", str(tmp_path / "failing.json"), "--level", "2"]) == 0
    assert (tmp_path / "failing.json").read_bytes() == (tmp_path / "memory.json").read_bytes()
