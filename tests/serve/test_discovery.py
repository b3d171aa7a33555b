"""Catalog: which files of a logdir are traces, what their runs and hosts are called, and what
is left out (hidden, symlinked out, not a trace, too deep) — on logdirs of real traces."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import threading
import unicodedata
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
    body_json,
    client,
    get,
    make_plugin,
    require_corpus,
    torch_trace_gz,
)
from plugin_support import flags as plugin_flags

from tb_reduce_plugin.formats import logdir as logdir_module
from tb_reduce_plugin.formats.sources import FileIdentity
from tb_reduce_plugin.serve import discovery, plugin
from tb_reduce_plugin.serve.discovery import Catalog

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
    assert head.find(b'"traceEvents"') > 3 * logdir_module.SNIFF_BYTES  # what makes this file a test
    shutil.copyfile(src, d / "timesformer.json.gz")
    (d / "plain.json").write_bytes(head)  # the same, not compressed
    found = Catalog(str(logdir)).files()
    assert set(found) == {("h100", "timesformer"), ("h100", "plain")}


def test_a_json_file_is_sniffed_once_per_version_not_on_every_walk(logdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (logdir / "trace.json").write_text(json.dumps(CHROME_DOC))
    (logdir / "config.json").write_text(json.dumps({"lr": 0.1}))
    sniffed: list[str] = []
    real = discovery.looks_like_chrome_trace
    monkeypatch.setattr(discovery, "looks_like_chrome_trace", lambda p, **k: sniffed.append(os.path.basename(p)) or real(p, **k))
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
    catalog = Catalog(str(logdir), follow_symlinks=False)
    assert catalog.files() == {}
    skipped = {s["path"]: s["reason"] for s in catalog.discovery()["skipped"]}
    assert skipped == {
        "linked": "a link to a folder, not followed (--tb_reduce_follow_symlinks=false)",
        "run/leak.pt.trace.json": "a link out of the logdir, not followed (--tb_reduce_follow_symlinks=false)",
        "run/up.json": "a link out of the logdir, not followed (--tb_reduce_follow_symlinks=false)",
    }


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
    shallow = logdir.joinpath(*[f"d{i}" for i in range(logdir_module.MAX_DEPTH)])
    deep = logdir.joinpath(*[f"e{i}" for i in range(logdir_module.MAX_DEPTH + 1)])
    for d in (shallow, deep):
        d.mkdir(parents=True)
        (d / "t.json").write_text(json.dumps(CHROME_DOC))
    found = Catalog(str(logdir)).files()
    assert set(found) == {("/".join(f"d{i}" for i in range(logdir_module.MAX_DEPTH)), "t")}


def test_a_walk_stops_after_max_entries_and_says_so(logdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(30):
        (logdir / f"t{i:02d}.json").write_text(json.dumps(CHROME_DOC))
    catalog = Catalog(str(logdir), max_age_s=0)
    assert len(catalog.files()) == 30 and not catalog.truncated
    monkeypatch.setattr(logdir_module, "MAX_ENTRIES", 10)
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


def test_each_listed_file_carries_the_identity_the_walk_saw(logdir: Path) -> None:
    path = add_torch_run(logdir)
    (logdir / "alias").mkdir()
    (logdir / "alias" / "w.pt.trace.json.gz").symlink_to(path)
    found = Catalog(str(logdir)).files()
    for key in ((TORCH_RUN, TORCH_HOST), ("alias", "w")):
        assert found[key].identity() == FileIdentity.from_stat(path.stat())  # a symlink names its target


def test_invalidate_makes_the_next_call_walk_again_whatever_the_cache_age(logdir: Path) -> None:
    catalog = Catalog(str(logdir), max_age_s=3600)
    assert catalog.files() == {}
    add_torch_run(logdir)
    assert catalog.files() == {}
    catalog.invalidate()
    assert set(catalog.files()) == {(TORCH_RUN, TORCH_HOST)}


def test_sniffing_a_fifo_or_a_swapped_file_answers_no_without_blocking(logdir: Path) -> None:
    """The walk `stat`s, then sniffs `.json` files: what is sniffed must be what was
    `stat`ed, and a FIFO swapped in between must not block the walk."""
    fifo = logdir / "pipe.json"
    os.mkfifo(fifo)
    trace = logdir / "trace.json"
    trace.write_text(json.dumps(CHROME_DOC))
    other = logdir / "other.json"
    other.write_text(json.dumps(CHROME_DOC))
    answers: list[bool] = []

    def sniff() -> None:
        answers.append(discovery.looks_like_chrome_trace(str(fifo)))
        answers.append(discovery.looks_like_chrome_trace(str(fifo), expect=FileIdentity.from_stat(fifo.stat())))
        answers.append(discovery.looks_like_chrome_trace(str(trace), expect=FileIdentity.from_stat(other.stat())))
        answers.append(discovery.looks_like_chrome_trace(str(trace), expect=FileIdentity.from_stat(trace.stat())))

    t = threading.Thread(target=sniff, daemon=True)
    t.start()
    t.join(30)  # a hang detector, not a speed limit
    if t.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # release it
        pytest.fail("sniffing a FIFO blocked")
    assert answers == [False, False, False, True]


# Names that the OS allows and a URL parameter cannot carry as they are.
ODD_NAMES = {
    b"line\nbreak": "line\\x0abreak",
    b"tab\tbed": "tab\\x09bed",
    b"carriage\rreturn": "carriage\\x0dreturn",
    b"del\x7fete": "del\\x7fete",
    b"latin1-\xff\xfe": "latin1-\\xff\\xfe",  # not UTF-8: Python gives lone surrogates
    b"c1-\xc2\x85": "c1-\\x85",  # U+0085, a C1 control (a line break to `str.splitlines`)
    b"caf\xc3\xa9": "caf\u00e9",  # valid UTF-8 stays as it is
    b"nb\xc2\xa0sp": "nb\u00a0sp",  # unusual spaces too: a browser sends them back as they are
}


def make_file(directory: bytes, name: bytes, data: bytes) -> bytes:
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def assert_requestable(name: str) -> None:
    """What the plugin takes as a parameter and a browser can URL-encode and show."""
    name.encode("utf-8")  # strict: no lone surrogates
    assert len(name) <= plugin.MAX_PARAM_CHARS
    assert not any(unicodedata.category(c) in ("Cc", "Cs") for c in name)  # C0, DEL, C1, surrogates
    assert json.loads(json.dumps(name, ensure_ascii=False)) == name


def test_hosts_and_runs_with_control_characters_or_undecodable_bytes_are_listed_so_they_can_be_asked_for(
    logdir: Path,
) -> None:
    doc = json.dumps(CHROME_DOC).encode()
    root = os.fsencode(logdir)
    plain = os.path.join(root, b"plain")
    os.mkdir(plain)
    made: dict[bytes, tuple[str, str]] = {}  # file -> the (run, host) it must be listed as
    for raw, shown in ODD_NAMES.items():
        made[make_file(plain, raw + b".pt.trace.json", doc)] = ("plain", shown)
        made[make_file(plain, b"j-" + raw + b".json", doc)] = ("plain", "j-" + shown)  # sniffed by content
        run_dir = os.path.join(root, b"run-" + raw)
        os.mkdir(run_dir)
        made[make_file(run_dir, b"host-" + raw + b".pt.trace.json", doc)] = ("run-" + shown, "host-" + shown)
    catalog = Catalog(str(logdir))
    listed = catalog.runs()
    for run in listed:
        assert_requestable(run["run"])
        for h in run["hosts"]:
            assert_requestable(h["host"])
    assert {(r["run"], h["host"]) for r in listed for h in r["hosts"]} == set(made.values())
    for path, (run, host) in made.items():
        tf = catalog.find(run, host)
        assert tf is not None and os.fsencode(tf.path) == path


def test_a_shown_name_that_clashes_with_a_real_one_gets_a_suffix_and_the_real_one_keeps_its_name(
    logdir: Path, tmp_path: Path
) -> None:
    doc = json.dumps(CHROME_DOC).encode()

    def build(root: Path, order: int) -> dict[tuple[str, str], bytes]:
        root.mkdir(exist_ok=True)
        base = os.fsencode(root)
        files = [
            (b"r", b"h\n1.pt.trace.json"), (b"r", b"h\\x0a1.pt.trace.json"), (b"r", b"h\\x0a1~2.pt.trace.json"),
            (b"a\tb", b"x.pt.trace.json"), (b"a\\x09b", b"x.pt.trace.json"),
        ]
        for run, name in files[::order]:
            os.makedirs(os.path.join(base, run), exist_ok=True)
            make_file(os.path.join(base, run), name, doc)
        return {k: os.fsencode(os.path.relpath(f.path, root)) for k, f in Catalog(str(root)).files().items()}

    found = build(logdir, 1)
    assert found == {
        ("r", "h\\x0a1"): b"r/h\\x0a1.pt.trace.json",  # the name that needed no escaping keeps it
        ("r", "h\\x0a1~2"): b"r/h\\x0a1~2.pt.trace.json",
        ("r", "h\\x0a1~3"): b"r/h\n1.pt.trace.json",  # the escaped one takes the first free suffix
        ("a\\x09b", "x"): b"a\\x09b/x.pt.trace.json",
        ("a\\x09b~2", "x"): b"a\tb/x.pt.trace.json",
    }
    assert build(tmp_path / "again", -1) == found  # the same files, made in another order: the same names


def test_a_name_too_long_to_ask_for_once_shown_is_not_listed(logdir: Path) -> None:
    deep = os.path.join(os.fsencode(logdir), *[b"\x01" * 255] * 5)  # 5 x 255 bytes, each shown as 4 characters
    os.makedirs(deep)
    make_file(deep, b"t.pt.trace.json", json.dumps(CHROME_DOC).encode())
    (logdir / "ok").mkdir()
    (logdir / "ok" / "t.pt.trace.json").write_text(json.dumps(CHROME_DOC))
    assert discovery.MAX_NAME_CHARS <= plugin.MAX_PARAM_CHARS
    assert set(Catalog(str(logdir)).files()) == {("ok", "t")}


def test_every_host_the_runs_route_lists_can_be_opened_through_the_plugin(logdir: Path, tmp_path: Path) -> None:
    doc = json.dumps(CHROME_DOC).encode()
    root = os.fsencode(logdir)
    for raw in ODD_NAMES:
        run_dir = os.path.join(root, b"run-" + raw)
        os.mkdir(run_dir)
        make_file(run_dir, raw + b".pt.trace.json", doc)
    c = client(make_plugin(logdir, tmp_path / "cache"))
    runs = body_json(get(c, "runs"))
    pairs = [(r["run"], h["host"]) for r in runs for h in r["hosts"]]
    assert len(pairs) == len(ODD_NAMES)
    for run, host in pairs:
        resp = get(c, "stats", run=run, host=host, level=0)
        assert resp.status_code == 200, (run, host, resp.get_data()[:200])
        assert body_json(resp)["input"]["events"] == len(CHROME_DOC["traceEvents"])


# ---- symbolic links, followed as TensorBoard follows them (the default) -------------------


def test_a_run_folder_and_a_trace_file_linked_in_from_elsewhere_are_listed_under_the_links_names(
    logdir: Path, tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    add_jax_run(outside / "profiles")
    torch_trace = add_torch_run(outside / "torch")
    (logdir / "linked").symlink_to(outside / "profiles", target_is_directory=True)
    (logdir / "mine").mkdir()
    (logdir / "mine" / "w.pt.trace.json.gz").symlink_to(torch_trace)
    found = Catalog(str(logdir)).files()
    assert set(found) == {(f"linked/{JAX_RUN}", JAX_HOST), (f"linked/{JAX_RUN}", JAX_JSON_HOST), ("mine", "w")}
    # the listed identity is the target's, so a later swap of the link is refused at open time
    assert found[("mine", "w")].identity() == FileIdentity.from_stat(torch_trace.stat())


def test_symlink_loops_end_and_are_reported_not_walked_again(logdir: Path) -> None:
    add_torch_run(logdir)
    (logdir / "self").symlink_to(logdir, target_is_directory=True)
    (logdir / TORCH_RUN / "up").symlink_to(logdir / TORCH_RUN, target_is_directory=True)
    (logdir / "above").symlink_to(logdir.parent, target_is_directory=True)  # holds the logdir itself
    catalog = Catalog(str(logdir))
    assert set(catalog.files()) == {(TORCH_RUN, TORCH_HOST)}
    reasons = {s["path"]: s["reason"] for s in catalog.discovery()["skipped"]}
    assert reasons["self"] == reasons["above"] == reasons[f"{TORCH_RUN}/up"]
    assert "loop" in reasons["self"] and "walked already" in reasons["self"]
    assert catalog.discovery()["truncated"] is False


def test_a_link_to_a_folder_inside_the_logdir_is_not_listed_twice(logdir: Path) -> None:
    add_torch_run(logdir)
    (logdir / "alias").symlink_to(logdir / TORCH_RUN, target_is_directory=True)
    catalog = Catalog(str(logdir))
    assert set(catalog.files()) == {(TORCH_RUN, TORCH_HOST)}
    assert catalog.discovery()["skipped"] == [
        {"path": "alias", "reason": "a link to a folder inside the logdir, listed under its own name"}]


def test_what_the_walk_left_out_is_said_with_the_reason(logdir: Path) -> None:
    add_torch_run(logdir)
    (logdir / "broken.pt.trace.json").symlink_to(logdir / "gone.pt.trace.json")
    (logdir / "config.json").write_text(json.dumps({"lr": 0.1, "layers": [1, 2]}))
    os.mkfifo(logdir / "pipe.pt.trace.json")
    reasons = {s["path"]: s["reason"] for s in Catalog(str(logdir)).discovery()["skipped"]}
    assert reasons == {
        "broken.pt.trace.json": "a broken link",
        "config.json": "not a Chrome trace (no traceEvents near its start)",
        "pipe.pt.trace.json": "not a regular file",
    }


def test_what_is_left_out_is_listed_up_to_a_bound_and_counted_beyond_it(logdir: Path) -> None:
    for k in range(discovery.MAX_SKIPPED + 20):
        (logdir / f"b{k}.pt.trace.json").symlink_to(logdir / f"gone{k}")
    found = Catalog(str(logdir)).discovery()
    assert len(found["skipped"]) == discovery.MAX_SKIPPED and found["skipped_total"] == discovery.MAX_SKIPPED + 20


def test_jaxs_export_is_named_as_its_xspaces_and_listed_after_it(logdir: Path) -> None:
    """The corpus's export is whole (under JAX's cap): an `export`, not `capped` (tests/formats/test_jax_export_cap.py
    has one that reached the cap)."""
    add_jax_run(logdir)
    (logdir / "other").mkdir()
    shutil.copyfile(JAX_SMALL / "vm.trace.json.gz", logdir / "other" / "vm.trace.json.gz")  # no XSpace beside it
    runs = {r["run"]: r["hosts"] for r in Catalog(str(logdir)).runs()}
    xspace, export = runs[JAX_RUN]
    assert xspace["host"] == JAX_HOST and "capped" not in xspace and "export" not in xspace
    assert export["host"] == JAX_JSON_HOST and "capped" not in export
    assert export["export"]["of"] == JAX_HOST and "vm.xplane.pb" in export["export"]["note"]
    assert "capped" not in runs["other"][0] and "export" not in runs["other"][0]


def test_a_pytorch_trace_beside_an_xspace_is_not_taken_for_jaxs_export(logdir: Path) -> None:
    run = add_jax_run(logdir)
    (run / "vm.pt.trace.json.gz").write_bytes(torch_trace_gz())
    hosts_of = {h["host"]: h for r in Catalog(str(logdir)).runs() for h in r["hosts"]}
    assert "capped" not in hosts_of["vm.pt.trace.json.gz"]


def test_the_plugin_follows_links_unless_told_not_to_and_its_info_says_what_it_left_out(
    logdir: Path, tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    path = add_torch_run(outside)
    (logdir / "r").mkdir()
    (logdir / "r" / "w.pt.trace.json.gz").symlink_to(path)
    on = client(make_plugin(logdir, tmp_path / "cache-on"))
    assert [r["run"] for r in body_json(get(on, "runs"))] == ["r"]
    assert body_json(get(on, "info"))["discovery"]["follow_symlinks"] is True
    off = client(make_plugin(logdir, tmp_path / "cache-off", "--tb_reduce_follow_symlinks=false"))
    assert body_json(get(off, "runs")) == []
    info = body_json(get(off, "info"))["discovery"]
    assert info["follow_symlinks"] is False
    assert info["skipped"] == [{"path": "r/w.pt.trace.json.gz",
                                "reason": "a link out of the logdir, not followed (--tb_reduce_follow_symlinks=false)"}]


@pytest.mark.parametrize("value", ["maybe", "", "2"])
def test_a_nonsense_follow_symlinks_flag_is_refused_when_tensorboard_starts(tmp_path: Path, value: str) -> None:
    with pytest.raises(SystemExit):
        plugin_flags(tmp_path, f"--tb_reduce_follow_symlinks={value}")
