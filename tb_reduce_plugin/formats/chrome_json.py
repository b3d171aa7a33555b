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

Undecodable text (invalid UTF-8, escapes of lone surrogates), which msgspec refuses,
would fail every cut after it: a block that fails is checked once, and decoded again
with it replaced by U+FFFD (`_sanitize`, the rule of `model.table.clean_json_text`). Runs
of whitespace and commas are skipped by regex, in C, however long.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Optional, TypeVar

import msgspec
import numpy as np

from ..errors import FileChanged, KeptTextDamaged, TraceError
from ..model.mapped import SpillFailed
from ..model.read_advice import cold, will_need
from ..model.table import DECODED_EVENT_BYTES, clean_json_text
from ..native import scanner_module
from .block_store import TIER_MAX_EVENTS, BlockStore, Tier, TierBuilder, raw_list
from .plain_text import PlainText, each_a_value
from .sources import DEFAULT_MAX_RATIO, READ_SIZE, FileIdentity, TraceStream

log = logging.getLogger(__name__)
T = TypeVar("T")
Decode = Callable[[bytes], List[T]]

_WS = b" \t\r\n"
_EVENT_END = re.compile(rb"\}[ \t\r\n]*(?:,[ \t\r\n]*\{|\])")
_FINAL_END = re.compile(rb"\}[ \t\r\n,]*\Z")
_SEPARATORS = re.compile(rb"[ \t\r\n,]*")
_SEPARATORS_TEXT = re.compile(r"[ \t\r\n,]*")
_BYTE_AT = re.compile(r"\(byte (\d+)\)")
_MAX_TOP_LEVEL_VALUE = 512 * 1024 * 1024
# Finds where a JSON value ends without building it (`ChromeJsonReader._value_extent`).
_skip_value = msgspec.json.Decoder(msgspec.Raw).decode
# Cut points are searched from the end of the buffer in windows growing to 1 MB: the
# last event end is usually in the last few kB, and a small first window keeps a
# block of one event (hostile files) from costing a 1 MB scan per event.
_FIRST_WINDOW = 16 * 1024
_SEARCH_WINDOW = 1024 * 1024
_TRIES_PER_BLOCK = 16
_NEAR_END = 32
# How often a window waiting for the text being kept looks how far it has got (a chunk of
# 256 KiB is compressed in ~0.2 ms; a zoom waits for seconds' worth at most).
_BUILD_POLL_S = 0.02
# The text's end a first view keeps in memory (`ChromeJsonEvents._tail`): a Kineto trace's
# metadata and whole-profile span (a few kB for 8 GPUs' processes and threads), with room.
TAIL_BYTES = 1 << 20
_RUNS: dict[bytes, re.Pattern] = {}


def _run_of(skip: bytes) -> re.Pattern:
    """A compiled match for a run of bytes in `skip` (cached per set): whitespace runs
    of any length are skipped in C (~3 ns a byte; a search for the first byte not in
    the set is 2-3x slower in `re`), not byte by byte in Python."""
    pattern = _RUNS.get(skip)
    if pattern is None:
        pattern = _RUNS[skip] = re.compile(b"[" + b"".join(b"\\x%02x" % c for c in sorted(set(skip))) + b"]*")
    return pattern


DECODED_BYTES_PER_BRACE = DECODED_EVENT_BYTES  # (`model`)


def block_size_for(memory_bytes: Optional[int]) -> int:
    """Read blocks of 16 MB, smaller under a small memory budget: a block of tiny events
    decodes to ~4x its size in Python objects, and a few blocks are alive at once."""
    if not memory_bytes:
        return READ_SIZE
    return int(min(READ_SIZE, max(1 << 20, memory_bytes // 24)))


class ChromeJsonReader:
    """Iterates a Chrome trace's events in decoded blocks; collects top-level keys.

    After iteration: `container` is "object" or "array", `metadata` holds every
    top-level key except `traceEvents` in file order, `truncated` tells whether the
    file ended before its event array did (a live writer that died).
    """

    def __init__(self, stream: TraceStream, block_size: int = READ_SIZE, account: Any = None) -> None:
        # Charged for the buffer (twice its size: the one before is kept to be written
        # over, see `_read_after`) and, while a block is decoded and used, for its decoded
        # events (see `budget`).
        self._account = account
        self._buffer_charge = 0
        self._stream = stream
        self._block = block_size
        self._buf = bytearray()
        self._spare: Optional[bytearray] = None  # the buffer before this one, reused by `_read_after`
        self._lent = False  # the buffer is the stream's (`TraceStream.lend`), given back when done with
        self._short = False  # the last read returned less than it asked for
        self._pos = 0
        self._eof = False
        self._checked = False  # the unread buffer holds no undecodable text (see `_sanitize`)
        self._last_hits: Optional[tuple[int, int, list[int]]] = None  # cut points of the buffer's last window
        self.container: Optional[str] = None
        self.metadata: dict[str, Any] = {}
        self.truncated = False
        # Where each decoded block lies in the file's decompressed bytes, so that a
        # later pass can copy events by position (`ChromeJsonEvents`): `decoding_at` is
        # the offset of the text given to `decode` (its "["); `rewritten` says some text
        # given to `decode` was not the file's own bytes (undecodable text replaced, a
        # truncated tail re-joined), so positions do not hold.
        self._base = 0  # offset of the buffer's first byte
        self.read_bytes = 0
        self.decoding_at = 0
        self.rewritten = False
        # `{` bytes from the cursor to the end of the buffer, counted for the block being
        # decoded (None once the buffer changes): more than the block's events, at most.
        self.unread_braces: Optional[int] = None
        self._late_charge = 0  # what `charge_python_decoding` charged for the block being decoded
        self._block_charged = False  # the block being decoded is charged for its Python objects

    def file_crc(self) -> int:
        """The checksum of the file read (`TraceStream.file_crc`), once read: what a later
        pass checks it reads the same version against."""
        return self._stream.file_crc()

    # ---- buffer management -------------------------------------------------
    def _fill(self, want: int) -> bool:
        """Ensure at least `want` unread bytes (or EOF); return False when none left."""
        while len(self._buf) - self._pos < want and not self._eof:
            self._checked, self._last_hits = False, None  # a new buffer follows
            self.unread_braces = None
            # Keep one byte before the cursor: `_decode_block` writes "[" there.
            keep = max(self._pos - 1, 0)
            n, start = self._read_after(keep, max(self._block, want))
            self._pos += start - keep
            self._base += keep - start
            if not n:
                self._eof = True
                self._spare = None  # no more reads: its memory goes
                self._buf += b" "  # one spare byte after the data, for the "]" of the last block
                break
            # (and the block a gzip stream inflates ahead meanwhile: `TraceStream.ahead_bytes`)
            self._charge_buffer(2 * len(self._buf) + getattr(self._stream, "ahead_bytes", 0))
        return len(self._buf) - self._pos > (1 if self._eof else 0)

    def _read_after(self, keep: int, size: int) -> tuple[int, int]:
        """Make the buffer its bytes from `keep` on, then up to `size` bytes read (at most
        `READ_SIZE`): how many were read, and where in the new buffer the bytes kept begin
        (what is before them is not the trace's).

        A gzip inflated ahead lends the buffer it inflated the block into, with room before
        the block (`TraceStream.lend`): the bytes kept are written there, and the block is
        not copied (a 16 MB copy a block, on the thread that scans, was ~10 % of its time);
        the buffer goes back to the stream once the next one is read. Otherwise:

        Every block used to land in 16 MB of fresh pages, ~4,100 page faults a block (a
        third of the native scan's time in the server): a bytearray cannot drop its head
        and grow without a new allocation (CPython reallocates one whose start has
        moved), each read was a new bytes object, and the server allocates 16 MB by mmap
        (`budget.return_large_blocks`), so each was new memory the kernel faulted in and
        zeroed. Now the reader keeps two buffers and writes each block into the one it
        read before, whose pages are there: the stream reads into it (`readinto`), the
        rest is copied through memoryviews (a memcpy, no temporary). `_charge_buffer`
        counts the buffer twice for this. A buffer still exported (a view of it alive:
        none should be) is never written over: resizing it raises BufferError, and a new
        one is made instead."""
        old = self._buf
        tail = len(old) - keep
        size = min(size, READ_SIZE, self._stream.size_hint())
        lent = self._stream.lend(size, room=tail)
        # The read before returned less than asked: most likely the end is next; not so where
        # blocks are inflated ahead (the rest of a block read in part is short).
        if lent is None and self._short and not self._stream.inflates_ahead:
            size = min(size, 1 << 16)
        if lent is not None:
            buf, at, n = lent
            del buf[at + n:]  # the buffer ends where the block does
            with memoryview(buf) as into, memoryview(old) as source:
                into[at - tail:at] = source[keep:]
            self._short = n < size
            self.read_bytes += n
            self._done_with(old)
            self._buf, self._lent = buf, True
            return n, at - tail
        buf = self._spare
        self._spare = None
        try:
            if buf is None:
                raise BufferError
            buf.append(0)  # a resize, refused while a view of `buf` is alive
            if len(buf) > tail + size:
                del buf[tail + size:]
            elif len(buf) < tail + size:
                buf += bytes(tail + size - len(buf))
        except BufferError:
            buf = bytearray(tail + size)
        with memoryview(buf) as into:
            with memoryview(old) as source:
                into[:tail] = source[keep:]
            n = self._stream.readinto(into[tail:])
        if n < size:
            del buf[tail + n:]
        self._short = n < size
        self.read_bytes += n
        self._done_with(old)
        self._buf, self._lent = buf, False
        return n, 0

    def _done_with(self, old: bytearray) -> None:
        """The buffer before the new one: the stream's goes back to it, the reader's own is
        the one written over next time."""
        if self._lent:
            self._stream.give_back(old)
        else:
            self._spare = old

    def _charge_buffer(self, n: int) -> None:
        """Hold `n` bytes for the buffer from now on (more when it grows, less when it shrinks)."""
        if self._account is None or n == self._buffer_charge:
            return
        if n > self._buffer_charge:
            self._account.charge(n - self._buffer_charge, "reading the trace (one event bigger than the rest?)")
        else:
            self._account.release(self._buffer_charge - n)
        self._buffer_charge = n

    def _skip_ws(self, extra: bytes = b"") -> Optional[int]:
        """Skip whitespace (and `extra` bytes); return the next byte or None at EOF.

        One regex match per buffer: 100 MB of spaces cost what reading them does.
        """
        run = _run_of(_WS + extra)
        while True:
            if not self._fill(1):
                return None
            buf = self._buf
            self._pos = pos = run.match(buf, self._pos).end()  # type: ignore[union-attr]
            if pos < len(buf):
                return buf[pos]

    def _top_level_value(self) -> Any:
        """Decode one JSON value at the cursor with the stdlib decoder.

        The stdlib is given the value's own bytes when msgspec can say where it ends
        (`_value_extent`); else it is tried on 64 KiB and on twice as much while the value
        goes on, decoding the prefix again each time (a Fuchsia trace's 6 MB string of
        escaped events: 8 tries, ~0.45 s)."""
        want = self._value_extent() or 64 * 1024
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
            # surrogateescape maps the decoder's character offset back to exact bytes;
            # the value itself is read again from its bytes with undecodable text
            # replaced (the one rule), never with lone surrogates the writer cannot encode.
            size = len(text[:end].encode("utf-8", "surrogateescape"))
            data = bytes(raw[:size])
            clean, _ = clean_json_text(data)
            if clean is not data:
                value = decoder.raw_decode(clean.decode("utf-8"))[0]
            self._pos += size
            return value

    def _value_extent(self) -> Optional[int]:
        """The bytes of the JSON value at the cursor, as msgspec finds them (its message
        "trailing characters (byte N)" after the value, or the value alone up to the end of
        the file); None when msgspec refuses it (NaN, invalid UTF-8, a lone surrogate: the
        stdlib's rules stay the ones that hold) or it is longer than any value may be."""
        want = 64 * 1024
        while True:
            self._fill(want)
            with memoryview(self._buf) as view, view[self._pos:self._pos + want] as raw:  # let go before a fill
                n = len(raw)
                try:
                    _skip_value(raw)
                    msg = ""
                except msgspec.DecodeError as exc:
                    msg = str(exc)
                except RecursionError:
                    return None
            if not msg:  # the value ends the text: where the file ends, or where this read does
                return n if self._eof and n < want else None
            at = _BYTE_AT.search(msg)
            if "trailing characters" in msg and at is not None:
                return int(at.group(1)) - 1
            cut_short = "truncated" in msg or (at is not None and int(at.group(1)) >= n)  # a number cut by the read
            if not cut_short or (self._eof and n < want) or n >= _MAX_TOP_LEVEL_VALUE:
                return None
            want = n * 2

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
            c = self._skip_ws(b",")  # any run of commas between members, as before, but in C
            if c is None:
                if seen_events:
                    self.truncated = True
                    return
                raise TraceError("not a Chrome trace: the JSON object ends early")
            if c == ord("}"):
                self._pos += 1
                break
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
        """The blocks of the event list; runs of whitespace and commas between events
        are skipped (at C speed), but two events need a comma between them."""
        after_event = False  # a block ended on an event: "," or "]" must come next
        while True:
            c = self._skip_ws(b"," if not after_event else b"")
            if after_event and c == ord(","):
                c = self._skip_ws(b",")
            elif after_event and c is not None and c != ord("]"):
                raise TraceError("malformed JSON in the event list: no comma between two events")
            if c is None:
                self.truncated = True
                return
            if c == ord("]"):
                self._pos += 1
                return
            self._fill(self._block)
            decoded = self._charge_decoded()
            try:
                block = self._decode_block(decode)
            except BaseException:
                self._release(decoded)
                raise
            if block is None:
                if not self._eof:
                    self._release(decoded)  # charged again for the bigger buffer
                    self._fill(2 * (len(self._buf) - self._pos))
                    continue
                # A truncated file: only an incomplete last event is lost.
                self.truncated = True
                try:
                    tail = self._complete_tail(decode)
                    if tail:
                        yield tail
                finally:
                    self._release(decoded)
                return
            after_event = True
            try:
                yield block
            finally:  # the caller has made what it keeps of the block: its objects go
                del block
                self._release(decoded)

    def _charge_decoded(self) -> int:
        """Charge what decoding the unread buffer can hold: Python objects per event,
        bounded by the `{` bytes in it (every event opens one; measured ~270 bytes an
        event for tiny ones). With the native scanner, nothing yet: it makes no object
        per event and sizes its columns itself, and a block it hands back is charged
        before the pure path decodes it (`charge_python_decoding`), so the thread that
        scans does not count every byte's braces for a charge it seldom needs."""
        self._late_charge = 0
        self.unread_braces = None
        self._block_charged = scanner_module() is None and self._account is not None
        if not self._block_charged:
            return 0
        self.unread_braces = self._buf.count(b"{", self._pos)
        n = DECODED_BYTES_PER_BRACE * self.unread_braces
        self._account.charge(n, "the decoded events of one block")
        return n

    def charge_python_decoding(self) -> None:
        """Before the pure path decodes a block the native scanner handed back: what its
        Python objects can hold, charged as `_charge_decoded` charges without the scanner
        (once a block; released with the block)."""
        if self._account is None or self._block_charged:
            return
        module = scanner_module()
        with memoryview(self._buf)[self._pos:] as view:  # no export outlives this (`_fill` resizes the buffer)
            self.unread_braces = module.braces(view) if module is not None else self._buf.count(b"{", self._pos)
        self._block_charged = True
        self._late_charge = DECODED_BYTES_PER_BRACE * self.unread_braces
        self._account.charge(self._late_charge, "the decoded events of one block")

    def _release(self, n: int) -> None:
        n, self._late_charge = n + self._late_charge, 0
        if self._account is not None and n:
            self._account.release(n)

    def _complete_tail(self, decode: Decode[T]) -> List[T]:
        """At the end of a truncated file, the complete elements before the cut one.

        Cut candidates end on `}`; an element that is not an object (a stray number
        in a hand-edited file) leaves none, so the short tail is walked one element
        at a time with the stdlib decoder, as a reader of a truncated file would.
        """
        # At EOF `_decode_block` has replaced undecodable text already (`_sanitize`).
        text = bytes(self._buf[self._pos:]).decode("utf-8", "surrogateescape")
        decoder = json.JSONDecoder()
        spans, pos = [], 0
        while True:
            pos = _SEPARATORS_TEXT.match(text, pos).end()  # type: ignore[union-attr]
            try:
                _, end = decoder.raw_decode(text, pos)
            except (json.JSONDecodeError, RecursionError):
                break
            spans.append(text[pos:end])
            pos = end
        if not spans:
            return []
        self.rewritten = True
        try:
            return decode(("[" + ",".join(spans) + "]").encode("utf-8", "surrogateescape"))
        except msgspec.ValidationError:
            raise
        except msgspec.DecodeError as exc:  # what only the stdlib takes (NaN): still malformed
            raise TraceError(f"malformed JSON at the end of the event list: {str(exc).split(' (byte')[0]}") from None

    def _decode_block(self, decode: Decode[T]) -> Optional[List[T]]:
        """Decode the longest prefix of complete events found by trying candidates.

        Returns None when more data is needed (or, at EOF, when only an incomplete
        event is left: the file was truncated).

        At the first failure the unread text is checked once for undecodable bytes
        (`_sanitize`), which fail every cut after them. A failure that names a byte
        is malformed text before the cut, not a wrong cut (that leaves the text
        truncated), so `_probe` is asked where it is at once; "trailing characters"
        is the event list closing before the cut, at the byte the message names: the
        events are decoded to there at once. (Trying earlier cuts instead decoded the
        block again for each: a Fuchsia trace, whose `systemTraceEvents` after the list
        is a string of escaped events full of cut points, took 16 decodes of 16 MB.)
        """
        tried = 0
        while True:
            buf, pos, end = self._buf, self._pos, len(self._buf)
            failed, malformed = False, False
            for cut in itertools.islice(self._candidates(buf, pos, end), tried, _TRIES_PER_BLOCK):
                tried += 1
                try:
                    events = self._decode_cut(decode, pos, cut)
                except msgspec.ValidationError:
                    raise
                except msgspec.DecodeError as exc:
                    msg = str(exc)
                    at = _BYTE_AT.search(msg)
                    if "trailing characters" in msg:
                        if at is None:
                            continue  # the array closed before this cut: an earlier one
                        try:
                            return self._decode_closed(decode, pos, int(at.group(1)))
                        except msgspec.ValidationError:
                            raise
                        except msgspec.DecodeError:  # undecodable text before the close: unchecked yet
                            failed, malformed = True, True
                            break
                    failed, malformed = True, at is not None
                    if malformed or not self._checked:
                        break
                    continue
                self._pos = cut
                return events
            if not self._checked:
                if self._sanitize():
                    tried = 0  # a new buffer: its cut points again
                    continue
                if failed and not malformed and tried < _TRIES_PER_BLOCK:
                    continue  # nothing to replace: a wrong cut; try the earlier ones
            return self._probe(decode, pos, end)

    def _sanitize(self) -> bool:
        """Replace undecodable text in the unread buffer (`model.table.clean_json_text`);
        True when anything changed.

        msgspec refuses invalid UTF-8 in the strings it decodes and lone surrogate
        escapes anywhere, which would fail every cut of the block; replacing them by
        U+FFFD (structure is untouched: only bytes inside strings change) lets the
        block decode, as the same rule does everywhere else. Runs only after a
        decode failed, and once per buffer. The buffer is replaced, not resized:
        decoded blocks may still hold views of it.
        """
        buf, pos = self._buf, self._pos
        region = bytes(memoryview(buf)[pos:])
        text, used = clean_json_text(region, final=self._eof)
        self._checked = True
        if text is region:
            return False
        self._last_hits = None
        fresh = bytearray(b" ")  # the byte before the cursor, where "[" goes
        fresh += text
        fresh += memoryview(buf)[pos + used:]
        if self._lent:  # the stream's buffer, done with
            self._stream.give_back(buf)
            self._lent = False
        self._buf, self._pos = fresh, 1
        self.rewritten = True
        return True

    def _probe(self, decode: Decode[T], pos: int, end: int) -> Optional[List[T]]:
        """Let the decoder say where the text stops being an event list.

        msgspec reports "truncated" (need more bytes), "trailing characters (byte N)"
        (the array closed at N: decode up to there) or another malformation at N.
        Two are not errors: complete events followed only by whitespace and commas to
        the end of the buffer (a long run of them: the events are taken, the run is
        skipped by `_skip_ws`, and the buffer never has to hold it whole), and runs
        of commas between events (`},,{`, `},]`), which the reader has always
        skipped where a block starts.
        """
        buf = self._buf
        buf[pos - 1] = ord("[")  # the consumed byte before the block (see `_decode_cut`)
        view = memoryview(buf)
        text = view[pos - 1:end]
        try:
            msgspec.json.decode(text)
        except msgspec.DecodeError as exc:
            msg = str(exc)
        except RecursionError:
            raise TraceError("malformed trace: JSON nested too deeply to decode") from None
        else:  # the array closed exactly at the end of the buffer
            msg = f"trailing characters (byte {len(text) + 1})"
        m = _BYTE_AT.search(msg)
        if "truncated" in msg:
            return self._events_before(decode, pos, end, need_comma=False)
        if m and "trailing characters" in msg:
            return self._decode_closed(decode, pos, int(m.group(1)))
        if m:
            at = min(pos - 1 + int(m.group(1)), end)
            events = self._events_before(decode, pos, at, need_comma=True)
            if events is not None:
                return events
            if not self._eof and at > end - _NEAR_END:
                return None  # maybe cut short by the buffer's end (a surrogate escape held back): read more first
        where = f" at byte {self._stream.inflated - (len(buf) - pos) + int(m.group(1)) - 1:,}" if m else ""
        reason = msg.split(" (byte")[0]
        raise TraceError(f"malformed JSON in the event list{where}: {reason}")

    def _decode_closed(self, decode: Decode[T], pos: int, trailing: int) -> List[T]:
        """The events of a list that closed where msgspec found "trailing characters"
        (`trailing`: that byte of the text from `pos - 1`, counted from 1); the cursor is
        left at its closing `]`."""
        buf = self._buf
        n = len(bytes(buf[pos - 1:pos - 2 + trailing]).rstrip(_WS))
        self.decoding_at = self._base + pos - 1
        try:
            events = decode(bytes(buf[pos - 1:pos - 1 + n]))
        except msgspec.ValidationError:
            raise
        except msgspec.DecodeError as exc:
            if not self._checked:
                raise  # maybe undecodable bytes in a string: `_decode_block` cleans the buffer and retries
            raise TraceError(f"malformed JSON in the event list: {str(exc).split(' (byte')[0]}") from None
        self._pos = pos + n - 2
        return events

    def _events_before(self, decode: Decode[T], pos: int, stop: int, need_comma: bool) -> Optional[List[T]]:
        """The events before `stop` when only separators lie between the last `}`
        and `stop` (at least one comma if `need_comma`), else None; C speed."""
        buf = self._buf
        cut = buf.rfind(b"}", pos, stop) + 1
        if cut <= 0 or cut >= len(buf) or _SEPARATORS.match(buf, cut, stop).end() != stop:  # type: ignore[union-attr]
            return None
        if need_comma and buf.find(b",", cut, stop) < 0:
            return None
        try:
            events = self._decode_cut(decode, pos, cut)
        except msgspec.ValidationError:
            raise
        except msgspec.DecodeError:
            return None  # the `}` was inside an incomplete event
        self._pos = cut
        return events

    def _decode_cut(self, decode: Decode[T], pos: int, cut: int) -> List[T]:
        """Decode buffer[pos:cut] as a JSON array, in place, without copying 16 MB: the
        byte before `pos` is already consumed and the byte at `cut` is only `,`, `]` or
        space, so they are briefly overwritten by the array's brackets. Raises
        `msgspec.DecodeError` when that text is not an event list."""
        buf = self._buf
        buf[pos - 1] = ord("[")
        saved = buf[cut]
        buf[cut] = ord("]")
        self.decoding_at = self._base + pos - 1
        try:
            return decode(memoryview(buf)[pos - 1:cut + 1])
        except RecursionError:
            raise TraceError("malformed trace: JSON nested too deeply to decode") from None
        finally:
            buf[cut] = saved

    def _candidates(self, buf: bytes, pos: int, end: int) -> Iterator[int]:
        """Cut points (exclusive ends), from the last one back: `}` then `,{` or `]`."""
        if self._eof:
            m = _FINAL_END.search(buf, max(pos, end - 4096), end)
            if m:
                yield m.start() + 1
        hi, window = end, _FIRST_WINDOW
        while hi > pos:
            lo = max(pos, hi - window)
            # The last window is kept: a buffer whose blocks end early (one event at a
            # time, between runs of commas) must not scan it again for every event.
            last = self._last_hits if hi == end else None
            if last is not None and last[:2] == (lo, end):
                hits = last[2]
            else:
                hits = [m.start() + 1 for m in _EVENT_END.finditer(buf, lo, min(end, hi + 64))]
                if hi == end:
                    self._last_hits = (lo, end, hits)
            for cut in reversed(hits):
                if cut <= hi:
                    yield cut
            hi, window = lo, min(4 * window, _SEARCH_WINDOW)


def _increasing(a: np.ndarray) -> bool:
    """Whether `a` (mapped, maybe millions long) strictly increases: a part at a time."""
    step = 1 << 20
    return all(bool(np.all(np.diff(np.asarray(a[i:i + step + 1])) > 0)) for i in range(0, max(len(a) - 1, 1), step))


@dataclass
class EventPositions:
    """Where each event's JSON lies in the file's decompressed bytes (event order)."""

    starts: np.ndarray  # int64 (int32 where a stored index keeps them so: `store._INT32_TEXT`)
    lengths: np.ndarray  # int32 (int16 where a stored index keeps them so)
    crc: int = 0  # checksum of the file's bytes as the index read them (`TraceStream.file_crc`)
    text_bytes: int = 0  # how much text it read

    @property
    def nbytes(self) -> int:
        return self.starts.nbytes + self.lengths.nbytes


# A read with this many events asked for is made a bytes object whole, then sliced.
_COPY_WHOLE_FROM = 1024


class ChromeJsonEvents:
    """The original JSON bytes of a Chrome trace's events, by index.

    The event table keeps no JSON; this streams the file again and slices out the
    events asked for, so memory stays bounded by one block. The file must still
    hold the events it held when indexed.

    With `positions` (noted by the native scanner while indexing), a pass copies each
    event's bytes from where it lies: no block is cut or decoded again.

    With `store_dir` (the plugin, where one trace is asked for many windows), the
    first full pass also keeps each block compressed (zstd, `kept_codec`, ~8 % of the JSON,
    ~1.5 GB/s) in a temporary file there; later requests then read and inflate only
    the blocks that hold the events asked for, instead of the whole file. The file
    is deleted with this object.
    """

    block_size = READ_SIZE

    def __init__(self, path: str, max_inflated_bytes: int, expected_events: int,
                 store_dir: Optional[str] = None, *, identity: Optional[FileIdentity] = None,
                 max_ratio: Optional[float] = DEFAULT_MAX_RATIO, block_size: int = READ_SIZE,
                 positions: Optional[EventPositions] = None) -> None:
        """`identity`: the file as indexed (`TraceStream.identity`). With it, each pass
        opens that same file (`FileChanged` if another is at the path now) and reads
        only the indexed bytes, so the events asked for by index are the indexed ones,
        even if the file was swapped or appended to since."""
        self.path = path
        self.max_inflated_bytes = max_inflated_bytes
        self.expected_events = expected_events
        self.store_dir = store_dir
        self.identity = identity
        self.max_ratio = max_ratio
        self.block_size = block_size
        self._store: Optional[BlockStore] = None
        self._building = threading.Lock()
        self._growing: Optional[BlockStore] = None  # the store `keep_store` is writing now
        # The text's last `TAIL_BYTES` (from offset, text), kept by the server's first full
        # pass: a Kineto trace writes its metadata and its whole-profile span there, and
        # every window keeps them, so a window read while the store is built need not wait
        # for the build to reach the end (`_kept_so_far`).
        self._tail: Optional[tuple[int, bytes]] = None
        # Called with `block_files()` once a full pass has built the block store (`index.store`
        # keeps it beside the stored index, so a restarted server need not inflate the file again).
        self.on_blocks: Optional[Callable[[str, np.ndarray, np.ndarray, Optional[Tier]], None]] = None
        # Which events the coarse tier holds (`block_store`): a mask of events a..b-1, set by
        # the server (`reduce.coarse_tier`); without it the store keeps the text alone.
        self.tier_rows: Optional[Callable[[int, int], np.ndarray]] = None
        # The server's: a full pass copies the events asked for only, and `keep_store` builds
        # the block store after it, on a thread of its own (the first view need not wait for
        # the compression, 1.6 s of a 2 GiB trace's 9 here); a pass asked for meanwhile waits
        # for that build rather than read the whole file once more.
        self.defer_store = False
        self.positions = positions if positions is not None and len(positions.starts) == expected_events else None

    @property
    def has_store(self) -> bool:
        return self._store is not None

    @property
    def held_bytes(self) -> int:
        """The memory this source holds beyond its event positions: the text's tail (`_tail`)."""
        tail = self._tail
        return 0 if tail is None else len(tail[1])

    @property
    def reads_cheaply(self) -> bool:
        """Whether a few events cost a few small reads, not a pass over the whole file: kept
        in a block store, or a plain file read where they lie (checked now: it may change)."""
        if self._store is not None:
            return True
        try:
            plain = self._in_place()
        except TraceError:  # swapped or gone: the pass that reads it says so
            return False
        if plain is None:
            return False
        plain.close()
        return True

    def adopt_blocks(self, path: str, offsets: np.ndarray, firsts: np.ndarray, tier: Optional[Tier] = None) -> None:
        """Read events from a block store kept before (`block_files` of an earlier run over
        this file version, checked by the caller): opened read-only, never removed here.
        A tier is taken only where it describes text that ends where the store's does."""
        if self._store is not None:
            return
        base = 0
        if tier is not None:
            ids, starts = tier
            p = self.positions
            ok = (p is not None and len(ids) == len(starts) and len(ids) > 0 and int(ids[0]) >= 0
                  and int(ids[-1]) < len(p.starts) and int(starts[0]) == 0
                  and _increasing(ids) and _increasing(starts))
            if ok:
                assert p is not None
                size = int(starts[-1]) + int(p.lengths[int(ids[-1])])
                base = int(firsts[-1]) - size
                ok = base >= p.text_bytes and bool(np.isin(base, firsts))
            if not ok:
                raise TraceError("the kept coarse tier does not describe the kept text")
        self._store = BlockStore.kept(path, offsets, firsts, tier, base)

    def block_files(self) -> Optional[tuple[str, np.ndarray, np.ndarray, Optional[Tier]]]:
        """The block store's file and its tables (each block's byte offset in the file, and
        its first event, or first text offset with positions), and its coarse tier, if one
        was built."""
        store = self._store
        if store is None:
            return None
        return store.path, np.asarray(store._offsets, dtype=np.int64), store._firsts_arr, store.tier

    def events(self, indices: Any, args: Any = None, progress: Optional[Callable[[int, int], None]] = None,
               ) -> Iterator[list[bytes]]:
        """The JSON of the events at `indices` (sorted), block by block, as in the file:
        `args` (the `levels.ArgsPolicy`) is the writer's to apply, not the source's."""
        indices = np.asarray(indices, dtype=np.int64)
        store = self._store
        if store is not None and self.positions is not None:
            self._ask_for_positions(indices)
            starts, ends = self._spans(indices)
            with self._dropped_if_damaged(store):
                yield from store.copy_events(indices, starts, ends)
            return
        if store is not None:
            with self._dropped_if_damaged(store):
                yield from store.events(indices)
            return
        plain = self._in_place()
        if plain is not None:  # a plain file: read where the events lie, nothing kept
            with plain:
                yield from plain.copy_events(*self._spans(indices))
            return
        if self.positions is not None and self.defer_store and self._building.locked():
            kept = self._kept_so_far(indices, progress)  # being built (`keep_store`): read from it
            if kept is not None:
                store, cut = kept
                starts, ends = self._spans(indices)
                if cut is None:  # the whole store
                    yield from store.copy_events(indices, starts, ends)
                    return
                yield from self._still_indexed(store.copy_events(indices[:cut], starts[:cut], ends[:cut]))
                if cut < len(indices):
                    yield self._from_tail(starts[cut:], ends[cut:])
                return
        if self.positions is not None and (self.store_dir is None or self.defer_store):
            yield from self._copy(indices, progress, None)
            return
        builder = None
        acquired = self.store_dir is not None and self._building.acquire(blocking=False)
        if acquired:
            try:
                builder = BlockStore(self.store_dir)  # type: ignore[arg-type]
            except OSError:
                builder = None
        try:
            if self.positions is not None:
                yield from self._copy(indices, progress, builder)
            else:
                yield from self._stream(indices, progress, builder)
            if builder is not None:
                builder = self._adopt(builder)
        finally:
            if builder is not None:  # failed, or the caller stopped early: not a whole store
                builder.close(remove=True)
            if acquired:
                self._building.release()

    @contextlib.contextmanager
    def _dropped_if_damaged(self, store: BlockStore) -> Iterator[None]:
        """A kept chunk that does not read back (`KeptTextDamaged`, changed on disk since it
        was checked) drops the kept text: the error goes on to the caller, which reads the
        trace again (the server tries the request once more), and the next full pass keeps
        the text anew. Never a wrong event, nor the same error for every later window."""
        try:
            yield
        except KeptTextDamaged as exc:
            if self._store is store:
                self._store = None
                log.warning("tb_reduce: the text kept of %s is damaged (%s); it is read from the trace again",
                            os.path.basename(self.path), str(exc))
            raise

    def _ask_for_positions(self, indices: np.ndarray) -> None:
        """The pages of the mapped positions a window's events are looked up in, those not
        in memory, asked for at once (`read_advice.will_need`): one fault after another,
        each with the kernel's read-ahead around it (8 MiB here), read ~50 MB for a cold
        0.1 % window of an 8 GiB trace. Too many runs: the kernel reads ahead as it would."""
        p = self.positions
        if p is not None and cold(p.starts, indices):  # a warm zoom need not look (`read_advice.cold`)
            will_need(p.starts, indices)
            will_need(p.lengths, indices)

    def _kept_so_far(self, indices: np.ndarray, progress: Optional[Callable[[int, int], None]],
                     ) -> Optional[tuple[BlockStore, Optional[int]]]:
        """While `keep_store` builds the store, where to read `indices` from: (the whole store,
        None) once built, or (the part kept so far, cut) where the events before `cut` lie in
        that part and the rest in the text's tail (`_tail`). A window waits only until the
        build has passed its last event outside the tail (a zoom right after a first view of
        a 2 GiB trace waited 4 s for the whole build), so the file is not read once more. A
        request past `TIER_MAX_EVENTS` waits for the whole store (each event read early is
        checked). None: the build ended without a store (a full disk, the file changed); the
        caller reads the file itself."""
        assert self.positions is not None
        total = self.positions.text_bytes
        starts, ends = self._spans(indices)
        tail = self._tail
        cut = len(indices) if tail is None else int(np.searchsorted(starts, tail[0], side="left"))
        need = int(ends[cut - 1]) if cut else 0
        early = len(indices) <= TIER_MAX_EVENTS
        while self._building.locked() and self._store is None:
            growing = self._growing
            if growing is not None and growing.failed:
                break
            if early and growing is not None and growing.covered >= need:
                partial = growing.partial()
                if partial is None:
                    break
                return partial, cut
            if progress is not None:
                progress(0 if growing is None else min(growing.covered, total), total)
            time.sleep(_BUILD_POLL_S)
        with self._building:  # ended, or ending: whatever it left
            store = self._store
        return None if store is None else (store, None)

    def _from_tail(self, starts: np.ndarray, ends: np.ndarray) -> list[bytes]:
        """The events at [starts, ends), all within the kept tail of the text."""
        assert self._tail is not None
        at, text = self._tail
        return [text[a:b] for a, b in zip((starts - at).tolist(), (ends - at).tolist())]

    def _still_indexed(self, batches: Iterator[list[bytes]]) -> Iterator[list[bytes]]:
        """Events copied from text kept while the build's pass still reads, before its
        checksum has said the file is the one indexed: checked as events read in place are
        (`PlainText.copy_events`), each a JSON value where it lay, and the file still the
        version indexed once they are read."""
        for batch in batches:
            if not each_a_value(batch):
                raise FileChanged(f"{os.path.basename(self.path)} changed since it was read "
                                  "(its events are not where they were)")
            yield batch
        if self.identity is not None:
            try:
                now = FileIdentity.from_stat(os.stat(self.path))
            except OSError:
                now = None
            if now != self.identity:
                raise FileChanged(f"{os.path.basename(self.path)} changed since it was read")

    def _adopt(self, builder: BlockStore) -> Optional[BlockStore]:
        """Read from the store a whole pass built from now on (and say so: `on_blocks`);
        None once adopted, else the builder (it failed: the caller closes it)."""
        if builder.failed:
            return builder
        builder.finish()
        if builder.failed:
            return builder
        self._store = builder
        if self.on_blocks is not None:
            try:
                self.on_blocks(*self.block_files())  # type: ignore[misc]
            except Exception as exc:  # keeping it is an optimisation: the pass succeeded
                log.warning("tb_reduce: the block store of %s could not be kept (%s)",
                            os.path.basename(self.path), str(exc))
        return None

    def keep_store(self) -> bool:
        """Build the block store now, in one full pass (the server's, after a first view:
        `defer_store`); whether there is one after. A plain file needs none (`plain_text`).
        Raises what the pass raises (the file changed since it was indexed, ...)."""
        if self._store is not None:
            return True
        if self.positions is None or self.store_dir is None:
            return False
        plain = self._in_place()
        if plain is not None:
            plain.close()
            return False
        with self._building:
            if self._store is not None:
                return True
            builder: Optional[BlockStore] = BlockStore(self.store_dir)
            self._growing = builder  # read as it grows (`_kept_so_far`)
            try:
                for _ in self._copy(np.zeros(0, dtype=np.int64), None, builder):
                    pass
                builder = self._adopt(builder)  # type: ignore[arg-type]
            finally:
                self._growing = None
                if builder is not None:
                    builder.close(remove=True)
        return self._store is not None

    def _in_place(self) -> Optional[PlainText]:
        """The file to read events from where they lie (`plain_text`): a plain file, indexed
        with positions, still the version indexed; else None (a gzip, or a file appended to
        or rewritten since: a whole pass then reads it, and its CRC decides)."""
        if self.positions is None or self.identity is None or self.positions.text_bytes != self.identity.size:
            return None
        return PlainText.open(self.path, self.identity)

    def _spans(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where the events at `indices` start and end in the decompressed text."""
        assert self.positions is not None
        if len(indices) and (int(indices[0]) < 0 or int(indices[-1]) >= self.expected_events):
            raise TraceError(f"no event {int(indices[-1])} in this trace")
        starts = self.positions.starts[indices].astype(np.int64)  # int32 as a stored index keeps them
        return starts, starts + self.positions.lengths[indices]

    def _copy(self, indices: np.ndarray, progress: Optional[Callable[[int, int], None]],
              builder: Optional[BlockStore]) -> Iterator[list[bytes]]:
        """The events at `indices` (sorted), copied from their positions while the file
        streams by: per read, the events that end within what has been read. With a
        `builder`, every read is also kept (compressed, by offset) and the whole file is
        read, so that later passes read only the parts they need."""
        assert self.positions is not None
        starts, ends = self._spans(indices)
        ident = self.identity
        k, n = 0, len(indices)
        buf, base = b"", 0  # what is kept of the text read so far, from offset `base`
        tier = self._tier_builder(builder)
        left = self.positions.text_bytes  # the text indexed, all of it (the file's checksum says it is the same)
        # The server's first pass keeps the text's tail (`_tail`), once its checksum is right.
        tail_from = max(0, left - TAIL_BYTES) if self.defer_store and self._tail is None else None
        tail = bytearray()
        with TraceStream(self.path, self.max_inflated_bytes, progress, expect=ident, max_ratio=self.max_ratio,
                         read_bytes=None if ident is None else ident.size) as stream:
            while left > 0 or builder is not None:
                chunk = stream.read_view(self.block_size)  # valid until the next read: what is kept is copied
                if not chunk:
                    if k < n or left > 0:
                        raise FileChanged(f"{os.path.basename(self.path)} changed since it was read (it ends early)")
                    break
                if tail_from is not None and base + len(buf) + len(chunk) > tail_from:
                    at = base + len(buf)  # where `chunk` lies in the text
                    tail += chunk[max(0, tail_from - at):max(0, self.positions.text_bytes - at)]
                left -= min(left, len(chunk))
                if builder is not None:
                    builder.add_text(chunk)  # its "events" are bytes: offsets, not indices
                if tier is not None:
                    tier.take(chunk, base + len(buf))
                text: Any = buf + chunk if buf else chunk
                m = int(np.searchsorted(ends, base + len(text), side="right"))
                if m > k:
                    a, b = (starts[k:m] - base).tolist(), (ends[k:m] - base).tolist()
                    if isinstance(text, memoryview) and m - k < _COPY_WHOLE_FROM:
                        yield [bytes(text[x:y]) for x, y in zip(a, b)]
                    else:  # many events: slicing bytes is cheaper than a view each
                        text = bytes(text)
                        yield [text[x:y] for x, y in zip(a, b)]
                    k = m
                drop = min(int(starts[k]) - base, len(text)) if k < n else len(text)
                buf, base = bytes(text[drop:]), base + drop  # a copy: the stream reads into that memory again
            crc = stream.file_crc()
        if crc != self.positions.crc:  # rewritten in place since it was indexed
            if tier is not None:
                tier.close()
            raise FileChanged(f"{os.path.basename(self.path)} changed while it was read (its text is not the text indexed)")
        if tail_from is not None and len(tail) == self.positions.text_bytes - tail_from:
            self._tail = (tail_from, bytes(tail))
        if tier is not None and builder is not None:
            if tier.finish() is not None:
                builder.finish()
                builder.append_tier(tier)
            tier.close()

    def _tier_builder(self, builder: Optional[BlockStore]) -> Optional[TierBuilder]:
        """A coarse tier to make beside a block store being built, when the server asked for one."""
        if builder is None or self.tier_rows is None or self.positions is None or self.store_dir is None:
            return None
        try:
            return TierBuilder(self.store_dir, self.tier_rows, self.positions.starts, self.positions.lengths)
        except (OSError, SpillFailed) as exc:
            log.info("tb_reduce: no coarse tier for %s (%s)", os.path.basename(self.path), str(exc))
            return None

    def _stream(self, indices: np.ndarray, progress: Optional[Callable[[int, int], None]],
                builder: Optional[BlockStore]) -> Iterator[list[bytes]]:
        def decode(text: Any) -> list:
            raws = raw_list.decode(text)
            if builder is not None:
                builder.add(text, len(raws))
            return raws

        base = 0
        ident = self.identity
        with TraceStream(self.path, self.max_inflated_bytes, progress, expect=ident, max_ratio=self.max_ratio,
                         read_bytes=None if ident is None else ident.size) as stream:
            stream.forget_crc()  # no positions to check: the events' count says it is the same
            for raws in ChromeJsonReader(stream, self.block_size).blocks(decode):
                n = len(raws)
                lo, hi = np.searchsorted(indices, [base, base + n])
                if hi > lo:
                    yield [bytes(raws[i]) for i in (indices[lo:hi] - base).tolist()]
                base += n
        if base != self.expected_events:  # rewritten in place since it was indexed
            raise FileChanged(
                f"{os.path.basename(self.path)} changed while it was read ({self.expected_events:,} then {base:,} events)"
            )
