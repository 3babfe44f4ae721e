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
from training.env_tasks import PromptTooLongError  # over rollout.max_prompt_tokens: never cut
from training.local.decoding import eos_ids, generate
from training.records import StepRecords

__all__ = ["PromptTooLongError", "Rollout", "collect", "generate", "make_envs"]


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
    max_prompt_tokens: int = 0,
    cache: str = "dynamic",
    engine: Any = None,
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
        max_prompt_tokens: the longest prompt allowed (0: no cap); a longer one raises
            :class:`PromptTooLongError` (the iteration is lost, the last checkpoint is not).
        cache: ``dynamic`` or ``static`` (see :func:`generate`; ``static`` needs
            ``max_prompt_tokens``: its cache holds ``num_envs`` rows of
            ``max_prompt_tokens + max_new_tokens`` tokens, every turn the same shape;
            :func:`generate` refuses a cache too short for a prompt).
        engine: a :class:`training.local.engine.VllmEngine` holding ``model``'s weights,
            which then samples (``share_prefix`` and ``cache`` are the hf engine's); None:
            :func:`generate` with ``model``.
    """
    num_envs = envs.num_envs
    records = StepRecords()
    returns = np.zeros(num_envs)
    won = np.zeros(num_envs, dtype=bool)
    lengths = np.zeros(num_envs, dtype=np.int64)
    live = np.ones(num_envs, dtype=bool)
    gen_seconds = env_seconds = 0.0
    generated = 0

    ends = set(eos_ids(model, tokenizer))
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
        if max_prompt_tokens:
            check_prompt_lengths(prompts, max_prompt_tokens, [envs.group_ids[i] for i in active])
        sampler = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                       top_k=top_k, stop_text=stop_text)  # fmt: skip
        if engine is not None:
            response_ids, log_probs = engine.generate(prompts, eos=sorted(ends), **sampler)
        else:
            response_ids, log_probs = generate(
                model, tokenizer, prompts, share_prefix=share_prefix, cache=cache,
                rows=num_envs, cache_length=max_prompt_tokens + max_new_tokens, **sampler,
            )  # fmt: skip
        texts = [
            response_prefix + text
            for text in tokenizer.batch_decode(response_ids, skip_special_tokens=True)
        ]
        gen_seconds += time.perf_counter() - tick
        generated += sum(len(r) for r in response_ids)

        # cut by max_new_tokens, not ended by an end-of-sequence token or the stop text
        ended = [
            bool(ids) and (ids[-1] in ends or bool(stop_text and text.endswith(stop_text)))
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
                # the state the step led to: NEXT_STEP autoreset resets an env on the step
                # after its episode ends, so a last step's info is still its final state
                next_anchor=str(envs.anchors[i]),
                next_anchor_text=envs.anchor_texts[i],
                won=bool(infos["won"][i]),
            )
            returns[i] += float(rewards[i])
            lengths[i] += 1
            won[i] |= bool(infos["won"][i])
        live[active] &= ~done[active]
    if live.any():
        raise RuntimeError(f"envs {np.flatnonzero(live).tolist()} did not end within max_steps")
    return Rollout(records, returns, won, lengths, gen_seconds, env_seconds, generated)


def check_prompt_lengths(prompts: list[list[int]], cap: int, groups: list[int]) -> None:
    """Raises :class:`PromptTooLongError` naming ``rollout.max_prompt_tokens`` when a prompt
    (token ids; ``groups[k]`` is prompt k's group) is longer than ``cap``."""
    longest = max(range(len(prompts)), key=lambda k: len(prompts[k]))
    if len(prompts[longest]) > cap:
        raise PromptTooLongError(
            f"a prompt of group {int(groups[longest])} has {len(prompts[longest])} tokens, over "
            f"rollout.max_prompt_tokens={cap}: raise the cap, or shorten the prompts "
            "(env.history_length, env.template)"
        )
