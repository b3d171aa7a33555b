"""The plugin serves exactly the files discovery found: a listed file replaced afterwards
(by a symlink out of the logdir, a FIFO, another file) or grown past the input limit is
refused, never read as whatever it now is — on real files behind TensorBoard's WSGI app.

The listing is kept stale on purpose (`max_age_s` of an hour): a swap inside the
catalog's cache window is the case that matters. The symlink cases run as for a logdir
untrusted jobs write into (`--tb_reduce_follow_symlinks=false`), where a fresh walk would
not list a symlink out of the logdir at all; with links followed (the default) the swap
is a replacement: the listed file is never read as the link, a fresh walk lists the link.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Callable

import pytest
from plugin_support import assert_json_error, body_json, client, get, make_plugin
from werkzeug.test import Client, TestResponse

HANG_GUARD_S = 30  # not a speed limit: a request still running after this is stuck for good
MARKER = "SECRET-OUTSIDE-THE-LOGDIR"
NO_LINKS = "--tb_reduce_follow_symlinks=false"


def doc(name: str, n: int = 3) -> dict[str, Any]:
    return {"traceEvents": [{"ph": "X", "name": name, "pid": 1, "tid": 1, "ts": float(i), "dur": 0.5,
                             "args": {"who": name}} for i in range(n)]}


def setup(tmp_path: Path, *argv: str) -> tuple[Path, Path, Client, Any]:
    """A logdir with run `r`, host `r` (r/r.trace.json), a file outside it holding `MARKER`,
    and a plugin whose listing stays as first walked until something invalidates it."""
    logdir = tmp_path / "logdir"
    (logdir / "r").mkdir(parents=True)
    path = logdir / "r" / "r.trace.json"
    path.write_text(json.dumps(doc("inside")))
    outside = tmp_path / "outside.trace.json"
    outside.write_text(json.dumps(doc(MARKER)))
    plugin = make_plugin(logdir, tmp_path / "cache", *argv)
    c = client(plugin)
    assert hosts(c) == {("r", "r")}
    plugin.service.catalog.max_age_s = 3600
    return path, outside, c, plugin


def hosts(c: Client) -> set[tuple[str, str]]:
    return {(r["run"], h["host"]) for r in body_json(get(c, "runs")) for h in r["hosts"]}


def text(resp: TestResponse) -> str:
    try:
        return json.dumps(body_json(resp))
    except ValueError:
        return resp.get_data(as_text=True)


def guarded(fn: Callable[[], TestResponse], fifo: Path | None = None) -> TestResponse:
    box: dict[str, Any] = {}
    t = threading.Thread(target=lambda: box.setdefault("resp", fn()), daemon=True)
    t.start()
    t.join(HANG_GUARD_S)
    if t.is_alive():
        if fifo is not None:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # release the blocked reader
        pytest.fail(f"request still blocked after {HANG_GUARD_S} s")
    return box["resp"]


def requests(c: Client) -> list[Callable[[], TestResponse]]:
    return [
        lambda: get(c, "event", run="r", host="r", i=0),
        lambda: get(c, "trace", gz=True, run="r", host="r", level=0),
        lambda: get(c, "stats", run="r", host="r", level=1),
    ]


def test_a_listed_file_swapped_for_a_symlink_out_of_the_logdir_is_404_and_drops_from_the_listing(
    tmp_path: Path,
) -> None:
    path, outside, c, _ = setup(tmp_path, NO_LINKS)
    path.unlink()
    path.symlink_to(outside)
    resp = get(c, "event", run="r", host="r", i=0)
    assert MARKER not in text(resp)
    assert "changed since it was listed" in assert_json_error(resp, 404)
    assert hosts(c) == set()  # the 404 refreshed the listing, which no longer holds a link out


def test_content_from_outside_the_logdir_is_never_served_after_a_swap(tmp_path: Path) -> None:
    path, outside, c, _ = setup(tmp_path, NO_LINKS)
    path.unlink()
    path.symlink_to(outside)
    for request in requests(c):
        resp = request()
        assert MARKER not in text(resp)
        assert resp.status_code >= 400


def test_content_from_outside_is_never_served_when_the_swap_comes_after_indexing(tmp_path: Path) -> None:
    """An index (and its compressed event blocks) of the listed file may still answer,
    with the listed file's events; a later pass over the path must not read the link."""
    path, outside, c, _ = setup(tmp_path, NO_LINKS)
    assert get(c, "stats", run="r", host="r", level=2).status_code == 200
    path.unlink()
    path.symlink_to(outside)
    for request in requests(c):
        resp = request()
        body = text(resp)
        assert MARKER not in body
        assert resp.status_code in (200, 404, 422)
        if resp.status_code == 200 and '"ph"' in body:  # events (not stats): the listed file's
            assert "inside" in body


def test_with_links_followed_a_swap_for_a_symlink_is_a_replacement_listed_and_read_anew(tmp_path: Path) -> None:
    """Following links (the default) trusts the links the logdir holds, not a listing: the
    request that meets the swap does not read the link as the listed file; it walks again, and
    the new listing holds the link, as any file replaced since the walk is (the test below)."""
    path, outside, c, plugin = setup(tmp_path)
    listed = plugin.service.catalog.find("r", "r")
    path.unlink()
    path.symlink_to(outside)
    assert MARKER in text(get(c, "event", run="r", host="r", i=0))
    relisted = plugin.service.catalog.find("r", "r")
    assert relisted is not None and relisted.identity() != listed.identity()
    assert (relisted.dev, relisted.ino) == (outside.stat().st_dev, outside.stat().st_ino)


def test_a_fifo_swapped_in_for_a_listed_file_is_answered_at_once_with_an_error(tmp_path: Path) -> None:
    path, _, c, _ = setup(tmp_path)
    path.unlink()
    os.mkfifo(path)
    for request in requests(c):
        resp = guarded(request, path)
        assert_json_error(resp, resp.status_code)
        assert resp.status_code in (404, 422)


def test_a_fifo_swapped_in_for_a_listed_file_is_404_and_drops_from_the_listing(tmp_path: Path) -> None:
    path, _, c, _ = setup(tmp_path)
    path.unlink()
    os.mkfifo(path)
    resp = guarded(lambda: get(c, "stats", run="r", host="r"), path)
    assert "changed since it was listed" in assert_json_error(resp, 404)
    assert hosts(c) == set()


def test_a_listed_file_replaced_by_another_is_listed_again_and_served_as_the_new_file(tmp_path: Path) -> None:
    """The old listing's file is never read; the service lists again and opens what it finds now."""
    path, _, c, _ = setup(tmp_path)
    replacement = path.with_name("new.tmp")
    replacement.write_text(json.dumps(doc("replacement", 5)))
    replacement.replace(path)  # an atomic rewrite: same name, another inode
    stats = get(c, "stats", run="r", host="r")
    assert stats.status_code == 200 and body_json(stats)["input"]["bytes"] == path.stat().st_size
    resp = get(c, "event", run="r", host="r", i=4)
    assert resp.status_code == 200 and body_json(resp)["name"] == "replacement"


def test_a_listed_file_that_grew_past_the_input_limit_is_413_with_its_new_size(tmp_path: Path) -> None:
    path, _, c, _ = setup(tmp_path, "--tb_reduce_max_input_mb", "1")
    path.write_text(json.dumps(doc("grown", 20_000)))  # same inode, now over 1 MB
    size = path.stat().st_size
    assert size > 1024 * 1024
    for request in requests(c):
        message = assert_json_error(request(), 413)
        assert f"{size:,}" in message
