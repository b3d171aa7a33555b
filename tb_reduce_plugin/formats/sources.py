"""Opening input files as streams of decompressed bytes, with bounded memory.

Gzip is detected by its magic number, not the file name, and inflated in a stream
with ISA-L (`isal.igzip`, 3× stdlib gzip). Inflation is capped, absolutely and
relative to the file's size, so a gzip bomb is refused instead of filling the disk or
memory of the user's server.

What is read is exactly what was found: `open_regular` opens without blocking (a
FIFO with no writer would hang the opener forever), then checks with `fstat` on the
open descriptor, which no later rename or symlink swap can change, that it is a
regular file, the one a listing saw (device and inode), and under the size limit.
Only as many bytes as `fstat` reported are read, so a file that grows while it is
read is read as it was when opened, consistent with the identity recorded for it.
"""

from __future__ import annotations

import io
import os
import queue
import stat
import threading
import zlib
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Optional

from isal import igzip, isal_zlib

from ..errors import FileChanged, InflationLimit, InputTooLarge, NotRegularFile, TraceError, display_name

try:
    import fcntl
except ImportError:  # not POSIX (Windows): no FIFO can block an open there, nothing to clear
    fcntl = None  # type: ignore[assignment]

GZIP_MAGIC = b"\x1f\x8b"
DEFAULT_MAX_INFLATED_BYTES = 64 * 1024**3
# Real traces inflate at most ~30x (the corpus's gzips: 9x-30x; synthetic Kineto ~11x),
# while a gzip of zeros inflates ~1000x: 100x leaves real traces a 3x margin.
DEFAULT_MAX_RATIO = 100.0
# Below this, a gzip is never refused for its ratio: tiny files of repetitive JSON
# (tests, hand-written traces) compress far better than real ones, and 16 MB is harmless.
DEFAULT_RATIO_FLOOR = 16 * 1024 * 1024
READ_SIZE = 16 * 1024 * 1024
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
# Non-blocking (a FIFO opens at once, to be refused by `fstat`), not inherited, never a
# controlling terminal; binary where the OS knows text mode. Flags an OS lacks are 0.
OPEN_FLAGS = (os.O_RDONLY | _NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
              | getattr(os, "O_BINARY", 0))

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class FileIdentity:
    """Which file, and which version of it: what a listing saw or an index was built from.

    `dev` and `ino` name the file itself (a rename keeps them, a replacement or a
    symlink to elsewhere does not); `size` and `mtime_ns` say which version.
    """

    dev: int
    ino: int
    size: int
    mtime_ns: int

    @classmethod
    def from_stat(cls, st: os.stat_result) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def same_file(self, st: os.stat_result) -> bool:
        """Whether `st` is of this file (any version of it)."""
        return (st.st_dev, st.st_ino) == (self.dev, self.ino)


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a plain file"


def _check(name: str, st: os.stat_result, expect: Optional[FileIdentity], max_file_bytes: Optional[int]) -> None:
    """Raise the domain error `st` calls for; the same checks before and after opening.

    With `expect`, anything but the listed regular file is `FileChanged`: a listed file
    replaced by a FIFO is above all not the listed file (and a new FIFO may even reuse
    its inode number), so the caller refreshes its listing, which will not list a FIFO.
    """
    if expect is not None and not expect.same_file(st):
        raise FileChanged(f"{name} changed since it was listed (another file is there now)")
    if not stat.S_ISREG(st.st_mode):
        if expect is not None:
            raise FileChanged(f"{name} changed since it was listed (it is now {_kind(st.st_mode)})")
        raise NotRegularFile(f"{name} is not a regular file ({_kind(st.st_mode)})")
    if max_file_bytes is not None and st.st_size > max_file_bytes:
        raise InputTooLarge(f"{name} is {st.st_size:,} bytes, over the input limit of {max_file_bytes:,} bytes",
                            size=st.st_size, limit=max_file_bytes)


def open_regular(
    path: str | os.PathLike,
    *,
    expect: Optional[FileIdentity] = None,
    max_file_bytes: Optional[int] = None,
) -> tuple[BinaryIO, os.stat_result]:
    """Open `path` for reading if, and only if, it is a regular file; returns it unbuffered
    with its `fstat`.

    `expect`: the identity a listing recorded; another file at the path now (replaced,
    swapped for a symlink elsewhere, deleted, not a regular file any more) raises
    `FileChanged`. Device and inode cannot tell a file deleted and recreated at once
    from the listed one when the new file reuses the inode number: that one is read,
    as a regular file at the listed path (nothing outside the logdir). `max_file_bytes`:
    checked on the `fstat` size, not a listing's older one (`InputTooLarge`). A FIFO,
    device, directory or socket raises `NotRegularFile`, without blocking.

    The path is `stat`ed first, so the common refusals never open a device (opening
    some has effects); the `fstat` of the open descriptor is what decides, since the
    path may be swapped between the two.
    """
    path = os.fspath(path)
    name = display_name(os.path.basename(path.rstrip(os.sep)) or path)
    try:
        _check(name, os.stat(path), expect, max_file_bytes)
        fd = os.open(path, OPEN_FLAGS)
    except FileNotFoundError:
        if expect is not None:
            raise FileChanged(f"{name} changed since it was listed (it is gone)") from None
        raise TraceError(f"cannot open {name}: no such file") from None
    except OSError as exc:
        # The file's name, not its path: the message may reach a web page.
        raise TraceError(f"cannot open {name}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        _check(name, st, expect, max_file_bytes)
        if fcntl is not None and _NONBLOCK:
            # Regular files ignore O_NONBLOCK on Linux, but leave no surprise for other systems.
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_NONBLOCK)
        return os.fdopen(fd, "rb", buffering=0), st
    except BaseException:
        os.close(fd)
        raise


class BoundedReader(io.RawIOBase):
    """Reads at most `limit` bytes of `raw` and counts them, for progress bars.

    The limit is the size `fstat` gave when the file was opened: bytes appended later
    are not read, so what is indexed is the file as it was identified.
    """

    def __init__(self, raw: BinaryIO, limit: int, progress: Optional[Progress] = None, adler: bool = False) -> None:
        self._raw = raw
        self._limit = limit
        self._progress = progress
        self.consumed = 0
        # A checksum of the bytes read, from the first (None: not kept): CRC-32, or Adler-32.
        self._sum = isal_zlib.adler32 if adler else isal_zlib.crc32
        self.crc: Optional[int] = 1 if adler else 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # type: ignore[override]
        left = self._limit - self.consumed
        if left <= 0:
            return 0
        view = memoryview(buf).cast("B")
        n = self._raw.readinto(view[:left] if len(view) > left else view)  # type: ignore[attr-defined]
        if n:
            if self.crc is not None:
                self.crc = self._sum(view[:n], self.crc)
            self.consumed += n
            if self._progress is not None:
                self._progress(self.consumed, self._limit)
        return n or 0


# Inflate the next blocks of a gzip (read those of a big plain file) on a thread of their own
# while the caller works on the current one (TB_REDUCE_INFLATE_AHEAD=0 turns it off, for
# side-by-side benchmarks).
INFLATE_AHEAD = os.environ.get("TB_REDUCE_INFLATE_AHEAD", "1") != "0"
AHEAD_BYTES = READ_SIZE  # what inflating ahead holds besides the reader's own block, at most
# Bytes kept free before each block inflated into the stream's own buffers: a reader given the
# buffer itself (`TraceStream.lend`) writes there what it kept of the block before (the start of
# an event cut by the block's edge) instead of copying the block after it.
LEND_ROOM = 1 << 20
# A gzip smaller than this inflates to a few blocks at most: no thread, and no block charged for it.
AHEAD_MIN_FILE_BYTES = 1 << 20
# A plain file is read ahead from this size on: its two blocks ahead (34 MiB, counted) would
# be most of what a small file's read holds, for a few milliseconds saved.
AHEAD_MIN_PLAIN_BYTES = 64 << 20


_EMPTY = memoryview(b"")


class _InflateAhead:
    """A thread that reads a decompressing stream ahead of its consumer, block by block.

    The same limits as reading in place: it never asks for more than one byte past
    `allowed` (what may still be inflated), so a bomb is inflated no further than it
    would be without it; it stops at the end, at an error (handed over in order, raised
    by the consumer's `read`) and when `stop()` is called (then joined, so nothing reads
    the file once its stream is closed). Memory: one block ahead, never more (`AHEAD_BYTES`):
    a block is handed over, and only once the consumer has taken it is the next one
    inflated, while the consumer works on the one it took.

    `pooled`: the blocks are inflated into two buffers of its own, in turn, for a
    consumer that copies them out (`readinto`) and gives each back as soon as it has.
    Each block in a new bytes object was 16 MB of fresh pages for the kernel to fault in
    and zero (the server allocates 16 MB by mmap: `budget.return_large_blocks`): ~4,100
    faults a block, as much system time on this thread as inflating took. Then two
    blocks are held (`AHEAD_BYTES` twice), and the consumer holds none. Or it is lent a
    block's buffer whole (`lend`: the block inflated after `LEND_ROOM` free bytes) and gives
    the buffer back once done with it (`give_back`): not a byte copied.
    """

    def __init__(self, inner: BinaryIO, allowed: int, pooled: bool = False) -> None:
        self._inner = inner
        self._allowed = allowed
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._stopping = threading.Event()
        self._taken = threading.Event()
        self._pending = _EMPTY  # what the consumer has not read yet of the block it took
        self._pending_block: Optional[bytes | bytearray] = None  # that block
        self._whole = False  # nothing of it read yet
        self._lent: Optional[bytes | bytearray] = None  # a block read whole as a view (`borrow`)
        self._done: Optional[BaseException | bytes] = None  # b"" at the end, or the error
        self._free: Optional[queue.Queue] = None
        if pooled:
            self._free = queue.Queue()
            for _ in range(2):
                self._free.put(None)  # made on first use, on the thread
        self._thread = threading.Thread(target=self._run, name="tb-reduce-inflate", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        inflated = 0
        try:
            while not self._stopping.is_set():
                want = min(READ_SIZE, max(self._allowed - inflated, 0) + 1)
                data = self._inflate(want)
                if data is None:
                    return  # stopped while waiting for a buffer
                if not data[1]:
                    break
                inflated += data[1]
                if not self._put(data):
                    return
                if inflated > self._allowed:  # the consumer raises on these bytes: read no further
                    break
            self._put(b"")  # the end, for a consumer that asks again
        except BaseException as exc:  # handed to the consumer, who raises it as the read did
            self._put(exc)

    def _inflate(self, want: int) -> Optional[tuple[bytes | bytearray, int]]:
        """The next block and its length: a new bytes object, or a buffer of the pool."""
        if self._free is None:
            data = self._inner.read(want)
            return data, len(data)
        buf: Optional[bytearray] = None
        while buf is None:
            if self._stopping.is_set():
                return None
            try:
                buf = self._free.get(timeout=0.05) or bytearray(LEND_ROOM + READ_SIZE)
            except queue.Empty:
                continue
        with memoryview(buf) as into:
            n = _readinto(self._inner, into[LEND_ROOM:LEND_ROOM + want])
        if not n:
            self._free.put(buf)
        return buf, n

    def _put(self, item: BaseException | bytes | tuple) -> bool:
        """Hand `item` over and wait until it is taken (or the stream stops)."""
        while not self._stopping.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                break
            except queue.Full:
                continue
        while not self._stopping.is_set() and not self._queue.empty():
            self._taken.wait(0.05)
            self._taken.clear()
        return not self._stopping.is_set()

    def _take(self) -> bool:
        """The next block as the pending one; False at the end (raises the error handed over)."""
        if self._done is None:
            item = self._queue.get()
            self._taken.set()
            if isinstance(item, BaseException) or not item:
                self._done = item
            else:
                self._pending_block, n = item
                at = LEND_ROOM if self._free is not None else 0
                self._pending = memoryview(self._pending_block)[at:at + n]
                self._whole = True
                return True
        if isinstance(self._done, BaseException):
            raise self._done
        return False

    def _consumed(self, k: int) -> None:
        """`k` more bytes of the pending block were read: a block read whole goes back to the pool."""
        self._whole = False
        self._pending = self._pending[k:]
        if not self._pending:
            self._pending.release()
            self._pending = _EMPTY
            if self._free is not None and isinstance(self._pending_block, bytearray):
                self._free.put(self._pending_block)
            self._pending_block = None

    def _return_lent(self) -> None:
        """The block last lent whole (`borrow`) goes back to the pool: its reader is done with it."""
        if self._lent is not None:
            if self._free is not None and isinstance(self._lent, bytearray):
                self._free.put(self._lent)
            self._lent = None

    def borrow(self, size: int) -> memoryview:
        """Up to `size` bytes of the pending block as a view of it, valid until the next
        call of this reader (no copy: `TraceStream.read_view`)."""
        self._return_lent()
        if not self._pending and not self._take():
            return _EMPTY
        k = min(size, len(self._pending))
        view = self._pending[:k]
        self._whole = False
        self._pending = self._pending[k:]
        if not self._pending:
            self._pending = _EMPTY
            self._lent, self._pending_block = self._pending_block, None
        return view

    def lend(self, size: int) -> Optional[memoryview]:
        """The next block, if it is whole and at most `size` bytes, as a view of the buffer it
        was inflated into (after `LEND_ROOM` free bytes); its buffer is the caller's from now
        on, until `give_back`. None when there is no such block (read it otherwise); an empty
        view at the end."""
        self._return_lent()
        if self._free is None:
            return None
        if not self._pending and not self._take():
            return _EMPTY
        block = self._pending_block
        if not self._whole or not isinstance(block, bytearray) or len(self._pending) > size:
            return None  # not a whole block of the pool (read partly already), or more than asked
        view = self._pending
        self._pending, self._pending_block = _EMPTY, None
        return view

    def give_back(self, buf: bytearray) -> None:
        """A buffer `lend` gave, for the pool to inflate into again: unless a view of it is
        still alive (its size cannot change then: a new one is made instead)."""
        if self._free is None:
            return
        try:
            buf.append(0)  # refused (BufferError) while a view of it is alive
        except BufferError:
            self._free.put(None)
            return
        if len(buf) > LEND_ROOM + READ_SIZE:
            del buf[LEND_ROOM + READ_SIZE:]
        elif len(buf) < LEND_ROOM + READ_SIZE:
            buf += bytes(LEND_ROOM + READ_SIZE - len(buf))
        self._free.put(buf)

    def read(self, size: int) -> bytes:
        self._return_lent()
        if not self._pending and not self._take():
            return b""
        k = min(size, len(self._pending))
        block = self._pending_block
        if self._free is None and k == len(block) and len(self._pending) == k:  # type: ignore[arg-type]
            data = block  # the whole block, as inflated: no copy
        else:
            data = bytes(self._pending[:k])
        self._consumed(k)
        return data  # type: ignore[return-value]

    def readinto(self, into: memoryview) -> int:
        self._return_lent()
        if not self._pending and not self._take():
            return 0
        k = min(len(into), len(self._pending))
        into[:k] = self._pending[:k]
        self._consumed(k)
        return k

    def stop(self) -> None:
        self._stopping.set()
        while True:  # a thread waiting to hand over a block sees the stop at its next try
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join()
        if self._pending_block is not None:
            self._pending.release()
            self._pending, self._pending_block = _EMPTY, None


def _readinto(stream: BinaryIO, into: memoryview) -> int:
    """`stream.readinto(into)`, filled as far as the stream goes. A gzip file's own
    `readinto` is io's generic one (it reads a new bytes object and copies it): its
    buffered reader, when it has one, decompresses straight into `into`."""
    inner = getattr(stream, "_buffer", None)  # igzip.IGzipFile (gzip.GzipFile): its io.BufferedReader
    reader = inner if isinstance(inner, io.BufferedReader) else stream
    done = 0
    while done < len(into):
        n = reader.readinto(into[done:])
        if not n:
            break
        done += n
    return done


class TraceStream:
    """A file's decompressed bytes, read in blocks of at most `READ_SIZE`.

    Opened with `open_regular` (see there for `expect` and `max_file_bytes`);
    `identity` is the file as opened, and at most `identity.size` raw bytes are read.
    `read_bytes` reads only that many raw bytes: a later pass over a file indexed
    earlier reads what was indexed, even if the file grew since (a live writer); a
    file now shorter than that raises `FileChanged`.

    A gzip may inflate to `max_inflated_bytes`, and to at most `max_ratio` times its
    size (not below `DEFAULT_RATIO_FLOOR`; `None`: no ratio limit). Both are checked
    while inflating: no read inflates past the limit by more than one byte.

    `read()` raises `TraceError` for corrupt gzip and `InflationLimit` past a limit.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
        progress: Optional[Progress] = None,
        *,
        expect: Optional[FileIdentity] = None,
        max_file_bytes: Optional[int] = None,
        max_ratio: Optional[float] = DEFAULT_MAX_RATIO,
        read_bytes: Optional[int] = None,
    ) -> None:
        self.path = os.fspath(path)
        self.name = display_name(os.path.basename(self.path))
        self._file, st = open_regular(self.path, expect=expect, max_file_bytes=max_file_bytes)
        try:
            size = st.st_size
            if read_bytes is not None:
                if size < read_bytes:
                    raise FileChanged(f"{self.name} changed since it was read ({read_bytes:,} bytes then, {size:,} now)")
                size = read_bytes
            self.identity = FileIdentity(st.st_dev, st.st_ino, size, st.st_mtime_ns)
            self.file_bytes = size
            head = self._file.read(min(2, size))
            self._file.seek(0)
        except OSError as exc:
            self._file.close()
            raise TraceError(f"read error in {self.name}: {exc.strerror or exc}") from None
        except BaseException:
            self._file.close()
            raise
        self.compressed = head == GZIP_MAGIC
        # A gzip's bytes are summed with Adler-32 (`file_crc`), a plain file's with CRC-32.
        self._counter = BoundedReader(self._file, size, progress, adler=self.compressed)
        buffered = io.BufferedReader(self._counter, buffer_size=1024 * 1024)
        self._inner: BinaryIO = igzip.IGzipFile(fileobj=buffered, mode="rb") if self.compressed else buffered
        self.max_inflated_bytes = max_inflated_bytes
        self.max_ratio = max_ratio
        # The ratio limit only matters for gzip: a plain file "inflates" to its own size.
        self.ratio_limit: Optional[int] = None
        if self.compressed and max_ratio is not None:
            self.ratio_limit = max(DEFAULT_RATIO_FLOOR, int(max_ratio * size))
        self.inflation_limit = min(max_inflated_bytes, self.ratio_limit or max_inflated_bytes)
        self.inflated = 0
        self._head: bytes | None = None
        self._ahead: Optional[_InflateAhead] = None
        self._pooled = False  # blocks inflated ahead into the stream's own buffers (`readinto`)
        self._own: Optional[bytearray] = None  # what `read_view` reads a plain file into
        self._finished = False  # `file_crc` read the rest of the file

    @property
    def ahead_bytes(self) -> int:
        """What this stream may hold inflated ahead of its reader (its reader charges it):
        two blocks for a reader that copies them out (`readinto`)."""
        if not self._inflates_ahead():
            return 0
        return 2 * (AHEAD_BYTES + LEND_ROOM) if self._pooled else AHEAD_BYTES

    @property
    def inflates_ahead(self) -> bool:
        """Whether a thread inflates the blocks ahead of the reads (a gzip big enough)."""
        return self._inflates_ahead()

    def _inflates_ahead(self) -> bool:
        """A gzip is inflated ahead; a plain file is read ahead for a reader that keeps its
        own buffers or borrows the stream's (`lend`, `readinto`, `read_view`: the Chrome
        reader, whose main thread otherwise copied every block from the page cache and
        summed it, ~0.35 s a GB, while the second scanner waited)."""
        if not INFLATE_AHEAD:
            return False
        if self.compressed:
            return self.file_bytes >= AHEAD_MIN_FILE_BYTES
        return self._pooled and self.file_bytes >= AHEAD_MIN_PLAIN_BYTES

    def peek(self, size: int) -> bytes:
        """The first bytes of the decompressed stream, without consuming them."""
        if self._head is None:
            self._head = self._read_raw(size)
        return self._head

    def read(self, size: int = READ_SIZE) -> bytes:
        """Up to `size` (at most `READ_SIZE`) decompressed bytes; b"" at the end.

        Never more than one block at once, whatever is asked: memory for inflation
        stays bounded by one block, and the limits are checked every block.
        """
        size = READ_SIZE if size < 0 else min(size, READ_SIZE)
        self._start_ahead()
        if self._head:
            head, self._head = self._head, b""
            return head + self._read_raw(max(0, size - len(head)))
        return self._read_raw(size)

    def readinto(self, into: memoryview) -> int:
        """Decompressed bytes written into `into` (at most `READ_SIZE`), how many; 0 at the end.

        For a reader that keeps its own buffers (`ChromeJsonReader`): no new bytes object
        a block, and, for a gzip, the blocks inflated ahead into two buffers of the
        stream's own (see `_InflateAhead`). The same limits as `read`."""
        into = into[:READ_SIZE]
        if self._ahead is None:
            self._pooled = True
        if self._head:
            head = self.read(len(into))
            into[:len(head)] = head
            return len(head)
        self._start_ahead()
        ahead = self._ahead

        def read(k: int) -> memoryview:
            return into[:ahead.readinto(into[:k]) if ahead is not None else _readinto(self._inner, into[:k])]

        return len(self._counted(read, len(into)))

    def lend(self, size: int = READ_SIZE, room: int = 0) -> Optional[tuple[bytearray, int, int]]:
        """Up to `size` (at most `READ_SIZE`) decompressed bytes left where the inflating
        thread put them, in a buffer of the stream's own that is the caller's from now on,
        until `give_back`: (buffer, at, n), the bytes at buffer[at:at + n] and `at` bytes
        before them (`room` at least) free for the caller to write into. None where there
        is no block to lend that way (not a stream read ahead, a peeked head unread, a
        block read in part or bigger than `size`, `room` more than `LEND_ROOM`, the end):
        read with `readinto` then. For a reader that keeps the end of each block before the
        next (`ChromeJsonReader`): it writes that end before the block, and no block is
        copied. The same limits as `read`."""
        size = min(size, READ_SIZE)
        if self._ahead is None:
            self._pooled = True
        if self._head or room > LEND_ROOM:
            return None
        self._start_ahead()
        ahead = self._ahead
        if ahead is None:
            return None
        lent: list[Optional[memoryview]] = []

        def read(k: int) -> memoryview:
            lent.append(ahead.lend(k))
            return lent[0] if lent[0] is not None else _EMPTY

        view = self._counted(read, size)
        if not lent or lent[0] is None or not view:
            return None
        buf, n = view.obj, len(view)
        view.release()  # the buffer is the caller's: no view of the stream's holds it
        return buf, LEND_ROOM, n  # type: ignore[return-value]

    def give_back(self, buf: bytearray) -> None:
        """A buffer `lend` gave, done with: the inflating thread fills it again (a new one
        instead while a view of it is still alive)."""
        if self._ahead is not None:
            self._ahead.give_back(buf)

    def unread_fd(self) -> Optional[int]:
        """The descriptor of this plain file, for a reader that maps its bytes where they lie
        (`mapped.map_in_place`) instead of reading them: while nothing but a peek was read
        and the file is still the version opened (its size and time as `identity` has
        them); None for a gzip (its bytes are not the file's) or a file written to since it
        was opened. A reader that maps it then calls `read_in_place`."""
        if self.compressed or self.inflated > len(self._head or b""):
            return None
        try:
            st = os.fstat(self._file.fileno())
        except (OSError, ValueError):
            return None
        if (st.st_size, st.st_mtime_ns) != (self.identity.size, self.identity.mtime_ns):
            return None
        return self._file.fileno()

    def read_in_place(self) -> None:
        """The file counts as read whole (`inflated`, progress) by a reader that mapped it;
        nothing is read through this stream after."""
        self.inflated = self._counter.consumed = self.file_bytes
        if self._counter._progress is not None:
            self._counter._progress(self.file_bytes, self.file_bytes)
        self._finished = True

    def forget_crc(self) -> None:
        """No `file_crc` wanted: its bytes are not summed from now on (an XSpace's reader)."""
        self._counter.crc = None

    def file_crc(self) -> int:
        """A checksum of the file's bytes as opened, all `identity.size` of them, as they lie
        (a gzip's compressed): what a later pass over the same version finds again, however
        it inflates them. The bytes not read yet (a gzip's trailer, anything after the
        events) are read without inflating them; this stream is read no further after it.

        Summed as the file is read: a tenth of the bytes of a gzip's text (the thread that
        scans once summed every byte of the text, ~0.1 s a GB). CRC-32 for a plain file (its
        text); Adler-32 for a gzip, whose members end with the CRC-32 of their text: the
        CRC-32 of a stored member and its trailer is the same whatever its text holds."""
        if self._counter.crc is None:
            raise ValueError("file_crc after forget_crc")
        if self._ahead is not None:
            self._ahead.stop()  # nothing else reads the file from now on
        self._finished = True
        scratch = bytearray(1 << 20)
        try:
            while self._counter.readinto(scratch):
                pass
        except (OSError, ValueError) as exc:
            raise self._read_error(exc) from None
        return self._counter.crc

    def size_hint(self) -> int:
        """At most how many bytes one read may still return, as far as is known cheaply: what
        is left of a plain file (and a byte, to see its end), what a small gzip inflates to at
        most as real traces do (~30x); else `READ_SIZE`. Buffers sized by it are not zeroed
        16 MB at a time for a trace of 100 kB."""
        if self.compressed:
            return min(READ_SIZE, max(1 << 16, 32 * self.file_bytes))
        return min(READ_SIZE, max(0, self.file_bytes - self.inflated) + len(self._head or b"") + 1)

    def read_view(self, size: int = READ_SIZE) -> memoryview:
        """Up to `size` (at most `READ_SIZE`) decompressed bytes as a view, valid only until
        the next read of this stream; empty at the end. For a pass that copies what it keeps
        of each read (`ChromeJsonEvents._copy`): a gzip's blocks inflated ahead are lent as
        they lie in the stream's two buffers (not a byte copied, no new pages: see
        `_InflateAhead`), a plain file is read into one buffer of the stream's own, made
        once. The same limits as `read`."""
        size = READ_SIZE if size < 0 else min(size, READ_SIZE)
        if self._ahead is None:
            self._pooled = True
        if self._head:
            return memoryview(self.read(size))
        self._start_ahead()
        if self._ahead is not None:
            return self._counted(self._ahead.borrow, size)

        def read(k: int) -> memoryview:
            if self._own is None or len(self._own) < min(k, self.size_hint()):
                self._own = bytearray(min(k, self.size_hint()))
            whole = memoryview(self._own)
            return whole[:_readinto(self._inner, whole[:k])]

        return self._counted(read, size)

    def _start_ahead(self) -> None:
        if self._ahead is None and self._inflates_ahead():
            # From the first read on, a thread inflates the next blocks while the caller
            # works on this one (ISA-L and the native scanner both run without the GIL).
            self._ahead = _InflateAhead(self._inner, self.inflation_limit - self.inflated, pooled=self._pooled)

    def _read_raw(self, size: int) -> bytes:
        return self._counted(self._inner.read if self._ahead is None else self._ahead.read, size)

    def _counted(self, read: Callable[[int], Any], size: int) -> Any:
        """`read(size)` asked for at most one byte past the inflation limit (crossing it is
        seen at once, without inflating the excess), its read errors as `TraceError`, and
        what it gave counted against the limit (`InflationLimit` past it)."""
        size = min(size, max(self.inflation_limit - self.inflated, 0) + 1)
        if self._finished:
            raise ValueError(f"{self.name} is read no further after file_crc")
        try:
            data = read(size)
        except (OSError, EOFError, zlib.error, isal_zlib.error, ValueError) as exc:
            raise self._read_error(exc) from None
        self.inflated += len(data)
        if self.inflated > self.inflation_limit:
            raise self._limit_error()
        return data

    def _read_error(self, exc: BaseException) -> TraceError:
        kind = "corrupt or truncated gzip" if self.compressed else "read error"
        return TraceError(f"{kind} in {self.name}: {exc}")

    def _limit_error(self) -> InflationLimit:
        if self.ratio_limit is not None and self.ratio_limit < self.max_inflated_bytes:
            return InflationLimit(
                f"{self.name} inflates to more than {self.max_ratio:g}x its size of {self.file_bytes:,} bytes "
                f"(past {self.ratio_limit:,} bytes; real traces inflate at most ~30x): refused as a gzip bomb",
                limit=self.ratio_limit,
            )
        return InflationLimit(
            f"{self.name} inflates past the limit of {self.max_inflated_bytes:,} bytes; "
            "raise the limit if this is intended",
            limit=self.max_inflated_bytes,
        )

    def close(self) -> None:
        if self._ahead is not None:
            self._ahead.stop()  # before the file goes: the thread may be reading it
        self._file.close()

    def __enter__(self) -> TraceStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
