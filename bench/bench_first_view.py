#!/usr/bin/env python3
"""Benchmark a trace's first view in a server, this tree against another (a worktree): what a
user waits for the first time a trace is opened (ingest, plan, write), from an empty cache.

Per repeat, a fresh process of each tree (interleaved) opens a `TraceService` with an empty
cache over the same file (hard-linked into a logdir) and asks the whole trace at level 2,
timed with its stages; then it waits for what it keeps in the background (the index, and
for a gzip the text in chunks: not what the user waits for, reported apart). Medians and
ratios; the bodies of both trees are compared (a change of speed, never of output).
Reference: ISA-L inflating the same file in the same run (`floor`).

    python3 bench/bench_first_view.py TRACE --baseline /work/wt -n 3
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from isal import igzip
from trees_support import linked_logdir, run_in

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import gzip, hashlib, json, sys, time
from tb_reduce_plugin.serve.service import TraceService
logs, cache, run, host = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
s = TraceService(logs, cache_dir=cache)
t = time.perf_counter(); r = s.reduction(run, host, 2, None, None); view = time.perf_counter() - t
data = r.body.read()
body = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
t = time.perf_counter(); s.wait_saved(); kept = time.perf_counter() - t
print(json.dumps({"view": view, "kept": kept, **{k: r.stats["timings_s"][k] for k in ("index", "plan", "write")},
                  "digest": hashlib.sha256(body).hexdigest()}))
"""


def floor(path: Path) -> float:
    """Seconds to read the file's text: ISA-L inflating it, or reading it when plain."""
    t = time.perf_counter()
    with open(path, "rb") as raw:
        f = igzip.IGzipFile(fileobj=raw, mode="rb") if raw.read(2) == b"\x1f\x8b" else raw
        raw.seek(0)
        while f.read(16 << 20):
            pass
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--baseline", type=Path, required=True, help="another tree (a git worktree) to compare with")
    ap.add_argument("-n", type=int, default=3, help="first views per tree (medians)")
    args = ap.parse_args()
    trees = {"baseline": args.baseline.resolve(), "this tree": REPO}
    work = Path(tempfile.mkdtemp(prefix="tbr-first-view-"))
    try:
        logs, run, host, local = linked_logdir(args.trace, work)
        got: dict = {name: [] for name in trees}
        floors = []
        for i in range(args.n):
            floors.append(floor(local))
            digests = set()
            for name, tree in trees.items():
                cache = work / f"cache-{name}-{i}"
                try:
                    r = run_in(tree, CHILD, logs, cache, run, host)
                finally:
                    shutil.rmtree(cache, ignore_errors=True)
                got[name].append(r)
                digests.add(r["digest"])
                print(f"{name:10s} first view {r['view']:.2f} s (index {r['index']:.2f}, plan {r['plan']:.2f}, "
                      f"write {r['write']:.2f}), then kept {r['kept']:.2f} s", flush=True)
            assert len(digests) == 1, "the trees wrote different first views"
        med = statistics.median
        f = med(floors)
        print(f"trace {args.trace.name}: {args.trace.stat().st_size / 1e6:,.0f} MB; medians of {args.n}; "
              f"floor (reading its text) {f:.2f} s")
        print("            first view       x floor   index    plan     write    kept after")
        for name in trees:
            rs = got[name]
            view = med(r["view"] for r in rs)
            print(f"{name:10s}  {view:7.2f} s   x{view / f:6.2f}   " + "  ".join(
                f"{med(r[k] for r in rs):6.2f}" for k in ("index", "plan", "write", "kept")))
        b, t = (med(r["view"] for r in got[name]) for name in trees)
        print(f"this tree / baseline: x{t / b:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
