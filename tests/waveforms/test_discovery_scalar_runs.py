"""Catalog: folders of TensorBoard event files without traces are runs of scalars only,
named as TensorBoard names them, found by the one bounded walk, on real event files
written by `torch.utils.tensorboard.SummaryWriter`; the folders whose event files a trace
run already reads, dot folders and TensorBoard's `.profile-empty` markers stay out."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from plugin_support import JAX_RUN, JAX_SMALL, TORCH_RUN, add_jax_run, add_torch_run, require_corpus
from scalar_runs_support import write_loss_run

from tb_reduce_plugin.serve import discovery
from tb_reduce_plugin.serve.discovery import Catalog


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    require_corpus()
    d = tmp_path / "logdir"
    d.mkdir()
    return d


def scalar_entries(catalog: Catalog) -> list[dict]:
    return [r for r in catalog.runs() if r.get("scalars_only")]


def test_summarywriter_folders_are_runs_of_scalars_only_after_the_trace_runs(logdir: Path) -> None:
    for run in ("runs/b", "runs/a", "exp/seed1/train"):
        write_loss_run(logdir, run)
    add_torch_run(logdir)
    catalog = Catalog(str(logdir))
    runs = catalog.runs()
    assert [r["run"] for r in runs] == [TORCH_RUN, "exp/seed1/train", "runs/a", "runs/b"]
    assert runs[1:] == [{"run": r, "hosts": [], "scalars_only": True} for r in ("exp/seed1/train", "runs/a", "runs/b")]
    assert catalog.find("runs/a", "") is None and ("runs/a", "") not in catalog.files()  # no trace to open
    [path] = catalog.event_files("runs/a")
    assert Path(path).parent == logdir / "runs" / "a" and "tfevents" in Path(path).name
    assert catalog.scalars_folder("runs/b") == str(logdir / "runs" / "b")
    assert catalog.scalars_folder("runs") is None and catalog.event_files("runs") == []


def test_event_files_in_the_logdir_itself_are_run_dot(logdir: Path) -> None:
    write_loss_run(logdir, ".")
    assert scalar_entries(Catalog(str(logdir))) == [{"run": ".", "hosts": [], "scalars_only": True}]


def test_a_trace_runs_own_event_files_make_no_second_run(logdir: Path) -> None:
    """PyTorch: the trace handler's folder and SummaryWriter's are one; JAX: the events
    folder above `plugins/profile` belongs to the session runs under it."""
    add_torch_run(logdir)
    write_loss_run(logdir, TORCH_RUN)
    add_jax_run(logdir)
    write_loss_run(logdir, "jax")
    catalog = Catalog(str(logdir))
    assert scalar_entries(catalog) == []
    assert len(catalog.event_files(TORCH_RUN)) == 1 and len(catalog.event_files(JAX_RUN)) == 1


def test_dot_folders_and_profile_markers_stay_out(logdir: Path) -> None:
    for run in (".hidden", ".tb-reduce-ring", "runs/.scratch", "runs/a"):
        write_loss_run(logdir, run)
    (logdir / "profiled").mkdir()
    (logdir / "profiled" / "events.out.tfevents.1700000000.vm.profile-empty").write_bytes(b"")
    assert [r["run"] for r in scalar_entries(Catalog(str(logdir)))] == ["runs/a"]


def test_the_sidecars_live_series_stay_with_its_windows(logdir: Path) -> None:
    """`tb-reduce live` writes its scalars in `live/` and its windows in `live/<time>/`: the
    windows read those scalars, and `live` is no run of its own."""
    window = logdir / "live" / "20261201T041530.123Z-000001"
    window.mkdir(parents=True)
    shutil.copyfile(JAX_SMALL / "vm.trace.json.gz", window / "vm.trace.json.gz")
    write_loss_run(logdir, "live")
    catalog = Catalog(str(logdir))
    assert scalar_entries(catalog) == []
    assert len(catalog.event_files("live/20261201T041530.123Z-000001")) == 1


def test_a_folder_named_as_a_trace_run_stays_the_trace_runs_and_is_noted(logdir: Path) -> None:
    add_jax_run(logdir)  # run `jax/<ts>` from jax/plugins/profile/<ts>/
    write_loss_run(logdir, JAX_RUN)  # a folder jax/<ts> with event files: the same name
    catalog = Catalog(str(logdir))
    assert scalar_entries(catalog) == []
    assert any(s["path"] == JAX_RUN and "a run with traces" in s["reason"] for s in catalog.discovery()["skipped"])


def test_event_files_linked_from_outside_are_left_out_when_links_are_not_followed(logdir: Path, tmp_path: Path) -> None:
    outside = write_loss_run(tmp_path / "elsewhere", "secret")
    (logdir / "runs" / "c").mkdir(parents=True)
    [src] = outside.glob("*tfevents*")
    os.symlink(src, logdir / "runs" / "c" / src.name)
    assert scalar_entries(Catalog(str(logdir), follow_symlinks=False)) == []
    assert [r["run"] for r in scalar_entries(Catalog(str(logdir), follow_symlinks=True))] == ["runs/c"]


def test_new_scalar_runs_appear_on_the_next_walk(logdir: Path) -> None:
    catalog = Catalog(str(logdir), max_age_s=0)
    assert catalog.runs() == []
    write_loss_run(logdir, "runs/a")
    assert [r["run"] for r in catalog.runs()] == ["runs/a"]
    shutil.rmtree(logdir / "runs" / "a")
    assert catalog.runs() == []


def test_scalar_runs_come_from_the_one_walk(logdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each folder is listed once per walk, traces and event files together (no second walk)."""
    add_torch_run(logdir)
    for run in ("runs/a", "runs/b"):
        write_loss_run(logdir, run)
    listed: list[str] = []
    real = os.scandir

    def counting(path: str = ".") -> object:
        listed.append(os.fspath(path))
        return real(path)

    monkeypatch.setattr(discovery.os, "scandir", counting)
    catalog = Catalog(str(logdir))
    assert len(catalog.runs()) == 3
    assert sorted(listed) == sorted({*listed}) and len(listed) == 5  # logdir, torch, runs, runs/a, runs/b
