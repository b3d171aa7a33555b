"""Two trace files compared, within one memory budget (what `tb-reduce diff` runs).

Both indexes are held at once (the names are joined across them), each charged to the
budget as `tb-reduce waveforms` charges one, and the range tables' working memory on
top; a pair that needs more is refused with the flag to raise, before the tables.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional, Sequence, Union

from ..budget import MemoryBudget, Unlimited
from ..formats.sources import DEFAULT_MAX_INFLATED_BYTES, FileIdentity
from ..query.aggregate import working_bytes
from ..reduce.pipeline import TraceIndex, derive_index, index_file
from .diff import Side, Verdict, compare, hold
from .gate import Condition
from .steps import StepRange

PathLike = Union[str, "os.PathLike[str]"]


def diff_files(base: PathLike, candidate: PathLike, steps: Optional[StepRange] = None,
               conditions: Sequence[Condition] = (), max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
               max_memory_bytes: Optional[int] = None,
               indexer: Optional[Callable[..., TraceIndex]] = None,
               base_steps: Optional[StepRange] = None,
               expect: Sequence[Optional[FileIdentity]] = (None, None)) -> tuple[dict[str, Any], list[Verdict]]:
    """The comparison document of `candidate` against `base`, and the gate's verdicts.
    `steps` chooses the steps of both, `base_steps` (when given) the base's own: a step
    range of a trace can be the baseline of another range of the same trace. `expect`: the
    version of each file a listing saw (a run folder's), read only if it is still that one."""
    paths = [os.fspath(base), os.fspath(candidate)]
    labels = _labels(paths)
    budget = MemoryBudget(max_memory_bytes, flag="--max-memory-mb") if max_memory_bytes else Unlimited()
    sides = []
    ranges = [base_steps if base_steps is not None else steps, steps]
    if paths[0] == paths[1] and ranges[0] != ranges[1]:  # one trace, two step ranges: named by them
        labels = [f"{labels[0]} steps {ranges[0] or 'all'}", f"{labels[1]} steps {ranges[1] or 'all'}"]
    for path, label, rng, version in zip(paths, labels, ranges, expect):
        reading = budget.account(f"reading {os.path.basename(path)}")
        index = (indexer or index_file)(path, max_inflated_bytes=max_inflated_bytes, account=reading,
                                        **({} if version is None else {"expect": version}))
        index.account = reading
        with budget.account(f"deriving the steps of {os.path.basename(path)}") as deriving:
            series = derive_index(index, deriving)
        sides.append(Side.of(label, index.table, series, rng))
    with budget.account("comparing the two traces") as comparing:
        comparing.charge(sum(working_bytes(s.table) for s in sides), "the range tables of both traces")
        doc = compare(sides[0], sides[1])
        verdicts = hold(conditions, sides[0], sides[1])
    return doc, verdicts


def _labels(paths: list[str]) -> list[str]:
    """How each trace is named in the report: its file name, or its path where both names are the same."""
    names = [os.path.basename(p) for p in paths]
    return paths if names[0] == names[1] else names
