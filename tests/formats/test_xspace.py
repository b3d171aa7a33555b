"""XSpace input: the schema, the vectorised event decoder, the mapping, bad files."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from conftest import TESTS

from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.formats.xspace import decode_event_columns
from tb_reduce_plugin.formats.xspace_schema import XEvent, XSpace, XSpaceIndexView
from tb_reduce_plugin.reduce.pipeline import event_json, index_file, reduce_to_bytes
from tests.jax_export_support import record_capped_jax_run
from tests.protobuf_wire import field, varint
from tests.xspace_oracle import convert, xevent_count

ROOT = TESTS.parent
CORPUS = ROOT.parent / "shared" / "corpus"
JAX_SMALL = CORPUS / "generated" / "jax_cpu_mlp_small"
CORRUPT = CORPUS / "public" / "xprof" / "xprof__convert__test_xplanes__tpu_inference_2@bfd424c8-CORRUPT.xplane.pb"
XSPACES = sorted(p for p in CORPUS.glob("*/*/*.xplane.pb") if "CORRUPT" not in p.name) if CORPUS.is_dir() else []
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"{CORPUS} is absent")


# ---------------------------------------------------------------- helpers (the encoder: protobuf_wire)


def decode(payloads: list[bytes]) -> dict[str, np.ndarray]:
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in payloads])]).astype(np.int64)
    buf = np.frombuffer(b"".join(payloads) + bytes(32), dtype=np.uint8)
    return decode_event_columns(buf, offsets[:-1], offsets[1:])


def write_space(tmp_path: Path, space, name: str = "h.xplane.pb") -> Path:
    path = tmp_path / name
    path.write_bytes(space.SerializeToString())
    return path


# ---------------------------------------------------------------- decoder


def test_fields_in_any_order_with_unknown_fields_and_extreme_values_decode_like_protobuf() -> None:
    stat = field(1, 7) + field(4, 3)
    payloads = [
        field(1, 5) + field(2, 1000) + field(3, 250),  # the usual order
        field(3, 9) + field(4, stat) + field(2, 77) + field(1, 6),  # reversed, a stat in the middle
        field(1, 2**62) + field(2, -5) + field(3, 2**63 - 1),  # long and negative varints
        field(1, 1) + varint(9 << 3 | 1) + bytes(8) + varint(10 << 3 | 5) + bytes(4) + field(11, b"xyz"),
        b"",  # every field at its default
        field(1, 3) + field(5, 12),  # num_occurrences instead of an offset
        field(1, 4) + field(1, 8),  # a repeated scalar: the last one wins
    ]
    got = decode(payloads)
    for k, raw in enumerate(payloads):
        ev = XEvent.FromString(raw)
        assert got["metadata_id"][k] == ev.metadata_id, k
        assert got["offset_ps"][k] == ev.offset_ps, k
        assert got["duration_ps"][k] == ev.duration_ps, k


def test_events_with_thousands_of_fields_beside_small_ones_decode_like_protobuf() -> None:
    """A round per field would make one giant event cost seconds; past a number of
    rounds the few events left are read whole by upb, with the same results."""
    stats = field(4, field(1, 2) + field(5, b"s")) * 5000
    payloads = [
        field(1, 5) + stats + field(1, 7) + field(2, -3) + stats + field(3, 9),  # the last metadata_id wins
        field(1, 1) + field(2, 10) + field(3, 20),
        field(3, 4) + field(2, b"wrong wire type: skipped") + stats + field(5, 12),
    ] * 3
    got = decode(payloads)
    for k, raw in enumerate(payloads):
        ev = XEvent.FromString(raw)
        assert (got["metadata_id"][k], got["offset_ps"][k], got["duration_ps"][k]) == (
            ev.metadata_id, ev.offset_ps, ev.duration_ps), k


def test_a_giant_event_with_a_broken_field_is_refused() -> None:
    payload = field(1, 5) + field(4, b"x") * 5000 + varint(4 << 3 | 2) + varint(50) + b"short"
    with pytest.raises(TraceError, match="corrupt XSpace"):
        decode([payload, field(1, 1)])


@pytest.mark.parametrize(
    "payload",
    [
        field(1, 5) + field(2, 1000)[:-1],  # cut inside a varint: runs into the next event
        field(1, 5) + varint(4 << 3 | 2) + varint(50) + b"short",  # a length past the end
        field(1, 5) + varint(6 << 3 | 3),  # a group start: not in this schema
        field(1, 5) + varint(6 << 3 | 7),  # no such wire type
        field(1, 5) + b"\x00",  # field number 0
    ],
    ids=["cut-varint", "length-overrun", "group", "wire-type-7", "field-0"],
)
def test_corrupt_event_bytes_raise_instead_of_reading_past_the_event(payload: bytes) -> None:
    with pytest.raises(TraceError) as err:
        decode([payload, field(1, 1) + field(2, 0x7F7F)])
    assert "corrupt XSpace" in str(err.value)


@needs_corpus
@pytest.mark.parametrize("path", XSPACES, ids=[p.name for p in XSPACES])
def test_the_vectorised_decoder_agrees_with_protobuf_on_every_event_of_real_profiles(path: Path) -> None:
    data = path.read_bytes()
    view, full = XSpaceIndexView.FromString(data), XSpace.FromString(data)
    checked = 0
    for vp, fp in zip(view.planes, full.planes):
        for vl, fl in zip(vp.lines, fp.lines):
            if not len(fl.events):
                continue
            got = decode(list(vl.events))
            want = np.array([(e.metadata_id, e.offset_ps, e.duration_ps) for e in fl.events])
            assert (got["metadata_id"] == want[:, 0]).all()
            assert (got["offset_ps"] == want[:, 1]).all()
            assert (got["duration_ps"] == want[:, 2]).all()
            checked += len(fl.events)
    assert checked > 1000


# ---------------------------------------------------------------- mapping


def _events(doc: dict) -> list[dict]:
    return doc["traceEvents"] if isinstance(doc, dict) else doc


@needs_corpus
@pytest.mark.parametrize("path", XSPACES, ids=[p.name for p in XSPACES])
def test_level_0_is_the_whole_conversion_args_included(path: Path) -> None:
    """Ours (vectorised) and the oracle's (a protobuf attribute walk) are the same events."""
    ours = json.loads(reduce_to_bytes(path, level=0))
    want = convert(path)
    assert {k: v for k, v in ours.items() if k != "tb_reduce"} == json.loads(json.dumps(want))
    assert ours["tb_reduce"]["input"]["events"] == len(want["traceEvents"])
    assert ours["tb_reduce"]["input"]["format"] == "xspace"
    assert sum(e["ph"] in "XC" for e in _events(ours)) == xevent_count(path)


def _by_identity(events: list[dict]) -> Counter:
    """X events keyed by process name, thread name, name, ts and dur in ns."""
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    return Counter(
        (procs[e["pid"]], threads[(e["pid"], e["tid"])], e["name"], round(e["ts"] * 1000), round(e["dur"] * 1000))
        for e in events if e.get("ph") == "X"
    )


def check_agrees_with_jax_json(xplane: Path, trace_json: Path) -> tuple[int, int]:
    ours = _by_identity(_events(json.loads(reduce_to_bytes(xplane, level=0))))
    with gzip.open(trace_json) as f:
        jax = _by_identity(json.load(f)["traceEvents"])
    missing = jax - ours
    assert not missing, f"{sum(missing.values())} of JAX's events are not in ours, e.g. {list(missing)[:3]}"
    return sum(ours.values()), sum(jax.values())


@needs_corpus
def test_the_conversion_agrees_with_the_trace_json_jax_wrote_beside_it() -> None:
    ours, jax = check_agrees_with_jax_json(JAX_SMALL / "vm.xplane.pb", JAX_SMALL / "vm.trace.json.gz")
    assert ours == jax == xevent_count(JAX_SMALL / "vm.xplane.pb") == 5459


def test_a_profile_over_a_million_events_is_read_whole_where_jaxs_json_stops(tmp_path: Path) -> None:
    """A real JAX profile past JSON export's 1,000,000-event cap: the JSON holds the
    first million, the XSpace all of them, and we must hold every one."""
    out = tmp_path / "jax"
    record_capped_jax_run(out)  # recorded once, shared with the other suites that need it
    xplane = next(out.glob("plugins/profile/*/*.xplane.pb"))
    trace_json = next(out.glob("plugins/profile/*/*.trace.json.gz"))
    total = xevent_count(xplane)
    assert total > 1_000_000
    ours, jax = check_agrees_with_jax_json(xplane, trace_json)
    assert jax == 1_000_000 < ours == total
    assert index_file(xplane).events == total + sum(1 for _ in _meta_events(xplane))


def _meta_events(xplane: Path) -> list[dict]:
    return [e for e in convert(xplane, with_events=False)["traceEvents"] if e["ph"] == "M"]


def _space_with(lines: list, stat_names: dict[int, str], metadata: dict[int, tuple[str, str]],
                plane_name: str = "/host:CPU", plane_stats: list | None = None):
    space = XSpace()
    space.hostnames.append("box")
    empty = space.planes.add(name="/device:GPU:0", id=0)  # no lines: skipped
    empty.stats.add(metadata_id=1, int64_value=5)
    empty.stat_metadata[1].name = "clock_rate"
    plane = space.planes.add(name=plane_name, id=3)
    for mid, name in stat_names.items():
        plane.stat_metadata[mid].id = mid
        plane.stat_metadata[mid].name = name
    for mid, (name, display) in metadata.items():
        plane.event_metadata[mid].id = mid
        plane.event_metadata[mid].name = name
        plane.event_metadata[mid].display_name = display
    for st in plane_stats or []:
        plane.stats.add(**st)
    for ln in lines:
        line = plane.lines.add(id=ln["id"], name=ln["name"], display_name=ln.get("display_name", ""),
                               timestamp_ns=ln["timestamp_ns"])
        for ev in ln["events"]:
            e = line.events.add(metadata_id=ev[0], offset_ps=ev[1], duration_ps=ev[2])
            for st in ev[3] if len(ev) > 3 else []:
                e.stats.add(**st)
    return space


def test_names_stats_times_and_counters_follow_the_mapping(tmp_path: Path) -> None:
    epoch_ns = 1_795_977_900_307_178_010
    space = _space_with(
        lines=[
            {"id": -3025621682105475312, "name": "python", "display_name": "main thread", "timestamp_ns": epoch_ns,
             "events": [(1, 1_234_567, 2_000_000, [{"metadata_id": 1, "str_value": "a"},
                                                   {"metadata_id": 2, "ref_value": 3}]),
                        (2, 5_000_001, 0), (9, 6_000_000, 1000)]},
            {"id": 7, "name": "_counters_", "timestamp_ns": epoch_ns,
             "events": [(4, 0, 0, [{"metadata_id": 5, "double_value": 1.5}, {"metadata_id": 1, "str_value": "x"}]),
                        (4, 10_000_000, 0, [{"metadata_id": 5, "double_value": 2.5}])]},
            {"id": 8, "name": "empty", "timestamp_ns": 0, "events": []},
        ],
        stat_names={1: "tag", 2: "kind", 3: "compute", 5: "bytes_in_use", 6: "plane_stat"},
        metadata={1: ("%fusion.1 = f32[8] fusion(...)", "fusion.1"), 2: ("plain", ""), 4: ("memory", "")},
        plane_stats=[{"metadata_id": 6, "uint64_value": 2**64 - 1}],
    )
    path = write_space(tmp_path, space)
    doc = json.loads(reduce_to_bytes(path, level=0))
    assert {k: v for k, v in doc.items() if k != "tb_reduce"} == json.loads(json.dumps(convert(path)))
    events = doc["traceEvents"]
    procs = [e for e in events if e["ph"] == "M" and e["name"] == "process_name"]
    assert [p["args"]["name"] for p in procs] == ["/host:CPU"]  # the empty GPU plane is skipped
    threads = {e["args"]["name"]: e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads == {"main thread": -3025621682105475312 % 2**32}  # display name; no thread for counters
    x = [e for e in events if e["ph"] == "X"]
    assert [e["name"] for e in x] == ["fusion.1", "plain", ""]
    assert x[0]["args"] == {"long_name": "%fusion.1 = f32[8] fusion(...)", "tag": "a", "kind": "compute"}
    # At an epoch time a float µs has a 0.25 µs step (as in every Chrome trace): within one step of exact.
    assert abs(Fraction(x[0]["ts"]) - Fraction(epoch_ns * 1000 + 1_234_567, 10**6)) <= math.ulp(x[0]["ts"])
    assert x[0]["dur"] == 2.0
    assert x[1]["dur"] == 0 and "args" not in x[1]
    c = [e for e in events if e["ph"] == "C"]
    assert [(e["name"], e["args"]) for e in c] == [("memory", {"bytes_in_use": 1.5}), ("memory", {"bytes_in_use": 2.5})]
    assert c[1]["ts"] - c[0]["ts"] == pytest.approx(10.0)
    meta = doc["xspace"]
    assert meta["hostnames"] == ["box"]
    assert meta["planes"][0] == {"name": "/device:GPU:0", "id": 0, "stats": {"clock_rate": 5}}
    assert meta["planes"][1]["stats"] == {"plane_stat": 2**64 - 1} and meta["planes"][1]["pid"] == 701


def test_counters_are_downsampled_and_args_dropped_at_higher_levels(tmp_path: Path) -> None:
    n = 50_000
    space = _space_with(
        lines=[{"id": 1, "name": "_counters_", "timestamp_ns": 0,
                "events": [(1, k * 1000, 0, [{"metadata_id": 1, "int64_value": k % 97}]) for k in range(n)]},
               {"id": 2, "name": "ops", "timestamp_ns": 0,
                "events": [(2, k * 10_000, 5000, [{"metadata_id": 2, "str_value": "s" * 300}]) for k in range(n // 10)]}],
        stat_names={1: "value", 2: "note"},
        metadata={1: ("queue", ""), 2: ("op", "")},
    )
    path = write_space(tmp_path, space)
    l2 = json.loads(reduce_to_bytes(path, level=2))["traceEvents"]
    counters = [e for e in l2 if e["ph"] == "C"]
    assert 0 < len(counters) < n and all(set(e["args"]) == {"value"} for e in counters)
    ops = [e for e in l2 if e["ph"] == "X" and e.get("cat") != "tb_reduce.summary"]
    assert ops and all(e["args"]["tb_reduce.cut"] and len(e["args"]["note"]) == 257 for e in ops)
    l4 = json.loads(reduce_to_bytes(path, level=4))["traceEvents"]
    assert all("args" not in e for e in l4 if e["ph"] == "X" and e.get("cat") != "tb_reduce.summary")
    assert all("value" in e["args"] for e in l4 if e["ph"] == "C")


def test_event_json_gives_one_events_full_args(tmp_path: Path) -> None:
    space = _space_with(
        lines=[{"id": 1, "name": "t", "timestamp_ns": 0,
                "events": [(1, 0, 10, [{"metadata_id": 1, "str_value": "x" * 1000}])]}],
        stat_names={1: "long"}, metadata={1: ("op", "")},
    )
    index = index_file(write_space(tmp_path, space))
    last = index.events - 1
    assert json.loads(event_json(index, last))["args"] == {"long": "x" * 1000}


# ---------------------------------------------------------------- bad input


@needs_corpus
def test_the_corrupt_corpus_xspace_gives_a_one_line_error_and_no_output(tmp_path: Path) -> None:
    out = tmp_path / "out.json.gz"
    r = subprocess.run([sys.executable, "-m", "tb_reduce_plugin", "reduce", str(CORRUPT), "-o", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "not a valid XSpace" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("cut", [1, 100, 1000, 10_000])
def test_a_truncated_xspace_is_refused_with_a_reason(tmp_path: Path, cut: int) -> None:
    space = _space_with(lines=[{"id": 1, "name": "t", "timestamp_ns": 0, "events": [(1, k, 1) for k in range(5000)]}],
                        stat_names={}, metadata={1: ("op", "")})
    data = space.SerializeToString()
    path = tmp_path / "cut.xplane.pb"
    path.write_bytes(data[: len(data) - cut])
    with pytest.raises(TraceError) as err:
        index_file(path)
    assert "XSpace" in str(err.value) and "\n" not in str(err.value)


def test_an_event_corrupted_inside_an_intact_file_is_refused(tmp_path: Path) -> None:
    """upb reads events as bytes, so a broken event is our decoder's to catch."""
    space = _space_with(lines=[{"id": 1, "name": "t", "timestamp_ns": 0, "events": [(1, 5, 1)]}],
                        stat_names={}, metadata={1: ("op", "")})
    view = XSpaceIndexView.FromString(space.SerializeToString())
    view.planes[1].lines[0].events.append(field(1, 1) + varint(4 << 3 | 2) + varint(99))  # a stat past the end
    data = view.SerializeToString()
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(data)
    with pytest.raises(TraceError) as err:
        index_file(path)
    assert "corrupt XSpace" in str(err.value)


def test_protobuf_bytes_without_a_pb_name_are_not_taken_for_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"\x0a\x03abc")
    with pytest.raises(TraceError) as err:
        index_file(path)
    assert "not a trace" in str(err.value)


def test_events_interleaved_with_other_line_fields_are_still_read(tmp_path: Path) -> None:
    """Writers put a line's events back to back, and the reader finds them in the
    file; a line whose events are split by other fields must take the copying path
    and give the same events."""
    ev = [field(1, 1) + field(2, k * 1000) + field(3, 500) for k in range(4)]
    events = [field(4, e) for e in ev]
    line = field(1, 9) + events[0] + events[1] + field(2, b"split") + events[2] + field(3, 5) + events[3]
    md = field(1, 1) + field(2, b"op")
    plane = field(1, 0) + field(2, b"/host:CPU") + field(3, line) + field(4, field(1, 1) + field(2, md))
    path = tmp_path / "split.xplane.pb"
    path.write_bytes(field(1, plane))
    doc = json.loads(reduce_to_bytes(path, level=0))
    x = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["ts"], e["dur"]) for e in x] == [("op", 0.005 + k * 0.001, 0.0005) for k in range(4)]
    assert {k: v for k, v in doc.items() if k != "tb_reduce"} == json.loads(json.dumps(convert(path)))


@needs_corpus
def test_events_decoded_in_many_small_chunks_on_threads_give_the_same_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    import tb_reduce_plugin.formats.xspace as xspace

    path = CORPUS / "public" / "xprof" / "demo__plugins__profile__GPU-multi-worker__34.83.195.179_6003.xplane.pb"
    whole = reduce_to_bytes(path, level=0)
    monkeypatch.setattr(xspace, "_CHUNK", 7)
    monkeypatch.setattr(xspace, "_THREADS", 3)
    assert reduce_to_bytes(path, level=0) == whole


def test_first_of_each_metadata_id_is_what_numpys_unique_says_for_any_ids() -> None:
    """Step markers look at the first event of each metadata id: a table of first places
    where the ids span a small range, `np.unique` elsewhere; the same ids, places and dtypes."""
    from tb_reduce_plugin.formats.xspace import _first_of_each

    rng = np.random.default_rng(3)
    cases = [np.array([5], dtype=np.int64), np.array([3, 3, 1, 2, 1], dtype=np.int64), rng.integers(0, 50, 100_000),
             rng.integers(1, 4, 7), rng.integers(-2**62, 2**62, 1000), rng.integers(0, 10**7, 50),
             np.array([2**63 - 1, -2**63, 0], dtype=np.int64), np.array([7, 7, 7], dtype=np.uint32)]
    for mids in cases:
        ids, firsts = np.unique(mids, return_index=True)
        got_ids, got_firsts = _first_of_each(mids)
        assert got_ids.dtype == ids.dtype and got_firsts.dtype == firsts.dtype
        assert np.array_equal(got_ids, ids) and np.array_equal(got_firsts, firsts)
