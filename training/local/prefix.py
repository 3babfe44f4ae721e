"""Shared-prefix computation: the prompt text every row of a batch shares is run once.

The prompts of one turn share a long start (system prompt, task text, format rules); only
the observation at the end differs. Running that start once (batch 1), repeating its
key/value cache over the batch and running only each row's own tokens on top gives the same
logits (and, with autograd on, the same gradients: the repeat sums the rows' gradients into
the one prefix) at a fraction of the cost. On NumberLine with SmolLM2 the shared start is
~100 of ~125 prompt tokens.

Layout of a batch that uses a prefix of ``P`` tokens: ``[prefix | row's own tokens]`` with
the row tokens padded on the left for generation (``[prefix | pads | suffix]``, pads masked
out and skipped by the position ids generation derives from the attention mask) and on the
right for the update.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from typing import Any

MIN_SHARED = 8
"""A prefix shorter than this many tokens is not worth a separate forward pass."""


def common_prefix_length(seqs: Sequence[Sequence[int]], keep: int = 1) -> int:
    """Tokens at the start of every sequence that are the same in all of them.

    Args:
        seqs: token id sequences.
        keep: leave at least this many tokens of every sequence after the prefix (the
            model needs the last prompt token of each row to predict its first response
            token).

    Returns:
        ``P`` with ``0 <= P <= min(len) - keep``; 0 for fewer than two sequences.
    """
    if len(seqs) < 2:
        return 0
    limit = max(min(len(s) for s in seqs) - keep, 0)
    first = seqs[0]
    for pos in range(limit):
        token = first[pos]
        if any(s[pos] != token for s in seqs[1:]):
            return pos
    return limit


def shared_prefix_length(seqs: Sequence[Sequence[int]], keep: int = 1) -> int:
    """:func:`common_prefix_length` when at least :data:`MIN_SHARED` tokens, else 0."""
    length = common_prefix_length(seqs, keep)
    return length if length >= MIN_SHARED else 0


def prefix_cache(model: Any, prefix_ids: Sequence[int], batch_size: int) -> Any:
    """Runs ``prefix_ids`` once and returns its key/value cache repeated ``batch_size`` times.

    Gradients flow through the cache when autograd is on (the repeat is differentiable), so
    the cache also serves a training forward pass.

    Args:
        prefix_ids: P token ids.

    Returns:
        The model's cache object (e.g. ``DynamicCache``) holding (batch_size, ..., P, ...)
        keys and values.
    """
    import torch

    ids = torch.tensor([list(prefix_ids)], dtype=torch.long, device=model.device)
    kwargs: dict[str, Any] = {"attention_mask": torch.ones_like(ids), "use_cache": True}
    if "logits_to_keep" in forward_params(type(model)):
        kwargs["logits_to_keep"] = 1  # only the cache is used: skip the prefix's logits
    out = model(input_ids=ids, **kwargs)
    cache = getattr(out, "cache", None) or out.past_key_values
    if not hasattr(cache, "batch_repeat_interleave"):
        raise ValueError(
            f"{type(model).__name__} returns a cache without batch_repeat_interleave; "
            "set model.share_prefix: false"
        )
    cache.batch_repeat_interleave(batch_size)
    return cache


@functools.cache
def forward_params(model_type: type) -> frozenset[str]:
    """The argument names of ``model_type.forward``."""
    return frozenset(inspect.signature(model_type.forward).parameters)


def cache_kwarg(model: Any) -> str:
    """The name under which ``model`` (and its ``generate``) takes a key/value cache:
    ``cache`` from transformers 5.2x on, ``past_key_values`` before."""
    return "cache" if "cache" in forward_params(type(model)) else "past_key_values"
