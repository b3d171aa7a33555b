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
"""

from __future__ import annotations

import os
import struct
from array import array
from typing import Callable, Dict, List, Optional, Tuple

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
