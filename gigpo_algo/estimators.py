"""Every estimator the trainers offer, over the same step records and the same episode score.

GiGPO, its successors HGPO (:mod:`gigpo_algo.hgpo`) and GraphGPO (:mod:`gigpo_algo.graphgpo`),
GRPO and RLOO. GRPO and RLOO are GiGPO without its step level: ``grpo_advantages(...)`` equals
``gigpo_advantages(..., step_weight=0)`` row for row (same ``norm``, ``episode_stats`` and
invalid-action penalty), and ``rloo_advantages`` is the same with ``norm="loo"``. All three
read the episode score from :func:`gigpo_algo.advantages.episode_level` (HGPO and GraphGPO
too, for their episode advantage and the returns' invalid-action penalty), so a comparison
between them changes one thing only: the step-level term.

:func:`estimator_advantages` picks one by name and refuses settings that the chosen estimator
would ignore (``ESTIMATOR_SETTINGS``), so that a baseline run cannot silently carry a knob
that only GiGPO reads.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gigpo_algo.advantages import (
    NORMS,
    STATS,
    GiGPOResult,
    _penalised_returns,
    episode_level,
    gigpo_advantages,
)
from gigpo_algo.graphgpo import GraphGPOResult, graphgpo_advantages
from gigpo_algo.grouping import METRICS
from gigpo_algo.hgpo import (
    FAMILY_NORMS,
    HGPOResult,
    check_history_length,
    hgpo_advantages,
    level_weights,
)

__all__ = [
    "ESTIMATORS",
    "ESTIMATOR_SETTINGS",
    "SETTINGS",
    "check_settings",
    "estimator_advantages",
    "grpo_advantages",
    "rloo_advantages",
    "step_anchors",
]

#: The estimators, by name.
ESTIMATORS = ("gigpo", "grpo", "rloo", "hgpo", "graphgpo")
#: Every setting some estimator reads, as a trainer exposes it (``eps`` aside): the names of
#: the local trainer's ``algo.*`` fields and of the OpenRLHF launcher's ``--algo.gigpo.*``.
SETTINGS = (
    "gamma",
    "step_weight",
    "norm",
    "episode_stats",
    "similarity",
    "similarity_metric",
    "invalid_penalty",
    "history_length",
    "length_alpha",
    "base_group",
    "normalize_distance",
    "episode_weight",
)
_SHARED = ("gamma", "norm", "episode_stats", "similarity", "similarity_metric", "invalid_penalty")
#: The settings each estimator reads (keyword names of its function).
ESTIMATOR_SETTINGS: dict[str, tuple[str, ...]] = {
    "gigpo": (*_SHARED[:1], "step_weight", *_SHARED[1:], "eps"),
    "grpo": ("norm", "episode_stats", "invalid_penalty", "eps"),
    "rloo": ("episode_stats", "invalid_penalty", "eps"),
    "hgpo": (*_SHARED, "history_length", "length_alpha", "base_group", "eps"),
    "graphgpo": (*_SHARED, "step_weight", "normalize_distance", "episode_weight", "eps"),
}


def check_settings(
    estimator: str,
    settings: dict[str, Any],
    *,
    prefix: str = "",
    estimator_name: str = "estimator",
) -> None:
    """Raises ValueError for an estimator or a setting value that no run can use.

    Each trainer checks its config with this one function, so the rules (and the allowed
    values: :data:`NORMS`, :data:`STATS`, :data:`~gigpo_algo.grouping.METRICS`) are the
    library's own.

    Args:
        estimator: must be one of :data:`ESTIMATORS`.
        settings: setting name -> value (None: the estimator's default). A setting the
            estimator does not read (not in :data:`ESTIMATOR_SETTINGS`) is an error.
        prefix: put before each setting's name in messages (``"algo."``, ``"--algo.gigpo."``).
        estimator_name: how messages name the estimator option (``"algo.estimator"``).
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"{estimator_name} must be one of {ESTIMATORS}, got {estimator!r}")
    reads = ESTIMATOR_SETTINGS[estimator]
    for name, value in settings.items():
        if value is not None and name not in reads:
            raise ValueError(
                f"{prefix}{name}={value!r} is not used by {estimator_name}={estimator!r} "
                f"(it reads {[prefix + r for r in reads if r != 'eps']}); remove it"
            )
    if estimator in ("hgpo", "graphgpo") and settings.get("norm") not in (None, *FAMILY_NORMS):
        raise ValueError(
            f"{prefix}norm={settings['norm']!r} is not defined for {estimator_name}="
            f"{estimator!r}; use one of {FAMILY_NORMS}"
        )
    for name, allowed in (
        ("norm", NORMS),
        ("episode_stats", STATS),
        ("similarity_metric", METRICS),
    ):
        value = settings.get(name)
        if value is not None and value not in allowed:
            raise ValueError(f"{prefix}{name} must be one of {allowed}, got {value!r}")
    for name in ("base_group", "normalize_distance"):
        value = settings.get(name)
        if value is not None and not isinstance(value, bool):
            raise ValueError(f"{prefix}{name} must be true or false, got {value!r}")
    if settings.get("history_length") is not None:
        try:
            check_history_length(settings["history_length"])
        except ValueError as exc:
            raise ValueError(f"{prefix}{exc}") from None
    for name in ("gamma", "similarity", "step_weight", "invalid_penalty", "length_alpha",
                 "episode_weight"):  # fmt: skip
        value = settings.get(name)
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ValueError(f"{prefix}{name} must be finite, got {value!r}")
    gamma, similarity = settings.get("gamma"), settings.get("similarity")
    if gamma is not None and not 0.0 <= gamma <= 1.0:
        raise ValueError(f"{prefix}gamma must be in [0, 1], got {gamma}")
    if similarity is not None and not 0.0 < similarity < 1.0:
        raise ValueError(f"{prefix}similarity must be in (0, 1) or unset, got {similarity}")
    if settings.get("similarity_metric") == "embedding":
        from gigpo_algo.embedding import default_model_dir

        try:
            default_model_dir()
        except ImportError as exc:
            raise ValueError(f"{prefix}similarity_metric='embedding': {exc}") from None
    if settings.get("similarity_metric") is not None and similarity is None:
        raise ValueError(f"{prefix}similarity_metric needs {prefix}similarity (a threshold)")
    if (settings.get("length_alpha") or 0.0) < 0:
        raise ValueError(f"{prefix}length_alpha must be >= 0, got {settings['length_alpha']}")
    if (settings.get("invalid_penalty") or 0.0) < 0:
        raise ValueError(f"{prefix}invalid_penalty must be >= 0, got {settings['invalid_penalty']}")
    if estimator == "hgpo":
        _check_level_weights(settings, prefix)


def _check_level_weights(settings: dict[str, Any], prefix: str) -> None:
    """HGPO's level weights (:func:`gigpo_algo.hgpo.level_weights`) must fit float64 down to
    the deepest level a run reaches (``history_length + 1``), else a run stops at its first
    batch of long enough episodes; unset settings take :func:`hgpo_advantages`' defaults."""
    import inspect

    defaults = inspect.signature(hgpo_advantages).parameters
    history, alpha = (
        defaults[name].default if settings.get(name) is None else settings[name]
        for name in ("history_length", "length_alpha")
    )
    try:
        level_weights(history + 1, alpha)
    except ValueError as exc:
        raise ValueError(
            f"{prefix}{exc} ({prefix}history_length={history}: levels k = 1 .. {history + 1}); "
            f"lower {prefix}length_alpha or {prefix}history_length"
        ) from None


def step_anchors(keys: Any, texts: Any, similarity: float | None) -> Any:
    """What step grouping compares: the state keys, or with a similarity threshold the
    states' texts (never the keys, whose digests have no similarity to speak of).

    Args:
        keys: shape (N,): each step record's anchor key.
        texts: shape (N,): each record's anchor text, None where the env gives none.
        similarity: the threshold, or None for exact grouping.

    Raises:
        ValueError: a threshold, and a record without anchor text.
    """
    if similarity is None:
        return keys
    if any(t is None for t in texts):
        raise ValueError(
            "similarity groups states by their text, and these steps carry no "
            "info['anchor_text'] (the env has no state_text); use exact anchors"
        )
    return texts


def grpo_advantages(
    rewards: Any,
    traj_ids: Any,
    group_ids: Any,
    *,
    norm: str = "mean",
    episode_stats: str = "trajectory",
    is_action_valid: Any = None,
    invalid_penalty: float = 0.0,
    eps: float = 1e-6,
) -> GiGPOResult:
    """GRPO over step records: every row gets its episode score's advantage in its group.

    Equal, row for row, to :func:`gigpo_advantages` with ``step_weight=0`` and the same
    other arguments. ``norm="mean"`` is Dr. GRPO's unscaled variant, ``norm="loo"`` is RLOO.

    Args:
        rewards: float, shape (N,): the environment reward of each row.
        traj_ids: shape (N,): trajectory of each row.
        group_ids: shape (N,): episode group of each row.
        norm: ``"mean"``, ``"mean_std"`` or ``"loo"``.
        episode_stats: ``"trajectory"`` (Eq. 3) or ``"step"`` (verl-agent).
        is_action_valid: bool, shape (N,), or None.
        invalid_penalty: c >= 0, taken off an invalid row's episode score.
        eps: added to the std under ``"mean_std"``.

    Returns:
        :class:`GiGPOResult`: ``advantages == episode_advantages``; ``step_advantages`` is 0;
        ``returns`` is the undiscounted return-to-go less the row's penalty (for logging);
        ``step_group_ids`` numbers every row on its own (no step groups).
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
    n = len(ep.rewards)
    togo = _penalised_returns(ep, 1.0)  # for records and logs
    wrap = ep.kind.wrap
    return GiGPOResult(
        advantages=wrap(ep.advantages),
        episode_advantages=wrap(ep.advantages.copy()),
        step_advantages=wrap(np.zeros(n)),
        returns=wrap(togo),
        step_group_ids=np.arange(n, dtype=np.int64),
    )


def rloo_advantages(
    rewards: Any,
    traj_ids: Any,
    group_ids: Any,
    *,
    episode_stats: str = "trajectory",
    is_action_valid: Any = None,
    invalid_penalty: float = 0.0,
    eps: float = 1e-6,
) -> GiGPOResult:
    """RLOO over step records: :func:`grpo_advantages` with ``norm="loo"`` (each score less
    the mean of the other members of its group). Arguments and result as there."""
    return grpo_advantages(
        rewards,
        traj_ids,
        group_ids,
        norm="loo",
        episode_stats=episode_stats,
        is_action_valid=is_action_valid,
        invalid_penalty=invalid_penalty,
        eps=eps,
    )


def estimator_advantages(
    estimator: str,
    rewards: Any,
    traj_ids: Any,
    group_ids: Any,
    anchors: Any = None,
    *,
    is_action_valid: Any = None,
    step_group_ids: Any = None,
    next_anchors: Any = None,
    success: Any = None,
    **settings: Any,
) -> GiGPOResult | HGPOResult | GraphGPOResult:
    """The advantages of estimator ``estimator`` (one of ``ESTIMATORS``) for step records.

    Args:
        estimator: ``"gigpo"``, ``"grpo"``, ``"rloo"``, ``"hgpo"`` or ``"graphgpo"``.
        rewards, traj_ids, group_ids, is_action_valid: as in :func:`gigpo_advantages`.
        anchors: shape (N,): needed by gigpo, hgpo and graphgpo (keys, or state texts with
            ``similarity``); ignored otherwise.
        step_group_ids: shape (N,), or None: step groups already formed from ``anchors``
            (see :func:`gigpo_advantages`); read by gigpo, hgpo and graphgpo (whose own are
            exact-anchor step groups: its threshold merges states in its graph only).
        next_anchors: shape (N,): the state each row led to; graphgpo only (needed there).
        success: bool, shape (N,), or None; graphgpo only (see :func:`graphgpo_advantages`).
        **settings: keyword arguments of the estimator; a value of None means "the
            estimator's default". A setting the estimator does not read (not in
            ``ESTIMATOR_SETTINGS[estimator]``) raises, rather than being ignored.

    Returns:
        :class:`GiGPOResult` (gigpo, grpo, rloo), :class:`~gigpo_algo.hgpo.HGPOResult` or
        :class:`~gigpo_algo.graphgpo.GraphGPOResult`; every one has ``advantages``,
        ``episode_advantages``, ``step_advantages``, ``returns`` and ``step_group_ids``.

    Raises:
        ValueError: unknown estimator, a setting it does not read, or a bad value.
    """
    given = {k: v for k, v in settings.items() if v is not None}
    check_settings(estimator, given)
    if estimator != "graphgpo" and (next_anchors is not None or success is not None):
        raise ValueError(f"next_anchors and success are read by graphgpo only, not {estimator!r}")
    if estimator in ("gigpo", "hgpo"):
        if anchors is None and step_group_ids is None:
            raise ValueError(f'estimator "{estimator}" needs anchors')
        function = gigpo_advantages if estimator == "gigpo" else hgpo_advantages
        return function(
            rewards,
            traj_ids,
            group_ids,
            anchors,
            is_action_valid=is_action_valid,
            step_group_ids=step_group_ids,
            **given,
        )
    if estimator == "graphgpo":
        if anchors is None or next_anchors is None:
            raise ValueError('estimator "graphgpo" needs anchors and next_anchors')
        return graphgpo_advantages(
            rewards,
            traj_ids,
            group_ids,
            anchors,
            next_anchors,
            is_action_valid=is_action_valid,
            success=success,
            step_group_ids=step_group_ids,
            **given,
        )
    if estimator == "grpo":
        return grpo_advantages(
            rewards, traj_ids, group_ids, is_action_valid=is_action_valid, **given
        )
    return rloo_advantages(rewards, traj_ids, group_ids, is_action_valid=is_action_valid, **given)
