"""Catalog: which files of a logdir are traces, what their runs and hosts are called, and what
is left out (hidden, symlinked out, not a trace, too deep) — on logdirs of real traces."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from plugin_support import (
    CORPUS,
    JAX_HOST,
    JAX_JSON_HOST,
    JAX_RUN,
    JAX_SMALL,
    TORCH_FILE,
    TORCH_HOST,
    TORCH_RUN,
    add_jax_run,
    add_torch_run,
    require_corpus,
)

from tb_reduce_plugin import discovery
from tb_reduce_plugin.discovery import Catalog

# A small, valid Chrome trace (Object format), as `torch.profiler.export_chrome_trace` or a
# hand-written tool would write it.
CHROME_DOC = {
    "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        {"ph": "X", "name": "step", "pid": 1, "tid": 1, "ts": 0.0, "dur": 100.0},
        {"ph": "X", "name": "matmul", "pid": 1, "tid": 1, "ts": 10.0, "dur": 50.0},
    ],
    "displayTimeUnit": "ms",
}


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    require_corpus()
    d = tmp_path / "logdir"
    d.mkdir()
    return d


def hosts(catalog: Catalog) -> dict[tuple[str, str], str]:
    """(run, host) -> the file's name, for every trace the catalog found."""
    return {key: os.path.basename(f.path) for key, f in catalog.files().items()}


def test_a_jax_profile_is_one_run_named_by_the_path_around_plugins_profile(logdir: Path) -> None:
    add_jax_run(logdir)
    found = Catalog(str(logdir)).files()
    assert set(found) == {(JAX_RUN, JAX_HOST), (JAX_RUN, JAX_JSON_HOST)}
    xs = found[(JAX_RUN, JAX_HOST)]
    assert xs.format == "xspace" and xs.bytes == (JAX_SMALL / "vm.xplane.pb").stat().st_size
    assert found[(JAX_RUN, JAX_JSON_HOST)].format == "chrome-json"


def test_a_profile_at_the_logdir_root_is_named_by_its_timestamp_alone(logdir: Path) -> None:
    run = logdir / "plugins" / "profile" / "2024_05_01_10_00_00"
    run.mkdir(parents=True)
    shutil.copyfile(JAX_SMALL / "vm.xplane.pb", run / "vm.xplane.pb")
    assert set(Catalog(str(logdir)).files()) == {("2024_05_01_10_00_00", "vm")}


def test_the_xspace_keeps_the_host_name_and_the_json_beside_it_gets_its_file_name(logdir: Path) -> None:
    add_jax_run(logdir)
    assert hosts(Catalog(str(logdir))) == {(JAX_RUN, "vm"): "vm.xplane.pb", (JAX_RUN, "vm.trace.json.gz"): "vm.trace.json.gz"}


def test_a_pytorch_trace_handler_run_holds_its_files_directly(logdir: Path) -> None:
    path = add_torch_run(logdir)
    (logdir / TORCH_RUN / "worker1.17.pt.trace.json.gz").write_bytes(path.read_bytes())
    catalog = Catalog(str(logdir))
    assert hosts(catalog) == {(TORCH_RUN, TORCH_HOST): TORCH_FILE, (TORCH_RUN, "worker1.17"): "worker1.17.pt.trace.json.gz"}
    assert catalog.runs() == [{"run": TORCH_RUN, "hosts": [
        {"host": TORCH_HOST, "format": "chrome-json", "bytes": path.stat().st_size},
        {"host": "worker1.17", "format": "chrome-json", "bytes": path.stat().st_size},
    ]}]


def test_a_trace_file_in_the_logdir_itself_belongs_to_run_dot(logdir: Path) -> None:
    (logdir / "trace.json").write_text(json.dumps(CHROME_DOC))
    assert hosts(Catalog(str(logdir))) == {(".", "trace"): "trace.json"}


def test_plain_chrome_json_files_are_found_by_content(logdir: Path) -> None:
    d = logdir / "export"
    d.mkdir()
    (d / "object.json").write_text(json.dumps(CHROME_DOC))
    (d / "array.json").write_text(json.dumps(CHROME_DOC["traceEvents"]))
    (d / "live.json").write_text(json.dumps(CHROME_DOC["traceEvents"])[:-1] + ",\n")  # being written: no `]`
    (d / "zipped.json.gz").write_bytes(gzip.compress(json.dumps(CHROME_DOC).encode()))
    found = Catalog(str(logdir)).files()
    assert set(found) == {("export", h) for h in ("object", "array", "live", "zipped")}
    assert {f.format for f in found.values()} == {"chrome-json"}


def test_json_files_that_are_not_traces_are_ignored(logdir: Path) -> None:
    d = logdir / "run"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"lr": 0.001, "batch_size": 64, "layers": [128, 64]}))
    (d / "metrics.json").write_text(json.dumps([0.9, 0.7, 0.5]))
    (d / "empty.json").write_text("")
    (d / "notes.json.gz").write_bytes(gzip.compress(b"plain text, not JSON"))
    (d / "broken.json.gz").write_bytes(b"\x1f\x8b\x08\x00 not really gzip")
    (d / "README.md").write_text("# not a trace")
    (d / "events.out.tfevents.1700000000.vm").write_bytes(b"\x00" * 16)
    # A real rocprofiler-sdk output: JSON, gzipped, and not a Chrome trace.
    shutil.copyfile(CORPUS / "public" / "TraceLens" / "tests__rocprof__908_results.json.gz", d / "rocprof.json.gz")
    (d / "trace.json").write_text(json.dumps(CHROME_DOC))  # the one trace among them
    assert set(Catalog(str(logdir)).files()) == {("run", "trace")}


def test_a_kineto_json_whose_trace_events_follow_a_long_header_is_found(logdir: Path) -> None:
    """Real Kineto traces put `deviceProperties` (and benchmarks their `metadata`) before
    `traceEvents`: 5-30 KB in, past the first few KB a quick look reads."""
    d = logdir / "h100"
    d.mkdir()
    src = CORPUS / "public" / "TraceLens" / "tests__traces__h100__facebook_timesformer-base-finetuned-k400__1016002.json.gz"
    head = gzip.decompress(src.read_bytes())
    assert head.find(b'"traceEvents"') > 3 * discovery.SNIFF_BYTES  # what makes this file a test
    shutil.copyfile(src, d / "timesformer.json.gz")
    (d / "plain.json").write_bytes(head)  # the same, not compressed
    found = Catalog(str(logdir)).files()
    assert set(found) == {("h100", "timesformer"), ("h100", "plain")}


def test_a_json_file_is_sniffed_once_per_version_not_on_every_walk(logdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (logdir / "trace.json").write_text(json.dumps(CHROME_DOC))
    (logdir / "config.json").write_text(json.dumps({"lr": 0.1}))
    sniffed: list[str] = []
    real = discovery._looks_like_chrome_trace
    monkeypatch.setattr(discovery, "_looks_like_chrome_trace", lambda p: sniffed.append(os.path.basename(p)) or real(p))
    catalog = Catalog(str(logdir), max_age_s=0)
    for _ in range(3):
        assert set(catalog.files()) == {(".", "trace")}
    assert sorted(sniffed) == ["config.json", "trace.json"]
    (logdir / "config.json").write_text(json.dumps(CHROME_DOC))  # rewritten: now a trace, and a new size
    assert set(catalog.files()) == {(".", "trace"), (".", "config")}
    assert sorted(sniffed) == ["config.json", "config.json", "trace.json"]


def test_hidden_directories_and_hidden_files_are_ignored(logdir: Path) -> None:
    add_jax_run(logdir / ".cache")
    add_torch_run(logdir, ".old")
    (logdir / "run").mkdir()
    shutil.copyfile(JAX_SMALL / "vm.xplane.pb", logdir / "run" / ".vm.xplane.pb")
    shutil.copyfile(JAX_SMALL / "vm.xplane.pb", logdir / "run" / "vm.xplane.pb")
    assert set(Catalog(str(logdir)).files()) == {("run", "vm")}


def test_a_symlink_out_of_the_logdir_is_not_listed(logdir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.pt.trace.json"
    secret.write_text(json.dumps(CHROME_DOC))
    add_jax_run(outside / "profiles")
    run = logdir / "run"
    run.mkdir()
    (run / "leak.pt.trace.json").symlink_to(secret)  # a file link out
    (logdir / "linked").symlink_to(outside / "profiles", target_is_directory=True)  # a directory link out
    (run / "up.json").symlink_to(secret)
    assert Catalog(str(logdir)).files() == {}


def test_a_symlink_to_a_trace_inside_the_logdir_is_listed(logdir: Path) -> None:
    path = add_torch_run(logdir)
    (logdir / "alias").mkdir()
    (logdir / "alias" / "w.pt.trace.json.gz").symlink_to(path)
    found = Catalog(str(logdir)).files()
    assert set(found) == {(TORCH_RUN, TORCH_HOST), ("alias", "w")}
    assert found[("alias", "w")].bytes == path.stat().st_size


def test_a_fifo_named_like_a_trace_is_ignored_and_never_opened(logdir: Path) -> None:
    """Opening a FIFO for reading blocks until a writer comes: the walk must not hang on one."""
    os.mkfifo(logdir / "pipe.pt.trace.json")
    os.mkfifo(logdir / "pipe.json")
    add_torch_run(logdir)
    assert set(Catalog(str(logdir)).files()) == {(TORCH_RUN, TORCH_HOST)}


def test_new_files_appear_and_deleted_ones_go_after_a_refresh(logdir: Path) -> None:
    catalog = Catalog(str(logdir), max_age_s=0)
    assert catalog.files() == {} and catalog.runs() == []
    add_jax_run(logdir)
    assert set(catalog.files()) == {(JAX_RUN, JAX_HOST), (JAX_RUN, JAX_JSON_HOST)}
    torch = add_torch_run(logdir)
    assert (TORCH_RUN, TORCH_HOST) in catalog.files()
    torch.unlink()
    assert (TORCH_RUN, TORCH_HOST) not in catalog.files()


def test_the_walk_is_cached_until_it_is_older_than_max_age(logdir: Path) -> None:
    catalog = Catalog(str(logdir), max_age_s=3600)
    assert catalog.files() == {}
    add_torch_run(logdir)
    assert catalog.files() == {}  # still the walk of a moment ago
    catalog.max_age_s = 0
    assert set(catalog.files()) == {(TORCH_RUN, TORCH_HOST)}


def test_a_grown_file_is_seen_with_its_new_size_and_mtime(logdir: Path) -> None:
    (logdir / "live.json").write_text(json.dumps(CHROME_DOC["traceEvents"][:2])[:-1] + ",")
    catalog = Catalog(str(logdir), max_age_s=0)
    before = catalog.files()[(".", "live")]
    with open(logdir / "live.json", "a") as f:
        f.write(json.dumps(CHROME_DOC["traceEvents"][2]) + ",")
    os.utime(logdir / "live.json", ns=(before.mtime_ns + 10**9, before.mtime_ns + 10**9))
    after = catalog.files()[(".", "live")]
    assert after.bytes > before.bytes and after.mtime_ns > before.mtime_ns


def test_files_deeper_than_max_depth_are_not_found(logdir: Path) -> None:
    shallow = logdir.joinpath(*[f"d{i}" for i in range(discovery.MAX_DEPTH)])
    deep = logdir.joinpath(*[f"e{i}" for i in range(discovery.MAX_DEPTH + 1)])
    for d in (shallow, deep):
        d.mkdir(parents=True)
        (d / "t.json").write_text(json.dumps(CHROME_DOC))
    found = Catalog(str(logdir)).files()
    assert set(found) == {("/".join(f"d{i}" for i in range(discovery.MAX_DEPTH)), "t")}


def test_a_walk_stops_after_max_entries_and_says_so(logdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(30):
        (logdir / f"t{i:02d}.json").write_text(json.dumps(CHROME_DOC))
    catalog = Catalog(str(logdir), max_age_s=0)
    assert len(catalog.files()) == 30 and not catalog.truncated
    monkeypatch.setattr(discovery, "MAX_ENTRIES", 10)
    assert len(catalog.files()) == 10 and catalog.truncated


def test_a_logdir_that_does_not_exist_or_is_empty_has_no_runs(tmp_path: Path) -> None:
    assert Catalog(str(tmp_path / "missing")).runs() == []
    assert Catalog("").runs() == []
    assert Catalog(str(tmp_path)).runs() == []


def test_runs_are_sorted_and_find_names_a_file_inside_the_logdir(logdir: Path) -> None:
    add_torch_run(logdir)
    add_jax_run(logdir)
    catalog = Catalog(str(logdir))
    assert [r["run"] for r in catalog.runs()] == [JAX_RUN, TORCH_RUN]
    assert [h["host"] for h in catalog.runs()[0]["hosts"]] == [JAX_HOST, JAX_JSON_HOST]
    tf = catalog.find(TORCH_RUN, TORCH_HOST)
    assert tf is not None and Path(tf.path).resolve().is_relative_to(logdir.resolve())
    assert catalog.find(TORCH_RUN, "nope") is None and catalog.find("../" + TORCH_RUN, TORCH_HOST) is None
