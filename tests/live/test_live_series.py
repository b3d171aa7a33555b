"""Live waveforms in TensorBoard event files: read back equal, and whole after SIGKILLs."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import TESTS
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from test_live_windows import synthetic_trace

from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.live.series import OVERHEAD, STEP_TIME, WINDOW_EVENTS, WINDOW_REDUCE_S, LiveSeries
from tb_reduce_plugin.live.windows import LiveWriteError, WindowWriter
from tb_reduce_plugin.waveforms.scalars import RunScalars, is_event_file_name
from tb_reduce_plugin.waveforms.steps import StepSeries

ROOT = TESTS.parent
T0 = 1_796_000_000.0


def steps_of(first: int, n: int) -> StepSeries:
    step = np.arange(first, first + n, dtype=np.float64)
    start = 5e12 + np.arange(n) * 120_000.0
    end = start + 100_000.0 + np.arange(n) * 1234.5
    busy = {"compute": np.linspace(10.0, 50.0, n), "memory": np.full(n, 3.25)}
    return StepSeries(step, start, end, busy, marker="ProfilerStep#N")


def event_files(run: Path) -> list[Path]:
    return sorted(p for p in run.iterdir() if is_event_file_name(p.name))


def f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).astype(np.float64)


def test_values_read_back_by_run_scalars_and_tensorboard(tmp_path: Path) -> None:
    run = tmp_path / "live"
    s = steps_of(10, 5)
    with LiveSeries(run) as live:
        assert live.write_steps(s, T0) == 5
        live.write_window(3, T0, 0.125, 4747)
        live.write_overhead(12, 1.75, wall_time=T0 + 1)
        live.flush()
        rs = RunScalars(run)
        rs.poll()  # visible after flush, before close
        assert set(rs.tags()) == {STEP_TIME, "live/compute_ms", "live/memory_ms", WINDOW_REDUCE_S,
                                  WINDOW_EVENTS, OVERHEAD}
    steps, walls, values = rs.series(STEP_TIME)
    assert steps.tolist() == [10, 11, 12, 13, 14]
    np.testing.assert_array_equal(values, f32(s.step_time_ms))
    np.testing.assert_allclose(walls, T0 + (s.start_us - s.start_us[0]) / 1e6)
    np.testing.assert_array_equal(rs.series("live/compute_ms")[2], f32(s.busy_ms["compute"]))
    assert rs.series(WINDOW_EVENTS)[0].tolist() == [3] and rs.series(WINDOW_EVENTS)[2].tolist() == [4747.0]
    assert rs.series(WINDOW_REDUCE_S)[2].tolist() == [0.125]
    assert rs.series(OVERHEAD)[0].tolist() == [12] and rs.series(OVERHEAD)[2].tolist() == [1.75]
    assert rs.gaps == [] and rs.pending_bytes == 0

    acc = EventAccumulator(str(run))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == set(rs.tags())
    for tag in rs.tags():
        got = acc.Scalars(tag)
        steps, walls, values = rs.series(tag)
        assert [e.step for e in got] == steps.tolist()
        np.testing.assert_array_equal([e.value for e in got], values)
        np.testing.assert_allclose([e.wall_time for e in got], walls)


def test_add_a_written_window(tmp_path: Path) -> None:
    raw = synthetic_trace(tmp_path / "w.pt.trace.json", steps=4, first_step=7)
    rec = WindowWriter(tmp_path / "logdir").write(raw, T0, T0 + 2)
    live = LiveSeries(tmp_path / "logdir" / "live")
    assert live.add(rec) == 4
    rs = RunScalars(tmp_path / "logdir" / "live")
    rs.poll()
    assert rs.series(STEP_TIME)[0].tolist() == [7, 8, 9, 10]
    np.testing.assert_array_equal(rs.series(STEP_TIME)[2], f32(rec.steps.step_time_ms))
    assert rs.series(WINDOW_EVENTS)[2].tolist() == [rec.events_in]
    assert rs.series(WINDOW_EVENTS)[0].tolist() == [rec.sequence]
    for cat, ms in rec.steps.busy_ms.items():
        np.testing.assert_array_equal(rs.series(f"live/{cat}_ms")[2], f32(ms))
    live.close()


def test_restart_writes_a_new_file_and_leaves_the_old_one(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with LiveSeries(run) as a:
        a.write_steps(steps_of(0, 3), T0)
    (old,) = event_files(run)
    before = old.read_bytes()
    with LiveSeries(run) as b:
        b.write_steps(steps_of(3, 3), T0 + 10)
        assert b.event_file is not None and Path(b.event_file) != old
    assert len(event_files(run)) == 2 and old.read_bytes() == before
    rs = RunScalars(run)
    rs.poll()
    assert rs.series(STEP_TIME)[0].tolist() == [0, 1, 2, 3, 4, 5]


def test_steps_without_integer_numbers_are_skipped(tmp_path: Path) -> None:
    s = steps_of(0, 3)
    s.step[1] = np.nan
    with LiveSeries(tmp_path) as live:
        assert live.write_steps(s, T0) == 2
        assert live.write_steps(StepSeries(np.empty(0), np.empty(0), np.empty(0)), T0) == 0


def test_unwritable_run_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    with pytest.raises(LiveWriteError) as err:
        LiveSeries(blocker / "sub")
    assert "\n" not in str(err.value) and str(blocker / "sub") in str(err.value)


def test_write_failure_is_one_error_and_the_file_stays_readable(tmp_path: Path) -> None:
    """A write the kernel refuses (RLIMIT_FSIZE: EFBIG, as a full disk refuses one) mid-record."""
    script = textwrap.dedent("""
        import resource, signal, sys
        import numpy as np
        from tb_reduce_plugin.errors import TraceError
        from tb_reduce_plugin.live.series import LiveSeries
        from tb_reduce_plugin.waveforms.steps import StepSeries
        live = LiveSeries(sys.argv[1])
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))
        try:
            for i in range(100):
                step = np.arange(i * 10, i * 10 + 10, dtype=float)
                live.write_steps(StepSeries(step, step * 1e5, step * 1e5 + 9e4, {"compute": step}), 1.0)
                live.flush()
        except TraceError as exc:
            print(type(exc).__name__, exc, flush=True)
        try:
            live.flush()
        except TraceError as exc:
            print("again", type(exc).__name__, flush=True)
    """)
    run = tmp_path / "run"
    out = subprocess.run([sys.executable, "-c", script, str(run)], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    first, again = out.stdout.splitlines()
    assert first == f"LiveWriteError cannot write live scalars into {run}: File too large"
    assert again == "again LiveWriteError"  # the writer stays stopped: nothing is written after a torn record
    rs = RunScalars(run)
    rs.poll()
    assert rs.gaps == [] and rs.points > 0


KILL_SCRIPT = """
import sys, time
import numpy as np
from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.live.series import LiveSeries
from tb_reduce_plugin.waveforms.steps import StepSeries
live = LiveSeries(sys.argv[1])
print("ready", flush=True)
n, seq = 16, 0
while True:
    seq += 1
    step = np.arange(seq * n, (seq + 1) * n, dtype=np.float64)
    start = step * 1e5
    busy = {c: np.full(n, float(seq)) for c in ("compute", "memory", "communication", "data_loading")}
    live.write_steps(StepSeries(step, start, start + 9e4, busy), time.time())
    live.write_window(seq, time.time(), 0.01, 1000 * seq)
    live.write_overhead(int(step[-1]), 1.0)
    live.flush()
"""


def test_sigkill_at_random_moments_leaves_readable_event_files(tmp_path: Path) -> None:
    run = tmp_path / "run"
    script = tmp_path / "loop.py"
    script.write_text(KILL_SCRIPT)
    rng = random.Random(7)
    for _ in range(10):
        proc = subprocess.Popen([sys.executable, str(script), str(run)], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n", proc.stderr
            time.sleep(rng.uniform(0.0, 0.3))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    files = event_files(run)
    assert len(files) == 10  # one new file per process, none rewritten
    rs = RunScalars(run)
    rs.poll()
    assert rs.gaps == []
    assert rs.points > 0
    total = 0
    for path, reader in zip(files, rs.readers):
        loaded = list(EventFileLoader(str(path)).Load())  # TensorBoard reads every complete record
        assert len(loaded) == reader.records
        assert loaded[0].file_version == "brain.Event:2"
        # Each process wrote steps 16, 17, …: every record up to the kill is there, in order, once.
        got = [e.step for e in loaded if any(v.tag == STEP_TIME for v in e.summary.value)]
        assert got == list(range(16, 16 + len(got)))
        total += len(got)
    steps = rs.series(STEP_TIME)[0]
    assert len(steps) == total == len(rs.series("live/compute_ms")[0])
    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})  # all of them: by default it samples 10,000
    acc.Reload()
    assert len(acc.Scalars(STEP_TIME)) == len(steps)
    # A restart appends to a new file, and reads on.
    sizes = {p: p.stat().st_size for p in files}
    with LiveSeries(run) as live:
        live.write_overhead(1, 2.0)
    assert {p: p.stat().st_size for p in files} == sizes and len(event_files(run)) == 11
    assert os.path.getsize(event_files(run)[-1]) > 0


# ---- rotation: the series are bounded on disk (issue 24) -----------------------------


@pytest.fixture
def fast_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wall clock running 1000× fast (a second each real millisecond), so files may rotate
    within a test: a file is closed for a new one only once the second in its name is past."""
    t0, m0 = time.time(), time.monotonic()
    monkeypatch.setattr(time, "time", lambda: t0 + 1000.0 * (time.monotonic() - m0))


def _windows(live: LiveSeries, n: int, first: int = 0, per: int = 10) -> None:
    """Windows `first` to `first + n - 1`, `per` steps each, flushed one by one."""
    for w in range(first, first + n):
        live.write_steps(steps_of(w * per, per), T0 + w)
        live.write_window(w, T0 + w, 0.01, 1000)
        live.flush()
        time.sleep(0.002)  # two seconds of the fast clock


def test_a_full_event_file_is_closed_and_the_series_go_on_in_a_new_one_that_tensorboard_reads_too(
        tmp_path: Path, fast_clock: None) -> None:
    run = tmp_path / "live"
    with LiveSeries(run, max_file_bytes=4000) as live:
        _windows(live, 30)
        assert live.rotations >= 5
    files = event_files(run)
    assert len(files) == live.rotations + 1
    # Each is closed at the first flush past the size: over it by at most one window's records.
    one_window = max(p.stat().st_size for p in files) - 4000
    assert all(p.stat().st_size < 4000 + 2000 for p in files) and one_window < 2000
    rs = RunScalars(run)
    rs.poll()
    assert rs.gaps == [] and rs.series(STEP_TIME)[0].tolist() == list(range(300))
    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars(STEP_TIME)] == list(range(300))  # TensorBoard reads on across files
    assert [e.step for e in acc.Scalars(WINDOW_EVENTS)] == list(range(30))


def test_only_the_newest_keep_files_stay_so_the_series_are_bounded_on_disk(tmp_path: Path, fast_clock: None) -> None:
    run = tmp_path / "live"
    (run / "notes.txt").parent.mkdir()
    (run / "notes.txt").write_text("not an event file: left alone")
    with LiveSeries(run, max_file_bytes=4000, keep_files=3) as live:
        for k in range(6):
            _windows(live, 5, first=5 * k)
            assert len(event_files(run)) <= 3
            assert sum(p.stat().st_size for p in event_files(run)) < 3 * (4000 + 2000)
        assert live.rotations >= 6 and Path(live.event_file or "") in event_files(run)
    assert (run / "notes.txt").exists()
    rs = RunScalars(run)
    rs.poll()
    steps = rs.series(STEP_TIME)[0].tolist()
    assert rs.gaps == [] and steps[0] > 0 and steps == list(range(steps[0], 300))  # the newest, none missing


def test_a_full_file_waits_for_the_next_second_so_tensorboard_reads_the_files_in_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [float(int(T0))]
    monkeypatch.setattr(time, "time", lambda: now[0])
    run = tmp_path / "live"
    with LiveSeries(run, max_file_bytes=1) as live:
        first = live.event_file
        _windows(live, 3)  # full at once, but a file opened now would be named in the same second
        assert live.rotations == 0 and live.event_file == first
        now[0] += 1.0
        _windows(live, 1, first=3)
        assert live.rotations == 1 and live.event_file is not None and live.event_file > (first or "")
    assert [str(p) for p in event_files(run)] == [first, live.event_file]


def test_a_restart_prunes_to_keep_files_and_never_its_own_file(tmp_path: Path) -> None:
    run = tmp_path / "live"
    for i in range(5):
        with LiveSeries(run, keep_files=3) as live:
            live.write_steps(steps_of(10 * i, 2), T0 + i)
            mine = Path(live.event_file or "")
            assert len(event_files(run)) == min(i + 1, 3) and mine in event_files(run)
    rs = RunScalars(run)
    rs.poll()
    assert rs.series(STEP_TIME)[0].tolist() == [20, 21, 30, 31, 40, 41]


@pytest.mark.parametrize("kwargs", [{"max_file_bytes": 0}, {"keep_files": 0}, {"keep_files": 1.5},
                                    {"max_file_bytes": True}])
def test_rotation_settings_that_are_not_whole_numbers_above_0_are_refused(tmp_path: Path, kwargs: dict) -> None:
    with pytest.raises(TraceError, match="must be a whole number, at least 1"):
        LiveSeries(tmp_path / "live", **kwargs)
    assert not (tmp_path / "live").exists()
