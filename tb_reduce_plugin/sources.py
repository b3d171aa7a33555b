"""Opening input files as streams of decompressed bytes, with bounded memory.

Gzip is detected by its magic number, not the file name, and inflated in a stream
with ISA-L (`isal.igzip`, 3× stdlib gzip). Inflation is capped so a gzip bomb is
refused instead of filling the disk or memory of the user's server.
"""

from __future__ import annotations

import io
import os
import zlib
from typing import BinaryIO, Callable, Optional

from isal import igzip, isal_zlib

from .errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
DEFAULT_MAX_INFLATED_BYTES = 64 * 1024**3
READ_SIZE = 16 * 1024 * 1024

Progress = Callable[[int, int], None]


class CountingReader(io.RawIOBase):
    """Counts the compressed bytes consumed, for progress bars."""

    def __init__(self, raw: BinaryIO, progress: Optional[Progress], total: int) -> None:
        self._raw = raw
        self._progress = progress
        self._total = total
        self.consumed = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # type: ignore[override]
        n = self._raw.readinto(buf)
        if n:
            self.consumed += n
            if self._progress is not None:
                self._progress(self.consumed, self._total)
        return n or 0


class TraceStream:
    """A file's decompressed bytes, read in large blocks.

    `read()` raises `TraceError` for corrupt gzip and for inflation past the limit.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
        progress: Optional[Progress] = None,
    ) -> None:
        self.path = os.fspath(path)
        try:
            self._file = open(self.path, "rb")
        except OSError as exc:
            # The file's name, not its path: the message may reach a web page.
            raise TraceError(f"cannot open {os.path.basename(self.path)}: {exc.strerror or exc}") from None
        self.file_bytes = os.fstat(self._file.fileno()).st_size
        head = self._file.read(2)
        self._file.seek(0)
        self.compressed = head == GZIP_MAGIC
        self._counter = CountingReader(self._file, progress, self.file_bytes)
        buffered = io.BufferedReader(self._counter, buffer_size=1024 * 1024)
        self._inner: BinaryIO = igzip.IGzipFile(fileobj=buffered, mode="rb") if self.compressed else buffered
        self.max_inflated_bytes = max_inflated_bytes
        self.inflated = 0
        self._head: bytes | None = None

    def peek(self, size: int) -> bytes:
        """The first bytes of the decompressed stream, without consuming them."""
        if self._head is None:
            self._head = self._read_raw(size)
        return self._head

    def read(self, size: int = READ_SIZE) -> bytes:
        if self._head:
            head, self._head = self._head, b""
            return head + self._read_raw(max(0, size - len(head)))
        return self._read_raw(size)

    def _read_raw(self, size: int) -> bytes:
        try:
            data = self._inner.read(size)
        except (OSError, EOFError, zlib.error, isal_zlib.error, ValueError) as exc:
            kind = "corrupt or truncated gzip" if self.compressed else "read error"
            raise TraceError(f"{kind} in {os.path.basename(self.path)}: {exc}") from None
        self.inflated += len(data)
        if self.inflated > self.max_inflated_bytes:
            raise TraceError(
                f"{os.path.basename(self.path)} inflates past the limit of "
                f"{self.max_inflated_bytes:,} bytes; raise the limit if this is intended"
            )
        return data

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TraceStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
