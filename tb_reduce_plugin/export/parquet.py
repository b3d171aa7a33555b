"""The export's rows (`rows`) written as Apache Parquet through pyarrow, one row group a
chunk, so the file is written as the rows are made, never held whole.

Strings are dictionary-encoded columns whose dictionary is the trace's own (names,
categories, the tracks' pid, tid, process and thread): a row holds small ids, and
Parquet keeps the dictionary once a row group. pyarrow is an optional dependency
(`pip install 'tb-reduce-plugin[parquet]'`); without it the export says so.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..errors import TraceError
from ..model.table import EventTable
from ..waveforms.steps import StepSeries
from .rows import Strings, chunks, strings_of

COLUMNS = ("event", "name", "cat", "ph", "ts", "dur", "pid", "tid", "process", "thread", "depth", "self_us", "step")


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401  (the writer is in the submodule)
    except ImportError:
        raise TraceError("writing Parquet needs pyarrow: pip install 'tb-reduce-plugin[parquet]'") from None
    return pyarrow


def schema(host: Optional[str] = None) -> Any:
    """The file's schema (a `host` column first when the rows are one host's of a run)."""
    pa = _pyarrow()
    text = pa.dictionary(pa.int32(), pa.string())
    fields = [("event", pa.int64()), ("name", text), ("cat", text), ("ph", pa.string()), ("ts", pa.float64()),
              ("dur", pa.float64()), ("pid", text), ("tid", text), ("process", text), ("thread", text),
              ("depth", pa.int32()), ("self_us", pa.float64()), ("step", pa.int64())]
    if host is not None:
        fields.insert(0, ("host", text))
    return pa.schema(fields)


def write_parquet(t: EventTable, steps: StepSeries, out: Any, window: Optional[tuple[float, float]] = None,
                  host: Optional[str] = None, rows: Optional[int] = None) -> int:
    """`t`'s rows (in `window`) written to `out` (a path or a binary file); how many rows."""
    pa = _pyarrow()
    import pyarrow.parquet as pq

    strings = strings_of(t)
    sch = schema(host)
    written = 0
    with pq.ParquetWriter(out, sch, compression="zstd") as writer:
        for c in chunks(t, steps, window, rows):
            cols = _columns(pa, c, strings)
            if host is not None:
                cols.insert(0, pa.DictionaryArray.from_arrays(np.zeros(len(c), dtype=np.int32), pa.array([host])))
            writer.write_table(pa.Table.from_arrays(cols, schema=sch))
            written += len(c)
        if not written:  # an empty file still has its schema, so a query over it answers "no rows"
            writer.write_table(sch.empty_table())
    return written


def _columns(pa: Any, c: Any, s: Strings) -> list:
    step = np.nan_to_num(c.step, nan=0).astype(np.int64)
    return [
        pa.array(c.event),
        _text(pa, c.name, s.names),
        _text(pa, c.cat, s.cats),
        pa.array(c.ph.view("S1").astype("U1")),
        pa.array(c.ts),
        pa.array(c.dur, mask=np.isnan(c.dur)),
        *(_text(pa, c.track, values) for values in (s.pid, s.tid, s.process, s.thread)),
        pa.array(c.depth, mask=c.depth < 0),
        pa.array(c.self_us, mask=np.isnan(c.self_us)),
        pa.array(step, mask=np.isnan(c.step)),
    ]


def _text(pa: Any, ids: np.ndarray, values: list) -> Any:
    """A dictionary column: each row's id into `values` (texts, None for none), the
    dictionary the distinct texts (Parquet takes no null in a dictionary: a None is a
    null row instead)."""
    texts: dict[str, int] = {}
    code = np.array([-1 if v is None else texts.setdefault(v, len(texts)) for v in values], dtype=np.int32)
    rows = code[ids] if len(code) else np.full(len(ids), -1, dtype=np.int32)
    null = rows < 0
    return pa.DictionaryArray.from_arrays(pa.array(np.maximum(rows, 0), mask=null if null.any() else None),
                                          pa.array(list(texts) or [""], type=pa.string()))
