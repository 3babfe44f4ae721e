"""Sokoban: generator, solver, rewards, rendering."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import gigpo_envs  # noqa: F401
from gigpo_envs.sokoban import Layout, generate_room, solve
from gigpo_envs.sokoban.generator import reverse_search
from gigpo_envs.sokoban.room import LEGEND, move


def _check_rooms(seeds, dim_room=(6, 6), num_boxes=1, max_steps=15):
    for seed in seeds:
        room = generate_room(np.random.default_rng(seed), dim_room, num_boxes, max_steps)
        solution = solve(room.layout, room.player, room.boxes)
        assert solution is not None, f"seed {seed}: unsolvable room"
        assert len(solution) == room.solution_length, f"seed {seed}"
        assert 3 <= len(solution) <= max_steps


def test_generated_rooms_are_solvable_in_time():
    _check_rooms(range(300))
    _check_rooms(range(20), dim_room=(7, 7), num_boxes=2, max_steps=20)


@pytest.mark.slow
def test_thousands_of_generated_rooms_are_solvable_in_time():
    _check_rooms(range(300, 5300))


def test_env_rooms_are_solved_by_playing_the_solver_plan():
    env = gym.make("gigpo/Sokoban-v0")
    for seed in range(40):
        _, info = env.reset(seed=seed)
        core = env.unwrapped
        plan = solve(core.layout, core.player, core.boxes)
        assert plan is not None and len(plan) <= core.max_steps
        total = 0.0
        for index, action in enumerate(plan):
            _, reward, terminated, truncated, info = env.step(f"<action>{action}</action>")
            total += reward
            assert terminated is (index == len(plan) - 1)
            assert not truncated
        assert info["won"]
        # -0.1 per move, +1 for the box reaching its target, +10 for solving.
        assert total == pytest.approx(-0.1 * len(plan) + 1.0 + 10.0)


def test_reverse_search_distances_are_optimal_solution_lengths():
    rng = np.random.default_rng(5)
    room = generate_room(rng, (7, 7), 2, 12)
    distance = reverse_search(room.layout, 12)
    states = list(distance.items())
    for index in rng.choice(len(states), size=min(60, len(states)), replace=False):
        (player, boxes), d = states[int(index)]
        assert len(solve(room.layout, player, boxes)) == d


def _load(rows, player, boxes, **kwargs):
    env = gym.make("gigpo/Sokoban-v0", **kwargs)
    env.reset(seed=0)
    state = env.unwrapped.state_dict()
    state["game"] = {"room": rows, "player": player, "boxes": boxes}
    state["done"] = False
    env.unwrapped.load_state_dict(state)
    return env


ROOM = ["########", "#______#", "#O____O#", "#______#", "########"]  # targets (2,1), (2,6)


def _step(env, action):
    _, reward, terminated, truncated, info = env.step(f"<action>{action}</action>")
    game = env.unwrapped.state_dict()["game"]
    return round(reward, 6), terminated, game["player"], game["boxes"], info


def test_rewards_push_on_then_solve():
    env = _load(ROOM, [2, 4], [[2, 3], [2, 5]], max_steps=30)
    assert _step(env, "left")[:4] == (-0.1, False, [2, 3], [[2, 2], [2, 5]])
    assert _step(env, "left")[:4] == (0.9, False, [2, 2], [[2, 1], [2, 5]])
    assert _step(env, "right")[:2] == (-0.1, False)
    assert _step(env, "right")[:2] == (-0.1, False)
    reward, terminated, player, boxes, info = _step(env, "right")
    assert (reward, terminated, player, boxes) == (10.9, True, [2, 5], [[2, 1], [2, 6]])
    assert env.unwrapped.state_text().splitlines()[2] == "#*___P*#"
    assert info["won"]


def test_rewards_push_off_wall_bump_and_blocked_push():
    env = _load(ROOM, [1, 1], [[2, 1], [2, 5]], max_steps=30)
    assert _step(env, "up")[:4] == (-0.1, False, [1, 1], [[2, 1], [2, 5]])  # wall
    assert _step(env, "down")[:4] == (-1.1, False, [2, 1], [[2, 5], [3, 1]])  # off target
    assert _step(env, "down")[:4] == (-0.1, False, [2, 1], [[2, 5], [3, 1]])  # box on wall
    env = _load(ROOM, [2, 2], [[2, 3], [2, 4]], max_steps=30)
    assert _step(env, "right")[:4] == (-0.1, False, [2, 2], [[2, 3], [2, 4]])  # box on box


def test_text_rendering_and_legend():
    env = _load(["######", "#O__O#", "#____#", "######"], [1, 4], [[2, 2], [1, 1]])
    assert env.unwrapped.state_text() == "######\n#*__S#\n#_X__#\n######"
    env = gym.make("gigpo/Sokoban-v0", render_mode="ansi")
    observation, _ = env.reset(seed=2)
    assert env.render() == observation + "\n" + LEGEND
    assert gym.make("gigpo/Sokoban-v0").render() is None
    lines = observation.splitlines()
    assert len(lines) == 6 and all(len(line) == 6 for line in lines)


@pytest.mark.parametrize(
    "rows",
    [
        ["#####", "#_O_#", "#___", "#####"],
        ["#####", "#_O__", "#####"],
        ["#####", "#_O?#", "#####"],
        ["##"],
        [],
    ],
)
def test_bad_rooms_are_refused(rows):
    with pytest.raises(ValueError):
        Layout.from_rows(rows)


def test_bad_states_are_refused():
    env = gym.make("gigpo/Sokoban-v0")
    env.reset(seed=0)
    state = env.unwrapped.state_dict()
    rows = ["######", "#O___#", "#____#", "######"]
    for player, boxes in (([0, 0], [[2, 2]]), ([2, 2], [[2, 2]]), ([2, 3], []), ([9, 9], [[2, 2]])):
        with pytest.raises(ValueError):
            env.unwrapped.load_state_dict(
                {**state, "game": {"room": rows, "player": player, "boxes": boxes}}
            )


def test_arguments():
    env = gym.make("gigpo/Sokoban-v0", dim_room=(8, 9), num_boxes=2, max_steps=30)
    observation, _ = env.reset(seed=1)
    lines = observation.splitlines()
    assert len(lines) == 8 and {len(line) for line in lines} == {9}
    assert sum(line.count("X") + line.count("*") for line in lines) == 2
    with pytest.raises(ValueError, match="max_solution_steps"):
        gym.make("gigpo/Sokoban-v0", max_steps=10, max_solution_steps=12)
    with pytest.raises(ValueError, match="dim_room"):
        gym.make("gigpo/Sokoban-v0", dim_room=(3, 3)).reset(seed=0)
    with pytest.raises(ValueError, match="too large"):
        gym.make("gigpo/Sokoban-v0", dim_room=(100, 100))
    easy = gym.make("gigpo/Sokoban-v0", max_steps=15, max_solution_steps=2, min_solution_steps=1)
    for seed in range(30):
        easy.reset(seed=seed)
        assert 1 <= easy.unwrapped.solution_length <= 2
    with pytest.raises(ValueError, match="num_boxes"):
        gym.make("gigpo/Sokoban-v0", num_boxes=0).reset(seed=0)


def test_move_keeps_boxes_sorted_and_blocks():
    layout = Layout.from_rows(ROOM)
    width = layout.width
    player, boxes, on, off = move(layout, 2 * width + 1, (2 * width + 2, 2 * width + 4), 1)
    assert player == 2 * width + 2 and boxes == (2 * width + 3, 2 * width + 4)
    assert (on, off) == (0, 0)
    _, _, on, off = move(layout, 2 * width + 4, (2 * width + 5, 3 * width + 1), 1)
    assert (on, off) == (1, 0)
    assert move(layout, 2 * width + 2, boxes, 1)[0] == 2 * width + 2
