"""PPO's critic for the local trainer (``algo.estimator: ppo``): a separate value model.

The critic is the policy's decoder body (loaded from the same model directory, so it starts
from the same weights) with a linear value head instead of the vocabulary projection:
``V(text up to a token)`` for every position. It has its own optimizer and is trained
beside the policy, minibatch for minibatch, on the clipped value loss
(:func:`gigpo_algo.losses.value_loss`) against GAE's returns (:func:`gigpo_algo.baselines.
turn_gae`). Why separate rather than a head on the policy: docs/notes/training.md, "PPO with a
critic".

:func:`training.local.model.load_critic` builds it with the run's other models;
:func:`ppo_targets` computes, once an iteration, the values, GAE advantages and returns the
update reads (:class:`PPOTargets`); :func:`critic_step` is one optimizer step of the critic.

Per-token layout is :class:`training.local.batch.TokenBatch`'s: column t of a (B, L - 1)
tensor is about token t + 1, so the value in column t is V(tokens <= t), the state in which
token t + 1 was generated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gigpo_algo.losses import aggregate_loss, loss_denominator, value_loss
from training.advantages import Advantages
from training.local.batch import TokenBatch, make_batch, micro_batches
from training.local.metrics import read_stats
from training.local.precision import compute
from training.local.prefix import cache_kwarg, prefix_cache
from training.local.schema import AlgoConfig
from training.records import StepRecords
from training.settings import PPO_DEFAULTS


def token_values(critic: Any, batch: Any) -> Any:
    """The critic's values in the per-token layout of ``batch`` (a ``TokenBatch``).

    Returns:
        float32, shape (B, L - 1): column t holds V(tokens <= t); 0 in the columns before
        ``batch.first_column`` (prompt tokens only), which are not run through the head.
        A shared prefix (``batch.prefix_length``) runs once, as for the policy.
    """
    import torch

    body = critic.model
    first, prefix = batch.first_column, batch.prefix_length
    kwargs: dict[str, Any] = {"attention_mask": batch.attention_mask}
    ids = batch.input_ids
    if prefix:
        kwargs[cache_kwarg(body)] = prefix_cache(body, ids[0, :prefix].tolist(), ids.shape[0])
        kwargs["use_cache"] = True
        ids = ids[:, prefix:]
    hidden = body(input_ids=ids, **kwargs).last_hidden_state  # (B, L - prefix, H)
    # The prefix leaves the last prompt token of every row to run (first >= prefix).
    values = critic.value_head(hidden[:, first - prefix : -1].float()).squeeze(-1)
    return torch.nn.functional.pad(values, (first, 0))


@dataclass
class PPOTargets:
    """What PPO's update needs per record, computed once per iteration by :func:`ppo_targets`.

    ``old_values``, ``advantages`` (whitened over the batch's response tokens) and
    ``returns``: one float64 array per record, shape (its response length,).
    ``summary``: the per-record :class:`~training.advantages.Advantages` the trainer logs
    and saves like the other estimators' (``advantages``: the record's mean token
    advantage; ``returns``: the return at its first token; no episode or step term: zeros).
    """

    old_values: list[np.ndarray]
    advantages: list[np.ndarray]
    returns: list[np.ndarray]
    summary: Advantages
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
    token_budget: int = 0,
    share_prefix: bool = False,
) -> list[np.ndarray]:
    """The critic's value at every response token of every record (no gradient), run
    ``batch_size`` records at a time, each such batch cut into micro-batches of at most
    ``token_budget`` padded tokens (:func:`~training.local.batch.micro_batches`; 0: none).

    Returns:
        One float64 array per record, shape (its response length,): the value of the text
        before each response token.
    """
    import torch

    out: list[np.ndarray] = [np.zeros(0)] * len(records)
    zeros = np.zeros(len(records))
    with torch.no_grad():
        for start in range(0, len(records), batch_size):
            chunk = np.arange(start, min(start + batch_size, len(records)))
            for rows in micro_batches(records, chunk, token_budget):
                batch = make_batch(
                    records, rows, zeros, pad_id, critic.device, share_prefix=share_prefix
                )
                values = token_values(critic, batch).cpu().double().numpy()
                for b, i in enumerate(rows):
                    p, r = len(records.prompt_ids[i]), len(records.response_ids[i])
                    out[i] = values[b, p - 1 : p - 1 + r].copy()
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
    between turns skipped), with ``algo.gae_gamma`` and ``algo.lam`` (defaults
    :data:`~training.settings.PPO_DEFAULTS`); advantages are then whitened over all
    response tokens of the batch, as PPO does.
    """
    from gigpo_algo.baselines import turn_gae

    n = len(records)
    old_values = record_values(
        critic,
        records,
        pad_id,
        batch_size=algo.minibatch_size,
        token_budget=algo.micro_batch_tokens,
        share_prefix=share_prefix,
    )
    valid = np.asarray(records.is_action_valid, dtype=bool)
    rewards = np.asarray(records.rewards, dtype=np.float64) - algo.invalid_penalty * ~valid
    gamma = PPO_DEFAULTS["gae_gamma"] if algo.gae_gamma is None else algo.gae_gamma
    lam = PPO_DEFAULTS["lam"] if algo.lam is None else algo.lam
    raw, returns = turn_gae(rewards, old_values, records.traj_ids, gamma=gamma, lam=lam)
    flat_adv = np.concatenate(raw) if n else np.zeros(0)
    mean, std = (flat_adv.mean(), flat_adv.std()) if len(flat_adv) else (0.0, 0.0)
    advantages = [(a - mean) / (std + 1e-8) for a in raw]
    flat_ret = np.concatenate(returns) if n else np.zeros(0)
    flat_val = np.concatenate(old_values) if n else np.zeros(0)
    var_ret = float(flat_ret.var()) if len(flat_ret) else 0.0
    explained = 1.0 - float((flat_ret - flat_val).var()) / var_ret if var_ret > 0 else 0.0
    summary = Advantages(
        advantages=np.array([a.mean() for a in advantages]),
        episode_advantages=np.zeros(n),
        step_advantages=np.zeros(n),
        returns=np.array([r[0] for r in returns]),
    )
    stats = {
        "value_mean": float(flat_val.mean()) if len(flat_val) else 0.0,
        "return_mean": float(flat_ret.mean()) if len(flat_ret) else 0.0,
        "explained_variance": explained,
    }
    return PPOTargets(old_values, advantages, returns, summary, stats)


def critic_step(
    critic: Any,
    optimizer: Any,
    batches: list[TokenBatch],
    algo: AlgoConfig,
    max_grad_norm: float,
    compute_dtype: str = "float32",
    tokens: float | None = None,
) -> dict[str, float]:
    """One optimizer step of the critic on the clipped value loss of one minibatch (token
    mean over its response tokens), run as its micro-batches ``batches`` with the gradients
    accumulated; each forward pass in ``compute_dtype``
    (:func:`training.local.precision.compute`).

    Args:
        tokens: the minibatch's response tokens, each micro-batch's loss's denominator
            (default: the micro-batches' own count, the same number).

    Returns:
        ``value_loss`` (squared reward units), ``value_clip_frac`` (share of tokens whose
        value moved further than ``value_clip`` from its rollout-time value) and
        ``critic_grad_norm``.
    """
    import torch

    clip = PPO_DEFAULTS["value_clip"] if algo.value_clip is None else algo.value_clip
    if tokens is None:
        tokens = sum(loss_denominator(batch.response_mask) for batch in batches)
    optimizer.zero_grad(set_to_none=True)
    critic.train()
    total = moved_share = 0.0
    for batch in batches:
        mask = batch.response_mask
        old, returns = batch.targets["old_values"], batch.targets["returns"]
        with compute(compute_dtype, critic.device.type):
            values = token_values(critic, batch)
            per_token = value_loss(values, old, returns, value_clip=clip)
            loss = aggregate_loss(per_token, mask, denominator=tokens)
        loss.backward()
        total = total + loss.detach()  # summed on the device, read once below
        with torch.no_grad():
            moved = ((values - old).abs() > clip).float()
        moved_share = moved_share + aggregate_loss(moved, mask, denominator=tokens)
    trainable = [p for p in critic.parameters() if p.requires_grad]
    grad_norm = torch.nn.utils.clip_grad_norm_(trainable, max_grad_norm)
    optimizer.step()
    critic.eval()
    return read_stats(
        {"value_loss": total, "value_clip_frac": moved_share, "critic_grad_norm": grad_norm}
    )
