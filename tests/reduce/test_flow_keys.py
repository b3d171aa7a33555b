"""`flows._key_codes`: a window's flow keys numbered by counting over their span where it is
narrow, by a sort where it is not, with the same meaning either way."""

from __future__ import annotations

import numpy as np
import pytest

from tb_reduce_plugin.reduce import flows


@pytest.mark.parametrize("seed", range(20))
def test_flow_keys_get_one_code_each_and_their_counts_narrow_or_spread(seed) -> None:
    rng = np.random.default_rng(seed)
    spread = seed % 2 == 1  # keys far apart: counted by the sort
    n = int(rng.integers(0, 3000))
    pool = rng.integers(0, 10 ** 9 if spread else 5000, max(1, n // 3))
    key = rng.choice(pool, n).astype(np.int32 if seed % 4 < 2 else np.int64)
    code, ncodes, count = flows._key_codes(key)
    assert code.shape == key.shape and count.shape == (ncodes,)
    assert code.min(initial=0) >= 0 and code.max(initial=-1) < ncodes
    distinct = np.unique(key)
    # equal keys share a code and different keys never do
    pairs = np.unique(np.stack((key.astype(np.int64), code)), axis=1)
    assert pairs.shape[1] == len(distinct) == len(np.unique(code))
    values, counted = np.unique(key, return_counts=True)
    assert np.array_equal(count[code], counted[np.searchsorted(values, key)])
    assert int(count.sum()) == n
