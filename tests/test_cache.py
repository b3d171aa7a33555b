"""DiskCache (atomic, checked, bounded, survives restarts), MemoryLRU (bounded) and
SingleFlight (one computation per key however many callers)."""

from __future__ import annotations

import gzip
import os
import threading
import time
from pathlib import Path

import pytest
from plugin_support import require_corpus, torch_trace_gz

from tb_reduce_plugin.cache import MAGIC, DiskCache, MemoryLRU, SingleFlight, key_digest

# Real payloads: what the plugin stores is gzip bytes, so store gzip bytes of a real trace.
KEY_A, KEY_B, KEY_C, KEY_D = (key_digest(["trace", 1, "input_index", f"/logdir/{n}", 123, 456, 2, None, None])
                              for n in "abcd")


@pytest.fixture(scope="module")
def payload() -> bytes:
    require_corpus()
    return torch_trace_gz()


def entries(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


def test_a_put_value_comes_back_byte_identical(tmp_path: Path, payload: bytes) -> None:
    cache = DiskCache(str(tmp_path), 100 << 20)
    assert cache.get(KEY_A) is None and cache.misses == 1
    cache.put(KEY_A, payload)
    got = cache.get(KEY_A)
    assert got == payload and gzip.decompress(got).lstrip().startswith(b"{")
    assert cache.hits == 1 and entries(tmp_path) == {KEY_A + ".entry"}  # no temp file left behind
    assert cache.total_bytes() == (tmp_path / (KEY_A + ".entry")).stat().st_size > len(payload)


def test_key_digests_are_stable_and_tell_keys_apart() -> None:
    key = ["trace", 1, "/a", 10, 20, "auto", 1.5, 2.5]
    assert key_digest(key) == key_digest(list(key)) and len(key_digest(key)) == 64
    assert key_digest(key) != key_digest(key[:-1] + [2.6]) != key_digest(key[:5] + [2] + key[6:])


def test_entries_survive_a_restart(tmp_path: Path, payload: bytes) -> None:
    DiskCache(str(tmp_path), 100 << 20).put(KEY_A, payload)
    again = DiskCache(str(tmp_path), 100 << 20)
    assert again.get(KEY_A) == payload
    assert again.total_bytes() == (tmp_path / (KEY_A + ".entry")).stat().st_size


def test_overwriting_a_key_replaces_its_value(tmp_path: Path, payload: bytes) -> None:
    cache = DiskCache(str(tmp_path), 100 << 20)
    cache.put(KEY_A, payload)
    cache.put(KEY_A, payload[:1000])
    assert cache.get(KEY_A) == payload[:1000] and len(entries(tmp_path)) == 1


@pytest.mark.parametrize("damage", ["flip a payload byte", "flip a header byte", "truncate", "empty", "wrong magic"])
def test_a_damaged_entry_is_a_miss_and_is_removed(tmp_path: Path, payload: bytes, damage: str) -> None:
    cache = DiskCache(str(tmp_path), 100 << 20)
    cache.put(KEY_A, payload)
    path = tmp_path / (KEY_A + ".entry")
    raw = bytearray(path.read_bytes())
    if damage == "flip a payload byte":
        raw[len(raw) // 2] ^= 0x01
    elif damage == "flip a header byte":
        raw[len(MAGIC) + 2] ^= 0x40  # the length field
    elif damage == "truncate":
        raw = raw[: len(raw) - 100]
    elif damage == "empty":
        raw = bytearray()
    else:
        raw[0:1] = b"X"
    path.write_bytes(bytes(raw))
    assert cache.get(KEY_A) is None
    assert cache.damaged == 1 and cache.misses == 1 and not path.exists()
    assert cache.total_bytes() == 0
    cache.put(KEY_A, payload)  # rebuilt
    assert cache.get(KEY_A) == payload


def test_damage_found_after_a_restart_is_also_a_miss(tmp_path: Path, payload: bytes) -> None:
    DiskCache(str(tmp_path), 100 << 20).put(KEY_A, payload)
    path = tmp_path / (KEY_A + ".entry")
    path.write_bytes(path.read_bytes()[:-1])  # a crash mid-write that left a short file (no atomic rename)
    again = DiskCache(str(tmp_path), 100 << 20)
    assert again.get(KEY_A) is None and not path.exists() and again.total_bytes() == 0


def test_eviction_keeps_the_most_recently_used_entries_within_the_bound(tmp_path: Path, payload: bytes) -> None:
    value = payload[:10_000]
    entry = len(value) + len(MAGIC) + 8 + 32
    cache = DiskCache(str(tmp_path), 3 * entry)
    for age, key in zip((3000, 2000, 1000), (KEY_A, KEY_B, KEY_C)):  # A oldest, then B, then C
        cache.put(key, value)
        os.utime(tmp_path / (key + ".entry"), (time.time() - age, time.time() - age))
    assert cache.get(KEY_A) == value  # a hit makes A the most recently used
    cache.put(KEY_D, value)  # one over the bound: the least recently used (B) goes
    assert entries(tmp_path) == {KEY_A + ".entry", KEY_C + ".entry", KEY_D + ".entry"}
    assert cache.get(KEY_B) is None and cache.total_bytes() == 3 * entry <= cache.max_bytes


def test_eviction_order_survives_a_restart(tmp_path: Path, payload: bytes) -> None:
    """Recency is the file's mtime, so a new process evicts what the old one used least recently."""
    value = payload[:5_000]
    entry = len(value) + len(MAGIC) + 8 + 32
    first = DiskCache(str(tmp_path), 2 * entry)
    for age, key in zip((2000, 1000), (KEY_A, KEY_B)):
        first.put(key, value)
        os.utime(tmp_path / (key + ".entry"), (time.time() - age, time.time() - age))
    second = DiskCache(str(tmp_path), 2 * entry)
    second.put(KEY_C, value)
    assert entries(tmp_path) == {KEY_B + ".entry", KEY_C + ".entry"}


def test_a_value_larger_than_the_whole_cache_is_not_stored_and_evicts_nothing(tmp_path: Path, payload: bytes) -> None:
    cache = DiskCache(str(tmp_path), 20_000)
    cache.put(KEY_A, payload[:1000])
    cache.put(KEY_B, payload[:30_000])
    assert cache.get(KEY_B) is None and cache.get(KEY_A) == payload[:1000]
    assert entries(tmp_path) == {KEY_A + ".entry"}


def test_stale_temp_files_are_removed_on_start_and_other_files_are_left_alone(tmp_path: Path, payload: bytes) -> None:
    DiskCache(str(tmp_path), 100 << 20).put(KEY_A, payload)
    (tmp_path / ".tmp-k2j3h4").write_bytes(payload[:500])  # a write that a crash interrupted
    (tmp_path / ".tmp-zz").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("mine")
    again = DiskCache(str(tmp_path), 100 << 20)
    assert entries(tmp_path) == {KEY_A + ".entry", "notes.txt"}
    assert again.total_bytes() == (tmp_path / (KEY_A + ".entry")).stat().st_size


def test_the_cache_directory_is_created(tmp_path: Path, payload: bytes) -> None:
    cache = DiskCache(str(tmp_path / "a" / "b"), 100 << 20)
    cache.put(KEY_A, payload)
    assert (tmp_path / "a" / "b" / (KEY_A + ".entry")).is_file()


def test_concurrent_puts_of_one_key_leave_one_whole_entry(tmp_path: Path, payload: bytes) -> None:
    cache = DiskCache(str(tmp_path), 100 << 20)
    values = [payload[: 50_000 + i] for i in range(8)]
    threads = [threading.Thread(target=cache.put, args=(KEY_A, v)) for v in values]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.get(KEY_A) in values and entries(tmp_path) == {KEY_A + ".entry"}


# ---- MemoryLRU ------------------------------------------------------------------


def test_memory_lru_stays_within_its_bound_dropping_the_least_recently_used() -> None:
    lru: MemoryLRU[bytes] = MemoryLRU(10, len)
    lru.put("a", b"aaaa")
    lru.put("b", b"bbbb")
    assert lru.get("a") == b"aaaa"  # a is now the most recently used
    lru.put("c", b"cccc")
    assert lru.get("b") is None and lru.get("a") == b"aaaa" and lru.get("c") == b"cccc"
    assert len(lru) == 2 and lru.total_bytes == 8 <= lru.max_bytes


def test_memory_lru_replacing_a_key_counts_its_size_once() -> None:
    lru: MemoryLRU[bytes] = MemoryLRU(100, len)
    lru.put("a", b"x" * 30)
    lru.put("a", b"x" * 50)
    assert len(lru) == 1 and lru.total_bytes == 50


def test_memory_lru_discard_where_drops_matching_keys_and_their_bytes() -> None:
    lru: MemoryLRU[bytes] = MemoryLRU(100, len)
    lru.put(("index", "/a", 1), b"1" * 10)
    lru.put(("index", "/a", 2), b"2" * 20)
    lru.put(("index", "/b", 1), b"3" * 30)
    lru.discard_where(lambda k: k[1] == "/a" and k[2] != 2)
    assert lru.get(("index", "/a", 1)) is None and lru.get(("index", "/a", 2)) is not None
    assert len(lru) == 2 and lru.total_bytes == 50


# ---- SingleFlight ---------------------------------------------------------------


def run_threads(n: int, target) -> None:
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


def test_reserving_room_evicts_the_least_recently_used_before_a_new_value_is_built() -> None:
    """The index cache makes room before parsing a file, so the old index is gone
    before the new one's peak, not after it."""
    from tb_reduce_plugin.cache import MemoryLRU

    lru: MemoryLRU[bytes] = MemoryLRU(100, len)
    lru.put("a", b"x" * 40)
    lru.put("b", b"x" * 40)
    lru.get("a")  # b is now the least recently used
    lru.reserve(30)
    assert lru.get("b") is None and lru.get("a") is not None and lru.total_bytes == 40
    lru.reserve(1000)  # more than the budget: everything goes
    assert len(lru) == 0 and lru.total_bytes == 0
