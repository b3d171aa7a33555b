"""Each host's clock is read where its profiler writes it, and hosts are aligned on it
in whole nanoseconds."""

from __future__ import annotations

from tb_reduce_plugin.multihost.clock import align, host_clock
from tb_reduce_plugin.multihost.selection import pick_hosts


def _xspace(start_ns: object) -> dict:
    return {"xspace": {"planes": [{"name": "/host:CPU", "stats": {}},
                                  {"name": "Task Environment", "stats": {"profile_start_time": start_ns}}]}}


def test_an_xspace_is_placed_by_its_task_environments_profile_start_time() -> None:
    c = host_clock(_xspace(1_795_977_900_307_178_010), 12.5, 900.0)
    assert c.origin_ns == 1_795_977_900_307_178_010 and c.source == "XSpace profile_start_time"


def test_a_kineto_trace_is_placed_by_its_base_time_and_an_old_one_by_its_epoch_timestamps() -> None:
    assert host_clock({"baseTimeNanoseconds": 1_790_857_026_000_000_000}, 5.1e12, 5.2e12).origin_ns == 1_790_857_026_000_000_000
    old = host_clock({"schemaVersion": 1}, 1_694_128_201_426_556.0, 1_694_128_201_442_995.0)
    assert old.origin_ns == 0 and old.source == "timestamps since the epoch"


def test_a_trace_without_a_known_origin_says_so_and_damaged_origins_are_not_believed() -> None:
    for meta in ({}, {"baseTimeNanoseconds": "soon"}, {"baseTimeNanoseconds": -5}, {"baseTimeNanoseconds": True},
                 _xspace("x"), _xspace(None), {"xspace": "planes"}, None, [1, 2]):
        assert host_clock(meta, 10.0, 20.0).origin_ns is None, meta


def test_hosts_with_origins_line_up_on_the_wall_clock_to_the_nanosecond() -> None:
    # two hosts 28 s apart in when they started tracing, their first events 1.000_001 ms apart in real time
    a = host_clock(_xspace(1_700_000_000_000_000_000), 5.0, 100.0)
    b = host_clock(_xspace(1_699_999_972_000_000_000), 28_000_006.001, 28_000_100.0)
    al = align([a, b])
    assert al.absolute and al.epoch_ns == 1_700_000_000_000_005_000
    # merged ts = local ts + offset: a's first event at 0, b's at 1.001 µs
    assert 5.0 + al.offsets_us[0] == 0.0
    assert abs((28_000_006.001 + al.offsets_us[1]) - 1.001) < 1e-6


def test_hosts_without_origins_are_lined_up_by_their_first_events() -> None:
    al = align([host_clock({}, 50.0, 60.0), host_clock({}, 7.0, 9.0)])
    assert not al.absolute and al.epoch_ns is None and al.offsets_us == (-50.0, -7.0)


def test_a_view_names_hosts_in_the_runs_order_and_all_leaves_out_jaxs_capped_exports() -> None:
    listed = ["h0", "h1", "h2", "h0.trace.json.gz", "a,b"]
    assert pick_hosts("*", listed, exports=["h0.trace.json.gz"]) == (["h0", "h1", "h2", "a,b"], [])
    assert pick_hosts("h2,h0,h2", listed) == (["h0", "h2"], [])
    assert pick_hosts("a,b", listed) == (["a,b"], [])
    assert pick_hosts("h1,nope", listed) == (["h1"], ["nope"])
