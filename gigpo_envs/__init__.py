"""gigpo_envs: text-agent environments with exact anchor states, for GiGPO and any trainer.

Importing the package registers the environments under the ``gigpo/`` namespace::

    import gymnasium as gym
    import gigpo_envs  # noqa: F401

    env = gym.make("gigpo/Sokoban-v0")
    observation, info = env.reset(seed=3)
    observation, reward, terminated, truncated, info = env.step("<action>up</action>")
"""

from __future__ import annotations

from gigpo_envs.base import TextEnv, next_episode_seed, state_digest
from gigpo_envs.parsing import ActionParser
from gigpo_envs.prompts import HistoryPrompt, PromptTemplate, history_prompt
from gigpo_envs.registration import ENVIRONMENTS
from gigpo_envs.vector import GroupVectorEnv, make_group_vec

__all__ = [
    "ENVIRONMENTS",
    "ActionParser",
    "GroupVectorEnv",
    "HistoryPrompt",
    "PromptTemplate",
    "TextEnv",
    "history_prompt",
    "make_group_vec",
    "next_episode_seed",
    "state_digest",
]
