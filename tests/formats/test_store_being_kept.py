"""A window asked while the server keeps a gzip's text (`ChromeJsonEvents.keep_store`)
reads its events from the chunks kept so far and from the text's tail the first view
kept, once the keeping has passed them, instead of waiting for the whole store; what it
reads before the keeping's checksum has spoken is checked as events read in place are."""

from __future__ import annotations

import gzip
import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from tb_reduce_plugin.errors import FileChanged
from tb_reduce_plugin.formats import block_store, chrome_json
from tb_reduce_plugin.formats.block_store import BlockStore
from tb_reduce_plugin.reduce.pipeline import index_file

EVENTS = 20_000


def _text() -> bytes:
    events = [{"ph": "X", "name": f"op{i % 97}", "ts": i * 10, "dur": 5, "pid": 1, "tid": i % 3,
               "args": {"i": i, "pad": "x" * (i % 50)}} for i in range(EVENTS)]
    return json.dumps({"traceEvents": events}, indent=1).encode()


def _write(path: Path, text: bytes) -> None:
    path.write_bytes(gzip.compress(text, compresslevel=0, mtime=0))  # stored: its size is the text's


@pytest.fixture()
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A gzip trace indexed as the server does, its first view read (the tail kept)."""
    monkeypatch.setattr(chrome_json, "TAIL_BYTES", 4096)
    path = tmp_path / "t.json.gz"
    _write(path, _text())
    index = index_file(path, store_dir=str(tmp_path / "store"))
    source = index.source
    if source.positions is None:
        pytest.skip("no event positions (the pure build)")
    source.defer_store = True
    for _ in source.events(np.arange(EVENTS)):  # the first view's pass
        pass
    return path, source


def _held_after(monkeypatch: pytest.MonkeyPatch, covered: int) -> tuple[threading.Event, threading.Event]:
    """The keeping stops once it has kept `covered` bytes of text, until told to go on."""
    held, go = threading.Event(), threading.Event()
    original = BlockStore._write

    def write(self: BlockStore, frames, sizes) -> None:  # every chunk kept goes through here
        original(self, frames, sizes)
        if self.covered >= covered and not held.is_set():
            held.set()
            assert go.wait(30)

    monkeypatch.setattr(BlockStore, "_write", write)
    return held, go


def _wanted(source) -> np.ndarray:
    """Events in the first fifth of the text, and the last few (in the kept tail)."""
    starts = source.positions.starts
    return np.concatenate([np.flatnonzero(starts < source.positions.text_bytes // 5)[::7], np.arange(EVENTS - 5, EVENTS)])


def test_events_the_keeping_has_passed_are_read_at_once_from_what_is_kept_and_the_tail(
        served, monkeypatch: pytest.MonkeyPatch) -> None:
    path, source = served
    text = gzip.decompress(path.read_bytes())
    assert source._tail == (len(text) - 4096, text[-4096:])
    held, go = _held_after(monkeypatch, len(text) // 2)
    keeper = threading.Thread(target=source.keep_store)
    keeper.start()
    try:
        assert held.wait(30)
        want = _wanted(source)
        got = [raw for batch in source.events(want) for raw in batch]  # while the keeping is held
        assert not source.has_store
    finally:
        go.set()
        keeper.join(30)
    starts, lengths = source.positions.starts[want], source.positions.lengths[want]
    assert got == [text[s:s + n] for s, n in zip(starts.tolist(), lengths.tolist())]
    assert source.has_store


def test_a_file_rewritten_in_place_before_it_was_kept_is_refused_not_misread(
        served, monkeypatch: pytest.MonkeyPatch) -> None:
    path, source = served
    text = gzip.decompress(path.read_bytes())
    st = os.stat(path)
    with open(path, "r+b") as f:  # every event one byte later, in place, the same size
        f.write(gzip.compress(b" " + text[:-1], compresslevel=0, mtime=0))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    held, go = _held_after(monkeypatch, len(text) // 2)
    keeper = threading.Thread(target=lambda: pytest.raises(FileChanged, source.keep_store))
    keeper.start()
    try:
        assert held.wait(30)
        with pytest.raises(FileChanged, match="changed since it was read"):
            list(source.events(_wanted(source)))
    finally:
        go.set()
        keeper.join(30)
    assert not source.has_store  # its checksum said so at the end


def test_a_window_of_more_events_than_a_tier_holds_waits_for_the_whole_store(
        served, monkeypatch: pytest.MonkeyPatch) -> None:
    path, source = served
    monkeypatch.setattr(chrome_json, "TIER_MAX_EVENTS", 10)
    held, go = _held_after(monkeypatch, 1)
    keeper = threading.Thread(target=source.keep_store)
    keeper.start()
    out: list = []
    reader = threading.Thread(target=lambda: out.extend(source.events(np.arange(20))))
    try:
        assert held.wait(30)
        reader.start()
        reader.join(0.5)
        assert reader.is_alive()  # 20 events: not read early, each checked; it waits
    finally:
        go.set()
        keeper.join(30)
        reader.join(30)
    assert source.has_store and sum(map(len, out)) == 20


def test_the_store_being_kept_hands_out_whole_chunks_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(block_store, "TEXT_CHUNK", 100)
    store = BlockStore(str(tmp_path))
    store.add_text(b"a" * 250)
    part = store.partial()
    assert store.covered == part.covered == 200  # the 50 bytes pending are not kept yet
    assert b"".join(b for batch in part.copy(np.array([0, 150]), np.array([10, 200])) for b in batch) == b"a" * 60
    store.add_text(b"b" * 100)
    assert part.covered == 200 and store.partial().covered == 300
    store.close(remove=True)
    assert part.copy(np.array([0]), np.array([5])).__next__() == [b"aaaaa"]  # its own descriptor: still readable


def test_a_store_being_kept_whose_path_now_names_another_file_hands_out_nothing(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(block_store, "TEXT_CHUNK", 100)
    store = BlockStore(str(tmp_path))
    store.add_text(b"a" * 250)
    (tmp_path / "other").write_bytes(b"x" * 1000)
    os.replace(tmp_path / "other", store.path)  # another file at the store's path
    assert store.partial() is None
