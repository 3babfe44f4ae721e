"""The ``gigpo`` advantage estimator for OpenRLHF batches, as pure functions.

OpenRLHF gives every token of an episode the same advantage. GiGPO gives each turn its own:
``A = A_E + w * A_S`` (episode-level plus anchor-state step-level relative advantage), and
:func:`batch_advantages` writes each turn's value onto that turn's tokens. All math is
:func:`gigpo_algo.gigpo_advantages` and :func:`gigpo_algo.tokens.turns_to_tokens`; the
OpenRLHF glue (:mod:`training.openrlhf.patch`) only moves tensors in and out.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from gigpo_algo.advantages import gigpo_advantages
from gigpo_algo.tokens import turns_to_tokens
from training.openrlhf.records import EpisodeTurns
from training.openrlhf.spans import batch_turn_spans, turn_columns

#: Environment variable carrying :class:`GiGPOSettings` to every Ray worker.
SETTINGS_ENV = "GIGPO_OPENRLHF_SETTINGS"
MODES = {"mean_std_norm": "mean_std", "mean_norm": "mean", "loo": "loo"}
EPISODE_STATS = ("trajectory", "step")


@dataclass(frozen=True)
class GiGPOSettings:
    """The ``--algo.gigpo.*`` flags.

    Attributes:
        step_advantage_w: weight ``w`` of the step-level advantage.
        gamma: discount of the step-level returns.
        mode: ``mean_std_norm`` (paper), ``mean_norm`` (no std division) or ``loo``.
        similarity_thresh: None for exact anchors, else a similarity threshold in (0, 1).
        episode_stats: ``trajectory`` (paper Eq. 3) or ``step`` (verl-agent).
        invalid_penalty: subtracted from an invalid turn's score and return.
    """

    step_advantage_w: float = 1.0
    gamma: float = 0.95
    mode: str = "mean_std_norm"
    similarity_thresh: float | None = None
    episode_stats: str = "trajectory"
    invalid_penalty: float = 0.0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"algo.gigpo.mode must be one of {sorted(MODES)}, got {self.mode!r}")
        if self.episode_stats not in EPISODE_STATS:
            raise ValueError(
                f"algo.gigpo.episode_stats must be one of {EPISODE_STATS}, "
                f"got {self.episode_stats!r}"
            )
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"algo.gigpo.gamma must be in [0, 1], got {self.gamma}")
        if self.similarity_thresh is not None and not 0.0 < self.similarity_thresh < 1.0:
            raise ValueError(
                f"algo.gigpo.similarity_thresh must be in (0, 1) or None, "
                f"got {self.similarity_thresh}"
            )
        if self.invalid_penalty < 0:
            raise ValueError(f"algo.gigpo.invalid_penalty must be >= 0, got {self.invalid_penalty}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> GiGPOSettings:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{SETTINGS_ENV} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{SETTINGS_ENV} must hold a JSON object")
        return cls(**data)

    @classmethod
    def from_environ(cls) -> GiGPOSettings | None:
        """The settings of this process's run, or None when GiGPO is not on."""
        text = os.environ.get(SETTINGS_ENV)
        return None if not text else cls.from_json(text)


def batch_advantages(
    batch: Sequence[Sequence[EpisodeTurns]],
    mask_shapes: Sequence[tuple[int, int]],
    settings: GiGPOSettings,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per-token GiGPO advantages for a list of OpenRLHF experiences.

    The advantages are computed over the whole batch at once (a group's samples may sit in
    different experiences) and then written per experience.

    Args:
        batch: per experience, the :class:`EpisodeTurns` of each of its B rows, in row order.
        mask_shapes: per experience, the ``(B, A)`` shape of its action mask.
        settings: the estimator's flags.

    Returns:
        ``(advantages, episode_returns)``: per experience a float64 (B, A) array holding each
        turn's advantage on that turn's columns (0 elsewhere), and a float64 (B,) array of
        episode returns (sum of turn rewards).

    Raises:
        ValueError: a record does not match its experience's shape.
    """
    if len(batch) != len(mask_shapes):
        raise ValueError(f"{len(batch)} experiences but {len(mask_shapes)} mask shapes")
    rewards, anchors, valid, groups, trajs = [], [], [], [], []
    spans_per_experience = []
    for e, (episodes, shape) in enumerate(zip(batch, mask_shapes, strict=True)):
        rows, width = int(shape[0]), int(shape[1])
        if len(episodes) != rows:
            raise ValueError(f"experience {e} has {rows} rows but {len(episodes)} turn records")
        columns = []
        for ep in episodes:
            columns.append(turn_columns(ep.action_ranges, ep.sequence_length, ep.max_len))
            rewards.extend(ep.rewards)
            anchors.extend(ep.anchors)
            valid.extend(ep.valid)
            groups.extend([ep.group] * len(ep.rewards))
            trajs.extend([ep.traj] * len(ep.rewards))
        spans_per_experience.append(batch_turn_spans(columns, width))
    if rewards:
        values = gigpo_advantages(
            np.asarray(rewards, dtype=np.float64),
            trajs,
            groups,
            anchors,
            gamma=settings.gamma,
            step_weight=settings.step_advantage_w,
            norm=MODES[settings.mode],
            episode_stats=settings.episode_stats,
            similarity=settings.similarity_thresh,
            is_action_valid=np.asarray(valid, dtype=bool),
            invalid_penalty=settings.invalid_penalty,
        ).advantages
    else:
        values = np.zeros(0)
    advantages, returns = [], []
    offset = 0
    for episodes, shape, spans in zip(batch, mask_shapes, spans_per_experience, strict=True):
        count = len(spans)
        advantages.append(
            turns_to_tokens(values[offset : offset + count], spans, (int(shape[0]), int(shape[1])))
        )
        returns.append(np.array([float(np.sum(ep.rewards)) for ep in episodes]))
        offset += count
    return advantages, returns
