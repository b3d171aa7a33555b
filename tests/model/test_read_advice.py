"""Read advice for mapped index files (`read_advice`): what the kernel is told while a narrow
window is planned, checked in the kernel's own account of the process's mappings."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from tb_reduce_plugin.model import read_advice
from tb_reduce_plugin.model.mapped import map_array

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or read_advice._libc is None,
                                reason="madvise and /proc/self/smaps are Linux's")


def _random_read_flag(a: np.ndarray) -> bool:
    """Whether the kernel marks the mapping holding `a` for random reads (`rr` in smaps)."""
    at = a.ctypes.data
    lines = Path("/proc/self/smaps").read_text().splitlines()
    inside = False
    for line in lines:
        head = line.split()[0]
        if "-" in head and all(c in "0123456789abcdef-" for c in head):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= at < hi
        elif inside and line.startswith("VmFlags:"):
            return "rr" in line.split()[1:]
    raise AssertionError("the array's mapping is not in smaps")


def _mapped(tmp_path: Path, name: str, n: int = 1 << 20) -> np.ndarray:
    np.save(tmp_path / name, np.arange(n, dtype=np.int64))
    return map_array(str(tmp_path / name))


def test_a_mapping_is_read_at_random_inside_the_with_and_normally_after(tmp_path: Path) -> None:
    a, b = _mapped(tmp_path, "a.npy"), _mapped(tmp_path, "b.npy")
    held = np.arange(10)  # memory of the process's own: never advised
    assert not _random_read_flag(a)
    with read_advice.random_reads([a, np.asarray(b)[100:], held]):
        assert _random_read_flag(a) and _random_read_flag(b)
        assert read_advice.advised_random() == 2
        assert int(a[12345]) == 12345 and int(b[-1]) == (1 << 20) - 1  # reads are reads
    assert not _random_read_flag(a) and not _random_read_flag(b)
    assert read_advice.advised_random() == 0


def test_the_advice_stays_while_any_plan_holds_it_and_leave_gives_one_plans_share_back_once(tmp_path: Path) -> None:
    a = _mapped(tmp_path, "a.npy")
    with read_advice.random_reads([a]) as first:
        with read_advice.random_reads([a[10:]]) as second:  # a view: the same mapping, counted twice
            first.leave()
            first.leave()  # once only
            assert _random_read_flag(a)
        second.leave()  # already left by the with: nothing more
        assert not _random_read_flag(a)
    assert read_advice.advised_random() == 0


def test_plans_on_many_threads_leave_no_advice_behind(tmp_path: Path) -> None:
    arrays = [_mapped(tmp_path, f"{k}.npy", 1 << 16) for k in range(4)]
    errors: list[BaseException] = []

    def plan(k: int) -> None:
        try:
            for i in range(200):
                with read_advice.random_reads(arrays[k % 2:k % 2 + 3]) as adv:
                    if i % 3 == 0:
                        adv.leave()
        except BaseException as exc:  # raised below
            errors.append(exc)

    threads = [threading.Thread(target=plan, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert read_advice.advised_random() == 0
    assert not any(_random_read_flag(a) for a in arrays)


def test_a_window_plans_searches_read_at_random_and_only_a_narrow_one_asks_for_its_rows(tmp_path: Path,
                                                                                         monkeypatch) -> None:
    """The searches of a window plan hold the random-read advice, and a narrow window's plan
    too (`narrow`: its rows' pages asked for when cold); a wide one gives it back before its
    rows are read (the plans' output is the window plans' tests')."""
    from index_support import copied_gz_trace
    from plugin_support import require_corpus

    from tb_reduce_plugin.reduce import plan
    from tb_reduce_plugin.reduce.window_index import WindowIndex
    from tb_reduce_plugin.serve.service import TraceService

    require_corpus()
    path = copied_gz_trace(tmp_path)
    service = TraceService(str(path.parent.parent), cache_dir=str(tmp_path / "cache"))
    host = path.name[: -len(".pt.trace.json.gz")]
    service.reduction("run", host, 2, None, None)
    service.wait_saved()
    searched, planned = [], []
    rows_within, plan_window = WindowIndex.rows_within, plan._plan_window

    def searching(self, *args, **kwargs):
        searched.append(read_advice.advised_random())
        return rows_within(self, *args, **kwargs)

    def planning(*args, **kwargs):
        planned.append((read_advice.advised_random(), kwargs.get("narrow")))
        return plan_window(*args, **kwargs)

    monkeypatch.setattr(WindowIndex, "rows_within", searching)
    monkeypatch.setattr(plan, "_plan_window", planning)
    lo, hi = service.on_index(service.trace_file("run", host), lambda i: plan.default_window(i.table))
    service.reduction("run", host, 2, lo + 0.4 * (hi - lo), lo + 0.41 * (hi - lo))
    monkeypatch.setattr(plan, "RANDOM_READ_ROWS", -1)  # every window counts as wide
    service.reduction("run", host, 2, lo + 0.5 * (hi - lo), lo + 0.51 * (hi - lo))
    assert len(searched) == 2 and all(n > 0 for n in searched)
    assert planned[0][0] > 0 and planned[1][0] == 0  # a narrow plan holds the advice; a wide one gave it back
    assert [narrow for _, narrow in planned] == [True, False]
    assert read_advice.advised_random() == 0


def _resident(a: np.ndarray) -> np.ndarray:
    """Per page of `a`'s mapping (from its first byte's page), whether it is in memory (mincore)."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    start = a.ctypes.data & ~(mmap.PAGESIZE - 1)
    n = -(-(a.ctypes.data + a.nbytes - start) // mmap.PAGESIZE)
    vec = (ctypes.c_ubyte * n)()
    assert libc.mincore(ctypes.c_void_p(start), ctypes.c_size_t(n * mmap.PAGESIZE), vec) == 0
    return np.frombuffer(bytes(vec), dtype=np.uint8) & 1 == 1


def test_the_pages_of_the_rows_asked_for_are_read_and_no_others(tmp_path: Path, monkeypatch) -> None:
    """`will_need` on a file out of the page cache: the pages holding the rows come in
    (the kernel's own account, `mincore`), the pages between runs stay out."""
    import os
    import time

    path = tmp_path / "cold.npy"
    np.save(path, np.arange(1 << 21, dtype=np.int64))  # 16 MiB: 4,096 pages
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    a = map_array(str(path))
    if _resident(a).mean() > 0.5:
        pytest.skip("the page cache kept the file (DONTNEED is advice too)")
    rows = np.array([10, 3 << 18, (3 << 18) + 700, (1 << 21) - 1], dtype=np.int64)
    assert read_advice.will_need(a, rows)
    wanted = np.unique(((rows * 8 + a.ctypes.data) // 4096) - a.ctypes.data // 4096)
    deadline = time.monotonic() + 10
    while not _resident(a)[wanted].all() and time.monotonic() < deadline:
        time.sleep(0.01)
    resident = _resident(a)
    assert resident[wanted].all()
    assert resident.mean() < 0.25  # the runs asked for, not the file
    assert not read_advice.will_need(np.arange(10), np.array([1]))  # memory of its own: nothing to ask
    monkeypatch.setattr(read_advice, "MAX_RUNS", 10)
    assert not read_advice.will_need(a, np.arange(1 << 12, 1 << 21, 1 << 15))  # 63 runs, past MAX_RUNS: read-ahead's
    assert read_advice.will_need(a, rows)  # all in memory now: nothing more to ask, and nothing wrong


def test_which_pages_are_in_memory_is_looked_at_run_by_run_where_the_span_between_is_long(monkeypatch) -> None:
    """`_resident` over pages in a few runs far apart calls `mincore` on each run alone (a
    narrow window's rows: looking at the span cost ~2 ms a column), and over a dense set once
    on its span; either way each page's answer is the kernel's for that page."""
    import ctypes

    calls = []

    class Libc:
        def mincore(self, at, size, vec):
            first, n = at // read_advice._PAGE, size // read_advice._PAGE
            calls.append((first, n))
            ctypes.memmove(vec, bytes((p % 3 == 0) for p in range(first, first + n)), n)  # every third page in
            return 0
    monkeypatch.setattr(read_advice, "_libc", Libc())
    sparse = np.array([1000, 1001, 1005, 50_000, 50_003, 900_000], dtype=np.int64)
    got = read_advice._resident(sparse)
    assert got.tolist() == [p % 3 == 0 for p in sparse.tolist()]
    assert calls == [(1000, 6), (50_000, 4), (900_000, 1)]
    calls.clear()
    dense = np.arange(2000, 2400, 3, dtype=np.int64) + np.arange(134) % 2
    got = read_advice._resident(dense)
    assert got.tolist() == [p % 3 == 0 for p in dense.tolist()] and calls == [(2000, int(dense[-1]) - 2000 + 1)]

    class Failing:
        def mincore(self, at, size, vec):
            return -1
    monkeypatch.setattr(read_advice, "_libc", Failing())
    assert read_advice._resident(sparse) is None
