"""The advantage step on a verl batch of step rows: drop-in for verl-agent's, and verl's
registered estimators ``gigpo``, ``hgpo`` and ``graphgpo``.

:func:`compute_advantage` takes a ``DataProto`` as verl-agent's multi-turn rollout leaves it
(one row per environment step; the step columns of :mod:`training.verl.columns`;
``token_level_rewards`` holding each row's episode reward on its last response token) and
verl's ``algorithm`` section (:func:`training.verl.config.algorithm_settings`), and sets
``advantages`` and ``returns``: each row's advantage on each of its response tokens, 0
outside them, as verl-agent's ``compute_advantage`` does (its ``returns`` are the advantages
too). All math is :func:`training.advantages.critic_free_advantages`, the shared code of
every trainer here, on the batch's :class:`~training.records.StepRecords`.

The episode score of a row is gigpo_algo's: its episode's reward sum, less the invalid-action
penalty when the row's action was invalid. verl-agent's trainer puts exactly that into
``token_level_rewards`` (``apply_invalid_action_penalty``, coefficient
``actor.invalid_action_penalty_coef``, which is not in the algorithm section): the penalty
is read off the batch (:func:`token_penalty`), and a row whose token rewards are no such
score (a reward model's, the KL put into the reward) is an error, never a silent mismatch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from gigpo_algo.advantages import episode_level
from training.advantages import critic_free_advantages, step_groups
from training.settings import EstimatorSettings
from training.stats import step_group_summary
from training.verl.columns import batch_records
from training.verl.config import algorithm_settings, section_get

#: How far (relative to max(1, |score|)) a row's token rewards may be from its score: they
#: are float32 in verl.
SCORE_TOLERANCE = 1e-4


def token_penalty(token_sums: np.ndarray, records: Any, configured: float = 0.0) -> float:
    """The invalid-action penalty a batch's token rewards hold (0 where they hold none).

    Args:
        token_sums: float (N,), each row's ``token_level_rewards`` summed.
        records: the rows' :class:`~training.records.StepRecords`, same order.
        configured: the run's own penalty (``algorithm.<est>.invalid_penalty``), which the
            token rewards may hold or not.

    Raises:
        ValueError: a row whose token rewards are not its episode's reward sum (less one
            penalty on invalid rows, the same for every invalid row), naming the row.
    """
    # Each row's episode reward sum, made where every episode score is (no penalty here).
    scores = episode_level(records.rewards, records.traj_ids, records.group_ids).scores
    gap = scores - np.asarray(token_sums, dtype=np.float64)
    tol = SCORE_TOLERANCE * np.maximum(1.0, np.abs(scores))
    invalid = ~np.asarray(records.is_action_valid, dtype=bool)
    ok = np.abs(gap) <= tol
    found = configured
    if configured == 0.0:
        candidates = gap[invalid & ~ok]
        found = float(candidates[0]) if len(candidates) else 0.0
    ok |= invalid & (np.abs(gap - found) <= tol)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise ValueError(
            f"row {i}: token_level_rewards sum to {token_sums[i]:.6g}, but its episode's "
            f"rewards sum to {scores[i]:.6g}"
            + (f" (less {found:.6g} for its invalid action)" if invalid[i] and found else "")
            + ": the gigpo estimators read the episode score from the step rewards; a "
            "reward changed outside them (a reward model, algorithm.use_kl_in_reward) is "
            "not supported"
        )
    if found < 0:
        raise ValueError(f"the token rewards hold a negative invalid-action penalty {-found:.6g}")
    return found


def row_advantages(
    non_tensor_batch: Any,
    settings: EstimatorSettings,
    token_sums: np.ndarray | None = None,
    report: dict[str, float] | None = None,
    rows: np.ndarray | None = None,
    sink: dict[str, Any] | None = None,
) -> np.ndarray:
    """float64 (N,): each batch row's advantage under ``settings``, in batch order.

    ``token_sums`` (each row's token rewards summed), when given, are checked against the
    episode scores and give the invalid-action penalty they hold (:func:`token_penalty`).
    ``report``, when given, receives the batch's metrics (:func:`batch_metrics`). ``rows``
    (bool (N,)), when given, marks the rows that are steps: the others (verl's padding rows,
    copies of a step under a uid of their own) get 0 and take no part. ``sink``, when given,
    receives the step records, their advantages, step groups and settings (``records``,
    ``result``, ``groups``, ``settings``), for the rollout files.
    """
    if rows is not None:
        keep = np.asarray(rows, dtype=bool).reshape(-1)
        if not keep.all():
            n = len(keep)
            subset = {
                name: np.asarray(column, dtype=object).reshape(-1)[keep]
                for name, column in dict(non_tensor_batch).items()
                if len(np.asarray(column, dtype=object).reshape(-1)) == n
            }
            sums = None if token_sums is None else np.asarray(token_sums)[keep]
            out = np.zeros(n, dtype=np.float64)
            if keep.any():
                out[keep] = row_advantages(subset, settings, sums, report, None, sink)
            return out
    records, order = batch_records(non_tensor_batch)
    if token_sums is not None:
        sums = np.asarray(token_sums, dtype=np.float64)[order]
        penalty = token_penalty(sums, records, settings.invalid_penalty)
        if penalty != settings.invalid_penalty:
            settings = dataclasses.replace(settings, invalid_penalty=penalty)
    groups = step_groups(records, settings)  # once, for the estimator and the metrics
    result = critic_free_advantages(records, settings, groups)
    values = result.advantages
    if report is not None:
        report.update(batch_metrics(records, groups))
    if sink is not None:
        sink.update(records=records, result=result, groups=groups, settings=settings)
    out = np.empty_like(values)
    out[order] = values
    return out


def batch_metrics(records: Any, groups: np.ndarray) -> dict[str, float]:
    """What the local trainer and the OpenRLHF glue report of a batch of step rows, named
    ``gigpo/...`` in verl's metrics: the step groups' coverage and mean size
    (:func:`training.stats.step_group_summary`), the step rows, the episodes, their mean
    steps (``gigpo/episode_turns``, as the OpenRLHF glue names it), the share won (the env's
    ``won`` on any row) and the share of invalid actions."""
    summary = step_group_summary(groups)
    episodes = {(g, t) for g, t in zip(records.group_ids, records.traj_ids, strict=True)}
    won = {(g, t) for g, t, w in zip(records.group_ids, records.traj_ids, records.won,
                                     strict=False) if w}  # fmt: skip
    rows = len(records)
    return {
        "gigpo/step_group_coverage": float(summary["step_group_coverage"]),
        "gigpo/step_group_mean_size": float(summary["step_group_mean_size"]),
        "gigpo/step_rows": float(rows),
        "gigpo/episodes": float(len(episodes)),
        "gigpo/episode_turns": rows / max(1, len(episodes)),
        "gigpo/won": len(won) / max(1, len(episodes)),
        "gigpo/invalid_actions": 1.0 - float(np.mean(records.is_action_valid)) if rows else 0.0,
    }


def on_tokens(values: np.ndarray, response_mask: torch.Tensor) -> torch.Tensor:
    """Each row's value on each of its response tokens, 0 elsewhere: float32 (N, L)."""
    mask = response_mask.to(torch.float32)
    return torch.as_tensor(values, dtype=torch.float32, device=mask.device).unsqueeze(-1) * mask


def response_mask_of(batch: Any) -> torch.Tensor:
    """The batch's ``response_mask``, or verl's own rule for it where absent: the attention
    mask's last ``responses`` columns."""
    if "response_mask" in batch.keys():
        return batch["response_mask"]
    if "responses" in batch.keys() and "attention_mask" in batch.keys():
        length = batch["responses"].shape[-1]  # verl's compute_response_mask
        return batch["attention_mask"][:, -length:]
    raise ValueError("the batch has no response_mask (nor responses and attention_mask)")


def compute_advantage(data: Any, algorithm: Any) -> Any:
    """verl-agent's ``compute_advantage`` for gigpo, hgpo and graphgpo, on gigpo_algo.

    Args:
        data: a verl ``DataProto`` of step rows: ``batch["response_mask"]`` (or
            ``responses`` and ``attention_mask``), ``batch["token_level_rewards"]`` (N, L);
            ``non_tensor_batch`` with the step columns (:mod:`training.verl.columns`).
        algorithm: verl's ``algorithm`` section (dict, ``DictConfig`` or ``AlgoConfig``)
            with verl-agent's keys or ours (:func:`~training.verl.config.algorithm_settings`).

    Returns:
        ``data``, with ``batch["advantages"]`` and ``batch["returns"]`` (float32 (N, L), the
        same values, as verl-agent sets them) and ``batch["response_mask"]``.

    Raises:
        ValueError: a setting, a column or a reward that the estimator cannot read, named.
    """
    settings = algorithm_settings(algorithm)
    mask = response_mask_of(data.batch)
    if "token_level_rewards" not in data.batch.keys():
        raise ValueError("the batch has no token_level_rewards (each row's episode reward)")
    sums = data.batch["token_level_rewards"].to(torch.float64).sum(-1).cpu().numpy()
    values = row_advantages(data.non_tensor_batch, settings, sums)
    advantages = on_tokens(values, mask)
    data.batch["response_mask"] = mask
    data.batch["advantages"] = advantages
    data.batch["returns"] = advantages.clone()
    return data


def make_estimator(name: str) -> Any:
    """verl's registered estimator ``name``: ``fn(token_level_rewards, response_mask, config,
    index, non_tensor_batch, **kwargs) -> (advantages, returns)``, float32 (N, L).

    verl's ``compute_advantage`` passes ``non_tensor_batch`` to it once the plugin's patch is
    in (:mod:`training.verl.plugin`), and inside the v1 trainer's advantage step ``report``
    (a dict for the batch's metrics), ``rows`` (which rows are steps, not verl's padding) and
    ``sink`` (a dict for the records and advantages: :func:`row_advantages`); without the
    step columns it raises.
    """

    def estimator(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        config: Any = None,
        index: Any = None,
        non_tensor_batch: Any = None,
        report: dict[str, float] | None = None,
        rows: np.ndarray | None = None,
        sink: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if non_tensor_batch is None:
            raise ValueError(
                f"the {name} estimator needs the batch's step columns (non_tensor_batch), which "
                "verl passes once the gigpo plugin is loaded (pip install -e '.[verl]'; "
                "VERL_USE_EXTERNAL_PLUGINS must not be 'none')"
            )
        settings = algorithm_settings(_with_estimator(config, name))
        sums = token_level_rewards.to(torch.float64).sum(-1).cpu().numpy()
        values = row_advantages(non_tensor_batch, settings, sums, report, rows, sink)
        advantages = on_tokens(values, response_mask)
        return advantages, advantages.clone()

    estimator.__name__ = estimator.__qualname__ = f"compute_{name}_advantage"
    return estimator


def _with_estimator(config: Any, name: str) -> Any:
    """The algorithm section with ``adv_estimator`` set to ``name`` (a section without one,
    or None, reads as ``{"adv_estimator": name}``)."""
    if config is None:
        return {"adv_estimator": name}
    given = section_get(config, "adv_estimator")
    given = getattr(given, "value", given)
    if given == name:
        return config
    if given is not None:
        raise ValueError(f"the {name} estimator was called with algorithm.adv_estimator={given!r}")
    return {
        "adv_estimator": name,
        name: section_get(config, name),
        "gamma": section_get(config, "gamma"),
    }
