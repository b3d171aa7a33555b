"""End to end: a real `tensorboard` process, found through its `tensorboard_plugins` entry point,
serving the Trace Reduce tab over HTTP — with the Python data path (`--load_fast=false`), the
Rust data server (`--load_fast=true`) and under `--path_prefix`."""

from __future__ import annotations

import gzip
import json
import re
import time
import urllib.parse
from pathlib import Path
from typing import Callable, Iterator, Optional

import pytest
from plugin_support import JAX_HOST, JAX_JSON_HOST, JAX_RUN, TORCH_HOST, TORCH_RUN, make_logdir
from tensorboard_process import StartFailed, TensorBoard, cmdline, start_tensorboard


@pytest.fixture
def tensorboard(tmp_path: Path) -> Iterator[Callable[..., TensorBoard]]:
    """Starts `tensorboard` on a logdir of real traces (a free port, its own cache) and kills it,
    with whatever it started, when the test ends."""
    started: list[TensorBoard] = []

    def start(*extra: str) -> TensorBoard:
        n = len(started)
        logdir = make_logdir(tmp_path / f"tb{n}")
        try:
            tb = start_tensorboard(logdir, tmp_path / f"cache{n}", *extra)
        except StartFailed as exc:
            pytest.fail(str(exc))
        started.append(tb)
        return tb

    yield start
    for tb in started:
        tb.stop()


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
        while not any(binary in cmdline(pid) for pid in tb.children()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert any(binary in cmdline(pid) for pid in tb.children()), tb.tail()


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
