"""Which events a Chrome trace's coarse tier holds (`formats.block_store`): those a wide
window keeps whole, so that a zoom out reads them from the tier instead of inflating every
chunk of the text it spans.

A view keeps, besides summaries (made from the columns), the slices at least about a
bucket long, and instants, counters and metadata events (the first and last per bucket,
which can be any of them). So the tier holds every event but flows and the slices shorter
than `SHARE_OF_BUCKET` of a level-2 bucket of the whole trace: a window down to that share
of the trace finds nearly all it keeps there, and a narrower one spans little text. What
a window keeps outside the tier (a flow, a short slice at an edge) is read from the text,
so the tier decides speed, never output. On a Kineto trace it holds ~15 % of the events
(8.7 % instants, 6.6 % slices).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..model.table import FLOW_PHASES, PH_X, EventTable
from .levels import RESOLUTION
from .plan import default_window

SHARE_OF_BUCKET = 0.01


def tier_rows_of(table: EventTable) -> Callable[[int, int], np.ndarray]:
    """A mask of the tier's events among events a..b-1 (for `ChromeJsonEvents.tier_rows`)."""
    lo, hi = default_window(table)
    least = (hi - lo) / RESOLUTION[2] * SHARE_OF_BUCKET

    def rows(a: int, b: int) -> np.ndarray:
        ph = np.asarray(table.ph[a:b])
        return ~np.isin(ph, FLOW_PHASES) & ((ph != PH_X) | (np.asarray(table.dur[a:b]) >= least))

    return rows
