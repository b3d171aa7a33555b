"""The `compare` route: a trace against a baseline over the plugin's HTTP surface — the same
document as `tb-reduce diff --format json`, bad requests answered with their status, and a
storm of comparisons within the memory budget of a real server."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT
from plugin_support import body_json, client, get, make_plugin

RUNS = ROOT / "tests" / "fixtures" / "compare"


def logdir_of(tmp_path: Path) -> Path:
    logs = tmp_path / "logs"
    for name in ("base", "rerun", "slow_matmul", "slow_loader"):
        (logs / name).mkdir(parents=True)
        shutil.copyfile(RUNS / f"{name}.pt.trace.json.gz", logs / name / "worker0.1.pt.trace.json.gz")
    return logs


def test_the_route_answers_what_the_command_line_prints(tmp_path: Path) -> None:
    logs = logdir_of(tmp_path)
    c = client(make_plugin(logs, tmp_path / "cache"))
    host = "worker0.1"
    r = get(c, "compare", run="slow_matmul", host=host, base_run="base", base_host=host, steps="3:12")
    assert r.status_code == 200, r.get_data()[:300]
    doc = body_json(r)
    cli = subprocess.run([sys.executable, "-m", "tb_reduce_plugin", "diff", str(logs / "base" / f"{host}.pt.trace.json.gz"),
                          str(logs / "slow_matmul" / f"{host}.pt.trace.json.gz"), "--steps", "3:12", "--format", "json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    want = json.loads(cli.stdout)
    assert doc["names"] == want["names"] and doc["series"] == want["series"]
    assert doc["base"]["steps"] == doc["candidate"]["steps"] == 10 and doc["steps"] == "3:12"
    assert (doc["base_run"], doc["run"]) == ("base", "slow_matmul")
    assert doc["base"]["trace"] == f"base · {host} · steps 3:12"
    assert next(n for n in doc["names"] if not n["marker"])["name"] == "aten::mm"
    again = get(c, "compare", run="slow_matmul", host=host, base_run="base", base_host=host, steps="3:12")
    assert body_json(again) == doc  # from the kept sides
    assert doc["names_total"] == len(doc["names"])
    top = body_json(get(c, "compare", run="slow_matmul", host=host, base_run="base", base_host=host, steps="3:12",
                        limit=3))
    assert top["names"] == doc["names"][:3] and top["names_total"] == len(doc["names"])


def test_bad_comparisons_are_answered_with_their_status(tmp_path: Path) -> None:
    c = client(make_plugin(logdir_of(tmp_path), tmp_path / "cache"))
    ok = dict(run="slow_matmul", host="worker0.1", base_run="base", base_host="worker0.1")
    for params, status, says in (
        ({**ok, "steps": "9:3"}, 400, "empty"),
        ({**ok, "steps": "a:b"}, 400, "not a step range"),
        ({**ok, "steps": "400:"}, 400, "no step numbered"),
        ({**ok, "base_run": "nope"}, 404, ""),
        ({**ok, "base_host": "../../etc/passwd"}, 404, ""),
        ({k: v for k, v in ok.items() if k != "base_run"}, 400, "base_run"),
        ({**ok, "steps": "1:2\x00"}, 400, "control characters"),
        ({**ok, "limit": "0"}, 400, "limit must be 1 to"),
        ({**ok, "limit": "-3"}, 400, "whole number"),
    ):
        r = get(c, "compare", **params)
        assert r.status_code == status, (params, r.status_code, r.get_data()[:200])
        assert says in body_json(r)["error"]


def test_a_storm_of_comparisons_stays_within_the_budget_of_a_real_server(tmp_path: Path) -> None:
    """Forty comparisons at once — real runs in every pairing and step range, and a
    1 M-event trace without steps — against a real TensorBoard under a 384 MB budget:
    every answer a 200 or a 503 with Retry-After, the run list answering throughout, the
    server's peak RSS within the budget."""
    import collections
    import threading

    import hostile_files as hf
    from hostile_support import MARGIN_MB
    from tensorboard_process import start_tensorboard, storm

    budget_mb = 384
    logs = logdir_of(tmp_path)
    (logs / "big").mkdir()
    hf.tiny_events_gz(logs / "big" / "s.json.gz", 1_000_000)
    tb = start_tensorboard(logs, tmp_path / "cache", "--load_fast=false", "--tb_reduce_memory_mb", str(budget_mb),
                           cgroup_mb=4096)
    route = "data/plugin/tb_reduce/"
    try:
        assert tb.json(route + "runs")
        idle = tb.peak_mb()
        runs = ["base", "rerun", "slow_matmul", "slow_loader"]
        statuses: collections.Counter = collections.Counter()
        lock = threading.Lock()

        def ask(k: int) -> None:
            if k % 5 == 0:
                params = dict(run="big", host="s", base_run=runs[k % 4], base_host="worker0.1")
            else:
                params = dict(run=runs[k % 4], host="worker0.1", base_run=runs[(k // 4) % 4], base_host="worker0.1",
                              steps=f"{2 + k % 5}:{8 + k % 6}")
            got, headers, body = tb.get(route + "compare", **params)
            with lock:
                statuses[got] += 1
            if got == 503:
                assert headers.get("retry-after", "").isdigit()
            elif got == 200:
                doc = json.loads(body)
                assert doc["names"] and doc["base_run"] == params["base_run"]

        polls = storm(tb, ask, 40, route + "runs")
        assert tb.alive(), tb.tail()
        assert set(statuses) <= {200, 503} and statuses[200] >= 10, statuses
        assert tb.peak_mb() <= idle + budget_mb + MARGIN_MB, (tb.peak_mb(), idle)
        assert polls and max(polls) < 10, max(polls)
        assert "Traceback" not in tb.tail()
    finally:
        tb.stop()


def test_a_range_of_a_trace_is_the_baseline_of_another_range_of_it(tmp_path: Path) -> None:
    c = client(make_plugin(logdir_of(tmp_path), tmp_path / "cache"))
    r = get(c, "compare", run="slow_loader", host="worker0.1", base_run="slow_loader", base_host="worker0.1",
            steps="8:13", base_steps="2:7")
    assert r.status_code == 200, r.get_data()[:300]
    doc = body_json(r)
    assert doc["base_steps"] == "2:7" and doc["steps"] == "8:13"
    assert (doc["base"]["first_step"], doc["candidate"]["first_step"]) == (2, 8)
    bad = get(c, "compare", run="slow_loader", host="worker0.1", base_run="base", base_host="worker0.1",
              base_steps="7:2")
    assert bad.status_code == 400 and "base_steps" in body_json(bad)["error"]
