#!/usr/bin/env python3
"""Make a REAL PyTorch profiler trace of >= 1 M events on the CPU, then measure tb-reduce on it.

Why: the synthetic generator (``gen_kineto_trace.py``) is shaped after real Kineto
files, but SPEC G10 (level 2 keeps <= 10 % of the events and of the JSON bytes on
traces of 1 M events or more) should also hold on what ``torch.profiler``
actually writes. Real traces of that size cannot live in the repository, so
this script makes one on demand: a small CNN + MLP training loop profiled with
``record_shapes=True`` and ``profile_memory=True`` (the settings that make
traces big), run for as many steps as it takes to pass the event target,
exported with ``prof.export_chrome_trace`` and gzipped.

torch is NOT a dependency of tb-reduce; install it only to run this script::

    pip install torch==2.13.0        # the CPU wheel already on this machine's disk

Usage::

    python3 bench/make_real_trace.py                       # >= 1 M events -> /tmp
    python3 bench/make_real_trace.py --events 2000000 -o /tmp/real2m.pt.trace.json.gz
    python3 bench/make_real_trace.py --reuse               # only re-measure an existing trace
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from bench_reduce import REPO, child_env, count_output, impl_fingerprint, run_child, tb_reduce_cmd  # noqa: E402

MB = 1e6


def build(torch: object) -> tuple[object, object, object, object, object]:
    """A small CNN + MLP classifier, its optimizer, loss and one fixed batch.

    Small on purpose: each step is a few ms of real work, so the profiler's
    per-op records (not the arithmetic) dominate and a million events take
    minutes, not hours, on 2 cores.
    """
    nn = torch.nn  # type: ignore[attr-defined]
    torch.manual_seed(0)  # type: ignore[attr-defined]
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
        nn.Flatten(), nn.Linear(32 * 16, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 10),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)  # type: ignore[attr-defined]
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(16, 3, 32, 32)  # type: ignore[attr-defined]
    y = torch.randint(0, 10, (16,))  # type: ignore[attr-defined]
    return model, opt, loss_fn, x, y


def profile_steps(torch: object, steps: int, path: str) -> tuple[float, float]:
    """Profile ``steps`` training steps, export the Chrome trace to ``path`` (plain JSON).

    Returns (seconds profiling, seconds exporting).
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    model, opt, loss_fn, x, y = build(torch)
    t = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
        for _ in range(steps):
            with record_function("## forward ##"):
                out = model(x)  # type: ignore[operator]
                loss = loss_fn(out, y)  # type: ignore[operator]
            with record_function("## backward ##"):
                opt.zero_grad(set_to_none=True)  # type: ignore[attr-defined]
                loss.backward()
            opt.step()  # type: ignore[attr-defined]
            loss.item()
            prof.step()
    t_prof = time.perf_counter() - t
    t = time.perf_counter()
    prof.export_chrome_trace(path)
    return t_prof, time.perf_counter() - t


def count_events(path: str) -> tuple[int, int]:
    """(events, JSON bytes) of a plain or gzip Chrome trace."""
    got = count_output(path)
    return got["events"], got["json_bytes"]


def gzip_file(src: str, dst: str) -> None:
    """Stream-compress ``src`` into ``dst`` with isal (fast, bounded memory)."""
    from isal import igzip

    with open(src, "rb") as fi, igzip.open(dst + ".partial", "wb", compresslevel=2) as fo:
        while chunk := fi.read(16 << 20):
            fo.write(chunk)
    os.replace(dst + ".partial", dst)


def make(out: str, target: int) -> dict[str, object]:
    """Calibrate events per step, profile enough steps, export, gzip."""
    try:
        import torch
    except ImportError:
        sys.exit("torch is not installed: pip install torch==2.13.0 (it is not a tb-reduce dependency)")
    torch.set_num_threads(1)
    info: dict[str, object] = {"torch": torch.__version__}
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(out))) as td:
        cal = os.path.join(td, "calib.json")
        profile_steps(torch, 40, cal)
        ev40, _ = count_events(cal)
        per_step = ev40 / 40
        steps = math.ceil(target * 1.03 / per_step)
        print(f"calibration: {ev40} events in 40 steps -> {per_step:.0f}/step; profiling {steps} steps",
              flush=True)
        raw = os.path.join(td, "trace.json")
        t_prof, t_export = profile_steps(torch, steps, raw)
        raw_bytes = os.path.getsize(raw)
        t = time.perf_counter()
        gzip_file(raw, out)
        t_gzip = time.perf_counter() - t
    info.update({"steps": steps, "profile_s": round(t_prof, 1), "export_s": round(t_export, 1),
                 "gzip_s": round(t_gzip, 1), "json_bytes": raw_bytes, "gzip_bytes": os.path.getsize(out)})
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", default="/tmp/torch_cpu_real.pt.trace.json.gz")
    ap.add_argument("--events", type=int, default=1_000_000, help="minimum number of events (default 1 M)")
    ap.add_argument("--reuse", action="store_true", help="measure the existing --output, do not profile")
    ap.add_argument("--level", default="2")
    ap.add_argument("--runner", choices=["auto", "script", "module"], default="auto")
    a = ap.parse_args(argv)

    t_all = time.perf_counter()
    if a.reuse and os.path.exists(a.output):
        info: dict[str, object] = {"reused": True}
    else:
        info = make(a.output, a.events)
    t_make = time.perf_counter() - t_all
    ev_in, bytes_in = count_events(a.output)
    info.update({"events": ev_in, "json_bytes": bytes_in, "gzip_bytes": os.path.getsize(a.output)})
    print(f"trace: {a.output}: {ev_in} events, {bytes_in / MB:.1f} MB JSON, "
          f"{os.path.getsize(a.output) / MB:.1f} MB gzip; made in {t_make:.1f} s {json.dumps(info)}", flush=True)
    if ev_in < a.events:
        print(f"WARNING: only {ev_in} events (< {a.events}); rerun with a larger --events", file=sys.stderr)

    prefix, runner_desc = tb_reduce_cmd(a.runner)
    out = os.path.join(os.path.dirname(os.path.abspath(a.output)), "torch_cpu_real.level2.json.gz")
    stats_path = out + ".stats.json"
    r = run_child(prefix + ["reduce", a.output, "-o", out, "--level", a.level, "--stats-json", stats_path],
                  cwd=REPO, env=child_env())
    if r.rc != 0:
        print(f"tb-reduce failed (rc {r.rc}): {r.stderr[-2000:]}", file=sys.stderr)
        return 1
    got = count_output(out)
    stats = json.loads(Path(stats_path).read_text())
    ev_pct = 100 * got["events"] / ev_in
    by_pct = 100 * got["json_bytes"] / bytes_in
    ok = ev_pct <= 10 and by_pct <= 10
    print(f"tb-reduce ({runner_desc}; {impl_fingerprint()}) --level {a.level}: "
          f"{r.wall_s:.2f} s wall, {r.maxrss_mb:.0f} MB peak RSS")
    print(f"  events kept : {got['events']} / {ev_in} = {ev_pct:.2f} %  ({got['summaries']} summaries)")
    print(f"  JSON kept   : {got['json_bytes']} / {bytes_in} B = {by_pct:.2f} %")
    print(f"  gzip        : {got['gzip_bytes']} / {os.path.getsize(a.output)} B")
    print(f"  G10 (<= 10 % of both): {'PASS' if ok else 'FAIL'}")
    print(f"  stats-json  : {json.dumps(stats)[:800]}")
    print(f"total time {time.perf_counter() - t_all:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
