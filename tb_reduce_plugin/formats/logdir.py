"""How traces are named and laid out in a logdir, and how a logdir is walked.

What both the server's discovery (`serve.discovery`) and the live sidecar's watcher
(`live.watch`) need: the trace suffixes and what a name says of its host and format,
the cheap sniff that tells a `.json(.gz)` trace from other JSON, and the bounded walk
(entries, depth, links, loops). Knowledge of the formats' files, so the live side reads
it from here and never imports the server.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from typing import BinaryIO, Iterable, Iterator, Optional

from ..errors import TraceError
from . import objectstore
from .sources import FileIdentity, open_regular

SUFFIXES = (
    (".xplane.pb", "xspace"),
    (".pt.trace.json.gz", "chrome-json"),
    (".pt.trace.json", "chrome-json"),
    (".trace.json.gz", "chrome-json"),
    (".trace.json", "chrome-json"),
    (".json.gz", "chrome-json?"),
    (".json", "chrome-json?"),
)
MAX_ENTRIES = 200_000  # directory entries visited per walk, at most
MAX_DEPTH = 16
SNIFF_BYTES = 4096
# Object-format files may put `traceEvents` after a long header (Kineto's `deviceProperties`
# for 8 GPUs, a benchmark's `metadata`: 5-30 KB in the corpus), so look this far for it.
SCAN_BYTES = 1 << 20


def content(f: BinaryIO, limit: int) -> Iterator[bytes]:
    """The first `limit` bytes of a file's content (gunzipped if it is gzip), in chunks."""
    gz = f.read(2) == b"\x1f\x8b"
    f.seek(0)
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if gz else None
    while limit > 0:
        if inflate is None:
            chunk = f.read(min(64 * 1024, limit))
            if not chunk:
                return
        else:
            raw = inflate.unconsumed_tail or f.read(64 * 1024)
            if not raw:
                return
            chunk = inflate.decompress(raw, min(64 * 1024, limit))
        limit -= len(chunk)
        yield chunk
        if inflate is not None and inflate.eof:
            return


def looks_like_chrome_trace(path: str, expect: Optional[FileIdentity] = None) -> bool:
    """A `.json(.gz)` file is a trace if its first bytes look like one, or, for an object,
    if it has a `traceEvents` key in its first `SCAN_BYTES` (bounded).

    Opened as every reader opens (`open_regular`): a FIFO or device swapped in since
    the walk's `stat` (`expect`) is refused without blocking, not sniffed.
    """
    try:
        f = open_head(path, expect, SCAN_BYTES)
        with f:
            chunks = content(f, SCAN_BYTES)
            head = b""
            for chunk in chunks:
                head += chunk
                if len(head) >= SNIFF_BYTES:
                    break
            text = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:SNIFF_BYTES]
            if text[:1] == b"[":
                return b'"ph"' in text or text[1:].lstrip()[:1] in (b"{", b"]")
            if text[:1] != b"{":
                return False
            if b'"traceEvents"' in text or b'"ph"' in text:
                return True
            if b'"traceEvents"' in head:
                return True
            tail = head[-16:]
            for chunk in chunks:
                if b'"traceEvents"' in tail + chunk:
                    return True
                tail = chunk[-16:]
    except (OSError, zlib.error, EOFError, gzip.BadGzipFile, TraceError):
        return False
    return False


def open_head(path: str, expect: Optional[FileIdentity], limit: int) -> BinaryIO:
    """A file opened as every reader opens it (`open_regular`), or, for an object in a
    store, its first `limit` bytes (one range read, of the version the walk listed): a
    head is all the sniffers read, and they stop at `limit` bytes of content."""
    if objectstore.is_url(path):
        return io.BytesIO(objectstore.read_head(path, expect, limit))
    return open_regular(path, expect=expect)[0]


def split_trace_name(name: str) -> Optional[tuple[str, str]]:
    """(host, format) of a trace file's name, or None for a name no trace has."""
    for suffix, fmt in SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], fmt
    return None


class TreeWalk:
    """The entries under a folder that are not folders, as (folder, entry): cheaply and bounded.

    Depth-first; names starting with '.' skipped; `exclude`d folders not entered; at
    most `MAX_DEPTH` deep; it stops after `MAX_ENTRIES` entries (`truncated` then says
    so). Symlinked folders are entered only with `follow_symlinks`, and then only once
    (by real path) and never one that holds the walk's root, so a loop ends. Folders
    left out are noted in `skipped` as (path, reason). The logdir walk and the live
    watcher (which follows no links) share it.
    """

    def __init__(self, root: str, exclude: Iterable[str] = (), follow_symlinks: bool = False) -> None:
        self.root = root
        self.exclude = frozenset(exclude)
        self.follow_symlinks = follow_symlinks
        self.truncated = False
        self.skipped: list[tuple[str, str]] = []

    def __iter__(self) -> Iterator[tuple[str, os.DirEntry]]:
        visited = 0
        root_real = os.path.realpath(self.root)
        entered = {root_real}  # real paths of the folders walked (their real children follow by name)
        stack = [(self.root, root_real, 0)]
        while stack:
            directory, real, depth = stack.pop()
            try:
                entries = list(os.scandir(directory))
            except OSError as exc:
                if directory != self.root:
                    self.skipped.append((directory, f"cannot be read ({exc.strerror or exc})"))
                continue
            for entry in entries:
                visited += 1
                if visited > MAX_ENTRIES:
                    self.truncated = True
                    self.skipped.append((directory, f"not walked to the end: the walk stops after "
                                                    f"{MAX_ENTRIES:,} entries"))
                    return
                if entry.name.startswith("."):
                    continue
                target: Optional[str] = None  # the folder to walk, for a folder or a link to one
                try:
                    if entry.is_dir(follow_symlinks=False):
                        target = os.path.join(real, entry.name)
                    elif entry.is_symlink() and entry.is_dir():  # a link to a folder
                        if not self.follow_symlinks:
                            self.skipped.append((entry.path, "a link to a folder, not followed "
                                                             "(--tb_reduce_follow_symlinks=false)"))
                            continue
                        target = os.path.realpath(entry.path)
                        why = _walked_already(target, entered, root_real)
                        if why is not None and target not in self.exclude:
                            self.skipped.append((entry.path, why))
                            continue
                except OSError:
                    continue
                if target is None:
                    yield directory, entry
                    continue
                if target in self.exclude:
                    continue
                if depth >= MAX_DEPTH:
                    self.skipped.append((entry.path, f"deeper than {MAX_DEPTH} folders: not walked"))
                    continue
                entered.add(target)
                stack.append((entry.path, target, depth + 1))


def _walked_already(target: str, entered: set[str], root: str) -> Optional[str]:
    """Why a linked folder is not walked: it was (a loop), it holds the root (a loop
    through it), or it is inside the root (walked under its own name); else None."""
    if target in entered or target == root or root.startswith(target + os.sep):
        return "a link to a folder walked already (a loop)"
    if target.startswith(root + os.sep):
        return "a link to a folder inside the logdir, listed under its own name"
    return None
