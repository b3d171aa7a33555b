"""The dashboard's multi-host view in a real headless Chromium against a real TensorBoard
process serving the corpus's eight DLRM ranks as one run: the host picker's "All" merges
them on one timeline, the status says how they were placed in time, a click on an event
shows that host's own event, the spread across hosts shows eight hosts per step, and a
link reopens the merged view. Screenshots land in `test-artifacts/`."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
from conftest import TESTS
from dashboard_support import CANVAS_PIXELS_JS, CHROMIUM, TensorBoardServer, save_shot, wait_loaded

from tests.multihost_support import write_many_hosts
from tests.plugin_support import CORPUS, JAX_SMALL, TORCH_SMALL

STEP_TRACES = TESTS / "fixtures" / "traces"
RANKS = sorted((CORPUS / "public" / "param").glob("*dlrm_kineto__worker*_step_12.*.pt.trace.json"))
PID_STRIDE = 2**32
MANY = 40  # over the 32 hosts a merged view draws in full: the others come as busy lanes
STRAGGLER = 3  # the generated job's rank that takes twice as long per step

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: install the Debian package `chromium` (CI does)", allow_module_level=True)
if len(RANKS) != 8:
    pytest.skip("the corpus's DLRM ranks are not here (CI has them)", allow_module_level=True)
pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("multihost")
    run = root / "logdir" / "dlrm"
    run.mkdir(parents=True)
    for p in RANKS:
        shutil.copy(p, run / p.name)
    write_many_hosts(root / "logdir" / "many", MANY, straggler=STRAGGLER)
    job = root / "logdir" / "job"  # real profiles of different step ranges, one without steps, one cut short
    job.mkdir()
    shutil.copy(STEP_TRACES / "torch_stalled_step.pt.trace.json.gz", job / "a_stalled.pt.trace.json.gz")
    shutil.copy(next(TORCH_SMALL.glob("*.pt.trace.json")), job / "b_cnn.pt.trace.json")
    shutil.copy(JAX_SMALL / "vm.trace.json.gz", job / "c_jax.trace.json.gz")
    evs = [{"ph": "X", "name": f"work{i}", "pid": 1, "tid": 1, "ts": 10.0 * i, "dur": 5} for i in range(50)]
    (job / "d_nosteps.trace.json").write_text(json.dumps({"traceEvents": evs}))
    (job / "e_cut.pt.trace.json.gz").write_bytes(gzip.compress(RANKS[0].read_bytes())[:4000])
    tb = TensorBoardServer(root / "logdir", root / "cache")
    try:
        yield tb
    finally:
        tb.stop()


def hosts_of(server, run: str = "dlrm") -> list[str]:
    status, runs = server.get_json("runs")
    assert status == 200
    return [h["host"] for h in next(r for r in runs if r["run"] == run)["hosts"]]


def rank_of(pid: object, hosts: list[str]) -> int:
    """A merged pid's host rank: r·2^32 + pid, or "host/pid" for a string pid (merge.py's rule)."""
    if isinstance(pid, str):
        return next(k for k, h in enumerate(hosts) if pid.startswith(f"{h}/"))
    return int(pid) // PID_STRIDE


def wait_merged(page, n: int) -> None:
    page.wait_for_function("n => document.querySelector('[data-testid=timeline]').dataset.hosts === String(n)", arg=n,
                           timeout=60000)
    wait_loaded(page, timeout=60000)


def choose_all(page) -> None:
    page.click("[data-testid=hosts-toggle]")
    page.click("[data-testid=hosts-all]")
    page.keyboard.press("Escape")


def test_all_hosts_are_merged_on_one_timeline_with_their_alignment_and_spread(page, server) -> None:
    hosts = hosts_of(server)
    page.goto(server.plugin_url(f"view?{urlencode({'run': 'dlrm', 'host': hosts[0]})}"))
    wait_loaded(page, timeout=60000)
    assert page.evaluate("() => window.tbReduceDashboard.data.model.tb.merged") is None  # one host: as before
    choose_all(page)
    wait_merged(page, 8)
    # the timeline holds the processes of every rank, each named by its host
    procs = page.evaluate("""() => window.tbReduceDashboard.timeline.model.processes
      .map((p) => ({pid: p.pid, label: p.label}))""")
    ranks = [rank_of(p["pid"], hosts) for p in procs]
    assert set(ranks) == set(range(8))
    for p, rank in zip(procs, ranks):
        assert p["label"].startswith(hosts[rank] + " · "), p
    page.wait_for_timeout(150)
    pixels = page.evaluate(CANVAS_PIXELS_JS)
    assert pixels["ink"] > 0.02 * pixels["total"] and pixels["colours"] > 8, pixels
    status = page.inner_text("[data-testid=status]")
    assert "8 hosts merged, placed by real time" in status, status
    assert page.input_value("[data-testid=host-select]") == ""
    assert "8 hosts, merged" in page.inner_text("[data-testid=host-select] option[data-merged]")
    # the spread across hosts, where the waveforms stand for one host
    page.wait_for_function("() => window.tbReduceDashboard.spread.debug().state === 'ready'", timeout=60000)
    spread = page.evaluate("() => window.tbReduceDashboard.spread.debug()")
    assert [h["host"] for h in spread["hosts"]] == hosts and all(h["steps"] == 1 for h in spread["hosts"])
    assert [s["hosts"] for s in spread["steps"]] == [8]
    step = spread["steps"][0]
    assert step["min"] < step["median"] < step["max"] and step["straggler"] == hosts[step["values"].index(step["max"])]
    assert page.is_hidden("[data-testid=waveforms]") and page.is_visible("[data-testid=spread]")
    assert page.inner_text("[data-testid=spread-facts]").startswith("1 step · 8 of 8 hosts")
    where = page.evaluate("() => window.tbReduceDashboard.spread.locate(0)")
    box = page.locator("[data-testid=spread-canvas]").bounding_box()
    page.mouse.move(box["x"] + where["x"], box["y"] + where["y"])
    tip = page.locator(".tbr-spread-tooltip")
    tip.wait_for(state="visible")
    assert f"straggler: {step['straggler']}" in tip.inner_text()
    save_shot(page, "multihost-merged-8-ranks")
    # the link reopens the merged view
    link = page.get_attribute("[data-testid=share-link]", "href")
    q = parse_qs(urlparse(link).query)
    assert q["hosts"] == [",".join(hosts)] and "host" not in q
    page.goto(link)
    wait_merged(page, 8)
    assert "8 hosts merged" in page.inner_text("[data-testid=status]")


def test_a_click_on_a_merged_event_shows_that_hosts_own_event(page, server) -> None:
    hosts = hosts_of(server)
    page.goto(server.plugin_url(f"view?{urlencode({'run': 'dlrm', 'hosts': ','.join(hosts)})}"))
    wait_merged(page, 8)
    pick = slice_of_rank(page, 5)  # the widest slice of rank 5 drawn as itself, scrolled into view
    where = pick
    offset = page.evaluate("() => window.tbReduceDashboard.data.model.tb.hosts[5].offset_us")
    with page.expect_response(lambda r: "/data/plugin/tb_reduce/event?" in r.url) as response:
        page.mouse.click(where["x"], where["y"])
    asked = parse_qs(urlparse(response.value.url).query)
    assert asked["host"] == [hosts[5]]
    event = response.value.json()
    # the host's own event: its name, its own pid and its own clock
    assert event["name"] == pick["name"]
    assert event["pid"] == pick["pid"] % PID_STRIDE
    assert float(event["ts"]) == pytest.approx(pick["ts"] - offset, abs=1e-3)
    details = page.locator("[data-testid=details]")
    details.get_by_text("Arguments").wait_for()
    assert details.get_attribute("data-host") == hosts[5]
    assert hosts[5] in details.inner_text()
    save_shot(page, "multihost-event-details")


def test_the_host_picker_goes_back_to_one_host_and_none_waits(page, server) -> None:
    hosts = hosts_of(server)
    page.goto(server.plugin_url(f"view?{urlencode({'run': 'dlrm', 'hosts': ','.join(hosts[:3])})}"))
    wait_merged(page, 3)
    assert page.inner_text("[data-testid=hosts-toggle]") == "Hosts: 3 of 8"
    page.click("[data-testid=hosts-toggle]")
    page.click("[data-testid=hosts-none]")
    assert "No host chosen" in page.inner_text("[data-testid=status]")
    # keyboard: Tab from "None" reaches the first box, Space checks it: one host, the single-host view
    page.keyboard.press("Tab")
    page.keyboard.press("Space")
    page.keyboard.press("Escape")
    page.wait_for_function("h => document.querySelector('[data-testid=host-select]').value === h", arg=hosts[0])
    wait_loaded(page, timeout=60000)
    assert page.evaluate("() => !window.tbReduceDashboard.data.model.tb.merged")
    assert page.is_hidden("[data-testid=spread]")
    link = page.get_attribute("[data-testid=share-link]", "href")
    assert parse_qs(urlparse(link).query)["host"] == [hosts[0]]


def slice_of_rank(page, rank: int) -> dict:
    """The widest slice of host `rank` drawn as itself, scrolled into view: where to click it."""
    pick = page.evaluate("""async (rank) => {
      const {FLAG_SUMMARY} = await import(new URL('model.js', document.querySelector('link[data-tbr-css]').href).href);
      const tl = window.tbReduceDashboard.timeline, m = tl.model, s = m.slices;
      let best = -1;
      for (let i = 0; i < s.count; i += 1) {
        const track = m.tracks[s.rowTrack[s.row[i]]];
        if (Math.floor(track.pid / 2 ** 32) !== rank || (s.flags[i] & FLAG_SUMMARY)) continue;
        if (best < 0 || s.dur[i] > s.dur[best]) best = i;
      }
      const track = m.tracks[s.rowTrack[s.row[best]]];
      const ev = {ph: 'X', ts: s.ts[best] + m.origin, dur: s.dur[best], pid: track.pid, tid: track.tid,
        name: m.names[s.name[best]]};
      tl.reveal(ev);
      return {i: best, track: s.rowTrack[s.row[best]], ...ev};
    }""", rank)
    page.wait_for_timeout(150)
    where = page.evaluate("""(p) => {
      const tl = window.tbReduceDashboard.timeline, m = tl.model, s = m.slices;
      const item = tl.rowItem('track', p.track);
      const scale = tl.plotWidth() / (tl.view[1] - tl.view[0]), vs = tl.view[0] - m.origin;
      const xa = Math.max(tl.gutter, tl.gutter + (s.ts[p.i] - vs) * scale);
      const xb = Math.min(tl.width, tl.gutter + (s.ts[p.i] + s.dur[p.i] - vs) * scale);
      const rect = tl.canvas.getBoundingClientRect();
      return {x: rect.left + (xa + xb) / 2, y: rect.top + 26 + item.y - tl.scrollY + s.depth[p.i] * 18 + 9};
    }""", pick)
    return {**pick, "x": where["x"], "y": where["y"]}


def test_past_32_hosts_each_comes_as_a_lane_and_a_click_expands_it(page, server) -> None:
    hosts = hosts_of(server, "many")
    assert len(hosts) == MANY
    page.goto(server.plugin_url(f"view?{urlencode({'run': 'many', 'hosts': ','.join(hosts)})}"))
    wait_merged(page, MANY)
    tb = page.evaluate("() => window.tbReduceDashboard.data.model.tb")
    assert tb["lanes"]["lanes"] == MANY and all(h["lane"] for h in tb["hosts"])
    labels = page.evaluate("() => window.tbReduceDashboard.timeline.model.processes.map((p) => p.label)")
    assert len(labels) == MANY and all(" · busy (" in label for label in labels)
    assert f"{MANY} shown as busy lanes" in page.inner_text("[data-testid=status]")
    # the spread: the generated job's straggler is named on every step
    page.wait_for_function("() => window.tbReduceDashboard.spread.debug().state === 'ready'", timeout=60000)
    spread = page.evaluate("() => window.tbReduceDashboard.spread.debug()")
    assert spread["steps"] and all(s["hosts"] == MANY and s["straggler"] == hosts[STRAGGLER] for s in spread["steps"])
    assert all(s["max"] == pytest.approx(2 * s["median"], rel=1e-3) for s in spread["steps"])
    save_shot(page, "multihost-40-lanes")
    lane = slice_of_rank(page, STRAGGLER)
    assert lane["name"] == "busy"
    with page.expect_request(lambda r: "/data/plugin/tb_reduce/trace?" in r.url and "expand=" in r.url) as asked:
        page.mouse.click(lane["x"], lane["y"])
    assert parse_qs(urlparse(asked.value.url).query)["expand"] == [hosts[STRAGGLER]]
    page.wait_for_function("h => { const d = window.tbReduceDashboard.data; return d && d.model.tb.hosts"
                           ".some((e) => e.host === h && !e.lane); }", arg=hosts[STRAGGLER], timeout=60000)
    wait_loaded(page, timeout=60000)
    labels = page.evaluate("() => window.tbReduceDashboard.timeline.model.processes.map((p) => p.label)")
    own = [label for label in labels if label.startswith(f"{hosts[STRAGGLER]} · ")]
    assert own and not any("busy (" in label for label in own)
    assert parse_qs(urlparse(page.get_attribute("[data-testid=share-link]", "href")).query)["expand"] == [hosts[STRAGGLER]]
    save_shot(page, "multihost-40-lanes-one-expanded")


def test_hosts_that_cannot_be_read_or_have_no_steps_are_named_with_their_reasons(page, server) -> None:
    hosts = hosts_of(server, "job")
    page.goto(server.plugin_url(f"view?{urlencode({'run': 'job', 'hosts': ','.join(hosts)})}"))
    wait_merged(page, len(hosts))
    status = page.inner_text("[data-testid=status]")
    assert "e_cut could not be read" in status, status
    page.wait_for_function("() => window.tbReduceDashboard.spread.debug().state === 'ready'", timeout=60000)
    notes = {li.get_attribute("data-host"): li.inner_text() for li in page.locator("[data-testid=spread-notes] li").all()}
    assert set(notes) == {"d_nosteps", "e_cut"}
    assert "no step markers" in notes["d_nosteps"] and notes["e_cut"].startswith("e_cut: ")
    spread = page.evaluate("() => window.tbReduceDashboard.spread.debug()")
    stalled = next(s for s in spread["steps"] if s["step"] == 5)
    assert stalled["straggler"] == "a_stalled" and stalled["hosts"] == 3
    assert page.inner_text("[data-testid=spread-facts]").endswith("3 of 5 hosts have steps")
    save_shot(page, "multihost-errors-and-spread")
