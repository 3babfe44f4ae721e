"""Confidence intervals the reports share: a mean over seeds or episodes, and a success rate."""

from __future__ import annotations

import math

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
