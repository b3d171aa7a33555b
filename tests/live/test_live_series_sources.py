"""One TensorBoard run per source in the live sidecar's scalars, read by TensorBoard itself.

A user pointed TensorBoard's own readers at what the sidecar wrote when two sources (a CNN
trace and an LM trace) landed in one watched folder: one series keyed by step number went
51 → 2, and a real `tensorboard` with its default fast loader served 30 of 80 points (its data
server drops what comes before a step that goes back). Here the sidecar writes each source to
its own run, and the data server (TensorBoard's default loader) serves every point of each.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

import pytest
from conftest import TESTS
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard_process import start_tensorboard

from tb_reduce_plugin.live.series import source_of
from tb_reduce_plugin.live.sidecar import LiveConfig, Sidecar

RAW = TESTS / "fixtures" / "traces" / "torch_stalled_step.pt.trace.json.gz"  # steps 0..7
STEPS = 8


def _land(watch: Path, name: str, first_step: int) -> None:
    """The recorded window with its steps numbered from `first_step` and its clock moved on as
    far (the next window of one training), renamed into the folder whole."""
    doc = json.loads(gzip.decompress(RAW.read_bytes()))
    events = doc["traceEvents"]
    timed = [e for e in events if "ts" in e]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed)
    for e in timed:
        e["ts"] += (first_step // STEPS) * (span + 1000)
    for e in events:
        if isinstance(e.get("name"), str) and e["name"].startswith("ProfilerStep#"):
            e["name"] = f"ProfilerStep#{int(e['name'][len('ProfilerStep#'):]) + first_step}"
    tmp = watch / f".{name}"
    tmp.write_bytes(gzip.compress(json.dumps(doc).encode()))
    os.utime(tmp, (time.time() - 5, time.time() - 5))
    os.rename(tmp, watch / name)


def _sidecar(tmp_path: Path) -> Sidecar:
    (tmp_path / "profiles").mkdir(exist_ok=True)
    return Sidecar(LiveConfig(logdir=str(tmp_path / "logdir"), watch=str(tmp_path / "profiles"), settle_s=0.0,
                              triggers=["name:^never$:1s"]))


def _steps(run: Path) -> list[int]:
    acc = EventAccumulator(str(run))
    acc.Reload()
    return [e.step for e in acc.Scalars("live/step_time_ms")]


def test_a_source_is_what_stays_fixed_in_its_window_names() -> None:
    root = "/w"
    assert source_of("/w/vm_123.1700000000123.pt.trace.json", root) == "vm_123"  # Kineto's handler
    assert source_of("/w/window000007.vm_123.pt.trace.json", root) == "vm_123"  # torch_schedule
    assert source_of("/w/window000007.vm-1_99.xplane.pb", root) == "vm-1_99"  # jax_windows
    assert source_of("/w/rank1/vm.17.pt.trace.json.gz", root) == "rank1.vm"  # its folder says which
    assert source_of("/w/window000001.pt.trace.json", root) == "trace"  # nothing fixed left: one source
    assert source_of("/w/../x y;$(rm).pt.trace.json", root) == "x_y_rm_"  # a run name, nothing else
    assert source_of("/w/.hidden.pt.trace.json", root) == "hidden"


def test_two_sources_in_one_folder_are_two_runs_whose_steps_only_go_forward(tmp_path: Path) -> None:
    car = _sidecar(tmp_path)
    watch = tmp_path / "profiles"
    for k in range(2):  # interleaved, as two trainings write: cnn 0-7, lm 0-7, cnn 8-15, lm 8-15
        for source in ("cnn", "lm"):
            _land(watch, f"{source}_1.{1000 + k}.pt.trace.json.gz", k * STEPS)
            assert len(car.step()) == 1
    car.finish()
    series = tmp_path / "logdir" / "live" / "series"
    assert sorted(d.name for d in series.iterdir() if d.is_dir()) == ["cnn_1", "lm_1"]
    for run in ("cnn_1", "lm_1"):
        assert _steps(series / run) == list(range(2 * STEPS))  # every point, none going back
    windows = {json.loads((d / "window.json").read_text())["series"] for d in (tmp_path / "logdir" / "live").iterdir()
               if (d / "window.json").is_file()}
    assert windows == {"series/cnn_1", "series/lm_1"}  # each window says where its scalars are


def test_a_restart_that_numbers_steps_from_zero_again_goes_on_in_a_new_run(tmp_path: Path) -> None:
    car = _sidecar(tmp_path)
    watch = tmp_path / "profiles"
    _land(watch, "vm.1.pt.trace.json.gz", 0)
    _land(watch, "vm.2.pt.trace.json.gz", STEPS)
    car.step()
    _land(watch, "vm.3.pt.trace.json.gz", 0)  # the training restarted in place: steps from 0, the same name
    car.step()
    car.finish()
    series = tmp_path / "logdir" / "live" / "series"
    assert _steps(series / "vm") == list(range(2 * STEPS))
    assert _steps(series / "vm.run2") == list(range(STEPS))
    again = _sidecar(tmp_path)  # a restarted sidecar goes on in the run the source is in now
    _land(watch, "vm.4.pt.trace.json.gz", STEPS)
    again.step()
    again.finish()
    assert _steps(series / "vm.run2") == list(range(2 * STEPS))


def test_a_file_handed_out_again_writes_only_its_new_steps(tmp_path: Path) -> None:
    from tb_reduce_plugin.live.series import SourceSeries

    car = _sidecar(tmp_path)
    _land(tmp_path / "profiles", "vm.1.pt.trace.json.gz", 0)
    [record] = car.step()
    car.finish()
    live = SourceSeries(tmp_path / "logdir" / "live")
    assert live.add(record, "vm", record.raw.path) == 0  # the same file again (a partial, then whole): nothing new
    live.close()
    assert _steps(tmp_path / "logdir" / "live" / "series" / "vm") == list(range(STEPS))


def test_tensorboards_default_loader_serves_every_point_of_each_source(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard_data_server")
    car = _sidecar(tmp_path)
    watch = tmp_path / "profiles"
    for k in range(3):
        for source in ("cnn", "lm"):
            _land(watch, f"{source}.{k}.pt.trace.json.gz", k * STEPS)
            car.step()
    car.finish()
    tb = start_tensorboard(tmp_path / "logdir", tmp_path / "cache", "--load_fast=true", "--reload_interval=1")
    try:
        got: dict[str, list[int]] = {}
        deadline = time.monotonic() + 120  # a bound on waiting for the data server's first load
        while time.monotonic() < deadline:
            runs = tb.json("data/runs")
            got = {}
            for run in ("live/series/cnn", "live/series/lm"):
                if run in runs:
                    status, _, body = tb.get("data/plugin/scalars/scalars", run=run, tag="live/step_time_ms")
                    got[run] = [p[1] for p in json.loads(body)] if status == 200 else []
            if all(len(v) == 3 * STEPS for v in got.values()) and len(got) == 2:
                break
            time.sleep(1.0)
        assert got == {"live/series/cnn": list(range(3 * STEPS)), "live/series/lm": list(range(3 * STEPS))}, got
    finally:
        tb.stop()
