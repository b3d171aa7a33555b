"""Which files of a stored index are known intact since they were last checked, so that a
reopen need not read them all again.

A stored index is trusted only once every file matches its manifest's size and CRC-32.
Reading them all for that was most of a restarted server's first new window: 1.2 s of
1.9 s for a 6.3 M-event trace (a 0.9 GB index, cold page cache), and an index grows to
7.6 GB at 50 M events. So a file checked once — read whole by a load, or written by the
store itself — is stamped in its folder's `verified.json` with its size, CRC, device,
inode and modification time (ns); a later load that finds the file with the same stat
takes it as checked without reading it, and skips the checks of what the files say
(ids within their tables), which depend on their bytes only.

Any write to a file (in place, a truncation, a copy or a swap for another) moves its
modification time or changes its inode, so it is read and checked again. A file is
stamped only when its modification time is `RACY_NS` older than the stamp (`COARSE_RACY_NS`
where the filesystem keeps whole seconds): a write in the same tick of the clock could
otherwise leave the time as it was (git's "racily clean" index entries). So the files a
save writes last may be read once more at the next load; the rest are not. What is not
seen: bytes that change under an unchanged time — media decay, or someone who sets the
time back on purpose; the stamps are no defence against whoever may write the cache,
who may as well write the index.

The stamps file is rewritten whole (a temp file renamed into place); a stamp lost to a
race with another process only means one more full check.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Optional

from ..errors import TraceError
from ..formats.sources import open_regular

STAMPS = "verified.json"
# A file modified less than this before its stamp is not stamped: 100 ms, ten ticks of
# the coarsest kernel clock (HZ=100) that file times are taken from; 2 s where times are
# whole seconds (FAT's granularity, some network filesystems). A restart a few seconds
# after a 50 M-event trace's prepared state was written read all 3 GB of it again at 2 s.
RACY_NS = 100_000_000
COARSE_RACY_NS = 2_000_000_000
_MAX_BYTES = 1 << 20


class Stamps:
    """The stamps of one index folder: read once, matched and added to, written back."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self._stamps = self._read()
        self._changed = False

    def _read(self) -> dict[str, list[int]]:
        try:
            f, _ = open_regular(os.path.join(self.folder, STAMPS))  # a FIFO put there is never waited on
            with f:
                data = json.loads(f.read(_MAX_BYTES))
        except (OSError, TraceError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: v for k, v in data.items()
                if isinstance(k, str) and isinstance(v, list) and len(v) == 5
                and all(isinstance(x, int) and not isinstance(x, bool) for x in v)}

    @staticmethod
    def _key(size: int, crc: int, st: os.stat_result) -> list[int]:
        return [int(size), int(crc), int(st.st_dev), int(st.st_ino), int(st.st_mtime_ns)]

    def matches(self, name: str, size: int, crc: int, st: os.stat_result) -> bool:
        """Whether `name`, as `st` finds it, is the file stamped with this size and CRC."""
        return st.st_size == size and self._stamps.get(name) == self._key(size, crc, st)

    def stamp(self, name: str, size: int, crc: int, st: Optional[os.stat_result] = None) -> None:
        """`name` holds `size` bytes of CRC `crc` (checked, or written by the store): stamped
        if its modification time is old enough to tell a later write from it."""
        try:
            st = st or os.stat(os.path.join(self.folder, name))
        except OSError:
            return
        racy = COARSE_RACY_NS if st.st_mtime_ns % 1_000_000_000 == 0 else RACY_NS
        if st.st_size != size or st.st_mtime_ns > time.time_ns() - racy:
            self._stamps.pop(name, None)
            return
        key = self._key(size, crc, st)
        if self._stamps.get(name) != key:
            self._stamps[name] = key
            self._changed = True

    def stamp_all(self, files: dict) -> None:
        """Stamp every `name: [size, crc]` of a manifest the store has just written."""
        for name, (size, crc) in files.items():
            self.stamp(name, size, crc)

    def save(self) -> None:
        """Write the stamps back if any was added (those of files gone are dropped)."""
        if not self._changed:
            return
        kept = {k: v for k, v in self._stamps.items() if os.path.exists(os.path.join(self.folder, k))}
        tmp = os.path.join(self.folder, f"{STAMPS}.{os.getpid()}-{threading.get_ident()}.tmp")
        try:
            with open(tmp, "w") as f:
                json.dump(kept, f)
            os.rename(tmp, os.path.join(self.folder, STAMPS))
        except OSError:  # a full or read-only disk: the next load checks in full
            try:
                os.unlink(tmp)
            except OSError:
                pass
        self._changed = False
