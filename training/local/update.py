"""From step records to a policy update: advantages, token log-probs, the PPO loss with KL.

All math comes from :mod:`gigpo_algo`: the advantages (``estimator_advantages``: GiGPO,
GRPO, RLOO from one episode score; ``turn_gae`` for PPO), ``broadcast_to_tokens``,
``ppo_clip_loss``, ``value_loss`` (PPO's critic), ``kl_penalty`` and ``aggregate_loss``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gigpo_algo.advantages import GiGPOResult
from gigpo_algo.estimators import estimator_advantages, step_anchors
from gigpo_algo.losses import (
    aggregate_loss,
    entropy_from_logits,
    kl_penalty,
    ppo_clip_loss,
    value_loss,
)
from gigpo_algo.tokens import broadcast_to_tokens
from training.local.config import AlgoConfig
from training.local.prefix import cache_kwarg, forward_params, prefix_cache, shared_prefix_length
from training.local.rollout import StepRecords
from training.rollouts import estimator_step_groups


def compute_advantages(records: StepRecords, algo: AlgoConfig) -> GiGPOResult:
    """The advantages of ``algo.estimator`` for the step records; every field shape (N,).

    All math is :func:`gigpo_algo.estimators.estimator_advantages`: GiGPO, GRPO and RLOO
    read the same episode score (reward sum less ``algo.invalid_penalty`` per invalid step).
    Exact step grouping reads the records' anchor keys; with ``algo.similarity`` it reads
    their anchor texts (``state_text()``), never the keys.
    """
    return estimator_advantages(
        algo.estimator,
        np.asarray(records.rewards, dtype=np.float64),
        np.asarray(records.traj_ids, dtype=np.int64),
        np.asarray(records.group_ids, dtype=np.int64),
        step_anchors(list(records.anchors), list(records.anchor_texts), algo.similarity),
        is_action_valid=np.asarray(records.is_action_valid, dtype=bool),
        **algo.estimator_settings(),
    )


def step_group_stats(
    records: StepRecords, result: GiGPOResult, algo: AlgoConfig
) -> dict[str, float]:
    """How much step-level signal the batch offers, whatever the estimator.

    GiGPO's own step groups (``result.step_group_ids``) when it is the estimator; for the
    others, which group no steps and take no similarity threshold, the exact-anchor groups
    that GiGPO would form from the same records.

    Returns:
        ``step_group_coverage``: fraction of records in a step group of size >= 2;
        ``step_group_mean_size``: mean size of the step groups (records per group);
        ``step_groups``: number of step groups.
    """
    if len(records) == 0:
        return {"step_group_coverage": 0.0, "step_group_mean_size": 0.0, "step_groups": 0.0}
    codes = estimator_step_groups(algo.estimator, result, records.anchors, records.group_ids)
    sizes = np.bincount(codes)
    return {
        "step_group_coverage": float((sizes[codes] >= 2).mean()),
        "step_group_mean_size": float(sizes.mean()),
        "step_groups": float(len(sizes)),
    }


@dataclass
class TokenBatch:
    """Right-padded prompt + response sequences of some step records.

    ``input_ids`` and ``attention_mask``: (B, L). The per-token tensors are (B, L - 1) and
    aligned with next-token prediction: column t is about token t + 1.
    """

    input_ids: Any
    attention_mask: Any
    response_mask: Any
    old_log_probs: Any
    advantages: Any
    first_column: int = 0
    """Columns before this one hold no response token (the shortest prompt, less one)."""
    prefix_length: int = 0
    """Leading tokens shared by every row, run once (see :mod:`training.local.prefix`)."""
    targets: dict[str, Any] = field(default_factory=dict)
    """Per-token float32 tensors, (B, L - 1), 0 off the response tokens: PPO's
    ``advantages``, ``returns`` and ``old_values`` (see :class:`PPOTargets`)."""


def make_batch(
    records: StepRecords,
    rows: np.ndarray,
    advantages: np.ndarray,
    pad_id: int,
    device: Any = "cpu",
    *,
    share_prefix: bool = False,
    token_targets: dict[str, list[np.ndarray]] | None = None,
) -> TokenBatch:
    """Pads the chosen rows into tensors on ``device`` (see :class:`TokenBatch`).

    ``share_prefix``: record the prompt start all chosen rows share, so that
    :func:`token_log_probs` runs it once. ``token_targets``: name -> one array per record
    (shape: its response length), laid out into ``batch.targets``.
    """
    import torch

    seqs = [records.prompt_ids[i] + records.response_ids[i] for i in rows]
    width = max(len(s) for s in seqs)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    response_mask = torch.zeros((len(rows), width - 1))
    old = torch.zeros((len(rows), width - 1))
    for b, i in enumerate(rows):
        p, r = len(records.prompt_ids[i]), len(records.response_ids[i])
        input_ids[b, : p + r] = torch.tensor(seqs[b], dtype=torch.long)
        attention[b, : p + r] = 1
        response_mask[b, p - 1 : p - 1 + r] = 1.0
        old[b, p - 1 : p - 1 + r] = torch.tensor(records.old_log_probs[i], dtype=torch.float32)
    adv = torch.as_tensor(advantages[rows], dtype=torch.float32)
    tensors = (input_ids, attention, response_mask, old, adv)
    prompts = [records.prompt_ids[i] for i in rows]
    first = min(len(p) for p in prompts) - 1
    prefix = shared_prefix_length(prompts) if share_prefix else 0
    targets = {}
    for name, per_record in (token_targets or {}).items():
        laid = torch.zeros((len(rows), width - 1))
        for b, i in enumerate(rows):
            p, r = len(records.prompt_ids[i]), len(records.response_ids[i])
            laid[b, p - 1 : p - 1 + r] = torch.as_tensor(per_record[i], dtype=torch.float32)
        targets[name] = laid.to(device)
    return TokenBatch(
        *(t.to(device) for t in tensors),
        first_column=first,
        prefix_length=prefix,
        targets=targets,
    )


def token_log_probs(
    model: Any, batch: TokenBatch, temperature: float = 1.0, *, with_entropy: bool = False
) -> Any:
    """log pi(token t+1 | tokens <= t), shape (B, L - 1); 0 in the columns before
    ``batch.first_column``, which hold prompt tokens only.

    Logits are computed only from ``first_column`` on (the vocabulary projection of the
    prompt positions is skipped), and a shared prefix (``batch.prefix_length``) runs once.
    ``with_entropy``: also return the entropy (nats) of pi(. | tokens <= t), same layout.
    """
    import torch

    width = batch.input_ids.shape[1]
    first, prefix = batch.first_column, batch.prefix_length
    keep = width - first
    kwargs: dict[str, Any] = {"attention_mask": batch.attention_mask}
    if "logits_to_keep" in forward_params(type(model)):
        kwargs["logits_to_keep"] = keep
    if prefix:
        kwargs[cache_kwarg(model)] = prefix_cache(
            model, batch.input_ids[0, :prefix].tolist(), batch.input_ids.shape[0]
        )
        kwargs["use_cache"] = True
        logits = model(input_ids=batch.input_ids[:, prefix:], **kwargs).logits
    else:
        logits = model(input_ids=batch.input_ids, **kwargs).logits
    logits = logits[:, -keep:-1].float() / temperature
    targets = batch.input_ids[:, first + 1 :, None]
    log_p = torch.log_softmax(logits, dim=-1)
    chosen = torch.nn.functional.pad(log_p.gather(-1, targets).squeeze(-1), (first, 0))
    if not with_entropy:
        return chosen
    entropy = entropy_from_logits(logits)
    return chosen, torch.nn.functional.pad(entropy, (first, 0))


def ppo_loss(
    log_probs: Any,
    batch: TokenBatch,
    ref_log_probs: Any,
    algo: AlgoConfig,
    entropy: Any = None,
) -> tuple[Any, dict[str, float]]:
    """The scalar loss of one batch and its statistics (clip fraction, KL, ratio, entropy).

    ``entropy`` (B, L - 1), when given, is logged and, weighted by ``algo.entropy_coef``,
    subtracted from the loss."""
    import torch

    token_adv = batch.targets.get("advantages")
    if token_adv is None:
        token_adv = broadcast_to_tokens(batch.advantages, batch.response_mask)
    per_token = ppo_clip_loss(
        log_probs,
        batch.old_log_probs,
        token_adv,
        clip_low=algo.clip_low,
        clip_high=algo.clip_high,
    )
    stats: dict[str, float] = {}
    mask = batch.response_mask
    if ref_log_probs is not None and algo.kl_coef > 0:
        kl = kl_penalty(log_probs, ref_log_probs, estimator=algo.kl_estimator)
        per_token = per_token + algo.kl_coef * kl
        stats["kl"] = float(aggregate_loss(kl.detach(), mask))
    loss = aggregate_loss(per_token, mask, mode=algo.loss_agg)
    if entropy is not None:
        mean_entropy = aggregate_loss(entropy, mask)
        stats["entropy"] = float(mean_entropy.detach())
        if algo.entropy_coef > 0:
            loss = loss - algo.entropy_coef * mean_entropy
    with torch.no_grad():
        ratio = torch.exp(log_probs - batch.old_log_probs)
        clipped = ((ratio < 1 - algo.clip_low) | (ratio > 1 + algo.clip_high)).float()
        stats["clip_frac"] = float(aggregate_loss(clipped, mask))
        stats["ratio_max"] = float((ratio * mask).max()) if mask.any() else 1.0
    return loss, stats


def ppo_update(
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
    ppo: PPOTargets | None = None,
    critic: Any = None,
    critic_optimizer: Any = None,
) -> dict[str, float]:
    """PPO epochs over shuffled minibatches of step records; one optimizer step each.

    With ``ppo`` (``algo.estimator: ppo``) the policy reads its per-token advantages, and
    the critic takes one step on the clipped value loss after each policy step, on the same
    minibatch (:func:`critic_step`).

    Returns:
        Mean loss, clip fraction, entropy, KL (when on) and gradient norm over the
        minibatches; with a critic also ``value_loss``, ``value_clip_frac`` and
        ``critic_grad_norm``.
    """
    import torch

    n = len(records)
    sums: dict[str, float] = {}
    steps = 0
    model.train()
    for _ in range(algo.ppo_epochs):
        order = generator.permutation(n)
        for start in range(0, n, algo.minibatch_size):
            rows = order[start : start + algo.minibatch_size]
            batch = make_batch(
                records,
                rows,
                advantages,
                pad_id,
                model.device,
                share_prefix=share_prefix,
                token_targets=None if ppo is None else ppo.token_targets(),
            )
            ref_lp = None
            if reference is not None and algo.kl_coef > 0:
                with torch.no_grad():
                    ref_lp = token_log_probs(reference, batch, temperature)
            log_probs, entropy = token_log_probs(model, batch, temperature, with_entropy=True)
            if algo.entropy_coef == 0:
                entropy = entropy.detach()
            loss, stats = ppo_loss(log_probs, batch, ref_lp, algo, entropy)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            trainable = [p for p in model.parameters() if p.requires_grad]
            grad_norm = torch.nn.utils.clip_grad_norm_(trainable, max_grad_norm)
            optimizer.step()
            stats.update(loss=float(loss.detach()), grad_norm=float(grad_norm))
            if critic is not None:
                stats.update(critic_step(critic, critic_optimizer, batch, algo, max_grad_norm))
            for key, value in stats.items():
                sums[key] = sums.get(key, 0.0) + value
            steps += 1
    model.eval()
    return {key: value / max(steps, 1) for key, value in sums.items()}


# ----------------------------------------------------------------------------- PPO's critic


@dataclass
class PPOTargets:
    """What PPO's update needs per record, computed once per iteration by :func:`ppo_targets`.

    ``old_values``, ``advantages`` (whitened over the batch's response tokens) and
    ``returns``: one float64 array per record, shape (its response length,).
    ``result``: the per-record summary the trainer logs and saves like the other
    estimators' (``advantages``: the record's mean token advantage; ``returns``: the
    return at its first token; no episode or step term: zeros).
    """

    old_values: list[np.ndarray]
    advantages: list[np.ndarray]
    returns: list[np.ndarray]
    result: GiGPOResult
    stats: dict[str, float]

    def token_targets(self) -> dict[str, list[np.ndarray]]:
        return {
            "advantages": self.advantages,
            "returns": self.returns,
            "old_values": self.old_values,
        }


def record_values(
    critic: Any,
    records: StepRecords,
    pad_id: int,
    *,
    batch_size: int,
    share_prefix: bool = False,
) -> list[np.ndarray]:
    """The critic's value at every response token of every record (no gradient).

    Returns:
        One float64 array per record, shape (its response length,): the value of the text
        before each response token.
    """
    import torch

    from training.local.critic import token_values

    out: list[np.ndarray] = []
    zeros = np.zeros(len(records))
    with torch.no_grad():
        for start in range(0, len(records), batch_size):
            rows = np.arange(start, min(start + batch_size, len(records)))
            batch = make_batch(
                records, rows, zeros, pad_id, critic.device, share_prefix=share_prefix
            )
            values = token_values(critic, batch).cpu().double().numpy()
            for b, i in enumerate(rows):
                p, r = len(records.prompt_ids[i]), len(records.response_ids[i])
                out.append(values[b, p - 1 : p - 1 + r].copy())
    return out


def ppo_targets(
    critic: Any,
    records: StepRecords,
    algo: AlgoConfig,
    *,
    pad_id: int,
    share_prefix: bool = False,
) -> PPOTargets:
    """Values, GAE advantages and returns for ``algo.estimator: ppo``.

    Each turn's reward is the env's step reward less ``algo.invalid_penalty`` for an
    invalid action, so a trajectory's undiscounted return is the episode score the other
    estimators read. GAE is :func:`gigpo_algo.baselines.turn_gae` over each trajectory's
    response tokens (the reward on each turn's last token, the environment's tokens
    between turns skipped), with ``algo.gamma`` and ``algo.lam`` (defaults
    :data:`~training.local.config.PPO_DEFAULTS`); advantages are then whitened over all
    response tokens of the batch, as PPO does.
    """
    from gigpo_algo.baselines import turn_gae
    from training.local.config import PPO_DEFAULTS

    n = len(records)
    old_values = record_values(
        critic, records, pad_id, batch_size=algo.minibatch_size, share_prefix=share_prefix
    )
    valid = np.asarray(records.is_action_valid, dtype=bool)
    rewards = np.asarray(records.rewards, dtype=np.float64) - algo.invalid_penalty * ~valid
    gamma = PPO_DEFAULTS["gamma"] if algo.gamma is None else algo.gamma
    lam = PPO_DEFAULTS["lam"] if algo.lam is None else algo.lam
    raw, returns = turn_gae(rewards, old_values, records.traj_ids, gamma=gamma, lam=lam)
    flat_adv = np.concatenate(raw) if n else np.zeros(0)
    mean, std = (flat_adv.mean(), flat_adv.std()) if len(flat_adv) else (0.0, 0.0)
    advantages = [(a - mean) / (std + 1e-8) for a in raw]
    flat_ret = np.concatenate(returns) if n else np.zeros(0)
    flat_val = np.concatenate(old_values) if n else np.zeros(0)
    var_ret = float(flat_ret.var()) if len(flat_ret) else 0.0
    explained = 1.0 - float((flat_ret - flat_val).var()) / var_ret if var_ret > 0 else 0.0
    result = GiGPOResult(
        advantages=np.array([a.mean() for a in advantages]),
        episode_advantages=np.zeros(n),
        step_advantages=np.zeros(n),
        returns=np.array([r[0] for r in returns]),
        step_group_ids=np.arange(n, dtype=np.int64),
    )
    stats = {
        "value_mean": float(flat_val.mean()) if len(flat_val) else 0.0,
        "return_mean": float(flat_ret.mean()) if len(flat_ret) else 0.0,
        "explained_variance": explained,
    }
    return PPOTargets(old_values, advantages, returns, result, stats)


def critic_step(
    critic: Any, optimizer: Any, batch: TokenBatch, algo: AlgoConfig, max_grad_norm: float
) -> dict[str, float]:
    """One optimizer step of the critic on the clipped value loss of one minibatch
    (token mean over the response tokens).

    Returns:
        ``value_loss`` (squared reward units), ``value_clip_frac`` (share of tokens whose
        value moved further than ``value_clip`` from its rollout-time value) and
        ``critic_grad_norm``.
    """
    import torch

    from training.local.config import PPO_DEFAULTS
    from training.local.critic import token_values

    clip = PPO_DEFAULTS["value_clip"] if algo.value_clip is None else algo.value_clip
    mask = batch.response_mask
    old, returns = batch.targets["old_values"], batch.targets["returns"]
    critic.train()
    values = token_values(critic, batch)
    loss = aggregate_loss(value_loss(values, old, returns, value_clip=clip), mask)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    trainable = [p for p in critic.parameters() if p.requires_grad]
    grad_norm = torch.nn.utils.clip_grad_norm_(trainable, max_grad_norm)
    optimizer.step()
    critic.eval()
    with torch.no_grad():
        moved = ((values - old).abs() > clip).float()
    return {
        "value_loss": float(loss.detach()),
        "value_clip_frac": float(aggregate_loss(moved, mask)),
        "critic_grad_norm": float(grad_norm),
    }
