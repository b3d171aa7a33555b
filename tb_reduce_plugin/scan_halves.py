"""A block of events scanned in two halves at once, on two cores.

Ingest is bound by the native scanner (two thirds of a parse's main thread, measured on
a 1 GiB Kineto trace), and the scanner runs without the GIL; so, where the process may
use two cores, a second scanner reads the second half of each block while the table's
own scanner reads the first.

What must not change is the table: every id is the one the pure path gives, the first
time a value is met in file order. The second scanner therefore interns into private
tables of its own (whose misses take no GIL: their Python values are made when its scan
ends, so the two scanners never wait for each other), and once both halves are done its
ids are mapped to the table's:
the values it met first are interned in the order it met them, after the first half's
(which come before them in the file) and before the next block's. A half that is not
the plain case, or a cut the scanner refuses, makes the caller scan the block whole, as
before: whatever either scanner interned meanwhile is the block's own values, which the
whole scan interns anyway.

Flow keys (one per flow, nearly all new) are never Python values: the second scanner
keeps their bytes and the builder's scanner adopts them natively (`Scanner.adopt_flows`),
its categories mapped first.

The private tables hold the values they met (the builder's own objects for those it met
first, copies of the others) and the flow keys: they are charged to the builder
(`held_bytes`) and, past `MAX_PRIVATE_VALUES` of one kind (flow ids are distinct per
flow), the builder starts a fresh second scanner, so they stay bounded however many
distinct values a trace holds.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from types import ModuleType
from typing import Any, Optional, Sequence

import numpy as np

# Blocks smaller than this are scanned whole: a block of a few MB scans in milliseconds,
# and a second scanner would hold a second set of columns for little gain. Blocks are
# 16 MB at the default budget (`chrome_json.block_size_for`), smaller under a tight one.
SPLIT_FROM_BYTES = 4 << 20
# A private table this big (one kind of value): the builder starts a fresh second scanner.
MAX_PRIVATE_VALUES = 1 << 16

# Where one event ends and the next begins: "}" "," "{" with whitespace between. Only a
# candidate: it may lie inside a string, and then the first half's scan refuses its text.
_BETWEEN = re.compile(rb"\}[ \t\n\r]*,[ \t\n\r]*\{")
_WS = frozenset(b" \t\n\r")
# The columns that hold interned ids, in the order of the scanner's tables.
_ID_COLUMNS = ("name", "cat", "pid", "tid", "flow")
_CAT, _FLOW = _ID_COLUMNS.index("cat"), _ID_COLUMNS.index("flow")
_VALUE_OVERHEAD = 104  # a dict slot and a list slot per private value (as `model`)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class HalfScanner:
    """The second scanner of a `model.TableBuilder`, with its private tables and the maps
    from their ids to the builder's."""

    def __init__(self, module: ModuleType, interners: Sequence[Any]) -> None:
        """`interners`: the builder's, in the scanner's order (names, cats, pids, tids);
        each has `ids_of(values) -> int32 ids`, interning new values in order."""
        self._interners = interners
        self._ids: list[dict] = [{} for _ in _ID_COLUMNS[:_FLOW]]
        self._values: list[list] = [[] for _ in _ID_COLUMNS[:_FLOW]]
        args: list[Any] = []
        for ids, values in zip(self._ids, self._values):
            args += [ids, values]
        self._scanner = module.Scanner(*args, private=True)  # misses made Python values after the scan: no GIL
        self._maps = [np.zeros(0, dtype=np.int32) for _ in _ID_COLUMNS]
        self._rows = 0
        self._cols: dict[str, np.ndarray] = {}
        self._measured = [0] * _FLOW
        self._value_bytes = 0

    @property
    def full(self) -> bool:
        return max(max(map(len, self._values)), self._scanner.flow_count()) > MAX_PRIVATE_VALUES

    def held_bytes(self) -> int:
        """What this scanner holds: its hash tables, its columns, its private values."""
        for k, values in enumerate(self._values):
            new = values[self._measured[k]:]
            self._value_bytes += sum(map(sys.getsizeof, new)) + _VALUE_OVERHEAD * len(new)
            self._measured[k] = len(values)
        return self._scanner.cache_bytes() + 62 * self._rows + self._value_bytes

    def scan(self, text: Any, scanner: Any, cols: dict[str, np.ndarray], rows: int,
             columns: Sequence[tuple[str, Any]]) -> Optional[tuple[int, dict[str, np.ndarray]]]:
        """The block `text` ("[...]") scanned by `scanner` (the builder's, into `cols`)
        up to a cut near its middle and by this one after it, at once: (events, columns
        of both halves joined, ids the builder's, byte spans in `text`), or None when the
        block has no cut or either half is not the plain case (scan it whole)."""
        view = memoryview(text)
        if view.ndim != 1 or view.itemsize != 1:
            return None
        m = _BETWEEN.search(view, len(view) // 2)
        if m is None:
            return None
        comma = m.start() + bytes(view[m.start():m.end()]).index(b",")
        if self._rows < rows:
            self._rows = max(rows, 2 * self._rows)
            self._cols = {k: np.empty(self._rows, dtype=d) for k, d in columns}
        restore: list[tuple[int, int]] = []
        if not view.readonly:  # "]" over the comma ends the first half, in place
            restore.append((comma, view[comma]))
            view[comma] = ord("]")
            first: Any = view[:comma + 1]
            if view[comma + 1] in _WS:  # "[" over the space after it starts the second
                restore.append((comma + 1, view[comma + 1]))
                view[comma + 1] = ord("[")
                second, offset = view[comma + 1:], comma + 1
            else:
                second, offset = b"[" + bytes(view[comma + 1:]), comma
        else:
            first = bytes(view[:comma]) + b"]"
            second, offset = b"[" + bytes(view[comma + 1:]), comma
        got: dict[str, Any] = {}

        def scan_second(text: Any) -> None:
            try:
                got["n"] = self._scanner.scan(text, *self._cols.values())
            except BaseException as exc:  # raised again on the caller's thread
                got["error"] = exc

        worker = threading.Thread(target=scan_second, args=(second,), name="tb-reduce-scan-half", daemon=True)
        started = False
        try:
            worker.start()
            started = True
            na = scanner.scan(first, *cols.values())
        except RuntimeError:
            if started:
                raise
            na = -1  # a process out of threads: the block is scanned whole, as on one core
            got["n"] = -1
        finally:
            if started:
                worker.join()
            for at, byte in reversed(restore):
                view[at] = byte
            del first, second
            view.release()
        if "error" in got:
            raise got["error"]
        nb = got["n"]
        if na < 0 or nb < 0:
            return None
        joined = {}
        for k, _ in columns:
            a, b = cols[k][:na], self._cols[k][:nb]
            if k == "flow":
                b = self._builder_flows(scanner, b)
            elif k in _ID_COLUMNS:
                b = self._builder_ids(_ID_COLUMNS.index(k), b)
            elif k in ("start", "end"):
                b = b + offset
            joined[k] = np.concatenate((a, b))
        return na + nb, joined

    def _builder_flows(self, scanner: Any, ids: np.ndarray) -> np.ndarray:
        """Private flow key ids (-1: none) as the builder's scanner's: the keys met since
        the last call adopted by it in the order met, their categories mapped first."""
        self._adopt(_CAT)  # the categories its keys name, as the builder's
        known, count = len(self._maps[_FLOW]), self._scanner.flow_count()
        if count > known:
            fresh = np.empty(count - known, dtype=np.int32)
            scanner.adopt_flows(self._scanner, self._maps[_CAT], known, fresh)
            self._maps[_FLOW] = np.concatenate((self._maps[_FLOW], fresh))
        return self._mapped(_FLOW, ids)

    def _builder_ids(self, kind: int, ids: np.ndarray) -> np.ndarray:
        """`ids` (private, -1 for none) as the builder's ids."""
        self._adopt(kind)
        return self._mapped(kind, ids)

    def _adopt(self, kind: int) -> None:
        """The private values of `kind` met since the last call, interned by the builder in
        the order met, and their builder ids added to the map."""
        values, known = self._values[kind], len(self._maps[kind])
        if len(values) > known:
            fresh = self._interners[kind].ids_of(values[known:])
            self._maps[kind] = np.concatenate((self._maps[kind], fresh.astype(np.int32)))

    def _mapped(self, kind: int, ids: np.ndarray) -> np.ndarray:
        if not len(self._maps[kind]):  # nothing met: every id is -1 (no flow)
            return ids.astype(np.int32)
        out = self._maps[kind][np.maximum(ids, 0)]
        return np.where(ids >= 0, out, ids).astype(np.int32)
