"""The live sidecar end to end on real profiler output: windows land in a watched folder,
are reduced into runs the plugin lists, their steps become TensorBoard scalars, and the
window holding a stalled step is kept raw with an anomaly report."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TESTS

from tb_reduce_plugin.live.sidecar import ANOMALY_JSON, RING_FOLDER, LiveConfig, Sidecar
from tb_reduce_plugin.live.windows import WINDOW_NAME
from tb_reduce_plugin.serve.discovery import Catalog
from tb_reduce_plugin.waveforms.scalars import RunScalars

FIXTURES = TESTS / "fixtures" / "traces"
TORCH = FIXTURES / "torch_stalled_step.pt.trace.json.gz"  # 8 steps of ~100 ms, step 5 slept 150 ms
JAX = FIXTURES / "jax_stalled_step.xplane.pb"


def _sidecar(tmp_path: Path, **kw) -> Sidecar:
    watch = tmp_path / "profiles"
    watch.mkdir(exist_ok=True)
    cfg = LiveConfig(logdir=str(tmp_path / "logdir"), watch=str(watch), settle_s=0.0, every_s=0.1, **kw)
    return Sidecar(cfg)


def _land(sidecar: Sidecar, src: Path, name: str) -> None:
    dst = Path(sidecar.config.watch) / name
    tmp = dst.with_name("." + name)
    shutil.copyfile(src, tmp)
    os.utime(tmp, (time.time() - 5, time.time() - 5))  # written a while ago: complete
    os.rename(tmp, dst)


def test_a_stalled_torch_step_is_reduced_listed_and_kept_raw_with_its_report(tmp_path: Path) -> None:
    car = _sidecar(tmp_path, triggers=["step:2x"])
    _land(car, TORCH, "w1.pt.trace.json.gz")
    [record] = car.step()
    car.finish()
    logdir = Path(car.config.logdir)
    runs = {r["run"]: r for r in Catalog(str(logdir)).runs()}
    assert record.run in runs and runs[record.run]["hosts"][0]["host"] == "w1"
    [anomaly] = car.anomalies
    report = json.loads((Path(anomaly) / ANOMALY_JSON).read_text())
    assert report["trigger"] == "step:2x" and report["step"] == 5 and report["window"] == record.name
    assert report["value"] > 2 * 100 and report["threshold"] < report["value"]
    kept = [p for p in os.listdir(anomaly) if p != ANOMALY_JSON and not p.endswith(".ring.json")]
    assert len(kept) == 1 and kept[0].endswith(".pt.trace.json.gz")
    assert (Path(anomaly) / kept[0]).read_bytes() == TORCH.read_bytes()  # raw, as the profiler wrote it
    assert f"live/{os.path.basename(anomaly)}" in runs  # the raw window is a run of its own
    listed = runs[f"live/{os.path.basename(anomaly)}"]["anomaly"]  # the run list carries the report's gist
    assert listed["step"] == 5 and listed["window"] == record.name and listed["trigger"] == "step:2x"
    assert "anomaly" not in runs[record.run]
    # a window's scalars are the sidecar's series across the windows of its source, in live/series/<source>/
    series = logdir / "live" / "series" / "w1"
    assert [os.path.dirname(p) for p in Catalog(str(logdir)).event_files(record.run)] == [str(series)]
    # the live scalars: one point per step, step 5 the slowest
    rs = RunScalars(str(series))
    rs.poll()
    steps, _, values = rs.series("live/step_time_ms")
    assert steps.tolist() == list(range(8)) and int(steps[values.argmax()]) == 5 and rs.gaps == []


def test_the_same_window_is_not_reduced_twice_after_a_restart(tmp_path: Path) -> None:
    car = _sidecar(tmp_path, triggers=["step:3x"])
    _land(car, JAX, "vm.xplane.pb")
    assert len(car.step()) == 1
    car.finish()
    again = _sidecar(tmp_path, triggers=["step:3x"])
    assert again.step() == []
    live = Path(car.config.logdir) / "live"
    windows = [d for d in live.iterdir() if d.is_dir() and WINDOW_NAME.match(d.name) and "-anomaly-" not in d.name]
    assert len(windows) == 1


def test_a_window_that_is_not_a_trace_is_skipped_and_the_next_one_is_used(tmp_path: Path) -> None:
    car = _sidecar(tmp_path, triggers=["name:^nothing$:1s"])
    bad = Path(car.config.watch) / "broken.pt.trace.json"
    bad.write_bytes(b"\x00 not a trace")
    os.utime(bad, (time.time() - 5, time.time() - 5))
    _land(car, TORCH, "good.pt.trace.json.gz")
    records = car.step()
    assert [r.host for r in records] == ["good"] and car.failures == 1 and car.anomalies == []


def test_the_raw_ring_stays_under_its_cap_and_out_of_the_run_list(tmp_path: Path) -> None:
    car = _sidecar(tmp_path, triggers=["name:^nothing$:1s"], ring_mb=0.1)  # 100 kB: about two windows of 35 kB
    for k in range(6):
        _land(car, TORCH, f"w{k}.pt.trace.json.gz")
        car.step()
    assert car.ring.total_bytes <= 0.1 * 1024 * 1024
    assert len(car.ring.entries()) >= 1
    runs = [r["run"] for r in Catalog(car.config.logdir).runs()]
    assert not any(RING_FOLDER in r for r in runs) and len(runs) == 6


def test_tb_reduce_live_runs_as_a_process_and_stops_on_sigterm(tmp_path: Path) -> None:
    watch, logdir = tmp_path / "profiles", tmp_path / "logdir"
    watch.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "tb_reduce_plugin", "live", "--logdir", str(logdir), "--watch",
                             str(watch), "--every", "200ms", "--trigger", "step:2x"],
                            stderr=subprocess.PIPE, text=True)
    try:
        shutil.copyfile(TORCH, watch / "a.pt.trace.json.gz")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _windows(logdir):
            time.sleep(0.2)
    finally:
        proc.terminate()  # the anomaly's "after" part has not arrived: it is preserved on the way out
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "1 window(s), 1 anomaly run(s)" in err, err
    assert any("-anomaly-" in d.name for d in (logdir / "live").iterdir())


def _windows(logdir: Path) -> list[str]:
    live = logdir / "live"
    return [d.name for d in live.iterdir() if d.is_dir() and WINDOW_NAME.match(d.name)] if live.is_dir() else []


def test_a_capture_source_without_its_folder_is_refused_in_one_line_naming_the_helper(tmp_path: Path) -> None:
    for source, helper in (("torch", "torch_schedule"), ("jax", "jax_windows")):
        p = subprocess.run([sys.executable, "-m", "tb_reduce_plugin", "live", "--logdir", str(tmp_path), "--source",
                            source], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and helper in p.stderr, p.stderr


def test_sigkill_at_random_moments_leaves_only_complete_windows_and_readable_scalars(tmp_path: Path) -> None:
    import random
    import signal

    from tb_reduce_plugin.reduce.pipeline import index_file

    watch, logdir = tmp_path / "profiles", tmp_path / "logdir"
    watch.mkdir()
    rnd = random.Random(7)
    landed = 0
    for _ in range(5):
        proc = subprocess.Popen([sys.executable, "-m", "tb_reduce_plugin", "live", "--logdir", str(logdir), "--watch",
                                 str(watch), "--every", "100ms", "--trigger", "step:2x", "--ring-mb", "0.2"],
                                stderr=subprocess.DEVNULL)
        for _ in range(2):
            shutil.copyfile(TORCH, watch / f"w{landed}.pt.trace.json.gz")
            landed += 1
        time.sleep(rnd.uniform(0.5, 3.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    # A last, undisturbed run picks up whatever the killed ones left, without duplicates.
    car = Sidecar(LiveConfig(logdir=str(logdir), watch=str(watch), settle_s=0.0, triggers=["step:2x"], ring_mb=0.2))
    car.step()
    car.finish()
    live = logdir / "live"
    windows = [d for d in live.iterdir() if WINDOW_NAME.match(d.name)]
    raws = [json.loads((d / "window.json").read_text())["raw"] for d in windows]
    names = [r["path"] if isinstance(r, dict) else r[0] for r in raws]
    assert len(names) == len(set(names)) == landed  # every window once, none twice
    for d in windows:
        index_file(next(d.glob("*.trace.json.gz")))  # complete and readable
    points = 0
    for run in (live / "series").iterdir():  # one run per source: here each file is one (w0, w1, ...)
        if run.is_dir():
            rs = RunScalars(str(run))
            rs.poll()
            assert rs.gaps == []
            points += len(rs.series("live/step_time_ms")[0])
    assert points >= 8
    assert car.ring.total_bytes <= 0.2 * 1024 * 1024
    for d in live.iterdir():
        if "-anomaly-" in d.name:
            assert (d / ANOMALY_JSON).is_file()


@pytest.mark.parametrize("suffix", [".pt.trace.json", ".pt.trace.json.gz", ".xplane.pb"])
def test_a_fresh_window_in_any_format_is_kept_raw_around_its_anomaly_at_the_default_settle_time(
        tmp_path: Path, suffix: str) -> None:
    """Renamed into the folder just now, as the capture helpers and profilers do: a plain JSON
    file is first reduced while it might still grow (partial), then, unchanged, it settles; it
    must reach the ring then (it was skipped as already seen: "kept 0")."""
    watch = tmp_path / "profiles"
    watch.mkdir()
    car = Sidecar(LiveConfig(logdir=str(tmp_path / "logdir"), watch=str(watch), every_s=0.1,
                             triggers=["step:2x" if suffix != ".xplane.pb" else "step:3x"], before_s=0.01,
                             after_s=0.01))
    assert car.config.settle_s == 1.0  # the default, as `tb-reduce live` runs
    src = JAX if suffix == ".xplane.pb" else TORCH
    data = src.read_bytes() if suffix != ".pt.trace.json" else gzip.decompress(TORCH.read_bytes())
    (watch / f".w{suffix}").write_bytes(data)
    os.rename(watch / f".w{suffix}", watch / f"w{suffix}")  # fresh: its mtime is now
    deadline = time.monotonic() + 60  # a bound on waiting, not a measured claim
    while time.monotonic() < deadline and not (car.ring.entries() and car.anomalies):
        car.step()
        time.sleep(0.2)
    assert [e.meta["raw"][0] for e in car.ring.entries()] == [str(watch / f"w{suffix}")]
    [anomaly] = car.anomalies  # preserved while running, not at shutdown
    kept = [p for p in os.listdir(anomaly) if p.endswith(suffix)]
    assert len(kept) == 1 and (Path(anomaly) / kept[0]).read_bytes() == data
    car.finish()
    windows = [d for d in (tmp_path / "logdir" / "live").iterdir() if WINDOW_NAME.match(d.name)]
    assert len(windows) == 1  # one window for the file, its partial version replaced, not doubled
