"""The reduction levels in one place: their numbers, bucket counts and args policy.

A level says two things about a reduced trace (README, docs/SEMANTICS.md):

- how finely the window is cut into time buckets (`RESOLUTION`; level 0 is lossless
  and has none), which decides what planning keeps (`plan.plan`);
- what is written of a kept event's args (`ArgsPolicy`), which the writer
  (`writer.transform`) and the input formats (`EventSource.events`: an XSpace does not
  even decode the args a policy drops) carry out.

A view that fetches an event's args on click asks for no args at any level
(`drop_args`): the args policy then is `DROP` whatever the level, while the level
still decides the buckets. `args_policy` is the one place that rule lives.

This module imports nothing from the package: every layer may use it.
"""

from __future__ import annotations

from ..model.table import ArgsPolicy

LEVELS = (0, 1, 2, 3, 4)
# Buckets across the window, per level 1-4 (level 0 keeps every event: no buckets).
RESOLUTION = {1: 100_000, 2: 20_000, 3: 5_000, 4: 1_000}
MAX_RESOLUTION = 1_000_000  # buckets a window may be cut into: planning's arrays stay per event, not per bucket


_BY_LEVEL = {0: ArgsPolicy.KEEP, 1: ArgsPolicy.KEEP, 2: ArgsPolicy.TRIM, 3: ArgsPolicy.DROP, 4: ArgsPolicy.DROP}


def args_policy(level: int, drop_args: bool = False) -> ArgsPolicy:
    """The args policy of a reduction at `level` (0-4); `drop_args` (a view that fetches
    args on click) drops them at any level."""
    try:
        policy = _BY_LEVEL[level]
    except (KeyError, TypeError):
        raise ValueError(f"level must be one of {LEVELS}, not {level!r}") from None
    return ArgsPolicy.DROP if drop_args else policy
