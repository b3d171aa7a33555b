"""`tb-reduce export`: the event model as Apache Parquet, read back with pyarrow and DuckDB
— its sums per name are the range table's, its rows the events a user counts, a run's
folder one file per host with a host column; bad input exits 2 and leaves no file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
duckdb = pytest.importorskip("duckdb")

from tb_reduce_plugin.export.parquet import write_parquet  # noqa: E402
from tb_reduce_plugin.query.aggregate import aggregate  # noqa: E402
from tb_reduce_plugin.reduce.pipeline import index_file  # noqa: E402
from tb_reduce_plugin.reduce.plan import default_window  # noqa: E402
from tb_reduce_plugin.reduce.shared import slices_of  # noqa: E402
from tb_reduce_plugin.waveforms.steps import derive  # noqa: E402

TORCH = ROOT / "tests" / "fixtures" / "compare" / "base.pt.trace.json.gz"
JAX = ROOT / "demo_logdir" / "jax_mlp" / "plugins" / "profile" / "2026_11_30_13_59_00" / "vm.xplane.pb"
DDP = ROOT / "demo_logdir" / "ddp_two_ranks"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tb_reduce_plugin", "export", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


@pytest.mark.parametrize("trace", [TORCH, JAX], ids=["pytorch", "xspace"])
def test_sums_per_name_read_back_by_duckdb_are_the_range_tables(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "events.parquet"
    r = run(str(trace), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "rows of" in r.stdout and str(out) in r.stdout
    got = {name: (n, wall, own) for name, n, wall, own in duckdb.sql(
        f"select name, count(*), sum(dur), sum(self_us) from '{out}' where self_us is not null group by name"
    ).fetchall()}
    want = aggregate(index_file(trace).table, limit=None)["rows"]
    assert len(got) == len(want) > 5
    for row in want:
        n, wall, own = got[row["name"]]
        assert n == row["count"]
        assert wall == pytest.approx(row["wall_us"], rel=1e-9) and own == pytest.approx(row["self_us"], rel=1e-9)


def test_rows_are_the_events_a_user_counts_with_their_depth_and_step(tmp_path: Path) -> None:
    idx = index_file(TORCH)
    t, steps = idx.table, derive(idx.table)
    out = tmp_path / "events.parquet"
    write_parquet(t, steps, str(out))
    table = pq.read_table(out)
    assert table.column_names == ["event", "name", "cat", "ph", "ts", "dur", "pid", "tid", "process", "thread",
                                  "depth", "self_us", "step"]
    ev = table.column("event").to_numpy()
    ph = np.asarray(t.ph)
    assert np.all(np.diff(ev) > 0)  # file order, each event once
    assert set(ev.tolist()) == set(np.flatnonzero(ph != ord("M")).tolist())  # metadata names rows, is none
    sl = slices_of(t)
    depth = dict(zip(sl.event.tolist(), sl.depth.tolist()))
    rows = table.to_pylist()
    for row in rows:
        if row["ph"] == "X":
            assert row["depth"] == depth[row["event"]] and row["self_us"] is not None
        else:
            assert row["depth"] is None and row["self_us"] is None
        inside = [k for k in range(len(steps)) if steps.start_us[k] <= row["ts"] < steps.end_us[k]]
        want = steps.step[max(inside, key=lambda k: steps.start_us[k])] if inside else None
        assert row["step"] == want
    assert sum(r["step"] is not None for r in rows) > 0.9 * len(rows)
    markers = [r for r in rows if r["name"].startswith("ProfilerStep#")]
    assert all(r["name"] == f"ProfilerStep#{r['step']}" and r["depth"] == 0 for r in markers)
    assert {r["process"] for r in rows if r["pid"] == "24402"} == {"python"}


def test_a_window_keeps_the_rows_that_overlap_it(tmp_path: Path) -> None:
    t = index_file(TORCH).table
    lo, hi = default_window(t)
    a, b = 0.3 * (hi - lo), 0.5 * (hi - lo)
    out = tmp_path / "w.parquet"
    r = run(str(TORCH), "-o", str(out), "--start", f"{a:.3f}us", "--end", f"{b:.3f}us")
    assert r.returncode == 0, r.stderr
    rows = pq.read_table(out).to_pylist()
    whole = pq.read_table(_export(TORCH, tmp_path / "all.parquet")).to_pylist()
    start, end = lo + float(f"{a:.3f}"), lo + float(f"{b:.3f}")
    want = [w["event"] for w in whole if w["ts"] <= end and w["ts"] + (w["dur"] or 0.0) >= start]
    assert [row["event"] for row in rows] == want and 0 < len(want) < len(whole)


def _export(trace: Path, out: Path) -> Path:
    r = run(str(trace), "-o", str(out))
    assert r.returncode == 0, r.stderr
    return out


def test_chunks_of_rows_make_the_same_table(tmp_path: Path) -> None:
    idx = index_file(JAX)
    t, steps = idx.table, derive(idx.table)
    write_parquet(t, steps, str(tmp_path / "one.parquet"))
    write_parquet(t, steps, str(tmp_path / "many.parquet"), rows=97)
    one, many = pq.read_table(tmp_path / "one.parquet"), pq.read_table(tmp_path / "many.parquet")
    assert pq.ParquetFile(tmp_path / "many.parquet").metadata.num_row_groups > 10
    assert one.to_pylist() == many.to_pylist()


def test_a_runs_folder_exports_one_file_per_host_with_a_host_column(tmp_path: Path) -> None:
    run_dir = tmp_path / "ddp"
    shutil.copytree(DDP, run_dir)
    out = tmp_path / "out"
    r = run(str(run_dir), "-o", str(out))
    assert r.returncode == 0, r.stderr
    files = sorted(out.glob("*.parquet"))
    assert len(files) == 2 and len(r.stdout.strip().splitlines()) == 2
    hosts = duckdb.sql(f"select host, count(*) from '{out}/*.parquet' group by host order by host").fetchall()
    assert [h for h, _ in hosts] == [f.stem for f in files]
    for f in files:
        assert set(pq.read_table(f).column("host").to_pylist()) == {f.stem}


def test_begin_end_pairs_are_one_row_with_the_pairs_time_and_unmatched_ones_keep_theirs(tmp_path: Path) -> None:
    trace = tmp_path / "be.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "main"}},
        {"ph": "B", "name": "outer", "pid": 1, "tid": 2, "ts": 10},
        {"ph": "X", "name": "inner", "pid": 1, "tid": 2, "ts": 12, "dur": 3},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 20},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 30},
        {"ph": "i", "name": "mark", "pid": 1, "tid": 2, "ts": 25, "s": "t"},
    ]}))
    rows = pq.read_table(_export(trace, tmp_path / "be.parquet")).to_pylist()
    assert [(r["event"], r["ph"], r["name"], r["dur"], r["depth"], r["self_us"]) for r in rows] == [
        (1, "B", "outer", 10.0, 0, 7.0), (2, "X", "inner", 3.0, 1, 3.0), (4, "E", "", None, None, None),
        (5, "i", "mark", None, None, None)]
    assert {r["thread"] for r in rows} == {"main"} and {r["pid"] for r in rows} == {"1"}


def test_bad_input_exits_2_and_leaves_no_file(tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.pt.trace.json.gz"
    damaged.write_bytes(TORCH.read_bytes()[:4000])
    out = tmp_path / "out.parquet"
    for args, says in (([str(tmp_path / "missing.json")], "missing.json"), ([str(damaged)], "damaged"),
                       ([str(TORCH), "--start", "1s"], "both --start and --end"),
                       ([str(tmp_path / "empty_folder")], "no trace")):
        if "empty_folder" in args[0]:
            (tmp_path / "empty_folder").mkdir()
        r = run(*args, "-o", str(out))
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert not out.exists() and not list(tmp_path.glob(".*tmp*"))
    r = run(str(TORCH), "-o", str(tmp_path / "no" / "such" / "folder.parquet"))
    assert r.returncode == 2 and "does not exist" in r.stderr
    r = run(str(TORCH), "-o", str(TORCH))
    assert r.returncode == 2 and TORCH.stat().st_size > 0


def test_without_pyarrow_the_export_says_what_to_install(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['pyarrow'] = None; from tb_reduce_plugin.cli import main; "
            f"sys.exit(main(['export', {str(TORCH)!r}, '-o', {str(tmp_path / 'x.parquet')!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and "pip install 'tb-reduce-plugin[parquet]'" in r.stderr, r.stderr


def test_the_readme_export_and_its_query_run_as_written(tmp_path: Path) -> None:
    """README, "Export to Parquet": its command on a real run, then its DuckDB query."""
    readme = (ROOT / "README.md").read_text()
    at = readme.index("### Export to Parquet")
    command = readme[readme.index("tb-reduce export TRACE", at):].split("[", 1)[0].split()
    assert command[:2] == ["tb-reduce", "export"] and command[3:] == ["-o", "events.parquet"]
    shutil.copyfile(TORCH, tmp_path / "trace.pt.trace.json.gz")
    r = subprocess.run([str(Path(sys.executable).parent / "tb-reduce"), "export", "trace.pt.trace.json.gz",
                        *command[3:]], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    block = readme[readme.index("```python", at) + len("```python"):]
    code = block[:block.index("```")]
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "aten::mm" in r.stdout and "aten::addmm" in r.stdout  # the top names of steps 10 to 13
