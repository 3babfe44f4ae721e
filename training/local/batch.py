"""Step records as token tensors, and the policy's log-probabilities of their responses.

:func:`make_batch` pads some records' prompt + response into right-padded tensors
(:class:`TokenBatch`); :func:`token_log_probs` runs a causal LM over them once, skipping the
vocabulary projection of prompt positions and running a shared prompt start once
(:mod:`training.local.prefix`). The policy update (:mod:`training.local.policy`) and PPO's
critic (:mod:`training.local.critic`) both read this layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gigpo_algo.losses import entropy_from_logits
from training.local.prefix import cache_kwarg, forward_params, prefix_cache, shared_prefix_length
from training.records import StepRecords


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
    ``advantages``, ``returns`` and ``old_values`` (see
    :class:`training.local.critic.PPOTargets`)."""


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
    model: Any,
    batch: TokenBatch,
    temperature: float = 1.0,
    *,
    with_entropy: bool = False,
    entropy_grad: bool = True,
) -> Any:
    """log pi(token t+1 | tokens <= t), shape (B, L - 1); 0 in the columns before
    ``batch.first_column``, which hold prompt tokens only.

    Logits are computed only from ``first_column`` on (the vocabulary projection of the
    prompt positions is skipped), and a shared prefix (``batch.prefix_length``) runs once.
    ``with_entropy``: also return the entropy (nats) of pi(. | tokens <= t), same layout;
    ``entropy_grad=False`` computes it without a gradient, from the same log-softmax (the
    update logs the entropy but trains on it only with an entropy bonus).
    """
    import torch

    width = batch.input_ids.shape[1]
    first, prefix = batch.first_column, batch.prefix_length
    kwargs: dict[str, Any] = {"attention_mask": batch.attention_mask}
    # Positions first .. width - 2 predict the tokens after them (counted from the prefix's
    # end when it runs apart); only their logits are projected.
    positions = torch.arange(first - prefix, width - 1 - prefix, device=batch.input_ids.device)
    projects_some = "logits_to_keep" in forward_params(type(model))
    if projects_some:
        kwargs["logits_to_keep"] = positions
    if prefix:
        kwargs[cache_kwarg(model)] = prefix_cache(
            model, batch.input_ids[0, :prefix].tolist(), batch.input_ids.shape[0]
        )
        kwargs["use_cache"] = True
    logits = model(input_ids=batch.input_ids[:, prefix:], **kwargs).logits
    if not projects_some:
        logits = logits[:, positions]
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    targets = batch.input_ids[:, first + 1 :, None]
    log_p = torch.log_softmax(logits, dim=-1)
    chosen = torch.nn.functional.pad(log_p.gather(-1, targets).squeeze(-1), (first, 0))
    if not with_entropy:
        return chosen
    if entropy_grad:
        entropy = entropy_from_logits(logits)
    else:
        with torch.no_grad():  # the model's logits are finite: no 0 * log 0 to guard
            entropy = -torch.linalg.vecdot(log_p.exp(), log_p)
    return chosen, torch.nn.functional.pad(entropy, (first, 0))
