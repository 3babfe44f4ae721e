"""Discounted returns (GiGPO's Eq. 7) per trajectory, by recursive doubling, checked: a
return past float64's range raises ValueError naming ``rewards`` (or ``invalid_penalty``)
and the rows, never NaN or inf."""

from __future__ import annotations

from typing import Any

import numpy as np

from gigpo_algo._arrays import check_overflow


def _penalised_returns(ep: Any, gamma: float) -> np.ndarray:
    """float64 (N,): each row's discounted return (Eq. 7) less its invalid-action penalty,
    for ``ep`` an :class:`~gigpo_algo.advantages.EpisodeLevel`.

    Raises:
        ValueError: a return, or a return less the penalty, overflows float64 (the message
            names ``rewards`` or ``invalid_penalty`` and the rows).
    """
    returns = _discounted_returns(ep.rewards, ep.traj_codes, gamma)
    with np.errstate(over="ignore", invalid="ignore"):
        penalised = returns - ep.penalties
    penalty = float(ep.penalties.max()) if len(ep.penalties) else 0.0
    return check_overflow(penalised, _penalty_overflows(penalty, "return"))


def _penalty_overflows(invalid_penalty: float, what: str) -> str:
    return f"invalid_penalty={invalid_penalty!r} is too large: a {what} less it overflows float64"


def _discounted_returns(r: np.ndarray, traj: np.ndarray, gamma: float) -> np.ndarray:
    """Reverse discounted cumulative sum per trajectory by recursive doubling.

    After the k-th pass, ``g[i]`` holds the discounted sum of the next 2^k rows of row i's
    trajectory and ``mult[i]`` is gamma^(2^k) while row i + 2^k is still in it (else 0).

    Raises:
        ValueError: a return overflows float64 (naming ``rewards`` and the rows).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        g = _discounted(r, traj, gamma)
    return check_overflow(g, "rewards are too large: the discounted returns overflow float64")


def _discounted(r: np.ndarray, traj: np.ndarray, gamma: float) -> np.ndarray:
    """:func:`_discounted_returns`, unchecked."""
    n = len(r)
    if n == 0:
        return np.zeros(0)
    order = None
    if n > 1 and (traj[1:] < traj[:-1]).any():
        order = np.argsort(traj, kind="stable")
        r, traj = r[order], traj[order]
    g = r.copy()
    mult = np.zeros(n)
    mult[:-1] = np.where(traj[1:] == traj[:-1], gamma, 0.0)
    shift = 1
    while shift < n and mult.any():
        g[:-shift] += mult[:-shift] * g[shift:]
        nxt = np.zeros(n)
        if 2 * shift < n:
            nxt[: n - 2 * shift] = mult[: n - 2 * shift] * mult[shift : n - shift]
        mult = nxt
        shift *= 2
    if order is None:
        return g
    out = np.empty(n)
    out[order] = g
    return out
