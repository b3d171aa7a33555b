"""The streaming Chrome JSON reader: formats, quirks, truncation and bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import msgspec
import pytest

from tb_reduce_plugin.chrome_json import ChromeJsonReader
from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.model import decode_events
from tb_reduce_plugin.sources import TraceStream

raw_list = msgspec.json.Decoder(list[msgspec.Raw]).decode


def read_all(path: Path, block_size: int = 1 << 20):
    with TraceStream(path) as stream:
        reader = ChromeJsonReader(stream, block_size=block_size)
        raws = [json.loads(bytes(r)) for block in reader.blocks(raw_list) for r in block]
    return raws, reader


def events(n: int) -> list[dict]:
    return [{"ph": "X", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i * 10.5, "dur": 3,
             "args": {"text": "tricky },{ \"quote\" ]", "nested": [{"a": [1, {"b": "}"}]}]}} for i in range(n)]


@pytest.mark.parametrize("block_size", [64, 300, 1 << 20])
def test_events_split_across_many_blocks_are_read_exactly_once(tmp_path: Path, block_size: int) -> None:
    evs = events(200)
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}, indent=1))
    got, reader = read_all(p, block_size)
    assert got == evs
    assert reader.container == "object" and not reader.truncated


def test_trace_events_may_appear_anywhere_among_the_top_level_keys(tmp_path: Path) -> None:
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "}{,"}] * 50,
           "traceEvents": events(30), "traceName": "x", "stackFrames": {"1": {"name": "f"}}, "samples": [{"a": 1}] * 40}
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    got, reader = read_all(p, 128)
    assert got == doc["traceEvents"]
    assert reader.metadata == {k: v for k, v in doc.items() if k != "traceEvents"}
    assert list(reader.metadata) == ["schemaVersion", "deviceProperties", "traceName", "stackFrames", "samples"]


def test_array_format_in_gzip_is_read(tmp_path: Path) -> None:
    p = tmp_path / "t.json.weird"
    p.write_bytes(gzip.compress(json.dumps(events(10)).encode()))
    got, reader = read_all(p)
    assert got == events(10) and reader.container == "array"


@pytest.mark.parametrize("tail", [",", ",\n  ", "", ",\n{\"ph\": \"X\", \"name\": \"half", ",{\"ph\""])
def test_a_truncated_array_file_is_read_up_to_its_last_complete_event(tmp_path: Path, tail: str) -> None:
    body = ",\n".join(json.dumps(e) for e in events(20))
    p = tmp_path / "t.json"
    p.write_text("[\n" + body + tail)
    got, reader = read_all(p, 256)
    assert got == events(20)
    assert reader.truncated


def test_a_truncated_file_whose_last_complete_elements_are_not_objects_keeps_them(tmp_path: Path) -> None:
    """Found by the property suite: cut points end on `}`, so `…}, 7, {"cut` had none
    after the last object and lost the complete elements before the cut."""
    body = ",\n".join(json.dumps(e) for e in events(5))
    p = tmp_path / "t.json"
    p.write_text("[\n" + body + ',\n{"ph": "b"},\n7,\n{"ph": "X", "name": "cut sh')
    got, reader = read_all(p, 256)
    assert got == [*events(5), {"ph": "b"}, 7]
    assert reader.truncated


def test_a_trailing_empty_event_and_string_pids_are_events(tmp_path: Path) -> None:
    evs = [{"ph": "X", "pid": "Spans", "tid": "main", "ts": 1.0000001, "dur": 2, "name": "a"}, {}]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    with TraceStream(p) as s:
        decoded = [e for b in ChromeJsonReader(s).blocks(decode_events) for e in b]
    assert len(decoded) == 2 and decoded[0].pid == "Spans" and decoded[1].ph == ""


def test_events_with_wrong_types_are_read_leniently(tmp_path: Path) -> None:
    evs = [{"ph": "X", "name": ["weird"], "pid": 1.5, "tid": {"a": 1}, "ts": "12.5", "dur": None}, 7, "str", {"ph": 3}]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    with TraceStream(p) as s:
        decoded = [e for b in ChromeJsonReader(s).blocks(decode_events) for e in b]
    assert len(decoded) == 4
    assert decoded[0].ts == 12.5 and decoded[0].dur != decoded[0].dur  # NaN: absent
    assert decoded[3].ph == ""


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty"),
        (b"   \n", "empty"),
        (b'{"foo": 1}', "no traceEvents"),
        (b'{"traceEvents": {"a": 1}}', "not a list"),
        (b"hello world", "not a Chrome trace"),
        (b'[{"ph": "X"}, {"ph": "X", oops}, {"ph": "X"}]', "malformed JSON"),
    ],
)
def test_bad_input_gives_a_one_line_trace_error(tmp_path: Path, content: bytes, message: str) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(TraceError, match=message) as err:
        read_all(p)
    assert "\n" not in str(err.value)


def test_corrupt_gzip_gives_a_trace_error(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(json.dumps({"traceEvents": events(500)}).encode()))
    data[len(data) // 2: len(data) // 2 + 40] = b"\x00" * 40
    p = tmp_path / "bad.json.gz"
    p.write_bytes(bytes(data))
    with pytest.raises(TraceError, match="gzip|malformed"):
        read_all(p)


def test_a_truncated_gzip_stream_gives_a_trace_error(tmp_path: Path) -> None:
    data = gzip.compress(json.dumps({"traceEvents": events(500)}).encode())
    p = tmp_path / "bad.json.gz"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="gzip"):
        read_all(p)


def test_a_file_that_inflates_past_the_limit_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "bomb.json.gz"
    p.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * 5_000_000 + b"]}"))
    with TraceStream(p, max_inflated_bytes=1_000_000) as stream, pytest.raises(TraceError, match="inflates past"):
        list(ChromeJsonReader(stream).blocks(raw_list))


def test_a_missing_file_gives_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot open"):
        TraceStream(tmp_path / "nope.json")
