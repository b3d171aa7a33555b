"""A block scanned in pieces by two threads at once (`scan_pieces`) gives the table one
scanner gives: the same rows, and every id the one the pure path gives (first met in file
order), whatever the cuts, the text around them, or a piece that is not the plain case."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tb_reduce_plugin import native as native_module
from tb_reduce_plugin import scan_pieces
from tb_reduce_plugin.model.table import TableBuilder, decode_events
from tests.table_equality import native, table_difference

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
CHROME = sorted(p for p in CORPUS.glob("*/*/*") if p.name.endswith((".json", ".json.gz")))

pytestmark = pytest.mark.skipif(not native_module.available(), reason="the native scanner is not built here")


@pytest.fixture
def pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every block split, on any machine (CI may lend one core)."""
    monkeypatch.setattr(scan_pieces, "SPLIT_FROM_BYTES", 0)
    monkeypatch.setattr(scan_pieces, "usable_cores", lambda: 2)


def _table(blocks: list, split: bool, monkeypatch: pytest.MonkeyPatch, pure: bool = False,
           writable: bool = True) -> tuple:
    """The table of `blocks` (texts "[...]", in file order), and how many were split
    (a writable text is split in place, a read-only one on copies)."""
    monkeypatch.setattr(scan_pieces, "SPLIT_FROM_BYTES", 0 if split else 1 << 62)
    split_blocks = []
    original = scan_pieces.PieceScanner.scan

    def counting(self, text, *args):  # type: ignore[no-untyped-def]
        got = original(self, text, *args)
        split_blocks.append(got is not None)
        return got

    monkeypatch.setattr(scan_pieces.PieceScanner, "scan", counting)
    builder = TableBuilder()
    with native(not pure):
        for text in blocks:
            block = builder.scan(bytearray(text) if writable else bytes(text))
            builder.add(block if block is not None else decode_events(text), len(text))
    monkeypatch.setattr(scan_pieces.PieceScanner, "scan", original)
    return builder.build(), sum(split_blocks)


def _same_three_ways(blocks: list, monkeypatch: pytest.MonkeyPatch, writable: bool = True) -> int:
    """Pieces, one scanner and the pure path give one table; returns the blocks split."""
    monkeypatch.setattr(scan_pieces, "usable_cores", lambda: 2)
    in_pieces, split = _table(blocks, True, monkeypatch, writable=writable)
    whole, _ = _table(blocks, False, monkeypatch)
    pure, _ = _table(blocks, False, monkeypatch, pure=True)
    assert table_difference(in_pieces, whole) is None
    assert table_difference(in_pieces, pure) is None
    return split


def _events(k: int, n: int, **extra: object) -> list:
    return [{"ph": "X", "name": f"op{k}-{i % 37}", "cat": f"c{i % 3}", "pid": 1, "tid": i % 4, "ts": k * 1e6 + i,
             "dur": 1 + i % 5, **extra} for i in range(n)]


def _block(events: list, indent: object = 1) -> bytes:
    return json.dumps(events, indent=indent).encode()


def test_names_first_met_in_the_second_threads_piece_keep_their_place_in_file_order(monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = [_block(_events(0, 200) + _events(1, 200)), _block(_events(1, 100) + _events(2, 300))]
    assert _same_three_ways(blocks, monkeypatch) == 2


def test_a_flow_started_in_one_threads_piece_and_ended_in_the_others_binds_to_one_id(monkeypatch: pytest.MonkeyPatch) -> None:
    events = _events(0, 100)
    events += [{"ph": "s", "id": f"0x{i:x}", "cat": "ac2g", "name": "f", "pid": 1, "tid": 1, "ts": 10 + i}
               for i in range(60)]
    events += _events(1, 100)
    events += [{"ph": "f", "id": f"0x{i:x}", "cat": "ac2g", "name": "f", "pid": 2, "tid": 7, "ts": 20 + i, "bp": "e"}
               for i in range(60)]
    events += [{"ph": "t", "id": 5, "cat": None, "pid": "gpu", "tid": "stream 7", "ts": 99}]
    assert _same_three_ways([_block(events)], monkeypatch) == 1
    assert _same_three_ways([_block(events)], monkeypatch, writable=False) == 1


def test_compact_text_without_space_after_commas_is_split_on_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = [_block(_events(0, 300), indent=None).replace(b", ", b",").replace(b": ", b":")]
    assert b",{" in blocks[0] and b", {" not in blocks[0]
    assert _same_three_ways(blocks, monkeypatch) == 1


def test_a_cut_inside_a_string_is_refused_and_the_block_scanned_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name holding `}, {` just after the middle of the block, where the cut is looked
    for: the first piece then ends inside a string, its scanner refuses it, and the block
    is scanned whole."""
    trap = {"ph": "X", "name": "x" * 1000 + "}, {" + "y" * 10, "pid": 1, "tid": 1, "ts": 5, "dur": 1}
    text = _block([trap] + _events(1, 2), indent=None)
    assert len(text) // 2 < text.index(b"}, {") < text.index(b"y" * 10)
    assert _same_three_ways([text], monkeypatch) == 0


@pytest.mark.parametrize("where", ["first", "second"])
def test_a_piece_that_is_not_the_plain_case_sends_the_block_to_the_path_that_reads_it(
        monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """An escaped key (the scanner leaves it to the pure path) in either piece."""
    odd = {"ph": "X", "na\\u006de": "hidden", "pid": 1, "tid": 1, "ts": 3, "dur": 2}
    left, right = _events(0, 150), _events(1, 150)
    (left if where == "first" else right).insert(75, odd)
    text = _block(left + right).replace(b'"na\\\\u006de"', b'"na\\u006de"')
    assert b'"na\\u006de"' in text
    assert _same_three_ways([text], monkeypatch) == 0


def test_past_its_size_the_second_scanner_starts_afresh_and_ids_still_follow_the_file(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan_pieces, "MAX_PRIVATE_VALUES", 50)
    blocks = []
    for k in range(6):  # names distinct per block, and names met again from earlier blocks
        events = [{"ph": "X", "name": f"n{k}-{i}" if i % 2 else f"n0-{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
                  for i in range(400)]
        blocks.append(_block(events))
    assert _same_three_ways(blocks, monkeypatch) == 6


def test_the_second_scanners_private_values_are_charged_to_the_builder(pieces: None) -> None:
    text = _block([{"ph": "X", "name": f"a distinct name {i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
                   for i in range(4000)])
    with native(True):
        builder = TableBuilder()
        before = builder._held()
        assert builder.scan(bytearray(text)) is not None
        assert builder._pieces is not None
        private = builder._pieces.held_bytes()
    assert private > 2000 * 40  # about half the names, each with its slots
    assert builder._held() - before > private


@pytest.mark.parametrize("path", CHROME, ids=[p.name[:60] for p in CHROME])
def test_every_corpus_trace_indexes_to_the_same_table_in_pieces(path: Path, pieces: None) -> None:
    from tb_reduce_plugin.errors import TraceError
    from tb_reduce_plugin.reduce.pipeline import index_file

    out = []
    for split in (0, 1 << 62):
        scan_pieces.SPLIT_FROM_BYTES = split
        with native(True):
            try:
                out.append(index_file(path).table)
            except TraceError as exc:
                out.append(str(exc))
    if isinstance(out[0], str) or isinstance(out[1], str):
        assert out[0] == out[1]
    else:
        assert table_difference(out[0], out[1]) is None


def test_a_private_scanner_refuses_tables_that_are_not_empty() -> None:
    with native(True):  # (also when the suite runs with the scanner off)
        module = native_module.scanner_module()
    assert module is not None
    with pytest.raises(ValueError, match="private"):
        module.Scanner({"x": 0}, ["x"], {}, [], {}, [], {}, [], private=True)


def test_a_private_scanner_makes_the_values_it_met_even_from_a_block_it_hands_back() -> None:
    with native(True):
        module = native_module.scanner_module()
    assert module is not None
    tables: list = []
    for _ in range(4):
        tables += [{}, []]
    scanner = module.Scanner(*tables, private=True)
    text = (b'[{"ph":"X","name":"a","pid":1,"tid":2,"ts":1,"dur":1},{"ph":"X","name":"b","pid":1,"tid":2,"ts":1},'
            b'{"ph":"X","name":"c","x":}]')
    cols = [np.empty(4, dtype=d) for d in (np.uint8, np.float64, np.float64, np.int32, np.int32, np.int32, np.int32,
                                           np.int32, np.uint8, np.uint8, np.int64, np.int64)]
    assert scanner.scan(text, *cols) == -1
    names, ids = tables[1], tables[0]
    assert names == ["a", "b"] and ids == {"a": 0, "b": 1}
    assert tables[5] == [1] and tables[7] == [2]


def test_values_the_second_thread_meets_last_piece_first_are_numbered_in_file_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces of ~1 KB: the second thread scans from the block's last piece back, so it
    meets a name of two pieces (and a flow's end) before the place the file first has it."""
    monkeypatch.setattr(scan_pieces, "PIECE_BYTES", 1024)
    events = []
    for k in range(40):  # each name in two neighbouring stretches, flows ending a stretch later
        events += [{"ph": "X", "name": f"n{(k + i) // 2 % 30}", "cat": f"c{k % 7}", "pid": k % 3, "tid": k,
                    "ts": k * 100 + i, "dur": 1} for i in range(4)]
        events.append({"ph": "s", "id": k, "cat": f"c{k % 7}", "name": "f", "pid": 1, "tid": 1, "ts": k})
        if k:
            events.append({"ph": "f", "id": k - 1, "cat": f"c{(k - 1) % 7}", "name": "f", "pid": 2, "tid": 2,
                           "ts": k, "bp": "e"})
    text = _block(events)
    assert len(text) > 20 * 1024
    assert _same_three_ways([text, _block(events[::-1])], monkeypatch) == 2
    assert _same_three_ways([text], monkeypatch, writable=False) == 1


def test_a_cut_inside_a_string_drops_the_private_scanner_that_may_have_read_its_text(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A name whose text looks like empty events (`}, {}, {}`): a piece that starts inside
    it reads them as events without a name, a value the file may never hold. The block is
    scanned whole, and the private scanner is a fresh one for the next block."""
    monkeypatch.setattr(scan_pieces, "PIECE_BYTES", 512)
    trap = {"ph": "X", "name": "x" * 300 + "}, {}, {}, {}, {}" * 40, "pid": 1, "tid": 1, "ts": 5, "dur": 1}
    blocks = [_block(_events(0, 20) + [trap] + _events(1, 20), indent=None), _block(_events(2, 200))]
    assert _same_three_ways(blocks, monkeypatch) == 1
    with native(True):
        builder = TableBuilder()
        monkeypatch.setattr(scan_pieces, "SPLIT_FROM_BYTES", 0)
        monkeypatch.setattr(scan_pieces, "usable_cores", lambda: 2)
        assert builder.scan(bytearray(blocks[0])) is not None  # scanned whole by the builder's scanner
        assert builder._pieces is not None
        assert builder._pieces._private.values == [[], [], [], []] and builder._pieces._private.scanner.flow_count() == 0


def test_a_process_that_cannot_start_a_thread_scans_each_block_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: object) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(scan_pieces.threading.Thread, "start", refuse)
    blocks = [_block(_events(0, 200) + _events(1, 200))]
    assert _same_three_ways(blocks, monkeypatch) == 0


def test_a_private_scanner_whose_ids_are_not_all_in_its_columns_is_dropped_and_the_block_scanned_whole(
        pieces: None) -> None:
    """Ids its columns do not hold would leave holes in its map (wrong ids, silently): never
    seen in a scan, so made here by a scan of its own nobody adopts."""
    blocks = [_block(_events(0, 300)), _block(_events(1, 300))]
    with native(True):
        builder = TableBuilder()
        builder.add(builder.scan(bytearray(blocks[0])), len(blocks[0]))
        stray = builder._pieces._private
        cols = [np.empty(4, dtype=d) for d in (np.uint8, np.float64, np.float64, np.int32, np.int32, np.int32,
                                               np.int32, np.int32, np.uint8, np.uint8, np.int64, np.int64)]
        assert stray.scanner.scan(b'[{"ph":"X","name":"nowhere in the file","ts":1,"dur":1}]', *cols) == 1
        block = builder.scan(bytearray(blocks[1]))
        assert block is not None and builder._pieces._private is not stray
        builder.add(block, len(blocks[1]))
        table = builder.build()
    pure = TableBuilder()
    with native(False):
        for text in blocks:
            pure.add(decode_events(text), len(text))
    assert table_difference(table, pure.build()) is None
    assert "nowhere in the file" not in table.names
