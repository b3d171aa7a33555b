#!/usr/bin/env python3
"""Benchmark ``tb-reduce reduce`` against a decompression floor and a naive baseline.

Why this shape: the machine this runs on is small (2 cores) and shared, so one
timing means little. Every measurement here is a *fresh subprocess* (no warm
imports, no allocator state carried over), repeated N times with the three
contenders interleaved round-robin (so a noisy minute hurts all of them alike),
and reported as medians and as ratios against baselines measured in the same
run:

* **floor** — streaming gzip decompression of the same file with
  ``isal.igzip`` in 16 MB reads, data discarded. Nothing that reads the file can
  be faster; ``tb-reduce / floor`` says how far from that bound we are.
* **tb-reduce** — the console script (``tb-reduce reduce FILE -o OUT --level 2
  --stats-json S``), or ``python -m tb_reduce_plugin.cli`` from the working tree
  when the script is not installed.
* **naive** — what a user would write: ``json.load`` the whole file through
  ``gzip.open``, keep every non-``X`` event and the ``X`` slices with
  ``dur >= span / 20000`` (the level-2 bucket width), ``json.dump`` through
  ``gzip.open``. ``naive / tb-reduce`` is the speed-up a user actually gets. It
  needs roughly 8x the uncompressed size in RAM, so it is skipped (with the
  reason printed) when that exceeds MemAvailable, or on ``--skip-naive``.

Peak RSS is the child's own ``ru_maxrss`` from ``os.wait4`` (per child, unlike
``getrusage(RUSAGE_CHILDREN)``, which is a running maximum over all children),
taken by a small launcher process so that the parent's own high-water mark is not
inherited (see ``LAUNCHER_SRC``). Wall time is measured by the launcher around
spawn and wait, so it includes interpreter start-up of the child but not of the
launcher.

It also prints the level-2 footprint (SPEC G10: at most 10 % of the events and
of the JSON bytes on traces of 1 M events or more), computed independently by
decompressing and parsing the output, next to what ``--stats-json`` reports.

Usage::

    python3 bench/bench_reduce.py                       # 1 GiB generated trace in /tmp
    python3 bench/bench_reduce.py --size-mb 100         # quick run
    python3 bench/bench_reduce.py FILE.json.gz -n 5 --skip-naive
    python3 bench/bench_reduce.py --size-mb 200 --profile   # + cProfile of one run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
MB = 1e6
MIB = 1024 * 1024

FLOOR_SRC = r"""
import sys
import isal.igzip as g
with open(sys.argv[1], "rb") as f:
    gz = f.read(2) == b"\x1f\x8b"
n = 0
with (g.open if gz else open)(sys.argv[1], "rb") as f:
    while True:
        b = f.read(16 << 20)
        if not b:
            break
        n += len(b)
print(n)
"""

# The naive baseline, kept deliberately plain: stdlib json + gzip, whole file in memory.
NAIVE_SRC = r"""
import gzip, json, sys
src, dst, res = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(src, "rb") as f:
    gz = f.read(2) == b"\x1f\x8b"
with (gzip.open if gz else open)(src, "rt", encoding="utf-8") as f:
    doc = json.load(f)
events = doc["traceEvents"] if isinstance(doc, dict) else doc
t0 = t1 = None
for e in events:
    if not isinstance(e, dict) or e.get("ph") == "M":
        continue
    ts = e.get("ts")
    if not isinstance(ts, (int, float)):
        continue
    d = e.get("dur")
    end = ts + max(d, 0) if isinstance(d, (int, float)) else ts
    t0 = ts if t0 is None or ts < t0 else t0
    t1 = end if t1 is None or end > t1 else t1
theta = ((t1 - t0) or 1) / res
kept = [e for e in events
        if not isinstance(e, dict) or e.get("ph") != "X" or (e.get("dur") or 0) >= theta]
if isinstance(doc, dict):
    doc["traceEvents"] = kept
else:
    doc = kept
with gzip.open(dst, "wt", encoding="utf-8") as f:
    json.dump(doc, f)
print(json.dumps({"events_in": len(events), "events_out": len(kept), "theta_us": theta}))
"""


@dataclass
class Run:
    """One child process: wall time, CPU time, peak RSS, exit status, output."""

    wall_s: float
    cpu_s: float
    maxrss_mb: float
    rc: int
    stdout: str
    stderr: str


@dataclass
class Series:
    """All repeats of one contender."""

    name: str
    cmd: list[str]
    runs: list[Run] = field(default_factory=list)
    skipped: str = ""
    env: dict = field(default_factory=dict)  # set on top of the children's environment

    def ok_runs(self) -> list[Run]:
        return [r for r in self.runs if r.rc == 0]

    def median(self, attr: str) -> float:
        vals = [getattr(r, attr) for r in self.ok_runs()]
        return statistics.median(vals) if vals else float("nan")


# Runs the measured command and reports its own rusage. Why a launcher: on Linux a
# child's ru_maxrss keeps the high-water mark of the address space it was forked
# from (it survives exec), so a child forked straight from a big parent (this
# script after reading a file, or make_real_trace.py holding a torch profile) would
# report the parent's RSS. The launcher is a fresh, small interpreter; the child it
# spawns starts from that small address space.
LAUNCHER_SRC = r"""
import json, os, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
t = time.perf_counter()
pid = os.posix_spawnp(cmd[0], cmd, os.environ)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t
with open(out, "w") as f:
    json.dump({"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "maxrss_kb": ru.ru_maxrss,
               "rc": os.waitstatus_to_exitcode(status)}, f)
"""


def run_child(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> Run:
    """Run ``cmd`` to completion; wall time, CPU time and peak RSS of that process alone.

    Output goes to temporary files rather than pipes so that a chatty child can
    never block on a full pipe and distort the timing.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(suffix=".json") as ru_file:
        p = subprocess.run([sys.executable, "-c", LAUNCHER_SRC, ru_file.name, *cmd],
                           stdout=out, stderr=err, cwd=cwd, env=env, check=False)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
        try:
            ru = json.loads(Path(ru_file.name).read_text())
        except (OSError, ValueError):
            return Run(float("nan"), float("nan"), float("nan"), p.returncode or 1, stdout,
                       f"launcher failed: {stderr}")
        return Run(ru["wall_s"], ru["cpu_s"], ru["maxrss_kb"] / 1024, ru["rc"], stdout, stderr)


def mem_available() -> int:
    """MemAvailable from /proc/meminfo in bytes (what the naive run may use)."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def tb_reduce_cmd(runner: str) -> tuple[list[str], str]:
    """The command prefix for tb-reduce, and a word saying which one it is."""
    script = shutil.which("tb-reduce")
    if runner == "script" or (runner == "auto" and script):
        if not script:
            sys.exit("tb-reduce console script not found on PATH")
        return [script], f"console script {script}"
    return [sys.executable, "-m", "tb_reduce_plugin.cli"], f"python -m tb_reduce_plugin.cli (cwd {REPO})"


def child_env() -> dict[str, str]:
    """Environment for children: the working tree first on sys.path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def impl_fingerprint() -> str:
    """Which implementation was measured: git HEAD plus a hash of the package sources.

    Why: the package changes under the benchmark while it is being written; a
    number is only meaningful next to the code that produced it.
    """
    import hashlib

    h = hashlib.sha256()
    for f in sorted((REPO / "tb_reduce_plugin").rglob("*.py")):
        h.update(f.relative_to(REPO).as_posix().encode())
        h.update(f.read_bytes())
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    rev = head.stdout.strip() if head.returncode == 0 else "no commit"
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "tb_reduce_plugin"],
                           capture_output=True, text=True).stdout.strip()
    return f"git {rev}{' + uncommitted changes' if dirty else ''}, sources sha256 {h.hexdigest()[:12]}"


def ensure_trace(path: str | None, size_mb: float, seed: int) -> str:
    """Return the trace to benchmark, generating a deterministic one if needed."""
    if path:
        if not os.path.exists(path):
            sys.exit(f"no such file: {path}")
        return path
    tag = f"{size_mb:g}".replace(".", "p")
    out = f"/tmp/tb_reduce_bench_{tag}mib_seed{seed}.pt.trace.json.gz"
    if not os.path.exists(out):
        print(f"generating {out} ({size_mb:g} MiB uncompressed) ...", flush=True)
        t = time.perf_counter()
        subprocess.run([sys.executable, str(BENCH_DIR / "gen_kineto_trace.py"), "--size-mb", str(size_mb),
                        "--seed", str(seed), "-q", "-o", out], check=True)
        print(f"  generated in {time.perf_counter() - t:.1f} s", flush=True)
    return out


def count_output(path: str) -> dict[str, int]:
    """Decompress and parse a (small) reduced output: events, summaries, JSON bytes."""
    import orjson
    from isal import igzip

    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    with (igzip.open if gz else open)(path, "rb") as f:
        data = f.read()
    doc = orjson.loads(data)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    summaries = sum(1 for e in events if isinstance(e, dict) and e.get("cat") == "tb_reduce.summary")
    return {"json_bytes": len(data), "events": len(events), "summaries": summaries,
            "gzip_bytes": os.path.getsize(path)}


def fmt_row(cols: list[str], widths: list[int]) -> str:
    return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cols, widths)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?", help="trace file (default: generate one into /tmp)")
    ap.add_argument("--size-mb", type=float, default=1024, help="size of the generated trace, MiB (default 1024)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-n", "--repeats", type=int, default=3)
    ap.add_argument("--level", default="2", help="tb-reduce level (default 2)")
    ap.add_argument("--skip-naive", action="store_true", help="do not run the json.load/json.dump baseline")
    ap.add_argument("--skip-pure", action="store_true",
                    help="do not run tb-reduce a second time with its native scanner off (TB_REDUCE_NATIVE=0)")
    ap.add_argument("--runner", choices=["auto", "script", "module"], default="auto",
                    help="how to start tb-reduce (default: console script if on PATH, else python -m)")
    ap.add_argument("--out-dir", default="/tmp", help="where outputs of the runs go")
    ap.add_argument("--json-out", help="also write all measurements to this JSON file")
    ap.add_argument("--profile", action="store_true",
                    help="after timing, run tb-reduce once under cProfile and print the top functions")
    a = ap.parse_args(argv)

    trace = ensure_trace(a.trace, a.size_mb, a.seed)
    gz_bytes = os.path.getsize(trace)
    env = child_env()
    prefix, runner_desc = tb_reduce_cmd(a.runner)
    out_tb = os.path.join(a.out_dir, "tb_reduce_bench_out.json.gz")
    stats_path = os.path.join(a.out_dir, "tb_reduce_bench_stats.json")
    out_naive = os.path.join(a.out_dir, "tb_reduce_bench_naive.json.gz")

    # Warm the page cache so the first contender is not charged for disk reads.
    with open(trace, "rb") as f:
        while f.read(64 * MIB):
            pass

    floor = Series("floor: isal.igzip stream, 16 MB reads", [sys.executable, "-c", FLOOR_SRC, trace])
    tb = Series(f"tb-reduce --level {a.level}",
                prefix + ["reduce", trace, "-o", out_tb, "--level", a.level, "--stats-json", stats_path])
    naive = Series("naive: json.load + filter + json.dump", [sys.executable, "-c", NAIVE_SRC, trace, out_naive, "20000"])
    out_pure = os.path.join(a.out_dir, "tb_reduce_bench_out_pure.json.gz")
    pure = Series(f"tb-reduce --level {a.level}, pure Python", prefix + ["reduce", trace, "-o", out_pure, "--level", a.level],
                  env={"TB_REDUCE_NATIVE": "0"})
    if a.skip_pure:
        pure.skipped = "--skip-pure"

    # The floor first: it also measures the uncompressed size the naive estimate needs.
    r = run_child(floor.cmd)
    if r.rc != 0:
        sys.exit(f"floor failed: {r.stderr.strip()[-500:]}")
    floor.runs.append(r)
    raw_bytes = int(r.stdout.strip())
    need = 8 * raw_bytes
    avail = mem_available()
    if a.skip_naive:
        naive.skipped = "--skip-naive"
    elif need > avail:
        naive.skipped = (f"needs ~8x the uncompressed size = {need / 1e9:.1f} GB, "
                         f"MemAvailable is {avail / 1e9:.1f} GB")

    print(f"trace     {trace}\n          {gz_bytes / MB:.1f} MB gzip, {raw_bytes / MB:.1f} MB JSON "
          f"({raw_bytes / MIB:.0f} MiB)")
    fingerprint = impl_fingerprint()
    print(f"tb-reduce {runner_desc}\n          {fingerprint}")
    print(f"repeats   {a.repeats}, fresh process each, interleaved; machine: {os.cpu_count()} CPUs, "
          f"MemAvailable {avail / 1e9:.1f} GB, load {os.getloadavg()[0]:.2f}")
    if naive.skipped:
        print(f"naive     skipped: {naive.skipped}")
    print(flush=True)

    for i in range(a.repeats):
        order = [floor, tb] + ([] if pure.skipped else [pure]) + ([] if naive.skipped else [naive])
        for s in order:
            if s is floor and i == 0:
                continue  # already ran once above
            r = run_child(s.cmd, cwd=REPO, env={**env, **s.env})
            s.runs.append(r)
            status = "ok" if r.rc == 0 else f"FAILED rc={r.rc}: {(r.stderr.strip().splitlines() or [''])[-1][:200]}"
            print(f"  [{i + 1}/{a.repeats}] {s.name:<42} {r.wall_s:8.2f} s  {r.maxrss_mb:8.0f} MB  {status}",
                  flush=True)
            if s is tb and r.rc != 0:
                print(r.stderr[-3000:], file=sys.stderr)

    # ---- table ------------------------------------------------------------- #
    print(f"\nload average now {os.getloadavg()[0]:.2f} (other work on the machine inflates wall times)")
    widths = [42, 9, 8, 8, 9, 11, 8]
    print(fmt_row(["step", "median s", "min s", "max s", "JSON GB/s", "peak RSS MB", "CPU s"], widths))
    print(fmt_row(["-" * 42, "-" * 9, "-" * 8, "-" * 8, "-" * 9, "-" * 11, "-" * 8], widths))
    for s in (floor, tb, pure, naive):
        if s.skipped:
            print(fmt_row([s.name, "skipped", "", "", "", "", ""], widths))
            continue
        ok = s.ok_runs()
        if not ok:
            print(fmt_row([s.name, "failed", "", "", "", "", ""], widths))
            continue
        med = s.median("wall_s")
        print(fmt_row([s.name, f"{med:.2f}", f"{min(r.wall_s for r in ok):.2f}",
                       f"{max(r.wall_s for r in ok):.2f}", f"{raw_bytes / med / 1e9:.2f}",
                       f"{s.median('maxrss_mb'):.0f}", f"{s.median('cpu_s'):.2f}"], widths))
    print()
    ratios: dict[str, float] = {}

    def compare(top, bottom, key: str, label: str) -> None:
        """Time, peak RSS and CPU ratios of two contenders. CPU-time ratios too: on
        a shared 2-core machine wall time includes waiting for a core."""
        for metric, column in (("time", "wall_s"), ("rss", "maxrss_mb"), ("cpu", "cpu_s")):
            ratios[f"{key}_{metric}"] = top.median(column) / bottom.median(column)
        print(f"{label}: {ratios[key + '_time']:.2f}x time, "
              f"{ratios[key + '_rss']:.2f}x peak RSS  ({ratios[key + '_cpu']:.2f}x CPU time)")

    if tb.ok_runs():
        compare(tb, floor, "tb_over_floor", "tb-reduce / floor ")
        if pure.ok_runs():
            compare(pure, tb, "pure_over_native", "pure / native    ")
            same = Path(out_pure).read_bytes() == Path(out_tb).read_bytes()
            print(f"pure and native outputs identical: {same}")
            ratios["outputs_identical"] = float(same)
        if naive.ok_runs():
            compare(naive, tb, "naive_over_tb", "naive / tb-reduce ")

    # ---- footprint ---------------------------------------------------------- #
    result: dict[str, object] = {
        "trace": trace, "gzip_bytes": gz_bytes, "json_bytes": raw_bytes, "repeats": a.repeats,
        "runner": runner_desc, "implementation": fingerprint,
        "series": [asdict(s) for s in (floor, tb, pure, naive)], "ratios": ratios,
    }
    if tb.ok_runs() and os.path.exists(out_tb):
        stats = json.loads(Path(stats_path).read_text()) if os.path.exists(stats_path) else {}
        if not isinstance(stats, dict):
            stats = {}
        tbobj = stats.get("tb_reduce", stats)
        got = count_output(out_tb)
        inp = tbobj.get("input", {})
        outp = tbobj.get("output", {})
        ev_in = inp.get("events")
        naive_info = json.loads(naive.ok_runs()[0].stdout) if naive.ok_runs() else {}
        if naive_info and ev_in is not None and naive_info.get("events_in") != ev_in:
            print(f"WARNING: stats input.events {ev_in} != naive count {naive_info.get('events_in')}")
        ev_in = ev_in if ev_in is not None else naive_info.get("events_in")
        print(f"\nlevel-{a.level} footprint (output decompressed and parsed here; --stats-json values in brackets)")
        print(f"  events : {ev_in} in -> {got['events']} out [{outp.get('events')}], "
              f"{got['summaries']} summaries [{outp.get('summaries')}]"
              + (f" = {100 * got['events'] / ev_in:.2f} % kept" if ev_in else ""))
        print(f"  JSON   : {raw_bytes} B in [{inp.get('json_bytes')}] -> {got['json_bytes']} B out "
              f"[{outp.get('json_bytes')}] = {100 * got['json_bytes'] / raw_bytes:.2f} % kept")
        print(f"  file   : {gz_bytes} B in [{inp.get('bytes')}] -> {got['gzip_bytes']} B out "
              f"[{outp.get('file_bytes')}] = {100 * got['gzip_bytes'] / gz_bytes:.2f} %")
        if naive_info:
            print(f"  naive keeps {naive_info['events_out']} events "
                  f"({100 * naive_info['events_out'] / naive_info['events_in']:.1f} %), "
                  f"theta = {naive_info['theta_us']:.1f} us")
        if ev_in:
            g10 = ev_in < 1_000_000 or (got["events"] <= 0.1 * ev_in and got["json_bytes"] <= 0.1 * raw_bytes)
            print(f"  G10 (<=10 % of events and of JSON bytes on >=1 M events): {'PASS' if g10 else 'FAIL'}"
                  + (" (not applicable: under 1 M events)" if ev_in < 1_000_000 else ""))
        timings = stats.get("timings_s") or tbobj.get("timings_s")
        if timings:
            print("  tb-reduce's own timings (last run, s): "
                  + ", ".join(f"{k} {v:.2f}" for k, v in timings.items() if isinstance(v, (int, float))))
        result.update({"stats_json": stats, "output": got, "naive": naive_info})

    if a.profile and tb.ok_runs():
        prof = os.path.join(a.out_dir, "tb_reduce_bench.prof")
        cmd = [sys.executable, "-m", "cProfile", "-o", prof, "-m", "tb_reduce_plugin.cli", "reduce", trace,
               "-o", out_tb, "--level", a.level]
        r = run_child(cmd, cwd=REPO, env=env)
        print(f"\ncProfile run: {r.wall_s:.2f} s (profiling overhead included), rc={r.rc}; top 30 by cumtime:")
        if r.rc == 0:
            import pstats

            pstats.Stats(prof).sort_stats("cumulative").print_stats(30)

    if a.json_out:
        Path(a.json_out).write_text(json.dumps(result, indent=1, default=str))
    return 0 if tb.ok_runs() else 1


if __name__ == "__main__":
    sys.exit(main())
