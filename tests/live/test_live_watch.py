"""The watch source: files handed out as they land, growing, finished or cut off."""

from __future__ import annotations

import gzip
import os
import time
from pathlib import Path

import pytest

from tb_reduce_plugin.live.watch import Ready, Watcher
from tb_reduce_plugin.live.windows import WindowWriter
from tb_reduce_plugin.reduce.pipeline import index_file


@pytest.fixture
def trace_bytes(corpus: Path) -> bytes:
    (path,) = (corpus / "generated" / "torch_cpu_cnn_small").glob("*.pt.trace.json")
    return path.read_bytes()


def only(ready: list[Ready]) -> Ready:
    assert len(ready) == 1, ready
    return ready[0]


def test_file_written_in_two_pieces(tmp_path: Path, trace_bytes: bytes) -> None:
    full = tmp_path / "full.pt.trace.json"
    full.write_bytes(trace_bytes)
    all_events = index_file(full).events
    watch = tmp_path / "watch"
    (watch / "run1").mkdir(parents=True)
    w = Watcher(watch, settle_s=2.0, every_s=60.0)
    assert w.poll() == []
    target = watch / "run1" / "host.pt.trace.json"
    cut = int(len(trace_bytes) * 0.4) + 7  # mid-event
    with open(target, "wb") as f:
        f.write(trace_bytes[:cut])
        f.flush()
        # The pause: the writer is still at work; the first poll hands out what is there.
        first = only(w.poll())
        assert not first.final and first.size == cut and first.path == str(target)
        part = index_file(target, expect=first.identity())
        assert part.truncated and 0 < part.events < all_events
        assert w.poll() == []  # growing or not, no second partial within every_s
        f.write(trace_bytes[cut:])
    assert w.poll() == []  # just changed: not settled yet, and partial was handed out < every_s ago
    time.sleep(2.2)
    last = only(w.poll())
    assert last.final and last.size == len(trace_bytes) and last.mtime_ns == target.stat().st_mtime_ns
    done = index_file(target, expect=last.identity())
    assert done.events == all_events and not done.truncated
    assert w.poll() == []  # handed out final, unchanged: never again


def test_growing_file_is_handed_out_again_every_s(tmp_path: Path, trace_bytes: bytes) -> None:
    target = tmp_path / "h.pt.trace.json"
    w = Watcher(tmp_path, settle_s=30.0, every_s=0.0)
    done, events = 0, 0
    with open(target, "wb") as f:
        for cut in (len(trace_bytes) // 4, len(trace_bytes) // 2, len(trace_bytes) * 3 // 4):
            f.write(trace_bytes[done:cut])
            f.flush()
            done = cut
            r = only(w.poll())
            assert not r.final and r.size == cut
            assert w.poll() == []  # not grown since
            now = index_file(target).events
            assert now > events  # each partial holds more complete events
            events = now


def test_truncated_file_that_stops_growing_is_final(tmp_path: Path, trace_bytes: bytes) -> None:
    cut = int(len(trace_bytes) * 0.6) + 3
    target = tmp_path / "dead.pt.trace.json"
    target.write_bytes(trace_bytes[:cut])
    w = Watcher(tmp_path, settle_s=0.5, every_s=60.0)
    assert not only(w.poll()).final  # still young: partial
    time.sleep(0.7)
    r = only(w.poll())
    assert r.final and r.size == cut
    index = index_file(target, expect=r.identity())
    assert index.truncated and index.events > 0
    assert w.poll() == []
    # A writer that only paused and goes on: handed out again, as a new version.
    with open(target, "ab") as f:
        f.write(trace_bytes[cut:])
    r2 = only(w.poll())
    assert not r2.final and r2.size == len(trace_bytes)
    # The same cut file, long dead when first seen (mtime in the past): final at once.
    old = tmp_path / "old" / "x.pt.trace.json"
    old.parent.mkdir()
    old.write_bytes(trace_bytes[:cut])
    os.utime(old, (time.time() - 60, time.time() - 60))
    w2 = Watcher(old.parent, settle_s=5.0)
    assert only(w2.poll()).final


def test_special_files_and_links_out_are_skipped(tmp_path: Path, trace_bytes: bytes) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "o.pt.trace.json").write_bytes(trace_bytes)
    watch = tmp_path / "watch"
    watch.mkdir()
    os.mkfifo(watch / "pipe.pt.trace.json")
    os.symlink(outside / "o.pt.trace.json", watch / "link_out.pt.trace.json")
    os.symlink(outside, watch / "dir_link")
    (watch / ".hidden.pt.trace.json").write_bytes(trace_bytes)
    (watch / ".hidden_dir").mkdir()
    (watch / ".hidden_dir" / "h.pt.trace.json").write_bytes(trace_bytes)
    (watch / "notes.txt").write_text("x")
    (watch / "window.json").write_text('{"sequence": 1}')  # a .json that is not a trace
    (watch / "real.pt.trace.json").write_bytes(trace_bytes)
    os.symlink(watch / "real.pt.trace.json", watch / "link_in.pt.trace.json")
    (watch / "sub").mkdir()
    (watch / "sub" / "maybe.json").write_bytes(trace_bytes)  # sniffed: it is a trace
    w = Watcher(watch, settle_s=0.0)
    names = sorted(os.path.relpath(r.path, watch) for r in w.poll())
    assert names == ["link_in.pt.trace.json", "real.pt.trace.json", os.path.join("sub", "maybe.json")]
    assert w.poll() == []


def test_gzip_and_xspace_are_handed_out_only_final(tmp_path: Path, trace_bytes: bytes) -> None:
    gz = gzip.compress(trace_bytes)
    (tmp_path / "a.trace.json.gz").write_bytes(gz[: len(gz) // 2])
    (tmp_path / "b.xplane.pb").write_bytes(b"\x0a\x05hello")
    w = Watcher(tmp_path, settle_s=0.3, every_s=0.0)
    assert w.poll() == []
    time.sleep(0.4)
    assert sorted(os.path.basename(r.path) for r in w.poll() if r.final) == ["a.trace.json.gz", "b.xplane.pb"]


def test_excluded_folder_and_missing_path(tmp_path: Path, trace_bytes: bytes) -> None:
    w = Watcher(tmp_path / "not_yet", settle_s=0.0)
    assert w.poll() == []
    (tmp_path / "not_yet").mkdir()
    (tmp_path / "not_yet" / "t.pt.trace.json").write_bytes(trace_bytes)
    assert only(w.poll()).final
    logdir = tmp_path / "logdir"
    (logdir / "live" / "x").mkdir(parents=True)
    (logdir / "live" / "x" / "window.trace.json").write_bytes(trace_bytes)
    w2 = Watcher(tmp_path, settle_s=0.0, exclude=[logdir])
    assert [os.path.basename(r.path) for r in w2.poll()] == ["t.pt.trace.json"]


def test_ready_keys_match_the_window_writer(tmp_path: Path, trace_bytes: bytes) -> None:
    watch = tmp_path / "watch"
    watch.mkdir()
    (watch / "a.pt.trace.json").write_bytes(trace_bytes)
    w = Watcher(watch, settle_s=0.0)
    r = only(w.poll())
    writer = WindowWriter(tmp_path / "logdir")
    writer.write(r.path, r.mtime - 1, r.mtime, key=r.key)
    assert WindowWriter(tmp_path / "logdir").seen(r.path, r.size, r.mtime_ns)
    assert only(Watcher(watch, settle_s=0.0).poll()).key == r.key  # a restarted sidecar sees the same key
