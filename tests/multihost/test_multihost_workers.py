"""The per-host work of a merged view on worker processes and on a Dask cluster: the
same bytes as the server makes itself, a worker killed mid-task retried, a host whose
worker keeps dying reported while the others are served."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tb_reduce_plugin.multihost import executor, views
from tests.multihost_support import always_die, arm_kill, reduce_or_die_once, write_many_hosts
from tests.plugin_support import assert_json_error, body_json, client, get, make_plugin

HOSTS = 6


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "logs" / "job"
    write_many_hosts(d, HOSTS)
    return d


def _bytes(resp) -> bytes:
    assert resp.status_code == 200, resp.get_data()[:300]
    data = resp.get_data()
    return gzip.decompress(data) if resp.headers.get("Content-Encoding") == "gzip" else data


def _views(plugin) -> dict:
    """The merged whole view and a window of it, and every host's own view, as bytes."""
    c = client(plugin)
    whole = get(c, "trace", run="job", hosts="*", level=2)
    assert whole.status_code == 200, whole.get_data()[:300]
    tb = body_json(whole)["tb_reduce"]
    lo, hi = tb["trace_us"]
    window = get(c, "trace", run="job", hosts="*", level=3, start_us=lo + 0.3 * (hi - lo), end_us=lo + 0.6 * (hi - lo))
    out = {"whole": _bytes(whole), "window": _bytes(window)}
    for h in tb["hosts"]:
        out[h["host"]] = _bytes(get(c, "trace", run="job", host=h["host"], level=2, resolution=tb["resolution"]))
    return out


def _stats(plugin, **params) -> dict:
    return body_json(get(client(plugin), "stats", run="job", hosts="*", level=2, **params))


def test_worker_processes_give_the_bytes_the_server_makes_itself(run_dir: Path, tmp_path: Path) -> None:
    here = make_plugin(run_dir.parent, tmp_path / "c0", "--tb_reduce_workers=local:0")
    pool = make_plugin(run_dir.parent, tmp_path / "c1", "--tb_reduce_workers=local:2")
    assert pool.service.merged.executor is not None and here.service.merged.executor is None
    a, b = _views(here), _views(pool)
    assert a.keys() == b.keys() and len(a) == HOSTS + 2
    for key in a:
        assert a[key] == b[key], key
    assert _stats(pool)["workers"] == "local:2" and _stats(here)["workers"] == "in the server"
    # the workers' reductions landed in the server's cache: each host's own view was a hit
    assert body_json(get(client(pool), "stats", run="job", host="rank0003", level=2,
                         resolution=_stats(pool)["resolution"]))["cached"]
    pool.service.merged.executor.close()


def test_a_worker_killed_mid_task_is_replaced_and_its_task_run_again(run_dir: Path, tmp_path: Path,
                                                                       monkeypatch) -> None:
    here = make_plugin(run_dir.parent, tmp_path / "c0", "--tb_reduce_workers=local:0")
    expected = _bytes(get(client(here), "trace", run="job", hosts="*", level=2))
    monkeypatch.setattr(views, "reduce_host_task", reduce_or_die_once)
    armed = arm_kill(run_dir)
    pool = make_plugin(run_dir.parent, tmp_path / "c1", "--tb_reduce_workers=local:2")
    got = get(client(pool), "trace", run="job", hosts="*", level=2)
    assert not armed.exists()  # a worker took the marker and died
    assert pool.service.merged.executor.restarts >= 1
    assert _bytes(got) == expected
    pool.service.merged.executor.close()


def test_a_host_whose_worker_dies_every_time_is_reported_and_the_others_served(run_dir: Path, tmp_path: Path,
                                                                                 monkeypatch) -> None:
    (run_dir / "rank0002.pt.trace.json.gz").rename(run_dir / "doomed.pt.trace.json.gz")
    monkeypatch.setattr(views, "reduce_host_task", always_die)
    pool = make_plugin(run_dir.parent, tmp_path / "c1", "--tb_reduce_workers=local:2")
    doc = body_json(get(client(pool), "trace", run="job", hosts="*", level=2))
    entries = {h["host"]: h for h in doc["tb_reduce"]["hosts"]}
    assert "died twice" in entries["doomed"]["error"]
    assert all("error" not in h and h["events"] > 0 for name, h in entries.items() if name != "doomed")
    pool.service.merged.executor.close()


def test_a_dask_cluster_gives_the_bytes_of_the_local_pool_even_when_a_worker_is_killed(
        run_dir: Path, tmp_path: Path, monkeypatch) -> None:
    distributed = pytest.importorskip("distributed")
    pool = make_plugin(run_dir.parent, tmp_path / "c1", "--tb_reduce_workers=local:2")
    expected = _views(pool)
    pool.service.merged.executor.close()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  host="127.0.0.1") as cluster:
        dask = make_plugin(run_dir.parent, tmp_path / "c2", f"--tb_reduce_workers={cluster.scheduler_address}")
        assert _views(dask) == expected
        assert _stats(dask)["workers"] == cluster.scheduler_address
        # a worker killed while it reduces a host: the scheduler runs the task on another worker
        monkeypatch.setattr(views, "reduce_host_task", reduce_or_die_once)
        armed = arm_kill(run_dir)
        again = make_plugin(run_dir.parent, tmp_path / "c3", f"--tb_reduce_workers={cluster.scheduler_address}")
        assert _views(again) == expected
        assert not armed.exists()
        again.service.merged.executor.close()
        dask.service.merged.executor.close()


def test_an_unreachable_cluster_is_a_clear_503_and_single_hosts_are_still_served(run_dir: Path,
                                                                                  tmp_path: Path) -> None:
    plugin = make_plugin(run_dir.parent, tmp_path / "c", "--tb_reduce_workers=tcp://127.0.0.1:9")
    c = client(plugin)
    if pytest.importorskip("distributed"):
        msg = assert_json_error(get(c, "trace", run="job", hosts="*", level=2), 503)
        assert "127.0.0.1:9" in msg
    assert get(c, "trace", run="job", host="rank0001", level=2).status_code == 200
    assert get(c, "trace", run="job", hosts="rank0001", level=2).status_code == 200  # one host stays here


def test_nonsense_worker_flags_are_refused_by_name() -> None:
    for bad in ("local:-1", "local:x", "ray://head:10001", "", "local:99999"):
        with pytest.raises(executor.BadWorkers):
            executor.check_workers(bad)
    for good in ("local", "local:0", "local:3", "inline", "tcp://10.0.0.1:8786"):
        executor.check_workers(good)


def _buckets(spans, t0: float, t1: float, theta: float) -> set:
    """The buckets the closed intervals touch inside the window [t0, t1] of width-theta buckets."""
    out: set = set()
    last = int((t1 - t0) // theta)
    for a, b in spans:
        if b >= t0 and a <= t1:
            out.update(range(int((max(a, t0) - t0) // theta), min(int((min(b, t1) - t0) // theta), last) + 1))
    return out


def test_more_hosts_than_the_lane_threshold_come_as_busy_lanes_that_keep_every_hosts_busy_buckets(
        tmp_path: Path) -> None:
    n = 200
    d = tmp_path / "logs" / "big"
    paths = write_many_hosts(d, n, steps=4, ops=2)
    plugin = make_plugin(d.parent, tmp_path / "c", "--tb_reduce_workers=local:2")
    c = client(plugin)
    doc = body_json(get(c, "trace", run="big", hosts="*", level=2))
    tb = doc["tb_reduce"]
    assert tb["lanes"]["lanes"] == n and len(tb["hosts"]) == n and all(h["lane"] for h in tb["hosts"])
    lanes: dict = {}
    for e in doc["traceEvents"]:
        if e.get("cat") == "tb_reduce.lane":
            lanes.setdefault(e["pid"] >> 32, []).append(e)
    assert sorted(lanes) == list(range(n))
    for k in (0, 3, 117, n - 1):
        entry = tb["hosts"][k]
        t0, t1 = entry["window_us"]
        theta = entry["bucket_us"]
        evs = json.loads(gzip.decompress(paths[k].read_bytes()))["traceEvents"]
        want = _buckets(((e["ts"], e["ts"] + e["dur"]) for e in evs if e["ph"] == "X"), t0, t1, theta)
        off = entry["offset_us"]
        got = _buckets(((e["ts"] - off, e["ts"] - off + e["dur"]) for e in lanes[k]), t0, t1, theta)
        assert got == want, k
        assert sum(e["args"]["count"] for e in lanes[k]) == sum(1 for e in evs if e["ph"] == "X")
    # a click expands a host: its own tracks, the others stay lanes
    one = body_json(get(c, "trace", run="big", hosts="*", level=2, expand="rank0117"))
    assert [h["host"] for h in one["tb_reduce"]["hosts"] if not h.get("lane")] == ["rank0117"]
    mine = [e for e in one["traceEvents"] if e.get("ph") == "X" and e["pid"] >> 32 == 117]
    assert {e["name"] for e in mine} >= {"ProfilerStep#0", "aten::op0", "kernel1"}
    assert_json_error(get(c, "trace", run="big", hosts="*", level=2, expand="nope"), 400)
    assert_json_error(get(c, "trace", run="big", host="rank0001", level=2, expand="rank0001"), 400)
    plugin.service.merged.executor.close()


def test_a_whole_run_is_one_round_of_tasks_and_a_window_asks_clocks_only_once(run_dir: Path, tmp_path: Path) -> None:
    def recorded(plugin) -> list:
        ex = plugin.service.merged.executor
        asked: list = []
        run = ex.run

        def spy(fn, args, *rest, **kw):
            asked.append((fn.__name__, len(args)))
            return run(fn, args, *rest, **kw)

        ex.run = spy
        return asked

    first = make_plugin(run_dir.parent, tmp_path / "c1", "--tb_reduce_workers=local:2")
    asked = recorded(first)
    tb = _stats(first)
    assert asked == [("reduce_host_task", HOSTS)]  # each worker sent its host's clock with its reduction
    lo, hi = tb["trace_us"]
    assert get(client(first), "stats", run="job", hosts="*", level=3, start_us=lo, end_us=(lo + hi) / 2).status_code == 200
    assert asked[1:] == [("reduce_host_task", HOSTS)]  # the clocks were known: no clock round
    first.service.merged.executor.close()
    # a server whose first view is a window asks the clocks first, then reduces
    second = make_plugin(run_dir.parent, tmp_path / "c2", "--tb_reduce_workers=local:2")
    asked = recorded(second)
    assert get(client(second), "stats", run="job", hosts="*", level=3, start_us=lo, end_us=(lo + hi) / 2).status_code == 200
    assert asked == [("host_clock_task", HOSTS), ("reduce_host_task", HOSTS)]
    second.service.merged.executor.close()
