"""DiskCache (entries of a body and its metadata: atomic, checked, bounded, survives restarts,
streamed; a directory that cannot be written moves bodies to memory, charged to the budget),
IndexCache (parsed indexes, dropped when the budget needs room unless in use) and
SingleFlight (one computation per key however many callers)."""

from __future__ import annotations

import gc
import gzip
import logging
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
from plugin_support import require_corpus, torch_trace_gz

from tb_reduce_plugin.budget import Account, BudgetBusy, MemoryBudget, OverBudget
from tb_reduce_plugin.serve.cache import MAGIC, DiskCache, FileBody, IndexCache, MemoryBody, SingleFlight, key_digest

# Real payloads: what the plugin stores is gzip bytes and its stats, so store gzip bytes of a real trace.
KEY_A, KEY_B, KEY_C, KEY_D = (key_digest(["trace", 1, "input_index", f"/logdir/{n}", 123, 456, 2, None, None])
                              for n in "abcd")
META = b'{"input":{"file":"vm.pt.trace.json.gz","events":4821},"kept":1234}'
HEADER = len(MAGIC) + 8 + 8 + 32 + 32  # magic, body length, meta length, SHA-256 of each
KB = 1024
MB = 1024 * KB
LOGGER = "tb_reduce_plugin.serve.cache"


@pytest.fixture(scope="module")
def payload() -> bytes:
    require_corpus()
    return torch_trace_gz()


def entries(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


def read(cache: DiskCache, digest: str) -> bytes | None:
    entry = cache.open(digest)
    if entry is None:
        return None
    assert entry.body is not None
    return entry.body.read()


def spooled(cache: DiskCache, digest: str, data: bytes, budget: MemoryBudget, piece: int = 64 * KB):
    """A body written the way a reduction writes it: piece by piece, then sealed."""
    spool = cache.spool(digest, budget)
    for at in range(0, len(data), piece):
        assert spool.write(data[at:at + piece]) == len(data[at:at + piece])
    return spool.finish(META)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


# ---- entries -----------------------------------------------------------------------


def test_a_put_entry_comes_back_byte_identical_with_its_meta(tmp_path: Path, payload: bytes) -> None:
    cache = DiskCache(str(tmp_path), 100 * MB)
    assert cache.usable and cache.open(KEY_A) is None and cache.misses == 1
    cache.put(KEY_A, META, payload)
    entry = cache.open(KEY_A)
    assert entry is not None and entry.meta == META and isinstance(entry.body, FileBody)
    got = entry.body.read()
    assert got == payload and entry.body.length == len(payload) and gzip.decompress(got).lstrip().startswith(b"{")
    assert b"".join(entry.body.chunks(4096)) == payload
    assert cache.hits == 1 and entries(tmp_path) == {KEY_A + ".entry"}  # no temp file left behind
    size = (tmp_path / (KEY_A + ".entry")).stat().st_size
    assert cache.total_bytes() == size == HEADER + len(payload) + len(META)


def test_key_digests_are_stable_and_tell_keys_apart() -> None:
    key = ["trace", 1, "/a", 10, 20, "auto", 1.5, 2.5]
    assert key_digest(key) == key_digest(list(key)) and len(key_digest(key)) == 64
    assert key_digest(key) != key_digest(key[:-1] + [2.6]) != key_digest(key[:5] + [2] + key[6:])


def test_entries_survive_a_restart(tmp_path: Path, payload: bytes) -> None:
    DiskCache(str(tmp_path), 100 * MB).put(KEY_A, META, payload)
    again = DiskCache(str(tmp_path), 100 * MB)
    entry = again.open(KEY_A)
    assert entry is not None and entry.meta == META and entry.body is not None and entry.body.read() == payload
    assert again.total_bytes() == (tmp_path / (KEY_A + ".entry")).stat().st_size


def test_overwriting_a_key_replaces_its_body_and_meta(tmp_path: Path, payload: bytes) -> None:
    cache = DiskCache(str(tmp_path), 100 * MB)
    cache.put(KEY_A, META, payload)
    cache.put(KEY_A, b'{"kept":1}', payload[:1000])
    entry = cache.open(KEY_A)
    assert entry is not None and entry.meta == b'{"kept":1}' and entry.body is not None
    assert entry.body.read() == payload[:1000] and len(entries(tmp_path)) == 1
    assert cache.total_bytes() == HEADER + 1000 + len(b'{"kept":1}')


def test_an_empty_body_and_empty_meta_are_an_entry(tmp_path: Path) -> None:
    cache = DiskCache(str(tmp_path), 100 * MB)
    cache.put(KEY_A, b"", b"")
    entry = cache.open(KEY_A)
    assert entry is not None and entry.meta == b"" and entry.body is not None
    assert entry.body.read() == b"" and entry.body.length == 0 and list(entry.body.chunks()) == []


def test_opening_without_the_body_gives_the_meta_and_does_not_read_the_body(tmp_path: Path, payload: bytes) -> None:
    cache = DiskCache(str(tmp_path), 100 * MB)
    cache.put(KEY_A, META, payload)
    path = tmp_path / (KEY_A + ".entry")
    raw = bytearray(path.read_bytes())
    raw[HEADER + len(payload) // 2] ^= 0x01  # damage the body only
    path.write_bytes(bytes(raw))
    entry = cache.open(KEY_A, with_body=False)
    assert entry is not None and entry.meta == META and entry.body is None  # the body was not read
    assert cache.hits == 1 and cache.damaged == 0 and path.exists()
    assert cache.open(KEY_A) is None and cache.damaged == 1 and not path.exists()  # reading it finds the damage


DAMAGES = ["flip a body byte", "flip a meta byte", "flip the body length", "flip the meta length",
           "flip a body checksum byte", "truncate", "append a byte", "empty", "wrong magic"]


def damage_entry(path: Path, damage: str, body_len: int) -> None:
    raw = bytearray(path.read_bytes())
    if damage == "flip a body byte":
        raw[HEADER + body_len // 2] ^= 0x01
    elif damage == "flip a meta byte":
        raw[-3] ^= 0x01
    elif damage == "flip the body length":
        raw[len(MAGIC) + 2] ^= 0x40
    elif damage == "flip the meta length":
        raw[len(MAGIC) + 8] ^= 0x01
    elif damage == "flip a body checksum byte":
        raw[len(MAGIC) + 16 + 5] ^= 0x01
    elif damage == "truncate":
        raw = raw[: len(raw) - 100]
    elif damage == "append a byte":
        raw += b"\0"
    elif damage == "empty":
        raw = bytearray()
    else:
        raw[0:1] = b"X"
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_entry_is_a_miss_and_is_removed_and_rebuilt(tmp_path: Path, payload: bytes, damage: str) -> None:
    cache = DiskCache(str(tmp_path), 100 * MB)
    cache.put(KEY_A, META, payload)
    path = tmp_path / (KEY_A + ".entry")
    damage_entry(path, damage, len(payload))
    assert cache.open(KEY_A) is None
    assert cache.damaged == 1 and cache.misses == 1 and cache.hits == 0 and not path.exists()
    assert cache.total_bytes() == 0
    cache.put(KEY_A, META, payload)  # rebuilt
    assert read(cache, KEY_A) == payload


@pytest.mark.parametrize("damage", ["flip a meta byte", "flip the meta length", "truncate", "empty", "wrong magic"])
def test_damage_to_the_meta_or_header_is_found_without_reading_the_body(tmp_path: Path, payload: bytes,
                                                                        damage: str) -> None:
    cache = DiskCache(str(tmp_path), 100 * MB)
    cache.put(KEY_A, META, payload)
    path = tmp_path / (KEY_A + ".entry")
    damage_entry(path, damage, len(payload))
    assert cache.open(KEY_A, with_body=False) is None
    assert cache.damaged == 1 and not path.exists() and cache.total_bytes() == 0


def test_damage_found_after_a_restart_is_also_a_miss(tmp_path: Path, payload: bytes) -> None:
    DiskCache(str(tmp_path), 100 * MB).put(KEY_A, META, payload)
    path = tmp_path / (KEY_A + ".entry")
    path.write_bytes(path.read_bytes()[:-1])  # a crash mid-write that left a short file (no atomic rename)
    again = DiskCache(str(tmp_path), 100 * MB)
    assert again.open(KEY_A) is None and not path.exists() and again.total_bytes() == 0 and again.damaged == 1


# ---- the bound ---------------------------------------------------------------------------


def age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_eviction_keeps_the_most_recently_used_entries_within_the_bound(tmp_path: Path, payload: bytes) -> None:
    value = payload[:10_000]
    entry = HEADER + len(value) + len(META)
    cache = DiskCache(str(tmp_path), 3 * entry)
    for seconds, key in zip((3000, 2000, 1000), (KEY_A, KEY_B, KEY_C)):  # A oldest, then B, then C
        cache.put(key, META, value)
        age(tmp_path / (key + ".entry"), seconds)
    assert read(cache, KEY_A) == value  # a hit makes A the most recently used
    cache.put(KEY_D, META, value)  # one over the bound: the least recently used (B) goes
    assert entries(tmp_path) == {KEY_A + ".entry", KEY_C + ".entry", KEY_D + ".entry"}
    assert cache.open(KEY_B) is None and cache.total_bytes() == 3 * entry <= cache.max_bytes


def test_opening_only_the_meta_also_counts_as_a_use(tmp_path: Path, payload: bytes) -> None:
    value = payload[:10_000]
    entry = HEADER + len(value) + len(META)
    cache = DiskCache(str(tmp_path), 2 * entry)
    for seconds, key in zip((2000, 1000), (KEY_A, KEY_B)):
        cache.put(key, META, value)
        age(tmp_path / (key + ".entry"), seconds)
    assert cache.open(KEY_A, with_body=False) is not None  # a HEAD or an ETag check
    cache.put(KEY_C, META, value)
    assert entries(tmp_path) == {KEY_A + ".entry", KEY_C + ".entry"}


def test_eviction_order_survives_a_restart(tmp_path: Path, payload: bytes) -> None:
    """Recency is the file's mtime, so a new process evicts what the old one used least recently."""
    value = payload[:5_000]
    entry = HEADER + len(value) + len(META)
    first = DiskCache(str(tmp_path), 2 * entry)
    for seconds, key in zip((2000, 1000), (KEY_A, KEY_B)):
        first.put(key, META, value)
        age(tmp_path / (key + ".entry"), seconds)
    second = DiskCache(str(tmp_path), 2 * entry)
    assert second.total_bytes() == 2 * entry
    second.put(KEY_C, META, value)
    assert entries(tmp_path) == {KEY_B + ".entry", KEY_C + ".entry"} and second.total_bytes() == 2 * entry


def test_a_body_larger_than_the_whole_cache_is_not_kept_but_its_spool_is_still_served(tmp_path: Path,
                                                                                      payload: bytes) -> None:
    budget = MemoryBudget(100 * MB)
    cache = DiskCache(str(tmp_path), 20_000)
    cache.put(KEY_A, META, payload[:1000])
    body = spooled(cache, KEY_B, payload, budget)
    assert isinstance(body, FileBody) and body.length == len(payload) and body.read() == payload
    assert budget.used == 0  # streamed from its file, not held in memory
    assert cache.open(KEY_B) is None and read(cache, KEY_A) == payload[:1000]
    assert entries(tmp_path) == {KEY_A + ".entry"}  # neither the entry nor its temp file stays
    assert cache.total_bytes() == HEADER + 1000 + len(META)


def test_stale_temp_files_are_removed_on_start_and_other_files_are_left_alone(tmp_path: Path, payload: bytes) -> None:
    DiskCache(str(tmp_path), 100 * MB).put(KEY_A, META, payload)
    (tmp_path / ".tmp-k2j3h4").write_bytes(payload[:500])  # a write that a crash interrupted
    (tmp_path / ".tmp-zz").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("mine")
    again = DiskCache(str(tmp_path), 100 * MB)
    assert entries(tmp_path) == {KEY_A + ".entry", "notes.txt"}
    assert again.total_bytes() == (tmp_path / (KEY_A + ".entry")).stat().st_size


def test_the_cache_directory_is_created(tmp_path: Path, payload: bytes) -> None:
    cache = DiskCache(str(tmp_path / "a" / "b"), 100 * MB)
    cache.put(KEY_A, META, payload)
    assert cache.usable and (tmp_path / "a" / "b" / (KEY_A + ".entry")).is_file()


def test_concurrent_puts_of_one_key_leave_one_whole_entry(tmp_path: Path, payload: bytes) -> None:
    cache = DiskCache(str(tmp_path), 100 * MB)
    values = {str(50_000 + i).encode(): payload[: 50_000 + i] for i in range(8)}  # each meta names its body
    threads = [threading.Thread(target=cache.put, args=(KEY_A, meta, body)) for meta, body in values.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    entry = cache.open(KEY_A)
    assert entry is not None and entry.body is not None
    assert entry.meta in values and entry.body.read() == values[entry.meta]  # a body and its own meta
    assert entries(tmp_path) == {KEY_A + ".entry"}


def test_concurrent_puts_of_one_key_leave_the_size_ledger_matching_the_file(tmp_path: Path) -> None:
    """Reductions of one key differ by a few bytes of meta (timings): the bound must count the file that won.
    The race is one of interleaving, so it is tried many times (it shows in about one round in four)."""
    cache = DiskCache(str(tmp_path), 100 * MB)
    path = tmp_path / (KEY_A + ".entry")
    for _ in range(300):
        bodies = [os.urandom(1000 + i) for i in range(8)]
        threads = [threading.Thread(target=cache.put, args=(KEY_A, META, b)) for b in bodies]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads)
        assert cache.total_bytes() == path.stat().st_size


# ---- spools and streamed bodies ------------------------------------------------------------


def test_a_spooled_body_is_served_from_its_file_and_kept_as_an_entry(tmp_path: Path, payload: bytes) -> None:
    budget = MemoryBudget(100 * MB)
    cache = DiskCache(str(tmp_path), 100 * MB)
    body = spooled(cache, KEY_A, payload, budget, piece=1000)
    assert isinstance(body, FileBody) and body.read() == payload and budget.used == 0
    assert cache.write_failures == 0 and entries(tmp_path) == {KEY_A + ".entry"}
    entry = cache.open(KEY_A)
    assert entry is not None and entry.meta == META and entry.body is not None and entry.body.read() == payload


def test_a_spool_bigger_than_its_buffer_is_written_whole(tmp_path: Path) -> None:
    data = os.urandom(3 * MB + 12345)  # several flushes of the spool's buffer
    budget = MemoryBudget(100 * MB)
    cache = DiskCache(str(tmp_path), 100 * MB)
    body = spooled(cache, KEY_A, data, budget, piece=100_000)
    assert body.read() == data and read(cache, KEY_A) == data and budget.used == 0


def test_an_aborted_spool_leaves_nothing_behind(tmp_path: Path, payload: bytes) -> None:
    budget = MemoryBudget(100 * MB)
    cache = DiskCache(str(tmp_path), 100 * MB)
    spool = cache.spool(KEY_A, budget)
    spool.write(payload)
    spool.write(os.urandom(2 * MB))  # past the buffer: some is in the temp file
    spool.abort()
    assert entries(tmp_path) == set() and cache.open(KEY_A) is None and budget.used == 0


def test_a_spool_dropped_unfinished_removes_its_temp_file(tmp_path: Path) -> None:
    cache = DiskCache(str(tmp_path), 100 * MB)
    spool = cache.spool(KEY_A, MemoryBudget(100 * MB))
    spool.write(os.urandom(2 * MB))
    assert len(entries(tmp_path)) == 1
    del spool
    gc.collect()
    assert entries(tmp_path) == set()


def test_a_body_stays_readable_after_its_entry_is_evicted(tmp_path: Path, payload: bytes) -> None:
    entry_bytes = HEADER + len(payload) + len(META)
    cache = DiskCache(str(tmp_path), entry_bytes)
    cache.put(KEY_A, META, payload)
    entry = cache.open(KEY_A)  # a response about to stream it
    assert entry is not None and entry.body is not None
    age(tmp_path / (KEY_A + ".entry"), 1000)
    fresh = spooled(cache, KEY_B, payload[::-1], MemoryBudget(100 * MB))  # evicts A
    assert entries(tmp_path) == {KEY_B + ".entry"} and cache.open(KEY_A) is None
    assert entry.body.read() == payload and fresh.read() == payload[::-1]


def test_a_body_stays_readable_after_its_file_is_deleted(tmp_path: Path, payload: bytes) -> None:
    cache = DiskCache(str(tmp_path), 100 * MB)
    body = spooled(cache, KEY_A, payload, MemoryBudget(100 * MB))
    entry = cache.open(KEY_A)
    assert entry is not None and entry.body is not None
    os.unlink(tmp_path / (KEY_A + ".entry"))  # an operator cleaning the cache directory
    assert entry.body.read() == payload and body.read() == payload
    assert cache.open(KEY_A) is None


def test_many_threads_streaming_one_body_at_once_all_get_the_same_bytes(tmp_path: Path, payload: bytes) -> None:
    cache = DiskCache(str(tmp_path), 100 * MB)
    cache.put(KEY_A, META, payload)
    entry = cache.open(KEY_A)
    assert entry is not None and entry.body is not None
    body = entry.body
    n = 12
    start = threading.Barrier(n)
    got: list[bytes] = [b""] * n

    def stream(i: int) -> None:
        start.wait(30)
        got[i] = b"".join(body.chunks(size=1000 + 37 * i))  # interleaved reads at different positions

    run_threads(n, stream)
    assert all(g == payload for g in got)


def test_a_cache_directory_deleted_while_a_body_is_spooled_still_serves_the_exact_body(tmp_path: Path) -> None:
    where = tmp_path / "cache"
    cache = DiskCache(str(where), 100 * MB)
    budget = MemoryBudget(100 * MB)
    data = os.urandom(3 * MB)
    spool = cache.spool(KEY_A, budget)
    spool.write(data[:2 * MB])  # past the buffer: in the temp file
    shutil.rmtree(where)  # an operator cleaning up under a running server
    spool.write(data[2 * MB:])
    body = spool.finish(META)
    assert body.read() == data and cache.write_failures == 1 and budget.used == len(data)
    assert not where.exists() and cache.open(KEY_A) is None
    nxt = spooled(cache, KEY_B, data[:1000], budget)  # and the next ones too, from memory
    assert nxt.read() == data[:1000] and cache.write_failures == 2


# ---- a cache directory that cannot be written ---------------------------------------------


def test_a_directory_that_cannot_be_created_serves_bodies_from_memory_charged_to_the_budget(
        tmp_path: Path, payload: bytes, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    (tmp_path / "file").write_text("a regular file")
    where = tmp_path / "file" / "cache"
    cache = DiskCache(str(where), 100 * MB)
    assert cache.usable is False and cache.open(KEY_A) is None and cache.misses == 1
    budget = MemoryBudget(100 * MB)
    bodies = [spooled(cache, key, payload, budget) for key in (KEY_A, KEY_B, KEY_C)]
    cache.put(KEY_D, META, payload)  # does not raise either
    assert all(isinstance(b, MemoryBody) and b.read() == payload for b in bodies)
    assert b"".join(bodies[0].chunks(1000)) == payload
    assert budget.used == 3 * len(payload)  # counted against the memory promise while they live
    assert cache.open(KEY_A) is None and cache.total_bytes() == 0
    logged = warnings_of(caplog)
    assert len(logged) == 1, [r.getMessage() for r in logged]  # one warning, not one per request
    message = logged[0].getMessage()
    assert str(where) in message and "--tb_reduce_memory_mb" in message and "\n" not in message
    del bodies[0]
    gc.collect()
    assert budget.used == 2 * len(payload)
    bodies.clear()
    gc.collect()
    assert budget.used == 0


def test_a_spool_in_memory_whose_charge_does_not_fit_is_over_budget_and_abort_gives_back_what_it_held(
        tmp_path: Path) -> None:
    (tmp_path / "file").write_text("a regular file")
    cache = DiskCache(str(tmp_path / "file" / "cache"), 100 * MB)
    budget = MemoryBudget(100 * KB)
    spool = cache.spool(KEY_A, budget)
    spool.write(os.urandom(60 * KB))
    assert budget.used == 60 * KB
    with pytest.raises(OverBudget, match="--tb_reduce_memory_mb"):
        spool.write(os.urandom(60 * KB))
    assert budget.used == 60 * KB
    spool.abort()
    assert budget.used == 0


def test_a_spool_in_memory_is_busy_when_other_requests_hold_the_memory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("a regular file")
    cache = DiskCache(str(tmp_path / "file" / "cache"), 100 * MB)
    budget = MemoryBudget(100 * KB)
    other = budget.account("another request")
    other.charge(80 * KB)
    spool = cache.spool(KEY_A, budget)
    with pytest.raises(BudgetBusy):
        spool.write(os.urandom(30 * KB))
    spool.abort()
    assert budget.used == 80 * KB


# As root, a real read-only or full file system: a tmpfs mounted for the test.


def mount_tmpfs(where: Path, size: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs (a read-only or full cache directory) needs root")
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")


@pytest.fixture
def small_fs(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    where = tmp_path / "fs"
    mount_tmpfs(where, getattr(request, "param", "256k"))
    try:
        yield where
    finally:
        gc.collect()  # close bodies and spools still open on it
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def remount_read_only(where: Path) -> None:
    done = subprocess.run(["mount", "-o", "remount,ro", str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot remount the tmpfs read-only: {done.stderr.strip()}")


def test_a_read_only_directory_serves_new_bodies_from_memory_and_old_entries_from_disk(
        small_fs: Path, payload: bytes, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    DiskCache(str(small_fs), 100 * MB).put(KEY_A, META, payload[:50_000])
    remount_read_only(small_fs)
    cache = DiskCache(str(small_fs), 100 * MB)
    assert cache.usable and warnings_of(caplog) == []  # readable: nothing to say until a write fails
    budget = MemoryBudget(100 * MB)
    data = [os.urandom(100 * KB), os.urandom(20 * KB)]
    bodies = [spooled(cache, key, d, budget) for key, d in zip((KEY_B, KEY_C), data)]  # fail at the start
    assert [b.read() for b in bodies] == data and all(isinstance(b, MemoryBody) for b in bodies)
    assert cache.write_failures == 2 and budget.used == sum(map(len, data))
    assert entries(small_fs) == {KEY_A + ".entry"}
    assert read(cache, KEY_A) == payload[:50_000]  # what is there is still served
    assert len(warnings_of(caplog)) == 1
    bodies.clear()
    gc.collect()
    assert budget.used == 0


@pytest.mark.parametrize("small_fs", ["256k", "1536k"], indirect=True,
                         ids=["full at the first flush", "full after a flush"])
def test_a_disk_that_fills_half_way_serves_the_exact_bytes_from_memory(
        small_fs: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    cache = DiskCache(str(small_fs), 100 * MB)
    budget = MemoryBudget(100 * MB)
    data = os.urandom(3 * MB)  # incompressible: more than the file system holds
    body = spooled(cache, KEY_A, data, budget, piece=64 * KB)
    assert isinstance(body, MemoryBody) and body.length == len(data) and body.read() == data
    assert cache.write_failures == 1 and budget.used == len(data)
    assert entries(small_fs) == set() and cache.open(KEY_A) is None  # no temp file, no half entry
    again = spooled(cache, KEY_B, os.urandom(3 * MB), budget)
    assert isinstance(again, MemoryBody) and cache.write_failures == 2
    assert len(warnings_of(caplog)) == 1, [r.getMessage() for r in warnings_of(caplog)]
    del body, again
    gc.collect()
    assert budget.used == 0
    cache.put(KEY_C, META, b"small")  # the space came back: written to disk again
    assert read(cache, KEY_C) == b"small"


def test_a_disk_that_fills_while_the_meta_is_written_serves_the_body_from_memory(small_fs: Path) -> None:
    cache = DiskCache(str(small_fs), 100 * MB)
    budget = MemoryBudget(100 * MB)
    data = os.urandom(100 * KB)
    spool = cache.spool(KEY_A, budget)
    spool.write(data)
    body = spool.finish(os.urandom(200 * KB))  # the body fits on the 256 kB disk, body and meta do not
    assert isinstance(body, MemoryBody) and body.read() == data and budget.used == len(data)
    assert cache.write_failures == 1 and entries(small_fs) == set() and cache.open(KEY_A) is None


@pytest.mark.parametrize("small_fs", ["256k", "1536k"], indirect=True,
                         ids=["full at the first flush", "full after a flush"])
def test_a_full_disk_whose_bytes_do_not_fit_in_memory_is_over_budget_and_abort_leaves_nothing(
        small_fs: Path) -> None:
    cache = DiskCache(str(small_fs), 100 * MB)
    budget = MemoryBudget(512 * KB)
    spool = cache.spool(KEY_A, budget)
    with pytest.raises(OverBudget):
        for _ in range(48):
            spool.write(os.urandom(64 * KB))
        spool.finish(META)
    spool.abort()
    assert budget.used == 0 and entries(small_fs) == set() and cache.write_failures == 1


# ---- IndexCache ------------------------------------------------------------------------


class Index:
    """Stands for a parsed index: its memory is charged by whoever built it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.account: Account | None = None


def built(budget: MemoryBudget, name: str, n: int) -> Index:
    """An index whose `n` bytes stay charged until it is garbage (as the service builds them)."""
    idx = Index(name)
    account = budget.account(f"reading {name}")
    account.charge(n)
    account.keep_until_collected(idx)
    idx.account = account
    return idx


def names(cache: IndexCache, keys: str) -> list[str]:
    return [k for k in keys if cache.get(k) is not None]


def test_the_index_cache_gives_back_what_was_put_and_replaces_by_key() -> None:
    budget = MemoryBudget(100)
    cache: IndexCache[Index] = IndexCache(budget)
    assert cache.get("a") is None and len(cache) == 0
    cache.put("a", built(budget, "a1", 10))
    cache.put("a", built(budget, "a2", 20))
    got = cache.get("a")
    assert got is not None and got.name == "a2" and len(cache) == 1
    del got
    gc.collect()
    assert budget.used == 20  # the replaced index was freed, its bytes given back


def test_discard_where_drops_matching_keys_and_their_memory() -> None:
    budget = MemoryBudget(100)
    cache: IndexCache[Index] = IndexCache(budget)
    cache.put(("index", "/a", 1), built(budget, "a1", 10))
    cache.put(("index", "/a", 2), built(budget, "a2", 20))
    cache.put(("index", "/b", 1), built(budget, "b1", 30))
    cache.discard_where(lambda k: k[1] == "/a" and k[2] != 2)
    assert cache.get(("index", "/a", 1)) is None and cache.get(("index", "/a", 2)) is not None
    gc.collect()
    assert len(cache) == 2 and budget.used == 50


def test_reclaim_drops_idle_indexes_least_recently_used_first_until_enough_is_free() -> None:
    budget = MemoryBudget(100)
    cache: IndexCache[Index] = IndexCache(budget)
    for key in "abc":
        cache.put(key, built(budget, key, 30))
    assert cache.get("a") is not None  # a is now the most recently used: b, c, a
    cache.reclaim(40)  # 10 free: one index must go, the least recently used
    assert names(cache, "abc") == ["a", "c"] and budget.used == 60
    cache.reclaim(40)  # already free: nothing goes
    assert len(cache) == 2 and budget.used == 60
    cache.reclaim(100)
    assert len(cache) == 0 and budget.used == 0


def test_reclaim_keeps_an_index_a_request_still_holds() -> None:
    budget = MemoryBudget(100)
    cache: IndexCache[Index] = IndexCache(budget)
    for key in "abc":
        cache.put(key, built(budget, key, 30))
    in_use = cache.get("a")  # a request reducing it
    cache.get("b")
    cache.get("c")  # a is the least recently used again, but in use
    cache.reclaim(40)  # 10 free: one must go; a is skipped, b goes
    assert names(cache, "abc") == ["a", "c"] and budget.used == 60
    cache.reclaim(100)  # a is still in use: dropping it would free nothing
    assert names(cache, "abc") == ["a"] and budget.used == 30
    assert in_use is not None and in_use.name == "a"
    del in_use
    cache.reclaim(100)
    assert len(cache) == 0 and budget.used == 0


def test_a_charge_that_does_not_fit_makes_room_by_dropping_idle_indexes() -> None:
    budget = MemoryBudget(100)
    cache: IndexCache[Index] = IndexCache(budget)
    for key in "abc":
        cache.put(key, built(budget, key, 30))
    with budget.account("reducing d") as acct:
        acct.charge(50)  # 10 free: the two least recently used indexes (a, b) go
        assert names(cache, "abc") == ["c"] and budget.used == 80 and budget.refused == 0
    assert budget.used == 30


def test_a_charge_is_busy_when_every_index_is_in_use_and_none_is_dropped() -> None:
    budget = MemoryBudget(100)
    cache: IndexCache[Index] = IndexCache(budget)
    for key in "abc":
        cache.put(key, built(budget, key, 30))
    held = [cache.get(k) for k in "abc"]
    with pytest.raises(BudgetBusy):
        budget.account("reducing d").charge(50)
    assert len(cache) == 3 and budget.used == 90 and all(h is not None for h in held)


# ---- SingleFlight ---------------------------------------------------------------


def run_threads(n: int, target) -> None:  # type: ignore[no-untyped-def]
    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)


def test_many_callers_of_one_key_compute_once_and_share_the_result() -> None:
    flight = SingleFlight()
    n = 12
    arrived = threading.Semaphore(0)
    calls: list[int] = []
    results: list[object] = [None] * n

    def compute() -> object:
        calls.append(1)
        for _ in range(n):  # hold the flight open until every caller has arrived
            assert arrived.acquire(timeout=10)
        time.sleep(0.2)  # and has had time to join it
        return object()

    def caller(i: int) -> None:
        arrived.release()
        results[i] = flight.do("key", compute)

    run_threads(n, caller)
    assert len(calls) == 1 and flight.computations == 1
    assert all(r is results[0] for r in results) and results[0] is not None


def test_an_error_reaches_every_waiter_and_the_next_call_computes_again() -> None:
    flight = SingleFlight()
    n = 8
    arrived = threading.Semaphore(0)
    errors: list[BaseException] = []

    def failing() -> object:
        for _ in range(n):
            assert arrived.acquire(timeout=10)
        time.sleep(0.2)
        raise ValueError("cannot read trace")

    def caller(i: int) -> None:
        arrived.release()
        try:
            flight.do("key", failing)
        except ValueError as exc:
            errors.append(exc)

    run_threads(n, caller)
    assert len(errors) == n and all(str(e) == "cannot read trace" for e in errors)
    assert flight.computations == 1
    assert flight.do("key", lambda: 42) == 42 and flight.computations == 2  # errors are not cached


def test_different_keys_run_at_the_same_time() -> None:
    """A slow reduction of one trace must not hold up another's."""
    flight = SingleFlight()
    started = {"a": threading.Event(), "b": threading.Event()}
    overlapped: dict[str, bool] = {}

    def compute(me: str, other: str) -> str:
        started[me].set()
        overlapped[me] = started[other].wait(timeout=10)  # would time out if keys were serialised
        return me

    out: dict[str, str] = {}

    def caller(i: int) -> None:
        me, other = ("a", "b") if i == 0 else ("b", "a")
        out[me] = flight.do(me, lambda: compute(me, other))

    run_threads(2, caller)
    assert out == {"a": "a", "b": "b"} and overlapped == {"a": True, "b": True}
    assert flight.computations == 2


def test_sequential_calls_compute_each_time() -> None:
    """SingleFlight shares work in flight; it is not a cache."""
    flight = SingleFlight()
    assert [flight.do("k", lambda i=i: i) for i in range(3)] == [0, 1, 2] and flight.computations == 3
