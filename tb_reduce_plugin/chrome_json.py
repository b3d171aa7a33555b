"""Streaming reader for Chrome trace JSON (Object and Array format).

Why not `json.load`: a 1 GB trace becomes ~6 GB of Python objects. Instead the event
array is cut into blocks of about 16 MB that end on an event boundary, and each block
is decoded at once by msgspec (C) into whatever the caller asks for — typed structs
for indexing, raw byte spans for writing events back unchanged.

Finding a boundary without a Python-level tokenizer: candidate cut points are `}`
followed by `,` and `{` (or the end of the array); a block `[` + text[:cut+1] + `]`
that decodes is, by construction of JSON from a true event start, cut at a true
event end, and a candidate inside a string or a nested object fails to decode, so we
try the previous candidate. Top-level keys other than `traceEvents` are parsed with
the stdlib decoder; they are small in every real trace.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
import weakref
from typing import Any, Callable, Iterator, List, Optional, TypeVar

import msgspec
import numpy as np
from isal import isal_zlib

from .errors import TraceError
from .sources import READ_SIZE, TraceStream

T = TypeVar("T")
Decode = Callable[[bytes], List[T]]

_WS = b" \t\r\n"
_EVENT_END = re.compile(rb"\}[ \t\r\n]*(?:,[ \t\r\n]*\{|\])")
_FINAL_END = re.compile(rb"\}[ \t\r\n,]*\Z")
_MAX_TOP_LEVEL_VALUE = 512 * 1024 * 1024
_SEARCH_WINDOW = 1024 * 1024
_TRIES_PER_BLOCK = 16


class ChromeJsonReader:
    """Iterates a Chrome trace's events in decoded blocks; collects top-level keys.

    After iteration: `container` is "object" or "array", `metadata` holds every
    top-level key except `traceEvents` in file order, `truncated` tells whether the
    file ended before its event array did (a live writer that died).
    """

    def __init__(self, stream: TraceStream, block_size: int = READ_SIZE) -> None:
        self._stream = stream
        self._block = block_size
        self._buf = bytearray()
        self._pos = 0
        self._eof = False
        self.container: Optional[str] = None
        self.metadata: dict[str, Any] = {}
        self.truncated = False

    # ---- buffer management -------------------------------------------------
    def _fill(self, want: int) -> bool:
        """Ensure at least `want` unread bytes (or EOF); return False when none left."""
        while len(self._buf) - self._pos < want and not self._eof:
            chunk = self._stream.read(max(self._block, want))
            if not chunk:
                self._eof = True
                # One spare byte after the data, for the "]" of the last block.
                keep = max(self._pos - 1, 0)
                self._buf = bytearray(memoryview(self._buf)[keep:]) + b" "
                self._pos -= keep
                break
            # Keep one byte before the cursor: `_decode_block` writes "[" there.
            keep = max(self._pos - 1, 0)
            buf = bytearray(memoryview(self._buf)[keep:])
            buf += chunk
            self._buf = buf
            self._pos -= keep
        return len(self._buf) - self._pos > (1 if self._eof else 0)

    def _skip_ws(self, extra: bytes = b"") -> Optional[int]:
        """Skip whitespace (and `extra` bytes); return the next byte or None at EOF."""
        skip = _WS + extra
        while True:
            if not self._fill(1):
                return None
            buf, pos, end = self._buf, self._pos, len(self._buf)
            while pos < end and buf[pos] in skip:
                pos += 1
            self._pos = pos
            if pos < end:
                return buf[pos]

    def _top_level_value(self) -> Any:
        """Decode one JSON value at the cursor with the stdlib decoder."""
        want = 64 * 1024
        decoder = json.JSONDecoder()
        while True:
            self._fill(want)
            raw = self._buf[self._pos:self._pos + want]
            text = raw.decode("utf-8", "surrogateescape")
            try:
                value, end = decoder.raw_decode(text)
            except RecursionError:
                raise TraceError("malformed trace: JSON nested too deeply to decode") from None
            except json.JSONDecodeError as exc:
                if (self._eof and len(raw) < want) or len(raw) >= _MAX_TOP_LEVEL_VALUE:
                    raise TraceError(f"not a Chrome trace: malformed JSON ({exc.msg})") from None
                want = len(raw) * 2
                continue
            self._pos += len(text[:end].encode("utf-8", "surrogateescape"))
            return value

    # ---- public --------------------------------------------------------------
    def blocks(self, decode: Decode[T]) -> Iterator[List[T]]:
        """Yield the events block by block, each decoded by `decode(b"[...]")`.

        `decode` must raise `msgspec.DecodeError` (not a subclass) when the text is
        not a JSON array; other errors propagate.
        """
        first = self._skip_ws(b"\xef\xbb\xbf")
        if first is None:
            raise TraceError("empty file: no trace events")
        if first == ord("["):
            self.container = "array"
            self._pos += 1
            yield from self._event_array(decode)
            return
        if first != ord("{"):
            raise TraceError("not a Chrome trace: expected a JSON object or array")
        self.container = "object"
        self._pos += 1
        seen_events = False
        while True:
            c = self._skip_ws()
            if c is None:
                if seen_events:
                    self.truncated = True
                    return
                raise TraceError("not a Chrome trace: the JSON object ends early")
            if c == ord("}"):
                self._pos += 1
                break
            if c == ord(","):
                self._pos += 1
                continue
            key = self._top_level_value()
            if not isinstance(key, str) or self._skip_ws() != ord(":"):
                raise TraceError("not a Chrome trace: malformed top-level object")
            self._pos += 1
            if key == "traceEvents" and not seen_events:
                if self._skip_ws() != ord("["):
                    raise TraceError("not a Chrome trace: traceEvents is not a list")
                self._pos += 1
                seen_events = True
                yield from self._event_array(decode)
                if self.truncated:
                    return
            else:
                self._skip_ws()
                self.metadata[key] = self._top_level_value()
        if not seen_events:
            raise TraceError("not a Chrome trace: no traceEvents list among the top-level keys")

    def _event_array(self, decode: Decode[T]) -> Iterator[List[T]]:
        while True:
            c = self._skip_ws(b",")
            if c is None:
                self.truncated = True
                return
            if c == ord("]"):
                self._pos += 1
                return
            self._fill(self._block)
            block = self._decode_block(decode)
            if block is None:
                if not self._eof:
                    self._fill(2 * (len(self._buf) - self._pos))
                    continue
                # A truncated file: only an incomplete last event is lost.
                self.truncated = True
                tail = self._complete_tail(decode)
                if tail:
                    yield tail
                return
            yield block

    def _complete_tail(self, decode: Decode[T]) -> List[T]:
        """At the end of a truncated file, the complete elements before the cut one.

        Cut candidates end on `}`; an element that is not an object (a stray number
        in a hand-edited file) leaves none, so the short tail is walked one element
        at a time with the stdlib decoder, as a reader of a truncated file would.
        """
        text = bytes(self._buf[self._pos:]).decode("utf-8", "surrogateescape")
        decoder = json.JSONDecoder()
        spans, pos = [], 0
        while True:
            while pos < len(text) and text[pos] in " \t\r\n,":
                pos += 1
            try:
                _, end = decoder.raw_decode(text, pos)
            except (json.JSONDecodeError, RecursionError):
                break
            spans.append(text[pos:end])
            pos = end
        if not spans:
            return []
        return decode(("[" + ",".join(spans) + "]").encode("utf-8", "surrogateescape"))

    def _decode_block(self, decode: Decode[T]) -> Optional[List[T]]:
        """Decode the longest prefix of complete events found by trying candidates.

        Returns None when more data is needed (or, at EOF, when only an incomplete
        event is left: the file was truncated).
        """
        buf, pos, end = self._buf, self._pos, len(self._buf)
        view = memoryview(buf)
        # Decode in place, without copying 16 MB: the byte before the block is
        # already consumed and the byte after the cut is only `,`, `]` or space, so
        # they are briefly overwritten by the brackets of a JSON array.
        buf[pos - 1] = ord("[")
        for tries, cut in enumerate(self._candidates(buf, pos, end)):
            if tries >= _TRIES_PER_BLOCK:
                break
            saved = buf[cut]
            buf[cut] = ord("]")
            try:
                events = decode(view[pos - 1:cut + 1])
            except msgspec.ValidationError:
                raise
            except msgspec.DecodeError:
                continue
            except RecursionError:
                raise TraceError("malformed trace: JSON nested too deeply to decode") from None
            finally:
                buf[cut] = saved
            self._pos = cut
            return events
        return self._probe(decode, bytes(buf), pos, end)

    def _probe(self, decode: Decode[T], buf: bytes, pos: int, end: int) -> Optional[List[T]]:
        """Let the decoder say where the text stops being an event list.

        msgspec reports "truncated" (need more bytes), "trailing characters (byte N)"
        (the array closed at N: decode up to there) or another malformation at N.
        """
        text = b"[" + buf[pos:end]
        try:
            msgspec.json.decode(text)
        except msgspec.DecodeError as exc:
            msg = str(exc)
        except RecursionError:
            raise TraceError("malformed trace: JSON nested too deeply to decode") from None
        else:  # the array closed exactly at the end of the buffer
            msg = f"trailing characters (byte {len(text) + 1})"
        if "truncated" in msg:
            return None
        m = re.search(r"\(byte (\d+)\)", msg)
        if m and "trailing characters" in msg:
            n = len(text[: int(m.group(1)) - 1].rstrip(_WS))  # msgspec counts from 1
            events = decode(text[:n])
            self._pos = pos + n - 2  # at the closing "]"
            return events
        where = f" at byte {self._stream.inflated - (len(buf) - pos) + int(m.group(1)) - 1:,}" if m else ""
        reason = msg.split(" (byte")[0]
        raise TraceError(f"malformed JSON in the event list{where}: {reason}")

    def _candidates(self, buf: bytes, pos: int, end: int) -> Iterator[int]:
        """Cut points (exclusive ends), from the last one back: `}` then `,{` or `]`."""
        if self._eof:
            m = _FINAL_END.search(buf, max(pos, end - 4096), end)
            if m:
                yield m.start() + 1
        hi = end
        while hi > pos:
            lo = max(pos, hi - _SEARCH_WINDOW)
            hits = [m.start() + 1 for m in _EVENT_END.finditer(buf, lo, min(end, hi + 64))]
            for cut in reversed(hits):
                if cut <= hi:
                    yield cut
            hi = lo


_raw_list = msgspec.json.Decoder(list[msgspec.Raw])


class ChromeJsonEvents:
    """The original JSON bytes of a Chrome trace's events, by index.

    The event table keeps no JSON; this streams the file again and slices out the
    events asked for, so memory stays bounded by one block. The file must still
    hold the events it held when indexed.

    With `store_dir` (the plugin, where one trace is asked for many windows), the
    first full pass also keeps each block compressed (ISA-L, ~10 % of the JSON,
    ~1 GB/s) in a temporary file there; later requests then read and inflate only
    the blocks that hold the events asked for, instead of the whole file. The file
    is deleted with this object.
    """

    block_size = READ_SIZE

    def __init__(self, path: str, max_inflated_bytes: int, expected_events: int,
                 store_dir: Optional[str] = None) -> None:
        self.path = path
        self.max_inflated_bytes = max_inflated_bytes
        self.expected_events = expected_events
        self.store_dir = store_dir
        self._store: Optional[_BlockStore] = None
        self._building = threading.Lock()

    @property
    def has_store(self) -> bool:
        return self._store is not None

    def events(self, indices: Any, level: int = 0, progress: Optional[Callable[[int, int], None]] = None,
               ) -> Iterator[list[bytes]]:
        indices = np.asarray(indices, dtype=np.int64)
        store = self._store
        if store is not None:
            yield from store.events(indices)
            return
        builder = None
        acquired = self.store_dir is not None and self._building.acquire(blocking=False)
        if acquired:
            try:
                builder = _BlockStore(self.store_dir)  # type: ignore[arg-type]
            except OSError:
                builder = None
        try:
            yield from self._stream(indices, progress, builder)
            if builder is not None:
                builder.finish()
                self._store, builder = builder, None
        finally:
            if builder is not None:  # failed, or the caller stopped early: not a whole store
                builder.close(remove=True)
            if acquired:
                self._building.release()

    def _stream(self, indices: np.ndarray, progress: Optional[Callable[[int, int], None]],
                builder: Optional[_BlockStore]) -> Iterator[list[bytes]]:
        def decode(text: Any) -> list:
            raws = _raw_list.decode(text)
            if builder is not None:
                builder.add(text, len(raws))
            return raws

        base = 0
        with TraceStream(self.path, self.max_inflated_bytes, progress) as stream:
            for raws in ChromeJsonReader(stream, self.block_size).blocks(decode):
                n = len(raws)
                lo, hi = np.searchsorted(indices, [base, base + n])
                if hi > lo:
                    yield [bytes(raws[i]) for i in (indices[lo:hi] - base).tolist()]
                base += n
        if base != self.expected_events:
            raise TraceError(
                f"{os.path.basename(self.path)} changed while it was read ({self.expected_events:,} then {base:,} events)"
            )


class _BlockStore:
    """Blocks of event JSON (`[...]`), compressed, in one temporary file; read by block."""

    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        fd, self.path = tempfile.mkstemp(prefix=".blocks-", dir=directory)
        self._file = os.fdopen(fd, "w+b")
        self._fd = fd
        self._offsets: list[int] = [0]
        self._firsts: list[int] = [0]
        self._finalizer = weakref.finalize(self, _remove, self._file, self.path)

    def add(self, text: Any, events: int) -> None:
        data = isal_zlib.compress(text, 1)
        self._file.write(data)
        self._offsets.append(self._offsets[-1] + len(data))
        self._firsts.append(self._firsts[-1] + events)

    def finish(self) -> None:
        self._file.flush()
        self._firsts_arr = np.asarray(self._firsts, dtype=np.int64)

    def close(self, remove: bool) -> None:
        if remove:
            self._finalizer()

    def events(self, indices: np.ndarray) -> Iterator[list[bytes]]:
        firsts = self._firsts_arr
        blocks = np.unique(np.searchsorted(firsts, indices, side="right") - 1)
        for b in blocks.tolist():
            if b >= len(firsts) - 1:
                raise TraceError(f"no event {int(indices[-1])} in this trace")
            lo, hi = self._offsets[b], self._offsets[b + 1]
            raws = _raw_list.decode(isal_zlib.decompress(os.pread(self._fd, hi - lo, lo)))
            first = int(firsts[b])
            a, z = np.searchsorted(indices, [first, first + len(raws)])
            yield [bytes(raws[i]) for i in (indices[a:z] - first).tolist()]


def _remove(file: Any, path: str) -> None:
    try:
        file.close()
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
