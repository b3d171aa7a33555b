"""The waveform routes of a real TensorBoard, attacked: event files that are garbage, that
claim giant records, that are not files at all, and a storm of requests. The server stays
up, answers with clear statuses, reads the good records, and its peak RSS (`VmHWM`) stays
within `--tb_reduce_memory_mb` of where it started (with the margin the other hostile
suite explains). Never a timing assertion."""

from __future__ import annotations

import collections
import json
import os
import struct
import threading
from pathlib import Path
from typing import Iterator

import pytest
from plugin_support import TORCH_FILE, require_corpus, torch_trace_gz
from tensorboard_process import TensorBoard, start_tensorboard

from tb_reduce_plugin.waveforms.eventfile import masked_crc32c
from tb_reduce_plugin.waveforms.scalars import tag_id

ROUTE = "data/plugin/tb_reduce/"
BUDGET_MB = 64
MARGIN_MB = 160
RUN, HOST = "torch", TORCH_FILE.split(".pt.")[0]
GOOD_POINTS = 100_000


def _record(payload: bytes) -> bytes:
    head = struct.pack("<Q", len(payload))
    return head + struct.pack("<I", masked_crc32c(head)) + payload + struct.pack("<I", masked_crc32c(payload))


def _good_events(path: Path, n: int) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2

    with open(path, "wb") as f:
        for step in range(n):
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="loss", simple_value=step / n)])
            f.write(_record(event_pb2.Event(step=step, wall_time=1.0 + step, summary=summary).SerializeToString()))


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_corpus()
    root = tmp_path_factory.mktemp("wavehostile")
    d = root / "logdir" / RUN
    d.mkdir(parents=True)
    (d / TORCH_FILE).write_bytes(torch_trace_gz())
    _good_events(d / "events.out.tfevents.1.good", GOOD_POINTS)
    (d / "events.out.tfevents.2.garbage").write_bytes(os.urandom(20 << 20))
    # A header that checks out, claiming a 48 MB record: more than the reader may hold for a 64 MB budget.
    head = struct.pack("<Q", 48 << 20)
    (d / "events.out.tfevents.3.giant").write_bytes(head + struct.pack("<I", masked_crc32c(head))
                                                      + b"\0" * (49 << 20))
    os.mkfifo(d / "events.out.tfevents.4.fifo")  # never opened: it is not a regular file
    os.symlink("/dev/zero", d / "events.out.tfevents.5.zero")
    outside = root / "outside.tfevents"
    _good_events(outside, 10)
    os.symlink(outside, d / "events.out.tfevents.6.outside")
    return root / "logdir"


@pytest.fixture
def server(logdir: Path, tmp_path: Path) -> Iterator[TensorBoard]:
    # a logdir untrusted jobs write into: links out of it are not followed
    tb = start_tensorboard(logdir, tmp_path / "cache", "--load_fast=false", "--tb_reduce_memory_mb", str(BUDGET_MB),
                           "--tb_reduce_follow_symlinks=false", cgroup_mb=4096)
    yield tb
    tb.stop()


def test_hostile_event_files_are_skipped_as_gaps_and_the_good_one_is_read(server: TensorBoard) -> None:
    idle = server.peak_mb()
    tags = server.json(ROUTE + "tags", run=RUN)
    assert tags["scalars"] == [{"tag": "loss", "id": tag_id("loss"), "points": GOOD_POINTS}]
    gaps = collections.defaultdict(int)
    for g in tags["gaps"]:
        gaps[g["file"]] += g["skipped"]
        assert "/" not in g["file"]
    assert set(gaps) == {"events.out.tfevents.2.garbage", "events.out.tfevents.3.giant"}, gaps
    assert gaps["events.out.tfevents.2.garbage"] >= (20 << 20) - 16
    doc = server.json(ROUTE + "scalars", run=RUN, tag="loss")
    assert len(doc["points"]) == GOOD_POINTS and doc["points"][-1][0] == GOOD_POINTS - 1
    assert server.alive(), server.tail()
    assert server.peak_mb() <= idle + BUDGET_MB + MARGIN_MB, (server.peak_mb(), idle)
    assert "Traceback" not in server.tail()


def test_a_storm_of_waveform_requests_gets_answers_or_busy_and_the_server_stays_up(server: TensorBoard) -> None:
    idle = server.peak_mb()
    statuses: collections.Counter = collections.Counter()
    lock = threading.Lock()

    def ask(k: int) -> None:
        route, params = [("tags", {"run": RUN}), ("scalars", {"run": RUN, "tag": "loss"}),
                         ("waveforms", {"run": RUN, "host": HOST}), ("scalars", {"run": RUN, "tag": "../x"})][k % 4]
        got, _, body = server.get(ROUTE + route, **params)
        with lock:
            statuses[(route, params.get("tag"), got)] += 1
        if got not in (200, 503):
            assert set(json.loads(body)) == {"error"}

    threads = [threading.Thread(target=ask, args=(k,)) for k in range(60)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert server.alive(), server.tail()
    codes = {code for (_, tag, code) in statuses if tag != "../x"}
    assert codes <= {200, 503} and 200 in codes, statuses
    assert {code for (_, tag, code) in statuses if tag == "../x"} <= {404, 503}, statuses
    assert server.peak_mb() <= idle + BUDGET_MB + MARGIN_MB, (server.peak_mb(), idle)
    assert "Traceback" not in server.tail()
