"""A real GPU trace (tests/fixtures/gpu: a small transformer's training steps on an NVIDIA
H200, recorded by torch.profiler with `record_h200_trace.py` beside it; one step stalls on
the host for 50 ms): every level keeps the guarantees (the reference checker, as the corpus
sweep), the kernels on the GPU's streams survive the reduction with their launches' flows,
the waveforms point at the stalled step, and the index store gives the same bytes."""

from __future__ import annotations

import gzip
import io
import json

import pytest
from conftest import TESTS

from tb_reduce_plugin.index.store import IndexStore, indexed
from tb_reduce_plugin.reduce.pipeline import index_file, reduce_index, reduce_to_bytes
from tb_reduce_plugin.waveforms.steps import derive
from tests.reference_checker import check_reduction, default_window, load_trace

TRACE = next((TESTS / "fixtures" / "gpu").glob("h200.*.pt.trace.json.gz"))


@pytest.fixture(scope="module")
def doc() -> dict:
    return load_trace(TRACE)


@pytest.mark.parametrize("level,windowed", [(0, False), (1, False), (2, False), (3, False), (4, False), (2, True)])
def test_every_level_of_the_h200_trace_keeps_the_guarantees(doc, level, windowed):
    start = end = None
    if windowed:
        t0, t1 = default_window(doc)
        start, end = t0 + (t1 - t0) / 3, t0 + 2 * (t1 - t0) / 3
    check_reduction(doc, json.loads(reduce_to_bytes(TRACE, level=level, start_us=start, end_us=end)), level, start,
                    end)


def test_the_kernels_on_the_gpu_streams_survive_level_2_with_their_launch_flows(doc):
    out = json.loads(reduce_to_bytes(TRACE, level=2))["traceEvents"]
    kernels = [e for e in out if e.get("cat") == "kernel"]
    assert kernels and len(kernels) <= sum(e.get("cat") == "kernel" for e in doc["traceEvents"])
    gpu_pids = {e["pid"] for e in doc["traceEvents"] if e.get("cat") == "kernel"}
    assert {e["pid"] for e in kernels} <= gpu_pids
    flows = [e for e in out if e.get("cat") == "ac2g"]
    assert flows and {e["ph"] for e in flows} == {"s", "f"}


def test_the_waveforms_point_at_the_step_that_stalled_on_the_host():
    series = derive(index_file(TRACE).table).to_json()
    steps = series["steps"]
    assert [s["step"] for s in steps] == list(range(1, 9))
    times = [s["step_time_ms"] for s in steps]
    stalled = times.index(max(times))
    assert steps[stalled]["step"] == 6 and times[stalled] > 2 * sorted(times)[len(times) // 2]
    assert stalled in series["slowest"] and stalled in series["unaccounted_stands_out"]


def test_the_stored_index_of_the_h200_trace_reduces_to_the_same_bytes(tmp_path):
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    parsed = index_file(TRACE)
    store.save(parsed)

    def reduced(index, level):
        out = io.BytesIO()
        reduce_index(index, out, level, gzip=False, with_input_index=True)
        return out.getvalue()

    expected = {level: reduced(parsed, level) for level in (0, 2, 4)}
    store.save_prepared(parsed)
    reopened = indexed(store, str(TRACE))
    assert reopened.extra.get("stored_index") and reopened.prepared.ready_fields()
    assert {level: reduced(reopened, level) for level in (0, 2, 4)} == expected
    assert gzip.decompress(TRACE.read_bytes())  # the fixture is the gzip torch wrote
