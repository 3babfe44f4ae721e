"""From step records to advantages, the same for both trainers.

Each iteration (a local trainer's iteration, an OpenRLHF training step) forms the step groups
once (:func:`step_groups`: the rows of one episode group taken from the same anchor state),
for every estimator: GiGPO's step level reads them, and the step-group statistics
(:func:`training.stats.step_group_summary`) and the rollout files report them whatever the
estimator. The critic-free estimators then give :class:`Advantages`
(:func:`critic_free_advantages`); PPO's critic gives the same type
(:mod:`training.local.critic`). All math is :mod:`gigpo_algo`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gigpo_algo.estimators import estimator_advantages, step_anchors
from gigpo_algo.grouping import anchor_groups
from training.records import StepRecords
from training.settings import EstimatorSettings


@dataclass(frozen=True)
class Advantages:
    """What an estimator gives each step record: float64 arrays, shape (N,).

    ``advantages`` is what the policy update trains on. ``episode_advantages`` (A_E) and
    ``step_advantages`` (A_S) are its parts, ``A = A_E + step_weight * A_S`` (GRPO and RLOO:
    A_S = 0; PPO, which has neither: both 0). ``returns``: each record's return (GiGPO:
    the discounted return per turn, after penalties; PPO: the return at its first token).
    """

    advantages: np.ndarray
    episode_advantages: np.ndarray
    step_advantages: np.ndarray
    returns: np.ndarray

    @classmethod
    def of(cls, result: Any) -> Advantages:
        """From a :class:`gigpo_algo.advantages.GiGPOResult` (its step groups left out)."""
        return cls(
            np.asarray(result.advantages, dtype=np.float64),
            np.asarray(result.episode_advantages, dtype=np.float64),
            np.asarray(result.step_advantages, dtype=np.float64),
            np.asarray(result.returns, dtype=np.float64),
        )


def step_groups(records: StepRecords, settings: EstimatorSettings) -> np.ndarray:
    """int64 (N,): the step group of each record, numbered 0..K-1 in order of first
    appearance: the same episode group and the same anchor state (with
    ``settings.similarity``: state texts at least that similar, by
    ``settings.similarity_metric``), as :func:`gigpo_algo.grouping.anchor_groups` forms them.

    Raises:
        ValueError: similarity grouping of records without anchor texts.
    """
    similarity = settings.similarity
    anchors = step_anchors(list(records.anchors), list(records.anchor_texts), similarity)
    return anchor_groups(
        anchors,
        _ids(records.group_ids),
        similarity=similarity,
        metric=settings.similarity_metric or "difflib",
    )


def critic_free_advantages(
    records: StepRecords, settings: EstimatorSettings, groups: np.ndarray | None = None
) -> Advantages:
    """The advantages of ``settings.estimator`` (gigpo, grpo or rloo) for the records.

    All math is :func:`gigpo_algo.estimators.estimator_advantages`: the three read the same
    episode score (reward sum less ``invalid_penalty`` per invalid step); GiGPO's step level
    reads ``groups`` (:func:`step_groups` of the same records and settings; formed here when
    None).
    """
    if groups is None:
        groups = step_groups(records, settings)
    result = estimator_advantages(
        settings.estimator,
        np.asarray(records.rewards, dtype=np.float64),
        _ids(records.traj_ids),
        _ids(records.group_ids),
        is_action_valid=np.asarray(records.is_action_valid, dtype=bool),
        step_group_ids=groups,
        **settings.estimator_settings(),
    )
    return Advantages.of(result)


def _ids(ids: list[Any]) -> Any:
    """int64 (N,) for int ids (the local trainer's), else the list as it is (strings)."""
    if all(isinstance(i, int | np.integer) and not isinstance(i, bool) for i in ids):
        return np.asarray(ids, dtype=np.int64)
    return list(ids)
