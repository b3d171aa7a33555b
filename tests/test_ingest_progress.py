"""A progress line while a trace is ingested (issue 26, item 8): the CLI's line names the
stage, the bytes of the file read of how many and the rate; the server's `progress` route
says what it is doing to a file (reading: how far of how much; reducing; idle) while a
first open parses it, and the dashboard shows it before the view's first byte arrives."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from dashboard_support import CHROMIUM, TensorBoardServer, save_shot, wait_loaded
from plugin_support import assert_json_error, body_json, client, get, make_plugin

from tb_reduce_plugin.cli import bar_line
from tb_reduce_plugin.service import TraceService

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def big_logdir(tmp_path_factory) -> Path:
    """A 256 MiB (JSON) Kineto-style trace, gzip: a first open parses it for a second or more."""
    logdir = tmp_path_factory.mktemp("progress") / "logs"
    (logdir / "run").mkdir(parents=True)
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_kineto_trace.py"), "--size-mb", "256", "-o",
                    str(logdir / "run" / "big.pt.trace.json.gz"), "-q"], check=True, timeout=600)
    return logdir


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


def test_the_progress_route_answers_idle_and_404_for_what_is_not_listed(big_logdir, tmp_path):
    plugin = make_plugin(big_logdir, tmp_path / "cache")
    c = client(plugin)
    assert body_json(get(c, "progress", run="run", host="big")) == {"stage": "idle"}
    assert "no trace" in assert_json_error(get(c, "progress", run="run", host="../../etc/passwd"), 404)
    assert_json_error(get(c, "progress", run="run"), 400)


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is absent (CI installs it)")
def test_the_dashboard_says_how_much_of_the_file_the_server_has_read_before_the_first_view(big_logdir, tmp_path,
                                                                                          page):
    server = TensorBoardServer(big_logdir, tmp_path / "cache")
    try:
        page.add_init_script("""
          window.__statuses = [];
          new MutationObserver(() => {
            const s = document.querySelector('[data-testid=status]');
            if (s && window.__statuses[window.__statuses.length - 1] !== s.textContent) window.__statuses.push(s.textContent);
          }).observe(document, {subtree: true, childList: true, characterData: true});
        """)
        page.goto(server.plugin_url("view?run=run&host=big&level=2"))
        wait_loaded(page, timeout=240000)
        statuses = page.evaluate("() => window.__statuses")
        reading = [s for s in statuses if s.startswith("Reading big on the server: ")]
        assert reading, statuses
        assert all(" of " in s and "/s" in s for s in reading), reading
        assert statuses[-1].startswith("Level 2"), statuses[-1]
        save_shot(page, "progress-loaded")
    finally:
        server.stop()
