"""Reducing one trace file: index (pass 1) → plan → write (pass 2).

A pure function of (file bytes, level, window) → bytes (SPEC §6b), so surfaces can
cache it and pools can run it per host. `index_file` is the cacheable artefact.
"""

from __future__ import annotations

import io
import mmap
import os
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Callable, Optional, Union

import msgspec
import numpy as np

from .. import FORMAT_VERSION
from ..budget import Account, MemoryBudget, Unlimited, release_free_memory
from ..errors import FileChanged, TraceError
from ..formats import ReadOptions, reader_for, sniff
from ..formats.sources import DEFAULT_MAX_INFLATED_BYTES, DEFAULT_MAX_RATIO, FileIdentity, TraceStream
from ..index.prepared import Prepared, prepared_of
from ..model.mapped import faults, held_bytes, spill
from ..model.sorting import sample_bytes
from ..model.table import INSTANT_PHASES, EventTable, valid_utf8
from ..waveforms import steps as steps_module
from ..waveforms.memory import MEMORY_EVENT, MemorySamples, counter_points, peak_per_step
from ..waveforms.steps import StepSeries, derive
from .levels import LEVELS, ArgsPolicy, args_policy
from .plan import Plan, check_window, default_window, events_in_window, plan, plan_within, slices_bytes
from .points import instant_count
from .shared import CHUNK_EVENTS, CHUNK_SLICES
from .summaries import FOLD_THREADS
from .writer import EventSource, Sink, atomic_output, write_trace

Level = Union[int, str]
Progress = Callable[[int, int], None]
BUDGET_EVENTS = 500_000
BUDGET_BYTES = 64 * 1024 * 1024
# Memory of one plan at its peak (see `reduction_bytes`), measured with tracemalloc on
# traces of one kind of event each (`test_plan_memory`, bench/README.md "plan memory"):
# flags per event and per slice (5-12 B an event measured with chunks of 4,096), per
# counter sample (83 B: its series' buckets are sorted whole) and per instant (~60 B
# when every instant is the first of its bucket), plus what one chunk holds: a chunk of
# a track's slices (`shared.CHUNK_SLICES` at most, 70-72 B a slice measured: ~19 MB;
# one per thread folding tracks, `summaries.FOLD_THREADS`)
# and a chunk of events while the per-event flags, the slices and the flow binding are
# made (`shared.CHUNK_EVENTS`, ~75 B an event of one chunk). The summaries are charged
# as they are made.
PLAN_BYTES_PER_EVENT = 12
PLAN_BYTES_PER_SAMPLE = 96
PLAN_BYTES_PER_INSTANT = 64
PLAN_BYTES_PER_CHUNK_SLICE = 80
PLAN_BYTES_PER_CHUNK_EVENT = 96
# A table's first plan also prepares the state every plan shares (the slices, their
# order, the masks, the flow binding) and keeps it: 50-70 B an event held (more where
# flows are many), ~100 B at the peak of making it.
PREPARED_BYTES_PER_EVENT = 104
# ... when the table has a scratch folder (`EventTable.scratch`): that state is made a
# chunk at a time and written there as it is made (`mapped.Appended`), so the first plan
# holds 1-6 B an event beyond its own (tracemalloc, `test_plan_memory`), and the chunk.
PREPARED_SPILLED_BYTES_PER_EVENT = 8
KEPT_BYTES_PER_EVENT = 12
# Per distinct name, the first plan's sort of the names (a key tuple and an int each,
# two lists): ~85 B measured with 2 M distinct names, beyond the per-event costs.
NAME_RANK_BYTES_PER_NAME = 88
WRITE_BLOCKS = 6  # a Chrome write pass: its buffer (x2 while growing), a block's decoded events (~x2), output
WRITE_BYTES = 16 * 1024 * 1024  # an XSpace write pass: chunks of formatted events


@dataclass
class TraceIndex:
    """A parsed trace: columns plus the way back to any event's JSON (`source`)."""

    path: str
    format: str
    table: EventTable
    metadata: dict
    truncated: bool
    file_bytes: int
    json_bytes: int  # bytes of the decompressed input
    seconds: float
    source: EventSource
    extra: dict = field(default_factory=dict)
    # The file as it was read (device, inode, the size read, mtime): later passes over
    # it (`ChromeJsonEvents`) check they read the same file, and only those bytes.
    identity: Optional[FileIdentity] = None
    # The memory budget's account that holds this index's memory (a server's, the CLI's),
    # given back when the index is collected; `settle_memory` keeps it exact.
    account: Optional[Account] = field(default=None, repr=False)
    _base_bytes: Optional[int] = field(default=None, repr=False)
    # The prepared fields handed to the index store so far (a server's `_settle_index`).
    prepared_kept: frozenset = field(default=frozenset(), repr=False)
    # Where its columns were written while it was parsed (`index_file(spill_dir=...)`), if they were.
    spill_dir: Optional[str] = field(default=None, repr=False)
    # A file it maps was cut under it (`mapped.shrunk`, a guarded fault): no longer served or saved.
    damaged: bool = field(default=False, repr=False)
    # Its window index has been asked for in the background (a server's `_settle_index`).
    window_index_asked: bool = field(default=False, repr=False)
    # Its source's block store has been asked for in the background (a server's `_settle_index`).
    store_asked: bool = field(default=False, repr=False)

    @property
    def events(self) -> int:
        return len(self.table)

    @property
    def prepared(self) -> Prepared:
        """What plans and queries have prepared on the table so far (slices, orders, flow
        binding, parents, ...): the index's, as long as its table lives."""
        return prepared_of(self.table)

    def memory_bytes(self) -> int:
        """What the index holds: its columns and strings, for XSpace the file's bytes and
        event positions (measured once), and the planning state prepared on it so far."""
        if self._base_bytes is None:
            t = self.table
            arrays = self._columns()
            # columns mapped from the index store are file-backed pages the kernel can take
            # back at any time, not the process's memory: they are not charged
            n = sum(map(held_bytes, arrays))
            n += sum(map(sys.getsizeof, t.names)) + 120 * (len(t.names) + len(t.tracks) + len(t.series))
            n += sum(map(sys.getsizeof, t.cats)) + 120 * (len(t.cats) + len(t.process_names) + len(t.thread_names))
            positions = getattr(self.source, "positions", None)  # a Chrome trace's event positions
            if positions is not None:
                n += held_bytes(positions.starts) + held_bytes(positions.lengths)
            lines = getattr(self.source, "lines", None)
            if lines:  # an XSpace's: the file's bytes (which lines share) and positions, unless mapped
                shared = {id(line.data): len(line.data) for line in lines if not isinstance(line.data, mmap.mmap)}
                n += sum(shared.values()) + sum(held_bytes(a) for line in lines for a in (line.starts, line.ends))
            self._base_bytes = n
        held = getattr(self.source, "held_bytes", 0)  # a Chrome trace's text tail, kept by its first view
        return self._base_bytes + self.prepared.nbytes() + held

    def _columns(self) -> list[np.ndarray]:
        t = self.table
        return [t.ph, t.ts, t.dur, t.track, t.name, t.flow_key, t.bind_enclosing, t.scope,
                t.counter_event, t.counter_series, t.counter_value, t.cat, t.step_event, t.step_value]

    def arrays(self) -> list[np.ndarray]:
        """The arrays the index holds: its columns, a Chrome trace's event positions and
        the prepared state (those mapped from files are checked by `mapped.shrunk`)."""
        found = self._columns()
        positions = getattr(self.source, "positions", None)
        if positions is not None:
            found += [positions.starts, positions.lengths]
        found += getattr(self.source, "arrays", [])  # an XSpace's file bytes and event positions
        return found + self.prepared.arrays()

    def settle_memory(self) -> None:
        """Charge exactly `memory_bytes()` to the index's account (after a plan prepared state)."""
        if self.account is not None:
            self.account.settle(self.memory_bytes(), "the parsed trace and its planning state")

    def estimated_bytes(self, keep: np.ndarray, cap: Optional[float] = None) -> float:
        """The JSON size of the events `keep` (sorted indices), each taken as the average of
        its block (at most `cap` bytes, for a level that drops args): a count per block,
        never a number per event, so `auto` weighs a level in memory of the blocks."""
        t = self.table
        if not t.block_events or len(keep) == 0:
            return 0.0
        per = np.asarray(t.block_bytes, dtype=np.float64) / np.maximum(np.asarray(t.block_events), 1)
        if cap is not None:
            per = np.minimum(per, cap)
        ends = np.cumsum(np.asarray(t.block_events, dtype=np.int64))
        counts = np.diff(np.searchsorted(keep, ends, "left"), prepend=0)
        return float(counts @ per)


# The share of a parse's progress bar that reading the file stands for, by format (the
# rest is what its reader reports through `ReadOptions.decoded`): an XSpace is read into
# its spill folder in ~1 s a GB and decoded after that in ~10.
READ_SHARE = {"xspace": 0.15}


class _ReadProgress:
    """A parse's progress, (done, total) in bytes of the file: the stream's reads, scaled to
    `reading_share` of the file, then the reader's own fraction of what follows."""

    def __init__(self, progress: Progress, path: str) -> None:
        self.progress = progress
        # known for sure once the content is sniffed; the name says it for the sniff's own read
        self.reading_share = READ_SHARE["xspace"] if os.path.basename(path).endswith((".pb", ".pb.gz")) else 1.0
        self.total = 0
        self._shown = 0

    def __call__(self, done: int, total: int) -> None:
        self.total = total
        self._show(int(done * self.reading_share))

    def decoded(self, fraction: float) -> None:
        share = self.reading_share
        self._show(int(self.total * (share + (1.0 - share) * min(max(fraction, 0.0), 1.0))))

    def _show(self, done: int) -> None:
        self._shown = max(self._shown, done)  # never backwards, whatever the share was
        self.progress(self._shown, self.total)


def index_file(
    path: Union[str, os.PathLike],
    max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
    progress: Optional[Progress] = None,
    store_dir: Optional[str] = None,
    *,
    expect: Optional[FileIdentity] = None,
    max_file_bytes: Optional[int] = None,
    max_ratio: Optional[float] = DEFAULT_MAX_RATIO,
    account: Optional[Account] = None,
    spill_dir: Optional[str] = None,
) -> TraceIndex:
    """Pass 1: stream the file into an event table.

    `spill_dir`: a new folder where a Chrome trace's columns are written block by block
    and then memory-mapped (`model.table.TableBuilder`), so that ingesting holds a block and the
    distinct strings, not the columns; the index store keeps those files as they are
    (`TraceIndex.spill_dir`). `model.table.SpillFailed` if they cannot be written.

    `account`: the memory budget's account this parse charges as it goes (its
    buffers, decoded blocks, columns and strings), so a trace that needs more than
    was promised stops with `OverBudget` at the block that crosses the line.

    `store_dir`: where a Chrome trace may keep its event blocks compressed after
    the first full write pass, so later windows read only the blocks they need
    (`ChromeJsonEvents`); for servers that reduce one trace many times.

    `expect`, `max_file_bytes`, `max_ratio`: as `TraceStream` takes them — a server
    passes the identity its listing saw, so a file swapped since is refused
    (`FileChanged`) rather than read, and its size limit, checked on the file as
    opened. The index records the identity it was built from (`TraceIndex.identity`),
    and later passes over a Chrome trace read that file and those bytes only.
    """
    path = os.fspath(path)
    began = time.perf_counter()
    split = _ReadProgress(progress, path) if progress is not None else None
    with TraceStream(path, max_inflated_bytes, split, expect=expect, max_file_bytes=max_file_bytes,
                     max_ratio=max_ratio) as stream:
        fmt = sniff(stream)
        if split is not None:
            split.reading_share = READ_SHARE.get(fmt, 1.0)
        parsed = reader_for(fmt)(stream, account, ReadOptions(max_inflated_bytes, max_ratio, store_dir, spill_dir,
                                                              split.decoded if split is not None else None))
        release_free_memory()
        if spill_dir is not None and isinstance(parsed.table.ts, np.memmap):
            parsed.table.scratch = spill_dir  # prepared state goes beside the columns, and with them
            positions = getattr(parsed.source, "positions", None)
            if positions is not None and not isinstance(positions.starts, np.memmap):
                # event positions the reader held (12 B an event): written beside the columns
                positions.starts = spill(spill_dir, "positions_starts", positions.starts)
                positions.lengths = spill(spill_dir, "positions_lengths", positions.lengths)
        return TraceIndex(
            path=path, format=fmt, table=parsed.table, metadata=parsed.metadata, truncated=parsed.truncated,
            file_bytes=stream.file_bytes, json_bytes=stream.inflated, seconds=time.perf_counter() - began,
            source=parsed.source, extra=parsed.extra, identity=stream.identity,
            spill_dir=spill_dir if isinstance(parsed.table.ts, np.memmap) else None,
        )


def parse_level(level: Level) -> Level:
    if isinstance(level, str):
        if level.strip().lower() == "auto":
            return "auto"
        try:
            level = int(level)
        except ValueError:
            raise TraceError(f"level must be 0-4 or auto, not {level!r}") from None
    if level not in LEVELS:
        raise TraceError(f"level must be 0-4 or auto, not {level!r}")
    return level


# The finest time any input holds: XSpace counts picoseconds. A narrower window
# cannot contain two distinct event times, and its buckets would be sub-ulp.


def choose_level(index: TraceIndex, start_us: Optional[float], end_us: Optional[float],
                 budget_events: Optional[int] = None, budget_bytes: Optional[int] = None,
                 resolution: Optional[int] = None, charges: Optional[OutputCharge] = None) -> Plan:
    """`auto`: the least reduced level whose estimated output fits the budget.

    `resolution` (a viewer's bucket count, sized from its pixels) then cuts the window of
    the level picked into that many buckets where that is fewer than the level's own: the
    budget still picks the level (its args and keep rules), the screen only ever makes the
    answer smaller. Level 0 is lossless and has no buckets: it ignores `resolution`."""
    budget_events = BUDGET_EVENTS if budget_events is None else budget_events
    budget_bytes = BUDGET_BYTES if budget_bytes is None else budget_bytes
    grow = charges.charge if charges is not None else None
    p = None
    for level in LEVELS:
        p = None  # the last level's plan goes before the next one is made, and its charge
        if charges is not None:
            charges.release()
        p = plan_within(index.table, level, start_us, end_us, grow=grow, max_keep=budget_events)
        if p is None:  # more events than the budget: this level cannot be the one
            continue
        keeps_args = args_policy(level) is not ArgsPolicy.DROP
        busy = p.summaries.busy
        size = (index.estimated_bytes(p.keep, None if keeps_args else 200.0) + 220.0 * len(p.summaries)
                + (len(busy) + 10.0 * int(np.count_nonzero(np.diff(p.summaries.busy_offsets))) if busy is not None
                   else 0.0))  # the summaries' busy digits, and `,"busy":""` for each that has them
        if p.events <= budget_events and size <= budget_bytes:
            break
    assert p is not None
    if resolution is not None and p.resolution is not None and resolution < p.resolution:
        level, p = p.level, None
        if charges is not None:
            charges.release()
        p = plan(index.table, level, start_us, end_us, resolution=resolution, grow=grow)
    return p


def tb_reduce_object(index: TraceIndex, p: Plan, auto: bool) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "level": p.level,
        "resolution": p.resolution,
        "bucket_us": p.bucket_us,
        "window_us": [p.t0, p.t1],
        "trace_us": list(default_window(index.table)),  # the whole trace: where "time from the start" counts from
        "input": {"format": index.format, "events": index.events, "bytes": index.file_bytes},
        "output": {"events": p.events, "summaries": len(p.summaries)},
    }
    if auto:
        obj["auto"] = {"budget_events": BUDGET_EVENTS, "budget_bytes": BUDGET_BYTES}
    if index.truncated:
        obj["input"]["truncated"] = True
    return obj


def reduce_index(
    index: TraceIndex,
    out: BinaryIO,
    level: Level = 2,
    start_us: Optional[float] = None,
    end_us: Optional[float] = None,
    gzip: bool = True,
    progress: Optional[Progress] = None,
    with_input_index: bool = False,
    drop_args: bool = False,
    account: Optional[Account] = None,
    resolution: Optional[int] = None,
) -> dict[str, Any]:
    """Write the reduction of an indexed trace to `out`; returns the stats.

    `account`: what planning and writing will hold at their peak is charged to it
    before they start (`reduction_bytes`), and given back when they are done.

    `with_input_index` adds `tb_reduce.input_index`: for each written input event
    (the summaries follow them), its index in the input, which `event_json` takes —
    how the dashboard shows an event's full args on click. `drop_args` writes the
    kept events without args (`levels.args_policy`: as levels 3 and 4 do) at any level: a view that
    fetches args on click need not carry them, and is much cheaper to write.
    `resolution` cuts the window into that many buckets instead of the level's (1-4); at
    `auto`, into at most that many, on the level the budget picks (`choose_level`).
    """
    level = parse_level(level)
    check_window(start_us, end_us)
    need = reduction_bytes(index, level, with_input_index)
    alongside = index.account.total if index.account is not None else 0
    charges = OutputCharge(account, alongside) if account is not None else None
    if account is not None:
        account.charge(need, "planning and writing the reduction", alongside=alongside, wait_s=30.0)
    try:
        return _reduce_index(index, out, level, start_us, end_us, gzip, progress, with_input_index, drop_args,
                             resolution, charges)
    finally:
        if account is not None:
            account.release(need)
        if charges is not None:
            charges.release()


class OutputCharge:
    """What a plan's summaries hold, charged to a budget's account as they are made
    (`plan.plan(grow=)`): their number follows the window's shape, so it is known
    only then. `release` gives back what the plan dropped held."""

    def __init__(self, account: Account, alongside: int) -> None:
        """`alongside`: what others hold for the reduction (its index's account)."""
        self.account = account
        self.alongside = alongside
        self.held = 0

    def charge(self, n: int) -> None:
        self.account.charge(n, "the reduction's summaries", alongside=self.alongside, wait_s=30.0)
        self.held += n

    def release(self) -> None:
        self.account.release(self.held)
        self.held = 0


def reduction_bytes(index: TraceIndex, level: Level, with_input_index: bool = False) -> int:
    """What planning and writing one reduction of `index` hold at their peak, at most.

    A plan holds flags per event and per slice, and works on one chunk of a track's
    slices at a time; counters and instants cost more each (see the constants). The
    summaries it makes are charged as they are made (`OutputCharge`), not here. A
    table's first plan also prepares ~42-56 B an event of state kept with it; the write
    pass holds a read block or two and its decoded events; at level 0 (or auto, which
    may pick it) every event may be kept, and each kept one costs its index and, in
    `tb_reduce.input_index`, its JSON digits.
    """
    t = index.table
    n = index.events
    block = getattr(index.source, "block_size", 0)  # a Chrome trace's write pass reads blocks again
    instants = instant_count(t)
    need = (PLAN_BYTES_PER_EVENT * n + PLAN_BYTES_PER_SAMPLE * len(t.counter_event)
            + PLAN_BYTES_PER_INSTANT * instants + PLAN_BYTES_PER_CHUNK_SLICE * min(n, CHUNK_SLICES) * FOLD_THREADS
            + PLAN_BYTES_PER_CHUNK_EVENT * min(n, CHUNK_EVENTS) + (WRITE_BLOCKS * block if block else WRITE_BYTES))
    if level == 0:
        need += KEPT_BYTES_PER_EVENT * n * (2 if with_input_index else 1)
    elif level == "auto":  # it picks level 0 only when that keeps at most BUDGET_EVENTS
        need += KEPT_BYTES_PER_EVENT * min(n, BUDGET_EVENTS) * (2 if with_input_index else 1)
    if not {"slices", "static", "flow_binding"} <= index.prepared.ready_fields():  # a query made some, not all
        need += (PREPARED_SPILLED_BYTES_PER_EVENT if t.scratch is not None else PREPARED_BYTES_PER_EVENT) * n
        need += sample_bytes(n)  # the keys sampled to cut the slice order's buckets at
    if index.prepared.name_rank is None:  # sorting the distinct names once (`plan.name_rank`)
        need += NAME_RANK_BYTES_PER_NAME * len(index.table.names)
    return need


def _reduce_index(index: TraceIndex, out: BinaryIO, level: Level, start_us: Optional[float],
                  end_us: Optional[float], gzip: bool, progress: Optional[Progress], with_input_index: bool,
                  drop_args: bool, resolution: Optional[int] = None,
                  charges: Optional[OutputCharge] = None) -> dict[str, Any]:
    t_plan = time.perf_counter()
    p = (choose_level(index, start_us, end_us, resolution=resolution, charges=charges) if level == "auto"
         else plan(index.table, level, start_us, end_us, resolution=resolution,
                   grow=charges.charge if charges is not None else None))
    plan_s = time.perf_counter() - t_plan
    obj = tb_reduce_object(index, p, level == "auto")
    if with_input_index:
        obj["input_index"] = p.keep  # written by the JSON encoder from the array: no Python int per event
    if drop_args:
        obj["args"] = "dropped"
    t_write = time.perf_counter()
    sink = Sink(out, gzip)
    write_trace(index.source, p, index.table.tracks, index.table.names, index.metadata, obj, sink, progress,
                args=args_policy(p.level, drop_args))
    sink.close()
    stats = {k: v for k, v in obj.items() if k != "input_index"}
    stats["output"] = dict(obj["output"], json_bytes=sink.bytes)
    stats["input"] = dict(obj["input"], json_bytes=index.json_bytes)
    stats["timings_s"] = {"index": index.seconds, "plan": plan_s, "write": time.perf_counter() - t_write}
    # where the index came from: parsed now, or reopened from the index store (timings_s.index
    # is then the reopening's); not in the output's own header, which stays the same either way
    stats["index"] = "stored" if index.extra.get("stored_index") else "parsed"
    return stats


def reduce_file(
    src: Union[str, os.PathLike],
    dst: Union[str, os.PathLike],
    level: Level = 2,
    start_us: Optional[float] = None,
    end_us: Optional[float] = None,
    max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
    progress: Optional[Progress] = None,
    max_memory_bytes: Optional[int] = None,
    from_start: bool = False,
    indexer: Optional[Callable[..., TraceIndex]] = None,
) -> dict[str, Any]:
    """Reduce `src` into `dst` atomically (gzip when `dst` ends in .gz).

    `indexer`: what gives the index of `src` (`index_file`'s arguments, by name): by
    default `index_file` parses it; the CLI's `--cache-dir` passes one that reopens the
    index a run before stored (`index.store.indexed`).

    `from_start`: the window is in µs from the trace's first timestamp (as the dashboard
    shows time), not in the trace's own clock. With a window, the stats carry `window`:
    its bounds in both clocks and how many events it shows (`events_in_window`), so a
    caller can say when it holds none.

    `max_memory_bytes`: the memory this reduction promises not to exceed (parsing,
    planning, writing); a trace that needs more fails with `OverBudget` as soon as
    that is known, instead of being killed by the system.

    Everything that can be refused without reading the trace is refused first
    (level, window, an output that is a folder, in a missing or read-only folder,
    or the input itself), so a user does not wait minutes for a refusal. The
    output is written to a temp file beside `dst` that is removed on any failure;
    a write that fails (disk full) raises `OSError` naming `dst`.
    """
    src, dst = os.fspath(src), os.fspath(dst)
    level = parse_level(level)
    check_window(start_us, end_us)
    f, finish = atomic_output(dst, {"the input trace": src})
    began = time.perf_counter()
    ok = False
    try:
        try:
            size = os.stat(src).st_size  # only for progress: a missing file is reported by index_file
        except OSError:
            size = 0

        def phase(offset: int) -> Optional[Progress]:
            return None if progress is None else (lambda done, total: progress(offset + done, 2 * size))

        budget = MemoryBudget(max_memory_bytes, flag="--max-memory-mb") if max_memory_bytes else Unlimited()
        reading = budget.account(f"reading {os.path.basename(src)}")
        faults_before = faults()
        index = (indexer or index_file)(src, max_inflated_bytes=max_inflated_bytes, progress=phase(0),
                                        account=reading)
        index.account = reading
        origin = default_window(index.table)[0]
        if from_start and start_us is not None and end_us is not None:
            start_us, end_us = origin + start_us, origin + end_us
        try:
            with budget.account(f"reducing {os.path.basename(src)}") as reducing:
                stats = reduce_index(index, f, level, start_us, end_us, dst.endswith(".gz"), phase(size),
                                     account=reducing)
            if faults() != faults_before:  # a mapped file cut short under the reader: zeros were read
                raise FileChanged(f"{os.path.basename(src)} changed while it was read (it was cut short): "
                                  "nothing was written")
        except OSError as exc:  # reads go through TraceStream (TraceError): this is a write to `f`
            if exc.filename is not None:
                raise
            raise OSError(exc.errno, exc.strerror or str(exc), dst) from None
        ok = True
    finally:
        file_bytes = finish(ok)
    stats["output"]["file_bytes"] = file_bytes
    stats["timings_s"]["total"] = time.perf_counter() - began
    if start_us is not None and end_us is not None:
        first, last = default_window(index.table)
        stats["window"] = {"start_us": start_us, "end_us": end_us, "origin_us": origin,
                           "from_start_us": [start_us - origin, end_us - origin],
                           "trace_us": [first, last], "events": events_in_window(index.table, start_us, end_us)}
    return stats


# Memory of deriving the per-step series at its peak (`waveforms.steps.derive`, measured
# with tracemalloc in `test_waveforms_steps_chunks`): it reads the slices a chunk at a time
# in time order, so it holds a chunk (~120 B a slice of one chunk), a lookup per name and
# rule (~40 B a name), the key sample of the time order and, per slice, its time order and
# the busy intervals (~96 B a slice in memory; ~4 B with a scratch folder, where they go);
# plus, when no view or query made the slices yet, what making them holds.
DERIVE_BYTES_PER_SLICE = 96
DERIVE_SPILLED_BYTES_PER_SLICE = 4
DERIVE_BYTES_PER_CHUNK_SLICE = 120
DERIVE_BYTES_PER_NAME = 40


def derive_index(index: TraceIndex, account: Optional[Account] = None) -> StepSeries:
    """The per-step series of an indexed trace (`waveforms.steps`), its working memory
    charged to `account` first."""
    if account is not None:
        account.charge(derive_bytes(index), "deriving the per-step series",
                       alongside=index.account.total if index.account is not None else 0)
    series = derive(index.table)
    if len(series):
        if account is not None and _cached(index.table) is None:
            account.charge(MEMORY_SAMPLE_BYTES * memory_event_count(index.table), "the [memory] events' totals")
        samples = cached_memory_samples(index)
        series.memory_mb = peak_per_step(samples, series.start_us, series.end_us)
    return series


# What `memory_samples` holds a `[memory]` event: its five columns (8 B each) and, for the
# chunk being read, its text and decoded args (~0.5 kB a chunk's event, at most MEMORY_CHUNK).
MEMORY_SAMPLE_BYTES = 48


def _memory_name(t: EventTable) -> Optional[int]:
    """The name id of Kineto's `[memory]` instants in `t`, or None when it has none."""
    try:
        return t.names.index(MEMORY_EVENT)
    except ValueError:
        return None


def memory_event_count(t: EventTable) -> int:
    """How many Kineto `[memory]` instants `t` holds (one pass over its name column)."""
    k = _memory_name(t)
    return 0 if k is None else int(np.count_nonzero(np.asarray(t.name) == k))


# `[memory]` events read back at once (`memory_samples`): their JSON and decoded args, ~0.5 kB each
# (~32 MB a chunk, charged with the derivation's working memory in `derive_bytes`).
MEMORY_CHUNK = 1 << 16
MEMORY_CHUNK_BYTES = 512 * MEMORY_CHUNK


class _MemoryArgs(msgspec.Struct):
    allocated: float = msgspec.field(name="Total Allocated", default=float("nan"))
    reserved: float = msgspec.field(name="Total Reserved", default=float("nan"))
    device_type: int = msgspec.field(name="Device Type", default=0)
    device_id: int = msgspec.field(name="Device Id", default=-1)


class _MemoryEvent(msgspec.Struct):
    args: _MemoryArgs = msgspec.field(default_factory=_MemoryArgs)


_memory_events = msgspec.json.Decoder(list[_MemoryEvent])


def memory_samples(index: TraceIndex) -> MemorySamples:
    """The allocator's totals of every Kineto `[memory]` instant of `index`
    (`waveforms.memory`), read back from the trace a chunk of events at a time (the index
    keeps no args). An event whose args are not numbers where they should be is left out."""
    t = index.table
    k = _memory_name(t)
    if k is None:
        return MemorySamples.empty()
    rows = np.flatnonzero((np.asarray(t.name) == k) & np.isin(np.asarray(t.ph), INSTANT_PHASES))
    if not len(rows):
        return MemorySamples.empty()
    ts, track, dtype_, did, alloc, resv = [], [], [], [], [], []
    for a in range(0, len(rows), MEMORY_CHUNK):
        part = rows[a:a + MEMORY_CHUNK]
        texts = [text for block in index.source.events(part) for text in block]
        try:
            decoded = _memory_events.decode(b"[" + b",".join(texts) + b"]")
        except msgspec.DecodeError:  # one odd event: each on its own, the odd ones left out
            decoded = [_one_memory_event(text) for text in texts]
        keep = np.fromiter((e is not None for e in decoded), dtype=bool, count=len(decoded))
        ts.append(np.asarray(t.ts[part])[keep])
        track.append(np.asarray(t.track[part])[keep].astype(np.int64))
        args = [e.args for e in decoded if e is not None]
        dtype_.append(np.fromiter((x.device_type for x in args), dtype=np.int64, count=len(args)))
        did.append(np.fromiter((x.device_id for x in args), dtype=np.int64, count=len(args)))
        alloc.append(np.fromiter((x.allocated for x in args), dtype=np.float64, count=len(args)))
        resv.append(np.fromiter((x.reserved for x in args), dtype=np.float64, count=len(args)))
    return MemorySamples(np.concatenate(ts), np.concatenate(dtype_), np.concatenate(did), np.concatenate(alloc),
                         np.concatenate(resv), track=np.concatenate(track))


_memory_cache: dict[int, tuple[Any, MemorySamples]] = {}  # id(table) -> (a weak reference to it, its samples)
_memory_lock = threading.Lock()


def _cached(t: EventTable) -> Optional[MemorySamples]:
    with _memory_lock:
        hit = _memory_cache.get(id(t))
    return hit[1] if hit is not None and hit[0]() is t else None


def cached_memory_samples(index: TraceIndex) -> MemorySamples:
    """`memory_samples` of `index`, read once per table and kept while the table lives: each
    view of the trace draws its memory counters from them (`waveforms.memory.counter_points`)."""
    t = index.table
    found = _cached(t)
    if found is not None:
        return found
    samples = memory_samples(index)
    key = id(t)

    def gone(ref: Any) -> None:
        with _memory_lock:
            if key in _memory_cache and _memory_cache[key][0] is ref:
                del _memory_cache[key]

    with _memory_lock:
        _memory_cache[key] = (weakref.ref(t, gone), samples)
    return samples


def memory_bytes_needed(index: TraceIndex) -> int:
    """What reading `index`'s `[memory]` totals holds, once (0 when read already, or none)."""
    t = index.table
    if MEMORY_EVENT not in t.names or _cached(t) is not None:
        return 0
    return MEMORY_CHUNK_BYTES + MEMORY_SAMPLE_BYTES * memory_event_count(t)


def memory_counters(index: TraceIndex, start_us: Optional[float], end_us: Optional[float],
                    resolution: Optional[int]) -> list[dict]:
    """The allocator's totals over a window (the whole trace: None) as counter series for the
    timeline, `resolution` buckets (the view's), by the counter rule (`waveforms.memory`)."""
    t = index.table
    if MEMORY_EVENT not in t.names:
        return []
    lo, hi = default_window(t)
    t0 = lo if start_us is None else start_us
    t1 = hi if end_us is None else end_us
    return counter_points(cached_memory_samples(index), t.tracks, t0, t1, resolution)


def _one_memory_event(text: bytes) -> Optional[_MemoryEvent]:
    try:
        return msgspec.json.decode(text, type=_MemoryEvent)
    except msgspec.DecodeError:
        return None


def steps_chunk_rows() -> int:
    return steps_module.CHUNK_ROWS


def derive_bytes(index: TraceIndex) -> int:
    """What deriving the per-step series of `index` holds at its peak (see the constant)."""
    t = index.table
    made = index.prepared.slices
    n = len(made) if made is not None else index.events  # a slice is an event at least
    per_slice = DERIVE_SPILLED_BYTES_PER_SLICE if t.scratch is not None else DERIVE_BYTES_PER_SLICE
    return (per_slice * n + DERIVE_BYTES_PER_CHUNK_SLICE * min(n, steps_chunk_rows()) + sample_bytes(n)
            + DERIVE_BYTES_PER_NAME * len(t.names) + slices_bytes(t)
            + (MEMORY_CHUNK_BYTES if MEMORY_EVENT in t.names else 0))


def waveforms_file(src: Union[str, os.PathLike], max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
                   max_memory_bytes: Optional[int] = None,
                   indexer: Optional[Callable[..., TraceIndex]] = None) -> StepSeries:
    """The per-step series of a trace file, within `max_memory_bytes` (see `reduce_file`,
    and its `indexer`)."""
    src = os.fspath(src)
    budget = MemoryBudget(max_memory_bytes, flag="--max-memory-mb") if max_memory_bytes else Unlimited()
    reading = budget.account(f"reading {os.path.basename(src)}")
    index = (indexer or index_file)(src, max_inflated_bytes=max_inflated_bytes, account=reading)
    index.account = reading
    with budget.account(f"deriving the steps of {os.path.basename(src)}") as deriving:
        return derive_index(index, deriving)


def event_json(index: TraceIndex, i: int) -> bytes:
    """The full JSON of event `i` (for details views): for Chrome JSON exactly as the
    file holds it, for XSpace as converted with all its args."""
    if not 0 <= i < index.events:
        raise TraceError(f"no event {i}: the trace has {index.events:,}")
    for block in index.source.events(np.asarray([i]), ArgsPolicy.KEEP):
        return valid_utf8(block[0])  # bytes copied from the input: invalid UTF-8 replaced, as in the trace
    raise TraceError(f"event {i} could not be read back")  # pragma: no cover


def reduce_to_bytes(path: Union[str, os.PathLike], level: Level = 2, start_us: Optional[float] = None,
                    end_us: Optional[float] = None) -> bytes:
    """The reduced trace as uncompressed JSON bytes (for tests and small inputs)."""
    index = index_file(path)
    buf = io.BytesIO()
    reduce_index(index, buf, level, start_us, end_us, gzip=False)
    return buf.getvalue()
