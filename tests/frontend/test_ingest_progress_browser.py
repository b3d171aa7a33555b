"""The dashboard, in a real headless Chromium against a real TensorBoard, says how much of a
big trace the server has read while a first open parses it (issue 26, item 8), then shows
the view. Screenshots go to /tmp/shots for a person to look at."""

from __future__ import annotations

from pathlib import Path

import pytest
from dashboard_support import CHROMIUM, TensorBoardServer, save_shot, wait_loaded
from progress_support import make_big_logdir

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: install the Debian package `chromium` (CI does)", allow_module_level=True)
pytest.importorskip("playwright.sync_api")


def test_the_dashboard_says_how_much_of_the_file_the_server_has_read_before_the_first_view(tmp_path, page):
    server = TensorBoardServer(make_big_logdir(tmp_path), tmp_path / "cache")
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
        # Copying the kept events out of the text, if a poll fell while it ran: how far of how much.
        copying = [s for s in statuses if s.startswith("Reducing big at level 2 on the server: copying")]
        assert all(" read (" in s and " of " in s for s in copying), copying
        print("statuses while copying:", copying)
        assert statuses[-1].startswith("Level 2"), statuses[-1]
        save_shot(page, "progress-loaded")
    finally:
        server.stop()
