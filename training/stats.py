"""Statistics the reports share: confidence intervals (a mean over seeds or episodes, a
success rate), the sign test, and the one step-group statistic (metrics, rollout files and
the viewer).

The t quantile and the sign test come from ``scipy.stats``, imported inside the functions
that use them: importing it takes about 0.5 s, and every OpenRLHF Ray worker imports this
module (through :mod:`training.record_files`) for :func:`step_group_summary` alone.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

#: The standard normal's two-sided 95% quantile, ``scipy.stats.norm.ppf(0.975)``.
Z95 = 1.959963984540054


def _count(value: Any, name: str) -> int:
    """``value`` as a whole number >= 0, or a ValueError naming ``name``."""
    try:
        count = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be a whole number, got {value!r}") from None
    if count < 0:
        raise ValueError(f"{name} must be >= 0, got {count}")
    return count


def mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of its two-sided 95% Student-t confidence interval.

    The quantile is ``scipy.stats.t.ppf(0.975, n - 1)``, exact for every n.

    Args:
        values: n floats (one per seed, episode or task).

    Returns:
        ``(mean, half)``: the interval is ``mean ± half``; ``(nan, nan)`` for n = 0 and
        ``(mean, 0.0)`` for n = 1 (no spread to measure).
    """
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n == 1:
        return mean, 0.0
    from scipy.stats import t as student_t

    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(student_t.ppf(0.975, n - 1)) * sd / math.sqrt(n)


def sign_test(better: int, worse: int) -> float:
    """The exact two-sided sign test's p-value for ``better`` against ``worse`` (ties out).

    ``scipy.stats.binomtest(min(better, worse), better + worse, 0.5)``: under p = 1/2 the
    two tails are mirror images, so this is twice the smaller tail, at most 1.

    Args:
        better, worse: counts >= 0 (pairs one side wins, pairs the other wins).

    Returns:
        The p-value in (0, 1]; 1.0 when there is no untied pair.
    """
    better, worse = _count(better, "better"), _count(worse, "worse")
    n = better + worse
    if n == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(min(better, worse), n, 0.5).pvalue)


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


def wilson_interval(successes: float, trials: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a success rate (95% by default).

    Unlike the normal approximation it stays inside [0, 1] and is not empty at 0 or n
    successes (0 of 12 gives [0, 0.2425], not [0, 0]).

    Written out here rather than taken from ``scipy.stats.binomtest(...).proportion_ci(
    method="wilson")``, which takes whole successes only: the suite table passes a
    fractional count (each task one trial, its share of won episodes its outcome). For
    whole counts the two agree to float rounding (tested).

    Args:
        successes: in [0, trials]; a whole number, or a sum of per-trial shares.
        trials: a whole number >= 0.
        z: the two-sided normal quantile of the confidence level, > 0 (``Z95``: 95%;
            for a level c, ``scipy.stats.norm.ppf((1 + c) / 2)``).

    Returns:
        ``(low, high)``; ``(nan, nan)`` for no trials.
    """
    trials = _count(trials, "trials")
    if not (math.isfinite(z) and z > 0):
        raise ValueError(f"z must be a finite number > 0, got {z}")
    if not 0 <= successes <= trials:  # also refuses NaN
        raise ValueError(f"successes must be in [0, {trials}], got {successes}")
    if trials == 0:
        return math.nan, math.nan
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
