"""Tasks: an environment start state and the rollout settings, where its env runs, and one
env step as a step record: what the OpenRLHF executor and the verl agent loop share.

A task is an environment start state (env id, kwargs, seed) plus the rollout settings (the
layout, the history length K, the response and prompt caps, the env workers); its JSON label
is written into the prompt dataset by a launcher (OpenRLHF's, verl's) and read back where the
episodes are played. Its environment (:func:`make_task_env`, wrapped in the env's history
prompt) runs in a thread of the process (:class:`ThreadEnv`) or in one of the process's env
worker processes (:func:`open_task_env`, :class:`gigpo_envs.workers.EnvWorkerPool`). A step's
prompt is the env's chat messages rendered by the tokenizer (:func:`render_prompt`); the step
is one row of :class:`~training.records.StepRecords` (:func:`record_step`).
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from training.guarded import GuardError, ParseError, load_json
from training.records import StepRecords
from training.text import bound_text

#: The sample layouts: one sample per environment step, or one per episode.
LAYOUTS = ("step", "episode")


@dataclass(frozen=True)
class Task:
    """One OpenRLHF prompt: an environment start state and the rollout settings.

    Attributes:
        env_id, seed, env_kwargs: the environment and its start state.
        history_length: past steps the prompt restates (K).
        max_new_tokens: the longest response of one step.
        format_instruction: replaces the prompt template's format instruction.
        layout: ``step`` (one sample per env step) or ``episode`` (one per episode).
        max_prompt_tokens: step layout: the longest prompt (tokens) a step may have; None for
            ``--data.max_len - max_new_tokens``.
        env_workers: worker processes for the env in each rollout actor; 0 runs it in threads
            of the actor; None picks: ``min(16, cores)`` for CPU-heavy envs, else 0.
        env_timeout_s: the longest an env call in a worker may take before the worker is
            killed and the episode fails with an error (None: no limit).
    """

    env_id: str
    seed: int
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    history_length: int = 0
    max_new_tokens: int = 512
    format_instruction: str | None = None
    layout: str = "step"
    max_prompt_tokens: int | None = None
    env_workers: int | None = None
    env_timeout_s: float | None = 600.0

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
        try:  # the guarded reader: size, depth, integer digits, no NaN
            label = load_json(label, "gigpo task label", expect=None)
        except ParseError as exc:
            raise ValueError(f"gigpo task label is not JSON: {exc}") from None
        except GuardError as exc:
            raise ValueError(str(exc)) from None
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
    for name, low in (("history_length", 0), ("max_new_tokens", 1)):
        value = label.get(name, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"gigpo task {name} must be an int >= {low}, got {value!r}")
    timeout = label.get("env_timeout_s")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
    ):
        raise ValueError(f"gigpo task env_timeout_s must be null or a number > 0, got {timeout!r}")
    for name, low in (("max_prompt_tokens", 1), ("env_workers", 0)):
        value = label.get(name)
        bad = isinstance(value, bool) or not isinstance(value, int) or value < low
        if value is not None and bad:
            raise ValueError(f"gigpo task {name} must be null or an int >= {low}, got {value!r}")
    # A label without a layout was written before the step layout existed: one sample per
    # episode, as it was then.
    label = {"layout": "episode", **label}
    if label["layout"] not in LAYOUTS:
        raise ValueError(f"gigpo task layout must be one of {LAYOUTS}, got {label['layout']!r}")
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


class ThreadEnv:
    """An in-process environment whose calls run in a thread, off the event loop."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def areset(self, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self.env.reset, **kwargs)

    async def astep(self, action: str) -> Any:
        return await asyncio.to_thread(self.env.step, action)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.env.close)


_POOL: list[Any] = []  # this process's EnvWorkerPool, made on first use
_POOL_LOCK = threading.Lock()


def env_workers_for(task: Task) -> int:
    """Worker processes the task's env runs in (0: threads of this process)."""
    if task.env_workers is not None:
        return task.env_workers
    from gigpo_envs.workers import cpu_heavy, usable_cpus

    return min(16, usable_cpus()) if cpu_heavy(task.env_id) else 0


def env_pool(num_workers: int, call_timeout_s: float | None = None) -> Any:
    """This process's :class:`~gigpo_envs.workers.EnvWorkerPool` (the first call's size and
    timeout)."""
    from gigpo_envs.workers import EnvWorkerPool

    with _POOL_LOCK:
        if not _POOL:
            pool = EnvWorkerPool(num_workers, call_timeout_s=call_timeout_s)
            atexit.register(pool.close)
            _POOL.append(pool)
        return _POOL[0]


def current_env_pool() -> Any:
    """This process's env worker pool, or None before the first worker env."""
    with _POOL_LOCK:
        return _POOL[0] if _POOL else None


def close_env_pool() -> None:
    """Closes this process's env worker pool (its envs are lost); the next worker env
    starts a new one."""
    with _POOL_LOCK:
        pools, _POOL[:] = list(_POOL), []
    for pool in pools:
        pool.close()


async def open_task_env(task: Task) -> Any:
    """The task's environment (:func:`make_task_env`), in a worker process or a thread."""
    workers = env_workers_for(task)
    if workers:  # a group's episodes share one worker (and its caches: ALFWorld's translation)
        pool = env_pool(workers, task.env_timeout_s)
        return await pool.amake(make_task_env, task, place_with=task.group)
    return ThreadEnv(await asyncio.to_thread(make_task_env, task))


# ------------------------------------------------------------------ prompts and records
def first_prompt_text(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """The chat-formatted first prompt, ending with the assistant's generation prompt."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


class PromptTooLongError(ValueError):
    """A step's prompt is longer than the step layout's prompt cap."""


def render_prompt(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """The token ids of the chat-formatted prompt, ending with the generation prompt."""
    return tokenizer(first_prompt_text(tokenizer, messages), add_special_tokens=False)["input_ids"]


def record_step(
    steps: StepRecords,
    info: dict[str, Any],
    reward: float,
    next_info: dict[str, Any],
    text: str,
    *,
    group: str,
    traj: str,
    text_chars: int | None,
    truncated: bool,
    prompt_ids: list[int] | None = None,
    response_ids: list[int] | None = None,
    old_log_probs: list[float] | None = None,
) -> None:
    """Appends one env step to an episode's step records, as both layouts record it.

    Args:
        info: the env's info before the step: the state the response acted from (its
            ``anchor``, ``anchor_text`` and ``raw_observation``).
        reward, next_info: the env's answer: ``next_info["is_action_valid"]``, and the state
            the step led to (its ``anchor`` and ``anchor_text``, the row's next state; after
            the last step, the state the episode ended in).
        text: the response text the env read.
        text_chars: record the observation and the response bounded to this many
            characters (0: whole); None records no texts (a run that saves no rollouts).
        prompt_ids, response_ids, old_log_probs: the step layout's tokens (the episode
            layout's are its one sequence: None).
    """
    keep = text_chars is not None
    steps.append(
        reward=float(reward),
        anchor=info["anchor"],
        anchor_text=info.get("anchor_text"),
        group_id=group,
        traj_id=traj,
        is_action_valid=next_info["is_action_valid"],
        prompt_ids=prompt_ids,
        response_ids=response_ids,
        old_log_probs=old_log_probs,
        observation=bound_text(info.get("raw_observation", ""), text_chars) if keep else None,
        action=bound_text(text, text_chars) if keep else None,
        truncated=truncated,
        next_anchor=next_info["anchor"],
        next_anchor_text=next_info.get("anchor_text"),
        won=bool(next_info.get("won", False)),
    )
