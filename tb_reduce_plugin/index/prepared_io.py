"""The prepared state of a table (`prepared.Prepared`) as flat arrays and a JSON spec, and back.

After a restart, the first plan of a reopened index used to prepare again what every plan
shares (the slice table, its order and nesting, the flow binding, the name ranks: ~0.7 s
for 3 M events, growing with the trace). The store keeps that state beside the index:
every value is a numpy array, a plain number or tuple, a dataclass of the known kinds
below made of those, or a list of one such dataclass (the flow binding's segments, one per
track: stored as one concatenated array per field plus offsets, not thousands of files).

An array that is a run of rows of one of the table's own columns (an XSpace's slices:
its X events' times, durations, tracks and names) is kept as that run (`{"col": name,
"lo": row, "n": rows, "kind": "f"}`), not as a second copy of the column: ~24 B an event of an
XSpace's index on disk.

Only the kinds named in `_KINDS` are rebuilt, by name: a spec naming anything else is
refused (`ValueError`), so a spec file can never make this module build another type.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import numpy as np

from ..model.slices import SliceTable
from ..query.search import _Searchable
from ..reduce.flows import _FlowBinding, _FlowSegment
from ..reduce.shared import _Static
from ..reduce.window_index import WindowIndex
from .prepared import Prepared

_KINDS: dict[str, type] = {cls.__name__: cls for cls in (SliceTable, _Static, _FlowBinding, _FlowSegment,
                                                        _Searchable, WindowIndex)}
# Values a dataclass caches in its __dict__ that are worth keeping (computed on first use).
_CACHED = {"SliceTable": ("_nesting",)}
# Fields that hold ids into the table's lists, as its own columns do (kept narrowed alike).
_IDS = {"SliceTable": ("track", "name")}


class _Arrays:
    """Names the arrays of one encoding: a0, a1, ... (as they are: a writer makes them
    contiguous a chunk at a time, and one value repeated is never made whole here)."""

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.ids: set[str] = set()  # the names of arrays of ids (`_IDS`)
        self.columns = columns

    def add(self, a: np.ndarray) -> str:
        name = f"a{len(self.arrays)}"
        self.arrays[name] = a
        return name


def encode(prepared: Prepared, columns: Optional[dict[str, np.ndarray]] = None,
           ) -> tuple[dict, dict[str, np.ndarray], set[str]]:
    """(spec, arrays, the names of those that hold ids) of every field of `prepared`
    computed so far that can be kept; an array that is a run of rows of one of `columns`
    (the table's, by name) is named as such."""
    out = _Arrays(columns or {})
    spec = {}
    for f in dataclasses.fields(prepared):
        value = getattr(prepared, f.name)
        if value is None:
            continue
        try:
            spec[f.name] = _encode(value, out)
        except TypeError:
            continue  # a kind not kept: the first plan after a restart prepares it again
    return spec, out.arrays, out.ids


def _encode(value: Any, out: _Arrays) -> Any:
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise TypeError("object arrays are not kept")
        run = _run_of(value, out.columns)
        if run is not None:
            return {"col": run[0], "lo": run[1], "n": len(value), "kind": value.dtype.kind}
        return {"a": out.add(value)}
    if isinstance(value, (bool, int, float, str)) or value is None:
        return {"j": value}
    if isinstance(value, tuple) and all(isinstance(v, np.ndarray) for v in value):
        return {"t": [_encode(v, out) for v in value]}
    if isinstance(value, tuple) and all(isinstance(v, (int, float)) for v in value):
        return {"j": list(value), "tuple": True}
    kind = type(value).__name__
    if dataclasses.is_dataclass(value) and _KINDS.get(kind) is type(value):
        fields = {f.name: _encode(getattr(value, f.name), out) for f in dataclasses.fields(value)}
        for f in _IDS.get(kind, ()):
            if "a" in fields[f]:
                out.ids.add(fields[f]["a"])
        cached = {k: _encode(value.__dict__[k], out) for k in _CACHED.get(kind, ()) if k in value.__dict__}
        return {"d": kind, "f": fields, "c": cached}
    if isinstance(value, list) and value and all(type(v) is type(value[0]) for v in value):
        return _encode_list(value, out)
    if isinstance(value, list) and not value:
        return {"j": [], "list": True}
    raise TypeError(f"{type(value).__name__} is not kept")


def _encode_list(items: list, out: _Arrays) -> dict:
    """A list of one dataclass kind whose fields are ints or 1-d arrays: per field, one
    array (ints) or one concatenation plus each item's offsets (arrays)."""
    kind = type(items[0]).__name__
    if _KINDS.get(kind) is not type(items[0]):
        raise TypeError(f"lists of {kind} are not kept")
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(items[0]):
        values = [getattr(v, f.name) for v in items]
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            fields[f.name] = {"ints": out.add(np.asarray(values, dtype=np.int64))}
        elif all(isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype != object for v in values) \
                and len({v.dtype for v in values}) == 1:
            offsets = np.zeros(len(values) + 1, dtype=np.int64)
            np.cumsum([len(v) for v in values], out=offsets[1:])
            whole = _tiled(values, offsets)  # views that tile one (mapped) array: kept as it is
            fields[f.name] = {"cat": out.add(whole if whole is not None else np.concatenate(values)),
                              "at": out.add(offsets)}
        else:
            raise TypeError(f"{kind}.{f.name} is not kept")
    return {"ld": kind, "n": len(items), "f": fields}


def _tiled(values: list, offsets: np.ndarray) -> Any:
    """The one array `values` are consecutive views of, covering it exactly, or None: the
    flow binding's segments are views of mapped files, and concatenating them would read
    every page of those files into memory to write the same bytes again."""
    base = values[0].base
    if base is None or not isinstance(base, np.ndarray) or base.ndim != 1 or not base.flags.c_contiguous \
            or base.dtype != values[0].dtype or len(base) != int(offsets[-1]):
        return None
    step, at = base.dtype.itemsize, base.ctypes.data
    for v, o in zip(values, offsets[:-1].tolist()):
        if v.base is not base or v.ctypes.data != at + o * step or (len(v) > 1 and v.strides[0] != step):
            return None
    return base


def _run_of(a: np.ndarray, columns: dict[str, np.ndarray]) -> Optional[tuple[str, int]]:
    """(column name, first row) when `a` is a view of rows of one of `columns`: same dtype,
    both laid out one value after the next, `a`'s memory inside the column's."""
    if a.ndim != 1 or not len(a):
        return None
    step = a.dtype.itemsize
    if a.strides[0] != step:
        return None
    at = a.ctypes.data
    for name, c in columns.items():
        if not isinstance(c, np.ndarray) or c.ndim != 1 or c.dtype != a.dtype or c.strides[0] != step or not len(c):
            continue
        off = at - c.ctypes.data
        if off >= 0 and off % step == 0 and off // step + len(a) <= len(c):
            return name, off // step
    return None


def decode(spec: dict, array: Callable[[str], np.ndarray],
           column: Optional[Callable[[str], np.ndarray]] = None) -> Prepared:
    """The `Prepared` a spec describes, its arrays from `array(name)` (mapped, read-only),
    runs of the table's columns from `column(name)`. `ValueError` for anything this module
    did not write (a run past its column included)."""
    if not isinstance(spec, dict):
        raise ValueError("the prepared state's spec is not an object")
    names = {f.name for f in dataclasses.fields(Prepared)}
    kept = {}
    for name, value in spec.items():
        if name not in names:
            raise ValueError(f"the prepared state names no field {name!r}")
        kept[name] = _decode(value, array, column)
    return Prepared(**kept)


def _decode(node: Any, array: Callable[[str], np.ndarray], column: Optional[Callable[[str], np.ndarray]]) -> Any:
    if not isinstance(node, dict):
        raise ValueError("a prepared value is not an object")
    if "a" in node:
        return array(str(node["a"]))
    if "col" in node:
        lo, n = node.get("lo"), node.get("n")
        if column is None or type(lo) is not int or type(n) is not int or lo < 0 or n < 1:
            raise ValueError("a prepared run of a column is not one")
        c = column(str(node["col"]))
        if c.dtype.kind != node.get("kind"):  # its width may differ: a stored column's ids are narrowed
            raise ValueError(f"column {node['col']!r} is not of the prepared run's kind")
        if lo + n > len(c):
            raise ValueError(f"a prepared run of rows is past the {len(c)} of column {node['col']!r}")
        v = c[lo:lo + n]
        v.flags.writeable = False
        return v
    if "j" in node:
        value = node["j"]
        if node.get("tuple"):
            if not isinstance(value, list) or not all(isinstance(v, (int, float)) for v in value):
                raise ValueError("a prepared tuple holds other values")
            return tuple(value)
        if node.get("list"):
            return []
        if not (isinstance(value, (bool, int, float, str)) or value is None):
            raise ValueError("a prepared value is not a plain one")
        return value
    if "t" in node:
        return tuple(_decode(v, array, column) for v in node["t"])
    if "d" in node:
        cls = _KINDS.get(node["d"])
        if cls is None:
            raise ValueError(f"the prepared state names an unknown kind {node['d']!r}")
        want = {f.name for f in dataclasses.fields(cls)}
        if set(node["f"]) != want:
            raise ValueError(f"the prepared {node['d']} has other fields")
        value = cls(**{k: _decode(v, array, column) for k, v in node["f"].items()})
        for k, v in dict(node.get("c", {})).items():
            if k not in _CACHED.get(node["d"], ()):
                raise ValueError(f"the prepared {node['d']} caches no {k!r}")
            value.__dict__[k] = _decode(v, array, column)
        return value
    if "ld" in node:
        cls = _KINDS.get(node["ld"])
        if cls is None:
            raise ValueError(f"the prepared state names an unknown kind {node['ld']!r}")
        n = int(node["n"])
        want = {f.name for f in dataclasses.fields(cls)}
        if set(node["f"]) != want or n < 0:
            raise ValueError(f"the prepared {node['ld']} list has other fields")
        columns: dict[str, Callable[[int], Any]] = {}
        for name, f in node["f"].items():
            if "ints" in f:
                ints = array(str(f["ints"]))
                if len(ints) != n:
                    raise ValueError(f"the prepared {node['ld']}.{name} has {len(ints)} values, not {n}")
                columns[name] = lambda i, ints=ints: int(ints[i])
            else:
                cat, at = array(str(f["cat"])), array(str(f["at"]))
                if len(at) != n + 1 or (n and (int(at[0]) != 0 or int(at[-1]) != len(cat)
                                               or np.any(np.diff(at) < 0))):
                    raise ValueError(f"the prepared {node['ld']}.{name} offsets do not fit")
                columns[name] = lambda i, cat=cat, at=at: cat[int(at[i]):int(at[i + 1])]
        return [cls(**{k: get(i) for k, get in columns.items()}) for i in range(n)]
    raise ValueError("a prepared value of no known shape")
