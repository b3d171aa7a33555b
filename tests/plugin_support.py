"""Helpers for the plugin suites: logdirs built from real traces, and the plugin behind
TensorBoard's own WSGI app (as TensorBoard's tests do it)."""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client, TestResponse

from tb_reduce_plugin.serve.plugin import TraceReduceLoader, TraceReducePlugin

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
JAX_SMALL = CORPUS / "generated" / "jax_cpu_mlp_small"  # vm.xplane.pb + the vm.trace.json.gz JAX wrote beside it
TORCH_SMALL = CORPUS / "generated" / "torch_cpu_cnn_small"  # torch.profiler via tensorboard_trace_handler
CORRUPT_XPLANE = CORPUS / "public" / "xprof" / "xprof__convert__test_xplanes__tpu_inference_2@bfd424c8-CORRUPT.xplane.pb"

ROUTE = "/data/plugin/tb_reduce/"
JAX_TS = "2026_11_30_13_59_00"
JAX_RUN = f"jax/{JAX_TS}"  # `jax/plugins/profile/<ts>/` is run `jax/<ts>`
JAX_HOST = "vm"  # vm.xplane.pb (the XSpace keeps the plain host name)
JAX_JSON_HOST = "vm.trace.json.gz"  # JAX's JSON beside it, named by its whole file name
TORCH_RUN = "torch"
TORCH_HOST = "vm_12922.1795977935943642718"  # <worker>.<id>.pt.trace.json.gz, as tensorboard_trace_handler names it
TORCH_FILE = TORCH_HOST + ".pt.trace.json.gz"


def require_corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus is absent (a user's checkout); CI always has it")
    return CORPUS


def torch_trace_gz() -> bytes:
    """The real PyTorch trace, gzipped as `tensorboard_trace_handler(use_gzip=True)` writes it
    (the same bytes `bench/make_demo_logdir.py` puts in `demo_logdir/pytorch_cnn/`)."""
    src = next(TORCH_SMALL.glob("*.pt.trace.json"))
    return gzip.compress(src.read_bytes(), mtime=0)


def add_jax_run(logdir: Path, prefix: str = "jax", ts: str = JAX_TS) -> Path:
    """A JAX profile in XProf's layout: `<prefix>/plugins/profile/<ts>/vm.{xplane.pb,trace.json.gz}`."""
    run = logdir / prefix / "plugins" / "profile" / ts
    run.mkdir(parents=True, exist_ok=True)
    for name in ("vm.xplane.pb", "vm.trace.json.gz"):
        shutil.copyfile(JAX_SMALL / name, run / name)
    return run


def add_torch_run(logdir: Path, run: str = TORCH_RUN) -> Path:
    """A PyTorch trace-handler run: the trace file directly in the run directory."""
    d = logdir / run
    d.mkdir(parents=True, exist_ok=True)
    path = d / TORCH_FILE
    path.write_bytes(torch_trace_gz())
    return path


def make_logdir(root: Path) -> Path:
    """A logdir with one JAX run (two hosts) and one PyTorch run, all real traces."""
    require_corpus()
    logdir = root / "logdir"
    add_jax_run(logdir)
    add_torch_run(logdir)
    return logdir


def flags(cache_dir: Path, *argv: str) -> argparse.Namespace:
    """The plugin's flags parsed by its own loader's `define_flags`, as TensorBoard does."""
    parser = argparse.ArgumentParser()
    TraceReduceLoader().define_flags(parser)
    return parser.parse_args(["--tb_reduce_cache_dir", str(cache_dir), *argv])


def make_plugin(logdir: Path, cache_dir: Path, *argv: str) -> TraceReducePlugin:
    plugin = TraceReduceLoader().load(base_plugin.TBContext(logdir=str(logdir), flags=flags(cache_dir, *argv)))
    assert isinstance(plugin, TraceReducePlugin)
    plugin.service.catalog.max_age_s = 0  # tests change the logdir and expect to see it at once
    return plugin


def client(plugin: TraceReducePlugin) -> Client:
    """A werkzeug client on TensorBoard's own WSGI app holding just this plugin."""
    return Client(application.TensorBoardWSGI([plugin]))


class _ServerTracebacks(logging.Handler):
    """The tracebacks the plugin logs with each 500 it answers (`plugin._failure`), the
    latest few: a test that meets a 500 then fails saying why, at the top of its report
    (a long diff of bodies can push a captured log out of what CI shows)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.latest: collections.deque[str] = collections.deque(maxlen=4)
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.latest.append(self.format(record))


SERVER_TRACEBACKS = _ServerTracebacks()
logging.getLogger("tb_reduce_plugin.serve.plugin").addHandler(SERVER_TRACEBACKS)


def get(c: Client, route: str, gz: bool = False, headers: dict[str, str] | None = None, **params: Any) -> TestResponse:
    """A GET of a plugin route; an internal error (500, which no route may answer) fails
    the test at once with the server's traceback."""
    h = dict(headers or {})
    if gz:
        h["Accept-Encoding"] = "gzip"
    SERVER_TRACEBACKS.latest.clear()
    resp = c.get(ROUTE + route, query_string={k: str(v) for k, v in params.items()}, headers=h)
    if resp.status_code == 500:
        raise AssertionError(f"{route} answered 500; the server logged:\n" + "\n".join(SERVER_TRACEBACKS.latest))
    return resp


def body_json(resp: TestResponse) -> Any:
    data = resp.get_data()
    if resp.headers.get("Content-Encoding") == "gzip":
        data = gzip.decompress(data)
    return json.loads(data)


def assert_json_error(resp: TestResponse, status: int) -> str:
    """A JSON `{"error": "..."}` with `status`, one line, no traceback; returns the message."""
    assert resp.status_code == status, (resp.status_code, resp.get_data()[:300])
    assert resp.mimetype == "application/json"
    doc = body_json(resp)
    assert set(doc) == {"error"} and isinstance(doc["error"], str) and doc["error"]
    assert "Traceback" not in doc["error"] and "\n" not in doc["error"] and 'File "' not in doc["error"]
    return doc["error"]
