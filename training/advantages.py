"""From step records to advantages, the same for both trainers.

Each iteration (a local trainer's iteration, an OpenRLHF training step) forms the step groups
once (:func:`step_groups`: the rows of one episode group taken from the same anchor state),
for every estimator: GiGPO's step level and HGPO's first level read them, and the
step-group statistics (:func:`training.stats.step_group_summary`) and the rollout files
report them whatever the estimator. The critic-free estimators (gigpo, grpo, rloo, hgpo,
graphgpo) then give :class:`Advantages` (:func:`critic_free_advantages`), with HGPO's levels
and GraphGPO's distances as per-row extras for the rollout files; PPO's critic gives the
same type (:mod:`training.local.critic`). All math is :mod:`gigpo_algo`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    ``step_advantages`` (A_S) are its parts: ``A = A_E + step_weight * A_S`` (GRPO and RLOO:
    A_S = 0; GraphGPO: ``step_weight * A_S + episode_weight * A_E``; HGPO: A_S is the
    weighted mean of its levels, and A = A_S unless ``base_group``; PPO, which has neither:
    both 0). ``returns``: each record's return (GiGPO, HGPO: the discounted return per turn,
    GraphGPO: the graph return, after penalties; PPO: the return at its first token).
    ``extras``: an estimator's own per-row values for the rollout files, by record key, each
    a list of N (HGPO: ``hgpo_levels``; GraphGPO: ``graph_distance``,
    ``graph_next_distance``; :func:`estimator_extras`).
    """

    advantages: np.ndarray
    episode_advantages: np.ndarray
    step_advantages: np.ndarray
    returns: np.ndarray
    extras: dict[str, list[Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, result: Any) -> Advantages:
        """From a :class:`gigpo_algo.advantages.GiGPOResult` or one of its family's results
        (its step groups left out; its own parts as :func:`estimator_extras`)."""
        return cls(
            np.asarray(result.advantages, dtype=np.float64),
            np.asarray(result.episode_advantages, dtype=np.float64),
            np.asarray(result.step_advantages, dtype=np.float64),
            np.asarray(result.returns, dtype=np.float64),
            estimator_extras(result),
        )

    def take(self, rows: np.ndarray) -> Advantages:
        """The rows ``rows`` (int positions, shape (M,)) of every column, extras included."""
        rows = np.asarray(rows, dtype=np.int64)
        return Advantages(
            self.advantages[rows],
            self.episode_advantages[rows],
            self.step_advantages[rows],
            self.returns[rows],
            {key: [column[i] for i in rows] for key, column in self.extras.items()},
        )


def estimator_extras(result: Any) -> dict[str, list[Any]]:
    """An estimator's own per-row values, by rollout record key (empty for gigpo, grpo, rloo).

    HGPO (``level_group_ids``): ``hgpo_levels``, per row a list of
    ``{"k", "group", "size", "advantage"}`` for each level k (1 to history_length + 1) the
    row is in: its group there (numbered per level), the group's size and the row's
    advantage in it (None for a group of one, which gives no item). GraphGPO
    (``distances``): ``graph_distance`` and ``graph_next_distance``, the steps from the
    row's state and from its next state to the goal (floats).
    """
    if hasattr(result, "level_group_ids"):
        ids = np.asarray(result.level_group_ids)
        sizes = np.asarray(result.level_sizes)
        values = np.asarray(result.level_advantages, dtype=np.float64)
        levels: list[Any] = []
        for i in range(ids.shape[1]):
            row = []
            for k in np.flatnonzero(ids[:, i] >= 0):
                value = float(values[k, i])
                row.append({"k": int(k) + 1, "group": int(ids[k, i]), "size": int(sizes[k, i]),
                            "advantage": value if np.isfinite(value) else None})  # fmt: skip
            levels.append(row)
        return {"hgpo_levels": levels}
    if hasattr(result, "next_distances"):
        return {
            "graph_distance": [float(d) for d in np.asarray(result.distances)],
            "graph_next_distance": [float(d) for d in np.asarray(result.next_distances)],
        }
    return {}


def step_groups(records: StepRecords, settings: EstimatorSettings) -> np.ndarray:
    """int64 (N,): the step group of each record, numbered 0..K-1 in order of first
    appearance: the same episode group and the same anchor state (with
    ``settings.similarity``: state texts at least that similar, by
    ``settings.similarity_metric``), as :func:`gigpo_algo.grouping.anchor_groups` forms them.

    Under graphgpo, whose threshold merges graph nodes only, the groups match anchors (with
    a threshold: state texts) exactly, as its step level does.

    Raises:
        ValueError: similarity grouping of records without anchor texts.
    """
    similarity = settings.similarity
    anchors = step_anchors(list(records.anchors), list(records.anchor_texts), similarity)
    if settings.estimator == "graphgpo":
        similarity = None
    return anchor_groups(
        anchors,
        _ids(records.group_ids),
        similarity=similarity,
        metric=settings.similarity_metric or "difflib",
    )


def critic_free_advantages(
    records: StepRecords, settings: EstimatorSettings, groups: np.ndarray | None = None
) -> Advantages:
    """The advantages of ``settings.estimator`` (gigpo, grpo, rloo, hgpo or graphgpo) for the
    records.

    All math is :func:`gigpo_algo.estimators.estimator_advantages`: all read the same
    episode score (reward sum less ``invalid_penalty`` per invalid step); GiGPO's step level
    and HGPO's first level read ``groups`` (:func:`step_groups` of the same records and
    settings; formed here when None), HGPO's deeper levels the trajectories' earlier rows.
    GraphGPO reads each row's state and next state (``records.next_anchors``; with a
    similarity threshold the states' texts) for its graph, and ``groups`` (exact, under
    graphgpo) for its step level.

    Raises:
        ValueError: graphgpo on records without next states (written before they were
            recorded), or a threshold on records without state texts.
    """
    if groups is None:
        groups = step_groups(records, settings)
    common = dict(
        is_action_valid=np.asarray(records.is_action_valid, dtype=bool),
        **settings.estimator_settings(),
    )
    if settings.estimator == "graphgpo":
        if len(records.next_anchors) != len(records) or len(records.next_anchor_texts) != len(
            records
        ):
            raise ValueError(
                "estimator graphgpo needs each step's next state (StepRecords.next_anchors "
                "and next_anchor_texts), and these records have none: they were made "
                "before next states were recorded"
            )
        similarity = settings.similarity
        anchors = step_anchors(list(records.anchors), list(records.anchor_texts), similarity)
        after = step_anchors(list(records.next_anchors), list(records.next_anchor_texts),
                             similarity)  # fmt: skip
        common.update(anchors=anchors, next_anchors=after)
        if settings.success == "won":
            common.update(success=_won_episodes(records))
    # Under graphgpo, step_groups forms the exact groups its step level reads: not twice.
    common.update(step_group_ids=groups)
    result = estimator_advantages(
        settings.estimator,
        np.asarray(records.rewards, dtype=np.float64),
        _ids(records.traj_ids),
        _ids(records.group_ids),
        **common,
    )
    return Advantages.of(result)


def _won_episodes(records: StepRecords) -> np.ndarray:
    """bool (N,): whether each row's episode was won, by the env's ``won`` on any of its rows.

    Raises:
        ValueError: records without the ``won`` column.
    """
    if len(records.won) != len(records):
        raise ValueError(
            "algo.success=won needs the env's won flag on each step (StepRecords.won), and "
            "these records have none: they were made before it was recorded"
        )
    pairs = list(zip(records.group_ids, records.traj_ids, strict=True))
    won = {pair for pair, flag in zip(pairs, records.won, strict=True) if flag}
    return np.array([pair in won for pair in pairs], dtype=bool)


def _ids(ids: list[Any]) -> Any:
    """int64 (N,) for int ids (the local trainer's), else the list as it is (strings)."""
    if all(isinstance(i, int | np.integer) and not isinstance(i, bool) for i in ids):
        return np.asarray(ids, dtype=np.int64)
    return list(ids)
