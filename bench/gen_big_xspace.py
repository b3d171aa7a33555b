"""Write a big XSpace (`*.xplane.pb`) from a real one: its lines repeated with shifted times.

    python3 bench/gen_big_xspace.py SOURCE.xplane.pb --size-mb 1024 -o /tmp/bigx/host.xplane.pb

JAX needs ~17 GB of RAM to record a 326 MB profile, so the XSpaces that test ingest at
1 GB are made here: each plane of SOURCE keeps its metadata and stats once, and its
lines are written again and again, copy k with `timestamp_ns` moved on by k times the
source's span (plus a gap), until the file reaches `--size-mb`. The events' bytes are
the source's own, unchanged: the same names, stats and step markers, later in time.
Repeated lines keep their ids, so a reader gives each copy a track of its own (as
tb-reduce and XProf do for lines sharing an id).

Streams: memory is the source's size, whatever `--size-mb` says; the XSpace's and
each plane's length prefixes are computed before anything is written.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tb_reduce_plugin.formats.xspace import _varint  # noqa: E402
from tb_reduce_plugin.formats.xspace_schema import XSpace  # noqa: E402


def _field(number: int, payload_len: int) -> bytes:
    """The tag and length of a length-delimited field."""
    return _varint(number << 3 | 2) + _varint(payload_len)


def _span_ns(space: XSpace) -> int:
    """From the first line's start to the last event's end, over every plane (ns)."""
    lo, hi = None, None
    for plane in space.planes:
        for line in plane.lines:
            if not len(line.events):
                continue
            end_ps = max(ev.offset_ps + ev.duration_ps for ev in line.events)
            a, b = line.timestamp_ns, line.timestamp_ns + end_ps // 1000 + 1
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
    return 0 if lo is None else hi - lo


def _sizes(lines: list, k: int, step_ns: int) -> list[int]:
    """Each line's serialized size in copy k: its own, with `timestamp_ns` (field 3, a
    one-byte tag, left out when 0) moved on by k steps."""
    out = []
    for ln in lines:
        old, new = ln.timestamp_ns, ln.timestamp_ns + k * step_ns
        size = ln.ByteSize() - (1 + len(_varint(old)) if old else 0) + (1 + len(_varint(new)) if new else 0)
        out.append(size)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", help="a real *.xplane.pb")
    ap.add_argument("--size-mb", type=float, default=1024.0, help="size to reach, MiB (default 1024)")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()

    space = XSpace.FromString(Path(a.source).read_bytes())
    step_ns = _span_ns(space) * 21 // 20 + 1000  # a 5 % gap between copies
    planes = []  # (head bytes, [line], line bytes per copy)
    for plane in space.planes:
        lines = [ln for ln in plane.lines if len(ln.events)]
        head = XSpace()
        p = head.planes.add()
        p.CopyFrom(plane)
        del p.lines[:]
        head_bytes = p.SerializeToString()
        one = sum(len(_field(3, ln.ByteSize())) + ln.ByteSize() for ln in lines)  # copy 0's size
        planes.append((head_bytes, lines, one))
    rest = XSpace()
    rest.CopyFrom(space)
    del rest.planes[:]
    rest_bytes = rest.SerializeToString()
    per_copy = sum(one for _, _, one in planes)
    fixed = len(rest_bytes) + sum(len(h) + 16 for h, _, _ in planes)
    copies = max(1, int((a.size_mb * 1024 * 1024 - fixed) // max(per_copy, 1)))

    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    events = 0
    with open(a.out, "wb") as f:
        for head, lines, _ in planes:
            size = len(head) + sum(len(_field(3, n)) + n for k in range(copies) for n in _sizes(lines, k, step_ns))
            f.write(_field(1, size))
            f.write(head)
            for k in range(copies):
                for ln in lines:
                    base = ln.timestamp_ns
                    ln.timestamp_ns = base + k * step_ns
                    body = ln.SerializeToString()
                    ln.timestamp_ns = base
                    f.write(_field(3, len(body)))
                    f.write(body)
                    events += len(ln.events)
        f.write(rest_bytes)
    print(f"{a.out}: {os.path.getsize(a.out) / 2**20:,.0f} MiB, {copies} copies of {sum(len(ls) for _, ls, _ in planes)}"
          f" lines, {events:,} events, copies {step_ns / 1e6:,.1f} ms apart")


if __name__ == "__main__":
    main()
