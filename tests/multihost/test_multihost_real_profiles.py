"""Merged views of real multi-process profiles made on this CPU by the profilers themselves
(`tests/fixtures/make_multihost_profiles.py`): two `torch.distributed` ranks (gloo, an
all_reduce in every step) and two JAX processes tracing the same span, in one session
folder and split across two. Each host's events must sit at its true absolute time, read
from the inputs directly (Kineto: `baseTimeNanoseconds` + ts; XSpace: the Task Environment
plane's `profile_start_time` + the event's time, read with protobuf by the test's own
converter), and each host's part of the view must be a reduction of its own file that keeps
SPEC §4 per track, as the independent checker (`reference_checker`) judges it."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS

from tb_reduce_plugin.multihost.merge import PID_STRIDE
from tests import reference_checker
from tests.multihost_support import moved
from tests.plugin_support import body_json, client, get, make_plugin
from tests.xspace_oracle import convert

FIXTURES = TESTS / "fixtures" / "multihost"
DDP = sorted((FIXTURES / "ddp").glob("*.pt.trace.json.gz"))
JAX_ONE = sorted((FIXTURES / "jax_one").glob("plugins/profile/*/*.xplane.pb"))
JAX_SPLIT = sorted((FIXTURES / "jax_split").glob("plugins/profile/*/*.xplane.pb"))


def _serve(tmp_path: Path) -> tuple[Any, dict[str, dict]]:
    """The fixtures as a logdir (copied, as a job writes them), and the plugin's run list by name."""
    logdir = tmp_path / "logs"
    shutil.copytree(FIXTURES, logdir)
    c = client(make_plugin(logdir, tmp_path / "cache"))
    runs = {r["run"]: r for r in body_json(get(c, "runs"))}
    return c, runs


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, dict]]:
    assert len(DDP) == 2 and len(JAX_ONE) == 2 and len(JAX_SPLIT) == 2, "run make_multihost_profiles.py"
    return _serve(tmp_path_factory.mktemp("multihost"))


def _input(path: Path) -> tuple[dict, int]:
    """A host's input as a Chrome trace document and its origin in real time (ns since the
    epoch), both read from the file itself, not through the package."""
    if path.name.endswith(".xplane.pb"):
        doc = convert(path)
        env = next(p for p in doc["xspace"]["planes"] if p["name"] == "Task Environment")
        return doc, int(env["stats"]["profile_start_time"])
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return doc, int(doc["baseTimeNanoseconds"])


def _input_of(run_entry: dict, host: str) -> Path:
    """The fixture file of a listed host (its file name is the host and its trace suffix)."""
    for p in DDP + JAX_ONE + JAX_SPLIT:
        if p.name.startswith(host + ".") and any(q["host"] == host for q in run_entry["hosts"]):
            return p
    raise AssertionError(f"no fixture for host {host!r}")


def _timed(events: list) -> list[dict]:
    return [e for e in events if isinstance(e, dict) and e.get("ph") != "M" and isinstance(e.get("ts"), (int, float))]


def _first_ts_ns(doc: dict) -> int:
    return round(min(e["ts"] for e in _timed(doc["traceEvents"])) * 1000)


def _runs_of_two(runs: dict) -> list[str]:
    """The DDP run, the JAX session of two processes and the run joining JAX's split sessions."""
    one = next(r for r in runs if r.startswith("jax_one/"))
    joined = next(r for r, e in runs.items() if e.get("joins"))
    return ["ddp", one, joined]


def test_the_fixtures_carry_what_the_profilers_write_for_a_job_of_two_processes() -> None:
    ranks = set()
    for p in DDP:
        doc, origin = _input(p)
        info = doc["distributedInfo"]
        assert info["backend"] == "gloo" and info["world_size"] == 2 and origin > 1.7e18
        ranks.add(info["rank"])
        assert sum(e.get("name") == "gloo:all_reduce" for e in doc["traceEvents"]) >= 8
    assert ranks == {0, 1}
    for p in JAX_ONE + JAX_SPLIT:
        doc, origin = _input(p)
        assert doc["xspace"]["hostnames"] == [p.name.split(".")[0]] and origin > 1.7e18  # named in its own namespace
    assert len({p.parent.name for p in JAX_ONE}) == 1 and len({p.parent.name for p in JAX_SPLIT}) == 2


def test_the_runs_of_two_processes_are_listed_as_runs_of_two_hosts(served) -> None:
    _, runs = served
    ddp, one, joined = _runs_of_two(runs)
    assert [(h["rank"], h["world_size"]) for h in runs[ddp]["hosts"]] == [(0, 2), (1, 2)]
    assert [h["host"] for h in runs[one]["hosts"]] == ["alpha", "beta"]
    assert sorted(h["host"] for h in runs[joined]["hosts"]) == ["delta", "gamma"]
    assert sorted(runs[joined]["joins"]) == sorted(r for r in runs if r.startswith("jax_split/") and r != joined)


@pytest.mark.parametrize("which", [0, 1, 2], ids=["ddp", "jax-one-session", "jax-joined-sessions"])
def test_every_event_of_every_host_sits_at_its_true_absolute_time(served, which: int) -> None:
    c, runs = served
    run = _runs_of_two(runs)[which]
    doc = body_json(get(c, "trace", run=run, hosts="*", level=0, gz=True))
    tb = doc["tb_reduce"]
    assert tb["merged"] and tb["alignment"]["absolute"]
    inputs = [_input(_input_of(runs[run], h["host"])) for h in tb["hosts"]]
    # The merged clock's 0 is the earliest first event of the hosts, in real time.
    epoch_ns = min(origin + _first_ts_ns(d) for d, origin in inputs)
    assert tb["alignment"]["epoch_ns"] == epoch_ns
    for entry, (own, origin) in zip(tb["hosts"], inputs):
        assert "error" not in entry and entry["clock"]["origin_ns"] == origin
        mine = _timed(doc["traceEvents"][entry["first_event"]:entry["first_event"] + entry["events"]])
        theirs = _timed(own["traceEvents"])
        assert len(mine) == len(theirs) > 100
        # Level 0 keeps the input's events in order: each one's wall time is the epoch plus its
        # merged ts, and must be the host's origin plus its own ts (compared as offsets: µs
        # since the epoch are too coarse in floats to compare whole).
        shift_us = (origin - epoch_ns) / 1000
        for a, b in zip(mine, theirs):
            assert a["name"] == b["name"] and a["ts"] - b["ts"] == pytest.approx(shift_us, abs=2e-3)
    assert min(e["ts"] for e in _timed(doc["traceEvents"])) == pytest.approx(0.0, abs=1e-3)


def _by_rank(doc: dict, name: str) -> dict[int, list[tuple[float, float]]]:
    out: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for e in _timed(doc["traceEvents"]):
        if e["name"] == name and e.get("ph") == "X":
            out[int(e["pid"]) // PID_STRIDE].append((e["ts"], e["ts"] + e["dur"]))
    return {r: sorted(v) for r, v in out.items()}


def test_the_ranks_all_reduces_overlap_in_real_time_as_a_blocking_collective_must(served) -> None:
    """A gloo all_reduce ends on no rank before every rank has entered it: on a merged clock
    that places the ranks right, the k-th all_reduce of each rank overlap."""
    c, _ = served
    doc = body_json(get(c, "trace", run="ddp", hosts="*", level=0, gz=True))
    ranks = _by_rank(doc, "gloo:all_reduce")
    assert sorted(ranks) == [0, 1] and len(ranks[0]) == len(ranks[1]) >= 8
    for (a0, a1), (b0, b1) in zip(ranks[0], ranks[1]):
        assert a0 < b1 and b0 < a1, ((a0, a1), (b0, b1))


def test_jax_processes_that_traced_the_same_span_overlap_on_the_merged_clock(served) -> None:
    c, runs = served
    for run in _runs_of_two(runs)[1:]:
        tb = body_json(get(c, "stats", run=run, hosts="*", level=2))
        spans = [[lo + h["offset_us"], hi + h["offset_us"]] for h in tb["hosts"] for lo, hi in [h["trace_us"]]]
        (a0, a1), (b0, b1) = spans
        shorter = min(a1 - a0, b1 - b0)
        assert min(a1, b1) - max(a0, b0) > 0.9 * shorter, spans  # both started tracing at one agreed time


@pytest.mark.parametrize("level", [0, 2, 4])
def test_each_hosts_part_of_a_merged_view_is_its_own_reduction_and_keeps_the_guarantees_per_track(
        served, level: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Per host: its part of the merged view is exactly its own reduction at its share of the
    buckets, moved as merge.py says, and that reduction passes the independent checker of
    G1-G9 against the host's input with R = the share (a move in time and a pid remap keep
    every per-track property: no track of one host gets another's events)."""
    c, runs = served
    expected_share = None if level == 0 else reference_checker.RESOLUTION[level] // 2
    for run in _runs_of_two(runs):
        doc = body_json(get(c, "trace", run=run, hosts="*", level=level, gz=True))
        tb = doc["tb_reduce"]
        share = tb["resolution"]
        assert share == expected_share
        tracks: dict[tuple, int] = {}
        for k, entry in enumerate(tb["hosts"]):
            host, rank = entry["host"], entry["rank"]
            assert rank == k and entry["resolution"] == share
            query = {} if share is None else {"resolution": share}
            alone = body_json(get(c, "trace", run=run, host=host, level=level, gz=True, **query))
            mine = doc["traceEvents"][entry["first_event"]:entry["first_event"] + entry["events"]]
            own = alone["traceEvents"]
            assert mine[:len(own)] == [moved(e, rank, host, entry["offset_us"]) for e in own]
            for e in mine[len(own):]:  # what the merge adds: names and sort indexes of the host's own processes
                assert e["ph"] == "M"
                assert e["pid"] // PID_STRIDE == rank if isinstance(e["pid"], int) else e["pid"].startswith(f"{host}/")
                if e["name"] == "process_name":
                    assert e["args"]["name"].startswith(f"{host} · pid ")
                else:
                    assert e["name"] == "process_sort_index" and e["args"]["sort_index"] >> 20 == rank
            if level:
                monkeypatch.setitem(reference_checker.RESOLUTION, level, share)
            reference_checker.check_reduction(_input(_input_of(runs[run], host))[0], alone, level)
            for e in mine:
                assert tracks.setdefault((e["pid"], e.get("tid")), rank) == rank
        assert len(set(tracks.values())) == 2
