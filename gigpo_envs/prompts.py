"""Prompts: turn an environment's observations into the text a language model reads.

:class:`PromptTemplate` holds the wording (each environment ships one in its ``templates``
module; override any field with :func:`dataclasses.replace`). :class:`HistoryPrompt` is the
Gymnasium wrapper that applies it: its observation is the full prompt (task, the last K
observation/action pairs, the current observation, the admissible actions and the format
instruction), and ``info["messages"]`` holds the same prompt as chat messages.
:func:`history_prompt` wraps an env with its own template, some fields replaced: the one way
both trainers build their prompts.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from gymnasium import spaces

PROMPT_PARTS = ("history", "current", "admissible", "format")
"""The parts of a user message that :attr:`PromptTemplate.order` arranges."""


@dataclass(frozen=True)
class PromptTemplate:
    """The wording of a prompt. Every field is a :meth:`str.format` template.

    Fields and the names they may use:
      task: what the game is and how to win; ``{legend}``.
      history_header: introduces the history window; ``{count}``.
      history_item: one past step; ``{step}``, ``{observation}``, ``{action}``.
      current: the current observation; ``{step}``, ``{observation}``.
      admissible: the legal actions; ``{actions}`` (comma separated).
      format_instruction: how to answer; ``{example}`` (an action, already in its tags).
      invalid_action: how an invalid past action is shown in the history.
      example_action: the action used for ``{example}`` when no admissible list exists.
      order: the parts of the user message, in order: any of ``"history"``, ``"current"``,
        ``"admissible"``, ``"format"``, each at most once (a part left out is not shown).
        ``("format", "admissible", "history", "current")`` ends the prompt with the current
        observation, right before the answer: small models read it more easily there, and
        batches of prompts then share a longer start.

    Literal braces in a template must be doubled (``{{``), as with :meth:`str.format`.
    """

    task: str = "You are an agent acting in a text environment.\n{legend}"
    history_header: str = "Your previous {count} step(s), oldest first:"
    history_item: str = "[Step {step} observation]\n{observation}\n[Step {step} action] {action}"
    current: str = "[Step {step} observation, current]\n{observation}"
    admissible: str = "Admissible actions: {actions}."
    format_instruction: str = (
        "First think step by step inside <think> </think> tags, then give exactly one action "
        "inside <action> </action> tags, for example: {example}"
    )
    invalid_action: str = "(invalid action: no effect)"
    example_action: str = "..."
    order: tuple[str, ...] = ("history", "current", "admissible", "format")

    def __post_init__(self) -> None:
        order = tuple(self.order)
        unknown = [part for part in order if part not in PROMPT_PARTS]
        if unknown or len(set(order)) != len(order):
            raise ValueError(
                f"order must name each of {PROMPT_PARTS} at most once, got {self.order!r}"
            )
        object.__setattr__(self, "order", order)

    def system_text(self, legend: str = "") -> str:
        """Returns the task description (the system message)."""
        return self.task.format(legend=legend).strip()

    def user_text(
        self,
        observation: str,
        step: int,
        history: list[tuple[int, str, str | None]],
        admissible_actions: list[str] | None,
        example: str,
    ) -> str:
        """Returns the per-step part of the prompt (the user message).

        Args:
          observation: the current observation text.
          step: the number of steps taken so far in the episode.
          history: (step, observation, action or None if invalid) of past steps, oldest first.
          admissible_actions: the legal actions now, or None.
          example: an example answer, already wrapped in action tags.
        """
        parts: dict[str, str] = {}
        if history:
            lines = [self.history_header.format(count=len(history))]
            for past_step, past_obs, past_action in history:
                shown = past_action if past_action is not None else self.invalid_action
                lines.append(
                    self.history_item.format(step=past_step, observation=past_obs, action=shown)
                )
            parts["history"] = "\n".join(lines)
        parts["current"] = self.current.format(step=step, observation=observation)
        if admissible_actions:
            parts["admissible"] = self.admissible.format(actions=", ".join(admissible_actions))
        parts["format"] = self.format_instruction.format(example=example)
        return "\n\n".join(parts[name] for name in self.order if name in parts)


class HistoryPrompt(gym.Wrapper):
    """Replaces each observation with the model's prompt; adds ``info["messages"]``.

    The prompt is the task, the last ``history_length`` (observation, action) pairs, the
    current observation, the admissible actions where the game has them, and the format
    instruction. ``info["messages"]`` is ``[{"role": "system", ...}, {"role": "user", ...}]``
    with the same content; ``info["raw_observation"]`` keeps the environment's observation.

    Args:
      env: a gigpo environment (anything whose ``unwrapped`` is a ``TextEnv``).
      history_length: how many past steps to show (``K >= 0``).
      template: wording to use; defaults to the environment's ``prompt_template``.
    """

    def __init__(
        self, env: gym.Env, history_length: int = 2, template: PromptTemplate | None = None
    ) -> None:
        super().__init__(env)
        if isinstance(history_length, bool) or int(history_length) != history_length:
            raise ValueError(f"history_length must be an int >= 0, got {history_length!r}")
        if history_length < 0:
            raise ValueError(f"history_length must be >= 0, got {history_length}")
        self.history_length = int(history_length)
        unwrapped = env.unwrapped
        self.template = template or getattr(unwrapped, "prompt_template", PromptTemplate())
        self._legend = unwrapped.render_legend() if hasattr(unwrapped, "render_legend") else ""
        self._history: deque[tuple[int, str, str | None]] = deque(maxlen=self.history_length)
        self._last_observation = ""
        self._last_step = 0
        self.messages: list[dict[str, str]] = []
        inner = env.observation_space
        inner_max = inner.max_length if isinstance(inner, spaces.Text) else 4096
        charset = inner.character_set if isinstance(inner, spaces.Text) else None
        self.observation_space = spaces.Text(
            (self.history_length + 1) * inner_max + 8192,
            min_length=0,
            **({"charset": charset} if charset is not None else {}),
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        self._history.clear()
        return self._prompt(observation, info)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        if self.history_length:
            self._history.append((self._last_step, self._last_observation, info.get("action")))
        prompt, info = self._prompt(observation, info)
        return prompt, reward, terminated, truncated, info

    def _prompt(self, observation: str, info: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._last_observation = observation
        self._last_step = int(info.get("elapsed_steps", 0))
        admissible = info.get("admissible_actions")
        example_action = admissible[0] if admissible else self.template.example_action
        parser = getattr(self.env.unwrapped, "action_parser", None)
        example = (
            parser.format_example(example_action)
            if parser is not None
            else f"<action>{example_action}</action>"
        )
        system = self.template.system_text(self._legend)
        user = self.template.user_text(
            observation, self._last_step, list(self._history), admissible, example
        )
        self.messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        info = dict(info, messages=self.messages, raw_observation=observation)
        return system + "\n\n" + user, info


def history_prompt(
    env: gym.Env,
    history_length: int,
    *,
    template: Mapping[str, Any] | None = None,
    format_instruction: str | None = None,
) -> HistoryPrompt:
    """``env`` wrapped in :class:`HistoryPrompt` with the env's own template, fields replaced.

    Args:
      env: a gigpo environment.
      history_length: how many past steps the prompt shows (``K >= 0``).
      template: field -> new value for the env's ``prompt_template`` (e.g.
        ``{"order": ["format", "history", "current"]}``); unknown fields are a ``ValueError``.
      format_instruction: short for ``template={"format_instruction": ...}``.
    """
    base = getattr(env.unwrapped, "prompt_template", None) or PromptTemplate()
    changes = dict(template or {})
    if format_instruction is not None:
        changes["format_instruction"] = format_instruction
    known = {f.name for f in dataclasses.fields(PromptTemplate)}
    unknown = sorted(set(changes) - known)
    if unknown:
        known_list = sorted(known)
        raise ValueError(f"template: unknown PromptTemplate fields {unknown}; known: {known_list}")
    template_ = dataclasses.replace(base, **changes)
    return HistoryPrompt(env, history_length=history_length, template=template_)
