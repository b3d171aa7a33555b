"""A Chrome trace's parsed index, persisted per file version and memory-mapped on reopen.

Parsing a trace is the one cost that grows with the trace (8.7 s a GiB here); before
this store a restart paid it again for the first new window of every trace. Now the
first parse writes what it found into `<cache>/index/<digest>/`, one `.npy` file per
column (numpy's own format: a header naming dtype and shape, then the raw array,
so a reopen is `np.load(mmap_mode="r")` with no decoding) plus one msgpack file of
the interned strings and side tables, and a manifest written last. A reopen maps the
columns: their pages are the page cache's, file-backed and reclaimable, not the
server's anonymous memory, so the budget does not count them.

Why `.npy` and not Arrow/Parquet: the columns are plain fixed-width arrays that numpy
reads as they lie (Parquet would decode and copy them), and numpy is already here.

Trust: the digest names the file's path, device, inode, size and mtime and the
index's own format version, so another version of the file never finds this index.
The manifest lists every file's size and CRC-32 (ISA-L's, ~10 GB/s); a file whose
size or checksum differs, a missing file or a manifest that does not parse makes the
whole index damaged: it is removed and the trace parsed again, never trusted. A file
checked once is stamped with its stat, and not read again while it stays as it was
(`verified.py`): a restart reads the files a window needs, not the whole index. An
index is built in a temp folder and renamed into place whole, so a crash (kill -9,
a full disk) leaves a temp folder, removed when its process is gone, never a partial
index; two servers building one index at once both succeed and the first rename wins.

Bounded: whole indexes go least recently used first (recency = the manifest's
mtime, touched on every open) when the store is over its size; an index this
process has open is never evicted. Removing a mapped file is safe on POSIX: the
mapping keeps its pages until it is closed.

Refusals (`refusal`, `remember_refusal`): why a file version could not be read under
given limits, one small JSON file each, so a restart refuses at once what it refused
before, without another parse.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Optional

import msgspec
import numpy as np
from isal import isal_zlib

from .. import FORMAT_VERSION
from ..budget import Account
from ..errors import TraceError
from ..formats import kept_codec, xspace
from ..formats.chrome_json import ChromeJsonEvents, EventPositions
from ..formats.sources import DEFAULT_MAX_INFLATED_BYTES, DEFAULT_MAX_RATIO, FileIdentity, open_regular
from ..formats.xspace import XSpaceTrace
from ..model import mapped
from ..model.mapped import map_array
from ..model.table import EventTable, SpillFailed
from ..reduce.pipeline import TraceIndex, index_file
from ..reduce.window_index import TIERS
from . import prepared_io
from .prepared import Prepared
from .verified import Stamps

log = logging.getLogger(__name__)
# Exceptions are logged by their text (`str(exc)`), never as objects: a record that keeps
# one keeps its traceback, and with it every frame of the request it passed through (a
# handler that keeps records, as pytest's does, then held a reduced body alive).

# Bump when what is stored, or how, changes: an older index is then simply not found.
# 2: event positions carry the CRC of the file as it lies, not of its text; 3: one value
# repeated is kept once (`fills`), event positions int32 below 2 GiB of text, ids int16
INDEX_VERSION = 3
# The prepared state's own format: a state of another is dropped quietly and made again.
# 2: the window index and the flow binding keep orders, not the sorted starts and times;
# 3: runs of the table's columns kept as such, one value repeated kept once;
# 4: the window index keeps the instants in time order, the masks each track's rows of the slice order;
# 5: the window index keeps each flow event's binding row beside it (by track and time), not by event
PREPARED_VERSION = 5
COLUMNS = ("ph", "ts", "dur", "track", "name", "flow_key", "bind_enclosing", "scope", "counter_event",
           "counter_series", "counter_value", "cat", "step_event", "step_value")
POSITION_COLUMNS = ("starts", "lengths")
# Columns smaller than this are read into memory: a map costs a file descriptor's worth
# of kernel state and a page at least, for no gain.
MAP_AT_LEAST = 1 << 16
_CHUNK = 8 << 20
_MANIFEST = "manifest.json"
_PREPARED = "prepared.json"  # the manifest of the kept prepared state, written after its arrays
_BLOCKS = "blocks.json"  # the manifest of a kept block store, written after its files
_BLOCK_FILES = ("blocks.bin", "blocks_offsets.npy", "blocks_firsts.npy")
_TIER_FILES = ("blocks_tier_ids.npy", "blocks_tier_starts.npy")  # the coarse tier, when one was made
_staged = itertools.count()
_STRINGS = "strings.msgpack"
_TMP = ".tmp-"
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


def _digest(parts: list) -> str:
    return hashlib.sha256(json.dumps(parts, separators=(",", ":")).encode()).hexdigest()


def index_digest(path: str, identity: FileIdentity) -> str:
    """The name of the index of this version of this file (and of this index format)."""
    return _digest(["index", INDEX_VERSION, FORMAT_VERSION, os.path.abspath(path), identity.dev, identity.ino,
                    identity.size, identity.mtime_ns])


class Damaged(Exception):
    """An index on disk that cannot be trusted (why in the message)."""


class _Checksummed:
    """A write-only file that keeps the CRC-32 and length of what went through it."""

    def __init__(self, f: Any) -> None:
        self.f = f
        self.crc = 0
        self.size = 0

    def write(self, data: Any) -> int:
        self.crc = isal_zlib.crc32(data, self.crc)
        self.size += len(memoryview(data).cast("B"))
        return self.f.write(data)


def _open_kept(path: str) -> Any:
    """A file of the store, opened as the traces are (`sources.open_regular`: without blocking,
    a regular file only): a FIFO or a device put in the cache folder is damage, never waited on."""
    try:
        f, _ = open_regular(path)
    except TraceError as exc:
        raise Damaged(str(exc)) from None
    return f


def _read_json(path: str, limit: int) -> Any:
    with _open_kept(path) as f:
        return json.loads(f.read(limit))


def _check_files(folder: str, files: dict, allowed: Callable[[str], bool], stamps: Optional[Stamps] = None) -> bool:
    """Every file a manifest lists is one it may name, of its size and CRC-32 (read from
    the file once opened: the size and the bytes are of that one file). A file found as
    `stamps` last saw it checked is not read again (`verified.py`); one read is stamped.
    True when no file was read: all are as they were when last checked."""
    unchanged = True
    for name, (size, crc) in files.items():
        if not allowed(name):
            raise Damaged(f"its manifest names {name!r}")
        with _open_kept(os.path.join(folder, name)) as f:
            st = os.fstat(f.fileno())
            if stamps is not None and stamps.matches(name, size, crc, st):
                continue
            unchanged = False
            if _crc_of_open(f, name, st.st_size, size) != crc:
                raise Damaged(f"{name} does not match its checksum")
        if stamps is not None:
            stamps.stamp(name, size, crc, st)
    return unchanged


def _remove_blocks(folder: str) -> None:
    """Drop the kept text of a stored index (its manifest first gone with the rest)."""
    for name in (_BLOCKS, *_BLOCK_FILES, *_TIER_FILES):
        try:
            os.unlink(os.path.join(folder, name))
        except OSError:
            pass


def _crc_of(path: str, size: int) -> int:
    with _open_kept(path) as f:
        return _crc_of_open(f, os.path.basename(path), os.fstat(f.fileno()).st_size, size)


def _crc_of_open(f: Any, name: str, actual: int, size: int) -> int:
    if actual != size:
        raise Damaged(f"{name} is {actual} bytes, not {size}")
    crc = 0
    left = size
    while left > 0:
        data = f.read(min(_CHUNK, left))
        if not data:
            raise Damaged(f"{name} is shorter than its manifest says")
        crc = isal_zlib.crc32(data, crc)
        left -= len(data)
    return crc


@dataclass
class StoreInfo:
    """What `info` reports of the store."""

    directory: str
    usable: bool
    indexes: int
    bytes: int
    max_bytes: int
    loaded: int
    saved: int
    damaged: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class IndexStore:
    """Persisted indexes in `directory`, bounded to `max_bytes` (whole indexes, LRU)."""

    def __init__(self, directory: str, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}  # digest -> indexes of this process mapping it
        self.loaded = self.saved = self.damaged = 0
        self._warned = False
        self.usable = self._prepare()

    # ---- the folder --------------------------------------------------------------
    def _prepare(self) -> bool:
        """Whether the store can be used; leftovers of dead builders go. Nothing is created
        here: a server that never parses a trace leaves its cache folder as it found it."""
        if not os.path.isdir(self.directory):
            probe = os.path.dirname(os.path.abspath(self.directory))
            while not os.path.exists(probe) and os.path.dirname(probe) != probe:
                probe = os.path.dirname(probe)
            if not (os.path.isdir(probe) and os.access(probe, os.W_OK | os.X_OK)):
                self._warn("cannot be created")
                return False
            return True
        try:
            names = os.listdir(self.directory)
        except OSError as exc:
            self._warn(f"cannot be read ({exc.strerror or exc})")
            return False
        for name in names:
            if name.startswith(_TMP) and not _builder_alive(name):
                shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)
        return True

    def _warn(self, reason: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("tb_reduce: the index directory %s %s; traces are parsed again after a restart",
                        self.directory, reason)

    def _dir(self, digest: str) -> str:
        return os.path.join(self.directory, digest)

    # ---- open ----------------------------------------------------------------------
    def load(self, path: str, identity: FileIdentity, *, max_inflated_bytes: int,
             max_ratio: Optional[float], store_dir: Optional[str] = None,
             account: Optional[Account] = None) -> Optional[TraceIndex]:
        """The index of this file version if one is stored and intact, else None (a
        damaged one is removed). `account` is charged what the index holds in memory."""
        if not self.usable:
            return None
        digest = index_digest(path, identity)
        folder = self._dir(digest)
        if not os.path.isdir(folder):
            return None
        began = time.perf_counter()
        stamps = Stamps(folder)
        try:
            index = self._read(folder, digest, path, identity, max_inflated_bytes, max_ratio, store_dir, stamps)
        except (Damaged, OSError, ValueError, KeyError, TypeError, msgspec.DecodeError) as exc:
            self.damaged += 1
            log.warning("tb_reduce: the stored index of %s is damaged (%s); parsing the trace again",
                        os.path.basename(path), str(exc))
            self._remove(digest)
            return None
        self._adopt_blocks(folder, index, stamps)
        stamps.save()  # what this load read whole and found intact
        self._give_scratch(index)
        index.prepared_kept = index.prepared.ready_fields()
        index.seconds = time.perf_counter() - began
        self._hold(digest, index)
        try:
            os.utime(os.path.join(folder, _MANIFEST))  # recency, for eviction
        except OSError:
            pass
        self.loaded += 1
        if account is not None:
            account.settle(index.memory_bytes(), "the stored index of the trace")
            index.account = account
        return index

    def _read(self, folder: str, digest: str, path: str, identity: FileIdentity, max_inflated_bytes: int,
              max_ratio: Optional[float], store_dir: Optional[str], stamps: Stamps) -> TraceIndex:
        manifest = _read_json(os.path.join(folder, _MANIFEST), 1 << 20)
        if manifest.get("version") != INDEX_VERSION or manifest.get("digest") != digest:
            raise Damaged("its manifest is of another index")
        files = manifest["files"]
        fills = _fills(manifest, files, manifest.get("events"))
        unchanged = _check_files(folder, files, lambda name: os.path.basename(name) == name, stamps)
        strings = _decoder.decode(_read_all(os.path.join(folder, _STRINGS)))
        cols = {c: _column(folder, c, files, fills) for c in COLUMNS}
        n = len(cols["ph"])
        for c in ("ts", "dur", "track", "name", "flow_key", "bind_enclosing", "scope", "cat"):
            if len(cols[c]) != n:
                raise Damaged(f"column {c} holds {len(cols[c])} rows, not {n}")
        table = EventTable(
            tracks=[tuple(t) for t in strings["tracks"]], names=strings["names"],
            series=[tuple(s) for s in strings["series"]], cats=strings["cats"],
            block_events=strings["block_events"], block_bytes=strings["block_bytes"],
            process_names=dict(map(tuple, strings["process_names"])),
            thread_names=dict(map(tuple, strings["thread_names"])), **cols)
        if not unchanged:  # what the files say was checked with them, when they were stamped
            _check_ids(table)
        table.prepared = self._prepared(folder, n, stamps, unchanged, table)
        extra = dict(strings["extra"])
        extra["stored_index"] = True
        fmt = manifest.get("format", "chrome-json")  # indexes kept before XSpace's were all Chrome traces'
        if fmt == "xspace":
            in_place = None
            if strings["xspace"].get("in_place"):  # the file's bytes are the file itself: mapped again
                got = xspace.map_file_again(path, identity)
                if got is None:
                    raise Damaged("its trace file is not the version it was made from, or cannot be mapped now")
                in_place, buf = got
            elif xspace.DATA_FILE not in files:
                raise Damaged(f"{xspace.DATA_FILE} is missing from its manifest")
            else:
                buf = mapped.map_bytes(os.path.join(folder, xspace.DATA_FILE))
            starts, ends = (_column(folder, name[:-4], files, fills) for name in xspace.KEPT_FILES[1:])
            source = xspace.restore(strings["xspace"], table, strings["metadata"], extra, buf, starts, ends,
                                    check=not unchanged, in_place=in_place)
            return TraceIndex(path=path, format="xspace", table=table, metadata=strings["metadata"],
                              truncated=strings["truncated"], file_bytes=strings["file_bytes"],
                              json_bytes=strings["json_bytes"], seconds=0.0, source=source, extra=extra,
                              identity=identity)
        if fmt != "chrome-json":
            raise Damaged(f"its manifest names a format of {fmt!r}")
        positions = None
        if strings["positions"] is not None:
            starts, lengths = (_column(folder, f"pos_{c}", files, fills) for c in POSITION_COLUMNS)
            if len(starts) != n or len(lengths) != n:
                raise Damaged("the event positions do not match the events")
            crc, text_bytes = strings["positions"]
            positions = EventPositions(starts, lengths, crc, text_bytes)
        source = ChromeJsonEvents(path, max_inflated_bytes, n, store_dir, identity=identity, max_ratio=max_ratio,
                                  block_size=strings["block_size"], positions=positions)
        return TraceIndex(path=path, format="chrome-json", table=table, metadata=strings["metadata"],
                          truncated=strings["truncated"], file_bytes=strings["file_bytes"],
                          json_bytes=strings["json_bytes"], seconds=0.0, source=source, extra=extra,
                          identity=identity)

    # ---- the prepared state kept beside an index --------------------------------------
    # What every plan shares (`prepared.Prepared`: the slice table, its orders, the flow
    # binding, name ranks; the queries' parents and search order) is prepared by the first
    # plan of a table; kept here, a restarted server's first window plans at once.
    def _prepared(self, folder: str, events: int, stamps: Optional[Stamps] = None,
                  columns_unchanged: bool = False, table: Optional[EventTable] = None) -> Optional[Prepared]:
        """The prepared state kept in `folder`, checked, or None (damaged state is dropped).
        Checked against the columns unless both are as they were when last checked."""
        manifest_path = os.path.join(folder, _PREPARED)
        if not os.path.exists(manifest_path):
            return None
        try:
            manifest = _read_json(manifest_path, 16 << 20)
            if manifest.get("prepared") != PREPARED_VERSION:
                log.info("tb_reduce: the prepared state kept in %s is of another format; plans prepare it again",
                         os.path.basename(folder))
                self._drop_prepared(folder)
                return None
            gen, files = int(manifest["gen"]), manifest["files"]
            fills = _fills(manifest, files, events)
            unchanged = _check_files(folder, files, lambda name: re.fullmatch(rf"p{gen}_a\d+\.npy", name) is not None,
                                     stamps)

            def array(name: str) -> np.ndarray:
                file = f"p{gen}_{name}.npy"
                if file not in files:
                    raise Damaged(f"the prepared state names {name!r}, not in its manifest")
                return _column(folder, file[:-4], files, fills)

            def column(name: str) -> np.ndarray:
                if table is None or name not in COLUMNS:
                    raise Damaged(f"the prepared state names a column {name!r}")
                return getattr(table, name)

            prepared = prepared_io.decode(manifest["spec"], array, column)
            if not (unchanged and columns_unchanged):
                _check_prepared(prepared, events, table)
            return prepared
        except (Damaged, OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            log.warning("tb_reduce: the prepared state kept in %s is damaged (%s); plans prepare it again",
                        os.path.basename(folder), str(exc))
            self._drop_prepared(folder)
            return None

    @staticmethod
    def _drop_prepared(folder: str, keep: Optional[set] = None) -> None:
        try:
            names = os.listdir(folder)
        except OSError:
            return
        for name in names:
            if (name == _PREPARED and keep is None) or (re.fullmatch(r"p\d+_a\d+\.npy", name)
                                                         and (keep is None or name not in keep)):
                try:
                    os.unlink(os.path.join(folder, name))
                except OSError:
                    pass

    def can_keep_prepared(self, index: TraceIndex) -> bool:
        """Whether the prepared state of `index` can be kept: its index is (or will be) stored."""
        return self.usable and (self.can_save(index) or bool(index.extra.get("stored_index")))

    def save_prepared(self, index: TraceIndex) -> bool:
        """Keep beside the stored index what plans and queries have prepared on its table so
        far, if that is more than is kept already; True once written."""
        if index.identity is None or index.damaged:
            return False
        folder = self._dir(index_digest(index.path, index.identity))
        manifest_path = os.path.join(folder, _PREPARED)
        if not os.path.isfile(os.path.join(folder, _MANIFEST)):
            return False
        spec, arrays, ids = prepared_io.encode(index.prepared, {c: getattr(index.table, c) for c in COLUMNS})
        if not spec:
            return False
        gen = 0
        try:
            old = _read_json(manifest_path, 16 << 20)
            if old.get("prepared") == PREPARED_VERSION and set(spec) <= set(old["spec"]):
                return False
            gen = int(old["gen"]) + 1
        except (Damaged, OSError, ValueError, KeyError, TypeError):
            pass
        files: dict[str, list[int]] = {}
        fills: dict[str, int] = {}
        faults = mapped.faults()
        try:
            for name, a in arrays.items():
                files[f"p{gen}_{name}.npy"] = _write_narrowed(folder, f"p{gen}_{name}.npy", a, fills,
                                                              np.int16 if name in ids else np.int32)
            # State made into a scratch folder is read from its files here: one cut meanwhile
            # (read as zeros by the guard) must not be kept as if it were the state.
            cut = mapped.shrunk(arrays.values())
            if cut is not None or mapped.faults() != faults:
                raise OSError(f"{cut or 'a file it is read from'} was cut while it was written")
            tmp = os.path.join(folder, f"{_PREPARED}.{os.getpid()}-{threading.get_ident()}.tmp")
            with open(tmp, "w") as f:
                json.dump({"version": INDEX_VERSION, "prepared": PREPARED_VERSION, "gen": gen, "spec": spec,
                           "files": files, "fills": fills}, f)
            os.rename(tmp, manifest_path)
        except OSError as exc:
            for name in files:
                try:
                    os.unlink(os.path.join(folder, name))
                except OSError:
                    pass
            log.info("tb_reduce: the prepared state of %s is not kept (%s)", os.path.basename(index.path), str(exc))
            return False
        self._drop_prepared(folder, keep=set(files))  # the generation before (a mapping keeps its pages)
        _stamp(folder, files)
        self.evict()
        return True

    # ---- the block store kept beside an index -----------------------------------------
    # A Chrome trace's events are read back (for a window's args, an event's details) from
    # the file itself; for a gzip file that means inflating it from its start, so the first
    # full pass keeps every block compressed (`chrome_json._BlockStore`). Kept here, beside
    # the index, a restarted server reads the blocks a window needs instead of the whole file.
    def _adopt_blocks(self, folder: str, index: TraceIndex, stamps: Optional[Stamps] = None) -> None:
        manifest_path = os.path.join(folder, _BLOCKS)
        if not os.path.exists(manifest_path):
            return
        source = index.source
        try:
            manifest = _read_json(manifest_path, 1 << 16)
            if not isinstance(manifest, dict):
                raise Damaged("its block manifest is not an object")
            if manifest.get("version") == INDEX_VERSION and manifest.get("codec") != kept_codec.CODEC:
                # kept by an earlier version (ISA-L, before the codec was named) or in another codec: kept again
                log.info("tb_reduce: the kept text of %s was compressed another way; it is kept again",
                         os.path.basename(index.path))
                _remove_blocks(folder)
                return
            files = manifest["files"]
            if sorted(files) not in (sorted(_BLOCK_FILES), sorted(_BLOCK_FILES + _TIER_FILES)):
                raise Damaged("its block manifest names other files")
            _check_files(folder, files, lambda name: name in _BLOCK_FILES + _TIER_FILES, stamps)
            offsets = np.load(os.path.join(folder, "blocks_offsets.npy"), allow_pickle=False)
            firsts = np.load(os.path.join(folder, "blocks_firsts.npy"), allow_pickle=False)
            if (offsets.ndim != 1 or firsts.shape != offsets.shape or len(offsets) < 1 or int(offsets[0]) != 0
                    or int(offsets[-1]) != files["blocks.bin"][0] or np.any(np.diff(offsets) < 0)
                    or np.any(np.diff(firsts) < 0)):
                raise Damaged("its block tables do not describe its blocks")
            tier = None
            if _TIER_FILES[0] in files:
                tier = tuple(map_array(os.path.join(folder, name)) for name in _TIER_FILES)
                if any(a.ndim != 1 or a.dtype != np.int64 for a in tier) or tier[0].shape != tier[1].shape:
                    raise Damaged("its coarse tier's tables are not two columns of one length")
            if isinstance(source, ChromeJsonEvents):
                source.adopt_blocks(os.path.join(folder, "blocks.bin"), offsets, firsts, tier)
        except (Damaged, TraceError, OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("tb_reduce: the kept blocks of %s are damaged (%s); they are read from the trace again",
                        os.path.basename(index.path), str(exc))
            _remove_blocks(folder)

    def spill_folder(self) -> Optional[str]:
        """A new folder for a parse to write its columns into (`index_file(spill_dir=...)`),
        named as the store's temp folders (removed at start when its process is gone); the
        caller removes it when its index goes (`forget_spill`). None: the store cannot be used."""
        if not self.usable:
            return None
        return os.path.join(self.directory, f"{_TMP}spill-{next(_staged)}-{os.getpid()}-{threading.get_ident()}")

    def _give_scratch(self, index: TraceIndex) -> None:
        """A folder for the state plans and queries prepare on a reopened index (what was
        not kept, or a new kind), as a parse's spill folder is for a new one: without it,
        that state is made and held in memory (~70 B an event, more than a 50 M-event
        trace leaves of the default budget). It goes with the index."""
        scratch = self.spill_folder()
        if scratch is None:
            return
        try:
            os.makedirs(scratch)
        except OSError:
            return  # a full or read-only disk: prepared in memory, as before
        index.table.scratch = scratch
        weakref.finalize(index, shutil.rmtree, scratch, True)

    @staticmethod
    def forget_spill(index: TraceIndex) -> None:
        """Remove the index's spill folder once the index is collected (mapped columns stay
        readable until then; the stored index keeps its own links to the files)."""
        if index.spill_dir is not None:
            weakref.finalize(index, shutil.rmtree, index.spill_dir, True)

    def stage_blocks(self, blocks_path: str) -> Optional[str]:
        """A hard link to a block store's temp file (which goes with its source), for
        `keep_blocks` to move beside the index later; None if it cannot be made."""
        # ...-<pid>-<thread>, as every temp name here: `_builder_alive` reads the pid there
        staged = os.path.join(self.directory, f"{_TMP}blocks-{next(_staged)}-{os.getpid()}-{threading.get_ident()}")
        try:
            os.link(blocks_path, staged)
        except OSError:
            return None
        return staged

    def keep_blocks(self, path: str, identity: FileIdentity, staged: str, offsets: np.ndarray,
                    firsts: np.ndarray, tier: Optional[tuple[np.ndarray, np.ndarray]] = None) -> bool:
        """Move the staged block store beside the stored index of this file version (if it
        is stored and keeps none yet), with its coarse tier's table: the data first, its
        manifest last."""
        folder = self._dir(index_digest(path, identity))
        try:
            if not os.path.isfile(os.path.join(folder, _MANIFEST)) or os.path.exists(os.path.join(folder, _BLOCKS)):
                return False
            size = os.stat(staged).st_size
            if size != int(offsets[-1]):
                return False
            files = {"blocks.bin": [size, _crc_of(staged, size)],
                     "blocks_offsets.npy": _write_array(folder, "blocks_offsets.npy", np.asarray(offsets, np.int64)),
                     "blocks_firsts.npy": _write_array(folder, "blocks_firsts.npy", np.asarray(firsts, np.int64))}
            if tier is not None:
                for name, column in zip(_TIER_FILES, tier):
                    files[name] = _write_array(folder, name, np.asarray(column, np.int64))
            os.rename(staged, os.path.join(folder, "blocks.bin"))
            tmp = os.path.join(folder, f"{_BLOCKS}.{os.getpid()}.tmp")
            with open(tmp, "w") as f:
                json.dump({"version": INDEX_VERSION, "codec": kept_codec.CODEC, "files": files}, f)
            os.rename(tmp, os.path.join(folder, _BLOCKS))
            _stamp(folder, files)
        except (OSError, Damaged) as exc:
            log.info("tb_reduce: the blocks of %s are not kept (%s)", os.path.basename(path), str(exc))
            return False
        finally:
            try:
                os.unlink(staged)
            except OSError:
                pass
        self.evict()
        return True

    def _hold(self, digest: str, index: TraceIndex) -> None:
        """Mark `digest` in use while `index` lives (never evicted meanwhile)."""
        with self._lock:
            self._open[digest] = self._open.get(digest, 0) + 1
        weakref.finalize(index, self._let_go, digest)

    def _let_go(self, digest: str) -> None:
        with self._lock:
            left = self._open.get(digest, 0) - 1
            if left > 0:
                self._open[digest] = left
            else:
                self._open.pop(digest, None)

    # ---- save ----------------------------------------------------------------------
    def can_save(self, index: TraceIndex) -> bool:
        """Whether `save` would keep `index`: one read from a known file version, a Chrome
        trace's, or an XSpace's whose event positions (and file bytes, unless they are the
        file itself, mapped in place) the parse wrote into its spill folder (they are linked
        into the index, not written again)."""
        if not self.usable or index.identity is None or index.extra.get("stored_index"):
            return False
        source = index.source
        if index.format == "chrome-json":
            return isinstance(source, ChromeJsonEvents)
        return (index.format == "xspace" and isinstance(source, XSpaceTrace) and xspace.kept(source) is not None
                and all(_spilled_file(index, a, name) is not None for a, name in _xspace_files(source)))

    def save(self, index: TraceIndex) -> bool:
        """Persist `index` (a Chrome trace's, read from a local file); True once it is in
        place. Writes column by column: memory beyond the index is one chunk."""
        if not self.can_save(index):
            return False
        source = index.source
        assert index.identity is not None
        t = index.table
        strings = {
            "names": t.names, "cats": t.cats, "tracks": t.tracks, "series": t.series,
            "block_events": list(t.block_events), "block_bytes": list(t.block_bytes),
            "process_names": list(t.process_names.items()), "thread_names": list(t.thread_names.items()),
            "metadata": index.metadata, "extra": {k: v for k, v in index.extra.items() if k != "stored_index"},
            "truncated": index.truncated, "file_bytes": index.file_bytes, "json_bytes": index.json_bytes,
        }
        arrays = [(f"{c}.npy", getattr(t, c)) for c in COLUMNS]
        positions = None
        if isinstance(source, ChromeJsonEvents):
            positions = source.positions
            strings["block_size"] = source.block_size
            strings["positions"] = None if positions is None else [positions.crc, positions.text_bytes]
            if positions is not None:
                arrays += [("pos_starts.npy", positions.starts), ("pos_lengths.npy", positions.lengths)]
        else:  # an XSpace: its planes, lines and metadata rows; its file bytes and positions, linked
            strings["xspace"] = xspace.kept(source)
            arrays += [(name, a) for a, name in _xspace_files(source)]
        try:
            encoded = _encoder.encode(strings)
        except (TypeError, UnicodeEncodeError, OverflowError, msgspec.EncodeError) as exc:
            log.info("tb_reduce: the index of %s is kept in memory only (%s)", os.path.basename(index.path), str(exc))
            return False
        digest = index_digest(index.path, index.identity)
        tmp = os.path.join(self.directory, f"{_TMP}{digest}-{os.getpid()}-{threading.get_ident()}")
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)  # and the store's folder, on its first index
            files: dict[str, list[int]] = {}
            fills: dict[str, int] = {}
            for name, a in arrays:
                spilled = _spilled_file(index, a, name)
                value = _fill_value(a)
                if value is not None:  # one value repeated: kept once
                    fills[name] = len(a)
                    files[name] = _write_array(tmp, name, value)
                elif name == "pos_starts.npy" and positions.text_bytes < _INT32_TEXT:  # int32, not as parsed
                    files[name] = _write_narrowed(tmp, name, a, fills)
                elif name in _ID_FILES or name == "pos_lengths.npy":  # int16 while they fit, not as parsed
                    files[name] = _write_narrowed(tmp, name, a, fills, np.int16)
                elif spilled is not None:  # written while it was parsed: linked, not written again
                    size = os.stat(spilled).st_size
                    os.link(spilled, os.path.join(tmp, name))
                    files[name] = [size, _crc_of(spilled, size)]
                else:
                    files[name] = _write_array(tmp, name, a)
            with open(os.path.join(tmp, _STRINGS), "wb") as f:
                f.write(encoded)
            files[_STRINGS] = [len(encoded), isal_zlib.crc32(encoded)]
            manifest = {"version": INDEX_VERSION, "digest": digest, "file": os.path.basename(index.path),
                        "format": index.format, "events": len(t), "files": files, "fills": fills}
            with open(os.path.join(tmp, _MANIFEST), "w") as f:
                json.dump(manifest, f)
            try:
                os.rename(tmp, self._dir(digest))
            except OSError:
                if not os.path.isdir(self._dir(digest)):
                    raise
                shutil.rmtree(tmp, ignore_errors=True)  # another process put the same index in place first
            else:
                _stamp(self._dir(digest), files)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            self._warn(f"cannot be written ({exc.strerror or exc})")
            return False
        self.saved += 1
        self.evict()
        return True

    # ---- size ----------------------------------------------------------------------
    def _sizes(self) -> list[tuple[float, str, int]]:
        """(recency, digest, bytes) of every complete index."""
        out = []
        try:
            names = os.listdir(self.directory)
        except OSError:
            return out
        for name in names:
            if len(name) != 64:
                continue
            folder = self._dir(name)
            try:
                with os.scandir(folder) as it:
                    size = sum(e.stat(follow_symlinks=False).st_size for e in it)
                recency = os.path.getmtime(os.path.join(folder, _MANIFEST))
            except OSError:
                recency, size = 0.0, 0
            out.append((recency, name, size))
        return out

    def total_bytes(self) -> int:
        return sum(size for _, _, size in self._sizes())

    def evict(self) -> None:
        """Remove least recently used whole indexes until the store fits, never one in use."""
        entries = sorted(self._sizes())
        total = sum(size for _, _, size in entries)
        for _, digest, size in entries:
            if total <= self.max_bytes:
                break
            with self._lock:
                if digest in self._open:
                    continue
            self._remove(digest)
            total -= size

    def discard(self, index: TraceIndex) -> None:
        """Remove the stored index of `index`'s file version: one of its files was cut while
        it was in use (`TraceService._check_intact`), so it is rebuilt, never trusted again."""
        if index.identity is None or not self.usable:
            return
        self.damaged += 1
        self._remove(index_digest(index.path, index.identity))

    def _remove(self, digest: str) -> None:
        folder = self._dir(digest)
        trash = os.path.join(self.directory, f"{_TMP}gone-{digest}-{os.getpid()}-{threading.get_ident()}")
        try:
            os.rename(folder, trash)  # gone from view at once, even if removing its files fails
        except OSError:
            trash = folder
        shutil.rmtree(trash, ignore_errors=True)

    def info(self) -> StoreInfo:
        entries = self._sizes() if self.usable else []
        return StoreInfo(self.directory, self.usable, len(entries), sum(s for _, _, s in entries), self.max_bytes,
                         self.loaded, self.saved, self.damaged)

    # ---- refusals ------------------------------------------------------------------
    def _refusal_path(self, path: str, identity: FileIdentity, limits: tuple) -> str:
        return os.path.join(self.directory, "refusals", _digest(
            ["refusal", INDEX_VERSION, os.path.abspath(path), identity.dev, identity.ino, identity.size,
             identity.mtime_ns, list(limits)]) + ".json")

    def refusal(self, path: str, identity: FileIdentity, limits: tuple) -> Optional[TraceError]:
        """What reading this file version under `limits` raised before, if it was kept."""
        if not self.usable:
            return None
        try:
            kept = _read_json(self._refusal_path(path, identity, limits), 1 << 16)
            kind = _ERROR_KINDS[kept["kind"]]
            exc = TraceError.__new__(kind)
            TraceError.__init__(exc, str(kept["message"]))
            exc.__dict__.update({k: v for k, v in dict(kept["attrs"]).items() if isinstance(k, str)})
            return exc
        except (Damaged, OSError, ValueError, KeyError, TypeError):
            return None

    def remember_refusal(self, path: str, identity: FileIdentity, limits: tuple, exc: TraceError) -> None:
        if not self.usable or type(exc).__name__ not in _ERROR_KINDS:
            return
        attrs = {k: v for k, v in exc.__dict__.items() if isinstance(v, (int, float, str, bool, type(None)))}
        target = self._refusal_path(path, identity, limits)
        tmp = f"{target}.{os.getpid()}-{threading.get_ident()}.tmp"
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(tmp, "w") as f:
                json.dump({"kind": type(exc).__name__, "message": str(exc), "attrs": attrs}, f)
            os.replace(tmp, target)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _error_kinds() -> dict[str, type]:
    """TraceError and its subclasses that name a file's refusal (by class name)."""
    from ..budget import BudgetBusy
    from ..errors import FileChanged, ObjectStoreError

    passing = (FileChanged, ObjectStoreError, BudgetBusy)  # may read differently the next time
    kinds: dict[str, type] = {}
    todo = [TraceError]
    while todo:
        kind = todo.pop()
        todo.extend(kind.__subclasses__())
        if not issubclass(kind, passing):
            kinds.setdefault(kind.__name__, kind)
    return kinds


class _Kinds(dict):
    """`_error_kinds()`, found on first use (every subclass is imported by then)."""

    def _fill(self) -> None:
        if not super().__len__():
            self.update(_error_kinds())

    def __getitem__(self, key: str) -> type:
        self._fill()
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self._fill()
        return super().__contains__(key)


_ERROR_KINDS = _Kinds()


def _xspace_files(source: XSpaceTrace) -> list[tuple[np.ndarray, str]]:
    """An XSpace's arrays the store keeps, with their files' names: its events' positions, and
    its file's bytes unless they are the file itself (`XSpaceTrace.in_place`: not copied)."""
    return [(a, name) for a, name in zip(source.arrays, xspace.KEPT_FILES)
            if not (source.in_place and name == xspace.DATA_FILE)]


def _spilled_file(index: TraceIndex, column: np.ndarray, name: str) -> Optional[str]:
    """The `.npy` file `column` is mapped from, if the parse wrote it (`index_file(spill_dir=...)`)."""
    if index.spill_dir is None or not isinstance(column, np.memmap):
        return None
    path = os.path.join(index.spill_dir, name)
    return path if column.filename is not None and os.path.abspath(column.filename) == os.path.abspath(path) else None


def default_index_bytes(directory: str) -> int:
    """The store's default size: a quarter of the free space of its disk, at least 1 GiB.

    An index takes ~45-60 B an event, so a 16 GiB, 50 M-event trace needs ~3 GB: a fixed
    default would either refuse it or fill a small disk; a share of what is free does
    neither. Measured once, at start: indexes written later do not shrink it."""
    probe = directory
    while probe and not os.path.isdir(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    try:
        st = os.statvfs(probe or ".")
        free = st.f_bavail * st.f_frsize
    except OSError:
        free = 0
    return max(1 << 30, free // 4)


def indexed(store: Optional[IndexStore], path: str, *, account: Optional[Account] = None, **options: Any,
            ) -> TraceIndex:
    """The index of `path`: the stored one for its version if there is one, else parsed
    (`pipeline.index_file` with `options`) and stored for the next time (the CLI's
    `--cache-dir`; a server saves beside its requests instead)."""
    if store is not None:
        identity = options.get("expect")  # the version a listing saw: its index, or a parse that checks it
        if identity is None:
            try:
                identity = FileIdentity.from_stat(os.stat(path))
            except OSError:
                identity = None  # index_file says what is wrong with it
        if identity is not None:
            found = store.load(path, identity,
                               max_inflated_bytes=options.get("max_inflated_bytes", DEFAULT_MAX_INFLATED_BYTES),
                               max_ratio=options.get("max_ratio", DEFAULT_MAX_RATIO),
                               store_dir=options.get("store_dir"), account=account)
            if found is not None:
                return found
    index = parse_spilling(store, path, account=account, **options)
    if store is not None:
        store.save(index)
    return index


class StoreIndexer:
    """`indexed` over one store, which also keeps beside each index it gave what the plans
    and queries on it prepared (`IndexStore.save_prepared`) once the caller is done with it
    (`keep_prepared`): the CLI's `--cache-dir`. Without it a run that reopened an index
    planned as if it had just parsed the file (the slices, their orders and the window
    index made again: 3.7 s of a 5 s run over a 1 GB XSpace whose parse took 4.2 s)."""

    def __init__(self, store: IndexStore) -> None:
        self.store = store
        self._given: list[TraceIndex] = []

    def __call__(self, path: str, **options: Any) -> TraceIndex:
        index = indexed(self.store, path, **options)
        self._given.append(index)
        return index

    def keep_prepared(self) -> None:
        """Keep what was prepared on the indexes given so far, and let go of them."""
        given, self._given = self._given, []
        for index in given:
            ready = index.prepared.ready_fields()
            if ready <= index.prepared_kept or not self.store.can_keep_prepared(index):
                continue  # nothing new since it was reopened or kept (as the server decides)
            index.prepared_kept = index.prepared_kept | ready
            self.store.save_prepared(index)


def parse_spilling(store: Optional[IndexStore], path: str, *, account: Optional[Account] = None,
                   parse: Optional[Callable[..., TraceIndex]] = None, **options: Any) -> TraceIndex:
    """`pipeline.index_file`, its columns written into a spill folder of `store` as they are
    read and mapped from there (see `TableBuilder`), so the parse holds a block and the
    strings rather than the columns, and `save` links the files instead of writing them.
    The folder goes with the index; a parse that fails, or maps nothing (an XSpace, an
    empty trace), removes it at once. A disk that cannot take the columns: parsed again in
    memory, as without a store. `parse`: `index_file` or a stand-in with its arguments."""
    return parse_into(store.spill_folder() if store is not None else None, path, account=account, parse=parse,
                      **options)


def parse_into(spill: Optional[str], path: str, *, account: Optional[Account] = None,
               parse: Optional[Callable[..., TraceIndex]] = None, **options: Any) -> TraceIndex:
    """`parse_spilling` into the folder `spill` (made if missing; None: in memory), which
    goes with the index, or at once when the parse fails or maps nothing into it."""
    parse = parse or index_file
    if spill is None:
        return parse(path, account=account, **options)
    try:
        index = parse(path, account=account, spill_dir=spill, **options)
    except SpillFailed as exc:
        shutil.rmtree(spill, ignore_errors=True)
        log.warning("tb_reduce: %s; reading %s in memory", str(exc), os.path.basename(path))
        return parse(path, account=account, **options)
    except BaseException:
        shutil.rmtree(spill, ignore_errors=True)
        raise
    if index.spill_dir is None:
        shutil.rmtree(spill, ignore_errors=True)
    else:
        IndexStore.forget_spill(index)
    return index


# A trace file from this size on is parsed into a temporary folder rather than in memory
# (`parse_spilling_to_temp`).
SPILL_FROM_BYTES = 64 << 20


def parse_spilling_to_temp(path: str, **options: Any) -> TraceIndex:
    """`pipeline.index_file` for a caller without an index store (the CLI without
    --cache-dir, the live sidecar's windows): a big trace's columns (and what plans prepare
    on them, and an XSpace's bytes) written block by block into a folder of the system's
    temporary directory (`TMPDIR`) and mapped from there, as a server writes them into its
    cache (`parse_into`), so what the caller holds stays near its budget's floor however
    big the trace is. The folder goes when the index does (at exit at the latest). A small
    trace, a path that is no local file, or a disk that fails the folder: parsed in memory."""
    try:
        big = os.stat(path).st_size >= SPILL_FROM_BYTES
    except OSError:
        big = False  # not a local file (or not there): index_file says what it is
    folder = None
    if big:
        try:
            folder = tempfile.mkdtemp(prefix="tb-reduce-")
        except OSError:
            pass
    return parse_into(folder, path, **options)


def _builder_alive(name: str) -> bool:
    """Whether the process that made temp folder `name` (…-<pid>-<thread>) still runs here."""
    try:
        pid = int(name.rsplit("-", 2)[-2])
    except (ValueError, IndexError):
        return False
    if pid == os.getpid():
        return False  # this process is only starting: nothing of it is being built yet
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stamp(folder: str, files: dict) -> None:
    """Stamp files the store has just written (`verified.py`): those old enough to be told
    from a later write (a parse's spilled columns, usually) are not read at the next load."""
    stamps = Stamps(folder)
    stamps.stamp_all(files)
    stamps.save()


def _read_all(path: str) -> bytes:
    with _open_kept(path) as f:
        return f.read()


def _write_array(folder: str, name: str, a: np.ndarray) -> list[int]:
    with open(os.path.join(folder, name), "wb") as f:
        out = _Checksummed(f)
        np.lib.format.write_array(out, np.ascontiguousarray(a), allow_pickle=False)
    return [out.size, out.crc]


NARROW_CHUNK = 1 << 20  # values converted at a time when an array is written narrowed
# An array of at least this many rows holding one value is kept as that value (`fills`).
FILL_AT_LEAST = 1 << 12
# A Chrome trace's event positions are int64 as the scanner makes them; kept int32 when its
# text is shorter than this, so that no start, end or read's end reaches past int32 (8 B an
# event on disk, 4 of them saved). Their lengths (int32) are kept int16 while every event is
# shorter than 32 KiB (every use adds them to int64 starts or reads them as Python ints).
_INT32_TEXT = 1 << 31
_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
# The columns of ids (into the strings file's lists), kept int16 while every id fits.
_ID_FILES = frozenset({"track.npy", "name.npy", "cat.npy"})


def _fill_value(a: np.ndarray) -> Optional[np.ndarray]:
    """The one value (an array of one row) every row of `a` holds, bit for bit (-0.0 is not
    0.0, NaNs as they are written), or None; checked a chunk at a time.

    Why: some columns hold one value for every event of a trace (an XSpace's categories,
    flow keys, scopes; a Kineto trace's slices' partners: -1 for an X event), ~20 B an event
    of an XSpace's index on disk. Kept once, they come back as a read-only broadcast of that
    value (`_column`), which every use reads as the array it was and which holds no memory."""
    n = len(a)
    bits = _BITS.get(a.dtype.itemsize)
    if a.ndim != 1 or n < FILL_AT_LEAST or bits is None or a.dtype.hasobject or a.dtype.kind not in "biuf":
        return None
    value = np.array(a[:1])
    want = value.view(bits)[0]
    if np.asarray(a[n - 1:]).view(bits)[0] != want or np.asarray(a[n // 2:n // 2 + 1]).view(bits)[0] != want:
        return None
    for c in range(0, n, NARROW_CHUNK):
        if not (np.ascontiguousarray(a[c:c + NARROW_CHUNK]).view(bits) == want).all():
            return None
    return value


def _fills(manifest: dict, files: dict, events: Any) -> dict[str, int]:
    """A manifest's files that hold one value for how many rows (`_fill_value`), checked:
    no array of an index has more rows than its events and one (a broadcast costs no
    memory, but a pass over a billion rows of one would cost its time)."""
    fills = manifest.get("fills", {})
    if type(events) is not int or not isinstance(fills, dict) or not all(
            name in files and type(rows) is int and 0 <= rows <= events + 1 for name, rows in fills.items()):
        raise Damaged("its manifest's repeated values are not a table of its files")
    return fills


def _write_narrowed(folder: str, name: str, a: np.ndarray, fills: dict[str, int], width: type = np.int32) -> list[int]:
    """`_write_array`, an array holding one value written as that value (noted in `fills`),
    an integer array wider than `width` whose values all fit it written as `width`.

    Why: the prepared state's orders, row numbers and counts are int64 as numpy makes
    them, but a table holds fewer than 2^31 rows: written at 8 B a value they were a third
    of the index on disk (~15 B an event of a Kineto trace). They come back as int32,
    which every use takes as it takes int64 (indexes, searches, comparisons; no arithmetic
    reaches past the rows). Ids (tracks, names, categories: `_ID_FILES`, a slice's) are
    int16 while they fit, as a trace has tens of tracks and hundreds of names: 2 B an event
    each. A chunk at a time: a mapped array is never copied whole."""
    n = len(a)
    value = _fill_value(a)
    if value is not None:
        fills[name] = n
        return _write_array(folder, name, value)
    if a.ndim != 1 or a.dtype.kind != "i" or a.dtype.itemsize <= np.dtype(width).itemsize:
        return _write_array(folder, name, a)
    lo, hi = np.iinfo(width).min, np.iinfo(width).max
    for c in range(0, n, NARROW_CHUNK):
        part = np.asarray(a[c:c + NARROW_CHUNK])
        if int(part.min()) < lo or int(part.max()) > hi:
            return _write_array(folder, name, a)
    with open(os.path.join(folder, name), "wb") as f:
        out = _Checksummed(f)
        out.write(mapped.npy_header(width, n))
        for c in range(0, n, NARROW_CHUNK):
            out.write(np.asarray(a[c:c + NARROW_CHUNK]).astype(width))
    return [out.size, out.crc]


def _column(folder: str, column: str, files: dict, fills: dict[str, int]) -> np.ndarray:
    """A column's file mapped (or read, when small); one that holds one value (`fills`)
    as a read-only broadcast of it to its rows."""
    name = f"{column}.npy"
    if name not in files:
        raise Damaged(f"{name} is missing from its manifest")
    file = os.path.join(folder, name)
    a = map_array(file) if files[name][0] >= MAP_AT_LEAST else np.load(file, allow_pickle=False)
    if a.ndim != 1:
        raise Damaged(f"{name} is not one column")
    if name in fills:
        if len(a) != 1:
            raise Damaged(f"{name} holds {len(a)} values, not the one repeated")
        return np.broadcast_to(a, (fills[name],))
    return a


def _check_prepared(p: Prepared, events: int, table: Optional[EventTable] = None) -> None:
    """What the kept state says of events and slices fits this table: a plan indexes the
    columns with it, so an index past them is refused here, not met there."""
    sl = p.slices
    if sl is not None:
        n = len(sl.start)
        for name in ("end", "dur", "track", "name", "event", "partner"):
            if len(getattr(sl, name)) != n:
                raise Damaged(f"the kept slices' {name} holds {len(getattr(sl, name))} rows, not {n}")
        for col in (sl.event, sl.partner, sl.unpaired):
            if len(col) and (int(col.max()) >= events or int(col.min()) < -1):
                raise Damaged("the kept slices name events past the table")
    st = p.static
    if st is not None:
        if len(st.has_ts) != events or len(st.always) != events or len(st.handled) != events:
            raise Damaged("the kept masks are not one row per event")
        if sl is not None and len(st.slice_order) != len(sl.start):
            raise Damaged("the kept slice order is not one row per slice")
        rows = np.asarray(st.track_rows)
        if (len(rows) < 2 or int(rows[0]) != 0 or int(rows[-1]) != len(st.slice_order)
                or bool(np.any(np.diff(rows) < 0))):
            raise Damaged("the kept tracks' rows of the slice order do not fit it")
    if p.instants is not None and not (isinstance(p.instants, int) and 0 <= p.instants <= events):
        raise Damaged("the kept count of instants does not fit the table")
    wi = p.window_index
    if wi is not None:
        slices = len(sl.start) if sl is not None else -1
        if (len(wi.tier_order) != slices or len(wi.tier_rows) != TIERS + 1 or len(wi.tier_extent) != TIERS
                or int(wi.tier_rows[0]) != 0 or int(wi.tier_rows[-1]) != slices or np.any(np.diff(wi.tier_rows) < 0)
                or not isinstance(wi.counters_sorted, bool)):
            raise Damaged("the kept window index does not fit the slices")
        if len(wi.instants) > len(wi.points) or (len(wi.instants) and (int(np.min(wi.instants)) < 0
                                                                      or int(np.max(wi.instants)) >= events)):
            raise Damaged("the kept window index's instants are not events of the table")
        flows = len(wi.flow_event)
        if (len(wi.flow_row) != flows or len(wi.flow_tracks) != len(wi.flow_reach) + 1
                or int(wi.flow_tracks[0]) != 0 or int(wi.flow_tracks[-1]) != flows
                or np.any(np.diff(wi.flow_tracks) < 0) or int(wi.flow_size.sum()) != flows
                or (table is not None and (len(wi.flow_reach) != max(len(table.tracks), 1)
                                           or int(table.flow_key.max(initial=-1)) >= len(wi.flow_size)))):
            raise Damaged("the kept window index does not fit the flows")
        for col, bound in ((wi.points, events), (wi.always, events), (wi.tier_order, slices),
                           (wi.flow_event, events), (wi.flow_row, flows)):
            if len(col) and (int(col.min()) < 0 or int(col.max()) >= bound):
                raise Damaged("the kept window index names rows past the table")


def _check_ids(t: EventTable) -> None:
    """Every id of the columns points into its list: a swapped strings file cannot make
    a plan index past them."""
    for col, table, what in ((t.track, t.tracks, "track"), (t.name, t.names, "name"), (t.cat, t.cats, "category"),
                             (t.counter_series, t.series, "series")):
        if len(col) and (int(col.min()) < 0 or int(col.max()) >= len(table)):
            raise Damaged(f"a {what} id points past the {len(table)} stored")
