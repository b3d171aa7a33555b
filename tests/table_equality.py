"""Both ways: index a trace with the native scanner and with the pure-Python path, and
say where the two tables differ (None when they are the same, value for value)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import numpy as np

from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.model.table import EventTable
from tb_reduce_plugin.reduce.pipeline import index_file


@contextmanager
def native(on: bool) -> Iterator[None]:
    before = os.environ.get("TB_REDUCE_NATIVE")
    os.environ["TB_REDUCE_NATIVE"] = "1" if on else "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ["TB_REDUCE_NATIVE"]
        else:
            os.environ["TB_REDUCE_NATIVE"] = before


# A stored index keeps these columns' ids in the narrowest int that holds them (int16 while
# they fit): a reopened table's are the same values in another width.
NARROWED_IDS = ("track", "name", "cat")


def table_difference(a: EventTable, b: EventTable, narrowed: tuple = ()) -> Optional[str]:
    """The first field where two tables differ: arrays by dtype and value (NaN equal
    to NaN), lists and dicts by value and by type (1 and 1.0 and True are not the same);
    the integer columns named in `narrowed` by value and kind, not width."""
    for name in a.__dataclass_fields__:
        if name in ("prepared", "span"):  # prepared state; a span the reader found, or None
            continue
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray):
            if name in narrowed and x.dtype.kind == y.dtype.kind == "i":
                y = y.astype(x.dtype) if np.array_equal(x, y) else y  # same values: compared as equal below
            if x.dtype != y.dtype or x.shape != y.shape:
                return f"{name}: {x.dtype}{x.shape} against {y.dtype}{y.shape}"
            same = np.array_equal(x, y, equal_nan=True) if x.dtype.kind == "f" else np.array_equal(x, y)
            if not same or (x.dtype.kind == "f" and not np.array_equal(np.signbit(x), np.signbit(y))):
                at = int(np.flatnonzero(~((x == y) | ((x != x) & (y != y))))[:1].tolist()[0]) if not same else -1
                return f"{name}: differs first at row {at}"
        elif repr(x) != repr(y) or x != y:
            return f"{name}: {repr(x)[:200]} against {repr(y)[:200]}"
    return None


def index_both_ways(path: Any) -> tuple[Any, Any]:
    """(native, pure) results: a TraceIndex, or the TraceError's message."""
    out = []
    for on in (True, False):
        with native(on):
            try:
                out.append(index_file(path))
            except TraceError as exc:
                out.append(f"{type(exc).__name__}: {exc}")
    return out[0], out[1]


def difference_both_ways(path: Any) -> Optional[str]:
    a, b = index_both_ways(path)
    if isinstance(a, str) or isinstance(b, str):
        return None if a == b else f"native {a!r} against pure {b!r}"
    diff = table_difference(a.table, b.table)
    if diff:
        return diff
    for name in ("metadata", "truncated", "extra", "json_bytes"):
        if getattr(a, name) != getattr(b, name):
            return f"{name}: {getattr(a, name)!r} against {getattr(b, name)!r}"
    return None
