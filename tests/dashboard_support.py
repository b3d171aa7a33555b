"""Helpers for the dashboard's browser tests and benchmark: a real TensorBoard
process on a free port, a logdir of real traces, and canvas pixel statistics."""

from __future__ import annotations

import json
import shutil
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

from tensorboard_process import start_tensorboard

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts"
PYTORCH_DEMO = ROOT / "demo_logdir" / "pytorch_cnn"
JAX_SMALL = ROOT.parent / "shared" / "corpus" / "generated" / "jax_cpu_mlp_small" / "vm.xplane.pb"

HOSTILE_IMG = '<img src=x onerror="window.__pwned=1">'
HOSTILE_SCRIPT = "<script>window.__pwned=2</script>"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hostile_trace() -> dict:
    """A tiny Chrome trace whose names are HTML: they must show as text, never run."""
    return {
        "traceEvents": [
            {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "<b>proc</b>"}},
            {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": HOSTILE_SCRIPT}},
            {"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 1000, "name": HOSTILE_IMG,
             "args": {"note": "<iframe src=javascript:alert(1)>"}},
            {"ph": "X", "pid": 1, "tid": 1, "ts": 100, "dur": 500, "name": HOSTILE_SCRIPT},
            {"ph": "i", "pid": 1, "tid": 1, "ts": 700, "s": "t", "name": "<svg onload=alert(1)>"},
        ],
        "displayTimeUnit": "ms",
    }


def build_logdir(root: Path, huge_bytes: int = 0) -> Path:
    """The test logdir: real PyTorch and JAX profiles, a hostile trace, a broken
    file and (optionally) a sparse "huge" file, in the layouts users have."""
    logdir = root / "logdir"
    shutil.copytree(PYTORCH_DEMO, logdir / "pytorch_cnn")
    jax_run = logdir / "jax" / "plugins" / "profile" / "r1"
    jax_run.mkdir(parents=True)
    shutil.copyfile(JAX_SMALL, jax_run / "vm.xplane.pb")
    (logdir / "hostile").mkdir()
    (logdir / "hostile" / "evil.pt.trace.json").write_text(json.dumps(hostile_trace()))
    (logdir / "broken").mkdir()
    (logdir / "broken" / "bad.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", "ts": 1,,, oops')
    if huge_bytes:
        # Sparse: listed at its size (the warning is about size), costs no disk.
        (logdir / "huge").mkdir()
        with open(logdir / "huge" / "big.pt.trace.json", "wb") as f:
            f.write(b'{"traceEvents": []}')
            f.truncate(huge_bytes)
    return logdir


class TensorBoardServer:
    """`tensorboard --load_fast=false` on a free port, as a user runs it (`tensorboard_process`
    starts, waits for and stops it), with the plugin's routes at hand."""

    def __init__(self, logdir: Path, cache_dir: Path, *flags: str) -> None:
        self.tb = start_tensorboard(logdir, cache_dir, "--load_fast=false", *flags)
        self.base = self.tb.url.rstrip("/")

    def plugin_url(self, route: str) -> str:
        return f"{self.base}/data/plugin/tb_reduce/{route}"

    def get_json(self, route: str) -> tuple[int, object]:
        status, _, data = self.tb.get(f"data/plugin/tb_reduce/{route}", timeout=60)
        return status, json.loads(data)

    def log(self) -> str:
        return self.tb.tail()

    def stop(self) -> None:
        self.tb.stop()


# Counts the plot area's non-background pixels and distinct (4-bit quantised)
# colours, from the canvas's own backing store.
CANVAS_PIXELS_JS = """
() => {
  const tl = window.tbReduceDashboard.timeline;
  const canvas = tl.canvas;
  const x0 = Math.ceil(tl.gutter * tl.dpr), y0 = Math.ceil(30 * tl.dpr);
  const w = canvas.width - x0, h = canvas.height - y0;
  const data = canvas.getContext('2d').getImageData(x0, y0, w, h).data;
  let ink = 0;
  const colours = new Set();
  for (let i = 0; i < data.length; i += 4) {
    const r = data[i], g = data[i + 1], b = data[i + 2];
    if (r < 240 || g < 240 || b < 240) {
      ink += 1;
      colours.add(((r >> 4) << 8) | ((g >> 4) << 4) | (b >> 4));
    }
  }
  return {ink, total: w * h, colours: colours.size};
}
"""


def dashboard_state(frame) -> dict:
    """What a user would compare: the pickers and the visible window."""
    return frame.evaluate("""() => {
      const q = (id) => document.querySelector(`[data-testid=${id}]`);
      const t = q('timeline');
      return {run: q('run-select').value, host: q('host-select').value, level: q('level-select').value,
              start: Number(t.dataset.startUs), end: Number(t.dataset.endUs)};
    }""")


def wait_loaded(frame, level: Optional[str] = None, timeout: float = 30000) -> None:
    """Until the timeline holds a response (of `level`, if given) and nothing is loading."""
    cond = "!!t && t.dataset.events !== undefined && t.dataset.loading === '0'"
    if level is not None:
        cond += f" && t.dataset.level === {json.dumps(level)}"
    frame.wait_for_function(f"() => {{ const t = document.querySelector('[data-testid=timeline]'); return {cond}; }}",
                            timeout=timeout)


@contextmanager
def chromium() -> Iterator[Any]:
    """Debian's headless Chromium driven by Playwright (one per test module)."""
    from playwright import sync_api

    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


@contextmanager
def checked_page(browser: Any, width: int = 1400, height: int = 900) -> Iterator[Any]:
    """A fresh page whose uncaught JavaScript errors fail the test (listed in `page.js_errors`)."""
    context = browser.new_context(viewport={"width": width, "height": height})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.js_errors = errors
    yield pg
    context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


SHOTS = Path("/tmp/shots")


def save_shot(target: Any, name: str) -> Path:
    """A screenshot of a page or element, to /tmp/shots for a person to look at and to
    test-artifacts/ for CI to keep."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    ARTIFACTS.mkdir(exist_ok=True)
    path = SHOTS / f"{name}.png"
    target.screenshot(path=str(path))
    shutil.copyfile(path, ARTIFACTS / path.name)
    return path
