"""Misbehaving environments for the env worker pool's error tests (tests/envs/test_env_workers.py).

They live in a module of their own, importable by name, because the pool's workers are
spawned processes: a factory reaches them pickled by reference. Each wraps a real gigpo
environment and misbehaves in one way on ``step`` (the lifetime tests,
tests/envs/test_env_workers_lifetime.py, hang a worker with ``hang`` and
:func:`stubborn_sokoban`).
"""

from __future__ import annotations

import signal
import sys
import time

import gymnasium as gym

from gigpo_envs.workers import make_env


class _Misbehaving(gym.Wrapper):
    def __init__(self, env: gym.Env, how: str) -> None:
        super().__init__(env)
        self.how = how

    def step(self, action):
        if action == "misbehave":
            if self.how == "exit":
                sys.exit(3)
            if self.how == "sleep":
                time.sleep(60)
            if self.how == "hang":
                time.sleep(3600)
            if self.how == "nap":
                time.sleep(1)
            if self.how == "unpicklable":
                observation, reward, terminated, truncated, info = self.env.step(action)
                return observation, reward, terminated, truncated, dict(info, f=lambda: 0)
            if self.how == "custom":
                raise NotPicklableError(lambda: 0)
        return self.env.step(action)


class NotPicklableError(Exception):
    """An exception whose argument does not pickle."""


class _Stubborn(gym.Wrapper):
    """Ignores SIGTERM from its first ``reset`` on, and hangs in every ``step``."""

    def reset(self, **kwargs):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        return self.env.reset(**kwargs)

    def step(self, action):
        time.sleep(3600)
        return self.env.step(action)


def stubborn_sokoban() -> gym.Env:
    return _Stubborn(make_env("gigpo/Sokoban-v0"))


def misbehaving_sokoban(how: str) -> gym.Env:
    return _Misbehaving(make_env("gigpo/Sokoban-v0"), how)


def failing_factory() -> gym.Env:
    return make_env("gigpo/NoSuchEnv-v0")


def numberline_with_history(history_length: int) -> gym.Env:
    from gigpo_envs import history_prompt

    return history_prompt(make_env("gigpo/NumberLine-v0"), history_length)
