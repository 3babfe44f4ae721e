"""Group rollouts with a causal LM: batched generation for all live envs, env steps, step records.

One iteration plays one episode in every sub-environment of a
:func:`gigpo_envs.make_group_vec` vector env. Each turn, the prompts of all live envs are
generated for in one batch; each model call becomes one step record (docs/design.md, contract 2).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from gigpo_envs import history_prompt
from training.local.prefix import cache_kwarg, prefix_cache, shared_prefix_length
from training.records import StepRecords

__all__ = ["Rollout", "collect", "generate", "make_envs"]


@dataclass
class Rollout:
    """The records of one iteration and the outcome of each episode (shape (num_envs,))."""

    records: StepRecords
    episode_returns: np.ndarray
    episode_won: np.ndarray
    episode_lengths: np.ndarray
    generation_seconds: float = 0.0
    env_seconds: float = 0.0
    generated_tokens: int = 0


def make_envs(
    env_id: str,
    num_groups: int,
    group_size: int,
    history_length: int,
    format_instruction: str | None,
    env_kwargs: dict[str, Any],
    template: dict[str, Any] | None = None,
) -> Any:
    """The training (or evaluation) vector env with prompts as observations."""
    from gigpo_envs import make_group_vec

    wrapper = functools.partial(
        history_prompt,
        history_length=history_length,
        format_instruction=format_instruction,
        template=template,
    )
    return make_group_vec(
        env_id, num_groups, group_size, seed=0, wrappers=[wrapper], **dict(env_kwargs)
    )


def render_prompts(
    tokenizer: Any, messages: list[list[dict[str, str]]], response_prefix: str = ""
) -> list[list[int]]:
    """Chat-formats each message list (with the generation prompt) into token ids.

    ``response_prefix`` is written at the start of the assistant's turn (a prefill, e.g.
    ``"<action>"``); the model continues from it and it is part of the prompt.
    """
    texts = [
        tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True)
        + response_prefix
        for m in messages
    ]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


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
) -> tuple[list[list[int]], list[list[float]]]:
    """Samples one response per prompt in one left-padded batch.

    Args:
        prompts: B token id lists.
        temperature: 0 for greedy decoding.
        stop_text: when not empty, a response also ends with the token that completes this
            text (e.g. ``"</action>"``).
        share_prefix: run the prompt start that all prompts share once and generate on top
            of its repeated cache (:mod:`training.local.prefix`); same distribution, less
            compute.

    Returns:
        ``(response_ids, log_probs)``: per prompt, the generated ids up to and including the
        first end-of-sequence token (or the end of ``stop_text``), and the log-prob of each
        under ``logits / temperature`` (raw logits, before top-p/top-k; greedy decoding uses
        temperature 1). Padding after a finished response is never part of it.
    """
    import torch

    eos_ids = _eos_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
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
    kwargs: dict[str, Any] = {"do_sample": sample}
    if prefix:
        with torch.no_grad():
            kwargs[cache_kwarg(model)] = prefix_cache(model, prompts[0][:prefix], len(prompts))
    if sample:
        kwargs.update(temperature=temperature, top_p=top_p, top_k=top_k)
    if stop_text:
        kwargs.update(stop_strings=[stop_text], tokenizer=tokenizer)
    with torch.no_grad():
        out = model.generate(
            input_ids=input_ids.to(model.device),
            attention_mask=attention.to(model.device),
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_ids,
            pad_token_id=pad_id,
            return_dict_in_generate=True,
            output_logits=True,
            **kwargs,
        )
    new_tokens = out.sequences[:, width:]
    logits = torch.stack(out.logits, dim=1).float()  # (B, steps, V)
    scale = temperature if sample else 1.0
    log_probs = torch.log_softmax(logits / scale, dim=-1)
    chosen = log_probs.gather(-1, new_tokens[:, : logits.shape[1], None]).squeeze(-1).cpu()
    new_tokens = new_tokens.cpu()
    responses, response_log_probs = [], []
    eos = torch.tensor(eos_ids)
    for row in range(len(prompts)):
        ids = new_tokens[row]
        hits = torch.nonzero(torch.isin(ids, eos)).flatten()
        length = int(hits[0]) + 1 if len(hits) else len(ids)
        if stop_text:
            length = min(length, _stop_length(tokenizer, ids[:length].tolist(), stop_text))
        responses.append(ids[:length].tolist())
        response_log_probs.append(chosen[row, :length].tolist())
    return responses, response_log_probs


def collect(
    model: Any,
    tokenizer: Any,
    envs: Any,
    *,
    seed: int | list[int],
    max_new_tokens: int,
    temperature: float,
    top_p: float = 1.0,
    top_k: int = 0,
    response_prefix: str = "",
    stop_text: str = "",
    share_prefix: bool = False,
) -> Rollout:
    """Plays one episode in every sub-environment; returns the step records.

    Envs whose episode has ended sit out the remaining turns (their autoreset step is fed
    an empty action and discarded). Every episode ends by itself: a gigpo env truncates at
    its own ``max_steps``, the one step limit (read from the sub-envs here).

    Args:
        envs: a :class:`gigpo_envs.GroupVectorEnv` whose sub-envs are wrapped in
            :class:`HistoryPrompt` (``info["messages"]``).
        seed: reset seed; group ``g`` starts from ``seed + g`` (an int) or ``seed[g]`` (a
            list of one seed per group).
        response_prefix: prefilled start of every response (see :func:`render_prompts`);
            the environment reads it together with the generated text.
        stop_text: ends a response early (see :func:`generate`).
        share_prefix: see :func:`generate`.
    """
    num_envs = envs.num_envs
    records = StepRecords()
    returns = np.zeros(num_envs)
    won = np.zeros(num_envs, dtype=bool)
    lengths = np.zeros(num_envs, dtype=np.int64)
    live = np.ones(num_envs, dtype=bool)
    gen_seconds = env_seconds = 0.0
    generated = 0

    eos_ids = set(_eos_ids(model, tokenizer))
    tick = time.perf_counter()
    _, infos = envs.reset(seed=seed)
    env_seconds += time.perf_counter() - tick
    for _ in range(max(envs.get_attr("max_steps"))):
        active = np.flatnonzero(live)
        if len(active) == 0:
            break
        anchors_before = envs.anchors.copy()
        texts_before = envs.anchor_texts.copy()
        observed = infos.get("raw_observation")
        tick = time.perf_counter()
        prompts = render_prompts(
            tokenizer, [list(infos["messages"][i]) for i in active], response_prefix
        )
        response_ids, log_probs = generate(
            model,
            tokenizer,
            prompts,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            stop_text=stop_text,
            share_prefix=share_prefix,
        )
        texts = [
            response_prefix + text
            for text in tokenizer.batch_decode(response_ids, skip_special_tokens=True)
        ]
        gen_seconds += time.perf_counter() - tick
        generated += sum(len(r) for r in response_ids)

        # cut by max_new_tokens, not ended by an end-of-sequence token or the stop text
        ended = [
            bool(ids) and (ids[-1] in eos_ids or bool(stop_text and text.endswith(stop_text)))
            for ids, text in zip(response_ids, texts, strict=True)
        ]
        actions = [""] * num_envs
        for row, i in enumerate(active):
            actions[i] = texts[row]
        tick = time.perf_counter()
        _, rewards, terminated, truncated, infos = envs.step(actions)
        env_seconds += time.perf_counter() - tick
        done = np.logical_or(terminated, truncated)
        for row, i in enumerate(active):
            records.append(
                prompt_ids=prompts[row],
                response_ids=response_ids[row],
                old_log_probs=log_probs[row],
                reward=float(rewards[i]),
                anchor=str(anchors_before[i]),
                anchor_text=texts_before[i],
                group_id=int(envs.group_ids[i]),
                traj_id=int(i),
                is_action_valid=bool(infos["is_action_valid"][i]),
                observation="" if observed is None else str(observed[i]),
                action=texts[row],
                truncated=len(response_ids[row]) >= max_new_tokens and not ended[row],
            )
            returns[i] += float(rewards[i])
            lengths[i] += 1
            won[i] |= bool(infos["won"][i])
        live[active] &= ~done[active]
    if live.any():
        raise RuntimeError(f"envs {np.flatnonzero(live).tolist()} did not end within max_steps")
    return Rollout(records, returns, won, lengths, gen_seconds, env_seconds, generated)


def _stop_length(tokenizer: Any, ids: list[int], stop_text: str) -> int:
    """Tokens up to the one that completes ``stop_text`` (all of them if none does)."""
    if stop_text not in tokenizer.decode(ids, skip_special_tokens=False):
        return len(ids)
    for k in range(1, len(ids) + 1):
        if stop_text in tokenizer.decode(ids[:k], skip_special_tokens=False):
            return k
    return len(ids)


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    ids = model.generation_config.eos_token_id
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    if not ids:
        raise ValueError("the tokenizer and the model define no end-of-sequence token")
    return ids
