"""What the writer changes in kept events at each level."""

from __future__ import annotations

import json

from tb_reduce_plugin.reduce.levels import ArgsPolicy, args_policy
from tb_reduce_plugin.reduce.writer import cut_value, transform


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
