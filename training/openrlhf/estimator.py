"""gigpo_algo's estimators on OpenRLHF batches: advantages onto tokens and into experiences.

OpenRLHF gives every token of an episode the same advantage. GiGPO gives each turn its own:
``A = A_E + w * A_S`` (episode-level plus anchor-state step-level relative advantage), and
:func:`batch_advantages` writes each turn's value onto that turn's tokens. GRPO and RLOO run
through the same path, from the same episode score (GiGPO without the step level), and so do
HGPO and GraphGPO (their levels and distances go to the rollout files). All math
comes through :mod:`training.advantages` (the local trainer's too: one step record, one
step grouping per batch, one estimator call) and :func:`gigpo_algo.tokens.turns_to_tokens`;
:func:`apply_gigpo` writes the result into OpenRLHF's experiences, and the OpenRLHF glue
(:mod:`training.openrlhf.patch`) only calls it. The functions that compute are pure;
:func:`apply_gigpo` changes the experiences it is given, and :func:`save_rollouts` writes the
run's step-record files (counting training steps in this process).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from gigpo_algo.estimators import ESTIMATORS
from gigpo_algo.tokens import turns_to_tokens
from training.advantages import Advantages, critic_free_advantages, step_groups
from training.guarded import GuardError, load_json
from training.openrlhf.order import in_rollout_order, require_one_row_per_episode, rollout_order
from training.openrlhf.samples import fill_filler_metrics
from training.openrlhf.spans import batch_turn_spans, turn_columns
from training.openrlhf.turns import INFO_KEY, SampleTurns
from training.record_files import record_rows, write_rollouts
from training.records import StepRecords
from training.settings import EstimatorSettings
from training.stats import step_group_summary

#: Environment variable carrying :class:`GiGPOSettings` to every Ray worker.
SETTINGS_ENV = "GIGPO_OPENRLHF_SETTINGS"
#: The flag prefix of the settings on the launcher's command line.
FLAG_PREFIX = "--algo.gigpo."


@dataclass
class GiGPOSettings(EstimatorSettings):
    """The estimator and its ``--algo.gigpo.*`` settings (the table:
    :class:`training.settings.EstimatorSettings`, critic-free estimators only), and where the
    run's step records go.

    Attributes:
        save_rollouts_every: write the step records of every this many training steps (the
            first, then every k-th) under ``rollouts_dir`` (:mod:`training.record_files`); 0
            never. The executor records texts only when it is on.
        rollouts_dir: the run directory the ``rollouts/`` folder goes in.
        rollout_max_chars: characters kept of each saved text (0: all).
    """

    save_rollouts_every: int = 0
    rollouts_dir: str = ""
    rollout_max_chars: int = 2000

    def __post_init__(self) -> None:
        for name in ("save_rollouts_every", "rollout_max_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"--gigpo.{name} must be an int >= 0, got {value!r}")
        if self.save_rollouts_every and not self.rollouts_dir:
            raise ValueError("saving rollouts needs a rollouts_dir")
        self.check(
            prefix=FLAG_PREFIX,
            estimator_name="--algo.advantage.estimator",
            estimators=ESTIMATORS,
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> GiGPOSettings:
        try:  # the guarded reader: size, depth, integer digits, no NaN
            data = load_json(text, SETTINGS_ENV, expect=None)
        except GuardError as exc:
            raise ValueError(str(exc)) from None
        if not isinstance(data, dict):
            raise ValueError(f"{SETTINGS_ENV} must hold a JSON object")
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"{SETTINGS_ENV} has unknown keys {unknown}")
        return cls(**data)

    @classmethod
    def from_environ(cls) -> GiGPOSettings | None:
        """The settings of this process's run, or None when gigpo_algo's estimators are off."""
        text = os.environ.get(SETTINGS_ENV)
        return None if not text else cls.from_json(text)


def batch_steps(batch: Sequence[Sequence[SampleTurns]]) -> StepRecords:
    """The batch's turns as one :class:`~training.records.StepRecords` (without tokens),
    experiences then rows then turns in order (observations and actions ``""`` where none
    were recorded). Each turn's next state (``next_anchors``, ``next_anchor_texts``) comes
    along when every sample with turns carries it, else the batch has none
    (:meth:`~training.records.StepRecords.extend`)."""
    steps = StepRecords()
    for experience in batch:
        for sample in experience:
            steps.extend(sample.steps())
    return steps


def batch_advantages(
    batch: Sequence[Sequence[SampleTurns]],
    mask_shapes: Sequence[tuple[int, int]],
    settings: GiGPOSettings,
    result: Advantages | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per-token GiGPO advantages for a list of OpenRLHF experiences.

    The advantages are computed over the whole batch at once (a group's samples may sit in
    different experiences) and then written per experience.

    Args:
        batch: per experience, the :class:`SampleTurns` of each of its B rows, in row order.
        mask_shapes: per experience, the ``(B, A)`` shape of its action mask.
        settings: the estimator's flags.
        result: the batch's :class:`~training.advantages.Advantages` when the caller has
            them already.

    Returns:
        ``(advantages, episode_returns)``: per experience a float64 (B, A) array holding each
        turn's advantage on that turn's columns (0 elsewhere), and a float64 (B,) array of
        episode returns (sum of turn rewards).

    Raises:
        ValueError: a record does not match its experience's shape.
    """
    if len(batch) != len(mask_shapes):
        raise ValueError(f"{len(batch)} experiences but {len(mask_shapes)} mask shapes")
    spans_per_experience: list[Any] = []
    for e, (episodes, shape) in enumerate(zip(batch, mask_shapes, strict=True)):
        rows, width = int(shape[0]), int(shape[1])
        if len(episodes) != rows:
            raise ValueError(f"experience {e} has {rows} rows but {len(episodes)} turn records")
        columns = [
            turn_columns(ep.action_ranges, ep.sequence_length, ep.max_len) for ep in episodes
        ]
        spans_per_experience.append(batch_turn_spans(columns, width))
    if result is None and any(ep.rewards for episodes in batch for ep in episodes):
        steps = batch_steps(batch)
        result = critic_free_advantages(steps, settings, step_groups(steps, settings))
    values = np.zeros(0) if result is None else np.asarray(result.advantages)
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


def rollout_records(
    batch: Sequence[Sequence[SampleTurns]],
    settings: GiGPOSettings,
    iteration: int,
    result: Advantages | None = None,
    groups: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """The batch's turns as :mod:`training.record_files` rows (the viewer's schema), with the
    advantages :func:`batch_advantages` trains on (before ``--reward.clip_range``);
    ``result`` and ``groups``: the batch's advantages and step groups when the caller has
    them already."""
    steps = batch_steps(batch)
    if not steps.rewards:
        return []
    if groups is None:
        groups = step_groups(steps, settings)
    if result is None:
        result = critic_free_advantages(steps, settings, groups)
    return record_rows(iteration, steps, result, groups, settings.rollout_max_chars,
                       extras=result.extras)  # fmt: skip


def read_records(experiences: list[Any], *, remove: bool = True) -> list[list[SampleTurns]]:
    """Per experience, the turn record of each row (``info["gigpo_turns"]``), taken out of
    ``info`` when ``remove`` (OpenRLHF's metric logging accepts only numbers there)."""
    batch = []
    for i, experience in enumerate(experiences):
        records = (experience.info.pop if remove else experience.info.get)(INFO_KEY, None)
        if records is None:
            raise ValueError(
                f"experience {i} has no {INFO_KEY!r}: the gigpo estimator needs the gigpo "
                "agent executor (--train.agent_func_path training/openrlhf/agent_func.py)"
            )
        batch.append([SampleTurns.from_dict(r) for r in records])
    return batch


def apply_gigpo(
    experiences: list[Any],
    settings: GiGPOSettings,
    clip_range: tuple[float, float] | None = None,
    batch: list[list[SampleTurns]] | None = None,
    report: dict[str, float] | None = None,
) -> list[Any]:
    """Writes gigpo_algo's per-turn advantages and returns into OpenRLHF experiences (in place).

    Each experience must carry ``info["gigpo_turns"]`` (one record per row) unless ``batch``
    (:func:`read_records` of them) is given; it is removed. The advantages are computed over
    the whole batch at once, whatever the micro-batches: a group's samples may sit in
    several experiences. Where an experience has ``rewards`` (B,), each row's reward is
    taken from there (OpenRLHF's length penalties have already been applied to it): the
    difference from the sum of its turn rewards goes to its last turn
    (:meth:`SampleTurns.with_episode_reward`); under the step layout a row is one step, so a
    response's penalty goes to its own step. As OpenRLHF does for its own estimators,
    ``info["group_reward_std"]`` gets the std (unbiased) of the episode returns of each row's
    group, and ``clip_range`` clips the value that becomes every token's advantage (OpenRLHF
    clips its baselined reward, which is that value). Filler rows get advantage 0 and the
    batch's mean metrics (:func:`fill_filler_metrics`). ``report`` gets the step groups'
    ``gigpo/step_group_coverage`` and ``gigpo/step_group_mean_size``
    (:func:`training.stats.step_group_summary`).
    """
    import torch

    if batch is None:
        batch = read_records(experiences)
    shaped = []
    for i, (experience, episodes) in enumerate(zip(experiences, batch, strict=True)):
        rewards = getattr(experience, "rewards", None)
        if rewards is not None:
            totals = [float(r) for r in rewards.reshape(-1).tolist()]
            if len(totals) != len(episodes):
                raise ValueError(
                    f"experience {i} has {len(totals)} rewards but {len(episodes)} turn records"
                )
            episodes = [ep.with_episode_reward(t) for ep, t in zip(episodes, totals, strict=True)]
        shaped.append(episodes)
    batch = shaped
    _log_group_reward_stds(experiences, batch)
    # once a training step, for every estimator, on the turns in rollout order
    order = rollout_order(experiences, batch)
    if order is None:
        require_one_row_per_episode(batch)
    rows, back = in_rollout_order(batch, order)
    steps = batch_steps([rows])
    groups = result = None
    if steps.rewards:
        groups = step_groups(steps, settings)
        result = critic_free_advantages(steps, settings, groups)
        if report is not None:
            summary = step_group_summary(groups)
            report["gigpo/step_group_coverage"] = float(summary["step_group_coverage"])
            report["gigpo/step_group_mean_size"] = float(summary["step_group_mean_size"])
    save_rollouts([rows], settings, result, groups)
    if result is not None:  # back in the batch's order
        result = result.take(back)
    shapes = [tuple(e.action_mask.shape) for e in experiences]
    advantages, returns = batch_advantages(batch, shapes, settings, result)
    for experience, adv, ret in zip(experiences, advantages, returns, strict=True):
        mask = experience.action_mask
        values = torch.as_tensor(adv, dtype=torch.float32, device=mask.device)
        if clip_range is not None:
            values = values.clamp(min=float(clip_range[0]), max=float(clip_range[1]))
        values = values * mask
        experience.advantages = values
        experience.returns = values.clone()
        experience.info["return"] = torch.as_tensor(ret, dtype=torch.float32)
        experience.kl = None
    fill_filler_metrics(experiences, batch)
    return experiences


#: Training steps whose advantages this process computed (the experience maker runs in the
#: driver only, so this is the run's step count, and only one process writes rollouts).
_STEPS_SEEN = [0]


def start_iteration(global_step: int) -> None:
    """The training step about to run is OpenRLHF's ``global_step`` (0-based; a resumed run
    starts past its checkpoint's), so that its rollouts file is numbered as the step and a
    resumed run never overwrites the files of the steps before it."""
    _STEPS_SEEN[0] = int(global_step)


def save_rollouts(
    batch: list[list[SampleTurns]],
    settings: GiGPOSettings,
    result: Advantages | None = None,
    groups: np.ndarray | None = None,
) -> Path | None:
    """Writes this training step's turn records (:mod:`training.record_files`) when the step is
    one of every ``settings.save_rollouts_every``; returns the file, or None. ``result``,
    ``groups``: the batch's advantages and step groups, when already computed (see
    :func:`rollout_records`)."""
    step = _STEPS_SEEN[0]
    _STEPS_SEEN[0] += 1
    every = settings.save_rollouts_every
    if not every or step % every:
        return None
    rows = rollout_records(batch, settings, step, result, groups)
    return write_rollouts(
        settings.rollouts_dir,
        step,
        rows,
        source="openrlhf",
        estimator=settings.estimator,
        max_chars=settings.rollout_max_chars,
    )


def _log_group_reward_stds(experiences: list[Any], batch: list[list[SampleTurns]]) -> None:
    """``info["group_reward_std"]`` per row, as OpenRLHF logs it: the unbiased std of the
    episode returns of the row's group (all rollouts of its prompt; an episode's return sums
    its turns over every sample that holds one). Filler rows get 0 here and the batch mean
    later; nothing is logged when a group has a single episode."""
    import torch

    totals: dict[str, dict[str, float]] = {}
    for episodes in batch:
        for ep in episodes:
            if not ep.is_filler:
                group = totals.setdefault(ep.group, {})
                group[ep.traj] = group.get(ep.traj, 0.0) + float(sum(ep.rewards))
    if not totals or any(len(v) < 2 for v in totals.values()):
        return
    stds = {
        g: torch.tensor(list(v.values()), dtype=torch.float32).std().item()
        for g, v in totals.items()
    }
    for experience, episodes in zip(experiences, batch, strict=True):
        experience.info["group_reward_std"] = torch.tensor(
            [0.0 if ep.is_filler else stds[ep.group] for ep in episodes]
        )
