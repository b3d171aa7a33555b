"""End to end: a real `tensorboard` process, found through its `tensorboard_plugins` entry point,
serving the Trace Reduce tab over HTTP — with the Python data path (`--load_fast=false`), the
Rust data server (`--load_fast=true`) and under `--path_prefix`."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest
from plugin_support import JAX_HOST, JAX_JSON_HOST, JAX_RUN, TORCH_HOST, TORCH_RUN, make_logdir

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1, whatever http_proxy says
URL_LINE = re.compile(r"TensorBoard \S+ at (http://\S+) ")
START_TIMEOUT_S = 90  # a cold start takes 5-10 s; leave room for a loaded CI machine


@dataclass
class TensorBoard:
    proc: subprocess.Popen
    url: str = ""  # as TensorBoard prints it, with the path prefix and a trailing slash
    log: list[str] = field(default_factory=list)

    def get(self, path: str, gz: bool = False, **params: Any) -> tuple[int, dict[str, str], bytes]:
        query = ("?" + urllib.parse.urlencode(params)) if params else ""
        req = urllib.request.Request(self.url + path + query, headers={"Accept-Encoding": "gzip"} if gz else {})
        try:
            with NO_PROXY.open(req, timeout=60) as r:
                return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
        except urllib.error.HTTPError as e:
            return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()

    def json(self, path: str, **params: Any) -> Any:
        status, _, data = self.get(path, **params)
        assert status == 200, (path, status, data[:300], self.tail())
        return json.loads(data)

    def children(self) -> list[int]:
        try:
            return [int(p) for p in Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()]
        except (OSError, ValueError):
            return []

    def tail(self) -> str:
        return "".join(self.log[-30:])


def _drain(stream: Any, sink: list[str], found: Callable[[str], None]) -> None:
    for line in iter(stream.readline, ""):
        sink.append(line)
        found(line)


@pytest.fixture
def tensorboard(tmp_path: Path) -> Iterator[Callable[..., TensorBoard]]:
    """Starts `tensorboard` on a logdir of real traces (a free port, its own cache) and kills it,
    with whatever it started, when the test ends."""
    started: list[tuple[TensorBoard, list[int]]] = []

    def start(*extra: str) -> TensorBoard:
        logdir = make_logdir(tmp_path / f"tb{len(started)}")
        cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--port", "0", "--host", "127.0.0.1",
               "--reload_interval", "0", "--tb_reduce_cache_dir", str(tmp_path / f"cache{len(started)}"), *extra]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env, start_new_session=True)
        tb = TensorBoard(proc)
        kids: list[int] = []
        started.append((tb, kids))
        ready = threading.Event()

        def found(line: str) -> None:
            m = URL_LINE.search(line)
            if m and not tb.url:
                tb.url = m.group(1)
                ready.set()

        threading.Thread(target=_drain, args=(proc.stdout, tb.log, found), daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready.wait(0.2):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"tensorboard did not start (exit {proc.poll()}):\n{tb.tail()}")
        kids.extend(tb.children())
        return tb

    yield start
    for tb, kids in started:
        kids.extend(k for k in tb.children() if k not in kids)
        if tb.proc.poll() is None:
            tb.proc.terminate()
            try:
                tb.proc.wait(15)
            except subprocess.TimeoutExpired:
                tb.proc.kill()
                tb.proc.wait(15)
        for pid in kids:  # the Rust data server exits when TensorBoard closes its stdin; make sure
            if "tensorboard" in _cmdline(pid):  # still ours, not a reused pid
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def check_plugin(tb: TensorBoard) -> None:
    """What the tab needs from TensorBoard: listed, its module loadable as the iframe loads it,
    runs found, a reduced trace served, and the second request a cache hit."""
    listing = tb.json("data/plugins_listing")["tb_reduce"]
    assert listing["enabled"] is True and listing["tab_name"] == "Trace Reduce"
    assert listing["loading_mechanism"]["type"] == "IFRAME"

    # The iframe page TensorBoard serves, and the module it imports, resolved as a browser would.
    status, headers, page = tb.get("data/plugin_entry.html", name="tb_reduce")
    assert status == 200 and headers["content-type"].startswith("text/html")
    base = re.search(rb'<base href="([^"]+)"', page)
    module = re.search(rb"import\(\"([^\"]+)\"\)", page)
    assert base and module
    entry_url = tb.url + "data/plugin_entry.html"
    module_url = urllib.parse.urljoin(urllib.parse.urljoin(entry_url, base.group(1).decode()), module.group(1).decode())
    assert module_url == tb.url + "data/plugin/tb_reduce/index.js"
    status, headers, js = tb.get(module_url[len(tb.url):])
    assert status == 200 and headers["content-type"].startswith("text/javascript") and b"render" in js

    runs = {r["run"]: {h["host"] for h in r["hosts"]} for r in tb.json("data/plugin/tb_reduce/runs")}
    assert runs == {JAX_RUN: {JAX_HOST, JAX_JSON_HOST}, TORCH_RUN: {TORCH_HOST}}

    status, headers, body = tb.get("data/plugin/tb_reduce/trace", gz=True, run=JAX_RUN, host=JAX_HOST, level=3)
    assert status == 200 and headers["content-encoding"] == "gzip", tb.tail()
    doc = json.loads(gzip.decompress(body))
    assert doc["tb_reduce"]["level"] == 3 and doc["tb_reduce"]["input"]["format"] == "xspace"
    assert 0 < len(doc["traceEvents"]) == doc["tb_reduce"]["output"]["events"] < doc["tb_reduce"]["input"]["events"]

    first = tb.json("data/plugin/tb_reduce/stats", run=TORCH_RUN, host=TORCH_HOST, level=2)
    second = tb.json("data/plugin/tb_reduce/stats", run=TORCH_RUN, host=TORCH_HOST, level=2)
    assert first["cached"] is False and second["cached"] is True
    assert first["output"] == second["output"] and first["level"] == 2

    status, _, data = tb.get("data/plugin/tb_reduce/stats", run="../../etc", host="passwd")
    assert status == 404 and "error" in json.loads(data)
    assert "Traceback" not in tb.tail()


def test_tensorboard_serves_the_trace_reduce_tab(tensorboard: Callable[..., TensorBoard]) -> None:
    tb = tensorboard("--load_fast=false")
    check_plugin(tb)


def test_tensorboard_with_the_rust_data_server_serves_the_tab_too(tensorboard: Callable[..., TensorBoard]) -> None:
    """`--load_fast=true`: TensorBoard reads event files through the Rust data server and gives
    plugins no multiplexer; the plugin walks the logdir itself, so it works the same."""
    try:
        import tensorboard_data_server

        binary: Optional[str] = tensorboard_data_server.server_binary()
    except ImportError:
        binary = None
    tb = tensorboard("--load_fast=true")
    check_plugin(tb)
    if binary:  # installed here: prove the run really used it rather than falling back
        deadline = time.monotonic() + 10
        while not any(binary in _cmdline(pid) for pid in tb.children()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert any(binary in _cmdline(pid) for pid in tb.children()), tb.tail()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\x00", b" ").decode()
    except OSError:
        return ""


def test_tensorboard_under_a_path_prefix_serves_the_tab_under_it(tensorboard: Callable[..., TensorBoard]) -> None:
    tb = tensorboard("--load_fast=false", "--path_prefix", "/tb")
    assert tb.url.endswith("/tb/")
    check_plugin(tb)
    root = TensorBoard(tb.proc, tb.url[: -len("tb/")], tb.log)
    assert root.get("data/plugin/tb_reduce/runs")[0] == 404  # only under the prefix
    status, headers, page = tb.get("data/plugin/tb_reduce/view", run=TORCH_RUN, host=TORCH_HOST, level=2)
    assert status == 200 and "script-src 'self'" in headers["content-security-policy"]
    assert b'src="static/view.js"' in page  # relative: resolves under the prefix
    assert tb.get("data/plugin/tb_reduce/static/view.js")[0] == 200
