"""Chrome trace JSON (and PyTorch/Kineto's `.pt.trace.json`) into the event model.

Blocks of events come from `chrome_json.ChromeJsonReader`; each is read by the
native scanner straight into columns when it is built and the block is the plain
case, and otherwise decoded by msgspec into `ChromeEvent`s: the table is the same
either way (`model.table.TableBuilder`).

With the scanner, the pass also notes where each event's bytes lie in the file's
decompressed text (`EventPositions`), so writing the kept events later copies those
bytes instead of finding and decoding every block again.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..model.table import ColumnFiles, ScannedBlock, TableBuilder, decode_events
from ..native import scanner_module
from . import Parsed, ReadOptions
from .chrome_json import ChromeJsonEvents, ChromeJsonReader, EventPositions, block_size_for
from .sources import TraceStream

POSITION_FILES = {"starts": "pos_starts.npy", "lengths": "pos_lengths.npy"}
_POSITION_DTYPES = {"starts": np.int64, "lengths": np.int32}


class _Positions:
    """Each block's event spans, offset to the file; given up at the first block whose
    spans are unknown (no scanner, text it leaves alone) or whose text was rewritten.

    With a `folder` (the parse's spill folder) they are written there block by block and
    mapped at the end, as the table's columns are: 12 B an event held for the whole parse
    refused a 50 M-event trace at the default budget. Without one they are held, and
    charged, in memory. A disk that fails the write raises `SpillFailed`, as the table's
    columns do: the caller reads again in memory."""

    def __init__(self, account: Any, folder: Optional[str] = None) -> None:
        self._account = account
        self._starts: list[np.ndarray] = []
        self._lengths: list[np.ndarray] = []
        self._charged = 0
        self._n = 0
        self.lost = scanner_module() is None
        self._files = (ColumnFiles(folder, POSITION_FILES, _POSITION_DTYPES, "the positions of the events")
                       if folder is not None and not self.lost else None)

    def add(self, at: int, block: Any, text: Any) -> None:
        if self.lost:
            return
        if isinstance(block, ScannedBlock):
            start, end = block.cols["start"], block.cols["end"]
        else:
            module = scanner_module()
            start = np.empty(len(block), dtype=np.int64)
            end = np.empty(len(block), dtype=np.int64)
            if module is None or module.spans(text, start, end) != len(block):
                self.drop()
                return
        lengths = end - start
        if len(lengths) and int(lengths.max()) >= 2**31:
            self.drop()
            return
        self._n += len(start)
        if self._files is not None:
            self._files.append({"starts": start + at, "lengths": lengths})
            return
        self._starts.append(start + at)
        self._lengths.append(lengths.astype(np.int32))
        if self._account is not None:
            n = 12 * len(start)
            self._account.charge(n, "the positions of the events in the file")
            self._charged += n

    def drop(self) -> None:
        self.lost = True
        self._starts, self._lengths = [], []
        if self._files is not None:
            self._files.discard()
            self._files = None
        if self._account is not None and self._charged:
            self._account.release(self._charged)
            self._charged = 0

    def result(self, reader: ChromeJsonReader, events: int) -> Optional[EventPositions]:
        if reader.rewritten or self._n != events:
            self.drop()
        if self.lost:
            return None
        if self._files is not None:
            cols = self._files.finish(self._n)
            self._files = None
            return EventPositions(cols["starts"], cols["lengths"], reader.file_crc(), reader.read_bytes)
        starts = np.concatenate(self._starts) if self._starts else np.zeros(0, dtype=np.int64)
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, dtype=np.int32)
        self._starts, self._lengths = [], []
        return EventPositions(starts, lengths, reader.file_crc(), reader.read_bytes)


def read_chrome_json(stream: TraceStream, account: Any, options: ReadOptions) -> Parsed:
    block_bytes = block_size_for(account.budget.limit if account is not None else None)
    reader = ChromeJsonReader(stream, block_bytes, account=account)
    builder = TableBuilder(account, spill_dir=options.spill_dir)
    positions = _Positions(account, options.spill_dir)
    sizes: list[int] = []

    def decode(text: Any) -> Any:
        events = builder.scan(text, rows=reader.unread_braces)
        if events is None:
            reader.charge_python_decoding()
            events = decode_events(text)
        sizes.append(len(text))
        positions.add(reader.decoding_at, events, text)  # the reader takes a block decoded without error
        return events

    for block in reader.blocks(decode):
        builder.add(block, sizes[-1])
        del block  # before the reader reads on: it gives back the block's charge then
    table = builder.build()
    source = ChromeJsonEvents(stream.path, options.max_inflated_bytes, len(table), options.store_dir,
                              identity=stream.identity, max_ratio=options.max_ratio, block_size=block_bytes,
                              positions=positions.result(reader, len(table)))
    return Parsed(table=table, metadata=reader.metadata, truncated=reader.truncated, source=source,
                  extra={"container": reader.container})
