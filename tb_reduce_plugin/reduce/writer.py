"""Writing a reduced trace: Chrome JSON Object format, streamed, deterministic.

Kept events come from the input format's `EventSource` by index: for Chrome JSON
a second streaming pass copies their original bytes (so levels 0 and 1 write them
unchanged and memory never holds the trace); for XSpace they are generated from
the kept payloads. Levels 2–4 re-encode only the kept events whose args they cut
or drop.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Mapping, Optional, Protocol

import msgspec
import numpy as np
import orjson
from isal import igzip

from ..errors import TraceError
from ..model.table import clean_json_text, valid_utf8
from ..native import scanner_module
from .levels import ArgsPolicy, args_policy
from .plan import Plan

STRING_LIMIT = 256
LIST_LIMIT = 32
KEPT_ARG_KEYS = ("bind_id", "flow_in", "flow_out")
SUMMARY_CAT = "tb_reduce.summary"
_any = msgspec.json.Decoder()


_SURROGATES = re.compile("[\ud800-\udfff]")


def dumps(value: Any) -> bytes:
    """orjson, with the stdlib as fallback for what it refuses (ints over 64 bits, and
    lone surrogates, which become U+FFFD: output JSON is always valid UTF-8). numpy
    arrays are written from their buffer (`tb_reduce.input_index` holds millions)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)
    except (TypeError, orjson.JSONEncodeError):
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_plain)
        return _SURROGATES.sub("\ufffd", text).encode()


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON")


def cut_value(v: Any) -> tuple[Any, bool]:
    """`ArgsPolicy.TRIM` (level 2): strings to 256 characters, lists to 32 items, at any depth.

    Strings and lists of at most 32 numbers (a tensor's shape) among a list's items or a
    dict's values are handled in place, without a call each: Kineto's shapes are lists of
    lists of numbers, and an event cut here made ~160 calls (97 -> 15 µs an event; a warm
    zoom of the 8 GiB trace cuts ~30)."""
    if isinstance(v, str):
        return (v[:STRING_LIMIT] + "…", True) if len(v) > STRING_LIMIT else (v, False)
    if isinstance(v, list):
        out = v[:LIST_LIMIT]  # a new list, as before
        return out, _cut_items(out, enumerate(out)) | (len(v) > LIST_LIMIT)
    if isinstance(v, dict):
        d = dict(v)
        return d, _cut_items(d, v.items())
    return v, False


def _cut_items(into: Any, items: Iterable[tuple[Any, Any]]) -> bool:
    """Each (key, value) of a list's (index, item) or a dict's items cut into `into` (a new
    list or dict, holding the values until cut): whether any was."""
    cut = False
    for k, item in items:
        if isinstance(item, str):
            if len(item) > STRING_LIMIT:
                into[k] = item[:STRING_LIMIT] + "…"
                cut = True
        elif isinstance(item, dict) or (isinstance(item, list) and not _plain_list(item)):
            into[k], c = cut_value(item)
            cut |= c
    return cut


_PLAIN = (int, float, type(None))  # bool is an int


def _plain_list(v: list) -> bool:
    """A list that no cut changes: 32 items at most, each a number, a bool or null (a
    tensor's shape). Kept as it is, shared with the decoded event, which nothing writes."""
    if len(v) > LIST_LIMIT:
        return False
    for x in v:
        if not isinstance(x, _PLAIN):
            return False
    return True


_LONG_RUN = re.compile(rb'[^"]{%d}' % (STRING_LIMIT + 1))


_ASK = object()  # `transform`'s native scanner not given: looked up for the one event


def _may_need_cut(raw: bytes, native: Any) -> bool:
    """Cheap, conservative: could any string exceed 256 characters or any list 32 items?

    Natively, exactly (`_scan.args_may_need_cut`, walking the args without decoding them):
    a Kineto event's shapes and types are lists of dozens of items, so the guess below
    sent a third of a window's events through a decode and a walk in Python (~20 us each)
    to find nothing to cut. The guess: a longer string needs 257 bytes without a quote
    (or holds an escaped quote); a longer list needs at least 32 commas and a "[".
    `native`: the scanner module or None (the pure path), looked up once per batch by the
    caller: the lookup reads the environment, 1 µs a call, a sixth of a warm zoom's write.
    """
    if native is not None:
        return native.args_may_need_cut(raw, STRING_LIMIT, LIST_LIMIT)
    if len(raw) > STRING_LIMIT and (b'\\"' in raw or _LONG_RUN.search(raw)):
        return True
    return b"[" in raw and raw.count(b",") >= LIST_LIMIT


def transform(raw: bytes, args: ArgsPolicy, native: Any = _ASK) -> bytes:
    """The event as written under the args policy `args` (`levels.args_policy`): its
    original bytes when nothing changes. `native`: `native.scanner_module()`, when the
    caller transforms many events (else looked up here)."""
    if args is ArgsPolicy.KEEP or b'"args"' not in raw:
        return raw
    if args is ArgsPolicy.TRIM and not _may_need_cut(raw, scanner_module() if native is _ASK else native):
        return raw
    try:
        ev = _any.decode(raw)
    except msgspec.DecodeError:  # invalid UTF-8 in a string (what msgspec.Raw lets through): the one rule
        raw = clean_json_text(raw)[0]
        ev = _any.decode(raw)
    if not isinstance(ev, dict) or not isinstance(ev.get("args"), (dict, list)):
        return raw
    if ev.get("ph") == "M":  # metadata is kept unchanged at every level (G6)
        return raw
    if args is ArgsPolicy.TRIM:
        trimmed, cut = cut_value(ev["args"])
        if not cut:
            return raw
        if isinstance(trimmed, dict):
            trimmed["tb_reduce.cut"] = True
        ev["args"] = trimmed
        return dumps(ev)
    if ev.get("ph") == "C":  # ArgsPolicy.DROP: a counter's args are its values
        return raw
    dropped = ev.pop("args")
    kept = {k: dropped[k] for k in KEPT_ARG_KEYS if isinstance(dropped, dict) and k in dropped}
    if kept:
        ev["args"] = kept
    return dumps(ev)


def transform_all(raws: list[bytes], args: ArgsPolicy, native: Any) -> list[bytes]:
    """`transform` of each event of a batch. Under TRIM with the native scanner, the batch is
    checked in one call (`_scan.events_may_need_cut`) and only the events it names go
    through `transform`: the rest are written as they are, as `transform` would write them
    (a warm zoom of 6,800 events spent ~9 ms on a Python call per event to find ~30 to cut)."""
    if args is ArgsPolicy.KEEP:
        return raws
    if args is ArgsPolicy.TRIM and native is not None:
        out = list(raws)
        for i in native.events_may_need_cut(out, STRING_LIMIT, LIST_LIMIT):
            out[i] = transform(out[i], args, native)
        return out
    return [transform(raw, args, native) for raw in raws]


def summary_text(plan: Plan, tracks: list, names: list, native: Any = None) -> bytes:
    """The summary slices as JSON, joined by `,\n` (b"" when there are none). With the native
    scanner, written in one call (`_scan.summary_json`) from the JSON of each distinct
    track, label and top name, made here once: a warm zoom of 4,000 summaries spent
    ~10 ms formatting them a Python f-string at a time; else `summary_events`, its twin
    to the byte (a property test holds them together)."""
    s = plan.summaries
    if not len(s):
        return b""
    if native is None:
        return b",\n".join(summary_events(plan, tracks, names))
    top_name = np.asarray(s.top_name)
    offsets = np.ascontiguousarray(s.top_offsets, dtype=np.int64)
    name_ids, top_code = np.unique(top_name, return_inverse=True)
    label_ids, label_code = np.unique(top_name[offsets[:-1]], return_inverse=True)
    track_ids, track_code = np.unique(np.asarray(s.track), return_inverse=True)
    track_json = []
    for trk in track_ids.tolist():
        pid, tid = tracks[trk]
        track_json.append(b'"pid":' + dumps(pid) + b',"tid":' + dumps(tid))
    busy = None if s.busy is None else np.ascontiguousarray(s.busy, dtype=np.uint8)
    return native.summary_json(
        b'{"ph":"X","cat":"' + SUMMARY_CAT.encode() + b'","name":',
        track_json, track_code.astype(np.int32),
        [dumps(_name(names[n]))[:-1] for n in label_ids.tolist()], label_code.astype(np.int32),
        [dumps(names[n]) for n in name_ids.tolist()], top_code.astype(np.int32),
        np.ascontiguousarray(s.top_count, dtype=np.int64), offsets,
        np.ascontiguousarray(s.start, dtype=np.float64), np.ascontiguousarray(s.end, dtype=np.float64),
        np.ascontiguousarray(s.count, dtype=np.int64),
        busy, None if busy is None else np.ascontiguousarray(s.busy_offsets, dtype=np.int64))


def summary_events(plan: Plan, tracks: list, names: list) -> list[bytes]:
    """The summary slices as JSON, by string formatting: a zoomed window can hold
    tens of thousands, and names and tracks repeat, so their JSON is made once.
    Times are written by `repr`, the shortest text that reads back as the number."""
    s = plan.summaries
    if not len(s):
        return []
    top_name, top_count = s.top_name.tolist(), s.top_count.tolist()
    name_json = {n: dumps(names[n]).decode() for n in set(top_name)}
    pairs = [f"[{name_json[n]},{c}]" for n, c in zip(top_name, top_count)]
    offsets = s.top_offsets.tolist()
    firsts = [top_name[a] for a in offsets[:-1]]
    label_json = {n: dumps(_name(names[n])).decode()[:-1] for n in set(firsts)}  # without the closing quote
    track_json = {}
    for trk in set(s.track.tolist()):
        pid, tid = tracks[trk]
        track_json[trk] = f'"pid":{dumps(pid).decode()},"tid":{dumps(tid).decode()}'
    out = []
    busy = _busy_texts(s)
    rows = zip(s.track.tolist(), s.start.tolist(), s.end.tolist(), s.count.tolist(), firsts, offsets, offsets[1:], busy)
    for trk, start, end, count, first, a, b, shape in rows:
        more = f' (+{count - 1} more)"' if count > 1 else '"'
        out.append(
            f'{{"ph":"X","cat":"{SUMMARY_CAT}","name":{label_json[first]}{more},{track_json[trk]},"ts":{start!r},'
            f'"dur":{end - start!r},"args":{{"count":{count},"top":[{",".join(pairs[a:b])}]{shape}}}}}'.encode()
        )
    return out


def _busy_texts(s: Any) -> list[str]:
    """Per summary, its `"busy"` member (`busy.py`) with the comma before it, or nothing."""
    if s.busy is None:
        return [""] * len(s)
    text = s.busy.tobytes().decode("ascii")
    at = s.busy_offsets.tolist()
    return [f',"busy":"{text[a:b]}"' if b > a else "" for a, b in zip(at, at[1:])]


def _name(n: Any) -> str:
    return "(unnamed)" if n is None else str(n)


class Sink:
    """Uncompressed-byte counting writer; gzip (mtime 0, no file name) when asked."""

    def __init__(self, fileobj: BinaryIO, gzip: bool) -> None:
        self._file = fileobj
        self._gz = igzip.IGzipFile(filename="", mode="wb", fileobj=fileobj, mtime=0, compresslevel=2) if gzip else None
        self.bytes = 0

    def write(self, data: bytes) -> None:
        if data:
            self.bytes += len(data)
            (self._gz or self._file).write(data)

    def close(self) -> None:
        if self._gz is not None:
            self._gz.close()


class EventSource(Protocol):
    """Where the JSON of input events comes from, by index (one per input format)."""

    def events(self, indices: np.ndarray, args: ArgsPolicy, progress: Optional[Callable[[int, int], None]] = None,
               ) -> Iterator[list[bytes]]:
        """The JSON of the events at sorted `indices`, in order, in blocks. `args`: how
        the writer will treat their args (a source may leave out what it drops)."""
        ...


def write_trace(
    source: EventSource,
    plan: Plan,
    tracks: list,
    names: list,
    metadata: dict,
    tb_reduce: dict,
    sink: Sink,
    progress: Optional[Callable[[int, int], None]] = None,
    args: Optional[ArgsPolicy] = None,
) -> int:
    """Stream the reduced trace into `sink`; returns the number of events written.

    `args`: what is written of the kept events' args (default: the plan's level's
    policy); a view that fetches args on demand asks for `args_policy(level, drop_args=True)`.
    """
    written = 0
    sink.write(b'{"traceEvents":[\n')
    sep = b""
    policy = args_policy(plan.level) if args is None else args
    if not isinstance(policy, ArgsPolicy):
        raise TypeError(f"args must be an ArgsPolicy, not {policy!r}")
    native = scanner_module()  # once per write, not per event (`_may_need_cut`)
    for raws in source.events(plan.keep, policy, progress):
        parts = transform_all(raws, policy, native)  # as they are under KEEP: 2 M calls saved at level 0
        # Events are copied from the input as they are: checked at C speed per chunk,
        # and invalid UTF-8 replaced as everywhere else (`model.table.clean_json_text`).
        sink.write(sep)  # apart: `sep + text` would copy the text (megabytes a window)
        sink.write(valid_utf8(b",\n".join(parts)))
        sep = b",\n"
        written += len(parts)
    summaries = summary_text(plan, tracks, names, native)
    if summaries:
        sink.write(sep)
        sink.write(summaries)
        written += len(plan.summaries)
    sink.write(b"\n]")
    for key, value in metadata.items():
        if key != "tb_reduce":
            sink.write(b",\n" + dumps(key) + b":" + dumps(value))
    tb_reduce["output"]["events"] = written
    sink.write(b',\n"tb_reduce":' + dumps(tb_reduce) + b"}\n")
    return written


def atomic_output(path: str, protect: Mapping[str, str] = {}) -> tuple[BinaryIO, Callable[[bool], int]]:
    """A temp file beside `path`, renamed over it on success, removed on failure.

    The temp file is created at once, so a caller that opens it *before* minutes of
    work hears at once that `path` cannot be written (missing or read-only folder,
    no permission, `path` a folder or a device). `protect` maps a label to a file
    that `path` must not be ("the input trace": src): compared by device and inode
    when both exist (symlinks, hard links, `./x` vs `x`), by real path otherwise,
    so a reduction never replaces its own input.

    The file is created as `open()` creates files (0o666 less the umask), not 0600
    as `mkstemp` would, because a reduced trace is meant to be shared like any
    output. `finish(ok)` closes it; when ok, renames it over `path` and returns its
    size, else (and whenever closing or renaming fails) removes it. Filesystem
    errors are `OSError`s whose `filename` is `path` as the caller spelled it —
    never the temp name — so a surface can say which file failed in one line.
    """
    if not os.path.basename(path):
        raise IsADirectoryError(errno.EISDIR, "is a folder name; give a file name", path)
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        if os.path.exists(directory):
            raise NotADirectoryError(errno.ENOTDIR, f"{directory} is not a folder", path)
        raise FileNotFoundError(errno.ENOENT, f"its folder {directory} does not exist", path)
    try:
        st: Optional[os.stat_result] = os.stat(path)
    except OSError:  # absent (or a dangling link, which the rename replaces)
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder; give a file name", path)
    if st is not None and not stat.S_ISREG(st.st_mode):  # never rename over /dev/null or a FIFO
        raise OSError(errno.EINVAL, "is not a regular file", path)
    for label, other in protect.items():
        if _same_file(path, st, other):
            raise TraceError(f"refusing to write {path}: it is {label} {other}")
    fd, tmp = _create_beside(path, directory)
    f = os.fdopen(fd, "wb")

    def discard() -> None:
        try:
            f.close()
        except OSError:  # a late ENOSPC flushing bytes that are thrown away anyway
            pass
        try:
            os.unlink(tmp)
        except OSError:  # gone already, or the folder turned read-only: nothing more to do
            pass

    def finish(ok: bool) -> int:
        if not ok:
            discard()
            return 0
        try:
            f.flush()
            size = os.fstat(f.fileno()).st_size
            f.close()
            os.replace(tmp, path)
        except OSError as exc:
            discard()
            raise _naming(exc, path) from None
        return size

    return f, finish


def _same_file(path: str, st: Optional[os.stat_result], other: str) -> bool:
    """Whether writing `path` (stat `st`, None when absent) would replace `other`."""
    try:
        so = os.stat(other)
    except OSError:
        so = None
    if st is not None and so is not None:
        return (st.st_dev, st.st_ino) == (so.st_dev, so.st_ino)
    return os.path.realpath(path) == os.path.realpath(other)


def _create_beside(path: str, directory: str) -> tuple[int, str]:
    """Create a new `.tb-reduce-*.part` file in `directory` with mode 0o666, so the
    kernel applies the umask (and default ACLs) exactly as for `open(path, "w")`."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = os.path.join(directory, f".tb-reduce-{os.urandom(6).hex()}.part")  # (secrets: 11 ms of imports)
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
        except OSError as exc:  # EROFS, EACCES, ENOSPC (no inode left), ...
            raise _naming(exc, path) from None
    raise FileExistsError(errno.EEXIST, "no free temporary name beside it", path)  # pragma: no cover


def _naming(exc: OSError, path: str) -> OSError:
    """`exc` about `path` as the user gave it (OSError picks the subclass by errno)."""
    return OSError(exc.errno, exc.strerror or str(exc), path)
