"""Traces that the engine's chunked paths are compared on against their whole-array oracles
(tests/reduce/test_plan_memory.py, tests/query/test_query_aggregate_chunks.py), and a writer for the
small synthetic ones those tests make."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from conftest import ROOT

CORPUS = ROOT.parent / "shared" / "corpus"
TORCH_GPU = ROOT / "tests" / "fixtures" / "gpu" / "h200.1796405874008523308.pt.trace.json.gz"
STALLED = ROOT / "demo_logdir" / "stalled_step" / "torch_stalled_step.pt.trace.json.gz"
XSPACE = ROOT / "tests" / "fixtures" / "traces" / "jax_stalled_step.xplane.pb"


def oracle_traces() -> list[Path]:
    """The GPU fixture, the demo's stalled step, a JAX XSpace, and the first 40 corpus traces."""
    found = [TORCH_GPU, STALLED, XSPACE]
    if CORPUS.is_dir():
        found += sorted(p for p in CORPUS.rglob("*") if p.is_file() and "CORRUPT" not in p.name
                        and p.name.endswith((".json", ".json.gz", ".pb")))[:40]
    return found


def write_trace(path: Path, events: list[dict]) -> Path:
    """`events` as a gzip Chrome trace (Object format) at `path`."""
    data = json.dumps({"traceEvents": events}).encode()  # whole, then one write: json.dump's many
    with gzip.open(path, "wb", compresslevel=1) as f:  # small writes through a text layer took 5x as long
        f.write(data)
    return path
