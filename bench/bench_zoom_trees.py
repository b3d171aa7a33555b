#!/usr/bin/env python3
"""Benchmark a zoom after a restart, this tree against another (a worktree): what a user
waits for when a restarted TensorBoard is asked a window it never reduced.

Each tree fills a cache of its own over the same trace (the first view, then the index,
its kept text and prepared state written in the background), timed. Then, per window
width and repeat, a fresh process of each tree (interleaved) opens a `TraceService` over
a hard-linked copy of its cache (a restart: the index is mapped from the store) and asks
one new window at level 2; it reports the request, its plan and its write. Medians and
ratios; the bodies of the two trees are compared (a change of speed, never of output).

    python3 bench/bench_zoom_trees.py TRACE --baseline /work/wt -n 3
    python3 bench/bench_zoom_trees.py /tmp/g16.pt.trace.json.gz --baseline /work/wt --widths 0.1 0.01
    python3 bench/bench_zoom_trees.py TRACE --baseline /work/wt --drop-caches   # cold: root only
    python3 bench/bench_zoom_trees.py TRACE --baseline /work/wt --warm -n 9    # a running server
    python3 bench/bench_zoom_trees.py TRACE --baseline /work/wt --whole -n 5   # whole views

`--whole`: the whole trace (the default view's window) at level 2 and a resolution never
asked (1601, 1602, ...: the default view's 1,600 buckets and one more each time), each in a
fresh restarted process: the whole-table plan a restart pays for a view it never made.

`--warm`: a user zooming in a server that has answered before. Per tree and round
(`--rounds`, the trees taking turns), one process restarts over its cache, asks one window
it does not count (the process's first: its imports and first mappings), then its share of
every width's n windows, each never asked before; the page cache is whatever the fill left
(no drop).

It also prints each tree's index folder in bytes an event, by kind of file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from trees_support import linked_logdir, run_in

REPO = Path(__file__).resolve().parents[1]

# Run inside each tree's process: fill the cache, or ask one window of a restarted service.
CHILD = r"""
import gzip, hashlib, json, sys, time
from tb_reduce_plugin.serve.service import TraceService
from tb_reduce_plugin.reduce.plan import default_window
logs, cache, run, host, at, width = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), float(sys.argv[6])
s = TraceService(logs, cache_dir=cache)
if width == 0:
    t = time.perf_counter(); r = s.reduction(run, host, 2, None, None); view = time.perf_counter() - t
    s.wait_saved()
    print(json.dumps({"view": view, "saved": time.perf_counter() - t - view, "events": r.stats["input"]["events"]}))
    sys.exit(0)
if width < 0:  # the whole trace, at a resolution (`at`) never asked
    t = time.perf_counter(); r = s.reduction(run, host, 2, None, None, resolution=int(at)); took = time.perf_counter() - t
else:
    lo, hi = s.on_index(s.trace_file(run, host), lambda i: default_window(i.table))
    w = (lo + at * (hi - lo), lo + (at + width) * (hi - lo))
    t = time.perf_counter(); r = s.reduction(run, host, 2, *w); took = time.perf_counter() - t
assert r.stats["index"] == "stored" and not r.stats["cached"], "not a restarted index, or a window asked before"
data = r.body.read()
body = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
print(json.dumps({"request": took, "plan": r.stats["timings_s"]["plan"], "write": r.stats["timings_s"]["write"],
                  "events": r.stats["output"]["events"], "digest": hashlib.sha256(body).hexdigest()}))
"""

# Run inside each tree's process for `--warm`: one restarted service asks a first window (not
# counted), then each window of argv[4] (JSON pairs of place and width), never asked before.
WARM_CHILD = r"""
import gzip, hashlib, json, sys, time
from tb_reduce_plugin.serve.service import TraceService
from tb_reduce_plugin.reduce.plan import default_window
logs, cache, run, host, windows = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
s = TraceService(logs, cache_dir=cache)
lo, hi = s.on_index(s.trace_file(run, host), lambda i: default_window(i.table))
s.reduction(run, host, 2, lo + 0.013 * (hi - lo), lo + 0.0131 * (hi - lo))  # the process's first: not counted
out = []
for at, width in windows:
    t = time.perf_counter(); r = s.reduction(run, host, 2, lo + at * (hi - lo), lo + (at + width) * (hi - lo))
    took = time.perf_counter() - t
    assert not r.stats["cached"], "a window asked before"
    data = r.body.read()
    body = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    out.append({"request": took, "plan": r.stats["timings_s"]["plan"], "write": r.stats["timings_s"]["write"],
                "events": r.stats["output"]["events"], "digest": hashlib.sha256(body).hexdigest()})
print(json.dumps(out))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--baseline", type=Path, required=True, help="another tree (a git worktree) to compare with")
    ap.add_argument("-n", type=int, default=3, help="windows per width (medians)")
    ap.add_argument("--widths", type=float, nargs="+", default=[0.1, 0.01, 0.001], help="shares of the trace")
    ap.add_argument("--drop-caches", action="store_true", help="drop the page cache before each window (root)")
    ap.add_argument("--warm", action="store_true", help="every window in one running server per tree (see above)")
    ap.add_argument("--rounds", type=int, default=3, help="--warm: processes a tree, taking turns (default 3)")
    ap.add_argument("--whole", action="store_true", help="whole views at new resolutions instead of windows")
    args = ap.parse_args()
    trees = {"baseline": args.baseline.resolve(), "this tree": REPO}
    work = Path(tempfile.mkdtemp(prefix="tbr-zoom-trees-"))
    try:
        logs, run, host, _ = linked_logdir(args.trace, work)
        filled = {}
        for name, tree in trees.items():
            filled[name] = run_in(tree, CHILD, logs, work / f"cache-{name}", run, host, 0, 0)
            print(f"{name:10s} first view {filled[name]['view']:.1f} s, then kept {filled[name]['saved']:.1f} s",
                  flush=True)
        rows = _warm_rows(args, trees, logs, run, host, work) if args.warm else []
        for width in [] if args.warm else [-1.0] if args.whole else args.widths:
            got: dict = {name: [] for name in trees}
            for i in range(args.n):
                at = 0.05 + 0.9 * ((i * 0.37 + width * 7) % 1.0) * (1 - width)  # never asked before
                if width < 0:
                    at = 1601 + i  # a resolution never asked (the default view's is 1,600)
                digests = set()
                for name, tree in trees.items():
                    copy = work / "restarted"
                    subprocess.run(["cp", "-al", str(work / f"cache-{name}"), str(copy)], check=True)
                    if args.drop_caches:
                        os.sync()
                        with open("/proc/sys/vm/drop_caches", "w") as f:
                            f.write("3\n")
                    try:
                        r = run_in(tree, CHILD, logs, copy, run, host, at, width)
                    finally:
                        shutil.rmtree(copy, ignore_errors=True)
                    got[name].append(r)
                    digests.add((r["events"], r["digest"]))
                assert len(digests) == 1, f"the trees wrote different windows at {width} / {at}"
            rows.append((width, got))
        med = statistics.median
        events = filled["this tree"]["events"]
        how = ("; page cache dropped before each window" if args.drop_caches else
               "; in one running server per tree" if args.warm else "")
        print(f"trace {args.trace.name}: {args.trace.stat().st_size / 1e6:,.0f} MB, {events:,} events; "
              f"medians of {args.n}{how}")
        print("index folder, B an event: baseline / this tree")
        for kind, (b, t) in _disk(work, trees).items():
            print(f"  {kind:28s} {b / events:6.1f} / {t / events:6.1f}")
        print("window     request: baseline / this tree        plan            write")
        for width, got in rows:
            b, t = got["baseline"], got["this tree"]
            mb, mt = med(r["request"] for r in b), med(r["request"] for r in t)
            what = " whole  " if width < 0 else f"{width * 100:6.1f} %"
            print(f"{what}   {mb:7.3f} s / {mt:7.3f} s  x{mb / mt:5.2f}   "
                  f"{med(r['plan'] for r in b):.3f} / {med(r['plan'] for r in t):.3f}   "
                  f"{med(r['write'] for r in b):.3f} / {med(r['write'] for r in t):.3f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _warm_rows(args: argparse.Namespace, trees: dict, logs: Path, run: str, host: str, work: Path) -> list:
    """Per width, each tree's n windows asked in restarted processes of its own (`WARM_CHILD`),
    one a round (`--rounds`), the trees in turn and their order swapped each round (what a
    machine does meanwhile, its page cache reclaimed in the background say, falls on both
    alike); the same windows for both, their bodies compared."""
    windows = [(0.05 + 0.9 * ((i * 0.37 + width * 7) % 1.0) * (1 - width), width)
               for width in args.widths for i in range(args.n)]
    got: dict = {name: [] for name in trees}
    rounds = max(1, min(args.rounds, len(windows)))
    for r in range(rounds):
        mine = windows[r::rounds]
        for name in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
            copy = work / "restarted"
            subprocess.run(["cp", "-al", str(work / f"cache-{name}"), str(copy)], check=True)
            try:
                got[name].append(run_in(trees[name], WARM_CHILD, logs, copy, run, host, json.dumps(mine)))
            finally:
                shutil.rmtree(copy, ignore_errors=True)
    got = {name: [res[k % rounds][k // rounds] for k in range(len(windows))] for name, res in got.items()}
    for k, w in enumerate(windows):
        assert len({(got[n][k]["events"], got[n][k]["digest"]) for n in trees}) == 1, f"different windows at {w}"
    return [(width, {n: [r for r, w in zip(got[n], windows) if w[1] == width] for n in trees}) for width in args.widths]


def _disk(work: Path, trees: dict) -> dict[str, tuple[int, int]]:
    """Each tree's index folder in bytes, by kind of file: the prepared state (`p*_a*.npy`),
    the kept text (`blocks*`), the columns and the rest; and in all."""
    def kind(name: str) -> str:
        if name.startswith("p") and "_a" in name:
            return "prepared state"
        return "kept text" if name.startswith("blocks") else "columns and the rest"

    out: dict[str, list[int]] = {}
    for i, name in enumerate(trees):
        for f in (work / f"cache-{name}" / "index").rglob("*"):
            if f.is_file():
                for k in (kind(f.name), "in all"):
                    out.setdefault(k, [0] * len(trees))[i] += f.stat().st_size
    return {k: tuple(v) for k, v in out.items()}


if __name__ == "__main__":
    raise SystemExit(main())
