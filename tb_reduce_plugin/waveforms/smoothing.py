"""TensorBoard's scalar smoothing (`classicSmoothing`), operation for operation.

The dashboard's curves must look like the ones users know from TensorBoard, so this
is a transcription of `classicSmoothing` in TensorBoard's
`webapp/widgets/line_chart_v2/data_transformer.ts`: a debiased exponential moving
average (a first-order IIR low-pass filter started at 0, divided by 1 - w**n).
The same operations run in the same order on IEEE doubles, so the results are the
JavaScript's bit for bit, `Math.pow` aside (V8's and C's `pow` may differ in the last
bit for some arguments; with w a power of two, or w**n exact, they cannot).

Its quirks are kept, since they are what users see:

- a weight that is not finite counts as 0; the weight is clamped to [0, 1];
- a series whose values all `==` the first is returned unsmoothed (TensorBoard
  issue #786); JavaScript's `==`, so a series starting with NaN is never constant;
- a non-finite value (NaN, ±Infinity) is passed through as it is, and neither feeds
  the average nor counts towards the debiasing;
- with w == 1 the average never leaves its start, 0, and is not divided (1 - 1**n = 0).
"""

from __future__ import annotations

import math
from typing import Sequence, Union

import numpy as np

DEFAULT_WEIGHT = 0.6  # TensorBoard's default
MAX_WEIGHT = 0.999  # the dashboard slider's top: at 1 the curve is flat at 0


def smooth(values: Union[Sequence[float], np.ndarray], weight: float) -> np.ndarray:
    """The smoothed `values` (float64, same length) for smoothing `weight` in [0, 1]."""
    w = float(weight)
    if not math.isfinite(w):
        w = 0.0
    w = max(0.0, min(w, 1.0))  # Math.max(0, Math.min(w, 1)): -0.0 becomes 0.0 in both
    ys = np.asarray(values, dtype=np.float64).ravel()
    if ys.size == 0:
        return ys.copy()
    first = ys[0]
    if bool(np.all(ys == first)):  # NaN == NaN is false in numpy as in JavaScript
        return ys.copy()
    out = ys.tolist()  # Python floats: the loop below is the JavaScript's, per value
    isfinite = math.isfinite
    last = 0.0
    n = 0
    one_minus_w = 1 - w
    for k, y in enumerate(out):
        if not isfinite(y):
            continue  # passed through
        last = last * w + one_minus_w * y
        n += 1
        out[k] = last / (1 if w == 1 else 1 - w**n)
    return np.array(out, dtype=np.float64)
