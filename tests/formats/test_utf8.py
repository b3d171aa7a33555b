"""Undecodable text never breaks a trace (issue 9, finding 5).

One rule wherever bytes become text: invalid UTF-8 is replaced as
`bytes.decode("utf-8", "replace")` does, and a JSON escape of a lone surrogate
becomes U+FFFD. So the same bad string reads the same in an event's name, in the
summaries' `top` lists, in a kept event's JSON, in its args, on the `event` route
and in the top-level metadata, at every level, with and without args, Chrome JSON
and XSpace alike; and what is written is always strict UTF-8 JSON.
"""

from __future__ import annotations

import gzip
import io
import json
import random
from pathlib import Path
from typing import Any, Iterator

import pytest
from plugin_support import JAX_SMALL, body_json, client, get, make_plugin, require_corpus

from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.formats.chrome_json import ChromeJsonEvents, ChromeJsonReader
from tb_reduce_plugin.formats.sources import TraceStream
from tb_reduce_plugin.formats.xspace import ERROR_KEY
from tb_reduce_plugin.formats.xspace_schema import XEventView, XSpaceIndexView, XSpaceView
from tb_reduce_plugin.model.table import decode_events, valid_utf8
from tb_reduce_plugin.reduce.levels import args_policy
from tb_reduce_plugin.reduce.pipeline import TraceIndex, event_json, index_file, reduce_index
from tb_reduce_plugin.reduce.writer import dumps, transform
from tests.xspace_oracle import convert

FFFD = "\ufffd"
LEVELS = range(5)
SUMMARY = "tb_reduce.summary"
BIG_TS, BIG_DUR = 0.0, 5000.0  # a slice kept as itself at every level (half the window)


# ---------------------------------------------------------------- Chrome JSON


def _event(name: bytes, ts: float, dur: float, pid: bytes = b"1", args: bytes = b'{"k":"v"}') -> bytes:
    return (b'{"ph":"X","name":"' + name + b'","pid":' + pid + b',"tid":1,"ts":' + repr(ts).encode()
            + b',"dur":' + repr(dur).encode() + b',"args":' + args + b"}")


def chrome_trace(name: bytes = b"op", arg: bytes = b"v", pid: bytes = b"1", meta: bytes = b'"x"') -> bytes:
    """A big slice (kept at every level) named `name` with `args.k = arg` on process
    `pid`, then 200 tiny slices of the same name (folded into summaries at levels
    1-4), then an instant at the window's end; `meta` is a top-level key's value."""
    events = [_event(name, BIG_TS, BIG_DUR, pid, b'{"k":"' + arg + b'"}')]
    events += [_event(name, 6000 + k * 0.01, 0.001, pid) for k in range(200)]
    events.append(b'{"ph":"i","s":"g","name":"end","pid":1,"tid":1,"ts":10000}')  # the window's end, not a slice
    return b'{"traceEvents":[\n' + b",\n".join(events) + b'\n],"meta":' + meta + b"}"


# case: (file arguments, what must be read: name, pid, arg, meta)
CASES: dict[str, tuple[dict[str, bytes], dict[str, Any]]] = {
    "arg-c3": ({"arg": b"a\xc3b"}, {"arg": "a\ufffdb"}),
    "arg-ff": ({"arg": b"a\xffb"}, {"arg": "a\ufffdb"}),
    "arg-truncated-multibyte": ({"arg": b"a\xe2\x82"}, {"arg": "a\ufffd"}),
    "name": ({"name": b"bad\xc3name"}, {"name": "bad\ufffdname"}),
    "name-truncated-multibyte": ({"name": b"op\xf0\x9f\x98"}, {"name": "op\ufffd"}),
    "pid-string": ({"pid": b'"p\xc3"'}, {"pid": "p\ufffd"}),
    "metadata": ({"meta": b'{"host":"h\xff"}'}, {"meta": {"host": "h\ufffd"}}),
    "surrogate-escape": ({"name": rb"bad\udc80name", "arg": rb"x\ud83d"}, {"name": "bad\ufffdname", "arg": "x\ufffd"}),
    "surrogate-escape-metadata": ({"meta": rb'"m\udc80"'}, {"meta": "m\ufffd"}),
}
DEFAULTS = {"name": "op", "pid": 1, "arg": "v", "meta": "x"}


def strict_json(data: bytes) -> Any:
    """The document, read as strict UTF-8 (a bad byte raises), holding no lone surrogate."""
    doc = json.loads(data.decode("utf-8"))
    for s in _strings(doc):
        assert not any("\ud800" <= ch <= "\udfff" for ch in s), s
    return doc


def _strings(v: Any) -> Iterator[str]:
    if isinstance(v, str):
        yield v
    elif isinstance(v, list):
        for item in v:
            yield from _strings(item)
    elif isinstance(v, dict):
        for k, item in v.items():
            yield k
            yield from _strings(item)


def check_chrome(doc: dict, want: dict[str, Any], level: int, drop_args: bool) -> None:
    """The bad text reads as `want` everywhere it shows in a reduced trace."""
    w = dict(DEFAULTS, **want)
    events = doc["traceEvents"]
    big = [e for e in events if e.get("ts") == BIG_TS and e.get("dur") == BIG_DUR]
    assert len(big) == 1, big
    assert big[0]["name"] == w["name"] and big[0]["pid"] == w["pid"]
    if level <= 2 and not drop_args:
        assert big[0]["args"]["k"] == w["arg"]
    else:
        assert "args" not in big[0]
    assert doc["meta"] == w["meta"]
    summaries = [e for e in events if e.get("cat") == SUMMARY]
    if level == 0:
        assert not summaries
        assert sum(e["name"] == w["name"] for e in events) == 201
    else:  # the folded slices' name is the big one's, in the label and in `top`
        assert summaries and all(e["pid"] == w["pid"] for e in summaries)
        assert all(e["name"].startswith(w["name"]) for e in summaries)
        assert {name for e in summaries for name, _ in e["args"]["top"]} == {w["name"]}


@pytest.fixture(scope="module")
def chrome_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("utf8")
    return {case: _write(d / f"{case}.json", chrome_trace(**kw)) for case, (kw, _) in CASES.items()}


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def reduce(index: TraceIndex, level: int, drop_args: bool) -> bytes:
    buf = io.BytesIO()
    reduce_index(index, buf, level, gzip=False, with_input_index=True, drop_args=drop_args)
    return buf.getvalue()


@pytest.mark.parametrize("case", list(CASES))
def test_undecodable_text_in_a_chrome_trace_reads_as_u_fffd_at_every_level(chrome_files: dict[str, Path],
                                                                         case: str) -> None:
    index = index_file(chrome_files[case])
    want = CASES[case][1]
    for level in LEVELS:
        for drop_args in (False, True):
            check_chrome(strict_json(reduce(index, level, drop_args)), want, level, drop_args)
    event = strict_json(event_json(index, 0))  # the big slice, with all its args
    w = dict(DEFAULTS, **want)
    assert (event["name"], event["pid"], event["args"]["k"]) == (w["name"], w["pid"], w["arg"])


@pytest.mark.parametrize("block_size", [4096, 1 << 20])
def test_bad_bytes_in_every_block_of_a_gzipped_trace_lose_no_event(tmp_path: Path, block_size: int,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks cut mid-file each meet bad bytes (in names, which the index decodes,
    and in args, which only the writer copies): every event is read once, in order,
    and written as text, however the blocks fall."""
    events = [_event(b"n\xc3%d" % k, float(k), 1.0, args=b'{"a":"\xff%d"}' % k) for k in range(3000)]
    path = _write(tmp_path / "t.json.gz", gzip.compress(b"[" + b",".join(events) + b"]"))
    with TraceStream(path) as stream:
        names = [e.name for b in ChromeJsonReader(stream, block_size).blocks(decode_events) for e in b]
    assert names == [f"n{FFFD}{k}" for k in range(3000)]
    monkeypatch.setattr(ChromeJsonEvents, "block_size", block_size)  # the write pass's blocks
    doc = strict_json(reduce(index_file(path), 0, False))
    assert [e["name"] for e in doc["traceEvents"]] == names
    assert [e["args"]["a"] for e in doc["traceEvents"]] == [f"{FFFD}{k}" for k in range(3000)]


def test_an_escaped_backslash_before_u_is_text_not_a_surrogate(tmp_path: Path) -> None:
    r"""`\\udc80` in a file is a backslash and "udc80": nothing to replace."""
    path = _write(tmp_path / "t.json", chrome_trace(name=rb"a\\udc80", arg=rb"\\\udc80"))
    doc = strict_json(reduce(index_file(path), 0, False))
    assert doc["traceEvents"][0]["name"] == "a\\udc80"
    assert doc["traceEvents"][0]["args"]["k"] == "\\" + FFFD  # an escaped backslash, then a lone surrogate


def test_the_writer_never_emits_a_lone_surrogate_or_an_invalid_byte() -> None:
    """What the writer is handed (a metadata value the stdlib decoded from an escape,
    an event's raw bytes) comes out as strict UTF-8 with U+FFFD in place."""
    assert json.loads(dumps({"k": "a\udc80", "big": 2**70}).decode("utf-8")) == {"k": "a" + FFFD, "big": 2**70}
    raw = b'{"ph":"X","name":"n","args":{"s":"' + b"x" * 300 + b'\xc3","bind_id":1}}'
    for level in LEVELS:
        out = json.loads(valid_utf8(transform(raw, args_policy(level))).decode("utf-8"))
        if level <= 1:
            assert out["args"]["s"] == "x" * 300 + FFFD
        elif level == 2:
            assert out["args"]["s"] == "x" * 256 + "…" and out["args"]["tb_reduce.cut"] is True
        else:
            assert out["args"] == {"bind_id": 1}


# ---------------------------------------------------------------- the plugin


def test_every_route_answers_200_with_u_fffd_for_bad_text_in_chrome_traces(tmp_path: Path) -> None:
    logdir = tmp_path / "logdir"
    (logdir / "utf8").mkdir(parents=True)
    for case, (kw, _) in CASES.items():
        _write(logdir / "utf8" / f"{case}.json", chrome_trace(**kw))
    c = client(make_plugin(logdir, tmp_path / "cache"))
    hosts = {h["host"]: h for r in body_json(get(c, "runs")) if r["run"] == "utf8" for h in r["hosts"]}
    assert len(hosts) == len(CASES)
    for host in hosts:
        want = CASES[host.removesuffix(".json")][1]
        for level in LEVELS:
            for args in ("0", "1"):
                r = get(c, "trace", gz=True, run="utf8", host=host, level=level, args=args)
                assert r.status_code == 200, (host, level, args, r.get_data()[:300])
                check_chrome(strict_json(gzip.decompress(r.get_data())), want, level, args == "0")
                s = get(c, "stats", run="utf8", host=host, level=level, args=args)
                assert s.status_code == 200 and strict_json(s.get_data())["level"] == level
        r = get(c, "event", run="utf8", host=host, i=0)
        assert r.status_code == 200
        w = dict(DEFAULTS, **want)
        assert strict_json(r.get_data())["name"] == w["name"]


# ---------------------------------------------------------------- XSpace

BAD_STAT_KEY, BAD_STAT_VALUE = b"note\xffkey", b"bad\xc3value"
BAD_NAME = b"op\xe2\x82"  # a three-byte character cut after two


def bad_xspace(tmp_path: Path) -> tuple[Path, str, int]:
    """The real JAX XSpace with invalid UTF-8 written in by our schema's bytes view: a
    stat (key and string value) on its longest event, and the name of the metadata
    most of its events use. Returns the file, the renamed events' old name and the
    longest event's (metadata id, offset)."""
    require_corpus()
    space = XSpaceView.FromString((JAX_SMALL / "vm.xplane.pb").read_bytes())
    plane, line, event = max(((p, ln, e) for p in space.planes for ln in p.lines for e in ln.events),
                             key=lambda t: t[2].duration_ps)
    sid = max(plane.stat_metadata, default=0) + 1
    plane.stat_metadata[sid].id = sid
    plane.stat_metadata[sid].name = BAD_STAT_KEY
    event.stats.add(metadata_id=sid, str_value=BAD_STAT_VALUE)
    uses: dict[int, int] = {}
    for ln in plane.lines:
        for e in ln.events:
            uses[e.metadata_id] = uses.get(e.metadata_id, 0) + 1
    common = max(uses, key=lambda m: uses[m])
    md = plane.event_metadata[common]
    old = (md.display_name or md.name).decode()
    md.name, md.display_name = BAD_NAME, b""
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(space.SerializeToString())
    return path, old, event.duration_ps


def test_invalid_utf8_in_an_xspace_reads_as_u_fffd_at_every_level_and_on_the_event_route(tmp_path: Path) -> None:
    path, _, longest_ps = bad_xspace(tmp_path)
    index = index_file(path)
    name = BAD_NAME.decode("utf-8", "replace")
    key, value = BAD_STAT_KEY.decode("utf-8", "replace"), BAD_STAT_VALUE.decode("utf-8", "replace")
    assert name == "op" + FFFD and key == f"note{FFFD}key" and value == f"bad{FFFD}value"
    level0 = strict_json(reduce(index, 0, False))
    assert {k: v for k, v in level0.items() if k != "tb_reduce"} == json.loads(json.dumps(convert(path)))
    for level in LEVELS:
        for drop_args in (False, True):
            doc = strict_json(reduce(index, level, drop_args))
            events = doc["traceEvents"]
            longest = [e for e in events if e.get("dur") == longest_ps / 1e6 and e.get("cat") != SUMMARY]
            assert len(longest) == 1
            if level <= 2 and not drop_args:
                assert longest[0]["args"][key] == value
            else:
                assert "args" not in longest[0]
            kept = {e["name"] for e in events if e["ph"] == "X" and e.get("cat") != SUMMARY}
            tops = {n for e in events if e.get("cat") == SUMMARY for n, _ in e["args"]["top"]}
            # The renamed events are tiny: written as themselves at level 0, folded above.
            assert name in (tops if level else kept), level
    at = index.table.dur.tolist().index(longest_ps / 1e6)
    assert strict_json(event_json(index, at))["args"][key] == value
    renamed = index.table.names.index(name)
    assert strict_json(event_json(index, index.table.name.tolist().index(renamed)))["name"] == name


def _payload_regions(index: TraceIndex) -> list[tuple[int, int, int]]:
    """(start, end, input index) of each event payload: the reader finds them in the file itself."""
    regions = []
    for line in index.source.lines:  # type: ignore[attr-defined]
        regions += [(s, e, line.first + k) for k, (s, e) in enumerate(zip(line.starts.tolist(), line.ends.tolist()))
                    if e > s]
    return regions


def with_event_stats(tmp_path: Path, stats: bytes) -> tuple[TraceIndex, int]:
    """The real XSpace with `stats` (raw XStat fields) appended to its longest event
    (a slice every level keeps); returns its index and that event's input index."""
    require_corpus()
    view = XSpaceIndexView.FromString((JAX_SMALL / "vm.xplane.pb").read_bytes())
    line, k = max(((ln, k) for p in view.planes for ln in p.lines for k in range(len(ln.events))),
                  key=lambda t: XEventView.FromString(t[0].events[t[1]]).duration_ps)
    payload = line.events[k] + stats
    line.events[k] = payload
    path = tmp_path / "edited.xplane.pb"
    path.write_bytes(view.SerializeToString())
    index = index_file(path)
    lines = index.source.lines  # type: ignore[attr-defined]
    at = [ln.first + k for ln in lines if len(ln.starts) > k and ln.data[ln.starts[k]:ln.ends[k]] == payload]
    assert len(at) == 1
    return index, at[0]


def test_an_xspace_event_whose_stats_do_not_parse_is_marked_and_the_trace_still_opens(tmp_path: Path) -> None:
    index, first = with_event_stats(tmp_path, b"\x22\x03\xff\xff\xff")  # a stat whose tag runs past its bytes
    marked = strict_json(event_json(index, first))
    assert list(marked["args"]) == [ERROR_KEY] and "\n" not in marked["args"][ERROR_KEY]
    for level in LEVELS:
        doc = strict_json(reduce(index, level, False))
        got = [e for e, i in zip(doc["traceEvents"], doc["tb_reduce"]["input_index"]) if i == first]
        assert len(got) == 1 and got[0].get("args") == (marked["args"] if level <= 2 else None)


def test_an_xspace_event_with_too_many_stats_is_indexed_but_its_stats_not_parsed(tmp_path: Path) -> None:
    plain, k = with_event_stats(tmp_path, b"")
    index, first = with_event_stats(tmp_path, b"\x22\x02\x08\x01" * 100_001)  # 100,001 stats of metadata id 1
    assert first == k
    event = strict_json(event_json(index, first))
    assert event["args"] == {ERROR_KEY: "event has too many stats to decode"}
    assert {key: v for key, v in event.items() if key != "args"} == {
        key: v for key, v in json.loads(event_json(plain, k)).items() if key != "args"}  # its name, times, track
    for level in LEVELS:
        strict_json(reduce(index, level, False))


def test_200_random_byte_mutations_of_a_real_xspace_give_a_trace_error_or_valid_json(tmp_path: Path) -> None:
    """One byte changed inside an event's payload (where upb does not look at index
    time): the file is refused with a one-line `TraceError` when indexed, or it
    reduces to strict JSON at every level; never another exception.

    A changed payload changes that event only, so each level is asked for the window
    around it (its args decoded where levels 0-2 keep it), and the whole trace is
    written once at level 0 without args and once at level 4 with them (the plan of
    the default window, every event's name and times, counters' values): the whole
    trace at every level with args would take ~40 s for the same coverage.
    """
    require_corpus()
    data = (JAX_SMALL / "vm.xplane.pb").read_bytes()
    regions = _payload_regions(index_file(JAX_SMALL / "vm.xplane.pb"))
    rng = random.Random(95)
    refused = reduced = 0
    path = tmp_path / "m.xplane.pb"
    for _ in range(200):
        start, end, i = rng.choice(regions)
        mutant = bytearray(data)
        at = rng.randrange(start, end)
        mutant[at] = (mutant[at] + rng.randrange(1, 256)) % 256  # always a change
        path.write_bytes(bytes(mutant))
        try:
            index = index_file(path)
        except TraceError as exc:
            assert "\n" not in str(exc)
            refused += 1
            continue
        ts, dur = float(index.table.ts[i]), float(index.table.dur[i])
        width = max(dur, abs(ts) * 1e-9, 1e-3)
        for level in LEVELS:
            buf = io.BytesIO()
            reduce_index(index, buf, level, ts - width, ts + 2 * width, gzip=False)
            strict_json(buf.getvalue())
        strict_json(reduce(index, 0, True))
        strict_json(reduce(index, 4, False))
        assert strict_json(event_json(index, i))["ph"] in ("X", "C")
        reduced += 1
    assert refused + reduced == 200 and reduced > 100  # most mutants still open
