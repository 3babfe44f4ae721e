"""The policy update every estimator runs: the clipped surrogate loss with KL to a frozen
reference and an entropy bonus, over minibatches of step records.

All math is :mod:`gigpo_algo`'s (``ppo_clip_loss``: the clipped objective, by its usual
name; ``kl_penalty``, ``aggregate_loss``, ``broadcast_to_tokens``). "PPO" as an estimator
(a learned critic and GAE) is :mod:`training.local.critic`; the update here is the same for
gigpo, grpo, rloo and ppo.
"""

from __future__ import annotations

import collections
import contextlib
from typing import Any

import numpy as np

from gigpo_algo.losses import (
    aggregate_loss,
    gspo_loss,
    kl_penalty,
    loss_denominator,
    ppo_clip_loss,
    sequence_log_ratio,
)
from gigpo_algo.tokens import broadcast_to_tokens
from training.local.batch import (
    Denominators,
    TokenBatch,
    make_batch,
    micro_batches,
    minibatch_denominators,
    token_log_probs,
)
from training.local.critic import PPOTargets, critic_step
from training.local.metrics import read_stats
from training.local.model import checkpointing
from training.local.precision import compute
from training.local.schema import AlgoConfig
from training.records import StepRecords


class TrainingDivergedError(RuntimeError):
    """An update left a weight NaN or infinite; the run stops before it saves them."""


def policy_loss(
    log_probs: Any,
    batch: TokenBatch,
    ref_log_probs: Any,
    algo: AlgoConfig,
    entropy: Any = None,
    denominators: Denominators | None = None,
) -> tuple[Any, dict[str, Any]]:
    """The scalar loss of one batch and its statistics (clip fraction, KL, ratio, entropy)
    as 0-d tensors on the batch's device (read them once a step: each read waits for the
    device).

    ``entropy`` (B, L - 1), when given, is logged and, weighted by ``algo.entropy_coef``,
    subtracted from the loss. ``denominators``: when the batch is one micro-batch of a
    minibatch, the minibatch's (:func:`~training.local.batch.minibatch_denominators`); the
    loss and every statistic but ``ratio_max`` are then this micro-batch's share, and the
    micro-batches' sum is the minibatch's value (default: the batch's own)."""
    import torch

    if denominators is None:
        denominators = Denominators(
            loss=loss_denominator(batch.response_mask, mode=algo.loss_agg),
            tokens=loss_denominator(batch.response_mask),
        )
    tokens = denominators.tokens

    token_adv = batch.targets.get("advantages")
    if token_adv is None:
        token_adv = broadcast_to_tokens(batch.advantages, batch.response_mask)
    mask = batch.response_mask
    if algo.policy_loss == "gspo":
        per_token = gspo_loss(
            log_probs,
            batch.old_log_probs,
            token_adv,
            mask,
            clip_low=algo.clip_low,
            clip_high=algo.clip_high,
        )
    else:
        per_token = ppo_clip_loss(
            log_probs,
            batch.old_log_probs,
            token_adv,
            clip_low=algo.clip_low,
            clip_high=algo.clip_high,
        )
    tis = batch.targets.get("tis_weights")  # rollout.tis_cap: the engine's log-probs' weights
    if tis is not None:
        per_token = per_token * tis
    stats: dict[str, Any] = {}
    if ref_log_probs is not None and algo.kl_coef > 0:
        kl = kl_penalty(log_probs, ref_log_probs, estimator=algo.kl_estimator)
        per_token = per_token + algo.kl_coef * kl
        stats["kl"] = aggregate_loss(kl.detach(), mask, denominator=tokens)
    loss = aggregate_loss(per_token, mask, mode=algo.loss_agg, denominator=denominators.loss)
    if entropy is not None:
        mean_entropy = aggregate_loss(entropy, mask, denominator=tokens)
        stats["entropy"] = mean_entropy.detach()
        if algo.entropy_coef > 0:
            loss = loss - algo.entropy_coef * mean_entropy
    with torch.no_grad():
        log_ratio = log_probs - batch.old_log_probs
        if algo.policy_loss == "gspo":  # one ratio per sequence, on its response tokens
            log_ratio = sequence_log_ratio(log_probs, batch.old_log_probs, mask)[:, None] * mask
        ratio = torch.exp(log_ratio)
        clipped = ((ratio < 1 - algo.clip_low) | (ratio > 1 + algo.clip_high)).float()
        stats["clip_frac"] = aggregate_loss(clipped, mask, denominator=tokens)
        response = mask.bool()  # the largest ratio of a response token (1 with none)
        stats["ratio_max"] = torch.where(response, ratio, ratio.new_zeros(())).amax()
        stats["ratio_max"] = torch.where(response.any(), stats["ratio_max"], 1.0)
    return loss, stats


def minibatch_plan(n: int, minibatch_size: int, epochs: int, generator: Any) -> list[np.ndarray]:
    """The rows of each optimizer step of an update: ``n`` records shuffled once and cut into
    minibatches of ``minibatch_size`` (the last may be smaller); every later epoch visits the
    same minibatches in a new random order (drawn from ``generator``).

    The composition of a minibatch stays the same across epochs, so its old log-probs can be
    recomputed once, on exactly the batch the update later runs (:func:`policy_update`).
    """
    order = generator.permutation(n)
    batches = [order[start : start + minibatch_size] for start in range(0, n, minibatch_size)]
    plan = list(batches)
    for _ in range(epochs - 1):
        plan += [batches[i] for i in generator.permutation(len(batches))]
    return plan


class _LogProbGap:
    """The running mean and max of |sampler - update| log-prob over response tokens; with
    ``tis_cap`` > 0 each batch also gets its truncated importance weights."""

    def __init__(self, tis_cap: float = 0.0) -> None:
        self.total, self.count, self.largest = 0.0, 0, 0.0
        self.tis_cap = tis_cap

    def take(self, batch: TokenBatch, fresh: Any) -> None:
        """Counts ``fresh`` (B, L - 1) against the batch's sampler log-probs, then makes
        them the batch's ``old_log_probs``; with ``tis_cap``, ``batch.targets["tis_weights"]``
        is ``min(exp(fresh - sampler), tis_cap)`` on the response tokens (verl's token-level
        truncated importance sampling; TRL's ``vllm_importance_sampling_cap``)."""
        import torch

        mask = batch.response_mask
        gap = (fresh - batch.old_log_probs).abs()[mask.bool()]
        if gap.numel():
            self.total, self.count = self.total + float(gap.sum()), self.count + gap.numel()
            self.largest = max(self.largest, float(gap.max()))
        if self.tis_cap:
            weights = torch.exp((fresh - batch.old_log_probs) * mask).clamp(max=self.tis_cap)
            batch.targets["tis_weights"] = weights * mask
        batch.old_log_probs = fresh * mask

    def stats(self) -> dict[str, float]:
        return {
            "rollout_logp_gap": self.total / max(self.count, 1),
            "rollout_logp_gap_max": self.largest,
        }


def recompute_old_log_probs(
    model: Any,
    batches: list[TokenBatch],
    temperature: float,
    compute_dtype: str,
    gap: _LogProbGap | None = None,
) -> dict[str, float]:
    """Replaces each batch's ``old_log_probs`` by the model's own, computed now (no gradient,
    in ``compute_dtype``) on that very batch; returns how far the sampler's were from them.

    Run before the update's first step, on the batches the update then steps on, an unmoved
    policy's ratio is 1 to the last bit: the same rows, padding and prefix take the same
    bfloat16 roundings (:mod:`training.local.precision`).

    Returns:
        ``rollout_logp_gap`` and ``rollout_logp_gap_max``: the mean and largest
        |sampler - update| log-prob over the response tokens (nats), counted into ``gap``
        when given (with what it already holds).
    """
    import torch

    gap = _LogProbGap() if gap is None else gap
    was_training = model.training
    model.eval()
    # One autocast context for all of them: the weights do not change in between, so each
    # is cast to bfloat16 once, not once a batch.
    with torch.no_grad(), compute(compute_dtype, model.device.type):
        fresh_all = [token_log_probs(model, batch, temperature) for batch in batches]
    for batch, fresh in zip(batches, fresh_all, strict=True):
        gap.take(batch, fresh)
    model.train(was_training)
    return gap.stats()


def policy_update(
    model: Any,
    reference: Any,
    optimizer: Any,
    records: StepRecords,
    advantages: np.ndarray,
    algo: AlgoConfig,
    *,
    pad_id: int,
    temperature: float,
    max_grad_norm: float,
    generator: np.random.Generator,
    share_prefix: bool = False,
    critic_targets: PPOTargets | None = None,
    critic: Any = None,
    critic_optimizer: Any = None,
    compute_dtype: str = "float32",
    recompute: bool = False,
    tis_cap: float = 0.0,
) -> dict[str, float]:
    """``algo.policy_epochs`` passes over minibatches of step records
    (:func:`minibatch_plan`); one optimizer step on :func:`policy_loss` each.

    Each minibatch runs as micro-batches of at most ``algo.micro_batch_tokens`` padded
    tokens (:func:`~training.local.batch.micro_batches`; 0: one pass), the same micro-batches
    every epoch: the reference's, the policy's (and under PPO the critic's) forward and
    backward passes run one micro-batch at a time, the gradients accumulate, and every loss
    is divided by the whole minibatch's normaliser, so the step equals one pass over the
    minibatch to float rounding.

    ``share_prefix``: run the shared prompt start of each micro-batch once
    (:mod:`training.local.prefix`); ignored when the model checkpoints its layers
    (``model.gradient_checkpointing``), whose recomputed passes drop any cache.

    ``compute_dtype`` (``float32`` or ``bfloat16``, :mod:`training.local.precision`): the
    dtype of each micro-batch's forward passes, each in its own autocast context, so that no
    forward reads a bfloat16 copy of a weight cast before the last optimizer step (autocast
    caches its casts until its context exits). Under ``bfloat16`` the ratio's old log-probs
    are the update's own forward pass on each micro-batch instead of the sampler's:
    recomputed before the first step (:func:`recompute_old_log_probs`), except the first
    minibatch's, which its own step's forward passes give (the policy has not moved yet).

    ``recompute`` (the vllm engine's records): the same recomputation in any dtype, the
    records' log-probs being the engine's; ``tis_cap`` > 0 weights each token's clipped loss
    by ``min(exp(old - engine log-prob), tis_cap)`` (``rollout.tis_cap``).

    With ``critic_targets`` (``algo.estimator: ppo``) the policy reads their per-token
    advantages, and the critic takes one step on the clipped value loss after each policy
    step, on the same micro-batches (:func:`~training.local.critic.critic_step`).

    Returns:
        Mean loss, clip fraction, entropy, KL (when on) and gradient norm over the
        minibatches; with a critic also ``value_loss``, ``value_clip_frac`` and
        ``critic_grad_norm``; under bfloat16 or ``recompute`` also ``rollout_logp_gap``
        (and its max);
        ``micro_batches``, the forward passes a step ran, on average.
    """
    import torch

    # A checkpointed layer drops the cache it is given: no shared prefix under checkpointing.
    share_prefix = share_prefix and not checkpointing(model)
    plan = minibatch_plan(len(records), algo.minibatch_size, algo.policy_epochs, generator)
    token_targets = None if critic_targets is None else critic_targets.token_targets()
    uses = collections.Counter(id(rows) for rows in plan)  # a minibatch's steps still to run
    parts = {id(rows): micro_batches(records, rows, algo.micro_batch_tokens) for rows in plan}
    wholes = {id(rows): minibatch_denominators(records, rows, algo.loss_agg) for rows in plan}

    def make(rows: np.ndarray) -> list[TokenBatch]:
        return [make_batch(records, part, advantages, pad_id, model.device,
                           share_prefix=share_prefix, token_targets=token_targets)
                for part in parts[id(rows)]]  # fmt: skip

    # Tensors of a minibatch are kept while it has steps left to run (all of them under
    # bfloat16, whose old log-probs are recomputed before the first step; the first
    # step's own forward passes give its minibatch's, so that one is not run twice).
    kept: dict[int, list[TokenBatch]] = {}
    gap: _LogProbGap | None = None
    if (compute_dtype == "bfloat16" or recompute or tis_cap) and plan:
        gap = _LogProbGap(tis_cap)
        kept = {id(rows): make(rows) for rows in plan}
        later = [batch for key, batches in kept.items() if key != id(plan[0]) for batch in batches]
        recompute_old_log_probs(model, later, temperature, compute_dtype, gap)
    sums: dict[str, float] = {}
    model.train()
    for step, rows in enumerate(plan):
        key = id(rows)
        batches = kept[key] if key in kept else make(rows)
        uses[key] -= 1
        if uses[key]:
            kept[key] = batches
        else:
            kept.pop(key, None)
        whole = wholes[key]
        optimizer.zero_grad(set_to_none=True)
        stats: dict[str, float] = {}
        for batch in batches:
            ref_lp = None
            with compute(compute_dtype, model.device.type):
                if reference is not None and algo.kl_coef > 0:
                    ref_lp = reference_log_probs(reference, batch, temperature)
                log_probs, entropy = token_log_probs(
                    model, batch, temperature, with_entropy=True,
                    entropy_grad=algo.entropy_coef > 0,
                )  # fmt: skip
                if gap is not None and step == 0:
                    gap.take(batch, log_probs.detach())
                loss, part = policy_loss(log_probs, batch, ref_lp, algo, entropy, whole)
            loss.backward()
            part["loss"] = loss.detach()
            _accumulate(stats, part)
        trainable = [p for p in model.parameters() if p.requires_grad]
        stats["grad_norm"] = torch.nn.utils.clip_grad_norm_(trainable, max_grad_norm)
        optimizer.step()
        stats = read_stats(stats) | {"micro_batches": float(len(batches))}
        if critic is not None:
            stats.update(critic_step(critic, critic_optimizer, batches, algo, max_grad_norm,
                                     compute_dtype, whole.tokens))  # fmt: skip
        for name, value in stats.items():
            sums[name] = sums.get(name, 0.0) + value
    # The gradients are not needed until the next update's first step: generation and the
    # reference's passes run without them (a 1.5B model's float32 ones take 5.8 GiB).
    optimizer.zero_grad(set_to_none=True)
    if critic_optimizer is not None:
        critic_optimizer.zero_grad(set_to_none=True)
    model.eval()
    means = {name: value / max(len(plan), 1) for name, value in sums.items()}
    return means | (gap.stats() if gap is not None else {})


def reference_log_probs(reference: Any, batch: TokenBatch, temperature: float) -> Any:
    """The reference's :func:`token_log_probs` without a gradient: a frozen model's, or
    under LoRA the policy's own with its adapters off
    (:class:`~training.local.lora.BaseReference`)."""
    import torch

    off = getattr(reference, "off", None)
    with torch.no_grad(), off() if off is not None else contextlib.nullcontext():
        model = reference.model if off is not None else reference
        return token_log_probs(model, batch, temperature)


def _accumulate(total: dict[str, Any], part: dict[str, Any]) -> None:
    """Adds one micro-batch's statistics (0-d tensors) into its minibatch's, on the device:
    shares sum, maxima take the larger (``ratio_max``)."""
    import torch

    for name, value in part.items():
        if name not in total:
            total[name] = value
        elif name.endswith("_max"):
            total[name] = torch.maximum(total[name], value)
        else:
            total[name] = total[name] + value


def check_finite(model: Any, critic: Any, iteration: int) -> None:
    """Raises :class:`TrainingDivergedError` when a trainable weight of the policy (or the
    critic) is not finite, so that no checkpoint ever holds NaN weights."""
    import torch

    for name, network in (("policy", model), ("critic", critic)):
        if network is None:
            continue
        for weight_name, weight in network.named_parameters():
            if weight.requires_grad and not bool(torch.isfinite(weight).all()):
                raise TrainingDivergedError(
                    f"iteration {iteration}: the update made the {name}'s {weight_name} "
                    "non-finite (NaN or inf); nothing of this iteration was saved. Lower "
                    "optim.lr or optim.max_grad_norm"
                )
