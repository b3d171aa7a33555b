#!/usr/bin/env python3
"""Level 2's args policy (TRIM) over real events, three ways: `writer.transform` per event
with the native scanner looked up per event (as a single call does), per event with it
looked up once per batch, and `writer.transform_all` (what `write` calls: the batch checked
in one native call, only the events it names transformed one by one).

Each window's write transforms every kept event; the lookup reads the environment
(`native.scanner_module`, so a test can switch the extension off). Medians of 7 and
the ratios, in one process:

    python3 bench/bench_transform.py [TRACE]   # default: the committed H200 torch trace
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tb_reduce_plugin.native import scanner_module  # noqa: E402
from tb_reduce_plugin.reduce.levels import ArgsPolicy  # noqa: E402
from tb_reduce_plugin.reduce.writer import transform, transform_all  # noqa: E402


def median_s(fn) -> float:
    took = []
    for _ in range(7):
        t = time.perf_counter()
        fn()
        took.append(time.perf_counter() - t)
    return statistics.median(took)


def main() -> int:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "tests/fixtures/gpu/h200.1796405874008523308.pt.trace.json.gz"
    data = path.read_bytes()
    doc = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    raws = [json.dumps(e, separators=(",", ":")).encode() for e in doc["traceEvents"] if "args" in e][:50_000]
    native = scanner_module()
    each = median_s(lambda: [transform(r, ArgsPolicy.TRIM) for r in raws])
    once = median_s(lambda: [transform(r, ArgsPolicy.TRIM, native) for r in raws])
    batch = median_s(lambda: transform_all(raws, ArgsPolicy.TRIM, native))
    assert transform_all(raws, ArgsPolicy.TRIM, native) == [transform(r, ArgsPolicy.TRIM, native) for r in raws]
    print(f"{path.name}: {len(raws):,} events with args, native {'on' if native else 'off'}")
    print(f"looked up per event {each * 1e3:.1f} ms, once per batch {once * 1e3:.1f} ms: x{each / once:.2f}")
    print(f"checked per event {once * 1e3:.1f} ms, the batch at once {batch * 1e3:.1f} ms: x{once / batch:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
