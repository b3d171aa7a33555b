"""Runs of TensorBoard event files only (no trace), through a real `tensorboard` process:
listed by `runs` under the names TensorBoard gives them, their `tags` and `scalars`
answered (the points SummaryWriter wrote, the points TensorBoard's own scalars route
serves), the trace routes saying they have scalars only, and hostile names and damaged
event files answered with clear errors, never a 500.

The logdir is written here with `torch.utils.tensorboard.SummaryWriter`: `runs/a` and
`runs/b` each log `Loss/train` over 50 steps (different values; the second seed's case
D), beside a real PyTorch trace run that logs `Loss/train` too (case A), a run whose event
file was cut short, one with a damaged record, one of garbage, and folders that must stay
out (hidden, the sidecar's ring, TensorBoard's `.profile-empty` marker alone).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from plugin_support import TORCH_HOST, TORCH_RUN, add_torch_run, require_corpus
from scalar_runs_support import STEPS, TAG, event_file, loss, write_loss_run
from tensorboard_process import start_tensorboard

ROUTE = "data/plugin/tb_reduce/"
SCALAR_RUNS = ["runs/a", "runs/b", "runs/corrupt", "runs/garbage", "runs/truncated"]


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_corpus()
    root = tmp_path_factory.mktemp("scalar-runs") / "logdir"
    write_loss_run(root, "runs/a")
    write_loss_run(root, "runs/b")
    add_torch_run(root)  # a trace run with scalars of its own (case A): listed once, as a trace run
    write_loss_run(root, TORCH_RUN)
    truncated = event_file(write_loss_run(root, "runs/truncated"))
    data = truncated.read_bytes()
    truncated.write_bytes(data[: len(data) * 2 // 3])  # a writer killed mid-record
    corrupt = event_file(write_loss_run(root, "runs/corrupt"))
    data = bytearray(corrupt.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 8] = b"\xff" * 8  # one damaged record; the reader resyncs after it
    corrupt.write_bytes(bytes(data))
    (root / "runs" / "garbage").mkdir()
    (root / "runs" / "garbage" / "events.out.tfevents.1.garbage").write_bytes(random.Random(7).randbytes(64 * 1024))
    for hidden in (".hidden", ".tb-reduce-ring"):  # dot folders: the walk never enters them
        write_loss_run(root, hidden)
    (root / "profiled").mkdir()  # TensorBoard's profile marker alone: no scalars there
    (root / "profiled" / "events.out.tfevents.1700000000.vm.profile-empty").write_bytes(b"")
    return root


@pytest.fixture(scope="module")
def tb(logdir: Path, tmp_path_factory: pytest.TempPathFactory):
    server = start_tensorboard(logdir, tmp_path_factory.mktemp("cache"), "--load_fast=false")
    try:
        yield server
    finally:
        server.stop()


def ask(tb, route: str, **params: str) -> tuple[int, object]:
    status, _, data = tb.get(ROUTE + route, **params)
    assert status != 500, (route, params, data[:300], tb.tail())
    return status, json.loads(data)


def test_runs_lists_the_event_file_runs_after_the_trace_runs_marked_scalars_only(tb) -> None:
    status, runs = ask(tb, "runs")
    assert status == 200
    assert [r["run"] for r in runs] == [TORCH_RUN, *SCALAR_RUNS]
    trace, *scalars = runs
    assert "scalars_only" not in trace and [h["host"] for h in trace["hosts"]] == [TORCH_HOST]
    assert scalars == [{"run": run, "hosts": [], "scalars_only": True} for run in SCALAR_RUNS]
    again = ask(tb, "runs")[1]
    assert again == runs  # the order is stable


def test_scalar_only_runs_are_named_as_tensorboard_names_them(tb) -> None:
    theirs = set(tb.json("data/runs"))
    assert set(SCALAR_RUNS) <= theirs, theirs
    assert ".hidden" not in {r["run"] for r in ask(tb, "runs")[1]}


def test_the_tab_is_active_for_event_files_alone(tmp_path: Path) -> None:
    """A logdir of SummaryWriter runs and no trace still gets the tab (its waveforms)."""
    write_loss_run(tmp_path / "logdir", "runs/a")
    server = start_tensorboard(tmp_path / "logdir", tmp_path / "cache", "--load_fast=false")
    try:
        listing = server.json("data/plugins_listing")
        assert listing["tb_reduce"]["enabled"] is True, listing["tb_reduce"]
    finally:
        server.stop()


@pytest.mark.parametrize("run", ["runs/a", "runs/b"])
def test_tags_and_scalars_of_a_scalar_only_run_are_what_summarywriter_wrote(tb, run: str) -> None:
    status, tags = ask(tb, "tags", run=run)
    assert status == 200, tags
    assert tags["hosts"] == [] and tags["scalars_only"] is True and tags["gaps"] == []
    [listed] = tags["scalars"]
    assert listed["tag"] == TAG and listed["points"] == STEPS
    status, doc = ask(tb, "scalars", run=run, tag=TAG)
    assert status == 200, doc
    assert [p[0] for p in doc["points"]] == list(range(STEPS))
    assert [p[2] for p in doc["points"]] == pytest.approx([loss(run, s) for s in range(STEPS)], rel=1e-6)
    by_id = ask(tb, "scalars", run=run, tag_id=listed["id"], width="256")[1]
    assert by_id["summary"]["points"] == STEPS
    # the same points as TensorBoard's own Scalars dashboard serves for that run
    theirs = tb.json("data/plugin/scalars/scalars", run=run, tag=TAG)
    assert [step for _, step, _ in theirs] == [p[0] for p in doc["points"]]
    assert [value for _, _, value in theirs] == pytest.approx([p[2] for p in doc["points"]], rel=1e-6)


def test_the_two_runs_differ_so_an_overlay_shows_two_lines(tb) -> None:
    a = [p[2] for p in ask(tb, "scalars", run="runs/a", tag=TAG)[1]["points"]]
    b = [p[2] for p in ask(tb, "scalars", run="runs/b", tag=TAG)[1]["points"]]
    assert len(a) == len(b) == STEPS and all(x != y for x, y in zip(a, b))


def test_a_trace_run_keeps_its_scalars_and_its_hosts(tb) -> None:
    status, tags = ask(tb, "tags", run=TORCH_RUN)
    assert status == 200 and "scalars_only" not in tags
    assert [h["host"] for h in tags["hosts"]] == [TORCH_HOST]
    assert [(s["tag"], s["points"]) for s in tags["scalars"]] == [(TAG, STEPS)]


@pytest.mark.parametrize("route, params", [
    ("trace", {"host": "x", "level": "1"}),
    ("stats", {"host": "x", "level": "1"}),
    ("waveforms", {"host": "x"}),
    ("event", {"host": "x", "i": "0"}),
    ("search", {"host": "x", "q": "conv"}),
])
def test_trace_routes_on_a_scalar_only_run_say_it_has_scalars_only(tb, route: str, params: dict) -> None:
    status, doc = ask(tb, route, run="runs/a", **params)
    assert status == 404, doc
    assert "scalars only" in doc["error"] and "waveform panel" in doc["error"], doc


@pytest.mark.parametrize("route", ["trace", "stats", "waveforms"])
def test_a_merged_view_of_a_scalar_only_run_says_it_has_scalars_only(tb, route: str) -> None:
    status, doc = ask(tb, route, run="runs/a", hosts="*", level="1")
    assert status == 404 and "scalars only" in doc["error"], doc


@pytest.mark.parametrize("run", ["../runs/a", "runs/../runs/a", "runs/a/..", "/etc", "..", "runs//a", "runs/a/",
                                 ".hidden", ".tb-reduce-ring", "profiled", "runs"])
def test_a_run_that_is_not_listed_is_404_whatever_path_it_spells(tb, run: str) -> None:
    for route, params in (("tags", {}), ("scalars", {"tag": TAG})):
        status, doc = ask(tb, route, run=run, **params)
        assert status == 404, (route, run, doc)
        assert repr(run) in doc["error"], doc


def test_a_truncated_event_file_gives_the_whole_records_and_says_what_is_pending(tb) -> None:
    status, tags = ask(tb, "tags", run="runs/truncated")
    assert status == 200, tags
    [listed] = tags["scalars"]
    assert 0 < listed["points"] < STEPS
    assert tags["pending_bytes"] > 0  # the cut record: not a point, not an error (it may yet be written)
    doc = ask(tb, "scalars", run="runs/truncated", tag=TAG)[1]
    n = listed["points"]
    assert [p[2] for p in doc["points"]] == pytest.approx([loss("runs/truncated", s) for s in range(n)], rel=1e-6)


def test_a_damaged_record_is_skipped_and_reported_and_the_rest_is_read(tb) -> None:
    status, tags = ask(tb, "tags", run="runs/corrupt")
    assert status == 200, tags
    assert len(tags["gaps"]) == 1 and tags["gaps"][0]["skipped"] > 0, tags["gaps"]
    [listed] = tags["scalars"]
    assert STEPS - 3 <= listed["points"] < STEPS


def test_an_event_file_of_garbage_is_one_gap_and_no_tags(tb) -> None:
    status, tags = ask(tb, "tags", run="runs/garbage")
    assert status == 200, tags
    assert tags["scalars"] == [] and tags["gaps"] and tags["gaps"][0]["skipped"] > 0
    status, doc = ask(tb, "scalars", run="runs/garbage", tag=TAG)
    assert status == 404 and "no scalars" in doc["error"], doc
