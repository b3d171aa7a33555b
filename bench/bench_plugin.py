#!/usr/bin/env python3
"""Benchmark the plugin as a user meets it: warm request latency of tb-reduce's TensorBoard routes vs xprof-rs.

What is measured, on one ``*.xplane.pb`` (default: the 2 M-event JAX profile):

* **tb-reduce** — a real ``tensorboard`` process (``python3 -m tensorboard.main
  --load_fast=false --reload_interval 0``, a fresh ``--tb_reduce_cache_dir``)
  whose logdir holds the file as ``plugins/profile/<run>/<host>.xplane.pb``
  (a hard link, else a copy: the plugin refuses symlinks out of the logdir).
  Requests go to ``/data/plugin/tb_reduce/trace`` with ``Accept-Encoding: gzip``,
  as a browser sends them, and the whole body is read.
* **xprof-rs** (the Rust server from PyPI ``xprof-rs``; the real binary beside
  ``sys.executable``, not the pyenv shim) on its own copy of the file (it writes
  files beside it). Requests go to ``/data/plugin/profile/data?tag=trace_viewer@
  &resolution=8000``, also with ``Accept-Encoding: gzip``; a window is
  ``&start_time_ms=&end_time_ms=``, in ms on the same clock as the events' ``ts``
  (which is the clock of tb-reduce's ``window_us``, so ``ms = us / 1000``).

Scenarios, in this order, on the same two servers:

1. cold default view — the first request of each server (tb-reduce: level auto;
   it parses the file and reduces it);
2. warm default view — the same request again, ``--repeats`` times (tb-reduce
   answers from its disk cache); plus tb-reduce revalidated with
   ``If-None-Match`` (the 304 a browser gets on reload);
3. zoom, first request of a new window — ``--windows`` distinct windows (half
   1/10 of the span, half 1/100, at spread positions), each asked once per
   contender: the server is warm (index in memory) but the window is new, which
   is what a user who zooms waits for. tb-reduce at level auto and at level 2;
4. zoom, repeated window — the same windows asked again (tb-reduce: cache hit);
5. memory — ``VmRSS``/``VmHWM`` of both server processes after all that, with
   TensorBoard's own baseline; then (``--memory-phase-mb``) two fresh
   TensorBoards on a logdir with two runs, with the default
   ``--tb_reduce_memory_mb`` and with a small one, to show that the parsed-index
   cache bounds what stays resident (and what a zoom then costs).

Why: the plugin's claim (issue 4, item 8) is that once a trace has been opened,
looking at it is interactive: warm default view p50 <= 30 ms and a zoom window
p50 <= 100 ms. xprof-rs, which keeps its parsed trace in memory, is the bar.

How, and why so: the machine is small (2 cores) and shared, so the requests of
the two servers are interleaved (their order alternating) and only percentiles
(p50, p95) and ratios from the same run are reported. Each request opens its own
connection (TensorBoard's server closes it after every response anyway) and is
timed from connect to the last byte of the (compressed) body; neither the client's
decompression nor its JSON parse is counted. Payload sizes are reported beside
the times because the two servers do not send the same amount of data.

Usage::

    python3 bench/bench_plugin.py                                   # the 2 M-event JAX profile
    python3 bench/bench_plugin.py PATH.xplane.pb --repeats 30 --windows 20
    python3 bench/bench_plugin.py PATH.xplane.pb --skip-xprof-rs --memory-phase-mb 0
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

# The script's own directory is sys.path[0] when it is run as a script.
from bench_reduce import child_env, fmt_row, impl_fingerprint
from bench_xspace import (
    RESOLUTION,
    ensure_input,
    free_port,
    fresh_copy,
    host_of,
    proc_status_mb,
    version_of,
    warm_page_cache,
    xprof_rs_binary,
)

TB_PREFIX = "/data/plugin/tb_reduce"
RS_PREFIX = "/data/plugin/profile"
RUN = "bench"
TB_START_TIMEOUT_S = 180.0
RS_START_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 600.0
DEFAULT_MEMORY_MB = 2048  # the plugin's --tb_reduce_memory_mb default
TARGET_WARM_MS = 30.0
TARGET_ZOOM_MS = 100.0
Window = tuple[float, float]  # start_us, end_us


# --------------------------------------------------------------------------- #
# HTTP
# --------------------------------------------------------------------------- #


@dataclass
class Response:
    status: int
    body: bytes  # as sent: compressed when the server gzipped it
    encoding: str
    etag: str
    seconds: float


def get(port: int, path: str, headers: Optional[dict[str, str]] = None,
        timeout: float = REQUEST_TIMEOUT_S) -> Response:
    """One GET on a fresh connection, timed from connect to the last byte of the body."""
    hdrs = {"Accept-Encoding": "gzip", **(headers or {})}
    t = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers=hdrs)
        resp = conn.getresponse()
        body = resp.read()
        seconds = time.perf_counter() - t
        return Response(resp.status, body, resp.getheader("Content-Encoding") or "", resp.getheader("ETag") or "",
                        seconds)
    finally:
        conn.close()


def inflate(r: Response, limit: int = 0) -> bytes:
    """The body decompressed (only its first ``limit`` bytes when ``limit`` > 0)."""
    if r.encoding != "gzip":
        return r.body[:limit] if limit else r.body
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    return d.decompress(r.body, limit) if limit else d.decompress(r.body) + d.flush()


def ok(r: Response, what: str) -> Response:
    if r.status != 200:
        raise RuntimeError(f"{what}: HTTP {r.status}: {inflate(r, 300)!r}")
    return r


# --------------------------------------------------------------------------- #
# servers
# --------------------------------------------------------------------------- #


@dataclass
class Server:
    name: str
    proc: subprocess.Popen
    port: int
    log_path: Path
    started: float  # perf_counter at Popen
    ready_s: float = float("nan")

    def rss_mb(self) -> tuple[float, float]:
        return proc_status_mb(self.proc.pid, "VmRSS"), proc_status_mb(self.proc.pid, "VmHWM")

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-800:] if self.log_path.exists() else ""


def spawn(name: str, cmd: list[str], port: int, log_path: Path, env: Optional[dict[str, str]] = None) -> Server:
    with open(log_path, "wb") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    return Server(name, proc, port, log_path, t0)


def stop(server: Optional[Server]) -> None:
    if server is None or server.proc.poll() is not None:
        return
    server.proc.terminate()
    try:
        server.proc.wait(15)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()


def wait_for_runs(server: Server, path: str, runs: list[str], timeout: float) -> None:
    """Poll ``path`` until the JSON it answers names every run in ``runs``."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.name} exited with {server.proc.returncode}: {server.log_tail()}")
        try:
            r = get(server.port, path, timeout=10)
            if r.status == 200 and all(f'"{run}"' in inflate(r).decode() for run in runs):
                server.ready_s = time.perf_counter() - server.started
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{server.name} did not list {runs} within {timeout:.0f} s: {server.log_tail()}")


def link_or_copy(src: Path, dst: Path) -> None:
    """A hard link where possible (same file system), else a copy."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def start_tensorboard(src: Path, work: Path, tag: str, runs: list[str], memory_mb: float) -> Server:
    """A TensorBoard on a fresh logdir (``runs`` each holding the file) and a fresh cache dir."""
    logdir, cache = work / f"tb_{tag}_logdir", work / f"tb_{tag}_cache"
    for run in runs:
        link_or_copy(src, logdir / "plugins" / "profile" / run / src.name)
    cache.mkdir(parents=True)
    port = free_port()
    cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--port", str(port),
           "--host", "127.0.0.1", "--load_fast=false", "--reload_interval", "0",
           "--tb_reduce_cache_dir", str(cache), "--tb_reduce_memory_mb", str(memory_mb)]
    server = spawn(f"tensorboard ({tag})", cmd, port, work / f"tb_{tag}.log", env=child_env())
    try:
        wait_for_runs(server, f"{TB_PREFIX}/runs", runs, TB_START_TIMEOUT_S)
    except BaseException:
        stop(server)
        raise
    return server


def start_xprof_rs(binary: str, src: Path, work: Path) -> Server:
    logdir = work / "xprof_rs_logdir"
    fresh_copy(src, logdir, f"plugins/profile/{RUN}/{src.name}")
    port = free_port()
    cmd = [binary, "--logdir", str(logdir), "--port", str(port), "--host", "127.0.0.1"]
    server = spawn("xprof-rs", cmd, port, work / "xprof_rs.log")
    try:
        wait_for_runs(server, f"{RS_PREFIX}/runs", [RUN], RS_START_TIMEOUT_S)
    except BaseException:
        stop(server)
        raise
    return server


# --------------------------------------------------------------------------- #
# requests of each contender
# --------------------------------------------------------------------------- #


def tb_path(route: str, run: str, host: str, level: str, window: Optional[Window]) -> str:
    """`level` "2/noargs" asks as the dashboard does: level 2, args left out (`args=0`)."""
    level, _, noargs = level.partition("/")
    q = {"run": run, "host": host, "level": level}
    if noargs:
        q["args"] = "0"
    if window is not None:
        q.update(start_us=f"{window[0]:.3f}", end_us=f"{window[1]:.3f}")
    return f"{TB_PREFIX}/{route}?{urllib.parse.urlencode(q)}"


def rs_path(host: str, window: Optional[Window]) -> str:
    q = {"run": RUN, "tag": "trace_viewer@", "host": host, "resolution": str(RESOLUTION)}
    if window is not None:  # xprof-rs takes ms on the events' clock
        q.update(start_time_ms=f"{window[0] / 1000:.6f}", end_time_ms=f"{window[1] / 1000:.6f}")
    return f"{RS_PREFIX}/data?{urllib.parse.urlencode(q)}"


@dataclass
class Sample:
    seconds: float
    wire_bytes: int
    events: Optional[int] = None  # events in the answer (tb-reduce: output events + summaries)
    json_bytes: Optional[int] = None
    level: Optional[int] = None
    server_s: Optional[float] = None  # tb-reduce's own timings_s.request
    cached: Optional[bool] = None


def tb_stats(port: int, run: str, host: str, level: str, window: Optional[Window]) -> dict:
    r = ok(get(port, tb_path("stats", run, host, level, window)), "tb-reduce stats")
    return json.loads(inflate(r))


def tb_request(port: int, run: str, host: str, level: str, window: Optional[Window] = None,
               describe: bool = False, etag: str = "") -> Sample:
    """One trace request; with ``describe``, also the stats of that answer (a later, untimed request)."""
    headers = {"If-None-Match": etag} if etag else None
    r = get(port, tb_path("trace", run, host, level, window), headers)
    if r.status not in (200, 304) or (r.status == 304 and not etag):
        ok(r, "tb-reduce trace")
    s = Sample(r.seconds, len(r.body))
    if describe:
        st = tb_stats(port, run, host, level, window)
        out = st["output"]
        s.events, s.json_bytes, s.level = out["events"] + out["summaries"], out.get("json_bytes"), st["level"]
        s.server_s = st.get("timings_s", {}).get("request")
    return s


def tb_etag(port: int, run: str, host: str, level: str) -> str:
    return ok(get(port, tb_path("trace", run, host, level, None)), "tb-reduce trace").etag


def rs_request(port: int, host: str, window: Optional[Window] = None, describe: bool = False) -> Sample:
    r = ok(get(port, rs_path(host, window)), "xprof-rs data")
    s = Sample(r.seconds, len(r.body))
    if describe:
        text = inflate(r)
        if not text.startswith(b"{") or b'"traceEvents":[' not in text[:8192]:
            raise RuntimeError(f"xprof-rs answered something else than a trace: {text[:200]!r}")
        m = re.search(rb'"returnedEventsSize":(\d+)', text[:8192])
        s.events, s.json_bytes = (int(m.group(1)) if m else None), len(text)
    return s


# --------------------------------------------------------------------------- #
# scenarios
# --------------------------------------------------------------------------- #


@dataclass
class Row:
    scenario: str
    contender: str
    samples: list[Sample] = field(default_factory=list)


class Results:
    """Rows in the order they were first added."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], Row] = {}

    def add(self, scenario: str, contender: str, sample: Sample) -> None:
        self.rows.setdefault((scenario, contender), Row(scenario, contender)).samples.append(sample)

    def ordered(self) -> list[Row]:
        """By scenario (first seen first), then contender (first seen first)."""
        scenarios = list(dict.fromkeys(r.scenario for r in self.rows.values()))
        contenders = list(dict.fromkeys(r.contender for r in self.rows.values()))
        return sorted(self.rows.values(), key=lambda r: (scenarios.index(r.scenario), contenders.index(r.contender)))

    def get(self, scenario: str, contender: str) -> Optional[Row]:
        return self.rows.get((scenario, contender))


@dataclass
class Setup:
    tb: Server
    rs: Optional[Server]
    host: str
    repeats: int


TB_AUTO, TB_L2, RS = "tb-reduce dashboard", "tb-reduce level 2", "xprof-rs"
DASH = "2/noargs"  # the dashboard's request: level 2 without args (details come from `event`)


def interleaved(calls: list[tuple[str, Callable[[], Sample]]], i: int) -> list[tuple[str, Sample]]:
    """Run the calls, rotating which goes first with ``i`` so that no contender always follows another."""
    k = i % len(calls)
    return [(name, fn()) for name, fn in calls[k:] + calls[:k]]


def cold_default(s: Setup, res: Results) -> Window:
    """First request of each server; returns the default view's window (the whole trace)."""
    res.add("cold default view (1st request)", TB_AUTO, tb_request(s.tb.port, RUN, s.host, DASH, describe=True))
    if s.rs:
        res.add("cold default view (1st request)", RS, rs_request(s.rs.port, s.host, describe=True))
    t0, t1 = tb_stats(s.tb.port, RUN, s.host, DASH, None)["window_us"]
    return float(t0), float(t1)


def warm_default(s: Setup, res: Results) -> None:
    calls = [(TB_AUTO, lambda: tb_request(s.tb.port, RUN, s.host, DASH))]
    if s.rs:
        calls.append((RS, lambda: rs_request(s.rs.port, s.host)))
    for i in range(s.repeats):
        for name, sample in interleaved(calls, i):
            res.add("warm default view", name, sample)
    tag = tb_etag(s.tb.port, RUN, s.host, DASH)
    for _ in range(s.repeats):
        res.add("warm default view, 304", TB_AUTO, tb_request(s.tb.port, RUN, s.host, DASH, etag=tag))


def make_windows(span: Window, n: int) -> list[tuple[str, Window]]:
    """``n`` windows, half 1/10 and half 1/100 of the span, spread over it; labelled by size."""
    t0, t1 = span
    out = []
    for frac, label in ((10, "1/10"), (100, "1/100")):
        width, count = (t1 - t0) / frac, (n + (frac == 10)) // 2
        for k in range(count):
            start = t0 + (t1 - t0 - width) * (k + 0.5) / count
            out.append((label, (round(start, 3), round(start + width, 3))))
    return out


def zoom_calls(s: Setup, window: Window, describe: bool) -> list[tuple[str, Callable[[], Sample]]]:
    calls = [(TB_AUTO, lambda: tb_request(s.tb.port, RUN, s.host, DASH, window, describe)),
             (TB_L2, lambda: tb_request(s.tb.port, RUN, s.host, "2", window, describe))]
    if s.rs:
        calls.append((RS, lambda: rs_request(s.rs.port, s.host, window, describe)))
    return calls


def zoom_first(s: Setup, res: Results, windows: list[tuple[str, Window]]) -> None:
    for i, (label, w) in enumerate(windows):
        for name, sample in interleaved(zoom_calls(s, w, describe=True), i):
            res.add("zoom, new window (1st request)", name, sample)
            res.add(f"  of which {label} of the span", name, sample)


def zoom_repeat(s: Setup, res: Results, windows: list[tuple[str, Window]]) -> None:
    for i in range(s.repeats):
        _, w = windows[i % len(windows)]
        for name, sample in interleaved(zoom_calls(s, w, describe=False), i):
            res.add("zoom, same window again", name, sample)


# --------------------------------------------------------------------------- #
# memory phase: is what stays resident bounded by --tb_reduce_memory_mb?
# --------------------------------------------------------------------------- #


@dataclass
class MemoryRun:
    memory_mb: float
    baseline_rss_mb: float = float("nan")
    rss_mb: float = float("nan")
    hwm_mb: float = float("nan")
    back_zoom_s: float = float("nan")  # a new window on the run opened first, after the second one
    error: str = ""


def memory_run(src: Path, work: Path, host: str, memory_mb: float, span: Window) -> MemoryRun:
    """Two runs opened one after the other, then a new window on the first: RSS after, and that zoom's time."""
    m = MemoryRun(memory_mb)
    runs = ["a", "b"]
    try:
        tb = start_tensorboard(src, work, f"mem{memory_mb:g}", runs, memory_mb)
    except RuntimeError as e:
        m.error = str(e)
        return m
    try:
        m.baseline_rss_mb = tb.rss_mb()[0]
        for run in runs:
            tb_request(tb.port, run, host, DASH)
        t0, t1 = span
        w = (round(t0 + (t1 - t0) * 0.3, 3), round(t0 + (t1 - t0) * 0.31, 3))
        m.back_zoom_s = tb_request(tb.port, "a", host, DASH, w).seconds
        m.rss_mb, m.hwm_mb = tb.rss_mb()
    except (RuntimeError, OSError) as e:
        m.error = f"{e}; log: {tb.log_tail()}"
    finally:
        stop(tb)
    return m


# --------------------------------------------------------------------------- #
# report
# --------------------------------------------------------------------------- #


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    v = sorted(values)
    if not v:
        return float("nan")
    x = (len(v) - 1) * q
    lo = int(x)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (x - lo)


def p(row: Optional[Row], q: float) -> float:
    return percentile([s.seconds for s in row.samples], q) * 1000 if row and row.samples else float("nan")


def median_of(row: Row, attr: str) -> Optional[float]:
    vals = [getattr(s, attr) for s in row.samples if getattr(s, attr) is not None]
    return statistics.median(vals) if vals else None


def fmt_opt(v: Optional[float], scale: float = 1.0, digits: int = 0) -> str:
    return "" if v is None else f"{v * scale:,.{digits}f}"


WIDTHS = [32, 18, 4, 8, 8, 8, 8, 9, 9, 9, 6, 9]


def row_cols(row: Row) -> list[str]:
    secs = [s.seconds * 1000 for s in row.samples]
    levels = sorted({s.level for s in row.samples if s.level is not None})
    return [row.scenario, row.contender, str(len(secs)), f"{p(row, 0.5):.1f}", f"{p(row, 0.95):.1f}",
            f"{min(secs):.1f}", f"{max(secs):.1f}", fmt_opt(median_of(row, "wire_bytes"), 1e-3),
            fmt_opt(median_of(row, "json_bytes"), 1e-3), fmt_opt(median_of(row, "events")),
            "/".join(map(str, levels)), fmt_opt(median_of(row, "server_s"), 1000, 1)]


def print_table(res: Results) -> None:
    print(fmt_row(["scenario", "contender", "n", "p50 ms", "p95 ms", "min ms", "max ms", "wire KB", "JSON KB",
                   "events", "level", "server ms"], WIDTHS))
    print(fmt_row(["-" * w for w in WIDTHS], WIDTHS))
    for row in res.ordered():
        print(fmt_row(row_cols(row), WIDTHS))
    print("  ms: client side, connect to last body byte, gzip on the wire. wire KB: median gzip body. JSON KB "
          "(uncompressed), events (tb-reduce: kept events + summaries; xprof-rs: returnedEventsSize), level and "
          "server ms (tb-reduce's own timings_s.request, the work behind a new answer): medians over the first "
          "requests")


def ratio_lines(res: Results) -> None:
    if not any(r.contender == RS for r in res.rows.values()):
        print("  (xprof-rs skipped)")
    for scenario in dict.fromkeys(r.scenario for r in res.ordered()):
        rs = res.get(scenario, RS)
        if rs is None:
            continue
        for tb_name in (TB_AUTO, TB_L2):
            tb = res.get(scenario, tb_name)
            if tb is None:
                continue
            print(f"  {scenario.strip():<36} {tb_name:<18} / xprof-rs: p50 {p(tb, 0.5) / p(rs, 0.5):6.2f}x, "
                  f"p95 {p(tb, 0.95) / p(rs, 0.95):6.2f}x")


def verdict(label: str, value_ms: float, target_ms: float) -> None:
    status = "PASS" if value_ms <= target_ms else "FAIL"
    print(f"  {label:<58} p50 {value_ms:8.1f} ms  (target <= {target_ms:.0f} ms)  {status}")


def target_lines(res: Results) -> None:
    verdict("warm default view, tb-reduce dashboard", p(res.get("warm default view", TB_AUTO), 0.5), TARGET_WARM_MS)
    for name in (TB_AUTO, TB_L2):
        verdict(f"zoom, new window (1st request), {name}", p(res.get("zoom, new window (1st request)", name), 0.5),
                TARGET_ZOOM_MS)
        verdict(f"zoom, same window again, {name}", p(res.get("zoom, same window again", name), 0.5), TARGET_ZOOM_MS)


@dataclass
class Snapshot:
    """One server's memory after the scenarios above."""

    name: str
    rss_mb: float
    hwm_mb: float
    note: str = ""


def snapshot(server: Server, note: str = "") -> Snapshot:
    rss, hwm = server.rss_mb()
    return Snapshot(server.name, rss, hwm, note)


def memory_lines(snaps: list[Snapshot], mem: list[MemoryRun]) -> None:
    for m in snaps:
        print(f"  {m.name:<22} VmRSS {m.rss_mb:5.0f} MB, VmHWM {m.hwm_mb:5.0f} MB  {m.note}")
    for m in mem:
        if m.error:
            print(f"  two runs, --tb_reduce_memory_mb {m.memory_mb:g}: FAILED: {m.error[:400]}")
            continue
        print(f"  fresh tensorboard, runs a then b opened, --tb_reduce_memory_mb {m.memory_mb:>5g}: VmRSS {m.rss_mb:5.0f} MB, "
              f"VmHWM {m.hwm_mb:5.0f} MB (TensorBoard alone {m.baseline_rss_mb:.0f} MB); then a new window on a: "
              f"{1000 * m.back_zoom_s:.0f} ms")


# --------------------------------------------------------------------------- #
# main
# --------------------------------------------------------------------------- #


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("xspace", nargs="?", help="*.xplane.pb (default: the 52,000-step JAX profile in /tmp/jax_2m, "
                                              "generated if absent)")
    ap.add_argument("--repeats", type=int, default=30, help="requests per warm scenario and contender (default 30)")
    ap.add_argument("--windows", type=int, default=20, help="distinct zoom windows (default 20)")
    ap.add_argument("--skip-xprof-rs", action="store_true")
    ap.add_argument("--memory-phase-mb", type=float, default=100,
                    help="--tb_reduce_memory_mb of the memory phase's small server; 0 skips the phase (default 100)")
    ap.add_argument("--work-dir", default=tempfile.gettempdir(), help="where the logdirs and caches go")
    return ap.parse_args(argv)


def print_header(src: Path, host: str, binary: Optional[str], a: argparse.Namespace) -> None:
    print(f"input     {src}\n          {src.stat().st_size / 1e6:.1f} MB, host {host!r}")
    print(f"tb-reduce {impl_fingerprint()}; tensorboard {version_of('tensorboard')}")
    print(f"xprof-rs  {'skipped' if binary is None else version_of('xprof-rs') + f' ({binary})'}")
    print(f"requests  {a.repeats} per warm scenario, {a.windows} zoom windows; machine: {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}\n", flush=True)


def measure_servers(src: Path, host: str, binary: Optional[str], work: Path, repeats: int,
                    n_windows: int) -> tuple[Results, Window, list[Snapshot]]:
    """The scenarios on one TensorBoard and one xprof-rs; both are stopped on return."""
    tb = rs = None
    res = Results()
    try:
        tb = start_tensorboard(src, work, "main", [RUN], DEFAULT_MEMORY_MB)
        tb_alone = tb.rss_mb()[0]
        rs = start_xprof_rs(binary, src, work) if binary else None
        print(f"servers up: tensorboard lists the run after {tb.ready_s:.1f} s"
              + (f", xprof-rs after {rs.ready_s:.2f} s" if rs else ""), flush=True)
        s = Setup(tb, rs, host, repeats)
        span = cold_default(s, res)
        print(f"default view window_us {span[0]:.3f} .. {span[1]:.3f} ({(span[1] - span[0]) / 1e3:.1f} ms)", flush=True)
        warm_default(s, res)
        windows = make_windows(span, n_windows)
        zoom_first(s, res, windows)
        zoom_repeat(s, res, windows)
        events = tb_stats(tb.port, RUN, host, DASH, None)["input"]["events"]
        print(f"\ninput: {events} events (tb-reduce's input.events); load average now {os.getloadavg()[0]:.2f}")
        snaps = [snapshot(tb, f"(--tb_reduce_memory_mb {DEFAULT_MEMORY_MB}, one run; "
                              f"TensorBoard alone before any trace request: VmRSS {tb_alone:.0f} MB)")]
        if rs:
            snaps.append(snapshot(rs))
        return res, span, snaps
    finally:
        stop(tb)
        stop(rs)


def main(argv: Optional[list[str]] = None) -> int:
    a = parse_args(argv)
    src = ensure_input(a.xspace)
    host = host_of(src)
    binary = None if a.skip_xprof_rs else xprof_rs_binary()
    if not a.skip_xprof_rs and binary is None:
        print("xprof-rs is not installed: its rows are skipped")
    print_header(src, host, binary, a)
    warm_page_cache(src)
    work = Path(tempfile.mkdtemp(prefix="bench_plugin_", dir=a.work_dir))
    try:
        res, span, snaps = measure_servers(src, host, binary, work, a.repeats, a.windows)
        print()
        print_table(res)
        print("\ntb-reduce / xprof-rs (same run, interleaved):")
        ratio_lines(res)
        print("\ntargets (issue 4, item 8):")
        target_lines(res)
        print("\nmemory (/proc/<pid>/status after all the requests above):", flush=True)
        mem = [memory_run(src, work, host, mb, span) for mb in (DEFAULT_MEMORY_MB, a.memory_phase_mb)
               ] if a.memory_phase_mb > 0 else []
        memory_lines(snaps, mem)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
