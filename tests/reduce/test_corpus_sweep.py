"""Every real trace of ../shared/corpus, at every level, judged by the oracle.

The corpus holds what real profilers write (Kineto on NVIDIA/AMD/MTIA, catapult's
phase zoo, viztracer, speedscope, JAX), so this sweep is where the quirks the
property tests can only imitate actually occur: epoch timestamps whose ulp is 0.25 µs,
hundreds of thousands of M events, flows by the ten thousand. Each trace is reduced
at levels 0–4 over the whole trace and once at level 2 over the middle third of it,
and every output is checked by `reference_checker.check_reduction`. XSpace files
(TensorFlow multi-GPU, TPU, JAX on MI300X and on the CPU) are judged against the
independent conversion of `xspace_oracle`, whose equality with our own level 0 is
tested in test_xspace.
"""

from __future__ import annotations

import gc
import io
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from corpus_support import CORPUS, CORRUPT_XSPACE, NOT_A_TRACE, TRACES

from tb_reduce_plugin import native as native_module
from tb_reduce_plugin.errors import TraceError
from tb_reduce_plugin.reduce import plan
from tb_reduce_plugin.reduce.pipeline import TraceIndex, index_file, reduce_index, reduce_to_bytes
from tests.reference_checker import check_reduction, default_window, load_trace
from tests.table_equality import native
from tests.xspace_oracle import convert

# File-major order, so that each input is read, modelled and indexed once for its six
# reductions (pytest-xdist hands each worker runs of consecutive tests).
CASES = [(trace, level, windowed) for trace in TRACES for level, windowed in [*((lv, False) for lv in range(5)), (2, True)]]

pytestmark = [
    pytest.mark.corpus,
    pytest.mark.skipif(not CORPUS.is_dir(), reason=f"{CORPUS} is absent: no real traces to sweep"),
]

_parsed: dict[str, Any] = {}
_indexed: dict[str, TraceIndex] = {}
_native_indexed: dict[str, TraceIndex] = {}


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cycle collector while millions of acyclic JSON objects are made.

    With a parsed input of up to ~1 GB alive, every full collection walks all of it;
    parsing and checking create no cycles worth collecting, and pausing the
    collector there cuts the sweep's time by about a fifth.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _input(trace: str) -> Any:
    """The parsed input, kept for one trace at a time (the largest is ~1 GB of objects)."""
    if trace not in _parsed:
        _parsed.clear()
        with _gc_paused():
            _parsed[trace] = convert(CORPUS / trace) if trace.endswith(".pb") else load_trace(CORPUS / trace)
    return _parsed[trace]


def _index(trace: str) -> TraceIndex:
    """Our index of the trace, made by its first case and read by the others.

    A server answers every view of a trace from one index, so the levels are reduced
    as it reduces them: from the index an earlier view read (and prepared state for).
    Parsing each trace again for each of its six cases was a fifth of the sweep's time;
    that a fresh index and one earlier views prepared give the same bytes is
    test_index_store's concern, on every corpus trace.
    """
    if trace not in _indexed:
        _indexed.clear()
        _indexed[trace] = index_file(CORPUS / trace)
    return _indexed[trace]


def _reduced(trace: str, level: int, start: float | None, end: float | None) -> bytes:
    buf = io.BytesIO()
    reduce_index(_index(trace), buf, level, start, end, gzip=False)
    return buf.getvalue()


def _twin_of_pure_run() -> bool:
    """Whether this run is `make test-pure`'s (the native scanner switched off) on a machine
    where the scanner is built: its outputs are then compared with the native path's."""
    return os.environ.get("TB_REDUCE_NATIVE") == "0" and native_module.available()


def _reduced_natively(trace: str, level: int, start: float | None, end: float | None) -> bytes:
    """The same reduction by the native paths (reading, summaries' busy digits, level 2's
    args check), from a native index of the trace made once for its cases."""
    with native(True):
        if trace not in _native_indexed:
            _native_indexed.clear()
            _native_indexed[trace] = index_file(CORPUS / trace)
        buf = io.BytesIO()
        reduce_index(_native_indexed[trace], buf, level, start, end, gzip=False)
    return buf.getvalue()


def _case_id(case: tuple[str, int, bool]) -> str:
    trace, level, windowed = case
    return f"{Path(trace).name}-L{level}{'-middle-third' if windowed else ''}"


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_every_corpus_trace_reduces_within_the_guarantees(case: tuple[str, int, bool]) -> None:
    """Judged by the oracle; in the pure-Python run, where the scanner is built, byte for
    byte against the native paths' output instead (which `make test` judges by the oracle):
    the same verdict, at every level, for a fraction of the checker's time."""
    trace, level, windowed = case
    if _twin_of_pure_run():
        start = end = None
        if windowed:
            t0, t1 = plan.default_window(_index(trace).table)
            start, end = t0 + (t1 - t0) / 3, t0 + 2 * (t1 - t0) / 3
        pure = _reduced(trace, level, start, end)
        assert pure == _reduced_natively(trace, level, start, end), (
            f"{trace} at level {level}{' (middle third)' if windowed else ''}: the pure-Python paths wrote other "
            "bytes than the native ones")
        return
    doc = _input(trace)
    start = end = None
    if windowed:
        window = default_window(doc)
        assert window is not None, f"{trace} has no timestamped event"
        t0, t1 = window
        start, end = t0 + (t1 - t0) / 3, t0 + 2 * (t1 - t0) / 3
    data = _reduced(trace, level, start, end)
    with _gc_paused():
        check_reduction(doc, json.loads(data), level, start, end)


def test_the_corpus_holds_the_traces_this_sweep_expects() -> None:
    """A sweep over nothing would pass: make sure the corpus was found and read."""
    assert len(TRACES) >= 58, TRACES
    assert sum(t.endswith(".xplane.pb") for t in TRACES) == 9, TRACES
    assert (CORPUS / NOT_A_TRACE).is_file() and (CORPUS / CORRUPT_XSPACE).is_file()


def test_a_rocprofiler_results_file_is_refused_as_not_a_trace() -> None:
    with pytest.raises(TraceError) as err:
        reduce_to_bytes(CORPUS / NOT_A_TRACE, level=2)
    assert "\n" not in str(err.value) and str(err.value)


def test_the_corrupt_xspace_is_refused_with_a_one_line_reason() -> None:
    with pytest.raises(TraceError) as err:
        reduce_to_bytes(CORPUS / CORRUPT_XSPACE, level=2)
    assert "\n" not in str(err.value) and "XSpace" in str(err.value)
