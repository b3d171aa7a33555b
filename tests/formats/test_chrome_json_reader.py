"""The streaming Chrome JSON reader: formats, quirks, truncation and bad input."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import msgspec
import pytest

from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.formats import sources
from tb_reduce_plugin.formats.chrome_json import ChromeJsonReader
from tb_reduce_plugin.formats.sources import TraceStream
from tb_reduce_plugin.model.table import decode_events

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


@pytest.mark.parametrize("block_size", [64, 300, 4096])
def test_events_kept_as_views_of_the_buffer_outlive_the_blocks_after_them(tmp_path: Path, block_size: int) -> None:
    # msgspec.Raw values are views of the text they were decoded from: the reader's own
    # buffer. The reader writes each block into the buffer before the last one; a buffer
    # still viewed must never be written over (a kept event would change under its holder).
    evs = events(300)
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    with TraceStream(p) as stream:
        kept = [r for block in ChromeJsonReader(stream, block_size=block_size).blocks(raw_list) for r in block]
    assert [json.loads(bytes(r)) for r in kept] == evs


def test_a_reader_writes_its_blocks_into_two_buffers_in_turn(tmp_path: Path) -> None:
    # A new buffer per block is 16 MB of fresh pages to fault in each block (see `_append`).
    evs = events(2000)
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    with TraceStream(p) as stream:
        reader = ChromeJsonReader(stream, block_size=4096)
        buffers = []
        got = []
        for block in reader.blocks(msgspec.json.Decoder(list[dict]).decode):
            got.extend(block)
            buffers.append(reader._buf)
    assert got == evs
    middle = buffers[1:-1]  # the first read and the end of the file make their own
    assert len(middle) > 20 and len({id(b) for b in middle}) == 2
    assert all(a is not b for a, b in zip(middle, middle[1:]))


def test_a_gzip_inflated_ahead_is_read_where_it_was_inflated_and_its_kept_events_stay_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each block is lent by the stream (`TraceStream.lend`): the end of the block before is
    # written in the room before it, no block is copied; buffers still viewed by events kept
    # (msgspec.Raw) are never written over.
    monkeypatch.setattr(sources, "READ_SIZE", 1 << 16)
    monkeypatch.setattr(sources, "AHEAD_MIN_FILE_BYTES", 0)
    evs = events(10_000)
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(json.dumps({"traceEvents": evs}).encode(), 1))
    lent, kept = [], []
    with TraceStream(p) as stream:
        reader = ChromeJsonReader(stream, block_size=1 << 16)
        for i, block in enumerate(reader.blocks(raw_list)):
            lent.append(reader._lent)
            kept.extend(block if i % 3 == 0 else [bytes(r) for r in block])  # views of every third block
    assert [json.loads(bytes(r)) for r in kept] == evs
    assert len(lent) > 20 and sum(lent) >= len(lent) - 3  # the first reads (the head) aside


def test_a_big_plain_file_is_read_ahead_and_read_where_it_was_read_like_a_gzip(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A plain file from `AHEAD_MIN_PLAIN_BYTES` on is read on the stream's thread and lent
    # as a gzip's blocks are: the same events, the checksum of the file, and most blocks lent.
    monkeypatch.setattr(sources, "READ_SIZE", 1 << 16)
    evs = events(10_000)
    p = tmp_path / "t.json"
    p.write_bytes(json.dumps({"traceEvents": evs}).encode())
    seen = {}
    for ahead in (False, True):
        monkeypatch.setattr(sources, "AHEAD_MIN_PLAIN_BYTES", 0 if ahead else 1 << 62)
        lent, kept = [], []
        with TraceStream(p) as stream:
            reader = ChromeJsonReader(stream, block_size=1 << 16)
            for i, block in enumerate(reader.blocks(raw_list)):
                lent.append(reader._lent)
                kept.extend(block if i % 3 == 0 else [bytes(r) for r in block])
            assert (stream._ahead is not None) == ahead
            seen[ahead] = ([json.loads(bytes(r)) for r in kept], reader.file_crc())
        if ahead:
            assert len(lent) > 20 and sum(lent) >= len(lent) - 3
        else:
            assert not any(lent)
    assert seen[True] == seen[False] and seen[True][0] == evs


def test_a_plain_file_cut_short_while_read_ahead_reads_as_it_does_in_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The file is cut to a third after the first block was taken: the thread reading ahead
    # meets its end as a read in place does, and the reader says the same of it.
    monkeypatch.setattr(sources, "READ_SIZE", 1 << 16)
    body = json.dumps({"traceEvents": events(10_000)}).encode()
    outcome = {}
    for ahead in (False, True):
        monkeypatch.setattr(sources, "AHEAD_MIN_PLAIN_BYTES", 0 if ahead else 1 << 62)
        p = tmp_path / f"t{ahead}.json"
        p.write_bytes(body)
        got: list = []
        with TraceStream(p) as stream:
            reader = ChromeJsonReader(stream, block_size=1 << 16)
            try:
                for i, block in enumerate(reader.blocks(raw_list)):
                    got.extend(bytes(r) for r in block)
                    if i == 0:
                        os.truncate(p, len(body) // 3)
                outcome[ahead] = ("read", reader.truncated)
            except TraceError as exc:
                outcome[ahead] = ("refused", str(exc).replace(p.name, "t.json"))
        assert 0 < len(got) < 10_000
    assert outcome[True] == outcome[False]


def test_a_small_plain_file_is_read_in_place_without_a_thread(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_bytes(json.dumps({"traceEvents": events(2_000)}).encode())
    assert p.stat().st_size < sources.AHEAD_MIN_PLAIN_BYTES
    with TraceStream(p) as stream:
        reader = ChromeJsonReader(stream, block_size=1 << 16)
        assert sum(len(b) for b in reader.blocks(raw_list)) == 2_000
        assert stream._ahead is None and stream.ahead_bytes == 0


def test_trace_events_may_appear_anywhere_among_the_top_level_keys(tmp_path: Path) -> None:
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "}{,"}] * 50,
           "traceEvents": events(30), "traceName": "x", "stackFrames": {"1": {"name": "f"}}, "samples": [{"a": 1}] * 40}
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    got, reader = read_all(p, 128)
    assert got == doc["traceEvents"]
    assert reader.metadata == {k: v for k, v in doc.items() if k != "traceEvents"}
    assert list(reader.metadata) == ["schemaVersion", "deviceProperties", "traceName", "stackFrames", "samples"]


def test_a_list_closed_before_a_member_full_of_event_ends_is_decoded_once(tmp_path: Path) -> None:
    """Fuchsia's traces end with `systemTraceEvents`, a string of escaped events: every
    `},{` in it looked like the end of a block, and each was tried (a decode of the whole
    block each, 16 of them). The list's close is where the decoder says it is."""
    evs = events(300)
    tail = json.dumps([{"ph": "k", "ts": i, "in": {"pid": 0}, "out": {"pid": i}} for i in range(2000)])
    doc = {"traceEvents": evs, "systemTraceEvents": tail, "after": [{"a": "},{"}]}
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    decoded = []

    def counting(text):
        decoded.append(len(text))
        return raw_list(text)

    with TraceStream(p) as stream:
        reader = ChromeJsonReader(stream, block_size=1 << 20)
        got = [json.loads(bytes(r)) for block in reader.blocks(counting) for r in block]
    assert got == evs
    assert reader.metadata == {"systemTraceEvents": tail, "after": [{"a": "},{"}]}
    assert len(decoded) == 2, decoded  # the whole buffer once (it closes early), then the list alone


@pytest.mark.parametrize("tail", [
    b'"' + b'\\"},{\\"' * 40_000 + b'"',             # a long string of escaped event ends, as Fuchsia writes
    b'[' + b'1.5e300, ' * 20_000 + b'{"a": [null]}]',  # a long list
    b'{"big": 123456789012345678901234567890, "nan": NaN, "inf": -Infinity}',  # the stdlib's own rules
    b'"' + b'\xff\xfe' * 40_000 + b'"',               # invalid UTF-8: replaced
    b'"\\ud800 ' + b'x' * 70_000 + b'"',              # a lone surrogate escape: replaced
])
def test_a_long_top_level_value_after_the_list_reads_as_the_stdlib_reads_it(tmp_path: Path, tail: bytes) -> None:
    """msgspec finds where a member's value ends, then the stdlib decodes those bytes once
    (it was tried on 64 KiB, then on twice as much while the value went on)."""
    p = tmp_path / "t.json"
    head = json.dumps({"traceEvents": events(3)})[:-1].encode()
    p.write_bytes(head + b', "tail": ' + tail + b', "last": 7}')
    calls = []
    real = json.JSONDecoder.raw_decode

    def counting(self, text, idx=0):
        calls.append(len(text))
        return real(self, text, idx)

    json.JSONDecoder.raw_decode = counting
    try:
        got, reader = read_all(p, 4096)
    finally:
        json.JSONDecoder.raw_decode = real
    expected = json.loads(tail.decode("utf-8", "replace").replace("\\ud800", "\ufffd"))
    assert got == events(3)
    assert reader.metadata["last"] == 7
    assert reader.metadata["tail"] == expected or (expected != expected)
    if tail[:1] in b'"[' and b"\\u" not in tail and b"\xff" not in tail:  # not one msgspec refuses
        assert sum(1 for n in calls if n > 64 * 1024) == 1, calls  # the long value decoded once


@pytest.mark.parametrize("after", [b"}", b', "x": 1}', b', "x": "},{"}'])
def test_invalid_utf8_before_an_early_close_is_replaced_not_raised(tmp_path: Path, after: bytes) -> None:
    """Found by the fuzzer in CI: an odd-typed event sends a block to the lenient path,
    whose list decode skips strings unchecked and reports the close; decoding the events
    up to it then met the invalid byte. The buffer is cleaned (U+FFFD) as anywhere else."""
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents": [{"name": "a", "ph": "X", "ts": [1], "pid": 1, "tid": 1},'
                  b' {"name": "b\xff", "ph": "X", "ts": 2, "dur": 1, "pid": 1, "tid": 1}]' + after)
    with TraceStream(p) as stream:
        reader = ChromeJsonReader(stream, block_size=1 << 20)
        got = [e for block in reader.blocks(decode_events) for e in block]
    assert [e.name for e in got] == ["a", "b\ufffd"]
    assert got[1].ts == 2 and reader.rewritten


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


# ---- long runs of whitespace and separators (issue 9, finding 6) ------------------------

MB = 1_000_000


def read_gz(tmp_path: Path, data: bytes) -> tuple[list, ChromeJsonReader]:
    """Read gzipped `data` whole; no ratio limit: runs of one byte compress ~1000x."""
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(data, 1))
    with TraceStream(p, max_ratio=None) as stream:
        reader = ChromeJsonReader(stream)
        got = [json.loads(bytes(r)) for block in reader.blocks(raw_list) for r in block]
    return got, reader


def _two() -> tuple[bytes, bytes]:
    a, b = events(2)
    return json.dumps(a).encode(), json.dumps(b).encode()


@pytest.mark.parametrize("gap", [b"," + b" " * (100 * MB), b" " * (20 * MB) + b",\n", b"," * (10 * MB),
                                 b"\n,\t" * (5 * MB)],
                         ids=["100MB-spaces", "20MB-spaces-before-the-comma", "10M-commas", "mixed"])
def test_a_huge_run_of_whitespace_or_commas_between_two_events_is_skipped(tmp_path: Path, gap: bytes) -> None:
    a, b = _two()
    got, reader = read_gz(tmp_path, b'{"traceEvents":[' + a + gap + b + b'],"k":1}')
    assert got == events(2) and reader.metadata == {"k": 1} and not reader.truncated


def test_huge_runs_around_top_level_keys_and_at_the_end_of_a_truncated_file_are_skipped(tmp_path: Path) -> None:
    a, b = _two()
    ws = b" " * (20 * MB)
    data = (b"\xef\xbb\xbf" + ws + b"{" + ws + b'"traceEvents":[' + ws + a + b"," + b + b"]" + b"," * (10 * MB)
            + b'"k":' + ws + b'1,"l":[' + ws + b"2]" + ws + b"}")
    got, reader = read_gz(tmp_path, data)
    assert got == events(2) and reader.metadata == {"k": 1, "l": [2]} and not reader.truncated
    got, reader = read_gz(tmp_path, b"[" + a + b"," + b + b"," + ws * 5)
    assert got == events(2) and reader.truncated


@pytest.mark.parametrize("block_size", [64, 1 << 20])
def test_runs_of_commas_between_events_are_skipped_wherever_the_blocks_fall(tmp_path: Path, block_size: int) -> None:
    """The reader always skipped commas where a block starts; inside a block they are
    skipped too, so what is read does not depend on where blocks are cut."""
    evs = events(40)
    body = b"".join(json.dumps(e).encode() + (b",,\n," if k % 3 else b" ,") for k, e in enumerate(evs))
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents":[,' + body + b'],"x":2}')
    got, reader = read_all(p, block_size)
    assert got == evs and reader.metadata == {"x": 2}


def test_two_events_without_a_comma_between_them_are_still_malformed(tmp_path: Path) -> None:
    a, b = _two()
    p = tmp_path / "t.json"
    p.write_bytes(b"[" + a + b" " * 100 + b + b"]")
    with pytest.raises(TraceError, match="malformed JSON"):
        read_all(p)


def test_two_events_without_a_comma_are_malformed_even_across_a_long_run_of_spaces(tmp_path: Path) -> None:
    """A run longer than a block is skipped after the block's last event: the next
    byte must still be a comma (or the end of the list)."""
    a, b = _two()
    for run in (100, 40 * MB):  # in one block, and across blocks
        with pytest.raises(TraceError, match="malformed JSON in the event list"):
            read_gz(tmp_path, b"[" + a + b" " * run + b + b"]")
        got, _ = read_gz(tmp_path, b"[" + a + b" " * run + b"]")
        assert got == events(2)[:1]
