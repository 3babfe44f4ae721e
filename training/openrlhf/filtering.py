"""Dynamic sampling under gigpo_algo's estimators: a group is useless when it trains nothing.

OpenRLHF's ``--algo.dynamic_filtering_enable`` (DAPO's dynamic sampling) drops a prompt's
group when the mean of its episodes' ``scores`` is outside ``--algo.dynamic_filtering_range``
and generates another prompt in its place. Under GiGPO that rule drops useful groups: when
every episode scores the same, the episode-level advantage is 0, but two actions taken from
one anchor state can still have different discounted returns (step rewards, invalid-action
penalties), and that step-level advantage trains. So under ``--algo.advantage.estimator``
``gigpo``, ``grpo`` or ``rloo`` the rule is the estimator's own: a group is dropped when every
turn of every episode in it gets advantage 0 at both levels (|A| <= :data:`ATOL`), computed on
the group alone by the training step's estimator (a group's advantages depend on no other
group), from the rewards before OpenRLHF's length penalties (which its own filter does not
see either). For GRPO and RLOO that is DAPO's rule on the estimator's episode score.

:func:`filter_groups` runs the generation in rounds: every dropped group is replaced by a new
prompt from the dataloader until the generator call has as many groups as it asked for
(``--rollout.vllm_generate_batch_size``, by default ``--rollout.batch_size``) or the
dataloader ends. A round waits for its slowest group before the next is sent (OpenRLHF's own
filter sends each replacement as soon as a group is dropped).

Everything here is pure; :mod:`training.openrlhf.patch` calls it from OpenRLHF's
samples generator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gigpo_algo.baselines import filter_zero_advantage_groups
from training.advantages import critic_free_advantages, step_groups
from training.openrlhf.samples import STEP_SAMPLES
from training.openrlhf.turns import INFO_KEY, SampleTurns
from training.records import StepRecords
from training.settings import EstimatorSettings

#: An advantage within this of 0 counts as 0 (float64 sums of equal returns leave ~1e-16).
ATOL = 1e-9
#: The attribute holding the filter counts: on the samples generator until its next batch,
#: then on that batch's first sample (see training.openrlhf.patch).
FILTER_STATS = "gigpo_filter_stats"


def sample_turns(sample: Any) -> list[SampleTurns]:
    """The turn records an episode's OpenRLHF sample carries: its step samples' under the
    step layout, its own under the episode layout."""
    carried = getattr(sample, STEP_SAMPLES, None)
    holders = [sample] if carried is None else carried
    records = []
    for holder in holders:
        for record in holder.info.get(INFO_KEY, []):
            records.append(SampleTurns.from_dict(record))
    return records


def group_has_signal(records: Sequence[SampleTurns], settings: EstimatorSettings) -> bool:
    """Whether any turn of the group gets a nonzero advantage at either level under
    ``settings``' estimator (the group's records only; see the module docstring)."""
    steps = StepRecords()
    for record in records:
        steps.extend(record.steps())
    if not steps.rewards:
        return False
    result = critic_free_advantages(steps, settings, step_groups(steps, settings))
    levels = [result.episode_advantages, result.step_advantages]
    if settings.estimator == "hgpo" and not settings.base_group:
        levels = [result.step_advantages]  # A_E is reported, not trained on
    elif settings.estimator == "graphgpo":  # a level weighted 0 is not trained on
        weights = (settings.episode_weight, settings.step_weight)
        levels = [part for part, w in zip(levels, weights, strict=True) if w != 0.0]
    parts = np.column_stack(levels)
    return bool(filter_zero_advantage_groups(parts, steps.group_ids, atol=ATOL).any())


def split_groups(samples: Sequence[Any]) -> list[tuple[list[Any], list[SampleTurns]]]:
    """The samples grouped by their episode group, in order of first appearance: per group,
    its samples and their turn records."""
    groups: dict[str, tuple[list[Any], list[SampleTurns]]] = {}
    for sample in samples:
        records = sample_turns(sample)
        if not records:
            raise ValueError(
                "dynamic filtering under gigpo_algo's estimators needs every sample's turn "
                "records: a sample without any did not come from the gigpo agent executor"
            )
        group_samples, group_records = groups.setdefault(records[0].group, ([], []))
        group_samples.append(sample)
        group_records.extend(records)
    return list(groups.values())


def filter_groups(
    generate: Callable[[int], tuple[list[Any], int, bool]],
    num_prompts: int,
    settings: EstimatorSettings,
) -> tuple[list[Any], int, bool, dict[str, float]]:
    """Generates ``num_prompts`` groups, dropping those without signal and generating new
    prompts in their place, round by round, until enough are kept or the prompts run out.

    Args:
        generate: ``n -> (samples, prompts_consumed, exhausted)``: generates the groups of up
            to ``n`` new prompts (OpenRLHF's ``_generate_vllm`` without its own filter).
        num_prompts: groups wanted.
        settings: the run's estimator and its settings.

    Returns:
        ``(samples, prompts_consumed, exhausted, stats)``: the kept groups' samples in order,
        every prompt consumed (kept or dropped), whether the prompts ran out, and
        ``gigpo/groups_kept``, ``gigpo/groups_dropped``.
    """
    kept: list[Any] = []
    consumed = kept_groups = dropped_groups = 0
    exhausted = False
    wanted = num_prompts
    while wanted > 0 and not exhausted:
        samples, used, exhausted = generate(wanted)
        consumed += used
        if not samples:
            break
        wanted = 0
        for group, records in split_groups(samples):
            if group_has_signal(records, settings):
                kept.extend(group)
                kept_groups += 1
            else:
                dropped_groups += 1
                wanted += 1
    stats = {"gigpo/groups_kept": float(kept_groups), "gigpo/groups_dropped": float(dropped_groups)}
    return kept, consumed, exhausted, stats


def add_stats(total: dict[str, float] | None, more: dict[str, float]) -> dict[str, float]:
    """``total`` plus ``more``, key by key."""
    out = dict(total or {})
    for key, value in more.items():
        out[key] = out.get(key, 0.0) + value
    return out
