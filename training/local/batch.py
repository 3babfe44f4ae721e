"""Step records as token tensors, and the policy's log-probabilities of their responses.

:func:`make_batch` pads some records' prompt + response into right-padded tensors
(:class:`TokenBatch`); :func:`token_log_probs` runs a causal LM over them once, skipping the
vocabulary projection of prompt positions and running a shared prompt start once
(:mod:`training.local.prefix`). The policy update (:mod:`training.local.policy`) and PPO's
critic (:mod:`training.local.critic`) both read this layout.

An optimizer step's minibatch runs as micro-batches of at most ``algo.micro_batch_tokens``
padded tokens (:func:`micro_batches`), its gradients accumulated; every loss is divided by
the whole minibatch's normaliser (:func:`minibatch_denominators`), so that the step is the
whole minibatch's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
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


def micro_batches(records: StepRecords, rows: np.ndarray, token_budget: int) -> list[np.ndarray]:
    """``rows`` (record indices) cut into micro-batches of at most ``token_budget`` padded
    tokens each (rows x the longest prompt + response among them); 0: one micro-batch.

    Rows are taken longest first, so that rows of like length share a micro-batch and little
    of the budget is padding; a row longer than the budget goes alone. The cut depends on
    the rows alone: the same minibatch always gives the same micro-batches.
    """
    rows = np.asarray(rows)
    if token_budget <= 0 or len(rows) == 0:
        return [rows]
    lengths = np.array([len(records.prompt_ids[i]) + len(records.response_ids[i]) for i in rows])
    order = np.argsort(-lengths, kind="stable")
    parts: list[np.ndarray] = []
    start = 0
    while start < len(order):
        longest = lengths[order[start]]  # the first row of a part is its longest
        take = max(1, min(len(order) - start, token_budget // max(int(longest), 1)))
        parts.append(rows[order[start : start + take]])
        start += take
    return parts


@dataclass(frozen=True)
class Denominators:
    """The normalisers of a whole minibatch (:func:`gigpo_algo.losses.loss_denominator`):
    ``loss`` for ``algo.loss_agg``, ``tokens`` (its response tokens) for the token means
    (KL, entropy, clip fraction, the critic's value loss)."""

    loss: float
    tokens: float


def minibatch_denominators(records: StepRecords, rows: np.ndarray, loss_agg: str) -> Denominators:
    """The :class:`Denominators` of the minibatch ``rows``, as one padded batch of them
    would have them (without building it: a mask of the rows' response lengths)."""
    from gigpo_algo.losses import loss_denominator

    rows = np.asarray(rows)
    width = max(len(records.prompt_ids[i]) + len(records.response_ids[i]) for i in rows)
    mask = np.zeros((len(rows), width - 1))
    for b, i in enumerate(rows):
        mask[b, : len(records.response_ids[i])] = 1.0
    return Denominators(loss=loss_denominator(mask, mode=loss_agg), tokens=loss_denominator(mask))


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
    """log pi(token t+1 | tokens <= t), shape (B, L - 1), at the response tokens
    (``batch.response_mask``); 0 elsewhere.

    The vocabulary is projected at the response positions only: the model's output head
    receives their hidden states alone (:func:`response_positions_only`), so the logits are
    (response tokens, V), whatever the prompts' lengths; only positions from
    ``first_column`` on run through the head at all where the model takes
    ``logits_to_keep``. A shared prefix (``batch.prefix_length``) runs once.
    ``with_entropy``: also return the entropy (nats) of pi(. | tokens <= t), same layout;
    ``entropy_grad=False`` computes it without a gradient, from the same log-softmax (the
    update logs the entropy but trains on it only with an entropy bonus).
    """
    import torch

    rows, width = batch.input_ids.shape
    first, prefix = batch.first_column, batch.prefix_length
    kwargs: dict[str, Any] = {"attention_mask": batch.attention_mask}
    # The head sees positions start .. width - 2 - prefix of the ids run (after the prefix):
    # first .. width - 2 where the model keeps some logits, else all of them.
    start = first - prefix if "logits_to_keep" in forward_params(type(model)) else 0
    if start:
        kwargs["logits_to_keep"] = torch.arange(
            start, width - 1 - prefix, device=batch.input_ids.device
        )
    if prefix:
        kwargs[cache_kwarg(model)] = prefix_cache(
            model, batch.input_ids[0, :prefix].tolist(), batch.input_ids.shape[0]
        )
        kwargs["use_cache"] = True
    row, column = torch.nonzero(batch.response_mask, as_tuple=True)  # column t: token t + 1
    seen = width - 1 - prefix - start if start else width - prefix  # head positions a row
    kept = row * seen + (column - prefix - start)
    with response_positions_only(model, kept):
        logits = model(input_ids=batch.input_ids[:, prefix:], **kwargs).logits
    if tuple(logits.shape[:2]) != (1, len(kept)):
        raise ValueError(
            f"{type(model).__name__}'s forward did not project through its output head "
            "(get_output_embeddings()), so its response positions could not be chosen; "
            f"expected logits of shape (1, {len(kept)}, V), got {tuple(logits.shape)}"
        )
    logits = logits[0]  # (K, V)
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    log_p = torch.log_softmax(logits, dim=-1)
    targets = batch.input_ids[row, column + 1]
    chosen = _laid_out(log_p.gather(-1, targets[:, None]).squeeze(-1), row, column, rows, width)
    if not with_entropy:
        return chosen
    if entropy_grad:
        entropy = entropy_from_logits(logits[None])[0]  # it reads (B, T, V)
    else:
        with torch.no_grad():  # the model's logits are finite: no 0 * log 0 to guard
            entropy = -torch.linalg.vecdot(log_p.exp(), log_p)
    return chosen, _laid_out(entropy, row, column, rows, width)


def _laid_out(values: Any, row: Any, column: Any, rows: int, width: int) -> Any:
    """(K,) values of the response positions (``row``, ``column``) in a (rows, width - 1)
    float32 tensor of zeros (differentiable in ``values``)."""
    import torch

    out = torch.zeros((rows, width - 1), dtype=torch.float32, device=values.device)
    return out.index_put((row, column), values.float())


@contextlib.contextmanager
def response_positions_only(model: Any, kept: Any) -> Iterator[None]:
    """While open, ``model``'s output head projects only the hidden states at the flat
    indices ``kept`` (K,) of its input's (B x positions) rows and returns (1, K, V) logits.

    A forward pre-hook on the head (``get_output_embeddings()``) selects them, so it holds
    for any causal LM whose forward ends in its head (whatever else prepared that head,
    :func:`training.local.precision.prepare_heads`); the hook is removed on exit. The
    selection is differentiable: the gradient reaches the selected hidden states only.
    """
    head = model.get_output_embeddings()

    def select(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        hidden = args[0]
        flat = hidden.reshape(-1, hidden.shape[-1]).index_select(0, kept)
        return (flat.unsqueeze(0), *args[1:])

    handle = head.register_forward_pre_hook(select)
    try:
        yield
    finally:
        handle.remove()
