"""What the OpenRLHF glue adds to OpenRLHF's metrics each training step, ``gigpo/...``:
per episode (not per sample: under the step layout an episode is spread over many samples)
and how closely the engines follow the actor's weights."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from training.openrlhf.spans import turn_columns
from training.openrlhf.turns import SampleTurns


def episode_stats(batch: Sequence[Sequence[SampleTurns]]) -> dict[str, float]:
    """The batch's metrics per episode, not per sample (under the step layout an episode is
    spread over many samples), for OpenRLHF's logs.

    Returns ``gigpo/episodes``; the means over episodes of ``gigpo/episode_turns`` (steps
    played), ``gigpo/won``, ``gigpo/episode_return`` (sum of step rewards, before OpenRLHF's
    length penalties) and ``gigpo/budget_ended`` (episode layout: the token budget ended
    it before the env did); ``gigpo/turns_trained`` (the fraction of played turns whose
    tokens are in a sample, after OpenRLHF's ``--data.max_len`` cut); ``gigpo/samples`` and
    ``gigpo/filler_samples``; ``gigpo/invalid_actions`` (the share of played turns whose text
    the env could not act on). Empty when the batch has no episode.
    """
    episodes: dict[tuple[str, str], dict[str, float]] = {}
    samples = fillers = 0
    for experience in batch:
        for ep in experience:
            samples += 1
            if ep.is_filler:
                fillers += 1
                continue
            spans = turn_columns(ep.action_ranges, ep.sequence_length, ep.max_len)
            one = episodes.setdefault(
                (ep.group, ep.traj),
                {"turns": 0, "trained": 0, "won": 0.0, "return": 0.0, "budget_ended": 0.0},
            )
            one["turns"] += len(ep.rewards)
            one["invalid"] = one.get("invalid", 0) + sum(not v for v in ep.is_action_valid)
            one["trained"] += int(np.count_nonzero(spans[:, 1] > spans[:, 0]))
            one["won"] = max(one["won"], float(ep.won))
            one["return"] += float(sum(ep.rewards))
            one["budget_ended"] = max(one["budget_ended"], float(ep.budget_ended))
    if not episodes:
        return {}
    values = list(episodes.values())
    turns = sum(v["turns"] for v in values)
    return {
        "gigpo/episodes": float(len(values)),
        "gigpo/episode_turns": turns / len(values),
        "gigpo/won": float(np.mean([v["won"] for v in values])),
        "gigpo/episode_return": float(np.mean([v["return"] for v in values])),
        "gigpo/budget_ended": float(np.mean([v["budget_ended"] for v in values])),
        "gigpo/turns_trained": sum(v["trained"] for v in values) / max(turns, 1),
        "gigpo/samples": float(samples - fillers),
        "gigpo/filler_samples": float(fillers),
        "gigpo/invalid_actions": sum(v.get("invalid", 0) for v in values) / max(turns, 1),
    }


def logp_gap(experiences: list[Any]) -> dict[str, float]:
    """How far the engines' log-probs of the sampled tokens are from the trainer's own
    recomputation of them (OpenRLHF's old log-probs): ``gigpo/rollout_logp_gap``, the mean
    of ``|engine - trainer|`` over the batch's response tokens, and
    ``gigpo/rollout_logp_gap_max``. Near 0 while the engines run the actor's current weights
    (engines that missed an update drift from it); empty unless the engines returned their
    log-probs (``--algo.advantage.is_correction_level token`` or ``seq``)."""
    import torch

    gaps = []
    for experience in experiences:
        engine = getattr(experience, "rollout_log_probs", None)
        trainer = getattr(experience, "action_log_probs", None)
        if engine is None or trainer is None:
            continue
        mask = experience.action_mask.bool()
        gaps.append((engine.float() - trainer.float()).abs()[mask])
    tokens = torch.cat(gaps) if gaps else None
    if tokens is None or tokens.numel() == 0:
        return {}
    return {
        "gigpo/rollout_logp_gap": float(tokens.mean()),
        "gigpo/rollout_logp_gap_max": float(tokens.max()),
    }
