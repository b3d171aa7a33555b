"""What the dashboard says about the logdir walk, in a real headless Chromium against real
TensorBoard processes: an empty tab lists what was found but left out and why; JAX's
`trace.json.gz` export is named so in the host picker and the XSpace beside it opens first."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from dashboard_support import CHROMIUM, JAX_SMALL, TensorBoardServer, save_shot, wait_loaded

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: install the Debian package `chromium` (CI does)", allow_module_level=True)
if not JAX_SMALL.is_file():
    pytest.skip("../shared/corpus is absent (CI has it)", allow_module_level=True)
pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def empty_server(tmp_path_factory):
    """A logdir whose only candidates are left out: a link to a run folder elsewhere (not
    followed: --tb_reduce_follow_symlinks=false), a broken link and a JSON that is no trace."""
    root = tmp_path_factory.mktemp("empty")
    outside = root / "outside" / "run"
    outside.mkdir(parents=True)
    shutil.copyfile(JAX_SMALL, outside / "vm.xplane.pb")
    logdir = root / "logdir"
    logdir.mkdir()
    (logdir / "linked").symlink_to(outside, target_is_directory=True)
    (logdir / "gone.pt.trace.json").symlink_to(root / "nowhere.pt.trace.json")
    (logdir / "hparams.json").write_text(json.dumps({"lr": 0.1}))
    tb = TensorBoardServer(logdir, root / "cache", "--tb_reduce_follow_symlinks=false")
    try:
        yield tb
    finally:
        tb.stop()


@pytest.fixture(scope="module")
def jax_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("jax")
    run = root / "logdir" / "jax" / "plugins" / "profile" / "r1"
    run.mkdir(parents=True)
    for name in ("vm.xplane.pb", "vm.trace.json.gz"):
        shutil.copyfile(JAX_SMALL.parent / name, run / name)
    tb = TensorBoardServer(root / "logdir", root / "cache")
    try:
        yield tb
    finally:
        tb.stop()


def test_an_empty_tab_lists_what_the_walk_left_out_and_why(page, empty_server):
    page.goto(empty_server.plugin_url("view?run=none&host=none"))
    page.get_by_text("No profiler traces found").wait_for()
    items = page.locator("[data-testid=skipped] li")
    items.first.wait_for()
    text = sorted(items.all_inner_texts())
    assert text == [
        "gone.pt.trace.json — a broken link",
        "hparams.json — not a Chrome trace (no traceEvents near its start)",
        "linked — a link to a folder, not followed (--tb_reduce_follow_symlinks=false)",
    ]
    save_shot(page, "discovery-empty-explained")


def test_jaxs_export_is_named_in_the_host_picker_and_the_xspace_opens_first(page, jax_server):
    """The corpus's export is whole (under JAX's cap): named JAX's export, not capped (a capped
    one: tests/frontend/test_dashboard_labels_browser.py)."""
    page.goto(f"{jax_server.base}/#tb_reduce")  # the tab as a user opens it: no run or host named
    frame = page.wait_for_selector("iframe", timeout=30000).content_frame()
    wait_loaded(frame)
    select = frame.locator("[data-testid=host-select]")
    assert select.input_value() == "vm"
    options = select.locator("option").all_inner_texts()
    assert options[0].startswith("vm (xspace,") and "capped" not in options[0]
    assert options[1].startswith("vm.trace.json.gz (chrome-json,")
    assert options[1].endswith(", JAX export, whole)")
    assert "vm.xplane.pb" in select.locator("option").nth(1).get_attribute("title")
