"""B/E pairing and X slices as columns."""

from __future__ import annotations

import json

import numpy as np

from tb_reduce_plugin.model.slices import build_slices
from tb_reduce_plugin.model.table import TableBuilder, decode_events


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


def _bits(a: np.ndarray) -> bytes:
    return a.dtype.str.encode() + np.ascontiguousarray(a).tobytes()


def test_a_run_of_x_events_in_memory_gives_the_chunked_paths_slices_bit_for_bit(tmp_path) -> None:
    """An XSpace's table (metadata rows, then only timed X events) takes its slices' times,
    durations, tracks and names as views of its own columns: the same slices, to the bit and
    dtype, as the chunked path writes into a folder, whatever odd durations it holds."""
    rng = np.random.default_rng(3)
    meta = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": t, "args": {"name": f"t{t}"}} for t in (1, 2)]
    xs = [{"ph": "X", "name": f"op{i % 7}", "pid": 1, "tid": 1 + i % 2, "ts": float(i * 3), "dur": float(1 + i % 5)}
          for i in range(400)]
    odd_durations = {"plain": [], "nan": [np.nan], "inf": [np.inf], "-0.0": [-0.0], "negative": [-2.0]}
    checked = 0
    for layout, events in (("metadata first", meta + xs), ("metadata last", xs + meta), ("x only", xs)):
        for kind, values in odd_durations.items():
            t = table(events)
            x_rows = np.flatnonzero(t.ph == t.ph[[e["ph"] for e in events].index("X")])
            for v in values:
                t.dur[rng.choice(x_rows)] = v
            in_memory = build_slices(t)
            folder = tmp_path / f"{layout}-{kind}".replace(" ", "-")
            folder.mkdir()
            t.scratch = str(folder)
            chunked = build_slices(t)
            t.scratch = None
            for f in ("start", "end", "dur", "track", "name", "event", "partner", "unpaired"):
                assert _bits(getattr(in_memory, f)) == _bits(getattr(chunked, f)), (layout, kind, f)
            for f in ("start", "track", "name") + (("dur",) if kind == "plain" else ()):
                col = getattr(in_memory, f)
                assert np.shares_memory(col, getattr(t, {"start": "ts"}.get(f, f))), (layout, f)  # a view...
                assert not col.flags.writeable  # ...that nothing writes through
            checked += 1
    assert checked == 15


def test_x_events_with_a_begin_or_a_gap_between_them_are_copied_as_before() -> None:
    """Where the slices are not one run of X rows (a B/E pair, an untimed X or another event
    between them), the columns are made as before: nothing shares the table's memory."""
    base = [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": float(i), "dur": 0.5} for i in range(10)]
    for extra in ([{"ph": "B", "name": "b", "pid": 1, "tid": 1, "ts": 20.0}, {"ph": "E", "pid": 1, "tid": 1, "ts": 21.0}],
                  [{"ph": "i", "name": "i", "pid": 1, "tid": 1, "ts": 3.5, "s": "t"}]):
        t = table(base[:5] + extra + base[5:])
        s = build_slices(t)
        assert not np.shares_memory(s.start, t.ts) and s.start.flags.writeable
        assert len(s) == 10 + (1 if extra[0]["ph"] == "B" else 0)
