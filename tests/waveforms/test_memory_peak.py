"""Peak memory per step (issue 27, item 4) from Kineto's `[memory]` events, on a real PyTorch
run recorded with `profile_memory=True` that keeps one more 4 MiB tensor alive every step
from step 6 on (tests/fixtures/make_compare_traces.py): `memory_peak_mb_cpu` in the CLI's
waveforms, the route, the multi-host spread and the live sidecar's scalars."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from tb_reduce_plugin.reduce.pipeline import derive_index, index_file, memory_samples
from tb_reduce_plugin.waveforms.memory import MemorySamples, device_name, peak_per_step

RUNS = ROOT / "tests" / "fixtures" / "compare"
MEMORY_RUN, BASE = RUNS / "memory.pt.trace.json.gz", RUNS / "base.pt.trace.json.gz"
GROWS_FROM, KEPT_MB = 6, (4 << 20) / 1e6


def waveforms(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tb_reduce_plugin", "waveforms", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_the_peak_grows_by_the_tensor_kept_each_step_from_the_step_that_starts_keeping() -> None:
    r = waveforms(str(MEMORY_RUN))
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert "memory_peak_mb_cpu" in rows[0]
    peak = {int(row["step"]): float(row["memory_peak_mb_cpu"]) for row in rows}
    before = [peak[s] for s in peak if s < GROWS_FROM]
    assert max(before) - min(before) < 0.5 * KEPT_MB  # steady before the run starts keeping
    grown = [peak[s + 1] - peak[s] for s in peak if s >= GROWS_FROM and s + 1 in peak]
    assert len(grown) >= 6 and all(abs(g - KEPT_MB) < 0.05 * KEPT_MB for g in grown), grown
    doc = json.loads(waveforms(str(MEMORY_RUN), "--format", "json").stdout)
    assert "memory_peak_mb_cpu" in doc["series"]
    assert [s["memory_mb"]["memory_peak_mb_cpu"] for s in doc["steps"]] == pytest.approx(list(peak.values()))


def test_peaks_are_what_a_plain_loop_over_the_samples_finds() -> None:
    idx = index_file(MEMORY_RUN)
    samples = memory_samples(idx)
    assert len(samples) > 400 and set(samples.device_type.tolist()) == {0}
    steps = derive_index(idx)
    got = steps.memory_mb["memory_peak_mb_cpu"]
    order = np.argsort(samples.ts, kind="stable")
    ts, alloc = samples.ts[order], samples.allocated[order]
    for k in range(len(steps)):
        a, b = steps.start_us[k], steps.end_us[k]
        inside = [float(v) for t, v in zip(ts, alloc) if a <= t < b]
        before = [float(v) for t, v in zip(ts, alloc) if t < a]
        want = max(inside + before[-1:]) / 1e6
        assert got[k] == want


def test_steps_that_overlap_or_come_out_of_order_get_each_its_own_peak() -> None:
    s = MemorySamples(np.array([0.0, 10, 20, 30, 40]), np.zeros(5, dtype=np.int64), np.full(5, -1, dtype=np.int64),
                      np.array([1e6, 5e6, 2e6, 9e6, 3e6]), np.zeros(5))
    starts, ends = np.array([25.0, 5, 5, 45, -10]), np.array([45.0, 25, 15, 50, -5])
    got = peak_per_step(s, starts, ends)["memory_peak_mb_cpu"]
    assert got[:4].tolist() == [9.0, 5.0, 5.0, 3.0] and np.isnan(got[4])  # before any sample: none
    two = MemorySamples(np.array([0.0, 1.0]), np.array([1, 1]), np.array([0, 1]), np.array([1e6, 2e6]), np.zeros(2))
    assert sorted(peak_per_step(two, np.array([0.0]), np.array([5.0]))) == ["memory_peak_mb_cuda0",
                                                                            "memory_peak_mb_cuda1"]
    assert device_name(0, -1) == "cpu" and device_name(1, 3) == "cuda3" and device_name(99, 0) == "device99_0"


def test_a_trace_without_memory_events_keeps_its_series_as_they_were() -> None:
    steps = derive_index(index_file(BASE))
    assert steps.memory_mb == {} and not any(s.startswith("memory_peak") for s in steps.series)
    assert "memory_mb" not in steps.to_json()["steps"][0]


def test_memory_events_whose_args_are_not_numbers_are_left_out(tmp_path: Path) -> None:
    events = json.loads(__import__("gzip").decompress(MEMORY_RUN.read_bytes()))
    mem = [e for e in events["traceEvents"] if e.get("name") == "[memory]"]
    mem[0]["args"]["Total Allocated"] = "lots"
    mem[1]["args"] = "not an object"
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(events))
    samples = memory_samples(index_file(path))
    assert len(samples) == len(mem) - 2
    r = waveforms(str(path))
    assert r.returncode == 0 and "memory_peak_mb_cpu" in r.stdout.splitlines()[0], r.stderr


def test_the_route_the_spread_and_the_live_scalars_carry_the_peak(tmp_path: Path) -> None:
    from plugin_support import body_json, client, get, make_plugin

    from tb_reduce_plugin.live.series import PREFIX, LiveSeries
    from tb_reduce_plugin.waveforms.scalars import RunScalars

    logs = tmp_path / "logs"
    for host in ("a", "b"):
        (logs / "job").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(MEMORY_RUN, logs / "job" / f"{host}.pt.trace.json.gz")
    c = client(make_plugin(logs, tmp_path / "cache"))
    one = body_json(get(c, "waveforms", run="job", host="a"))
    assert "memory_peak_mb_cpu" in one["series"] and "memory_mb" in one["steps"][0]
    both = body_json(get(c, "waveforms", run="job", hosts="a,b"))
    assert "memory_peak_mb_cpu" in both["series"]
    step = both["steps"][-1]["series"]["memory_peak_mb_cpu"]
    assert step["min"] == step["max"] == one["steps"][-1]["memory_mb"]["memory_peak_mb_cpu"]

    with LiveSeries(tmp_path / "live") as live:
        steps = derive_index(index_file(MEMORY_RUN))
        assert live.write_steps(steps, 1_796_000_000.0) == len(steps)
        live.flush()
        rs = RunScalars(tmp_path / "live")
        rs.poll()
        _, _, values = rs.series(f"{PREFIX}memory_peak_mb_cpu")
        assert np.allclose(values, steps.memory_mb["memory_peak_mb_cpu"].astype(np.float32))


def test_counters_keep_each_buckets_first_last_least_and_most_and_the_level_carried_in() -> None:
    from tb_reduce_plugin.waveforms.memory import counter_points

    rng = np.random.default_rng(7)
    n = 5000
    ts = np.sort(rng.uniform(0, 1000, n))
    alloc = rng.uniform(1e6, 9e6, n)
    s = MemorySamples(ts, np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64), alloc, np.zeros(n),
                      track=np.zeros(n, dtype=np.int64))
    [series] = counter_points(s, [(42, 1)], 200.0, 600.0, 10)  # reserved: 0 throughout, left out
    assert series["pid"] == 42 and series["label"] == "memory allocated (cpu, MB)"
    kept = np.asarray(series["ts"])
    assert kept[0] < 200.0 <= kept[1]  # the sample before the window: the level carried in
    inside = (ts >= 200.0) & (ts <= 600.0)
    b = np.clip(((ts - 200.0) / 40.0).astype(int), 0, 9)
    for k in range(10):
        mine = np.flatnonzero(inside & (b == k))
        want = {ts[mine[0]], ts[mine[-1]], ts[mine[np.argmin(alloc[mine])]], ts[mine[np.argmax(alloc[mine])]]}
        got = set(kept[(kept >= 200.0 + 40 * k) & (kept < 200.0 + 40 * (k + 1))].tolist())
        assert want <= got and len(got) <= 4, k
    assert len(kept) <= 1 + 4 * 10
    every = counter_points(s, [(42, 1)], 200.0, 600.0, None)[0]  # level 0: every sample
    assert len(every["ts"]) == int(inside.sum()) + 1
    assert counter_points(MemorySamples.empty(), [], 0.0, 1.0, 10) == []


def test_the_memory_route_answers_the_counters_of_a_window_and_nothing_for_a_trace_without(tmp_path: Path) -> None:
    from plugin_support import body_json, client, get, make_plugin

    from tb_reduce_plugin.reduce.pipeline import reduce_to_bytes

    logs = tmp_path / "logs"
    (logs / "mem").mkdir(parents=True)
    (logs / "mem" / "m.pt.trace.json").write_bytes(__import__("gzip").decompress(MEMORY_RUN.read_bytes()))
    (logs / "base").mkdir()
    shutil.copyfile(BASE, logs / "base" / "b.pt.trace.json.gz")
    c = client(make_plugin(logs, tmp_path / "cache"))
    whole = body_json(get(c, "memory", run="mem", host="m"))
    [allocated] = whole["series"]  # reserved: 0 throughout on the CPU, left out
    assert allocated["device"] == "cpu" and allocated["key"] == "allocated" and max(allocated["mb"]) > 35
    lo, hi = allocated["ts"][100], allocated["ts"][200]
    part = body_json(get(c, "memory", run="mem", host="m", start_us=lo, end_us=hi, resolution=10))["series"][0]
    assert part["ts"][0] < lo and all(lo <= t <= hi for t in part["ts"][1:]) and len(part["ts"]) <= 41
    assert body_json(get(c, "memory", run="base", host="b"))["series"] == []
    assert get(c, "memory", run="mem", host="m", resolution=0).status_code == 400
    assert get(c, "memory", run="nope", host="m").status_code == 404
    doc = json.loads(reduce_to_bytes(MEMORY_RUN, 2))  # the reduced trace itself is as before
    assert "memory" not in doc["tb_reduce"] and not any(e.get("ph") == "C" for e in doc["traceEvents"])


def test_memory_is_pending_while_the_traces_events_do_not_read_back_cheaply(tmp_path: Path, monkeypatch) -> None:
    """A gzip whose text is not kept yet: the route reads nothing (no second inflate of the
    file) and says `pending`; once its events read back cheaply, the series."""
    from tb_reduce_plugin.reduce import pipeline
    from tb_reduce_plugin.serve.service import TraceService

    (tmp_path / "logs" / "mem").mkdir(parents=True)
    shutil.copyfile(MEMORY_RUN, tmp_path / "logs" / "mem" / "m.pt.trace.json.gz")
    svc = TraceService(str(tmp_path / "logs"), cache_dir=str(tmp_path / "cache"))
    svc.reduction("mem", "m", 2, None, None)
    svc.wait_saved()
    idx = svc.warm_index(svc.trace_file("mem", "m"))
    assert pipeline._cached(idx.table) is None
    monkeypatch.setattr(type(idx.source), "reads_cheaply", property(lambda self: False))
    got = svc.memory("mem", "m")
    assert got["pending"] and got["series"] == [] and got["retry_after_s"] >= 1
    assert pipeline._cached(idx.table) is None  # nothing was read
    monkeypatch.undo()
    got = svc.memory("mem", "m")
    assert not got["pending"] and got["series"][0]["key"] == "allocated"
