"""Level 0 of an XSpace, written by chunk: the same bytes as event by event, in bounded memory.

`XSpaceTrace.events` formats a chunk of one line's events at once (`_full_events`,
`_bare_events`); `_event` formats one event from protobuf's own parse of it, and is the
reference: every event, whatever its stats hold, must come out byte for byte as it
would from `_event` (and, without args, as the event-by-event formatting always wrote it).
"""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path
from typing import Iterator

import numpy as np
import orjson
import pytest
from conftest import TESTS

import tb_reduce_plugin.formats.xspace as xspace
from tb_reduce_plugin.formats.xspace_schema import XSpaceIndexView
from tb_reduce_plugin.reduce.levels import ArgsPolicy
from tb_reduce_plugin.reduce.pipeline import index_file
from tests.protobuf_wire import double, event, sfield, stat, tag, vfield

pytestmark = pytest.mark.usefixtures("no_background_work")  # their traced peaks: no other thread's work in them

ROOT = TESTS.parent
CORPUS = ROOT.parent / "shared" / "corpus"
XSPACES = sorted(p for p in CORPUS.glob("*/*/*.xplane.pb") if "CORRUPT" not in p.name) if CORPUS.is_dir() else []
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"{CORPUS} is absent")


def write_xspace(path: Path, events: list[bytes], stat_names: dict[int, bytes],
                 metadata: dict[int, tuple[bytes, bytes, list[bytes]]], counters: list[bytes] = ()) -> Path:
    """One plane, one line of raw `events` (and a counter line), written as protobuf would."""
    space = XSpaceIndexView()
    space.hostnames.append(b"box")
    plane = space.planes.add(name=b"/host:CPU", id=7)
    for mid, name in stat_names.items():
        plane.stat_metadata[mid].id = mid
        plane.stat_metadata[mid].name = name
    for mid, (name, display, md_stats) in metadata.items():
        md = plane.event_metadata[mid]
        md.id, md.name, md.display_name = mid, name, display
        for raw in md_stats:
            md.stats.add().MergeFromString(raw)
    line = plane.lines.add(id=1, name=b"ops", timestamp_ns=1_700_000_000_123_456_789)
    line.events.extend(events)
    if counters:
        plane.lines.add(id=2, name=b"_counters_", timestamp_ns=0).events.extend(counters)
    path.write_bytes(space.SerializeToString())
    return path


# ---------------------------------------------------------------- the references


def written(trace: xspace.XSpaceTrace, args: ArgsPolicy) -> list[bytes]:
    return [e for block in trace.events(np.arange(len(trace.table)), args) for e in block]


def one_by_one(trace: xspace.XSpaceTrace, drop_args: bool = False) -> Iterator[bytes]:
    """Every event formatted alone: `_event` (protobuf's parse of it), or, without args,
    the per-event string formatting the writer has always used (times by `repr`)."""
    yield from trace.meta_json
    t = trace.table
    for line in trace.lines:
        for k in range(len(line.starts)):
            i = line.first + k
            if drop_args and not line.counter:
                yield (f'{{"ph":"X","pid":{line.pid},"tid":{line.tid},"ts":{float(t.ts[i])!r},'
                       f'"dur":{float(t.dur[i])!r},"name":{orjson.dumps(t.names[t.name[i]]).decode()}}}').encode()
            else:
                yield trace._event(line, i, k, drop_args)


def assert_same_as_one_by_one(trace: xspace.XSpaceTrace) -> None:
    for policy, drop in ((ArgsPolicy.KEEP, False), (ArgsPolicy.DROP, True)):
        chunked, alone = written(trace, policy), list(one_by_one(trace, drop))
        assert len(chunked) == len(alone)
        wrong = [k for k, (a, b) in enumerate(zip(chunked, alone)) if a != b]
        assert not wrong, f"{policy}: {len(wrong)} events differ, first {chunked[wrong[0]]!r} != {alone[wrong[0]]!r}"


# ---------------------------------------------------------------- real profiles


@needs_corpus
@pytest.mark.parametrize("path", XSPACES, ids=[p.name for p in XSPACES])
def test_every_event_of_real_profiles_is_written_by_chunk_as_it_is_alone(path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xspace, "_WRITE_CHUNK", 1000)  # many chunks, and lines cut across them
    assert_same_as_one_by_one(index_file(path).source)


@needs_corpus
def test_level_0_is_yielded_in_chunks_of_bounded_size_and_holds_a_fraction_of_its_output(
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = CORPUS / "public" / "xprof" / "xprof__convert__test_xplanes__tpu_inference_2.xplane.pb"
    trace = index_file(path).source
    monkeypatch.setattr(xspace, "_WRITE_CHUNK", 256)
    tracemalloc.start()
    try:
        sizes, total = [], 0
        for block in trace.events(np.arange(len(trace.table)), ArgsPolicy.KEEP):
            sizes.append(len(block))
            total += sum(map(len, block))
            del block
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sizes[0] == len(trace.meta_json)  # the metadata events, already held, come first
    assert max(sizes[1:]) <= 256 and sum(sizes) == len(trace.table)
    assert total > 7_000_000 and peak < total / 3, (peak, total)


def test_memory_while_writing_level_0_does_not_grow_with_the_trace(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xspace, "_WRITE_CHUNK", 1024)
    peaks = []
    for n in (10_000, 80_000):
        evs = [event(1 + k % 3, 1000 * k, 500, [stat(1, vfield(4, k)), stat(2, sfield(5, b"file.cc")),
                                                 stat(3, double(2, k / 7))]) for k in range(n)]
        trace = index_file(write_xspace(tmp_path / f"{n}.xplane.pb", evs, {1: b"id", 2: b"_src", 3: b"x"},
                                        {1: (b"a", b"", []), 2: (b"b", b"", []), 3: (b"c", b"", [])})).source
        keep = np.arange(len(trace.table))
        tracemalloc.start()
        try:
            for block in trace.events(keep, ArgsPolicy.KEEP):
                del block
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    assert peaks[1] < 1.5 * peaks[0], peaks  # 8x the events, about the same memory


# ---------------------------------------------------------------- every kind of stat


STAT_NAMES = {1: b"s", 2: b"u", 3: b"i", 4: b"d", 5: b"b", 6: b"r", 7: b"same", 8: b"same", 9: b"md_key",
              10: b"step_num_not", -4: b"negative", 11: "ключ \"q\"\n".encode()}


def kinds() -> list[bytes]:
    """One stat of every value kind and of every odd way to encode one."""
    texts = [b"", b"plain", "ünï €".encode(), b"bad \xff\xfe utf-8", b'quote " back \\ nl \n tab \t nul \x00',
             "\u2028 sep".encode(), b"x" * 300, b"\x1f\x7f"]
    out = [stat(1, sfield(5, t)) for t in texts]
    out += [stat(2, vfield(3, v)) for v in (0, 1, 2**63, 2**64 - 1)]
    out += [stat(3, vfield(4, v)) for v in (0, -1, -(2**63), 2**63 - 1, 12345678901)]
    out += [stat(4, double(2, x)) for x in (0.0, -0.0, 1.5, 1e-7, 1e16, 1e300, 5e-324, float("nan"), float("inf"),
                                            float("-inf"), 123456.789)]
    out += [stat(5, sfield(6, b)) for b in (b"", b"\x00\x01", bytes(range(32)), bytes(range(33)), b"z" * 1000)]
    out += [stat(6, vfield(7, r)) for r in (1, 6, 999, 2**63 + 5)]
    out += [
        stat(11, vfield(4, 1)),  # a key that needs escaping
        stat(12345, vfield(4, 1)),  # no such stat: "stat 12345"
        stat(-4, vfield(4, 1)),  # a negative id
        stat(-99, vfield(4, 1)),
        stat(1),  # no value: null
        b"",  # an empty stat: id 0, no value
        stat(1, sfield(5, b"a") + vfield(4, 3)),  # two values: the last counts
        stat(1, vfield(4, 3) + sfield(5, b"a")),
        vfield(1, 2) + vfield(1, 3) + vfield(4, 8),  # two ids
        stat(3, vfield(4, 5)) + vfield(20, 7) + sfield(21, b"zz") + tag(22, 5) + b"\x01\x02\x03\x04"
        + tag(23, 1) + bytes(8),  # unknown fields of every wire type
        stat(3, tag(4, 2) + b"\x01\x05"),  # a known field with the wrong wire type
        stat(3, tag(2, 0) + b"\x05"),
        stat(3, tag(15, 3) + vfield(1, 2) + tag(15, 4)),  # a group
        vfield(1 << 20, 5) + stat(3, vfield(4, 9)),  # a many-byte tag
        stat(3, vfield(4, 1 << 70 >> 7)),
        stat(3, tag(4, 0) + b"\xff" * 9 + b"\x7f"),  # a 10-byte varint with bits past 64
    ]
    return out


def kinds_space(tmp_path: Path) -> Path:
    stats = kinds()
    rng = random.Random(7)
    events = [event(1, 1000, 10, [s]) for s in stats]  # each kind alone
    events += [event(rng.choice([1, 2, 3, 99]), 1000 * k, 10 * k, rng.sample(stats, rng.randint(0, 6)))
               for k in range(400)]
    events += [
        event(1, 5, 5, [stat(7, vfield(4, 1)), stat(8, vfield(4, 2))]),  # two ids, one name: the key once
        event(1, 5, 5, [stat(1, vfield(4, 1)), stat(3, vfield(4, 2)), stat(1, vfield(4, 3))]),  # a key given twice
        event(2, 5, 5, [stat(9, vfield(4, 1))]),  # a key its metadata's args hold
        event(2, 5, 5, []),  # only its metadata's args
        event(2, 5, 5, [stat(3, vfield(4, 1))]),  # its metadata's args, then its own
        event(3, 5, 5, [stat(1, sfield(5, b"x" * 150_000))]),  # a giant event
        event(3, 5, 5, [b""] * 100_001),  # too many stats to decode
        event(3, 5, 5, [stat(1, vfield(3, 1))], extra=vfield(9, 1) + sfield(10, b"??")),  # unknown event fields
        event(3, 5, 5, [], extra=vfield(5, 3)),  # num_occurrences
        event(3, 5, 5, [stat(1, vfield(3, 1))], extra=tag(4, 0) + b"\x01"),  # stats with the wrong wire type
        vfield(3, 5) + sfield(4, stat(3, vfield(4, 4))) + vfield(1, 1),  # fields in another order
        event(3, 5, 5, [stat(3, tag(4, 0) + b"\xff" * 10 + b"\x01")]),  # an 11-byte varint: a damaged stat
        event(3, 5, 5, [tag(5, 2) + b"\x10abc"]),  # a string running past its stat
        event(1, 0, 0),  # no stats at all
    ]
    metadata = {1: (b"op one", b"", []), 2: (b"%op.2 = f32[] op(...)", b"op.2", [stat(9, sfield(5, b"md")),
                                                                          stat(4, double(2, 2.5))]),
                3: (b"three", b"three", [])}
    counters = [event(1, 100 * k, 0, [stat(4, double(2, k / 3)), stat(1, sfield(5, b"not a number"))])
                for k in range(20)]
    return write_xspace(tmp_path / "kinds.xplane.pb", events, STAT_NAMES, metadata, counters)


def test_every_kind_and_odd_encoding_of_stats_is_written_by_chunk_as_protobuf_reads_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = index_file(kinds_space(tmp_path)).source
    for chunk in (7, 1 << 15):
        monkeypatch.setattr(xspace, "_WRITE_CHUNK", chunk)
        assert_same_as_one_by_one(trace)
    args = [orjson.loads(e).get("args", {}) for e in written(trace, ArgsPolicy.KEEP)]
    assert {"same": 2} in args and {"s": 3, "i": 2} in args  # as a dict keeps a key given twice
    assert any(a.get("tb_reduce.error") == "event has too many stats to decode" for a in args)
    assert any(a.get("tb_reduce.error", "").startswith("corrupt XSpace event") for a in args)
    assert alone_while_written(trace, monkeypatch) < len(trace.table) / 2  # the usual stats: by chunk


def test_damaged_stats_anywhere_in_an_event_are_written_as_protobuf_reads_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytes flipped inside stats (the event's own fields stay whole, as the index checks)."""
    rng = random.Random(11)
    stats = [s for s in kinds() if 0 < len(s) < 400]
    events = []
    for k in range(3000):
        mine = rng.sample(stats, rng.randint(1, 4))
        j = rng.randrange(len(mine))
        damaged = bytearray(mine[j])
        for _ in range(rng.randint(1, 3)):
            damaged[rng.randrange(len(damaged))] = rng.choice([0x00, 0x08, 0x0A, 0x12, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        mine[j] = bytes(damaged)
        events.append(event(rng.choice([1, 2, 3]), 1000 * k, 10, mine))
    path = write_xspace(tmp_path / "damaged.xplane.pb", events, STAT_NAMES,
                        {1: (b"a", b"", []), 2: (b"b", b"bb", [stat(9, vfield(4, 1))]), 3: (b"c", b"", [])})
    trace = index_file(path).source
    monkeypatch.setattr(xspace, "_WRITE_CHUNK", 64)
    assert_same_as_one_by_one(trace)
    assert len(events) - alone_while_written(trace, monkeypatch) > 500  # damage protobuf reads past: by chunk


def alone_while_written(trace: xspace.XSpaceTrace, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many events the chunk path leaves to `_event` (counters are always formatted alone)."""
    calls = []
    event_alone = xspace.XSpaceTrace._event

    def counted(self: xspace.XSpaceTrace, line: xspace._Line, i: int, k: int, drop_args: bool) -> bytes:
        calls.append(i)
        return event_alone(self, line, i, k, drop_args)

    monkeypatch.setattr(xspace.XSpaceTrace, "_event", counted)
    written(trace, ArgsPolicy.KEEP)
    monkeypatch.setattr(xspace.XSpaceTrace, "_event", event_alone)
    return len(calls)
