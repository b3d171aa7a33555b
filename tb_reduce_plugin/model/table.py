"""The one event model: a columnar table every input format converts into.

Per event (index = position in the input's event list): phase code, ts and dur in µs
(float64, NaN when absent), track id (an interned `(pid, tid)`) and name id; for the
few phases that need them a flow key, a binding-point flag and an instant scope;
and the category (`cat`) each event names. Counter samples live in a side table
(event, series, value), and so do step markers (event, step number: the events
carrying a `step_num` arg, as JAX's and TensorFlow's `StepTraceAnnotation` write), so
waveforms need not read the file again. Process and thread names (the `M` events)
are kept by pid and track. Slices (X and B/E pairs) with their per-track order and
nesting depth are derived in `slices`.

Columns are numpy arrays so reduction is vectorised; strings are interned once per
distinct value. The original JSON of each event is not held in memory: it is
reachable by index by streaming the file again (`writer`), which keeps memory
bounded by the columns (~30 bytes an event) rather than the trace.
"""

from __future__ import annotations

import codecs
import itertools
import math
import re
import sys
from dataclasses import dataclass, field
from enum import Enum
from operator import attrgetter
from typing import Any, Hashable, Iterable, Optional, Union

import msgspec
import numpy as np

from .. import scan_pieces
from ..native import scanner_module
from ..scan_pieces import PieceScanner
from .mapped import ColumnFiles, SpillFailed, map_array  # noqa: F401 (SpillFailed: the table's error too)

NAN = float("nan")


_PH_CODES = {chr(c): c for c in range(1, 128)}


def ph_codes(phs: list[str]) -> np.ndarray:
    """One byte per phase letter; 0 for a missing or unknown phase.

    Fast path: when every phase is one ASCII letter, joining them is one C call.
    """
    joined = "".join(phs)
    # Every phase one letter long: as many letters as phases, none empty (an empty
    # phase beside a two-letter one would otherwise pass the count).
    if len(joined) == len(phs) and joined.isascii() and (not phs or min(map(len, phs)) == 1):
        return np.frombuffer(joined.encode("ascii"), dtype=np.uint8).copy()
    return np.fromiter(map(_PH_CODES.get, phs, itertools.repeat(0)), dtype=np.uint8, count=len(phs))


PH_X, PH_B, PH_E, PH_M, PH_C = (ord(c) for c in "XBEMC")
FLOW_PHASES = tuple(ord(c) for c in "stf")
INSTANT_PHASES = tuple(ord(c) for c in "iIR")
SCOPE_THREAD, SCOPE_PROCESS, SCOPE_GLOBAL = 0, 1, 2


def ph_in(ph: np.ndarray, phases: tuple[int, ...]) -> np.ndarray:
    """Which events have one of `phases`: a lookup in a 256-entry table by the phase byte,
    some 4 times faster than `np.isin` over a trace's every event."""
    table = np.zeros(256, dtype=bool)
    table[list(phases)] = True
    return table[ph]


class ChromeEvent(msgspec.Struct, gc=False):
    """The fields reduction needs; everything else stays in the file."""

    ph: str = ""
    name: Union[str, int, float, None] = None
    cat: Union[str, None] = None
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    ts: float = NAN
    dur: float = NAN
    id: Union[int, str, None] = None
    id2: Any = None
    bp: Union[str, None] = None
    s: Union[str, None] = None
    args: msgspec.Raw = msgspec.Raw(b"null")  # decoded only for counters


class LenientEvent(msgspec.Struct, gc=False):
    """Fallback for blocks where some event has unusual types (rare, slow path)."""

    ph: Any = ""
    name: Any = None
    cat: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = NAN
    dur: Any = NAN
    id: Any = None
    id2: Any = None
    bp: Any = None
    s: Any = None
    args: Any = None


def _hashable(v: Any) -> Hashable:
    if v is None or isinstance(v, (str, int, float)):
        return v
    return msgspec.json.encode(v).decode()


def _number(v: Any) -> float:
    if isinstance(v, bool):
        return NAN
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return NAN
    return NAN


def normalise(ev: LenientEvent) -> ChromeEvent:
    """Coerce an event with odd types into the typed form (unknowns become absent)."""
    return ChromeEvent(
        ph=ev.ph if isinstance(ev.ph, str) else "",
        name=_hashable(ev.name),
        cat=ev.cat if isinstance(ev.cat, str) else (None if ev.cat is None else str(_hashable(ev.cat))),
        pid=_hashable(ev.pid) if not isinstance(ev.pid, float) else str(ev.pid),
        tid=_hashable(ev.tid) if not isinstance(ev.tid, float) else str(ev.tid),
        ts=_number(ev.ts),
        dur=_number(ev.dur),
        id=_hashable(ev.id) if not isinstance(ev.id, float) else str(ev.id),
        id2=ev.id2,
        bp=ev.bp if isinstance(ev.bp, str) else None,
        s=ev.s if isinstance(ev.s, str) else None,
        args=msgspec.Raw(msgspec.json.encode(ev.args)),
    )


# ---- undecodable text ------------------------------------------------------------
# One rule wherever bytes become text, so a string looks the same in an event's name,
# a summary's `top`, a kept event's JSON, its args and the `event` route: invalid UTF-8
# is replaced as `bytes.decode("utf-8", "replace")` does (one U+FFFD per maximal invalid
# sequence), and a JSON escape of a lone surrogate (which no UTF-8 can hold, and which
# msgspec and orjson refuse) becomes `\ufffd`. Valid text is never touched.

# A `\u` escape that starts a surrogate, not itself escaped (an even run of backslashes
# before it): group 2 a high surrogate, group 3 the low one that completes it.
_SURROGATE_ESCAPE = re.compile(
    rb"(?<!\\)((?:\\\\)*)\\u(?:([dD][89abAB][0-9a-fA-F]{2})(\\u[dD][c-fC-F][0-9a-fA-F]{2})?"
    rb"|[dD][c-fC-F][0-9a-fA-F]{2})"
)
_ESCAPE_LEN = 12  # a surrogate pair's two escapes: what a held-back end may need


def clean_json_text(data: bytes, final: bool = True) -> tuple[bytes, int]:
    """`data` (JSON text from a value's start) with undecodable text replaced by U+FFFD.

    Returns the text and how many bytes of `data` it stands for. With `final` False
    (more bytes follow) an incomplete character at the end is not consumed and a high
    surrogate escape near the end is kept, for the caller to see again completed.
    Returns `data` itself when nothing needed replacing. C speed: one decode (skipped
    for ASCII), one substring test, and a regex callback per surrogate escape only.
    """
    text, used = data, len(data)
    if not data.isascii():
        decoded, used = codecs.utf_8_decode(data, "replace", final)
        text = decoded.encode()
    if b"\\u" in text:
        hold = len(text) if final else len(text) - _ESCAPE_LEN

        def fix(m: re.Match) -> bytes:
            if m.group(3) or (m.group(2) and m.end() > hold):
                return m.group(0)  # a pair, or maybe the start of one
            return m.group(1) + b"\\ufffd"

        text = _SURROGATE_ESCAPE.sub(fix, text)
    if text is not data and text == memoryview(data)[:used]:
        return data, len(data)  # nothing replaced (an incomplete end is not a change)
    return text, used


def valid_utf8(data: bytes) -> bytes:
    """`data` when it is valid UTF-8 (checked at C speed), else with the invalid bytes
    replaced by U+FFFD: for bytes copied from an input into output JSON."""
    if data.isascii():
        return data
    try:
        codecs.utf_8_decode(data, "strict", True)
    except UnicodeDecodeError:
        return codecs.utf_8_decode(data, "replace", True)[0].encode()
    return data


_typed = msgspec.json.Decoder(list[ChromeEvent], strict=False)
_typed_one = msgspec.json.Decoder(ChromeEvent, strict=False)
_raw_list = msgspec.json.Decoder(list[msgspec.Raw])
_one_lenient = msgspec.json.Decoder(LenientEvent, strict=False)


def _lenient_one(raw: msgspec.Raw) -> ChromeEvent:
    try:
        return normalise(_one_lenient.decode(raw))
    except msgspec.ValidationError:  # not an object: an event with no fields
        return ChromeEvent()


def decode_events(text: bytes) -> list[ChromeEvent]:
    """Decode a block `[...]` of events; blocks with odd types take a slow path.

    Raises `msgspec.DecodeError` only when the text is not a JSON array, which is
    what the block reader needs to tell a wrong cut from a bad event.
    """
    try:
        return _typed.decode(text)
    except msgspec.ValidationError:
        pass
    return [_lenient_one(r) for r in _raw_list.decode(text)]


def time_span(ph: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> tuple[float, float]:
    """First time and last end of these rows' timed events (`M` aside; an `X` ends at its
    time plus its duration, NaN or negative as 0): (inf, -inf) when none is timed. Min and
    max, so the span of a table is that of its blocks' spans."""
    ok = ~np.isnan(ts) & (ph != PH_M)
    if not ok.any():
        return math.inf, -math.inf
    ts = ts[ok]
    dur = np.where(ph[ok] == PH_X, np.maximum(np.nan_to_num(dur[ok], nan=0.0), 0.0), 0.0)
    with np.errstate(over="ignore"):  # an end past the largest float is inf: refused by the plan, in words
        return float(ts.min()), float((ts + dur).max())


def _finite(x: np.ndarray) -> np.ndarray:
    """An infinite time (1e400 in the file) is as good as none: NaN."""
    x[np.isinf(x)] = NAN
    return x


class Interner:
    """Maps hashable values to dense ids, in first-seen order."""

    def __init__(self) -> None:
        self.ids: dict[Hashable, int] = {}
        self.values: list[Hashable] = []

    def ids_of(self, values: Iterable[Hashable]) -> np.ndarray:
        """Ids of `values`; runs in C except for the loop over new distinct values.

        `setdefault` with a counter stores, for a new value, BIG + the index of its
        first occurrence, so new values are found and densified with numpy.
        """
        vals = values if isinstance(values, list) else list(values)
        big = 1 << 40
        raw = np.fromiter(map(self.ids.setdefault, vals, itertools.count(big)), dtype=np.int64, count=len(vals))
        fresh = raw >= big
        if fresh.any():
            firsts = np.unique(raw[fresh])
            start = len(self.values)
            keys = [vals[i] for i in (firsts - big).tolist()]
            for rank, key in enumerate(keys):
                self.ids[key] = start + rank
            self.values.extend(keys)
            raw[fresh] = start + np.searchsorted(firsts, raw[fresh])
        return raw.astype(np.int32)

    def __len__(self) -> int:
        return len(self.values)


def _counter_items(raw: msgspec.Raw) -> list[tuple[str, float]]:
    try:
        args = msgspec.json.decode(raw)
    except msgspec.DecodeError:  # undecodable text in the args (a Raw is not checked): replace, as the writer does
        try:
            args = msgspec.json.decode(clean_json_text(bytes(raw))[0])
        except msgspec.DecodeError:
            return []
    if not isinstance(args, dict):
        return []
    out = []
    for k, v in args.items():
        x = _number(v) if not isinstance(v, str) else NAN
        if x == x:
            out.append((k, x))
    return out


_STEP_KEY = b'"step_num"'
_NAME_METADATA = ("process_name", "thread_name")


def step_number(value: Any) -> float:
    """A `step_num` as written (an int, or a string of digits as JAX's JSON has it); NaN otherwise."""
    x = _number(value)
    return x if x == x and abs(x) < 2**53 else NAN


def _args_dict(raw: msgspec.Raw) -> dict:
    try:
        args = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        try:
            args = msgspec.json.decode(clean_json_text(bytes(raw))[0])
        except msgspec.DecodeError:
            return {}
    return args if isinstance(args, dict) else {}


@dataclass
class EventTable:
    """Columns of one trace, plus interned strings and counter samples."""

    ph: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    track: np.ndarray
    name: np.ndarray
    flow_key: np.ndarray  # -1 unless a flow event
    bind_enclosing: np.ndarray  # bool: flow event binds to an enclosing slice
    scope: np.ndarray  # instant scope kind
    tracks: list  # track id -> (pid, tid)
    names: list
    counter_event: np.ndarray
    counter_series: np.ndarray
    counter_value: np.ndarray
    series: list  # series id -> (pid, name, id, key)
    block_events: list[int] = field(default_factory=list)
    block_bytes: list[int] = field(default_factory=list)
    cat: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))  # id into `cats`
    cats: list = field(default_factory=lambda: [None])
    step_event: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # sorted event indices
    step_value: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float64))  # their step_num
    process_names: dict = field(default_factory=dict)  # pid -> name (`process_name` metadata)
    thread_names: dict = field(default_factory=dict)  # track id -> name (`thread_name` metadata)
    # What planning and the queries prepare on this table (`prepared.Prepared`, made on first use).
    prepared: Any = field(default=None, repr=False, compare=False)
    # A folder where the biggest prepared arrays are written and mapped instead of held
    # (`mapped.spill`); its owner (the index) removes it. None: they are held in memory.
    scratch: Optional[str] = field(default=None, repr=False, compare=False)
    # First time and last end of its timed events (`time_span`), found while it was built
    # (a block at a time, as they came); None: not known (`plan.default_window` reads them).
    span: Optional[tuple[float, float]] = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.cat) != len(self.ph):  # a format without categories: every event's is None
            self.cat = np.zeros(len(self.ph), dtype=np.int32)
            self.cats = [None]

    def __len__(self) -> int:
        return len(self.ph)

    def track_pid(self) -> np.ndarray:
        """Dense id of each track's pid (for process-scoped instants)."""
        return Interner().ids_of([t[0] for t in self.tracks])


# The native scanner's columns, in the order `_scan.Scanner.scan` takes them.
_SCAN_COLUMNS = (("ph", np.uint8), ("ts", np.float64), ("dur", np.float64), ("name", np.int32),
                 ("cat", np.int32), ("pid", np.int32), ("tid", np.int32), ("flow", np.int32),
                 ("flags", np.uint8), ("scope", np.uint8), ("start", np.int64), ("end", np.int64))
_WHOLE_PHASES = (PH_C, PH_M)
_TOO_FEW_ROWS = -3  # `Scanner.scan`: the block holds more events than the columns have rows


@dataclass
class ScannedBlock:
    """A block read by the native scanner: its columns (`_SCAN_COLUMNS`, one row per
    event) and, decoded, the few events the table needs whole: counters, metadata and
    those whose text names `step_num`. Holds no view of the reader's buffer."""

    n: int
    cols: dict
    raw: dict  # event index in the block -> ChromeEvent, in event order
    charged: int = 0  # what the builder's account was charged for `raw` (released once added)

    def __len__(self) -> int:
        return self.n


_FLAG_BIND_END, _FLAG_STEP_KEY = 1, 2  # the scanner's flags column (see `_scan.c`)


def _whole_rows(cols: dict) -> list[int]:
    """The events of a scanned block the table reads whole: counters, metadata, and slices
    whose args have a `step_num` key."""
    ph = cols["ph"]
    step = ((cols["flags"] & _FLAG_STEP_KEY) != 0) & ((ph == PH_X) | (ph == PH_B))
    return np.flatnonzero(np.isin(ph, _WHOLE_PHASES) | step).tolist()


def _raw_events(text: Any, cols: dict, want: list[int]) -> dict:
    """Decode (from their own bytes) the events `want` of a scanned block, as the pure path
    would have decoded them."""
    start, end = cols["start"], cols["end"]
    return {i: _typed_one.decode(text[start[i]:end[i]]) for i in want}


# What decoding an event into Python objects can hold (~270 bytes measured for tiny ones):
# charged before a block is decoded by the pure path (bounded by its `{` bytes), and for
# each event a scanned block decodes whole.
DECODED_EVENT_BYTES = 288


# What one interned value costs besides its object: a dict slot and a list slot.
_INTERNED_OVERHEAD = 104
# Of it, what the maps from value to id hold in their tables (index and entry at their
# load): freed for good when a table is built. Their int ids (pymalloc's) are left
# counted: those pages sit among the strings' and do not go back to the system.
_MAP_SLOT = 48
# A flow key no scan gives an id to (`TableBuilder._other_flows`): its tuple, its id, a
# bound on its value (an id2 object, a float, a big int); besides `_INTERNED_OVERHEAD`.
_OTHER_FLOW_BYTES = 56 + 28 + 64
# A counter sample kept in Python lists until `build`: an int, a series id, a float.
_COUNTER_ROW_BYTES = 3 * 8 + 56


# The dtype of each column as both readers make it; spilled blocks are written as these.
SPILL_DTYPES = {"ph": np.uint8, "ts": np.float64, "dur": np.float64, "track": np.int32, "name": np.int32,
                "flow_key": np.int32, "bind": np.bool_, "scope": np.uint8, "cat": np.int32}
# The column files' names: the event table's field names (the index store keeps them so).
SPILL_FILES = {"ph": "ph.npy", "ts": "ts.npy", "dur": "dur.npy", "track": "track.npy", "name": "name.npy",
               "flow_key": "flow_key.npy", "bind": "bind_enclosing.npy", "scope": "scope.npy", "cat": "cat.npy"}


class ArgsPolicy(Enum):
    """What is written of a kept event's args (docs/SEMANTICS.md, "Args by level"; each level's
    is `reduce.levels.args_policy`): here because the formats' event sources write events too.

    `M` events are written unchanged under every policy (G6).
    """

    KEEP = "keep"  # levels 0 and 1: args as the input holds them
    TRIM = "trim"  # level 2: strings cut to 256 characters, lists to 32 items, at any depth,
    #                and "tb_reduce.cut": true added to the args when anything was cut
    DROP = "drop"  # levels 3 and 4, and any level asked without args: args removed, except
    #                on `C` events (a counter's args are its values) and the flow binding
    #                keys bind_id, flow_in, flow_out


class TableBuilder:
    """Accumulates decoded blocks into columns without per-event Python code.

    With an `account` (see `budget`), each block charges what it adds — its columns,
    its new interned strings, its counter samples — so a trace that needs more memory
    than promised stops at the block that crosses the line, not after.
    """

    def __init__(self, account: Any = None, spill_dir: Optional[str] = None) -> None:
        """`spill_dir`: write the columns there block by block (`.npy` files, memory-mapped
        by `build`) instead of holding them: what ingesting holds in memory then grows with
        a block and the distinct strings, not with the trace."""
        self._account = account
        columns = ("ph", "ts", "dur", "track", "name", "flow_key", "bind", "scope", "cat")
        self._cols: dict[str, list[np.ndarray]] = {k: [] for k in columns}
        self._spill = ColumnFiles(spill_dir, SPILL_FILES, SPILL_DTYPES, "the event table") if spill_dir is not None else None
        self._last_track = np.zeros(0, dtype=np.int32)
        self._tracks = Interner()
        self._pids = Interner()
        self._tids = Interner()
        self._names = Interner()
        self._flows = Interner()  # without the native scanner (with it: its own table, `_flow_ids`)
        self._other_flows: dict = {}  # flow keys no scan gives ids to, beside the scanner's (`_flow_ids`)
        self._series = Interner()
        self._cats = Interner()
        self._cats.ids_of([None])  # id 0: no category
        self._steps: list[tuple[int, float]] = []
        self._span = (math.inf, -math.inf)  # the table's `span` so far
        self._process_names: dict = {}
        self._thread_names: dict = {}
        self._c_event: list[int] = []
        self._c_series: list[int] = []
        self._c_value: list[float] = []
        self._n = 0
        self._sizes: dict[int, list[int]] = {}
        self._col_bytes = 0
        self._charged = 0  # what `_charge_held` has charged to the account so far
        self.block_events: list[int] = []
        self.block_bytes: list[int] = []
        self._scanner: Any = None
        self._pieces: Optional[PieceScanner] = None  # two threads' private scanners (two cores), see `scan_pieces`
        self._pieces_done = False  # no pieces for this builder: one core
        self._scan_rows = 0
        self._scan_cols: dict[str, np.ndarray] = {}
        self._density = 0.0  # the most events a byte a scanned block held (`scan` sizes columns by it)

    def scan(self, text: Any, rows: Optional[int] = None) -> Optional[ScannedBlock]:
        """The block `[...]` read by the native scanner into columns, interning into
        this builder's interners; None when the scanner is off or leaves the block to
        `decode_events` (anything but the plain case: see `_scan.c`). `rows`: at least
        the `{` bytes in `text`, when the caller counted them already (an event opens
        one); a count too small makes the scanner hand the block back, never misread it.
        Without a count, the columns are sized from the densest block so far (events a
        byte) and a quarter more, and only a block that holds more is counted and scanned
        again (the first block is counted): the count is a pass over every byte on the
        thread that scans (0.2 s at 2 GiB), the guess misses on few blocks of a trace."""
        module = scanner_module()
        if module is None or self._native_scanner(module) is None:
            return None
        counted = rows is not None
        if rows is None:
            rows = int(len(text) * self._density * 1.25) + 64 if self._density else module.braces(text)
        n, cols = self._scan_sized(module, text, max(rows, 1))
        if n == _TOO_FEW_ROWS and not counted:
            n, cols = self._scan_sized(module, text, max(module.braces(text), 1))
        # The strings it interned (even from a block it hands back) are held from now on:
        # charged at this block, while the reader still holds the block's decoding charge.
        self._charge_held("the names and other strings of the event table")
        if n < 0:
            return None
        self._density = max(self._density, n / max(len(text), 1))
        want = _whole_rows(cols)
        charged = DECODED_EVENT_BYTES * len(want) if self._account is not None else 0
        if charged:  # a block of counters decodes each: no longer under the reader's charge
            self._account.charge(charged, "the events of one block read whole")
        return ScannedBlock(n, cols, _raw_events(text, cols, want), charged)

    def _scan_sized(self, module: Any, text: Any, rows: int) -> tuple[int, dict[str, np.ndarray]]:
        """One scan of `text` into columns of `rows` rows at least (in pieces, on two
        threads at once, where it may): the events and their columns, or a code (`_scan.c`) and none."""
        if self._scan_rows < rows:  # columns reused from block to block: no fresh pages per block
            self._scan_rows = max(rows, 2 * self._scan_rows)
            self._scan_cols = {k: np.empty(self._scan_rows, dtype=d) for k, d in _SCAN_COLUMNS}
        pieces = self._pieces_for(module, text)
        got = pieces.scan(text, self._scanner, self._scan_cols, rows, _SCAN_COLUMNS) if pieces else None
        if got is not None:
            return got
        n = self._scanner.scan(text, *self._scan_cols.values())
        return n, ({k: v[:n].copy() for k, v in self._scan_cols.items()} if n >= 0 else {})

    def _native_scanner(self, module: Any) -> Any:
        """The builder's scanner, made at its first use. Its flow keys are its own (bytes in
        its table, no Python value each: `flow_ids` gives blocks the pure path decoded ids
        from the same table), so it is made only before any flow key was interned in
        Python; a builder that began without the extension goes on without it."""
        if self._scanner is None and not len(self._flows):
            i = (self._names, self._cats, self._pids, self._tids)
            self._scanner = module.Scanner(i[0].ids, i[0].values, i[1].ids, i[1].values, i[2].ids, i[2].values,
                                           i[3].ids, i[3].values)
        return self._scanner

    def _flow_ids(self, cats: np.ndarray, cat_values: list, ids: list) -> np.ndarray:
        """Flow key ids of decoded events, (category, id) each: first met, first numbered,
        in the scanner's table when there is one (`_native_scanner`), else the interner's."""
        scanner, module = self._scanner, scanner_module()
        if scanner is None and module is not None:
            scanner = self._native_scanner(module)
        if scanner is None:
            return self._flows.ids_of(list(zip(cat_values, ids)))
        out = np.empty(len(ids), dtype=np.int32)
        scanner.flow_ids(np.ascontiguousarray(cats, dtype=np.int32), ids, self._other_flows, out)
        return out

    def _pieces_for(self, module: Any, text: Any) -> Optional[PieceScanner]:
        """The private scanners of two threads, for a block big enough to cut into pieces
        on a machine with two cores."""
        if self._pieces_done or len(text) < scan_pieces.SPLIT_FROM_BYTES:
            return None
        if self._pieces is None:
            if scan_pieces.usable_cores() < 2:
                self._pieces_done = True
                return None
            i = (self._names, self._cats, self._pids, self._tids)
            self._pieces = PieceScanner(module, i)
        return self._pieces

    def add(self, events: Union[list[ChromeEvent], ScannedBlock], nbytes: int = 0) -> None:
        n = len(events)
        if not n:
            return
        seen = {k: len(v) for k, v in self._cols.items()}
        if isinstance(events, ScannedBlock):
            self._add_scanned(events, nbytes)
            if events.charged and self._account is not None:  # its events read whole are done with
                self._account.release(events.charged)
                events.charged = 0
        else:
            self._add(events, nbytes)
        self._col_bytes += sum(a.nbytes for k, parts in self._cols.items() for a in parts[seen[k]:])
        self._charge_held("the event table")

    def _charge_held(self, what: str) -> None:
        """Charge what the builder holds beyond what it has charged so far.

        A ledger of its own rather than a before/after difference per call: the native
        scanner interns a block's strings while the reader decodes it, before `add`
        sees the block, so a difference taken in `add` would never count them (5 M
        distinct names held 4.6 GB under a 2 GB budget)."""
        if self._account is None:
            return
        held = self._held()
        if held > self._charged:
            self._account.charge(held - self._charged, what)
            self._charged = held

    def _held(self) -> int:
        """Bytes the builder holds: columns, interned values (strings by their size), samples."""
        interned = 0
        for interner in (self._tracks, self._pids, self._tids, self._names, self._flows, self._series, self._cats):
            interned += self._interned_bytes(interner)
        scanner = self._scanner.cache_bytes() + 62 * self._scan_rows if self._scanner is not None else 0
        if self._pieces is not None:
            scanner += self._pieces.held_bytes()
        others = (_INTERNED_OVERHEAD + _OTHER_FLOW_BYTES) * len(self._other_flows)
        return self._col_bytes + interned + scanner + others + _COUNTER_ROW_BYTES * len(self._c_event)

    def _interned_bytes(self, interner: Interner) -> int:
        """Size of an interner's values, measured once per value (new ones only)."""
        sizes = self._sizes.setdefault(id(interner), [0, 0])  # [values measured, their bytes]
        done, total = sizes
        if done < len(interner.values):
            new = interner.values[done:]
            total += sum(map(sys.getsizeof, new)) + _INTERNED_OVERHEAD * len(new)
            sizes[:] = [len(interner.values), total]
        return total

    def _add(self, events: list[ChromeEvent], nbytes: int) -> None:
        n = len(events)
        ph = ph_codes(list(map(attrgetter("ph"), events)))
        ts = np.fromiter(map(attrgetter("ts"), events), dtype=np.float64, count=n)
        dur = np.fromiter(map(attrgetter("dur"), events), dtype=np.float64, count=n)
        pid = self._pids.ids_of(list(map(attrgetter("pid"), events)))
        tid = self._tids.ids_of(list(map(attrgetter("tid"), events)))
        name = self._names.ids_of(map(attrgetter("name"), events))
        cat = self._cats.ids_of(map(attrgetter("cat"), events))
        flow_key = np.full(n, -1, dtype=np.int32)
        bind = np.zeros(n, dtype=bool)
        scope = np.zeros(n, dtype=np.uint8)
        flows = np.flatnonzero(np.isin(ph, FLOW_PHASES)).tolist()
        if flows:
            evs = [events[i] for i in flows]
            ids = list(map(attrgetter("id"), evs))
            for j in [j for j, v in enumerate(ids) if v is None]:  # id2 stands in for a missing id
                ids[j] = _hashable(evs[j].id2)
            flow_key[flows] = self._flow_ids(cat[flows], list(map(attrgetter("cat"), evs)), ids)
            bind[flows] = (ph[flows] != ord("f")) | (np.array(list(map(attrgetter("bp"), evs)), dtype=object) == "e")
        instants = np.flatnonzero(np.isin(ph, INSTANT_PHASES)).tolist()
        if instants:
            kinds = {"g": SCOPE_GLOBAL, "p": SCOPE_PROCESS}
            scope[instants] = [kinds.get(events[i].s, SCOPE_THREAD) for i in instants]
        base = self._n
        self._columns(ph, ts, dur, pid, tid, name, cat, flow_key, bind, scope, nbytes)
        self._find_steps(events, ph, base)
        self._find_names(events, ph, self._last_track)
        self._find_counters(((i, events[i]) for i in np.flatnonzero(ph == PH_C).tolist()), base)

    def _add_scanned(self, block: ScannedBlock, nbytes: int) -> None:
        """The native scanner's columns: what `_add` computes from decoded events, and
        the few events the table needs whole (counters, metadata, step markers)
        decoded from their bytes, as the pure path decodes them."""
        c = block.cols
        ph = c["ph"]
        bind = ((c["flags"] & _FLAG_BIND_END) != 0) | (ph != ord("f"))
        bind &= c["flow"] >= 0
        base = self._n
        self._columns(ph, c["ts"], c["dur"], c["pid"], c["tid"], c["name"], c["cat"], c["flow"], bind, c["scope"],
                      nbytes)
        raw = block.raw
        steps = [(i, ev) for i, ev in raw.items() if ph[i] in (PH_X, PH_B) and _STEP_KEY in bytes(ev.args)]
        for i, ev in steps:
            self._step_of(base + i, ev)
        track = self._last_track
        for i, ev in raw.items():
            if ph[i] == PH_M:
                self._name_of(ev, int(track[i]))
        self._find_counters(((i, ev) for i, ev in raw.items() if ph[i] == PH_C), base)

    def _columns(self, ph: np.ndarray, ts: np.ndarray, dur: np.ndarray, pid: np.ndarray, tid: np.ndarray,
                 name: np.ndarray, cat: np.ndarray, flow_key: np.ndarray, bind: np.ndarray, scope: np.ndarray,
                 nbytes: int) -> None:
        """Append one block's columns (raw `ts`/`dur`: infinities become NaN here)."""
        n = len(ph)
        self._n += n
        self.block_events.append(n)
        self.block_bytes.append(nbytes)
        self._last_track = self._track_ids(pid, tid)
        block = {"ph": ph, "ts": _finite(ts), "dur": _finite(dur), "track": self._last_track, "name": name,
                 "cat": cat, "flow_key": flow_key, "bind": bind, "scope": scope}
        t0, t1 = time_span(ph, block["ts"], block["dur"])
        self._span = (min(self._span[0], t0), max(self._span[1], t1))
        if self._spill is not None:
            self._spill.append(block)
            return
        for key, values in block.items():
            self._cols[key].append(values)

    def _find_counters(self, counters: Iterable[tuple[int, ChromeEvent]], base: int) -> None:
        """Counter samples: one row per numeric arg of each `C` event with a time."""
        rows = [
            (base + i, (_hashable(ev.pid), ev.name, _hashable(ev.id), key), value)
            for i, ev in counters
            if ev.ts == ev.ts
            for key, value in _counter_items(ev.args)
        ]
        if rows:
            self._c_event.extend(r[0] for r in rows)
            self._c_series.extend(self._series.ids_of([r[1] for r in rows]).tolist())
            self._c_value.extend(r[2] for r in rows)

    def _find_steps(self, events: list[ChromeEvent], ph: np.ndarray, base: int) -> None:
        """Slices whose args hold a `step_num` (step markers): one C search over the
        block's args joined, and a look at each event only where the key occurs."""
        args = list(map(attrgetter("args"), events))
        joined = b"\x00".join(args)
        at = joined.find(_STEP_KEY)
        if at < 0:
            return
        ends = np.cumsum(np.fromiter(map(len, args), dtype=np.int64, count=len(args)) + 1)
        seen = -1
        while at >= 0:
            i = int(np.searchsorted(ends, at, side="right"))
            if i != seen and ph[i] in (PH_X, PH_B):
                seen = i
                self._step_of(base + i, events[i])
            at = joined.find(_STEP_KEY, at + 1)

    def _step_of(self, index: int, ev: ChromeEvent) -> None:
        value = step_number(_args_dict(ev.args).get("step_num"))
        if value == value:
            self._steps.append((index, value))

    def _find_names(self, events: list[ChromeEvent], ph: np.ndarray, track: np.ndarray) -> None:
        """Process and thread names from the block's `M` events (few: one per track)."""
        for i in np.flatnonzero(ph == PH_M).tolist():
            self._name_of(events[i], int(track[i]))

    def _name_of(self, ev: ChromeEvent, track: int) -> None:
        if ev.name not in _NAME_METADATA:
            return
        name = _args_dict(ev.args).get("name")
        if not isinstance(name, str):
            return
        if ev.name == "process_name":
            self._process_names[_hashable(ev.pid)] = name
        else:
            self._thread_names[track] = name

    def _track_ids(self, pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
        """Track ids without building a (pid, tid) tuple per event: pids and tids are
        interned apart, then only the distinct pairs of the block, in sorted order. A
        trace writes a thread's events together (28 runs in a 16 MB Kineto block of 46 k
        events), so the pairs are found among the runs' first events (a sort of 46 k
        keys was 1.3 ms a block, 0.12 s at 2 GiB on the thread that scans)."""
        key = (pid.astype(np.int64) << 32) | tid.astype(np.int64)
        if not len(key):
            return self._tracks.ids_of([])
        heads = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
        pairs, inverse = np.unique(key[heads], return_inverse=True)
        keys = [(self._pids.values[p >> 32], self._tids.values[p & 0xFFFFFFFF]) for p in pairs.tolist()]
        return np.repeat(self._tracks.ids_of(keys)[inverse.reshape(-1)], np.diff(np.append(heads, len(key))))

    def build(self) -> EventTable:
        # The scanner's hash tables and key arena (as big as the names again) and its
        # reused columns are done with: freed and given back before the table is assembled.
        scanner = self._held()
        self._scanner, self._scan_cols, self._scan_rows, self._other_flows = None, {}, 0, {}
        scanner -= self._held()
        if self._account is not None and scanner > 0:
            self._account.release(scanner)
            self._charged -= scanner
        # the widest column, copied once while its parts still exist (spilled: mapped, no copy)
        assembling = 8 * self._n if self._spill is None else 0
        if self._account is not None:
            self._account.charge(assembling + _COUNTER_ROW_BYTES * len(self._c_event), "assembling the event table")

        spilled = self._spill.finish(self._n) if self._spill is not None else {}

        def cat(key: str, dtype: Any) -> np.ndarray:
            if key in spilled:
                return spilled[key]
            # Column by column, dropping the parts at once: peak memory is the
            # table plus one column, not twice the table.
            parts = self._cols.pop(key)
            out = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
            parts.clear()
            return out

        table = EventTable(
            ph=cat("ph", np.uint8),
            ts=cat("ts", np.float64),
            dur=cat("dur", np.float64),
            track=cat("track", np.int32),
            name=cat("name", np.int32),
            flow_key=cat("flow_key", np.int32),
            bind_enclosing=cat("bind", bool),
            scope=cat("scope", np.uint8),
            tracks=self._tracks.values,
            names=self._names.values,
            counter_event=np.asarray(self._c_event, dtype=np.int64),
            counter_series=np.asarray(self._c_series, dtype=np.int64),
            counter_value=np.asarray(self._c_value, dtype=np.float64),
            series=self._series.values,
            block_events=self.block_events,
            block_bytes=self.block_bytes,
            cat=cat("cat", np.int32),
            cats=self._cats.values,
            step_event=np.asarray([e for e, _ in self._steps], dtype=np.int64),
            step_value=np.asarray([v for _, v in self._steps], dtype=np.float64),
            process_names=dict(self._process_names),
            thread_names=dict(self._thread_names),
            span=self._span,
        )
        # The table keeps the interned values (their lists, handed over), not the maps from
        # value to id: their tables are freed here rather than counted as long as the
        # table lives (`_MAP_SLOT`).
        interners = (self._tracks, self._pids, self._tids, self._names, self._flows, self._series, self._cats)
        maps = sum(_MAP_SLOT * len(i.values) for i in interners)
        for interner in interners:
            interner.ids = {}
        if self._account is not None:
            self._account.release(maps + assembling)
        return table

