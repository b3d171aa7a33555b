"""The block store a server keeps of a Chrome trace's text (`formats.block_store`): chunks
of any size, and the coarse tier wide windows read their events from, give the bytes a
fresh pure-Python pass gives; a tier that grows too big is given up, never half used."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from index_support import reductions as _reductions

from tb_reduce_plugin.formats import block_store
from tb_reduce_plugin.formats.block_store import BlockStore, TierBuilder
from tb_reduce_plugin.reduce.coarse_tier import tier_rows_of
from tb_reduce_plugin.reduce.pipeline import index_file
from tb_reduce_plugin.reduce.plan import default_window
from tests.table_equality import native

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"
KINETO = next((p for p in sorted(CORPUS.glob("*/*/*")) if "resnet50_num_workers_0" in p.name), None)

pytestmark = pytest.mark.skipif(KINETO is None, reason="the public corpus is not here")




def _windows(table: object) -> list:
    lo, hi = default_window(table)
    span = hi - lo
    return [(2, lo + span * a, lo + span * (a + w)) for a, w in ((0.1, 0.5), (0.3, 0.1), (0.7, 0.02))] + [
        (0, lo + span * 0.4, lo + span * 0.45), (1, None, None), (3, lo, lo + span * 0.3)]


def _chunks_read(monkeypatch: pytest.MonkeyPatch) -> list:
    read: list = []
    original = BlockStore._chunk
    monkeypatch.setattr(BlockStore, "_chunk", lambda self, c: read.append((self, c)) or original(self, c))
    return read


@pytest.mark.parametrize("chunk,rows", [(256 * 1024, 1 << 16), (997, 13)], ids=["default", "tiny"])
def test_windows_read_through_the_coarse_tier_give_the_bytes_a_fresh_pure_pass_gives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, rows: int) -> None:
    """Chunks of 997 bytes and 13 events looked at at a time: many events lie across
    chunks, and the tier's parts end anywhere."""
    monkeypatch.setattr(block_store, "TEXT_CHUNK", chunk)
    monkeypatch.setattr(block_store, "_TIER_ROWS", rows)
    monkeypatch.setattr(block_store, "_GATHER_BYTES", 1 << 20 if rows > 13 else 300)
    with native(False):
        pure = index_file(KINETO)
    windows = [(0, None, None)] + _windows(pure.table)
    expected = _reductions(pure, windows)
    served = index_file(KINETO, store_dir=str(tmp_path / "store"))
    if served.source.positions is None:
        pytest.skip("no event positions (the pure build): the store keeps blocks, not chunks of text")
    served.source.tier_rows = tier_rows_of(served.table)
    first = _reductions(served, windows[:1])  # the first full pass keeps the text and makes the tier
    store = served.source._store
    assert store is not None and store.tier is not None
    ids, starts = store.tier
    ph = np.asarray(served.table.ph)
    assert 0 < len(ids) < len(ph) and set(np.unique(ph[ids]).tolist()) >= {ord("X"), ord("i")}
    assert not np.isin(ph[ids], [ord("s"), ord("f"), ord("t")]).any()
    read = _chunks_read(monkeypatch)
    rest = _reductions(served, windows[1:])
    assert first + rest == expected
    tier_chunks = int(np.searchsorted(store._firsts_arr, store.tier_base))
    assert any(c >= tier_chunks for _, c in read)  # the windows read from the tier


def test_a_tier_past_its_share_of_the_text_is_given_up_and_windows_read_the_text(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(block_store, "TIER_JUDGED_AFTER", 0)
    monkeypatch.setattr(block_store, "TIER_MAX_SHARE", 0.01)
    with native(False):
        pure = index_file(KINETO)
    windows = [(0, None, None)] + _windows(pure.table)
    served = index_file(KINETO, store_dir=str(tmp_path / "store"))
    if served.source.positions is None:
        pytest.skip("no event positions (the pure build)")
    served.source.tier_rows = tier_rows_of(served.table)
    assert _reductions(served, windows) == _reductions(pure, windows)
    assert served.source._store is not None and served.source._store.tier is None
    assert sorted(p.name[:6] for p in (tmp_path / "store").iterdir()) == [".block"]  # the tier's files gone


def test_the_tier_gathers_exactly_the_events_selected_whatever_the_reads(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(block_store, "TEXT_CHUNK", 50)
    monkeypatch.setattr(block_store, "_TIER_ROWS", 7)
    monkeypatch.setattr(block_store, "_GATHER_BYTES", 40)  # events gathered a few at a time, some alone
    events = [b'{"n":%d,"pad":"%s"}' % (i, b"x" * (i % 13 if i % 50 else 90)) for i in range(200)]
    text = b"[" + b",\n".join(events) + b"]"
    starts = np.array([text.index(e) for e in events], dtype=np.int64)
    lengths = np.array([len(e) for e in events], dtype=np.int32)
    chosen = np.arange(200) % 3 != 1
    tier = TierBuilder(str(tmp_path), lambda a, b: chosen[a:b], starts, lengths)
    main = BlockStore(str(tmp_path))
    for at in range(0, len(text), 37):  # reads of 37 bytes: events lie across reads, some across three
        piece = text[at:at + 37]
        main.add_text(piece)
        tier.take(piece, at)
    assert tier.finish() is not None
    main.finish()
    main.append_tier(tier)
    tier.close()
    ids, kept_starts = main.tier
    assert ids.tolist() == np.flatnonzero(chosen).tolist()
    assert kept_starts.tolist() == (np.cumsum(lengths[chosen]) - lengths[chosen]).tolist()
    picks = np.array([0, 1, 2, 5, 100, 199])
    got = [raw for batch in main.copy_events(picks, starts[picks], starts[picks] + lengths[picks]) for raw in batch]
    assert got == [events[i] for i in picks.tolist()]
    assert main.tier_base == len(text)


def test_the_native_gather_copies_what_numpy_gathers_and_refuses_ranges_outside_its_text(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tb_reduce_plugin import native as native_module

    module = native_module.scanner_module()
    if module is None:
        pytest.skip("the native scanner is not built here")
    rng = np.random.default_rng(7)
    text = rng.integers(0, 256, 5000, dtype=np.uint8)
    at = np.sort(rng.integers(0, 4900, 300)).astype(np.int64)
    lengths = rng.integers(0, 100, 300).astype(np.int64)
    total = int(lengths.sum())
    monkeypatch.setattr(block_store, "_GATHER_BYTES", 64)
    native_bytes = bytes(block_store._gather(text, at, lengths, total))
    monkeypatch.setattr(block_store, "scanner_module", lambda: None)
    assert native_bytes == block_store._gather(text, at, lengths, total).tobytes()
    assert native_bytes == b"".join(text[a:a + n].tobytes() for a, n in zip(at.tolist(), lengths.tolist()))
    out = bytearray(200)
    for starts, lens in (([4990], [20]), ([-1], [5]), ([0], [-3]), ([0, 10], [150, 100]), ([1 << 62], [1 << 62])):
        with pytest.raises(ValueError, match="outside"):
            module.gather(text, np.array(starts, np.int64), np.array(lens, np.int64), out)
    assert out == bytearray(200)  # nothing written by a refused call
    with pytest.raises(ValueError):
        module.gather(text, np.zeros(2, np.int64), np.zeros(3, np.int64), out)


def test_a_windows_chunks_are_asked_of_the_kernel_run_by_run_before_they_are_read(tmp_path, monkeypatch) -> None:
    """`BlockStore._prefetch`: one WILLNEED per run of consecutive chunks the ranges lie in,
    covering exactly their compressed bytes; nothing past `_PREFETCH_BYTES`; the bytes read
    are the text's either way."""
    import os as _os

    from tb_reduce_plugin.formats import block_store as bs

    text = b"".join(b'{"ph":"X","ts":%d,"name":"n%d"},' % (i, i % 97) for i in range(60000))
    store = bs.BlockStore(str(tmp_path))
    store.add_text(text)
    store.finish()
    asked = []
    monkeypatch.setattr(_os, "posix_fadvise", lambda fd, lo, n, advice: asked.append((lo, n, advice)))
    chunk = bs.TEXT_CHUNK
    starts = np.array([10, chunk - 5, 3 * chunk + 7, 3 * chunk + 100], dtype=np.int64)  # chunks 0-1, then 3
    ends = starts + 20
    got = [raw for batch in store.copy(starts, ends) for raw in batch]
    assert got == [text[a:b] for a, b in zip(starts.tolist(), ends.tolist())]
    offsets = store._offsets
    assert asked == [(offsets[0], offsets[2] - offsets[0], _os.POSIX_FADV_WILLNEED),
                     (offsets[3], offsets[4] - offsets[3], _os.POSIX_FADV_WILLNEED)]
    asked.clear()
    monkeypatch.setattr(bs, "_PREFETCH_BYTES", 10)
    assert [raw for batch in store.copy(starts, ends) for raw in batch] == got and asked == []


@pytest.mark.parametrize("seed", range(6))
def test_ranges_copied_from_kept_chunks_are_the_text_s_bytes(tmp_path, monkeypatch, seed) -> None:
    """`BlockStore.copy`: ranges within one chunk, across several, sharing chunks, give the
    text's bytes; a reader that stops early leaves nothing behind, and a chunk changed on
    disk is an error, never other bytes."""
    from tb_reduce_plugin.errors import KeptTextDamaged
    from tb_reduce_plugin.formats import block_store as bs

    monkeypatch.setattr(bs, "TEXT_CHUNK", 1000)
    rng = np.random.default_rng(seed)
    text = bytes(rng.integers(32, 127, 200_000, dtype=np.uint8))
    store = bs.BlockStore(str(tmp_path))
    store.add_text(text)
    store.finish()
    starts = np.sort(rng.integers(0, len(text) - 5000, int(rng.integers(1, 400))))
    ends = starts + rng.choice([1, 30, 999, 1000, 4500], len(starts))
    want = [text[a:b] for a, b in zip(starts.tolist(), ends.tolist())]
    assert [raw for batch in store.copy(starts, ends) for raw in batch] == want
    for batch in store.copy(starts, ends):  # stopped after its first batch
        assert batch
        break
    with open(store.path, "r+b") as f:  # one chunk's frame changed on disk
        f.seek(store._offsets[len(store._offsets) // 2] + 20)
        f.write(b"\x00\x01\x02")
    with pytest.raises(KeptTextDamaged):
        for _ in store.copy(np.array([0], dtype=np.int64), np.array([len(text)], dtype=np.int64)):
            pass
