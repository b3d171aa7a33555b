"""Per-step series derived from traces: steps from real markers, busy time per category."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import TESTS, write_trace

from tb_reduce_plugin.reduce.pipeline import index_file, waveforms_file
from tb_reduce_plugin.waveforms.categories import CATEGORIES, DEVICE_IDLE, UNACCOUNTED
from tb_reduce_plugin.waveforms.steps import MARKER_PYTORCH, MARKER_STEP_NUM, MARKER_STEPS_LINE, NO_MARKERS, derive

FIXTURES = TESTS / "fixtures" / "traces"
TORCH_STALLED = FIXTURES / "torch_stalled_step.pt.trace.json.gz"  # make_step_traces.py: 8 steps, step 5 sleeps 150 ms
JAX_STALLED = FIXTURES / "jax_stalled_step.xplane.pb"
STALLED = 5


def _assert_stalled_step_stands_out(path: Path, marker: str) -> None:
    s = waveforms_file(path)
    assert s.marker == marker and s.reason is None
    assert s.step.tolist() == list(range(8))
    times = s.step_time_ms
    assert s.slowest()[0] == STALLED
    others = np.delete(times, STALLED)
    assert times[STALLED] >= 150.0  # it slept 150 ms inside the step
    assert times[STALLED] > 1.4 * np.median(others)


def test_a_stalled_pytorch_step_is_the_slowest_and_stands_out() -> None:
    _assert_stalled_step_stands_out(TORCH_STALLED, MARKER_PYTORCH)


def test_a_stalled_jax_step_is_the_slowest_and_stands_out_in_the_xspace() -> None:
    _assert_stalled_step_stands_out(JAX_STALLED, MARKER_STEP_NUM)


def test_a_stalled_step_is_idle_not_busy_on_the_host() -> None:
    s = waveforms_file(TORCH_STALLED)
    compute = s.busy_ms["compute"]
    # The sleep adds ~150 ms to the step and no compute: the stalled step's compute is like the others'.
    assert compute[STALLED] < s.step_time_ms[STALLED] - 140
    assert abs(compute[STALLED] - np.median(compute)) < 0.5 * np.median(compute) + 5


def test_jax_json_and_its_xspace_give_the_same_steps(corpus: Path) -> None:
    a = waveforms_file(corpus / "generated" / "jax_cpu_mlp_small" / "vm.xplane.pb")
    b = waveforms_file(corpus / "generated" / "jax_cpu_mlp_small" / "vm.trace.json.gz")
    assert len(a) == len(b) == 20 and a.marker == b.marker == MARKER_STEP_NUM
    assert a.step.tolist() == b.step.tolist() == list(range(20))
    np.testing.assert_allclose(a.start_us, b.start_us, atol=1e-3)
    np.testing.assert_allclose(a.step_time_ms, b.step_time_ms, atol=1e-6)


@pytest.mark.parametrize("name, steps, first", [
    ("kineto/tb_plugin__samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz", 6, 5),
    ("HolisticTraceAnalysis/tests__data__trace_diff__control__control.json.gz", 6, 1009),
    ("HolisticTraceAnalysis/tests__data__nccl_parser_config__nccl_data.json.gz", 3, 4),
])
def test_gpu_traces_give_their_known_step_counts_with_device_idle(corpus: Path, name: str, steps: int,
                                                                   first: int) -> None:
    s = waveforms_file(corpus / "public" / name)
    assert len(s) == steps and int(s.step[0]) == first and s.marker == MARKER_PYTORCH
    assert list(s.busy_ms) == [*CATEGORIES, DEVICE_IDLE, UNACCOUNTED]
    assert np.all(s.busy_ms["compute"] > 0)
    for values in s.busy_ms.values():  # busy time is inside the step
        assert np.all(values >= 0) and np.all(values <= s.step_time_ms + 1e-6)
    # idle + busy device time = the step: idle is what no device slice covers
    assert np.all(s.busy_ms[DEVICE_IDLE] >= s.step_time_ms - s.busy_ms["compute"] - s.busy_ms["communication"]
                  - s.busy_ms["memory"] - 1e-6)


def test_an_xprof_steps_line_gives_the_steps_when_nothing_else_does(corpus: Path) -> None:
    path = next((corpus / "public" / "xprof").glob("*GPU-multi-worker*.xplane.pb"))
    s = waveforms_file(path)
    assert s.marker == MARKER_STEPS_LINE and len(s) == 1 and s.step.tolist() == [0]
    assert s.track[0] < 100  # a device plane's line


def test_a_trace_without_markers_has_no_steps_and_says_why(corpus: Path) -> None:
    s = waveforms_file(corpus / "public" / "catapult" / "tracing__test_data__x_event_trace.json")
    assert len(s) == 0 and s.reason == NO_MARKERS and s.marker is None
    doc = s.to_json()
    assert doc["steps"] == [] and doc["reason"] == NO_MARKERS and doc["slowest"] == []


def _kineto_like(tmp_path: Path) -> Path:
    """Two host steps and device work of each category, with nesting, overlap and a
    slice crossing the step boundary, plus a GPU copy of the markers (ignored)."""
    ev = [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        {"ph": "X", "name": "ProfilerStep#7", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "name": "ProfilerStep#8", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 100, "dur": 50},
        {"ph": "X", "name": "ProfilerStep#7", "cat": "gpu_user_annotation", "pid": 0, "tid": 7, "ts": 5, "dur": 140},
        {"ph": "X", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "cat": "user_annotation",
         "pid": 1, "tid": 1, "ts": 1, "dur": 9},
        {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 20, "dur": 30},  # host: not counted
        {"ph": "X", "name": "gemm", "cat": "kernel", "pid": 0, "tid": 7, "ts": 10, "dur": 20},
        {"ph": "X", "name": "gemm2", "cat": "kernel", "pid": 0, "tid": 8, "ts": 25, "dur": 15},  # overlaps: union 10..40
        {"ph": "X", "name": "ncclDevKernel_AllReduce_Sum", "cat": "kernel", "pid": 0, "tid": 9, "ts": 90, "dur": 20},
        {"ph": "X", "name": "Memcpy HtoD (Pageable -> Device)", "cat": "gpu_memcpy", "pid": 0, "tid": 7,
         "ts": 120, "dur": 10},
    ]
    return write_trace(tmp_path / "k.json", {"traceEvents": ev})


def test_busy_time_is_the_union_of_each_categorys_slices_inside_each_step(tmp_path: Path) -> None:
    s = waveforms_file(_kineto_like(tmp_path))
    assert s.step.tolist() == [7, 8] and s.track == (1, 1)  # the host's markers, not the GPU's copy
    assert s.step_time_ms.tolist() == [0.1, 0.05]
    assert s.busy_ms["compute"].tolist() == [0.03, 0.0]  # gemm ∪ gemm2 = 10..40; host aten::mm not counted
    assert s.busy_ms["communication"].tolist() == [0.01, 0.01]  # 90..110 split at the step boundary
    assert s.busy_ms["memory"].tolist() == [0.0, 0.01]
    assert s.busy_ms["data_loading"].tolist() == [0.009, 0.0]
    assert s.busy_ms[DEVICE_IDLE].tolist() == [0.06, 0.03]  # 100 − 30 − 10; 50 − 10 − 10
    # the host thread: aten::mm (30 µs) is its only op (the DataLoader range is an annotation)
    assert s.busy_ms[UNACCOUNTED].tolist() == [0.07, 0.05]
    rows = s.rows()
    assert rows[0] == ["step", "start_us", "step_time_ms", "compute_ms", "communication_ms", "memory_ms",
                       "data_loading_ms", "device_idle_ms", "unaccounted_ms"]
    assert rows[1][0] == [7, 0.0, 0.1, 0.03, 0.01, 0.0, 0.009, 0.06, 0.07]


def test_repeated_and_decreasing_step_numbers_are_kept_in_time_order(tmp_path: Path) -> None:
    ev = [{"ph": "X", "name": "train", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5, "args": {"step_num": n}}
          for i, n in enumerate([3, 4, 4, 2, "5"])]
    s = waveforms_file(write_trace(tmp_path / "j.json", ev))
    assert s.marker == MARKER_STEP_NUM and s.step.tolist() == [3, 4, 4, 2, 5]


def test_step_num_args_are_found_in_every_block_of_a_large_file(tmp_path: Path) -> None:
    filler = [{"ph": "X", "name": f"op{i % 50}", "pid": 1, "tid": 2, "ts": i, "dur": 1, "args": {"k": "step_numx"}}
              for i in range(60_000)]
    marks = [{"ph": "X", "name": "train", "pid": 1, "tid": 1, "ts": 1000 * i, "dur": 900, "args": {"step_num": str(i)}}
             for i in range(60)]
    ev = [e for pair in zip(marks, [filler[i::60] for i in range(60)]) for e in (pair[0], *pair[1])]
    s = waveforms_file(write_trace(tmp_path / "big.json", ev))
    assert s.step.tolist() == list(range(60))


def _oracle(slices: list[tuple[float, float]], a: float, b: float) -> float:
    """Covered length of [a, b] by the slices, by merging in plain Python."""
    parts = sorted((max(s, a), min(e, b)) for s, e in slices if min(e, b) > max(s, a))
    total, cur_s, cur_e = 0.0, None, None
    for s, e in parts:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


@pytest.mark.parametrize("seed", range(5))
def test_busy_time_agrees_with_a_plain_python_merge_on_random_slices(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    steps = [(i * 100.0 + rnd.uniform(0, 10), rnd.uniform(40, 95)) for i in range(20)]
    ev = [{"ph": "X", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": ts, "dur": d}
          for i, (ts, d) in enumerate(steps)]
    ops = [(rnd.uniform(0, 2000), rnd.expovariate(1 / 15)) for _ in range(400)]
    ev += [{"ph": "X", "name": "aten::add", "cat": "cpu_op", "pid": 1, "tid": rnd.choice([1, 2, 3]), "ts": ts,
            "dur": d} for ts, d in ops]
    s = derive(index_file(write_trace(tmp_path / "r.json", ev)).table)
    want = [_oracle([(ts, ts + d) for ts, d in ops], ts, ts + d) / 1000 for ts, d in steps]
    np.testing.assert_allclose(s.busy_ms["compute"], want, rtol=1e-9, atol=1e-9)


def test_hostile_times_give_strict_json(tmp_path: Path) -> None:
    ev = [{"ph": "X", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": -1e308, "dur": 1.7e308},
          {"ph": "X", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 1e308, "dur": 1e308}]
    doc = waveforms_file(write_trace(tmp_path / "h.json", ev)).to_json()
    json.dumps(doc, allow_nan=False)
    assert [st["step"] for st in doc["steps"]] == [1, 2]


def test_the_corpus_derives_without_error_and_busy_time_stays_inside_steps(corpus: Path) -> None:
    skipped = ("CORRUPT", "rocprof", "MANIFEST")
    seen = 0
    for path in sorted((corpus / "public").glob("*/*")):
        if any(s in path.name for s in skipped):
            continue
        s = waveforms_file(path)
        json.dumps(s.to_json(), allow_nan=False)
        for values in s.busy_ms.values():
            assert np.all(values <= s.step_time_ms + 1e-6), path.name
        seen += bool(len(s))
    assert seen >= 20  # most GPU traces hold ProfilerStep#N

