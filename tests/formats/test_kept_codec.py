"""The codec of kept text (`formats.kept_codec`): what it wrote reads back; anything else is
an error, never other bytes or a big allocation."""

from __future__ import annotations

import pytest

from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.formats import kept_codec

TEXT = b'{"ph":"X","name":"aten::mm","ts":1.5,"dur":2,"pid":1,"tid":2,"args":{"Input Dims":[[8,8],[8,8]]}},\n' * 3000


def test_a_chunk_reads_back_as_written_and_is_smaller() -> None:
    frame = kept_codec.compress(TEXT)
    assert kept_codec.decompress(frame, len(TEXT)) == TEXT
    assert len(frame) < len(TEXT) // 10
    assert kept_codec.decompress(kept_codec.compress(memoryview(TEXT)[5:105]), 100) == TEXT[5:105]
    assert kept_codec.decompress(kept_codec.compress(b""), 0) == b""


@pytest.mark.parametrize("damage", ["flip", "truncate", "extra", "garbage", "empty"])
def test_a_damaged_chunk_is_an_error_not_other_bytes(damage: str) -> None:
    frame = bytearray(kept_codec.compress(TEXT))
    if damage == "flip":
        frame[len(frame) // 2] ^= 0x10
    elif damage == "truncate":
        del frame[-9:]
    elif damage == "extra":
        frame += b"\0\0\0\0"
    elif damage == "garbage":
        frame = bytearray(b"\x78\x9c" + TEXT[:100])  # a zlib stream's start (the codec before), then text
    else:
        frame = bytearray()
    with pytest.raises(TraceError, match="damaged"):
        kept_codec.decompress(bytes(frame), len(TEXT))


def test_a_chunk_saying_it_holds_more_than_its_reader_allows_is_refused_before_any_allocation() -> None:
    frame = kept_codec.compress(TEXT)
    with pytest.raises(TraceError, match="claims"):
        kept_codec.decompress(frame, len(TEXT) - 1)


def test_threads_compress_and_read_chunks_at_once() -> None:
    from concurrent.futures import ThreadPoolExecutor

    texts = [TEXT[i:] + bytes([i]) for i in range(64)]
    with ThreadPoolExecutor(8) as pool:
        frames = list(pool.map(kept_codec.compress, texts))
        back = list(pool.map(lambda f: kept_codec.decompress(f, len(TEXT) + 1), frames))
    assert back == texts
