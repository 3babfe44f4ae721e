"""NumberLine's ``traps`` option: dead ends off the walk from the start to the target."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import gigpo_envs  # noqa: F401  (registers the ids)
from gigpo_envs.cards.numberline import NUMBER_WORDS


def _numberline(**kwargs) -> gym.Env:
    return gym.make("gigpo/NumberLine-v0", **{"max_position": 9, "max_steps": 18, **kwargs})


def _lines(observation: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in observation.splitlines())


def _act(env: gym.Env, action: str) -> tuple:
    return env.step(f"<think>...</think><action>{action}</action>")


def _random_response(rng: np.random.Generator) -> str:
    """Mostly a move, sometimes junk that names no action."""
    return f"<action>{['+', '-', '+', '-', 'fly'][int(rng.integers(5))]}</action>"


def test_traps_zero_changes_nothing():
    # Observations, keys and rewards of the default env, recorded before traps existed.
    pinned = [  # (target, start, its key, reward of "-", the next key)
        (3, 5, "554fb8ec304a4b83", 0.0, "42c3fd3ca6ead683"),
        (5, 2, "53e0703fbbd8391b", -1.0, "0ce1a6a0a66154c3"),
        (1, 5, "de6d7dcdcc16ca99", 0.0, "c3f2a4468687ebdd"),
    ]
    for kwargs in ({}, {"traps": 0}):
        env = gym.make("gigpo/NumberLine-v0", **kwargs)
        for seed, (target, start, start_key, reward, after_key) in enumerate(pinned):
            observation, info = env.reset(seed=seed)
            assert (observation, info["anchor"]) == (
                f"Target: {target}\nCurrent: {start}",
                start_key,
            )
            observation, got_reward, terminated, _, info = _act(env, "-")
            assert observation == f"Target: {target}\nCurrent: {start - 1}"
            assert (got_reward, terminated, info["anchor"]) == (reward, False, after_key)
            assert "traps" not in env.unwrapped.state_dict()["game"]
        assert "trap" not in env.unwrapped.render_legend()


def test_same_seed_same_walk_and_traps_only_off_the_walk():
    plain, trapped = _numberline(clock=True), _numberline(clock=True, traps=2)
    chosen = np.zeros(10)  # times each cell was a trap
    expected = np.zeros(10)  # times it would be under a uniform draw
    counts = set()
    for seed in range(1500):
        plain_obs, _ = plain.reset(seed=seed)
        trapped_obs, _ = trapped.reset(seed=seed)
        lines = _lines(trapped_obs)
        assert list(lines) == ["Target", "Current", "Traps", "Clock"]
        assert {k: v for k, v in lines.items() if k != "Traps"} == _lines(plain_obs)
        env = trapped.unwrapped
        low, high = sorted((env.position, env.target))
        free = [cell for cell in range(10) if not low <= cell <= high]
        cells = env.trap_cells
        assert list(cells) == sorted(set(cells)) and set(cells) <= set(free)
        assert len(cells) == min(2, len(free)) == min(2, 9 - (high - low))
        assert lines["Traps"] == (", ".join(map(str, cells)) or "none")
        chosen[list(cells)] += 1
        expected[free] += len(cells) / len(free) if free else 0
        counts.add(len(cells))
    assert counts == {0, 1, 2}  # start and target at both ends leave no cell for a trap
    # Uniform among the free cells: each cell is chosen about as often as it is eligible.
    assert np.all(np.abs(chosen - expected) < 0.15 * expected)


def test_traps_are_written_as_words_with_words():
    env = _numberline(words=True, traps=3)
    observation, info = env.reset(seed=4)
    cells = env.unwrapped.trap_cells
    assert len(cells) == 3
    assert _lines(observation)["Traps"] == ", ".join(NUMBER_WORDS[cell] for cell in cells)
    assert info["anchor_text"] == observation == env.unwrapped.state_text()
    assert "trap" in env.unwrapped.render_legend()
    full = _numberline(traps=3)
    full.reset(seed=0)
    full.unwrapped.load_state_dict(
        {
            **full.unwrapped.state_dict(),
            "game": {"max_position": 9, "position": 0, "target": 9, "traps": []},
        }
    )
    assert full.unwrapped.state_text().endswith("\nTraps: none")


def test_the_straight_walk_always_wins():
    env = _numberline(traps=8)  # as many as can ever fit: every cell off the walk is a trap
    for seed in range(60):
        observation, _ = env.reset(seed=seed)
        start, target = env.unwrapped.position, env.unwrapped.target
        assert len(env.unwrapped.trap_cells) == 9 - abs(target - start)
        direction = "+" if target > start else "-"
        for step in range(abs(target - start)):
            _, reward, terminated, truncated, info = _act(env, direction)
            last = step == abs(target - start) - 1
            assert (reward, terminated, truncated) == (1.0 if last else 0.0, last, False)
        assert info["won"]


def _seed_with_trap_behind(env: gym.Env) -> int:
    """A seed whose start has a trap right beside it, on the side away from the target."""
    for seed in range(500):
        env.reset(seed=seed)
        game = env.unwrapped
        away = game.position + (-1 if game.target > game.position else 1)
        if away in game.trap_cells:
            return seed
    raise AssertionError("no seed with a trap beside the start")


@pytest.mark.parametrize("kwargs", [{}, {"words": True, "clock": True}])
def test_stepping_onto_a_trap_ends_the_episode_lost(kwargs):
    env = _numberline(traps=2, **kwargs)
    seed = _seed_with_trap_behind(env)
    env.reset(seed=seed)
    game = env.unwrapped
    away = "-" if game.target > game.position else "+"
    trap = game.position + (-1 if away == "-" else 1)
    observation, reward, terminated, truncated, info = _act(env, away)
    assert (reward, terminated, truncated) == (-1.0, True, False)
    assert info["won"] is False and info["is_action_valid"] is True
    assert game.position == trap and info["anchor"] == game.state_key()
    assert observation == game.state_text()
    assert game.state_dict()["done"] is True and game.state_dict()["won"] is False
    with pytest.raises(RuntimeError, match="ended"):
        _act(env, away)
    # The same wrong step without traps costs the same and the walk goes on.
    plain = _numberline(**kwargs)
    plain.reset(seed=seed)
    assert _act(plain, away)[1:4] == (-1.0, False, False)


def test_a_wrong_step_beside_no_trap_goes_on():
    env = _numberline(traps=1)
    env.reset(seed=0)
    state = env.unwrapped.state_dict()
    game = {"max_position": 9, "position": 4, "target": 6, "traps": [1]}
    env.unwrapped.load_state_dict({**state, "game": game})
    assert _act(env, "-")[1:4] == (-1.0, False, False)
    assert _act(env, "-")[1:4] == (-1.0, False, False)
    assert _act(env, "-")[1:4] == (-1.0, True, False)  # now onto cell 1
    assert env.unwrapped.position == 1


def test_trap_state_round_trips():
    env = _numberline(traps=2, clock=True)
    rng = np.random.default_rng(0)
    falls = 0
    for seed in range(40):
        env.reset(seed=seed)
        for _ in range(int(rng.integers(0, 3))):
            if env.step(_random_response(rng))[2]:
                break
        saved = json.loads(json.dumps(env.unwrapped.state_dict()))
        assert saved["game"]["traps"] == list(env.unwrapped.trap_cells)
        key, text = env.unwrapped.state_key(), env.unwrapped.state_text()
        restored = _numberline(traps=2, clock=True)
        restored.unwrapped.load_state_dict(saved)
        assert restored.unwrapped.trap_cells == env.unwrapped.trap_cells
        assert (restored.unwrapped.state_key(), restored.unwrapped.state_text()) == (key, text)
        if saved["done"]:
            continue
        future = [_random_response(rng) for _ in range(18)]
        traces = []
        for target in (env, restored):
            trace = []
            for action in future:
                observation, reward, terminated, truncated, info = target.step(action)
                trace.append((observation, reward, terminated, truncated, info["anchor"]))
                if terminated or truncated:
                    falls += terminated and not info["won"]
                    break
            traces.append(trace)
        assert traces[0] == traces[1]
    assert falls > 0  # some of the futures fell into a trap, and were replayed exactly


def test_traps_are_in_the_state_key():
    plain, trapped = _numberline(), _numberline(traps=2)
    keys_differ = 0
    for seed in range(10):
        _, plain_info = plain.reset(seed=seed)
        _, trapped_info = trapped.reset(seed=seed)
        keys_differ += plain_info["anchor"] != trapped_info["anchor"]
    assert keys_differ == 10
    trapped.reset(seed=3)
    state = trapped.unwrapped.state_dict()
    other = [cell for cell in range(10) if cell not in state["game"]["traps"]]
    moved = {**state["game"], "traps": sorted(other[:1] + state["game"]["traps"][1:])}
    twin = _numberline(traps=2)
    twin.unwrapped.load_state_dict({**state, "game": moved})
    assert twin.unwrapped.state_key() != trapped.unwrapped.state_key()


def test_bad_trap_states_are_refused():
    env = _numberline(traps=2)
    env.reset(seed=2)
    state = env.unwrapped.state_dict()
    target = state["game"]["target"]
    base = {k: v for k, v in state["game"].items() if k != "traps"}
    for traps, match in (
        ([target], "on the target"),
        ([0, 0] if target else [1, 1], "repeated"),
        ([10], "trap cell must be an int"),
        ([-1], "trap cell must be an int"),
        ([1.0], "trap cell must be an int"),
        ("2, 8", "list"),
        ([0, 1, 2] if target > 2 else [7, 8, 9], "at most 2"),
    ):
        with pytest.raises(ValueError, match=match):
            env.unwrapped.load_state_dict({**state, "game": {**base, "traps": traps}})
        assert env.unwrapped.state_dict() == state  # a refused state changes nothing
    with pytest.raises(ValueError, match="traps=2 needs"):
        env.unwrapped.load_state_dict({**state, "game": base})
    plain = _numberline()
    plain.reset(seed=2)
    with pytest.raises(ValueError, match="traps=0"):
        plain.unwrapped.load_state_dict(state)


def test_bad_traps_are_refused_naming_the_argument():
    for bad in (-1, 9, 10**9):
        with pytest.raises(ValueError, match="traps must be an int"):
            _numberline(traps=bad)
    with pytest.raises(
        ValueError, match=r"traps must be an int in \[0, max_position - 1\] = \[0, 8\]"
    ):
        _numberline(traps=9)
    with pytest.raises(ValueError, match=r"\[0, 0\]"):
        gym.make("gigpo/NumberLine-v0", max_position=1, traps=1)
    for bad in (1.5, "2", True, None):
        with pytest.raises(TypeError, match="traps must be an int"):
            _numberline(traps=bad)
    assert _numberline(traps=np.int64(8)).unwrapped.traps == 8


def test_trapped_numberline_meets_the_env_contract():
    """The contract checks of tests/envs/test_env_contract.py, on a trapped NumberLine."""
    check_env(_numberline(traps=2, words=True, clock=True).unwrapped)
    env = _numberline(traps=2)
    rng = np.random.default_rng(3)
    ends = {"won": 0, "trap": 0, "truncated": 0}
    for seed in range(60):
        observation, info = env.reset(seed=seed)
        assert info["anchor"] == env.unwrapped.state_key() and info["won"] is False
        assert observation == env.unwrapped.state_text() == info["anchor_text"]
        done = False
        while not done:
            before = env.unwrapped.state_dict()["game"]
            observation, reward, terminated, truncated, info = env.step(_random_response(rng))
            assert observation in env.observation_space and isinstance(reward, float)
            assert info["anchor"] == env.unwrapped.state_key()
            assert observation == env.unwrapped.state_text()
            if not info["is_action_valid"]:
                assert (reward, terminated) == (0.0, False)
                assert env.unwrapped.state_dict()["game"] == before  # a no-op
            done = terminated or truncated
        ends["won" if info["won"] else "trap" if terminated else "truncated"] += 1
    assert all(ends.values()), ends
    again = _numberline(traps=2)
    for seed in range(10):
        assert env.reset(seed=seed)[1]["anchor"] == again.reset(seed=seed)[1]["anchor"]
