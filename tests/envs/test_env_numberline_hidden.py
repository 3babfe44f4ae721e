"""NumberLine's ``hidden_target`` option: the target is hidden and each observation says only
whether the last move came closer, so the right move depends on the move before it, which
only the prompt's history shows (the history-dependent task of the family study)."""

from __future__ import annotations

import json
import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from numberline_checks import assert_option_off_changes_nothing, contract_play

import gigpo_envs  # noqa: F401  (registers the ids)
from gigpo_envs.prompts import history_prompt


def _hidden(**kwargs) -> gym.Env:
    return gym.make(
        "gigpo/NumberLine-v0",
        **{"max_position": 9, "max_steps": 18, "hidden_target": True, **kwargs},
    )


def _act(env: gym.Env, action: str) -> tuple:
    return env.step(f"<action>{action}</action>")


def test_hidden_target_false_changes_nothing():
    assert_option_off_changes_nothing("hidden_target")
    off = gym.make("gigpo/NumberLine-v0", hidden_target=False)
    for seed in range(20):
        off.reset(seed=seed)
        assert "last_move" not in off.unwrapped.state_dict()["game"]


def test_the_target_is_hidden_and_each_move_says_warmer_or_colder():
    hidden, plain = _hidden(), gym.make("gigpo/NumberLine-v0", max_position=9, max_steps=18)
    rng = np.random.default_rng(0)
    for seed in range(50):
        observation, _ = hidden.reset(seed=seed)
        plain.reset(seed=seed)
        state = hidden.unwrapped.state_dict()["game"]
        assert (state["position"], state["target"]) == (
            plain.unwrapped.position, plain.unwrapped.target,
        )  # fmt: skip  # the same seed deals the same walk
        assert observation == f"Current: {state['position']}\nLast move: none"
        assert "Target" not in observation
        done, last = False, "none"
        while not done:
            action = ["+", "-", "up"][int(rng.integers(3))]
            before = abs(hidden.unwrapped.position - hidden.unwrapped.target)
            observation, reward, terminated, truncated, info = _act(hidden, action)
            done = terminated or truncated
            if info["is_action_valid"]:
                after = abs(hidden.unwrapped.position - hidden.unwrapped.target)
                last = "warmer" if after < before else "colder"
                assert reward == (1.0 if after == 0 else 0.0 if after < before else -1.0)
            assert observation == f"Current: {hidden.unwrapped.position}\nLast move: {last}"
            assert info["won"] == (hidden.unwrapped.position == hidden.unwrapped.target)


def test_the_anchor_is_what_the_agent_sees_and_the_state_keeps_the_target():
    env = _hidden()
    targets: dict[str, set[int]] = {}
    for seed in range(300):
        _, info = env.reset(seed=seed)
        targets.setdefault(info["anchor"], set()).add(env.unwrapped.target)
        assert info["anchor"] == env.unwrapped.state_key()
        assert info["anchor_text"] == env.unwrapped.state_text()
    # One anchor per start position: walks toward different targets share it.
    assert len(targets) == 10 and all(len(t) > 1 for t in targets.values())
    rng = np.random.default_rng(1)
    for seed in range(30):
        env.reset(seed=seed)
        for _ in range(int(rng.integers(0, 4))):
            if any(_act(env, ["+", "-"][int(rng.integers(2))])[2:4]):
                break
        saved = json.loads(json.dumps(env.unwrapped.state_dict()))
        if saved["done"]:
            continue
        twin = _hidden()
        twin.unwrapped.load_state_dict(saved)
        assert twin.unwrapped.state_dict() == saved
        moves = [["+", "-"][int(rng.integers(2))] for _ in range(18)]
        traces = []
        for target in (env, twin):
            trace = []
            for move in moves:
                step = _act(target, move)
                trace.append((step[0], step[1], step[2], step[3], step[4]["anchor"]))
                if step[2] or step[3]:
                    break
            traces.append(trace)
        assert traces[0] == traces[1]


def _best_move(env: gym.Env) -> str:
    return "+" if env.unwrapped.target > env.unwrapped.position else "-"


def test_the_current_observation_alone_is_ambiguous_and_the_history_decides():
    """Some observations call for '+' in one episode and '-' in another; a policy that reads
    only the prompt of a K=1 history window (the last move it made, and the word after it)
    wins every episode."""
    env = _hidden()
    right: dict[str, set[str]] = {}
    for seed in range(200):
        observation, _ = env.reset(seed=seed)
        for move in ("+", "+", "-"):
            observation, _, terminated, truncated, _ = _act(env, move)
            if terminated or truncated:
                break
            right.setdefault(observation, set()).add(_best_move(env))
    assert sum(len(moves) == 2 for moves in right.values()) >= 10

    prompted = history_prompt(_hidden(), history_length=1)
    wins, lengths = 0, []
    for seed in range(200):
        prompt, _ = prompted.reset(seed=seed)
        for step in range(18):
            past = re.findall(r"action\] (\S+)", prompt)  # the history's last move, if any
            word = re.findall(r"Last move: (\w+)", prompt)[-1]  # the current observation's
            if not past:
                move = "+"
            elif word == "warmer":
                move = past[-1]
            else:
                move = "-" if past[-1] == "+" else "+"
            prompt, _, terminated, truncated, info = prompted.step(f"<action>{move}</action>")
            if terminated or truncated:
                wins += info["won"]
                lengths.append(step + 1)
                break
    assert wins == 200, wins
    assert max(lengths) <= 9 + 2  # the walk, plus at most one move the wrong way and back


def test_bad_hidden_states_and_arguments_are_refused():
    env = _hidden()
    env.reset(seed=4)
    state = env.unwrapped.state_dict()
    game = state["game"]
    for bad in ("hotter", None, 3):
        with pytest.raises(ValueError, match="needs a 'last_move'"):
            env.unwrapped.load_state_dict({**state, "game": {**game, "last_move": bad}})
        assert env.unwrapped.state_dict() == state
    plain = gym.make("gigpo/NumberLine-v0", max_position=9)
    plain.reset(seed=4)
    with pytest.raises(ValueError, match="hidden_target=False, but"):
        plain.unwrapped.load_state_dict(state)
    for bad in ("yes", 1, None):
        with pytest.raises(TypeError, match="hidden_target"):
            _hidden(hidden_target=bad)


def test_hidden_numberline_meets_the_env_contract():
    check_env(_hidden(words=True, traps=2, clock=True).unwrapped)
    for observation in contract_play(_hidden(traps=2)):
        assert "Traps: " in observation and "Target" not in observation


def test_within_one_task_an_observation_names_one_right_move():
    """A group's rollouts share the hidden target, so an observation can follow only one of
    the two moves: no anchor key of one task calls for '+' in one rollout and '-' in
    another (across tasks, many do: the test above)."""
    env = _hidden()
    rng = np.random.default_rng(0)
    across: dict[str, set[str]] = {}
    for seed in range(200):
        within: dict[str, set[str]] = {}
        for _ in range(8):  # a group: 8 rollouts of one task
            _, info = env.reset(seed=seed)
            for _ in range(18):
                right = _best_move(env)
                within.setdefault(info["anchor"], set()).add(right)
                across.setdefault(info["anchor"], set()).add(right)
                _, _, terminated, truncated, info = _act(env, ["+", "-"][int(rng.integers(2))])
                if terminated or truncated:
                    break
        assert all(len(moves) == 1 for moves in within.values()), seed
    assert sum(len(moves) == 2 for moves in across.values()) >= 10
