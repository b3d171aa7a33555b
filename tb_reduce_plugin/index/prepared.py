"""What planning and the queries prepare once per event table, held in one object.

Every plan of a table, whatever its level and window, shares some work: the table's
slices, the masks and orders of `reduce.shared._static`, the name order of summaries'
top names, where each flow event binds; the queries add the slices' parents and the
searchable events in time order. Each is computed on first use and kept as a named
field of the table's `Prepared`, which `prepared_of(table)` finds.

The table holds its state (`EventTable.prepared`, filled here), so the state lives
exactly as long as the table and the index that owns it; the state holds no reference
back to the table. Its memory is `Prepared.nbytes()`, which the
index adds to its own (`pipeline.TraceIndex.memory_bytes`), so the memory budget
counts it once a plan or a query has made it (`TraceIndex.settle_memory`).

Thread safety, lock-free: a field goes from None to its value once and never back.
Two threads that ask for a missing field at once may both compute it; both results
are equal, the one stored last is kept (and counted), and each thread uses its own.

Layering: model ← slices ← prepared ← reduce, query. This module knows the
fields by name only; the modules that compute them own their types.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields
from typing import Any, Optional

import numpy as np

from ..model.slices import SliceTable
from ..model.table import EventTable

# How deep `nbytes` looks into a field's value (a flow binding's segments are 3 levels down).
_MAX_DEPTH = 4


@dataclass(eq=False)
class Prepared:
    """The level- and window-independent state prepared on one table (None: not yet)."""

    default_window: Optional[tuple[float, float]] = None  # reduce.plan.default_window
    slices: Optional[SliceTable] = None  # reduce.shared.slices_of
    static: Any = None  # reduce.shared._Static: masks and the slice order every plan shares
    name_rank: Optional[np.ndarray] = None  # reduce.plan.name_rank
    flow_binding: Any = None  # reduce.flows._FlowBinding: where each flow event lands among slices
    parents: Optional[np.ndarray] = None  # query.nesting.parents_of
    searchable: Any = None  # query.search._Searchable: slices and instants in time order
    window_index: Any = None  # reduce.window_index.WindowIndex: a window's rows found by search
    instants: Optional[int] = None  # reduce.points.instant_count: how many instants (`reduction_bytes`)

    def nbytes(self) -> int:
        """The memory this state holds: numpy arrays exactly (each once, views as their
        base's), Python containers by what they hold (their own few bytes aside)."""
        seen: set[int] = set()

        def size(obj: object, depth: int) -> int:
            if obj is None or id(obj) in seen or depth > _MAX_DEPTH:
                return 0
            seen.add(id(obj))
            if isinstance(obj, np.ndarray):
                return obj.nbytes if obj.base is None else 0  # views share their base's memory
            if isinstance(obj, (list, tuple)):
                return sum(size(o, depth + 1) for o in obj)
            if isinstance(obj, dict):
                return sum(size(o, depth + 1) for o in obj.values())
            attrs = getattr(obj, "__dict__", None)  # dataclasses; a SliceTable's cached nesting too
            return sum(size(o, depth + 1) for o in attrs.values()) if attrs else 0

        return sum(size(getattr(self, f.name), 0) for f in fields(self))

    def arrays(self) -> list[np.ndarray]:
        """Every numpy array this state holds (as `nbytes` walks it): the mapped ones among
        them are files of the index store that must stay whole while in use."""
        seen: set[int] = set()
        found: list[np.ndarray] = []

        def walk(obj: object, depth: int) -> None:
            if obj is None or id(obj) in seen or depth > _MAX_DEPTH:
                return
            seen.add(id(obj))
            if isinstance(obj, np.ndarray):
                found.append(obj)
            elif isinstance(obj, (list, tuple)):
                for o in obj:
                    walk(o, depth + 1)
            elif isinstance(obj, dict):
                for o in obj.values():
                    walk(o, depth + 1)
            else:
                for o in (getattr(obj, "__dict__", None) or {}).values():
                    walk(o, depth + 1)

        for f in fields(self):
            walk(getattr(self, f.name), 0)
        return found

    def ready_fields(self) -> frozenset:
        """The names of the fields computed so far."""
        return frozenset(f.name for f in fields(self) if getattr(self, f.name) is not None)

    def ready(self, name: str) -> bool:
        """Whether the field `name` has been computed."""
        if name not in _FIELDS:
            raise AttributeError(f"Prepared has no field {name!r}")
        return getattr(self, name) is not None


_FIELDS = frozenset(f.name for f in fields(Prepared))

_lock = threading.Lock()


def prepared_of(t: EventTable) -> Prepared:
    """The state prepared on `t` (empty at first): one object per table, made once and
    held by the table itself (`EventTable.prepared`), so it lives and goes with it."""
    found = t.prepared
    if found is None:
        with _lock:
            found = t.prepared
            if found is None:
                found = t.prepared = Prepared()
    return found
