"""A stored index's files cut while a server maps them (issue 26, bad input and faults):
a mapped page past the end of a truncated file raises SIGBUS, which Python cannot catch.

The guard (`_guard.c`, through `mapped.map_array`) turns such a fault into zero pages and
counts it; the service throws away what it read, drops the index from memory and from the
store, and answers from the trace again. A file cut while the index is idle is caught
before it is read (`mapped.shrunk`), with or without the native guard.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
from conftest import TESTS
from plugin_support import require_corpus

from tb_reduce_plugin.model import mapped
from tb_reduce_plugin.native import guard_module
from tb_reduce_plugin.serve import service as service_module
from tb_reduce_plugin.serve.service import TraceService

CORPUS = TESTS.parent.parent / "shared" / "corpus"

_CUT_AND_READ = """
import os, sys
import numpy as np
from tb_reduce_plugin.model import mapped
path = sys.argv[1]
np.save(path, np.arange(1 << 20, dtype=np.int64))
a = mapped.map_array(path)
assert int(a[:10].sum()) == 45 and mapped.faults() == 0
os.truncate(path, 4096)
print(mapped.shrunk([a]), int(a[100_000:].sum()), mapped.faults(), flush=True)
"""


def test_a_read_past_the_end_of_a_cut_mapped_file_reads_zeros_and_is_counted_instead_of_killing(tmp_path):
    done = subprocess.run([sys.executable, "-X", "faulthandler", "-c", _CUT_AND_READ, str(tmp_path / "c.npy")],
                          capture_output=True, text=True, timeout=120)
    if guard_module() is None:  # the pure-Python install: the read is fatal, as the module says
        assert done.returncode == -signal.SIGBUS, done
        return
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["c.npy", "0", "1"]


def test_without_the_guard_the_same_read_is_a_sigbus(tmp_path):
    """What the guard prevents, shown: the native switch off, the process dies of SIGBUS."""
    done = subprocess.run([sys.executable, "-c", _CUT_AND_READ, str(tmp_path / "c.npy")],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "TB_REDUCE_NATIVE": "0"})
    assert done.returncode == -signal.SIGBUS


def test_a_range_no_longer_mapped_is_forgotten_and_a_fault_outside_every_range_still_kills(tmp_path):
    """The guard answers only for its ranges: an unrelated SIGBUS keeps its default action."""
    code = ("import os, signal\nfrom tb_reduce_plugin.model import mapped\nimport numpy as np\n"
            f"np.save({str(tmp_path / 'a.npy')!r}, np.arange(1 << 16))\n"
            f"a = mapped.map_array({str(tmp_path / 'a.npy')!r})\n"
            "del a\n"
            "os.kill(os.getpid(), signal.SIGBUS)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGBUS


def test_shrunk_names_a_cut_file_and_not_a_replaced_or_removed_one(tmp_path):
    paths = [tmp_path / f"{c}.npy" for c in "abc"]
    for p in paths:
        np.save(p, np.arange(1 << 16))
    cut, replaced, removed = arrays = [mapped.map_array(str(p)) for p in paths]
    assert mapped.shrunk(arrays) is None
    np.save(tmp_path / "b2.npy", np.arange(3))
    os.replace(tmp_path / "b2.npy", paths[1])  # a new, smaller file under the name: the mapping is whole
    paths[2].unlink()
    assert mapped.shrunk(arrays) is None
    os.truncate(paths[0], 1000)
    assert mapped.shrunk(arrays) == "a.npy"
    assert mapped.shrunk([cut[10:20]]) == "a.npy"  # a view of it too


@pytest.fixture()
def big_trace(tmp_path) -> Path:
    """The corpus's largest PyTorch gzip trace (its columns are big enough to be mapped)."""
    require_corpus()
    src = max((p for p in CORPUS.rglob("*.pt.trace.json.gz")), key=lambda p: p.stat().st_size)
    dst = tmp_path / "logs" / "run" / src.name
    dst.parent.mkdir(parents=True)
    shutil.copyfile(src, dst)
    return dst


def _cut_every_mapped_file(cache: Path) -> int:
    n = 0
    for f in (cache / "index").rglob("*.npy"):
        if f.stat().st_size > 65536:
            os.truncate(f, 128)
            n += 1
    return n


def _stored(logdir: Path, cache: Path, host: str) -> TraceService:
    first = TraceService(str(logdir), cache_dir=str(cache))
    first.reduction("run", host, 2, None, None)
    first.wait_saved()
    return TraceService(str(logdir), cache_dir=str(cache))


def _body(r) -> bytes:
    data = r.body.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def test_an_index_cut_while_idle_is_dropped_and_the_window_answered_from_the_trace(big_trace, tmp_path):
    logdir, cache = big_trace.parent.parent, tmp_path / "cache"
    host = big_trace.name[: -len(".pt.trace.json.gz")]
    svc = _stored(logdir, cache, host)
    assert svc.reduction("run", host, 3, None, None).stats["index"] == "stored"
    assert _cut_every_mapped_file(cache) >= 3
    got = svc.reduction("run", host, 1, None, None)  # a new view: the cut index is not read
    assert got.stats["index"] == "parsed"
    assert svc.store is not None and svc.store.info().damaged == 1
    fresh = TraceService(str(logdir), cache_dir=str(tmp_path / "fresh"))
    assert _body(got) == _body(fresh.reduction("run", host, 1, None, None))
    hits = svc.search("run", host, "aten")  # queries take the new index
    assert hits["total"] == fresh.search("run", host, "aten")["total"] > 0


def test_an_index_cut_in_the_middle_of_a_request_throws_its_result_away_and_answers_from_the_trace(
        big_trace, tmp_path, monkeypatch):
    """The files are cut after the plan read them and before the answer goes: the check
    after the work sees it (and, with the guard, reads past the cut meet zeros first)."""
    logdir, cache = big_trace.parent.parent, tmp_path / "cache"
    host = big_trace.name[: -len(".pt.trace.json.gz")]
    svc = _stored(logdir, cache, host)
    real = service_module.reduce_index
    cuts = []

    def cut_midway(idx, *args, **kwargs):
        stats = real(idx, *args, **kwargs)
        if not cuts:
            cuts.append(_cut_every_mapped_file(cache))
            if guard_module() is not None:  # a read past the cut: zeros and a counted fault, not a SIGBUS
                before = mapped.faults()
                assert int(np.asarray(idx.table.ts[-1000:]).view(np.int64).sum()) == 0
                assert mapped.faults() > before
        return stats

    monkeypatch.setattr(service_module, "reduce_index", cut_midway)
    got = svc.reduction("run", host, 1, None, None)
    assert cuts and cuts[0] >= 3
    assert got.stats["index"] == "parsed"  # the second try, from the trace
    fresh = TraceService(str(logdir), cache_dir=str(tmp_path / "fresh"))
    assert _body(got) == _body(fresh.reduction("run", host, 1, None, None))
    assert not any((cache / "index").glob("*/manifest*")) or svc.store.info().damaged == 1


def test_a_real_tensorboard_whose_stored_index_is_cut_keeps_serving_right_answers_within_its_memory(
        big_trace, tmp_path):
    from tensorboard_process import start_tensorboard

    logdir, cache = big_trace.parent.parent, tmp_path / "cache"
    host = big_trace.name[: -len(".pt.trace.json.gz")]
    tb = start_tensorboard(logdir, cache)
    try:
        first = tb.json("data/plugin/tb_reduce/stats", run="run", host=host, level=2)
        tb.wait_index_saved()
        # and the prepared state kept beside it, the window index made in the background
        # after the first view included: the restarted server then has nothing to make or
        # write in the background while the files are cut (a cut under that writer is a
        # SIGBUS in the pure build, which has no guard: `mapped`)
        deadline = time.monotonic() + 60
        while not any("window_index" in json.loads(p.read_text())["spec"]
                      for p in (cache / "index").glob("*/prepared.json")):
            assert time.monotonic() < deadline, tb.tail()
            time.sleep(0.2)
    finally:
        tb.stop()
    tb = start_tensorboard(logdir, cache, "--tb_reduce_memory_mb", "512")
    try:
        idle = tb.peak_mb()
        t0, t1 = first["trace_us"]
        assert tb.json("data/plugin/tb_reduce/stats", run="run", host=host, level=3)["index"] == "stored"
        assert _cut_every_mapped_file(cache) >= 3
        answers = []
        for k in range(6):  # new windows, events and searches over the cut index
            window = dict(start_us=t0 + (t1 - t0) * k / 8, end_us=t0 + (t1 - t0) * (k + 2) / 8)
            status, _, body = tb.get("data/plugin/tb_reduce/trace", run="run", host=host, level=1, **window)
            answers.append((window, status, gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body))
            assert tb.get("data/plugin/tb_reduce/search", run="run", host=host, q="aten")[0] == 200
            assert tb.get("data/plugin/tb_reduce/event", run="run", host=host, i=k)[0] == 200
        assert tb.alive(), tb.tail()
        assert tb.json("data/plugin/tb_reduce/info")["index_store"]["damaged"] >= 1
        assert tb.peak_mb() <= idle + 512 + 300, (tb.peak_mb(), idle)  # the budget's promise
    finally:
        tb.stop()
    fresh = TraceService(str(logdir), cache_dir=str(tmp_path / "fresh"))
    for window, status, body in answers:
        assert status == 200
        assert body == _body(fresh.reduction("run", host, 1, window["start_us"], window["end_us"]))


def _host_task(trace: Path, store_dir: Optional[str], level: int):
    from tb_reduce_plugin.multihost import tasks

    st = os.stat(trace)
    return tasks.HostTask(str(trace), (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns), level=level,
                          memory_bytes=1 << 30, index_dir=store_dir)


def test_a_workers_stored_index_cut_while_idle_is_dropped_and_its_host_reduced_from_the_trace(big_trace, tmp_path):
    """Workers of merged views map the server's stored indexes too: they check them as the
    server does, so a cut file is neither read (zeros, or SIGBUS without the guard) nor kept."""
    from tb_reduce_plugin.index.store import IndexStore
    from tb_reduce_plugin.multihost import tasks
    from tb_reduce_plugin.reduce.pipeline import index_file

    store = IndexStore(str(tmp_path / "cache" / "index"), 1 << 34)
    store.save(index_file(big_trace))
    first = tasks.reduce_host_task(_host_task(big_trace, store.directory, 2))
    assert first.error is None and json_of(first.meta)["index"] == "stored"
    assert _cut_every_mapped_file(tmp_path / "cache") >= 3
    again = tasks.reduce_host_task(_host_task(big_trace, store.directory, 2))  # the worker still holds the index
    assert again.error is None and json_of(again.meta)["index"] == "parsed"
    assert gzip.decompress(again.body) == gzip.decompress(first.body)
    assert tasks._store(store.directory).info().damaged == 1
    clock = tasks.host_clock_task(_host_task(big_trace, store.directory, 2))
    assert clock.error is None and (clock.start_us, clock.end_us) == (again.clock.start_us, again.clock.end_us)


def test_a_workers_index_cut_in_the_middle_of_a_task_throws_its_result_away_and_reduces_again(
        big_trace, tmp_path, monkeypatch):
    from tb_reduce_plugin.index.store import IndexStore
    from tb_reduce_plugin.multihost import tasks
    from tb_reduce_plugin.reduce.pipeline import index_file

    store = IndexStore(str(tmp_path / "cache" / "index"), 1 << 34)
    store.save(index_file(big_trace))
    want = tasks.reduce_host_task(_host_task(big_trace, None, 1))  # no store: from the trace
    monkeypatch.setattr(tasks, "_state", None)  # a worker that holds no index yet
    real = tasks.reduce_index
    cuts = []

    def reduce_then_cut(idx, *args, **kwargs):  # after: without the guard, a read past a cut is a SIGBUS
        stats = real(idx, *args, **kwargs)
        if idx.extra.get("stored_index") and not cuts:
            cuts.append(_cut_every_mapped_file(tmp_path / "cache"))
        return stats

    monkeypatch.setattr(tasks, "reduce_index", reduce_then_cut)
    got = tasks.reduce_host_task(_host_task(big_trace, store.directory, 1))
    assert cuts and cuts[0] >= 3
    assert got.error is None and json_of(got.meta)["index"] == "parsed"
    assert gzip.decompress(got.body) == gzip.decompress(want.body)


def json_of(meta: bytes) -> dict:
    import json

    return json.loads(meta)


def test_prepared_state_read_from_a_cut_scratch_file_is_not_kept_as_the_state(tmp_path):
    """The state a plan made into the scratch folder is copied beside the stored index by
    the background writer: a scratch file cut before that copy is not kept (in the native
    build its missing pages would read as zeros), and the index is left without it."""
    from tb_reduce_plugin.index.store import IndexStore, indexed
    from tb_reduce_plugin.reduce.shared import slices_of

    require_corpus()
    src = max((p for p in CORPUS.rglob("*.json.gz") if "CORRUPT" not in p.name), key=lambda p: p.stat().st_size)
    store = IndexStore(str(tmp_path / "index"), 1 << 34)
    indexed(store, str(src))  # parsed and stored, no prepared state kept yet
    idx = indexed(store, str(src))  # reopened: its state goes to a scratch folder
    assert idx.table.scratch is not None
    sl = slices_of(idx.table)
    assert isinstance(sl.start, np.memmap)
    os.truncate(sl.start.filename, 128)
    if guard_module() is None:  # without the guard a copy of the cut file would be a SIGBUS: the check is before
        assert mapped.shrunk([sl.start]) is not None
        return
    assert store.save_prepared(idx) is False
    assert not list((tmp_path / "index").glob("*/prepared.json"))
