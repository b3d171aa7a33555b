"""The native Chrome JSON scanner gives the same event table as the pure-Python path:
on every real trace of the corpus, on the odd cases real files hold (escapes, string
pids, flows, counters, step markers, metadata), and on text it must leave alone."""

from __future__ import annotations

import json
import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from index_support import reductions as _reductions

from tb_reduce_plugin import native as native_module
from tb_reduce_plugin.model.table import ChromeEvent, Interner, ScannedBlock, TableBuilder
from tb_reduce_plugin.reduce.pipeline import index_file, reduce_to_bytes
from tb_reduce_plugin.reduce.plan import default_window
from tests.table_equality import difference_both_ways, native

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
CHROME = sorted(p for p in CORPUS.glob("*/*/*") if p.name.endswith((".json", ".json.gz")))

pytestmark = pytest.mark.skipif(not native_module.available(), reason="the native scanner is not built here")


@pytest.mark.parametrize("path", CHROME, ids=[p.name[:60] for p in CHROME])
def test_every_corpus_trace_indexes_to_the_same_table_natively_and_in_pure_python(path: Path) -> None:
    assert difference_both_ways(path) is None


def test_a_real_kineto_trace_reduces_to_the_same_bytes_both_ways() -> None:
    path = next(p for p in CHROME if "resnet50_num_workers_0" in p.name)
    outputs = []
    for on in (True, False):
        with native(on):
            outputs.append(reduce_to_bytes(path, level=2))
    assert outputs[0] == outputs[1]


def test_the_scanner_reads_plain_blocks_itself_rather_than_handing_them_back() -> None:
    path = next(p for p in CHROME if "resnet50_num_workers_0" in p.name)
    scanned = []
    original = TableBuilder.scan

    def spy(self: TableBuilder, text: object, rows: object = None) -> object:
        block = original(self, text, rows)
        scanned.append(block is not None)
        return block

    with native(True), pytest.MonkeyPatch.context() as mp:
        mp.setattr(TableBuilder, "scan", spy)
        index = index_file(path)
    assert index.events > 70_000 and any(scanned)


ODD_EVENTS = [
    {"ph": "X", "name": "caf\u00e9 \u2603 \U0001F600 \"quoted\" back\\slash\nline", "pid": 1, "tid": 2, "ts": 1.5, "dur": 2},
    {"ph": "X", "name": 7, "pid": "host:1", "tid": "stream 7", "ts": 3, "dur": 1},
    {"ph": "X", "name": None, "cat": None, "pid": None, "tid": None, "ts": -0.0, "dur": 0},
    {"ph": "X", "name": "n", "pid": -999_999_999_999_999_999, "tid": 10**17, "ts": 1e3, "dur": 2.5e-3},
    {"ph": "s", "name": "flow", "cat": "ac2g", "id": 17, "pid": 1, "tid": 2, "ts": 4},
    {"ph": "f", "name": "flow", "cat": "ac2g", "id": 17, "bp": "e", "pid": 1, "tid": 2, "ts": 5},
    {"ph": "t", "name": "flow", "cat": "ac2g", "id": "0x1f", "pid": 1, "tid": 2, "ts": 5},
    {"ph": "i", "name": "inst", "s": "g", "pid": 1, "tid": 2, "ts": 6},
    {"ph": "I", "name": "inst", "s": "p", "pid": 1, "tid": 2, "ts": 6},
    {"ph": "R", "name": "inst", "s": "t", "pid": 1, "tid": 2, "ts": 6},
    {"ph": "C", "name": "mem", "pid": 1, "ts": 7, "args": {"used": 5, "free": "x", "frac": 0.5}},
    {"ph": "C", "name": "mem", "pid": 1, "args": {"used": 6}},
    {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "trainer"}},
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "main"}},
    {"ph": "X", "name": "step", "pid": 1, "tid": 2, "ts": 8, "dur": 3, "args": {"step_num": "12"}},
    {"ph": "X", "name": "not a step", "pid": 1, "tid": 2, "ts": 9, "dur": 1, "args": {"nested": {"step_num": 3}}},
    {"ph": "B", "name": "step_num", "pid": 1, "tid": 2, "ts": 10, "args": {"k": "step_num"}},
    {"ph": "E", "pid": 1, "tid": 2, "ts": 11},
    {"ph": "X", "name": "args", "pid": 1, "tid": 2, "ts": 12, "dur": 1,
     "args": {"a": [1, [2, [3, {"b": None}]]], "t": True, "f": False, "e": -1.5e-7, "s": "\u0000\u001f"}},
    {"ph": "", "name": "empty phase"},
    {"ph": "XX", "name": "two-letter phase"},
    {"ph": "\u00e9", "name": "non-ASCII phase"},
    {},
    {"unknown": {"deep": [1, 2, {"x": "y"}]}, "ph": "X", "ts": 13, "dur": 1},
]


@pytest.mark.parametrize("event", ODD_EVENTS, ids=[json.dumps(e)[:40] for e in ODD_EVENTS])
def test_each_odd_but_plain_event_is_scanned_natively_into_the_same_table(tmp_path: Path, event: dict) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [ODD_EVENTS[0], event, ODD_EVENTS[1]]}))
    assert difference_both_ways(path) is None
    text = ("[" + json.dumps(event) + "]").encode()
    with native(True):
        assert isinstance(TableBuilder().scan(text), ScannedBlock)


LEFT_TO_PYTHON = [
    b'[{"ph":"X","name":1.5}]',  # a float name
    b'[{"ph":"X","name":true}]',  # a bool name
    b'[{"ph":"X","pid":1.0}]',  # a float pid
    b'[{"ph":"X","ts":"12"}]',  # a time as a string
    b'[{"ph":"X","ts":null}]',
    b'[{"ph":"X","ts":1e400}]',  # infinite
    b'[{"ph":"X","pid":123456789012345678901234567890}]',  # beyond int64
    b'[{"ph":"X","ph":"B"}]',  # a field given twice
    b'[{"\\u0070h":"X"}]',  # an escaped key that spells a field
    b'[{"ph":"X","name":"\\ud800"}]',  # a lone surrogate escape
    b'[{"ph":"X","name":"\xff"}]',  # invalid UTF-8
    b'[{"ph":"s","id2":{"local":"0x1"},"cat":"c"}]',  # a flow without an id
    b'[1, {"ph":"X"}]',  # an element that is not an object
    b'[{"ph":"X","args":' + b'[' * 100 + b']' * 100 + b'}]',  # nested deeper than the scanner goes
    b'[{"ph":"X"} {"ph":"X"}]',  # malformed
    b'[{"ph":"X","ts":01}]',  # a leading zero
    b'[{"ph":"X"}',  # unterminated
    b'[{"ph":"X"}] x',  # trailing text
]


@pytest.mark.parametrize("text", LEFT_TO_PYTHON, ids=[t[:40].decode("latin-1") for t in LEFT_TO_PYTHON])
def test_text_outside_the_plain_case_is_handed_back_to_the_pure_python_path(text: bytes) -> None:
    with native(True):
        assert TableBuilder().scan(text) is None


@pytest.mark.parametrize("text", LEFT_TO_PYTHON[:13], ids=[t[:40].decode("latin-1") for t in LEFT_TO_PYTHON[:13]])
def test_a_trace_holding_such_an_event_still_gives_the_same_table_both_ways(tmp_path: Path, text: bytes) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents":[{"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":1},' + text[1:-1] + b']}')
    assert difference_both_ways(path) is None


def test_every_prefix_of_a_block_is_refused_cleanly_and_never_read_past_its_end() -> None:
    text = json.dumps(ODD_EVENTS[:12]).encode()
    with native(True):
        for cut in range(len(text)):
            # a copy of exactly the prefix, so a read past its end is a read out of bounds
            assert TableBuilder().scan(bytes(text[:cut])) is None
        assert TableBuilder().scan(text) is not None


def test_the_scanner_charges_its_hash_tables_to_the_builders_memory() -> None:
    names = [{"ph": "X", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(20_000)]
    text = json.dumps(names).encode()
    with native(True):
        builder = TableBuilder()
        block = builder.scan(text)
        assert block is not None
        builder.add(block, len(text))
        assert builder._scanner.cache_bytes() > 20_000 * 8
        assert builder._held() > builder._scanner.cache_bytes()
        table = builder.build()
    assert table.names[:3] == ["op0", "op1", "op2"] and len(table.names) == 20_000
    assert np.array_equal(table.ts, np.arange(20_000, dtype=np.float64))


def _flows_block(ids: list) -> bytes:
    return json.dumps([{"ph": "s" if k % 2 else "f", "bp": "e", "cat": "c", "id": v, "pid": 1, "tid": 1, "ts": k}
                       for k, v in enumerate(ids)]).encode()


# Flow ids as the pure path may hold them: equal by Python's rules (7 == 7.0 == True + 6,
# -0.0 == 0, 2**70 == float(2**70)) or never equal to a scanned one (a fraction, a lone
# surrogate, an id2 made hashable, a big int, NaN).
DECODED_FLOW_IDS = [7, 7.0, "a", True, 1, 1.0, -0.0, 0, 2**70, float(2**70), 1.5, "a\ud800", "a\ud800",
                    ("local", "0x1"), ("local", "0x1"), 2**63, -2**63, float(-2**63), float("nan"), "\u00e9", None]


def test_flow_keys_of_decoded_events_take_the_ids_the_scan_gives_by_pythons_equality() -> None:
    """The scanner keeps flow keys as bytes, no Python value each; events the pure path
    decoded intern theirs into the same table, by Python's equality, numbered in the
    order met, so every id is the one a pure build's `Interner` gives."""
    nan = DECODED_FLOW_IDS[-3]
    with native(True):
        builder = TableBuilder()
        block = builder.scan(_flows_block([7, "a", "\u00e9", 0, -2**59]))
        assert isinstance(block, ScannedBlock)
        builder.add(block, 1)
        decoded = [ChromeEvent(ph="s", cat="c", id=v, pid=1, tid=1, ts=1.0) for v in DECODED_FLOW_IDS]
        decoded += [ChromeEvent(ph="f", cat=None, id=7, bp="e", pid=1, tid=1, ts=2.0),
                    ChromeEvent(ph="t", cat="c", id=nan, pid=1, tid=1, ts=3.0)]
        builder.add(decoded, 1)
        assert not builder._flows.values  # no Python value per scanned flow key
        native_ids = builder.build().flow_key
    pure = Interner()
    expected = pure.ids_of([("c", v) for v in [7, "a", "\u00e9", 0, -2**59]]
                           + [(ev.cat, ev.id if ev.id is not None else None) for ev in decoded])
    assert native_ids.tolist() == expected.tolist()
    d = native_ids[5:]
    assert d[0] == d[1] == native_ids[0] and d[2] == native_ids[1] and d[6] == d[7] == native_ids[3]
    assert d[8] == d[9] and d[11] == d[12] != d[2] and d[16] == d[17] != native_ids[4] and d[19] == native_ids[2]


def test_a_scanner_adopts_flow_keys_only_from_a_private_one_with_every_category_mapped() -> None:
    with native(True):
        module = native_module.scanner_module()
    assert module is not None
    tables = lambda: [x for _ in range(4) for x in ({}, [])]  # noqa: E731
    private, shared = module.Scanner(*tables(), private=True), module.Scanner(*tables())
    text = _flows_block([7, "a", 7, "b"])
    cols = [np.empty(4, dtype=d) for d in (np.uint8, np.float64, np.float64, np.int32, np.int32, np.int32, np.int32,
                                           np.int32, np.uint8, np.uint8, np.int64, np.int64)]
    assert private.scan(text, *cols) == 4 and private.flow_count() == 3
    out = np.empty(3, dtype=np.int32)
    ids = lambda *i: np.array(i, dtype=np.int32)  # noqa: E731
    with pytest.raises(IndexError):
        shared.adopt_flows(private, np.zeros(0, dtype=np.int32), ids(0, 1, 2), out)  # its category unmapped
    with pytest.raises(IndexError):  # an id it never gave
        shared.adopt_flows(private, np.zeros(1, dtype=np.int32), ids(3), np.empty(1, dtype=np.int32))
    with pytest.raises(ValueError):  # out not one per id
        shared.adopt_flows(private, np.zeros(1, dtype=np.int32), ids(0, 1), np.empty(3, dtype=np.int32))
    with pytest.raises(ValueError):
        private.adopt_flows(shared, np.zeros(1, dtype=np.int32), ids(), np.empty(0, dtype=np.int32))
    cat = np.array([5], dtype=np.int32)  # its category 0 is the shared one's 5
    assert shared.adopt_flows(private, cat, ids(2, 1), out[:2]) == 2  # "b", "a": the shared one's first
    assert out[:2].tolist() == [0, 1]
    assert shared.adopt_flows(private, cat, ids(0, 1, 2), out) == 3 and out.tolist() == [2, 1, 0]
    again = np.empty(2, dtype=np.int32)
    shared.flow_ids(np.array([5, 4], dtype=np.int32), [7.0, 7], {}, again)
    assert again.tolist() == [2, 3] and shared.flow_count() == 4


def test_a_build_named_by_tb_reduce_scan_path_is_the_one_loaded() -> None:
    path = os.environ.get("TB_REDUCE_SCAN_PATH")
    with native(True):
        module = native_module.scanner_module()
    assert module is not None
    if path:  # `make asan`: the sanitizer build, not the installed one
        assert module.__file__ == path
    else:
        assert Path(module.__file__).parent == ROOT / "tb_reduce_plugin"




@pytest.mark.parametrize("chunk", [256 * 1024, 700, 97])
def test_a_server_reducing_windows_from_kept_chunks_writes_what_a_fresh_pure_pass_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Kept chunks of any size: at 97 bytes nearly every event lies across two or more."""
    from tb_reduce_plugin.formats import block_store

    monkeypatch.setattr(block_store, "TEXT_CHUNK", chunk)
    path = next(p for p in CHROME if "resnet50_num_workers_0" in p.name)
    with native(False):
        pure = index_file(path)
    t0, t1 = default_window(pure.table)
    third = (t1 - t0) / 3
    windows = [(0, None, None), (2, t0 + third, t1 - third), (0, t0 + third, t0 + 2 * third), (1, None, None)]
    expected = _reductions(pure, windows)
    with native(True):
        served = index_file(path, store_dir=str(tmp_path / "store"))
    assert served.source.positions is not None
    served.source.block_size = 50_000  # many chunks: events straddle their edges
    first = _reductions(served, windows[:1])  # the first pass reads the file and keeps it by chunks
    assert served.source.has_store
    rest = _reductions(served, windows[1:])  # later windows read only the chunks they need
    assert first + rest == expected
    offsets = served.source.block_files()[2]
    assert np.diff(offsets).max() <= chunk  # kept in chunks of that size


def _scan_table(text: bytes) -> object:
    builder = TableBuilder()
    block = builder.scan(text)
    assert block is not None
    builder.add(block, len(text))
    return builder.build()


def test_scans_on_several_threads_at_once_give_the_tables_one_thread_gives() -> None:
    """The scan releases the GIL and takes it back only to intern a new string: threads
    scanning at the same time (a server's requests) must each get exactly their own table."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.table_equality import table_difference

    texts = [
        json.dumps(
            [{"ph": "X", "name": f"op{k}-{i % 5_000}\u2603", "cat": f"c{i % 7}", "pid": k, "tid": f"t{i % 3}",
              "ts": i, "dur": 1 + i % 4} for i in range(30_000)]
        ).encode()
        for k in range(6)
    ]
    with native(True):
        alone = [_scan_table(t) for t in texts]
        with ThreadPoolExecutor(max_workers=6) as pool:
            together = list(pool.map(_scan_table, texts * 2))
    for i, table in enumerate(together):
        assert table_difference(table, alone[i % len(texts)]) is None


def test_numbers_past_the_exact_fast_path_scan_on_several_threads_at_once() -> None:
    """Kineto writes µs since the epoch with a fraction (`1694128201424195.5`): 17 digits, past
    the exact fast path, so nearly every timestamp takes the slow conversion. It once called
    CPython's float parser with the GIL released, and two hosts scanned at once corrupted the
    heap; each thread must get exactly the table one thread gets (and the pure path's)."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.table_equality import table_difference

    texts = [
        json.dumps(
            [{"ph": "X", "name": f"op{i % 50}", "pid": k, "tid": 1, "ts": 1694128201424195.5 + i * 0.25 + k,
              "dur": float(f"1.2345678901234567e{i % 5}")} for i in range(40_000)]
        ).encode()
        for k in range(4)
    ]
    with native(True):
        alone = [_scan_table(t) for t in texts]
        with ThreadPoolExecutor(max_workers=4) as pool:
            together = list(pool.map(_scan_table, texts * 3))
    for text, table in zip(texts, alone):  # converted as Python's own float parser converts them
        events = json.loads(text)
        assert np.array_equal(table.ts, np.array([e["ts"] for e in events]))
        assert np.array_equal(table.dur, np.array([e["dur"] for e in events]))
    for i, table in enumerate(together):
        assert table_difference(table, alone[i % len(texts)]) is None


def test_a_row_count_too_small_hands_the_block_back_and_the_reader_counts_each_block_once() -> None:
    """The reader counts a block's `{` bytes once (to charge what decoding it can hold) and
    the scanner sizes its columns by that count; a count too small (never the reader's: it
    counts the block and what follows it) makes the scanner hand the block back whole,
    never write past its columns."""
    text = b"[" + b",".join(b'{"ph":"X","name":"n%d","pid":1,"tid":1,"ts":%d,"dur":1}' % (k, k)
                            for k in range(50)) + b"]"
    with native(True):
        assert TableBuilder().scan(text, rows=10) is None
        block = TableBuilder().scan(text, rows=50)
        assert isinstance(block, ScannedBlock) and len(block) == 50
        assert native_module.scanner_module().braces(text) == text.count(b"{") == 50


def test_without_a_count_a_block_denser_than_the_guess_is_counted_and_scanned_again_into_the_same_columns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Uncounted, the columns are sized from the densest block so far: a block of many more
    events a byte makes the scanner answer "too few rows" (-3, not "not mine"), and that block
    alone is counted and scanned again, into what a counted scan gives. Only the first block
    and that one are counted."""
    sparse = ("[" + ",".join(json.dumps({"ph": "X", "name": f"n{k}", "pid": 1, "tid": 1, "ts": k, "dur": 1,
                                         "args": {"pad": "x" * 400}}) for k in range(200)) + "]").encode()
    dense = ("[" + ",".join(json.dumps({"ph": "i", "name": "m", "pid": 1, "tid": 2, "ts": k, "s": "t"})
                            for k in range(3000)) + "]").encode()
    with native(True):
        module = native_module.scanner_module()
        counted = []
        real = module.braces
        monkeypatch.setattr(module, "braces", lambda text: counted.append(len(text)) or real(text))
        builder = TableBuilder()
        blocks = [builder.scan(t) for t in (sparse, sparse, dense, dense)]
        assert counted == [len(sparse), len(dense)]
        alone = TableBuilder()
        alone.scan(sparse, rows=sparse.count(b"{"))
        again = alone.scan(dense, rows=dense.count(b"{"))
        assert [len(b) for b in blocks] == [200, 200, 3000, 3000]
        assert all(np.array_equal(blocks[2].cols[k], v, equal_nan=v.dtype.kind == "f") for k, v in again.cols.items())
        cols = [np.empty(10, dtype=d) for d in (np.uint8, np.float64, np.float64, np.int32, np.int32, np.int32,
                                                np.int32, np.int32, np.uint8, np.uint8, np.int64, np.int64)]
        assert builder._scanner.scan(dense, *cols) == -3  # too few rows, told apart from -1
        assert builder._scanner.scan(b'[{"ph":"X","name":1.5}]', *cols) == -1


def test_a_block_the_scanner_hands_back_is_charged_for_its_python_objects_before_it_is_decoded(tmp_path: Path) -> None:
    """The scanner makes no Python object per event, so the reader charges nothing for them up
    front; a block it hands back is decoded by the pure path, and charged for it first (once,
    bounded by the `{` bytes from there on), as a reader without the scanner charges every
    block. Blocks of 1 MB under a 24 MB budget; the last block's first cut (the document's
    closing brace) is tried by the pure path either way."""
    from tb_reduce_plugin.budget import MemoryBudget
    from tb_reduce_plugin.formats.chrome_json import DECODED_BYTES_PER_BRACE

    events = [{"ph": "X", "name": f"n{k}", "pid": 1, "tid": 1, "ts": k, "dur": 1} for k in range(40_000)]
    plain, odd = tmp_path / "plain.json", tmp_path / "odd.json"
    plain.write_text(json.dumps({"traceEvents": events}))
    events[20_000]["name"] = 1.5  # a float name: the block holding it goes to the pure path
    odd.write_text(json.dumps({"traceEvents": events}))
    charged = {}
    for on in (True, False):
        for path in (plain, odd):
            account = MemoryBudget(24 << 20).account("reading")
            calls = []
            real = account.charge

            def spy(n: int, what: str = "", *a: object, calls: list = calls, real: Any = real, **k: object) -> None:
                if what == "the decoded events of one block":
                    calls.append(n)
                real(n, what, *a, **k)

            account.charge = spy
            with native(on):
                index_file(path, account=account)
            charged[on, path.stem] = calls
    assert len(charged[False, "plain"]) >= 2 and len(charged[False, "odd"]) == len(charged[False, "plain"])
    assert len(charged[True, "plain"]) <= 1  # the last block's tail at most
    assert len(charged[True, "odd"]) == len(charged[True, "plain"]) + 1  # the block handed back, once
    assert max(charged[True, "odd"]) >= DECODED_BYTES_PER_BRACE * 10_000  # bounded by its braces, as without


def test_a_scanned_block_charges_the_events_it_decodes_whole_until_they_are_added(tmp_path: Path) -> None:
    """Counters (and metadata, step markers) of a scanned block are decoded into Python
    objects: a block of counters charges them before, as the pure path's block charges its
    events, and gives the charge back once the table has taken them."""
    from tb_reduce_plugin.budget import MemoryBudget
    from tb_reduce_plugin.formats.chrome_json import DECODED_BYTES_PER_BRACE

    path = tmp_path / "counters.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "C", "name": "mem", "pid": 1, "ts": k, "args": {"v": k}}
                                                for k in range(40_000)]}))
    budget = MemoryBudget(24 << 20)
    account = budget.account("reading")
    whole: list[int] = []
    real_charge, real_release = account.charge, account.release
    account.charge = lambda n, what="", *a, **k: (whole.append(n) if what == "the events of one block read whole"
                                                  else None) or real_charge(n, what, *a, **k)
    with native(True):
        index = index_file(path, account=account)
    assert sum(whole) >= DECODED_BYTES_PER_BRACE * 39_000 and len(whole) >= 2  # every counter, block by block
    assert index.table.counter_value.tolist()[:3] == [0.0, 1.0, 2.0]
    account.charge, account.release = real_charge, real_release
    held = budget.used
    assert held < DECODED_BYTES_PER_BRACE * 40_000  # given back: what stays is the table's own


def test_braces_counted_thirty_two_bytes_at_a_time_are_every_brace_at_any_length_and_offset() -> None:
    """`braces` counts in vector lanes (AVX2, where the CPU has it), byte counters summed every
    255 rounds, and the rest eight bytes or one at a time: lengths around each of those edges,
    at every offset."""
    rng = np.random.default_rng(7)
    alphabet = np.frombuffer(b'{{{}a"\\ ,\xff', dtype=np.uint8)
    with native(True):  # the suite's pure run switches it off, not out
        module = native_module.scanner_module()
    lengths = [0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 255 * 16, 255 * 16 + 1, 255 * 32 - 1, 255 * 32, 255 * 32 + 40, 100_003]
    for n in lengths:
        text = rng.choice(alphabet, n + 40).tobytes()
        for offset in range(0, 40, 3):
            part = memoryview(text)[offset:offset + n]
            assert module.braces(part) == bytes(part).count(b"{"), (n, offset)
    assert module.braces(b"{" * (255 * 32 * 3 + 5)) == 255 * 32 * 3 + 5  # every lane full, every round


@pytest.mark.parametrize("byte", [0x0A, 0x00, 0xFF, ord("{"), 0x80])
def test_count_byte_is_bytes_count_of_any_byte_at_any_length_and_offset(byte: int, tmp_path: Path) -> None:
    """`count_byte`, the same counter for any byte (an XSpace's event tags): as `bytes.count`
    at the lengths around its vector, eight-byte and one-byte edges, at every offset, in a
    mapping too; a byte outside 0-255 is refused."""
    rng = np.random.default_rng(byte)
    alphabet = np.frombuffer(bytes([byte, byte, byte ^ 1, byte ^ 0x80, 0x0A, 0]), dtype=np.uint8)
    with native(True):
        module = native_module.scanner_module()
    for n in [0, 1, 7, 8, 9, 31, 32, 33, 255 * 32 - 1, 255 * 32, 255 * 32 + 1, 100_003]:
        text = rng.choice(alphabet, n + 40).tobytes()
        for offset in range(0, 40, 7):
            part = memoryview(text)[offset:offset + n]
            assert module.count_byte(part, byte) == bytes(part).count(bytes([byte])), (n, offset)
    assert module.count_byte(bytes([byte]) * (255 * 32 * 2 + 9), byte) == 255 * 32 * 2 + 9
    path = tmp_path / "mapped"
    path.write_bytes(text)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        with memoryview(mapped) as view, view[5:-3] as part:
            assert module.count_byte(part, byte) == text[5:-3].count(bytes([byte]))
    with pytest.raises(ValueError):
        module.count_byte(b"x", 256)
