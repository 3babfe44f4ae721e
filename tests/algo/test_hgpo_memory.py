"""HGPO's memory is linear in the rows, whatever ``history_length``: one very long
trajectory with its whole history as levels (the library does not cap it; the trainers do)."""

import tracemalloc

import numpy as np
import pytest
from naive_family import naive_hgpo

from gigpo_algo.hgpo import hgpo_advantages


@pytest.mark.parametrize("n", [400, 200_000])
def test_one_long_trajectory_with_its_whole_history_runs_in_linear_memory(n):
    rng = np.random.default_rng(n)
    rewards = rng.normal(size=n)
    anchors = rng.integers(0, 3, n)  # a walk over 3 states: short histories recur
    ids = np.zeros(n, dtype=np.int64)
    tracemalloc.start()
    try:
        out = hgpo_advantages(rewards, ids, ids, anchors, history_length=n, base_group=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # n levels: the dense (K, N) tables alone would take 3 x 8 x n**2 bytes.
    assert peak < 64 * 8 * n + 2**16, f"peak {peak:,} bytes for {n:,} rows"
    assert out.levels.num_levels == n
    assert np.isfinite(out.advantages).all() and (out.advantages != 0).mean() > 0.9
    if n <= 400:  # the per-row reference, every level of every row
        ref, _ = naive_hgpo(rewards.tolist(), [0] * n, [0] * n, anchors.tolist(),
                            history_length=n, base_group=True)  # fmt: skip
        np.testing.assert_allclose(out.advantages, ref, rtol=1e-9, atol=1e-9)
        assert out.level_sizes.shape == (n, n)  # the tables, made when read
