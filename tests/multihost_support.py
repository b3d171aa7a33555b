"""Helpers for the multi-host suites: a generated run of many hosts, and worker task
functions that die the way a worker does (imported by the worker processes by name)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from tb_reduce_plugin.multihost import tasks
from tb_reduce_plugin.multihost.merge import PID_STRIDE, SORT_STRIDE

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
# The corpus's 8 ranks of one PyTorch DLRM job (Kineto, µs since the epoch), one host each.
DLRM_RANKS = sorted((CORPUS / "public" / "param").glob("*dlrm_kineto__worker*_step_12.*.pt.trace.json"))
BASE_NS = 1_795_000_000_000_000_000  # the job's baseTimeNanoseconds, shared by every rank
KILL_ARMED = ".kill-armed"  # dot files are not listed by discovery


def moved(ev: dict, rank: int, host: str, offset: float) -> dict:
    """A host's event as merge.py documents it is written into the merged view."""
    ev = dict(ev)
    pid = ev["pid"]
    ev["pid"] = f"{host}/{pid}" if isinstance(pid, str) else rank * PID_STRIDE + pid % PID_STRIDE
    if isinstance(ev.get("ts"), (int, float)):
        ev["ts"] = ev["ts"] + offset
    for key in ("id", "bind_id"):
        if key in ev:
            ev[key] = f"{rank}:{ev[key]}"
    if isinstance(ev.get("args"), dict) and "bind_id" in ev["args"]:
        ev["args"] = dict(ev["args"], bind_id=f"{rank}:{ev['args']['bind_id']}")
    if ev.get("ph") == "M" and ev.get("name") == "process_name":
        ev["args"] = dict(ev["args"], name=f"{host} · {ev['args']['name']}")
    if ev.get("ph") == "M" and ev.get("name") == "process_sort_index":
        idx = min(max(int(ev["args"]["sort_index"]), 0), SORT_STRIDE - 1)
        ev["args"] = dict(ev["args"], sort_index=rank * SORT_STRIDE + idx)
    return ev


def dlrm_logdir(tmp_path: Path, run: str = "dlrm") -> Path:
    """A logdir whose run `run` holds the 8 DLRM ranks (skips the test without the corpus)."""
    if len(DLRM_RANKS) != 8:
        pytest.skip("the corpus's DLRM ranks are not here")
    logdir = tmp_path / "logs"
    (logdir / run).mkdir(parents=True)
    for p in DLRM_RANKS:
        shutil.copy(p, logdir / run / p.name)
    return logdir


def write_many_hosts(run_dir: Path, hosts: int, steps: int = 6, ops: int = 4, straggler: int = 3) -> list[Path]:
    """`hosts` Kineto-style rank traces of one job: per step a `ProfilerStep#N` on the main
    thread with `ops` ops under it and a kernel per op on a GPU stream; every rank starts
    within a few µs of the others (one clock, `baseTimeNanoseconds`), and rank `straggler`
    takes twice as long per step. Small (a few KB each), so hundreds make a test logdir."""
    run_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for r in range(hosts):
        evs: list[dict] = [
            {"ph": "M", "pid": 100 + r, "name": "process_name", "args": {"name": f"python {100 + r}"}},
            {"ph": "M", "pid": 100 + r, "tid": 1, "name": "thread_name", "args": {"name": "main"}},
        ]
        t = 1_000.0 + 3.0 * r  # µs after the base time
        step_us = 1_000.0 * (2 if r == straggler else 1)
        for s in range(steps):
            evs.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 100 + r, "tid": 1,
                        "ts": t, "dur": step_us})
            for k in range(ops):
                op_ts = t + 10 + k * step_us / (ops + 1)
                evs.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op{k}", "pid": 100 + r, "tid": 1,
                            "ts": op_ts, "dur": step_us / (ops + 2), "args": {"External id": s * ops + k}})
                evs.append({"ph": "X", "cat": "kernel", "name": f"kernel{k}", "pid": 0, "tid": 7,
                            "ts": op_ts + 5, "dur": step_us / (ops + 3)})
            t += step_us + 50
        doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": r, "world_size": hosts},
               "traceEvents": evs, "baseTimeNanoseconds": BASE_NS, "displayTimeUnit": "ms"}
        path = run_dir / f"rank{r:04d}.pt.trace.json.gz"
        path.write_bytes(gzip.compress(json.dumps(doc).encode(), mtime=0))
        out.append(path)
    return out


def arm_kill(run_dir: Path) -> Path:
    """Arms `reduce_or_die_once` for the traces in `run_dir` (a file, read by the workers)."""
    armed = run_dir / KILL_ARMED
    armed.write_text("the next worker task on this folder kills its own process\n")
    return armed


def reduce_or_die_once(task: tasks.HostTask) -> tasks.HostResult:
    """`reduce_host_task`, but the first call on an armed folder (`arm_kill`; the marker is
    taken atomically, across processes) kills its own worker process mid-task, as the OOM
    killer or a lost node would."""
    try:
        os.unlink(os.path.join(os.path.dirname(task.path), KILL_ARMED))
    except FileNotFoundError:
        return tasks.reduce_host_task(task)
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def always_die(task: tasks.HostTask) -> tasks.HostResult:
    """A task whose worker dies every time on a file named `doomed*` (a host that crashes its worker)."""
    if os.path.basename(task.path).startswith("doomed"):
        os.kill(os.getpid(), signal.SIGKILL)
    return tasks.reduce_host_task(task)
