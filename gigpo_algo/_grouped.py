"""Vectorised group statistics: the engine behind every relative advantage.

All functions take integer group codes in [0, G) (see ``_arrays.to_ids``) and work with
``np.bincount``, so their cost is linear in the number of rows whatever the group sizes.
"""

from __future__ import annotations

import numpy as np

from gigpo_algo._arrays import factorize_ints


def combine_codes(a: np.ndarray, num_a: int, b: np.ndarray, num_b: int) -> tuple[np.ndarray, int]:
    """Codes of the pairs ``(a[i], b[i])``, numbered in order of first appearance.

    Args:
        a, b: int64 codes, shape (N,), in [0, num_a) and [0, num_b).

    Returns:
        ``(codes, num_pairs)`` with codes of shape (N,).
    """
    return factorize_ints(a * np.int64(max(num_b, 1)) + b)


def normalize_in_groups(
    values: np.ndarray,
    codes: np.ndarray,
    num_groups: int,
    norm: str,
    eps: float,
    *,
    weights: np.ndarray | None = None,
    own: np.ndarray | None = None,
    ddof: int = 1,
) -> np.ndarray:
    """Relative advantage of each row's value against its group.

    A group's statistics are weighted: each row carries ``weights[i]`` (1 by default). With
    the weights of a trajectory summing to 1, every trajectory counts once, whatever its
    length (the paper's episode-level statistics).

    Args:
        values: float64, shape (N,).
        codes: int64 group code per row, shape (N,), in [0, num_groups).
        num_groups: G.
        norm: ``"mean"`` (value - mean), ``"mean_std"`` ((value - mean) / (std + eps), std
            unbiased over the group's members), ``"loo"`` (value - mean of the other members).
        eps: added to the std.
        weights: float64, shape (N,), > 0; the members of a group number ``sum(weights)``.
        own: float64, shape (N,): the weighted mean value of the member that row i belongs
            to, left out of its own baseline under ``"loo"`` (default ``values``).
        ddof: the std's divisor is ``members - ddof``: 1 unbiased (``torch.std``), 0 the
            population std (HGPO's clusters).

    Returns:
        float64, shape (N,). Rows of a group with fewer than two members get 0. Finite
        under ``"mean_std"`` for any finite input; under ``"mean"`` and ``"loo"`` inf where
        the difference itself is past float64's range (about 1.8e308): the caller checks
        (:func:`~gigpo_algo._arrays.check_overflow`). No numpy warning is raised.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        return _normalize(values, codes, num_groups, norm, eps, weights, own, ddof)


def _normalize(
    values: np.ndarray,
    codes: np.ndarray,
    num_groups: int,
    norm: str,
    eps: float,
    weights: np.ndarray | None,
    own: np.ndarray | None,
    ddof: int,
) -> np.ndarray:
    """:func:`normalize_in_groups`, under the caller's ``np.errstate``."""
    # Scale each group by the power of two just above its largest |value|: no difference,
    # sum or square can then overflow, even for values near 1e308. Scaling by a power of
    # two is exact, so the results are bit for bit those of the unscaled sums (unless a
    # value is 2**1022 times smaller than its group's largest, where it is lost anyway).
    top = np.zeros(num_groups)
    np.maximum.at(top, codes, np.abs(values))
    if own is not None:
        np.maximum.at(top, codes, np.abs(own))
    exponent = np.frexp(top)[1][codes]
    values = np.ldexp(values, -exponent)
    # Work relative to each group's first value: a group whose values are all equal then
    # gives exactly 0 (no rounding from weighted means), and the sums lose less precision.
    first = np.full(num_groups, len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    pivot = values[first][codes]
    values = values - pivot
    if own is not None:
        own = np.ldexp(own, -exponent) - pivot
    if weights is None:
        counts = np.bincount(codes, minlength=num_groups).astype(np.float64)
        sums = np.bincount(codes, weights=values, minlength=num_groups)
    else:
        counts = np.bincount(codes, weights=weights, minlength=num_groups)
        sums = np.bincount(codes, weights=values * weights, minlength=num_groups)
    # Member counts are whole numbers; weights of 1/len can sum to 2.9999999999999996.
    counts = np.rint(counts)
    members = counts[codes]
    if norm == "loo":
        own = values if own is None else own
        baseline = (sums[codes] - own) / np.maximum(members - 1.0, 1.0)
        out = values - baseline
    else:
        mean = sums / np.maximum(counts, 1.0)
        out = values - mean[codes]
        if norm == "mean_std":
            sq = out * out if weights is None else out * out * weights
            var = np.bincount(codes, weights=sq, minlength=num_groups) / np.maximum(
                counts - float(ddof), 1.0
            )
            # Both sides scaled alike: the ratio needs no scaling back.
            denom = np.sqrt(var)[codes] + np.ldexp(eps, -exponent)
            # A group with all values equal has out == 0 exactly; keep 0/0 at 0.
            out = np.divide(out, denom, out=np.zeros_like(out), where=denom > 0)
            out[members < 2] = 0.0
            return out
    out = np.ldexp(out, exponent)
    out[members < 2] = 0.0
    return out
