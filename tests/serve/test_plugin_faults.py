"""Faults around the plugin that used to give 500s (issue 9): a cache directory that is
read-only, full, or cannot be created; windows whose width overflows a float; traces
whose own time span does. Real files, a real tmpfs where the test runs as root, the
plugin behind TensorBoard's own WSGI app."""

from __future__ import annotations

import gc
import gzip
import json
import logging
import mmap
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest
from plugin_support import (
    JAX_SMALL,
    TORCH_HOST,
    TORCH_RUN,
    assert_json_error,
    body_json,
    client,
    get,
    make_logdir,
    make_plugin,
    require_corpus,
)

from tb_reduce_plugin.model import mapped


def mount_tmpfs(path: Path, *options: str) -> bool:
    """A tmpfs at `path` (root only); False where this machine does not allow it."""
    if os.geteuid() != 0:
        return False
    path.mkdir(parents=True, exist_ok=True)
    opts = ",".join(options or ("size=256k",))
    return subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True).returncode == 0


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "tmpfs"
    if not mount_tmpfs(mount):
        pytest.skip("needs root and mount to make a small or read-only filesystem")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def reference(tmp_path: Path, level: int) -> bytes:
    """The trace as a plugin with a working cache serves it."""
    plugin = make_plugin(make_logdir(tmp_path / "ref"), tmp_path / "ref-cache")
    resp = get(client(plugin), "trace", gz=True, run=TORCH_RUN, host=TORCH_HOST, level=level)
    assert resp.status_code == 200
    return gzip.decompress(resp.get_data())


def test_a_read_only_cache_directory_serves_from_memory_and_warns_once(
        tmp_path: Path, tmpfs: Path, caplog: pytest.LogCaptureFixture) -> None:
    require_corpus()
    cache = tmpfs / "cache"
    cache.mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    plugin = make_plugin(make_logdir(tmp_path), cache)
    c = client(plugin)
    with caplog.at_level(logging.WARNING):
        for level in (0, 0, 2, 3):
            resp = get(c, "trace", gz=True, run=TORCH_RUN, host=TORCH_HOST, level=level)
            assert resp.status_code == 200, resp.get_data()[:300]
            assert json.loads(gzip.decompress(resp.get_data()))["tb_reduce"]["level"] == level
            assert get(c, "stats", run=TORCH_RUN, host=TORCH_HOST, level=level).status_code == 200
    warnings = [r for r in caplog.records if "cache directory" in r.getMessage()]
    assert len(warnings) == 1 and "memory" in warnings[0].getMessage()
    assert gzip.decompress(get(c, "trace", gz=True, run=TORCH_RUN, host=TORCH_HOST, level=0).get_data()) == \
        reference(tmp_path, 0)


def test_an_xspace_served_from_memory_then_cut_short_on_disk_is_never_answered_from_zeros(
        tmp_path: Path, tmpfs: Path) -> None:
    """A read-only cache: the XSpace is read in memory, its file mapped where it lies for the
    events a view keeps. Cut short after the first view, the next view reads zeros where
    its pages were (the guard): it is refused with a clear error, never served, and the
    server goes on answering."""
    require_corpus()
    profile = tmp_path / "logs" / "jax" / "plugins" / "profile" / "2026_01_01_00_00_00"
    profile.mkdir(parents=True)
    xspace = profile / "vm.xplane.pb"
    shutil.copyfile(JAX_SMALL / "vm.xplane.pb", xspace)
    cache = tmpfs / "cache"
    cache.mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    plugin = make_plugin(tmp_path / "logs", cache)
    c = client(plugin)
    run = "jax/2026_01_01_00_00_00"
    assert get(c, "trace", gz=True, run=run, host="vm", level=2).status_code == 200
    index = plugin.service.warm_index(plugin.service.trace_file(run, "vm"))
    assert index is not None and all(isinstance(line.data, mmap.mmap) for line in index.source.lines)
    plugin.service.catalog.max_age_s = 3600  # the listing not looked at again: the view reads the mapping
    faults = mapped.faults()
    os.truncate(xspace, 4096)  # as a profiler writing the file again in place would
    # The zeros read where the cut pages were are thrown away, and the file is read again:
    # what is left of it is said to be what it is now, a cut XSpace.
    error = assert_json_error(get(c, "trace", run=run, host="vm", level=0), 422)
    assert mapped.faults() > faults and error.startswith("not a valid XSpace: vm.xplane.pb")
    assert get(c, "runs").status_code == 200


def test_a_full_cache_directory_still_serves_traces_bigger_than_it(tmp_path: Path) -> None:
    """64 kB of disk, a level-0 trace of ~1.6 MB JSON (~120 kB gzip): the cache fills half
    way through the body, which moves to memory; the answer is the whole trace, every time."""
    require_corpus()
    small = tmp_path / "small"
    if not mount_tmpfs(small, "size=64k"):
        pytest.skip("needs root and mount to make a small filesystem")
    try:
        check_full_cache(tmp_path, small)
    finally:
        subprocess.run(["umount", "-l", str(small)], capture_output=True)


def check_full_cache(tmp_path: Path, tmpfs: Path) -> None:
    plugin = make_plugin(make_logdir(tmp_path), tmpfs / "cache")
    c = client(plugin)
    want = reference(tmp_path, 0)
    assert len(gzip.compress(want)) > 64 * 1024
    for _ in range(2):
        resp = get(c, "trace", gz=True, run=TORCH_RUN, host=TORCH_HOST, level=0)
        assert resp.status_code == 200 and gzip.decompress(resp.get_data()) == want
    assert plugin.service.disk.write_failures >= 1
    assert not [p for p in (tmpfs / "cache").iterdir() if p.name.startswith(".tmp-")]  # nothing half-written left
    del resp
    gc.collect()
    index = plugin.service.warm_index(plugin.service.trace_file(TORCH_RUN, TORCH_HOST))
    assert index is not None
    # Bodies held in memory were charged; with the responses gone only the index is.
    assert plugin.service.budget.used == index.account.total > 0


def test_a_cache_path_under_a_regular_file_loads_the_plugin_and_serves(tmp_path: Path) -> None:
    require_corpus()
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    plugin = make_plugin(make_logdir(tmp_path), blocker / "cache")
    assert plugin.is_active() and not plugin.service.disk.usable
    c = client(plugin)
    resp = get(c, "trace", gz=True, run=TORCH_RUN, host=TORCH_HOST, level=2)
    assert resp.status_code == 200 and json.loads(gzip.decompress(resp.get_data()))["tb_reduce"]["level"] == 2


@pytest.mark.parametrize("level", [0, 1, 2, 3, 4, "auto"])
@pytest.mark.parametrize("route", ["trace", "stats"])
def test_a_window_whose_width_overflows_a_float_is_a_400_at_every_level(tmp_path: Path, route: str, level: object) -> None:
    require_corpus()
    c = client(make_plugin(make_logdir(tmp_path), tmp_path / "cache"))
    resp = get(c, route, run=TORCH_RUN, host=TORCH_HOST, level=level, start_us=-1e308, end_us=1e308)
    assert "overflows" in assert_json_error(resp, 400)
    resp = get(c, route, run=TORCH_RUN, host=TORCH_HOST, level=level, start_us=0, end_us=1e-9)
    assert "at least" in assert_json_error(resp, 400)


def test_a_trace_spanning_the_whole_float_range_asks_for_a_window(tmp_path: Path) -> None:
    logdir = tmp_path / "logdir"
    (logdir / "wide").mkdir(parents=True)
    events = [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": -1e308, "dur": 1},
              {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 1e308, "dur": 1e308}]
    (logdir / "wide" / "w.trace.json").write_text(json.dumps({"traceEvents": events}))
    c = client(make_plugin(logdir, tmp_path / "cache"))
    for route in ("trace", "stats"):
        assert "ask for a window" in assert_json_error(get(c, route, run="wide", host="w", level=2), 422)
    resp = get(c, "trace", gz=True, run="wide", host="w", level=2, start_us=1e308 - 1e300, end_us=1e308)
    doc = body_json(resp)
    assert resp.status_code == 200 and [e["name"] for e in doc["traceEvents"]] == ["b"]
    assert json.dumps(doc, allow_nan=False)  # strict JSON: no Infinity anywhere
