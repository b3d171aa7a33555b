#!/usr/bin/env python3
"""Benchmark the cold "default view" of a large XSpace profile: tb-reduce vs XProf vs xprof-rs.

What is measured: the time and peak memory from nothing (a fresh process, no
cache on disk) to the trace a viewer shows first for one ``*.xplane.pb``.

* **tb-reduce** — a fresh Python process runs
  ``tb_reduce_plugin.reduce.pipeline.reduce_file(src, dst, level=2)`` into a
  ``.json.gz``: parse the XSpace, reduce, write. A second row does the same with
  ``level="auto"``.
* **XProf** (pip ``xprof``) — a fresh Python process runs
  ``xprof.convert.raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer@",
  params)`` with the params XProf's own profile plugin builds for a plain
  ``/data?tag=trace_viewer@`` request (resolution 8000, no time window,
  ``use_saved_result`` False). XProf writes ``*.SSTABLE`` cache files next to the
  XSpace, so every run converts a fresh copy in a new temporary directory (the
  copy is made before the process starts and is not timed).
* **xprof-rs** (the Rust server from PyPI ``xprof-rs``) — a fresh server on a free
  port, with a log directory that holds a fresh copy of the file as
  ``<logdir>/plugins/profile/<run>/<host>.xplane.pb`` (it too writes files there).
  Timed: server start until it answers ``/runs``, the first
  ``/data/plugin/profile/data?run=…&tag=trace_viewer@&host=…&resolution=8000``
  request, and process start until that response is complete (the cold time that
  is comparable to the other two). Peak RSS is ``VmHWM`` from
  ``/proc/<pid>/status`` right after the first response; CPU time is from
  ``/proc/<pid>/stat``. A few more requests of the same URL give the warm time.

Why: tb-reduce's claim is that its reduced default view of a big profile is
cheaper to produce than XProf's. The ratios tb-reduce / XProf (target <= 0.5 in
time and peak RSS) and tb-reduce / xprof-rs cold (aim <= 1.0) say whether it is.

How, and why so: the machine is small (2 cores) and shared, so every contender
runs in a fresh process, N times, interleaved round-robin (a noisy minute hurts
all alike), and only medians and ratios from the same run are reported. The
Python children are timed by ``bench_reduce.py``'s launcher (wall time around
spawn and wait, ``ru_maxrss`` from ``os.wait4``), so the wall time includes
interpreter start-up and imports, as a cold start does. The input is read once
first so that nobody is charged for disk reads.

Usage::

    python3 bench/bench_xspace.py                        # the 2 M-event JAX profile (generated if absent)
    python3 bench/bench_xspace.py PATH.xplane.pb -n 5
    python3 bench/bench_xspace.py PATH.xplane.pb --skip-xprof --skip-xprof-rs
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

# The script's own directory is sys.path[0] when it is run as a script.
from bench_reduce import REPO, Run, Series, child_env, fmt_row, impl_fingerprint, run_child

MB = 1e6
DEFAULT_OUT = "/tmp/jax_2m"
DEFAULT_STEPS = 52000
RESOLUTION = 8000
WARM_REQUESTS = 5
SERVER_START_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 600.0

# Child for tb-reduce: imports are inside the timed process, as in a cold start.
TB_SRC = r"""
import json, sys, time
t = time.perf_counter()
from tb_reduce_plugin.reduce.pipeline import reduce_file
level = sys.argv[3] if sys.argv[3] == "auto" else int(sys.argv[3])
stats = reduce_file(sys.argv[1], sys.argv[2], level=level)
print(json.dumps({"call_s": time.perf_counter() - t, "stats": stats}))
"""

# Child for XProf. The params are those of xprof/profile_plugin.py for a plain
# trace_viewer@ request (no start/end_time_ms, no format): trace_viewer_options with
# resolution and full_dma, use_saved_result at the top level, hosts = [host].
XPROF_SRC = r"""
import json, re, sys, time
t = time.perf_counter()
from xprof.convert import raw_to_tool_data
params = {"trace_viewer_options": {"resolution": int(sys.argv[3]), "full_dma": False},
          "use_saved_result": False, "hosts": [sys.argv[2]]}
data, content_type = raw_to_tool_data.xspace_to_tool_data([sys.argv[1]], "trace_viewer@", params)
call_s = time.perf_counter() - t
head = bytes(data[:4096]) if data else b""
m = re.search(rb'"returnedEventsSize":(\d+)', head)
print(json.dumps({"call_s": call_s, "bytes": len(data) if data else 0, "content_type": content_type,
                  "returned_events": int(m.group(1)) if m else None,
                  "has_trace_events": b'"traceEvents":[' in head, "head": head[:80].decode(errors="replace")}))
"""


@dataclass
class ServerRun:
    """One cold xprof-rs server: times from process start, first and warm requests, memory."""

    ready_s: float = float("nan")  # process start -> answers /runs
    first_s: float = float("nan")  # the first trace_viewer@ request alone
    cold_s: float = float("nan")  # process start -> first response complete
    warm_s: float = float("nan")  # median of WARM_REQUESTS more requests
    vmhwm_mb: float = float("nan")  # after the first response
    vmhwm_end_mb: float = float("nan")  # after the warm requests
    cpu_s: float = float("nan")  # server CPU time after the first response
    bytes: int = 0
    returned_events: Optional[int] = None
    error: str = ""


@dataclass
class ServerSeries:
    name: str
    runs: list[ServerRun] = field(default_factory=list)
    skipped: str = ""

    def ok_runs(self) -> list[ServerRun]:
        return [r for r in self.runs if not r.error]

    def median(self, attr: str) -> float:
        vals = [getattr(r, attr) for r in self.ok_runs()]
        return statistics.median(vals) if vals else float("nan")


# --------------------------------------------------------------------------- #
# input
# --------------------------------------------------------------------------- #


def ensure_input(path: Optional[str]) -> Path:
    """The XSpace to benchmark: the given one, or the 2 M-event JAX profile (waited for or generated)."""
    if path:
        if not os.path.isfile(path):
            sys.exit(f"no such file: {path}")
        return Path(path)
    pattern = os.path.join(DEFAULT_OUT, "plugins", "profile", "*", "*.xplane.pb")
    log = Path(DEFAULT_OUT + ".log")
    if not glob.glob(pattern) and log.exists() and "steps profiled" not in log.read_text(errors="replace"):
        print(f"waiting for the profile being generated (see {log}) ...", flush=True)
        while "steps profiled" not in log.read_text(errors="replace"):
            time.sleep(5)
    if not glob.glob(pattern):
        print(f"generating {DEFAULT_OUT} ({DEFAULT_STEPS} JAX steps) ...", flush=True)
        subprocess.run([sys.executable, str(REPO / "bench" / "make_jax_xspace.py"), "--steps", str(DEFAULT_STEPS),
                        "--out", DEFAULT_OUT], check=True)
    return Path(sorted(glob.glob(pattern))[-1])


def host_of(path: Path) -> str:
    """XProf's host name of an XSpace file: its name without ``.xplane.pb``."""
    return path.name[: -len(".xplane.pb")] if path.name.endswith(".xplane.pb") else path.stem


def warm_page_cache(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def fresh_copy(src: Path, parent: Path, rel: str) -> Path:
    """Copy ``src`` to ``parent/rel`` (not timed: every XProf/xprof-rs run gets a new one)."""
    dst = parent / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    return dst


# --------------------------------------------------------------------------- #
# the Python contenders
# --------------------------------------------------------------------------- #


def child_json(r: Run) -> dict:
    """The JSON line the child printed last, or {} when it failed."""
    lines = r.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1]) if r.rc == 0 and lines else {}
    except ValueError:
        return {}


def run_tb(src: Path, level: str, work: Path) -> Run:
    dst = work / f"tb_reduce_{level}.json.gz"
    r = run_child([sys.executable, "-c", TB_SRC, str(src), str(dst), level], cwd=REPO, env=child_env())
    dst.unlink(missing_ok=True)
    return r


def run_xprof(src: Path, work: Path) -> tuple[Run, int]:
    """One XProf conversion of a fresh copy; also the bytes of cache files XProf wrote beside it."""
    d = Path(tempfile.mkdtemp(prefix="xprof_", dir=work))
    try:
        copy = fresh_copy(src, d, src.name)
        r = run_child([sys.executable, "-c", XPROF_SRC, str(copy), host_of(src), str(RESOLUTION)], cwd=d)
        cache = sum(f.stat().st_size for f in d.iterdir() if f.name != copy.name)
        return r, cache
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------- #
# xprof-rs
# --------------------------------------------------------------------------- #


def xprof_rs_binary() -> Optional[str]:
    """The real binary: the pyenv shim on PATH is a bash script whose start-up would be timed too."""
    beside = Path(sys.executable).parent / "xprof-rs"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("xprof-rs")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# No proxies: a *_proxy variable in the environment must not reroute localhost.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_get(url: str, timeout: float = REQUEST_TIMEOUT_S) -> bytes:
    """GET ``url``, the whole body (urllib asks for identity encoding, so no compression)."""
    with OPENER.open(url, timeout=timeout) as resp:
        return resp.read()


def proc_status_mb(pid: int, key: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until_up(base: str, run: str, proc: subprocess.Popen) -> None:
    """Poll ``/runs`` until the server answers and lists ``run``."""
    deadline = time.perf_counter() + SERVER_START_TIMEOUT_S
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            runs = json.loads(http_get(f"{base}/data/plugin/profile/runs", timeout=5))
            if run in runs:
                return
            raise RuntimeError(f"server is up but lists runs {runs}, not {run!r}")
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.005)
    raise RuntimeError(f"server did not answer within {SERVER_START_TIMEOUT_S:.0f} s")


def trace_url(base: str, run: str, host: str) -> str:
    q = urllib.parse.urlencode({"run": run, "tag": "trace_viewer@", "host": host, "resolution": RESOLUTION})
    return f"{base}/data/plugin/profile/data?{q}"


def check_trace(body: bytes) -> Optional[int]:
    """``returnedEventsSize`` of a trace_viewer@ response; raises if the body is not the trace JSON."""
    head = body[:4096]
    if not body.startswith(b"{") or b'"traceEvents":[' not in head:
        raise RuntimeError(f"not a trace: {body[:200]!r}")
    m = re.search(rb'"returnedEventsSize":(\d+)', head)
    return int(m.group(1)) if m else None


def measure_server(proc: subprocess.Popen, t0: float, base: str, run: str, host: str) -> ServerRun:
    r = ServerRun()
    wait_until_up(base, run, proc)
    r.ready_s = time.perf_counter() - t0
    url = trace_url(base, run, host)
    t1 = time.perf_counter()
    body = http_get(url)
    t2 = time.perf_counter()
    r.first_s, r.cold_s = t2 - t1, t2 - t0
    r.vmhwm_mb, r.cpu_s = proc_status_mb(proc.pid, "VmHWM"), proc_cpu_s(proc.pid)
    r.bytes, r.returned_events = len(body), check_trace(body)
    warm = []
    for _ in range(WARM_REQUESTS):
        t = time.perf_counter()
        http_get(url)
        warm.append(time.perf_counter() - t)
    r.warm_s = statistics.median(warm)
    r.vmhwm_end_mb = proc_status_mb(proc.pid, "VmHWM")
    return r


def run_xprof_rs(binary: str, src: Path, work: Path) -> ServerRun:
    """One cold server on a fresh copy of the profile in XProf's log-directory layout."""
    logdir = Path(tempfile.mkdtemp(prefix="xprof_rs_", dir=work))
    run, host = "bench", host_of(src)
    fresh_copy(src, logdir, f"plugins/profile/{run}/{src.name}")
    port = free_port()
    log_path = logdir / "server.log"
    with open(log_path, "wb") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen([binary, "--logdir", str(logdir), "--port", str(port), "--host", "127.0.0.1"],
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        return measure_server(proc, t0, f"http://127.0.0.1:{port}", run, host)
    except (RuntimeError, OSError, urllib.error.URLError) as e:
        tail = log_path.read_text(errors="replace")[-500:] if log_path.exists() else ""
        return ServerRun(error=f"{e}; server log: {tail}")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(logdir, ignore_errors=True)


# --------------------------------------------------------------------------- #
# report
# --------------------------------------------------------------------------- #


def skip_reason(flag: bool, flag_name: str, available: bool, what: str) -> str:
    if flag:
        return flag_name
    return "" if available else what


def xprof_available() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import xprof.convert.raw_to_tool_data"], capture_output=True)
    return probe.returncode == 0


def log_python_run(i: int, n: int, s: Series, r: Run, extra: str = "") -> None:
    info = child_json(r)
    status = "ok" if r.rc == 0 else f"FAILED rc={r.rc}: {(r.stderr.strip().splitlines() or [''])[-1][:200]}"
    call = f"(call {info['call_s']:.2f} s)" if "call_s" in info else ""
    print(f"  [{i + 1}/{n}] {s.name:<30} {r.wall_s:8.2f} s {call:<16} {r.maxrss_mb:7.0f} MB  {status}{extra}",
          flush=True)


def log_server_run(i: int, n: int, s: ServerSeries, r: ServerRun) -> None:
    if r.error:
        print(f"  [{i + 1}/{n}] {s.name:<30} FAILED: {r.error[:400]}", flush=True)
        return
    print(f"  [{i + 1}/{n}] {s.name:<30} {r.cold_s:8.2f} s (first req {r.first_s:.2f} s) {r.vmhwm_mb:5.0f} MB  ok, "
          f"up after {r.ready_s:.3f} s, warm {1000 * r.warm_s:.1f} ms, {r.bytes / MB:.1f} MB response, "
          f"returnedEventsSize {r.returned_events}", flush=True)


WIDTHS = [30, 9, 8, 8, 10, 11, 8]


def python_row(s: Series) -> list[str]:
    ok = s.ok_runs()
    if s.skipped or not ok:
        return [s.name, "skipped" if s.skipped else "failed"] + [""] * 5
    calls = [child_json(r).get("call_s", float("nan")) for r in ok]
    return [s.name, f"{s.median('wall_s'):.2f}", f"{min(r.wall_s for r in ok):.2f}",
            f"{max(r.wall_s for r in ok):.2f}", f"{statistics.median(calls):.2f}",
            f"{s.median('maxrss_mb'):.0f}", f"{s.median('cpu_s'):.2f}"]


def server_row(s: ServerSeries) -> list[str]:
    ok = s.ok_runs()
    if s.skipped or not ok:
        return [s.name, "skipped" if s.skipped else "failed"] + [""] * 5
    return [s.name, f"{s.median('cold_s'):.2f}", f"{min(r.cold_s for r in ok):.2f}",
            f"{max(r.cold_s for r in ok):.2f}", f"{s.median('first_s'):.2f}",
            f"{s.median('vmhwm_mb'):.0f}", f"{s.median('cpu_s'):.2f}"]


def print_table(py: list[Series], server: ServerSeries) -> None:
    print(fmt_row(["contender", "median s", "min s", "max s", "in-call s", "peak RSS MB", "CPU s"], WIDTHS))
    print(fmt_row(["-" * w for w in WIDTHS], WIDTHS))
    for s in py:
        print(fmt_row(python_row(s), WIDTHS))
    print(fmt_row(server_row(server), WIDTHS))
    print("  median s = process start -> result (tb-reduce: file written; XProf: JSON in memory; "
          "xprof-rs: first response received)")
    print("  in-call s = after interpreter start (imports + call); for xprof-rs: the first request alone, server up")
    if server.ok_runs():
        print(f"  xprof-rs: up after {1000 * server.median('ready_s'):.0f} ms, warm request "
              f"{1000 * server.median('warm_s'):.1f} ms (median of {WARM_REQUESTS} per server), "
              f"VmHWM after the warm requests {server.median('vmhwm_end_mb'):.0f} MB")


def ratio_line(label: str, top: Series, bottom_time: float, bottom_rss: float, target: str) -> None:
    if not top.ok_runs() or bottom_time != bottom_time:  # nan: bottom missing
        return
    t, m = top.median("wall_s") / bottom_time, top.median("maxrss_mb") / bottom_rss
    print(f"{label}: {t:.2f}x time, {m:.2f}x peak RSS  ({target})")


def print_outputs(tb: Series, auto: Series, xprof: Series, xprof_cache: list[int], server: ServerSeries) -> None:
    """What each contender produced, so that the rows are known to have done the work."""
    for s in (tb, auto):
        info = child_json(s.ok_runs()[-1]) if s.ok_runs() else {}
        st = info.get("stats", {})
        if st:
            o = st["output"]
            print(f"{s.name}: level {st['level']}, {o['events']} events + {o['summaries']} summaries, "
                  f"{o['json_bytes'] / MB:.1f} MB JSON, {o['file_bytes'] / MB:.2f} MB gzip; "
                  f"own timings " + ", ".join(f"{k} {v:.2f}" for k, v in st.get("timings_s", {}).items()))
    info = child_json(xprof.ok_runs()[-1]) if xprof.ok_runs() else {}
    if info:
        print(f"XProf: {info['bytes'] / MB:.1f} MB {info['content_type']}, returnedEventsSize "
              f"{info['returned_events']}, traceEvents present: {info['has_trace_events']}, starts {info['head']!r}; "
              f"cache files written beside the copy: {statistics.median(xprof_cache) / MB:.1f} MB")
    if server.ok_runs():
        r = server.ok_runs()[-1]
        print(f"xprof-rs: {r.bytes / MB:.1f} MB application/json, returnedEventsSize {r.returned_events}")


# --------------------------------------------------------------------------- #
# main
# --------------------------------------------------------------------------- #


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("xspace", nargs="?", help=f"*.xplane.pb (default: the {DEFAULT_STEPS}-step JAX profile in "
                                              f"{DEFAULT_OUT}, generated if absent)")
    ap.add_argument("-n", "--repeats", type=int, default=3)
    ap.add_argument("--skip-xprof", action="store_true")
    ap.add_argument("--skip-xprof-rs", action="store_true")
    ap.add_argument("--skip-auto", action="store_true", help="no tb-reduce level=auto row")
    ap.add_argument("--work-dir", default=tempfile.gettempdir(), help="where the copies and outputs go")
    a = ap.parse_args(argv)

    src = ensure_input(a.xspace)
    warm_page_cache(src)
    work = Path(tempfile.mkdtemp(prefix="bench_xspace_", dir=a.work_dir))
    binary = xprof_rs_binary()

    tb = Series("tb-reduce level=2", [])
    auto = Series("tb-reduce level=auto", [], skipped="--skip-auto" if a.skip_auto else "")
    xprof = Series("XProf trace_viewer@", [],
                   skipped=skip_reason(a.skip_xprof, "--skip-xprof", xprof_available(), "xprof is not importable"))
    server = ServerSeries("xprof-rs server, cold",
                          skipped=skip_reason(a.skip_xprof_rs, "--skip-xprof-rs", binary is not None,
                                              "xprof-rs is not on PATH"))
    xprof_cache: list[int] = []

    def xprof_step() -> Run:
        r, cache = run_xprof(src, work)
        xprof_cache.append(cache)
        return r

    steps: list[tuple[Series | ServerSeries, Callable[[], Run | ServerRun]]] = [
        (tb, lambda: run_tb(src, "2", work)),
        (auto, lambda: run_tb(src, "auto", work)),
        (xprof, xprof_step),
        (server, lambda: run_xprof_rs(binary or "", src, work)),
    ]

    print(f"input     {src}\n          {src.stat().st_size / MB:.1f} MB, host {host_of(src)!r}")
    print(f"tb-reduce {impl_fingerprint()}")
    print(f"xprof     {version_of('xprof')}; xprof-rs {version_of('xprof-rs')} ({binary})")
    print(f"repeats   {a.repeats}, fresh process each, interleaved; machine: {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}")
    for s, _ in steps:
        if s.skipped:
            print(f"skipped   {s.name}: {s.skipped}")
    print(flush=True)

    try:
        for i in range(a.repeats):
            for s, step in steps:
                if s.skipped:
                    continue
                r = step()
                s.runs.append(r)
                if isinstance(r, ServerRun):
                    log_server_run(i, a.repeats, s, r)
                else:
                    log_python_run(i, a.repeats, s, r)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    events = next((child_json(r)["stats"]["input"]["events"] for r in tb.ok_runs() + auto.ok_runs()), None)
    print(f"\ninput: {src.stat().st_size / MB:.1f} MB XSpace, {events} events (tb-reduce's input.events); "
          f"load average now {os.getloadavg()[0]:.2f}\n")
    print_table([tb, auto, xprof], server)
    print()
    if xprof.ok_runs():
        ratio_line("tb-reduce / XProf          ", tb, xprof.median("wall_s"), xprof.median("maxrss_mb"),
                   "target <= 0.5")
    if server.ok_runs():
        ratio_line("tb-reduce / xprof-rs cold  ", tb, server.median("cold_s"), server.median("vmhwm_mb"),
                   "aim <= 1.0")
    print()
    print_outputs(tb, auto, xprof, xprof_cache, server)
    return 0 if tb.ok_runs() else 1


def version_of(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


if __name__ == "__main__":
    sys.exit(main())
