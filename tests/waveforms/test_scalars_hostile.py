"""The `tags` and `scalars` routes of a real TensorBoard, on event files an unlucky or hostile
job wrote: a NaN or infinite `wall_time`, a 100,000-character tag (more than a URL can
carry), a series long enough that the panel must not get every point. Every answer is
strict JSON; the dashboard's way of asking (by tag id, at its width) always works."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard_process import TensorBoard, start_tensorboard

ROUTE = "data/plugin/tb_reduce/"
RUN = "run"
LONG_TAG = "t" * 100_000
LONG_N = 20_000
SPIKE_AT = 12_345


def _refuse(name: str) -> None:
    raise AssertionError(f"non-standard JSON constant {name}")


def strict(data: bytes):
    """JSON as a browser's `JSON.parse` takes it: NaN and Infinity literals are refused."""
    return json.loads(data, parse_constant=_refuse)


def write_events(folder: Path, events: list[tuple[int, float, str, float]], suffix: str) -> None:
    """(step, wall_time, tag, value) events, written by TensorBoard's own writer."""
    w = EventFileWriter(str(folder), filename_suffix=suffix)
    for step, wall, tag, value in events:
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
        w.add_event(event_pb2.Event(step=step, wall_time=wall, summary=summary))
    w.close()


def tiny_trace() -> str:
    """A Chrome trace: a run is a folder with a trace; its event files are its scalars."""
    return json.dumps({"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 10, "name": "step"}]})


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scalarshostile") / "logdir"
    run = root / RUN
    run.mkdir(parents=True)
    (run / "host.pt.trace.json").write_text(tiny_trace())
    write_events(run, [(0, math.nan, "odd/wall", 1.0), (1, math.inf, "odd/wall", math.nan),
                       (2, -math.inf, "odd/wall", -math.inf), (3, 1_700_000_000.5, "odd/wall", 2.5)], ".odd")
    write_events(run, [(0, 1.0, LONG_TAG, 0.5), (1, 2.0, LONG_TAG, 0.25)], ".longtag")
    values = np.sin(np.arange(LONG_N) / 300.0)
    values[SPIKE_AT] = 50.0
    values[100] = math.nan
    write_events(run, [(s, 1_700_000_000.0 + s, "long/series", float(v)) for s, v in enumerate(values)], ".long")
    return root


@pytest.fixture(scope="module")
def server(logdir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TensorBoard]:
    tb = start_tensorboard(logdir, tmp_path_factory.mktemp("cache"), "--load_fast=false")
    yield tb
    tb.stop()


def scalars(server: TensorBoard, **params) -> tuple[int, dict]:
    status, _, data = server.get(ROUTE + "scalars", run=RUN, **params)
    return status, strict(data)


def tag_ids(server: TensorBoard) -> dict[str, str]:
    status, _, data = server.get(ROUTE + "tags", run=RUN)
    assert status == 200, data[:300]
    return {s["tag"]: s["id"] for s in strict(data)["scalars"]}


def test_a_nan_or_infinite_wall_time_is_answered_as_strict_json_like_a_value(server: TensorBoard) -> None:
    status, doc = scalars(server, tag="odd/wall")
    assert status == 200, doc
    assert doc["points"] == [[0, "NaN", 1.0], [1, "Infinity", "NaN"], [2, "-Infinity", "-Infinity"],
                             [3, 1_700_000_000.5, 2.5]]
    assert server.alive()


def test_the_cli_spells_a_non_finite_wall_time_as_the_route_does(logdir: Path) -> None:
    odd = next((logdir / RUN).glob("*tfevents*.odd"))
    out = subprocess.run([sys.executable, "-m", "tb_reduce_plugin", "scalars", str(odd), "--format", "json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    points = strict(out.stdout.encode())["tags"]["odd/wall"]["points"]
    assert [p[1] for p in points] == ["NaN", "Infinity", "-Infinity", 1_700_000_000.5]


def test_a_100000_character_tag_is_fetched_by_its_id(server: TensorBoard) -> None:
    ids = tag_ids(server)
    assert len(ids[LONG_TAG]) <= 32 and len(set(ids.values())) == len(ids)
    status, doc = scalars(server, tag_id=ids[LONG_TAG])
    assert status == 200, doc
    assert doc["tag"] == LONG_TAG and doc["id"] == ids[LONG_TAG] and [p[0] for p in doc["points"]] == [0, 1]
    assert tag_ids(server) == ids  # stable: the same tag has the same id on every listing


def test_an_unknown_tag_id_is_a_404_and_a_malformed_one_a_400(server: TensorBoard) -> None:
    status, doc = scalars(server, tag_id="0" * 16)
    assert status == 404 and "tag id" in doc["error"]
    status, doc = scalars(server, tag_id="not hex!")
    assert status == 400 and "tag_id" in doc["error"]
    status, doc = scalars(server, tag="odd/wall", tag_id=tag_ids(server)["odd/wall"])
    assert status == 400 and "not both" in doc["error"]


def test_every_point_is_the_default_and_a_width_keeps_per_column_first_last_min_and_max(server: TensorBoard) -> None:
    status, full = scalars(server, tag="long/series")
    assert status == 200 and len(full["points"]) == LONG_N and full["downsampled"] is False
    status, every = scalars(server, tag="long/series", points="all")
    assert every["points"] == full["points"]
    width = 500
    status, small = scalars(server, tag_id=tag_ids(server)["long/series"], width=width)
    assert status == 200 and small["downsampled"] is True
    kept = small["points"]
    assert len(kept) <= 5 * width
    assert kept[0] == full["points"][0] and kept[-1] == full["points"][-1]
    assert [SPIKE_AT, 1_700_000_000.0 + SPIKE_AT, 50.0] in kept  # the spike survives
    assert any(p[0] == 100 and p[2] == "NaN" for p in kept)  # and so does the gap
    steps = [p[0] for p in kept]
    assert steps == sorted(steps)  # record order
    assert small["summary"] == full["summary"] == {"points": LONG_N, "nan": 1, "pos_inf": 0, "neg_inf": 0,
                                                    "reversals": 0}
    # per pixel column the extent is the full series' (columns over the steps' range)
    col = lambda s: min(width - 1, int(s * width / (LONG_N - 1)))  # noqa: E731
    ext: dict[int, list[float]] = {}
    for sets, pts in (("full", full["points"]), ("kept", kept)):
        for s, _, v in pts:
            if isinstance(v, float):
                lo, hi = ext.setdefault((sets, col(s)), [math.inf, -math.inf])
                ext[(sets, col(s))] = [min(lo, v), max(hi, v)]
    assert all(ext[("kept", c)] == v for (which, c), v in ext.items() if which == "full")


@pytest.mark.parametrize("params", [{"width": "0"}, {"width": "-3"}, {"width": "abc"}, {"width": "1e9"},
                                    {"points": "some"}, {"points": "all", "width": "100"}])
def test_a_bad_width_or_points_is_a_400_in_one_line(server: TensorBoard, params: dict) -> None:
    status, doc = scalars(server, tag="long/series", **params)
    assert status == 400 and "\n" not in doc["error"], doc


# ---- in process: one computation per answer, charged to the budget ----------------------

def test_concurrent_identical_requests_encode_the_series_once_and_share_it(logdir: Path, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from plugin_support import body_json, client, get, make_plugin

    import tb_reduce_plugin.serve.service as service

    calls = []
    real = service.json_points
    release = threading.Event()

    def slow(*args, **kwargs):
        calls.append(1)
        release.wait(30)  # every request has arrived before the first answer is done
        return real(*args, **kwargs)

    monkeypatch.setattr(service, "json_points", slow)
    plugin = make_plugin(logdir, tmp_path / "cache")
    bodies: list = []

    def ask() -> None:
        bodies.append(body_json(get(client(plugin), "scalars", run=RUN, tag="long/series")))

    askers = [threading.Thread(target=ask) for _ in range(8)]
    for t in askers:
        t.start()
    for _ in range(600):
        if calls:
            break
        threading.Event().wait(0.05)
    threading.Event().wait(0.3)
    release.set()
    for t in askers:
        t.join(60)
    assert len(bodies) == 8 and all(b == bodies[0] for b in bodies) and len(bodies[0]["points"]) == LONG_N
    assert len(calls) == 1
    body_json(get(client(plugin), "scalars", run=RUN, tag="long/series"))  # kept: not encoded again
    assert len(calls) == 1


def test_an_encoded_answer_is_held_on_the_memory_budget_until_it_is_let_go(logdir: Path, tmp_path: Path) -> None:
    from plugin_support import client, get, make_plugin

    plugin = make_plugin(logdir, tmp_path / "cache")
    budget = plugin.service.budget
    for _ in range(2):  # the second settles the run's account with its series as the first left them
        get(client(plugin), "tags", run=RUN)
    before = budget.used
    r = get(client(plugin), "scalars", run=RUN, tag="long/series", gz=True)
    assert r.status_code == 200 and r.headers["Content-Encoding"] == "gzip"
    sent = len(r.get_data())
    assert budget.used - before >= sent  # the kept body is counted
    plugin.service._drop_scalar_bodies(0)  # what the budget's reclaimer does when memory is short
    del r
    import gc

    gc.collect()
    assert budget.used - before < sent
