"""The `runs` route's ETag: the dashboard's Live mode polls it with If-None-Match."""

from __future__ import annotations

from pathlib import Path

import pytest
from plugin_support import body_json, client, get, make_logdir, make_plugin


@pytest.fixture
def setup(tmp_path: Path):
    logdir = make_logdir(tmp_path)
    plugin = make_plugin(logdir, tmp_path / "cache")
    return client(plugin), plugin, logdir


def test_runs_answers_304_while_the_listing_is_unchanged_and_200_after(setup) -> None:
    c, _, logdir = setup
    first = get(c, "runs")
    etag = first.headers["ETag"]
    assert first.status_code == 200 and etag.startswith('"runs-') and body_json(first)
    again = get(c, "runs", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.headers["ETag"] == etag and again.get_data() == b""
    assert get(c, "runs", headers={"If-None-Match": '"runs-other"'}).status_code == 200
    # a new run: the listing (once the catalog walks again) has another tag
    src = next(p for p in logdir.rglob("*") if p.is_file() and ".trace.json" in p.name)
    (logdir / "newrun").mkdir()
    (logdir / "newrun" / src.name).write_bytes(src.read_bytes())
    changed = get(c, "runs", headers={"If-None-Match": etag})  # make_plugin: the catalog walks every time
    assert changed.status_code == 200 and changed.headers["ETag"] != etag
    assert "newrun" in {r["run"] for r in body_json(changed)}
