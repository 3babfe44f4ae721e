"""GiGPO advantages: episode-level and step-level relative advantages, as pure functions.

Every function takes one row per step record (docs/design.md, contract 2): a row is one model call
of one trajectory; rows of a trajectory are in time order, and trajectories may be
interleaved. Numeric inputs may be lists, numpy arrays or torch tensors; a tensor in gives a
tensor out on the same device (floating dtype kept), a floating numpy array keeps its dtype,
anything else gives float64 numpy. Ids may be ints or strings.

A trajectory is identified by the pair ``(group_id, traj_id)``, so trajectory ids may be
numbered either globally or within each group.

No function returns NaN or inf from finite inputs: a group is normalised in units of its
largest value (a power of two, so the results are the unscaled ones bit for bit), and a
result past float64's range (rewards near 1e308, say) raises ValueError naming the input
and the rows, as does one past the range of the input's narrower dtype (float16, float32).

Paper: Feng et al., "Group-in-Group Policy Optimization for LLM Agent Training" (2025),
Eq. 3 (episode level), Eq. 6-8 (anchor groups, discounted returns, step level), Eq. 9.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from gigpo_algo._arrays import (
    NORMS as _NORMS,
)
from gigpo_algo._arrays import (
    check_eps,
    check_norm,
    check_overflow,
    to_float_array,
    to_ids,
    to_numpy,
)
from gigpo_algo._grouped import combine_codes, normalize_in_groups
from gigpo_algo._returns import _discounted_returns, _penalised_returns, _penalty_overflows
from gigpo_algo.baselines import (
    dr_grpo,
    filter_uniform_groups,
    filter_zero_advantage_groups,
    gae,
    grpo,
    reinforce_pp_baseline,
    rloo,
)
from gigpo_algo.grouping import METRICS, anchor_groups, step_group_codes

__all__ = [
    "GiGPOResult",
    "anchor_groups",
    "discounted_returns",
    "dr_grpo",
    "EpisodeLevel",
    "episode_advantages",
    "episode_level",
    "filter_uniform_groups",
    "filter_zero_advantage_groups",
    "gae",
    "gigpo_advantages",
    "grpo",
    "reinforce_pp_baseline",
    "rloo",
    "step_advantages",
]

#: ``episode_stats`` values: who counts as a member of an episode group.
STATS = ("trajectory", "step")
#: ``norm`` values, for both levels.
NORMS = _NORMS


class GiGPOResult(NamedTuple):
    """Output of :func:`gigpo_advantages`; every field has one entry per row, shape (N,)."""

    advantages: Any
    """``episode_advantages + step_weight * step_advantages``."""
    episode_advantages: Any
    """A_E: the row's episode score against its episode group."""
    step_advantages: Any
    """A_S: the row's discounted return against its step (anchor-state) group."""
    returns: Any
    """Discounted return of each row, after the invalid-action penalty."""
    step_group_ids: np.ndarray
    """int64 step-group id of each row, numbered in order of first appearance."""


def discounted_returns(rewards: Any, traj_ids: Any, gamma: float) -> Any:
    """Discounted return of every row within its trajectory.

    ``G_t = sum_{k >= t} gamma^(k - t) r_k`` over the rows of the same trajectory that come at
    or after row t (Eq. 7). Exact to float64 rounding, in O(N log L) vectorised work for a
    longest trajectory of L rows.

    Args:
        rewards: float, shape (N,): the step reward of each row.
        traj_ids: shape (N,), ints or strings: the trajectory of each row (globally unique).
        gamma: discount in [0, 1].

    Returns:
        float, shape (N,), same kind as ``rewards``.
    """
    r, kind = to_float_array(rewards, "rewards")
    traj, _ = to_ids(traj_ids, "traj_ids", len(r))
    _check_unit_interval(gamma, "gamma")
    return kind.wrap(_discounted_returns(r, traj, float(gamma)))


def episode_advantages(
    scores: Any,
    group_ids: Any,
    *,
    traj_ids: Any = None,
    norm: str = "mean",
    stats: str = "trajectory",
    eps: float = 1e-6,
) -> Any:
    """GRPO-style relative advantage of each row's episode score within its group (Eq. 3).

    Args:
        scores: float, shape (N,): the episode score of each row's trajectory (usually the
            same for all rows of a trajectory).
        group_ids: shape (N,): the episode group (rollouts from the same initial state).
        traj_ids: shape (N,): the trajectory of each row; required with ``stats="trajectory"``.
        norm: ``"mean"`` (score - mean), ``"mean_std"`` ((score - mean) / (std + eps), std
            unbiased as ``torch.std``), or ``"loo"`` (score - mean of the other members: RLOO).
        stats: ``"trajectory"``: the group's members are its trajectories, each counted once
            (the paper's Eq. 3); a trajectory's rows share its weight equally, so when its
            rows' scores differ (e.g. per-row penalties) its value is their mean and the spread
            inside it adds to the std. ``"step"``: every row is a member (verl-agent's default,
            which weights long trajectories more).
        eps: added to the std under ``"mean_std"``.

    Returns:
        float, shape (N,). A group with a single member gets 0 (verl-agent gives the raw score).
    """
    s, kind = to_float_array(scores, "scores")
    groups, num_groups = to_ids(group_ids, "group_ids", len(s))
    check_norm(norm)
    check_eps(eps)
    trajs = _traj_codes(traj_ids, groups, num_groups, len(s), stats)
    a_e = _episode(s, groups, num_groups, trajs, norm, eps)
    return kind.wrap(check_overflow(a_e, f"scores are too large: {_A_E_OVERFLOWS}"))


def step_advantages(
    returns: Any,
    step_group_ids: Any,
    *,
    norm: str = "mean",
    eps: float = 1e-6,
) -> Any:
    """Relative advantage of each row's discounted return within its step group (Eq. 8).

    Args:
        returns: float, shape (N,): discounted return of each row.
        step_group_ids: shape (N,): the anchor-state group of each row (see
            :func:`anchor_groups`).
        norm: ``"mean"``, ``"mean_std"`` or ``"loo"`` as in :func:`episode_advantages`.
        eps: added to the std under ``"mean_std"``.

    Returns:
        float, shape (N,). Rows alone in their step group get 0.
    """
    g, kind = to_float_array(returns, "returns")
    codes, k = to_ids(step_group_ids, "step_group_ids", len(g))
    check_norm(norm)
    check_eps(eps)
    a_s = normalize_in_groups(g, codes, k, norm, eps)
    return kind.wrap(check_overflow(a_s, f"returns are too large: {_A_S_OVERFLOWS}"))


def gigpo_advantages(
    rewards: Any,
    traj_ids: Any,
    group_ids: Any,
    anchors: Any = None,
    *,
    gamma: float = 0.95,
    step_weight: float = 1.0,
    norm: str = "mean",
    episode_stats: str = "trajectory",
    similarity: float | None = None,
    similarity_metric: str = "difflib",
    is_action_valid: Any = None,
    invalid_penalty: float = 0.0,
    eps: float = 1e-6,
    step_group_ids: Any = None,
) -> GiGPOResult:
    """The whole GiGPO advantage: ``A = A_E + step_weight * A_S`` (Eq. 9).

    Episode score = sum of the trajectory's rewards; A_E is its relative advantage in the
    episode group (:func:`episode_level`, shared with GRPO and RLOO). Step groups gather
    rows of the same episode group taken from the same anchor state (:func:`anchor_groups`);
    A_S is the relative advantage of each row's discounted return in its step group
    (:func:`step_advantages`).

    Args:
        rewards: float, shape (N,): the environment reward of each row (model call).
        traj_ids: shape (N,): trajectory of each row (numbered globally or within groups).
        group_ids: shape (N,): episode group of each row.
        anchors: shape (N,): the state each row's action was taken from (see
            :func:`anchor_groups`): the state keys for exact grouping; with
            ``similarity``, the states' texts (``state_text()``), never their keys.
        gamma: discount in [0, 1] for the step-level returns.
        step_weight: weight ``w`` of A_S.
        norm: ``"mean"`` (default), ``"mean_std"`` or ``"loo"``, for both levels.
        episode_stats: ``"trajectory"`` (Eq. 3) or ``"step"`` (verl-agent).
        similarity: None (exact anchors) or a threshold in (0, 1).
        similarity_metric: ``"difflib"`` (verl-agent's partition), ``"indel"`` or
            ``"embedding"`` (:func:`anchor_groups`; for another encoder than the packaged
            MiniLM-L6, form ``step_group_ids`` with ``anchor_groups(..., encoder=...)``).
        is_action_valid: bool, shape (N,), or None.
        invalid_penalty: c >= 0; with it, each invalid row's episode score and discounted
            return are lowered by c before normalisation (verl-agent's semantics). The
            penalty is not propagated to earlier rows' returns.
        eps: added to the std under ``"mean_std"``.
        step_group_ids: shape (N,), or None: the step groups already formed from the rows'
            anchors and ``group_ids`` (:func:`anchor_groups` with the same ``similarity``
            and ``similarity_metric``), for a caller that needs them for every estimator and
            forms them once; then ``anchors`` is not read (and may be None). Each step group
            must lie inside one episode group.

    Returns:
        :class:`GiGPOResult`, every field of shape (N,).

    Raises:
        ValueError: a malformed input, naming the argument; finite inputs so large that a
            score, a return or an advantage overflows float64 (naming ``rewards``,
            ``invalid_penalty`` or ``step_weight``, and the rows).
    """
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
    _check_unit_interval(gamma, "gamma")
    _check_finite(step_weight, "step_weight")
    step_ids = _step_groups(
        anchors, step_group_ids, ep, similarity, similarity_metric, "gigpo_advantages"
    )
    returns = _penalised_returns(ep, float(gamma))
    num_step_groups = int(step_ids.max()) + 1 if len(returns) else 0
    a_s = normalize_in_groups(returns, step_ids, num_step_groups, norm, eps)
    check_overflow(a_s, f"rewards are too large: {_A_S_OVERFLOWS}")
    with np.errstate(over="ignore", invalid="ignore"):
        advantages = ep.advantages + step_weight * a_s
    check_overflow(
        advantages, f"rewards are too large for step_weight={step_weight!r}: A_E + "
        "step_weight * A_S overflows float64"
    )  # fmt: skip
    wrap = ep.kind.wrap
    return GiGPOResult(
        advantages=wrap(advantages),
        episode_advantages=wrap(ep.advantages),
        step_advantages=wrap(a_s),
        returns=wrap(returns),
        step_group_ids=step_ids,
    )


def _step_groups(
    anchors: Any,
    step_group_ids: Any,
    ep: EpisodeLevel,
    similarity: Any,
    similarity_metric: str,
    caller: str,
) -> np.ndarray:
    """int64 (N,) step-group codes: ``step_group_ids`` checked (:func:`_given_step_groups`)
    when given, else formed from ``anchors`` within the episode groups (``caller`` names the
    function in the error when both are None)."""
    if step_group_ids is not None:
        return _given_step_groups(step_group_ids, ep, similarity, similarity_metric)
    if anchors is None:
        raise ValueError(f"{caller} needs anchors (or step_group_ids)")
    return step_group_codes(
        anchors,
        ep.groups,
        ep.num_groups,
        similarity,
        similarity_metric,
        metric_name="similarity_metric",
    )


def _given_step_groups(
    step_group_ids: Any, ep: EpisodeLevel, similarity: Any, similarity_metric: str
) -> np.ndarray:
    """``step_group_ids`` as int64 codes (shape (N,)), checked: each group inside one
    episode group; the similarity settings they were formed with are checked as
    :func:`anchor_groups` checks them."""
    codes, k = to_ids(step_group_ids, "step_group_ids", len(ep.groups))
    if combine_codes(ep.groups, ep.num_groups, codes, k)[1] != k:
        raise ValueError("step_group_ids: a step group spans more than one episode group")
    if similarity is not None and (
        isinstance(similarity, bool) or not isinstance(similarity, int | float | np.floating)
        or not 0.0 < float(similarity) < 1.0
    ):  # fmt: skip
        raise ValueError(f"similarity must be a float in (0, 1) or None, got {similarity!r}")
    if similarity_metric not in METRICS:
        raise ValueError(f"similarity_metric must be one of {METRICS}, got {similarity_metric!r}")
    return codes


class EpisodeLevel(NamedTuple):
    """The episode-level part every estimator shares (see :func:`episode_level`); numpy,
    float64 unless noted, one entry per row."""

    rewards: np.ndarray
    """The rows' rewards as given."""
    penalties: np.ndarray
    """``invalid_penalty`` on invalid rows, 0 elsewhere."""
    scores: np.ndarray
    """The episode score of each row: its trajectory's reward sum less the row's penalty."""
    advantages: np.ndarray
    """A_E: ``scores`` normalised in the episode group."""
    groups: np.ndarray
    """int64 episode-group code of each row."""
    num_groups: int
    traj_codes: np.ndarray
    """int64 code of each row's trajectory, the pair (group, traj_id)."""
    num_trajs: int
    kind: Any
    """How to give results back in the input's kind (list, numpy, torch)."""


def episode_level(
    rewards: Any,
    traj_ids: Any,
    group_ids: Any,
    *,
    norm: str = "mean",
    episode_stats: str = "trajectory",
    is_action_valid: Any = None,
    invalid_penalty: float = 0.0,
    eps: float = 1e-6,
) -> EpisodeLevel:
    """The episode score and the episode-level advantage A_E of every row (Eq. 3).

    This is the one place where an episode score is made: GiGPO's A_E, GRPO and RLOO all
    come from it (:mod:`gigpo_algo.estimators`), so two estimators differ only in what they
    add to it. The score of a row is the sum of its trajectory's rewards, less
    ``invalid_penalty`` when the row's own action was invalid (verl-agent's semantics).

    Args:
        rewards: float, shape (N,): the environment reward of each row.
        traj_ids: shape (N,): trajectory of each row (numbered globally or within groups).
        group_ids: shape (N,): episode group of each row.
        norm: ``"mean"``, ``"mean_std"`` or ``"loo"`` (see :func:`episode_advantages`).
        episode_stats: ``"trajectory"`` (Eq. 3) or ``"step"`` (verl-agent).
        is_action_valid: bool, shape (N,), or None.
        invalid_penalty: c >= 0 (needs ``is_action_valid`` when > 0).
        eps: added to the std under ``"mean_std"``.

    Returns:
        :class:`EpisodeLevel`.
    """
    r, kind = to_float_array(rewards, "rewards")
    n = len(r)
    groups, num_groups = to_ids(group_ids, "group_ids", n)
    check_norm(norm)
    check_eps(eps)
    _check_finite(invalid_penalty, "invalid_penalty")
    if invalid_penalty < 0:
        raise ValueError(f"invalid_penalty must be >= 0, got {invalid_penalty!r}")
    if episode_stats not in STATS:
        raise ValueError(f"episode_stats must be one of {STATS}, got {episode_stats!r}")
    trajs = _traj_codes(traj_ids, groups, num_groups, n, "trajectory")
    assert trajs is not None
    traj_codes, num_trajs = trajs
    penalties = np.zeros(n)
    if is_action_valid is not None:
        invalid = ~_to_bool(is_action_valid, "is_action_valid", n)
        penalties = float(invalid_penalty) * invalid
    elif invalid_penalty:
        raise ValueError("invalid_penalty needs is_action_valid")
    with np.errstate(over="ignore", invalid="ignore"):
        sums = np.bincount(traj_codes, weights=r, minlength=num_trajs)[traj_codes]
        check_overflow(
            sums, "rewards are too large: the episode scores (a trajectory's reward sum) "
            "overflow float64"
        )  # fmt: skip
        scores = check_overflow(sums - penalties, _penalty_overflows(invalid_penalty, "score"))
    ep_trajs = trajs if episode_stats == "trajectory" else None
    a_e = _episode(scores, groups, num_groups, ep_trajs, norm, eps)
    check_overflow(a_e, f"rewards are too large: {_A_E_OVERFLOWS}")
    return EpisodeLevel(r, penalties, scores, a_e, groups, num_groups, traj_codes, num_trajs, kind)


# ----------------------------------------------------------------------------- internals

_A_E_OVERFLOWS = "the episode advantages (a score less its group's mean) overflow float64"
_A_S_OVERFLOWS = "the step advantages (a return less its step group's mean) overflow float64"


def _episode(
    values: np.ndarray,
    groups: np.ndarray,
    num_groups: int,
    trajs: tuple[np.ndarray, int] | None,
    norm: str,
    eps: float,
) -> np.ndarray:
    if trajs is None:
        return normalize_in_groups(values, groups, num_groups, norm, eps)
    traj_codes, num_trajs = trajs
    lengths = np.bincount(traj_codes, minlength=num_trajs).astype(np.float64)
    weights = (1.0 / lengths)[traj_codes]
    own = None
    if norm == "loo":
        own = (np.bincount(traj_codes, weights=values, minlength=num_trajs) / lengths)[traj_codes]
    return normalize_in_groups(values, groups, num_groups, norm, eps, weights=weights, own=own)


def _traj_codes(
    traj_ids: Any, groups: np.ndarray, num_groups: int, n: int, stats: str
) -> tuple[np.ndarray, int] | None:
    if stats not in STATS:
        raise ValueError(f"stats must be one of {STATS}, got {stats!r}")
    if stats == "step":
        if traj_ids is not None:
            to_ids(traj_ids, "traj_ids", n)  # validated even when unused
        return None
    if traj_ids is None:
        raise ValueError('traj_ids is required with stats="trajectory"')
    trajs, num_trajs = to_ids(traj_ids, "traj_ids", n)
    return combine_codes(groups, num_groups, trajs, num_trajs)


def _to_bool(x: Any, name: str, n: int) -> np.ndarray:
    arr = np.asarray(to_numpy(x))
    if arr.ndim != 1 or len(arr) != n:
        raise ValueError(f"{name} must have shape ({n},), got {arr.shape}")
    if arr.dtype == bool:
        return arr
    if arr.dtype.kind in "iuf" and np.isin(arr, (0, 1)).all():
        return arr.astype(bool)
    raise ValueError(f"{name} must hold booleans (or 0/1), got dtype {arr.dtype}")


def _check_bool(x: Any, name: str) -> None:
    if not isinstance(x, bool | np.bool_):
        raise ValueError(f"{name} must be a bool, got {x!r}")


def _check_finite(x: Any, name: str) -> None:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {x!r}")
    if not np.isfinite(x):
        raise ValueError(f"{name} must be finite, got {x!r}")


def _check_unit_interval(x: Any, name: str) -> None:
    _check_finite(x, name)
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {x!r}")
