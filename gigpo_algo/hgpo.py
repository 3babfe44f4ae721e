"""HGPO: a step's advantage from a hierarchy of groups, by how much history they share.

GiGPO puts two steps of one episode group in one step group when they were taken from the
same state. Two such steps may still have different histories in their prompts (the agent
saw different earlier states), so their comparison mixes contexts. HGPO (Hierarchy-of-Groups
Policy Optimization, verl-agent ``recipe/hgpo/core_hgpo.py``) puts a step in several groups at
once: at level k = 1 the steps of its episode group taken from its state (GiGPO's step group),
at level k = 2 those whose state *and* previous state match its own, ... up to
``history_length + 1`` states. Each group of two or more normalises its members' discounted
returns; a step's advantage is the weighted mean of its groups' advantages, level k weighing
``(k + 1) ** length_alpha``, with the episode advantage as a level-0 group under
``base_group``.

Everything is vectorised: level k's group of a row is a code of (its level k-1 code, the
state k-1 rows earlier in its trajectory), one pass of ``np.bincount`` per level. Memory is
linear in the rows N whatever ``history_length`` (:mod:`gigpo_algo._hierarchy`): a row alone
in its group leaves the passes, and each level's items go straight into the weighted sums;
the (K, N) tables of :class:`HGPOResult` are made only when read.

What the official code does, matched by default (docs/notes/algorithm.md lists it):

- a level's std is the population std (``unbiased=False``), the episode's the unbiased one;
- a group of one member gives no item; an item whose advantage is exactly 0 is dropped from
  the weighted mean (``drop_zero=False`` keeps it: a step at its group's mean is then pulled
  toward 0 instead of losing that level's weight);
- weights are divided by their sum plus ``eps``; no item gives 0;
- the history is the earlier rows of the same trajectory: rows of a trajectory must be in time
  order (they may be interleaved with other trajectories' rows).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from gigpo_algo._arrays import check_eps
from gigpo_algo._hierarchy import HGPOLevels, weighted_means
from gigpo_algo.advantages import (
    EpisodeLevel,
    _check_bool,
    _check_finite,
    _check_unit_interval,
    _penalised_returns,
    _step_groups,
    episode_level,
)

__all__ = [
    "FAMILY_NORMS",
    "HGPOLevels",
    "HGPOResult",
    "check_family_norm",
    "family_episode_level",
    "hgpo_advantages",
    "level_weights",
    "trajectory_steps",
]

#: The ``norm`` values HGPO and GraphGPO define (verl-agent's mean_norm and mean_std_norm).
FAMILY_NORMS = ("mean", "mean_std")


class HGPOResult(NamedTuple):
    """Output of :func:`hgpo_advantages`; N rows, K = ``history_length + 1`` levels (fewer
    when every trajectory is shorter)."""

    advantages: Any
    """Shape (N,): the weighted mean of the row's items (its groups' advantages, and A_E
    under ``base_group``); what the policy trains on."""
    episode_advantages: Any
    """Shape (N,): A_E, the row's episode score in its episode group (the level-0 item under
    ``base_group``; reported either way)."""
    step_advantages: Any
    """Shape (N,): the weighted mean of the row's level k >= 1 items alone (equal to
    ``advantages`` without ``base_group``)."""
    returns: Any
    """Shape (N,): the discounted return of each row, after the invalid-action penalty."""
    step_group_ids: np.ndarray
    """int64 (N,): the level-1 group of each row (GiGPO's step group)."""
    levels: HGPOLevels
    """What the level tables below are made from, O(N) memory."""

    @property
    def level_group_ids(self) -> np.ndarray:
        """int64 (K, N): row k-1 holds each row's level-k group (numbered per level in order
        of first appearance), -1 where the row has fewer than k states of history. K is
        ``history_length + 1``, or the longest trajectory's length where that is shorter
        (the deeper levels would hold no row). Made on first read of any of the three
        tables: K x N entries each, which the advantages never need."""
        return self.levels.tables()[0]

    @property
    def level_sizes(self) -> np.ndarray:
        """int64 (K, N): the number of members of that group, 0 where there is none."""
        return self.levels.tables()[1]

    @property
    def level_advantages(self) -> np.ndarray:
        """float64 (K, N): the row's advantage in that group, NaN where the group has one
        member or there is none (no item)."""
        return self.levels.tables()[2]


def hgpo_advantages(
    rewards: Any,
    traj_ids: Any,
    group_ids: Any,
    anchors: Any = None,
    *,
    history_length: int = 2,
    gamma: float = 0.95,
    norm: str = "mean_std",
    length_alpha: float = 1.0,
    base_group: bool = False,
    episode_stats: str = "trajectory",
    similarity: float | None = None,
    similarity_metric: str = "difflib",
    is_action_valid: Any = None,
    invalid_penalty: float = 0.0,
    eps: float = 1e-6,
    step_group_ids: Any = None,
    drop_zero: bool = True,
) -> HGPOResult:
    """HGPO's advantage of every row.

    Row i at step t of its trajectory, with states s_0..s_t, belongs at level k (1 <= k <=
    min(history_length + 1, t + 1)) to the group of the rows of its episode group whose last
    k states are (s_{t-k+1}, ..., s_t). With G the discounted returns, a group of n >= 2
    gives each member ``a = G - mean`` (``norm="mean"``) or ``(G - mean) / (std + eps)``
    (``"mean_std"``, population std). The row's advantage is
    ``sum_k w_k a_k / (sum_k w_k + eps)`` over its items, ``w_k = (k + 1) ** length_alpha``;
    under ``base_group`` A_E is one more item with k = 0 (weight 1).

    Args:
        rewards: float, shape (N,): the environment reward of each row.
        traj_ids: shape (N,): trajectory of each row (numbered globally or within groups);
            rows of a trajectory in time order.
        group_ids: shape (N,): episode group of each row.
        anchors: shape (N,): the state each row's action was taken from (keys; with
            ``similarity``, texts), as for :func:`gigpo_algo.advantages.gigpo_advantages`.
        history_length: earlier states a group may share (verl-agent: ``env.history_length``,
            the prompt's history window); K = ``history_length + 1`` levels (at most the
            longest trajectory's length: deeper levels would hold no row).
        gamma: discount in [0, 1] of the returns (verl-agent: ``algorithm.gamma``).
        norm: ``"mean_std"`` (verl-agent's mean_std_norm, the default) or ``"mean"``
            (mean_norm), for the levels and the base group alike.
        length_alpha: exponent >= 0 of the level weights (verl-agent: ``length_weight_alpha``;
            0: every item weighs the same).
        base_group: add A_E as a level-0 item.
        episode_stats: ``"trajectory"`` (each trajectory counted once) or ``"step"``
            (verl-agent: every row), for A_E.
        similarity, similarity_metric: as for GiGPO: the states of a level's key are step
            groups formed by similarity rather than exact anchors.
        is_action_valid: bool, shape (N,), or None.
        invalid_penalty: c >= 0 taken off an invalid row's return and episode score.
        eps: added to every std and to the sum of the weights.
        step_group_ids: shape (N,), or None: the step groups already formed (see
            :func:`gigpo_algo.advantages.gigpo_advantages`); then ``anchors`` is not read.
        drop_zero: drop items that are exactly 0 from the weighted mean (the official code);
            False keeps them.

    Returns:
        :class:`HGPOResult`.

    Raises:
        ValueError: a malformed input, naming the argument; finite inputs so large that a
            return, an advantage or a level weight overflows float64 (naming ``rewards``,
            ``invalid_penalty`` or ``length_alpha``, and the rows).
    """
    ep = family_episode_level(
        rewards, traj_ids, group_ids, norm, episode_stats, is_action_valid, invalid_penalty, eps
    )
    _check_unit_interval(gamma, "gamma")
    check_history_length(history_length)
    n = len(ep.rewards)
    steps, prev = trajectory_steps(ep.traj_codes)
    # Levels past the longest trajectory hold no row: K stops there.
    num_levels = min(int(history_length) + 1, int(steps.max()) + 1 if n else 1)
    weights = level_weights(num_levels, length_alpha)
    _check_bool(base_group, "base_group")
    _check_bool(drop_zero, "drop_zero")
    check_eps(eps)
    states = _step_groups(
        anchors, step_group_ids, ep, similarity, similarity_metric, "hgpo_advantages"
    )
    returns = _penalised_returns(ep, float(gamma))
    levels = HGPOLevels(states, prev, returns, norm, float(eps), num_levels)
    base = ep.advantages if base_group else None
    step_only, advantages = weighted_means(levels, weights, base, drop_zero, float(eps))
    wrap = ep.kind.wrap
    return HGPOResult(
        advantages=wrap(advantages),
        episode_advantages=wrap(ep.advantages),
        step_advantages=wrap(step_only),
        returns=wrap(returns),
        step_group_ids=states,
        levels=levels,
    )


def level_weights(num_levels: int, length_alpha: float) -> np.ndarray:
    """HGPO's level weights: float64 (num_levels,), ``(k + 1) ** length_alpha`` for level
    k = 1 .. num_levels (``history_length + 1`` levels at most).

    Raises:
        ValueError: ``length_alpha`` is not a finite number >= 0, or a weight overflows
            float64 (the message names ``length_alpha`` and the deepest level).
    """
    _check_finite(length_alpha, "length_alpha")
    if length_alpha < 0:
        raise ValueError(f"length_alpha must be >= 0, got {length_alpha!r}")
    with np.errstate(over="ignore"):
        weights = (np.arange(1, num_levels + 1, dtype=np.float64) + 1.0) ** float(length_alpha)
    if not np.isfinite(weights).all():
        raise ValueError(
            f"length_alpha={length_alpha!r} is too large: the level weights (k + 1) ** "
            f"length_alpha overflow float64 for k up to {num_levels}"
        )
    return weights


def family_episode_level(
    rewards: Any,
    traj_ids: Any,
    group_ids: Any,
    norm: str,
    episode_stats: str,
    is_action_valid: Any,
    invalid_penalty: float,
    eps: float,
) -> EpisodeLevel:
    """:func:`~gigpo_algo.advantages.episode_level` as HGPO and GraphGPO read it.

    One difference, under ``episode_stats="step"`` (verl-agent's statistics) only: an episode
    group of a single row gets verl-agent's value, its score (``norm="mean"``) or its score
    / (1 + eps) (``"mean_std"``), where ``episode_level`` gives 0. Under ``"trajectory"`` a
    lone member gets 0, as for GiGPO.
    """
    check_family_norm(norm)
    ep = episode_level(
        rewards,
        traj_ids,
        group_ids,
        norm=norm,
        episode_stats=episode_stats,
        is_action_valid=is_action_valid,
        invalid_penalty=invalid_penalty,
        eps=eps,
    )
    if episode_stats != "step" or not len(ep.groups):
        return ep
    lone = (np.bincount(ep.groups, minlength=ep.num_groups) == 1)[ep.groups]
    if not lone.any():
        return ep
    scale = 1.0 if norm == "mean" else 1.0 / (1.0 + float(eps))
    advantages = np.where(lone, ep.scores * scale, ep.advantages)
    return ep._replace(advantages=advantages)


def trajectory_steps(traj_codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's step index in its trajectory and the row of its previous step.

    Args:
        traj_codes: int64 (N,): the trajectory of each row; a trajectory's rows in time order.

    Returns:
        ``(step, prev)``, int64 (N,) each: ``step[i]`` counts the trajectory's rows before
        row i; ``prev[i]`` is the row of the step before, -1 for a first step.
    """
    n = len(traj_codes)
    order = np.argsort(traj_codes, kind="stable")
    sorted_codes = traj_codes[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = sorted_codes[1:] != sorted_codes[:-1]
    run_start = np.maximum.accumulate(np.where(starts, np.arange(n), 0)) if n else order
    step = np.empty(n, dtype=np.int64)
    step[order] = np.arange(n) - run_start
    prev = np.full(n, -1, dtype=np.int64)
    prev[order[1:][~starts[1:]]] = order[:-1][~starts[1:]]
    return step, prev


def check_family_norm(norm: str) -> None:
    """Raises ValueError unless ``norm`` is one HGPO and GraphGPO define."""
    if norm == "loo":
        raise ValueError(
            "norm='loo' is not defined for HGPO or GraphGPO (their groups normalise returns "
            f"by the group's mean, or mean and std); use one of {FAMILY_NORMS}"
        )
    if norm not in FAMILY_NORMS:
        raise ValueError(f"norm must be one of {FAMILY_NORMS}, got {norm!r}")


def check_history_length(history_length: Any) -> None:
    """Raises ValueError unless ``history_length`` is an int >= 0."""
    if isinstance(history_length, bool) or not isinstance(history_length, int | np.integer):
        raise ValueError(f"history_length must be an int >= 0, got {history_length!r}")
    if history_length < 0:
        raise ValueError(f"history_length must be >= 0, got {history_length!r}")
