"""The native XSpace step reader (`_scan.step_values`) gives what the pure-Python path
gives: on the step markers of a real JAX profile, on every value kind an XStat holds,
and on damaged events, which it leaves to the pure path."""

from __future__ import annotations

import random

import numpy as np
import pytest
from conftest import TESTS

from tb_reduce_plugin import native as native_module
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
