"""The input formats: one reader per format, chosen by sniffing the content.

Each reader takes an open `TraceStream` and gives a `Parsed` trace: the event table
(the one model every format converts into), the trace's metadata and the way back to
any event's JSON (`source`). Adding a format, the native scanner or the live
sidecar's windows is one entry in `READERS`; `pipeline.index_file` knows none of them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..errors import TraceError
from ..model.table import EventTable
from .sources import DEFAULT_MAX_INFLATED_BYTES, DEFAULT_MAX_RATIO, TraceStream


@dataclass
class ReadOptions:
    """What a reader may need besides the stream: how later passes reopen the file."""

    max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES
    max_ratio: Optional[float] = DEFAULT_MAX_RATIO
    store_dir: Optional[str] = None  # where a Chrome trace may keep its blocks for later windows
    spill_dir: Optional[str] = None  # where a trace's columns may be written as they are read
    # How far the work after reading the file is (0..1), for a reader that does most of its
    # work after reading (an XSpace decodes its events once the file is read): the progress
    # shown then counts the reading for a share of the bar and this for the rest.
    decoded: Optional[Callable[[float], None]] = None


@dataclass
class Parsed:
    """One trace read into the event model."""

    table: EventTable
    metadata: dict
    truncated: bool
    source: Any  # a `writer.EventSource`: the original JSON of any event, by index
    extra: dict = field(default_factory=dict)


Reader = Callable[[TraceStream, Any, ReadOptions], Parsed]

# An XSpace starts with one of its fields: planes (1), errors (2), warnings (3) or
# hostnames (4), all length-delimited: tag bytes 0x0a, 0x12, 0x1a, 0x22.
_XSPACE_FIRST_BYTES = b"\x0a\x12\x1a\x22"


def sniff(stream: TraceStream) -> str:
    """The format, from the content (names lie: `.json` files hold anything)."""
    raw = stream.peek(64)
    head = raw.lstrip(b"\xef\xbb\xbf \t\r\n")
    if head[:1] in (b"{", b"["):
        return "chrome-json"
    if not raw:
        raise TraceError(f"empty file: {os.path.basename(stream.path)} holds no trace")
    if raw[0] in _XSPACE_FIRST_BYTES and os.path.basename(stream.path).endswith((".pb", ".pb.gz")):
        return "xspace"
    raise TraceError(
        f"not a trace: {os.path.basename(stream.path)} is neither Chrome trace JSON nor an XSpace (.xplane.pb)"
    )


def reader_for(fmt: str) -> Reader:
    """The reader of a sniffed format (imported on first use: XSpace pulls in protobuf)."""
    if fmt == "chrome-json":
        from .chrome import read_chrome_json

        return read_chrome_json
    if fmt == "xspace":
        from .xspace import read_xspace_trace

        return read_xspace_trace
    raise TraceError(f"no reader for the format {fmt!r}")


READERS = ("chrome-json", "xspace")
