"""What kind of work a slice is: the rule table behind the per-step busy series.

docs/SEMANTICS.md ("Waveforms") states these rules for users; this table is the one
place they live in code. Each slice gets the category of the FIRST rule that
matches it (or none). A rule looks at the slice's category (`cat`), its name, the
name of its thread (XSpace line) and whether its track is a device track; it is
evaluated once per distinct value (name, cat, track), never per event, and applied
to all slices with numpy.

Scope: when a trace has device tracks, compute, communication and memory are
measured on the device (what the accelerator did), and the host's own ops are not
counted again; a CPU-only trace measures them on the host. Data loading is always
a host activity.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from ..model.table import EventTable

COMPUTE, COMMUNICATION, MEMORY, DATA_LOADING = "compute", "communication", "memory", "data_loading"
DEVICE_IDLE = "device_idle"
UNACCOUNTED = "unaccounted"
CATEGORIES = (COMPUTE, COMMUNICATION, MEMORY, DATA_LOADING)  # in the order series are listed
NONE = -1

# Where a rule applies: on device tracks; on host tracks of a trace without device
# tracks; on host tracks always.
DEVICE, HOST_ONLY_TRACE, HOST = "device", "host-only-trace", "host"

# Categories a profiler writes on device activity (Kineto, its older `Kernel`/`Memcpy` spelling).
DEVICE_CATS = ("kernel", "Kernel", "gpu_memcpy", "gpu_memset", "Memcpy", "Memset", "gpu_user_annotation",
               "mtia_ccp_events")
# Slices that wrap work rather than do it: user ranges (`record_function`, `TraceAnnotation`
# written by PyTorch) and Python frames (PyTorch's `python_function`). Time under one of
# them that no op covers is exactly a stall (a `sleep` inside `record_function("data")`),
# so the `unaccounted` series does not count them as work.
WRAPPER_CATS = ("user_annotation", "gpu_user_annotation", "python_function")
# XSpace's Python tracer (JAX, TensorFlow) names a frame `$file.py:line function` or
# `$module function` (`$time sleep`): a frame too, not an op.
PYTHON_FRAME = re.compile(r"^\$")
# PyTorch runs a GPU backward on autograd's own threads (one per device) while the thread
# that called `backward()` waits; their ops are the step's work done elsewhere. A thread
# is one of them when it holds a slice autograd names: `autograd::engine::evaluate_function: …`
# or the node itself (`ReluBackward0`; PyTorch 1.x wrote only that). A CPU backward runs on
# the caller's thread.
BACKWARD_OP = re.compile(r"^autograd::engine::evaluate_function: |^\w+Backward\d*$")

# Process names of device tracks: XSpace planes (`/device:GPU:0`, `/device:TPU:0`).
DEVICE_PROCESS = re.compile(r"^/device:")

_COLLECTIVE = (r"nccl|rccl|all-?reduce|all_reduce|allreduce|all-?gather|all_gather|allgather|reduce-?scatter"
               r"|reduce_scatter|all-?to-?all|all_to_all|alltoall|collective-?permute|collective_permute"
               r"|^(send|recv)(-done|-start)?(\.\d+)?$|c10d::|gloo:|record_param_comms")


@dataclass(frozen=True)
class Rule:
    """Slices matching every given field belong to `category` (an empty field matches all)."""

    category: str
    where: str
    cats: Sequence[str] = ()
    name: Optional[str] = None  # a regular expression searched in the slice's name
    thread: Optional[str] = None  # a regular expression searched in its thread's name

    def matches_name(self, names: list, used: np.ndarray) -> np.ndarray:
        """Per name id: does the rule's name pattern match (looked at only for `used` ids)."""
        out = np.zeros(len(names), dtype=bool)
        ids = np.flatnonzero(used)
        out[ids] = _search(self.name, [names[i] for i in ids.tolist()])
        return out

    def matches_thread(self, thread_names: list) -> np.ndarray:
        return _search(self.thread, thread_names)

    def matches_cat(self, cats: list) -> np.ndarray:
        if not self.cats:
            return np.ones(len(cats), dtype=bool)
        return np.fromiter((c in self.cats for c in cats), dtype=bool, count=len(cats))


RULES: tuple[Rule, ...] = (
    # On the device (Kineto kernels and copies; XSpace GPU streams and TPU "XLA Ops").
    Rule(COMMUNICATION, DEVICE, name=f"(?i){_COLLECTIVE}"),
    Rule(MEMORY, DEVICE, cats=("gpu_memcpy", "gpu_memset", "Memcpy", "Memset")),
    Rule(MEMORY, DEVICE, name=r"(?i)^(memcpy|memset|copy(device|host)to(device|host))|^copy-(start|done)"),
    Rule(MEMORY, DEVICE, thread=r"\((Memcpy|Memset)"),
    Rule(COMPUTE, DEVICE, cats=("kernel", "Kernel", "mtia_ccp_events")),
    Rule(COMPUTE, DEVICE, thread=r"^Stream #|^XLA Ops$"),
    # On the host, always.
    Rule(DATA_LOADING, HOST, name=r"DataLoader|IteratorGetNext|^Iterator::|^tf_data|data_loader"),
    # On the host of a trace without device tracks.
    Rule(COMMUNICATION, HOST_ONLY_TRACE, name=f"(?i){_COLLECTIVE}"),
    # Not Kineto's `[memory]`: an allocation is an instant, not busy time.
    Rule(MEMORY, HOST_ONLY_TRACE, name=r"(?i)^(aten::)?(memcpy|memset|copy_)"),
    Rule(COMPUTE, HOST_ONLY_TRACE, cats=("cpu_op", "Operator")),
    Rule(COMPUTE, HOST_ONLY_TRACE, name=r"^ThunkExecutor::Execute$|Executable::Execute"),
)


CHUNK_ROWS = 1 << 19  # events or slices read at once


def _search(pattern: Optional[str], values: list) -> np.ndarray:
    if pattern is None:
        return np.ones(len(values), dtype=bool)
    rx = re.compile(pattern)
    return np.fromiter((isinstance(v, str) and rx.search(v) is not None for v in values), dtype=bool,
                       count=len(values))


def device_tracks(t: EventTable) -> np.ndarray:
    """Per track: does it belong to a device (an XSpace device plane, or it holds an
    event whose category only device activity has). Read a chunk of events at a time."""
    device = np.zeros(len(t.tracks), dtype=bool)
    pids = [pid for pid, _ in t.tracks]
    named = np.fromiter((isinstance(t.process_names.get(p), str) and DEVICE_PROCESS.search(t.process_names[p])
                         is not None for p in pids), dtype=bool, count=len(pids))
    device |= named
    cat_is_device = np.fromiter((c in DEVICE_CATS for c in t.cats), dtype=bool, count=len(t.cats))
    if cat_is_device.any():
        for a in range(0, len(t.cat), CHUNK_ROWS):
            device[t.track[a:a + CHUNK_ROWS][cat_is_device[t.cat[a:a + CHUNK_ROWS]]]] = True
    return device


class SliceKinds:
    """What the rules say of slices — their category (`RULES`), whether they only wrap work
    (`WRAPPER_CATS`, `PYTHON_FRAME`), whether their name is a backward op — decided once per
    distinct cat, name (of those `used`) and thread, then looked up a chunk of slices at a
    time: the same answers as deciding every slice at once."""

    def __init__(self, t: EventTable, used: np.ndarray, on_device: np.ndarray) -> None:
        self.on_device = on_device
        self._cat = t.cat
        has_device = bool(on_device.any())
        thread_names = [t.thread_names.get(i, "") for i in range(len(t.tracks))]
        self._rules = []
        for rule in RULES:
            if rule.where == HOST_ONLY_TRACE and has_device:
                continue
            self._rules.append((rule.where == DEVICE, CATEGORIES.index(rule.category),
                                rule.matches_cat(t.cats) if rule.cats else None,
                                rule.matches_name(t.names, used) if rule.name is not None else None,
                                rule.matches_thread(thread_names) if rule.thread is not None else None))
        self._cat_wraps = np.fromiter((c in WRAPPER_CATS for c in t.cats), dtype=bool, count=len(t.cats))
        ids = np.flatnonzero(used)
        used_names = [t.names[i] for i in ids.tolist()]
        self._frame = np.zeros(len(t.names), dtype=bool)
        self._frame[ids] = _search(PYTHON_FRAME.pattern, used_names)
        self.backward = np.zeros(len(t.names), dtype=bool)  # per name: an autograd backward op
        self.backward[ids] = _search(BACKWARD_OP.pattern, used_names)

    def category(self, events: np.ndarray, tracks: np.ndarray, names: np.ndarray) -> np.ndarray:
        """The category of each slice (an index into CATEGORIES, or NONE): the first rule that takes it."""
        out = np.full(len(events), NONE, dtype=np.int8)
        if not len(out):
            return out
        cats = self._cat[events]
        device = self.on_device[tracks]
        for on_device, category, by_cat, by_name, by_thread in self._rules:
            ok = (out == NONE) & (device if on_device else ~device)
            if not ok.any():
                continue
            if by_cat is not None:
                ok &= by_cat[cats]
            if by_name is not None:
                ok &= by_name[names]
            if by_thread is not None:
                ok &= by_thread[tracks]
            out[ok] = category
        return out

    def wraps(self, events: np.ndarray, names: np.ndarray) -> np.ndarray:
        """Per slice: does it only wrap work (a user annotation or a Python frame)?"""
        return self._cat_wraps[self._cat[events]] | self._frame[names]
