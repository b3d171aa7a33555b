"""`tb-reduce diff BASE CANDIDATE`: what got slower, ranked, and the regression gate's exit
codes — on real PyTorch runs of one training loop (tests/fixtures/make_compare_traces.py:
a base run, a rerun of it, a run with an extra matmul a step, a run that sleeps in its
data loading), run as a real process the way the README shows it."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from tb_reduce_plugin.cli import main

RUNS = ROOT / "tests" / "fixtures" / "compare"
BASE, RERUN = RUNS / "base.pt.trace.json.gz", RUNS / "rerun.pt.trace.json.gz"
SLOW_MATMUL, SLOW_LOADER = RUNS / "slow_matmul.pt.trace.json.gz", RUNS / "slow_loader.pt.trace.json.gz"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tb_reduce_plugin", "diff", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def as_json(*args: str, code: int = 0) -> tuple[dict, str]:
    r = run(*args, "--format", "json")
    assert r.returncode == code, r.stderr
    return json.loads(r.stdout), r.stderr


def work(doc: dict) -> list[dict]:
    """The rows of names of work (markers aside)."""
    return [r for r in doc["names"] if not r["marker"]]


def test_an_extra_matmul_a_step_is_the_first_name_and_the_step_time_doubles() -> None:
    doc, _ = as_json(str(BASE), str(SLOW_MATMUL))
    assert doc["per_step"] and doc["base"]["steps"] == doc["candidate"]["steps"] == 12
    top = work(doc)[0]
    assert top["name"] == "aten::mm" and top["delta_self_us"] > 3000, top
    step = next(r for r in doc["series"] if r["series"] == "step_time")
    assert step["ratio"] > 1.5 and step["base"]["steps"] == step["candidate"]["steps"] == 12
    compute = next(r for r in doc["series"] if r["series"] == "compute")
    assert compute["delta"] > 0.8 * step["delta"]  # the matmul is compute: the category says so too


def test_a_sleep_in_the_data_loading_shows_as_unaccounted_time_and_its_annotation_heads_the_names() -> None:
    doc, _ = as_json(str(BASE), str(SLOW_LOADER))
    series = {r["series"]: r for r in doc["series"]}
    assert series["unaccounted"]["delta"] > 10  # 15 ms of sleep a step, no op
    assert series["compute"]["delta"] < 0.3 * series["unaccounted"]["delta"]
    assert work(doc)[0]["name"] == "data"  # the record_function the sleep is in


def test_the_gate_fails_the_slowed_runs_and_passes_a_rerun_of_the_baseline() -> None:
    gate = ["--fail-if", "step_time:+10%", "--fail-if", "name:^aten::mm$:self:+25%"]
    slowed = run(str(BASE), str(SLOW_MATMUL), *gate)
    assert slowed.returncode == 1, slowed.stderr
    fails = [line for line in slowed.stderr.splitlines() if "FAIL" in line]
    assert len(fails) == 2 and "step_time" in fails[0] and "12 and 12 steps" in fails[0], slowed.stderr
    assert "2 of 2 conditions failed" in slowed.stderr
    loader = run(str(BASE), str(SLOW_LOADER), "--fail-if", "unaccounted:+2ms", "--fail-if", "name:^aten::mm$:self:+25%")
    assert loader.returncode == 1 and "FAIL unaccounted" in loader.stderr and "pass name:^aten::mm$" in loader.stderr
    rerun = run(str(BASE), str(RERUN), *gate)
    assert rerun.returncode == 0, rerun.stderr
    assert rerun.stderr.count("pass ") == 2 and "FAIL" not in rerun.stderr


def test_a_trace_compared_with_itself_changes_nothing_and_passes_a_zero_margin() -> None:
    doc, err = as_json(str(BASE), str(BASE), "--fail-if", "step_time:+0%", "--fail-if", "name:.:count:+0")
    assert all(r["delta_self_us"] == 0 and r["only_in"] is None for r in doc["names"])
    assert all(r["delta"] == 0 for r in doc["series"])
    assert [g["failed"] for g in doc["gate"]] == [False, False], err
    assert doc["base"]["trace"] == doc["candidate"]["trace"] == str(BASE)  # one file name twice: named by path


def test_step_ranges_choose_the_same_step_numbers_in_both_runs_and_the_table_is_exact_over_them() -> None:
    from tb_reduce_plugin.query.aggregate import aggregate
    from tb_reduce_plugin.reduce.pipeline import index_file
    from tb_reduce_plugin.waveforms.steps import derive

    doc, _ = as_json(str(BASE), str(SLOW_MATMUL), "--steps", "5:8")
    assert doc["base"]["steps"] == doc["candidate"]["steps"] == 4
    assert (doc["base"]["first_step"], doc["base"]["last_step"]) == (5, 8)
    t = index_file(BASE).table
    s = derive(t)
    lo, hi = doc["base"]["window_us"]
    chosen = (s.step >= 5) & (s.step <= 8)
    assert lo == s.start_us[chosen].min() and hi == s.end_us[chosen].max()
    want = {r["name"]: r for r in aggregate(t, lo, hi, limit=None)["rows"]}
    got = {r["name"]: r["base"] for r in doc["names"] if r["base"] is not None and not r["marker"]}
    assert set(got) <= set(want) and len(got) > 20
    for name, row in got.items():  # per step: the range table's sums over the 4 steps, divided by 4
        assert row["count"] * 4 == pytest.approx(want[name]["count"])
        assert row["self_us"] * 4 == pytest.approx(want[name]["self_us"])
        assert row["max_us"] == want[name]["max_us"]


def test_the_table_names_both_runs_their_steps_and_the_names_that_changed_most() -> None:
    r = run(str(BASE), str(SLOW_MATMUL), "--limit", "5")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("base:") and "12 steps (ProfilerStep#N), 2 to 13" in lines[0]
    assert lines[1].startswith("candidate:") and "slow_matmul" in lines[1]
    assert any(line.startswith("step_time") for line in lines)
    names = lines.index(next(line for line in lines if line.startswith("names, a step")))
    assert "(5 of" in lines[names]
    assert lines[names + 3].startswith("aten::mm ")


def test_csv_holds_every_series_and_every_name() -> None:
    r = run(str(BASE), str(SLOW_MATMUL), "--format", "csv")
    assert r.returncode == 0, r.stderr
    rows = [line.split(",") for line in r.stdout.splitlines()]
    assert rows[0][:5] == ["kind", "name", "unit", "base", "candidate"]
    kinds = [row[0] for row in rows[1:]]
    doc, _ = as_json(str(BASE), str(SLOW_MATMUL))
    assert kinds.count("series") == len(doc["series"]) and kinds.count("name") == len(doc["names"])


def test_a_run_without_steps_is_compared_in_all_and_a_step_condition_on_it_is_bad_input(tmp_path: Path) -> None:
    stepless = tmp_path / "stepless.json"
    events = json.loads(gzip.decompress(BASE.read_bytes()))
    events["traceEvents"] = [e for e in events["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    stepless.write_text(json.dumps(events))
    doc, _ = as_json(str(BASE), str(stepless))
    assert not doc["per_step"] and doc["candidate"]["steps"] == 0 and "no step markers" in doc["candidate"]["no_steps"]
    r = run(str(BASE), str(stepless), "--fail-if", "step_time:+5%")
    assert r.returncode == 2 and "stepless.json has no steps" in r.stderr, r.stderr
    r = run(str(BASE), str(stepless), "--fail-if", "name:^aten::mm$:self:+5%")
    assert r.returncode == 0 and "totals over the whole traces" in r.stderr, r.stderr


@pytest.mark.parametrize("args, says", [
    (["--fail-if", "step_time:5%"], "not +N%"),
    (["--fail-if", "step_time:+5"], "unit"),
    (["--fail-if", "name:(a)\\1:self:+5%"], "RE2"),
    (["--fail-if", "name:a{99999999999}:self:+5%"], "over 1000"),
    (["--fail-if", "name:aten::mm:cycles:+5%"], "self|wall|count"),
    (["--fail-if", "name::self:+5%"], "empty"),
    (["--fail-if", "no_such_series:+5%"], "neither trace has a series 'no_such_series'"),
    (["--fail-if", "name:^no such op$:self:+5%"], "matches no slice in either trace"),
    (["--steps", "9:3"], "empty"),
    (["--steps", "400:500"], "no step numbered in 400:500"),
    (["--max-memory-mb", "1"], "--max-memory-mb"),
])
def test_bad_input_exits_2_with_one_line_saying_what_is_wrong(args: list[str], says: str) -> None:
    r = run(str(BASE), str(SLOW_MATMUL), *args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_missing_empty_and_damaged_traces_are_bad_input(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text('{"traceEvents": []}')
    damaged = tmp_path / "damaged.pt.trace.json.gz"
    damaged.write_bytes(BASE.read_bytes()[:5000])
    for other, says in ((tmp_path / "missing.json", "missing.json"), (damaged, "damaged")):
        r = run(str(BASE), str(other))
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
    doc, _ = as_json(str(BASE), str(empty))  # an empty trace compares: every name is only in the base
    assert doc["names"] and all(r["only_in"] == "base" for r in doc["names"])


def test_the_gate_answers_when_its_output_is_cut_short(capsys) -> None:
    """`tb-reduce diff … | head`: the exit code is still the gate's."""
    r = subprocess.run(f"{sys.executable} -m tb_reduce_plugin diff {BASE} {SLOW_MATMUL} --fail-if step_time:+10% "
                       f"--format csv | head -1; exit ${{PIPESTATUS[0]}}", shell=True, executable="/bin/bash",
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 1 and "FAIL step_time" in r.stderr and "Broken pipe" not in r.stderr, r.stderr
    assert main(["diff", str(BASE), str(RERUN), "--fail-if", "step_time:+10%"]) == 0
    assert "pass step_time" in capsys.readouterr().err


def test_the_readme_gate_runs_as_written_and_fails_a_slowed_change(tmp_path: Path) -> None:
    """README, "Compare two runs": its command, exactly, on a baseline and a slowed run laid
    out as it shows them; then on a rerun of the baseline, which passes."""
    readme = (ROOT / "README.md").read_text()
    at = readme.index("tb-reduce diff runs/main/")
    command = readme[at:readme.index("```", at)].replace("\\\n", " ").strip()
    for candidate, code in ((SLOW_MATMUL, 1), (RERUN, 0)):
        for d, src in (("main", BASE), ("pr", candidate)):
            (tmp_path / "runs" / d).mkdir(parents=True, exist_ok=True)
            (tmp_path / "runs" / d / "worker0.1.pt.trace.json.gz").write_bytes(src.read_bytes())
        r = subprocess.run(command, shell=True, executable="/bin/bash", cwd=tmp_path, capture_output=True, text=True,
                           timeout=120, env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"})
        assert r.returncode == code, (command, r.stderr)
        assert r.stderr.count("pass ") + r.stderr.count("FAIL ") == 3, r.stderr


JAX_BASE, JAX_SLOW = RUNS / "jax_base.xplane.pb", RUNS / "jax_slow_matmul.xplane.pb"


def test_two_jax_runs_compare_by_step_num_and_the_extra_matmul_fusion_heads_the_names() -> None:
    doc, _ = as_json(str(JAX_BASE), str(JAX_SLOW))
    assert doc["base"]["marker"] == "step_num" and doc["base"]["steps"] == doc["candidate"]["steps"] == 12
    step = next(r for r in doc["series"] if r["series"] == "step_time")
    assert step["ratio"] > 1.5
    top = work(doc)[0]
    assert top["name"] == "ynn_fusion" and (top["base"]["count"], top["candidate"]["count"]) == (1, 2), top
    markers = [r["name"] for r in doc["names"] if r["marker"]]
    assert markers == ["train"]  # the StepTraceAnnotation's slices: the step time, listed last
    assert doc["names"][-1]["name"] == "train"
    gate = run(str(JAX_BASE), str(JAX_SLOW), "--fail-if", "step_time:+10%")
    assert gate.returncode == 1 and "FAIL step_time" in gate.stderr
    same = run(str(JAX_BASE), str(JAX_BASE), "--fail-if", "step_time:+10%", "--fail-if", "name:fusion:self:+10%")
    assert same.returncode == 0, same.stderr


def test_pytorch_markers_are_joined_across_their_numbers_and_listed_last() -> None:
    doc, _ = as_json(str(BASE), str(SLOW_MATMUL))
    markers = [r for r in doc["names"] if r["marker"]]
    assert {r["name"] for r in markers} == {"ProfilerStep#*", "PyTorch Profiler (*)"}
    steps = next(r for r in markers if r["name"] == "ProfilerStep#*")
    assert steps["base"]["count"] == 1  # a step each step
    assert doc["names"][-len(markers):] == markers
    assert not any(r["name"].startswith("ProfilerStep#") and r["name"] != "ProfilerStep#*" for r in doc["names"])


MEMORY = RUNS / "memory.pt.trace.json.gz"


def test_peak_memory_compares_in_mb_and_gates_a_run_that_holds_more(tmp_path: Path) -> None:
    """The memory run against a copy of itself whose allocator totals are doubled (the
    same steps holding twice the memory): the series is in MB, the gate fails it by
    MB or per cent, passes the run against itself, and refuses a run that records none."""
    doubled = tmp_path / "doubled.pt.trace.json.gz"
    events = json.loads(gzip.decompress(MEMORY.read_bytes()))
    for e in events["traceEvents"]:
        if e.get("name") == "[memory]":
            e["args"]["Total Allocated"] *= 2
    doubled.write_bytes(gzip.compress(json.dumps(events).encode()))
    doc, _ = as_json(str(MEMORY), str(doubled))
    row = next(r for r in doc["series"] if r["series"] == "memory_peak_mb_cpu")
    assert row["unit"] == "MB" and row["ratio"] == pytest.approx(2.0)
    assert row["base"]["median"] > 5 and row["candidate"]["slowest"] == pytest.approx(2 * row["base"]["slowest"])
    worse = run(str(MEMORY), str(doubled), "--fail-if", "memory_peak_mb_cpu:+5MB", "--fail-if",
                "memory_peak_mb_cpu:+50%")
    assert worse.returncode == 1 and worse.stderr.count("FAIL memory_peak_mb_cpu") == 2, worse.stderr
    assert " MB → " in worse.stderr
    same = run(str(MEMORY), str(MEMORY), "--fail-if", "memory_peak_mb_cpu:+0%")
    assert same.returncode == 0, same.stderr
    none = run(str(BASE), str(MEMORY), "--fail-if", "memory_peak_mb_cpu:+5MB")
    assert none.returncode == 2 and "profile_memory=True" in none.stderr, none.stderr
    bad = run(str(MEMORY), str(doubled), "--fail-if", "memory_peak_mb_cpu:+5ms")
    assert bad.returncode == 2 and "B, kB, MB, GB" in bad.stderr, bad.stderr


def test_run_folders_holding_one_trace_each_compare_as_their_traces(tmp_path: Path) -> None:
    for d, src in (("main", BASE), ("pr", SLOW_MATMUL)):
        (tmp_path / d).mkdir()
        (tmp_path / d / "worker0.1.pt.trace.json.gz").write_bytes(src.read_bytes())
    doc, _ = as_json(str(tmp_path / "main"), str(tmp_path / "pr"))
    assert work(doc)[0]["name"] == "aten::mm"
    assert doc["base"]["trace"].endswith("main/worker0.1.pt.trace.json.gz")  # one file name twice: named by path
    (tmp_path / "pr" / "worker1.1.pt.trace.json.gz").write_bytes(RERUN.read_bytes())
    r = run(str(tmp_path / "main"), str(tmp_path / "pr"))
    assert r.returncode == 2 and "2 traces in this folder (worker0.1, worker1.1); give one file" in r.stderr, r.stderr
    (tmp_path / "empty").mkdir()
    r = run(str(tmp_path / "main"), str(tmp_path / "empty"))
    assert r.returncode == 2 and "no trace in this folder" in r.stderr


def test_a_step_range_of_a_trace_against_another_range_of_the_same_trace() -> None:
    """`--base-steps`: the memory run's steps before it starts keeping tensors against those after."""
    doc, _ = as_json(str(MEMORY), str(MEMORY), "--base-steps", "2:5", "--steps", "9:13")
    assert (doc["base"]["first_step"], doc["base"]["last_step"], doc["base"]["steps"]) == (2, 5, 4)
    assert (doc["candidate"]["first_step"], doc["candidate"]["last_step"], doc["candidate"]["steps"]) == (9, 13, 5)
    assert doc["base"]["trace"].endswith("steps 2:5") and doc["candidate"]["trace"].endswith("steps 9:13")
    memory = next(r for r in doc["series"] if r["series"] == "memory_peak_mb_cpu")
    assert memory["delta"] > 20  # 4 MiB more a step from step 6
    gate = run(str(MEMORY), str(MEMORY), "--base-steps", "2:5", "--steps", "9:13", "--fail-if",
               "memory_peak_mb_cpu:+10%")
    assert gate.returncode == 1 and "FAIL memory_peak_mb_cpu" in gate.stderr


def test_a_hostile_trace_whose_steps_reach_the_end_of_the_floats_still_compares(tmp_path: Path) -> None:
    events = [{"ph": "X", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": 1000.0 * i, "dur": 900.0}
              for i in range(6)]
    events += [{"ph": "X", "name": "ProfilerStep#9", "pid": 1, "tid": 1, "ts": 1e308, "dur": 1e308},
               {"ph": "X", "name": "ProfilerStep#10", "pid": 1, "tid": 1, "ts": float("nan"), "dur": 5.0}]
    events += [{"ph": "X", "name": "op", "pid": 1, "tid": 1, "ts": 1000.0 * i + 10, "dur": 100.0} for i in range(6)]
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps({"traceEvents": events}).replace("NaN", '"NaN"'))
    doc, err = as_json(str(path), str(path), "--fail-if", "step_time:+5%", "--fail-if", "name:^op$:self:+5%")
    assert [g["failed"] for g in doc["gate"]] == [False, False], err
    op = next(r for r in doc["names"] if r["name"] == "op")["base"]
    assert op["count"] * doc["base"]["steps"] == pytest.approx(6)  # every op, in steps numbered 0 to 9


def test_a_folders_trace_replaced_after_it_was_listed_is_refused_not_read(tmp_path: Path) -> None:
    """The version a run folder's listing saw is the one read (device, inode, size, mtime):
    a file swapped in its place meanwhile is refused, by diff and by export alike."""
    from tb_reduce_plugin.compare.files import diff_files
    from tb_reduce_plugin.errors import TraceError
    from tb_reduce_plugin.export.files import export_file
    from tb_reduce_plugin.formats.sources import FileIdentity

    path = tmp_path / "w.pt.trace.json.gz"
    path.write_bytes(BASE.read_bytes())
    listed = FileIdentity.from_stat(path.stat())
    swapped = tmp_path / "new.gz"
    swapped.write_bytes(SLOW_MATMUL.read_bytes())
    swapped.replace(path)  # another file at the path now
    with pytest.raises(TraceError, match="changed|replaced|not the file"):
        diff_files(path, BASE, expect=(listed, None))
    pytest.importorskip("pyarrow")
    with pytest.raises(TraceError, match="changed|replaced|not the file"):
        export_file(str(path), str(tmp_path / "out.parquet"), expect=listed)
    assert not (tmp_path / "out.parquet").exists()
    doc, _ = diff_files(path, BASE, expect=(FileIdentity.from_stat(path.stat()), None))  # the version listed now
    assert doc["names"]
