"""A block of events scanned in pieces by two threads at once, on two cores.

Ingest is bound by the native scanner (two thirds of a parse's main thread, measured on
a 1 GiB Kineto trace), and the scanner runs without the GIL; so, where the process may
use two cores, each block is cut at event boundaries into pieces of about `PIECE_BYTES`,
and two threads scan them at once: the calling thread from the first piece on, a second
thread from the last piece back, until they meet. Cut in two halves, one per thread, the
thread that finished first waited for the other (the second core also inflates the file,
so the halves seldom took the same time: 0.7 s of waiting in a 3.2 s pass at 2 GiB);
pieces leave at most one piece's wait.

What must not change is the table: every id is the one the pure path gives, the first
time a value is met in file order. The calling thread scans with the builder's scanner,
into the builder's tables: its pieces are the block's first ones, in order. The second
thread scans the rest with a private scanner (whose misses take no GIL: their Python
values are made when a piece's scan ends, so the two never wait for each other). Once
both are done, the values the private scanner met that the builder has not are interned
in the order of their first places in the file (found from the second thread's id
columns, put in file order), after the first pieces' values and before the next block's;
then its ids are mapped to the builder's. A piece that is not the plain case, or a cut
the scanner refuses, makes the caller scan the block whole, as before. A cut inside a
string always fails the piece before it, which starts where an event does; the calling
thread, going forward, stops there, so the builder's tables only ever hold the file's
values, and the private scanner, which may have read a string's text as events from
such a cut on, is dropped.

Flow keys (one per flow, nearly all new) are never Python values: the private scanner
keeps their bytes and the builder's scanner adopts them natively, in the order of their
first places (`Scanner.adopt_flows`), their categories mapped first.

The private tables hold the values they met (the builder's own objects for those it met
first, copies of the others) and the flow keys: they are charged to the builder
(`held_bytes`) and, past `MAX_PRIVATE_VALUES` of one kind (flow ids are distinct per
flow), the private scanner is replaced by a fresh one between blocks, so they stay
bounded however many distinct values a trace holds.
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
# The size of the pieces a block is cut into: small enough that the thread that finishes
# first waits little for the other (a 2 MB piece scans in ~2.5 ms), big enough that a
# piece's own costs (a scan call, its ids mapped) stay a few per block.
PIECE_BYTES = 2 << 20
# A private table this big (one kind of value): its scanner is replaced by a fresh one.
MAX_PRIVATE_VALUES = 1 << 16

# Where one event ends and the next begins: "}" "," "{" with whitespace between. Only a
# candidate: it may lie inside a string, and then the piece before it is refused.
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


class _IdMap:
    """The private scanner's ids (0, 1, ...) to the builder's, set as its values are adopted."""

    def __init__(self) -> None:
        self._ids = np.zeros(256, dtype=np.int32)
        self.known = 0

    def set(self, private: np.ndarray, builder: np.ndarray) -> None:
        """The private ids `private`, which with those known make 0 .. known + len - 1, are
        the builder's `builder`."""
        need = self.known + len(private)
        if need > len(self._ids):
            grown = np.zeros(max(need, 2 * len(self._ids)), dtype=np.int32)
            grown[:self.known] = self._ids[:self.known]
            self._ids = grown
        self._ids[private] = builder
        self.known = need

    def array(self) -> np.ndarray:
        """The builder's id of each private id adopted so far."""
        return self._ids[:self.known]

    def mapped(self, ids: np.ndarray, none: bool) -> np.ndarray:
        """`ids` (private) as the builder's; `none`: -1 stands for no value (flow keys),
        else every id is one (a name, category, pid or tid is always interned, None too)."""
        if not none:
            return self._ids[ids]
        out = np.full(len(ids), -1, dtype=np.int32)
        some = np.flatnonzero(ids >= 0)
        out[some] = self._ids[ids[some]]
        return out

    def nbytes(self) -> int:
        return self._ids.nbytes


class _Private:
    """The second thread's private scanner, the values its tables met (in the order met)
    and the maps from its ids to the builder's."""

    def __init__(self, module: ModuleType) -> None:
        self.ids: list[dict] = [{} for _ in _ID_COLUMNS[:_FLOW]]
        self.values: list[list] = [[] for _ in _ID_COLUMNS[:_FLOW]]
        args: list[Any] = []
        for ids, values in zip(self.ids, self.values):
            args += [ids, values]
        self.scanner = module.Scanner(*args, private=True)  # misses made Python values after the scan: no GIL
        self.maps = [_IdMap() for _ in _ID_COLUMNS]
        self._measured = [0] * _FLOW
        self._value_bytes = 0

    @property
    def full(self) -> bool:
        return max(max(map(len, self.values)), self.scanner.flow_count()) > MAX_PRIVATE_VALUES

    def held_bytes(self) -> int:
        for k, values in enumerate(self.values):
            new = values[self._measured[k]:]
            self._value_bytes += sum(map(sys.getsizeof, new)) + _VALUE_OVERHEAD * len(new)
            self._measured[k] = len(values)
        return self.scanner.cache_bytes() + self._value_bytes + sum(m.nbytes() for m in self.maps)


class PieceScanner:
    """The second thread of a `model.table.TableBuilder`'s scan: its private scanner and columns,
    the block's pieces shared out, and the adoption of what it scanned."""

    def __init__(self, module: ModuleType, interners: Sequence[Any]) -> None:
        """`interners`: the builder's, in the scanner's order (names, cats, pids, tids);
        each has `ids_of(values) -> int32 ids`, interning new values in order."""
        self._module = module
        self._interners = interners
        self._private = _Private(module)
        self._rows = 0
        self._cols: dict[str, np.ndarray] = {}

    def held_bytes(self) -> int:
        """What this holds: the private scanner's tables and values, the second thread's columns."""
        return self._private.held_bytes() + 62 * self._rows

    def scan(self, text: Any, scanner: Any, cols: dict[str, np.ndarray], rows: int,
             columns: Sequence[tuple[str, Any]]) -> Optional[tuple[int, dict[str, np.ndarray]]]:
        """The block `text` ("[...]") scanned in pieces by `scanner` (the builder's, on this
        thread, into `cols`) from the first and by the private scanner from the last:
        (events, columns of every piece joined, ids the builder's, byte spans in `text`),
        or None when the block has no cut or a piece is not the plain case (scan it whole)."""
        if self._private.full:
            self._private = _Private(self._module)  # what its tables held is interned by the builder
        view = memoryview(text)
        if view.ndim != 1 or view.itemsize != 1:
            return None
        if view.readonly:  # cut on a copy
            view = memoryview(bytearray(view))
        cuts = _cuts(view)
        if not cuts:
            view.release()
            return None
        if self._rows < rows:
            self._rows = max(rows, 2 * self._rows)
            self._cols = {k: np.empty(self._rows, dtype=d) for k, d in columns}
        restore: list[tuple[int, int]] = []
        pieces: list[Any] = []
        try:
            offsets = _cut_in_place(view, cuts, restore, pieces)
            scanned = self._scan_pieces(pieces, scanner, cols)
        finally:
            for at, byte in reversed(restore):
                view[at] = byte
            for piece in pieces:
                if isinstance(piece, memoryview):
                    piece.release()
            del pieces
            view.release()
        joined = None if scanned is None else self._joined(scanned, offsets, scanner, cols, columns)
        if joined is None:
            self._private = _Private(self._module)  # may hold values read across a bad cut
        return joined

    def _scan_pieces(self, pieces: list, scanner: Any, cols: dict[str, np.ndarray]) -> Optional[list]:
        """The pieces scanned from both ends at once, each by the first thread to reach it:
        per piece, (1 if the second thread scanned it, its first row in that thread's
        columns, events); None when any piece was refused."""
        ends = [0, len(pieces) - 1]  # the next piece from the front, and from the back
        lock = threading.Lock()
        done: list = [None] * len(pieces)
        failed = threading.Event()
        errors: list[BaseException] = []

        def work(who: int) -> None:
            own, out = (scanner, cols) if who == 0 else (self._private.scanner, self._cols)
            at = 0
            try:
                while not failed.is_set():
                    with lock:
                        if ends[0] > ends[1]:
                            return
                        i = ends[who]
                        ends[who] += 1 if who == 0 else -1
                    n = own.scan(pieces[i], *[c[at:] for c in out.values()])
                    if n < 0:
                        failed.set()
                        return
                    done[i] = (who, at, n)
                    at += n
            except BaseException as exc:  # raised again on the caller's thread
                failed.set()
                errors.append(exc)

        worker = threading.Thread(target=work, args=(1,), name="tb-reduce-scan-pieces", daemon=True)
        try:
            worker.start()
        except RuntimeError:
            return None  # a process out of threads: the block is scanned whole, as on one core
        work(0)  # raises nothing: an error is kept for this thread, after the join
        worker.join()
        if errors:
            raise errors[0]
        return None if failed.is_set() else done

    def _joined(self, scanned: list, offsets: list[int], scanner: Any, cols: dict[str, np.ndarray],
                columns: Sequence[tuple[str, Any]]) -> Optional[tuple[int, dict[str, np.ndarray]]]:
        """The pieces in file order, with the builder's ids: the first pieces' rows as they
        are, then the second thread's, put in file order, its new values adopted. None (the
        block scanned whole) if its columns do not hold every id its scanner gave: never
        seen, but a map with a hole would give wrong ids without a word."""
        mine = [(at, n) for who, at, n in scanned if who == 0]
        theirs = [(at, n) for who, at, n in scanned if who == 1]  # in file order: scanned last first
        counts = [n for _, _, n in scanned]
        parts = {}
        for k, _ in columns:
            first = cols[k][:sum(n for _, n in mine)]  # from row 0, in order
            rest = [self._cols[k][at:at + n] for at, n in theirs]
            parts[k] = (first, np.concatenate(rest) if rest else self._cols[k][:0])
        given = (*map(len, self._private.values), self._private.scanner.flow_count())
        fresh = [self._fresh(kind, parts[k][1]) for kind, k in enumerate(_ID_COLUMNS)]
        if any(len(f) != n - m.known for f, n, m in zip(fresh, given, self._private.maps)):
            return None
        for kind, k in enumerate(_ID_COLUMNS):
            if kind < _FLOW:
                self._adopt(kind, fresh[kind])
            else:
                self._adopt_flows(scanner, fresh[kind])
            parts[k] = (parts[k][0], self._private.maps[kind].mapped(parts[k][1], kind == _FLOW))
        joined = {k: np.concatenate(parts[k]) for k, _ in columns}
        shift = np.repeat(np.asarray(offsets, dtype=np.int64), counts)
        joined["start"] += shift
        joined["end"] += shift
        return sum(counts), joined

    def _fresh(self, kind: int, ids: np.ndarray) -> np.ndarray:
        """The private ids in `ids` (file order) not adopted yet, in the order of their
        first places there: every one the private scanner gave since the last adoption."""
        m = self._private.maps[kind]
        at = np.flatnonzero(ids >= m.known)
        if not len(at):
            return at.astype(np.int32)
        found, first = np.unique(ids[at], return_index=True)
        return found[np.argsort(first, kind="stable")].astype(np.int32)

    def _adopt(self, kind: int, fresh: np.ndarray) -> None:
        """The values of `kind` the second thread met first in this block (`_fresh`),
        interned by the builder in the order of their first places."""
        if len(fresh):
            values = self._private.values[kind]
            self._private.maps[kind].set(fresh, self._interners[kind].ids_of([values[i] for i in fresh.tolist()]))

    def _adopt_flows(self, scanner: Any, fresh: np.ndarray) -> None:
        """The flow keys the second thread met first in this block (`_fresh`), adopted by
        the builder's scanner in the order of their first places (their categories are
        mapped already)."""
        if len(fresh):
            out = np.empty(len(fresh), dtype=np.int32)
            scanner.adopt_flows(self._private.scanner, self._private.maps[_CAT].array(), fresh, out)
            self._private.maps[_FLOW].set(fresh, out)


def _cuts(view: memoryview) -> list[int]:
    """The commas to cut the block at, between events, about `PIECE_BYTES` apart (at
    least one: two pieces), increasing; none when no candidate lies past the first."""
    size = len(view)
    k = max(2, round(size / PIECE_BYTES))
    cuts: list[int] = []
    for j in range(1, k):
        m = _BETWEEN.search(view, max(size * j // k, cuts[-1] + 1 if cuts else 0))
        if m is None:
            break
        cuts.append(m.start() + bytes(view[m.start():m.end()]).index(b","))
    return cuts


def _cut_in_place(view: memoryview, cuts: list[int], restore: list, pieces: list) -> list[int]:
    """The block's pieces as texts "[...]" (into `pieces`): "]" over each cut's comma and
    "[" over the space after it, in place (the bytes to put back go into `restore`), or
    a copy with "[" before it where no space follows. Returns where each piece's text
    starts in the block's (its byte spans are shifted by that)."""
    for c in cuts:
        restore.append((c, view[c]))
        view[c] = ord("]")
    starts, copied = [0], [False]
    for c in cuts:
        if view[c + 1] in _WS:
            restore.append((c + 1, view[c + 1]))
            view[c + 1] = ord("[")
            starts.append(c + 1)
            copied.append(False)
        else:
            starts.append(c)  # a copy's "[" stands for the comma
            copied.append(True)
    ends = [c + 1 for c in cuts] + [len(view)]
    for start, end, copy in zip(starts, ends, copied):
        pieces.append(b"[" + bytes(view[start + 1:end]) if copy else view[start:end])
    return starts
