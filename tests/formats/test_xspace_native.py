"""The native XSpace step reader (`_scan.step_values`) gives what the pure-Python path
gives: on the step markers of a real JAX profile, on every value kind an XStat holds,
and on damaged events, which it leaves to the pure path."""

from __future__ import annotations

import os
import random
import time

import numpy as np
import pytest
from conftest import TESTS

from tb_reduce_plugin import native as native_module
from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.formats import xspace, xspace_shape
from tb_reduce_plugin.formats.xspace import STEP_STAT, _Line, _Plane, _step_values
from tb_reduce_plugin.reduce.pipeline import index_file
from tests.protobuf_wire import sfield, stat, tag
from tests.protobuf_wire import varint as _varint
from tests.table_equality import native

ROOT = TESTS.parent
JAX = ROOT.parent / "shared" / "corpus" / "generated" / "jax_cpu_mlp_small"

pytestmark = pytest.mark.skipif(not native_module.available(), reason="the native scanner is not built here")


def _both(line: _Line, ks: np.ndarray) -> tuple[list, list]:
    with native(True):
        a = _step_values(line, ks)
    with native(False):
        b = _step_values(line, ks)
    return a, b


def test_the_step_markers_of_a_real_jax_profile_are_read_the_same_natively() -> None:
    path = next(JAX.rglob("*.xplane.pb"))
    with native(True):
        fast = index_file(path)
    with native(False):
        slow = index_file(path)
    assert len(fast.table.step_event) == 20
    assert np.array_equal(fast.table.step_event, slow.table.step_event)
    assert np.array_equal(fast.table.step_value, slow.table.step_value)
    for line in fast.source.lines:
        ks = np.arange(len(line.starts))
        a, b = _both(line, ks)
        assert a == b


def _field(number: int, wire: int, payload: bytes) -> bytes:
    return tag(number, wire) + payload


def _stat(mid: int, value: bytes) -> bytes:
    return sfield(4, stat(mid, value))


STEP_ID, OTHER_ID, NAME_ID = 7, 8, 9
VALUES = [
    _field(4, 0, _varint(12)),  # int64
    _field(4, 0, _varint(2**64 - 3)),  # int64 -3
    _field(3, 0, _varint(2**60)),  # uint64 beyond 2**53: no step
    _field(2, 1, np.float64(41.0).tobytes()),  # double
    _field(2, 1, np.float64(np.nan).tobytes()),
    _field(5, 2, _varint(3) + b"123"),  # a string of digits
    _field(5, 2, _varint(3) + b"abc"),
    _field(5, 2, _varint(2) + b"\xff9"),  # invalid UTF-8
    _field(7, 0, _varint(NAME_ID)),  # a reference to a stat name
    _field(7, 0, _varint(99)),  # a reference to nothing
    b"",  # no value
    _field(4, 0, _varint(1)) + _field(2, 1, np.float64(5.5).tobytes()),  # the oneof's last wins
    _field(11, 2, _varint(2) + b"zz") + _field(4, 0, _varint(3)),  # an unknown field
]


def _line(payloads: list[bytes]) -> _Line:
    data = b"".join(payloads)
    ends = np.cumsum([len(p) for p in payloads]).astype(np.int64)
    starts = ends - np.asarray([len(p) for p in payloads], dtype=np.int64)
    plane = _Plane("p", 1, {STEP_ID: STEP_STAT, OTHER_ID: "other", NAME_ID: "77"}, {})
    return _Line(0, plane, 1, 1, False, data, starts, ends)


def test_every_value_kind_of_a_step_stat_reads_the_same_natively() -> None:
    events = [_field(1, 0, _varint(3)) + _stat(OTHER_ID, _field(4, 0, _varint(5))) + _stat(STEP_ID, v) for v in VALUES]
    events.append(_stat(OTHER_ID, _field(4, 0, _varint(5))))  # no step stat at all
    line = _line(events)
    a, b = _both(line, np.arange(len(events)))
    assert a == b
    assert a[0] == 12.0 and a[1] == -3.0 and a[2] is None and a[3] == 41.0 and a[5] == 123.0 and a[8] == 77.0


def test_damaged_events_are_left_to_the_pure_path_and_read_the_same() -> None:
    rng = random.Random(5)
    base = [_field(1, 0, _varint(3)) + _stat(STEP_ID, v) for v in VALUES]
    for _ in range(300):
        events = []
        for e in base:
            b = bytearray(e)
            if b and rng.random() < 0.5:
                i = rng.randrange(len(b))
                b[i] = rng.randrange(256) if rng.random() < 0.7 else b[i] ^ 0x80
            if b and rng.random() < 0.2:
                del b[rng.randrange(len(b)):]
            events.append(bytes(b))
        line = _line(events)
        a, b = _both(line, np.arange(len(events)))
        assert a == b


def test_an_event_with_more_stats_than_the_bound_is_left_unread_both_ways() -> None:
    filler = _stat(OTHER_ID, b"") * 100_100  # past the bound for the batch too
    events = [_stat(STEP_ID, _field(4, 0, _varint(4))) + filler, _stat(STEP_ID, _field(4, 0, _varint(5)))]
    line = _line(events)
    a, b = _both(line, np.arange(2))
    assert a == b == [None, 5.0]


# ---- `_scan.pb_fields`: a line's fields walked in place (`xspace._line_events`) ----------

FUZZ_S = float(os.environ.get("TB_REDUCE_FUZZ_SECONDS", "3"))


def _python_fields(data: bytes, number: int, mask: int) -> list[tuple[int, int]]:
    """What `pb_fields` must find, by the Python walk the shape scan uses (its twin)."""
    out = []
    for n, wire, at, a, b in xspace_shape._fields(data, 0, len(data)):
        if number and n == number and wire == 2:
            out.append((a, b))
        elif not number and n < 64 and mask >> n & 1:
            out.append((at, b))
    return out


def _native_fields(module, data: bytes, number: int, mask: int):  # type: ignore[no-untyped-def]
    n = module.pb_fields(data, 0, len(data), number, mask, None, None)
    if n < 0:
        return None
    at, stop = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    assert module.pb_fields(data, 0, len(data), number, mask, at, stop) == n
    short = np.empty(max(n - 1, 0), dtype=np.int64)
    if n:  # arrays too small: refused, nothing written past them
        assert module.pb_fields(data, 0, len(data), number, mask, short, short) == -1
    return list(zip(at.tolist(), stop.tolist()))


def _real_lines() -> list[bytes]:
    out = []
    for path in sorted(JAX.rglob("*.xplane.pb")) + [TESTS / "fixtures" / "traces" / "jax_stalled_step.xplane.pb"]:
        data = path.read_bytes()
        shape = xspace_shape.scan(data, len(data))
        for pa, pb in shape.plane_spans:
            for a, b, _ in list(xspace_shape.plane_lines(data, pa, pb))[:4]:
                ends = [e - a for *_, e in xspace_shape._fields(data, a, b)]
                for size in (400, 3000):  # the fields that fit, whole; and cut anywhere
                    out.append(data[a:a + max([e for e in ends if e <= size], default=0)])
                out.append(data[a:min(b, a + 700)])
    return out


def test_the_native_field_walk_finds_what_the_python_walk_finds_or_leaves_the_line_to_upb() -> None:
    with native(True):  # on even where the suite runs with it off (`make test-pure`)
        module = native_module.scanner_module()
    mask = xspace._LINE_MASK
    rng = random.Random(int(os.environ.get("TB_REDUCE_FUZZ_SEED", "7")))
    seeds = _real_lines() + [b"", tag(4, 2) + _varint(3) + b"abc", tag(9, 3) + tag(9, 4), _varint(1 << 40) + b"\x00",
                             tag(1 << 29, 0) + b"\x01", b"\x80" * 11, tag(4, 2) + _varint(1 << 62)]
    checked = walked = 0
    ends = time.monotonic() + FUZZ_S
    while True:
        for data in seeds:
            for number, m in ((4, 0), (0, mask)):
                try:
                    expect = _python_fields(data, number, m)
                except TraceError:
                    expect = None
                got = _native_fields(module, data, number, m)
                checked += 1
                if got is not None:
                    walked += 1
                    assert got == expect, (data[:80], number)
                # else refused: upb reads the line whole (the pure path), whose verdict stands
        if time.monotonic() > ends:
            break
        seeds = [_mutate(rng, s) for s in _real_lines()]
    assert walked > checked // 8, (walked, checked)  # many inputs are walked, not all handed to upb


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 4))):
        if not b:
            break
        i = rng.randrange(len(b))
        kind = rng.randrange(5)
        if kind == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif kind == 1:
            b[i] = rng.choice((0x22, 0x08, 0x80, 0xFF, 0x0B, 0x0C, 0x00))
        elif kind == 2:
            del b[i:i + rng.randrange(1, 20)]
        elif kind == 3:
            b[i:i] = b[i:min(len(b), i + rng.randrange(1, 60))]
        else:
            del b[i:]
    return bytes(b)


def test_the_native_field_walk_refuses_ranges_outside_its_buffer_and_wrong_arrays() -> None:
    with native(True):
        module = native_module.scanner_module()
    data = tag(4, 2) + _varint(2) + b"ab"
    with pytest.raises(ValueError):
        module.pb_fields(data, 0, len(data) + 1, 4, 0, None, None)
    with pytest.raises(ValueError):
        module.pb_fields(data, 3, 2, 4, 0, None, None)
    with pytest.raises(TypeError):
        module.pb_fields(data, 0, len(data), 4, 0, np.empty(1, dtype=np.int32), np.empty(1, dtype=np.int32))
    assert module.pb_fields(data, 0, len(data), 4, 0, None, None) == 1


# ---- `_scan.pb_event_columns`: the index's scalar fields of many events at once ----------


def _columns_both(events: list[bytes]) -> tuple[object, object, int]:
    """`decode_event_columns` natively and by the numpy rounds (each a dict or the error's
    text), and what the native call itself answered (0, or -1: left to the rounds)."""
    data = b"".join(events) + b"\x00" * xspace._PAD
    ends = np.cumsum([len(e) for e in events]).astype(np.int64)
    starts = ends - np.asarray([len(e) for e in events], dtype=np.int64)
    buf = np.frombuffer(data, dtype=np.uint8)
    out = []
    for on in (True, False):
        with native(on):
            try:
                cols = xspace.decode_event_columns(buf, starts, ends)
                out.append({k: v.tolist() for k, v in cols.items()})
            except TraceError as exc:
                out.append(str(exc))
    with native(True):
        module = native_module.scanner_module()
    rows = np.zeros((3, len(events)), dtype=np.int64)
    said = module.pb_event_columns(buf, starts, ends, rows[0], rows[1], rows[2]) if events else 0
    return out[0], out[1], said


def _real_events(limit: int = 3000) -> list[bytes]:
    trace = index_file(next(JAX.rglob("*.xplane.pb"))).source
    out = []
    for line in trace.lines:
        for a, b in zip(line.starts[:limit // 10].tolist(), line.ends[:limit // 10].tolist()):
            out.append(bytes(line.data[a:b]))
    return out[:limit]


def test_the_scalar_fields_of_real_events_read_natively_as_the_numpy_rounds_read_them() -> None:
    events = _real_events()
    fast, slow, said = _columns_both(events)
    assert said == 0  # a real profile's events are all read natively
    assert fast == slow
    assert len(set(fast["metadata_id"])) > 5 and max(fast["duration_ps"]) > 0


@pytest.mark.parametrize("case", [
    [_field(1, 0, _varint(5)) + _field(1, 0, _varint(6))],  # the last value wins
    [_field(2, 0, _varint(2**64 - 1)), _field(3, 0, _varint(2**63))],  # past int64: its bits
    [b"", _field(9, 0, _varint(1)) + _field(1, 0, _varint(2))],  # no fields; an unknown one
    [_field(1, 1, b"\x01" * 8) + _field(2, 5, b"\x02" * 4) + _field(3, 2, _varint(2) + b"zz")],  # not varints
    [_field(1, 0, b"\x88\x00")],  # a varint not in its shortest form
    [tag(1 << 28, 0) + _varint(9) + _field(3, 0, _varint(4))],  # a field number upb would refuse
    [_field(1, 0, _varint(3)) + _stat(OTHER_ID, b"") * 70],  # more fields than the rounds' bound
    [_field(1, 3, b"") + _field(1, 4, b"")],  # a group: an invalid tag to the rounds
    [_field(1, 0, b"\x80" * 11)],  # a varint longer than 10 bytes
    [_field(1, 0, _varint(7)), tag(0, 0) + b"\x01"],  # field number 0
    [_field(3, 2, _varint(40) + b"short")],  # a field past its event
    [_field(1, 0, b"\xff" * 9 + b"\x7f")],  # ten bytes whose last is over 1
])
def test_odd_events_read_natively_as_the_rounds_read_them_or_are_left_to_the_rounds(case: list[bytes]) -> None:
    fast, slow, said = _columns_both(case)
    assert fast == slow
    assert said in (0, -1)
    if isinstance(slow, str):
        assert said == -1  # whatever the rounds refuse, the native call leaves to them


def test_mutated_real_events_read_natively_as_the_rounds_read_them_or_are_left_to_the_rounds() -> None:
    rng = random.Random(int(os.environ.get("TB_REDUCE_FUZZ_SEED", "11")))
    events = _real_events(600)
    natively = cases = 0
    ends = time.monotonic() + FUZZ_S
    while time.monotonic() < ends or cases < 200:
        batch = [_mutate(rng, e) if rng.random() < 0.05 else e for e in rng.sample(events, 40)]
        fast, slow, said = _columns_both(batch)
        assert fast == slow, batch
        natively += said == 0
        cases += 1
    assert 0 < natively < cases, (natively, cases)  # both ways are taken


def test_the_native_event_columns_refuse_ranges_outside_the_buffer_and_arrays_of_other_sizes() -> None:
    with native(True):
        module = native_module.scanner_module()
    data = np.frombuffer(_field(1, 0, _varint(3)) + b"\x00" * 8, dtype=np.uint8)
    out = np.zeros((3, 1), dtype=np.int64)
    for starts, ends in (([0], [len(data) + 1]), ([-1], [2])):
        assert module.pb_event_columns(data, np.array(starts), np.array(ends), out[0], out[1], out[2]) == -1
    assert module.pb_event_columns(data, np.array([2]), np.array([1]), out[0], out[1], out[2]) == 0  # empty
    assert out[:, 0].tolist() == [0, 0, 0]
    with pytest.raises(ValueError):
        module.pb_event_columns(data, np.array([0, 0]), np.array([2, 2]), out[0], out[1], out[2])
    assert module.pb_event_columns(data, np.array([0]), np.array([2]), out[0], out[1], out[2]) == 0
    assert out[:, 0].tolist() == [3, 0, 0]
