"""Workers that fail the way real ones do, and what a merged view answers then (issue 24,
items 6 and 7): a Dask worker killed mid-request and restarted by its nanny, a
"scheduler" that accepts connections and never answers, a refused address, and local
workers dying while a view is made. Every request ends, within a bound, with the view
or a 503 that names the cluster; an answer with hosts lost to a failure of the moment
is never cached as if it were the view."""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from tb_reduce_plugin.multihost import executor, tasks, views
from tests.multihost_support import write_many_hosts
from tests.plugin_support import assert_json_error, body_json, client, get, make_plugin

HOSTS = 6
HANG_GUARD_S = 60.0  # a request that has not ended by then is taken to hang
WAIT_ARMED = ".wait-to-be-killed"  # dot files are not listed by discovery
WORKER_PID = ".worker-pid"
DIE_ARMED = ".die-armed"


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "logs" / "job"
    write_many_hosts(d, HOSTS)
    return d


# ---- task functions the workers import by name --------------------------------------------

def reduce_or_wait_to_be_killed(task: tasks.HostTask) -> tasks.HostResult:
    """`reduce_host_task`, but the first task on a folder armed with `WAIT_ARMED` writes its
    worker's pid next to it and waits there, mid-task, for the test to kill that process."""
    folder = os.path.dirname(task.path)
    try:
        os.unlink(os.path.join(folder, WAIT_ARMED))
    except FileNotFoundError:
        return tasks.reduce_host_task(task)
    tmp = os.path.join(folder, WORKER_PID + ".tmp")
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    os.replace(tmp, os.path.join(folder, WORKER_PID))
    time.sleep(120)  # killed long before
    return tasks.reduce_host_task(task)


def die_on_even_ranks_while_armed(task: tasks.HostTask) -> tasks.HostResult:
    """Kills its own worker on the even ranks while the folder holds `DIE_ARMED` (workers
    being killed while a view is made); reduces as usual once it is gone."""
    folder, name = os.path.split(task.path)
    if os.path.exists(os.path.join(folder, DIE_ARMED)) and int(name[4:8]) % 2 == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    return tasks.reduce_host_task(task)


# ---- helpers ---------------------------------------------------------------------------------

def _in_thread(fn: Callable[[], Any]) -> Callable[[float], Any]:
    """Starts `fn` in a thread; the returned function waits at most `s` seconds for its value."""
    box: dict = {}

    def go() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the waiting test
            box["error"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()

    def wait(s: float) -> Any:
        t.join(s)
        assert not t.is_alive(), f"no answer within {s:.0f} s"
        if "error" in box:
            raise box["error"]
        return box["value"]

    return wait


def _merged(plugin: Any, **params: Any) -> Any:
    return get(client(plugin), "trace", **{"run": "job", "hosts": "*", "level": 2, **params})


def _hosts(resp: Any) -> dict:
    assert resp.status_code == 200, resp.get_data()[:300]
    data = resp.get_data()
    if resp.headers.get("Content-Encoding") == "gzip":
        data = gzip.decompress(data)
    return {h["host"]: h for h in json.loads(data)["tb_reduce"]["hosts"]}


def _wait_for_file(path: Path, s: float) -> str:
    deadline = time.monotonic() + s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} did not appear within {s:.0f} s"
        time.sleep(0.05)
    return path.read_text()


class _SilentScheduler:
    """A TCP server that accepts every connection and never says a word."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.address = f"tcp://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for c in self.held:
            c.close()


def _refused_address() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"tcp://127.0.0.1:{port}"


# ---- item 6: Dask --------------------------------------------------------------------------

def test_a_dask_worker_killed_mid_request_is_followed_to_its_restart_and_the_view_is_served(
        run_dir: Path, tmp_path: Path, monkeypatch) -> None:
    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr(views, "reduce_host_task", reduce_or_wait_to_be_killed)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                  host="127.0.0.1") as cluster:
        plugin = make_plugin(run_dir.parent, tmp_path / "c", f"--tb_reduce_workers={cluster.scheduler_address}")
        (run_dir / WAIT_ARMED).write_text("the next task here waits to be killed\n")
        answer = _in_thread(lambda: _merged(plugin))
        pid = int(_wait_for_file(run_dir / WORKER_PID, 30))
        os.kill(pid, signal.SIGKILL)  # the nanny starts a new worker, at a new address
        hosts = _hosts(answer(HANG_GUARD_S))
        assert len(hosts) == HOSTS and all("error" not in h and h["events"] > 0 for h in hosts.values()), hosts
        # and the run's later views are not stuck behind the dead worker either
        window = _in_thread(lambda: _merged(plugin, level=3, resolution=500))
        assert all("error" not in h for h in _hosts(window(HANG_GUARD_S)).values())
        plugin.service.merged.executor.close()


def test_a_scheduler_that_accepts_and_never_answers_gets_a_503_naming_it_not_a_hang(
        run_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    silent = _SilentScheduler()
    try:
        plugin = make_plugin(run_dir.parent, tmp_path / "c", f"--tb_reduce_workers={silent.address}")
        for _ in range(2):  # the first meets the silence, the next is told at once
            msg = assert_json_error(_in_thread(lambda: _merged(plugin))(HANG_GUARD_S), 503)
            assert silent.address in msg
        assert get(client(plugin), "trace", run="job", host="rank0001", level=2).status_code == 200
    finally:
        silent.close()


def test_concurrent_views_of_a_refused_scheduler_share_one_attempt_to_reach_it(
        run_dir: Path, tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("distributed")
    address = _refused_address()
    attempts: list[str] = []
    reach = executor._reach

    def counted(addr: str, timeout_s: float) -> Any:
        attempts.append(addr)
        return reach(addr, timeout_s)

    plugin = make_plugin(run_dir.parent, tmp_path / "c", f"--tb_reduce_workers={address}")
    start = threading.Barrier(6)

    def one(k: int) -> Any:
        start.wait()
        return _merged(plugin, resolution=100 + k)  # six distinct views: no computation shared

    monkeypatch.setattr(executor, "_reach", counted)
    waits = [_in_thread(lambda k=k: one(k)) for k in range(6)]
    # Serialised, six tries of the connect timeout took 10, 20 ... 60 s; shared, one.
    deadline = time.monotonic() + 30
    answers = [w(max(0.1, deadline - time.monotonic())) for w in waits]
    for resp in answers:
        assert address in assert_json_error(resp, 503)
    assert attempts == [address]  # one try for all six; the next asks are told what it found
    assert address in assert_json_error(_merged(plugin), 503) and attempts == [address]


# ---- item 7: what is cached ----------------------------------------------------------------

def _stats(plugin: Any) -> dict:
    return body_json(get(client(plugin), "stats", run="job", hosts="*", level=2))


def test_a_merged_view_with_hosts_lost_to_dying_workers_is_not_cached_and_is_made_whole_next_time(
        run_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(views, "reduce_host_task", die_on_even_ranks_while_armed)
    (run_dir / DIE_ARMED).write_text("workers die on the even ranks\n")
    plugin = make_plugin(run_dir.parent, tmp_path / "c", "--tb_reduce_workers=local:2")
    first = _stats(plugin)
    lost = [h["host"] for h in first["hosts"] if "died twice" in h.get("error", "")]
    assert lost == ["rank0000", "rank0002", "rank0004"] and not first["cached"]
    (run_dir / DIE_ARMED).unlink()  # the workers recover
    again = _stats(plugin)
    assert not again["cached"] and all("error" not in h for h in again["hosts"]), again["hosts"]
    assert _stats(plugin)["cached"]  # the whole answer is kept
    plugin.service.merged.executor.close()
    restarted = make_plugin(run_dir.parent, tmp_path / "c", "--tb_reduce_workers=local:2")
    after = _stats(restarted)
    assert after["cached"] and all("error" not in h for h in after["hosts"])
    restarted.service.merged.executor.close()


def test_a_browser_holding_a_view_with_hosts_lost_to_dying_workers_is_not_told_it_is_current(
        run_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(views, "reduce_host_task", die_on_even_ranks_while_armed)
    (run_dir / DIE_ARMED).write_text("workers die on the even ranks\n")
    plugin = make_plugin(run_dir.parent, tmp_path / "c", "--tb_reduce_workers=local:2")
    first = _merged(plugin)
    assert sum("error" in h for h in _hosts(first).values()) == 3
    (run_dir / DIE_ARMED).unlink()
    again = get(client(plugin), "trace", run="job", hosts="*", level=2,
                headers={"If-None-Match": first.headers["ETag"]})
    assert again.status_code == 200 and all("error" not in h for h in _hosts(again).values())
    assert again.headers["ETag"] != first.headers["ETag"]
    plugin.service.merged.executor.close()


def test_a_merged_view_whose_host_has_a_bad_file_is_still_cached(run_dir: Path, tmp_path: Path) -> None:
    (run_dir / "rank0003.pt.trace.json.gz").write_bytes(gzip.compress(b"this is no trace at all"))
    plugin = make_plugin(run_dir.parent, tmp_path / "c", "--tb_reduce_workers=local:2")
    first = _stats(plugin)
    bad = {h["host"]: h for h in first["hosts"]}["rank0003"]
    assert "error" in bad and not first["cached"]
    second = _stats(plugin)
    assert second["cached"] and {h["host"]: h for h in second["hosts"]}["rank0003"]["error"] == bad["error"]
    plugin.service.merged.executor.close()
