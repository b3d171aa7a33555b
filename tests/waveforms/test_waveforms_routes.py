"""The waveform routes (`waveforms`, `tags`, `scalars`) behind TensorBoard's own WSGI app."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import TESTS
from plugin_support import (
    JAX_HOST,
    JAX_JSON_HOST,
    JAX_RUN,
    TORCH_HOST,
    TORCH_RUN,
    assert_json_error,
    body_json,
    client,
    get,
    make_logdir,
    make_plugin,
)

from tb_reduce_plugin.waveforms.scalars import tag_id

FIXTURES = TESTS / "fixtures"


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    d = make_logdir(tmp_path)
    stalled = d / "stalled"
    stalled.mkdir()
    shutil.copyfile(FIXTURES / "traces" / "torch_stalled_step.pt.trace.json.gz",
                    stalled / "torch_stalled_step.pt.trace.json.gz")
    return d


def test_waveforms_gives_the_per_step_series_of_a_host(logdir: Path, tmp_path: Path) -> None:
    c = client(make_plugin(logdir, tmp_path / "cache"))
    r = get(c, "waveforms", run="stalled", host="torch_stalled_step")
    assert r.status_code == 200, r.get_data()[:300]
    doc = body_json(r)
    assert doc["run"] == "stalled" and doc["host"] == "torch_stalled_step"
    assert doc["marker"] == "ProfilerStep#N" and doc["reason"] is None
    assert [s["step"] for s in doc["steps"]] == list(range(8))
    assert doc["slowest"][0] == 5
    assert doc["series"][0] == "step_time_ms" and "compute_ms" in doc["series"]
    # the stalled step slept outside any op: its unaccounted time stands out, and only there
    assert doc["series"][-1] == "unaccounted_ms" and doc["unaccounted_stands_out"] == [5]
    assert doc["steps"][5]["busy_ms"]["unaccounted"] >= 140


def test_waveforms_of_jax_xspace_and_json_hosts_agree(logdir: Path, tmp_path: Path) -> None:
    c = client(make_plugin(logdir, tmp_path / "cache"))
    a = body_json(get(c, "waveforms", run=JAX_RUN, host=JAX_HOST))
    b = body_json(get(c, "waveforms", run=JAX_RUN, host=JAX_JSON_HOST))
    assert [s["step"] for s in a["steps"]] == [s["step"] for s in b["steps"]] == list(range(20))
    assert [s["step_time_ms"] for s in a["steps"]] == [s["step_time_ms"] for s in b["steps"]]


def test_waveforms_is_computed_once_per_file_version(logdir: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import tb_reduce_plugin.serve.service as service

    calls = []
    real = service.derive_index
    monkeypatch.setattr(service, "derive_index", lambda idx, account=None: calls.append(1) or real(idx, account))
    plugin = make_plugin(logdir, tmp_path / "cache")
    c = client(plugin)
    first = body_json(get(c, "waveforms", run=TORCH_RUN, host=TORCH_HOST))
    assert body_json(get(c, "waveforms", run=TORCH_RUN, host=TORCH_HOST)) == first
    assert len(calls) == 1
    assert plugin.service.derived_series(plugin.service.trace_file(TORCH_RUN, TORCH_HOST)) == first["series"]
    trace = logdir / TORCH_RUN / f"{TORCH_HOST}.pt.trace.json.gz"
    trace.write_bytes(trace.read_bytes())  # a new version of the file (mtime, maybe size)
    os.utime(trace, ns=(1, 1))
    body_json(get(c, "waveforms", run=TORCH_RUN, host=TORCH_HOST))
    assert len(calls) == 2


@pytest.mark.parametrize("params, status", [
    ({"run": "nope", "host": "x"}, 404),
    ({"run": TORCH_RUN, "host": "../../etc/passwd"}, 404),
    ({"run": "/etc", "host": "passwd"}, 404),
    ({"run": TORCH_RUN}, 400),
    ({"host": TORCH_HOST}, 400),
    ({"run": TORCH_RUN, "host": "a\x00b"}, 400),
    ({"run": "x" * 5000, "host": "y"}, 400),
])
def test_waveforms_refuses_bad_parameters_with_a_json_error(logdir: Path, tmp_path: Path, params: dict,
                                                          status: int) -> None:
    c = client(make_plugin(logdir, tmp_path / "cache"))
    assert_json_error(get(c, "waveforms", **params), status)


def test_waveforms_of_an_unreadable_trace_is_422_with_the_reason(logdir: Path, tmp_path: Path) -> None:
    bad = logdir / "bad"
    bad.mkdir()
    (bad / "broken.pt.trace.json").write_bytes(b"\x00\x01 not json at all")
    c = client(make_plugin(logdir, tmp_path / "cache"))
    message = assert_json_error(get(c, "waveforms", run="bad", host="broken"), 422)
    assert "broken.pt.trace.json" in message and "/" not in message.replace("w/", "")


# ---- scalars: the run's TensorBoard event files -------------------------------------------

def _write_events(folder: Path, points: list[tuple[int, float]], tag: str = "loss", name: str = "a") -> Path:
    """An event file written by TensorBoard's own writer, `simple_value` scalars.

    Renamed so that files sort by `name`: the writer's own names end in a counter per
    process (`...9.a` sorts after `...10.b`), and a run is read in name order."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    w = EventFileWriter(str(folder), filename_suffix=f".{name}")
    for step, value in points:
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
        w.add_event(event_pb2.Event(step=step, wall_time=1000.0 + step, summary=summary))
    w.close()
    written = next(folder.glob(f"*tfevents*.{name}"))
    return written.rename(folder / f"events.out.tfevents.0000001000.test.{name}")


def test_tags_lists_scalar_tags_and_the_derived_series_of_each_host(logdir: Path, tmp_path: Path) -> None:
    _write_events(logdir / "jax", [(1, 0.5), (2, 0.25)])  # the TensorBoard run above plugins/profile
    c = client(make_plugin(logdir, tmp_path / "cache"))
    doc = body_json(get(c, "tags", run=JAX_RUN))
    assert doc["scalars"] == [{"tag": "loss", "id": tag_id("loss"), "points": 2}]
    assert doc["gaps"] == [] and doc["pending_bytes"] == 0
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert set(hosts) == {JAX_HOST, JAX_JSON_HOST} and not hosts[JAX_HOST]["derived"]
    assert hosts[JAX_HOST]["series"][0] == "step_time_ms"
    get(c, "waveforms", run=JAX_RUN, host=JAX_HOST)
    doc = body_json(get(c, "tags", run=JAX_RUN))
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert hosts[JAX_HOST]["derived"] and "device_idle_ms" not in hosts[JAX_HOST]["series"]
    assert "unaccounted_ms" in hosts[JAX_HOST]["series"]


def test_scalars_gives_points_in_record_order_with_non_finite_values_as_strings(logdir: Path,
                                                                               tmp_path: Path) -> None:
    nan, inf = float("nan"), float("inf")
    _write_events(logdir / TORCH_RUN, [(0, 1.0), (1, nan), (2, inf), (2, -inf), (1, 0.5)])
    c = client(make_plugin(logdir, tmp_path / "cache"))
    r = get(c, "scalars", run=TORCH_RUN, tag="loss")
    assert r.status_code == 200, r.get_data()[:300]
    doc = body_json(r)
    assert [(s, v) for s, _, v in doc["points"]] == [(0, 1.0), (1, "NaN"), (2, "Infinity"), (2, "-Infinity"),
                                                    (1, 0.5)]
    assert [w for _, w, _ in doc["points"]] == [1000.0, 1001.0, 1002.0, 1002.0, 1001.0]


def test_scalars_appended_later_are_picked_up(logdir: Path, tmp_path: Path) -> None:
    c = client(make_plugin(logdir, tmp_path / "cache"))
    _write_events(logdir / TORCH_RUN, [(0, 1.0)], name="a")
    assert len(body_json(get(c, "scalars", run=TORCH_RUN, tag="loss"))["points"]) == 1
    _write_events(logdir / TORCH_RUN, [(1, 2.0), (2, 3.0)], name="b")  # a second file, as a restarted job writes
    assert [p[0] for p in body_json(get(c, "scalars", run=TORCH_RUN, tag="loss"))["points"]] == [0, 1, 2]


def test_a_damaged_record_is_skipped_and_reported_and_the_rest_is_read(logdir: Path, tmp_path: Path) -> None:
    path = _write_events(logdir / TORCH_RUN, [(i, float(i)) for i in range(20)])
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    c = client(make_plugin(logdir, tmp_path / "cache"))
    doc = body_json(get(c, "scalars", run=TORCH_RUN, tag="loss"))
    assert len(doc["points"]) == 19
    (gap,) = doc["gaps"]
    assert gap["file"] == path.name and gap["skipped"] > 0 and 0 < gap["offset"] < len(data)
    assert body_json(get(c, "tags", run=TORCH_RUN))["gaps"] == [gap]


def test_an_event_file_linked_from_outside_the_logdir_is_not_read_when_links_are_not_followed(
    logdir: Path, tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = _write_events(outside, [(0, 42.0)], tag="secret")
    os.symlink(secret, logdir / TORCH_RUN / "events.out.tfevents.0.linked")
    c = client(make_plugin(logdir, tmp_path / "cache", "--tb_reduce_follow_symlinks=false"))
    assert body_json(get(c, "tags", run=TORCH_RUN))["scalars"] == []
    assert_json_error(get(c, "scalars", run=TORCH_RUN, tag="secret"), 404)


def test_an_event_file_linked_into_a_run_is_read_as_tensorboard_reads_it(logdir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    linked = _write_events(outside, [(0, 42.0)], tag="linked")
    os.symlink(linked, logdir / TORCH_RUN / "events.out.tfevents.0.linked")
    c = client(make_plugin(logdir, tmp_path / "cache"))
    assert body_json(get(c, "tags", run=TORCH_RUN))["scalars"] == [{"tag": "linked", "id": tag_id("linked"), "points": 1}]


@pytest.mark.parametrize("params, status", [
    ({"run": "nope"}, 404),
    ({}, 400),
    ({"run": "../.."}, 404),
    ({"run": TORCH_RUN, "tag": "a\x01"}, 400),
])
def test_tags_and_scalars_refuse_bad_parameters(logdir: Path, tmp_path: Path, params: dict, status: int) -> None:
    c = client(make_plugin(logdir, tmp_path / "cache"))
    route = "scalars" if "tag" in params else "tags"
    assert_json_error(get(c, route, **params), status)


def test_an_unknown_tag_is_404_naming_the_tags_there_are(logdir: Path, tmp_path: Path) -> None:
    _write_events(logdir / TORCH_RUN, [(0, 1.0)])
    c = client(make_plugin(logdir, tmp_path / "cache"))
    message = assert_json_error(get(c, "scalars", run=TORCH_RUN, tag="accuracy"), 404)
    assert "'loss'" in message
