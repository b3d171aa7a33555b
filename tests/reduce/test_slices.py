"""B/E pairing and X slices as columns."""

from __future__ import annotations

import json

import numpy as np

from tb_reduce_plugin.model import TableBuilder, decode_events
from tb_reduce_plugin.slices import build_slices


def table(events: list[dict]):
    b = TableBuilder()
    b.add(decode_events(json.dumps(events).encode()))
    return b.build()


def pairs(events: list[dict]) -> set[tuple[int, int]]:
    s = build_slices(table(events))
    return {(int(e), int(p)) for e, p in zip(s.event, s.partner) if p >= 0}


def test_an_end_closes_the_most_recent_open_begin_of_its_own_track() -> None:
    evs = [
        {"ph": "B", "ts": 1, "pid": 1, "tid": 1, "name": "outer"},
        {"ph": "B", "ts": 2, "pid": 1, "tid": 1, "name": "inner"},
        {"ph": "B", "ts": 2.5, "pid": 1, "tid": 2, "name": "other thread"},
        {"ph": "E", "ts": 3, "pid": 1, "tid": 1},
        {"ph": "E", "ts": 4, "pid": 1, "tid": 1},
        {"ph": "E", "ts": 5, "pid": 1, "tid": 2},
    ]
    assert pairs(evs) == {(1, 3), (0, 4), (2, 5)}


def test_pairing_follows_time_not_file_order() -> None:
    evs = [
        {"ph": "E", "ts": 4, "pid": 1, "tid": 1},
        {"ph": "E", "ts": 3, "pid": 1, "tid": 1},
        {"ph": "B", "ts": 2, "pid": 1, "tid": 1, "name": "inner"},
        {"ph": "B", "ts": 1, "pid": 1, "tid": 1, "name": "outer"},
    ]
    assert pairs(evs) == {(2, 1), (3, 0)}


def test_an_end_with_nothing_open_and_a_begin_never_closed_are_unpaired() -> None:
    evs = [
        {"ph": "E", "ts": 1, "pid": 1, "tid": 1},
        {"ph": "B", "ts": 2, "pid": 1, "tid": 1, "name": "a"},
        {"ph": "E", "ts": 3, "pid": 1, "tid": 1},
        {"ph": "E", "ts": 4, "pid": 1, "tid": 1},
        {"ph": "B", "ts": 5, "pid": 1, "tid": 1, "name": "open"},
    ]
    s = build_slices(table(evs))
    assert pairs(evs) == {(1, 2)}
    assert s.unpaired.tolist() == [0, 3, 4]


def test_x_slices_count_negative_and_missing_durations_as_zero() -> None:
    s = build_slices(table([
        {"ph": "X", "ts": 10, "dur": -5, "pid": 1, "tid": 1},
        {"ph": "X", "ts": 20, "pid": 1, "tid": 1},
        {"ph": "X", "ts": 30, "dur": 2.5, "pid": 1, "tid": 1},
        {"ph": "X", "pid": 1, "tid": 1},  # no ts: not a slice
    ]))
    assert np.array_equal(s.end - s.start, [0, 0, 2.5])


def test_pairing_a_random_sequence_matches_a_stack_walk() -> None:
    rng = np.random.default_rng(7)
    evs = [{"ph": "B" if rng.random() < 0.55 else "E", "ts": float(rng.integers(0, 50)), "pid": 1,
            "tid": int(rng.integers(0, 3)), "name": "n"} for _ in range(400)]
    expected = set()
    stacks: dict = {}
    for i in sorted(range(len(evs)), key=lambda i: (evs[i]["tid"], evs[i]["ts"], i)):
        st = stacks.setdefault(evs[i]["tid"], [])
        if evs[i]["ph"] == "B":
            st.append(i)
        elif st:
            expected.add((st.pop(), i))
    assert pairs(evs) == expected


def test_nesting_depth_counts_enclosing_slices_of_the_same_track() -> None:
    s = build_slices(table([
        {"ph": "X", "ts": 0, "dur": 10, "pid": 1, "tid": 1, "name": "step"},
        {"ph": "X", "ts": 0, "dur": 4, "pid": 1, "tid": 1, "name": "child starts with parent"},
        {"ph": "X", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "name": "grandchild"},
        {"ph": "X", "ts": 4, "dur": 3, "pid": 1, "tid": 1, "name": "sibling starts where the first ends"},
        {"ph": "X", "ts": 2, "dur": 1, "pid": 1, "tid": 2, "name": "other track"},
        {"ph": "B", "ts": 5, "pid": 1, "tid": 1, "name": "in sibling"},
        {"ph": "E", "ts": 6, "pid": 1, "tid": 1},
    ]))
    by_event = dict(zip(s.event.tolist(), s.depth.tolist()))
    assert by_event == {0: 0, 1: 1, 2: 2, 3: 1, 4: 0, 5: 2}
    assert [int(s.event[i]) for i in s.order] == [0, 1, 2, 3, 5, 4]
