"""The event-file reader: TFRecord framing, damage skipped and reported once, live writers tailed."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path
from typing import List

import google_crc32c
import numpy as np
import pytest
from conftest import TESTS
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto import event_pb2

from tb_reduce_plugin.errors import NotRegularFile, TraceError
from tb_reduce_plugin.waveforms import eventfile
from tb_reduce_plugin.waveforms.eventfile import EventFileReader, Gap, header_candidates, masked_crc32c, window_crc32c

FIXTURES = TESTS / "fixtures" / "eventfiles"
WRITERS = ("torch", "tf", "tensorboard")


def frame(payload: bytes) -> bytes:
    """One record as TensorFlow's writer frames it."""
    head = struct.pack("<Q", len(payload))
    return head + struct.pack("<I", masked_crc32c(head)) + payload + struct.pack("<I", masked_crc32c(payload))


def payload(i: int, tag: str = "loss") -> bytes:
    event = event_pb2.Event(wall_time=1_700_000_000.0 + i, step=i)
    event.summary.value.add(tag=tag, simple_value=0.5 * i)
    return event.SerializeToString()


def payloads(n: int, start: int = 0) -> List[bytes]:
    return [payload(i) for i in range(start, start + n)]


def write(path: Path, records: List[bytes]) -> List[int]:
    """Write framed `records`; return each record's offset."""
    offsets, data = [], b""
    for p in records:
        offsets.append(len(data))
        data += frame(p)
    path.write_bytes(data)
    return offsets


def test_masked_crc_is_tensorflows_mask_of_crc32c() -> None:
    crc = google_crc32c.value(b"hello")
    assert masked_crc32c(b"hello") == ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def test_the_numpy_window_crc_equals_crc32c_at_every_offset() -> None:
    data = random.Random(1).randbytes(5000) + bytes(100) + b"\xff" * 100
    positions = np.arange(len(data) - 8)
    expected = [google_crc32c.value(data[p:p + 8]) for p in positions]
    assert window_crc32c(data, positions).tolist() == expected


def test_header_candidates_finds_every_record_start_in_a_file_and_nothing_else(tmp_path: Path) -> None:
    offsets = write(tmp_path / "f", payloads(200))
    data = (tmp_path / "f").read_bytes()
    assert header_candidates(data, len(data), 1 << 28).tolist() == offsets


@pytest.mark.parametrize("seed", range(6))
def test_header_candidates_equals_a_brute_force_search_on_mixed_damage(seed: int) -> None:
    rng = random.Random(seed)
    parts = []
    for _ in range(40):
        # odd seeds without zero runs: the search's no-zeros path, even seeds its mostly-zeros path
        kind = rng.choice(["zeros", "random", "record", "empty record", "text"][seed % 2:])
        parts.append({"zeros": lambda: bytes(rng.randint(1, 300)), "random": lambda: rng.randbytes(rng.randint(1, 300)),
                      "record": lambda: frame(payload(rng.randint(0, 99))), "empty record": lambda: frame(b""),
                      "text": lambda: b"step 12 loss 0.25\n" * rng.randint(1, 5)}[kind]())
    data = b"".join(parts)
    expected = [p for p in range(len(data) - 11)
                if struct.unpack_from("<Q", data, p)[0] <= 1 << 20
                and masked_crc32c(data[p:p + 8]) == struct.unpack_from("<I", data, p + 8)[0]]
    assert header_candidates(data, len(data), 1 << 20).tolist() == expected


def test_twelve_zero_bytes_are_never_a_header() -> None:
    # the zero-fill shortcut of header_candidates relies on it
    assert masked_crc32c(bytes(8)) != 0


def test_a_well_formed_file_reads_every_record_in_order_with_no_gap(tmp_path: Path) -> None:
    records = payloads(300)
    write(tmp_path / "f", records)
    r = EventFileReader(tmp_path / "f")
    assert r.poll() == records
    assert (r.records, r.gaps, r.pending_bytes, r.offset) == (300, [], 0, (tmp_path / "f").stat().st_size)


@pytest.mark.parametrize("writer", WRITERS)
def test_each_fixture_reads_exactly_the_payloads_tensorboards_own_loader_reads(writer: str) -> None:
    (path,) = (FIXTURES / writer).iterdir()
    oracle = list(RawEventFileLoader(str(path)).Load())
    r = EventFileReader(path)
    assert r.poll() == oracle
    assert len(oracle) > 50 and r.gaps == [] and r.pending_bytes == 0


@pytest.mark.parametrize("chunk_bytes", [eventfile.CHUNK_BYTES, 16, 61])
def test_a_record_cut_at_every_byte_is_pending_not_a_gap_and_is_read_once_when_complete(
        tmp_path: Path, chunk_bytes: int) -> None:
    records = payloads(6)
    whole = b"".join(frame(p) for p in records)
    last = frame(records[-1])
    boundary = len(whole) - len(last)
    path = tmp_path / "f"
    for cut in range(len(last)):  # 0 bytes of the last record on disk, 1, ..., all but one
        path.write_bytes(whole[:boundary + cut])
        r = EventFileReader(path, chunk_bytes=chunk_bytes)
        assert r.poll() == records[:-1], cut
        assert r.gaps == [] and r.pending_bytes == cut and r.offset == boundary, cut
        with path.open("ab") as f:
            f.write(whole[boundary + cut:])
        assert r.poll() == records[-1:], cut
        assert r.poll() == [], cut
        assert r.gaps == [] and r.pending_bytes == 0 and r.records == len(records), cut


def test_a_record_larger_than_a_chunk_is_read_whole(tmp_path: Path) -> None:
    big = event_pb2.Event(step=1, file_version="x" * 10_000).SerializeToString()
    records = [payload(0), big, payload(2)]
    write(tmp_path / "f", records)
    r = EventFileReader(tmp_path / "f", chunk_bytes=64)
    assert r.poll() == records and r.gaps == []


PARTS = {"length": (0, 8), "length checksum": (8, 12), "payload": (12, -4), "payload checksum": (-4, None)}


@pytest.mark.parametrize("chunk_bytes", [eventfile.CHUNK_BYTES, 40])
@pytest.mark.parametrize("part", list(PARTS))
def test_a_byte_flipped_in_any_part_of_a_middle_record_loses_only_that_record(
        tmp_path: Path, part: str, chunk_bytes: int) -> None:
    records = payloads(9)
    offsets = write(tmp_path / "f", records)
    clean = (tmp_path / "f").read_bytes()
    start, size = offsets[4], len(frame(records[4]))
    lo, hi = PARTS[part]
    lo = lo if lo >= 0 else size + lo
    hi = size if hi is None else (hi if hi >= 0 else size + hi)
    for k in range(start + lo, start + hi):  # every byte of that part, in turn
        for flip in (0x01, 0x80, 0xFF):
            data = bytearray(clean)
            data[k] ^= flip
            (tmp_path / "f").write_bytes(bytes(data))
            r = EventFileReader(tmp_path / "f", chunk_bytes=chunk_bytes)
            assert r.poll() == records[:4] + records[5:], (k, flip)
            assert len(r.gaps) == 1, (k, flip, r.gaps)
            gap = r.gaps[0]
            assert (gap.file, gap.offset, gap.skipped) == ("f", start, size), (k, flip)
            assert ("payload" in gap.reason) == part.startswith("payload"), gap.reason
            assert r.pending_bytes == 0


@pytest.mark.parametrize("garbage_len", [1, 11, 12, 13, 1000, 3 * 1024 * 1024])
def test_garbage_inserted_between_records_is_one_gap_of_exactly_its_length(tmp_path: Path, garbage_len: int) -> None:
    records = payloads(10)
    before = b"".join(frame(p) for p in records[:3])
    garbage = random.Random(garbage_len).randbytes(garbage_len)
    (tmp_path / "f").write_bytes(before + garbage + b"".join(frame(p) for p in records[3:]))
    r = EventFileReader(tmp_path / "f")
    assert r.poll() == records
    assert r.gaps == [Gap("f", len(before), garbage_len, "bad length checksum")]


@pytest.mark.parametrize("zeros", [4, 5000, 3 * 1024 * 1024])
def test_a_zeroed_region_is_one_gap_and_reading_carries_on_after_it(tmp_path: Path, zeros: int) -> None:
    records = payloads(10)
    before = b"".join(frame(p) for p in records[:2])
    (tmp_path / "f").write_bytes(before + bytes(zeros) + b"".join(frame(p) for p in records[2:]))
    r = EventFileReader(tmp_path / "f")
    assert r.poll() == records
    assert [(g.offset, g.skipped) for g in r.gaps] == [(len(before), zeros)]


def test_records_overwritten_with_zeros_are_one_gap_over_exactly_them(tmp_path: Path) -> None:
    records = payloads(10)
    offsets = write(tmp_path / "f", records)
    data = bytearray((tmp_path / "f").read_bytes())
    data[offsets[3]:offsets[6]] = bytes(offsets[6] - offsets[3])
    (tmp_path / "f").write_bytes(bytes(data))
    r = EventFileReader(tmp_path / "f")
    assert r.poll() == records[:3] + records[6:]
    assert [(g.offset, g.skipped) for g in r.gaps] == [(offsets[3], offsets[6] - offsets[3])]


def test_a_long_damaged_region_is_searched_in_numpy_not_with_a_crc_call_per_byte(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = eventfile.masked_crc32c
    monkeypatch.setattr(eventfile, "masked_crc32c", lambda b: calls.append(len(b)) or real(b))
    garbage = bytes(random.Random(2).randbytes(2 * 1024 * 1024)) + bytes(2 * 1024 * 1024)
    (tmp_path / "f").write_bytes(frame(payload(0)) + garbage + frame(payload(1)))
    r = EventFileReader(tmp_path / "f")
    assert r.poll() == [payload(0), payload(1)]
    assert len(r.gaps) == 1 and r.gaps[0].skipped == len(garbage)
    assert len(calls) < 20


def test_a_checksummed_header_with_an_absurd_length_is_skipped_as_damage(tmp_path: Path) -> None:
    records = payloads(5)
    head = struct.pack("<Q", 1 << 62)
    bogus = head + struct.pack("<I", masked_crc32c(head)) + b"\x00" * 30
    before = b"".join(frame(p) for p in records[:2])
    (tmp_path / "f").write_bytes(before + bogus + b"".join(frame(p) for p in records[2:]))
    r = EventFileReader(tmp_path / "f")
    assert r.poll() == records
    assert [(g.offset, g.skipped) for g in r.gaps] == [(len(before), len(bogus))]
    assert "over the" in r.gaps[0].reason and str(1 << 62) in r.gaps[0].reason


def test_a_huge_length_value_without_its_checksum_is_skipped_too(tmp_path: Path) -> None:
    records = payloads(5)
    offsets = write(tmp_path / "f", records)
    data = bytearray((tmp_path / "f").read_bytes())
    data[offsets[2]:offsets[2] + 8] = struct.pack("<Q", 0xFFFF_FFFF_FFFF_FF00)
    (tmp_path / "f").write_bytes(bytes(data))
    r = EventFileReader(tmp_path / "f")
    assert r.poll() == records[:2] + records[3:]
    assert [(g.offset, g.skipped) for g in r.gaps] == [(offsets[2], offsets[3] - offsets[2])]


def test_a_record_over_max_record_bytes_is_a_gap_not_a_wait(tmp_path: Path) -> None:
    big = event_pb2.Event(step=1, file_version="x" * 5000).SerializeToString()
    records = [payload(0), big, payload(2)]
    offsets = write(tmp_path / "f", records)
    r = EventFileReader(tmp_path / "f", max_record_bytes=1000)
    assert r.poll() == [payload(0), payload(2)]
    assert [(g.offset, g.skipped) for g in r.gaps] == [(offsets[1], offsets[2] - offsets[1])]


def test_a_record_cut_short_and_followed_by_new_records_loses_only_its_own_bytes(tmp_path: Path) -> None:
    # A writer died inside a record and another appended to the same file: the cut
    # record's length (checksummed, so believed) runs into the next records.
    records = payloads(6)
    torn = frame(payload(99))[:30]
    before = b"".join(frame(p) for p in records[:3])
    (tmp_path / "f").write_bytes(before + torn + b"".join(frame(p) for p in records[3:]))
    r = EventFileReader(tmp_path / "f")
    assert r.poll() == records
    assert [(g.offset, g.skipped, g.reason) for g in r.gaps] == [(len(before), 30, "bad payload checksum")]


def test_a_file_that_is_not_an_event_file_says_so_in_its_gap_and_reads_nothing(tmp_path: Path) -> None:
    text = b"this is a README, not an event file\n" * 200
    (tmp_path / "README").write_bytes(text)
    r = EventFileReader(tmp_path / "README")
    assert r.poll() == []
    assert r.records == 0 and len(r.gaps) == 1
    gap = r.gaps[0]
    assert gap.offset == 0 and "no valid record after it" in gap.reason
    # The last 11 bytes could still be the start of a header being written: pending, not damage.
    assert gap.skipped == len(text) - 11 and r.pending_bytes == 11
    assert r.poll() == [] and r.new_gaps == [] and len(r.gaps) == 1


def test_damage_at_the_end_is_reported_and_records_appended_after_it_are_still_read(tmp_path: Path) -> None:
    path = tmp_path / "f"
    garbage = b"\x07" * 100
    path.write_bytes(frame(payload(0)) + garbage)
    r = EventFileReader(path)
    assert r.poll() == [payload(0)]
    with path.open("ab") as f:
        f.write(frame(payload(1)) + frame(payload(2)))
    assert r.poll() == [payload(1), payload(2)]
    # Each damaged byte is reported once, whatever poll saw it.
    spans = [(g.offset, g.offset + g.skipped) for g in r.gaps]
    assert spans[0][0] == len(frame(payload(0))) and spans[-1][1] == spans[0][0] + 100
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert r.pending_bytes == 0


def test_an_empty_file_has_no_records_no_gap_and_nothing_pending(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"")
    r = EventFileReader(tmp_path / "f")
    assert r.poll() == [] and (r.records, r.gaps, r.pending_bytes) == (0, [], 0)


def test_a_gap_is_reported_once_not_at_every_poll(tmp_path: Path) -> None:
    records = payloads(4)
    (tmp_path / "f").write_bytes(frame(records[0]) + b"junk" * 10 + b"".join(frame(p) for p in records[1:]))
    r = EventFileReader(tmp_path / "f")
    r.poll()
    assert len(r.new_gaps) == 1
    assert r.poll() == [] and r.new_gaps == [] and len(r.gaps) == 1


def test_appended_records_are_read_without_reading_the_old_ones_again(tmp_path: Path) -> None:
    path = tmp_path / "f"
    write(path, payloads(100))
    r = EventFileReader(path)
    assert len(r.poll()) == 100
    read_before = r.bytes_read
    added = b"".join(frame(p) for p in payloads(7, start=100))
    with path.open("ab") as f:
        f.write(added)
    assert r.poll() == payloads(7, start=100)
    assert r.bytes_read - read_before == len(added)
    read_before = r.bytes_read
    assert r.poll() == [] and r.bytes_read == read_before
    assert r.records == 107 and not r.restarted


def test_a_file_replaced_by_another_is_read_again_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "f"
    write(path, payloads(5))
    r = EventFileReader(path)
    r.poll()
    write(tmp_path / "g", payloads(3, start=50))
    os.replace(tmp_path / "g", path)
    assert r.poll() == payloads(3, start=50)
    assert r.restarted and r.restarts == 1 and r.records == 3


def test_a_file_that_shrank_is_read_again_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "f"
    write(path, payloads(5))
    r = EventFileReader(path)
    r.poll()
    with path.open("r+b") as f:  # same inode, shorter
        f.truncate(0)
        f.write(b"".join(frame(p) for p in payloads(2, start=70)))
    assert r.poll() == payloads(2, start=70)
    assert r.restarted and r.records == 2


def test_a_missing_file_raises_a_trace_error_naming_only_its_base_name(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot open gone.tfevents") as err:
        EventFileReader(tmp_path / "gone.tfevents").poll()
    assert str(tmp_path) not in str(err.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "events.out.tfevents.fifo")
    with pytest.raises(NotRegularFile):
        EventFileReader(tmp_path / "events.out.tfevents.fifo").poll()


def test_gap_prints_as_one_line_with_file_bytes_offset_and_reason() -> None:
    assert str(Gap("events.x", 120, 44, "bad payload checksum")) == (
        "events.x: skipped 44 bytes at offset 120 (bad payload checksum)")


def test_random_damage_never_raises_and_never_invents_a_record(tmp_path: Path) -> None:
    records = payloads(40)
    clean = b"".join(frame(p) for p in records)
    rng = random.Random(7)
    for trial in range(60):
        data = bytearray(clean)
        for _ in range(rng.randint(1, 6)):
            at = rng.randrange(len(data))
            if rng.random() < 0.5:
                data[at] ^= 1 << rng.randrange(8)
            else:
                data[at:at] = rng.randbytes(rng.randint(1, 50))
        (tmp_path / "f").write_bytes(bytes(data))
        r = EventFileReader(tmp_path / "f", chunk_bytes=rng.choice([64, 1000, eventfile.CHUNK_BYTES]))
        got = r.poll()
        assert set(got) <= set(records), trial
        assert got == sorted(got, key=records.index), trial  # in file order
        accounted = sum(g.skipped for g in r.gaps) + r.pending_bytes + sum(len(frame(p)) for p in got)
        assert accounted == len(data), trial  # every byte is a record, a gap or pending


def test_resynchronising_lands_on_an_empty_record_too(tmp_path: Path) -> None:
    # A zero-length record is valid framing (its length is 0, its checksum is not):
    # the zero-fill shortcut of the search must not skip it.
    records = [payload(0), b"", payload(2)]
    (tmp_path / "f").write_bytes(frame(records[0]) + bytes(64) + frame(b"") + frame(records[2]))
    r = EventFileReader(tmp_path / "f")
    assert r.poll() == records
    assert [(g.offset, g.skipped) for g in r.gaps] == [(len(frame(records[0])), 64)]
