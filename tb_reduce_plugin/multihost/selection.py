"""Which hosts of a run a merged view names: `hosts=a,b,…` or `hosts=*`."""

from __future__ import annotations

from typing import Sequence

ALL = "*"


class BadHosts(ValueError):
    """A merged view's `hosts` names no host, or more than a view shows."""


def pick_hosts(spec: str, listed: Sequence[str], exports: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """The hosts `spec` names, in the run's order, each once, and the names it gives that
    the run does not list. `*` is every host of the run but JAX's exports (whole or capped)
    (`exports`) of an XSpace the run also lists. Names are separated by commas; a host
    whose own name holds a comma is named alone, whole."""
    if spec == ALL:
        return [h for h in listed if h not in exports], []
    names = [spec] if spec in listed else [n for n in spec.split(",") if n]
    wanted = set(names)
    return [h for h in listed if h in wanted], [n for n in names if n not in listed]
