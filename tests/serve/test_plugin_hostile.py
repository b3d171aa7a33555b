"""Hostile parameters: nothing a request can say reaches a file outside the logdir (or the
dashboard's folder), and every refusal is a 400 or 404 — never a 500, never a traceback."""

from __future__ import annotations

import gzip
import http.client
import json
import threading
import urllib.parse
from pathlib import Path
from typing import Iterator

import pytest
from conftest import TESTS
from plugin_support import (
    JAX_HOST,
    JAX_RUN,
    JAX_TS,
    ROUTE,
    TORCH_FILE,
    TORCH_HOST,
    TORCH_RUN,
    client,
    make_logdir,
    make_plugin,
    torch_trace_gz,
)
from tensorboard.backend import application
from werkzeug.serving import make_server
from werkzeug.test import Client, TestResponse

from tb_reduce_plugin.serve.plugin import TraceReducePlugin, frontend_dir

SECRET = "TOP-SECRET-7f3a9c1e"  # in files outside the logdir: must never come back
REPO = TESTS.parent
SETUP_PY_MARK = b"tensorboard_plugins"  # in the repository's setup.py, one level above frontend/
PASSWD_MARK = b"root:x:0:0"
VIEW_HTML = frontend_dir() / "view.html"

HOSTILE_NAMES = [
    "..", "../", "./", ".", "/", "//", "../../etc/passwd", "../" * 40 + "etc/passwd", "/etc/passwd", "/etc",
    "..\\..\\secret", "\\etc\\passwd", "C:\\Windows\\win.ini", "torch/../torch", "./torch", "torch/", "torch//",
    "jax/plugins/profile/" + JAX_TS, "jax/plugins/profile", "linked", "linked/secret", "outside", "secret",
    "leak", "leak2", TORCH_FILE, TORCH_HOST + ".pt.trace.json", "vm.xplane.pb", "%2e%2e%2f", "%252e%252e%252f",
    "..%2f..%2fetc%2fpasswd", "a" * 300, "é" * 300, "../" * 1300, "日本語/../../", "\u202e../", "\ufeff..", "\ud7ff",
    "~root", "$HOME", "`id`", "'; DROP TABLE runs; --", "<script>alert(1)</script>", "*", "?", "#", "%",
]
CONTROL = ["\x00", "..\x00", "torch\x00", "x" * 5000, "\n", "torch\r\nSet-Cookie: a=b", "\t..", "\x1b[31m"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, TraceReducePlugin]]:
    """A logdir of real traces with symlinks out of it, and secrets beside it, served as a logdir
    that untrusted jobs write into is (links out not followed)."""
    root = tmp_path_factory.mktemp("hostile")
    logdir = make_logdir(root)
    outside = root / "outside"
    outside.mkdir()
    trace = {"traceEvents": [{"ph": "X", "name": SECRET, "pid": 1, "tid": 1, "ts": 0, "dur": 5, "args": {"k": SECRET}}]}
    (outside / "secret.pt.trace.json").write_text(json.dumps(trace))
    (outside / "secret.txt").write_text(SECRET)
    (outside / "plugins" / "profile" / "x").mkdir(parents=True)
    (outside / "plugins" / "profile" / "x" / "secret.trace.json").write_text(json.dumps(trace))
    (logdir / TORCH_RUN / "leak.pt.trace.json").symlink_to(outside / "secret.pt.trace.json")
    (logdir / TORCH_RUN / "leak2.json").symlink_to(outside / "secret.pt.trace.json")
    (logdir / "linked").symlink_to(outside, target_is_directory=True)
    plugin = make_plugin(logdir, root / "cache", "--tb_reduce_follow_symlinks=false")
    yield root, logdir, plugin


@pytest.fixture(scope="module")
def c(world: tuple[Path, Path, TraceReducePlugin]) -> Client:
    return client(world[2])


def assert_refused(resp: TestResponse, statuses: tuple[int, ...] = (400, 404)) -> None:
    """Refused with a one-line JSON error from the plugin, or TensorBoard's own 404 for a path
    no route takes; in both cases nothing from outside."""
    data = resp.get_data()
    if resp.headers.get("Content-Encoding") == "gzip":
        data = gzip.decompress(data)
    assert resp.status_code in statuses, (resp.status_code, resp.request.url if resp.request else "", data[:200])
    assert SECRET.encode() not in data and SETUP_PY_MARK not in data and PASSWD_MARK not in data
    assert b"Traceback" not in data and b'File "' not in data
    if resp.mimetype == "application/json":
        doc = json.loads(data)
        assert set(doc) == {"error"} and "\n" not in doc["error"]
    else:  # TensorBoard's router: no plugin route matched
        assert resp.status_code == 404 and data == b"Not found"


def assert_refused_or_view_page(resp: TestResponse, route: str, statuses: tuple[int, ...] = (400, 404)) -> None:
    """`view` sends its static page for any well-formed run and host (the page itself reports an
    unknown one): then it must be exactly that page, with nothing of the query reflected in it."""
    if route == "view" and resp.status_code == 200:
        data = resp.get_data()
        assert (gzip.decompress(data) if resp.headers.get("Content-Encoding") == "gzip" else data) == VIEW_HTML.read_bytes()
    else:
        assert_refused(resp, statuses)


def raw_get(c: Client, path_and_query: str) -> TestResponse:
    """A request whose path and query go as written (already percent-encoded by the caller)."""
    return c.get(ROUTE + path_and_query)


def test_the_symlinks_out_of_the_logdir_are_not_listed(c: Client) -> None:
    r = c.get(ROUTE + "runs")
    assert r.status_code == 200 and SECRET.encode() not in r.get_data()
    listed = {(run["run"], h["host"]) for run in json.loads(r.get_data()) for h in run["hosts"]}
    assert listed == {(JAX_RUN, JAX_HOST), (JAX_RUN, "vm.trace.json.gz"), (TORCH_RUN, TORCH_HOST)}


@pytest.mark.parametrize("route", ["trace", "stats", "event", "view"])
@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=range(len(HOSTILE_NAMES)))
def test_a_hostile_run_or_host_is_404(c: Client, route: str, name: str) -> None:
    for run, host in ((name, TORCH_HOST), (TORCH_RUN, name), (name, name), (JAX_RUN, name)):
        r = c.get(ROUTE + route, query_string={"run": run, "host": host, "i": "0", "level": "2"})
        assert_refused_or_view_page(r, route, (404,))


@pytest.mark.parametrize("route", ["trace", "stats", "event", "view"])
@pytest.mark.parametrize("name", CONTROL, ids=range(len(CONTROL)))
def test_control_characters_and_huge_values_are_400(c: Client, route: str, name: str) -> None:
    for run, host in ((name, TORCH_HOST), (TORCH_RUN, name)):
        assert_refused(c.get(ROUTE + route, query_string={"run": run, "host": host, "i": "0"}), (400,))


@pytest.mark.parametrize("query", [
    "run=%2e%2e%2f&host=vm", "run=..%2F..%2Fetc&host=passwd", "run=%252e%252e%252f&host=%252e%252e",
    "run=torch&host=%2e%2e%2foutside%2fsecret", "run=%00&host=vm", "run=torch%00.pt&host=x", "run=torch&host=%ff%fe",
    "run=torch&host=%c0%ae%c0%ae%2f", "run=torch&host=%e2%80%ae", "run=/etc&host=passwd", "run=torch&run=..&host=leak",
    "run[]=torch&host=leak", "run=linked&host=secret", "run=linked/plugins/profile/x&host=secret",
    "run=torch&host=leak&i=0", "run=torch&host=leak2&i=0", "run=x/&host=secret",
])
def test_encoded_and_double_encoded_names_are_refused(c: Client, query: str) -> None:
    for route in ("trace", "stats", "event", "view"):
        assert_refused_or_view_page(raw_get(c, f"{route}?{query}&i=0"), route)


@pytest.mark.parametrize("params", [
    {"level": "2\x00"}, {"level": "../2"}, {"level": "9" * 5000}, {"level": "²"}, {"level": "<b>"}, {"level": "1e0"},
    {"start_us": "1" * 400, "end_us": "1" * 401}, {"start_us": "0x10", "end_us": "0x20"}, {"start_us": "-inf", "end_us": "0"},
    {"start_us": "1", "end_us": "NaN"}, {"start_us": "", "end_us": "5"}, {"start_us": "1;2", "end_us": "5"},
    {"i": "²"}, {"i": "0" * 13}, {"i": "1" * 5000}, {"i": "-0"}, {"i": "0x0"}, {"i": "١"},
])
def test_hostile_levels_windows_and_event_indexes_are_400(c: Client, params: dict) -> None:
    route = "event" if "i" in params else "trace"
    assert_refused(c.get(ROUTE + route, query_string={"run": TORCH_RUN, "host": TORCH_HOST, **params}), (400,))


@pytest.mark.parametrize("path", [
    "static/../../setup.py", "static/../setup.py", "static/%2e%2e/%2e%2e/setup.py", "static/%2e%2e%2f%2e%2e%2fsetup.py",
    "static/%252e%252e%252fsetup.py", "static/..%5c..%5csetup.py", "static/..\\..\\setup.py", "static/..", "static/.",
    "static/", "static/%00", "static/view.js%00", "static/view.js%00.html", "static/" + "a" * 300, "static/" + "é" * 200,
    "static/%ff%fe", "static//etc/passwd", "static/%2fetc%2fpasswd", "static/.hidden", "static/~", "static/*",
    "static/view.js/", "static/view.js/..", "static/%2e%2e", "static/%2E%2E%2F%2E%2E%2Fsetup.py",
    "index.js/../x", "index.js/..%2f..%2fsetup.py", "index.js%00", "%2e%2e/%2e%2e/setup.py",
    "..%2f..%2fsetup.py", "../../setup.py", "static/../../../../../../etc/passwd", "static/..%2f..%2f..%2fetc%2fpasswd",
    "view/../index.js/../../setup.py", "runs/..", "trace/../../../etc/passwd",
])
def test_hostile_paths_to_dashboard_files_are_404(c: Client, path: str) -> None:
    assert_refused(raw_get(c, path), (404,))


def test_dashboard_files_are_only_the_frontend_folders_own(c: Client, world: tuple[Path, Path, TraceReducePlugin]) -> None:
    frontend = world[2].frontend
    for f in frontend.iterdir():
        if f.is_file() and not f.name.startswith("."):
            r = raw_get(c, "static/" + urllib.parse.quote(f.name))
            assert r.status_code == 200 and r.get_data() == f.read_bytes()
    assert_refused(raw_get(c, "static/setup.py"), (404,))  # a name in the folder above: not there


def test_the_secret_never_appears_in_any_response(c: Client) -> None:
    """One sweep over every route with every name that could reach the symlinked secret."""
    names = ["leak", "leak2", "secret", "linked", "outside", "linked/plugins/profile/x", "x", "../outside", "..", "secret.txt"]
    for route in ("runs", "trace", "stats", "event", "view"):
        for run in [TORCH_RUN, JAX_RUN, *names]:
            for host in names:
                for level in ("0", "auto"):
                    r = c.get(ROUTE + route, query_string={"run": run, "host": host, "level": level, "i": "0", "download": "1"},
                              headers={"Accept-Encoding": "gzip"})
                    if route == "runs":
                        assert r.status_code == 200 and SECRET.encode() not in r.get_data()
                    else:
                        assert_refused_or_view_page(r, route, (404,))


def test_a_valid_request_still_works_amid_the_hostile_ones(c: Client) -> None:
    r = c.get(ROUTE + "stats", query_string={"run": TORCH_RUN, "host": TORCH_HOST, "level": "4"})
    assert r.status_code == 200 and json.loads(r.get_data())["level"] == 4


# ---- over real HTTP: what a browser or curl sends, and the headers a server must encode --------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """The plugin in TensorBoard's WSGI app behind werkzeug's real threaded HTTP server, on a free port."""
    logdir = make_logdir(tmp_path)
    srv = make_server("127.0.0.1", 0, application.TensorBoardWSGI([make_plugin(logdir, tmp_path / "cache")]), threaded=True)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv.server_port, logdir
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(10)


def http_get(port: int, target: str) -> tuple[int, dict[str, str], bytes]:
    """GET with the request target sent byte for byte (http.client does not normalise `..`)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.putrequest("GET", target, skip_accept_encoding=True)
        conn.endheaders()
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def test_traversal_over_real_http_reads_nothing_outside(server: tuple[int, Path]) -> None:
    port, _ = server
    for target in ["static/../../setup.py", "static/%2e%2e/%2e%2e/setup.py", "static/..%2f..%2fsetup.py",
                   "static/%2e%2e%5c%2e%2e%5csetup.py", "index.js/../../../setup.py", "static/view.js%00",
                   "trace?run=..%2F..%2F&host=etc%2Fpasswd", "event?run=%2Fetc&host=passwd&i=0"]:
        status, headers, data = http_get(port, ROUTE + target)
        assert status in (400, 404), (target, status)
        assert SETUP_PY_MARK not in data and PASSWD_MARK not in data and b"Traceback" not in data


@pytest.mark.parametrize("name", ["рабочий-узел", 'we"ird;name', "tab\u00a0space", "emoji-\U0001f525"])
def test_a_host_with_an_unusual_name_downloads_under_a_safe_ascii_file_name(server: tuple[int, Path], name: str) -> None:
    """HTTP headers are Latin-1: a host named in another script must not break the download."""
    port, logdir = server
    (logdir / TORCH_RUN / f"{name}.pt.trace.json.gz").write_bytes(torch_trace_gz())
    query = urllib.parse.urlencode({"run": TORCH_RUN, "host": name, "level": "4", "download": "1"})
    status, headers, data = http_get(port, f"{ROUTE}trace?{query}")
    assert status == 200 and headers["content-type"] == "application/gzip"
    disposition = headers["content-disposition"]
    assert disposition.isascii() and disposition.startswith('attachment; filename="') and disposition.endswith('.level4.json.gz"')
    assert disposition.count('"') == 2 and ";" not in disposition.split('filename="')[1]
    assert data[:2] == b"\x1f\x8b"
