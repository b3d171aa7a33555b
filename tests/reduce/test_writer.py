"""What the writer changes in kept events at each level."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tb_reduce_plugin import native as native_module
from tb_reduce_plugin.reduce.levels import ArgsPolicy, args_policy
from tb_reduce_plugin.reduce.writer import LIST_LIMIT, STRING_LIMIT, cut_value, transform, transform_all
from tests.table_equality import native


def test_level_0_and_1_write_the_original_bytes() -> None:
    raw = b'{ "ph":"X", "args": {"s": "' + b"x" * 1000 + b'"} }'
    assert transform(raw, args_policy(0)) == raw and transform(raw, args_policy(1)) == raw


def test_level_2_cuts_long_strings_and_lists_at_any_depth_and_marks_the_cut() -> None:
    ev = {"ph": "X", "name": "n" * 300, "args": {"s": "y" * 300, "l": list(range(40)), "d": {"deep": ["z" * 257]}, "ok": "short"}}
    out = json.loads(transform(json.dumps(ev).encode(), ArgsPolicy.TRIM))
    assert out["name"] == "n" * 300  # only args are cut
    assert out["args"]["s"] == "y" * 256 + "…"
    assert out["args"]["l"] == list(range(32))
    assert out["args"]["d"]["deep"] == ["z" * 256 + "…"]
    assert out["args"]["ok"] == "short" and out["args"]["tb_reduce.cut"] is True


def test_level_2_leaves_events_with_nothing_to_cut_unchanged() -> None:
    raw = json.dumps({"ph": "X", "args": {"a": "b" * 200, "l": list(range(32))}}).encode()
    assert transform(raw, ArgsPolicy.TRIM) == raw


def test_levels_3_and_4_drop_args_except_what_draws_or_pairs_events() -> None:
    x = {"ph": "X", "name": "k", "ts": 1.5, "args": {"grid": [1, 2], "bind_id": 7, "flow_out": True}}
    c = {"ph": "C", "name": "mem", "ts": 1, "args": {"bytes": 10}}
    m = {"ph": "M", "name": "thread_name", "args": {"name": "main"}}
    for level in (3, 4):
        expected = {"ph": "X", "name": "k", "ts": 1.5, "args": {"bind_id": 7, "flow_out": True}}
        assert json.loads(transform(json.dumps(x).encode(), args_policy(level))) == expected
        assert json.loads(transform(json.dumps(c).encode(), args_policy(level))) == c
        assert json.loads(transform(json.dumps(m).encode(), args_policy(level))) == m


def test_cut_value_reports_whether_anything_was_cut() -> None:
    assert cut_value({"a": [1, 2], "b": "x"}) == ({"a": [1, 2], "b": "x"}, False)
    assert cut_value(["a"] * 33)[1] is True


def test_level_2_cuts_a_long_string_full_of_escaped_quotes() -> None:
    ev = {"ph": "X", "args": {"s": '"a",' * 100}}
    out = json.loads(transform(json.dumps(ev).encode(), ArgsPolicy.TRIM))
    assert len(out["args"]["s"]) == 257 and out["args"]["tb_reduce.cut"] is True


def test_metadata_events_keep_long_args_at_level_2() -> None:
    raw = json.dumps({"ph": "M", "name": "process_name", "args": {"name": "p" * 400, "l": list(range(50))}}).encode()
    assert transform(raw, ArgsPolicy.TRIM) == raw


def _odd_string(rng: random.Random, n: int) -> str:
    """n characters mixing ASCII, two- to four-byte UTF-8, quotes and control characters
    (escaped by json.dumps), and astral ones (a surrogate pair when escaped)."""
    return "".join(rng.choice("ab\"\\\n\t\u00e9\u4e2d\U0001f600/") for _ in range(n))


def _odd_args(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(5 if depth < 4 else 3)
    if kind == 0:
        return _odd_string(rng, rng.choice([0, 5, 255, 256, 257, 300]))
    if kind == 1:
        return rng.choice([1, -2.5e10, True, None, 0])
    if kind == 2:
        return "x" * rng.choice([10, 256, 257])
    if kind == 3:
        return [_odd_args(rng, depth + 1) for _ in range(rng.choice([0, 1, 31, 32, 33] if depth < 2 else [0, 2]))]
    return {_odd_string(rng, rng.choice([3, 300])): _odd_args(rng, depth + 1) for _ in range(rng.randrange(4))}


@pytest.mark.skipif(not native_module.available(), reason="the native scanner is not built here")
def test_the_native_check_says_a_cut_may_be_needed_exactly_when_python_cuts() -> None:
    """Strings of 255-257 characters in any UTF-8 width or escape (keys as long are never
    cut), lists of 31-33 items, at any depth, written plain and with escapes: the check is
    False exactly when `cut_value` cuts nothing, so level 2 writes the same bytes both ways."""
    module = native_module.scanner_module() or native_module._module
    rng = random.Random(7)
    for i in range(3000):
        args = _odd_args(rng)
        ev = {"ph": "X", "name": "n", "args": args}
        raw = json.dumps(ev, ensure_ascii=bool(i % 2)).encode()
        cut = isinstance(args, (dict, list)) and cut_value(args)[1]
        assert module.args_may_need_cut(raw, STRING_LIMIT, LIST_LIMIT) == cut, raw[:200]
        with native(True):
            fast = transform(raw, ArgsPolicy.TRIM)
        with native(False):
            assert transform(raw, ArgsPolicy.TRIM) == fast


@pytest.mark.skipif(not native_module.available(), reason="the native scanner is not built here")
def test_the_native_check_leaves_damaged_or_unusual_events_to_python() -> None:
    """Whatever the bytes, False only for an event Python reads and finds nothing to cut
    in: bytes flipped or dropped, an escaped "args" key, args given twice, text after it."""
    module = native_module._module
    base = json.dumps({"ph": "X", "args": {"l": list(range(20)), "s": "é" * 250}}, ensure_ascii=False).encode()
    odd = [b'{"ph":"X","\\u0061rgs":{"l":[' + b",".join([b"1"] * 40) + b"]}}",
           b'{"args":{},"args":{"l":[' + b",".join([b"1"] * 40) + b"]}}", base + b" x", base[:-1], b"[1]", b""]
    for raw in odd:
        assert module.args_may_need_cut(raw, STRING_LIMIT, LIST_LIMIT)
    rng = random.Random(11)
    for _ in range(3000):
        raw = bytearray(base)
        for _ in range(rng.randrange(1, 4)):
            at = rng.randrange(len(raw))
            if rng.random() < 0.5:
                raw[at] = rng.choice(b'{}[]",:\\0e.-\x80\xff ')
            else:
                del raw[at:at + rng.randrange(1, 8)]
        if not module.args_may_need_cut(bytes(raw), STRING_LIMIT, LIST_LIMIT):
            ev = json.loads(bytes(raw))  # (msgspec refuses a number past a float's range; the check need not)
            assert isinstance(ev, dict)
            assert not (isinstance(ev.get("args"), (dict, list)) and cut_value(ev["args"])[1])


@pytest.mark.skipif(not native_module.available(), reason="the native scanner is not built here")
def test_a_batch_checked_at_once_names_the_events_checked_one_by_one_would_name() -> None:
    """`events_may_need_cut` over a list lists the positions `args_may_need_cut` is true for,
    in order; an item that is not bytes is listed (Python decides); only a list is taken."""
    module = native_module._module
    rng = random.Random(13)
    batch: list = [json.dumps({"ph": "X", "args": _odd_args(rng)}, ensure_ascii=bool(i % 2)).encode() for i in range(2000)]
    batch += [b"", b"[1]", b'{"args":{},"args":{}}', bytearray(b'{"ph":"X"}'), "text", None, b'{"ph":"X"}']
    expected = [i for i, raw in enumerate(batch) if not isinstance(raw, bytes)
                or module.args_may_need_cut(raw, STRING_LIMIT, LIST_LIMIT)]
    assert module.events_may_need_cut(batch, STRING_LIMIT, LIST_LIMIT) == expected
    assert 0 < len(expected) < len(batch)
    assert module.events_may_need_cut([], STRING_LIMIT, LIST_LIMIT) == []
    with pytest.raises(TypeError):
        module.events_may_need_cut(tuple(batch), STRING_LIMIT, LIST_LIMIT)


@pytest.mark.parametrize("level", [0, 1, 2, 3, 4])
def test_a_batch_transformed_at_once_is_each_event_transformed_natively_or_not(level: int) -> None:
    """`transform_all` (what `write_trace` calls) gives every event of a batch as `transform`
    gives it, with the native check and without, metadata and damaged events included."""
    rng = random.Random(17 + level)
    batch = [json.dumps({"ph": rng.choice("XiCM"), "name": "n", "args": _odd_args(rng)}, ensure_ascii=bool(i % 3)).encode()
             for i in range(600)]
    batch += [b'{"ph":"X","name":"no args"}', b'{"ph":"X","args":[' + b",".join([b"1"] * 40) + b"]}",
              b'{"ph":"X","\\u0061rgs":{"l":[' + b",".join([b"2"] * 40) + b"]}}"]
    policy = args_policy(level)
    expected = [transform(raw, policy, None) for raw in batch]
    for on in (True, False):
        with native(on):
            assert transform_all(list(batch), policy, native_module.scanner_module()) == expected


def _cut_by_recursion(v):  # type: ignore[no-untyped-def]
    """The cut as first written, a call per value at every depth: the reference."""
    if isinstance(v, str):
        return (v[:STRING_LIMIT] + "…", True) if len(v) > STRING_LIMIT else (v, False)
    if isinstance(v, list):
        cut, out = len(v) > LIST_LIMIT, []
        for item in v[:LIST_LIMIT]:
            item, c = _cut_by_recursion(item)
            cut |= c
            out.append(item)
        return out, cut
    if isinstance(v, dict):
        cut, d = False, {}
        for k, item in v.items():
            d[k], c = _cut_by_recursion(item)
            cut |= c
        return d, cut
    return v, False


_strings = st.one_of(st.text(max_size=8), st.text(min_size=250, max_size=270), st.just("é" * 257))
_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), _strings),
    lambda inner: st.one_of(st.lists(inner, max_size=40), st.dictionaries(st.text(max_size=4), inner, max_size=6)),
    max_leaves=120)


@settings(max_examples=400, deadline=None)
@given(_values)
def test_cut_value_cuts_as_a_call_per_value_does_and_leaves_its_input_alone(v) -> None:  # type: ignore[no-untyped-def]
    before = json.dumps(v)
    got, expected = cut_value(v), _cut_by_recursion(v)
    assert json.dumps(got[0]) == json.dumps(expected[0]) and got[1] is expected[1]
    assert json.dumps(v) == before  # the decoded event is cut into new containers, never in place
