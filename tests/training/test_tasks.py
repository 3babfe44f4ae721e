"""Held-out tasks are never trained on: the split is by the task (its start state), not the seed."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import gigpo_envs  # noqa: F401  (registers the ids)
from gigpo_envs import make_group_vec
from training.local.config import load_config
from training.local.play import train_seeds
from training.local.tasks import EVAL_SEED_BASE, TaskSplit, heldout_score, is_heldout

NUMBERLINE = {"max_position": 5, "max_steps": 5}


def _start(seed: int) -> tuple[int, int]:
    env = gym.make("gigpo/NumberLine-v0", **NUMBERLINE)
    env.reset(seed=seed)
    return env.unwrapped.position, env.unwrapped.target


def test_training_and_evaluation_tasks_are_disjoint_by_construction():
    config = load_config(
        None,
        [
            "--env.id=gigpo/NumberLine-v0",
            "--env.kwargs={max_position: 5, max_steps: 5}",
            "--env.num_groups=8",
            "--env.heldout_fraction=0.25",
        ],
    )
    split = TaskSplit(config.env.id, config.env.kwargs, config.env.heldout_fraction)
    trained = {
        _start(s) for it in range(60) for s in train_seeds(config, it, split)
    }  # 480 episodes' starts
    held = {_start(s) for s in split.heldout_seeds(config.run.seed, 40)}
    all_tasks = {(p, t) for p in range(6) for t in range(6) if p != t}
    assert trained | held == all_tasks  # every task is on one side ...
    assert not trained & held  # ... and only one
    assert 0.1 < len(held) / len(all_tasks) < 0.45  # about a quarter, by the hash
    # The side of a task depends on the task only: another run seed, the same split.
    other = TaskSplit(config.env.id, config.env.kwargs, 0.25)
    held_other_run = {_start(s) for s in other.heldout_seeds(7, 40)}
    assert held_other_run == held
    split.close()
    other.close()


def test_the_seed_schedule_is_a_function_of_the_iteration():
    config = load_config(None, ["--env.id=gigpo/NumberLine-v0", "--env.heldout_fraction=0.3"])
    fresh = TaskSplit(config.env.id, config.env.kwargs, 0.3)
    warm = TaskSplit(config.env.id, config.env.kwargs, 0.3)
    for it in range(5):
        train_seeds(config, it, warm)
    assert train_seeds(config, 5, fresh) == train_seeds(config, 5, warm)  # resume-safe
    seeds = [s for it in range(6) for s in train_seeds(config, it, warm)]
    assert len(seeds) == len(set(seeds))  # no seed twice


def test_no_split_keeps_the_plain_schedule():
    config = load_config(None, ["--run.seed=2", "--env.num_groups=3"])
    assert train_seeds(config, 4) == [2_000_012, 2_000_013, 2_000_014]
    split = TaskSplit(config.env.id, config.env.kwargs, 0.0)
    assert split.heldout_seeds(2, 2) == [EVAL_SEED_BASE + 2_000_000, EVAL_SEED_BASE + 2_000_001]


def test_heldout_score_is_stable_and_uniform_enough():
    # A fixed number for a fixed key (a digest, not Python's hash()).
    assert heldout_score("abc") == heldout_score("abc")
    scores = [heldout_score(f"{i:016x}") for i in range(2000)]
    assert 0.2 < np.mean(np.array(scores) < 0.25) < 0.3
    assert is_heldout("abc", 1.0 - 1e-12) and not is_heldout("abc", 0.0)


def test_a_split_the_task_space_cannot_fill_is_a_clear_error():
    # NumberLine on 0..1 has two tasks; hold out less than either task's score: no held-out
    # task exists, and asking for one is an error, not an endless search.
    probe = TaskSplit("gigpo/NumberLine-v0", {"max_position": 1}, 0.5)
    keys = {probe.task_key(s) for s in range(20)}
    assert len(keys) == 2
    fraction = min(heldout_score(k) for k in keys) / 2
    split = TaskSplit("gigpo/NumberLine-v0", {"max_position": 1}, fraction)
    with pytest.raises(ValueError, match="task space is too small"):
        split.heldout_seeds(0, 1)
    assert len(split.train_seeds(0, 0, 3)) == 3  # the other side is fine
    with pytest.raises(ValueError, match="heldout_fraction must be in"):
        TaskSplit("gigpo/NumberLine-v0", {}, 1.0)


def test_group_vector_env_takes_one_seed_per_group():
    envs = make_group_vec("gigpo/NumberLine-v0", 3, 2, **NUMBERLINE)
    envs.reset(seed=[11, 4, 29])
    assert envs.group_seeds.tolist() == [11, 4, 29]
    starts = [(e.unwrapped.position, e.unwrapped.target) for e in envs.env.envs]
    assert starts == [_start(11)] * 2 + [_start(4)] * 2 + [_start(29)] * 2
    assert list(envs.anchor_texts) == [e.unwrapped.state_text() for e in envs.env.envs]
    with pytest.raises(ValueError, match="one per group"):
        envs.reset(seed=[1, 2])
    with pytest.raises(ValueError, match=r"seed must be an int in \[0, 2\*\*63 - 1\]"):
        envs.reset(seed=[1, -2, 3])
    envs.close()
