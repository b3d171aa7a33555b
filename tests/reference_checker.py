"""Independent reference checker for tb-reduce outputs (SPEC §4, docs/SEMANTICS.md).

This module is the test-suite's oracle. It is written from the documents, not from
the implementation, and it derives nothing from `tb_reduce_plugin`: the checker
recomputes every rule with plain dicts and lists so that a bug in the vectorised
implementation cannot hide behind the same bug here.

What "correct" means is fixed by docs/SEMANTICS.md. Where that page leaves a choice
open, the checker accepts every reading that satisfies the guarantees (each such
place says so in a comment). Float noise is tolerated where the documents compute
times (buckets, nesting, summary hulls): `TIME_TOL_US` plus a few ulps of the
magnitude, because real traces carry epoch timestamps near 1.7e15 µs where one ulp
is 0.25 µs. Kept events are compared as written, with ts/dur allowed to differ by
at most 1 ns.

Entry points: `check_reduction` (raises `AssertionError` on the first violation)
and `load_trace` (reads a trace file the way the tool must accept it).
"""

from __future__ import annotations

import gzip
import json
import math
import re
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from heapq import heappop, heappush
from pathlib import Path
from typing import Any

RESOLUTION: dict[int, int] = {1: 100_000, 2: 20_000, 3: 5_000, 4: 1_000}
SUMMARY_CAT = "tb_reduce.summary"
TIME_TOL_US = 1e-6
KEPT_TIME_TOL_US = 1e-3
CUT_STRING = 256
CUT_LIST = 32
CUT_MARK = "tb_reduce.cut"
KEPT_ARG_KEYS = frozenset({"bind_id", "flow_in", "flow_out"})
INSTANT_PHASES = frozenset({"i", "I", "R"})
FLOW_PHASES = frozenset({"s", "t", "f"})
SUMMARY_KEYS = frozenset({"ph", "cat", "name", "pid", "tid", "ts", "dur", "args"})
_NAME_RE = re.compile(r"^(?P<top>.*) \(\+(?P<n>\d+) more\)$", re.DOTALL)


# --------------------------------------------------------------------------- utils


def _num(v: Any) -> bool:
    """A JSON number usable as a time or a counter value (bools are not numbers)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _tol(*values: float) -> float:
    """Float-noise tolerance for a time comparison near `values` (µs)."""
    m = 0.0
    for v in values:
        a = abs(v)
        if a > m and math.isfinite(a):
            m = a
    return TIME_TOL_US + m * 2e-15


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _h(v: Any) -> Hashable:
    """Type-sensitive hashable key: 1, 1.0, True and "1" are four different values."""
    cls = v.__class__
    if cls in _SCALARS:
        return (cls, v)
    if isinstance(v, (str, int, float)):
        return (cls, v)
    return ("json", json.dumps(v, sort_keys=True))


def _canon(v: Any) -> str:
    """Canonical JSON text of a value: key order does not matter, types do."""
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _same_json(a: Any, b: Any) -> bool:
    """Type-exact equality of two JSON values (1 != 1.0 != true), fast on big lists.

    Python's == treats 1, 1.0 and True alike, so equal values are also serialised and
    compared. orjson only speeds that up (any deterministic serializer that keeps
    types will do); json is the reference and the fallback (orjson writes NaN as
    null, so NaN-holding values, which == never finds equal, go to json).
    """
    if a == b:
        try:
            import orjson

            return orjson.dumps(a) == orjson.dumps(b)
        except (ImportError, TypeError):
            pass
    return json.dumps(a) == json.dumps(b)


def _short(v: Any, limit: int = 300) -> str:
    """A value as short JSON text for an error message."""
    try:
        text = json.dumps(v, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= limit else text[:limit] + "…"


def _name_sort_key(name: Any) -> tuple[int, str]:
    """Tie order of `args.top` names: strings by value; anything else after, by JSON."""
    return (0, name) if isinstance(name, str) else (1, _canon(name))


# ------------------------------------------------------------------------- loading


def load_trace(path: str | Path) -> dict | list:
    """Read a plain or gzip Chrome-JSON trace, accepting a truncated Array-format file.

    Detection is by content (gzip magic), not by name, as SPEC §2 asks. A live
    Array-format file may lack the closing `]`, end in a comma, or end in the middle
    of an event: the events that are complete are returned.
    """
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    text = raw.decode("utf-8")
    text = text.removeprefix("\ufeff")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        stripped = text.lstrip()
        if not stripped.startswith("["):
            raise
    return _load_truncated_array(stripped)


def _load_truncated_array(text: str) -> list:
    """Decode events one by one after `[`, stopping at the first incomplete one."""
    decoder = json.JSONDecoder()
    events: list = []
    pos, n = 1, len(text)
    while True:
        while pos < n and text[pos] in " \t\r\n":
            pos += 1
        if pos >= n or text[pos] == "]":
            return events
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return events
        events.append(value)
        while pos < n and text[pos] in " \t\r\n":
            pos += 1
        if pos >= n or text[pos] != ",":
            return events  # "]", the end of a cut file, or garbage after an event
        pos += 1


# ------------------------------------------------------------------- input model


@dataclass
class Slice:
    """An X event or a matched B/E pair (`eidx` is the E's index, -1 for X)."""

    sid: int
    idx: int
    eidx: int
    track: tuple
    ts: float
    end: float
    dur: float  # max(dur, 0) for X, E.ts - B.ts for a pair: what the keep rule compares
    name: Any


@dataclass
class InputModel:
    """Everything about an input that does not depend on level or window."""

    events: list
    top: dict | None
    slices: list[Slice] = field(default_factory=list)
    slice_of: dict[int, int] = field(default_factory=dict)  # X idx / B idx / E idx -> sid
    unpaired: list[int] = field(default_factory=list)
    meta: list[int] = field(default_factory=list)
    no_ts: list[int] = field(default_factory=list)
    counters: list[int] = field(default_factory=list)
    instants: list[int] = field(default_factory=list)
    flows: dict[Hashable, list[int]] = field(default_factory=dict)
    flow_of: dict[int, Hashable] = field(default_factory=dict)
    others: list[int] = field(default_factory=list)
    default_window: tuple[float, float] | None = None
    max_abs_time: float = 0.0  # largest |ts| or |end|: sets the float-noise tolerance
    tracks: dict[tuple, list[int]] = field(default_factory=dict)  # track -> sids by ts
    index: dict[Hashable, list[int]] | None = None  # match key -> idx (not paired B/E)
    pair_index: dict[Hashable, list[int]] | None = None  # pair key -> sid
    keys: list[Hashable] = field(default_factory=list)  # _match_key of every event
    by_key: dict[Hashable, list[int]] = field(default_factory=dict)  # match key -> every idx
    forms: dict[int, dict[int, list]] = field(default_factory=dict)  # level -> idx -> expected_variants
    twins: dict[int, list[int]] = field(default_factory=dict)  # identical C / instant events
    by_ts: list[tuple[float, int]] | None = None  # (ts, idx) of dict events, for 1-ns slack


def _track(e: dict) -> tuple:
    return (_h(e.get("pid")), _h(e.get("tid")))


def _ph(e: Any) -> str | None:
    if not isinstance(e, dict):
        return None
    ph = e.get("ph")
    return ph if isinstance(ph, str) else None


def _events_of(doc: Any) -> tuple[list, dict | None]:
    if isinstance(doc, list):
        return doc, None
    assert isinstance(doc, dict), f"input is neither an Object nor an Array trace: {type(doc)}"
    events = doc.get("traceEvents")
    assert isinstance(events, list), "input Object has no traceEvents list"
    return events, doc


def build_model(doc: dict | list) -> InputModel:
    """Classify every input event once (SEMANTICS: events, slices, pairs, flows)."""
    events, top = _events_of(doc)
    m = InputModel(events=events, top=top)
    be: dict[tuple, list[tuple[float, int, str]]] = defaultdict(list)
    t_min, t_max = math.inf, -math.inf
    for i, e in enumerate(events):
        ph = _ph(e)
        if ph == "M":
            m.meta.append(i)
            continue
        if not isinstance(e, dict) or not _num(e.get("ts")):
            m.no_ts.append(i)
            continue
        ts = e["ts"]
        end = ts
        if ph == "X":
            dur = e.get("dur")
            d = dur if _num(dur) and dur > 0 else 0
            end = ts + d
            sid = len(m.slices)
            m.slices.append(Slice(sid, i, -1, _track(e), ts, end, d, e.get("name")))
            m.slice_of[i] = sid
        elif ph in ("B", "E"):
            be[_track(e)].append((ts, i, ph))
        elif ph == "C":
            m.counters.append(i)
        elif ph in INSTANT_PHASES:
            m.instants.append(i)
        elif ph in FLOW_PHASES:
            ident = e["id"] if "id" in e else e.get("id2")
            key = (_h(e.get("cat")), _h(ident))
            m.flows.setdefault(key, []).append(i)
            m.flow_of[i] = key
        else:
            m.others.append(i)
        t_min = min(t_min, ts)
        t_max = max(t_max, end)
    for track, items in be.items():
        items.sort(key=lambda x: (x[0], x[1]))
        stack: list[int] = []
        for ts, i, ph in items:
            if ph == "B":
                stack.append(i)
            elif stack:
                b = stack.pop()
                eb = events[b]
                sid = len(m.slices)
                m.slices.append(Slice(sid, b, i, track, eb["ts"], ts, ts - eb["ts"], eb.get("name")))
                m.slice_of[b] = sid
                m.slice_of[i] = sid
            else:
                m.unpaired.append(i)
        m.unpaired.extend(stack)
    m.unpaired.sort()
    if t_min <= t_max:
        m.default_window = (t_min, t_max if t_max - t_min >= 1e-6 else t_min + 1)  # under 1 ps: one instant
        m.max_abs_time = max(abs(t_min), abs(t_max))
    tracks: dict[tuple, list[int]] = defaultdict(list)
    for s in m.slices:
        tracks[s.track].append(s.sid)
    for sids in tracks.values():
        sids.sort(key=lambda k: (m.slices[k].ts, m.slices[k].idx))
    m.tracks = dict(tracks)
    return m


def default_window(doc: dict | list) -> tuple[float, float] | None:
    """SEMANTICS' default window [t0, t1] of a parsed trace (None: no event has a ts)."""
    return _model_of(doc).default_window


_MODEL_CACHE: list[tuple[Any, InputModel]] = []


def _model_of(doc: dict | list) -> InputModel:
    """Reuse the model when the same input document is checked at several levels."""
    if _MODEL_CACHE and _MODEL_CACHE[0][0] is doc:
        return _MODEL_CACHE[0][1]
    model = build_model(doc)
    _MODEL_CACHE[:] = [(doc, model)]
    return model


def _match_key(e: Any) -> Hashable:
    """Cheap pre-filter key for finding the input event an output event copies.

    Only a pre-filter: candidates are then compared whole, and `_match_kept`
    compares the kept events type-exactly, so 1 and 1.0 may share a key here.
    """
    if not isinstance(e, dict):
        return ("nondict", _canon(e))
    key = (e.get("ph"), e.get("pid"), e.get("tid"), e.get("ts"), e.get("name"))
    try:
        hash(key)
    except TypeError:
        return tuple(_h(v) for v in key)
    return key


def _near_key(a: Hashable, b: Hashable) -> bool:
    """Two match keys that differ at most by a ts within 1 ns."""
    if not (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) == 5):
        return False
    if a[4] != b[4] or a[:3] != b[:3] or not (_num(a[3]) and _num(b[3])):
        return False
    return abs(a[3] - b[3]) <= KEPT_TIME_TOL_US + _tol(a[3])


def _pair_key(track: tuple, b: dict, e: dict) -> Hashable:
    return (track, b["ts"], e["ts"], _h(b.get("name")))


def _ensure_index(m: InputModel) -> None:
    if m.index is not None:
        return
    paired = {i for s in m.slices if s.eidx >= 0 for i in (s.idx, s.eidx)}
    index: dict[Hashable, list[int]] = defaultdict(list)
    m.keys = [_match_key(e) for e in m.events]
    by_key: dict[Hashable, list[int]] = defaultdict(list)
    for i, key in enumerate(m.keys):
        by_key[key].append(i)
        if i not in paired:
            index[key].append(i)
    m.by_key = dict(by_key)
    twins: dict[str, list[int]] = defaultdict(list)
    for i in (*m.counters, *m.instants):
        twins[_canon(m.events[i])].append(i)
    m.twins = {i: group for group in twins.values() if len(group) > 1 for i in group}
    pair_index: dict[Hashable, list[int]] = defaultdict(list)
    for s in m.slices:
        if s.eidx >= 0:
            pair_index[_pair_key(s.track, m.events[s.idx], m.events[s.eidx])].append(s.sid)
    m.index = dict(index)
    m.pair_index = dict(pair_index)


# --------------------------------------------------------------- args by level


def _cut(v: Any) -> tuple[Any, bool]:
    """Level-2 cut at any depth: strings to 256 chars + "…", lists to 32 items."""
    if isinstance(v, str):
        return (v[:CUT_STRING] + "…", True) if len(v) > CUT_STRING else (v, False)
    if isinstance(v, list):
        cut = len(v) > CUT_LIST
        out = []
        for x in v[:CUT_LIST]:
            y, c = _cut(x)
            cut = cut or c
            out.append(y)
        return (out, True) if cut else (v, False)
    if isinstance(v, dict):
        cut = False
        out_d = {}
        for k, x in v.items():
            y, c = _cut(x)
            cut = cut or c
            out_d[k] = y
        return (out_d, True) if cut else (v, False)
    return v, False


def expected_variants(e: Any, level: int) -> list[Any]:
    """The forms a kept input event may take in the output at `level`.

    SEMANTICS cuts every string at level 2 but G6 says M events stay unchanged; the
    two only disagree for an M event holding a string over 256 characters, so both
    forms are accepted for M events at level 2.
    """
    if not isinstance(e, dict) or level <= 1 or "args" not in e:
        return [e]
    ph = _ph(e)
    if level == 2:
        args, cut = _cut(e["args"])
        if not cut:
            return [e]
        if isinstance(args, dict):
            args = dict(args)
            args[CUT_MARK] = True
        new = {k: (args if k == "args" else v) for k, v in e.items()}
        return [new, e] if ph == "M" else [new]
    if ph in ("M", "C"):
        return [e]
    a = e["args"]
    keep = {k: v for k, v in a.items() if k in KEPT_ARG_KEYS} if isinstance(a, dict) else {}
    if keep:
        return [{k: (keep if k == "args" else v) for k, v in e.items()}]
    return [{k: v for k, v in e.items() if k != "args"}]


def _same_but_time(a: Any, b: Any) -> bool:
    """Equal except that ts and dur may differ by at most 1 ns."""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return False
    for key in ("ts", "dur"):
        x, y = a.get(key), b.get(key)
        if (key in a) != (key in b):
            return False
        if _num(x) and _num(y):
            if abs(x - y) > KEPT_TIME_TOL_US + _tol(x, y):
                return False
        elif x != y:
            return False
    ra = {k: v for k, v in a.items() if k not in ("ts", "dur")}
    rb = {k: v for k, v in b.items() if k not in ("ts", "dur")}
    return ra == rb and _canon(ra) == _canon(rb)


# ------------------------------------------------------------- buckets and time


@dataclass
class Window:
    """The window [t0, t1] and the bucket grid of one reduction."""

    t0: float
    t1: float
    r: int
    max_abs_time: float = 0.0
    theta: float = field(init=False)
    last: int = field(init=False)
    tol: float = field(init=False)  # float slack for every time comparison of this run

    def __post_init__(self) -> None:
        self.tol = _tol(self.max_abs_time, self.t0, self.t1)
        self.theta = (self.t1 - self.t0) / self.r
        self.last = self.r - 1

    def bucket(self, t: float) -> int:
        b = math.floor((t - self.t0) / self.theta)
        return self.last if b > self.last else (0 if b < 0 else b)

    def span_buckets(self, a: float, b: float) -> tuple[tuple[int, int] | None, tuple[int, int]]:
        """(strict, loose) bucket ranges touched by [a, b] clipped to the window.

        Strict buckets are touched whatever float noise the other side has; loose
        ones might be touched. Strict is None when the interval is so short that
        it could fall in either of two buckets.
        """
        a, b = max(a, self.t0), min(b, self.t1)
        tol = self.tol
        loose = (self.bucket(a - tol), self.bucket(b + tol))
        if b - a >= 2 * tol:
            return (self.bucket(a + tol), self.bucket(b - tol)), loose
        return (loose if loose[0] == loose[1] else None), loose

    def point_buckets(self, t: float) -> tuple[int, int]:
        tol = self.tol
        return self.bucket(t - tol), self.bucket(t + tol)

    def contains(self, t: float) -> bool:
        return self.t0 <= t <= self.t1


def _busy_per_bucket(slices: list[Slice], win: Window) -> dict[int, float]:
    """Per bucket, the time the union of `slices` (clipped to the window) covers in it."""
    spans = sorted((max(s.ts, win.t0), min(s.end, win.t1)) for s in slices)
    union: list[list[float]] = []
    for a, b in spans:
        if b <= a:
            continue
        if union and a <= union[-1][1]:
            union[-1][1] = max(union[-1][1], b)
        else:
            union.append([a, b])
    covered: dict[int, float] = defaultdict(float)
    for a, b in union:
        for k in range(win.bucket(a), win.bucket(b) + 1):
            lo, hi = win.t0 + k * win.theta, win.t0 + (k + 1) * win.theta
            covered[k] += max(0.0, min(b, hi) - max(a, lo))
    return covered


def _merge(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Union of integer ranges, adjacent ones joined (they are sets of buckets)."""
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def _first_not_covered(inner: list[tuple[int, int]], outer: list[tuple[int, int]], starts: list[int] | None = None) -> int | None:
    """A bucket of `inner` outside `outer` (both merged; `starts`: outer's starts), or None."""
    if starts is None:
        starts = [lo for lo, _ in outer]
    for lo, hi in inner:
        k = bisect_right(starts, lo) - 1
        if k < 0 or outer[k][1] < lo:
            return lo
        if outer[k][1] < hi:
            return outer[k][1] + 1
    return None


# --------------------------------------------------------------------- checking


def _window_of(m: InputModel, level: int, start_us: float | None, end_us: float | None) -> Window | None:
    r = RESOLUTION.get(level, 1)
    if start_us is None and end_us is None:
        if m.default_window is None:
            return None
        return Window(m.default_window[0], m.default_window[1], r, m.max_abs_time)
    t0 = start_us if start_us is not None else (m.default_window or (0.0, 1.0))[0]
    t1 = end_us if end_us is not None else (m.default_window or (0.0, 1.0))[1]
    assert t1 > t0, f"bad window [{t0}, {t1}]"
    return Window(t0, t1, r, m.max_abs_time)


def _check_top_level(m: InputModel, out: dict) -> None:
    """G6: top-level keys other than the event list, unchanged and in input order."""
    input_keys = [] if m.top is None else [k for k in m.top if k not in ("traceEvents", "tb_reduce")]
    expected = ["traceEvents", *input_keys, "tb_reduce"]
    keys = list(out)
    assert keys == expected, f"G6: output top-level keys {keys} != expected {expected}"
    for k in input_keys:
        a, b = m.top[k], out[k]
        assert a == b and _canon(a) == _canon(b), f"G6: top-level key {k!r} changed: {_short(b)} != {_short(a)}"


def _check_tb_reduce(out: dict, level: int, win: Window | None, n_in: int, n_summaries: int) -> None:
    """The `tb_reduce` object describes the reduction that produced this output."""
    tb = out.get("tb_reduce")
    assert isinstance(tb, dict), "output has no tb_reduce object"
    assert tb.get("level") == level and not isinstance(tb.get("level"), bool), f"tb_reduce.level {tb.get('level')!r} != {level}"
    assert "resolution" in tb, "tb_reduce has no resolution"
    if level == 0:
        # SPEC §3 gives level 0 no R ("—"): null or 0 both say so.
        assert tb["resolution"] in (None, 0), f"tb_reduce.resolution {tb['resolution']!r} at level 0"
    else:
        assert tb["resolution"] == RESOLUTION[level], f"tb_reduce.resolution {tb['resolution']!r} != {RESOLUTION[level]}"
    wu = tb.get("window_us")
    assert isinstance(wu, list) and len(wu) == 2, f"tb_reduce.window_us is not [t0, t1]: {_short(wu)}"
    if win is not None:
        for got, want in zip(wu, (win.t0, win.t1)):
            assert _num(got) and abs(got - want) <= _tol(want), f"tb_reduce.window_us {wu} != [{win.t0}, {win.t1}]"
        if level > 0 and "bucket_us" in tb:
            bu = tb["bucket_us"]
            assert _num(bu) and abs(bu - win.theta) <= _tol(win.theta) + win.theta * 1e-9, (
                f"tb_reduce.bucket_us {bu!r} != {win.theta}"
            )
    inp, outp = tb.get("input"), tb.get("output")
    assert isinstance(inp, dict) and inp.get("events") == n_in, f"tb_reduce.input.events {_short(inp)} != {n_in} input events"
    n_out = len(out["traceEvents"])
    assert isinstance(outp, dict) and outp.get("events") == n_out, (
        f"tb_reduce.output.events {_short(outp)} != {n_out} output events"
    )
    assert outp.get("summaries") == n_summaries, f"tb_reduce.output.summaries {outp.get('summaries')!r} != {n_summaries}"


def check_reduction(
    input_doc: dict | list,
    output_doc: dict,
    level: int,
    start_us: float | None = None,
    end_us: float | None = None,
) -> None:
    """Raise AssertionError on the first violation of G1–G7, G9 and the output format.

    `input_doc` is the parsed input (Object or Array format), `output_doc` the parsed
    output of reducing it at `level` with the window [start_us, end_us] (None: the
    default window of SEMANTICS).
    """
    assert level in (0, 1, 2, 3, 4), f"level {level!r} is not 0–4"
    m = _model_of(input_doc)
    assert isinstance(output_doc, dict), "output is not an Object-format trace"
    out_events = output_doc.get("traceEvents")
    assert isinstance(out_events, list), "output has no traceEvents list"
    _check_top_level(m, output_doc)
    win = _window_of(m, level, start_us, end_us)
    n_summaries = sum(1 for e in out_events if _is_summary(e))
    _check_tb_reduce(output_doc, level, win, len(m.events), n_summaries)
    if level == 0:
        _check_level0(m, out_events, win, start_us is None and end_us is None)
        return
    _Reduction(m, out_events, level, win).check()


def _is_summary(e: Any) -> bool:
    # An input event of this category would be ambiguous; real traces have none.
    return isinstance(e, dict) and e.get("cat") == SUMMARY_CAT and e.get("ph") == "X"


# ----------------------------------------------------------------------- level 0


def _check_level0(m: InputModel, out_events: list, win: Window | None, whole: bool) -> None:
    """G9: level 0 writes every event overlapping the window unchanged, in input order."""
    if whole or win is None:
        expected = list(range(len(m.events)))
        flow_idx: set[int] = set()
    else:
        keep = set(m.meta) | set(m.no_ts) | set(m.unpaired)
        for s in m.slices:
            if s.ts <= win.t1 and s.end >= win.t0:
                keep.add(s.idx)
                if s.eidx >= 0:
                    keep.add(s.eidx)
        for i in (*m.counters, *m.instants, *m.others):
            if win.contains(m.events[i]["ts"]):
                keep.add(i)
        flow_idx = set(m.flow_of)
        expected = sorted(keep)
    exp_events = [m.events[i] for i in expected]
    # With a window, flows are checked by _check_level0_flows (they follow G7).
    got = [e for e in out_events if _ph(e) not in FLOW_PHASES] if flow_idx else out_events
    if not _same_json(got, exp_events):
        got_c = Counter(_canon(e) for e in got)
        exp_c = Counter(_canon(e) for e in exp_events)
        missing = exp_c - got_c
        extra = got_c - exp_c
        assert not missing, f"G9: level 0 lost {sum(missing.values())} event(s), e.g. {next(iter(missing))[:300]}"
        assert not extra, (
            f"G9: level 0 wrote {sum(extra.values())} event(s) not in the input window, e.g. {next(iter(extra))[:300]}"
        )
        for j, (a, b) in enumerate(zip(got, exp_events)):
            assert _canon(a) == _canon(b), f"level 0: output event #{j} out of input order: {_short(a)}"
    if flow_idx:
        _check_level0_flows(m, out_events, win)


def _check_level0_flows(m: InputModel, out_events: list, win: Window) -> None:
    """G7 at level 0 with a window: flows are whole or absent, and kept when bound.

    SEMANTICS says both "every event overlapping the window" and "a flow is written
    whole iff each of its events binds to a kept slice"; for a windowed level 0 the
    two disagree, so only what G7 itself states is checked here.
    """
    counts: Counter = Counter()
    pool: dict[str, list[int]] = defaultdict(list)
    for i in m.flow_of:
        pool[_canon(m.events[i])].append(i)
    kept: set[int] = set()
    for j, e in enumerate(out_events):
        if _ph(e) not in FLOW_PHASES:
            continue
        cands = pool.get(_canon(e))
        assert cands, f"G9: level 0 output flow event #{j} is not an input event: {_short(e)}"
        i = cands.pop(0)
        kept.add(i)
        counts[m.flow_of[i]] += 1
    kept_sids = {s.sid for s in m.slices if s.ts <= win.t1 and s.end >= win.t0}
    binding = _FlowBinding(m, kept_sids, win.tol)
    for key, members in m.flows.items():
        c = counts.get(key, 0)
        assert c in (0, len(members)), (
            f"G7: flow {key} written with {c} of its {len(members)} events (dangling), e.g. {_short(m.events[members[0]])}"
        )
        if c == 0 and binding.all_bound_strict(members):
            raise AssertionError(
                f"G7: flow {key} binds to kept slices at both ends but was dropped: {_short(m.events[members[0]])}"
            )


# ------------------------------------------------------------------------- flows


class _FlowBinding:
    """Which slices a flow event may bind to (SEMANTICS: Flows), with float slack.

    For each flow event the candidate slices are every slice of its track that may
    enclose its ts (s, t, f with bp "e") or may be the first slice starting at or
    after its ts (other f). A flow *must* be kept when every candidate of every
    event is kept (and each has one); it *must not* be kept when some event has no
    kept candidate. Between the two the binding the implementation chose decides.
    """

    def __init__(self, m: InputModel, kept_sids: set[int], tol: float) -> None:
        self.m = m
        self.kept = kept_sids
        self.tol = tol
        self.cand_total: dict[int, int] = {}
        self.cand_kept: dict[int, int] = {}
        by_track_enclose: dict[tuple, list[tuple[float, int]]] = defaultdict(list)
        by_track_next: dict[tuple, list[tuple[float, int]]] = defaultdict(list)
        for i in m.flow_of:
            e = m.events[i]
            track = _track(e)
            if e.get("ph") == "f" and e.get("bp") != "e":
                by_track_next[track].append((e["ts"], i))
            else:
                by_track_enclose[track].append((e["ts"], i))
        for track, queries in by_track_enclose.items():
            self._enclosing(m.tracks.get(track, []), sorted(queries))
        for track, queries in by_track_next.items():
            self._next(m.tracks.get(track, []), queries)

    def _enclosing(self, sids: list[int], queries: list[tuple[float, int]]) -> None:
        slices = self.m.slices
        heap: list[tuple[float, int]] = []
        pos = total = kept = 0
        tol = self.tol
        for ts, i in queries:
            while pos < len(sids) and slices[sids[pos]].ts <= ts + tol:
                s = slices[sids[pos]]
                heappush(heap, (s.end, s.sid))
                total += 1
                kept += s.sid in self.kept
                pos += 1
            while heap and heap[0][0] < ts - tol:
                _, sid = heappop(heap)
                total -= 1
                kept -= sid in self.kept
            self.cand_total[i] = total
            self.cand_kept[i] = kept

    def _next(self, sids: list[int], queries: list[tuple[float, int]]) -> None:
        slices = self.m.slices
        starts = [slices[k].ts for k in sids]
        kept_prefix = [0]
        for k in sids:
            kept_prefix.append(kept_prefix[-1] + (k in self.kept))
        tol = self.tol
        for ts, i in queries:
            lo = bisect_left(starts, ts - tol)
            mid = bisect_left(starts, ts)
            after = bisect_right(starts, ts + tol)
            if after > mid or after == len(starts):
                hi = after  # a slice starts in [ts, ts + tol]: nothing later can be first
            else:
                hi = bisect_right(starts, starts[after] + tol)
            self.cand_total[i] = hi - lo
            self.cand_kept[i] = kept_prefix[hi] - kept_prefix[lo]

    def all_bound_strict(self, members: list[int]) -> bool:
        """Every event surely binds to a kept slice."""
        return all(self.cand_total[i] > 0 and self.cand_kept[i] == self.cand_total[i] for i in members)

    def unbound(self, members: list[int]) -> int | None:
        """An event that surely binds to no kept slice, or None."""
        for i in members:
            if self.cand_kept[i] == 0:
                return i
        return None


# -------------------------------------------------------------------- levels 1–4


class _Where:
    """An event's label for a message, rendered only if the message is (assertions are hot)."""

    __slots__ = ("event", "prefix")

    def __init__(self, prefix: str, event: Any) -> None:
        self.prefix, self.event = prefix, event

    def __str__(self) -> str:
        return f"{self.prefix} {_short(self.event)}".strip()

    def __format__(self, spec: str) -> str:
        return str(self)


@dataclass
class _Summary:
    pos: int
    track: tuple
    ts: float
    end: float
    count: int
    top: list
    name: str
    event: dict


class _Reduction:
    """One output of levels 1–4 checked against one input model."""

    def __init__(self, m: InputModel, out_events: list, level: int, win: Window | None) -> None:
        self.m = m
        self.out = out_events
        self.level = level
        self.win = win if win is not None else Window(0.0, 1.0, RESOLUTION[level])
        self.tol = self.win.tol
        t0, t1 = self.win.t0, self.win.t1
        self.overlapping = [s for s in m.slices if s.ts <= t1 and s.end >= t0]
        self.kept: set[int] = set()  # input event indices written as themselves
        self.kept_sids: set[int] = set()
        self.chosen: dict[int, Any] = {}  # input idx -> the expected form it matched
        self.summaries: list[_Summary] = []
        self._cursor: dict[Hashable, int] = {}
        self._forms = m.forms.setdefault(level, {}) if level >= 2 else None
        self._span_cache: dict[int, tuple[tuple[int, int] | None, tuple[int, int]]] = {}
        self.bounds: dict[tuple, list[float]] = {}  # track -> sorted boundaries of kept slices

    # ---------------------------------------------------------------- driver

    def check(self) -> None:
        self._split_summaries()
        self._match_kept()
        self._check_always_kept()
        self._check_slices()
        self._check_summaries()
        self._check_occupancy()
        self._check_counters()
        self._check_instants()
        self._check_flows()

    # ------------------------------------------------------------ matching

    def _split_summaries(self) -> None:
        """Summaries follow every kept event (SEMANTICS: Output) and are well formed."""
        first_summary = None
        for j, e in enumerate(self.out):
            if _is_summary(e):
                if first_summary is None:
                    first_summary = j
                self.summaries.append(self._parse_summary(j, e))
            else:
                assert first_summary is None, (
                    f"output event #{j} {_short(e)} comes after summary #{first_summary}: summaries must come last"
                )

    def _parse_summary(self, j: int, e: dict) -> _Summary:
        where = _Where(f"G3: summary #{j}", e)
        extra = set(e) - SUMMARY_KEYS
        assert not extra, f"{where} has unexpected keys {sorted(extra)}"
        for k in ("name", "ts", "dur", "args"):
            assert k in e, f"{where} has no {k!r}"
        ts, dur, args = e["ts"], e["dur"], e["args"]
        assert _num(ts) and _num(dur) and dur >= 0, f"{where}: ts/dur must be numbers, dur >= 0"
        assert isinstance(args, dict) and set(args) in ({"count", "top"}, {"count", "top", "busy"}), (
            f"{where}: args must be exactly count and top, and busy when it spans buckets"
        )
        busy = args.get("busy")
        assert busy is None or (isinstance(busy, str) and busy.isascii() and busy.isdigit()), (
            f"{where}: args.busy must be a string of digits, not {_short(busy)}"
        )
        count, top = args["count"], args["top"]
        assert isinstance(count, int) and not isinstance(count, bool) and count >= 1, f"{where}: bad args.count"
        assert isinstance(top, list) and 1 <= len(top) <= 5, f"{where}: args.top must hold 1–5 entries"
        for item in top:
            assert (
                isinstance(item, list)
                and len(item) == 2
                and isinstance(item[1], int)
                and not isinstance(item[1], bool)
                and item[1] >= 1
            ), f"{where}: args.top entry {_short(item)} is not [name, count]"
        for k in range(1, len(top)):
            a, b = top[k - 1], top[k]
            assert (-a[1], _name_sort_key(a[0])) < (-b[1], _name_sort_key(b[0])), (
                f"{where}: args.top not most frequent first, ties by name"
            )
        assert sum(c for _, c in top) <= count, f"{where}: args.top counts exceed args.count"
        name = e["name"]
        assert isinstance(name, str), f"{where}: name is not a string"
        # SEMANTICS does not say what N counts: the other slices, the slices not named
        # like the top one, or the other names. Any of the three is accepted, and so
        # is the bare top name when N is 0 ("x (+0 more)" says nothing more). Nor does
        # it say how to write a missing (null) name: any text is accepted for it.
        allowed = {count - 1, count - top[0][1], len(top) - 1}
        top_name = top[0][0]
        match = _NAME_RE.match(name)
        if match is None and 0 in allowed and (name == top_name or not isinstance(top_name, str)):
            n = 0
        else:
            assert match and (match["top"] == top_name or not isinstance(top_name, str)), (
                f"{where}: name is not '<top name> (+N more)'"
            )
            n = int(match["n"])
        assert n in allowed or (len(top) == 5 and n >= 4), f"{where}: '(+{n} more)' fits neither count nor top"
        return _Summary(j, (_h(e.get("pid")), _h(e.get("tid"))), ts, ts + dur, count, top, name, e)

    def _match_kept(self) -> None:
        """Find the input event each non-summary output event writes; check their order.

        Kept events are written in input order (SEMANTICS: Output), so the output's
        kept events must embed, in order, into the input's events. The embedding is
        found greedily (earliest match), which finds one whenever one exists; it is
        also the assignment used by every later check, except for B/E events, which
        are matched as whole pairs. Identical events are interchangeable: an X twin
        folds or stays alike, and C/instant twins are looked at through `_kept_like`.
        """
        m = self.m
        _ensure_index(m)
        keys, n = m.keys, len(m.events)
        got = self.out[: len(self.out) - len(self.summaries)]
        want: list = []
        be: dict[tuple, list[tuple[float, int]]] = defaultdict(list)
        pos = 0
        for j, e in enumerate(got):
            key = _match_key(e)
            found = None
            # An exact copy first: a near one (ts within 1 ns) earlier in the input
            # must not steal the match of an event written unchanged.
            cands = m.by_key.get(key, ())
            for k in range(bisect_left(cands, pos), len(cands)):
                i = cands[k]
                found = self._form_matching(i, e, fuzzy=False)
                if found is not None:
                    pos = i + 1
                    break
            while found is None and pos < n:
                i, pos = pos, pos + 1
                if keys[i] == key or _near_key(keys[i], key):
                    found = self._form_matching(i, e, fuzzy=True)
            if found is None:
                raise AssertionError(self._unplaced_message(j, e, key))
            want.append(found)
            if _ph(e) in ("B", "E") and _num(e.get("ts")):
                be[_track(e)].append((e["ts"], j))
                continue
            self.kept.add(i)
            self.chosen[i] = found
            sid = m.slice_of.get(i)
            if sid is not None:
                self.kept_sids.add(sid)
        if not _same_json(got, want):
            for j, (a, b) in enumerate(zip(got, want)):
                if _canon(a) != _canon(b):
                    assert _same_but_time(a, b), f"output event #{j} {_short(a)} changed: the input has {_short(b)}"
        for track, items in be.items():
            items.sort()
            stack: list[int] = []
            for _, j in items:
                if self.out[j]["ph"] == "B":
                    stack.append(j)
                elif stack:
                    self._match_pair(track, stack.pop(), j)
                else:
                    self._match_unpaired(j)
            for j in stack:
                self._match_unpaired(j)

    def _unplaced_message(self, j: int, e: Any, key: Hashable) -> str:
        """Why output event j has no place in the input: out of order, or not an input event."""
        assert self.m.index is not None
        for i in self.m.index.get(key, ()):
            if self._form_matching(i, e, fuzzy=False) is not None:
                return f"output event #{j} {_short(e)} is out of input order (it is input event #{i})"
        return (
            f"output event #{j} {_short(e)} is not an input event written under the level-{self.level} "
            "args rules (or it was written twice)"
        )

    def _take(self, key: Hashable, e: Any) -> int | None:
        """The first unused input event under `key` that `e` writes (FIFO for duplicates)."""
        assert self.m.index is not None
        cands = self.m.index.get(key)
        if not cands:
            return None
        start = self._cursor.get(key, 0)
        while start < len(cands) and cands[start] in self.kept:
            start += 1
        self._cursor[key] = start  # thousands of ts-less M events share one key
        for pos in range(start, len(cands)):
            i = cands[pos]
            if i in self.kept:
                continue
            for form in self._variants(i):
                if form == e:
                    self.chosen[i] = form
                    return i
        return None

    def _take_fuzzy(self, e: Any) -> int | None:
        """Same event with ts/dur written to within 1 ns (the slack SPEC G1 allows)."""
        if not isinstance(e, dict) or not _num(e.get("ts")):
            return None
        for i in self._near(e):
            if i in self.kept or i in self.m.slice_of and self.m.slices[self.m.slice_of[i]].eidx >= 0:
                continue
            for form in self._variants(i):
                if _same_but_time(form, e):
                    self.chosen[i] = form
                    return i
        return None

    def _near(self, e: dict) -> list[int]:
        m = self.m
        if m.by_ts is None:
            m.by_ts = sorted((x["ts"], i) for i, x in enumerate(m.events) if isinstance(x, dict) and _num(x.get("ts")))
        ts = e["ts"]
        tol = KEPT_TIME_TOL_US + _tol(ts)
        lo = bisect_left(m.by_ts, (ts - tol, -1))
        hi = bisect_right(m.by_ts, (ts + tol, len(m.events)))
        return [i for _, i in m.by_ts[lo:hi] if m.events[i].get("ph") == e.get("ph")]

    def _match_pair(self, track: tuple, jb: int, je: int) -> None:
        m = self.m
        assert m.pair_index is not None
        b, e = self.out[jb], self.out[je]
        for sid in m.pair_index.get(_pair_key(track, b, e), ()):
            s = m.slices[sid]
            if sid in self.kept_sids:
                continue
            fb = self._form_matching(s.idx, b, fuzzy=False)
            fe = self._form_matching(s.eidx, e, fuzzy=False)
            if fb is not None and fe is not None:
                self._keep_pair(s, fb, fe)
                return
        for sid in m.tracks.get(track, []):
            s = m.slices[sid]
            if s.eidx < 0 or sid in self.kept_sids:
                continue
            fb = self._form_matching(s.idx, b, fuzzy=True)
            fe = self._form_matching(s.eidx, e, fuzzy=True)
            if fb is not None and fe is not None:
                self._keep_pair(s, fb, fe)
                return
        raise AssertionError(
            f"G1/G3: output B/E pair #{jb} {_short(b)} / #{je} {_short(e)} is not a B/E pair of the input "
            "(a kept pair must be written as both its events, unchanged)"
        )

    def _variants(self, i: int) -> list[Any]:
        """expected_variants of input event i at this level, computed once per level."""
        if self._forms is None:
            return [self.m.events[i]]
        forms = self._forms.get(i)
        if forms is None:
            forms = self._forms[i] = expected_variants(self.m.events[i], self.level)
        return forms

    def _form_matching(self, i: int, e: Any, fuzzy: bool) -> Any:
        for form in self._variants(i):
            if form == e or (fuzzy and _same_but_time(form, e)):
                return form
        return None

    def _keep_pair(self, s: Slice, fb: Any, fe: Any) -> None:
        self.kept_sids.add(s.sid)
        self.kept.update((s.idx, s.eidx))
        self.chosen[s.idx] = fb
        self.chosen[s.eidx] = fe

    def _match_unpaired(self, j: int) -> None:
        e = self.out[j]
        assert self.m.index is not None
        i = self._take(_match_key(e), e)
        if i is None:
            i = self._take_fuzzy(e)
        if i is None:
            raise AssertionError(
                f"output {e.get('ph')} event #{j} {_short(e)} has no partner in the output but is not an "
                "unpaired event of the input (a pair must be kept as both its events)"
            )
        self.kept.add(i)

    def _kept_like(self, i: int) -> bool:
        """Event i, or an identical twin of it, is in the output (twins are indistinguishable)."""
        return i in self.kept or any(t in self.kept for t in self.m.twins.get(i, ()))

    # ---------------------------------------------------------------- rules

    def _check_always_kept(self) -> None:
        """G6 (M events), events without ts, unpaired B/E, other phases in window."""
        m, kept, win = self.m, self.kept, self.win
        for i in m.meta:
            assert i in kept, f"G6: M event #{i} {_short(m.events[i])} is missing from the output"
        for i in m.no_ts:
            assert i in kept, f"event #{i} without a numeric ts {_short(m.events[i])} is missing from the output"
        for i in m.unpaired:
            assert i in kept, f"unpaired {m.events[i].get('ph')} event #{i} {_short(m.events[i])} is missing"
        for i in m.others:
            inside = win.contains(m.events[i]["ts"])
            assert (i in kept) == inside, (
                f"event #{i} {_short(m.events[i])} {'inside' if inside else 'outside'} the window "
                f"[{win.t0}, {win.t1}] was {'dropped' if inside else 'written'}"
            )
        for i in (*m.counters, *m.instants):
            if i in kept:
                assert win.contains(m.events[i]["ts"]), (
                    f"event #{i} {_short(m.events[i])} outside the window [{win.t0}, {win.t1}] was written"
                )

    def _spans(self, s: Slice) -> tuple[tuple[int, int] | None, tuple[int, int]]:
        """Window.span_buckets of a slice, computed once per reduction."""
        got = self._span_cache.get(s.sid)
        if got is None:
            got = self._span_cache[s.sid] = self.win.span_buckets(s.ts, s.end)
        return got

    def _kept_bounds(self) -> dict[tuple, list[float]]:
        bounds: dict[tuple, list[float]] = defaultdict(list)
        for sid in self.kept_sids:
            s = self.m.slices[sid]
            bounds[s.track].extend((s.ts, s.end))
        for v in bounds.values():
            v.sort()
        return bounds

    def _check_slices(self) -> None:
        """G1 (big slices kept), closure, and no small slice kept without a reason."""
        m, theta, kept = self.m, self.win.theta, self.kept_sids
        for s in self.overlapping:
            if s.dur >= theta and s.sid not in kept:
                raise AssertionError(
                    f"G1: slice {_short(m.events[s.idx])} (dur {s.dur} >= θ {theta}) overlapping the "
                    f"window was not kept as itself"
                )
        self.bounds = bounds = self._kept_bounds()
        tol = self.tol
        for s in self.overlapping:
            if s.sid in kept:
                continue
            b = bounds.get(s.track)
            if not b:
                continue
            k = bisect_right(b, s.ts + tol)
            if k < len(b) and b[k] < s.end - tol:
                raise AssertionError(
                    f"closure: small slice {_short(m.events[s.idx])} strictly contains the boundary {b[k]} of a "
                    "kept slice of its track but was not kept"
                )
        allowed = self._allowed_kept()
        for sid in kept:
            if sid not in allowed:
                s = m.slices[sid]
                raise AssertionError(
                    f"slice {_short(m.events[s.idx])} (dur {s.dur} < θ {theta}) was kept as itself "
                    "without being big, overlapping the window, or crossing a kept boundary"
                )

    def _allowed_kept(self) -> set[int]:
        """Least fixpoint: loosely-big slices in the window plus what crosses their bounds.

        "Loosely big" allows for float noise at the magnitude of ts: an implementation
        that stores [ts, end] and measures end - ts sees dur rounded to the ulp of ts
        (0.25 µs for epoch timestamps), so it may keep a slice a hair under θ.
        """
        m, theta = self.m, self.win.theta
        allowed = {s.sid for s in self.overlapping if s.dur >= theta - self.tol}
        if self.kept_sids <= allowed:
            return allowed
        tracks = {m.slices[sid].track for sid in self.kept_sids - allowed}
        for track in tracks:
            allowed |= self._closure_of(m.tracks[track], allowed)
        return allowed

    def _closure_of(self, order: list[int], seed: set[int]) -> set[int]:
        """Slices of one track reached from `seed` by "contains a boundary" (float slack).

        A worklist over boundaries with a max-end segment tree over the track's slices
        sorted by ts: each query visits only slices that may contain the boundary, and
        a slice leaves the tree once reached, so long chains of improperly nested
        slices cost O(n log n) rather than one full pass per link.
        """
        slices = self.m.slices
        n = len(order)
        starts = [slices[k].ts for k in order]
        size = 1
        while size < n:
            size *= 2
        tree = [-math.inf] * (2 * size)
        reached: set[int] = set()
        queue: list[float] = []
        for pos, sid in enumerate(order):
            if sid in seed:
                queue.extend((slices[sid].ts, slices[sid].end))
            else:
                tree[size + pos] = slices[sid].end
        for node in range(size - 1, 0, -1):
            tree[node] = max(tree[2 * node], tree[2 * node + 1])
        while queue:
            b = queue.pop()
            tol = self.tol
            hi = bisect_left(starts, b + tol)  # slices with ts - tol < b
            stack = [(1, 0, size)]
            while stack:
                node, lo_pos, span = stack.pop()
                if lo_pos >= hi or tree[node] <= b - tol:
                    continue
                if span > 1:
                    half = span // 2
                    stack.append((2 * node, lo_pos, half))
                    stack.append((2 * node + 1, lo_pos + half, half))
                    continue
                x = slices[order[lo_pos]]
                if b == x.ts or b == x.end:  # touching is not crossing
                    continue
                reached.add(x.sid)
                queue.extend((x.ts, x.end))
                tree[node] = -math.inf
                node //= 2
                while node:
                    tree[node] = max(tree[2 * node], tree[2 * node + 1])
                    node //= 2
        return reached

    # ------------------------------------------------------------ summaries

    def _check_summaries(self) -> None:
        """G3: every folded slice is in exactly one summary that spans and nests right."""
        m = self.m
        by_track: dict[tuple, list[_Summary]] = defaultdict(list)
        for sm in self.summaries:
            by_track[sm.track].append(sm)
        self._check_summary_order(by_track)
        for track, sms in by_track.items():
            sms.sort(key=lambda x: (x.ts, x.pos))
            for k in range(1, len(sms)):
                a, b = sms[k - 1], sms[k]
                assert b.ts >= a.end - self.tol, (
                    f"G3: summaries #{a.pos} and #{b.pos} of one track overlap: {_short(a.event)} / {_short(b.event)}"
                )
            bounds = self.bounds.get(track, [])
            for sm in sms:
                tol = self.tol
                k = bisect_right(bounds, sm.ts + tol)
                assert not (k < len(bounds) and bounds[k] < sm.end - tol), (
                    f"G3: summary #{sm.pos} {_short(sm.event)} has the boundary {bounds[k] if k < len(bounds) else ''} "
                    "of a kept slice of its track strictly inside it (does not nest)"
                )
        definite: dict[int, list[Slice]] = defaultdict(list)
        possible: dict[int, list[Slice]] = defaultdict(list)
        n_folded = 0
        starts = {t: [sm.ts for sm in sms] for t, sms in by_track.items()}
        tol = self.tol
        for s in self.overlapping:
            if s.sid in self.kept_sids:
                continue
            n_folded += 1
            sms = by_track.get(s.track, [])
            k = bisect_right(starts.get(s.track, []), s.ts + tol) - 1
            cands = []
            while k >= 0 and sms[k].end + tol >= s.ts:
                if sms[k].ts - tol <= s.ts and s.end <= sms[k].end + tol:
                    cands.append(k)
                k -= 1
            assert cands, (
                f"G3: folded slice {_short(m.events[s.idx])} is inside no summary of its track "
                f"(dropped, or a summary does not span it)"
            )
            for k in cands:
                (definite if len(cands) == 1 else possible)[id(sms[k])].append(s)
        total = sum(sm.count for sm in self.summaries)
        assert total == n_folded, (
            f"G3: summaries count {total} slices but {n_folded} input slices overlapping the window are not in the "
            "output as themselves"
        )
        folded_ranges: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
        for s in self.overlapping:
            if s.sid not in self.kept_sids:
                folded_ranges[s.track].append(self._spans(s)[1])
        merged = {t: _merge(r) for t, r in folded_ranges.items()}
        folded_buckets: dict[tuple, tuple[list[tuple[int, int]], list[int]]] = {
            t: (r, [lo for lo, _ in r]) for t, r in merged.items()
        }
        for sm in self.summaries:
            d, p = definite.get(id(sm), []), possible.get(id(sm), [])
            self._check_one_summary(sm, d, p, folded_buckets.get(sm.track, ([], [])))
            self._check_busy(sm, d, p)

    def _check_summary_order(self, by_track: dict[tuple, list[_Summary]]) -> None:
        """Summaries are sorted by track and ts: one contiguous run per track, ts ascending."""
        seen: set[tuple] = set()
        prev: _Summary | None = None
        for sm in self.summaries:
            if prev is not None and prev.track == sm.track:
                assert sm.ts >= prev.ts, f"summaries #{prev.pos} and #{sm.pos} of one track are not sorted by ts"
            elif sm.track in seen:
                raise AssertionError(f"summary #{sm.pos}: the summaries of its track are not contiguous")
            seen.add(sm.track)
            prev = sm

    def _check_one_summary(
        self, sm: _Summary, d: list[Slice], p: list[Slice], folded_buckets: tuple[list[tuple[int, int]], list[int]]
    ) -> None:
        where = _Where(f"G3: summary #{sm.pos}", sm.event)
        win = self.win
        assert len(d) <= sm.count <= len(d) + len(p), (
            f"{where}: args.count {sm.count} but it spans {len(d)} (+{len(p)} shared) folded slices"
        )
        dc = Counter(_h(s.name) for s in d)
        pc = Counter(_h(s.name) for s in p)
        if not p:
            names = Counter()
            raw = {}
            for s in d:
                names[_h(s.name)] += 1
                raw[_h(s.name)] = s.name
            want = sorted(
                ((raw[k], c) for k, c in names.items()),
                key=lambda x: (-x[1], _name_sort_key(x[0])),
            )[:5]
            want_top = [[n, c] for n, c in want]
            same_types = all(type(a[0]) is type(b[0]) for a, b in zip(sm.top, want_top))
            assert sm.top == want_top and same_types, f"{where}: args.top {_short(sm.top)} != {_short(want_top)}"
            lo, hi = min(s.ts for s in d), max(s.end for s in d)
            assert abs(sm.ts - lo) <= self.tol and abs(sm.end - hi) <= self.tol, (
                f"{where}: spans [{sm.ts}, {sm.end}] but its folded slices span [{lo}, {hi}]"
            )
        else:
            for name, c in sm.top:
                k = _h(name)
                assert dc[k] <= c <= dc[k] + pc[k], f"{where}: args.top count {c} for {name!r} impossible"
            both = d + p
            lo_any, hi_any = min(s.ts for s in both), max(s.end for s in both)
            assert sm.ts >= lo_any - self.tol and sm.end <= hi_any + self.tol, (
                f"{where}: spans more than its folded slices [{lo_any}, {hi_any}]"
            )
            if d:
                lo, hi = min(s.ts for s in d), max(s.end for s in d)
                assert sm.ts <= lo + self.tol and sm.end >= hi - self.tol, (
                    f"{where}: does not span its folded slices [{lo}, {hi}]"
                )
        # Summaries of a track do not overlap, so a bucket strictly inside this hull
        # can only be touched by this summary's own folded slices: checking against
        # all folded slices of the track is the same check, without a sort per summary.
        strict, _ = win.span_buckets(sm.ts, sm.end)
        if strict is not None:
            b = _first_not_covered([strict], *folded_buckets)
            assert b is None, f"{where}: touches bucket {b} that none of its folded slices touches"

    def _check_busy(self, sm: _Summary, d: list[Slice], p: list[Slice]) -> None:
        """args.busy: one digit per bucket the summary touches (present when it touches two
        or more), each the share of that bucket its folded slices keep busy in tenths,
        their union counted once. A digit may differ by one from this computation (times
        summed in another order, a time on a bucket's edge), and lie between the share of
        the slices surely its own and that with those it may share with a neighbour."""
        where = _Where(f"G3: summary #{sm.pos}", sm.event)
        win = self.win
        busy = sm.event["args"].get("busy")
        strict, loose = win.span_buckets(sm.ts, sm.end)
        spans = loose[1] - loose[0] + 1
        if busy is None:
            assert strict is None or strict[0] == strict[1], f"{where}: spans buckets {strict} but has no args.busy"
            return
        first = win.bucket(max(sm.ts, win.t0))
        assert 2 <= len(busy) <= spans and first + len(busy) - 1 <= win.last, (
            f"{where}: args.busy has {len(busy)} digits for buckets {loose}"
        )
        low = _busy_per_bucket(d, win)
        high = _busy_per_bucket(d + p, win) if p else low  # most summaries share no slice
        for k, digit in enumerate(busy):
            want = [min(9, math.floor(b.get(first + k, 0.0) * 10 / win.theta)) for b in (low, high)]
            assert want[0] - 1 <= int(digit) <= want[1] + 1, (
                f"{where}: args.busy digit {k} (bucket {first + k}) is {digit}; its folded slices keep "
                f"{want[0]}-{want[1]} tenths of it busy"
            )

    # ------------------------------------------------------------ occupancy

    def _check_occupancy(self) -> None:
        """G2: per track, the buckets touched by input slices == those touched by output ones."""
        win = self.win
        inp_s: dict[tuple, list] = defaultdict(list)
        inp_l: dict[tuple, list] = defaultdict(list)
        out_s: dict[tuple, list] = defaultdict(list)
        out_l: dict[tuple, list] = defaultdict(list)
        for s in self.overlapping:
            strict, loose = self._spans(s)
            if strict is not None:
                inp_s[s.track].append(strict)
            inp_l[s.track].append(loose)
            if s.sid in self.kept_sids:
                if strict is not None:
                    out_s[s.track].append(strict)
                out_l[s.track].append(loose)
        for sm in self.summaries:
            if sm.ts > win.t1 or sm.end < win.t0:
                continue
            strict, loose = win.span_buckets(sm.ts, sm.end)
            if strict is not None:
                out_s[sm.track].append(strict)
            out_l[sm.track].append(loose)
        for track in set(inp_s) | set(out_s):
            b = _first_not_covered(_merge(inp_s.get(track, [])), _merge(out_l.get(track, [])))
            assert b is None, f"G2: track {self._track_text(track)}: bucket {b} is busy in the input but idle in the output"
            b = _first_not_covered(_merge(out_s.get(track, [])), _merge(inp_l.get(track, [])))
            assert b is None, f"G2: track {self._track_text(track)}: bucket {b} is idle in the input but busy in the output"

    @staticmethod
    def _track_text(track: tuple) -> str:
        return "(" + ", ".join(repr(x[1]) for x in track) + ")"

    # -------------------------------------------------------- counters, instants

    def _check_counters(self) -> None:
        """G4: per series and bucket, min and max samples; first and last of the series."""
        m, win = self.m, self.win
        series: dict[Hashable, list[tuple[float, int, float]]] = defaultdict(list)
        for i in m.counters:
            e = m.events[i]
            ts = e["ts"]
            if not win.contains(ts) or not isinstance(e.get("args"), dict):
                continue
            base = (_h(e.get("pid")), _h(e.get("name")), _h(e.get("id")))
            for k, v in e["args"].items():
                if _num(v):
                    series[(*base, k)].append((ts, i, v))
        for key, samples in series.items():
            samples.sort(key=lambda x: (x[0], x[1]))
            label = f"counter {m.events[samples[0][1]].get('name')!r} series {key[-1]!r}"
            for _ts, i, _ in (samples[0], samples[-1]):
                assert self._kept_like(i), f"G4: {label}: first/last sample in the window {_short(m.events[i])} dropped"
            self._per_bucket(
                samples,
                lambda x: (x[2], x[0], x[1]),
                lambda x: x[2],
                f"G4: {label}: minimum",
            )
            self._per_bucket(
                samples,
                lambda x: (-x[2], x[0], x[1]),
                lambda x: -x[2],
                f"G4: {label}: maximum",
            )

    def _per_bucket(self, samples: list, order_key: Any, value_key: Any, label: str) -> None:
        """Check that the first sample by `order_key` of every bucket is kept.

        A sample within float noise of a bucket edge may belong to either bucket.
        Two rules stay sound whatever the implementation decides: (1) where no such
        sample could beat the surely-first one of a bucket, that one is required, else
        a kept sample of the bucket at least as good; (2) over a run of buckets linked
        by such samples, the best sample of the whole run is the best of whichever
        bucket it lands in, so it is required. Rule 2 is what still checks traces
        whose samples sit exactly on bucket edges (grid timestamps).
        """
        definite: dict[int, list] = defaultdict(list)
        ambiguous: dict[int, list] = defaultdict(list)
        parent: dict[int, int] = {}

        def find(b: int) -> int:
            while parent.get(b, b) != b:
                parent[b] = parent.get(parent[b], parent[b])
                b = parent[b]
            return b

        for x in samples:
            lo, hi = self.win.point_buckets(x[0])
            if lo == hi:
                definite[lo].append(x)
                continue
            for b in range(lo, hi + 1):
                ambiguous[b].append(x)
                ra, rb = find(lo), find(b)
                if ra != rb:
                    parent[rb] = ra
        for b, xs in definite.items():
            best = min(xs, key=order_key)
            amb = ambiguous.get(b, [])
            if all(order_key(a) > order_key(best) for a in amb):
                assert self._kept_like(best[1]), f"{label} of bucket {b} {_short(self.m.events[best[1]])} dropped"
            else:
                ok = any(self._kept_like(x[1]) and value_key(x) <= value_key(best) for x in (*xs, *amb))
                assert ok, f"{label} of bucket {b} (value near {_short(self.m.events[best[1]])}) dropped"
        runs: dict[int, list] = defaultdict(list)
        for table in (definite, ambiguous):
            for b, xs in table.items():
                runs[find(b)].extend(xs)
        for b, xs in runs.items():
            best = min(xs, key=order_key)
            assert self._kept_like(best[1]), (
                f"{label} of the buckets around {b} (edge-ambiguous) {_short(self.m.events[best[1]])} dropped"
            )

    def _check_instants(self) -> None:
        """G5: per scope and bucket the first instant in time (file order on ties) is kept."""
        m, win = self.m, self.win
        scopes: dict[Hashable, list[tuple[float, int]]] = defaultdict(list)
        for i in m.instants:
            e = m.events[i]
            if not win.contains(e["ts"]):
                continue
            s = e.get("s")
            if s == "g":
                scope: Hashable = ("g",)
            elif s == "p":
                scope = ("p", _h(e.get("pid")))
            else:
                scope = ("t", *_track(e))
            scopes[scope].append((e["ts"], i))
        for scope, items in scopes.items():
            self._per_bucket(
                items,
                lambda x: (x[0], x[1]),
                lambda x: (x[0], x[1]),
                f"G5: scope {scope}: first instant",
            )

    # ---------------------------------------------------------------- flows

    def _check_flows(self) -> None:
        """G7: flows whole or absent; written iff every event binds to a kept slice."""
        m = self.m
        binding = _FlowBinding(m, self.kept_sids, self.tol)
        for members in m.flows.values():
            c = sum(1 for i in members if i in self.kept)
            head = _Where("", m.events[members[0]])
            assert c in (0, len(members)), f"G7: flow {head} written with {c} of its {len(members)} events (dangling)"
            if c:
                i = binding.unbound(members)
                assert i is None, f"G7: flow {head} written although its event {_short(m.events[i])} binds to no kept slice"
            else:
                assert not binding.all_bound_strict(members), (
                    f"G7: flow {head} binds to kept slices at every event but was dropped"
                )
