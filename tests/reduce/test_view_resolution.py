"""`resolution` on the view routes (`trace`, `stats`): the screen's bucket count (XProf's
`resolution`), so the dashboard's payload fits its canvas. At `level=auto` it cuts the
level the budget picks; at levels 1-4 the window is cut into min(resolution, the level's
own count) (the dashboard's default level before one is picked); level 0 ignores it;
hostile values are a one-line 400 (docs/SEMANTICS.md, "`auto` with a screen resolution").

The traces are real: the bundled demo JAX profile (`demo_logdir/jax_mlp`, 5 k events: `auto`
keeps it whole, lossless, unless its budget is lowered) and a JAX XSpace recorded here past
`auto`'s 500,000-event budget (`bench/make_jax_xspace.py`, ~570 k events in ~5 s), where
`auto` picks level 1 and its 100,000 buckets meet a 1,400-pixel screen.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS
from plugin_support import assert_json_error, body_json, client, get, make_plugin
from recorded_profiles import record_big_xspace
from werkzeug.test import Client

from tb_reduce_plugin.reduce import pipeline
from tb_reduce_plugin.reduce.levels import MAX_RESOLUTION, RESOLUTION

ROOT = TESTS.parent
DEMO_JAX = ROOT / "demo_logdir" / "jax_mlp"
DEMO_RUN = "jax_mlp/2026_11_30_13_59_00"
BIG_RUN = "big"
HOST = "vm"
SCREEN = 1400  # a 1,400-px canvas at devicePixelRatio 1

if not (DEMO_JAX / "plugins").is_dir():
    pytest.skip("demo_logdir/jax_mlp is absent", allow_module_level=True)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("resolution")
    logdir = root / "logdir"
    shutil.copytree(DEMO_JAX, logdir / "jax_mlp")
    return logdir


@pytest.fixture(scope="module")
def big(logdir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded XSpace, as the only host of run `big`."""
    xplane = record_big_xspace(tmp_path_factory.mktemp("recording"))
    (logdir / BIG_RUN).mkdir()
    return Path(shutil.copyfile(xplane, logdir / BIG_RUN / f"{HOST}.xplane.pb"))


@pytest.fixture(scope="module")
def c(logdir: Path, tmp_path_factory: pytest.TempPathFactory) -> Client:
    return client(make_plugin(logdir, tmp_path_factory.mktemp("cache")))


def view(c: Client, run: str, **params: Any) -> tuple[dict, int, dict]:
    """The `trace` route as the dashboard asks it (gzip, args=0): its document, its bytes
    on the wire, its headers."""
    r = get(c, "trace", gz=True, run=run, host=HOST, args=0, **params)
    assert r.status_code == 200, r.get_data()[:300]
    return body_json(r), len(r.get_data()), dict(r.headers)


def summaries_per_track(doc: dict) -> Counter:
    return Counter((e.get("pid"), e.get("tid")) for e in doc["traceEvents"] if e.get("cat") == "tb_reduce.summary")


def assert_a_screenful(doc: dict, resolution: int) -> None:
    """Per track, a summary per bucket at most, and one more at each boundary of a kept slice:
    a kept slice (G1 keeps every one at least a bucket long) cuts the run of folded slices in
    the buckets it starts and ends in, and a summary never crosses its boundary (G3). How many
    slices a recording holds that long varies with the machine's load: one recorded beside two
    other test workers kept 1,906 on its main thread and drew 1,693 summaries on 1,400 buckets."""
    summaries = summaries_per_track(doc)
    kept = Counter((e.get("pid"), e.get("tid")) for e in doc["traceEvents"]
                   if e.get("ph") == "X" and e.get("cat") != "tb_reduce.summary")
    for track, n in summaries.items():
        assert n <= resolution + 2 * kept[track], (track, n, kept[track])


# ---- auto with a resolution ---------------------------------------------------------------


def test_auto_with_the_screens_resolution_sends_a_screenful_of_the_big_trace(c: Client, big: Path) -> None:
    whole, whole_wire, _ = view(c, BIG_RUN, level="auto")
    fit, fit_wire, _ = view(c, BIG_RUN, level="auto", resolution=SCREEN)
    a, b = whole["tb_reduce"], fit["tb_reduce"]
    assert a["input"]["events"] > pipeline.BUDGET_EVENTS  # auto cannot keep it whole
    # the budget still picks the level (its args and keep rules); the screen sets the buckets
    assert a["level"] == b["level"] == 1 and a["resolution"] == RESOLUTION[1] and b["resolution"] == SCREEN
    t0, t1 = b["window_us"]
    assert b["window_us"] == a["window_us"] and b["bucket_us"] == pytest.approx((t1 - t0) / SCREEN)
    # a summary per bucket and track at most (and at a kept slice's ends): what a screen can show
    per_track = summaries_per_track(fit)
    assert per_track
    assert_a_screenful(fit, SCREEN)
    assert b["output"]["summaries"] == sum(per_track.values())
    # far less to send, parse and hold than auto's whole level: ~20x on a recording made on an idle
    # machine, less where a loaded one stretched more slices past a bucket (kept whole, G1): one made
    # beside two other test workers gave 20.9x fewer events, 20.8x less JSON, 15.3x less on the wire
    assert b["output"]["events"] * 10 < a["output"]["events"]
    json_a = body_json(get(c, "stats", run=BIG_RUN, host=HOST, args=0, level="auto"))["output"]["json_bytes"]
    json_b = body_json(get(c, "stats", run=BIG_RUN, host=HOST, args=0, level="auto",
                           resolution=SCREEN))["output"]["json_bytes"]
    assert json_b * 10 < json_a and fit_wire * 10 < whole_wire
    print(f"\nauto: {a['output']['events']:,} events, {json_a:,} B JSON, {whole_wire:,} B gzip; "
          f"auto + resolution={SCREEN}: {b['output']['events']:,} events, {json_b:,} B JSON, {fit_wire:,} B gzip")


def test_a_zoomed_window_asks_the_same_resolution_and_gets_finer_buckets(c: Client, big: Path) -> None:
    whole, _, _ = view(c, BIG_RUN, level="auto", resolution=SCREEN)
    t0, t1 = whole["tb_reduce"]["window_us"]
    w0, w1 = t0 + (t1 - t0) * 0.4, t0 + (t1 - t0) * 0.45
    zoomed, _, _ = view(c, BIG_RUN, level="auto", resolution=SCREEN, start_us=w0, end_us=w1)
    z = zoomed["tb_reduce"]
    assert z["window_us"] == [pytest.approx(w0), pytest.approx(w1)]
    if z["level"]:  # the window may be small enough for auto to keep it whole (level 0 ignores resolution)
        assert z["resolution"] == SCREEN and z["bucket_us"] == pytest.approx((w1 - w0) / SCREEN)
        assert_a_screenful(zoomed, SCREEN)
    else:
        assert z["resolution"] is None and z["bucket_us"] is None and z["output"]["summaries"] == 0


def test_a_resolution_past_the_levels_own_count_changes_nothing_but_the_cache_key(c: Client, big: Path) -> None:
    plain, _, plain_headers = view(c, BIG_RUN, level="auto")
    coarse, _, coarse_headers = view(c, BIG_RUN, level="auto", resolution=MAX_RESOLUTION)
    assert coarse["tb_reduce"]["resolution"] == plain["tb_reduce"]["resolution"] == RESOLUTION[1]
    assert coarse["traceEvents"] == plain["traceEvents"]
    assert coarse_headers["ETag"] != plain_headers["ETag"]


def test_stats_and_etag_follow_the_resolution(c: Client, big: Path) -> None:
    _, _, h1400 = view(c, BIG_RUN, level="auto", resolution=SCREEN)
    _, _, h2800 = view(c, BIG_RUN, level="auto", resolution=2 * SCREEN)
    assert h1400["ETag"] != h2800["ETag"]
    again = get(c, "trace", gz=True, headers={"If-None-Match": h1400["ETag"]}, run=BIG_RUN, host=HOST, args=0,
                level="auto", resolution=SCREEN)
    assert again.status_code == 304 and again.get_data() == b""
    other = get(c, "trace", gz=True, headers={"If-None-Match": h1400["ETag"]}, run=BIG_RUN, host=HOST, args=0,
                level="auto", resolution=2 * SCREEN)
    assert other.status_code == 200
    stats = body_json(get(c, "stats", run=BIG_RUN, host=HOST, args=0, level="auto", resolution=SCREEN))
    assert stats["level"] == 1 and stats["resolution"] == SCREEN and stats["cached"] is True  # the trace's entry


# ---- explicit levels: min(resolution, the level's own count) -----------------------------------


@pytest.mark.parametrize("level", [1, 2, 3])
def test_an_explicit_level_with_a_resolution_is_cut_into_that_many_buckets(c: Client, big: Path, level: int) -> None:
    plain, plain_wire, plain_headers = view(c, BIG_RUN, level=level)
    fit, fit_wire, fit_headers = view(c, BIG_RUN, level=level, resolution=SCREEN)
    a, b = plain["tb_reduce"], fit["tb_reduce"]
    # the level stays the level (its args and keep rules); the screen sets the buckets
    assert a["level"] == b["level"] == level and a["resolution"] == RESOLUTION[level] and b["resolution"] == SCREEN
    assert "auto" not in b and b["window_us"] == a["window_us"]
    t0, t1 = b["window_us"]
    assert b["bucket_us"] == pytest.approx((t1 - t0) / SCREEN)
    per_track = summaries_per_track(fit)
    assert per_track
    assert_a_screenful(fit, SCREEN)
    assert b["output"]["summaries"] == sum(per_track.values())
    # smaller to send, and its own ETag
    assert b["output"]["events"] < a["output"]["events"] and fit_wire < plain_wire
    assert fit_headers["ETag"] != plain_headers["ETag"]
    stats = body_json(get(c, "stats", run=BIG_RUN, host=HOST, args=0, level=level, resolution=SCREEN))
    assert stats["level"] == level and stats["resolution"] == SCREEN and stats["cached"] is True  # the trace's entry
    again = get(c, "trace", gz=True, headers={"If-None-Match": fit_headers["ETag"]}, run=BIG_RUN, host=HOST,
                args=0, level=level, resolution=SCREEN)
    assert again.status_code == 304 and again.get_data() == b""
    print(f"\nlevel {level}: {a['output']['events']:,} events, {plain_wire:,} B gzip; + resolution={SCREEN}: "
          f"{b['output']['events']:,} events, {fit_wire:,} B gzip")


def test_the_default_level_with_a_resolution_keeps_level_2s_args_rules(c: Client, big: Path) -> None:
    """With args (no `args=0`): level 2 cuts long args; a resolution changes the buckets, not that."""
    plain = body_json(get(c, "trace", gz=True, run=BIG_RUN, host=HOST, level=2))
    fit = body_json(get(c, "trace", gz=True, run=BIG_RUN, host=HOST, level=2, resolution=SCREEN))
    assert fit["tb_reduce"]["resolution"] == SCREEN and "args" not in fit["tb_reduce"]
    with_args = [e for e in fit["traceEvents"] if e.get("ph") == "X" and e.get("args")
                 and e.get("cat") != "tb_reduce.summary"]
    assert with_args  # kept events keep (level 2's cut) args
    plain_args = {(e.get("pid"), e.get("tid"), e.get("ts"), e.get("name")): e["args"] for e in plain["traceEvents"]
                  if e.get("ph") == "X" and e.get("cat") != "tb_reduce.summary" and e.get("args")}
    # each kept event is written as level 2 writes it
    same = [e for e in with_args if (e.get("pid"), e.get("tid"), e.get("ts"), e.get("name")) in plain_args]
    assert same and all(plain_args[(e.get("pid"), e.get("tid"), e.get("ts"), e.get("name"))] == e["args"]
                        for e in same)


@pytest.mark.parametrize("run, level, resolution", [
    (BIG_RUN, "4", SCREEN),  # 1,400 ≥ level 4's 1,000: the level's own
    (BIG_RUN, "2", RESOLUTION[2]),  # exactly the level's count
    (BIG_RUN, "2", MAX_RESOLUTION),
    (DEMO_RUN, "0", SCREEN),  # level 0: lossless, no buckets
    (DEMO_RUN, "0", 1),
])
def test_a_resolution_no_fewer_than_the_levels_count_or_at_level_0_changes_nothing(
        c: Client, big: Path, run: str, level: str, resolution: int) -> None:
    r_plain = get(c, "trace", gz=True, run=run, host=HOST, args=0, level=level)
    r_res = get(c, "trace", gz=True, run=run, host=HOST, args=0, level=level, resolution=resolution)
    assert r_plain.status_code == r_res.status_code == 200
    # the same bytes, the same ETag, the same cache entry
    assert r_res.get_data() == r_plain.get_data() and r_res.headers["ETag"] == r_plain.headers["ETag"]
    meta = body_json(r_res)["tb_reduce"]
    assert meta["level"] == int(level) and meta["resolution"] == RESOLUTION.get(int(level))
    stats = body_json(get(c, "stats", run=run, host=HOST, args=0, level=level, resolution=resolution))
    assert stats["level"] == int(level) and stats["resolution"] == RESOLUTION.get(int(level))


@pytest.mark.parametrize("level", ["0", "3"])
def test_a_download_without_a_resolution_is_the_levels_own(c: Client, level: str) -> None:
    """What the dashboard's download link asks (it never carries the screen's resolution):
    the level's own bucket count, with its args, as the command line writes it."""
    download = get(c, "trace", run=DEMO_RUN, host=HOST, level=level, download=1)
    assert download.status_code == 200 and "attachment" in download.headers["Content-Disposition"]
    meta = json.loads(gzip.decompress(download.get_data()))["tb_reduce"]
    assert meta["level"] == int(level) and meta["resolution"] == RESOLUTION.get(int(level))


def test_on_the_demo_trace_an_explicit_level_takes_the_resolution_too(c: Client) -> None:
    plain, plain_wire, _ = view(c, DEMO_RUN, level="3")
    fit, fit_wire, _ = view(c, DEMO_RUN, level="3", resolution=256)
    assert plain["tb_reduce"]["resolution"] == RESOLUTION[3] and fit["tb_reduce"]["resolution"] == 256
    assert max(summaries_per_track(fit).values(), default=0) <= 256
    assert fit["tb_reduce"]["output"]["events"] <= plain["tb_reduce"]["output"]["events"] and fit_wire <= plain_wire


# ---- the demo trace ---------------------------------------------------------------------------


def test_auto_keeps_the_small_demo_trace_whole_whatever_the_resolution(c: Client) -> None:
    plain, _, _ = view(c, DEMO_RUN, level="auto")
    fit, _, _ = view(c, DEMO_RUN, level="auto", resolution=256)
    assert plain["tb_reduce"]["level"] == fit["tb_reduce"]["level"] == 0  # lossless: no buckets to size
    assert fit["tb_reduce"]["resolution"] is None and fit["traceEvents"] == plain["traceEvents"]


def test_on_the_demo_trace_past_a_lowered_budget_the_resolution_sets_the_buckets(
        logdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "BUDGET_EVENTS", 1_000)  # the demo's 5 k events are then past it
    c = client(make_plugin(logdir, tmp_path / "cache"))
    plain, plain_wire, _ = view(c, DEMO_RUN, level="auto")
    fit, fit_wire, _ = view(c, DEMO_RUN, level="auto", resolution=256)
    a, b = plain["tb_reduce"], fit["tb_reduce"]
    assert a["level"] == b["level"] >= 1 and a["resolution"] == RESOLUTION[a["level"]] and b["resolution"] == 256
    assert max(summaries_per_track(fit).values()) <= 256
    assert b["output"]["events"] < a["output"]["events"] and fit_wire < plain_wire


# ---- hostile values ---------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["0", "-1", "+5", "1.5", "1e3", "0x10", " 12", "12 ", "nan", "inf", "abc",
                                 str(MAX_RESOLUTION + 1), "9" * 40, "\uff11\uff12", "\u00b2", "1_000",
                                 "12\x00", "\n7", "1" * 5000])
@pytest.mark.parametrize("route", ["trace", "stats"])
@pytest.mark.parametrize("level", ["auto", "0", "2", "4"])
def test_a_hostile_resolution_is_a_one_line_400(c: Client, route: str, level: str, raw: str) -> None:
    message = assert_json_error(get(c, route, run=DEMO_RUN, host=HOST, level=level, resolution=raw), 400)
    assert "resolution" in message and len(message) < 200


def test_the_bounds_themselves_are_taken(c: Client) -> None:
    for level in ("auto", "0", "2"):
        for raw in ("1", "0256", str(MAX_RESOLUTION)):
            r = get(c, "stats", run=DEMO_RUN, host=HOST, level=level, resolution=raw)
            assert r.status_code == 200, r.get_data()[:300]
