"""Events read where they lie in a plain (uncompressed) JSON trace.

A gzip's events can only be reached by inflating it from its start, so the first full
pass over one keeps its text compressed in chunks (`block_store`) for the windows after.
A plain file needs none of that: the index knows each event's offset and length
(`EventPositions`), and the file holds those bytes at those offsets. So its windows read
their events in place, a few large reads for the runs of events near each other, and
nothing is kept: no compression on the first view (1.5 s of a 2 GiB trace's 8.8 here),
no copy of the text in the index store (~31 bytes an event), no pass over the whole file
for any window after a restart. PyTorch's profiler writes plain `.pt.trace.json` files.

Trust, as far as the index's own (`index.store` keys it by device, inode, size and mtime):
the file is read in place only while its `fstat` is the version indexed, else the caller
reads it in a whole pass whose CRC-32 decides (`ChromeJsonEvents._copy`: an append, a
rewrite). A rewrite that keeps size and mtime (within one clock tick) is caught where an
event read does not begin and end as a JSON value does (an object's `{` moved by a byte
is a comma or a space): `FileChanged`.
"""

from __future__ import annotations

import os
from typing import Iterator, Optional

import numpy as np

from ..errors import FileChanged
from .sources import GZIP_MAGIC, FileIdentity, open_regular

# Events closer than this are read in one read (the bytes between are read and dropped:
# cheaper than another system call up to about this much).
GAP_BYTES = 64 * 1024
# At most this much is read at once (what a window's read holds at a time).
RUN_BYTES = 8 << 20


def _bytes_table(allowed: bytes) -> np.ndarray:
    table = np.zeros(256, dtype=bool)
    table[list(allowed)] = True
    return table


# The bytes a JSON value may begin and end with (an event is an object, `{…}`, but any
# element of the event list is one: the reader keeps `7` or `"x"` as events too).
_BEGINS = _bytes_table(b'{["-0123456789tfn')
_ENDS = _bytes_table(b'}]"0123456789el')


def each_a_value(raws: list[bytes]) -> bool:
    """Whether each of `raws` begins and ends as a JSON value does: the check made on
    events read where they lie, for events copied out of text kept while the file may
    have been rewritten (`ChromeJsonEvents`, reading a store still being built)."""
    return all(len(r) and _BEGINS[r[0]] and _ENDS[r[-1]] for r in raws)


class PlainText:
    """A plain trace file opened as the version indexed: its events are read by position."""

    def __init__(self, file: object, name: str) -> None:
        self._file = file
        self._fd = file.fileno()  # type: ignore[attr-defined]
        self.name = name

    @classmethod
    def open(cls, path: str, identity: FileIdentity) -> Optional[PlainText]:
        """The file at `path` to read in place, or None when it cannot be: a gzip, or a file
        whose size or mtime is no longer the indexed one. Another file at the path raises
        `FileChanged` (as any later pass does)."""
        f, st = open_regular(path, expect=identity)
        try:
            if (st.st_size, st.st_mtime_ns) != (identity.size, identity.mtime_ns) or os.pread(
                    f.fileno(), 2, 0) == GZIP_MAGIC:
                f.close()
                return None
        except OSError:
            f.close()
            return None
        return cls(f, os.path.basename(path))

    def close(self) -> None:
        self._file.close()  # type: ignore[attr-defined]

    def __enter__(self) -> PlainText:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def copy_events(self, starts: np.ndarray, ends: np.ndarray) -> Iterator[list[bytes]]:
        """The bytes of each event (`starts[i]:ends[i]`, increasing), a read's worth at a time."""
        starts = np.asarray(starts, dtype=np.int64)
        ends = np.asarray(ends, dtype=np.int64)
        for a, b in _runs(starts, ends):
            lo, hi = int(starts[a]), int(ends[b - 1])
            try:
                data = os.pread(self._fd, hi - lo, lo)
            except OSError as exc:
                raise FileChanged(f"{self.name} cannot be read again ({exc.strerror or exc})") from None
            rel_starts, rel_ends = starts[a:b] - lo, ends[a:b] - lo
            text = np.frombuffer(data, dtype=np.uint8)
            if len(data) != hi - lo or not (_BEGINS[text[rel_starts]].all() and _ENDS[text[rel_ends - 1]].all()):
                raise FileChanged(f"{self.name} changed since it was read (its events are not where they were)")
            del text
            yield [data[x:y] for x, y in zip(rel_starts.tolist(), rel_ends.tolist())]


def _runs(starts: np.ndarray, ends: np.ndarray) -> Iterator[tuple[int, int]]:
    """Ranges a..b-1 of events to read at once: no gap between two of them over
    `GAP_BYTES`, at most `RUN_BYTES` from the first's start to the last's end (or one event)."""
    n = len(starts)
    if not n:
        return
    cuts = (np.flatnonzero(starts[1:] - ends[:-1] > GAP_BYTES) + 1).tolist()
    for a, b in zip([0, *cuts], [*cuts, n]):
        while a < b:
            c = a + int(np.searchsorted(ends[a:b], int(starts[a]) + RUN_BYTES, side="right"))
            c = max(c, a + 1)
            yield a, c
            a = c
