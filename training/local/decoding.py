"""Batched sampling with a causal LM, and each sampled token's log-probability, in bounded memory.

:func:`generate` runs transformers' ``model.generate`` on one left-padded batch. The log-prob
of each sampled token is taken as decoding goes (:class:`ChosenLogProbs`, a logits processor
that sees each step's raw float32 logits): at most one step's ``(rows, vocabulary)`` scores are
held at a time, never every step's (``output_logits=True`` kept ``rows x new tokens x
vocabulary`` floats: 37 GiB more than a bare ``generate`` at 128 x 512 new tokens of
Qwen2.5's 151,936-token vocabulary).

The sampler draws from ``softmax(logits / temperature)`` cut by top-p / top-k and nothing
else: a model's own ``generation_config.json`` (Qwen2.5-Instruct ships a repetition penalty
of 1.1, top-k 20 and top-p 0.8) is set aside for the call (:func:`plain_generation_config`),
so that the policy samples what it trains on.

``cache="static"`` decodes into a preallocated key/value cache of a fixed shape (``rows`` x
``cache_length``) that transformers compiles its decoding step for on an accelerator on first
use; every call of that shape reuses it, so it compiles once a shape (docs/notes/training.md, "The
static cache").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["CACHES", "ChosenLogProbs", "eos_ids", "generate", "stop_length"]

#: The settings of ``rollout.cache``.
CACHES = ("dynamic", "static")


def generate(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float = 1.0,
    top_k: int = 0,
    stop_text: str = "",
    share_prefix: bool = False,
    cache: str = "dynamic",
    rows: int | None = None,
    cache_length: int | None = None,
) -> tuple[list[list[int]], list[list[float]]]:
    """Samples one response per prompt in one left-padded batch.

    Args:
        prompts: B token id lists.
        temperature: 0 for greedy decoding.
        stop_text: when not empty, a response also ends with the token that completes this
            text (e.g. ``"</action>"``).
        share_prefix: run the prompt start that all prompts share once and generate on top
            of its repeated cache (:mod:`training.local.prefix`); same distribution, less
            compute. Not with ``cache="static"``, whose cache is preallocated.
        cache: ``dynamic`` (transformers' default, grown as decoding goes) or ``static``
            (preallocated, ``rows`` x ``cache_length`` tokens, kept on the model and reused
            by later calls of the same shape).
        rows: ``static`` only: the batch is padded to this many rows (copies of the first
            prompt, whose responses are dropped), so that every call has one shape. >= B.
        cache_length: ``static`` only: the cache's length in tokens, at least the longest
            prompt + ``max_new_tokens``.

    Returns:
        ``(response_ids, log_probs)``: per prompt, the generated ids up to and including the
        first end-of-sequence token (or the end of ``stop_text``), and the log-prob of each
        under ``logits / temperature`` (raw logits, before top-p/top-k; greedy decoding uses
        temperature 1). Padding after a finished response is never part of it.
    """
    import torch

    from training.local.prefix import cache_kwarg, prefix_cache, shared_prefix_length

    if cache not in CACHES:
        raise ValueError(f"rollout.cache must be one of {CACHES}, got {cache!r}")
    static = cache == "static"
    count = len(prompts)
    if static:
        rows = count if rows is None else rows
        if rows < count:
            raise ValueError(f"rows={rows} is fewer than the {count} prompts")
        longest = max(len(p) for p in prompts)
        if cache_length is None or cache_length < longest + max_new_tokens:
            raise ValueError(
                f"cache_length={cache_length} cannot hold a prompt of {longest} tokens and "
                f"{max_new_tokens} new ones (rollout.max_prompt_tokens + rollout.max_new_tokens)"
            )
        prompts = list(prompts) + [prompts[0]] * (rows - count)  # dropped after
        share_prefix = False
    eos = eos_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    # [shared prefix | left padding | rest of the prompt]; the padding is masked out.
    prefix = shared_prefix_length(prompts) if share_prefix else 0
    width = prefix + max(len(p) - prefix for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    if prefix:
        input_ids[:, :prefix] = torch.tensor(prompts[0][:prefix], dtype=torch.long)
        attention[:, :prefix] = 1
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids) + prefix :] = torch.tensor(ids[prefix:], dtype=torch.long)
        attention[row, width - len(ids) + prefix :] = 1
    sample = temperature > 0
    scale = temperature if sample else 1.0
    recorder = ChosenLogProbs(scale)
    kwargs: dict[str, Any] = {"do_sample": sample}
    if prefix:
        with torch.no_grad():
            kwargs[cache_kwarg(model)] = prefix_cache(model, prompts[0][:prefix], len(prompts))
    if static:
        kwargs[cache_kwarg(model)] = static_cache(model, rows, cache_length)
    if sample:
        kwargs.update(temperature=temperature, top_p=top_p, top_k=top_k)
    if stop_text:
        kwargs.update(stop_strings=[stop_text], tokenizer=tokenizer)
    if len(prompts) > count:  # the padding rows end at once: they never prolong a turn
        kwargs["stopping_criteria"] = [RowsDone(count)]
    with torch.no_grad(), plain_generation_config(model):
        sequences = model.generate(
            input_ids=input_ids.to(model.device),
            attention_mask=attention.to(model.device),
            max_new_tokens=max_new_tokens,
            eos_token_id=eos,
            pad_token_id=pad_id,
            logits_processor=[recorder],
            **kwargs,
        )
    new_tokens = sequences[:count, width:]
    chosen = recorder.finish(sequences[:, width:])[:count].cpu()
    new_tokens = new_tokens.cpu()
    responses, response_log_probs = [], []
    eos_tensor = torch.tensor(eos)
    for row in range(count):
        ids = new_tokens[row]
        hits = torch.nonzero(torch.isin(ids, eos_tensor)).flatten()
        length = int(hits[0]) + 1 if len(hits) else len(ids)
        if stop_text:
            length = min(length, stop_length(tokenizer, ids[:length].tolist(), stop_text))
        responses.append(ids[:length].tolist())
        response_log_probs.append(chosen[row, :length].tolist())
    return responses, response_log_probs


class ChosenLogProbs:
    """A logits processor that records ``log softmax(logits / scale)`` of each sampled token.

    transformers calls its logits processors with the ids so far and the next token's raw
    float32 logits, shape (B, V), before its own temperature and top-p / top-k warpers
    (there is no other processor: :func:`plain_generation_config`). The token sampled from
    step t's logits is the last column of the ids at step t + 1, so each call takes the
    previous step's log-softmax row at that token and keeps only the current step's
    log-softmax: memory (B, V), whatever the number of steps. :meth:`finish` takes the last
    step's from the final sequences. The scores pass through unchanged.
    """

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.chosen: list[Any] = []
        self.pending: Any = None

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if self.pending is not None:
            self.chosen.append(self.pending.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self.pending = torch.log_softmax(scores / self.scale, dim=-1)
        return scores

    def finish(self, new_tokens: Any) -> Any:
        """The log-probs of ``new_tokens`` (B, n): the generated columns of the sequences
        ``generate`` returned (a deferred stop may have dropped steps already recorded)."""
        import torch

        steps = new_tokens.shape[1]
        if self.pending is not None and len(self.chosen) < steps:
            last = new_tokens[:, len(self.chosen) : len(self.chosen) + 1]
            self.chosen.append(self.pending.gather(-1, last).squeeze(-1))
        self.pending = None
        if not self.chosen:
            return torch.zeros(new_tokens.shape, dtype=torch.float32, device=new_tokens.device)
        return torch.stack(self.chosen[:steps], dim=1)


class RowsDone:
    """A stopping criterion: rows ``count`` and after are done from the first step (the
    static cache's padding rows; transformers pads a done row and stops when all are)."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        return torch.arange(input_ids.shape[0], device=input_ids.device) >= self.count


@contextlib.contextmanager
def plain_generation_config(model: Any) -> Iterator[None]:
    """While open, ``model.generation_config`` holds only the model's special token ids:
    ``generate`` fills every setting a call leaves unset from it, so a shipped repetition
    penalty, top-k, top-p, min-p, banned words, ... would otherwise reshape the sampling."""
    from transformers import GenerationConfig

    own = model.generation_config
    ids = ("bos_token_id", "eos_token_id", "pad_token_id")
    model.generation_config = GenerationConfig(**{name: getattr(own, name, None) for name in ids})
    try:
        yield
    finally:
        model.generation_config = own


def static_cache(model: Any, rows: int, length: int) -> Any:
    """The model's static key/value cache for ``rows`` x ``length`` tokens, emptied: made on
    first use of that shape and kept on the model (``model.gigpo_static_caches``, one per
    shape: the training envs', held-out evaluation's), so that every call of a shape reuses
    one cache and one compiled decoding step."""
    from transformers import StaticCache

    held = model.__dict__.setdefault("gigpo_static_caches", {})
    cache = held.get((rows, length))
    if cache is None:
        cache = held[rows, length] = StaticCache(config=model.config, max_cache_len=length)
    else:
        cache.reset()
    return cache


def stop_length(tokenizer: Any, ids: list[int], stop_text: str) -> int:
    """Tokens up to the one that completes ``stop_text`` (all of them if none does)."""
    if stop_text not in tokenizer.decode(ids, skip_special_tokens=False):
        return len(ids)
    for k in range(1, len(ids) + 1):
        if stop_text in tokenizer.decode(ids[:k], skip_special_tokens=False):
            return k
    return len(ids)


def eos_ids(model: Any, tokenizer: Any) -> list[int]:
    """The end-of-sequence ids of the model's generation config and of the tokenizer."""
    ids = model.generation_config.eos_token_id
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    if not ids:
        raise ValueError("the tokenizer and the model define no end-of-sequence token")
    return ids
