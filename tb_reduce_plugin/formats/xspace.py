"""XProf / JAX XSpace (`*.xplane.pb`) into the event model (`..xspace` does the work)."""

from __future__ import annotations

from typing import Any

from ..sources import TraceStream
from ..xspace import read_xspace
from . import Parsed, ReadOptions


def read_xspace_trace(stream: TraceStream, account: Any, options: ReadOptions) -> Parsed:
    space = read_xspace(stream, account)
    return Parsed(table=space.table, metadata=space.metadata, truncated=False, source=space, extra=space.extra)
