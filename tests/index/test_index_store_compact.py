"""A stored index keeps each value once (issue 26, "index on disk ≤ 64 B an event"): a
column that holds one value for every row is kept as that value (`fills` in its
manifest) and comes back as a read-only broadcast of it; an XSpace's slices, which are
its X events' rows, are kept as runs of the table's own columns, not as a second copy;
a Chrome trace's event starts are kept int32 below 2 GiB of text. Every view, query and
plan of the reopened index is the fresh parse's, byte for byte; a manifest that lies
about any of it is damage, and the index is made again."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from index_support import copied_xplane, reduced, stored_folder

from tb_reduce_plugin.index import prepared_io
from tb_reduce_plugin.index import store as store_module
from tb_reduce_plugin.index.store import IndexStore, indexed, parse_spilling
from tb_reduce_plugin.model import mapped
from tb_reduce_plugin.model.slices import build_slices
from tb_reduce_plugin.reduce.pipeline import index_file
from tb_reduce_plugin.reduce.plan import default_window


@pytest.fixture()
def xplane(tmp_path) -> Path:
    return copied_xplane(tmp_path)


def _stored_with_state(store: IndexStore, path: Path):  # type: ignore[no-untyped-def]
    """Parsed, stored, planned (so the prepared state exists) and that state kept."""
    parsed = parse_spilling(store, str(path))
    assert store.save(parsed)
    expected = {level: reduced(parsed, level) for level in (0, 2)}
    assert store.save_prepared(parsed)
    return parsed, expected


def _manifest(folder: Path, name: str = "manifest.json") -> dict:
    return json.loads((folder / name).read_text())


def test_an_xspace_keeps_its_one_value_columns_once_and_its_slices_as_runs_of_its_columns(xplane, tmp_path):
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    parsed, expected = _stored_with_state(store, xplane)
    folder = stored_folder(store, xplane)
    n = len(parsed.table)
    fills = _manifest(folder)["fills"]
    assert {"cat.npy", "flow_key.npy", "scope.npy"} <= set(fills) and set(fills.values()) == {n}
    for name in fills:  # one value on disk: a header and one row
        assert np.load(folder / name).shape == (1,)
    spec = json.dumps(_manifest(folder, "prepared.json")["spec"]["slices"])
    for field, column in (("start", "ts"), ("track", "track"), ("name", "name")):
        assert f'"{field}": {{"col": "{column}"' in spec, field  # no copy of the column
    assert "partner.npy" not in spec and _manifest(folder, "prepared.json")["fills"]  # -1 for every slice, once

    reopened = indexed(store, str(xplane))
    t, sl = reopened.table, reopened.prepared.slices
    assert reopened.extra.get("stored_index") and sl is not None
    assert np.shares_memory(sl.start, t.ts) and np.shares_memory(sl.track, t.track)
    assert t.cat.strides == (0,) and not t.cat.flags.writeable and np.array_equal(t.cat, parsed.table.cat)
    assert sl.partner.strides == (0,) and (sl.partner == -1).all()
    assert mapped.held_bytes(t.cat) == 0 and mapped.held_bytes(sl.partner) == 0
    for level in (0, 2):
        assert reduced(reopened, level) == expected[level], level
    lo, hi = default_window(parsed.table)
    window = (lo + (hi - lo) * 0.2, lo + (hi - lo) * 0.3)
    assert reduced(reopened, 1, window) == reduced(index_file(xplane), 1, window)


def test_slices_made_into_a_scratch_folder_are_the_in_memory_ones_and_views_of_the_columns(xplane, tmp_path):
    """A server's parse spills its columns: an XSpace's slices are then views of the mapped
    columns, their ends and rows written to the folder, equal to the in-memory ones."""
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    spilled = parse_spilling(store, str(xplane)).table
    assert isinstance(spilled.ts, np.memmap) and spilled.scratch is not None
    made, fresh = build_slices(spilled), build_slices(index_file(xplane).table)
    for field in ("start", "end", "dur", "track", "name", "event", "partner", "unpaired"):
        a, b = getattr(made, field), getattr(fresh, field)
        assert a.dtype == b.dtype and np.array_equal(a, b), field
    assert np.shares_memory(made.start, spilled.ts)
    assert isinstance(made.end, np.memmap) or made.end.nbytes < mapped.SPILL_AT_LEAST  # small ones stay in memory


def test_a_kineto_trace_keeps_its_event_starts_int32_and_its_partners_once(tmp_path):
    events = [{"ph": "X", "name": f"op{i % 7}", "cat": "cpu_op", "ts": 1000.0 + i, "dur": 0.5, "pid": 1,
               "tid": i % 3, "args": {"i": i}} for i in range(9000)]
    path = tmp_path / "logs" / "run" / "t.pt.trace.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"traceEvents": events}))
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    parsed, expected = _stored_with_state(store, path)
    folder = stored_folder(store, path)
    if parsed.source.positions is not None:  # the native scanner notes them
        starts, lengths = np.load(folder / "pos_starts.npy"), np.load(folder / "pos_lengths.npy")
        assert starts.dtype == np.int32 and np.array_equal(starts, parsed.source.positions.starts)
        assert lengths.dtype == np.int16 and np.array_equal(lengths, parsed.source.positions.lengths)
    assert _manifest(folder, "prepared.json")["fills"]  # every partner -1, among others
    assert "cat.npy" in _manifest(folder)["fills"]  # one category: kept once
    for name in ("track.npy", "name.npy"):  # 7 names, 3 tracks: int16 ids
        assert np.load(folder / name).dtype == np.int16, name
    reopened = indexed(store, str(path))
    sl = reopened.prepared.slices
    assert sl.partner.strides == (0,) and sl.track.dtype == sl.name.dtype == np.int16
    assert np.array_equal(sl.name, parsed.prepared.slices.name)
    for level in (0, 2):
        assert reduced(reopened, level) == expected[level], level


def test_ids_past_int16_are_kept_as_wide_as_they_were(tmp_path):
    names = 33_000  # more than int16 holds
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": f"n{i}", "ts": float(i), "dur": 0.5, "pid": 1,
                                                 "tid": 1} for i in range(names)]}))
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    parsed = parse_spilling(store, str(path))
    expected = reduced(parsed, 2)
    assert store.save(parsed) and store.save_prepared(parsed)
    folder = stored_folder(store, path)
    assert np.load(folder / "name.npy").dtype == np.int32
    reopened = indexed(store, str(path))
    assert reopened.table.name.dtype == np.int32 and reduced(reopened, 2) == expected


def test_starts_of_text_past_2_gib_stay_int64(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "_INT32_TEXT", 0)  # as if the text were longer than 2 GiB
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "i", "name": "a", "ts": float(i), "pid": 1, "tid": 1, "s": "t"}
                                                for i in range(5000)]}))
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    parsed = parse_spilling(store, str(path))
    if parsed.source.positions is None:
        pytest.skip("event positions are noted by the native scanner only")
    assert store.save(parsed)
    assert np.load(stored_folder(store, path) / "pos_starts.npy").dtype == np.int64


@pytest.mark.parametrize("values, one", [
    (np.zeros(5000), True),
    (np.full(5000, np.nan), True),  # the same NaN bits
    (np.concatenate((np.zeros(4999), [-0.0])), False),  # -0.0 is not 0.0, bit for bit
    (np.full(5000, -1, dtype=np.int32), True),
    (np.concatenate((np.full(4000, 7, dtype=np.int16), [8], np.full(999, 7, dtype=np.int16))), False),
    (np.ones(100, dtype=bool), False),  # too short to be worth a fill
    (np.full(3 * store_module.NARROW_CHUNK + 5, 9, dtype=np.int64), True),  # chunk by chunk
])
def test_one_value_is_found_bit_for_bit_and_only_in_arrays_long_enough(values, one):
    got = store_module._fill_value(values)
    assert (got is not None) == one
    if one:
        assert got.shape == (1,) and got.dtype == values.dtype and got.tobytes() == values[:1].tobytes()


def _fills_naming_a_stranger(folder: Path) -> None:
    m = _manifest(folder)
    m["fills"]["nothing.npy"] = 3
    (folder / "manifest.json").write_text(json.dumps(m))


def _fill_of_negative_rows(folder: Path) -> None:
    m = _manifest(folder)
    m["fills"][next(iter(m["fills"]))] = -1
    (folder / "manifest.json").write_text(json.dumps(m))


def _fill_of_a_whole_column(folder: Path) -> None:
    """A column written whole, but the manifest says it holds one value."""
    m = _manifest(folder)
    m["fills"]["ts.npy"] = len(np.load(folder / "ts.npy", mmap_mode="r"))
    (folder / "manifest.json").write_text(json.dumps(m))


def _fill_of_more_rows_than_events(folder: Path) -> None:
    """A broadcast holds no memory, but a pass over 10^15 rows would never end."""
    m = _manifest(folder)
    m["fills"][next(iter(m["fills"]))] = 10**15
    (folder / "manifest.json").write_text(json.dumps(m))


def _fills_not_a_table(folder: Path) -> None:
    m = _manifest(folder)
    m["fills"] = [1, 2]
    (folder / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize("damage", [_fills_naming_a_stranger, _fill_of_negative_rows, _fill_of_a_whole_column,
                                    _fill_of_more_rows_than_events, _fills_not_a_table],
                         ids=lambda f: f.__name__.strip("_"))
def test_a_manifest_that_lies_about_its_repeated_values_is_damage(xplane, tmp_path, damage):
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    parsed, expected = _stored_with_state(store, xplane)
    damage(stored_folder(store, xplane))
    again = indexed(store, str(xplane))
    assert not again.extra.get("stored_index") and store.damaged == 1
    assert reduced(again, 2) == expected[2]
    assert indexed(store, str(xplane)).extra.get("stored_index")  # made again, whole


@pytest.mark.parametrize("lie", [{"lo": 10**12}, {"n": 0}, {"lo": -1}, {"col": "ph"}, {"col": "nothing"},
                                 {"lo": "0"}, {"kind": "i"}], ids=str)
def test_a_run_of_a_column_past_it_or_of_another_kind_drops_the_kept_state(xplane, tmp_path, lie):
    """The state is made again by the next plan (the index itself stays): the same bytes."""
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    parsed, expected = _stored_with_state(store, xplane)
    folder = stored_folder(store, xplane)
    m = _manifest(folder, "prepared.json")
    m["spec"]["slices"]["f"]["start"].update(lie)
    (folder / "prepared.json").write_text(json.dumps(m))
    reopened = indexed(store, str(xplane))
    assert reopened.extra.get("stored_index") and not reopened.prepared.ready("slices")
    assert reduced(reopened, 2) == expected[2]


def test_runs_are_found_only_inside_a_column_of_the_same_layout() -> None:
    ts = np.arange(100, dtype=np.float64)
    columns = {"ts": ts, "name": np.arange(100, dtype=np.int32)}
    assert prepared_io._run_of(ts[10:20], columns) == ("ts", 10)
    assert prepared_io._run_of(ts[10:20].copy(), columns) is None  # equal values, another array
    assert prepared_io._run_of(ts[10:20:2], columns) is None  # every other row
    assert prepared_io._run_of(ts.view(np.int64)[5:9], columns) is None  # another dtype
    assert prepared_io._run_of(np.arange(5, dtype=np.int32), columns) is None
