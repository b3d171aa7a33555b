"""The dashboard's smoothing (`frontend/smoothing.js`, TensorBoard's `classicSmoothing`)
against the hand-computed table `tests/fixtures/smoothing_cases.json`, which the Python
twin (`tb_reduce_plugin/waveforms/smoothing.py`) is checked against too.

The module is loaded as the dashboard loads it: from a real TensorBoard's static
route, into a real headless Chromium.
"""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import pytest
from conftest import TESTS
from dashboard_support import CHROMIUM, PYTORCH_DEMO, TensorBoardServer

CASES_FILE = TESTS / "fixtures" / "smoothing_cases.json"

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: install the Debian package `chromium` (CI does)", allow_module_level=True)
if not PYTORCH_DEMO.is_dir():
    pytest.skip("the demo PyTorch profile is absent", allow_module_level=True)

sync_api = pytest.importorskip("playwright.sync_api")

NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def number(v) -> float:
    return NON_FINITE[v] if isinstance(v, str) else float(v)


def cases() -> list[dict]:
    return json.loads(CASES_FILE.read_text())


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("smoothing")
    shutil.copytree(PYTORCH_DEMO, root / "logdir" / "run")
    tb = TensorBoardServer(root / "logdir", root / "cache")
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            pg = browser.new_page()
            errors: list[str] = []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            # any page of the plugin: the module is imported by its static URL, as the dashboard does
            pg.goto(tb.plugin_url("static/dashboard.css"))
            pg.js_errors = errors
            yield pg
            browser.close()
            assert not errors, errors
    finally:
        tb.stop()


# JSON cannot hold NaN/Infinity: both ways they travel as the strings the routes use.
RUN_CASES = """async (cases) => {
  const {classicSmoothing} = await import(new URL('smoothing.js', location.href).href);
  const enc = (v) => (Number.isFinite(v) ? v : String(v));
  const dec = (v) => (typeof v === 'string' ? Number(v) : v);
  return cases.map((c) => classicSmoothing(c.values.map(dec), dec(c.weight)).map(enc));
}"""


def test_the_fixture_table_is_there_and_covers_the_edge_cases():
    table = cases()
    assert len(table) >= 8
    names = " ".join(c["name"] for c in table).lower()
    for word in ("constant", "nan", "inf", "empty"):
        assert word in names, f"no case about {word!r} in {CASES_FILE}"


def test_every_case_of_the_table_matches_in_the_browser(page):
    table = cases()
    got = page.evaluate(RUN_CASES, table)
    assert len(got) == len(table)
    for case, out in zip(table, got):
        want = [number(v) for v in case["expected"]]
        have = [number(v) for v in out]
        assert len(have) == len(want), case["name"]
        for i, (h, w) in enumerate(zip(have, want)):
            if math.isnan(w):
                assert math.isnan(h), (case["name"], i, h, w)
            elif math.isinf(w):
                assert h == w, (case["name"], i, h, w)
            else:
                assert h == pytest.approx(w, rel=1e-9, abs=1e-12), (case["name"], i, h, w, out)


def test_the_browser_and_the_python_twin_agree_on_random_series(page):
    """Beyond the table: random series with NaN/Inf sprinkled in, both implementations."""
    smoothing = pytest.importorskip("tb_reduce_plugin.waveforms.smoothing")

    rng = random.Random(7)
    table = []
    for n in range(40):
        values = []
        for _ in range(rng.randint(0, 30)):
            r = rng.random()
            values.append("NaN" if r < 0.05 else "Infinity" if r < 0.08 else "-Infinity" if r < 0.1
                          else rng.uniform(-1e3, 1e3))
        weight = [0, 0.6, 0.999, 1, rng.random(), -0.5, 1.5, "NaN"][n % 8]
        table.append({"name": f"random {n}", "weight": weight, "values": values})
    got = page.evaluate(RUN_CASES, table)
    for case, out in zip(table, got):
        want = smoothing.smooth([number(v) for v in case["values"]], number(case["weight"])).tolist()
        have = [number(v) for v in out]
        assert len(have) == len(want)
        for h, w in zip(have, want):
            assert (math.isnan(h) and math.isnan(w)) or h == pytest.approx(w, rel=1e-12, abs=1e-12), (case, out, want)
