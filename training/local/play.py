"""Playing episodes with the local trainer's model: a training iteration's group rollouts,
held-out evaluation (the trainer's, and ``gigpo-evaluate``'s), and one row per episode.

Which tasks are trained on and which are held out is :mod:`training.local.tasks`; the
batched generation and env steps are :func:`training.local.rollout.collect`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from training.local.rollout import Rollout, collect, make_envs
from training.local.schema import TrainConfig
from training.local.tasks import TaskSplit
from training.stats import mean_ci, wilson_interval


def task_split(config: TrainConfig) -> TaskSplit:
    """The run's training / held-out task split (see :mod:`training.local.tasks`)."""
    return TaskSplit(config.env.id, config.env.kwargs, config.env.heldout_fraction)


def train_seeds(config: TrainConfig, iteration: int, split: TaskSplit | None = None) -> list[int]:
    """The reset seed of each group in iteration ``iteration`` (a function of the config and
    the iteration alone, so a resumed run plays the same tasks)."""
    split = split or task_split(config)
    g = config.env.num_groups
    return split.train_seeds(config.run.seed, iteration * g, g)


def config_envs(config: TrainConfig, num_groups: int, group_size: int) -> Any:
    """:func:`make_envs` for ``num_groups`` tasks x ``group_size`` rollouts, with the env
    section's id, kwargs, history length and prompt settings."""
    env = config.env
    return make_envs(
        env.id,
        num_groups,
        group_size,
        env.history_length,
        env.format_instruction,
        env.kwargs,
        env.template,
    )


def play(
    model: Any,
    tokenizer: Any,
    envs: Any,
    config: TrainConfig,
    *,
    seed: int | list[int],
    sampling: tuple[float, float, int] | None = None,
    engine: Any = None,
) -> Rollout:
    """:func:`collect` with the run's rollout settings; ``sampling`` is
    ``(temperature, top_p, top_k)`` in place of the run's ``rollout`` ones; ``engine``: the
    vLLM engine that samples (None: the hf engine, :mod:`training.local.engine`)."""
    r = config.rollout
    temperature, top_p, top_k = sampling or (r.temperature, r.top_p, r.top_k)
    return collect(
        model,
        tokenizer,
        envs,
        seed=seed,
        max_new_tokens=r.max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        response_prefix=r.response_prefix,
        stop_text=r.stop_text,
        share_prefix=config.model.share_prefix,
        max_prompt_tokens=r.max_prompt_tokens,
        cache=r.cache,
        engine=engine,
    )


def evaluate_heldout(
    model: Any,
    tokenizer: Any,
    config: TrainConfig,
    split: TaskSplit | None = None,
    engine: Any = None,
) -> dict[str, float]:
    """Success rate, mean return and valid-action rate on held-out tasks (one rollout each,
    the same tasks every time; never trained on: see :mod:`training.local.tasks`), played
    by :func:`play_heldout` at ``eval.temperature`` in one batch."""
    if config.eval.groups == 0:
        return {}
    summary, _ = play_heldout(
        model,
        tokenizer,
        config,
        config.eval.groups,
        temperature=config.eval.temperature,
        batch_size=config.eval.groups,
        split=split,
        engine=engine,
    )
    return {
        "eval_success_rate": summary["success_rate"],
        "eval_mean_return": summary["mean_return"],
        "eval_valid_action_rate": summary["valid_action_rate"],
    }


def play_heldout(
    model: Any,
    tokenizer: Any,
    config: TrainConfig,
    episodes: int,
    *,
    temperature: float,
    top_p: float = 1.0,
    batch_size: int = 32,
    split: TaskSplit | None = None,
    engine: Any = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Plays the first ``episodes`` held-out tasks of the config, one rollout each, and
    measures them. The trainer's evaluation and ``gigpo-evaluate`` both call it.

    Args:
        config: env, prompt and rollout settings (``max_new_tokens``, ``response_prefix``,
            ``stop_text``); the seeds are ``split.heldout_seeds(config.run.seed, episodes)``.
        temperature: 0 decodes greedily; top-p applies only when sampling; no top-k.
        batch_size: episodes generated at once.
        split: the run's task split (built from the config and closed again when None).
        engine: the vLLM engine that samples (None: the hf engine).

    Returns:
        ``(summary, episodes)``: ``success_rate`` with its 95% Wilson interval
        (``success_rate_ci95``), ``mean_return`` with its 95% t interval, the
        ``valid_action_rate`` per step, ``mean_episode_length`` (steps), ``episodes``,
        ``steps``, ``generated_tokens``, ``seconds`` (wall) and ``seeds``; and one dict per
        episode (:func:`episode_rows`), in seed order.
    """
    own_split = split is None
    split = split or task_split(config)
    try:
        seeds = split.heldout_seeds(config.run.seed, episodes)
    finally:
        if own_split:
            split.close()
    rows: list[dict[str, Any]] = []
    valid_steps = steps = tokens = 0
    tick = time.perf_counter()
    for start in range(0, len(seeds), batch_size):
        chunk = seeds[start : start + batch_size]
        envs = config_envs(config, len(chunk), 1)
        try:
            rollout = play(
                model,
                tokenizer,
                envs,
                config,
                seed=chunk,
                sampling=(temperature, top_p if temperature > 0 else 1.0, 0),
                engine=engine,
            )
        finally:
            envs.close()
        rows += episode_rows(rollout, chunk, first_index=start)
        valid_steps += int(np.sum(rollout.records.is_action_valid))
        steps += len(rollout.records)
        tokens += rollout.generated_tokens
    won = [row["won"] for row in rows]
    returns = [row["return"] for row in rows]
    low, high = wilson_interval(sum(won), len(won))
    mean_return, half = mean_ci(returns)
    summary = {
        "success_rate": sum(won) / len(won),
        "success_rate_ci95": [low, high],
        "mean_return": mean_return,
        "mean_return_ci95": [mean_return - half, mean_return + half],
        "valid_action_rate": valid_steps / steps if steps else float("nan"),
        "mean_episode_length": float(np.mean([row["length"] for row in rows])),
        "episodes": len(rows),
        "steps": steps,
        "generated_tokens": tokens,
        "seconds": time.perf_counter() - tick,
        "seeds": seeds,
    }
    return summary, rows


def episode_rows(rollout: Rollout, seeds: list[int], first_index: int = 0) -> list[dict[str, Any]]:
    """One dict per episode of a one-rollout-per-task ``rollout`` (``seeds[k]`` is episode
    ``k``'s task seed): ``episode`` (``first_index + k``), ``seed``, ``task`` (the first
    step's anchor), ``won``, ``return``, ``length`` (steps) and ``steps``, each step's
    ``observation``, ``action``, ``reward`` and ``valid``, in order."""
    records = rollout.records
    episodes: list[dict[str, Any]] = [
        {
            "episode": first_index + k,
            "seed": int(seed),
            "task": None,
            "won": bool(rollout.episode_won[k]),
            "return": float(rollout.episode_returns[k]),
            "length": int(rollout.episode_lengths[k]),
            "steps": [],
        }
        for k, seed in enumerate(seeds)
    ]
    for i, traj in enumerate(records.traj_ids):
        episode = episodes[traj]
        if episode["task"] is None:
            episode["task"] = records.anchors[i]
        episode["steps"].append(
            {
                "observation": records.observations[i],
                "action": records.actions[i],
                "reward": float(records.rewards[i]),
                "valid": bool(records.is_action_valid[i]),
            }
        )
    return episodes
