"""A merged view of several hosts: each host's own reduction, moved to its place in real
time, its processes under the host's name, and nothing else changed — checked against
the per-host views and against the inputs' own timestamps, on the corpus's eight
PyTorch ranks of one DLRM job."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from conftest import TESTS

from tb_reduce_plugin.multihost.merge import PID_STRIDE
from tests.multihost_support import DLRM_RANKS, dlrm_logdir, moved
from tests.plugin_support import assert_json_error, body_json, client, get, make_plugin

RANKS = DLRM_RANKS


@pytest.fixture()
def dlrm(tmp_path: Path):
    plugin = make_plugin(dlrm_logdir(tmp_path), tmp_path / "cache")
    c = client(plugin)
    hosts = [h["host"] for h in body_json(get(c, "runs"))[0]["hosts"]]
    return c, hosts


def _input_starts() -> list[float]:
    """Each rank's first timestamp (µs since the epoch: these Kineto traces write wall time)."""
    out = []
    for p in RANKS:
        evs = json.loads(p.read_bytes())["traceEvents"]
        out.append(min(float(e["ts"]) for e in evs if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M"))
    return out


def _rank_of(pid: object, hosts: list) -> int:
    if isinstance(pid, str):
        return next(k for k, h in enumerate(hosts) if pid.startswith(f"{h}/"))
    return int(pid) // PID_STRIDE


def test_every_rank_is_its_own_reduction_moved_to_its_place_in_real_time(dlrm) -> None:
    c, hosts = dlrm
    merged = body_json(get(c, "trace", run="dlrm", hosts="*", level=2, gz=True))
    tb = merged["tb_reduce"]
    assert tb["merged"] and tb["alignment"]["absolute"] and len(tb["hosts"]) == 8
    starts = _input_starts()
    epoch_us = min(starts)
    assert tb["alignment"]["epoch_ns"] == round(epoch_us * 1000)
    events = merged["traceEvents"]
    for k, entry in enumerate(tb["hosts"]):
        assert entry["host"] == hosts[k] and entry["rank"] == k and "error" not in entry
        # the offset puts the rank's own wall-clock timestamps on the merged clock (µs from the earliest rank)
        assert entry["offset_us"] == -epoch_us
        # its events are exactly its own reduction at its share of the buckets, moved
        alone = body_json(get(c, "trace", run="dlrm", host=hosts[k], level=2, resolution=20_000 // 8, gz=True))
        mine = events[entry["first_event"]:entry["first_event"] + entry["events"]]
        own = alone["traceEvents"]
        assert mine[:len(own)] == [moved(e, k, hosts[k], entry["offset_us"]) for e in own]
        # then a name for each process the rank never named, by its host and pid, and a sort
        # index inside the host's range for each it gave none
        extra = mine[len(own):]
        named = {e["pid"] for e in own if e.get("ph") == "M" and e.get("name") == "process_name"}
        unnamed = sorted({str(e["pid"]) for e in own} - {str(p) for p in named})
        names = [e["args"]["name"] for e in extra if e["name"] == "process_name"]
        assert sorted(names) == sorted(f"{hosts[k]} · pid {p}" for p in unnamed)
        indexed = {e["pid"] for e in own if e.get("ph") == "M" and e.get("name") == "process_sort_index"}
        sort_of = {e["pid"]: e["args"]["sort_index"] for e in extra if e["name"] == "process_sort_index"}
        assert len(sort_of) == len({str(e["pid"]) for e in own} - {str(p) for p in indexed})
        assert all(k * (1 << 20) <= v < (k + 1) * (1 << 20) for v in sort_of.values())
        assert all(e["ph"] == "M" for e in extra) and len(extra) == len(names) + len(sort_of)
        first = min(e["ts"] for e in mine if e.get("ph") != "M")
        assert first == pytest.approx(starts[k] - epoch_us, abs=1e-3)
        assert entry["metadata"]["distributedInfo"]["rank"] == int(hosts[k].split("worker")[1][0])
    assert min(e["ts"] for e in events if e.get("ph") != "M") == 0.0
    # no two hosts share a process
    by_pid = {}
    for e in events:
        rank = _rank_of(e["pid"], hosts)
        assert by_pid.setdefault(e["pid"], rank) == rank
    assert len({r for r in by_pid.values()}) == 8


def test_a_window_on_the_merged_clock_is_each_hosts_part_of_it(dlrm) -> None:
    c, hosts = dlrm
    whole = body_json(get(c, "stats", run="dlrm", hosts="*", level=2))
    lo, hi = whole["trace_us"]
    a, b = lo + (hi - lo) * 0.4, lo + (hi - lo) * 0.5
    part = body_json(get(c, "trace", run="dlrm", hosts=f"{hosts[1]},{hosts[5]}", level=2, start_us=a, end_us=b, gz=True))
    tb = part["tb_reduce"]
    assert [h["host"] for h in tb["hosts"]] == [hosts[1], hosts[5]] and tb["window_us"] == [a, b]
    for entry in tb["hosts"]:
        local = [a - entry["offset_us"], b - entry["offset_us"]]
        assert entry["window_us"] == pytest.approx(local)
    slices = [e for e in part["traceEvents"] if e.get("ph") == "X"]
    assert slices and all(e["ts"] <= b and e["ts"] + e.get("dur", 0) >= a for e in slices)
    assert {_rank_of(e["pid"], hosts) for e in slices} == {1, 5}


def test_a_merged_view_is_cached_and_named_by_its_hosts_files(dlrm) -> None:
    c, hosts = dlrm
    first = get(c, "trace", run="dlrm", hosts="*", level=3, gz=True)
    again = get(c, "trace", run="dlrm", hosts="*", level=3, gz=True)
    assert first.get_data() == again.get_data()
    assert body_json(again)["tb_reduce"]["output"]["events"] > 0
    tag = first.headers["ETag"]
    assert get(c, "trace", run="dlrm", hosts="*", level=3, headers={"If-None-Match": tag}).status_code == 304
    assert get(c, "trace", run="dlrm", hosts=",".join(hosts[:2]), level=3).headers["ETag"] != tag


def test_a_host_that_cannot_be_read_is_reported_while_the_others_are_served(tmp_path: Path) -> None:
    if len(RANKS) != 8:
        pytest.skip("the corpus's DLRM ranks are not here")
    logdir = tmp_path / "logs"
    (logdir / "job").mkdir(parents=True)
    shutil.copy(RANKS[0], logdir / "job" / "rank0.pt.trace.json")
    (logdir / "job" / "rank1.pt.trace.json.gz").write_bytes(gzip.compress(RANKS[1].read_bytes())[:5000])
    c = client(make_plugin(logdir, tmp_path / "cache"))
    doc = body_json(get(c, "trace", run="job", hosts="*", level=2, gz=True))
    h0, h1 = doc["tb_reduce"]["hosts"]
    assert "error" not in h0 and h0["events"] > 100
    assert h1["host"] == "rank1" and "truncated" in h1["error"].lower() or "gzip" in h1["error"].lower()
    assert all(_rank_of(e["pid"], ["rank0", "rank1"]) == 0 for e in doc["traceEvents"])


def test_hosts_without_a_known_start_are_lined_up_and_the_view_says_so(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    (logdir / "two").mkdir(parents=True)
    for name, t0 in (("a", 100.0), ("b", 7.0)):
        evs = [{"ph": "X", "name": f"step{i}", "pid": 1, "tid": 1, "ts": t0 + 10 * i, "dur": 5} for i in range(20)]
        (logdir / "two" / f"{name}.trace.json").write_text(json.dumps({"traceEvents": evs}))
    c = client(make_plugin(logdir, tmp_path / "cache"))
    doc = body_json(get(c, "trace", run="two", hosts="*", level=0, gz=True))
    tb = doc["tb_reduce"]
    assert not tb["alignment"]["absolute"] and tb["alignment"]["epoch_ns"] is None
    assert "lined up" in tb["alignment"]["note"]
    for rank in (0, 1):
        ts = sorted(e["ts"] for e in doc["traceEvents"] if e.get("ph") == "X" and e["pid"] // PID_STRIDE == rank)
        assert ts == [10.0 * i for i in range(20)]
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert names == {"a · pid 1", "b · pid 1"}


def test_bad_host_lists_get_one_line_answers(dlrm) -> None:
    c, hosts = dlrm
    assert "nope" in assert_json_error(get(c, "trace", run="dlrm", hosts="nope", level=2), 404)
    assert "../../etc/passwd" in assert_json_error(get(c, "trace", run="dlrm", hosts="../../etc/passwd"), 404)
    assert_json_error(get(c, "trace", run="dlrm", hosts=",,,", level=2), 400)
    assert_json_error(get(c, "trace", run="dlrm", host=hosts[0], hosts="*"), 400)
    assert_json_error(get(c, "trace", run="dlrm", hosts="a\x00b"), 400)
    assert_json_error(get(c, "stats", run="nope", hosts="*"), 404)


def test_all_hosts_leaves_out_a_jax_export_of_a_listed_xspace_even_a_whole_one(tmp_path: Path) -> None:
    """JAX writes `<host>.trace.json.gz` beside `<host>.xplane.pb`: the same run twice. A `*`
    view merges the XSpace alone, whether the export is capped or holds every event."""
    corpus = TESTS.parent.parent / "shared" / "corpus" / "generated" / "jax_cpu_mlp_small"
    if not corpus.is_dir():
        pytest.skip("../shared/corpus is absent (CI has it)")
    run = tmp_path / "logs" / "jax"
    run.mkdir(parents=True)
    for name in ("vm.xplane.pb", "vm.trace.json.gz"):
        shutil.copyfile(corpus / name, run / name)
    c = client(make_plugin(tmp_path / "logs", tmp_path / "cache"))
    [entry] = body_json(get(c, "runs"))
    export = next(h for h in entry["hosts"] if h["format"] != "xspace")
    assert "export" in export and "capped" not in export  # a whole export, listed as the XSpace's
    merged = body_json(get(c, "stats", run="jax", hosts="*", level=2))
    alone = body_json(get(c, "stats", run="jax", host=next(h["host"] for h in entry["hosts"] if h["format"] == "xspace"),
                          level=2))
    assert merged["input"]["events"] == alone["input"]["events"]  # the XSpace's events once, not twice
