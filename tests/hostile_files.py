"""Small files that cost a trace server a lot: builders for the hostile suite and the benchmark.

Each is made fast and small on disk, and does what an attacker's (or a broken
writer's) file would: inflate far past its size, hold millions of tiny events, or
waste a reader's time. Sizes are parameters, so tests build them proportionally
small and `bench/bench_hostile.py` builds them at the sizes the issue measured.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np

from tb_reduce_plugin.formats.xspace import _varint_bytes


def _gzip_stream(path: Path, chunks) -> int:  # type: ignore[no-untyped-def]
    """Write the byte chunks gzip-compressed (zlib, level 6); return the inflated size."""
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    total = 0
    with open(path, "wb") as f:
        for chunk in chunks:
            total += len(chunk)
            f.write(c.compress(chunk))
        f.write(c.flush())
    return total


def xspace_hostnames_bomb(path: Path, entries: int) -> int:
    """A gzip `.xplane.pb` whose XSpace holds `entries` empty `hostnames` (field 4): 2 bytes
    each on the wire, tens of bytes each once a protobuf parser holds them.
    The issue's file: 300 M entries, 875 kB gzip, 900 MB inflated (with 3-byte names)."""
    one = b"\x22\x01a"  # hostnames: "a"
    block = one * (1 << 20)
    full, rest = divmod(entries, 1 << 20)
    return _gzip_stream(path, [block] * full + [one * rest])


def xspace_hostnames_plain(path: Path, entries: int) -> int:
    """The same as a plain (not gzip) `.xplane.pb`: `entries` host names of one letter."""
    data = b"\x22\x01a" * entries
    path.write_bytes(data)
    return len(data)


def xspace_lines_bomb(path: Path, lines: int) -> int:
    """A plain `.xplane.pb` with one plane of `lines` empty lines: 2 bytes each, ~100 once parsed."""
    body = b"\x1a\x00" * lines
    plane = b"\x12\x05/host" + body  # XPlane.name, then the lines
    data = b"\x0a" + _varint_bytes(len(plane)) + plane
    path.write_bytes(data)
    return len(data)


def xspace_events_bomb(path: Path, events: int) -> int:
    """A plain `.xplane.pb` with one line of `events` empty events (each 2 bytes)."""
    line = b"\x12\x04main" + b"\x22\x00" * events
    plane = b"\x12\x05/host" + b"\x1a" + _varint_bytes(len(line)) + line
    data = b"\x0a" + _varint_bytes(len(plane)) + plane
    path.write_bytes(data)
    return len(data)


def tiny_events_gz(path: Path, events: int, seed: int = 0, distinct_names: int = 50) -> int:
    """A `.json.gz` Chrome trace of `events` tiny X events on a few threads, times drawn at
    random so it compresses like a real trace (~6x), not like a bomb. The issue's file:
    30 M events in 4.6 MB (identical events); 5 M such events made a 35 MB trace."""
    rng = np.random.default_rng(seed)
    block = 200_000

    def chunks():  # type: ignore[no-untyped-def]
        yield b'{"traceEvents":[\n'
        t = 0.0
        for lo in range(0, events, block):
            n = min(block, events - lo)
            gaps = rng.exponential(2.0, n)
            ts = t + np.cumsum(gaps)
            t = float(ts[-1])
            durs = rng.exponential(1.0, n)
            names = rng.integers(0, distinct_names, n)
            tids = rng.integers(1, 9, n)
            rows = [
                f'{{"ph":"X","name":"op{nm}","pid":1,"tid":{tid},"ts":{a:.3f},"dur":{d:.3f}}}'
                for nm, tid, a, d in zip(names.tolist(), tids.tolist(), ts.tolist(), durs.tolist())
            ]
            sep = b",\n" if lo + n < events else b"\n"
            yield ",\n".join(rows).encode() + sep
        yield b'],"displayTimeUnit":"ns"}\n'

    return _gzip_stream(path, chunks())


def identical_events_gz(path: Path, events: int) -> int:
    """The issue's bomb shape: `events` identical tiny events (compresses ~200x)."""
    one = b'{"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":1},'
    block = one * 100_000
    full, rest = divmod(events, 100_000)

    def chunks():  # type: ignore[no-untyped-def]
        yield b'{"traceEvents":['
        for _ in range(full):
            yield block
        yield one * rest
        yield b'{"ph":"X","name":"a","pid":1,"tid":1,"ts":2,"dur":1}]}'

    return _gzip_stream(path, chunks())


def whitespace_gz(path: Path, spaces: int) -> int:
    """Two real events with `spaces` spaces between them inside `traceEvents`."""
    block = b" " * (1 << 20)
    full, rest = divmod(spaces, 1 << 20)

    def chunks():  # type: ignore[no-untyped-def]
        yield b'{"traceEvents":[{"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":1},'
        for _ in range(full):
            yield block
        yield b" " * rest
        yield b'{"ph":"X","name":"b","pid":1,"tid":1,"ts":5,"dur":1}]}'

    return _gzip_stream(path, chunks())


def file_size(path: Path) -> int:
    return os.path.getsize(path)
