#!/usr/bin/env python3
"""The kept text's codec (`formats/kept_codec.py`) at other Zstandard levels, side by side in
one process: what share of the text each keeps, and how fast each compresses (the keeping
after a first view: a zoom asked meanwhile waits for it) and reads a chunk back (every
window's kept chunks). Chunks of `block_store.TEXT_CHUNK` bytes from two places of a trace's
text; each round times every level in turn; medians of the rounds, and each level against
the codec's own.

    python3 bench/bench_kept_codec.py TRACE [--levels -3 -1 1 2 3] [--mb 48] [--rounds 3]
"""

from __future__ import annotations

import argparse
import collections
import gzip
import statistics
import sys
import time
from pathlib import Path

import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tb_reduce_plugin.formats import kept_codec  # noqa: E402
from tb_reduce_plugin.formats.block_store import TEXT_CHUNK  # noqa: E402


def _text(path: str, mb: int) -> list[bytes]:
    """The `mb` MiB that follow the text's first `mb` MiB, and its last `mb` MiB, in chunks:
    one pass over the text (a gzip cannot seek without inflating up to where it goes)."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    want, tail, held = mb << 20, collections.deque(), 0
    with (gzip.open if gz else open)(path, "rb") as f:
        f.read(want)  # the head (metadata, the first steps) is not the bulk of a trace
        first = f.read(want)
        while piece := f.read(1 << 20):
            tail.append(piece)
            held += len(piece)
            while held - len(tail[0]) >= want:
                held -= len(tail.popleft())
    last = b"".join(tail)[-want:]
    return [p[i:i + TEXT_CHUNK] for p in (first, last) for i in range(0, len(p), TEXT_CHUNK)]


def _one(level: int, chunks: list[bytes]) -> tuple[float, float, float]:
    """(share kept, compress MB/s, decompress MB/s) at `level`, the codec's frame options."""
    cc = zstandard.ZstdCompressor(level=level, write_checksum=True, write_content_size=True)
    dc = zstandard.ZstdDecompressor()
    total = sum(map(len, chunks))
    t = time.perf_counter()
    frames = [cc.compress(c) for c in chunks]
    tc = time.perf_counter() - t
    t = time.perf_counter()
    for fr in frames:
        dc.decompress(fr, max_output_size=TEXT_CHUNK)
    td = time.perf_counter() - t
    return sum(map(len, frames)) / total, total / tc / 1e6, total / td / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--levels", type=int, nargs="+", default=[-3, -1, 1, 2, 3])
    ap.add_argument("--mb", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    levels = sorted(set(a.levels) | {kept_codec.LEVEL})
    chunks = _text(a.trace, a.mb)
    got: dict[int, list[tuple[float, float, float]]] = {lv: [] for lv in levels}
    for _ in range(a.rounds):
        for lv in levels:
            got[lv].append(_one(lv, chunks))
    med = {lv: tuple(statistics.median(r[i] for r in rs) for i in range(3)) for lv, rs in got.items()}
    base = med[kept_codec.LEVEL]
    print(f"{len(chunks)} chunks of {TEXT_CHUNK} B; medians of {a.rounds}; against level {kept_codec.LEVEL} (the codec's)")
    for lv in levels:
        share, c, d = med[lv]
        print(f"level {lv:3d}: keeps {share * 100:5.2f} % (x{share / base[0]:.2f})  "
              f"compresses {c:6.0f} MB/s (x{c / base[1]:.2f})  reads back {d:6.0f} MB/s (x{d / base[2]:.2f})")


if __name__ == "__main__":
    main()
