"""The plugin keeps its memory promise and its computation bound, on real traces behind
TensorBoard's own WSGI app: what it charges comes back, a trace too big for the budget is
a clear 413 and leaves nothing charged, and while the computation slots are taken the
cheap routes still answer and the rest are told when to come back."""

from __future__ import annotations

import gc
import gzip
import json
import logging
import threading
from pathlib import Path

import pytest
from plugin_support import (
    JAX_HOST,
    JAX_RUN,
    TORCH_HOST,
    TORCH_RUN,
    assert_json_error,
    client,
    flags,
    get,
    make_logdir,
    make_plugin,
)
from tensorboard.plugins import base_plugin

from tb_reduce_plugin.reduce.pipeline import reduction_bytes
from tb_reduce_plugin.serve import service as service_module
from tb_reduce_plugin.serve.plugin import TraceReduceLoader, TraceReducePlugin


def plugin_with(tmp_path: Path, *argv: str) -> TraceReducePlugin:
    return make_plugin(make_logdir(tmp_path), tmp_path / "cache", *argv)


def held_by_indexes(plugin: TraceReducePlugin) -> int:
    service = plugin.service
    total = 0
    for run, host in ((TORCH_RUN, TORCH_HOST), (JAX_RUN, JAX_HOST)):
        idx = service.warm_index(service.trace_file(run, host))
        if idx is not None:
            total += idx.account.total
    return total


def test_after_requests_only_the_parsed_indexes_stay_charged_and_reclaiming_frees_them(tmp_path: Path) -> None:
    plugin = plugin_with(tmp_path)
    c = client(plugin)
    for run, host in ((TORCH_RUN, TORCH_HOST), (JAX_RUN, JAX_HOST)):
        for level in (0, 2, 4):
            assert get(c, "trace", gz=True, run=run, host=host, level=level).status_code == 200
    gc.collect()
    budget = plugin.service.budget
    assert budget.used == held_by_indexes(plugin) > 0
    # An index is no reference cycle: once no request uses it (nor the index store's writer,
    # which holds one only while it writes it), the cache can let it go.
    plugin.service.wait_saved()
    plugin.service.indexes.reclaim(budget.limit)
    gc.collect()
    assert len(plugin.service.indexes) == 0 and budget.used == 0


def test_a_trace_too_big_for_the_budget_is_a_413_that_leaves_nothing_charged(tmp_path: Path) -> None:
    plugin = plugin_with(tmp_path, "--tb_reduce_memory_mb", "0.5")
    c = client(plugin)
    for route in ("trace", "stats", "event"):
        params = {"i": 0} if route == "event" else {"level": 2}
        message = assert_json_error(get(c, route, run=TORCH_RUN, host=TORCH_HOST, **params), 413)
        assert "--tb_reduce_memory_mb" in message and "vm_12922" in message
    gc.collect()
    assert plugin.service.budget.used == 0 and plugin.service.budget.refused == 1  # read once, then remembered
    assert len(plugin.service.indexes) == 0  # nothing over budget is kept


def test_an_index_that_fits_serves_events_even_when_its_reductions_do_not(tmp_path: Path) -> None:
    """A plan holds ~100 bytes an event at its peak: a budget can hold the parsed trace and
    not a reduction of it. The event route needs only the index."""
    probe = plugin_with(tmp_path / "probe")
    assert get(client(probe), "event", run=TORCH_RUN, host=TORCH_HOST, i=0).status_code == 200
    parse_peak, held = probe.service.budget.peak, held_by_indexes(probe)
    idx = probe.service.warm_index(probe.service.trace_file(TORCH_RUN, TORCH_HOST))
    limit = int(parse_peak * 1.05)
    assert held + reduction_bytes(idx, 0, with_input_index=True) > limit  # what makes the trace a 413
    plugin = plugin_with(tmp_path / "tight", "--tb_reduce_memory_mb", str(limit / 2**20))
    c = client(plugin)
    assert get(c, "event", run=TORCH_RUN, host=TORCH_HOST, i=0).status_code == 200
    assert "planning" in assert_json_error(get(c, "trace", run=TORCH_RUN, host=TORCH_HOST, level=0), 413)
    assert get(c, "event", run=TORCH_RUN, host=TORCH_HOST, i=5).status_code == 200


def test_while_every_slot_is_taken_cheap_routes_answer_and_new_work_gets_503_with_retry_after(
        tmp_path: Path) -> None:
    plugin = plugin_with(tmp_path)
    service = plugin.service
    service.gate.workers, service.gate.max_waiting = 1, 0
    c = client(plugin)
    cached = get(c, "trace", gz=True, run=TORCH_RUN, host=TORCH_HOST, level=2)
    assert cached.status_code == 200
    service.wait_saved()  # the gzip's text kept after the first view: events then cost a chunk each
    with service.gate.slot():  # a long computation holds the only slot
        assert get(c, "runs").status_code == 200
        assert get(c, "index.js").status_code == 200
        again = get(c, "trace", gz=True, run=TORCH_RUN, host=TORCH_HOST, level=2)
        assert again.status_code == 200 and again.get_data() == cached.get_data()  # from the cache
        assert get(c, "stats", run=TORCH_RUN, host=TORCH_HOST, level=2).status_code == 200
        assert get(c, "event", run=TORCH_RUN, host=TORCH_HOST, i=3).status_code == 200  # warm index
        busy = get(c, "trace", run=TORCH_RUN, host=TORCH_HOST, level=3)
        assert "busy" in assert_json_error(busy, 503) and int(busy.headers["Retry-After"]) >= 1
        cold = get(c, "event", run=JAX_RUN, host=JAX_HOST, i=0)  # needs a parse: a computation
        assert_json_error(cold, 503)
    assert get(c, "trace", run=TORCH_RUN, host=TORCH_HOST, level=3).status_code == 200
    assert service.gate.turned_away == 2


def test_identical_requests_share_one_computation_without_taking_places_in_line(tmp_path: Path) -> None:
    """Requests for a view being computed wait for it, not for a slot: with one slot and no
    line at all, sixteen identical requests all get the one result."""
    plugin = plugin_with(tmp_path)
    service = plugin.service
    service.gate.workers, service.gate.max_waiting = 1, 0
    c = client(plugin)
    started, release = threading.Event(), threading.Event()
    real_index = service._index

    def slow_index(tf):  # type: ignore[no-untyped-def]
        started.set()
        assert release.wait(30)
        return real_index(tf)

    service._index = slow_index  # type: ignore[method-assign]
    bodies: list[bytes] = []
    statuses: list[int] = []
    lock = threading.Lock()

    def ask() -> None:
        resp = get(c, "trace", gz=True, run=TORCH_RUN, host=TORCH_HOST, level=1)
        with lock:
            statuses.append(resp.status_code)
            bodies.append(resp.get_data())

    first = threading.Thread(target=ask)
    first.start()
    assert started.wait(30)
    others = [threading.Thread(target=ask) for _ in range(15)]
    for t in others:
        t.start()
    # Whenever each arrives — while the first computes, or after — it is served without a
    # slot: it joins the flight in progress, or finds the result in the cache.
    release.set()
    for t in [first, *others]:
        t.join(60)
    assert statuses == [200] * 16 and len(set(bodies)) == 1
    assert json.loads(gzip.decompress(bodies[0]))["tb_reduce"]["level"] == 1
    assert service.gate.turned_away == 0


@pytest.mark.parametrize("flag", ["0", "-5", "nan", "inf", "lots"])
def test_a_nonsense_memory_flag_is_refused_when_tensorboard_starts(tmp_path: Path, flag: str,
                                                                   capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        flags(tmp_path, "--tb_reduce_memory_mb", flag)
    assert "tb_reduce_memory_mb" in capsys.readouterr().err


def test_flags_given_without_argparse_fall_back_to_defaults_when_they_make_no_sense(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    namespace = flags(tmp_path / "cache")
    namespace.tb_reduce_memory_mb = float("nan")
    with caplog.at_level(logging.WARNING):
        plugin = TraceReduceLoader().load(base_plugin.TBContext(logdir=str(make_logdir(tmp_path)), flags=namespace))
    assert plugin.service.budget.limit == 2048 * 2**20
    assert any("tb_reduce_memory_mb" in r.getMessage() for r in caplog.records)
    assert get(client(plugin), "trace", run=TORCH_RUN, host=TORCH_HOST, level=2).status_code == 200


def test_a_refused_file_is_refused_again_without_being_read_until_it_changes(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding out that a file is hostile can cost seconds of CPU; a storm of requests for it
    must not pay that each time. A new version of the file is read again."""
    logdir = make_logdir(tmp_path)
    bad = logdir / "torch" / "bad.pt.trace.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "ts": 1} {"ph": "X"}]}')  # no comma between events
    plugin = make_plugin(logdir, tmp_path / "cache")
    c = client(plugin)
    reads = []
    real = service_module.index_file
    monkeypatch.setattr(service_module, "index_file", lambda *a, **k: reads.append(1) or real(*a, **k))
    first = assert_json_error(get(c, "trace", run=TORCH_RUN, host="bad", level=2), 422)
    for route, params in (("trace", {"level": 3}), ("stats", {"level": 2}), ("event", {"i": 0})):
        assert assert_json_error(get(c, route, run=TORCH_RUN, host="bad", **params), 422) == first
    assert len(reads) == 1 and "bad.pt.trace.json" in first
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "ok", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}')
    assert get(c, "trace", run=TORCH_RUN, host="bad", level=2).status_code == 200 and len(reads) == 2
