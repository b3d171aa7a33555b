"""Live windows in the logdir: atomic, pruned, discovered, resumed, and refused cleanly."""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import TESTS

from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.live import windows
from tb_reduce_plugin.live.windows import LEDGER, WINDOW_JSON, WINDOW_NAME, LiveWriteError, RawKey, WindowWriter
from tb_reduce_plugin.reduce.pipeline import index_file
from tb_reduce_plugin.serve.discovery import Catalog

ROOT = TESTS.parent
T0 = 1_796_000_000.0  # 2026-11-29T...Z


def synthetic_trace(path: Path, steps: int = 6, ops_per_step: int = 200, first_step: int = 1) -> Path:
    """A Kineto-shaped trace: `ProfilerStep#N` markers on the main thread, ops inside."""
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    ts = 1_000.0
    for s in range(first_step, first_step + steps):
        step_dur = 10_000.0 + 1_000.0 * (s % 3)
        events.append({"ph": "X", "name": f"ProfilerStep#{s}", "cat": "user_annotation", "pid": 1, "tid": 1,
                       "ts": ts, "dur": step_dur})
        for k in range(ops_per_step):
            name = ("aten::conv2d", "aten::copy_", "aten::addmm", "DataLoader.__next__")[k % 4]
            events.append({"ph": "X", "name": name, "cat": "cpu_op", "pid": 1, "tid": 1,
                           "ts": ts + 1 + k * (step_dur - 2) / ops_per_step, "dur": (step_dur - 2) / ops_per_step / 2,
                           "args": {"k": k}})
        ts += step_dur + 50.0
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


@pytest.fixture
def raw(tmp_path: Path) -> Path:
    (tmp_path / "raw").mkdir()
    return synthetic_trace(tmp_path / "raw" / "w.pt.trace.json")


def visible_windows(live: Path) -> list[str]:
    return sorted(n for n in os.listdir(live) if not n.startswith("."))


def check_complete(folder: Path) -> None:
    """A visible window folder holds its whole trace and window.json."""
    meta = json.loads((folder / WINDOW_JSON).read_text())
    trace = folder / meta["output"]["file"]
    assert trace.stat().st_size == meta["output"]["file_bytes"]
    index = index_file(trace)
    assert index.events == meta["events"]["out"] > 0
    assert not index.truncated


def test_write_makes_a_discovered_run(tmp_path: Path, raw: Path) -> None:
    logdir = tmp_path / "logdir"
    w = WindowWriter(logdir)
    rec = w.write(raw, T0 + 0.1234, T0 + 2.5, host="worker0")
    assert WINDOW_NAME.match(rec.name) and rec.name.endswith("-000001")
    assert rec.name.startswith(windows.window_time(T0 + 0.1234)) and rec.name.startswith("2026")
    assert rec.run == f"live/{rec.name}"
    assert rec.step_numbers == [1, 2, 3, 4, 5, 6] and rec.events_in == rec.events_out > 1000
    assert not rec.truncated
    meta = json.loads(Path(rec.folder, WINDOW_JSON).read_text())
    assert meta["captured"]["t0"] == T0 + 0.1234 and meta["captured"]["t1"] == T0 + 2.5
    assert meta["raw"]["name"] == raw.name and meta["raw"]["size"] == raw.stat().st_size
    assert meta["events"] == {"in": rec.events_in, "out": rec.events_out}
    assert meta["steps"] == [1, 2, 3, 4, 5, 6] and meta["reduce_s"] > 0
    check_complete(Path(rec.folder))
    runs = Catalog(str(logdir)).runs()
    assert runs == [{"run": rec.run, "hosts": [{"host": "worker0", "format": "chrome-json",
                                                 "bytes": Path(rec.trace_path).stat().st_size}]}]
    assert w.seen(raw, raw.stat().st_size, raw.stat().st_mtime_ns)


def test_names_sort_by_capture_time_and_never_clash(tmp_path: Path, raw: Path) -> None:
    w = WindowWriter(tmp_path, keep=None)
    names = [w.write(raw, T0 + dt, T0 + dt + 1).name for dt in (0.0, 0.0, 1.5, 60.0)]
    assert len(set(names)) == 4 and names == sorted(names) == w.windows()


def test_truncated_raw_window(tmp_path: Path, raw: Path) -> None:
    data = raw.read_bytes()
    cut = tmp_path / "raw" / "cut.pt.trace.json"
    cut.write_bytes(data[: len(data) * 2 // 3])
    rec = WindowWriter(tmp_path / "logdir").write(cut, T0, T0 + 1)
    assert rec.truncated and 0 < rec.events_in < index_file(raw).events
    assert json.loads(Path(rec.folder, WINDOW_JSON).read_text())["raw"]["truncated"] is True


def test_prune_keeps_newest_and_never_anomaly_runs_nor_the_windows_they_name(tmp_path: Path, raw: Path) -> None:
    w = WindowWriter(tmp_path, keep=3)
    first = w.write(raw, T0, T0 + 1)
    anomaly = Path(w.live_dir) / f"{first.name}-anomaly-20261129T000001Z"
    anomaly.mkdir()
    (anomaly / "anomaly.json").write_text("{}")
    other = Path(w.live_dir) / "notes"
    other.mkdir()
    names = [first.name] + [w.write(raw, T0 + i, T0 + i + 1).name for i in range(1, 7)]
    assert w.windows() == [first.name] + names[-3:]  # the window holding the anomaly stays, beside the newest 3
    assert anomaly.is_dir() and other.is_dir()
    w.protected = {names[-3]}  # an anomaly still to be preserved holds its window too
    w.write(raw, T0 + 8, T0 + 9)
    assert names[-3] in w.windows() and names[-2] in w.windows() and len(w.windows()) == 5
    w.protected = set()
    shutil.rmtree(anomaly)
    w.prune()
    now = w.windows()
    assert len(now) == 3 and first.name not in now and names[-3] not in now
    assert not [n for n in os.listdir(w.live_dir) if n.startswith((".window-", ".pruned-"))]
    assert len(w.prune()) == 0
    w.keep = 1
    assert w.prune() == now[:2] and w.windows() == now[-1:]


def test_resume_continues_numbering_and_skips_written_windows(tmp_path: Path, raw: Path) -> None:
    other = synthetic_trace(tmp_path / "raw" / "x.pt.trace.json", steps=2)
    w = WindowWriter(tmp_path, keep=1)
    a = w.write(raw, T0, T0 + 1)
    b = w.write(other, T0 + 1, T0 + 2)
    assert w.windows() == [b.name]  # a's folder is pruned: the ledger still knows it
    w2 = WindowWriter(tmp_path, keep=1)
    assert w2.seen(raw, a.raw.size, a.raw.mtime_ns) and w2.seen(other, b.raw.size, b.raw.mtime_ns)
    assert not w2.seen(raw, a.raw.size + 1, a.raw.mtime_ns)
    assert w2.write(raw, T0 + 2, T0 + 3).sequence == 3
    # Without the ledger, window.json still holds the keys of the windows that remain.
    os.unlink(Path(w.live_dir) / LEDGER)
    w3 = WindowWriter(tmp_path, keep=1)
    assert w3.seen(raw, a.raw.size, a.raw.mtime_ns) and w3.write(other, T0 + 3, T0 + 4).sequence == 4
    # A caller's key (a watcher's listing) is what `seen` answers for.
    key = RawKey(str(raw), 5, 7)
    w3.write(raw, T0 + 5, T0 + 6, key=key)
    assert WindowWriter(tmp_path).seen(raw, 5, 7)


def test_ledger_line_cut_by_a_kill_is_skipped(tmp_path: Path, raw: Path) -> None:
    w = WindowWriter(tmp_path)
    rec = w.write(raw, T0, T0 + 1)
    with open(Path(w.live_dir) / LEDGER, "ab") as f:
        f.write(b'{"seq": 99, "path": "/x", "si')
    w2 = WindowWriter(tmp_path)
    assert w2.seen(raw, rec.raw.size, rec.raw.mtime_ns)
    assert w2.write(raw, T0 + 1, T0 + 2).sequence == 2


def test_unwritable_logdir_is_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    with pytest.raises(LiveWriteError) as err:
        WindowWriter(blocker / "sub")
    msg = str(err.value)
    assert "\n" not in msg and str(blocker / "sub" / "live") in msg and "cannot write live windows" in msg
    assert isinstance(err.value, TraceError)


def test_logdir_turned_into_a_file_after_start(tmp_path: Path, raw: Path) -> None:
    w = WindowWriter(tmp_path / "logdir")
    os.rmdir(w.live_dir)
    Path(w.live_dir).write_text("in the way")
    with pytest.raises(LiveWriteError, match="cannot write live windows into"):
        w.write(raw, T0, T0 + 1)


def test_full_disk_leaves_no_partial_folder(tmp_path: Path, raw: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = WindowWriter(tmp_path)

    def full(index, out, *args, **kwargs):
        out.write(b"\x1f\x8b partly written")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(windows, "reduce_index", full)
    with pytest.raises(LiveWriteError) as err:
        w.write(raw, T0, T0 + 1)
    assert "disk is full" in str(err.value) and w.live_dir in str(err.value)
    assert os.listdir(w.live_dir) == []


def test_file_size_limit_is_a_real_write_failure(tmp_path: Path, raw: Path) -> None:
    """A write refused by the kernel (RLIMIT_FSIZE: EFBIG) mid-trace: one line, nothing left."""
    script = textwrap.dedent("""
        import resource, signal, sys
        from tb_reduce_plugin.errors import TraceError
        from tb_reduce_plugin.live.windows import WindowWriter
        w = WindowWriter(sys.argv[1])
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4_000, 4_000))
        try:
            w.write(sys.argv[2], 1796000000.0, 1796000001.0)
        except TraceError as exc:
            print(type(exc).__name__, exc)
    """)
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "logdir"), str(raw)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("LiveWriteError cannot write live windows into") and out.stdout.count("\n") == 1
    assert "Traceback" not in out.stderr
    assert os.listdir(tmp_path / "logdir" / "live") == []


def test_a_raw_file_that_is_not_a_trace(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pt.trace.json"
    bad.write_text("hello")
    w = WindowWriter(tmp_path / "logdir")
    with pytest.raises(TraceError) as err:
        w.write(bad, T0, T0 + 1)
    assert not isinstance(err.value, LiveWriteError)
    assert os.listdir(w.live_dir) == []
    with pytest.raises(TraceError, match="host"):
        w.write(bad, T0, T0 + 1, host="../x")


def test_no_folder_is_visible_before_it_is_complete(tmp_path: Path, raw: Path) -> None:
    """Listing while a thread writes and prunes: every visible window is whole."""
    w = WindowWriter(tmp_path, keep=3)
    live = Path(w.live_dir)
    done = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(12):
                w.write(raw, T0 + i, T0 + i + 1)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            done.set()

    threading.Thread(target=writer).start()
    checked = 0
    while not done.is_set():
        for name in visible_windows(live):
            folder = live / name
            try:
                check_complete(folder)
                checked += 1
            except (OSError, TraceError):
                assert not folder.exists(), f"{name} is visible but not complete"  # else pruned meanwhile
    assert not errors
    assert checked > 0 and len(w.windows()) == 3


KILL_SCRIPT = """
import sys, time
from tb_reduce_plugin.live.windows import WindowWriter
w = WindowWriter(sys.argv[1], keep=4)
print("ready", flush=True)
while True:
    w.write(sys.argv[2], time.time(), time.time() + 1)
"""


def test_sigkill_at_random_moments_leaves_only_complete_windows(tmp_path: Path) -> None:
    raw = synthetic_trace(tmp_path / "big.pt.trace.json", steps=8, ops_per_step=1500)
    logdir = tmp_path / "logdir"
    script = tmp_path / "loop.py"
    script.write_text(KILL_SCRIPT)
    rng = random.Random(11)
    for _ in range(10):
        proc = subprocess.Popen([sys.executable, str(script), str(logdir), str(raw)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n", proc.stderr
            time.sleep(rng.uniform(0.0, 0.6))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        assert proc.returncode == -signal.SIGKILL
    live = logdir / "live"
    seqs = []
    for name in visible_windows(live):
        assert WINDOW_NAME.match(name), name
        check_complete(live / name)
        seqs.append(int(name.rsplit("-", 1)[1]))
    # A window is published before the oldest is pruned (never fewer than `keep` shown): a kill
    # between the two leaves one more, which the next write prunes (below).
    assert 0 < len(seqs) <= 4 + 1
    before = set(os.listdir(live))
    w = WindowWriter(logdir, keep=4)
    assert not [n for n in os.listdir(live) if n.startswith((".window-", ".pruned-"))]
    assert {n for n in before if not n.startswith(".")} <= set(os.listdir(live))
    rec = w.write(raw, time.time(), time.time() + 1)
    assert rec.sequence > max(seqs)
    assert Catalog(str(logdir)).find(rec.run, "window") is not None
    assert len(visible_windows(live)) == 4 and rec.name in visible_windows(live)


@pytest.mark.parametrize("kind", ["chrome", "xspace"])
def test_a_big_window_is_parsed_into_a_temporary_folder_that_goes_with_its_record(
        tmp_path: Path, raw: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A window from `SPILL_FROM_BYTES` on (a JAX XSpace of hundreds of MB) is parsed as
    the CLI parses without --cache-dir: its bytes and columns written to a folder of TMPDIR
    and mapped, file-backed pages rather than the sidecar's memory. The window is the one
    a parse in memory writes, its record's index still serves the triggers, and the folder
    goes when the record is dropped."""
    import gc
    import gzip
    import tempfile

    import numpy as np

    from tb_reduce_plugin.index import store
    from tb_reduce_plugin.live.triggers import StepHistory, evaluate, parse_trigger

    src = next((TESTS.parent / "demo_logdir" / "jax_mlp").rglob("*.xplane.pb")) if kind == "xspace" else raw
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    in_memory = WindowWriter(tmp_path / "memory").write(src, T0, T0 + 1)
    assert not isinstance(in_memory.table.table.ts, np.memmap) and list(temp.iterdir()) == []
    monkeypatch.setattr(store, "SPILL_FROM_BYTES", 0)
    spilled = WindowWriter(tmp_path / "spilled").write(src, T0, T0 + 1)
    assert isinstance(spilled.table.table.ts, np.memmap) and len(list(temp.iterdir())) == 1
    assert gzip.decompress(Path(spilled.trace_path).read_bytes()) == gzip.decompress(
        Path(in_memory.trace_path).read_bytes())
    triggers = [parse_trigger("step:1.01x"), parse_trigger("stall:1ms"), parse_trigger("name:.:1us")]
    firings = [[f.reason for f in evaluate(triggers, r.table, StepHistory(), steps=r.steps, source=str(src))]
               for r in (in_memory, spilled)]
    assert firings[0] == firings[1] and firings[0]
    del spilled
    gc.collect()
    assert list(temp.iterdir()) == []


def test_a_big_window_whose_temporary_folder_cannot_be_made_is_read_in_memory_and_written_the_same(
        tmp_path: Path, raw: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A TMPDIR that is missing or refuses a folder (full, read-only) costs the sidecar its
    file-backed pages, not the window: parsed in memory, the same window written."""
    import gzip
    import tempfile

    import numpy as np

    from tb_reduce_plugin.index import store

    in_memory = WindowWriter(tmp_path / "memory").write(raw, T0, T0 + 1)
    monkeypatch.setattr(store, "SPILL_FROM_BYTES", 0)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "not-there" / "tmp"))
    refused = WindowWriter(tmp_path / "refused").write(raw, T0, T0 + 1)
    assert not isinstance(refused.table.table.ts, np.memmap)
    assert gzip.decompress(Path(refused.trace_path).read_bytes()) == gzip.decompress(
        Path(in_memory.trace_path).read_bytes())
