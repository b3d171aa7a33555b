"""A gzip's text is kept (compressed in chunks) after its first view, not during it
(`TraceService._keep_store`): the first view does not wait for the compression, a zoom
asked while it is kept reads what is kept so far once the keeping has passed its events
(else waits for it) rather than read the whole file again, the index's other writes wait
until the text is kept, and a build that cannot run leaves the next full pass to keep it,
as before."""

from __future__ import annotations

import gzip
import threading
from pathlib import Path

import pytest
from index_support import copied_gz_trace, stored_folder
from plugin_support import require_corpus

from tb_reduce_plugin.formats import chrome_json
from tb_reduce_plugin.formats.block_store import BlockStore
from tb_reduce_plugin.formats.chrome_json import ChromeJsonEvents
from tb_reduce_plugin.native import scanner_module
from tb_reduce_plugin.reduce.plan import default_window
from tb_reduce_plugin.serve import service as service_module
from tb_reduce_plugin.serve.service import TraceService

# Kept after the first view only where the first pass noted where each event lies (the
# native scanner does); the pure build keeps the blocks it decoded during that pass, as before.
pytestmark = pytest.mark.skipif(scanner_module() is None, reason="no event positions without the native scanner")


@pytest.fixture()
def gz_trace(tmp_path) -> Path:
    """A real PyTorch trace as gzip, whose events are read back by inflating."""
    require_corpus()
    return copied_gz_trace(tmp_path)


def host_of(path: Path) -> str:
    return path.name[: -len(".pt.trace.json.gz")]


def body(r) -> bytes:
    data = r.body.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def whole_passes(monkeypatch: pytest.MonkeyPatch) -> list:
    """The passes over a whole file a source makes (each opens a `TraceStream`)."""
    calls: list = []
    original = chrome_json.TraceStream
    monkeypatch.setattr(chrome_json, "TraceStream", lambda *a, **k: calls.append(a) or original(*a, **k))
    return calls


def a_window(service: TraceService, host: str) -> tuple[float, float]:
    lo, hi = service.on_index(service.trace_file("run", host), lambda i: default_window(i.table))
    return lo + (hi - lo) * 0.4, lo + (hi - lo) * 0.45


def expected(gz_trace: Path, tmp_path: Path, level: int, window: tuple) -> bytes:
    fresh = TraceService(str(gz_trace.parent.parent), cache_dir=str(tmp_path / "fresh"))
    fresh.store = None  # no index store, no deferring: one pass reads what the window needs
    return body(fresh.reduction("run", host_of(gz_trace), level, *window))


def held_back_keeping(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Keeping a text waits for the event returned, once set (30 s at most)."""
    go = threading.Event()
    original = ChromeJsonEvents.keep_store

    def held_back(self: ChromeJsonEvents) -> bool:
        assert go.wait(30)
        return original(self)

    monkeypatch.setattr(ChromeJsonEvents, "keep_store", held_back)
    return go


def test_the_first_view_does_not_wait_for_the_text_to_be_kept(gz_trace: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    go = held_back_keeping(monkeypatch)
    service = TraceService(str(gz_trace.parent.parent), cache_dir=str(tmp_path / "cache"))
    host = host_of(gz_trace)
    first = body(service.reduction("run", host, 2, None, None))  # answered while the keeping waits
    source = service.warm_index(service.trace_file("run", host)).source
    assert isinstance(source, ChromeJsonEvents) and source.defer_store and not source.has_store
    go.set()
    service.wait_saved()
    assert source.has_store
    folder = stored_folder(service.store, gz_trace)
    assert (folder / "blocks.json").is_file() and (folder / "blocks.bin").stat().st_size > 0
    window = a_window(service, host)
    passes = whole_passes(monkeypatch)
    zoom = body(service.reduction("run", host, 1, *window))
    assert passes == []  # read from the kept chunks
    assert zoom == expected(gz_trace, tmp_path, 1, window)
    assert first == expected(gz_trace, tmp_path, 2, (None, None))


def test_a_zoom_asked_once_the_keeping_has_passed_its_events_reads_them_without_waiting_for_the_rest(
        gz_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built, go = threading.Event(), threading.Event()
    original = ChromeJsonEvents._adopt

    def adopt_when_told(self: ChromeJsonEvents, builder):  # the pass is done; the store not yet adopted
        built.set()
        assert go.wait(30)
        return original(self, builder)

    monkeypatch.setattr(ChromeJsonEvents, "_adopt", adopt_when_told)
    service = TraceService(str(gz_trace.parent.parent), cache_dir=str(tmp_path / "cache"))
    host = host_of(gz_trace)
    passes = whole_passes(monkeypatch)
    service.reduction("run", host, 2, None, None)
    assert built.wait(30) and len(passes) == 2  # the first view's pass, and the keeping's
    window = a_window(service, host)
    out: dict = {}
    zoom = threading.Thread(target=lambda: out.update(r=body(service.reduction("run", host, 1, *window))))
    zoom.start()
    zoom.join(30)
    alive = zoom.is_alive()
    go.set()
    zoom.join(30)
    service.wait_saved()
    assert not alive  # read from the chunks kept so far and the tail, not after the store was adopted
    assert len(passes) == 2 and out["r"] == expected(gz_trace, tmp_path, 1, window)


def test_a_zoom_whose_events_are_not_kept_yet_waits_for_the_keeping_instead_of_reading_the_file_again(
        gz_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    held, go = threading.Event(), threading.Event()
    original = BlockStore._write

    def write_held(self: BlockStore, frames, sizes) -> None:  # the keeping stops after its first chunks
        original(self, frames, sizes)
        if self.path.startswith(str(tmp_path / "cache")) and ".blocks-" in self.path:
            held.set()
            assert go.wait(30)

    monkeypatch.setattr(BlockStore, "_write", write_held)
    service = TraceService(str(gz_trace.parent.parent), cache_dir=str(tmp_path / "cache"))
    host = host_of(gz_trace)
    passes = whole_passes(monkeypatch)
    service.reduction("run", host, 2, None, None)
    assert held.wait(30) and len(passes) == 2
    window = a_window(service, host)
    out: dict = {}
    zoom = threading.Thread(target=lambda: out.update(r=body(service.reduction("run", host, 1, *window))))
    zoom.start()
    zoom.join(0.5)
    assert zoom.is_alive()  # its events lie past the first chunk: it waits for the keeping
    go.set()
    zoom.join(30)
    service.wait_saved()
    assert len(passes) == 2 and out["r"] == expected(gz_trace, tmp_path, 1, window)


def test_the_first_view_keeps_the_texts_last_mib_where_kineto_writes_what_every_window_shows(
        gz_trace: Path, tmp_path: Path) -> None:
    service = TraceService(str(gz_trace.parent.parent), cache_dir=str(tmp_path / "cache"))
    service.reduction("run", host_of(gz_trace), 2, None, None)
    service.wait_saved()
    source = service.warm_index(service.trace_file("run", host_of(gz_trace))).source
    text = gzip.decompress(gz_trace.read_bytes())
    at, tail = source._tail
    assert at == max(0, len(text) - chrome_json.TAIL_BYTES) and tail == text[at:]
    assert b'"ph": "M"' in tail or b'"ph":"M"' in tail
    index = service.warm_index(service.trace_file("run", host_of(gz_trace)))
    held = index.memory_bytes()
    source._tail = None
    assert held - index.memory_bytes() == len(tail)  # counted in the index's memory


def test_text_that_cannot_be_kept_now_is_kept_by_the_next_full_pass(gz_trace: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service_module, "KEEP_STORE_BYTES", 1 << 50)  # more than any budget: refused
    service = TraceService(str(gz_trace.parent.parent), cache_dir=str(tmp_path / "cache"))
    host = host_of(gz_trace)
    service.reduction("run", host, 2, None, None)
    service.wait_saved()
    source = service.warm_index(service.trace_file("run", host)).source
    assert not source.has_store and not source.defer_store
    window = a_window(service, host)
    zoom = body(service.reduction("run", host, 1, *window))  # a full pass, keeping the text as it reads
    assert source.has_store and zoom == expected(gz_trace, tmp_path, 1, window)


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_a_disk_that_fills_or_refuses_while_the_text_is_kept_leaves_no_store_and_zooms_still_answer(
        gz_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str) -> None:
    """No chunk file left behind, nothing half-kept adopted; each zoom reads the whole file
    (trying to keep its text as it reads, failing the same way) and answers as a fresh one."""
    from tb_reduce_plugin.formats import block_store

    class FullDisk:
        def __init__(self, inner) -> None:
            self.inner, self.writes = inner, 0

        def write(self, data) -> int:
            self.writes += 1
            if self.writes > 2:
                raise OSError(28, "No space left on device")
            return self.inner.write(data)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    original_init = block_store.BlockStore.__init__

    def faulty_init(self, directory: str, prefix: str = ".blocks-") -> None:
        if fault == "read-only":
            raise OSError(30, "Read-only file system")
        original_init(self, directory, prefix)
        self._file = FullDisk(self._file)

    monkeypatch.setattr(block_store.BlockStore, "__init__", faulty_init)
    cache = tmp_path / "cache"
    service = TraceService(str(gz_trace.parent.parent), cache_dir=str(cache))
    host = host_of(gz_trace)
    first = body(service.reduction("run", host, 2, None, None))
    service.wait_saved()
    source = service.warm_index(service.trace_file("run", host)).source
    assert first and not source.has_store and not source.defer_store
    window = a_window(service, host)
    want = expected(gz_trace, tmp_path, 1, window)
    passes = whole_passes(monkeypatch)
    assert body(service.reduction("run", host, 1, *window)) == want
    assert len(passes) == 1 and not source.has_store
    assert not list(cache.rglob(".blocks-*"))


def test_the_index_writers_jobs_wait_until_the_text_is_kept(gz_trace: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """On two cores, writing the prepared state and making the window index took a core from
    the keeping that a zoom right after a first view waits for: they come after it."""
    go, order = threading.Event(), []
    original = ChromeJsonEvents.keep_store

    def held_back(self: ChromeJsonEvents) -> bool:
        assert go.wait(30)
        order.append("text kept")
        return original(self)

    monkeypatch.setattr(ChromeJsonEvents, "keep_store", held_back)
    service = TraceService(str(gz_trace.parent.parent), cache_dir=str(tmp_path / "cache"))
    saved = service.store.save_prepared
    monkeypatch.setattr(service.store, "save_prepared", lambda idx: order.append("prepared saved") or saved(idx))
    window_index = service._prepare_window_index
    monkeypatch.setattr(service, "_prepare_window_index", lambda idx: order.append("windows") or window_index(idx))
    service.reduction("run", host_of(gz_trace), 2, None, None)
    service._writes.wait(30)  # what the writer was given so far is done
    assert order == []
    go.set()
    service.wait_saved()
    assert order[0] == "text kept" and "prepared saved" in order
    folder = stored_folder(service.store, gz_trace)
    assert (folder / "blocks.json").is_file()


def test_waiting_for_background_work_waits_for_every_services_keeping_and_writes(
        gz_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`wait_for_background_work` (what the suites that trace peaks wait for) returns once
    every service of the process has kept its text and written what it was given, without
    a handle on any of them."""
    go = held_back_keeping(monkeypatch)
    service = TraceService(str(gz_trace.parent.parent), cache_dir=str(tmp_path / "cache"))
    service.reduction("run", host_of(gz_trace), 2, None, None)
    keepers = [t for t in threading.enumerate() if t.name == service_module.KEEPER_THREAD]
    assert keepers and all(t.is_alive() for t in keepers)
    threading.Timer(0.3, go.set).start()
    service_module.wait_for_background_work(30)
    assert not any(t.is_alive() for t in keepers)
    folder = stored_folder(service.store, gz_trace)
    assert (folder / "blocks.json").is_file()  # kept, and the writer's jobs queued after it done


def test_kept_text_changed_on_disk_while_served_is_dropped_and_the_window_read_from_the_trace(
        gz_trace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Bytes of the kept text flipped under a running server (after it was checked): the
    window that meets them is answered from the trace, exactly, with a warning; the kept
    text is dropped, so later windows are not refused one after another."""
    service = TraceService(str(gz_trace.parent.parent), cache_dir=str(tmp_path / "cache"))
    host = host_of(gz_trace)
    service.reduction("run", host, 2, None, None)
    service.wait_saved()
    source = service.on_index(service.trace_file("run", host), lambda i: i.source)
    assert source.has_store
    path = Path(source._store.path)
    data = bytearray(path.read_bytes())
    for at in range(64, len(data), 4096):  # every chunk's frame, in place, the size unchanged
        data[at] ^= 0x5A
    with open(path, "r+b") as f:
        f.write(bytes(data))
    window = a_window(service, host)
    got = service.reduction("run", host, 0, *window)  # level 0: every event's JSON in the window
    assert body(got) == expected(gz_trace, tmp_path, 0, window)
    assert "kept of" in caplog.text and "damaged" in caplog.text
    later = (window[1], window[1] + (window[1] - window[0]))
    assert body(service.reduction("run", host, 1, *later)) == expected(gz_trace, tmp_path / "later", 1, later)
