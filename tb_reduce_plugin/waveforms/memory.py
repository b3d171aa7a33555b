"""Memory per step, from Kineto's `[memory]` events (`torch.profiler(profile_memory=True)`).

PyTorch writes one instant per allocation and per free, named `[memory]`, whose args hold
the allocator's totals after it: `Total Allocated` and `Total Reserved` (bytes), and the
device (`Device Type`: 0 the CPU, 1 CUDA, …; `Device Id`, -1 for the CPU). They are
instants, not busy time (docs/SEMANTICS.md, rule 9); what a user asks of them is how much
memory a step held at its peak, per device: `memory_peak_mb_<device>` (`cpu`, `cuda0`, …),
the largest `Total Allocated` in MB (10⁶ bytes) inside the step, or carried into it from
the last sample before its start (allocated memory stays allocated until freed).

Reading the samples needs the events' args, which the index does not keep: the events are
read back from the trace (`reduce.pipeline.memory_samples`); the rest here is arrays.
JAX and XLA write no such events into a CPU profile's XSpace: checked on JAX's CPU profiles
(the demo's and tests/fixtures/compare/jax_*.xplane.pb), whose planes (`/host:CPU`,
`/host:metadata`) hold no allocator stat and no memory event — the only names that speak of
memory are host ops such as `AllocateOutputBuffersWithInputReuse`, slices like any other.
XProf's memory profile is built from allocation events of device planes (GPU, TPU), which
a CPU profile has none of; so these series are PyTorch's for now.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

MEMORY_EVENT = "[memory]"
MB = 1e6
_DEVICE_TYPES = {0: "cpu", 1: "cuda", 2: "mkldnn", 3: "opengl", 4: "opencl", 5: "ideep", 6: "hip", 7: "fpga",
                 8: "maia", 9: "xla", 10: "vulkan", 11: "metal", 12: "xpu", 13: "mps", 14: "meta", 15: "hpu",
                 16: "ve", 17: "lazy", 18: "ipu", 19: "mtia", 20: "privateuse1"}


@dataclass
class MemorySamples:
    """The allocator's totals after each allocation or free, in time order."""

    ts: np.ndarray  # µs
    device_type: np.ndarray  # int64
    device_id: np.ndarray  # int64
    allocated: np.ndarray  # bytes
    reserved: np.ndarray  # bytes
    track: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # each event's (its process)

    def __len__(self) -> int:
        return len(self.ts)

    @classmethod
    def empty(cls) -> MemorySamples:
        z = np.zeros(0)
        return cls(z, z.astype(np.int64), z.astype(np.int64), z, z)


def device_name(device_type: int, device_id: int) -> str:
    """`cpu`, `cuda0`, …: how a series names a device (an unknown type by its number)."""
    kind = _DEVICE_TYPES.get(int(device_type), f"device{int(device_type)}_")
    return kind if kind == "cpu" or device_id < 0 else f"{kind}{int(device_id)}"


def peak_per_step(samples: MemorySamples, start_us: np.ndarray, end_us: np.ndarray) -> dict[str, np.ndarray]:
    """Per device, `memory_peak_mb_<device>`: each step's largest allocated total (MB), the
    level carried in at its start included; NaN for a step before the device's first sample."""
    out: dict[str, np.ndarray] = {}
    if not len(samples) or not len(start_us):
        return out
    keys = np.stack([samples.device_type, samples.device_id], axis=1)
    devices = np.unique(keys, axis=0)
    for dtype_, did in devices.tolist():
        mine = (samples.device_type == dtype_) & (samples.device_id == did)
        ts, alloc = samples.ts[mine], samples.allocated[mine]
        order = np.argsort(ts, kind="stable")
        ts, alloc = ts[order], alloc[order]
        lo = np.searchsorted(ts, start_us, side="left")
        hi = np.searchsorted(ts, end_us, side="left")
        peak = np.full(len(start_us), np.nan)
        carried = lo > 0
        peak[carried] = alloc[lo[carried] - 1]  # allocated when the step began
        inside = hi > lo
        if inside.any():
            # The largest sample in [lo, hi) per step: a running maximum can't serve steps
            # that overlap or come out of order, so reduceat over the steps' own ranges.
            a, b = lo[inside], hi[inside]
            most = np.maximum.reduceat(alloc, a) if len(alloc) else np.zeros(0)
            # reduceat(alloc, a) runs to the next index in `a`, not to `b`: exact when the
            # steps' ranges follow one another; otherwise take each range on its own.
            exact = np.r_[a[1:], len(alloc)] == b
            vals = np.where(exact, most, 0.0)
            for k in np.flatnonzero(~exact).tolist():
                vals[k] = alloc[a[k]:b[k]].max()
            peak[inside] = np.fmax(peak[inside], vals)
        out[f"memory_peak_mb_{device_name(dtype_, did)}"] = peak / MB
    return dict(sorted(out.items()))


# The allocator's totals drawn as counters in the timeline (`counter_points`): (key, label).
COUNTER_KEYS = (("allocated", "memory allocated"), ("reserved", "memory reserved"))


def counter_points(samples: MemorySamples, tracks: list, t0: float, t1: float,
                   buckets: Optional[int]) -> list[dict]:
    """Per device, the allocated and reserved totals over [t0, t1] as counter series for the
    timeline, reduced by the counter rule (SPEC G4, docs/SEMANTICS.md): in each of `buckets`
    buckets its first, last, smallest and largest sample, and the sample before `t0` (the
    level carried into the window); every sample when `buckets` is None (level 0). Each
    series: `{"pid", "device", "key", "label", "ts": [µs], "mb": [MB]}`, on the process of the
    device's first event; a series that is 0 throughout (the CPU allocator reserves nothing)
    is left out."""
    out: list[dict] = []
    if not len(samples):
        return out
    keys = np.stack([samples.device_type, samples.device_id], axis=1)
    for dtype_, did in np.unique(keys, axis=0).tolist():
        mine = np.flatnonzero((samples.device_type == dtype_) & (samples.device_id == did))
        mine = mine[np.argsort(samples.ts[mine], kind="stable")]
        ts = samples.ts[mine]
        lo, hi = np.searchsorted(ts, t0, side="left"), np.searchsorted(ts, t1, side="right")
        pid = tracks[int(samples.track[mine[0]])][0]
        name = device_name(dtype_, did)
        for key, label in COUNTER_KEYS:
            values = getattr(samples, key)[mine]
            if not np.any(values[np.isfinite(values)]):  # the CPU allocator reserves nothing: no flat line of 0
                continue
            keep = _counter_keep(ts, values, lo, hi, t0, t1, buckets)
            ok = keep[np.isfinite(values[keep])]
            if not len(ok):
                continue
            out.append({"pid": pid, "device": name, "key": key, "label": f"{label} ({name}, MB)",
                        "ts": ts[ok].tolist(), "mb": (values[ok] / MB).tolist()})
    return out


def _counter_keep(ts: np.ndarray, values: np.ndarray, lo: int, hi: int, t0: float, t1: float,
                  buckets: Optional[int]) -> np.ndarray:
    """The samples (indices into `ts`, sorted) a window of `buckets` keeps of one series."""
    carried = np.array([lo - 1], dtype=np.int64) if lo > 0 else np.zeros(0, dtype=np.int64)
    inside = np.arange(lo, hi, dtype=np.int64)
    if buckets is None or len(inside) <= 4 * buckets:
        return np.concatenate((carried, inside))
    width = (t1 - t0) / buckets if t1 > t0 else 1.0
    b = np.clip(((ts[inside] - t0) / width).astype(np.int64), 0, buckets - 1)
    starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])  # b ascends with ts: runs of one bucket
    ends = np.r_[starts[1:], len(inside)] - 1
    v = np.where(np.isfinite(values[inside]), values[inside], np.nan)
    order = np.lexsort((np.nan_to_num(v, nan=np.inf), b))  # by bucket, then value
    first_of = np.searchsorted(b[order], b[starts], side="left")
    last_of = np.searchsorted(b[order], b[starts], side="right") - 1
    picked = np.concatenate((starts, ends, order[first_of], order[last_of]))
    return np.concatenate((carried, inside[np.unique(picked)]))
