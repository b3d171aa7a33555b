"""Scalars from event files (torch, tf.summary and TensorBoard's writers), against
TensorBoard's own loader; and the `tb-reduce scalars` command."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
import os
import re
import shutil
import struct
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest
from conftest import TESTS
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto import event_pb2, summary_pb2, types_pb2
from tensorboard.plugins.scalar.summary_v2 import scalar_pb
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

from tb_reduce_plugin.cli import main
from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.waveforms.eventfile import masked_crc32c
from tb_reduce_plugin.waveforms.scalars import RunScalars, tensor_scalar
from tb_reduce_plugin.waveforms.smoothing import smooth

FIXTURES = TESTS / "fixtures" / "eventfiles"
WRITERS = ("torch", "tf", "tensorboard")
Points = Dict[str, List[Tuple[int, float, float]]]


def _generator():
    spec = importlib.util.spec_from_file_location("make_eventfiles", FIXTURES.parent / "make_eventfiles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # torch and tensorflow are imported only inside its functions
    return module


def tensorboard_scalars(path: Path) -> Points:
    """What TensorBoard itself reads as scalars: its loader (with its compat layers,
    which turn simple_value into tensors), a tag being a scalar tag when its first
    value's metadata names the scalars plugin."""
    first_plugin: Dict[str, str] = {}
    out: Points = {}
    for event in EventFileLoader(str(path)).Load():
        for value in event.summary.value:
            plugin = first_plugin.setdefault(value.tag, value.metadata.plugin_data.plugin_name)
            if plugin == "scalars":
                x = tensor_util.make_ndarray(value.tensor).item()
                out.setdefault(value.tag, []).append((event.step, event.wall_time, float(x)))
    return out


def ours(run: RunScalars) -> Points:
    out: Points = {}
    for tag in run.tags():
        steps, walls, values = run.series(tag)
        out[tag] = list(zip(steps.tolist(), walls.tolist(), values.tolist()))
    return out


def same(a: Points, b: Points) -> bool:
    """Equal, NaN equal to NaN, to the last bit."""
    def bits(p: Points):
        return {t: [(s, w, struct.pack("<d", v) if not math.isnan(v) else "nan") for s, w, v in pts] for t, pts in p.items()}
    return bits(a) == bits(b)


def frame(payload: bytes) -> bytes:
    head = struct.pack("<Q", len(payload))
    return head + struct.pack("<I", masked_crc32c(head)) + payload + struct.pack("<I", masked_crc32c(payload))


def scalar_event(step: int, value: float, tag: str = "loss", wall: float = 1_700_000_000.0) -> bytes:
    event = event_pb2.Event(wall_time=wall + step, step=step)
    event.summary.value.add(tag=tag, simple_value=value)
    return event.SerializeToString()


@pytest.mark.parametrize("writer", WRITERS)
def test_each_writers_fixture_gives_exactly_what_tensorboard_reads(writer: str) -> None:
    (path,) = (FIXTURES / writer).iterdir()
    run = RunScalars(FIXTURES / writer)
    run.poll()
    oracle = tensorboard_scalars(path)
    assert oracle and same(ours(run), oracle)
    assert run.gaps == [] and run.pending_bytes == 0 and run.undecodable == 0


def test_torch_points_keep_record_order_with_nan_inf_a_repeated_step_and_a_step_going_back() -> None:
    run = RunScalars(FIXTURES / "torch")
    run.poll()
    steps, _, values = run.series("train/loss")
    expected = _generator().steps_and_values()
    assert steps.tolist() == [s for s, _ in expected]
    assert steps.tolist().count(30) == 2 and steps[-6] == 49 and steps[-5] == 35  # back-tracks, as written
    assert math.isnan(values[10]) and values[20] == math.inf and values[21] == -math.inf
    finite = [v for _, v in expected if math.isfinite(v)]
    assert np.allclose(values[np.isfinite(values)], finite, rtol=1e-6)  # float32 on disk


def test_tf_summary_histograms_and_text_are_not_scalars() -> None:
    run = RunScalars(FIXTURES / "tf")
    run.poll()
    assert run.tags() == ["accuracy", "loss", "lr_int"]
    assert run.series("lr_int")[2].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_a_tag_whose_metadata_is_only_on_its_first_value_keeps_all_its_points() -> None:
    run = RunScalars(FIXTURES / "tensorboard")
    run.poll()
    assert len(run.series("v2/loss")[0]) == len(run.series("v1/loss")[0]) == 56
    assert run.series("dtype/int64")[2][1] == 2**40 + 4
    assert run.series("dtype/float16")[2].tolist()[:2] == [0.5, 4.5]


def test_a_tensor_tag_first_written_without_scalar_metadata_is_not_a_scalar(tmp_path: Path) -> None:
    plain = summary_pb2.Summary.Value(tag="t", tensor=tensor_util.make_tensor_proto(np.float32(1.5)))
    later = scalar_pb("t", 2.5).value[0]
    data = b"".join(frame(event_pb2.Event(step=i, summary=summary_pb2.Summary(value=[v])).SerializeToString())
                    for i, v in enumerate([plain, later]))
    (tmp_path / "events.out.tfevents.x").write_bytes(data)
    run = RunScalars(tmp_path)
    run.poll()
    assert run.tags() == [] and run.records == 2  # as TensorBoard: the first value decides


@pytest.mark.parametrize("dtype, value", [(np.float32, 0.25), (np.float64, 1 / 3), (np.int32, -9), (np.int64, 2**50),
                                          (np.float16, 1.5), (np.int8, -3), (np.uint8, 200), (np.bool_, True)])
def test_a_scalar_tensor_of_each_dtype_reads_as_tensorboard_converts_it(dtype, value) -> None:
    proto = tensor_util.make_tensor_proto(np.array(value, dtype))
    assert tensor_scalar(proto) == float(tensor_util.make_ndarray(proto).item())
    proto.tensor_content = np.array(value, dtype).tobytes()
    for field in ("float_val", "double_val", "int_val", "int64_val", "half_val", "bool_val"):
        proto.ClearField(field)
    assert tensor_scalar(proto) == float(np.array(value, dtype).item())


def test_bfloat16_and_non_scalar_tensors() -> None:
    bf = types_pb2.DataType.Value("DT_BFLOAT16")
    proto = tensor_util.make_tensor_proto(np.float32(0))
    proto.dtype = bf
    proto.ClearField("float_val")
    proto.half_val.append(0x3FC0)  # bfloat16 of 1.5
    assert tensor_scalar(proto) == 1.5
    assert tensor_scalar(tensor_util.make_tensor_proto(np.array([1.0, 2.0], np.float32))) is None
    assert tensor_scalar(tensor_util.make_tensor_proto(np.array(b"text"))) is None


def test_a_run_folder_reads_its_event_files_in_name_order_and_not_its_subfolders(tmp_path: Path) -> None:
    (tmp_path / "events.out.tfevents.2").write_bytes(b"".join(frame(scalar_event(s, 2.0)) for s in (10, 11)))
    (tmp_path / "events.out.tfevents.1").write_bytes(b"".join(frame(scalar_event(s, 1.0)) for s in (0, 1)))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "events.out.tfevents.0").write_bytes(frame(scalar_event(99, 9.0)))
    (tmp_path / "notes.txt").write_bytes(b"not an event file")
    run = RunScalars(tmp_path)
    assert [Path(p).name for p in run.event_files()] == ["events.out.tfevents.1", "events.out.tfevents.2"]
    assert run.poll() == 4
    assert run.series("loss")[0].tolist() == [0, 1, 10, 11]


def test_appended_points_and_a_new_file_are_read_by_the_next_poll_only(tmp_path: Path) -> None:
    first = tmp_path / "events.out.tfevents.100"
    first.write_bytes(b"".join(frame(scalar_event(s, s * 0.5)) for s in range(5)))
    run = RunScalars(tmp_path)
    assert run.poll() == 5
    assert run.series("loss")[0].tolist() == list(range(5))
    with first.open("ab") as f:
        f.write(frame(scalar_event(5, 9.0)))
    (tmp_path / "events.out.tfevents.200").write_bytes(frame(scalar_event(6, 7.0, tag="acc")) + frame(scalar_event(7, 8.0)))
    assert run.poll() == 3
    assert run.series("loss")[0].tolist() == [0, 1, 2, 3, 4, 5, 7]
    assert run.series("loss")[2].tolist()[-2:] == [9.0, 8.0]
    assert run.tags() == ["acc", "loss"]
    assert run.poll() == 0 and run.points == 8


def test_a_real_writer_still_open_is_tailed(tmp_path: Path) -> None:
    w = EventFileWriter(str(tmp_path))
    for s in range(3):
        w.add_event(event_pb2.Event(wall_time=1.0 + s, step=s, summary=scalar_pb("x", float(s))))
    w.flush()
    run = RunScalars(tmp_path)
    run.poll()
    assert run.series("x")[0].tolist() == [0, 1, 2]
    for s in range(3, 6):
        w.add_event(event_pb2.Event(wall_time=1.0 + s, step=s, summary=scalar_pb("x", float(s))))
    w.close()
    run.poll()
    assert run.series("x")[2].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert run.gaps == [] and run.pending_bytes == 0


def test_a_damaged_file_in_a_run_loses_only_its_damaged_record(tmp_path: Path) -> None:
    records = [frame(scalar_event(s, float(s))) for s in range(6)]
    bad = bytearray(records[2])
    bad[-6] ^= 0x10  # a payload byte
    (tmp_path / "events.out.tfevents.1").write_bytes(b"".join(records[:2]) + bytes(bad) + b"".join(records[3:]))
    (tmp_path / "events.out.tfevents.2").write_bytes(b"# not an event file\n" * 10)
    run = RunScalars(tmp_path)
    run.poll()
    assert run.series("loss")[0].tolist() == [0, 1, 3, 4, 5]
    assert [(g.file, g.offset) for g in run.gaps] == [("events.out.tfevents.1", len(records[0] + records[1])),
                                                       ("events.out.tfevents.2", 0)]


def test_a_replaced_file_drops_its_old_points(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.1"
    path.write_bytes(b"".join(frame(scalar_event(s, 1.0)) for s in range(4)))
    run = RunScalars(tmp_path)
    run.poll()
    (tmp_path / "new").write_bytes(frame(scalar_event(50, 2.0)))
    os.replace(tmp_path / "new", path)
    run.poll()
    assert run.series("loss")[0].tolist() == [50] and run.restarted == ["events.out.tfevents.1"]


def test_a_file_deleted_between_listing_and_reading_keeps_its_points_and_breaks_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "events.out.tfevents.1").write_bytes(frame(scalar_event(1, 1.0)))
    (tmp_path / "events.out.tfevents.2").write_bytes(frame(scalar_event(2, 2.0)))
    run = RunScalars(tmp_path)
    run.poll()
    listed = run.event_files()
    (tmp_path / "events.out.tfevents.1").unlink()
    monkeypatch.setattr(run, "event_files", lambda: listed)  # the listing saw it; it is gone when opened
    with (tmp_path / "events.out.tfevents.2").open("ab") as f:
        f.write(frame(scalar_event(3, 3.0)))
    assert run.poll() == 1
    assert run.series("loss")[0].tolist() == [1, 2, 3]


def test_a_missing_path_raises_a_trace_error_with_its_base_name(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot open nothing-here") as err:
        RunScalars(tmp_path / "nothing-here").poll()
    assert str(tmp_path) not in str(err.value)


def test_series_are_read_only_and_memory_grows_with_the_points(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.1"
    path.write_bytes(b"".join(frame(scalar_event(s, 1.0)) for s in range(10)))
    run = RunScalars(path)
    run.poll()
    small = run.memory_bytes()
    with pytest.raises(ValueError):
        run.series("loss")[2][0] = 5.0
    with path.open("ab") as f:
        f.write(b"".join(frame(scalar_event(s, 1.0)) for s in range(10, 10_010)))
    run.poll()
    assert run.memory_bytes() - small >= 10_000 * 24


# -- tb-reduce scalars ----------------------------------------------------------------

def run_cli(capsys: pytest.CaptureFixture, *args: str) -> Tuple[int, str, str]:
    code = main(["scalars", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_csv_has_a_row_per_point_with_nan_and_inf_spelled_as_python_does(capsys: pytest.CaptureFixture) -> None:
    code, out, err = run_cli(capsys, FIXTURES / "torch")
    assert code == 0 and err == ""
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["tag", "step", "wall_time", "value"]
    loss = [r for r in rows[1:] if r[0] == "train/loss"]
    assert [r[3] for r in loss][10] == "nan" and [r[3] for r in loss][20:22] == ["inf", "-inf"]
    run = RunScalars(FIXTURES / "torch")
    run.poll()
    assert len(rows) - 1 == run.points
    steps, walls, values = run.series("train/loss")
    assert [int(r[1]) for r in loss] == steps.tolist()
    assert [float(r[2]) for r in loss] == walls.tolist()  # repr: every bit survives the text


def test_cli_tag_and_smoothing_add_the_smoothed_column_per_tag(capsys: pytest.CaptureFixture) -> None:
    code, out, _ = run_cli(capsys, FIXTURES / "tf", "--tag", "loss", "--smoothing", "0.6")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {r["tag"] for r in rows} == {"loss"} and len(rows) == 56
    values = [float(r["value"]) for r in rows]
    expected = smooth(values, 0.6).tolist()
    got = [float(r["smoothed"]) for r in rows]
    assert all((math.isnan(a) and math.isnan(b)) or a == b for a, b in zip(got, expected))


def test_cli_json_is_strict_with_non_finite_numbers_as_strings(capsys: pytest.CaptureFixture) -> None:
    code, out, _ = run_cli(capsys, FIXTURES / "torch" / "events.out.tfevents.torch", "--format", "json",
                           "--smoothing", "0.5")

    def refuse(name: str):
        raise AssertionError(f"non-standard JSON constant {name}")

    doc = json.loads(out, parse_constant=refuse)
    assert code == 0 and doc["columns"] == ["step", "wall_time", "value", "smoothed"] and doc["smoothing"] == 0.5
    assert sorted(doc["tags"]) == ["eval/acc_double", "eval/acc_new_style", "train/loss", "train/lr"]
    points = doc["tags"]["train/loss"]["points"]
    assert points[10][2:] == ["NaN", "NaN"] and points[20][2:] == ["Infinity", "Infinity"]
    assert points[21][2] == "-Infinity"
    assert [p[0] for p in points][-5:] == [35, 36, 37, 38, 39]
    assert doc["gaps"] == [] and doc["pending_bytes"] == 0


def test_cli_prints_each_gap_as_one_line_on_stderr_and_still_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    records = [frame(scalar_event(s, float(s))) for s in range(8)]
    data = records[0] + b"garbage!" * 5 + b"".join(records[1:5]) + bytes(100) + b"".join(records[5:])
    (tmp_path / "events.out.tfevents.1").write_bytes(data + records[0][:7])  # and a record being written
    code, out, err = run_cli(capsys, tmp_path, "--format", "json")
    assert code == 0
    lines = err.splitlines()
    assert lines[:2] == [f"events.out.tfevents.1: skipped 40 bytes at offset {len(records[0])} (bad length checksum)",
                         f"events.out.tfevents.1: skipped 100 bytes at offset {len(b''.join(records[:5])) + 40} "
                         "(bad length checksum)"]
    assert lines[2:] == ["events.out.tfevents.1: 7 bytes after the last complete record (a record being written)"]
    doc = json.loads(out)
    assert [g["skipped"] for g in doc["gaps"]] == [40, 100] and doc["pending_bytes"] == 7
    assert len(doc["tags"]["loss"]["points"]) == 8


@pytest.mark.parametrize("make, message", [
    (lambda d: (d / "events.out.tfevents.x").write_bytes(b"{\"not\": \"an event file\"}\n" * 20),
     r"^tb-reduce: error: events.out.tfevents.x: not an event file \(no valid record; \d+ bytes skipped\)$"),
    (lambda d: (d / "events.out.tfevents.x").write_bytes(b""), r"^tb-reduce: error: events.out.tfevents.x: no records"),
    (lambda d: None, r"^tb-reduce: error: cannot open events.out.tfevents.x: no such file or folder$"),
])
def test_cli_exits_2_with_one_line_when_nothing_can_be_read(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                           make, message) -> None:
    make(tmp_path)
    code, out, err = run_cli(capsys, tmp_path / "events.out.tfevents.x")
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and re.match(message, err), err


def test_cli_exits_2_for_a_folder_without_event_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "notes.txt").write_text("x")
    code, _, err = run_cli(capsys, tmp_path)
    assert code == 2 and "no event files" in err and len(err.splitlines()) == 1


def test_cli_unknown_tag_exits_2_naming_the_tags_there(capsys: pytest.CaptureFixture) -> None:
    code, out, err = run_cli(capsys, FIXTURES / "tf", "--tag", "los")
    assert code == 2 and out == ""
    assert err == "tb-reduce: error: tf: no scalar tag 'los'; its scalar tags: accuracy, loss, lr_int\n"


@pytest.mark.parametrize("weight", ["1.5", "-0.1", "nan", "x"])
def test_cli_refuses_a_smoothing_weight_outside_0_to_1_in_one_line(capsys: pytest.CaptureFixture, weight: str) -> None:
    code, _, err = run_cli(capsys, FIXTURES / "tf", "--smoothing", weight)
    assert code == 2 and len(err.splitlines()) == 1 and "--smoothing" in err


def test_cli_reads_a_copied_fixture_the_same_as_in_place(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    shutil.copy(FIXTURES / "tensorboard" / "events.out.tfevents.tensorboard", tmp_path)
    a = run_cli(capsys, tmp_path)
    b = run_cli(capsys, FIXTURES / "tensorboard")
    assert a == b and a[0] == 0
