"""An XSpace read without a spill folder gives its file's bytes back once they are walked
and decoded, and reads the events a plan keeps from the file mapped where it lies
(`xspace._map_in_place`, `mapped.map_in_place`): the same output, byte for byte, as from
the bytes read; the bytes kept where the mapping cannot be vouched for (a gzip, a file
changed since it was opened, no room for the zeros after its end, no guard); and a file
cut short under the mapping refused, never written from the zeros read in its place."""

from __future__ import annotations

import gzip
import mmap
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import TESTS

from tb_reduce_plugin.errors import FileChanged
from tb_reduce_plugin.formats import xspace
from tb_reduce_plugin.formats.sources import TraceStream
from tb_reduce_plugin.formats.xspace import read_xspace
from tb_reduce_plugin.model import mapped
from tb_reduce_plugin.native import guard_module
from tb_reduce_plugin.reduce.pipeline import index_file, reduce_file

ROOT = TESTS.parent
PROFILE = ROOT / "demo_logdir" / "jax_mlp" / "plugins" / "profile" / "2026_11_30_13_59_00" / "vm.xplane.pb"
CORPUS = sorted((ROOT.parent / "shared" / "corpus").rglob("*.xplane.pb"))
GUARDED = guard_module() is not None


def _no_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xspace, "map_in_place", lambda fd, size, pad: None)


def _read(path: Path) -> xspace.XSpaceTrace:
    with TraceStream(str(path)) as s:
        return read_xspace(s)


@pytest.mark.parametrize("level", [0, 2])
@pytest.mark.parametrize("path", [PROFILE, *[p for p in CORPUS if "CORRUPT" not in p.name]], ids=lambda p: p.name[-40:])
def test_the_events_read_from_the_file_mapped_in_place_are_written_as_from_the_bytes_read(
        path: Path, level: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mapped_out, read_out = tmp_path / "mapped.json", tmp_path / "read.json"
    reduce_file(path, mapped_out, level=level)
    with monkeypatch.context() as m:
        _no_mapping(m)
        reduce_file(path, read_out, level=level)
    assert mapped_out.read_bytes() == read_out.read_bytes()


@pytest.mark.skipif(not GUARDED, reason="a mapping in place needs the guard (the native build's _guard)")
def test_an_xspace_read_into_memory_holds_none_of_its_files_bytes_once_read() -> None:
    trace = _read(PROFILE)
    assert trace.lines and all(isinstance(line.data, mmap.mmap) for line in trace.lines)
    buf = trace.arrays[0]
    size = PROFILE.stat().st_size
    assert len(buf) == size + xspace._PAD and not buf.flags.writeable
    assert bytes(buf[:size]) == PROFILE.read_bytes() and not buf[size:].any()
    mapped_bytes = index_file(PROFILE).memory_bytes()
    with pytest.MonkeyPatch.context() as m:
        _no_mapping(m)
        assert index_file(PROFILE).memory_bytes() == mapped_bytes + size + xspace._PAD  # the bytes read, held


def test_a_gzip_xspace_keeps_the_bytes_it_inflated(tmp_path: Path) -> None:
    packed = tmp_path / "vm.xplane.pb"
    packed.write_bytes(gzip.compress(PROFILE.read_bytes()))
    trace = _read(packed)
    assert all(isinstance(line.data, bytes) for line in trace.lines)
    assert np.array_equal(trace.table.ts, _read(PROFILE).table.ts, equal_nan=True)


def test_a_file_written_to_since_it_was_opened_keeps_the_bytes_read(tmp_path: Path) -> None:
    copy = tmp_path / "vm.xplane.pb"
    shutil.copyfile(PROFILE, copy)
    with TraceStream(str(copy)) as s:
        assert s.unread_fd() is not None or not GUARDED
        st = copy.stat()
        os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
        assert s.unread_fd() is None
        trace = read_xspace(s)
    assert all(isinstance(line.data, bytes) for line in trace.lines)


@pytest.mark.skipif(not GUARDED, reason="a mapping in place needs the guard (the native build's _guard)")
def test_a_mapping_in_place_needs_room_for_the_zeros_the_same_size_and_gives_the_bytes(tmp_path: Path) -> None:
    page = mmap.PAGESIZE
    for size, room in ((page - 100, True), (page, False), (page - 31, False), (page - 32, True), (3 * page + 7, True)):
        path = tmp_path / f"f{size}"
        data = os.urandom(size)
        path.write_bytes(data)
        with open(path, "rb") as f:
            got = mapped.map_in_place(f.fileno(), size, 32)
            assert (got is not None) == room, size
            if got is not None:
                mm, buf = got
                assert mm[:] == data and bytes(buf[:size]) == data and len(buf) == size + 32
                assert not buf[size:].any() and not buf.flags.writeable
            assert mapped.map_in_place(f.fileno(), size - 1, 32) is None  # not the file's size now
    assert mapped.map_in_place(os.open(os.devnull, os.O_RDONLY), 0, 32) is None


@pytest.mark.skipif(not GUARDED, reason="a mapping in place needs the guard (the native build's _guard)")
def test_an_xspace_cut_short_under_the_mapping_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    copy = tmp_path / "vm.xplane.pb"
    shutil.copyfile(PROFILE, copy)
    out = tmp_path / "out.json.gz"

    def cut_after_reading(path: str, **kw):  # type: ignore[no-untyped-def]
        index = index_file(path, **kw)
        os.truncate(path, 0)  # as a profiler rewriting the file in place would
        return index

    before = mapped.faults()
    with pytest.raises(FileChanged, match="changed while it was read"):
        reduce_file(copy, out, level=0, indexer=cut_after_reading)
    assert mapped.faults() > before  # the pages past the cut read as zeros, counted
    assert not out.exists() and os.listdir(tmp_path) == ["vm.xplane.pb"]


def _resident_bytes(address: int) -> int:
    """What of the mapping holding `address` is in this process's memory (`/proc/self/smaps`)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "Rss:":
                return int(line.split()[1]) * 1024
    raise AssertionError("no mapping holds the address")


@pytest.mark.skipif(not GUARDED, reason="a mapping in place needs the guard (the native build's _guard)")
def test_an_xspace_read_in_place_holds_the_pages_it_is_at_not_all_it_read() -> None:
    size = PROFILE.stat().st_size
    trace = _read(PROFILE)
    at = trace.arrays[0].ctypes.data
    assert _resident_bytes(at) <= size // 4  # walked and decoded: the pages given back as it went
    rows = np.arange(len(trace.meta_json), len(trace.table.ph))
    written = sum(len(b"".join(chunk)) for chunk in trace.events(rows))  # every event, its stats read
    assert written > size and _resident_bytes(at) <= size // 4
