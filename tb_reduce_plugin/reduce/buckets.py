"""The view's bucket grid: a window cut into `r` buckets of equal width, and the bucket a
time falls in. The plan, its summaries and its points all cut the window so; it has a
module of its own, below them all, so that none of them imports another to reach it."""

from __future__ import annotations

import numpy as np


class _Buckets:
    def __init__(self, t0: float, t1: float, r: int) -> None:
        self.t0, self.t1, self.r = t0, t1, r
        self.theta = (t1 - t0) / r

    def of(self, t: np.ndarray) -> np.ndarray:
        b = np.floor((np.asarray(t, dtype=np.float64) - self.t0) / self.theta)
        return np.clip(b, 0, self.r - 1).astype(np.int64)

    def clipped(self, t: np.ndarray) -> np.ndarray:
        return self.of(np.clip(t, self.t0, self.t1))
