"""NumberLine's ``round_trip`` option: walk to the target and back home, the leg not shown, so
one observation of one task calls for opposite moves on the way out and on the way back
(states that alias within a task: HGPO's designed case)."""

from __future__ import annotations

import itertools
import json
import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from numberline_checks import assert_option_off_changes_nothing, contract_play

import gigpo_envs  # noqa: F401  (registers the ids)
from gigpo_algo import hgpo_advantages
from gigpo_envs.prompts import history_prompt


def _trip(**kwargs) -> gym.Env:
    return gym.make("gigpo/NumberLine-v0", **{"max_position": 5, "round_trip": True, **kwargs})


def _act(env: gym.Env, action: str) -> tuple:
    return env.step(f"<action>{action}</action>")


def _right_move(env: gym.Env) -> str:
    """The move toward the current leg's goal (read from the hidden state)."""
    game = env.unwrapped.state_dict()["game"]
    goal = game["home"] if game["returning"] else game["target"]
    return "+" if goal > game["position"] else "-"


def test_round_trip_false_changes_nothing():
    assert_option_off_changes_nothing("round_trip")
    off = gym.make("gigpo/NumberLine-v0", round_trip=False)
    for seed in range(20):
        off.reset(seed=seed)
        assert "home" not in off.unwrapped.state_dict()["game"]
    assert off.unwrapped.max_steps == 10 and _trip().unwrapped.max_steps == 20


def test_the_walk_turns_at_the_target_and_wins_at_home():
    env, plain = _trip(), gym.make("gigpo/NumberLine-v0", max_position=5)
    rng = np.random.default_rng(0)
    wins = 0
    for seed in range(60):
        observation, _ = env.reset(seed=seed)
        plain.reset(seed=seed)
        game = env.unwrapped.state_dict()["game"]
        home, target = game["home"], game["target"]
        assert (home, target) == (plain.unwrapped.position, plain.unwrapped.target)
        assert observation == f"Home: {home}\nTarget: {target}\nCurrent: {home}"
        done, returning, position = False, False, home
        while not done:
            action = ["+", "-", "up"][int(rng.integers(3))]
            observation, reward, terminated, truncated, info = _act(env, action)
            done = terminated or truncated
            if info["is_action_valid"]:
                goal = home if returning else target
                moved = min(max(position + (1 if action == "+" else -1), 0), 5)
                closer = abs(moved - goal) < abs(position - goal)
                position = moved
                if position == goal and not returning:
                    assert (reward, terminated) == (0.0, False)
                    returning = True
                elif position == goal:
                    assert (reward, terminated, info["won"]) == (1.0, True, True)
                else:
                    assert reward == (0.0 if closer else -1.0) and not terminated
            assert env.unwrapped.state_dict()["game"]["returning"] == returning
            assert observation == f"Home: {home}\nTarget: {target}\nCurrent: {position}"
            assert info["won"] == (terminated and returning and position == home)
            wins += info["won"]
    assert wins >= 10, wins  # random play does get home


def test_one_observation_of_one_task_calls_for_opposite_moves():
    """Within a group (8 rollouts of one task), cells between home and target carry one anchor
    key on both legs, and the right move there differs by leg: GiGPO's step groups mix them."""
    env = _trip()
    rng = np.random.default_rng(0)
    mixed_tasks = 0
    for seed in range(100):
        legs: dict[str, set[bool]] = {}
        moves: dict[str, set[str]] = {}
        cells: dict[str, int] = {}
        for _ in range(8):
            _, info = env.reset(seed=seed)
            for _ in range(20):
                # Mostly right moves, so the walks reach the target and come back.
                move = _right_move(env) if rng.random() < 0.8 else ["+", "-"][rng.integers(2)]
                legs.setdefault(info["anchor"], set()).add(env.unwrapped.returning)
                cells[info["anchor"]] = env.unwrapped.position
                moves.setdefault(info["anchor"], set()).add(_right_move(env))
                _, _, terminated, truncated, info = _act(env, move)
                if terminated or truncated:
                    break
        game = env.unwrapped.state_dict()["game"]
        low, high = sorted((game["home"], game["target"]))
        mixed = [key for key, seen in legs.items() if len(seen) == 2]
        # Only cells strictly between home and target are passed on both legs.
        assert all(low < cells[key] < high for key in mixed), seed
        assert all(len(moves[key]) == 2 for key in mixed)
        mixed_tasks += bool(mixed)
    assert mixed_tasks >= 50, mixed_tasks


def test_gigpo_step_groups_mix_the_legs_and_hgpo_level_two_splits_them():
    """Level 1 (GiGPO's step group) holds both legs at cells between home and target; level 2
    keys on the previous state too, which differs by leg for a step reached by a right move,
    so a level-2 group holds both legs only when a member got there by a wrong move."""
    env = _trip()
    rng = np.random.default_rng(2)
    rows: dict[str, list] = {"reward": [], "traj": [], "group": [], "anchor": [], "leg": []}
    right_arrival: list[bool] = []
    for seed in range(60):
        for rollout in range(4):  # a group, as the study config's group_size
            _, info = env.reset(seed=seed)
            arrived_right = True
            for _ in range(20):
                right = _right_move(env)
                move = right if rng.random() < 0.8 else ["+", "-"][int(rng.integers(2))]
                for name, value in (
                    ("traj", seed * 4 + rollout),
                    ("group", seed),
                    ("anchor", info["anchor"]),
                    ("leg", env.unwrapped.returning),
                ):
                    rows[name].append(value)  # fmt: skip
                right_arrival.append(arrived_right)
                _, reward, terminated, truncated, info = _act(env, move)
                rows["reward"].append(reward)
                arrived_right = move == right
                if terminated or truncated:
                    break
    result = hgpo_advantages(
        np.array(rows["reward"]), np.array(rows["traj"]), np.array(rows["group"]),
        np.array(rows["anchor"]), history_length=2,
    )  # fmt: skip
    ids, legs, arrived = result.level_group_ids, np.array(rows["leg"]), np.array(right_arrival)
    assert np.array_equal(ids[0] >= 0, np.ones(len(legs), bool))

    def mixed_groups(level: int) -> list[np.ndarray]:
        members = [np.flatnonzero(ids[level] == g) for g in np.unique(ids[level][ids[level] >= 0])]
        return [m for m in members if len(set(legs[m].tolist())) == 2]

    level_one, level_two = mixed_groups(0), mixed_groups(1)
    assert len(level_one) >= 40, len(level_one)
    assert len(level_two) < len(level_one) / 2, (len(level_two), len(level_one))
    for members in level_two:
        assert not arrived[members].all(), members  # a wrong move made the pair look alike


def test_no_policy_of_the_current_observation_alone_wins_but_one_reading_history_does():
    """Every deterministic policy of the observation (2**6 per task) loses each task with a cell
    between home and target; a policy reading its last move from a K=1 history window wins all."""
    env = _trip()
    for seed in range(12):
        env.reset(seed=seed)
        game = env.unwrapped.state_dict()["game"]
        any_win = False
        for policy in itertools.product("+-", repeat=6):
            env.reset(seed=seed)
            while True:
                move = policy[env.unwrapped.position]
                _, _, terminated, truncated, info = _act(env, move)
                if terminated or truncated:
                    any_win |= info["won"]
                    break
        assert any_win == (abs(game["target"] - game["home"]) == 1), seed

    prompted = history_prompt(_trip(max_position=9), history_length=1)
    wins = 0
    for seed in range(200):
        prompt, _ = prompted.reset(seed=seed)
        while True:
            home, target, here = (
                int(re.findall(rf"{name}: (\d+)", prompt)[-1])
                for name in ("Home", "Target", "Current")
            )
            past = re.findall(r"Current: (\d+)\n.*?action\] (\S+)", prompt, re.S)
            came_back = here == target or (past and (int(past[-1][0]) - here) * (target - home) > 0)
            goal = home if came_back else target
            move = "+" if goal > here else "-"
            prompt, _, terminated, truncated, info = prompted.step(f"<action>{move}</action>")
            if terminated or truncated:
                wins += info["won"]
                break
    assert wins == 200, wins


def test_restored_states_repeat_their_future_and_bad_ones_are_refused():
    env = _trip(traps=2)
    rng = np.random.default_rng(1)
    restored_returning = 0
    for seed in range(40):
        env.reset(seed=seed)
        for _ in range(int(rng.integers(0, 8))):
            if any(_act(env, _right_move(env))[2:4]):
                break
        saved = json.loads(json.dumps(env.unwrapped.state_dict()))
        if saved["done"]:
            continue
        restored_returning += saved["game"]["returning"]
        twin = _trip(traps=2)
        twin.unwrapped.load_state_dict(saved)
        assert twin.unwrapped.state_dict() == saved
        moves = [["+", "-"][int(rng.integers(2))] for _ in range(12)]
        traces = []
        for target in (env, twin):
            trace = []
            for move in moves:
                trace.append(repr(_act(target, move)))
                if target.unwrapped.state_dict()["done"]:
                    break
            traces.append(trace)
        assert traces[0] == traces[1]
    assert restored_returning > 0

    for seed in range(4, 100):  # a walk with a cell between home and target
        env.reset(seed=seed)
        state = env.unwrapped.state_dict()
        game = state["game"]
        if abs(game["target"] - game["home"]) >= 2:
            break
    for bad, match in (
        ({"returning": "yes"}, "bool 'returning'"),
        ({"returning": None}, "bool 'returning'"),
        ({"home": 9}, "int 'home'"),
        ({"home": True}, "int 'home'"),
        ({"home": game["target"]}, "equals the target"),
        ({"traps": [game["home"]]}, "a trap is on the walk"),
        ({"traps": [(game["home"] + game["target"]) // 2]}, "a trap is on the walk"),
        ({"position": game["target"], "returning": False}, "at the target with 'returning'"),
    ):
        with pytest.raises(ValueError, match=match):
            env.unwrapped.load_state_dict({**state, "game": {**game, **bad}})
        assert env.unwrapped.state_dict() == state
    without = {k: v for k, v in game.items() if k != "home"}
    with pytest.raises(ValueError, match="int 'home'"):
        env.unwrapped.load_state_dict({**state, "game": without})
    plain = gym.make("gigpo/NumberLine-v0", max_position=5, traps=2)
    plain.reset(seed=4)
    with pytest.raises(ValueError, match="round_trip=False, but"):
        plain.unwrapped.load_state_dict(state)
    for bad in ("yes", 1, None):
        with pytest.raises(TypeError, match="round_trip"):
            _trip(round_trip=bad)
    with pytest.raises(ValueError, match="hidden_target and round_trip"):
        _trip(hidden_target=True)


def test_round_trip_meets_the_env_contract():
    check_env(_trip(words=True, traps=2, clock=True).unwrapped)
    for observation in contract_play(_trip(traps=2)):
        assert observation.startswith("Home: ") and "Traps: " in observation
