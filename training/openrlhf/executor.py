"""Our environments inside OpenRLHF's vLLM rollout actors: the GiGPO agent executor.

Each OpenRLHF prompt is a *task*: its label is JSON naming the environment, its seed and the
rollout settings (see :func:`task_label`); the ``n_samples_per_prompt`` samples of a prompt
are the GiGPO group, since the same seed gives the same start state in every process. One
:meth:`GiGPOExecutor.execute` call plays one episode, in one of two layouts (``Task.layout``):

* ``step`` (the default): every environment step is its own model call on its own prompt,
  the env's :func:`~gigpo_envs.history_prompt` (the task, the last ``history_length`` steps,
  the current observation), chat-formatted; the episode plays until the env ends it (its
  ``max_steps``). The steps come back as a :class:`~training.records.StepRecords` (the record
  the local trainer builds), and the patched sample builder makes each row one OpenRLHF
  sample (:mod:`training.openrlhf.patch`). A prompt over ``max_prompt_tokens`` is an error,
  never a silent cut.
* ``episode``: the episode is one growing token sequence (each response, then the next
  observation as a new user message), as Search-R1 trains; it stops at the env's end or when
  ``--data.max_len`` is used up, and the record says which (``budget_ended``).

Environment calls run in a thread off the event loop, or, for CPU-heavy envs (ALFWorld,
WebShop) and whenever ``Task.env_workers`` asks, in worker processes
(:class:`gigpo_envs.workers.EnvWorkerPool`, one pool per rollout actor) so that env work
scales with cores. It returns OpenRLHF's response dict plus ``gigpo``: the layout and the
episode's record.

The pieces that are logic (task labels, the chat text between turns, the records) are plain
functions, tested on CPU with a real small model; the class only awaits them.
"""

from __future__ import annotations

import uuid
from copy import deepcopy
from typing import Any

from training.env_tasks import (
    LAYOUTS,
    PromptTooLongError,
    Task,
    ThreadEnv,
    env_workers_for,
    first_prompt_text,
    make_task_env,
    open_task_env,
    parse_task,
    record_step,
    render_prompt,
    task_label,
)
from training.openrlhf.estimator import GiGPOSettings
from training.openrlhf.turns import SampleTurns
from training.records import StepRecords

#: Marks where the assistant's text ends when rendering the chat template between turns.
_SENTINEL = "\x00GIGPO-END-OF-RESPONSE\x00"


def between_turns_text(tokenizer: Any, user_content: str, response_ended: bool) -> str:
    """The text that follows a response: the end of its turn, the next user message, and the
    next generation prompt, exactly as the tokenizer's chat template writes them.

    Args:
        user_content: the next user message (the new observation).
        response_ended: True when the response already ends with the end-of-turn token (vLLM
            stopped on it), so it is not written twice.
    """
    conversation = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": _SENTINEL},
        {"role": "user", "content": user_content},
    ]
    text = tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    if _SENTINEL not in text:
        raise ValueError("the chat template drops assistant messages; cannot build turns")
    after = text[text.index(_SENTINEL) + len(_SENTINEL) :]
    eos = tokenizer.eos_token or ""
    if response_ended and eos and after.startswith(eos):
        after = after[len(eos) :]
    return after


def _response_log_probs(output: Any, tokens: list[int]) -> list[float]:
    return [step[token].logprob for step, token in zip(output.logprobs, tokens, strict=True)]


# ------------------------------------------------------------------------------ episodes
async def run_episode(
    prompt: str,
    label: Any,
    sampling_params: Any,
    max_length: int,
    tokenizer: Any,
    llm_engine: Any,
) -> dict[str, Any]:
    """Plays one episode of the task in ``label``; returns OpenRLHF's response dict.

    ``llm_engine.generate(token_ids, sampling_params)`` must be awaitable and return an
    object with ``outputs[0].token_ids``, ``.text``, ``.finish_reason`` and (when
    ``sampling_params.logprobs`` is set) ``.logprobs``, as vLLM's ``RequestOutput`` does.
    ``prompt`` is OpenRLHF's dataset text; the environment writes the real prompt.
    ``max_length`` is ``--data.max_len``: no sample is longer.

    Raises:
        PromptTooLongError: step layout: a step's prompt is over the cap (it names the env,
            the step and the sizes).
        ValueError: a malformed label, or a first prompt that leaves no room to answer.
    """
    task = parse_task(label)
    settings = GiGPOSettings.from_environ()
    text_chars = settings.rollout_max_chars if settings and settings.save_rollouts_every else None
    env = await open_task_env(task)
    try:
        _, info = await env.areset(seed=task.seed)
        play = _play_steps if task.layout == "step" else _play_episode
        result = await play(task, env, info, sampling_params, max_length, tokenizer, llm_engine,
                            text_chars)  # fmt: skip
    finally:
        await env.aclose()
    return {"prompt": prompt, "label": label, "images": None, "mm_train_inputs": None, **result}


async def _play_steps(
    task: Task,
    env: Any,
    info: dict[str, Any],
    sampling_params: Any,
    max_length: int,
    tokenizer: Any,
    llm_engine: Any,
    text_chars: int | None,
) -> dict[str, Any]:
    """The step layout: one model call per env step on its own history prompt."""
    cap = task.max_prompt_tokens or max_length - task.max_new_tokens
    want_logprobs = getattr(sampling_params, "logprobs", None) is not None
    records = StepRecords()
    traj, won, total = uuid.uuid4().hex, False, 0.0
    while True:  # the env ends every episode (its max_steps)
        prompt_ids = render_prompt(tokenizer, info["messages"])
        room = min(task.max_new_tokens, max_length - len(prompt_ids))
        if len(prompt_ids) > cap or room < 1:
            raise PromptTooLongError(
                f"{task.env_id} (seed {task.seed}) step {len(records)}: the prompt has "
                f"{len(prompt_ids)} tokens, over the step layout's cap of {cap} "
                f"(--gigpo.max_prompt_tokens; --data.max_len {max_length}, "
                f"--env.max_new_tokens {task.max_new_tokens}, --history_length "
                f"{task.history_length}): raise the cap or shorten the history"
            )
        params = deepcopy(sampling_params)
        params.max_tokens = room
        output = (await llm_engine.generate(prompt_ids, params)).outputs[0]
        response = list(output.token_ids)
        before = info
        _, reward, terminated, truncated, info = await env.astep(output.text)
        record_step(
            records, before, reward, info, output.text, group=task.group, traj=traj,
            text_chars=text_chars, truncated=output.finish_reason == "length",
            prompt_ids=prompt_ids, response_ids=response,
            old_log_probs=_response_log_probs(output, response) if want_logprobs else [],
        )  # fmt: skip
        won = won or bool(info.get("won", False))
        total += float(reward)
        if terminated or truncated:
            break
    first, answer = records.prompt_ids[0], records.response_ids[0]
    return {
        # OpenRLHF's fields describe the episode (its reward and score, for dynamic filtering
        # and evaluation); its training samples are the steps (patch.step_samples).
        "reward": total,
        "scores": float(won),
        "observation_tokens": first + answer,
        "action_ranges": [(len(first), len(first) + len(answer))],
        "rollout_log_probs": [0.0] * len(first) + records.old_log_probs[0]
        if want_logprobs
        else None,
        "truncated": records.truncated[0],
        "extra_logs": {},
        "gigpo": {"layout": "step", "steps": records.to_dict(), "won": won},
    }


async def _play_episode(
    task: Task,
    env: Any,
    info: dict[str, Any],
    sampling_params: Any,
    max_length: int,
    tokenizer: Any,
    llm_engine: Any,
    text_chars: int | None,
) -> dict[str, Any]:
    """The episode layout: one growing token sequence, cut by ``max_length``."""
    tokens = render_prompt(tokenizer, info["messages"])
    if len(tokens) >= max_length:
        raise ValueError(
            f"{task.env_id}: the first prompt has {len(tokens)} tokens, "
            f"--data.max_len is {max_length}"
        )
    want_logprobs = getattr(sampling_params, "logprobs", None) is not None
    log_probs: list[float] | None = [0.0] * len(tokens) if want_logprobs else None
    # The episode's step records without tokens (they are the one growing sequence): the
    # response of row i is tokens[ranges[i][0]:ranges[i][1]].
    steps, ranges = StepRecords(), []
    traj, won = uuid.uuid4().hex, False
    total_reward, truncated, env_ended = 0.0, False, False
    while True:  # the env truncates at its max_steps; the token budget bounds it too
        budget = max_length - len(tokens)
        if budget <= 0:
            break
        params = deepcopy(sampling_params)
        params.max_tokens = min(task.max_new_tokens, budget)
        output = (await llm_engine.generate(tokens, params)).outputs[0]
        action_tokens = list(output.token_ids)
        truncated = output.finish_reason == "length"
        start = len(tokens)
        tokens = tokens + action_tokens
        before = info
        _, reward, terminated, trunc_env, info = await env.astep(output.text)
        record_step(steps, before, reward, info, output.text, group=task.group, traj=traj,
                    text_chars=text_chars, truncated=truncated)  # fmt: skip
        ranges.append((start, len(tokens)))
        won = won or bool(info.get("won", False))
        total_reward += float(reward)
        if log_probs is not None:
            log_probs.extend(_response_log_probs(output, action_tokens))
        if terminated or trunc_env:
            env_ended = True
            break
        ended = bool(action_tokens) and action_tokens[-1] == tokenizer.eos_token_id
        feedback = between_turns_text(tokenizer, info["messages"][-1]["content"], ended)
        feedback_ids = tokenizer(feedback, add_special_tokens=False)["input_ids"]
        tokens = tokens + feedback_ids
        if log_probs is not None:
            log_probs.extend([0.0] * len(feedback_ids))
    record = SampleTurns.from_steps(
        steps, ranges, group=task.group, traj=traj, sequence_length=len(tokens),
        max_len=max_length, won=won, budget_ended=not env_ended,
    )  # fmt: skip
    return {
        "reward": total_reward,
        "scores": float(record.won),
        "observation_tokens": tokens,
        "action_ranges": list(record.action_ranges),
        "rollout_log_probs": log_probs,
        "truncated": truncated,
        "extra_logs": {},
        "gigpo": {"layout": "episode", "turns": record.to_dict()},
    }


__all__ = [
    "LAYOUTS", "PromptTooLongError", "Task", "ThreadEnv", "between_turns_text",
    "env_workers_for", "first_prompt_text", "make_executor_class", "make_task_env",
    "open_task_env", "parse_task", "record_step", "render_prompt", "run_episode", "task_label",
]  # fmt: skip


def make_executor_class() -> type:
    """OpenRLHF's ``AgentExecutor``: a subclass of ``openrlhf.utils.agent.AgentExecutorBase``."""
    try:
        from openrlhf.utils.agent import AgentExecutorBase
    except ImportError as exc:
        raise ImportError(
            f'the OpenRLHF executor needs openrlhf ({exc}): pip install "gigpo[openrlhf]"'
        ) from exc

    class GiGPOExecutor(AgentExecutorBase):
        """Plays one gigpo environment episode per call (see :func:`run_episode`)."""

        async def execute(
            self,
            prompt,
            label,
            sampling_params,
            max_length: int,
            hf_tokenizer,
            llm_engine,
            images=None,
        ):
            return await run_episode(
                prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine
            )

    return GiGPOExecutor
