"""Group rollouts: ``num_groups x group_size`` environments on Gymnasium's vector API.

Sub-environment ``i`` belongs to group ``i // group_size``. On every explicit reset all
members of a group get the same seed, so they start from the same state; different groups
get different seeds. ``reset(seed=s)`` seeds group ``g`` with ``s + g``; the ``r``-th reset
without a seed after that uses ``s + g + r * num_groups``, so rounds never repeat a state.

Autoreset follows Gymnasium 1.x's ``NEXT_STEP`` mode (the default): the step after an episode
ends, that sub-environment is reset instead of stepped, its action is ignored, and it returns
the new first observation with reward 0 and ``terminated = truncated = False``. The
sub-environment resets without a seed, which in a :class:`~gigpo_envs.base.TextEnv` means
"the next seed of my seed chain" (see :func:`~gigpo_envs.base.next_episode_seed`). Members of
a group share their chain, so the ``k``-th episode of every member of a group starts from the
same state, even when the members finish their episodes at different steps.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv, VectorWrapper

from gigpo_envs.arguments import SEED_MAX, check_int, check_seed


def _make_env(
    env_id: str, env_kwargs: dict[str, Any], wrappers: tuple[Callable[[gym.Env], gym.Env], ...]
) -> gym.Env:
    import gigpo_envs.registration  # noqa: F401  (registers the gigpo/ ids in worker processes too)

    env = gym.make(env_id, **env_kwargs)
    for wrapper in wrappers:
        env = wrapper(env)
    return env


class GroupVectorEnv(VectorWrapper):
    """A vector env of ``num_groups`` groups of ``group_size`` same-start environments.

    Attributes:
      num_groups, group_size: the layout; ``num_envs == num_groups * group_size``.
      group_ids: int64 array, shape ``(num_envs,)``: the group of each sub-environment.
      anchors: object array, shape ``(num_envs,)``: ``info["anchor"]`` of each
        sub-environment's current observation (after the last reset or step).
      anchor_texts: object array, shape ``(num_envs,)``: ``info["anchor_text"]`` likewise
        (the state's ``state_text()``, for similarity grouping); None for an env without it.
      group_seeds: int64 array, shape ``(num_groups,)``: the seeds of the last explicit reset.

    ``reset`` and ``step`` also put ``group_id`` (same as ``group_ids``) into ``info``.
    """

    def __init__(self, env: VectorEnv, num_groups: int, group_size: int, seed: int) -> None:
        super().__init__(env)
        self.num_groups = num_groups
        self.group_size = group_size
        self.group_ids = np.repeat(np.arange(num_groups, dtype=np.int64), group_size)
        self.anchors = np.full(num_groups * group_size, None, dtype=object)
        self.anchor_texts = np.full(num_groups * group_size, None, dtype=object)
        self.group_seeds = np.zeros(num_groups, dtype=np.int64)
        self._base_seed = seed
        self._round = 0

    def reset(
        self,
        *,
        seed: int | Sequence[int] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Resets every sub-environment; members of a group get the same seed.

        Args:
          seed: None for the next round of seeds; an int ``s`` to restart the seed
            schedule at ``s`` (group ``g`` gets ``s + g``); or a sequence of
            ``num_groups`` ints, the seed of each group (the schedule then continues
            after the largest of them). Every seed a group gets must be an int in
            ``0 .. 2**63 - 1``, as :meth:`TextEnv.reset <gigpo_envs.base.TextEnv.reset>` asks.
          options: passed to every sub-environment.
        """
        if isinstance(seed, Sequence | np.ndarray) and not isinstance(seed, str):
            seeds = [check_seed(s) for s in seed]
            if len(seeds) != self.num_groups:
                raise ValueError(
                    f"seed has {len(seeds)} entries, need one per group ({self.num_groups})"
                )
            self._base_seed, self._round = max(seeds) + 1, 0
            self.group_seeds = np.asarray(seeds, dtype=np.int64)
        else:
            base, round_ = (self._base_seed, self._round) if seed is None else (check_seed(seed), 0)
            first = base + round_ * self.num_groups
            if first + self.num_groups - 1 > SEED_MAX:
                raise ValueError(
                    f"the seed schedule from {base} runs past 2**63 - 1, the largest episode "
                    f"seed, at round {round_}; reset(seed=s) with a smaller s"
                )
            self._base_seed, self._round = base, round_ + 1
            self.group_seeds = np.arange(first, first + self.num_groups, dtype=np.int64)
        env_seeds = [int(s) for s in np.repeat(self.group_seeds, self.group_size)]
        observations, infos = self.env.reset(seed=env_seeds, options=options)
        return observations, self._annotate(infos)

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Steps every sub-environment with its raw action text (a sequence of ``num_envs`` str)."""
        observations, rewards, terminations, truncations, infos = self.env.step(tuple(actions))
        return observations, rewards, terminations, truncations, self._annotate(infos)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Returns attribute ``name`` of every sub-environment."""
        return self.env.get_attr(name)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Calls method ``name`` of every sub-environment; e.g. ``call("state_key")``."""
        return self.env.call(name, *args, **kwargs)

    def _annotate(self, infos: dict[str, Any]) -> dict[str, Any]:
        if "anchor" in infos:
            mask = infos.get("_anchor", np.ones(self.num_envs, dtype=bool))
            self.anchors[mask] = infos["anchor"][mask]
        if "anchor_text" in infos:
            mask = infos.get("_anchor_text", np.ones(self.num_envs, dtype=bool))
            self.anchor_texts[mask] = infos["anchor_text"][mask]
        infos["group_id"] = self.group_ids.copy()
        return infos


def make_group_vec(
    env_id: str,
    num_groups: int,
    group_size: int,
    seed: int = 0,
    vectorization: str = "sync",
    autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
    **env_kwargs: Any,
) -> GroupVectorEnv:
    """Builds ``num_groups * group_size`` copies of ``env_id`` for group rollouts.

    Args:
      env_id: a registered id, e.g. ``"gigpo/Sokoban-v0"``.
      num_groups: number of groups (different start states).
      group_size: environments per group (same start state).
      seed: the seed schedule's start: the first reset seeds group ``g`` with ``seed + g``.
      vectorization: ``"sync"`` (one process) or ``"async"`` (one worker process per env).
      autoreset_mode: Gymnasium autoreset mode; ``NEXT_STEP`` (default) is documented above.
      wrappers: applied in order to every sub-environment, e.g.
        ``[functools.partial(HistoryPrompt, history_length=2)]`` for prompts as observations
        (must be picklable for ``"async"``).
      **env_kwargs: passed to ``gymnasium.make`` for every sub-environment.

    Returns:
      A :class:`GroupVectorEnv`; observations are tuples of ``num_envs`` strings, actions a
      sequence of ``num_envs`` strings.
    """
    num_groups = check_int("num_groups", num_groups, 1)
    group_size = check_int("group_size", group_size, 1)
    check_seed(seed)
    gym.spec(env_id)  # raises a clear error for an unknown id, before any worker starts
    env_fns = [
        functools.partial(_make_env, env_id, dict(env_kwargs), tuple(wrappers))
        for _ in range(num_groups * group_size)
    ]
    if vectorization == "sync":
        env: VectorEnv = SyncVectorEnv(env_fns, autoreset_mode=autoreset_mode)
    elif vectorization == "async":
        env = AsyncVectorEnv(env_fns, shared_memory=False, autoreset_mode=autoreset_mode)
    else:
        raise ValueError(f"vectorization must be 'sync' or 'async', got {vectorization!r}")
    return GroupVectorEnv(env, int(num_groups), int(group_size), int(seed))
