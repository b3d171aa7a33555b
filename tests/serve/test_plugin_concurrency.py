"""Many simultaneous cold requests for one view compute it once (SPEC §6: one computation
per key however many requests arrive at once) and all get the same bytes."""

from __future__ import annotations

import http.client
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from plugin_support import JAX_HOST, JAX_RUN, ROUTE, TORCH_HOST, TORCH_RUN, client, get, make_logdir, make_plugin
from tensorboard.backend import application
from werkzeug.serving import make_server

from tb_reduce_plugin.serve import service as service_module
from tb_reduce_plugin.serve.plugin import TraceReducePlugin

THREADS = 16


class SlowCounter:
    """Counts calls of a service-module function and makes each take `delay` longer, so that
    every request of a burst arrives while the first is still computing."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str, delay: float) -> None:
        self.calls = 0
        self._lock = threading.Lock()
        real: Callable[..., Any] = getattr(service_module, name)

        def slow(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.calls += 1
            time.sleep(delay)
            return real(*args, **kwargs)

        monkeypatch.setattr(service_module, name, slow)


def burst(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Call `fn(i)` on n threads released at once; their results in order."""
    results: list[Any] = [None] * n
    errors: list[BaseException] = []
    gate = threading.Barrier(n)

    def work(i: int) -> None:
        try:
            gate.wait(timeout=30)
            results[i] = fn(i)
        except BaseException as exc:  # reported below, with the thread's own traceback
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    if errors:
        raise errors[0]
    return results


@pytest.fixture
def plugin(tmp_path: Path) -> TraceReducePlugin:
    return make_plugin(make_logdir(tmp_path), tmp_path / "cache")


def test_simultaneous_cold_requests_for_one_view_compute_it_once(plugin: TraceReducePlugin,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    built = SlowCounter(monkeypatch, "index_file", 0.3)
    reduced = SlowCounter(monkeypatch, "reduce_index", 0.3)
    params = dict(run=TORCH_RUN, host=TORCH_HOST, level=3, start_us="5120909500000", end_us="5120909800000")

    def request(i: int) -> tuple[int, bytes, str]:
        r = get(client(plugin), "trace", gz=True, **params)  # one client per thread, one app for all
        return r.status_code, r.get_data(), r.headers["ETag"]

    results = burst(THREADS, request)
    assert {status for status, _, _ in results} == {200}
    assert len({body for _, body, _ in results}) == 1 and len({etag for _, _, etag in results}) == 1
    assert built.calls == 1 and reduced.calls == 1
    assert len(plugin.service.indexes) == 1 and len(list(Path(plugin.service.disk.directory).glob("*.entry"))) == 1


def test_simultaneous_requests_for_several_levels_share_one_index(plugin: TraceReducePlugin,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    built = SlowCounter(monkeypatch, "index_file", 0.3)
    reduced = SlowCounter(monkeypatch, "reduce_index", 0.0)
    levels = [0, 1, 2, 3, 4]

    def request(i: int) -> tuple[int, int]:
        r = get(client(plugin), "stats", run=JAX_RUN, host=JAX_HOST, level=levels[i % len(levels)])
        return r.status_code, r.get_json()["output"]["events"]

    results = burst(3 * len(levels), request)
    assert {status for status, _ in results} == {200}
    by_level: dict[int, set[int]] = {}
    for i, (_, events) in enumerate(results):
        by_level.setdefault(levels[i % len(levels)], set()).add(events)
    assert all(len(v) == 1 for v in by_level.values())  # every request of a level saw the same reduction
    assert built.calls == 1 and reduced.calls == len(levels)


def test_a_failure_reaches_every_simultaneous_request_as_the_same_422(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logdir = make_logdir(tmp_path)
    (logdir / "bad").mkdir()
    (logdir / "bad" / "w.pt.trace.json.gz").write_bytes(b"\x1f\x8b\x08\x00" + b"not deflate" * 50)
    plugin = make_plugin(logdir, tmp_path / "cache")
    built = SlowCounter(monkeypatch, "index_file", 0.3)
    results = burst(THREADS, lambda i: get(client(plugin), "stats", run="bad", host="w", level=2))
    assert {r.status_code for r in results} == {422} and len({r.get_data() for r in results}) == 1
    assert built.calls == 1
    assert b"Traceback" not in results[0].get_data()


# ---- the same over real HTTP: werkzeug's threaded server, one connection per request ------------


@pytest.fixture
def server(plugin: TraceReducePlugin) -> Iterator[int]:
    srv = make_server("127.0.0.1", 0, application.TensorBoardWSGI([plugin]), threaded=True)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv.server_port
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(10)


def test_simultaneous_http_requests_get_identical_bytes_from_one_computation(server: int, plugin: TraceReducePlugin,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    reduced = SlowCounter(monkeypatch, "reduce_index", 0.3)
    built = SlowCounter(monkeypatch, "index_file", 0.0)
    query = urllib.parse.urlencode({"run": JAX_RUN, "host": JAX_HOST, "level": "2"})

    def request(i: int) -> tuple[int, bytes, str | None]:
        conn = http.client.HTTPConnection("127.0.0.1", server, timeout=60)
        try:
            conn.request("GET", f"{ROUTE}trace?{query}", headers={"Accept-Encoding": "gzip"})
            r = conn.getresponse()
            return r.status, r.read(), r.getheader("Content-Encoding")
        finally:
            conn.close()

    results = burst(THREADS, request)
    assert {(status, enc) for status, _, enc in results} == {(200, "gzip")}
    bodies = {body for _, body, _ in results}
    assert len(bodies) == 1 and next(iter(bodies))[:2] == b"\x1f\x8b"
    assert reduced.calls == 1 and built.calls == 1
