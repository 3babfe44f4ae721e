"""Critic-free episode-level baselines (GRPO family), GAE for PPO, and the DAPO group filter.

The group baselines take one row per sample (a response or a trajectory) with its scalar
score; to use them on step rows, give every row its trajectory's score (or use
:func:`gigpo_algo.advantages.episode_advantages`, which can count each trajectory once).
Inputs may be lists, numpy arrays or torch tensors; a tensor in gives a tensor out.
Finite inputs give finite results or a ValueError naming the input that is too large (a
difference or a GAE sum past float64's range), never NaN or inf.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gigpo_algo._arrays import check_eps, check_overflow, to_float_array, to_ids
from gigpo_algo._grouped import normalize_in_groups


def _grouped(scores: Any, group_ids: Any, norm: str, eps: float) -> tuple[np.ndarray, Any]:
    s, kind = to_float_array(scores, "scores")
    codes, k = to_ids(group_ids, "group_ids", len(s))
    check_eps(eps)
    out = normalize_in_groups(s, codes, k, norm, eps)
    what = "a score less the mean of its group" + ("'s other members" if norm == "loo" else "")
    return check_overflow(out, f"scores are too large: {what} overflows float64"), kind


def grpo(scores: Any, group_ids: Any, *, eps: float = 1e-6) -> Any:
    """GRPO: ``(score - mean) / (std + eps)`` within each group (std unbiased).

    Args:
        scores: float, shape (N,).
        group_ids: shape (N,), ints or strings.
        eps: added to the std.

    Returns:
        float, shape (N,); singleton groups get 0.
    """
    out, kind = _grouped(scores, group_ids, "mean_std", eps)
    return kind.wrap(out)


def dr_grpo(scores: Any, group_ids: Any) -> Any:
    """Dr. GRPO (Liu et al. 2025): ``score - mean`` within each group, no std division.

    Pair it with ``aggregate_loss(..., mode="seq-mean-token-sum-norm")`` for the full method.

    Args:
        scores: float, shape (N,).
        group_ids: shape (N,).

    Returns:
        float, shape (N,); singleton groups get 0.
    """
    out, kind = _grouped(scores, group_ids, "mean", 0.0)
    return kind.wrap(out)


def rloo(scores: Any, group_ids: Any) -> Any:
    """RLOO (Ahmadian et al. 2024): score minus the mean of the *other* members of its group.

    Equals ``n / (n - 1) * (score - mean)`` for a group of n.

    Args:
        scores: float, shape (N,).
        group_ids: shape (N,).

    Returns:
        float, shape (N,); singleton groups get 0.
    """
    out, kind = _grouped(scores, group_ids, "loo", 0.0)
    return kind.wrap(out)


def reinforce_pp_baseline(scores: Any, group_ids: Any, *, eps: float = 1e-6) -> Any:
    """REINFORCE++-baseline (Hu et al. 2025): group-mean baseline, then batch whitening.

    ``a = score - group mean``; returns ``(a - mean(a)) / (std(a) + eps)`` over the whole
    batch (unbiased std). OpenRLHF whitens over tokens; this whitens over rows.

    Args:
        scores: float, shape (N,).
        group_ids: shape (N,).
        eps: added to the batch std.

    Returns:
        float, shape (N,).
    """
    a, kind = _grouped(scores, group_ids, "mean", 0.0)
    if len(a) < 2:
        return kind.wrap(np.zeros_like(a))
    # In units of the power of two just above max |a|, so that no sum overflows; exact (the
    # same bits as unscaled) since the scale is a power of two.
    exponent = int(np.frexp(np.abs(a).max())[1])
    with np.errstate(over="ignore", under="ignore"):
        a = np.ldexp(a, -exponent)
        centered = a - a.mean()
        std = centered.std(ddof=1)
        small = np.ldexp(eps, -exponent)
        if std + small > 0:
            return kind.wrap(centered / (std + small))
        # Every a equal: centered is 0.
        return kind.wrap(np.ldexp(centered, exponent))


def filter_uniform_groups(scores: Any, group_ids: Any, *, atol: float = 0.0) -> np.ndarray:
    """DAPO's dynamic sampling filter: keep only groups whose scores are not all equal.

    A group whose members all scored the same gives zero relative advantage everywhere, so
    DAPO drops it (and samples more groups). Singleton groups are dropped too.

    Args:
        scores: float, shape (N,).
        group_ids: shape (N,).
        atol: scores within ``atol`` of each other count as equal.

    Returns:
        bool numpy array, shape (N,): True for rows of the groups to keep.
    """
    s, _ = to_float_array(scores, "scores")
    codes, k = to_ids(group_ids, "group_ids", len(s))
    if not (np.isfinite(atol) and atol >= 0):
        raise ValueError(f"atol must be a finite number >= 0, got {atol!r}")
    hi = np.full(k, -np.inf)
    lo = np.full(k, np.inf)
    np.maximum.at(hi, codes, s)
    np.minimum.at(lo, codes, s)
    with np.errstate(over="ignore"):  # 1e308 - -1e308 is inf: they differ, rightly
        return (hi - lo > atol)[codes]


def filter_zero_advantage_groups(
    advantages: Any, group_ids: Any, *, atol: float = 1e-9
) -> np.ndarray:
    """Dynamic sampling for any estimator: keep only groups where some row has a nonzero
    advantage (``|A| > atol``).

    :func:`filter_uniform_groups` reads the episode scores, which is right for GRPO-style
    estimators: equal scores give zero advantage everywhere. Under GiGPO a group whose
    episodes all score the same may still hold a step-level signal (two actions from one
    anchor state with different discounted returns: step rewards, invalid-action
    penalties), so the useless group is the one whose advantages are all zero at both
    levels. Pass each row's episode-level and step-level parts stacked as columns, shape
    (N, 2) (or any (N, C)), to require every part to be zero, or the trained advantage
    (N,).

    Args:
        advantages: float, shape (N,) or (N, C): per row (a turn), its advantage(s).
        group_ids: shape (N,): the episode group of each row.
        atol: values within ``atol`` of 0 count as zero.

    Returns:
        bool numpy array, shape (N,): True for the rows of the groups to keep.
    """
    a, _ = to_float_array(advantages, "advantages", ndim=None)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2:
        raise ValueError(f"advantages must have shape (N,) or (N, C), got {a.shape}")
    codes, k = to_ids(group_ids, "group_ids", len(a))
    if not (np.isfinite(atol) and atol >= 0):
        raise ValueError(f"atol must be a finite number >= 0, got {atol!r}")
    signal = np.zeros(k, dtype=bool)
    np.logical_or.at(signal, codes, (np.abs(a) > atol).any(axis=1))
    return signal[codes]


def gae(
    rewards: Any,
    values: Any,
    response_mask: Any,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[Any, Any]:
    """Generalized advantage estimation over response tokens (the PPO baseline).

    Positions where ``response_mask`` is 0 (padding, or environment tokens between the turns
    of a multi-turn sequence) are skipped: the recursion carries the next valid token's value
    and advantage across them, and they get advantage 0.

    Args:
        rewards: float, shape (B, T): per-token rewards (typically the reward at each turn's
            last token, minus a KL penalty).
        values: float, shape (B, T): critic values V(s_t).
        response_mask: shape (B, T), 1 for tokens the policy generated.
        gamma: discount per token, in [0, 1].
        lam: GAE lambda, in [0, 1].

    Returns:
        ``(advantages, returns)``, each float, shape (B, T); ``returns = advantages + values``
        on response tokens and 0 elsewhere. Not whitened.
    """
    r, kind = to_float_array(rewards, "rewards", ndim=2)
    v, _ = to_float_array(values, "values", ndim=2)
    m, _ = to_float_array(response_mask, "response_mask", ndim=2)
    if v.shape != r.shape or m.shape != r.shape:
        raise ValueError(
            f"rewards, values and response_mask must have the same shape, got "
            f"{r.shape}, {v.shape}, {m.shape}"
        )
    for name, x in (("gamma", gamma), ("lam", lam)):
        if not (np.isfinite(x) and 0.0 <= x <= 1.0):
            raise ValueError(f"{name} must be in [0, 1], got {x!r}")
    batch, length = r.shape
    adv = np.zeros_like(r)
    next_value = np.zeros(batch)
    running = np.zeros(batch)
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(length - 1, -1, -1):
            mask_t = m[:, t]
            delta = r[:, t] + gamma * next_value - v[:, t]
            candidate = delta + gamma * lam * running
            running = np.where(mask_t > 0, candidate, running)
            next_value = np.where(mask_t > 0, v[:, t], next_value)
            adv[:, t] = np.where(mask_t > 0, candidate, 0.0)
        returns = np.where(m > 0, adv + v, 0.0)
    check_overflow(adv, "rewards or values are too large: the GAE advantages overflow float64")
    check_overflow(returns, "values are too large: advantages + values overflow float64")
    return kind.wrap(adv), kind.wrap(returns)


def turn_gae(
    rewards: Any,
    values: Any,
    traj_ids: Any,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Multi-turn PPO's GAE for step records stored one row per turn (one model call each).

    The turns of each trajectory are laid out as one token sequence, in row order: each
    turn's response tokens, then one masked column standing for the environment's tokens
    before the next turn (skipped by :func:`gae`). A turn's reward sits on its last
    response token; every other token gets reward 0. So with ``gamma = lam = 1`` a token's
    advantage is the trajectory's reward from its turn on, less the token's value.

    Args:
        rewards: float, shape (N,): the reward of each turn (e.g. the env's step reward, less
            any invalid-action penalty).
        values: N float sequences; ``values[i]``, shape (T_i,) with T_i >= 1: the critic's
            value at each response token of turn i (V of the text before that token).
        traj_ids: shape (N,): the trajectory of each row; a trajectory's rows in time order.
        gamma: discount per response token, in [0, 1].
        lam: GAE lambda, in [0, 1].

    Returns:
        ``(advantages, returns)``: two lists of N float64 arrays, shapes (T_i,), with
        ``returns[i] = advantages[i] + values[i]``. Not whitened.

    Raises:
        ValueError: lengths differ, a turn has no response token, or a bad gamma / lam.
    """
    r, _ = to_float_array(rewards, "rewards")
    n = len(r)
    codes, k = to_ids(traj_ids, "traj_ids", n)
    if len(values) != n:
        raise ValueError(f"values holds {len(values)} turns, rewards {n}")
    vals = [to_float_array(v, f"values[{i}]")[0] for i, v in enumerate(values)]
    empty = [i for i, v in enumerate(vals) if len(v) == 0]
    if empty:
        raise ValueError(f"turns {empty[:5]} have no response token: a reward needs a token")
    # Column of each turn's first token in its trajectory's row: turns in row order, each
    # followed by one environment column.
    starts = np.zeros(n, dtype=np.int64)
    widths = np.zeros(k, dtype=np.int64)
    for i in range(n):
        starts[i] = widths[codes[i]]
        widths[codes[i]] += len(vals[i]) + 1
    width = int(widths.max()) if n else 0
    r_tok = np.zeros((k, width))
    v_tok = np.zeros((k, width))
    mask = np.zeros((k, width))
    for i in range(n):
        row, lo, hi = codes[i], starts[i], starts[i] + len(vals[i])
        v_tok[row, lo:hi] = vals[i]
        mask[row, lo:hi] = 1.0
        r_tok[row, hi - 1] = r[i]
    adv, ret = gae(r_tok, v_tok, mask, gamma=gamma, lam=lam)
    spans = [(codes[i], starts[i], starts[i] + len(vals[i])) for i in range(n)]
    return (
        [adv[row, lo:hi].copy() for row, lo, hi in spans],
        [ret[row, lo:hi].copy() for row, lo, hi in spans],
    )
