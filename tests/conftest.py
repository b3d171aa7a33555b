"""Shared fixtures: where the corpus is, and small helpers to write trace files."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# CI replays the same examples every run (a red CI must mean a change broke
# something); local runs keep exploring new random traces.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"  # the suites, their fixtures and helpers (the suites sit in folders mirroring the package)
CORPUS = ROOT.parent / "shared" / "corpus"


def write_trace(path: Path, doc: Any, gz: bool = False, raw: bytes | None = None) -> Path:
    data = raw if raw is not None else json.dumps(doc).encode()
    if gz:
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


@pytest.fixture
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus is absent (a user's checkout); CI always has it")
    return CORPUS


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "corpus: runs over the real traces in ../shared/corpus")
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(ROOT / ".hypothesis"))


@pytest.fixture
def no_background_work() -> None:
    """The suites that measure a traced peak: tracemalloc counts every thread's allocations,
    so a service an earlier test of the same worker left keeping a text or writing its index
    put its 16 MiB reads into the peak measured here; they are waited for first."""
    from tb_reduce_plugin.serve.service import wait_for_background_work

    wait_for_background_work(120)


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium through Playwright, one per test module (the browser suites)."""
    from dashboard_support import chromium

    with chromium() as b:
        yield b


@pytest.fixture
def page(browser):
    """A fresh 1400×900 page whose uncaught JavaScript errors fail the test (a suite may override it)."""
    from dashboard_support import checked_page

    with checked_page(browser) as pg:
        yield pg


@pytest.fixture(scope="session")
def oracle_tables() -> list:
    """The oracle traces (`oracle_traces.py`) indexed once per test process, for the suites
    that compare chunked code with whole-array code on them (each resets what it prepares)."""
    from oracle_traces import oracle_traces

    from tb_reduce_plugin.reduce.pipeline import index_file

    found = []
    for path in oracle_traces():
        try:
            found.append((path.name, index_file(path).table))
        except Exception:  # a corpus file the readers refuse is the sweep's concern, not these suites'
            continue
    return found
