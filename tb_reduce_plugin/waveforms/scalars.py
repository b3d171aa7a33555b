"""The scalar series of a run's TensorBoard event files, in columns, read incrementally.

A run is the `*tfevents*` files directly in a folder (not in its subfolders: those
are other runs), read in name order, as TensorBoard reads them; or one event file.
Payloads are parsed with TensorBoard's own `Event` proto (upb, in C). A point is a
`Summary.Value` of a scalar tag:

- `simple_value`: `torch.utils.tensorboard` and TensorFlow 1 write these;
- a rank-0 `tensor` of a tag whose first value's metadata names the `scalars` plugin:
  `tf.summary.scalar` (v2) and TensorBoard's `scalar_pb`. Writers put the metadata on
  the first value of a tag only, so the decision is remembered per tag and per run,
  exactly as TensorBoard's `dataclass_compat` does (the first value decides).

Points stay in record order, per tag: a step repeated or going backwards (a restarted
job appending to its run) is kept where it was written, since the dashboard draws it
back-tracking and counts it. NaN and infinities are kept as they are.

`RunScalars.poll()` reads only what was appended since the last poll (new files too);
bad bytes become `gaps`, never exceptions. Only a path that cannot be read at all (a
missing folder or file, a FIFO) raises `TraceError`.

For the routes: `tag_id` names a tag in a URL whatever its length, `m4_indices` keeps
what a plot of a given width can show (per pixel column the first, last, lowest and
highest records), `series_summary` counts what the kept points alone would miscount,
and `json_points` writes points as strict JSON (a non-finite step time or value as the
string JavaScript's `Number()` reads back), a chunk at a time.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from array import array
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np
from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2, types_pb2

from ..errors import TraceError, display_name
from .eventfile import DEFAULT_MAX_RECORD_BYTES, EventFileReader, Gap

SCALARS_PLUGIN = "scalars"
Series = Tuple[np.ndarray, np.ndarray, np.ndarray]

# dtype -> (the TensorProto field holding its values, the struct code of `tensor_content`)
_FIELDS = {
    types_pb2.DT_FLOAT: ("float_val", "<f"),
    types_pb2.DT_DOUBLE: ("double_val", "<d"),
    types_pb2.DT_INT32: ("int_val", "<i"),
    types_pb2.DT_INT64: ("int64_val", "<q"),
    types_pb2.DT_INT16: ("int_val", "<h"),
    types_pb2.DT_INT8: ("int_val", "<b"),
    types_pb2.DT_UINT8: ("int_val", "<B"),
    types_pb2.DT_UINT16: ("int_val", "<H"),
    types_pb2.DT_UINT32: ("uint32_val", "<I"),
    types_pb2.DT_UINT64: ("uint64_val", "<Q"),
    types_pb2.DT_BOOL: ("bool_val", "<?"),
    types_pb2.DT_HALF: ("half_val", "<e"),
}


def is_event_file_name(name: str) -> bool:
    """TensorBoard's test (`io_wrapper.IsTensorFlowEventsFile`): the name holds "tfevents"."""
    return "tfevents" in name


def tensor_scalar(tensor) -> Optional[float]:
    """The one value of a `TensorProto` as a float, or None when it does not hold exactly
    one number (a vector, a string, an empty or malformed tensor)."""
    for dim in tensor.tensor_shape.dim:
        if dim.size != 1:
            return None
    spec = _FIELDS.get(tensor.dtype)
    if spec is not None:
        field, code = spec
        content = tensor.tensor_content
        if content:
            if len(content) != struct.calcsize(code):
                return None
            return float(struct.unpack(code, content)[0])
        vals = getattr(tensor, field)
        if len(vals) != 1:
            return None
        if tensor.dtype == types_pb2.DT_HALF:  # half_val holds the 16 bits of each half
            return float(struct.unpack("<e", struct.pack("<H", vals[0] & 0xFFFF))[0])
        return float(vals[0])
    if tensor.dtype == types_pb2.DT_BFLOAT16:  # the top 16 bits of a float32
        content = tensor.tensor_content
        if content:
            bits = struct.unpack("<H", content)[0] if len(content) == 2 else None
        else:
            bits = tensor.half_val[0] & 0xFFFF if len(tensor.half_val) == 1 else None
        return None if bits is None else float(struct.unpack("<f", struct.pack("<I", bits << 16))[0])
    try:  # anything rarer: TensorBoard's own conversion
        from tensorboard.util import tensor_util

        arr = tensor_util.make_ndarray(tensor)
        return float(arr.reshape(-1)[0]) if arr.size == 1 and arr.dtype.kind in "biuf" else None
    except Exception:  # a malformed tensor is no point, not a crash
        return None


POINT_BYTES = 24  # a point held: its step, wall time and value, 8 bytes each


class _Columns:
    """One tag's points from one file: three growable C arrays (8 bytes per number)."""

    __slots__ = ("steps", "wall_times", "values")

    def __init__(self) -> None:
        self.steps = array("q")
        self.wall_times = array("d")
        self.values = array("d")

    def nbytes(self) -> int:
        return 8 * (len(self.steps) + len(self.wall_times) + len(self.values))


class _File:
    """An event file of the run: its reader and its points, per tag."""

    __slots__ = ("reader", "columns")

    def __init__(self, reader: EventFileReader) -> None:
        self.reader = reader
        self.columns: Dict[str, _Columns] = {}


class RunScalars:
    """The scalars of one run (a folder of event files, or one event file).

    `poll()` reads what is new; `tags()`, `series(tag)`, `points`, `gaps`,
    `pending_bytes` and `memory_bytes()` describe what has been read. A file that
    shrank or was replaced is read again from its start (its old points dropped);
    a file that disappeared keeps the points read from it (TensorBoard does too).
    """

    def __init__(self, path: str | os.PathLike, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                 files: Optional[Callable[[], List[str]]] = None) -> None:
        self.path = os.fspath(path)
        # Who says which files are the run's: by default the folder's listing; a server
        # passes its logdir walk's, which leaves out links that point out of the logdir.
        self._list_files = files
        # Called with the number of points each batch added, before the next is read: a
        # server charges their memory as it grows, so a poll stops at its budget.
        self.on_points: Optional[Callable[[int], None]] = None
        self.name = display_name(os.path.basename(self.path.rstrip(os.sep)) or self.path)
        self.max_record_bytes = max_record_bytes
        self._files: Dict[str, _File] = {}  # by path; iterated in name order
        self._plugin: Dict[str, str] = {}  # tag -> plugin named by its first value's metadata
        self._series: Dict[str, Series] = {}  # concatenations, until the next poll adds points
        self.undecodable = 0  # records with a valid checksum that are not an `Event`
        self.restarted: List[str] = []  # files read again from the start by the last poll
        # Counts the polls that changed a series: an answer made from the series of one
        # generation (a server's encoded response) stays right until the next.
        self.generation = 0

    # -- reading ------------------------------------------------------------------------

    def event_files(self) -> List[str]:
        """The run's event files now, in name order (raises `TraceError` if the path
        cannot be listed)."""
        if self._list_files is not None:
            return list(self._list_files())
        try:
            if not os.path.isdir(self.path):
                if not os.path.lexists(self.path):
                    raise TraceError(f"cannot open {self.name}: no such file or folder")
                return [self.path]
            with os.scandir(self.path) as it:
                names = sorted(e.name for e in it if is_event_file_name(e.name) and e.is_file())
        except OSError as exc:
            raise TraceError(f"cannot list {self.name}: {exc.strerror or exc}") from None
        return [os.path.join(self.path, n) for n in names]

    def poll(self) -> int:
        """Read what was appended to the run's files since the last poll (and files
        that are new, or replaced: `restarted`); return the number of points read."""
        self.restarted = []
        added = 0
        for path in self.event_files():
            f = self._files.get(path)
            if f is None:
                f = self._files[path] = _File(EventFileReader(path, self.max_record_bytes))
            try:
                batches = f.reader.poll_batches()
            except TraceError:
                if path != self.path and not os.path.lexists(path):
                    continue  # deleted since the listing: its points stay, as TensorBoard keeps them
                raise
            if f.reader.restarted:  # another file, or a shorter one: its old points are not in it
                f.columns = {}
                self.restarted.append(f.reader.name)
            for batch in batches:
                n = self._digest(batch, f.columns)
                added += n
                if self.on_points is not None and n:
                    self.on_points(n)
        self._files = dict(sorted(self._files.items()))
        if added or self.restarted:
            self._series = {}
            self.generation += 1
        return added

    def _digest(self, payloads: List[bytes], columns: Dict[str, _Columns]) -> int:
        """Append the scalar points of `payloads` to `columns`; return how many. The hot
        loop: one C parse per record and as few attribute lookups as the protos allow."""
        parse = event_pb2.Event.FromString
        plugin = self._plugin
        added = 0
        for payload in payloads:
            try:
                event = parse(payload)
            except DecodeError:
                self.undecodable += 1
                continue
            if not event.HasField("summary"):
                continue
            step = event.step
            wall_time = event.wall_time
            for value in event.summary.value:
                kind = value.WhichOneof("value")
                if kind == "simple_value":
                    tag = value.tag
                    if plugin.setdefault(tag, SCALARS_PLUGIN) != SCALARS_PLUGIN:
                        continue
                    x = value.simple_value
                elif kind == "tensor":
                    tag = value.tag
                    name = plugin.get(tag)
                    if name is None:
                        name = plugin[tag] = value.metadata.plugin_data.plugin_name
                    if name != SCALARS_PLUGIN:
                        continue
                    x = tensor_scalar(value.tensor)
                    if x is None:
                        continue
                else:
                    if kind is not None:  # an image, histogram, audio: the tag is not a scalar
                        plugin.setdefault(value.tag, "")
                    continue
                col = columns.get(tag)
                if col is None:
                    col = columns[tag] = _Columns()
                col.steps.append(step)
                col.wall_times.append(wall_time)
                col.values.append(x)
                added += 1
        return added

    # -- what was read ------------------------------------------------------------------

    def tags(self) -> List[str]:
        """The scalar tags with at least one point, sorted."""
        return sorted({tag for f in self._files.values() for tag in f.columns})

    def series(self, tag: str) -> Series:
        """(steps int64, wall_times float64, values float64) of `tag`, in record order:
        files in name order, records in file order; read-only (cached). Empty arrays for
        an unknown tag."""
        got = self._series.get(tag)
        if got is None:
            parts = [f.columns[tag] for f in self._files.values() if tag in f.columns]
            if not parts:
                return np.empty(0, np.int64), np.empty(0, np.float64), np.empty(0, np.float64)
            got = (np.concatenate([np.frombuffer(c.steps, np.int64) for c in parts]),
                   np.concatenate([np.frombuffer(c.wall_times, np.float64) for c in parts]),
                   np.concatenate([np.frombuffer(c.values, np.float64) for c in parts]))
            for a in got:  # shared by every caller until the next poll
                a.flags.writeable = False
            self._series[tag] = got
        return got

    @property
    def readers(self) -> List[EventFileReader]:
        """The readers of the files read so far, in name order (each has its own
        `gaps`, `pending_bytes`, `records`)."""
        return [f.reader for f in self._files.values()]

    @property
    def points(self) -> int:
        return sum(len(c.steps) for f in self._files.values() for c in f.columns.values())

    @property
    def records(self) -> int:
        return sum(f.reader.records for f in self._files.values())

    @property
    def gaps(self) -> List[Gap]:
        """Every damaged region skipped so far, files in name order."""
        return [g for f in self._files.values() for g in f.reader.gaps]

    @property
    def new_gaps(self) -> List[Gap]:
        """The regions the last poll skipped."""
        return [g for f in self._files.values() for g in f.reader.new_gaps]

    @property
    def pending_bytes(self) -> int:
        """Bytes after the last complete record of each file (records being written)."""
        return sum(f.reader.pending_bytes for f in self._files.values())

    def memory_bytes(self) -> int:
        """What this holds, for the server's memory budget: the columns, the series
        handed out (cached), and a rough allowance per tag and file."""
        cols = sum(c.nbytes() + 200 + len(tag) for f in self._files.values() for tag, c in f.columns.items())
        cached = sum(a.nbytes + b.nbytes + v.nbytes for a, b, v in self._series.values())
        return cols + cached + 1000 * len(self._files) + 100 * len(self._plugin)


# ---- for the routes --------------------------------------------------------------------

TAG_ID_CHARS = 16  # hex digits of a tag's id: 64 bits of SHA-256, no collision among a run's tags in practice
JSON_CHUNK_POINTS = 1 << 16  # points encoded at a time: ~10 MB of Python objects, whatever the series' length
# What encoding holds besides its output: one chunk's tuples and floats (~150 bytes a
# point) and its text (~80 bytes a point).
JSON_WORK_BYTES = JSON_CHUNK_POINTS * 256


def tag_id(tag: str) -> str:
    """A tag's short, stable name for URLs: a 100,000-character tag does not fit in one
    (the server answers 414), its id always does. The same tag has the same id in every
    run and on every listing, so the dashboard can keep its choice across runs."""
    return hashlib.sha256(tag.encode("utf-8", "surrogatepass")).hexdigest()[:TAG_ID_CHARS]


def is_tag_id(text: str) -> bool:
    return len(text) == TAG_ID_CHARS and all(c in "0123456789abcdef" for c in text)


def series_summary(steps: np.ndarray, values: np.ndarray) -> dict:
    """What the panel's legend counts, over every point: kept points alone would count
    fewer NaNs and reversals (a step not above the one before it) than the series has."""
    nan = int(np.count_nonzero(np.isnan(values)))
    pos = int(np.count_nonzero(values == np.inf))
    neg = int(np.count_nonzero(values == -np.inf))
    reversals = int(np.count_nonzero(steps[1:] <= steps[:-1])) if len(steps) > 1 else 0
    return {"points": int(len(values)), "nan": nan, "pos_inf": pos, "neg_inf": neg, "reversals": reversals}


def _firsts(idx: np.ndarray, run_of: np.ndarray) -> np.ndarray:
    """Of sorted indices `idx`, the first one of each run (`run_of[i]` is i's run)."""
    if not idx.size:
        return idx
    r = run_of[idx]
    return idx[np.concatenate(([True], r[1:] != r[:-1]))]


def _keep(values: np.ndarray, finite: np.ndarray, starts: np.ndarray, n: int) -> np.ndarray:
    """Per run of records (`starts`: where each begins): its first and last record, its
    lowest and highest finite value, and its first non-finite one; sorted, unique."""
    brk = np.zeros(n, bool)
    brk[starts] = True
    run_of = np.cumsum(brk) - 1
    ends = np.concatenate((starts[1:], [n])) - 1
    lows = np.minimum.reduceat(np.where(finite, values, np.inf), starts)
    highs = np.maximum.reduceat(np.where(finite, values, -np.inf), starts)
    parts = [starts, ends,
             _firsts(np.flatnonzero(finite & (values == lows[run_of])), run_of),
             _firsts(np.flatnonzero(finite & (values == highs[run_of])), run_of),
             _firsts(np.flatnonzero(~finite), run_of)]
    return np.unique(np.concatenate(parts))


def m4_indices(steps: np.ndarray, values: np.ndarray, width: int) -> Optional[np.ndarray]:
    """The records of a series that a plot `width` pixels wide needs, in record order; None
    when it needs them all (at most 4 per column: the series is short enough as it is).

    The plot draws x = step in record order (a restart goes back). Consecutive records in
    the same pixel column of the steps' range, all finite or all not, form a run; each
    run keeps its first and last records and those with its lowest and highest values
    (M4): every column's vertical extent and its joins to the neighbours are those of
    the full polyline, every NaN/Inf stretch still leaves its gap. A series that goes
    back and forth so often that this keeps more than 5 per column is cut by record
    position instead (each of `width` equal stretches of records is a run, and also
    keeps its first non-finite record), so at most ~5 × `width` records are ever kept.
    """
    n = len(values)
    width = max(1, int(width))
    if n <= 4 * width:
        return None
    finite = np.isfinite(values)
    x = steps.astype(np.float64)
    lo, hi = float(x.min()), float(x.max())
    col = np.zeros(n, np.int64) if hi == lo else np.minimum(((x - lo) * width / (hi - lo)).astype(np.int64), width - 1)
    brk = np.empty(n, bool)
    brk[0] = True
    brk[1:] = (col[1:] != col[:-1]) | (finite[1:] != finite[:-1])
    keep = _keep(values, finite, np.flatnonzero(brk), n)
    if keep.size <= 5 * width:
        return keep
    starts = np.unique((np.arange(width, dtype=np.int64) * n) // width)
    return _keep(values, finite, starts, n)


def _json_floats(values: np.ndarray) -> list:
    out = values.tolist()
    for i in np.flatnonzero(~np.isfinite(values)).tolist():
        v = out[i]
        out[i] = "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    return out


def json_points(steps: np.ndarray, walls: np.ndarray, values: np.ndarray,
                chunk: int = JSON_CHUNK_POINTS) -> Iterator[str]:
    """`[[step, wall_time, value], …]` as strict JSON text, a chunk of points at a time (so
    encoding holds one chunk's Python objects, never the series'): a non-finite wall
    time or value is the string `"NaN"`, `"Infinity"` or `"-Infinity"`."""
    yield "["
    for a in range(0, len(steps), chunk):
        b = a + chunk
        text = json.dumps(list(zip(steps[a:b].tolist(), _json_floats(walls[a:b]), _json_floats(values[a:b]))),
                          separators=(",", ":"), allow_nan=False)
        yield ("," if a else "") + text[1:-1]
    yield "]"
