"""Fuzzing the native scanner against the pure-Python path, for a fixed time budget.

Inputs are real event text from the corpus (and a few hand-made odd events), mutated
the ways damaged or hostile files are: bits flipped, bytes replaced by JSON's own
punctuation, ranges deleted, duplicated or cut short. For each input the scanner must
either hand the block back or agree with the pure path exactly: same table, and text
it accepts must be text msgspec accepts. A memory error here is a crash (and under
`make asan`, a report). `TB_REDUCE_FUZZ_SECONDS` sets the budget (default 12 s),
`TB_REDUCE_FUZZ_SEED` replays a run; a failure names the seed and the case.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import time
from pathlib import Path

import msgspec
import numpy as np
import pytest

from tb_reduce_plugin import native as native_module
from tb_reduce_plugin import scan_pieces
from tb_reduce_plugin.model.table import TableBuilder, decode_events
from tests.table_equality import difference_both_ways, native, table_difference

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
BUDGET_S = float(os.environ.get("TB_REDUCE_FUZZ_SECONDS", "12"))
PUNCTUATION = b'{}[]",:\\0123456789eE.-+ \ntfnu'

pytestmark = pytest.mark.skipif(not native_module.available(), reason="the native scanner is not built here")


def _seeds() -> list[bytes]:
    """Blocks `[...]` of real events: the first few kB of each corpus trace's event list."""
    out = []
    for path in sorted(CORPUS.glob("*/*/*")):
        if not path.name.endswith((".json", ".json.gz")):
            continue
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rb") as f:
            head = f.read(200_000)
        at = head.find(b"[", head.find(b'"traceEvents"') if b'"traceEvents"' in head else 0)
        if at < 0:
            continue
        for size in (600, 3000, 12000):
            cut = head.rfind(b"}", at, at + size)
            if cut > at:
                out.append(head[at:cut + 1] + b"]")
    out.append(b'[{"ph":"X","name":"caf\\u00e9 \\ud83d\\ude00","pid":"p","tid":-1,"ts":1.25e3,"dur":0,'
               b'"args":{"step_num":"3","x":[1,{"y":null}]}},{"ph":"s","id":"0x1","cat":"c","ts":2},'
               b'{"ph":"C","name":"m","ts":3,"args":{"v":1.5}},{"ph":"M","name":"thread_name","args":{"name":"t"}}]')
    return out


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 3, 8))):
        if not b:
            break
        i = rng.randrange(len(b))
        kind = rng.randrange(7)
        if kind == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif kind == 1:
            b[i] = rng.choice(PUNCTUATION)
        elif kind == 2:
            del b[i:i + rng.randrange(1, 40)]
        elif kind == 3:
            j = min(len(b), i + rng.randrange(1, 200))
            b[i:i] = b[i:j]
        elif kind == 4:
            b[i:i] = bytes([rng.randrange(256)])
        elif kind == 5:
            del b[rng.randrange(len(b)):]
        else:
            b[i:i] = rng.choice([b"\\u", b"\xc3", b"\xed\xa0\x80", b"1e400", b"-0", b"99999999999999999999", b"{", b"]"])
    return bytes(b)


def _in_pieces(text: bytes) -> object:
    """The block scanned in pieces of ~97 bytes by two threads at once (`scan_pieces`), cut
    wherever it is (inside a string too)."""
    saved = scan_pieces.SPLIT_FROM_BYTES, scan_pieces.PIECE_BYTES, scan_pieces.usable_cores
    scan_pieces.SPLIT_FROM_BYTES, scan_pieces.PIECE_BYTES, scan_pieces.usable_cores = 0, 97, lambda: 2
    try:
        with native(True):
            builder = TableBuilder()
            block = builder.scan(bytearray(text))
    finally:
        scan_pieces.SPLIT_FROM_BYTES, scan_pieces.PIECE_BYTES, scan_pieces.usable_cores = saved
    if block is None:
        return None
    builder.add(block, len(text))
    return builder.build()


def _check_block(text: bytes) -> None:
    with native(True):
        scanning = TableBuilder()
        block = scanning.scan(text)
    pieces = _in_pieces(text)
    assert (pieces is None) == (block is None), "the pieces and one scanner disagree on what is plain"
    if block is not None:
        try:
            events = decode_events(text)
        except msgspec.DecodeError as exc:
            raise AssertionError(f"the scanner took text msgspec refuses ({exc})") from None
        pure = TableBuilder()
        pure.add(events, len(text))
        scanning.add(block, len(text))
        whole = scanning.build()
        diff = table_difference(whole, pure.build())
        assert diff is None, diff
        diff = table_difference(pieces, whole)
        assert diff is None, f"in pieces: {diff}"
    with native(True):  # also when the suite runs with the scanner off (make test-pure)
        module = native_module.scanner_module()
    assert module is not None
    starts = np.empty(module.braces(text) + 1, dtype=np.int64)
    ends = starts.copy()
    n = module.spans(text, starts, ends)
    if n >= 0:
        raws = msgspec.json.decode(text, type=list[msgspec.Raw])
        assert len(raws) == n and all(bytes(r) == text[s:e] for r, s, e in zip(raws, starts, ends))


def test_mutated_real_event_blocks_are_handed_back_or_scanned_exactly_as_python_reads_them() -> None:
    seed = int(os.environ.get("TB_REDUCE_FUZZ_SEED", str(time.time_ns() % 2**32)))
    rng = random.Random(seed)
    seeds = _seeds()
    assert len(seeds) > 50
    deadline = time.monotonic() + BUDGET_S * 0.75
    cases = 0
    while time.monotonic() < deadline:
        text = _mutate(rng, rng.choice(seeds))
        try:
            _check_block(text)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}, case {cases}: {exc}\n{text[:300]!r}") from None
        cases += 1
    assert cases > 100


def test_mutated_trace_files_index_to_the_same_table_or_the_same_error_both_ways(tmp_path: Path) -> None:
    seed = int(os.environ.get("TB_REDUCE_FUZZ_SEED", str(time.time_ns() % 2**32)))
    rng = random.Random(seed)
    seeds = _seeds()
    deadline = time.monotonic() + BUDGET_S * 0.25
    cases = 0
    while time.monotonic() < deadline:
        body = _mutate(rng, rng.choice(seeds))
        path = tmp_path / f"case{cases % 4}.json"
        path.write_bytes(_trace_file(rng, body, seeds))
        try:
            diff = difference_both_ways(path)
        except Exception as exc:  # neither a table nor a TraceError: name the case to replay
            raise AssertionError(f"seed {seed}, case {cases}: {type(exc).__name__}: {exc}\n{body[:300]!r}") from exc
        assert diff is None, f"seed {seed}, case {cases}: {diff}\n{body[:300]!r}"
        cases += 1
    assert cases > 10


def _trace_file(rng: random.Random, body: bytes, seeds: list[bytes]) -> bytes:
    """The event list as a trace file's member, with members around it at times. A member
    after it full of event ends (another list, or a string of escaped events as Fuchsia's
    `systemTraceEvents`), mutated or not, is where a block's cuts fail and the list's close
    is found from the decoder's message (a CI run found a bug there that files holding the
    list alone never reach)."""
    before = b'"displayTimeUnit": "ns", ' if rng.random() < 0.15 else b""
    after = b""
    if rng.random() < 0.35:
        other = rng.choice(seeds)
        value = rng.choice([other, json.dumps(other.decode("utf-8", "replace")).encode(), b"NaN", b'"\xff"', b"12"])
        after = b', "systemTraceEvents": ' + (_mutate(rng, value) if rng.random() < 0.5 else value)
    return b"{" + before + b'"traceEvents":' + body + after + (b"}" if rng.random() < 0.8 else b"")


def _busy_case(rng: random.Random) -> tuple:
    """A window, groups of buckets, and parts as a fold makes them (times in time order,
    each within a bucket or two), with odd ones mixed in: empty and reversed parts, parts
    past the window's ends, times on bucket edges, huge and tiny buckets."""
    r = rng.choice([1, 2, 7, 1000, 100_000])
    t0 = rng.choice([0.0, 1.5, 1.42e12, -3e5])
    theta = rng.choice([1e-3, 0.37, 1.0, 4343.374335161133, 1e6]) * (1 + rng.random())
    t1 = t0 + r * theta
    ngroups = rng.randint(1, 6)
    first = sorted(rng.randrange(r) for _ in range(ngroups))
    last = [f + rng.randint(0, min(3, r - 1 - f)) for f in first]
    n = rng.randint(0, 400)
    lo, hi, group = [], [], []
    t = t0 - theta * rng.random()
    for _ in range(n):
        t += theta * rng.choice([0.0, 0.01, 0.3, 1.0, 2.5]) * rng.random()
        if rng.random() < 0.05:
            t = t0 + theta * rng.randint(0, r)  # exactly on an edge
        d = theta * rng.choice([0.0, 0.1, 0.99, 1.0]) * rng.random()
        lo.append(t)
        hi.append(t + d if rng.random() > 0.05 else t - d)
        group.append(min(ngroups - 1, len(group) * ngroups // max(n, 1)))
    f, la = np.asarray(first, dtype=np.int64), np.asarray(last, dtype=np.int64)
    return np.asarray(lo), np.asarray(hi), np.asarray(group, dtype=np.int64), f, la, t0, t1, theta, r - 1


def test_busy_time_per_bucket_is_the_same_to_the_bit_natively_and_in_numpy(monkeypatch) -> None:
    """`busy.group_busy` with the native loop against its numpy twin, on random folds for
    a share of the fuzzing budget; a case the native loop refuses (a non-finite time, a
    group out of range) goes to the numpy path and changes nothing first."""
    from tb_reduce_plugin.reduce import busy

    seed = int(os.environ.get("TB_REDUCE_FUZZ_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    deadline = time.monotonic() + max(1.0, BUDGET_S / 4)
    cases = 0
    while time.monotonic() < deadline or cases < 200:
        case = _busy_case(rng)
        carried = np.asarray([rng.random() * case[7] for _ in range(rng.randint(0, 2))]) if rng.random() < 0.5 else None
        if carried is not None and len(carried) > case[4][0] - case[3][0] + 1:
            carried = carried[:1]
        monkeypatch.setenv("TB_REDUCE_NATIVE", "1")
        a = busy.group_busy(*case[:5], carried, *case[5:])
        monkeypatch.setenv("TB_REDUCE_NATIVE", "0")
        b = busy.group_busy(*case[:5], carried, *case[5:])
        assert np.array_equal(a[1], b[1]) and a[0].tobytes() == b[0].tobytes(), (seed, cases)
        cases += 1
    sums = np.zeros(4)
    monkeypatch.setenv("TB_REDUCE_NATIVE", "1")
    mod = native_module.scanner_module()
    for lo, g in ((np.array([np.nan]), np.array([0])), (np.array([1.0]), np.array([5]))):
        assert mod.busy_parts(sums, np.zeros(1, dtype=np.int64), lo, lo + 1, g.astype(np.int64),
                              0.0, 4.0, 1.0, 3) == 0
    assert not sums.any()


def _cuts_case(rng: random.Random) -> tuple:
    """A chunk of a track's small slices by start, its kept boundaries and a view's buckets:
    times on bucket edges, on boundaries, equal to one another, zeros of either sign."""
    t0 = rng.choice([0.0, -0.0, -5.0, 1e9])
    r = rng.randint(1, 40)
    theta = rng.choice([1.0, 0.37, 1e-3, 250.0])
    t1 = t0 + theta * r
    n = rng.randint(1, 60)
    ss, se, t = [], [], t0 - theta * rng.random()
    for _ in range(n):
        t += theta * rng.choice([0.0, 0.0, 0.05, 0.5, 1.0, 2.0, 3.5]) * rng.random()
        if rng.random() < 0.1:
            t = t0 + theta * rng.randint(-1, r + 1)  # on an edge (or outside the window)
        ss.append(t)
        se.append(t + theta * rng.choice([0.0, 0.2, 0.99, 1.5]) * rng.random())
    bounds = sorted({rng.choice(ss + se + [t0, t1]) if rng.random() < 0.5 else t0 + (t1 - t0) * rng.random()
                     for _ in range(rng.randint(0, 8))})
    if rng.random() < 0.2:
        ss[rng.randrange(n)] = -0.0 if rng.random() < 0.5 else 0.0
    run_end = None if rng.random() < 0.4 else rng.choice(se) + theta * rng.choice([0.0, -0.5, 0.5, 3.0])
    return np.asarray(ss), np.asarray(se), np.asarray(bounds, dtype=np.float64), t0, t1, r, run_end


def test_where_the_fold_cuts_is_the_same_to_the_bit_natively_and_in_numpy(monkeypatch) -> None:
    """`fold_steps.fold_cuts` and `bound_between` with the native walks against their numpy
    twins, on random chunks for a share of the fuzzing budget (starts going back too, for
    `bound_between`'s searches); what the walks refuse (a time that is not finite, bounds
    out of order) goes the numpy way, changing nothing first. The plans both give are
    compared whole, byte for byte, by the suites that plan real traces either way."""
    from tb_reduce_plugin.reduce import fold_steps
    from tb_reduce_plugin.reduce.buckets import _Buckets

    seed = int(os.environ.get("TB_REDUCE_FUZZ_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    deadline = time.monotonic() + max(1.0, BUDGET_S / 6)
    cases = 0
    while time.monotonic() < deadline or cases < 300:
        ss, se, bounds, t0, t1, r, run_end = _cuts_case(rng)
        bk = _Buckets(t0, t1, r)
        lo = ss if rng.random() < 0.5 else np.asarray(rng.sample(list(ss), len(ss)))
        open_interval = rng.random() < 0.5
        got = []
        for mode in ("1", "0"):
            monkeypatch.setenv("TB_REDUCE_NATIVE", mode)
            new, part, end = fold_steps.fold_cuts(ss, se, bounds, bk, run_end)
            got.append((new.tobytes(), part, end, fold_steps.bound_between(bounds, lo, se, open_interval).tobytes()))
        (new_a, part_a, end_a, within_a), (new_b, part_b, end_b, within_b) = got
        # Values equal; bits too but for a zero's sign where zeros meet (numpy's maximum picks
        # either zero by CPU, and no bucket or busy sum tells them apart).
        assert new_a == new_b and within_a == within_b and end_a == end_b, (seed, cases)
        assert np.array_equal(part_a, part_b) and bool(((part_a.view(np.int64) == part_b.view(np.int64))
                                                        | (part_a == 0)).all()), (seed, cases)
        cases += 1
    monkeypatch.setenv("TB_REDUCE_NATIVE", "1")
    mod = native_module.scanner_module()
    new, part = np.zeros(2, dtype=np.uint8), np.zeros(2)
    for ss, bounds in ((np.array([0.0, np.nan]), np.zeros(0)), (np.array([0.0, 1.0]), np.array([2.0, 1.0]))):
        assert mod.fold_cuts(ss, ss + 1, bounds, 0.0, 4.0, 1.0, 4, np.nan, new, part) is None
        assert not mod.bounds_within(bounds, ss, ss + 1, True, new)
    assert not new.any() and not part.any()


def test_mutated_real_events_are_left_to_python_or_have_nothing_to_cut_at_level_2() -> None:
    """`args_may_need_cut` on real events mutated: False only for an event Python reads,
    whose args hold nothing level 2 cuts (so writing its bytes unchanged is right)."""
    from tb_reduce_plugin.reduce.writer import LIST_LIMIT, STRING_LIMIT, cut_value

    module = native_module._module
    seed = int(os.environ.get("TB_REDUCE_FUZZ_SEED", str(time.time_ns() % 2**32)))
    rng = random.Random(seed)
    events = []
    for text in _seeds():
        try:
            events += [bytes(r) for r in msgspec.json.decode(text, type=list[msgspec.Raw])]
        except msgspec.DecodeError:  # a seed cut at a "}" inside an event
            continue
    assert len(events) > 100
    deadline = time.monotonic() + BUDGET_S * 0.1
    cases = 0
    batch: list[bytes] = []  # the same check made over a list at once (`events_may_need_cut`)
    while time.monotonic() < deadline:
        raw = _mutate(rng, rng.choice(events))
        may = module.args_may_need_cut(raw, STRING_LIMIT, LIST_LIMIT)
        batch.append(raw)
        if len(batch) == 500:
            expected = [i for i, b in enumerate(batch) if module.args_may_need_cut(b, STRING_LIMIT, LIST_LIMIT)]
            assert module.events_may_need_cut(batch, STRING_LIMIT, LIST_LIMIT) == expected, f"seed {seed}"
            batch = []
        if not may:
            try:  # the stdlib reads what msgspec reads, and numbers past a float's range too (as inf)
                ev = json.loads(raw)
            except ValueError:
                raise AssertionError(f"seed {seed}, case {cases}: not JSON, yet not left to Python\n{raw[:300]!r}") \
                    from None
            args = ev.get("args") if isinstance(ev, dict) else None
            assert isinstance(ev, dict) and not (isinstance(args, (dict, list)) and cut_value(args)[1]), \
                f"seed {seed}, case {cases}\n{raw[:300]!r}"
        cases += 1
    assert cases > 100
