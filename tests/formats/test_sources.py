"""Opening inputs: only regular files, only the file that was listed or indexed, only the
bytes it had when opened, and never more inflation than a real trace needs — on real files,
symlinks, FIFOs, sockets and devices."""

from __future__ import annotations

import gzip
import json
import os
import socket
import threading
import tracemalloc
import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from tb_reduce_plugin import cli
from tb_reduce_plugin.errors import FileChanged, InflationLimit, InputTooLarge, NotRegularFile, TraceError
from tb_reduce_plugin.formats import chrome_json, sources
from tb_reduce_plugin.formats.sources import (
    AHEAD_BYTES,
    DEFAULT_MAX_RATIO,
    DEFAULT_RATIO_FLOOR,
    READ_SIZE,
    FileIdentity,
    TraceStream,
    open_regular,
)
from tb_reduce_plugin.native import scanner_module
from tb_reduce_plugin.reduce.pipeline import index_file

pytestmark = pytest.mark.usefixtures("no_background_work")  # their traced peaks: no other thread's work in them

HANG_GUARD_S = 30  # not a speed limit: a call still running after this is stuck for good


def events(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"ph": "X", "name": f"op{i}", "pid": 1, "tid": 1, "ts": float(i), "dur": 0.5} for i in range(start, start + n)]


def write_doc(path: Path, n: int = 50) -> Path:
    path.write_text(json.dumps({"traceEvents": events(n)}))
    return path


def read_all(stream: TraceStream) -> bytes:
    out = []
    while chunk := stream.read():
        out.append(chunk)
    return b"".join(out)


def drain(stream: TraceStream) -> None:
    """Read to the end, keeping nothing (what a reader that is not buffering does)."""
    while stream.read():
        pass


def gzip_bomb(path: Path, head: bytes = b"", fill: bytes = b"\0") -> int:
    """A ~1 MB gzip that inflates to ~1 GB: one gzip member of 1 MiB of `fill`, made once
    with a compressobj, repeated (gzip readers read concatenated members as one stream),
    after a member holding `head`. Returns the bytes it inflates to."""
    def member(data: bytes) -> bytes:
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()

    one = member(fill * ((1 << 20) // len(fill)))
    copies = (1 << 20) // len(one)
    path.write_bytes((member(head) if head else b"") + one * copies)
    return len(head) + copies * (1 << 20)


def guarded(fn: Callable[[], Any], fifo: Path | None = None) -> Any:
    """`fn()` in a thread; fails if it has not returned after `HANG_GUARD_S` (and, for a
    FIFO, opens its write end so a reader blocked in `open()` is released)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the test thread
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(HANG_GUARD_S)
    if t.is_alive():
        if fifo is not None:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(HANG_GUARD_S)
        pytest.fail(f"still blocked after {HANG_GUARD_S} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


# ---- only regular files ------------------------------------------------------------


def test_a_fifo_is_refused_at_once_instead_of_blocking_until_a_writer_comes(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.pt.trace.json"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFile, match=r"pipe\.pt\.trace\.json is not a regular file \(a FIFO\)"):
        guarded(lambda: TraceStream(fifo), fifo)


def test_a_path_flipped_between_a_file_and_a_fifo_never_blocks_an_opener(tmp_path: Path) -> None:
    """Another process swaps a symlink between a trace and a FIFO as fast as it can: some
    opens land between the `stat` and the `open`, where only the non-blocking open and the
    `fstat` of the descriptor stand between the reader and a FIFO. Every open must end,
    either with the regular file or with a refusal."""
    real = write_doc(tmp_path / "real.json")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    path = tmp_path / "t.json"
    path.symlink_to(real)
    stop = threading.Event()

    def flip() -> None:
        for i in range(10**9):
            if stop.is_set():
                return
            (tmp_path / "next").symlink_to(fifo if i % 2 else real)
            os.replace(tmp_path / "next", path)

    flipper = threading.Thread(target=flip, daemon=True)
    flipper.start()
    outcomes: dict[str, int] = {}

    def open_many() -> None:
        for _ in range(2000):
            try:
                f, st = open_regular(path)
            except NotRegularFile:
                outcomes["refused"] = outcomes.get("refused", 0) + 1
                continue
            with f:
                assert os.fstat(f.fileno()).st_ino == st.st_ino == real.stat().st_ino
                outcomes["opened"] = outcomes.get("opened", 0) + 1

    try:
        guarded(open_many, fifo)
    finally:
        stop.set()
        flipper.join(HANG_GUARD_S)
    assert sum(outcomes.values()) == 2000


@pytest.mark.parametrize("what", ["directory", "/dev/zero", "socket"])
def test_directories_devices_and_sockets_are_refused_by_what_they_are(tmp_path: Path, what: str) -> None:
    kind = {"directory": "a directory", "/dev/zero": "a character device", "socket": "a socket"}[what]
    if what == "directory":
        path = tmp_path / "run.trace.json"
        path.mkdir()
    elif what == "socket":
        path = tmp_path / "s.json"
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    else:
        path = Path(what)
        if not path.exists():
            pytest.skip("no /dev/zero here")
    with pytest.raises(NotRegularFile) as err:
        guarded(lambda: TraceStream(path))
    assert str(err.value) == f"{path.name} is not a regular file ({kind})"
    assert isinstance(err.value, TraceError)  # every surface already turns these into one line


def test_a_symlink_to_a_device_is_refused_like_the_device(tmp_path: Path) -> None:
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    link = tmp_path / "zero.trace.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(NotRegularFile, match="a character device"):
        guarded(lambda: TraceStream(link))


def test_a_missing_file_is_an_open_error_and_a_missing_listed_file_has_changed(tmp_path: Path) -> None:
    p = write_doc(tmp_path / "t.json")
    listed = FileIdentity.from_stat(p.stat())
    p.unlink()
    with pytest.raises(TraceError, match="cannot open t.json") as err:
        TraceStream(p)
    assert not isinstance(err.value, FileChanged)
    with pytest.raises(FileChanged, match="t.json changed since it was listed"):
        TraceStream(p, expect=listed)


# ---- the file that was listed, and no other --------------------------------------------


def test_a_file_swapped_for_a_symlink_to_another_file_is_refused_unread(tmp_path: Path) -> None:
    p = write_doc(tmp_path / "r.trace.json")
    listed = FileIdentity.from_stat(p.stat())
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"traceEvents": [{"ph": "i", "name": "SECRET", "ts": 0, "pid": 1, "tid": 1}]}))
    p.unlink()
    p.symlink_to(outside)
    read: list[int] = []
    with pytest.raises(FileChanged, match=r"r\.trace\.json changed since it was listed"):
        TraceStream(p, progress=lambda done, total: read.append(done), expect=listed)
    assert read == []
    with pytest.raises(FileChanged):
        index_file(p, expect=listed)


def test_a_listed_file_replaced_by_a_fifo_has_changed_even_if_the_fifo_reuses_its_inode(tmp_path: Path) -> None:
    """Unlink then mkfifo often gets the freed inode number back: device and inode alone
    would call it the listed file. A listing only holds regular files, so it has changed."""
    p = write_doc(tmp_path / "r.json")
    listed = FileIdentity.from_stat(p.stat())
    p.unlink()
    os.mkfifo(p)
    # Often, not always (another process may take the inode first): then it is another file.
    reused = os.stat(p).st_ino == listed.ino
    why = r"\(it is now a FIFO\)" if reused else r"\(another file is there now\)"
    with pytest.raises(FileChanged, match=r"r\.json changed since it was listed " + why):
        guarded(lambda: TraceStream(p, expect=listed), p)


def test_a_file_replaced_by_a_rename_is_another_file(tmp_path: Path) -> None:
    p = write_doc(tmp_path / "r.json")
    listed = FileIdentity.from_stat(p.stat())
    write_doc(tmp_path / "new.json", 60).replace(p)
    with pytest.raises(FileChanged):
        TraceStream(p, expect=listed)


def test_the_listed_file_is_accepted_through_a_symlink_and_after_it_grew(tmp_path: Path) -> None:
    p = write_doc(tmp_path / "r.json")
    listed = FileIdentity.from_stat(p.stat())
    (tmp_path / "alias.json").symlink_to(p)
    with open(p, "a") as f:
        f.write("\n")
    for path in (p, tmp_path / "alias.json"):
        with TraceStream(path, expect=listed) as s:
            assert s.identity.ino == listed.ino and s.identity.size == listed.size + 1
            assert json.loads(read_all(s))["traceEvents"] == events(50)


def test_identity_is_the_file_as_opened(tmp_path: Path) -> None:
    p = write_doc(tmp_path / "r.json")
    st = p.stat()
    with TraceStream(p) as s:
        assert s.identity == FileIdentity(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) == FileIdentity.from_stat(st)
        assert s.file_bytes == st.st_size


# ---- the bytes it had when opened ------------------------------------------------------


def test_a_file_that_grows_while_it_is_read_is_read_as_it_was_when_opened(tmp_path: Path) -> None:
    p = tmp_path / "live.json"
    original = json.dumps(events(2000))[:-1].encode() + b","  # a live writer's array, not closed yet
    p.write_bytes(original)
    with TraceStream(p) as s:
        with open(p, "ab") as f:
            f.write(json.dumps(events(5000, 2000))[1:].encode())
        assert read_all(s) == original
        assert s.identity.size == len(original)


def test_the_index_holds_the_events_the_file_had_when_it_was_opened(tmp_path: Path) -> None:
    p = tmp_path / "live.json"
    p.write_bytes(json.dumps(events(3000))[:-1].encode() + b",")
    size = p.stat().st_size

    def append_once(done: int, total: int) -> None:  # the writer goes on after the first read
        if not appended:
            appended.append(done)
            with open(p, "ab") as f:
                f.write(json.dumps(events(3000, 3000))[1:-1].encode() + b",")

    appended: list[int] = []
    index = index_file(p, progress=append_once)
    assert appended and p.stat().st_size > size
    assert index.events == 3000 and index.truncated
    assert index.identity is not None and index.identity.size == index.file_bytes == size


def test_a_later_pass_reads_the_indexed_bytes_of_a_file_appended_to_since(tmp_path: Path) -> None:
    p = tmp_path / "live.json"
    p.write_bytes(json.dumps(events(400))[:-1].encode() + b",")
    index = index_file(p)
    with open(p, "ab") as f:
        f.write(json.dumps(events(400, 400))[1:].encode())
    got = [json.loads(raw) for block in index.source.events(np.arange(400)) for raw in block]
    assert got == events(400)


def test_a_later_pass_refuses_a_file_swapped_since_it_was_indexed(tmp_path: Path) -> None:
    p = write_doc(tmp_path / "r.json", 100)
    index = index_file(p)
    outside = write_doc(tmp_path / "outside.json", 100)
    p.unlink()
    p.symlink_to(outside)
    with pytest.raises(FileChanged, match="r.json changed since it was listed"):
        list(index.source.events(np.array([0])))


def test_a_later_pass_refuses_a_file_cut_short_or_rewritten_since_it_was_indexed(tmp_path: Path) -> None:
    p = write_doc(tmp_path / "r.json", 100)
    index = index_file(p)
    with open(p, "r+b") as f:
        f.truncate(100)
    with pytest.raises(FileChanged, match="changed since it was read"):
        list(index.source.events(np.array([0])))
    write_doc(tmp_path / "r.json", 10)  # same inode, now 10 events where 100 were indexed
    p.write_bytes(p.read_bytes().ljust(index.identity.size))  # type: ignore[union-attr]
    with pytest.raises(FileChanged, match="changed while it was read"):
        list(index.source.events(np.array([99])))


needs_positions = pytest.mark.skipif(scanner_module() is None, reason="no event positions without the native scanner")


@needs_positions
@pytest.mark.parametrize("ahead", [True, False])
@pytest.mark.parametrize("compressed", [True, False])
def test_an_index_records_the_crc_of_the_file_as_it_lies_even_when_it_stops_before_its_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ahead: bool, compressed: bool) -> None:
    # The file's own bytes (compressed for a gzip: a tenth of the text to sum), all of them:
    # the reader stops at the object's end, what follows is read without being inflated.
    monkeypatch.setattr(sources, "READ_SIZE", 1 << 16)
    monkeypatch.setattr(chrome_json, "READ_SIZE", 1 << 16)
    monkeypatch.setattr(sources, "AHEAD_MIN_FILE_BYTES", 0 if ahead else 1 << 40)
    text = json.dumps({"traceEvents": events(20_000)}).encode() + b" " * 300_000
    p = tmp_path / ("t.json.gz" if compressed else "t.json")
    p.write_bytes(gzip.compress(text, 1) if compressed else text)
    index = index_file(p)
    summed = zlib.adler32(p.read_bytes()) if compressed else zlib.crc32(p.read_bytes())
    assert index.source.positions.crc == summed
    assert index.source.positions.text_bytes < len(text)  # the reader stopped at the object's end
    got = [json.loads(raw) for block in index.source.events(np.array([0, 19_999])) for raw in block]
    assert got == [events(20_000)[0], events(20_000)[-1]]


@needs_positions
def test_a_gzip_rewritten_in_place_with_its_size_and_mtime_restored_is_refused_by_a_later_pass(tmp_path: Path) -> None:
    # Stored (level 0) gzips: one name changed for another of the same length keeps the
    # file's size; its mtime set back, only the file's checksum tells (not a CRC-32: over a
    # stored member and its trailer, the CRC-32 of its text, it is the same whatever the text).
    doc = {"traceEvents": events(100)}
    p = tmp_path / "r.json.gz"
    p.write_bytes(gzip.compress(json.dumps(doc).encode(), 0))
    st = p.stat()
    index = index_file(p)
    doc["traceEvents"][99]["name"] = "opXX"
    p.write_bytes(gzip.compress(json.dumps(doc).encode(), 0))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert p.stat().st_size == st.st_size
    with pytest.raises(FileChanged, match="changed while it was read"):
        list(index.source.events(np.array([99])))


def test_the_size_limit_is_checked_on_the_file_as_opened_not_as_listed(tmp_path: Path) -> None:
    p = write_doc(tmp_path / "r.json", 10)
    listed = FileIdentity.from_stat(p.stat())
    limit = listed.size * 2
    with TraceStream(p, expect=listed, max_file_bytes=limit) as s:
        assert s.identity.size == listed.size
    write_doc(p, 1000)  # grown in place since it was listed
    assert os.stat(p).st_ino == listed.ino
    with pytest.raises(InputTooLarge) as err:
        TraceStream(p, expect=listed, max_file_bytes=limit)
    assert err.value.size == p.stat().st_size and err.value.limit == limit
    assert f"{p.stat().st_size:,} bytes, over the input limit of {limit:,}" in str(err.value)


# ---- inflation -------------------------------------------------------------------------


def test_a_gzip_bomb_is_refused_by_ratio_as_soon_as_it_crosses_it_in_bounded_memory(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    inflates_to = gzip_bomb(bomb)
    size = bomb.stat().st_size
    assert inflates_to > 900 * size  # what makes it a bomb
    tracemalloc.start()
    try:
        with TraceStream(bomb) as s, pytest.raises(InflationLimit) as err:
            drain(s)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    limit = int(DEFAULT_MAX_RATIO * size)
    assert s.inflated == limit + 1  # refused at the first byte past the limit, nothing inflated beyond
    # the block read, and the one inflated ahead of it meanwhile (`TraceStream.ahead_bytes`)
    assert peak < 2 * READ_SIZE + AHEAD_BYTES, f"{peak:,} bytes held while inflating"
    message = str(err.value)
    assert "bomb.json.gz" in message and f"more than {DEFAULT_MAX_RATIO:g}x its size" in message
    assert err.value.limit == limit and isinstance(err.value, TraceError)


def test_a_gzip_bomb_inside_a_json_event_is_refused_by_the_indexer(tmp_path: Path) -> None:
    """The dangerous shape: one event whose string never ends, which a reader must buffer whole."""
    bomb = tmp_path / "bomb.pt.trace.json.gz"
    gzip_bomb(bomb, head=b'{"traceEvents": [{"ph": "X", "name": "', fill=b" ")
    with pytest.raises(InflationLimit, match="gzip bomb"):
        index_file(bomb)


def test_the_absolute_inflation_limit_holds_without_a_ratio_and_stops_at_once(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    gzip_bomb(bomb)
    limit = 10 * 1024 * 1024
    with TraceStream(bomb, limit, max_ratio=None) as s, \
            pytest.raises(InflationLimit, match="inflates past the limit of 10,485,760 bytes"):
        drain(s)
    assert s.inflated == limit + 1


def test_the_tighter_limit_names_itself(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    gzip_bomb(bomb)
    with TraceStream(bomb, 20 * 1024 * 1024) as s, pytest.raises(InflationLimit, match="past the limit of 20,971,520"):
        drain(s)  # 20 MB is below 100x of 1 MB: the absolute limit speaks
    with TraceStream(bomb, 10**12, max_ratio=5) as s, pytest.raises(InflationLimit, match="more than 5x its size"):
        drain(s)
    assert s.inflated == max(DEFAULT_RATIO_FLOOR, 5 * bomb.stat().st_size) + 1


def test_a_small_file_is_never_refused_for_its_ratio(tmp_path: Path) -> None:
    """Under the floor, any ratio passes: hand-written and test traces compress ~1000x."""
    p = tmp_path / "tiny.json.gz"
    body = b'{"traceEvents": [' + b" " * (DEFAULT_RATIO_FLOOR - 100) + b"]}"
    p.write_bytes(gzip.compress(body, 9))
    assert len(body) > 500 * p.stat().st_size
    with TraceStream(p) as s:
        assert read_all(s) == body


def test_a_plain_file_is_not_subject_to_the_ratio(tmp_path: Path) -> None:
    p = tmp_path / "plain.json"
    p.write_bytes(b"[" + b" " * (DEFAULT_RATIO_FLOOR + 10) + b"]")
    with TraceStream(p, max_ratio=1) as s:
        assert len(read_all(s)) == p.stat().st_size


@pytest.mark.corpus
def test_every_real_gzip_in_the_corpus_inflates_well_under_the_default_ratio(corpus: Path) -> None:
    ratios = {}
    for path in sorted(corpus.rglob("*.gz")):
        with TraceStream(path) as s:  # the default limits: no real trace is refused
            drain(s)
            ratios[path.name] = s.inflated / s.file_bytes
    assert ratios and max(ratios.values()) < DEFAULT_MAX_RATIO / 2, max(ratios.items(), key=lambda kv: kv[1])


def test_reads_never_return_more_than_one_block(tmp_path: Path) -> None:
    p = tmp_path / "big.json"
    p.write_bytes(b"[" + b" " * (READ_SIZE + 1000) + b"]")
    with TraceStream(p) as s:
        assert len(s.read(4 * READ_SIZE)) == READ_SIZE
        assert len(s.read(-1)) == 1002


# ---- the command line ------------------------------------------------------------------


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str], fifo: Path | None = None) -> tuple[int, str]:
    code = guarded(lambda: cli.main(argv), fifo)
    return code, capsys.readouterr().err


def test_the_cli_refuses_a_fifo_with_exit_2_and_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "in.pt.trace.json"
    os.mkfifo(fifo)
    out = tmp_path / "out.json.gz"
    code, err = run_cli(["reduce", str(fifo), "-o", str(out)], capsys, fifo)
    assert code == 2
    assert err == "tb-reduce: error: in.pt.trace.json is not a regular file (a FIFO)\n"
    assert not out.exists()


@pytest.mark.parametrize("what", ["directory", "/dev/zero"])
def test_the_cli_refuses_a_directory_or_a_device(tmp_path: Path, capsys: pytest.CaptureFixture[str], what: str) -> None:
    if what == "directory":
        src = tmp_path / "logdir"
        src.mkdir()
    else:
        src = Path(what)
        if not src.exists():
            pytest.skip("no /dev/zero here")
    out = tmp_path / "out.json.gz"
    code, err = run_cli(["reduce", str(src), "-o", str(out)], capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"tb-reduce: error: {src.name} is not a regular file (")
    assert not out.exists()


def test_the_cli_refuses_a_gzip_bomb_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bomb = tmp_path / "bomb.json.gz"
    gzip_bomb(bomb, head=b'[{"ph": "X", "name": "', fill=b" ")
    code, err = run_cli(["reduce", str(bomb), "-o", str(tmp_path / "out.json.gz")], capsys)
    assert code == 2 and "bomb.json.gz inflates to more than 100x its size" in err and err.count("\n") == 1


# ---- inflating ahead ---------------------------------------------------------------------


def _inflate_threads() -> list[str]:
    import threading

    return [t.name for t in threading.enumerate() if t.name == "tb-reduce-inflate"]


@pytest.fixture()
def multi_block_gzip(tmp_path: Path) -> tuple[Path, bytes]:
    """~40 MB of varied JSON text as gzip: several READ_SIZE blocks."""
    text = json.dumps({"traceEvents": events(440_000)}).encode()
    assert len(text) > 2 * READ_SIZE
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text, 1))
    return path, text


@pytest.mark.parametrize("sizes", [[READ_SIZE], [7, 1, READ_SIZE, 100_000, READ_SIZE // 3]])
def test_inflating_ahead_gives_the_bytes_reading_in_place_gives_for_any_read_sizes(multi_block_gzip, monkeypatch,
                                                                                   sizes):
    path, text = multi_block_gzip
    got = {}
    for ahead in (False, True):
        monkeypatch.setattr(sources, "INFLATE_AHEAD", ahead)
        out, i = [], 0
        with TraceStream(path) as s:
            assert s.peek(2) == text[:2]
            while chunk := s.read(sizes[i % len(sizes)]):
                assert len(chunk) <= sizes[i % len(sizes)]
                out.append(chunk)
                i += 1
            assert s.read() == b"" and s.inflated == len(text)
        got[ahead] = b"".join(out)
    assert got[False] == got[True] == text
    assert not _inflate_threads()


def test_a_corrupt_gzip_is_refused_with_the_same_message_whether_inflated_ahead_or_not(multi_block_gzip, tmp_path,
                                                                                       monkeypatch):
    path, _ = multi_block_gzip
    data = bytearray(path.read_bytes())
    data[len(data) * 2 // 3: len(data) * 2 // 3 + 64] = b"\xff" * 64
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(bytes(data))
    messages = {}
    for ahead in (False, True):
        monkeypatch.setattr(sources, "INFLATE_AHEAD", ahead)
        with TraceStream(bad) as s, pytest.raises(TraceError) as err:
            drain(s)
        messages[ahead] = (str(err.value), s.inflated)
    assert messages[False] == messages[True]
    assert "corrupt or truncated gzip in bad.json.gz" in messages[True][0]
    assert not _inflate_threads()


def test_a_stream_closed_after_one_block_stops_and_joins_its_inflating_thread(multi_block_gzip):
    path, text = multi_block_gzip
    with TraceStream(path) as s:
        assert s.read() == text[:READ_SIZE]
        assert _inflate_threads()  # it is inflating the next block meanwhile
    assert not _inflate_threads()


# ---- reads into the stream's own buffers (`readinto`, `read_view`) ---------------------------


@pytest.mark.parametrize("ahead", [True, False])
@pytest.mark.parametrize("compressed", [True, False])
def test_readinto_and_read_view_give_the_bytes_read_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          ahead: bool, compressed: bool) -> None:
    monkeypatch.setattr(sources, "READ_SIZE", 1 << 16)  # many blocks
    monkeypatch.setattr(sources, "AHEAD_MIN_FILE_BYTES", 0 if ahead else 1 << 40)
    data = np.random.default_rng(3).integers(0, 64, 1_000_003, dtype=np.uint8).tobytes()
    p = tmp_path / ("t.json.gz" if compressed else "t.json")
    p.write_bytes(gzip.compress(data, 1) if compressed else data)
    with TraceStream(p) as s:
        read = b"".join(iter(lambda: s.read(50_000), b""))
    got_into, got_views = bytearray(), []
    with TraceStream(p) as s:
        into = bytearray(70_000)
        while n := s.readinto(memoryview(into)):
            got_into += into[:n]
    with TraceStream(p) as s:
        while view := s.read_view(30_000):
            got_views.append(bytes(view))  # a view holds only until the next read: copied
    assert read == data and bytes(got_into) == data and b"".join(got_views) == data


def lending_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes) -> Path:
    """A gzip of `data` read in blocks of 64 KiB, inflated ahead, with 1 KiB of room before each."""
    monkeypatch.setattr(sources, "READ_SIZE", 1 << 16)
    monkeypatch.setattr(sources, "AHEAD_MIN_FILE_BYTES", 0)
    monkeypatch.setattr(sources, "LEND_ROOM", 1 << 10)
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(data, 1))
    return p


def test_blocks_lent_whole_with_room_before_them_are_the_bytes_read_gives(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    data = np.random.default_rng(4).integers(0, 64, 1_000_003, dtype=np.uint8).tobytes()
    p = lending_stream(tmp_path, monkeypatch, data)
    got, lent, buffers = bytearray(), 0, set()
    with TraceStream(p) as s:
        s.peek(10)  # a head peeked is read first, and the rest of its block: those are not lent
        into = bytearray(1 << 16)
        while True:
            block = s.lend(1 << 16, room=300)
            if block is None:
                n = s.readinto(memoryview(into))
                if not n:
                    break
                got += into[:n]
                continue
            buf, at, n = block
            assert at >= 300 and len(buf) >= at + n
            buf[:at] = b"x" * at  # the room is the caller's to write into
            got += buf[at:at + n]
            lent += 1
            buffers.add(id(buf))
            s.give_back(buf)
        assert s.lend(1 << 16) is None  # at the end
    assert bytes(got) == data
    assert lent >= len(data) // (1 << 16) - 2 and len(buffers) <= 3  # two buffers in turn, one made anew at most


def test_a_block_is_lent_only_whole_and_within_the_size_and_room_asked(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytes(range(256)) * 2048  # 512 KiB: eight blocks
    p = lending_stream(tmp_path, monkeypatch, data)
    with TraceStream(p) as s:
        first = s.lend(1 << 16)
        assert first is not None and first[2] == 1 << 16
        s.give_back(first[0])
        assert s.lend(1 << 15) is None  # the block is bigger than asked
        assert s.lend(1 << 16, room=(1 << 10) + 1) is None  # more room than the stream keeps
        into = bytearray(100)
        assert s.readinto(memoryview(into)) == 100  # read in part...
        assert s.lend(1 << 16) is None  # ...so not lent: the rest is read
        rest = bytearray(1 << 16)
        assert s.readinto(memoryview(rest)) == (1 << 16) - 100
        buf, at, n = s.lend(1 << 16)
        assert bytes(buf[at:at + n]) == data[2 << 16:3 << 16]


def test_a_lent_buffer_given_back_while_viewed_is_never_written_over(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    data = np.random.default_rng(5).integers(0, 255, 600_000, dtype=np.uint8).tobytes()
    p = lending_stream(tmp_path, monkeypatch, data)
    kept = []
    with TraceStream(p) as s:
        while (block := s.lend(1 << 16)) is not None:
            buf, at, n = block
            kept.append((memoryview(buf)[at:at + n], data[s.inflated - n:s.inflated]))  # a view outlives the loan
            s.give_back(buf)
    assert len(kept) >= 8 and all(bytes(view) == want for view, want in kept)


def test_a_gzip_bomb_read_by_loans_is_refused_at_the_same_byte(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    gzip_bomb(bomb)
    with TraceStream(bomb) as s, pytest.raises(InflationLimit):
        while True:
            block = s.lend()
            if block is not None:
                s.give_back(block[0])
            elif not s.readinto(memoryview(bytearray(1 << 20))):
                break
    assert s.inflated == int(DEFAULT_MAX_RATIO * bomb.stat().st_size) + 1


def test_a_gzip_bomb_read_by_views_is_refused_at_the_same_byte(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    gzip_bomb(bomb)
    with TraceStream(bomb) as s, pytest.raises(InflationLimit):
        while s.read_view():
            pass
    assert s.inflated == int(DEFAULT_MAX_RATIO * bomb.stat().st_size) + 1
