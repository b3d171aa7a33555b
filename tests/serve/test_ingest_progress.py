"""A progress line while a trace is ingested (issue 26, item 8): the CLI's line names the
stage, the bytes of the file read of how many and the rate; the server's `progress` route
says what it is doing to a file (reading: how far of how much; reducing, and how far its
kept events are copied out of the text; idle) while a first open parses it (the dashboard
showing it: test_ingest_progress_browser.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from plugin_support import assert_json_error, body_json, client, get, make_plugin
from progress_support import make_big_logdir

from tb_reduce_plugin.cli import bar_line
from tb_reduce_plugin.serve.service import TraceService


@pytest.fixture(scope="module")
def big_logdir(tmp_path_factory) -> Path:
    return make_big_logdir(tmp_path_factory.mktemp("progress"))


def test_the_cli_line_names_the_stage_the_bytes_read_of_how_many_and_the_rate():
    line = bar_line("g1.pt.trace.json.gz", ("reading", "writing"), 41_000_000, 196_000_000, 2.0)
    assert line.startswith("g1.pt.trace.json.gz reading [")
    assert "20.9%" in line and "41.0 MB of 98.0 MB, 20.5 MB/s" in line
    second = bar_line("g1", ("reading", "writing"), 147_000_000, 196_000_000, 4.0)
    assert " writing [" in second and "49.0 MB of 98.0 MB" in second and "75.0%" in second


def test_while_a_first_open_parses_the_service_says_reading_how_far_of_how_much(big_logdir, tmp_path):
    service = TraceService(str(big_logdir), cache_dir=str(tmp_path / "cache"))
    size = (big_logdir / "run" / "big.pt.trace.json.gz").stat().st_size
    assert service.progress("run", "big") == {"stage": "idle"}
    samples: list[dict] = []
    done = threading.Event()
    worker = threading.Thread(target=lambda: (service.reduction("run", "big", 2, None, None), done.set()))
    worker.start()
    while not done.is_set():
        samples.append(service.progress("run", "big"))
        time.sleep(0.005)
    worker.join()
    reading = [s for s in samples if s["stage"] == "reading"]
    assert reading, f"no sample while reading among {len(samples)}"
    assert all(s["total"] == size and 0 <= s["done"] <= size for s in reading)
    assert [s["done"] for s in reading] == sorted(s["done"] for s in reading)
    assert any(s["done"] > 0 and s["bytes_per_s"] > 0 for s in reading)
    assert {s["stage"] for s in samples} <= {"idle", "reading", "reducing"}
    assert service.progress("run", "big") == {"stage": "idle"}
    # Then the kept events are copied out of the file's text, read again: how far of how much.
    copying = [s for s in samples if s["stage"] == "reducing" and s["total"] > 0]
    assert copying, f"no sample while copying among {len(samples)}"
    assert all(s["total"] == size and 0 <= s["done"] <= size for s in copying)
    assert [s["done"] for s in copying] == sorted(s["done"] for s in copying)


def test_the_progress_route_answers_idle_and_404_for_what_is_not_listed(big_logdir, tmp_path):
    plugin = make_plugin(big_logdir, tmp_path / "cache")
    c = client(plugin)
    assert body_json(get(c, "progress", run="run", host="big")) == {"stage": "idle"}
    assert "no trace" in assert_json_error(get(c, "progress", run="run", host="../../etc/passwd"), 404)
    assert_json_error(get(c, "progress", run="run"), 400)
