"""The step layout's samples in OpenRLHF: one sample per env step, padded to whole batches.

Under ``--gigpo.layout step`` the executor returns an episode's steps as
:class:`~training.records.StepRecords`. In OpenRLHF's samples generator (patched by
:mod:`training.openrlhf.patch`):

1. :func:`step_samples` builds each step's sample with OpenRLHF's own sample builder (its
   prompt then its answer; the answer its only action range), carrying that step's turn
   record; they ride on the episode's own sample, which keeps the episode's reward and
   score for dynamic filtering and evaluation;
2. :func:`expand_step_samples` replaces a training batch's episodes by their step samples,
   in order (a group's steps stay in one batch: the advantages see the whole group), and
   :func:`pad_with_fillers` pads the batch to a whole number of optimizer steps and
   micro-batches (:func:`sample_multiple`) with samples that train nothing;
3. after the advantages, :func:`fill_filler_metrics` gives the fillers the batch's mean
   metrics, so OpenRLHF's sample-weighted logs are unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from training.openrlhf.turns import INFO_KEY, SampleTurns
from training.records import StepRecords

#: The attribute of an episode's sample that holds its step samples.
STEP_SAMPLES = "gigpo_step_samples"


def step_samples(build: Callable[[dict], Any], response: dict[str, Any], max_len: int) -> list:
    """Step layout: one OpenRLHF sample per step of the episode in ``response``.

    Each step's sample is built by OpenRLHF's own builder (``build``, its
    ``_process_response_into_experience``) from a response of that step alone: the step's
    prompt then its answer, the answer its one action range, the step reward as the sample's
    reward, the episode's score, the answer's rollout log-probs; and it carries that step's
    turn record (:meth:`SampleTurns.from_step`).

    Raises:
        ValueError: malformed steps, or a step longer than ``max_len`` (the executor never
            writes one).
    """
    payload = response["gigpo"]
    steps = StepRecords.from_dict(payload["steps"])
    if not len(steps):
        raise ValueError("a step-layout episode without steps")
    with_log_probs = response.get("rollout_log_probs") is not None
    samples = []
    for i in range(len(steps)):
        prompt, answer = steps.prompt_ids[i], steps.response_ids[i]
        if len(prompt) + len(answer) > max_len:
            raise ValueError(
                f"step {i} has {len(prompt)} prompt and {len(answer)} response tokens, more "
                f"than --data.max_len {max_len}"
            )
        if with_log_probs and len(steps.old_log_probs[i]) != len(answer):
            raise ValueError(f"step {i} has no rollout log-prob per response token")
        sample = build(
            {
                "prompt": response["prompt"],
                "label": response["label"],
                "images": None,
                "mm_train_inputs": None,
                "reward": steps.rewards[i],
                "scores": response.get("scores"),
                "observation_tokens": prompt + answer,
                "action_ranges": [(len(prompt), len(prompt) + len(answer))],
                "rollout_log_probs": [0.0] * len(prompt) + steps.old_log_probs[i]
                if with_log_probs
                else None,
                "truncated": steps.truncated[i] if steps.truncated else False,
                "extra_logs": {},
            }
        )
        record = SampleTurns.from_step(steps, i, won=bool(payload.get("won")), max_len=max_len)
        sample.info[INFO_KEY] = [record.to_dict()]
        samples.append(sample)
    return samples


def padding_multiple(dp: int, train_batch: int, train_micro: int, rollout_micro: int) -> int:
    """The sample count a step-layout batch is padded to a multiple of.

    OpenRLHF hands each of the ``dp`` data-parallel ranks chunks of ``rollout_micro`` samples,
    each rank's PPO loop drops a last partial micro-batch of ``train_micro`` (``drop_last``)
    and steps the optimizer every ``train_batch / (train_micro * dp)`` micro-batches: the
    multiple is one optimizer step of samples, ``dp * train_micro * accumulation``.

    Raises:
        ValueError: ``dp * rollout_micro`` does not divide that step (then the padding could
            fill a whole optimizer step, whose loss would divide by zero tokens).
    """
    for name, value in (("dp", dp), ("train_batch", train_batch), ("train_micro", train_micro),
                        ("rollout_micro", rollout_micro)):  # fmt: skip
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    accumulation = max(1, train_batch // (train_micro * dp))
    step = dp * train_micro * accumulation
    if step % (dp * rollout_micro):
        raise ValueError(
            f"under the step layout, {dp} data-parallel rank(s) x --rollout.micro_batch_size "
            f"{rollout_micro} must divide the {step} samples of one optimizer step "
            f"(--train.batch_size {train_batch}, --train.micro_batch_size {train_micro}), so "
            "that the filler samples padding a batch never make a whole optimizer step"
        )
    return step


def data_parallel_size(args: Any) -> int:
    """OpenRLHF's effective data-parallel size of the actor (its ``effective_actor_num``)."""
    return max(
        1,
        args.actor.num_nodes
        * args.actor.num_gpus_per_node
        // args.ds.ring_attn_size
        // args.ds.tensor_parallel_size,
    )


def sample_multiple(args: Any) -> int:
    """:func:`padding_multiple` of a run's OpenRLHF arguments."""
    return padding_multiple(
        data_parallel_size(args),
        args.train.batch_size,
        args.train.micro_batch_size,
        args.rollout.micro_batch_size,
    )


def pad_with_fillers(samples: list, multiple: int) -> list:
    """``samples`` plus filler samples up to a multiple of ``multiple``.

    A filler is a copy of the shortest sample with an all-zero action mask and a record
    without turns: it adds no token to any loss or normaliser, gets advantage 0, and its
    per-sample metrics are set to the batch's means (:func:`fill_filler_metrics`), so
    OpenRLHF's sample-weighted metrics are unchanged. At most ``multiple - 1`` are added.
    """
    import torch

    if not samples:
        return samples
    missing = (-len(samples)) % multiple
    if not missing:
        return samples
    template = min(samples, key=lambda s: int(s.total_length.sum()))
    max_len = SampleTurns.from_dict(template.info[INFO_KEY][0]).max_len
    record = SampleTurns(group="", traj="", max_len=max_len).to_dict()
    fillers = [
        dataclasses.replace(
            template,
            action_mask=torch.zeros_like(template.action_mask),
            rollout_log_probs=None
            if template.rollout_log_probs is None
            else torch.zeros_like(template.rollout_log_probs),
            info={**template.info, INFO_KEY: [dict(record)]},
            prompts=list(template.prompts),
            labels=list(template.labels),
            images=list(template.images),
            mm_train_inputs=list(template.mm_train_inputs),
        )
        for _ in range(missing)
    ]
    return samples + fillers


def expand_step_samples(samples: list, args: Any, gigpo_on: bool = True) -> list:
    """A batch's episodes replaced by their step samples (in order), padded with fillers
    (:func:`pad_with_fillers`); a batch of episode-layout samples is returned as it is.

    Raises:
        ValueError: step-layout episodes mixed with episode-layout ones, or under OpenRLHF's
            own estimator (``gigpo_on`` False), whose baselines take one sample per episode.
    """
    carriers = [hasattr(s, STEP_SAMPLES) for s in samples]
    if not any(carriers):
        return samples
    if not all(carriers):
        raise ValueError("a batch mixes step-layout and episode-layout episodes")
    if not gigpo_on:
        raise ValueError(
            "the prompt dataset's tasks ask for the step layout, but the run uses OpenRLHF's "
            "own estimator, which takes one sample per episode: write the dataset with "
            "--gigpo.layout episode, or use --algo.advantage.estimator gigpo, grpo or rloo"
        )
    steps = [step for sample in samples for step in getattr(sample, STEP_SAMPLES)]
    return pad_with_fillers(steps, sample_multiple(args))


def fill_filler_metrics(experiences: list[Any], batch: list[list[SampleTurns]]) -> None:
    """Sets every per-sample metric of the filler rows (each ``info`` entry of shape (B,),
    and ``response_length``, ``truncated``, ``total_length``) to the mean over the batch's
    other rows, as float32; a batch without fillers is left as it is."""
    import torch

    fillers = [
        torch.tensor([ep.is_filler for ep in episodes], dtype=torch.bool) for episodes in batch
    ]
    if not any(bool(f.any()) for f in fillers):
        return
    rows = [len(episodes) for episodes in batch]

    def per_row(value: Any, b: int) -> bool:
        return isinstance(value, torch.Tensor) and value.dim() == 1 and len(value) == b

    keys = [
        k for k in experiences[0].info
        if all(per_row(e.info.get(k), b) for e, b in zip(experiences, rows, strict=True))
    ]  # fmt: skip
    fields = [
        name for name in ("response_length", "truncated", "total_length")
        if all(per_row(getattr(e, name), b) for e, b in zip(experiences, rows, strict=True))
    ]  # fmt: skip

    def mean_of_real(values: list[Any]) -> float:
        real = torch.cat([v.float()[~f] for v, f in zip(values, fillers, strict=True)])
        return float(real.mean()) if len(real) else 0.0

    for key in keys:
        mean = mean_of_real([e.info[key] for e in experiences])
        for experience, filler in zip(experiences, fillers, strict=True):
            value = experience.info[key].float().clone()
            value[filler] = mean
            experience.info[key] = value
    for name in fields:
        mean = mean_of_real([getattr(e, name) for e in experiences])
        for experience, filler in zip(experiences, fillers, strict=True):
            value = getattr(experience, name).float().clone()
            value[filler] = mean
            setattr(experience, name, value)
