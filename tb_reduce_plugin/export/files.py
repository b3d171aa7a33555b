"""A trace file exported (what `tb-reduce export` runs): indexed within the memory budget,
its steps derived, its rows written a chunk at a time into a file that appears whole
or not at all."""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Optional

from ..budget import MemoryBudget, Unlimited
from ..formats.sources import DEFAULT_MAX_INFLATED_BYTES, FileIdentity
from ..reduce.pipeline import TraceIndex, derive_index, index_file
from ..reduce.plan import check_window, default_window
from ..reduce.writer import atomic_output
from .parquet import _pyarrow, write_parquet
from .rows import CHUNK_ROWS, EVENT_BYTES, ROW_BYTES


def export_file(src: str, out: str, start_us: Optional[float] = None, end_us: Optional[float] = None,
                from_start: bool = False, host: Optional[str] = None,
                max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES, max_memory_bytes: Optional[int] = None,
                indexer: Optional[Callable[..., TraceIndex]] = None,
                expect: Optional[FileIdentity] = None) -> dict[str, Any]:
    """`src`'s rows in [start_us, end_us] (µs in the trace's clock, or from its start with
    `from_start`) written to `out`; what was written. `expect`: the version a listing saw
    (a run folder's), read only if it is still that one."""
    _pyarrow()  # before minutes of parsing: a missing pyarrow is said at once
    check_window(start_us, end_us)
    f, finish = atomic_output(out, {"the input trace": src})
    ok = False
    try:
        budget = MemoryBudget(max_memory_bytes, flag="--max-memory-mb") if max_memory_bytes else Unlimited()
        reading = budget.account(f"reading {os.path.basename(src)}")
        index = (indexer or index_file)(src, max_inflated_bytes=max_inflated_bytes, account=reading,
                                        **({} if expect is None else {"expect": expect}))
        index.account = reading
        with budget.account(f"deriving the steps of {os.path.basename(src)}") as deriving:
            steps = derive_index(index, deriving)
        window = None
        if start_us is not None or end_us is not None:  # a bound left out: the trace's own edge
            origin = default_window(index.table)[0] if from_start else 0.0
            window = (-math.inf if start_us is None else origin + start_us,
                      math.inf if end_us is None else origin + end_us)
        with budget.account("exporting the rows") as exporting:
            exporting.charge(ROW_BYTES * min(CHUNK_ROWS, index.events) + EVENT_BYTES * index.events,
                             "a chunk of rows, and each event's slice, depth and children's time")
            rows = write_parquet(index.table, steps, f, window, host)
        ok = True
    finally:
        size = finish(ok)
    bounds = [x if math.isfinite(x) else None for x in window] if window is not None else None
    return {"rows": rows, "events": index.events, "bytes": size, "window_us": bounds}
