"""Statistics the reports share: confidence intervals (a mean over seeds or episodes, a
success rate) and the one step-group statistic (metrics, rollout files and the viewer)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: Two-sided 95% Student-t quantiles by degrees of freedom (1..30); 1.96 beyond.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
#: The standard normal's two-sided 95% quantile.
Z95 = 1.959963984540054


def mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of its two-sided 95% Student-t confidence interval (0 for n = 1)."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n == 1:
        return mean, 0.0
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    t = _T95[n - 2] if n - 2 < len(_T95) else 1.96
    return mean, t * sd / math.sqrt(n)


def sign_test(better: int, worse: int) -> float:
    """The exact two-sided sign test's p-value for ``better`` against ``worse`` (ties out)."""
    n = better + worse
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(better, worse) + 1)) / 2.0**n
    return min(1.0, 2 * tail)


def paired_difference(a: list[float], b: list[float]) -> dict[str, Any]:
    """``a - b`` paired entry by entry (the same seed or task): the mean difference, its
    95% t interval, how often each side is ahead, and the sign test's p-value.

    Pairs where either side is NaN are left out.

    Returns:
        ``{"n", "mean", "half", "low", "high", "wins", "losses", "ties", "p_sign"}``.
    """
    if len(a) != len(b):
        raise ValueError(f"paired values need equal lengths, got {len(a)} and {len(b)}")
    diffs = [x - y for x, y in zip(a, b, strict=True) if not (math.isnan(x) or math.isnan(y))]
    mean, half = mean_ci(diffs)
    wins = sum(d > 0 for d in diffs)
    losses = sum(d < 0 for d in diffs)
    return {
        "n": len(diffs),
        "mean": mean,
        "half": half,
        "low": mean - half,
        "high": mean + half,
        "wins": wins,
        "losses": losses,
        "ties": len(diffs) - wins - losses,
        "p_sign": sign_test(wins, losses),
    }


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a success rate (95% by default).

    Unlike the normal approximation it stays inside [0, 1] and is not empty at 0 or n
    successes (0 of 12 gives [0, 0.24], not [0, 0]).

    Returns:
        ``(low, high)``; ``(nan, nan)`` for no trials.
    """
    if trials <= 0:
        return math.nan, math.nan
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be in [0, {trials}], got {successes}")
    p = successes / trials
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


def step_group_summary(
    step_group_ids: Any,
    episode_advantages: Any = None,
    step_advantages: Any = None,
) -> dict[str, Any]:
    """How much step-level signal a batch of step records offers, whatever the estimator.

    Args:
        step_group_ids: int, shape (N,): each record's step group, unique across episode
            groups (:func:`training.advantages.step_groups`).
        episode_advantages, step_advantages: float, shape (N,), or None: A_E and A_S.

    Returns:
        ``records`` (N); ``step_group_coverage``: share of records in a step group of size
        >= 2; ``step_group_mean_size``: records per step group; ``step_groups``: how many;
        ``step_group_sizes``: {size: number of step groups of that size}; with the
        advantages also ``sign_disagreement``: among records whose A_S and A_E are both
        nonzero, the share whose signs differ (the step level overrules the episode level),
        and ``both_nonzero``: how many such records.
    """
    ids = np.asarray(step_group_ids)
    n = len(ids)
    summary: dict[str, Any] = {"records": n}
    if n == 0:
        summary.update(step_group_coverage=0.0, step_group_mean_size=0.0, step_groups=0,
                       step_group_sizes={})  # fmt: skip
    else:
        _, codes, sizes = np.unique(ids, return_inverse=True, return_counts=True)
        histogram = np.unique(sizes, return_counts=True)
        summary.update(
            step_group_coverage=float((sizes[codes] >= 2).mean()),
            step_group_mean_size=float(sizes.mean()),
            step_groups=len(sizes),
            step_group_sizes={int(k): int(v) for k, v in zip(*histogram, strict=True)},
        )
    if episode_advantages is not None and step_advantages is not None:
        a_e = np.asarray(episode_advantages, dtype=np.float64)
        a_s = np.asarray(step_advantages, dtype=np.float64)
        both = (a_e != 0) & (a_s != 0)
        disagree = both & ((a_s > 0) != (a_e > 0))
        count = int(both.sum())
        summary.update(
            sign_disagreement=int(disagree.sum()) / count if count else 0.0,
            both_nonzero=count,
        )
    return summary
