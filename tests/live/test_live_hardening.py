"""The live sidecar as an attacker (and an unlucky user) finds it: files swapped between
listing and reading, FIFOs, windows too big for the budget, kills mid-window, full
disks, floods of files. Nothing from outside the watched folder reaches the logdir,
nothing blocks, memory stays under the flag, and a window is done only when all its
outputs are."""

from __future__ import annotations

import errno
import gzip
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import TESTS

from tb_reduce_plugin.live import sidecar as sidecar_module
from tb_reduce_plugin.live.sidecar import ANOMALY_JSON, LiveConfig, Sidecar
from tb_reduce_plugin.live.watch import Watcher
from tb_reduce_plugin.live.windows import LIVE_FOLDER, WINDOW_NAME, WindowWriter
from tb_reduce_plugin.waveforms.scalars import RunScalars

FIXTURES = TESTS / "fixtures" / "traces"
TORCH_GZ = FIXTURES / "torch_stalled_step.pt.trace.json.gz"  # 8 steps of ~100 ms, step 5 slept 150 ms
JAX = FIXTURES / "jax_stalled_step.xplane.pb"
DEMO = TESTS.parent / "demo_logdir"


def _outside_trace(tmp_path: Path, suffix: str) -> Path:
    """A real trace of the same format as `suffix`, outside the watched folder, that differs from the fixture."""
    if suffix == ".pt.trace.json":
        src = tmp_path / "secret.pt.trace.json"
        src.write_bytes(gzip.decompress(TORCH_GZ.read_bytes()).replace(b"ProfilerStep", b"SecretStep"))
        return src
    if suffix == ".pt.trace.json.gz":
        src = tmp_path / "secret.pt.trace.json.gz"
        src.write_bytes(gzip.compress(gzip.decompress(TORCH_GZ.read_bytes()).replace(b"ProfilerStep", b"SecretStep")))
        return src
    [xspace, *_] = sorted(DEMO.rglob("*.xplane.pb"))  # a real JAX profile other than the fixture
    src = tmp_path / f"secret{suffix}"
    shutil.copyfile(xspace, src)
    return src


def _fixture(suffix: str, dst: Path) -> None:
    if suffix == ".pt.trace.json":
        dst.write_bytes(gzip.decompress(TORCH_GZ.read_bytes()))
    else:
        shutil.copyfile(JAX if suffix == ".xplane.pb" else TORCH_GZ, dst)
    os.utime(dst, (time.time() - 5, time.time() - 5))  # written a while ago: complete


def _sidecar(tmp_path: Path, **kw) -> Sidecar:
    watch = tmp_path / "profiles"
    watch.mkdir(exist_ok=True)
    kw.setdefault("triggers", ["step:2x"])
    return Sidecar(LiveConfig(logdir=str(tmp_path / "logdir"), watch=str(watch), settle_s=0.0, every_s=0.1, **kw))


def _files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]


@pytest.mark.parametrize("suffix", [".xplane.pb", ".pt.trace.json.gz", ".pt.trace.json"])
def test_a_window_swapped_for_a_symlink_out_of_the_watched_folder_never_reaches_the_logdir(
        tmp_path: Path, suffix: str, caplog: pytest.LogCaptureFixture) -> None:
    car = _sidecar(tmp_path)
    path = Path(car.config.watch) / f"w{suffix}"
    _fixture(suffix, path)
    [ready] = car.watcher.poll()
    secret = _outside_trace(tmp_path, suffix)
    path.unlink()
    path.symlink_to(secret)  # swapped between the listing and the read
    with caplog.at_level(logging.WARNING):
        assert car.handle(ready) is None
    car.finish()
    logdir = Path(car.config.logdir)
    leaked = [p for p in _files_under(logdir) if p.read_bytes() == secret.read_bytes()]
    assert leaked == [] and car.ring.entries() == []
    assert not (logdir / LIVE_FOLDER).exists() or not [d for d in (logdir / LIVE_FOLDER).iterdir() if d.is_dir()
                                                       and not d.name.startswith(".")]
    assert any(f"w{suffix}" in r.getMessage() and "changed since it was listed" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


def _swap_after_reduction(car: Sidecar, swap) -> None:
    """Make `swap()` happen once the window is reduced, before its raw file is copied to the ring."""
    write = car.writer.write

    def write_then_swap(*a, **kw):
        record = write(*a, **kw)
        swap()
        return record

    car.writer.write = write_then_swap  # type: ignore[method-assign]


def test_the_raw_ring_refuses_a_window_swapped_for_a_symlink_after_its_reduction(tmp_path: Path) -> None:
    car = _sidecar(tmp_path, triggers=["name:^nothing$:1s"])
    path = Path(car.config.watch) / "w.xplane.pb"
    _fixture(".xplane.pb", path)
    secret = _outside_trace(tmp_path, ".xplane.pb")
    _swap_after_reduction(car, lambda: (path.unlink(), path.symlink_to(secret)))
    [record] = car.step()
    assert car.ring.entries() == []
    assert [p for p in _files_under(Path(car.config.logdir)) if p.read_bytes() == secret.read_bytes()] == []


@pytest.mark.parametrize("suffix", [".xplane.pb", ".pt.trace.json.gz", ".pt.trace.json"])
def test_a_window_swapped_for_a_fifo_while_reduced_blocks_nothing_and_the_next_window_goes_on(
        tmp_path: Path, suffix: str) -> None:
    car = _sidecar(tmp_path)
    path = Path(car.config.watch) / f"w{suffix}"
    _fixture(suffix, path)
    _swap_after_reduction(car, lambda: (path.unlink(), os.mkfifo(path)))  # no writer: a blocking open waits for ever
    result: list = []
    worker = threading.Thread(target=lambda: result.append(car.step()), daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "a window swapped for a FIFO blocked the sidecar"
    assert len(result[0]) == 1 and car.ring.entries() == []
    car.writer.write = WindowWriter.write.__get__(car.writer)  # type: ignore[method-assign]
    path.unlink()
    _fixture(suffix, Path(car.config.watch) / f"next{suffix}")
    assert [r.host for r in car.step()] == ["next"]


def test_a_fifo_named_like_a_capture_helpers_overhead_file_blocks_nothing(tmp_path: Path) -> None:
    car = _sidecar(tmp_path)
    os.mkfifo(Path(car.config.watch) / "w.overhead.json")
    _fixture(".pt.trace.json.gz", Path(car.config.watch) / "w.pt.trace.json.gz")
    result: list = []
    worker = threading.Thread(target=lambda: result.append(car.step()), daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive() and len(result[0]) == 1


def _big_plain_trace(path: Path, events: int) -> None:
    """A plain Chrome JSON of `events` complete events (the columns alone take ~100 B an event)."""
    body = b",".join(b'{"name":"op%d","ph":"X","ts":%d,"dur":1,"pid":1,"tid":1}' % (i, i * 2)
                     for i in range(events))
    path.write_bytes(b'{"traceEvents":[' + body + b"]}")
    os.utime(path, (time.time() - 5, time.time() - 5))


def test_a_window_over_the_memory_budget_is_refused_with_its_name_and_not_tried_after_a_restart(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    car = _sidecar(tmp_path, max_memory_mb=8)
    _big_plain_trace(Path(car.config.watch) / "huge.pt.trace.json", 300_000)
    with caplog.at_level(logging.WARNING):
        assert car.step() == []
    said = [r.getMessage() for r in caplog.records if "huge.pt.trace.json" in r.getMessage()]
    assert len(said) == 1 and "8" in said[0] and "memory" in said[0], said
    caplog.clear()
    again = _sidecar(tmp_path, max_memory_mb=8)
    with caplog.at_level(logging.WARNING):
        assert again.step() == []
    assert not [r for r in caplog.records if "huge" in r.getMessage()]  # remembered: not read again
    assert again.failures == 0


def test_a_growing_file_over_the_partial_bound_waits_until_it_settles(tmp_path: Path) -> None:
    path = tmp_path / "w.pt.trace.json"
    path.write_bytes(gzip.decompress(TORCH_GZ.read_bytes())[:5000])
    clock = [0.0]
    small = Watcher(tmp_path, settle_s=5.0, every_s=0.0, clock=lambda: clock[0], partial_max_bytes=4000)
    big = Watcher(tmp_path, settle_s=5.0, every_s=0.0, clock=lambda: clock[0])
    assert small.poll() == [] and [r.final for r in big.poll()] == [False]
    clock[0] = 10.0
    assert [r.final for r in small.poll()] == [True]


_KILL_AFTER_FOLDER = """
import os, sys
from tb_reduce_plugin.live.sidecar import LiveConfig, Sidecar
car = Sidecar(LiveConfig(logdir=sys.argv[1], watch=sys.argv[2], settle_s=0.0, triggers=["step:2x"], after_s=0.0))
car._keep_raw = lambda *a: os._exit(9)  # the window's folder is there; its ring copy, triggers, scalars are not
car.step()
"""


def test_a_window_killed_right_after_its_folder_appeared_is_done_whole_after_the_restart(tmp_path: Path) -> None:
    watch, logdir = tmp_path / "profiles", tmp_path / "logdir"
    watch.mkdir()
    _fixture(".pt.trace.json.gz", watch / "w.pt.trace.json.gz")
    p = subprocess.run([sys.executable, "-c", _KILL_AFTER_FOLDER, str(logdir), str(watch)], timeout=120,
                       capture_output=True, text=True)
    assert p.returncode == 9, p.stderr
    assert len([d for d in (logdir / LIVE_FOLDER).iterdir() if d.is_dir() and WINDOW_NAME.match(d.name)]) == 1
    car = Sidecar(LiveConfig(logdir=str(logdir), watch=str(watch), settle_s=0.0, triggers=["step:2x"], after_s=0.0))
    [record] = car.step()  # not taken as done: done again
    car.finish()
    live = logdir / LIVE_FOLDER
    windows = [d.name for d in live.iterdir() if d.is_dir() and WINDOW_NAME.match(d.name) and "-anomaly-" not in d.name]
    assert windows == [record.name]  # the half-done one is replaced, not doubled
    assert len(car.ring.entries()) == 1  # kept raw
    [anomaly] = car.anomalies  # judged by the triggers
    assert json.loads((Path(anomaly) / ANOMALY_JSON).read_text())["step"] == 5
    rs = RunScalars(str(live / "series" / "w"))  # the source's run: its steps once, though the window was done twice
    rs.poll()
    assert rs.series("live/step_time_ms")[0].tolist() == list(range(8))
    assert Sidecar(LiveConfig(logdir=str(logdir), watch=str(watch), settle_s=0.0)).step() == []  # now done


_DIE_WHILE_READING = """
import os, sys
from tb_reduce_plugin.live import windows
from tb_reduce_plugin.live.sidecar import LiveConfig, Sidecar
windows.WindowWriter._reduce = lambda *a, **k: os._exit(9)  # as an OOM kill would, mid-parse
Sidecar(LiveConfig(logdir=sys.argv[1], watch=sys.argv[2], settle_s=0.0)).step()
"""


def test_a_file_that_killed_the_sidecar_twice_is_not_read_a_third_time(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    watch, logdir = tmp_path / "profiles", tmp_path / "logdir"
    watch.mkdir()
    _fixture(".pt.trace.json.gz", watch / "killer.pt.trace.json.gz")
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", _DIE_WHILE_READING, str(logdir), str(watch)], timeout=120,
                           capture_output=True, text=True)
        assert p.returncode == 9, p.stderr
    with caplog.at_level(logging.WARNING):
        car = Sidecar(LiveConfig(logdir=str(logdir), watch=str(watch), settle_s=0.0))
        assert car.step() == []  # no crash loop
    assert any("killer.pt.trace.json.gz" in r.getMessage() and "not tried again" in r.getMessage()
               for r in caplog.records)


def test_skipped_files_are_one_line_each_with_their_name_and_reason(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    car = _sidecar(tmp_path)
    watch = Path(car.config.watch)
    os.mkfifo(watch / "pipe.pt.trace.json")
    outside = tmp_path / "elsewhere.pt.trace.json.gz"
    shutil.copyfile(TORCH_GZ, outside)
    (watch / "link.pt.trace.json.gz").symlink_to(outside)
    bad = watch / "broken.pt.trace.json"
    bad.write_bytes(b'{"traceEvents": [}')  # the reader's message names no file: the log line must
    os.utime(bad, (time.time() - 5, time.time() - 5))
    with caplog.at_level(logging.WARNING):
        car.step()
        car.step()  # said once while it lasts, not at every poll
    lines = [r.getMessage() for r in caplog.records]
    for name in ("pipe.pt.trace.json", "link.pt.trace.json.gz", "broken.pt.trace.json"):
        assert len([m for m in lines if name in m]) == 1, (name, lines)
    assert any("FIFO" in m for m in lines) and any("symlink out of the watched folder" in m for m in lines)


def test_a_walk_cut_short_is_said(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from tb_reduce_plugin.formats import logdir as logdir_module

    monkeypatch.setattr(logdir_module, "MAX_ENTRIES", 50)
    car = _sidecar(tmp_path)
    for i in range(60):
        (Path(car.config.watch) / f"empty{i}.txt").touch()
    with caplog.at_level(logging.WARNING):
        car.step()
    assert any("profiles" in r.getMessage() and "50" in r.getMessage() for r in caplog.records)


def test_log_lines_about_skipped_files_are_rate_limited_and_count_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    lines = sidecar_module.LineLimiter(lines=3, per_s=60.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        for i in range(10):
            lines.warn("skipped %s", f"f{i}")
        now[0] = 61.0
        lines.warn("skipped %s", "late")
    said = [r.getMessage() for r in caplog.records]
    assert said == ["skipped f0", "skipped f1", "skipped f2",
                    "tb-reduce live: 7 more such line(s) in the last 61 s were left out", "skipped late"]


def test_a_window_the_full_disk_refused_names_its_file_and_is_written_once_space_frees(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sidecar_module, "RETRY_S", 0.0)
    car = _sidecar(tmp_path)
    real = WindowWriter._reduce
    full = [True]

    def reduce(self, *a, **kw):
        if full[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *a, **kw)

    monkeypatch.setattr(WindowWriter, "_reduce", reduce)
    _fixture(".pt.trace.json.gz", Path(car.config.watch) / "w.pt.trace.json.gz")
    with caplog.at_level(logging.WARNING):
        assert car.step() == []
    assert any("w.pt.trace.json.gz" in r.getMessage() and "disk is full" in r.getMessage() for r in caplog.records)
    full[0] = False
    assert [r.host for r in car.step()] == ["w"]


def test_stop_is_honoured_between_the_windows_of_a_backlog(tmp_path: Path) -> None:
    car = _sidecar(tmp_path)
    for i in range(300):
        p = Path(car.config.watch) / f"bad{i:03d}.pt.trace.json"
        p.write_bytes(b"not a trace")
    handled = []
    real = car.handle
    car.handle = lambda ready: handled.append(ready) or real(ready)  # type: ignore[method-assign]
    car.run(stop=lambda: len(handled) >= 3)
    assert len(handled) == 3


def test_anomaly_runs_are_pruned_to_the_newest_kept(tmp_path: Path) -> None:
    car = _sidecar(tmp_path, keep_anomalies=1, cooldown_s=0.0, max_per_hour=100, after_s=0.0)
    for k in range(3):
        _fixture(".pt.trace.json.gz", Path(car.config.watch) / f"w{k}.pt.trace.json.gz")
        car.step()
    car.finish()
    live = Path(car.config.logdir) / LIVE_FOLDER
    kept = [d for d in live.iterdir() if "-anomaly-" in d.name and not d.name.startswith(".")]
    assert len(kept) == 1 and car.anomalies_pruned >= 1 and str(kept[0]) in car.anomalies
