"""Our environments inside OpenRLHF's vLLM rollout actors: the GiGPO agent executor.

Each OpenRLHF prompt is a *task*: its label is JSON naming the environment, its seed and the
rollout settings (see :func:`task_label`); the ``n_samples_per_prompt`` samples of a prompt
are the GiGPO group, since the same seed gives the same start state in every process. One
:meth:`GiGPOExecutor.execute` call plays one episode: the chat-formatted prompt, then per
turn a response from vLLM, an environment step (in a thread, off the event loop), and the
next observation as a new user message. It returns OpenRLHF's response dict plus ``gigpo``,
the :class:`~training.openrlhf.records.EpisodeTurns` of the episode.

The pieces that are logic (task labels, the chat text between turns, the record) are plain
functions, tested on CPU with a real small model; the class only awaits them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any

from training.openrlhf.estimator import GiGPOSettings
from training.openrlhf.records import EpisodeTurns
from training.rollouts import bound_text

#: Marks where the assistant's text ends when rendering the chat template between turns.
_SENTINEL = "\x00GIGPO-END-OF-RESPONSE\x00"


@dataclass(frozen=True)
class Task:
    """One OpenRLHF prompt: an environment start state and the rollout settings."""

    env_id: str
    seed: int
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    history_length: int = 0
    max_new_tokens: int = 512
    format_instruction: str | None = None

    @property
    def group(self) -> str:
        """The GiGPO episode group: every sample of this task shares it."""
        return f"{self.env_id}#{self.seed}#{json.dumps(self.env_kwargs, sort_keys=True)}"


def task_label(task: Task) -> str:
    """The JSON label of a task, as written into the prompt dataset."""
    return json.dumps(dataclasses.asdict(task), sort_keys=True)


def parse_task(label: Any) -> Task:
    """Reads a task label; raises ValueError naming the problem for anything malformed."""
    if isinstance(label, str):
        try:
            label = json.loads(label)
        except json.JSONDecodeError as exc:
            raise ValueError(f"gigpo task label is not JSON: {exc}") from None
    if not isinstance(label, dict):
        raise ValueError(f"gigpo task label must be a JSON object, got {type(label).__name__}")
    known = {f.name for f in dataclasses.fields(Task)}
    unknown = sorted(set(label) - known)
    if unknown:
        raise ValueError(f"gigpo task label has unknown keys {unknown}")
    if "env_id" not in label or "seed" not in label:
        raise ValueError("gigpo task label needs env_id and seed")
    seed = label["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"gigpo task seed must be a non-negative int, got {seed!r}")
    for name in ("history_length", "max_new_tokens"):
        value = label.get(name, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"gigpo task {name} must be a non-negative int, got {value!r}")
    if not isinstance(label.get("env_kwargs", {}), dict):
        raise ValueError("gigpo task env_kwargs must be a JSON object")
    return Task(**label)


def make_task_env(task: Task) -> Any:
    """The task's environment, wrapped in :class:`~gigpo_envs.HistoryPrompt`."""
    import gymnasium as gym

    import gigpo_envs  # noqa: F401  (registers the ids in this process)
    from gigpo_envs import history_prompt

    env = gym.make(task.env_id, **task.env_kwargs)
    return history_prompt(env, task.history_length, format_instruction=task.format_instruction)


def first_prompt_text(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """The chat-formatted first prompt, ending with the assistant's generation prompt."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


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


@dataclass
class TurnRecorder:
    """Accumulates an episode's turns into an :class:`EpisodeTurns`."""

    group: str
    max_len: int
    traj: str = field(default_factory=lambda: uuid.uuid4().hex)
    rewards: list[float] = field(default_factory=list)
    anchors: list[str] = field(default_factory=list)
    anchor_texts: list[str | None] = field(default_factory=list)
    is_action_valid: list[bool] = field(default_factory=list)
    action_ranges: list[tuple[int, int]] = field(default_factory=list)
    won: bool = False
    text_chars: int | None = None
    """Record each turn's observation and response, bounded to this many characters (0: no
    bound); None records no texts (a run that saves no rollouts)."""
    observations: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)

    def add_texts(self, observation: Any, action: Any) -> None:
        if self.text_chars is not None:
            self.observations.append(bound_text(observation, self.text_chars))
            self.actions.append(bound_text(action, self.text_chars))

    def add(
        self,
        reward: float,
        anchor: str,
        anchor_text: str | None,
        is_action_valid: bool,
        start: int,
        end: int,
    ) -> None:
        self.rewards.append(float(reward))
        self.anchors.append(str(anchor))
        self.anchor_texts.append(None if anchor_text is None else str(anchor_text))
        self.is_action_valid.append(bool(is_action_valid))
        self.action_ranges.append((int(start), int(end)))

    def finish(self, sequence_length: int) -> EpisodeTurns:
        return EpisodeTurns(
            group=self.group,
            traj=self.traj,
            rewards=self.rewards,
            anchors=self.anchors,
            anchor_texts=self.anchor_texts,
            is_action_valid=self.is_action_valid,
            action_ranges=self.action_ranges,
            sequence_length=sequence_length,
            max_len=self.max_len,
            won=self.won,
            observations=self.observations,
            actions=self.actions,
        )


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
    """
    task = parse_task(label)
    env = await asyncio.to_thread(make_task_env, task)
    try:
        _, info = await asyncio.to_thread(env.reset, seed=task.seed)
        text = first_prompt_text(tokenizer, info["messages"])
        tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(tokens) >= max_length:
            raise ValueError(
                f"{task.env_id}: the first prompt has {len(tokens)} tokens, "
                f"--data.max_len is {max_length}"
            )
        want_logprobs = getattr(sampling_params, "logprobs", None) is not None
        log_probs: list[float] | None = [0.0] * len(tokens) if want_logprobs else None
        settings = GiGPOSettings.from_environ()
        text_chars = (
            settings.rollout_max_chars if settings and settings.save_rollouts_every else None
        )
        recorder = TurnRecorder(group=task.group, max_len=max_length, text_chars=text_chars)
        total_reward, truncated = 0.0, False
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
            anchor, anchor_text = info["anchor"], info.get("anchor_text")
            recorder.add_texts(info.get("raw_observation", ""), output.text)
            _, reward, terminated, trunc_env, info = await asyncio.to_thread(env.step, output.text)
            recorder.add(reward, anchor, anchor_text, info["is_action_valid"], start, len(tokens))
            recorder.won = recorder.won or bool(info.get("won", False))
            total_reward += float(reward)
            if log_probs is not None:
                log_probs.extend(
                    step[token].logprob
                    for step, token in zip(output.logprobs, action_tokens, strict=True)
                )
            if terminated or trunc_env:
                break
            ended = bool(action_tokens) and action_tokens[-1] == tokenizer.eos_token_id
            feedback = between_turns_text(tokenizer, info["messages"][-1]["content"], ended)
            feedback_ids = tokenizer(feedback, add_special_tokens=False)["input_ids"]
            tokens = tokens + feedback_ids
            if log_probs is not None:
                log_probs.extend([0.0] * len(feedback_ids))
    finally:
        await asyncio.to_thread(env.close)
    record = recorder.finish(len(tokens))
    return {
        "prompt": prompt,
        "label": label,
        "images": None,
        "mm_train_inputs": None,
        "reward": total_reward,
        "scores": float(record.won),
        "observation_tokens": tokens,
        "action_ranges": list(record.action_ranges),
        "rollout_log_probs": log_probs,
        "truncated": truncated,
        "extra_logs": {
            "gigpo_won": float(record.won),
            "gigpo_episode_turns": float(len(record.rewards)),
        },
        "gigpo": record.to_dict(),
    }


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
