"""JAX's `trace.json.gz` export beside its XSpace is called capped only when JAX's
1,000,000-event cap cut it (issue 25, item 1): the listing counts the export's complete
events, once per version of the file, on real JAX profiles: the corpus's small one (whole)
and one recorded past the cap."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import TESTS
from jax_export_support import record_capped_jax_run

from tb_reduce_plugin.serve import discovery
from tb_reduce_plugin.serve.discovery import JAX_EXPORT_CAP, Catalog

ROOT = TESTS.parent
JAX_SMALL = ROOT.parent / "shared" / "corpus" / "generated" / "jax_cpu_mlp_small"


def complete_events(export: Path) -> int:
    """The export's complete (`X`) events, by a full JSON parse: what the scan must agree with."""
    with gzip.open(export) as f:
        return sum(1 for e in json.load(f)["traceEvents"] if e.get("ph") == "X")


def hosts_of(logdir: Path) -> dict[str, dict]:
    return {h["host"]: h for r in Catalog(str(logdir)).runs() for h in r["hosts"]}


@pytest.fixture(scope="module")
def capped_session(tmp_path_factory) -> Path:
    return record_capped_jax_run(tmp_path_factory.mktemp("capped") / "logdir")


def test_a_whole_jax_export_is_listed_as_its_xspaces_export_and_not_called_capped(tmp_path: Path) -> None:
    if not JAX_SMALL.is_dir():
        pytest.skip("../shared/corpus is absent (CI has it)")
    session = tmp_path / "logdir" / "jax" / "plugins" / "profile" / "r1"
    shutil.copytree(JAX_SMALL, session)
    export = hosts_of(tmp_path / "logdir")["vm.trace.json.gz"]
    assert "capped" not in export
    whole = complete_events(session / "vm.trace.json.gz")
    assert export["export"]["of"] == "vm" and export["export"]["events"] == whole < JAX_EXPORT_CAP
    assert f"whole: {whole:,} events" in export["export"]["note"] and "vm.xplane.pb" in export["export"]["note"]


def test_a_jax_export_that_reached_the_cap_is_called_capped_and_names_its_xspace(capped_session: Path) -> None:
    export = hosts_of(capped_session.parents[2])["vm.trace.json.gz"]
    assert export["export"]["events"] == JAX_EXPORT_CAP == complete_events(capped_session / "vm.trace.json.gz")
    assert export["capped"]["events"] == JAX_EXPORT_CAP and export["capped"]["of"] == "vm"
    assert export["capped"]["checked"] is True
    assert "vm.xplane.pb" in export["capped"]["note"] and "capped at 1,000,000 events" in export["capped"]["note"]


def test_the_count_of_a_plain_json_export_crosses_its_read_chunks_and_agrees_with_a_full_parse(
    capped_session: Path, tmp_path: Path,
) -> None:
    """The capped export inflated (184 MB, read 1 MiB at a time: patterns cut by a chunk's end)
    and cut to its first 300,000 complete events, closed as JSON: the scan counts what a parse does."""
    with gzip.open(capped_session / "vm.trace.json.gz") as f:
        doc = json.load(f)
    kept, n = [], 0
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            n += 1
            if n > 300_000:
                continue
        kept.append(e)
    plain = tmp_path / "vm.trace.json"
    plain.write_text(json.dumps({**doc, "traceEvents": kept}, separators=(",", ":")))
    assert plain.stat().st_size > 8 << 20
    assert discovery.count_export_events(str(plain)) == 300_000


def test_an_export_is_counted_once_per_version_of_its_file(tmp_path: Path, monkeypatch) -> None:
    if not JAX_SMALL.is_dir():
        pytest.skip("../shared/corpus is absent (CI has it)")
    session = tmp_path / "logdir" / "jax" / "plugins" / "profile" / "r1"
    shutil.copytree(JAX_SMALL, session)
    calls: list[str] = []
    real = discovery.count_export_events

    def counting(path: str, expect=None):  # type: ignore[no-untyped-def]
        calls.append(path)
        return real(path, expect)

    monkeypatch.setattr(discovery, "count_export_events", counting)
    catalog = Catalog(str(tmp_path / "logdir"), max_age_s=0)
    for _ in range(3):
        catalog.runs()
    assert len(calls) == 1
    export = session / "vm.trace.json.gz"
    export.write_bytes(export.read_bytes())  # rewritten: another version (mtime, maybe inode)
    st = export.stat()
    os.utime(export, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    catalog.runs()
    assert len(calls) == 2


def test_an_export_that_cannot_be_counted_keeps_the_cap_warning_and_says_it_was_not_checked(tmp_path: Path) -> None:
    if not JAX_SMALL.is_dir():
        pytest.skip("../shared/corpus is absent (CI has it)")
    session = tmp_path / "logdir" / "jax" / "plugins" / "profile" / "r1"
    shutil.copytree(JAX_SMALL, session)
    export = session / "vm.trace.json.gz"
    data = export.read_bytes()
    export.write_bytes(data[:10] + bytes(len(data) - 10))  # a gzip header, then no valid deflate stream
    host = hosts_of(tmp_path / "logdir")["vm.trace.json.gz"]
    assert host["export"]["events"] is None
    assert host["capped"]["checked"] is False and "not checked" in host["capped"]["note"]
