"""Checks shared by the tests of NumberLine's options (``hidden_target``, ``round_trip``)."""

from __future__ import annotations

from collections.abc import Iterator

import gymnasium as gym
import numpy as np

import gigpo_envs  # noqa: F401  (registers the ids)


def _act(env: gym.Env, action: str) -> tuple:
    return env.step(f"<action>{action}</action>")


def assert_option_off_changes_nothing(option: str) -> None:
    """``option=False`` deals, steps and keys exactly as NumberLine without the option."""
    plain, off = (
        gym.make("gigpo/NumberLine-v0"),
        gym.make("gigpo/NumberLine-v0", **{option: False}),
    )
    for seed in range(20):
        assert plain.reset(seed=seed) == off.reset(seed=seed)
        for action in ("+", "-", "x"):
            step = _act(plain, action)
            assert step == _act(off, action)
            if step[2] or step[3]:
                break
    assert plain.reset(seed=0)[1]["anchor"] == "554fb8ec304a4b83"  # as pinned before the options


def contract_play(env: gym.Env, seeds: int = 40, rng_seed: int = 5) -> Iterator[str]:
    """Plays ``seeds`` episodes of random moves and bad answers, checking the env contract at
    every step (the observation is the state's text and anchor text, the anchor its key, an
    invalid action a no-op); yields each observation for the option's own checks."""
    rng = np.random.default_rng(rng_seed)
    for seed in range(seeds):
        env.reset(seed=seed)
        done = False
        while not done:
            before = env.unwrapped.state_dict()["game"]
            response = f"<action>{['+', '-', 'fly'][int(rng.integers(3))]}</action>"
            observation, _, terminated, truncated, info = env.step(response)
            done = terminated or truncated
            assert observation == env.unwrapped.state_text() == info["anchor_text"]
            assert info["anchor"] == env.unwrapped.state_key()
            if not info["is_action_valid"]:
                assert env.unwrapped.state_dict()["game"] == before  # a no-op
            yield observation
