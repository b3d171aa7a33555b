"""The prepared state is kept small on disk (issue 26, "Index on disk ≤ 64 B per event"):
its int64 orders and row numbers are written as int32 when they fit, and the window index
and the flow binding keep orders, not sorted copies of the starts and times they search.
A restarted service plans, searches and sums from that state exactly as a fresh one does."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from index_support import CORPUS, chrome_traces, identity
from oracle_traces import TORCH_GPU
from plugin_support import require_corpus

from tb_reduce_plugin.index import store as store_module
from tb_reduce_plugin.index.store import index_digest
from tb_reduce_plugin.model.sorting import search_by
from tb_reduce_plugin.reduce.plan import default_window
from tb_reduce_plugin.serve.service import TraceService


def _traces() -> list[Path]:
    """A real GPU trace with flows, the corpus's CPU CNN and its largest PyTorch gzip."""
    torch = sorted((CORPUS / "generated" / "torch_cpu_cnn_small").glob("*.pt.trace.json"))
    gz = [p for p in chrome_traces() if p.name.endswith(".pt.trace.json.gz")]
    return [TORCH_GPU] + torch[:1] + ([max(gz, key=lambda p: p.stat().st_size)] if gz else [])


def _copied(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "logs" / "run" / src.name
    dst.parent.mkdir(parents=True)
    shutil.copyfile(src, dst)
    return dst


def _folder(cache: str, trace: Path) -> Path:
    return Path(cache) / "index" / index_digest(str(trace), identity(trace))


def _first_service(src: Path, tmp_path: Path) -> tuple:
    """`src` copied into a logdir, and a service over it with a cache folder: (the copy, the
    logdir, the cache, the service, its host, the trace's default window)."""
    if src != TORCH_GPU:
        require_corpus()
    trace = _copied(src, tmp_path)
    logdir, cache = str(trace.parent.parent), str(tmp_path / "cache")
    first = TraceService(logdir, cache_dir=cache)
    host = first.runs()[0]["hosts"][0]["host"]
    return trace, logdir, cache, first, host, first.on_index(first.trace_file("run", host),
                                                              lambda i: default_window(i.table))


def _answers(s: TraceService, host: str, lo: float, hi: float) -> list:
    out = []
    span = hi - lo
    for level in (0, 2, 4):
        for a, b in ((lo, hi), (lo + 0.2 * span, lo + 0.45 * span), (lo + 0.6 * span, lo + 0.61 * span)):
            r = s.reduction("run", host, level, a, b)
            data = r.body.read()  # a gzip body's bytes depend on how it was streamed: its JSON is compared
            out.append((level, a, b, gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data))
    out.append(s.search("run", host, "a", start_us=lo + 0.1 * span, end_us=lo + 0.9 * span))
    out.append(s.aggregate("run", host, lo + 0.3 * span, lo + 0.7 * span))
    return out


@pytest.mark.parametrize("src", _traces(), ids=lambda p: p.name[:40])
def test_a_restart_answers_from_the_narrowed_kept_state_what_a_fresh_service_answers(src, tmp_path) -> None:
    trace, logdir, cache, first, host, (lo, hi) = _first_service(src, tmp_path)
    _answers(first, host, lo, hi)  # every kind of state made, the window index in the background
    first.wait_saved()
    assert first.warm_index(first.trace_file("run", host)).prepared.window_index is not None

    folder = _folder(cache, trace)
    manifest = json.loads((folder / "prepared.json").read_text())
    assert manifest["prepared"] == store_module.PREPARED_VERSION
    assert not {"point_ts", "tier_start", "flow_ts"} & set(manifest["spec"]["window_index"]["f"])
    assert not {"sstart", "send"} & set(manifest["spec"]["flow_binding"]["f"])
    widths = {np.load(folder / name, mmap_mode="r").dtype for name in manifest["files"]}
    assert np.dtype(np.int32) in widths and np.dtype(np.int64) not in widths, widths

    second = TraceService(logdir, cache_dir=cache)
    p = second.on_index(second.trace_file("run", host), lambda i: i.prepared)
    assert p.window_index is not None and p.static.slice_order.dtype == np.int32
    fresh = TraceService(logdir, cache_dir=str(tmp_path / "fresh"))
    assert _answers(second, host, lo, hi) == _answers(fresh, host, lo, hi)


def test_a_state_of_the_format_before_is_dropped_quietly_and_prepared_again(tmp_path, caplog) -> None:
    trace = _copied(TORCH_GPU, tmp_path)
    logdir, cache = str(trace.parent.parent), str(tmp_path / "cache")
    first = TraceService(logdir, cache_dir=cache)
    host = first.runs()[0]["hosts"][0]["host"]
    first.reduction("run", host, 2, None, None)
    first.wait_saved()
    folder = _folder(cache, trace)
    manifest = json.loads((folder / "prepared.json").read_text())
    del manifest["prepared"]  # as the format before wrote it
    (folder / "prepared.json").write_text(json.dumps(manifest))
    second = TraceService(logdir, cache_dir=cache)
    with caplog.at_level("INFO", logger="tb_reduce_plugin"):
        assert second.on_index(second.trace_file("run", host), lambda i: i.prepared.ready_fields()) == set()
    assert "another format" in caplog.text and "damaged" not in caplog.text
    fresh = TraceService(logdir, cache_dir=str(tmp_path / "fresh"))
    assert second.reduction("run", host, 3, None, None).body.read() == fresh.reduction("run", host, 3, None,
                                                                                       None).body.read()
    second.wait_saved()
    assert json.loads((folder / "prepared.json").read_text())["prepared"] == store_module.PREPARED_VERSION


def test_an_array_whose_values_do_not_fit_int32_is_kept_as_int64(tmp_path) -> None:
    big = np.array([0, 2**31, -5], dtype=np.int64)
    small = np.arange(-3, 3 * store_module.NARROW_CHUNK, 7, dtype=np.int64)
    for name, a, width in (("big.npy", big, np.int64), ("small.npy", small, np.int32)):
        size, crc = store_module._write_narrowed(str(tmp_path), name, a, {})
        back = np.load(tmp_path / name)
        assert back.dtype == width and np.array_equal(back, a)
        assert size == (tmp_path / name).stat().st_size


@pytest.mark.parametrize("side", ["left", "right"])
def test_a_search_through_an_order_finds_what_searchsorted_finds_over_the_sorted_keys(side) -> None:
    """Many queries a step at a time and one by bisection: NaN last, infinities, runs of equal keys."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(0, 80))
        keys = np.round(rng.normal(size=n), 1)
        for odd in (np.nan, np.inf, -np.inf):
            if n and rng.random() < 0.3:
                keys[rng.integers(0, n, size=3)] = odd
        keys = np.sort(keys)  # NaN last, as numpy sorts
        order = rng.permutation(n)
        stored = np.empty(n)
        stored[order] = keys  # keys[i] is stored[order[i]]
        x = np.r_[np.round(rng.normal(size=16), 1), np.nan, np.inf, -np.inf]
        lo = int(rng.integers(0, n + 1))
        hi = int(rng.integers(lo, n + 1))
        def key_at(r, stored=stored, order=order):
            return stored[order[r]]

        want = lo + np.searchsorted(keys[lo:hi], x, side)
        assert np.array_equal(search_by(key_at, lo, hi, x, side), want), (keys[lo:hi], x)
        assert [int(search_by(key_at, lo, hi, float(v), side)) for v in x] == want.tolist()  # one at a time


@pytest.mark.parametrize("src", _traces()[:2], ids=lambda p: p.name[:40])
def test_a_restart_plans_never_asked_views_from_the_kept_state_as_a_fresh_service_does(src, tmp_path) -> None:
    """Views no service asked before (new resolutions: the whole-table plan, natively over
    columns kept once as one repeated value, as a restart maps them), the same bytes as a
    fresh service's."""
    _, logdir, cache, first, host, (lo, hi) = _first_service(src, tmp_path)
    first.reduction("run", host, 2, None, None)
    first.wait_saved()
    second = TraceService(logdir, cache_dir=cache)
    fresh = TraceService(logdir, cache_dir=str(tmp_path / "fresh"))
    span = hi - lo
    for res, window in ((977, (None, None)), (1201, (lo + 0.05 * span, lo + 0.95 * span)), (333, (None, None))):
        got = [s.reduction("run", host, 2, *window, resolution=res) for s in (second, fresh)]
        assert not got[0].stats.get("cached")
        bodies = [r.body.read() for r in got]
        assert [gzip.decompress(b) if b[:2] == b"\x1f\x8b" else b for b in bodies][0] == \
            [gzip.decompress(b) if b[:2] == b"\x1f\x8b" else b for b in bodies][1]
