"""A real TensorBoard serving a merged view of a run whose hosts include hostile files,
under a storm of distinct merged windows: the bombs are reported per host with their
reason while the real hosts are served, every answer is a clear status, the server and
its worker processes stay within what `--tb_reduce_memory_mb` promises (with the margin
the single-host hostile suite allows), and the run list keeps answering."""

from __future__ import annotations

import collections
import gzip
import json
import threading
from pathlib import Path
from typing import Iterator

import hostile_files as hf
import pytest
from multihost_support import write_many_hosts
from tensorboard_process import TensorBoard, start_tensorboard, storm

ROUTE = "data/plugin/tb_reduce/"
BUDGET_MB = 128
MARGIN_MB = 160  # as tests/serve/test_hostile_server.py: Python, numpy and TensorBoard around the budget
HOSTS = 40


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("multihost-hostile") / "logdir"
    run = root / "job"
    write_many_hosts(run, HOSTS, steps=8, ops=6)
    hf.identical_events_gz(run / "bomb-inflates.json.gz", 3_000_000)  # ~300x: refused as an inflation bomb
    hf.xspace_events_bomb(run / "bomb-events.xplane.pb", 6_000_000)  # 6 M empty events: over the budget
    real = gzip.decompress((run / "rank0001.pt.trace.json.gz").read_bytes())
    (run / "cut.pt.trace.json.gz").write_bytes(gzip.compress(real)[: 300])  # a truncated gzip
    return root


@pytest.fixture
def server(logdir: Path, tmp_path: Path) -> Iterator[TensorBoard]:
    tb = start_tensorboard(logdir, tmp_path / "cache", "--load_fast=false", "--tb_reduce_memory_mb", str(BUDGET_MB),
                           "--tb_reduce_max_input_mb", "32", "--tb_reduce_workers", "local:2", cgroup_mb=4096)
    yield tb
    tb.stop()


def _doc(body: bytes) -> dict:
    return json.loads(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)


def _workers_peak_mb(tb: TensorBoard) -> list[float]:
    """Peak RSS of the server's worker processes (children of its fork server)."""
    out = []
    for child in tb.children():
        for pid in [child, *_children(child)]:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            if "tb_reduce" not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace") \
                    and "forkserver" not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                continue
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    out.append(int(line.split()[1]) / 1024)
    return out


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def test_hostile_hosts_are_reported_while_the_others_are_served_within_the_budget(server: TensorBoard) -> None:
    idle = server.peak_mb()
    got, _, body = server.get(ROUTE + "trace", gz=True, run="job", hosts="*", level=2)
    assert got == 200, (got, body[:300], server.tail())
    hosts = {h["host"]: h for h in _doc(body)["tb_reduce"]["hosts"]}
    assert len(hosts) == HOSTS + 3
    assert "inflates" in hosts["bomb-inflates"]["error"]
    assert "--tb_reduce_memory_mb" in hosts["bomb-events"]["error"] or "memory" in hosts["bomb-events"]["error"]
    assert "cut" in hosts["cut"]["error"] or "gzip" in hosts["cut"]["error"].lower()
    assert all("error" not in h and h["events"] > 0 for name, h in hosts.items() if name.startswith("rank"))
    assert server.alive() and "Traceback" not in server.tail()
    assert server.peak_mb() <= idle + BUDGET_MB + MARGIN_MB, (server.peak_mb(), idle)
    # each worker holds at most its share of the budget (half of it, for two), plus the same margin
    workers = _workers_peak_mb(server)
    assert workers and all(mb <= BUDGET_MB / 2 + MARGIN_MB for mb in workers), workers


def test_hostile_host_lists_get_one_line_answers(server: TensorBoard) -> None:
    for params, status in (({"hosts": "../../etc/passwd"}, 404), ({"hosts": "/etc/passwd"}, 404),
                           ({"hosts": "rank0001,%2e%2e"}, 404), ({"hosts": ","}, 400),
                           ({"hosts": "*", "expand": "../x"}, 400), ({"hosts": "*", "host": "rank0001"}, 400),
                           ({"hosts": "*", "level": "9"}, 400), ({"hosts": "a" * 5000}, 400)):
        got, _, body = server.get(ROUTE + "trace", gz=True, run="job", **params)
        assert got == status, (params, got, body[:200])
        if status != 200:
            doc = _doc(body)
            assert set(doc) == {"error"} and "\n" not in doc["error"] and "Traceback" not in doc["error"]
    assert server.alive()


def test_a_storm_of_merged_windows_gets_clear_answers_and_the_run_list_keeps_answering(server: TensorBoard) -> None:
    stats = server.json(ROUTE + "stats", run="job", hosts="*", level=2)
    t0, t1 = stats["trace_us"]
    idle = server.peak_mb()
    statuses: collections.Counter = collections.Counter()
    lock = threading.Lock()

    def ask(k: int) -> None:
        a = t0 + (t1 - t0) * (k % 37) / 40
        b = a + (t1 - t0) * (1 + k % 7) / 50
        hosts = "*" if k % 3 else ",".join(f"rank{r:04d}" for r in range(k % 5, HOSTS, 4))
        got, _, body = server.get(ROUTE + "trace", gz=True, run="job", hosts=hosts, level=1 + k % 4,
                                  start_us=a, end_us=b)
        with lock:
            statuses[got] += 1
        if got != 200:
            assert got == 503 and "error" in _doc(body), (got, body[:200])

    runs_s = storm(server, ask, 40, ROUTE + "runs")
    assert server.alive(), server.tail()
    assert set(statuses) <= {200, 503} and statuses[200] >= 2, statuses
    assert server.peak_mb() <= idle + BUDGET_MB + MARGIN_MB, (server.peak_mb(), idle)
    assert runs_s and max(runs_s) < 10, max(runs_s)  # a hang detector, not a speed measurement
    assert "Traceback" not in server.tail()
