#!/usr/bin/env python3
"""The Profile tab's Trace Viewer on a big XSpace: XProf alone vs XProf + tb-reduce (issue 12).

Target: "Cold Trace Viewer load of the 2 M-event XSpace through the Profile tab
<= 0.3 x XProf alone, same run; warm <= 50 ms."

What is measured, per repeat and per side, in a real `tensorboard` process started by
`tests/tensorboard_process.py` (`order='xprof-only'`: XProf's plugin alone;
`order='xprof-first'`: XProf's and tb-reduce's):

1. a fresh log directory holding a hard link (a copy across file systems) of the XSpace
   at `<logdir>/plugins/profile/<session>/<host>.xplane.pb` (XProf writes its
   `*.SSTABLE` caches into that folder, so every cold run needs a new one) and, for
   tb-reduce, a fresh cache directory;
2. what the tab asks before the viewer (`runs`, `run_tools`, `hosts`), timed apart
   (`tab s`): XProf's `run_tools` reads the whole XSpace the first time (it writes the
   `*.hlo_proto.pb` files), on both sides, since tb-reduce leaves that route to XProf;
3. **cold**: the viewer's first request, `data?run=<session>&tag=trace_viewer@&host=<host>
   &hosts=<host>&replace_model=true&new_backend=false&resolution=<R>` with
   `Accept-Encoding: gzip`, wall clock at the client; the server's CPU time over it
   (`/proc/<pid>/stat`, all threads) and its peak RSS after it (`VmHWM`, reset by
   `/proc/<pid>/clear_refs` after step 2, so that it is this request's own peak, not
   `run_tools`'; `life MB` is the whole process's peak);
4. **warm**: the same request 20 more times on that server, median;
5. **zoom**: a window of 1/50 of `fullTimespan` in its middle (`start_time_ms`,
   `end_time_ms`), first time (cold) and 10 more times (warm, median).

Each answer is checked: status 200, `X-Served-By` absent (XProf) or `tb-reduce/...`,
gzip JSON with `returnedEventsSize` and `fullTimespan`, and for tb-reduce's cold
answer `X-Tb-Reduce-Cached: False`. The sides alternate within each repeat (XProf,
tb-reduce, XProf, tb-reduce, ...), so machine noise hits both; each server is stopped
before the next starts. The XSpace is read once first, so that nobody pays for disk reads.

    .venv/bin/python bench/bench_profile_tab.py --repeats 3
    .venv/bin/python bench/bench_profile_tab.py --xspace PATH/vm.xplane.pb --resolution 8000

Without `--xspace`, the newest `/tmp/jax_big/plugins/profile/*/vm.xplane.pb` is used,
made first with `bench/make_jax_xspace.py --steps 56000 --out /tmp/jax_big` when absent
(~88 MB, ~2.3 M events, ~45 s).
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from bench_plugin import link_or_copy  # noqa: E402  (the script's own directory is sys.path[0])
from bench_reduce import impl_fingerprint  # noqa: E402
from tensorboard_process import TensorBoard, start_tensorboard  # noqa: E402

DEFAULT_GLOB = "/tmp/jax_big/plugins/profile/*/vm.xplane.pb"
DEFAULT_STEPS = 56000
ROUTE = "data/plugin/profile/"
SIDES = (("XProf alone", "xprof-only"), ("XProf + tb-reduce", "xprof-first"))
COLD_TARGET = 0.3  # tb-reduce cold / XProf cold
WARM_TARGET_MS = 50.0
REQUEST_TIMEOUT_S = 900.0


@dataclass
class Sample:
    side: str
    repeat: int
    cold_s: float = 0.0
    cold_cpu_s: float = 0.0
    tab_s: float = 0.0  # runs + run_tools + hosts, before the viewer
    idle_mb: float = 0.0  # VmHWM after those (XProf's run_tools reads the XSpace)
    peak_mb: float = 0.0  # VmHWM right after the cold answer (reset before it where the kernel lets us)
    peak_reset: bool = False
    base_mb: float = 0.0  # VmHWM right after the reset: the RSS the cold request starts from
    peak_end_mb: float = 0.0  # VmHWM after the warm and zoomed requests
    life_mb: float = 0.0  # the process's peak over everything, preamble included
    events: int = 0
    json_bytes: int = 0
    wire_bytes: int = 0
    served_by: str = ""
    warm_ms: list[float] = field(default_factory=list)
    zoom_cold_s: Optional[float] = None
    zoom_warm_ms: list[float] = field(default_factory=list)
    zoom_events: Optional[int] = None
    cache_files_mb: float = 0.0  # what the server wrote into the session folder


class Failed(RuntimeError):
    pass


def machine() -> str:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.0f} GB"
    except OSError:
        pass
    return (f"{os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), {model}, {mem} RAM, "
            f"Python {platform.python_version()}")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def versions() -> str:
    from importlib import metadata

    out = []
    for dist in ("tensorboard", "tensorboard-plugin-profile", "xprof", "tb_reduce_plugin"):
        try:
            out.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            pass
    return ", ".join(out)


def find_xspace(given: Optional[str], steps: int) -> Path:
    if given:
        p = Path(given)
        if not p.is_file():
            sys.exit(f"no such file: {p}")
        return p
    found = sorted(glob.glob(DEFAULT_GLOB), key=os.path.getmtime)
    if not found:
        out = DEFAULT_GLOB.split("/plugins/")[0]
        print(f"# no {DEFAULT_GLOB}: recording one ({steps} JAX steps, ~45 s)", flush=True)
        subprocess.run([sys.executable, str(ROOT / "bench" / "make_jax_xspace.py"), "--steps", str(steps),
                        "--out", out], check=True)
        found = sorted(glob.glob(DEFAULT_GLOB), key=os.path.getmtime)
        if not found:
            sys.exit(f"make_jax_xspace.py wrote no {DEFAULT_GLOB}")
    return Path(found[-1])


def cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reset_peak(pid: int) -> bool:
    """Set VmHWM back to the current RSS (Linux `clear_refs` 5), so the next peak is the next request's."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def view_params(session: str, host: str, resolution: int, window: Optional[tuple[float, float]] = None) -> dict:
    params: dict[str, Any] = {"run": session, "tag": "trace_viewer@", "host": host, "hosts": host,
                              "replace_model": "true", "new_backend": "false", "resolution": resolution}
    if window is not None:
        params["start_time_ms"] = repr(window[0])
        params["end_time_ms"] = repr(window[1])
    return params


def ask(tb: TensorBoard, params: dict, tb_reduce: bool, what: str) -> tuple[float, dict, dict, int]:
    """One timed view request, checked: (seconds, headers, the JSON, bytes on the wire)."""
    began = time.perf_counter()
    status, headers, body = tb.get(ROUTE + "data", gz=True, timeout=REQUEST_TIMEOUT_S, **params)
    took = time.perf_counter() - began
    wire = len(body)
    if status != 200:
        raise Failed(f"{what}: status {status}: {body[:300]!r}\n{tb.tail()}")
    served = headers.get("x-served-by", "")
    if tb_reduce and not served.startswith("tb-reduce/"):
        raise Failed(f"{what}: X-Served-By {served!r}, expected tb-reduce/...")
    if not tb_reduce and served:
        raise Failed(f"{what}: X-Served-By {served!r} with XProf alone")
    if headers.get("content-encoding", "") == "gzip":
        body = gzip.decompress(body)
    doc = json.loads(body)
    if not isinstance(doc, dict) or "returnedEventsSize" not in doc or "fullTimespan" not in doc:
        raise Failed(f"{what}: not the viewer's JSON: {body[:200]!r}")
    doc["_json_bytes"] = len(body)
    return took, headers, doc, wire


def small(tb: TensorBoard, route: str, **params: Any) -> Any:
    status, headers, body = tb.get(ROUTE + route, gz=True, timeout=120, **params)
    if status != 200:
        raise Failed(f"{route}: status {status}: {body[:200]!r}\n{tb.tail()}")
    return json.loads(gzip.decompress(body) if headers.get("content-encoding") == "gzip" else body)


def tab_preamble(tb: TensorBoard, session: str, host: str) -> None:
    """What the Profile tab asks before the viewer; not timed."""
    if session not in small(tb, "runs"):
        raise Failed(f"runs does not list {session!r}")
    if "trace_viewer@" not in small(tb, "run_tools", run=session):
        raise Failed(f"run_tools of {session!r} has no trace_viewer@")
    small(tb, "hosts", run=session, tag="trace_viewer@")


def one_side(side: str, order: str, repeat: int, src: Path, session: str, host: str, work: Path,
             a: argparse.Namespace) -> Sample:
    tb_reduce = order != "xprof-only"
    here = Path(tempfile.mkdtemp(prefix=f"r{repeat}-{order}-", dir=work))
    s = Sample(side, repeat)
    tb: Optional[TensorBoard] = None
    try:
        folder = here / "logdir" / "plugins" / "profile" / session
        link_or_copy(src, folder / src.name)
        cache = here / "cache" if tb_reduce else None
        tb = start_tensorboard(here / "logdir", cache, order=order)
        began = time.perf_counter()
        tab_preamble(tb, session, host)
        s.tab_s = time.perf_counter() - began
        s.idle_mb = tb.peak_mb()
        s.peak_reset = reset_peak(tb.proc.pid)
        s.base_mb = tb.peak_mb()
        params = view_params(session, host, a.resolution)
        cpu0 = cpu_s(tb.proc.pid)
        s.cold_s, headers, doc, s.wire_bytes = ask(tb, params, tb_reduce, f"{side} cold")
        s.cold_cpu_s = cpu_s(tb.proc.pid) - cpu0
        s.peak_mb = tb.peak_mb()
        s.events, s.json_bytes = int(doc["returnedEventsSize"]), doc["_json_bytes"]
        s.served_by = headers.get("x-served-by", "(none)")
        if tb_reduce and headers.get("x-tb-reduce-cached") != "False":
            raise Failed(f"{side} cold: X-Tb-Reduce-Cached {headers.get('x-tb-reduce-cached')!r}: not cold")
        t0, t1 = (float(x) for x in doc["fullTimespan"])
        del doc
        for k in range(a.warm):
            took, _, d, _ = ask(tb, params, tb_reduce, f"{side} warm {k}")
            if int(d["returnedEventsSize"]) != s.events:
                raise Failed(f"{side} warm {k}: {d['returnedEventsSize']} events, cold gave {s.events}")
            s.warm_ms.append(1000 * took)
        if tb_reduce or not a.skip_xprof_zoom:
            width = (t1 - t0) / a.zoom_fraction
            middle = (t0 + t1) / 2
            window = (middle - width / 2, middle + width / 2)
            zparams = view_params(session, host, a.resolution, window)
            s.zoom_cold_s, _, d, _ = ask(tb, zparams, tb_reduce, f"{side} zoom cold")
            s.zoom_events = int(d["returnedEventsSize"])
            for k in range(a.zoom_warm):
                took, _, _, _ = ask(tb, zparams, tb_reduce, f"{side} zoom warm {k}")
                s.zoom_warm_ms.append(1000 * took)
        s.peak_end_mb = tb.peak_mb()
        s.life_mb = max(s.idle_mb, s.peak_end_mb)
        s.cache_files_mb = sum(f.stat().st_size for f in folder.iterdir() if f.name != src.name) / 2**20
    finally:
        if tb is not None:
            tb.stop()
        shutil.rmtree(here, ignore_errors=True)
    return s


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(samples: list[Sample], a: argparse.Namespace) -> bool:
    by_side = {side: [s for s in samples if s.side == side] for side, _ in SIDES}
    print()
    head = (f"{'side':<19} {'cold s':>7} {'(min-max)':>13} {'tab s':>6} {'cold CPU s':>10} {'warm ms':>8} "
            f"{'zoom cold s':>11} {'zoom warm ms':>12} {'peak MB':>8} {'life MB':>8} {'events':>7} {'zoom ev':>7} "
            f"{'JSON MB':>7}")
    print(head)
    print("-" * len(head))
    summary: dict[str, dict[str, float]] = {}

    def f(v: float, spec: str) -> str:
        return "-" if v != v else format(v, spec)

    for side, ss in by_side.items():
        if not ss:
            continue
        cold = [s.cold_s for s in ss]
        row = {"cold": med(cold), "tab": med([s.tab_s for s in ss]), "cpu": med([s.cold_cpu_s for s in ss]),
               "total": med([s.tab_s + s.cold_s for s in ss]),
               "warm": med([med(s.warm_ms) for s in ss]),
               "zcold": med([s.zoom_cold_s for s in ss if s.zoom_cold_s is not None]),
               "zwarm": med([med(s.zoom_warm_ms) for s in ss if s.zoom_warm_ms]),
               "peak": med([s.peak_mb for s in ss]), "life": med([s.life_mb for s in ss]),
               "idle": med([s.idle_mb for s in ss]), "base": med([s.base_mb for s in ss])}
        summary[side] = row
        events = "/".join(sorted({str(s.events) for s in ss}))
        zev = "/".join(sorted({str(s.zoom_events) for s in ss if s.zoom_events is not None})) or "-"
        span = f"({min(cold):.2f}-{max(cold):.2f})"
        print(f"{side:<19} {f(row['cold'], '7.2f')} {span:>13} {f(row['tab'], '6.2f')} {f(row['cpu'], '10.2f')} "
              f"{f(row['warm'], '8.1f')} {f(row['zcold'], '11.3f')} {f(row['zwarm'], '12.1f')} "
              f"{f(row['peak'], '8.0f')} {f(row['life'], '8.0f')} {events:>7} {zev:>7} "
              f"{med([s.json_bytes for s in ss]) / 1e6:7.2f}")
    reset = all(s.peak_reset for s in samples)
    print("  cold s: the viewer's first data request on a fresh server, folder and cache (client wall clock), median;")
    print("  tab s: runs + run_tools + hosts before it; cold CPU s: the server's CPU time over the cold request;")
    print(f"  warm ms: median of {a.warm} repeats of it; zoom: 1/{a.zoom_fraction:g} of fullTimespan, first ask and "
          f"median of {a.zoom_warm} more;")
    print("  peak MB: VmHWM of the cold request alone " + ("(reset after the tab's first requests)" if reset else
                                                          "(NOT reset: includes run_tools' peak)")
          + "; life MB: the process's peak over everything; events: returnedEventsSize")
    cache = {side: med([s.cache_files_mb for s in ss]) for side, ss in by_side.items() if ss}
    print("  VmHWM after runs + run_tools + hosts: "
          + ", ".join(f"{side} {row['idle']:.0f} MB (RSS then {row['base']:.0f} MB)" for side, row in summary.items())
          + "; written into the session folder: " + ", ".join(f"{side} {mb:.1f} MB" for side, mb in cache.items()))
    xp, tr = summary.get(SIDES[0][0]), summary.get(SIDES[1][0])
    if not xp or not tr:
        return True
    paired = []
    for r in sorted({s.repeat for s in samples}):
        pair = {s.side: s for s in samples if s.repeat == r}
        if len(pair) == 2:
            paired.append(pair[SIDES[1][0]].cold_s / pair[SIDES[0][0]].cold_s)
    print()
    print(f"tb-reduce / XProf, cold request  : {tr['cold'] / xp['cold']:.3f}x  "
          f"(per repeat: {', '.join(f'{x:.3f}' for x in paired)}; CPU time {tr['cpu'] / xp['cpu']:.3f}x)")
    print(f"tb-reduce / XProf, tab + request : {tr['total'] / xp['total']:.3f}x  "
          f"({tr['total']:.2f} s vs {xp['total']:.2f} s: both pay XProf's run_tools)")
    print(f"tb-reduce / XProf, request peak  : {tr['peak'] / xp['peak']:.3f}x  "
          f"(above the RSS it starts from: {(tr['peak'] - tr['base']) / max(xp['peak'] - xp['base'], 1e-9):.3f}x; "
          f"whole process: {tr['life'] / xp['life']:.3f}x)")
    if xp["warm"] == xp["warm"]:
        print(f"tb-reduce / XProf, warm          : {tr['warm'] / xp['warm']:.3f}x")
    if xp["zwarm"] == xp["zwarm"]:
        print(f"tb-reduce / XProf, zoom cold/warm: {tr['zcold'] / xp['zcold']:.3f}x / {tr['zwarm'] / xp['zwarm']:.3f}x")
    cold_ok = tr["cold"] <= COLD_TARGET * xp["cold"]
    warm_ok = tr["warm"] <= WARM_TARGET_MS
    print(f"target cold <= {COLD_TARGET}x XProf alone : {'PASS' if cold_ok else 'FAIL'} "
          f"({tr['cold']:.2f} s vs {xp['cold']:.2f} s)")
    print(f"target warm <= {WARM_TARGET_MS:.0f} ms          : {'PASS' if warm_ok else 'FAIL'} ({tr['warm']:.1f} ms)")
    return cold_ok and warm_ok


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--xspace", help=f"the *.xplane.pb (default: the newest {DEFAULT_GLOB}, recorded if none)")
    ap.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="JAX steps when recording the default XSpace")
    ap.add_argument("--repeats", "-n", type=int, default=3)
    ap.add_argument("--resolution", type=int, default=3240,
                    help="the viewer's resolution (XProf's viewer sends _resolution * ZOOM_RATIO: 3240 for a "
                         "1400-px-wide page)")
    ap.add_argument("--warm", type=int, default=20, help="warm repeats of the first request")
    ap.add_argument("--zoom-fraction", type=float, default=50, help="the zoomed window is 1/N of fullTimespan")
    ap.add_argument("--zoom-warm", type=int, default=10, help="warm repeats of the zoomed request")
    ap.add_argument("--skip-xprof-zoom", action="store_true", help="do not ask XProf alone for the zoomed window")
    ap.add_argument("--work", help="where the fresh log and cache folders go (default: a temp dir beside the "
                                   "XSpace's file system, removed afterwards)")
    ap.add_argument("--json-out", help="also write every sample here")
    return ap.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    a = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally blocks stop the servers
    src = find_xspace(a.xspace, a.steps).resolve()
    host = src.name[: -len(".xplane.pb")] if src.name.endswith(".xplane.pb") else src.stem
    session = src.parent.name
    with open(src, "rb") as f:  # into the page cache: nobody pays for the disk
        while f.read(16 << 20):
            pass
    print(f"input     {src}")
    print(f"          {src.stat().st_size / 1e6:.1f} MB, run {session!r}, host {host!r}")
    print(f"code      tb-reduce {impl_fingerprint()}")
    print(f"          {versions()}")
    print(f"machine   {machine()}; load {load()}")
    print(f"repeats   {a.repeats}, sides alternating (XProf alone, XProf + tb-reduce, ...), fresh server, folder "
          f"and cache each; resolution {a.resolution}", flush=True)
    made_work = a.work is None
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="bench-profile-tab-",
                                                             dir=os.environ.get("TMPDIR", "/tmp")))
    work.mkdir(parents=True, exist_ok=True)
    samples: list[Sample] = []
    try:
        for r in range(1, a.repeats + 1):
            for side, order in SIDES:
                s = one_side(side, order, r, src, session, host, work, a)
                samples.append(s)
                zoom = ("" if s.zoom_cold_s is None else
                        f", zoom {s.zoom_cold_s:.3f} s then {med(s.zoom_warm_ms):.1f} ms, {s.zoom_events} events")
                print(f"  [{r}/{a.repeats}] {side:<18} tab {s.tab_s:5.2f} s, cold {s.cold_s:6.2f} s (CPU {s.cold_cpu_s:6.2f} s) "
                      f"peak {s.peak_mb:6.0f} MB  warm {med(s.warm_ms):7.1f} ms  {s.events} events, "
                      f"{s.wire_bytes / 1e3:.0f} kB gzip, X-Served-By {s.served_by}{zoom}; load {load()}", flush=True)
    finally:
        if made_work:
            shutil.rmtree(work, ignore_errors=True)
    ok = report(samples, a)
    print(f"load average now {load()}")
    if a.json_out:
        Path(a.json_out).write_text(json.dumps([s.__dict__ for s in samples], indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
