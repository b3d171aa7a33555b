"""How kept text is compressed: Zstandard at level -3, one frame per chunk, with its checksum.

The text a server keeps of a gzip trace (`block_store.BlockStore`: every chunk of it, for
the windows read after the first view and after a restart) is written once, in the
background after a first view, and read a chunk at a time by every window. On 96 MiB of a
Kineto trace in 256 KiB chunks (two places in it, medians of 5, one process): zstd -3
kept 6.7-8.1 % of the text against ISA-L level 1's 7.8-10.2 %, compressed 1.1-1.6x and
read back 1.4-2.5x as fast. Level 1 keeps ~30 % less again but compresses slower than
ISA-L, and the keeping is what a zoom asked right after a first view waits for: the whole
keeping of a 2 GiB trace took 1.74-1.85 s at -3, 1.92-2.25 s at 1, 1.83-1.99 s with ISA-L.
Asked again for the index's size (kept text is ~28 % of it), on 96 MiB of the 2 GiB Kineto
trace `bench/gen_kineto_trace.py` makes (`bench/bench_kept_codec.py`, two runs at other
places): level 1 kept 12-18 % less than -3 but compressed 1.4-1.5x and read back 1.4-1.7x
slower, and every window reads its chunks back: -3 stays.

Each frame carries its content size and an xxHash64 of its text: a chunk changed on disk
after the store was checked is an error here, never other bytes, and no frame can make
this allocate more than its reader says a chunk can hold.
"""

from __future__ import annotations

import threading
from typing import Any

import zstandard

from ..errors import KeptTextDamaged

CODEC = "zstd"  # named in the index store's manifest of kept blocks: another codec's store is made again
LEVEL = -3

_local = threading.local()  # zstd contexts are not for two threads at once: one pair per thread


def _contexts() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    pair = getattr(_local, "pair", None)
    if pair is None:
        pair = _local.pair = (zstandard.ZstdCompressor(level=LEVEL, write_checksum=True, write_content_size=True),
                              zstandard.ZstdDecompressor())
    return pair


def compress(text: Any) -> bytes:
    """One frame holding `text` (bytes-like)."""
    return _contexts()[0].compress(text)


def decompress(frame: bytes, limit: int) -> bytes:
    """The text of one frame written by `compress`, at most `limit` bytes; `KeptTextDamaged`
    when the frame is damaged, says it holds more, or holds another length than it says."""
    try:
        size = zstandard.frame_content_size(frame)
        if size < 0 or size > limit:
            raise KeptTextDamaged(f"a kept chunk is damaged (it claims {size} bytes)")
        text = _contexts()[1].decompress(frame, max_output_size=limit, allow_extra_data=False)
    except zstandard.ZstdError as exc:
        raise KeptTextDamaged(f"a kept chunk is damaged ({exc})") from None
    if len(text) != size:
        raise KeptTextDamaged("a kept chunk is damaged (its length is not the one it says)")
    return text
