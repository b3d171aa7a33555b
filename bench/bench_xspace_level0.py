#!/usr/bin/env python3
"""Benchmark level 0 (lossless) of a large XSpace: tb-reduce against XProf's whole conversion.

What is measured: time and peak memory, from a fresh process to the output, of every
event of one ``*.xplane.pb`` written as Chrome trace JSON (issue 14: 106 s and 6.0 GB
for a 2.15 M-event JAX profile, where XProf converts it in ~11 s and ~1.9 GB).

* **floor** — read the file and parse it whole with protobuf's C parser (upb), text
  read as bytes (``xspace_schema.XSpaceView``), then drop it. An XSpace is not
  compressed and protobuf cannot be streamed, so nothing that converts the file
  whole can be faster than this.
* **tb-reduce level=0** — ``pipeline.reduce_file(src, dst.json.gz, level=0)``, what
  ``tb-reduce reduce --level 0`` runs: parse, plan, write every event with its args,
  gzip.
* **tb-reduce level=0, as the dashboard asks** — ``index_file`` then
  ``reduce_index(..., level=0, drop_args=True, with_input_index=True)`` into a gzip
  file: the dashboard's lossless view, whose args are fetched on click.
* **tb-reduce level=2** — ``reduce_file`` at the default level, for scale.
* **tb-reduce level=0, other tree** (``--before DIR``) — the first row again with
  ``DIR`` first on ``sys.path`` (a copy or worktree holding another version of
  ``tb_reduce_plugin``): before and after a change, in the same run.
* **XProf trace_viewer@, every event** (pip ``xprof``, the baseline) —
  ``xprof.convert.raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer@",
  params)`` with the params XProf's plugin builds for a ``trace_viewer@`` request,
  but ``resolution`` 0: no downsampling, every event returned (``returnedEventsSize``
  is printed), the counterpart of level 0. XProf writes ``*.SSTABLE`` caches beside
  its input, so each run converts a fresh copy (made before the process starts, not
  timed). Skipped, with the reason, when xprof is not importable.

How, and why so: as ``bench_xspace.py`` — a small, shared machine (2 cores), so every
contender is a fresh process (``bench_reduce.run_child``: wall time around spawn and
wait, peak RSS from ``os.wait4``, interpreter start-up and imports included), N
repeats interleaved round-robin, medians and ratios from the same run only. The
input is read once first so that nobody pays for disk reads.

Usage::

    python3 bench/bench_xspace_level0.py                    # the ~2.3 M-event JAX profile in /tmp/jax_big
    python3 bench/bench_xspace_level0.py PATH.xplane.pb -n 5
    python3 bench/bench_xspace_level0.py --before /tmp/old_tree --skip-level2
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional

# The script's own directory is sys.path[0] when it is run as a script.
from bench_reduce import REPO, Run, Series, child_env, fmt_row, impl_fingerprint, run_child
from bench_xspace import child_json, fresh_copy, host_of, log_python_run, version_of, warm_page_cache, xprof_available

MB = 1e6
DEFAULT_OUT = "/tmp/jax_big"
DEFAULT_STEPS = 8000

FLOOR_SRC = r"""
import json, sys, time
t = time.perf_counter()
from tb_reduce_plugin.formats.xspace_schema import XSpaceView
with open(sys.argv[1], "rb") as f:
    data = f.read()
space = XSpaceView.FromString(data)
lines = sum(len(p.lines) for p in space.planes)
del space
print(json.dumps({"call_s": time.perf_counter() - t, "bytes": len(data), "lines": lines}))
"""

TB_SRC = r"""
import json, sys, time
t = time.perf_counter()
from tb_reduce_plugin.reduce.pipeline import index_file, reduce_file, reduce_index
src, dst, level, how = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if how == "cli":
    stats = reduce_file(src, dst, level=level)
else:  # as the dashboard asks: args fetched on click, the input index to fetch them by
    index = index_file(src)
    with open(dst, "wb") as f:
        stats = reduce_index(index, f, level, gzip=True, with_input_index=True, drop_args=True)
    stats["output"]["file_bytes"] = __import__("os").path.getsize(dst)
import tb_reduce_plugin
print(json.dumps({"call_s": time.perf_counter() - t, "stats": stats, "package": tb_reduce_plugin.__file__}))
"""

# XProf's params for trace_viewer@ (xprof/profile_plugin.py), at resolution 0: every event.
XPROF_SRC = r"""
import json, re, sys, time
t = time.perf_counter()
from xprof.convert import raw_to_tool_data
params = {"trace_viewer_options": {"resolution": 0, "full_dma": False},
          "use_saved_result": False, "hosts": [sys.argv[2]]}
data, content_type = raw_to_tool_data.xspace_to_tool_data([sys.argv[1]], "trace_viewer@", params)
call_s = time.perf_counter() - t
head = bytes(data[:4096]) if data else b""
m = re.search(rb'"returnedEventsSize":(\d+)', head)
print(json.dumps({"call_s": call_s, "bytes": len(data) if data else 0, "content_type": content_type,
                  "returned_events": int(m.group(1)) if m else None}))
"""


def ensure_input(path: Optional[str]) -> Path:
    """The XSpace to benchmark: the given one, or the JAX profile in DEFAULT_OUT (generated if absent)."""
    if path:
        if not os.path.isfile(path):
            sys.exit(f"no such file: {path}")
        return Path(path)
    pattern = os.path.join(DEFAULT_OUT, "plugins", "profile", "*", "*.xplane.pb")
    if not glob.glob(pattern):
        print(f"generating {DEFAULT_OUT} ({DEFAULT_STEPS} JAX steps) ...", flush=True)
        subprocess.run([sys.executable, str(REPO / "bench" / "make_jax_xspace.py"), "--steps", str(DEFAULT_STEPS),
                        "--out", DEFAULT_OUT], check=True)
    return Path(sorted(glob.glob(pattern))[-1])


def tree_env(tree: Optional[str]) -> dict[str, str]:
    env = child_env()
    if tree:
        env["PYTHONPATH"] = tree + os.pathsep + env["PYTHONPATH"]
    return env


def run_tb(src: Path, work: Path, level: int, how: str, tree: Optional[str] = None) -> Run:
    """One tb-reduce child, on the working tree or on `tree` (`python -c` puts its cwd first on sys.path)."""
    dst = work / f"tb_reduce_{level}_{how}.json.gz"
    r = run_child([sys.executable, "-c", TB_SRC, str(src), str(dst), str(level), how], cwd=Path(tree) if tree else REPO,
                  env=tree_env(tree))
    dst.unlink(missing_ok=True)
    return r


def run_floor(src: Path) -> Run:
    return run_child([sys.executable, "-c", FLOOR_SRC, str(src)], cwd=REPO, env=child_env())


def run_xprof(src: Path, work: Path) -> Run:
    d = Path(tempfile.mkdtemp(prefix="xprof_", dir=work))
    try:
        copy = fresh_copy(src, d, src.name)
        return run_child([sys.executable, "-c", XPROF_SRC, str(copy), host_of(src)], cwd=d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


WIDTHS = [44, 9, 8, 8, 10, 11, 8]


def row(s: Series) -> list[str]:
    ok = s.ok_runs()
    if s.skipped or not ok:
        return [s.name, "skipped" if s.skipped else "failed"] + [""] * 5
    calls = sorted(child_json(r).get("call_s", float("nan")) for r in ok)
    return [s.name, f"{s.median('wall_s'):.2f}", f"{min(r.wall_s for r in ok):.2f}",
            f"{max(r.wall_s for r in ok):.2f}", f"{calls[len(calls) // 2]:.2f}",
            f"{s.median('maxrss_mb'):.0f}", f"{s.median('cpu_s'):.2f}"]


def ratio(label: str, top: Series, bottom: Series) -> None:
    if top.ok_runs() and bottom.ok_runs():
        t = top.median("wall_s") / bottom.median("wall_s")
        m = top.median("maxrss_mb") / bottom.median("maxrss_mb")
        c = top.median("cpu_s") / bottom.median("cpu_s")
        print(f"  {label:<52} {t:5.2f}x time  {m:5.2f}x peak RSS  {c:5.2f}x CPU")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("xspace", nargs="?", help=f"*.xplane.pb (default: the JAX profile in {DEFAULT_OUT})")
    ap.add_argument("-n", "--repeats", type=int, default=3)
    ap.add_argument("--before", help="a folder holding another tb_reduce_plugin: its level 0 runs side by side")
    ap.add_argument("--skip-xprof", action="store_true")
    ap.add_argument("--skip-dashboard", action="store_true", help="no level-0-as-the-dashboard-asks row")
    ap.add_argument("--skip-level2", action="store_true")
    ap.add_argument("--work-dir", default=tempfile.gettempdir(), help="where the copies and outputs go")
    a = ap.parse_args(argv)
    if a.before and not (Path(a.before) / "tb_reduce_plugin" / "__init__.py").is_file():
        sys.exit(f"--before {a.before}: no tb_reduce_plugin package in it")

    src = ensure_input(a.xspace)
    warm_page_cache(src)
    work = Path(tempfile.mkdtemp(prefix="bench_xspace_level0_", dir=a.work_dir))
    floor = Series("floor: read + protobuf parse", [])
    l0 = Series("tb-reduce level=0", [])
    dash = Series("tb-reduce level=0, as the dashboard asks", [], skipped="--skip-dashboard" if a.skip_dashboard else "")
    l2 = Series("tb-reduce level=2", [], skipped="--skip-level2" if a.skip_level2 else "")
    before = Series("tb-reduce level=0, --before tree", [], skipped="" if a.before else "no --before")
    xprof = Series("XProf trace_viewer@, every event", [],
                   skipped="--skip-xprof" if a.skip_xprof else ("" if xprof_available() else "xprof is not importable"))
    steps: list[tuple[Series, Callable[[], Run]]] = [
        (floor, lambda: run_floor(src)),
        (l0, lambda: run_tb(src, work, 0, "cli")),
        (dash, lambda: run_tb(src, work, 0, "dashboard")),
        (l2, lambda: run_tb(src, work, 2, "cli")),
        (before, lambda: run_tb(src, work, 0, "cli", a.before)),
        (xprof, lambda: run_xprof(src, work)),
    ]

    print(f"input     {src}\n          {src.stat().st_size / MB:.1f} MB, host {host_of(src)!r}")
    print(f"tb-reduce {impl_fingerprint()}" + (f"; --before {a.before}" if a.before else ""))
    print(f"xprof     {version_of('xprof')}")
    print(f"repeats   {a.repeats}, fresh process each, interleaved; machine: {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}")
    for s, _ in steps:
        if s.skipped:
            print(f"skipped   {s.name}: {s.skipped}")
    print(flush=True)
    try:
        for i in range(a.repeats):
            for s, step in steps:
                if not s.skipped:
                    r = step()
                    s.runs.append(r)
                    log_python_run(i, a.repeats, s, r)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    info = child_json(l0.ok_runs()[-1]) if l0.ok_runs() else {}
    st = info.get("stats", {})
    print(f"\ninput: {src.stat().st_size / MB:.1f} MB XSpace, {st.get('input', {}).get('events')} events; "
          f"load average now {os.getloadavg()[0]:.2f}\n")
    print(fmt_row(["contender", "median s", "min s", "max s", "in-call s", "peak RSS MB", "CPU s"], WIDTHS))
    print(fmt_row(["-" * w for w in WIDTHS], WIDTHS))
    series = [floor, l0, dash, l2, before, xprof]
    for s in series:
        print(fmt_row(row(s), WIDTHS))
    print("  median s = process start -> output written (XProf: JSON in memory); in-call s = after interpreter start")
    print()
    ratio("tb-reduce level=0 / XProf every event (target <= 1.0)", l0, xprof)
    ratio("tb-reduce level=0 as the dashboard asks / XProf", dash, xprof)
    ratio("tb-reduce level=0 / floor", l0, floor)
    ratio("tb-reduce level=0 / --before tree", l0, before)
    ratio("tb-reduce level=2 / XProf every event", l2, xprof)
    print()
    for s in (l0, dash, l2, before):
        out = child_json(s.ok_runs()[-1]).get("stats", {}) if s.ok_runs() else {}
        if out:
            o = out["output"]
            package = Path(child_json(s.ok_runs()[-1])["package"]).parent.parent
            print(f"{s.name} ({package}): {o['events']} events + {o['summaries']} summaries, "
                  f"{o['json_bytes'] / MB:.1f} MB JSON, {o['file_bytes'] / MB:.1f} MB gzip; own timings "
                  + ", ".join(f"{k} {v:.2f}" for k, v in out.get("timings_s", {}).items()))
    xi = child_json(xprof.ok_runs()[-1]) if xprof.ok_runs() else {}
    if xi:
        print(f"XProf: {xi['bytes'] / MB:.1f} MB {xi['content_type']}, returnedEventsSize {xi['returned_events']}")
    return 0 if l0.ok_runs() else 1


if __name__ == "__main__":
    sys.exit(main())
