"""Stamps of checked index files (`index/verified.py`): a reopen reads no file that is as it
was when last checked, and reads again (and so finds damaged) any file written since —
including one written in the same clock tick as its stamp."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from index_support import reduced, stored_folder
from test_index_store import trace  # noqa: F401 (a fixture)

from tb_reduce_plugin.index import store as store_module
from tb_reduce_plugin.index import verified
from tb_reduce_plugin.index.store import IndexStore, indexed
from tb_reduce_plugin.reduce.pipeline import index_file


def _age(folder: Path, seconds: float = 10.0) -> None:
    """Set every file's modification time back, as if the index had been written a while ago."""
    when = time.time() - seconds
    for p in folder.iterdir():
        if p.name != verified.STAMPS:
            os.utime(p, (when, when))


@pytest.fixture()
def reads(monkeypatch) -> list:
    """The names of the stored files a load reads whole to check them."""
    seen: list = []
    real = store_module._crc_of_open

    def counting(f, name, actual, size):
        seen.append(name)
        return real(f, name, actual, size)

    monkeypatch.setattr(store_module, "_crc_of_open", counting)
    return seen


def _stored(trace: Path, tmp_path: Path):  # noqa: F811
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    parsed = index_file(trace)
    assert store.save(parsed)
    reduced(parsed, 2)  # prepares the state plans share...
    assert store.save_prepared(parsed)  # ...and keeps it beside the index
    return store, parsed, stored_folder(store, trace)


def test_a_second_reopen_of_an_unchanged_index_reads_none_of_its_files(trace, tmp_path, reads):  # noqa: F811
    store, parsed, folder = _stored(trace, tmp_path)
    _age(folder)
    first = indexed(store, str(trace))
    assert first.extra.get("stored_index") and first.prepared.ready_fields()
    assert "ts.npy" in reads and any(n.startswith("p0_") for n in reads)  # checked whole, then stamped
    stamped = json.loads((folder / verified.STAMPS).read_text())
    assert "ts.npy" in stamped and "strings.msgpack" in stamped
    reads.clear()
    second = indexed(store, str(trace))
    assert second.extra.get("stored_index") and second.prepared.ready_fields() == first.prepared.ready_fields()
    assert reads == []
    assert reduced(second, 2) == reduced(parsed, 2)


def test_files_the_store_wrote_long_enough_ago_are_stamped_when_written(trace, tmp_path, reads,  # noqa: F811
                                                                        monkeypatch):
    monkeypatch.setattr(verified, "RACY_NS", -60 * 10**9)  # "long enough ago": every file is old enough
    monkeypatch.setattr(verified, "COARSE_RACY_NS", -60 * 10**9)
    store, parsed, folder = _stored(trace, tmp_path)
    assert indexed(store, str(trace)).extra.get("stored_index")
    assert reads == []


def test_a_file_written_after_its_stamp_is_read_again_and_found_damaged(trace, tmp_path, reads):  # noqa: F811
    store, parsed, folder = _stored(trace, tmp_path)
    _age(folder)
    indexed(store, str(trace))
    col = folder / "dur.npy"
    data = bytearray(col.read_bytes())
    data[-3] ^= 0x40
    col.write_bytes(bytes(data))  # same size, same inode, a new modification time
    reads.clear()
    again = indexed(store, str(trace))
    assert not again.extra.get("stored_index") and store.damaged == 1
    assert reads == ["dur.npy"] or "dur.npy" in reads
    assert reduced(again, 2) == reduced(parsed, 2)


def test_a_file_swapped_for_another_with_its_old_time_is_read_again(trace, tmp_path, reads):  # noqa: F811
    """A copy put in place (a new inode) is checked even if its time is set to the old one."""
    store, parsed, folder = _stored(trace, tmp_path)
    _age(folder)
    indexed(store, str(trace))
    col = folder / "dur.npy"
    st = col.stat()
    data = bytearray(col.read_bytes())
    data[-3] ^= 0x40
    swapped = folder / "dur.npy.new"
    swapped.write_bytes(bytes(data))
    os.utime(swapped, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(swapped, col)
    again = indexed(store, str(trace))
    assert not again.extra.get("stored_index") and store.damaged == 1


def test_a_file_modified_within_racy_ns_of_its_stamp_is_not_stamped(tmp_path):
    f = tmp_path / "a.npy"
    f.write_bytes(b"x" * 10)
    now = time.time_ns() - 1  # a fine-grained time, just now
    os.utime(f, ns=(now, now))
    stamps = verified.Stamps(str(tmp_path))
    stamps.stamp("a.npy", 10, 123)
    stamps.save()
    assert not (tmp_path / verified.STAMPS).exists()  # nothing old enough: nothing written
    old = time.time() - 5
    os.utime(f, (old, old))
    stamps.stamp("a.npy", 10, 123)
    stamps.save()
    st = f.stat()
    assert verified.Stamps(str(tmp_path)).matches("a.npy", 10, 123, st)
    assert not verified.Stamps(str(tmp_path)).matches("a.npy", 10, 124, st)  # another manifest's CRC
    assert not verified.Stamps(str(tmp_path)).matches("a.npy", 11, 123, st)


@pytest.mark.parametrize("garbage", [b"\x00{not json", b"[1, 2]", b'{"ts.npy": [1, 2, "x", 4, 5]}',
                                     b'{"ts.npy": [true, 2, 3, 4, 5]}'])
def test_a_garbled_stamps_file_means_a_full_check_not_an_error(trace, tmp_path, reads, garbage):  # noqa: F811
    store, parsed, folder = _stored(trace, tmp_path)
    _age(folder)
    (folder / verified.STAMPS).write_bytes(garbage)
    again = indexed(store, str(trace))
    assert again.extra.get("stored_index") and "ts.npy" in reads
    assert reduced(again, 2) == reduced(parsed, 2)


def test_a_fifo_in_place_of_the_stamps_file_is_not_waited_on(trace, tmp_path, reads):  # noqa: F811
    store, parsed, folder = _stored(trace, tmp_path)
    os.mkfifo(folder / verified.STAMPS)
    assert indexed(store, str(trace)).extra.get("stored_index")
    assert "ts.npy" in reads


def test_on_a_filesystem_of_whole_seconds_a_file_is_stamped_only_two_seconds_after_its_time(tmp_path):
    """A whole-second modification time may be the same for two writes up to a second
    apart: such a file is stamped only once COARSE_RACY_NS have passed."""
    f = tmp_path / "a.npy"
    f.write_bytes(b"x" * 10)
    second = (time.time_ns() // 10**9 - 1) * 10**9  # a whole second, ~1-2 s ago
    os.utime(f, ns=(second, second))
    stamps = verified.Stamps(str(tmp_path))
    stamps.stamp("a.npy", 10, 123)
    assert not stamps.matches("a.npy", 10, 123, f.stat()) or time.time_ns() - second >= verified.COARSE_RACY_NS
    older = second - 3 * 10**9
    os.utime(f, ns=(older, older))
    stamps.stamp("a.npy", 10, 123)
    assert stamps.matches("a.npy", 10, 123, f.stat())
