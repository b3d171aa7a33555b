"""The levels in one place: bucket counts and what each level writes of args."""

from __future__ import annotations

import json

import pytest

from tb_reduce_plugin.reduce.levels import LEVELS, MAX_RESOLUTION, RESOLUTION, ArgsPolicy, args_policy
from tb_reduce_plugin.reduce.writer import transform


def test_levels_0_and_1_keep_args_level_2_trims_them_and_levels_3_and_4_drop_them() -> None:
    assert [args_policy(level) for level in LEVELS] == [
        ArgsPolicy.KEEP, ArgsPolicy.KEEP, ArgsPolicy.TRIM, ArgsPolicy.DROP, ArgsPolicy.DROP]


@pytest.mark.parametrize("level", LEVELS)
def test_a_view_without_args_drops_them_at_every_level(level: int) -> None:
    assert args_policy(level, drop_args=True) is ArgsPolicy.DROP


def test_every_level_but_the_lossless_one_has_a_bucket_count_finer_levels_more() -> None:
    assert sorted(RESOLUTION) == [lv for lv in LEVELS if lv > 0]
    counts = [RESOLUTION[lv] for lv in sorted(RESOLUTION)]
    assert counts == sorted(counts, reverse=True) and counts[0] <= MAX_RESOLUTION
    assert RESOLUTION == {1: 100_000, 2: 20_000, 3: 5_000, 4: 1_000}  # README's table, SPEC §3


@pytest.mark.parametrize("level", [-1, 5, "2", None, 2.5])
def test_a_level_outside_0_to_4_has_no_args_policy(level: object) -> None:
    with pytest.raises(ValueError, match="level must be one of"):
        args_policy(level)  # type: ignore[arg-type]


def test_each_policy_writes_args_as_docs_semantics_says() -> None:
    ev = {"ph": "X", "name": "k", "args": {"s": "y" * 300, "bind_id": 7}}
    raw = json.dumps(ev).encode()
    assert transform(raw, ArgsPolicy.KEEP) == raw
    trimmed = json.loads(transform(raw, ArgsPolicy.TRIM))["args"]
    assert trimmed == {"s": "y" * 256 + "…", "bind_id": 7, "tb_reduce.cut": True}
    assert json.loads(transform(raw, ArgsPolicy.DROP))["args"] == {"bind_id": 7}


def test_counters_and_metadata_keep_their_args_when_args_are_dropped() -> None:
    for ev in ({"ph": "C", "name": "mem", "ts": 1, "args": {"bytes": 10}},
               {"ph": "M", "name": "thread_name", "args": {"name": "m" * 400}}):
        raw = json.dumps(ev).encode()
        assert transform(raw, ArgsPolicy.DROP) == raw
