"""HistoryPrompt and prompt templates."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import pytest

import gigpo_envs  # noqa: F401
from gigpo_envs import HistoryPrompt, history_prompt
from gigpo_envs.sokoban.room import LEGEND


def _observations(env_id, seed, actions):
    raw = gym.make(env_id)
    observation, _ = raw.reset(seed=seed)
    seen = [observation]
    for action in actions:
        observation, *_ = raw.step(action)
        seen.append(observation)
    return seen


def test_prompt_holds_task_history_window_admissible_and_format():
    actions = ["<action>up</action>", "<action>left</action>", "junk", "<action>down</action>"]
    raw_observations = _observations("gigpo/Sokoban-v0", 4, actions)
    env = HistoryPrompt(gym.make("gigpo/Sokoban-v0"), history_length=2)
    prompt, info = env.reset(seed=4)
    assert "Sokoban" in prompt and LEGEND in prompt
    assert "previous" not in prompt
    assert raw_observations[0] in prompt
    assert "Admissible actions: up, down, left, right." in prompt
    assert "<think>" in prompt and "<action>up</action>" in prompt
    for action in actions:
        prompt, _, _, _, info = env.step(action)
    # Exactly the last two (observation, action) pairs: steps 2 and 3.
    assert "[Step 2 observation]" in prompt and "[Step 3 observation]" in prompt
    assert "[Step 1 observation]" not in prompt and "[Step 0 observation]" not in prompt
    assert "[Step 2 action] (invalid action: no effect)" in prompt
    assert "[Step 3 action] down" in prompt
    assert f"[Step 4 observation, current]\n{raw_observations[4]}" in prompt
    assert info["raw_observation"] == raw_observations[4]
    assert prompt in env.observation_space


def test_messages_match_the_prompt():
    env = HistoryPrompt(gym.make("gigpo/EZPoints-v0"), history_length=1)
    prompt, info = env.reset(seed=0)
    messages = info["messages"]
    assert [m["role"] for m in messages] == ["system", "user"]
    assert prompt == messages[0]["content"] + "\n\n" + messages[1]["content"]
    assert "Use each of the 2 cards exactly once to make 12" in messages[0]["content"]
    assert info["raw_observation"] in messages[1]["content"]
    assert env.messages == messages


def test_history_length_zero_and_bad_values():
    env = HistoryPrompt(gym.make("gigpo/NumberLine-v0"), history_length=0)
    env.reset(seed=0)
    prompt, *_ = env.step("<action>+</action>")
    assert "previous" not in prompt
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="history_length"):
            HistoryPrompt(gym.make("gigpo/NumberLine-v0"), history_length=bad)


def test_templates_are_easy_to_override():
    base = gym.make("gigpo/Blackjack-v0").unwrapped.prompt_template
    template = dataclasses.replace(
        base, task="Play blackjack well. {legend}", admissible="Moves: {actions}"
    )
    env = HistoryPrompt(gym.make("gigpo/Blackjack-v0"), template=template)
    prompt, _ = env.reset(seed=1)
    assert prompt.startswith("Play blackjack well.")
    assert "Moves: hit, stand" in prompt
    assert "Admissible actions" not in prompt


@pytest.mark.parametrize("env_id", sorted(gigpo_envs.ENVIRONMENTS))
def test_every_env_has_its_own_task_text(env_id):
    env = HistoryPrompt(gym.make(env_id))
    prompt, info = env.reset(seed=0)
    assert info["messages"][0]["content"] != gigpo_envs.PromptTemplate().system_text()
    assert info["raw_observation"] in prompt


def test_order_arranges_the_user_message_and_rejects_bad_parts():
    base = gym.make("gigpo/Sokoban-v0").unwrapped.prompt_template
    last = dataclasses.replace(base, order=("format", "admissible", "history", "current"))
    env = HistoryPrompt(gym.make("gigpo/Sokoban-v0"), history_length=1, template=last)
    env.reset(seed=2)
    _, _, _, _, info = env.step("<action>up</action>")
    user = info["messages"][1]["content"]
    current = f"[Step 1 observation, current]\n{info['raw_observation']}"
    assert user.endswith(current)
    spots = [user.index(s) for s in ("<think>", "Admissible actions:", "[Step 0 observation]")]
    assert spots == sorted(spots) and spots[-1] < user.index(current)
    # A part left out is not shown; the default order is unchanged.
    bare = HistoryPrompt(
        gym.make("gigpo/Sokoban-v0"), template=dataclasses.replace(base, order=("current",))
    )
    _, info = bare.reset(seed=2)
    assert (
        info["messages"][1]["content"]
        == f"[Step 0 observation, current]\n{info['raw_observation']}"
    )
    _, info = HistoryPrompt(gym.make("gigpo/Sokoban-v0")).reset(seed=2)
    assert info["messages"][1]["content"].startswith("[Step 0 observation, current]")
    for bad in (("current", "current"), ("observation",), ("history", "actions")):
        with pytest.raises(ValueError, match="order"):
            dataclasses.replace(base, order=bad)


def test_history_prompt_keeps_the_env_template_and_replaces_named_fields():
    env = gym.make("gigpo/NumberLine-v0")
    base = env.unwrapped.prompt_template
    wrapped = history_prompt(
        env,
        1,
        template={"order": ["format", "current"]},
        format_instruction="Say <action>+</action>.",
    )
    assert wrapped.template.task == base.task  # untouched fields are the env's own
    assert list(wrapped.template.order) == ["format", "current"]
    prompt, info = wrapped.reset(seed=0)
    user = info["messages"][1]["content"]
    assert user.startswith("Say <action>+</action>.") and user.endswith(info["raw_observation"])
    assert base.task.split("{")[0] in prompt
    with pytest.raises(ValueError, match=r"unknown PromptTemplate fields \['nope'\]"):
        history_prompt(env, 1, template={"nope": "x"})
