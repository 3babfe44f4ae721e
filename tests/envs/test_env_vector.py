"""make_group_vec: same start within a group, also after autoreset."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

import gigpo_envs
from gigpo_envs import HistoryPrompt, make_group_vec, next_episode_seed


def _first_observation(env_id: str, seed: int) -> str:
    return gym.make(env_id).reset(seed=seed)[0]


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_groups_share_their_start_and_differ_from_each_other(vectorization):
    env_id, num_groups, group_size = "gigpo/Sokoban-v0", 3, 2
    vec = make_group_vec(env_id, num_groups, group_size, seed=10, vectorization=vectorization)
    try:
        observations, infos = vec.reset()
        assert vec.num_envs == 6
        assert vec.group_ids.tolist() == [0, 0, 1, 1, 2, 2]
        assert infos["group_id"].tolist() == [0, 0, 1, 1, 2, 2]
        assert vec.group_seeds.tolist() == [10, 11, 12]
        for i in range(vec.num_envs):
            group = i // group_size
            assert observations[i] == _first_observation(env_id, 10 + group)
            assert vec.anchors[i] == infos["anchor"][i]
        assert len({observations[0], observations[2], observations[4]}) == 3
        # The next reset without a seed is a new round with new group seeds.
        observations, _ = vec.reset()
        assert vec.group_seeds.tolist() == [13, 14, 15]
        assert observations[0] == observations[1] == _first_observation(env_id, 13)
        # An explicit seed restarts the schedule.
        observations, _ = vec.reset(seed=10)
        assert observations[2] == _first_observation(env_id, 11)
    finally:
        vec.close()


def _episode_starts(vectorization: str) -> tuple[list[list[str]], list[list[float]]]:
    """NumberLine, 2 groups x 2: member 0 walks to the target, member 1 sends junk."""
    vec = make_group_vec("gigpo/NumberLine-v0", 2, 2, seed=3, vectorization=vectorization)
    starts: list[list[str]] = [[] for _ in range(4)]
    autoreset_rewards: list[list[float]] = [[] for _ in range(4)]
    try:
        observations, _ = vec.reset()
        for i in range(4):
            starts[i].append(observations[i])
        pending = np.zeros(4, dtype=bool)
        for _ in range(40):
            actions = []
            for i, observation in enumerate(observations):
                target, current = (int(line.split(": ")[1]) for line in observation.splitlines())
                good = "<action>+</action>" if target > current else "<action>-</action>"
                actions.append(good if i % 2 == 0 else "I refuse to use the tags")
            observations, rewards, terminations, truncations, infos = vec.step(actions)
            for i in range(4):
                if pending[i]:  # NEXT_STEP: this step was the reset of sub-env i
                    starts[i].append(observations[i])
                    autoreset_rewards[i].append(float(rewards[i]))
                    assert not terminations[i] and not truncations[i]
                    assert infos["anchor"][i] == vec.anchors[i]
            pending = terminations | truncations
    finally:
        vec.close()
    return starts, autoreset_rewards


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_autoreset_keeps_each_group_in_step(vectorization):
    starts, autoreset_rewards = _episode_starts(vectorization)
    # The walker finishes far more episodes than the junk sender (truncated at 10 steps).
    assert len(starts[0]) > len(starts[1]) >= 3
    for group in range(2):
        walker, idler = starts[2 * group], starts[2 * group + 1]
        common = min(len(walker), len(idler))
        assert walker[:common] == idler[:common]
        # And the k-th episode starts where the seed chain of the group's seed says.
        seed = 3 + group
        for k in range(common):
            assert walker[k] == _first_observation("gigpo/NumberLine-v0", seed)
            seed = next_episode_seed(seed)
    assert starts[0] != starts[2]
    assert all(reward == 0.0 for rewards in autoreset_rewards for reward in rewards)


def test_env_kwargs_reach_every_sub_env():
    vec = make_group_vec("gigpo/NumberLine-v0", 2, 2, seed=0, max_position=50, max_steps=3)
    try:
        assert vec.get_attr("max_position") == (50, 50, 50, 50)
        vec.reset()
        for _ in range(3):
            *_, truncations, _ = vec.step(["junk"] * 4)
        assert truncations.all()
    finally:
        vec.close()


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_wrappers_give_prompts_as_observations(vectorization):
    prompt = functools.partial(HistoryPrompt, history_length=1)
    vec = make_group_vec(
        "gigpo/EZPoints-v0", 1, 2, seed=5, vectorization=vectorization, wrappers=[prompt]
    )
    try:
        observations, infos = vec.reset()
        expected, _ = HistoryPrompt(gym.make("gigpo/EZPoints-v0"), history_length=1).reset(seed=5)
        assert observations == (expected, expected)
        observations, *_ = vec.step(["<action>=</action>", "<action>(</action>"])
        assert "[Step 0 action] (" in observations[1]
    finally:
        vec.close()


def test_bad_arguments_are_refused():
    for kwargs in ({"num_groups": 0}, {"group_size": -1}, {"num_groups": 1.5}, {"seed": -3}):
        arguments = {"num_groups": 2, "group_size": 2, "seed": 0, **kwargs}
        with pytest.raises(ValueError):
            make_group_vec("gigpo/NumberLine-v0", **arguments)
    with pytest.raises(ValueError, match="vectorization"):
        make_group_vec("gigpo/NumberLine-v0", 1, 1, vectorization="threads")
    with pytest.raises(gym.error.Error):
        make_group_vec("gigpo/NoSuchEnv-v0", 1, 1)
    vec = make_group_vec("gigpo/NumberLine-v0", 1, 2)
    with pytest.raises(ValueError, match="seed"):
        vec.reset(seed=-1)
    vec.close()


def test_registered_ids_are_all_vectorizable():
    for env_id in gigpo_envs.ENVIRONMENTS:
        vec = make_group_vec(env_id, 2, 2, seed=1)
        observations, infos = vec.reset()
        assert observations[0] == observations[1] and infos["anchor"][0] == infos["anchor"][1]
        vec.step(["<action>x</action>"] * 4)
        vec.close()
