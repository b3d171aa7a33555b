"""Anomaly runs are bounded in number: the oldest beyond `keep` are pruned, one line each."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.live import anomalies as anomalies_mod
from tb_reduce_plugin.live.anomalies import anomaly_runs, prune_anomalies
from tb_reduce_plugin.live.windows import WindowWriter


def _window(i: int) -> str:
    return f"20261201T0415{i:02d}.000Z-{i:06d}"


def _anomaly(live: Path, i: int, kind: str = "step") -> str:
    """An anomaly run as the sidecar writes one: a raw window and anomaly.json."""
    name = f"{_window(i)}-anomaly-20261201T0415{i:02d}.500Z-{kind}"
    (live / name).mkdir(parents=True)
    (live / name / "0000000001-host.pt.trace.json").write_bytes(b"{}" * 100)
    (live / name / "anomaly.json").write_text('{"trigger": "step:2x"}')
    return name


def test_the_oldest_runs_beyond_keep_are_pruned_by_name_with_one_line_each(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    live = tmp_path / "live"
    runs = [_anomaly(live, i) for i in (3, 1, 4, 0, 2)]  # made in any order: names decide
    for i in range(2):
        (live / _window(i)).mkdir()  # windows are WindowWriter's to prune, never these
    (live / "notes").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the live folder's")
    (live / f"{_window(9)}-anomaly-link").symlink_to(outside, target_is_directory=True)
    (live / f"{_window(8)}-anomaly-file").write_text("a file, not a run")
    with caplog.at_level(logging.INFO, logger=anomalies_mod.__name__):
        gone = prune_anomalies(str(live), 2)
    assert gone == sorted(runs)[:3]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 and all(f"pruned the anomaly run {n}" in m for n, m in zip(gone, lines))
    assert sorted(os.listdir(live)) == sorted(sorted(runs)[3:] + [_window(0), _window(1), "notes",
                                                                  f"{_window(9)}-anomaly-link",
                                                                  f"{_window(8)}-anomaly-file"])
    assert (outside / "keep.txt").exists()  # a symlink named like a run is never followed
    assert anomaly_runs(str(live)) == sorted(runs)[3:]
    assert prune_anomalies(str(live), 2) == []  # already within the cap


def test_keep_zero_prunes_every_run_and_a_missing_folder_prunes_nothing(tmp_path: Path) -> None:
    live = tmp_path / "live"
    assert prune_anomalies(str(live), 5) == []
    names = [_anomaly(live, i) for i in range(3)]
    assert prune_anomalies(str(live), 10) == []
    assert prune_anomalies(str(live), 0) == names and os.listdir(live) == []


def test_a_run_that_cannot_be_renamed_is_left_with_a_warning_and_the_rest_are_pruned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    live = tmp_path / "live"
    names = [_anomaly(live, i) for i in range(4)]
    rename = os.rename

    def refuse_first(src: Any, dst: Any) -> None:
        if os.path.basename(os.fspath(src)) == names[0]:
            raise PermissionError(13, "Permission denied")
        rename(src, dst)

    monkeypatch.setattr(anomalies_mod.os, "rename", refuse_first)
    with caplog.at_level(logging.INFO, logger=anomalies_mod.__name__):
        assert prune_anomalies(str(live), 1) == names[1:3]
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning == [f"tb-reduce live: cannot prune the anomaly run {names[0]}: Permission denied"]
    assert sorted(os.listdir(live)) == [names[0], names[3]]
    monkeypatch.undo()
    assert prune_anomalies(str(live), 1) == [names[0]]  # the next prune gets it


@pytest.mark.parametrize("keep", [-1, 1.5, True, "3", None])
def test_a_keep_that_is_not_a_whole_number_of_runs_is_refused(tmp_path: Path, keep: Any) -> None:
    with pytest.raises(TraceError, match="keep must be a whole number of anomaly runs"):
        prune_anomalies(str(tmp_path), keep)


def test_a_run_a_killed_process_left_half_pruned_is_removed_by_the_next_window_writer(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    live = tmp_path / "logdir" / "live"
    leftover = live / f"{anomalies_mod.PRUNED_PREFIX}{int(dead.stdout)}-anomaly-0123456789ab"
    leftover.mkdir(parents=True)
    (leftover / "anomaly.json").write_text("{}")
    WindowWriter(tmp_path / "logdir")
    assert not leftover.exists()
