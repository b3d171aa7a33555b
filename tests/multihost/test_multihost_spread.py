"""The per-step spread across hosts (`waveforms?run=&hosts=`): each host's own step series,
lined up by step number, with the least, the median, the most and the straggler per step
and series — checked against the inputs' own ProfilerStep slices and against a plain
Python computation over the single-host answers, on the corpus's eight DLRM ranks and on
real profiler traces with several steps each."""

from __future__ import annotations

import gzip
import json
import shutil
import statistics
from pathlib import Path

import pytest
from conftest import TESTS

from tests.multihost_support import DLRM_RANKS, dlrm_logdir
from tests.plugin_support import JAX_SMALL, TORCH_SMALL, assert_json_error, body_json, client, get, make_plugin

RANKS = DLRM_RANKS
STEP_TRACES = TESTS / "fixtures" / "traces"


@pytest.fixture()
def dlrm(tmp_path: Path):
    c = client(make_plugin(dlrm_logdir(tmp_path), tmp_path / "cache"))
    hosts = [h["host"] for h in body_json(get(c, "runs"))[0]["hosts"]]
    return c, hosts


@pytest.fixture()
def steps_run(tmp_path: Path):
    """Three real profiles of different step ranges (PyTorch 0-7 with a stalled step 5,
    PyTorch 2-6, JAX 0-…), a trace without step markers and a truncated file."""
    if not TORCH_SMALL.is_dir() or not JAX_SMALL.is_dir():
        pytest.skip("../shared/corpus is absent")
    run = tmp_path / "logs" / "job"
    run.mkdir(parents=True)
    shutil.copy(STEP_TRACES / "torch_stalled_step.pt.trace.json.gz", run / "a_stalled.pt.trace.json.gz")
    shutil.copy(next(TORCH_SMALL.glob("*.pt.trace.json")), run / "b_cnn.pt.trace.json")
    shutil.copy(JAX_SMALL / "vm.trace.json.gz", run / "c_jax.trace.json.gz")
    evs = [{"ph": "X", "name": f"work{i}", "pid": 1, "tid": 1, "ts": 10.0 * i, "dur": 5} for i in range(50)]
    (run / "d_nosteps.trace.json").write_text(json.dumps({"traceEvents": evs}))
    (run / "e_cut.pt.trace.json.gz").write_bytes(gzip.compress(RANKS[0].read_bytes())[:4000] if RANKS else b"\x1f\x8b")
    c = client(make_plugin(tmp_path / "logs", tmp_path / "cache"))
    hosts = [h["host"] for h in body_json(get(c, "runs"))[0]["hosts"]]
    return c, hosts


def _profiler_steps(path: Path) -> dict[int, float]:
    """A Kineto trace's own ProfilerStep#N slices: step number → ms, read from its JSON."""
    out = {}
    for e in json.loads(path.read_bytes())["traceEvents"]:
        name = e.get("name")
        if e.get("ph") == "X" and isinstance(name, str) and name.startswith("ProfilerStep#"):
            out.setdefault(int(name.split("#")[1]), e["dur"] / 1000.0)
    return out


def _expected(singles: list) -> dict:
    """The spread computed plainly: per step number, per series, over the hosts that have it."""
    series = []
    for doc in singles:
        for s in (doc or {}).get("series", []):
            if s not in series:
                series.append(s)
    numbers = sorted({s["step"] for doc in singles if doc for s in doc["steps"]})
    out = {}
    for n in numbers:
        rows = []
        for doc in singles:
            step = next((s for s in doc["steps"] if s["step"] == n), None) if doc else None
            rows.append(step)
        per = {}
        for name in series:
            vals = [None if r is None else r["step_time_ms"] if name == "step_time_ms"
                    else r.get("memory_mb", {}).get(name) if name.startswith("memory_peak_mb_")
                    else r["busy_ms"].get(name[:-3]) for r in rows]
            have = [(v, k) for k, v in enumerate(vals) if v is not None]
            top = max(have, key=lambda vk: (vk[0], -vk[1]))[1] if have else None
            per[name] = {"values": vals, "min": min(v for v, _ in have) if have else None,
                         "max": max(v for v, _ in have) if have else None,
                         "median": statistics.median(v for v, _ in have) if have else None, "top": top}
        out[n] = (rows, per)
    return out


def test_the_spread_of_the_eight_dlrm_ranks_is_their_own_profiler_steps(dlrm) -> None:
    c, hosts = dlrm
    doc = body_json(get(c, "waveforms", run="dlrm", hosts="*"))
    assert [h["host"] for h in doc["hosts"]] == hosts and all("error" not in h for h in doc["hosts"])
    assert all(h["marker"] == "ProfilerStep#N" and h["steps"] == 1 for h in doc["hosts"])
    own = [_profiler_steps(p) for p in RANKS]  # the files in the run's order (hosts are named by them)
    assert [h.split("worker")[1][0] for h in hosts] == [p.name.split("worker")[1][0] for p in RANKS]
    numbers = sorted(set().union(*own))
    assert [s["step"] for s in doc["steps"]] == numbers
    for step in doc["steps"]:
        times = [o.get(step["step"]) for o in own]
        st = step["series"]["step_time_ms"]
        assert st["values"] == pytest.approx(times, abs=1e-6)
        assert st["min"] == pytest.approx(min(times)) and st["max"] == pytest.approx(max(times))
        assert st["median"] == pytest.approx(statistics.median(times))
        assert st["straggler"] == hosts[times.index(max(times))]
        assert step["hosts"] == 8
        # the ranks did not take the same time: a spread worth showing
        assert st["max"] > st["min"]
    # every busy category, against the single-host route's own answer per host
    singles = [body_json(get(c, "waveforms", run="dlrm", host=h)) for h in hosts]
    want = _expected(singles)
    assert doc["series"] == singles[0]["series"]
    for step in doc["steps"]:
        rows, per = want[step["step"]]
        assert step["start_us"] == [r["start_us"] for r in rows]
        for name, got in step["series"].items():
            assert got["values"] == per[name]["values"]
            assert (got["min"], got["max"]) == (per[name]["min"], per[name]["max"])
            assert got["median"] == pytest.approx(per[name]["median"], abs=1e-6)
            assert got["straggler"] == hosts[per[name]["top"]]


def test_hosts_of_different_step_ranges_are_lined_up_by_step_number(steps_run) -> None:
    c, hosts = steps_run
    steppy = [h for h in hosts if h.startswith(("a_", "b_", "c_"))]
    doc = body_json(get(c, "waveforms", run="job", hosts=",".join(steppy)))
    singles = [body_json(get(c, "waveforms", run="job", host=h)) for h in steppy]
    want = _expected(singles)
    assert [s["step"] for s in doc["steps"]] == sorted(want)
    ranges = [{s["step"] for s in d["steps"]} for d in singles]
    assert len(set(map(frozenset, ranges))) == 3  # three different step ranges really are lined up
    for step in doc["steps"]:
        rows, per = want[step["step"]]
        assert step["hosts"] == sum(r is not None for r in rows)
        assert step["end_us"] == [None if r is None else r["end_us"] for r in rows]
        for name in doc["series"]:
            got = step["series"][name]
            assert got["values"] == per[name]["values"]
            assert got["median"] == pytest.approx(per[name]["median"], abs=1e-6)
            assert got["straggler"] == (None if per[name]["top"] is None else steppy[per[name]["top"]])
    # the stalled step of the PyTorch profile is its straggler, and stands out of the spread
    stalled = next(s for s in doc["steps"] if s["step"] == 5)["series"]["step_time_ms"]
    assert stalled["straggler"] == steppy[0] and stalled["max"] == stalled["values"][0] > 1.5 * stalled["median"]


def test_a_host_without_steps_or_unreadable_is_named_with_its_reason_and_the_others_answered(steps_run) -> None:
    c, hosts = steps_run
    doc = body_json(get(c, "waveforms", run="job", hosts="*"))
    by = {h["host"]: h for h in doc["hosts"]}
    assert list(by) == hosts
    nosteps = next(h for h in hosts if h.startswith("d_"))
    cut = next(h for h in hosts if h.startswith("e_"))
    assert by[nosteps]["steps"] == 0 and "no step markers" in by[nosteps]["reason"] and "error" not in by[nosteps]
    assert "error" in by[cut] and by[cut]["steps"] == 0
    assert any(w in by[cut]["error"].lower() for w in ("gzip", "truncated", "compressed"))
    k_nosteps, k_cut = hosts.index(nosteps), hosts.index(cut)
    for step in doc["steps"]:
        for got in step["series"].values():
            assert got["values"][k_nosteps] is None and got["values"][k_cut] is None
            assert got["straggler"] not in (nosteps, cut)
    assert sum(h["steps"] > 0 for h in doc["hosts"]) == 3


def test_bad_spread_requests_get_one_line_answers(steps_run) -> None:
    c, hosts = steps_run
    assert_json_error(get(c, "waveforms", run="job", host=hosts[0], hosts="*"), 400)
    assert_json_error(get(c, "waveforms", run="job", hosts=",,,"), 400)
    assert "nope" in assert_json_error(get(c, "waveforms", run="job", hosts="nope"), 404)
    assert_json_error(get(c, "waveforms", run="nope", hosts="*"), 404)
    # every host named fails: the answer is that failure, not an empty spread
    cut = next(h for h in hosts if h.startswith("e_"))
    assert_json_error(get(c, "waveforms", run="job", hosts=cut), 422)
