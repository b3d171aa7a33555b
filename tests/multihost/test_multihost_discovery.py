"""Discovery groups the hosts of one job (see `discovery`'s docstring): XProf's session folder
is one run of many hosts; PyTorch ranks in one folder are listed with their rank and world
size, in rank order; JAX sessions split across timestamp folders get one more run that joins
them, and only when the rule says so — on the real multi-process fixtures
(`tests/fixtures/make_multihost_profiles.py`) and the corpus's eight DLRM ranks."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import TESTS

from tb_reduce_plugin.serve import discovery
from tb_reduce_plugin.serve.discovery import Catalog, distributed_info, session_time
from tests.plugin_support import CORPUS, body_json, client, get, make_plugin

FIXTURES = TESTS / "fixtures" / "multihost"
DDP = sorted((FIXTURES / "ddp").glob("*.pt.trace.json.gz"))
JAX_ONE = sorted((FIXTURES / "jax_one").glob("plugins/profile/*/*.xplane.pb"))
JAX_SPLIT = sorted((FIXTURES / "jax_split").glob("plugins/profile/*/*.xplane.pb"), key=lambda p: p.parent.name)
DLRM = sorted((CORPUS / "public" / "param").glob("*dlrm_kineto__worker*_step_12.*.pt.trace.json"))
TS = "2026_12_02_04_27_14"


def _rank_in_file(path: Path) -> tuple[int, int]:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return doc["distributedInfo"]["rank"], doc["distributedInfo"]["world_size"]


def _runs(logdir: Path) -> dict[str, dict]:
    return {r["run"]: r for r in Catalog(str(logdir), max_age_s=0).runs()}


def _session(logdir: Path, prefix: str, ts: str, src: Path, host: str) -> Path:
    """A real XSpace put at `<prefix>/plugins/profile/<ts>/<host>.xplane.pb` (its bytes kept)."""
    d = logdir / prefix / "plugins" / "profile" / ts
    d.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, d / f"{host}.xplane.pb")
    return d / f"{host}.xplane.pb"


def _ts(seconds_after: int, base: str = TS) -> str:
    """The session folder name `seconds_after` seconds after `base`, as JAX names them."""
    import time
    t = session_time(base)
    assert t is not None
    return time.strftime(discovery.SESSION_FORMAT, time.gmtime(t + seconds_after))


# ---- XProf's layout ------------------------------------------------------------------------
def test_one_session_folder_of_two_jax_processes_stays_one_run_of_two_hosts(tmp_path: Path) -> None:
    assert len(JAX_ONE) == 2, "run tests/fixtures/make_multihost_profiles.py"
    shutil.copytree(FIXTURES / "jax_one", tmp_path / "job")
    runs = _runs(tmp_path)
    (run,) = runs
    assert run == f"job/{JAX_ONE[0].parent.name}" and "joins" not in runs[run]
    assert [h["host"] for h in runs[run]["hosts"]] == ["alpha", "beta"]
    assert all("rank" not in h and h["format"] == "xspace" for h in runs[run]["hosts"])


# ---- PyTorch ranks ---------------------------------------------------------------------------
def test_each_pytorch_rank_is_listed_with_its_rank_and_world_size_in_rank_order(tmp_path: Path) -> None:
    assert len(DDP) == 2, "run tests/fixtures/make_multihost_profiles.py"
    job = tmp_path / "ddp"
    job.mkdir()
    # Named so that name order is the reverse of rank order: the listing must follow the ranks.
    for p in DDP:
        rank, _ = _rank_in_file(p)
        shutil.copyfile(p, job / f"{'zy'[rank]}worker.{rank}.pt.trace.json.gz")
    hosts = _runs(tmp_path)["ddp"]["hosts"]
    assert [h["host"] for h in hosts] == ["zworker.0", "yworker.1"]
    assert [(h["rank"], h["world_size"]) for h in hosts] == [(0, 2), (1, 2)]


def test_the_corpus_eight_dlrm_ranks_are_listed_by_rank_whatever_their_names(tmp_path: Path) -> None:
    if len(DLRM) != 8:
        pytest.skip("the corpus's DLRM ranks are not here")
    job = tmp_path / "dlrm"
    job.mkdir()
    expected = []
    for p in DLRM:
        rank, world = _rank_in_file(p)
        name = f"host{7 - rank}"  # name order is the reverse of rank order
        os.symlink(p, job / f"{name}.pt.trace.json")
        expected.append((rank, world, name))
    hosts = _runs(tmp_path)["dlrm"]["hosts"]
    assert [(h["rank"], h["world_size"], h["host"]) for h in hosts] == sorted(expected)
    assert [h["rank"] for h in hosts] == list(range(8)) and {h["world_size"] for h in hosts} == {8}


def test_a_merged_view_of_ranks_gives_each_rank_its_own_place_in_rank_order(tmp_path: Path) -> None:
    job = tmp_path / "logs" / "ddp"
    job.mkdir(parents=True)
    for p in DDP:
        rank, _ = _rank_in_file(p)
        shutil.copyfile(p, job / f"{'zy'[rank]}worker.{rank}.pt.trace.json.gz")
    c = client(make_plugin(tmp_path / "logs", tmp_path / "cache"))
    tb = body_json(get(c, "stats", run="ddp", hosts="*", level=3))
    assert [(h["host"], h["rank"]) for h in tb["hosts"]] == [("zworker.0", 0), ("yworker.1", 1)]
    assert [h["metadata"]["distributedInfo"]["rank"] for h in tb["hosts"]] == [0, 1]


def test_the_rank_is_read_from_the_head_once_per_version_of_the_file(tmp_path: Path, monkeypatch) -> None:
    job = tmp_path / "ddp"
    job.mkdir()
    for p in DDP:
        shutil.copyfile(p, job / p.name)
    calls: list[str] = []
    real = discovery.distributed_info

    def counted(path: str, expect=None):
        calls.append(os.path.basename(path))
        return real(path, expect)

    monkeypatch.setattr(discovery, "distributed_info", counted)
    cat = Catalog(str(tmp_path), max_age_s=0)
    cat.runs()
    cat.runs()
    assert sorted(calls) == sorted(p.name for p in DDP)
    # A new version of one file (rewritten as rank 5 of 8) is read again, and only it.
    doc = json.loads(gzip.decompress(DDP[0].read_bytes()))
    doc["distributedInfo"] = dict(doc["distributedInfo"], rank=5, world_size=8)
    (job / DDP[0].name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    calls.clear()
    hosts = {h["host"]: h for h in cat.runs()[0]["hosts"]}
    assert calls == [DDP[0].name]
    assert (hosts[DDP[0].name.split(".pt.")[0]]["rank"], hosts[DDP[0].name.split(".pt.")[0]]["world_size"]) == (5, 8)
    assert [h["rank"] for h in cat.runs()[0]["hosts"]] == sorted(h["rank"] for h in hosts.values())


def test_the_rank_comes_from_the_keys_before_the_events_and_only_when_it_makes_sense(tmp_path: Path) -> None:
    doc = json.loads(gzip.decompress(DDP[0].read_bytes()))
    info = doc.pop("distributedInfo")
    events = doc.pop("traceEvents")

    def write(name: str, head: dict, tail: dict | None = None) -> str:
        body = json.dumps({**head, "traceEvents": events, **(tail or {})})
        (tmp_path / name).write_text(body)
        return str(tmp_path / name)

    assert distributed_info(write("real.json", {"distributedInfo": info})) == (info["rank"], 2)
    # after traceEvents (or in an event's args) it is not the file's
    assert distributed_info(write("after.json", {}, {"distributedInfo": info})) is None
    # beyond the bounded head
    pad = {"deviceProperties": "x" * discovery.RANK_SCAN_BYTES}
    assert distributed_info(write("far.json", {**pad, "distributedInfo": info})) is None
    for bad in ({"rank": 2, "world_size": 2}, {"rank": -1, "world_size": 2}, {"rank": True, "world_size": 2},
                {"rank": "0", "world_size": 2}, {"world_size": 2}, [0, 2]):
        assert distributed_info(write("bad.json", {"distributedInfo": bad})) is None, bad
    (tmp_path / "array.json").write_text(json.dumps(events))
    assert distributed_info(str(tmp_path / "array.json")) is None
    assert distributed_info(str(tmp_path / "missing.json")) is None


# ---- JAX sessions split across timestamp folders ------------------------------------------------
def test_jax_sessions_split_across_two_timestamp_folders_get_a_run_that_joins_them(tmp_path: Path) -> None:
    assert len(JAX_SPLIT) == 2, "run tests/fixtures/make_multihost_profiles.py"
    shutil.copytree(FIXTURES / "jax_split", tmp_path / "job")
    runs = _runs(tmp_path)
    first, second = (f"job/{p.parent.name}" for p in JAX_SPLIT)
    joined = f"job/{JAX_SPLIT[0].parent.name}+{JAX_SPLIT[1].parent.name}"
    assert sorted(runs) == sorted([first, second, joined])  # the separate runs stay listed
    assert runs[joined]["joins"] == [first, second]
    assert sorted(h["host"] for h in runs[joined]["hosts"]) == sorted(p.name.split(".")[0] for p in JAX_SPLIT)
    cat = Catalog(str(tmp_path), max_age_s=0)
    for p in JAX_SPLIT:
        host = p.name.split(".")[0]
        tf = cat.find(joined, host)
        assert tf is not None and tf.run == joined and Path(tf.path).name == p.name
        assert Path(tf.path).parent.name == p.parent.name
        assert cat.find(joined, host).path == cat.find(f"job/{p.parent.name}", host).path


def test_a_joined_run_is_served_as_one_merged_view_of_both_processes(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "jax_split", tmp_path / "logs" / "job")
    c = client(make_plugin(tmp_path / "logs", tmp_path / "cache"))
    joined = next(r for r in body_json(get(c, "runs")) if r.get("joins"))
    tb = body_json(get(c, "stats", run=joined["run"], hosts="*", level=2))
    assert tb["alignment"]["absolute"]
    assert sorted(h["host"] for h in tb["hosts"]) == ["delta", "gamma"]
    assert all("error" not in h and h["output"]["events"] > 0 for h in tb["hosts"])
    one = body_json(get(c, "stats", run=joined["run"], host="gamma", level=2))
    assert one["input"]["events"] == next(h for h in tb["hosts"] if h["host"] == "gamma")["input"]["events"]


def test_session_folders_are_joined_only_by_the_rule(tmp_path: Path) -> None:
    gamma, delta = JAX_SPLIT
    gap = discovery.MAX_JOIN_GAP_S
    # the same host in both folders: one host profiled twice, not one job
    _session(tmp_path, "again", TS, gamma, "gamma")
    _session(tmp_path, "again", _ts(2), gamma, "gamma")
    # too far apart
    _session(tmp_path, "far", TS, gamma, "gamma")
    _session(tmp_path, "far", _ts(gap + 1), delta, "delta")
    # at the gap exactly: joined
    _session(tmp_path, "edge", TS, gamma, "gamma")
    _session(tmp_path, "edge", _ts(gap), delta, "delta")
    # in different prefixes: different jobs
    _session(tmp_path, "a", TS, gamma, "gamma")
    _session(tmp_path, "b", _ts(1), delta, "delta")
    # a folder holding a PyTorch trace too is no JAX session
    _session(tmp_path, "mixed", TS, gamma, "gamma")
    d = _session(tmp_path, "mixed", _ts(1), delta, "delta").parent
    shutil.copyfile(DDP[0], d / DDP[0].name)
    # three processes, three seconds: one run of three hosts; a fourth past the gap of the first starts again
    for k, host in enumerate(("h0", "h1", "h2", "h3")):
        _session(tmp_path, "three", _ts(k * 2), gamma if k % 2 else delta, host)
    # a real folder already named like the joined run keeps its name
    _session(tmp_path, "taken", TS, gamma, "gamma")
    _session(tmp_path, "taken", _ts(1), delta, "delta")
    _session(tmp_path, "taken", f"{TS}+{_ts(1)}", delta, "real")
    runs = _runs(tmp_path)
    joined = {r: e["joins"] for r, e in runs.items() if "joins" in e}
    assert joined == {
        f"edge/{TS}+{_ts(gap)}": [f"edge/{TS}", f"edge/{_ts(gap)}"],
        f"three/{TS}+{_ts(2)}+{_ts(4)}": [f"three/{TS}", f"three/{_ts(2)}", f"three/{_ts(4)}"],
    }
    assert [h["host"] for h in runs[f"three/{TS}+{_ts(2)}+{_ts(4)}"]["hosts"]] == ["h0", "h1", "h2"]
    assert [h["host"] for h in runs[f"taken/{TS}+{_ts(1)}"]["hosts"]] == ["real"]
    assert f"three/{_ts(6)}" in runs and not any(r.endswith(f"+{_ts(6)}") for r in runs)


def test_a_joined_session_at_the_logdir_root_is_named_by_its_timestamps_alone(tmp_path: Path) -> None:
    gamma, delta = JAX_SPLIT
    _session(tmp_path, "", TS, gamma, "gamma")
    _session(tmp_path, "", _ts(3), delta, "delta")
    runs = _runs(tmp_path)
    assert runs[f"{TS}+{_ts(3)}"]["joins"] == [TS, _ts(3)]


@pytest.mark.parametrize("name, seconds", [(TS, session_time(TS)), ("2026_12_02_04_27", None),
                                            ("2026_13_02_04_27_14", None), ("run_2026_12_02_04_2", None),
                                            ("2026_12_02_04_27_1x", None)])
def test_a_session_folder_is_known_by_jaxs_timestamp_name_only(name: str, seconds) -> None:
    assert session_time(name) == seconds
    if seconds is not None:
        assert session_time(_ts(61)) - seconds == 61
