"""The XSpace reader walks the file itself: upb parses only what lies above the events,
each line's events are found in place and decoded a chunk at a time, and with a spill
folder the file's bytes, the columns and the events' positions are files mapped from
there. It must give what parsing the whole file with upb gave (`tests/xspace_whole_oracle`):
the same table, value for value, and the same bytes for every event, natively and in
the pure build, with and without a folder; the same verdict on damaged files; and hold
chunks, not the trace."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from conftest import TESTS

from tb_reduce_plugin.budget import MemoryBudget, OverBudget
from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.formats import xspace, xspace_shape
from tb_reduce_plugin.formats.sources import TraceStream
from tb_reduce_plugin.formats.xspace import read_xspace
from tb_reduce_plugin.formats.xspace_schema import XPlane, XSpace
from tb_reduce_plugin.model import mapped
from tb_reduce_plugin.native import guard_module, scanner_module
from tests.protobuf_wire import event, sfield, stat, tag, varint, vfield
from tests.table_equality import native, table_difference
from tests.xspace_whole_oracle import read_xspace_whole

pytestmark = pytest.mark.usefixtures("no_background_work")  # their traced peaks: no other thread's work in them

ROOT = TESTS.parent
XSPACES = sorted({*(ROOT.parent / "shared" / "corpus").rglob("*.xplane.pb"), *(TESTS / "fixtures").rglob("*.xplane.pb"),
                  *(ROOT / "demo_logdir").rglob("*.xplane.pb")})


def _read(path: Path, spill: Path | None, reader=read_xspace):  # type: ignore[no-untyped-def]
    with TraceStream(str(path)) as s:
        return reader(s) if spill is None or reader is read_xspace_whole else reader(s, None, str(spill))


def _outcome(path: Path, spill: Path | None, reader=read_xspace):  # type: ignore[no-untyped-def]
    try:
        return _read(path, spill, reader)
    except TraceError as exc:
        return exc


def _difference(a, b) -> str | None:  # type: ignore[no-untyped-def]
    """Where two readings differ: the verdict, the table, the metadata, or any event's bytes."""
    if isinstance(a, Exception) or isinstance(b, Exception):
        # the same refusal; upb's words named the whole file's message type, ours the part
        same = type(a) is type(b) and (str(a) == str(b) or all("not a valid XSpace" in str(e) for e in (a, b)))
        return None if same else f"{a!r} against {b!r}"
    found = table_difference(a.table, b.table)
    if found:
        return found
    for name in ("metadata", "meta_json", "extra"):
        if getattr(a, name) != getattr(b, name):
            return name
    if not np.array_equal(a.line_first, b.line_first):
        return "line_first"
    every = np.arange(len(a.table.ph))
    for keep in (xspace.ArgsPolicy.KEEP, xspace.ArgsPolicy.DROP):
        if b"".join(b"".join(c) for c in a.events(every, keep)) != b"".join(b"".join(c) for c in b.events(every, keep)):
            return f"the events' JSON ({keep})"
    return None


@pytest.mark.parametrize("path", XSPACES, ids=lambda p: p.name[-60:])
@pytest.mark.parametrize("natively", [True, False], ids=["native", "pure"])
def test_every_xspace_we_have_reads_as_the_whole_parse_read_it_with_and_without_a_spill_folder(
        path: Path, natively: bool, tmp_path: Path) -> None:
    with native(natively):
        whole = _outcome(path, None, read_xspace_whole)
        assert _difference(whole, _outcome(path, None)) is None
        assert _difference(whole, _outcome(path, tmp_path / "spill")) is None


BIG_ID = 1 << 33  # a metadata id past int32


def _space(lines: list[bytes], plane_extra: bytes = b"") -> bytes:
    """An XSpace of one plane ("/host:CPU") whose event metadata 1, 2 and `BIG_ID` are
    named, and the given serialized lines."""
    plane = XPlane(id=3, name="/host:CPU")
    plane.event_metadata[1].id, plane.event_metadata[1].name = 1, "step"
    plane.event_metadata[BIG_ID].id, plane.event_metadata[BIG_ID].name = BIG_ID, "big step"
    plane.event_metadata[2].id, plane.event_metadata[2].name = 2, "op"
    plane.stat_metadata[7].id, plane.stat_metadata[7].name = 7, "step_num"
    body = plane.SerializeToString() + b"".join(sfield(3, ln) for ln in lines) + plane_extra
    return sfield(1, body) + sfield(4, b"vm")


def _line(*parts: bytes) -> bytes:
    return b"".join(parts)


def _events(n: int, mid: int = 2, first: int = 0) -> bytes:
    return b"".join(sfield(4, event(mid, (first + k) * 1000, 500, [stat(7, vfield(3, k))] if mid in (1, BIG_ID) else []))
                    for k in range(n))


HEAD = vfield(1, 5) + sfield(2, b"main") + vfield(3, 1_700_000_000_000_000_000)


@pytest.mark.parametrize("natively", [True, False], ids=["native", "pure"])
@pytest.mark.parametrize("case", [
    "events among the line's own fields",
    "a line given its name twice",
    "a line whose events come before its fields",
    "an empty line between two",
    "a group in a line",
    "an event field of another wire type",
    "an event running past its line",
    "a line's varint cut short",
    "an unknown field of 1 MB in a line",
    "step markers whose metadata id needs 64 bits",
])
def test_unusual_and_damaged_lines_read_as_the_whole_parse_read_them(case: str, natively: bool,
                                                                     tmp_path: Path) -> None:
    lines = {
        "events among the line's own fields": [_line(_events(3), HEAD, _events(4, first=10), sfield(11, b"shown"))],
        "a line given its name twice": [_line(HEAD, _events(5), sfield(2, b"renamed"))],
        "a line whose events come before its fields": [_line(_events(6, mid=1), HEAD)],
        "an empty line between two": [_line(HEAD, _events(2)), _line(HEAD), _line(HEAD, _events(3))],
        "a group in a line": [_line(HEAD, tag(9, 3) + vfield(1, 4) + tag(9, 4), _events(3))],
        "an event field of another wire type": [_line(HEAD, vfield(4, 12), _events(3))],
        "an event running past its line": [_line(HEAD, _events(2), tag(4, 2) + varint(50) + b"\x08\x01")],
        "a line's varint cut short": [_line(HEAD, _events(2), b"\x18\xff\xff")],
        "an unknown field of 1 MB in a line": [_line(HEAD, sfield(15, b"x" * (1 << 20)), _events(3))],
        "step markers whose metadata id needs 64 bits": [_line(HEAD, _events(3, mid=1), _events(4, mid=BIG_ID, first=5))],
    }[case]
    path = tmp_path / "odd.xplane.pb"
    path.write_bytes(_space(lines))
    with native(natively):
        whole = _outcome(path, None, read_xspace_whole)
        assert _difference(whole, _outcome(path, None)) is None
        assert _difference(whole, _outcome(path, tmp_path / "spill")) is None
    if case == "an event running past its line":
        assert isinstance(whole, TraceError) and "not a valid XSpace" in str(whole)
    if case == "events among the line's own fields":
        assert len(whole.table.ph) - len(whole.meta_json) == 7
    if case == "step markers whose metadata id needs 64 bits":
        assert len(whole.table.step_event) == 7


def _long_line_space(path: Path, events: int) -> None:
    """One line of `events` events, and a step marker event after them."""
    path.write_bytes(_space([_line(HEAD, _events(events), _events(1, mid=1, first=events))]))


def test_a_spilled_read_maps_the_file_columns_and_positions_and_holds_chunks_not_events(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "long.xplane.pb"
    n = 200_000
    _long_line_space(path, n)
    monkeypatch.setattr(xspace, "_CHUNK", 8192)
    peaks = {}
    for label, spill in (("whole", None), ("streamed", tmp_path / "spill")):
        tracemalloc.start()
        trace = _read(path, spill, read_xspace_whole if label == "whole" else read_xspace)
        peaks[label] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        if label == "streamed":
            t = trace.table
            assert all(isinstance(c, np.memmap) for c in (t.ph, t.ts, t.dur, t.track, t.name, t.flow_key, t.cat))
            assert isinstance(trace.lines[0].data, mmap.mmap)
            assert isinstance(trace.lines[0].starts, np.memmap) and isinstance(trace.lines[0].ends, np.memmap)
            assert len(t.step_event) == 1 and len(t.ph) == len(trace.meta_json) + n + 1  # read through the mapping
            assert mapped.shrunk(trace.arrays) is None
        del trace
    # The whole parse holds the file, a Python object per event and the columns; the
    # streamed read holds a block of the file on its way to the folder, a line's positions
    # as it is walked (16 B an event), then a few chunks' decoding and the line's metadata
    # ids (8 B an event).
    # In the pure build upb parses each line whole (its events as bytes objects): a line's worth.
    line = 0 if scanner_module() is not None else xspace_shape.EVENT_BYTES * n + path.stat().st_size
    bound = xspace._SPILL_READ + 16 * n + 8192 * xspace._DECODE_BYTES_PER_EVENT * (xspace._IN_FLIGHT + 1) + line
    assert peaks["streamed"] < bound, peaks
    assert peaks["streamed"] < peaks["whole"] / (2 if line else 3), peaks


def test_a_budget_the_whole_parse_needed_twice_over_reads_a_spilled_xspace(tmp_path: Path) -> None:
    path = tmp_path / "many.xplane.pb"
    lines = [_line(vfield(1, k) + sfield(2, b"t%d" % k) + vfield(3, 1_700_000_000_000_000_000), _events(60_000))
             for k in range(4)]
    path.write_bytes(_space(lines))
    limit = 25 << 20
    with TraceStream(str(path)) as s, pytest.raises(OverBudget):
        read_xspace_whole(s, MemoryBudget(limit).account("whole"))
    with TraceStream(str(path)) as s:
        trace = read_xspace(s, MemoryBudget(limit).account("streamed"), str(tmp_path / "spill"))
    assert len(trace.table.ph) == len(trace.meta_json) + 240_000


def test_a_spill_folder_that_cannot_be_written_says_so_and_the_read_goes_on_in_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = XSPACES[0]
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    with TraceStream(str(path)) as s, pytest.raises(mapped.SpillFailed):
        read_xspace(s, None, str(blocker / "spill"))  # a folder under a file: ENOTDIR
    from tb_reduce_plugin.index.store import IndexStore, parse_spilling

    store = IndexStore(str(tmp_path / "cache"), 1 << 30)
    monkeypatch.setattr(store, "spill_folder", lambda: str(blocker / "spill"))
    index = parse_spilling(store, str(path))
    assert index.spill_dir is None and not isinstance(index.table.ts, np.memmap)


def test_a_server_parse_of_an_xspace_charges_no_mapped_bytes_and_keeps_its_folder_while_it_lives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tb_reduce_plugin.index.store import IndexStore, parse_spilling

    path = max(XSPACES, key=lambda p: p.stat().st_size)
    store = IndexStore(str(tmp_path / "cache"), 1 << 30)
    index = parse_spilling(store, str(path))
    with monkeypatch.context() as m:  # the bytes kept as read (not mapped in place once read: a gzip's)
        m.setattr(xspace, "map_in_place", lambda fd, size, pad: None)
        in_memory = parse_spilling(None, str(path))
    # the file's bytes: the file itself, mapped where it lies; or a copy in the folder (no guard)
    copied = os.path.isfile(os.path.join(index.spill_dir or "", xspace.DATA_FILE))
    assert index.spill_dir is not None and copied != index.source.in_place
    assert index.source.in_place == (guard_module() is not None)
    assert index.table.scratch == index.spill_dir and in_memory.table.scratch is None  # prepared state goes there
    in_memory.table.scratch = index.spill_dir
    assert table_difference(index.table, in_memory.table) is None
    in_memory.table.scratch = None
    # the file's bytes and positions are file-backed: not charged; held in memory they are
    assert index.memory_bytes() + path.stat().st_size <= in_memory.memory_bytes()
    folder = index.spill_dir
    del index
    import gc

    gc.collect()
    assert not os.path.exists(folder)


def test_the_big_xspace_generator_repeats_a_real_profile_later_in_time(tmp_path: Path) -> None:
    source = TESTS / "fixtures" / "traces" / "jax_stalled_step.xplane.pb"
    out = tmp_path / "big.xplane.pb"
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_big_xspace.py"), str(source), "--size-mb", "0.3",
                    "-o", str(out)], check=True, capture_output=True)
    src, big = XSpace.FromString(source.read_bytes()), XSpace.FromString(out.read_bytes())
    per_copy = sum(len(ln.events) for p in src.planes for ln in p.lines)
    copies = sum(len(ln.events) for p in big.planes for ln in p.lines) // per_copy
    assert copies >= 2 and out.stat().st_size >= 0.3 * 2**20 * 0.9
    for p, q in zip(src.planes, big.planes):
        full = [ln for ln in p.lines if len(ln.events)]
        assert len(q.lines) == copies * len(full)
        firsts = [ln.timestamp_ns for ln in q.lines[::len(full)]] if full else []
        assert all(b > a for a, b in zip(firsts, firsts[1:]))  # each copy later than the one before
        for k, ln in enumerate(q.lines):
            assert list(ln.events) == list(full[k % len(full)].events)  # the events' own bytes
    trace = _read(out, tmp_path / "spill")
    steps = len(_read(source, None).table.step_event)
    assert len(trace.table.step_event) == copies * steps


def test_a_plane_whose_id_takes_ten_bytes_on_the_wire_reads(tmp_path: Path) -> None:
    """A negative int64 is a 10-byte varint: upb reads it; the walk above the lines once
    called it "longer than 10 bytes" and refused the file."""
    plane = XPlane(id=-5, name="/host:CPU")
    plane.event_metadata[2].id, plane.event_metadata[2].name = 2, "op"
    body = plane.SerializeToString() + sfield(3, _line(HEAD, _events(3)))
    path = tmp_path / "negative.xplane.pb"
    path.write_bytes(sfield(1, body))
    trace = _read(path, tmp_path / "spill")
    assert trace.metadata["xspace"]["planes"][0]["id"] == -5
    assert len(trace.table.ph) - len(trace.meta_json) == 3


def test_the_walk_down_to_each_lines_events_moves_the_bar_between_the_reading_and_the_decoding(
        tmp_path: Path) -> None:
    """Between reading a big XSpace's bytes and decoding its events, the lines are walked
    (seconds at 1 GB): the bar moves through `WALK_SHARE` of what follows the reading as
    they are, then through the decoding, forwards only."""
    from tb_reduce_plugin.formats import xspace
    from tb_reduce_plugin.reduce import pipeline

    path = tmp_path / "lines.xplane.pb"
    path.write_bytes(_space([_line(vfield(1, k) + sfield(2, b"t%d" % k) + vfield(3, 1_700_000_000_000_000_000),
                                   _events(300)) for k in range(40)]))
    calls: list[int] = []
    pipeline.index_file(path, progress=lambda done, total: calls.append(done))
    size = path.stat().st_size
    read = pipeline.READ_SHARE["xspace"] * size
    walked = size * (pipeline.READ_SHARE["xspace"] + (1 - pipeline.READ_SHARE["xspace"]) * xspace.WALK_SHARE)
    assert calls == sorted(calls) and calls[-1] == size
    walking = [d for d in calls if read < d <= walked]
    assert len(walking) >= 20  # a report per line (each 2.5 % of the file) while walking
    assert len([d for d in calls if walked < d < size]) >= 20  # then per line decoded


def test_the_progress_of_an_xspace_counts_its_decoding_not_only_its_reading(tmp_path: Path) -> None:
    """Reading an XSpace is the quick part (into its folder); decoding its events follows.
    The bar counts the reading for `READ_SHARE` of the file and the decoding for the rest:
    it only moves forward, passes through the decoding, and ends at the file's size."""
    from tb_reduce_plugin.reduce import pipeline

    path = tmp_path / "lines.xplane.pb"
    path.write_bytes(_space([_line(vfield(1, k) + sfield(2, b"t%d" % k) + vfield(3, 1_700_000_000_000_000_000),
                                   _events(3000)) for k in range(5)]))
    calls: list[tuple[int, int]] = []
    index = pipeline.index_file(path, progress=lambda done, total: calls.append((done, total)))
    size = path.stat().st_size
    share = pipeline.READ_SHARE["xspace"]
    assert index.events == len(index.source.meta_json) + 15_000
    dones = [d for d, _ in calls]
    assert dones == sorted(dones) and calls[-1] == (size, size)
    decoding = [d for d in dones if share * size < d < size]
    assert len(decoding) >= 4  # a report per line decoded, between the reading and the end
    # a Chrome trace's bar is its reading, as before
    chrome = next((ROOT.parent / "shared" / "corpus" / "generated" / "torch_cpu_cnn_small").glob("*.pt.trace.json"))
    calls.clear()
    pipeline.index_file(chrome, progress=lambda done, total: calls.append((done, total)))
    assert calls[-1][0] == calls[-1][1] == chrome.stat().st_size and max(d for d, _ in calls) == calls[-1][0]


def test_an_xspaces_event_positions_are_int32_below_2_gib_and_int64_past_it(tmp_path: Path) -> None:
    path = max(XSPACES, key=lambda p: p.stat().st_size)
    for spill in (None, tmp_path / "spill"):
        trace = _read(path, spill)
        assert all(line.starts.dtype == np.int32 and line.ends.dtype == np.int32 for line in trace.lines), spill
        assert trace.arrays[1].dtype == trace.arrays[2].dtype == np.int32
    assert xspace.position_dtype(2**31 - xspace._PAD - 1) is np.int32 and xspace.position_dtype(2**31) is np.int64
