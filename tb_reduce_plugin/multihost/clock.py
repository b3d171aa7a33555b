"""Where each host's timestamps sit in real time, so hosts line up on the wall clock.

Each profiler writes times on its own origin:
- an XSpace's events are relative to the profile's start; its "Task Environment" plane
  keeps that start as `profile_start_time` (ns since the epoch);
- a Kineto trace (PyTorch) is relative to `baseTimeNanoseconds`, a top-level key shared
  by the ranks of one job; older Kineto traces write µs since the epoch directly;
- any other trace has no known origin: its hosts are lined up by their first event,
  and the view says so (`Alignment.absolute` is False).

Offsets are computed in integer nanoseconds: an origin near 1.8e15 µs has a float
spacing of 0.25 µs, which the merged timeline (µs from the earliest host's first event)
must not inherit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

# Timestamps in this range (µs) are taken as µs since the epoch: 2001-09-09 .. 2096-10-02.
EPOCH_US_MIN = 1e15
EPOCH_US_MAX = 4e15
TASK_ENVIRONMENT = "Task Environment"


@dataclass(frozen=True)
class HostClock:
    """A host's clock: `origin_ns`, the wall time (ns since the epoch) of its timestamp 0,
    or None when unknown; `source` says where it was read; `start_us`/`end_us` its trace's
    extent on its own clock."""

    origin_ns: Optional[int]
    source: str
    start_us: float
    end_us: float

    def describe(self) -> dict:
        return {"source": self.source, "origin_ns": self.origin_ns}


def _int(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and 0 < value < 1 << 63:
        return value
    if isinstance(value, float) and math.isfinite(value) and 0 < value < 2**63:
        return int(value)
    if isinstance(value, str) and value.isdigit() and len(value) <= 19:
        return int(value)
    return None


def host_clock(metadata: Any, start_us: float, end_us: float) -> HostClock:
    """The clock of a host whose trace has these top-level keys (`TraceIndex.metadata`,
    where an XSpace's planes and their stats are listed) and this extent."""
    meta = metadata if isinstance(metadata, dict) else {}
    xspace = meta.get("xspace")
    if isinstance(xspace, dict):
        for plane in xspace.get("planes") or ():
            if isinstance(plane, dict) and plane.get("name") == TASK_ENVIRONMENT:
                stats = plane.get("stats")
                origin = _int(stats.get("profile_start_time")) if isinstance(stats, dict) else None
                if origin is not None:
                    return HostClock(origin, "XSpace profile_start_time", start_us, end_us)
    base = _int(meta.get("baseTimeNanoseconds"))
    if base is not None:
        return HostClock(base, "Kineto baseTimeNanoseconds", start_us, end_us)
    if EPOCH_US_MIN <= start_us <= EPOCH_US_MAX:
        return HostClock(0, "timestamps since the epoch", start_us, end_us)
    return HostClock(None, "none", start_us, end_us)


@dataclass(frozen=True)
class Alignment:
    """Per host, the µs added to its timestamps on the merged timeline (whose 0 is the
    earliest first event of the hosts aligned on real time); `epoch_ns`, the wall time
    of that 0 (None when no host has a known origin); `absolute`, whether every host is
    placed by real time (else the others are lined up by their first events)."""

    offsets_us: tuple[float, ...]
    epoch_ns: Optional[int]
    absolute: bool


def align(clocks: Sequence[HostClock]) -> Alignment:
    known = [c for c in clocks if c.origin_ns is not None and math.isfinite(c.start_us)]
    epoch: Optional[int] = None
    if known:
        epoch = min(c.origin_ns + round(c.start_us * 1000) for c in known)  # type: ignore[operator]
    offsets = []
    for c in clocks:
        if epoch is not None and c.origin_ns is not None and math.isfinite(c.start_us):
            offsets.append((c.origin_ns - epoch) / 1000)
        else:
            offsets.append(-c.start_us if math.isfinite(c.start_us) else 0.0)
    return Alignment(tuple(offsets), epoch, bool(clocks) and len(known) == len(clocks))
