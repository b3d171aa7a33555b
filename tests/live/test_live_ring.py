"""The raw ring: bounded in disk blocks, oldest evicted first, preserved evidence, restarts, full disks."""

from __future__ import annotations

import errno
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

from tb_reduce_plugin.live import ring as ring_mod
from tb_reduce_plugin.live.ring import TEMP_PREFIX, RawRing, RingEntry, RingError


def _window(tmp_path: Path, name: str, size: int, seed: int = 0) -> Path:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    p = src / name
    p.write_bytes(random.Random(seed).randbytes(size))
    return p


def _block(path: Path) -> int:
    """The filesystem's block (what the ring rounds each file up to)."""
    return os.statvfs(path).f_frsize


def _on_disk(directory: Path) -> int:
    """Each file's size rounded up to whole blocks: what the ring counts."""
    b = _block(directory)
    return sum(-(-p.stat().st_size // b) * b for p in directory.iterdir() if p.is_file())


def _allocated(directory: Path) -> int:
    """What the filesystem itself says the files take (st_blocks: 512-byte units)."""
    return sum(p.stat().st_blocks * 512 for p in directory.iterdir() if p.is_file())


def _listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _check(r: RawRing, directory: Path) -> None:
    """The ring's own account agrees with the disk, and both are within the cap."""
    assert r.block_bytes == _block(directory)
    assert r.total_bytes == sum(e.disk_bytes for e in r.entries()) == _on_disk(directory)
    assert r.total_bytes <= r.cap_bytes and _allocated(directory) <= r.cap_bytes
    assert not [n for n in _listing(directory) if n.startswith(TEMP_PREFIX)]


def test_cap_never_exceeded_under_a_flood(tmp_path: Path) -> None:
    d = tmp_path / "ring"
    cap = 200_000
    r = RawRing(d, cap, durable=False)
    rng = random.Random(5)
    kept = refused = 0
    for i in range(200):
        size = rng.choice([0, 1, 500, rng.randrange(1, 60_000), rng.randrange(1, 60_000), rng.randrange(150_000, 260_000)])
        e = r.add(_window(tmp_path, f"w{i}.pt.trace.json", size, seed=i), float(i), i + 0.5, move=rng.random() < 0.5)
        kept += e.kept
        refused += not e.kept
        _check(r, d)
        seqs = [x.seq for x in r.entries()]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        if e.kept:
            assert r.entries()[-1] is e and Path(e.path).stat().st_size == size
    assert kept > 100 and refused > 5 and r.evicted > 50


def test_the_cap_bounds_the_blocks_on_disk_not_only_the_bytes(tmp_path: Path) -> None:
    # Issue 24: counted in bytes, a 1 MB ring of small windows held 2,548 files taking 11 MB on disk.
    d = tmp_path / "ring"
    r = RawRing(d, 1 << 20, durable=False)
    for i in range(400):  # 400 windows of 400 bytes: 160 kB of bytes, 3.2 MB of 4 kB blocks
        r.add(_window(tmp_path, "w.json", 400, seed=i), i, i + 0.5)
    assert _allocated(d) <= 1 << 20
    assert len(r) == (1 << 20) // (2 * _block(d))  # each: a block of data, one of record
    _check(r, d)


def test_oldest_evicted_first(tmp_path: Path) -> None:
    d = tmp_path / "ring"
    b = _block(tmp_path)
    r = RawRing(d, 7 * b, durable=False)  # room for three windows of one block and their records
    entries = [r.add(_window(tmp_path, f"w{i}.json", 2_000), i, i + 1) for i in range(8)]
    names = [e.name for e in r.entries()]
    assert names == [f"w{i}.json" for i in range(5, 8)]
    for e in entries[: 8 - len(names)]:
        assert not os.path.exists(e.path) and not os.path.exists(e.record_path)
    _check(r, d)


def test_a_window_over_the_cap_is_refused_and_the_ring_unchanged(tmp_path: Path) -> None:
    d = tmp_path / "ring"
    b = _block(tmp_path)
    r = RawRing(d, 3 * b, durable=False)
    r.add(_window(tmp_path, "a.json", 1_000), 0, 1)
    before, listing = r.entries(), _listing(d)
    big = _window(tmp_path, "big.json", 2 * b + 1)  # three blocks: with its record's, over the cap
    e = r.add(big, 1, 2, move=True)
    assert not e.kept and e.path == "" and "over the ring's cap" in e.note and "big.json" in e.note
    assert f"({4 * b} bytes on disk with its record)" in e.note
    assert r.entries() == before and _listing(d) == listing
    assert big.exists()  # the caller's file is left where it was
    nxt = r.add(_window(tmp_path, "b.json", 10), 2, 3)
    assert nxt.seq == before[-1].seq + 1


def test_records_hold_the_capture_and_the_move_or_copy(tmp_path: Path) -> None:
    d = tmp_path / "ring"
    r = RawRing(d, 1 << 20)
    src = _window(tmp_path, "host 1.pt.trace.json.gz", 1234)
    data = src.read_bytes()
    e = r.add(src, 100.5, 102.25, meta={"window": 3}, trace_us=(10.0, 2_000_010.0))
    assert src.exists() and Path(e.path).read_bytes() == data
    assert os.path.basename(e.path) == "0000000000-host_1.pt.trace.json.gz"  # the suffix kept: still a trace
    doc = json.loads(Path(e.record_path).read_text())
    assert doc == {"version": 1, "seq": 0, "t0": 100.5, "t1": 102.25, "trace_us": [10.0, 2_000_010.0],
                   "name": "host 1.pt.trace.json.gz", "file": os.path.basename(e.path), "bytes": 1234,
                   "meta": {"window": 3}}
    moved = r.add(src, 103, 104, move=True)
    assert not src.exists() and Path(moved.path).read_bytes() == data
    with pytest.raises(ValueError):
        r.add(moved.path, 5, 4)
    with pytest.raises(ValueError):
        r.add(moved.path, 0, 1, meta={"x": object()})
    with pytest.raises(RingError, match="cannot read the trace window"):
        r.add(tmp_path / "absent.json", 0, 1)


def test_preserve_copies_exactly_the_overlapping_windows_and_survives_eviction(tmp_path: Path) -> None:
    d = tmp_path / "ring"
    r = RawRing(d, 20 * _block(tmp_path), durable=False)
    entries: list[RingEntry] = []
    for i in range(6):  # captured [10i, 10i + 8]
        entries.append(r.add(_window(tmp_path, f"w{i}.json", 2_000, seed=i), 10.0 * i, 10.0 * i + 8))
    dest = tmp_path / "logdir" / "run-anomaly-1"
    report = json.dumps({"trigger": "step:2x"}).encode()
    got = r.preserve(19.0, 30.5, dest, files={"anomaly.json": report})
    # w1 [10, 18] ends before 19; w2 [20, 28] and w3 [30, 38] overlap; w4 starts at 40.
    assert [os.path.basename(p) for p in got] == [os.path.basename(entries[i].path) for i in (2, 3)]
    assert sorted(os.listdir(dest)) == sorted([os.path.basename(entries[i].path) for i in (2, 3)]
                                              + [os.path.basename(entries[i].record_path) for i in (2, 3)]
                                              + ["anomaly.json"])
    assert (dest / "anomaly.json").read_bytes() == report
    contents = {p: Path(p).read_bytes() for p in got}
    assert not [n for n in os.listdir(dest.parent) if n.startswith(TEMP_PREFIX)]
    for i in range(40):  # flood: every old window is evicted from the ring
        r.add(_window(tmp_path, f"x{i}.json", 3_000, seed=100 + i), 100.0 + i, 100.5 + i)
        _check(r, d)  # the preserved copies (hard links) never count towards the cap
    assert all(e.seq > entries[-1].seq for e in r.entries())
    assert {p: Path(p).read_bytes() for p in got} == contents
    with pytest.raises(RingError, match="exists already"):
        r.preserve(0, 1000, dest)


def test_preserve_with_nothing_overlapping_makes_the_folder_anyway(tmp_path: Path) -> None:
    r = RawRing(tmp_path / "ring", 10_000, durable=False)
    r.add(_window(tmp_path, "w.json", 10), 0, 1)
    dest = tmp_path / "out"
    assert r.preserve(50, 60, dest, files={"anomaly.json": b"{}"}) == []
    assert os.listdir(dest) == ["anomaly.json"]
    with pytest.raises(ValueError):
        r.preserve(0, 1, tmp_path / "o2", files={"../x": b""})


def test_preserve_copies_when_hard_links_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = RawRing(tmp_path / "ring", 10_000, durable=False)
    e = r.add(_window(tmp_path, "w.json", 100), 0, 1)

    def no_link(src: Any, dst: Any) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(ring_mod.os, "link", no_link)
    got = r.preserve(0, 1, tmp_path / "out")
    assert Path(got[0]).read_bytes() == Path(e.path).read_bytes()
    assert os.stat(got[0]).st_ino != os.stat(e.path).st_ino


def test_restart_resumes_without_duplicates_and_cleans_leftovers(tmp_path: Path) -> None:
    d = tmp_path / "ring"
    b = _block(tmp_path)
    r = RawRing(d, 16 * b, durable=False)
    first = [r.add(_window(tmp_path, f"w{i}.json", 1_000 + i, seed=i), i, i + 1, meta={"i": i}) for i in range(5)]
    # A process killed between a temp file's write and its rename, and one killed between
    # a window's rename and its record's: neither is an entry.
    (d / f"{TEMP_PREFIX}deadbeef").write_bytes(b"half a window")
    (d / f"{TEMP_PREFIX}cafe").mkdir()
    (d / "0000000005-w5.json").write_bytes(b"x" * 700)
    (d / "notes.txt").write_text("not the ring's")  # left alone
    again = RawRing(d, 16 * b, durable=False)
    assert [(e.seq, e.name, e.bytes, e.t0, e.meta) for e in again.entries()] == [
        (e.seq, e.name, e.bytes, e.t0, e.meta) for e in first]
    assert _listing(d) == sorted([os.path.basename(e.path) for e in first]
                                 + [os.path.basename(e.record_path) for e in first] + ["notes.txt"])
    nxt = again.add(_window(tmp_path, "w6.json", 10), 6, 7)
    assert nxt.seq == 6  # after every number seen on disk, the orphan's too
    assert [e.seq for e in again.entries()] == [0, 1, 2, 3, 4, 6]
    # A third start with a smaller cap evicts the oldest until it fits.
    third = RawRing(d, 4 * b + 100, durable=False)
    assert [e.seq for e in third.entries()] == [4, 6]
    assert third.total_bytes == 4 * b == _on_disk(d) - b  # notes.txt takes a block too


def test_restart_drops_damaged_records(tmp_path: Path) -> None:
    d = tmp_path / "ring"
    r = RawRing(d, 50_000, durable=False)
    a, b, c = (r.add(_window(tmp_path, f"w{i}.json", 500, seed=i), i, i + 1) for i in range(3))
    Path(a.record_path).write_text("{not json")
    os.unlink(b.path)  # a record whose data is gone
    with open(c.path, "ab") as f:  # data of the wrong size
        f.write(b"more")
    again = RawRing(d, 50_000, durable=False)
    assert again.entries() == [] and _listing(d) == [] and again.total_bytes == 0
    assert again.add(_window(tmp_path, "w.json", 1), 0, 1).seq == 3


def test_a_kill_between_temp_write_and_rename_is_ignored_on_restart(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "ring"
    r = RawRing(d, 50_000, durable=False)
    r.add(_window(tmp_path, "a.json", 100), 0, 1)

    class Killed(BaseException):
        pass

    def killed(src: Any, dst: Any) -> None:
        raise Killed()

    monkeypatch.setattr(ring_mod.os, "replace", killed)
    with pytest.raises(Killed):
        r.add(_window(tmp_path, "b.json", 5_000), 1, 2)
    monkeypatch.undo()
    # A real kill would leave the temp file: put one back, as it would be.
    (d / f"{TEMP_PREFIX}0123456789abcdef").write_bytes(b"y" * 3_000)
    again = RawRing(d, 50_000, durable=False)
    assert [e.name for e in again.entries()] == ["a.json"]
    assert not [n for n in _listing(d) if n.startswith(TEMP_PREFIX)]
    _check(again, d)


# Where the disk fills: the first or third chunk of the data, or the record. A move within
# one filesystem is a rename: it writes only the record.
@pytest.mark.parametrize("how, fail_at", [(h, f) for h in ("copy", "move-across-filesystems") for f in (1, 3, "record")]
                         + [("move", "record")])
def test_a_full_disk_leaves_nothing_partial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str,
                                            fail_at: Any) -> None:
    move = how != "copy"
    d = tmp_path / "ring"
    r = RawRing(d, 10 << 20, durable=False)
    r.add(_window(tmp_path, "a.json", 100), 0, 1)
    before, listing = r.entries(), _listing(d)
    src = _window(tmp_path, "b.pt.trace.json", 3 * ring_mod._CHUNK + 17)
    data = src.read_bytes()
    real = ring_mod._write_all
    calls = {"n": 0}

    def full(fd: int, chunk: Any) -> None:
        calls["n"] += 1
        record = bytes(chunk[:1]) == b"{"
        if (fail_at == "record" and record) or calls["n"] == fail_at:
            real(fd, chunk[: len(chunk) // 2])  # some of it was written
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, chunk)

    monkeypatch.setattr(ring_mod, "_write_all", full)
    if how == "move-across-filesystems":
        rename = os.rename

        def other_fs(a: Any, b: Any) -> None:
            if os.fspath(a) == os.fspath(src):
                raise OSError(errno.EXDEV, "Invalid cross-device link")
            rename(a, b)

        monkeypatch.setattr(ring_mod.os, "rename", other_fs)
    with pytest.raises(RingError) as err:
        r.add(src, 1, 2, move=move)
    assert err.value.errno == errno.ENOSPC
    assert str(err.value) == f"cannot add the trace window b.pt.trace.json to the raw ring {d}: disk full"
    assert r.entries() == before and _listing(d) == listing
    assert src.read_bytes() == data  # a moved window is put back
    monkeypatch.undo()
    assert r.add(src, 1, 2).seq == before[-1].seq + 2  # a failed add's number is not reused
    assert RawRing(d, 10 << 20).total_bytes == r.total_bytes


def test_a_full_disk_while_preserving_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = RawRing(tmp_path / "ring", 10_000, durable=False)
    r.add(_window(tmp_path, "w.json", 100), 0, 1)

    def full(fd: int, chunk: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ring_mod, "_write_all", full)
    dest = tmp_path / "logdir" / "anomaly"
    with pytest.raises(RingError, match="disk full"):
        r.preserve(0, 1, dest, files={"anomaly.json": b"{}"})
    assert not dest.exists() and os.listdir(dest.parent) == []


def test_bad_caps() -> None:
    for cap in (0, -1, 1.5, True):
        with pytest.raises(ValueError):
            RawRing("/nonexistent-never-created", cap)  # type: ignore[arg-type]


def test_an_unusable_folder_is_one_clear_error(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(RingError, match="cannot create the raw ring folder"):
        RawRing(f / "ring", 100)
