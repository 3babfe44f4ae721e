"""The local GiGPO trainer: one process, a transformers causal LM, any registered gigpo env.

Each iteration: group rollouts (batched generation for all live envs), step records,
advantages from :mod:`gigpo_algo` (or, for ``algo.estimator: ppo``, a critic's values and
GAE), the PPO clipped loss with KL to a frozen reference, and optimizer steps (and the
critic's). Read :func:`train` top to bottom.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

from training.files import atomic_write_text
from training.local.checkpoint import load_checkpoint, recover_checkpoint, save_checkpoint
from training.local.checks import config_changes, validate
from training.local.config import TrainConfig
from training.local.critic import load_critic
from training.local.metrics import MetricsLog, plot_curves, read_metrics
from training.local.model import (
    limit_trainable_layers,
    load_model,
    load_tokenizer,
    require_train_extra,
    resolve_model_path,
)
from training.local.rollout import Rollout, StepRecords, collect, episode_rows, make_envs
from training.local.tasks import EVAL_SEED_BASE, TaskSplit
from training.local.tensorboard import ScalarLog
from training.local.update import compute_advantages, ppo_targets, ppo_update, step_group_stats
from training.rollouts import prune_rollouts, rows_from_result, write_rollouts

__all__ = [
    "EVAL_SEED_BASE",
    "train",
    "evaluate",
    "play_heldout",
    "train_seeds",
    "check_resume",
    "TrainingDivergedError",
]


def train_seeds(config: TrainConfig, iteration: int, split: TaskSplit | None = None) -> list[int]:
    """The reset seed of each group in iteration ``iteration`` (a function of the config and
    the iteration alone, so a resumed run plays the same tasks)."""
    split = split or task_split(config)
    g = config.env.num_groups
    return split.train_seeds(config.run.seed, iteration * g, g)


def task_split(config: TrainConfig) -> TaskSplit:
    """The run's training / held-out task split (see :mod:`training.local.tasks`)."""
    return TaskSplit(config.env.id, config.env.kwargs, config.env.heldout_fraction)


class TrainingDivergedError(RuntimeError):
    """An update left a weight NaN or infinite; the run stops before it saves them."""


def _check_finite(model: Any, critic: Any, iteration: int) -> None:
    """Raises :class:`TrainingDivergedError` when a trainable weight of the policy (or the
    critic) is not finite, so that no checkpoint ever holds NaN weights."""
    import torch

    for name, network in (("policy", model), ("critic", critic)):
        if network is None:
            continue
        for weight_name, weight in network.named_parameters():
            if weight.requires_grad and not bool(torch.isfinite(weight).all()):
                raise TrainingDivergedError(
                    f"iteration {iteration}: the update made the {name}'s {weight_name} "
                    "non-finite (NaN or inf); nothing of this iteration was saved. Lower "
                    "optim.lr or optim.max_grad_norm"
                )


class ResumeConfigError(ValueError):
    """``run.resume`` found a checkpoint made with another config."""


def check_resume(config: TrainConfig) -> None:
    """Raises :class:`ResumeConfigError` naming the differing keys when ``run.out`` holds a
    checkpoint whose ``config.json`` differs from ``config`` (``run.allow_config_change``
    lets it through). Runs before anything is built; first finishes a checkpoint swap that
    a crash interrupted (:func:`~training.local.checkpoint.recover_checkpoint`).

    Raises:
        ResumeConfigError: the configs differ, or the saved one cannot be read.
        UnsafeCheckpointError: the checkpoint is in the old pickled format.
    """
    out = Path(config.run.out)
    saved_path = out / "config.json"
    if not (config.run.resume and out.is_dir()):
        return
    # A crash during a checkpoint's swap leaves checkpoint.tmp/ or checkpoint.old/: finish
    # it, so that the config check below sees the checkpoint that resume will load.
    if recover_checkpoint(out) is None:
        return
    if not saved_path.is_file():
        raise ResumeConfigError(
            f"{out} holds a checkpoint but no config.json to compare configs with; use "
            "another --out or --run.resume=false"
        )
    try:
        saved = json.loads(saved_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # JSON and UTF-8 errors are ValueErrors
        raise ResumeConfigError(f"cannot read {saved_path} to compare configs: {exc}") from None
    if not isinstance(saved, dict):
        raise ResumeConfigError(f"{saved_path} does not hold a config (a JSON object)")
    changes = config_changes(saved, config)
    if changes and not config.run.allow_config_change:
        raise ResumeConfigError(
            f"{out} holds a checkpoint of a run with another config; differing keys:\n  "
            + "\n  ".join(changes)
            + "\nUse another --out, --run.resume=false to start over, or "
            "--run.allow_config_change=true to continue anyway."
        )


def learning_rate(config: TrainConfig, iteration: int) -> float:
    """The learning rate of iteration ``iteration`` (0-based): linear warmup, then constant."""
    return config.optim.lr * _warmup_factor(config, iteration)


def _warmup_factor(config: TrainConfig, iteration: int) -> float:
    """``min(1, (iteration + 1) / optim.warmup_iterations)``; 1 without warmup."""
    warmup = config.optim.warmup_iterations
    return min(1.0, (iteration + 1) / warmup) if warmup else 1.0


def critic_learning_rate(config: TrainConfig, iteration: int) -> float:
    """PPO's critic learning rate at ``iteration``: ``optim.critic_lr`` (default
    ``optim.lr``) with the policy's warmup."""
    base = config.optim.lr if config.optim.critic_lr is None else config.optim.critic_lr
    return base * _warmup_factor(config, iteration)


def train(config: TrainConfig) -> list[dict[str, Any]]:
    """Runs (or resumes) training; returns the metrics rows of the iterations run now.

    Writes into ``config.run.out``: ``config.json``, ``metrics.jsonl``, ``curve.png``,
    ``checkpoint/``, ``rollouts/`` (step records, :mod:`training.rollouts`) and
    ``tensorboard/`` (see ``run.tensorboard``).
    """
    require_train_extra()
    import torch

    validate(config)  # a config built in code gets the checks a loaded one got
    out = Path(config.run.out)
    check_resume(config)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.json", json.dumps(config.to_dict(), indent=2) + "\n")
    if config.run.threads:
        torch.set_num_threads(config.run.threads)
    _seed_everything(config.run.seed)
    generator = np.random.default_rng(config.run.seed)

    model_path = resolve_model_path(config.model, out)
    tokenizer = load_tokenizer(model_path)
    model = load_model(model_path, config.model.dtype, device=config.model.device)
    limit_trainable_layers(model, config.model.trainable_layers)
    reference = None
    if config.algo.kl_coef > 0:
        reference = load_model(
            model_path, config.model.dtype, trainable=False, device=config.model.device
        )
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=config.optim.lr,
        weight_decay=config.optim.weight_decay,
    )
    critic = critic_optimizer = None
    if config.algo.estimator == "ppo":
        critic = load_critic(
            model_path,
            config.model.dtype,
            device=config.model.device,
            trainable_layers=config.model.trainable_layers,
        )
        critic_optimizer = torch.optim.AdamW(
            [p for p in critic.parameters() if p.requires_grad],
            lr=critic_learning_rate(config, 0),
            weight_decay=config.optim.weight_decay,
        )
    envs = config_envs(config, config.env.num_groups, config.env.group_size)
    split = task_split(config)

    # Seeded again once everything is built: building or converting a model on first use
    # draws from torch's RNG, and a run must not depend on whether its model was cached.
    _seed_everything(config.run.seed)
    start = 0
    if config.run.resume:
        start = (
            load_checkpoint(
                out,
                model=model,
                optimizer=optimizer,
                generator=generator,
                critic=critic,
                critic_optimizer=critic_optimizer,
            )
            or 0
        )
    log = MetricsLog(out, completed=start)
    scalars = ScalarLog(out, completed=start, enabled=config.run.tensorboard)
    prune_rollouts(out, completed=start)
    rows: list[dict[str, Any]] = []
    bar = _progress(config, start)
    for iteration in range(start, config.run.iterations):
        tick = time.perf_counter()
        seeds = train_seeds(config, iteration, split)
        rollout = _play(model, tokenizer, envs, config, seed=seeds)
        records = rollout.records

        adv_tick = time.perf_counter()
        targets = None
        if critic is not None:
            targets = ppo_targets(
                critic,
                records,
                config.algo,
                pad_id=tokenizer.pad_token_id,
                share_prefix=config.model.share_prefix,
            )
            result = targets.result
        else:
            result = compute_advantages(records, config.algo)
        advantages = np.asarray(result.advantages)
        adv_seconds = time.perf_counter() - adv_tick
        if _saves_rollouts(config, iteration):
            save_rollouts(out, iteration, records, result, config)

        update_tick = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(config, iteration)
        for group in critic_optimizer.param_groups if critic_optimizer else []:
            group["lr"] = critic_learning_rate(config, iteration)
        stats = ppo_update(
            model,
            reference,
            optimizer,
            records,
            advantages,
            config.algo,
            pad_id=tokenizer.pad_token_id,
            temperature=config.rollout.temperature,
            max_grad_norm=config.optim.max_grad_norm,
            generator=generator,
            share_prefix=config.model.share_prefix,
            ppo=targets,
            critic=critic,
            critic_optimizer=critic_optimizer,
        )
        if targets is not None:
            stats.update(targets.stats)
        _check_finite(model, critic, iteration)
        update_seconds = time.perf_counter() - update_tick

        row: dict[str, Any] = {
            "iteration": iteration,
            "estimator": config.algo.estimator,
            "success_rate": float(rollout.episode_won.mean()),
            "mean_return": float(rollout.episode_returns.mean()),
            "mean_episode_length": float(rollout.episode_lengths.mean()),
            "valid_action_rate": float(np.mean(records.is_action_valid)),
            "step_records": len(records),
            "generated_tokens": rollout.generated_tokens,
            "mean_abs_advantage": float(np.abs(advantages).mean()),
            "mean_abs_episode_advantage": float(np.abs(result.episode_advantages).mean()),
            "mean_abs_step_advantage": float(np.abs(result.step_advantages).mean()),
            **step_group_stats(records, result, config.algo),
            "lr": learning_rate(config, iteration),
            **stats,
            "time_generation": rollout.generation_seconds,
            "time_env": rollout.env_seconds,
            "time_advantage": adv_seconds,
            "time_update": update_seconds,
        }
        done_iterations = iteration + 1
        if config.run.eval_every and (
            done_iterations % config.run.eval_every == 0 or done_iterations == config.run.iterations
        ):
            row.update(evaluate(model, tokenizer, config, split))
        row["time_iteration"] = time.perf_counter() - tick
        log.write(row)
        scalars.write(row)
        rows.append(row)
        if config.run.checkpoint_every and (
            done_iterations % config.run.checkpoint_every == 0
            or done_iterations == config.run.iterations
        ):
            save_checkpoint(
                out,
                model=model,
                optimizer=optimizer,
                iteration=done_iterations,
                generator=generator,
                critic=critic,
                critic_optimizer=critic_optimizer,
            )
        if bar is not None:
            bar.set_postfix(success=f"{row['success_rate']:.2f}", ret=f"{row['mean_return']:.2f}")
            bar.update(1)
    if bar is not None:
        bar.close()
    scalars.close()
    envs.close()
    split.close()
    label = config.run.label or config.algo.estimator
    plot_curves({label: read_metrics(out)}, out / "curve.png")
    return rows


def _saves_rollouts(config: TrainConfig, iteration: int) -> bool:
    every = config.run.save_rollouts_every
    return bool(every) and (iteration % every == 0 or iteration == config.run.iterations - 1)


def save_rollouts(
    out: Path, iteration: int, records: StepRecords, result: Any, config: TrainConfig
) -> Path:
    """Writes the iteration's step records with their advantages to ``out/rollouts/``."""
    columns = {
        name: getattr(records, name)
        for name in (
            "group_ids", "traj_ids", "rewards", "is_action_valid", "anchors", "anchor_texts",
            "observations", "actions",
        )
    }  # fmt: skip
    rows = rows_from_result(
        iteration, config.algo.estimator, result, columns, config.run.rollout_max_chars
    )
    return write_rollouts(
        out,
        iteration,
        rows,
        source="local",
        estimator=config.algo.estimator,
        max_chars=config.run.rollout_max_chars,
    )


def evaluate(
    model: Any, tokenizer: Any, config: TrainConfig, split: TaskSplit | None = None
) -> dict[str, float]:
    """Success rate, mean return and valid-action rate on held-out tasks (one rollout each,
    the same tasks every time; never trained on: see :mod:`training.local.tasks`), played
    by :func:`play_heldout` at ``rollout.eval_temperature`` in one batch."""
    if config.env.eval_groups == 0:
        return {}
    summary, _ = play_heldout(
        model,
        tokenizer,
        config,
        config.env.eval_groups,
        temperature=config.rollout.eval_temperature,
        batch_size=config.env.eval_groups,
        split=split,
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
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Plays the first ``episodes`` held-out tasks of the config, one rollout each, and
    measures them. The trainer's evaluation and ``python -m training.evaluate`` both call it.

    Args:
        config: env, prompt and rollout settings (``max_new_tokens``, ``response_prefix``,
            ``stop_text``); the seeds are ``split.heldout_seeds(config.run.seed, episodes)``.
        temperature: 0 decodes greedily; top-p applies only when sampling; no top-k.
        batch_size: episodes generated at once.
        split: the run's task split (built from the config and closed again when None).

    Returns:
        ``(summary, episodes)``: ``success_rate`` with its 95% Wilson interval
        (``success_rate_ci95``), ``mean_return`` with its 95% t interval, the
        ``valid_action_rate`` per step, ``mean_episode_length`` (steps), ``episodes``,
        ``steps``, ``generated_tokens``, ``seconds`` (wall) and ``seeds``; and one dict per
        episode (:func:`training.local.rollout.episode_rows`), in seed order.
    """
    from training.stats import mean_ci, wilson_interval

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
            rollout = _play(
                model,
                tokenizer,
                envs,
                config,
                seed=chunk,
                sampling=(temperature, top_p if temperature > 0 else 1.0, 0),
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


def _play(
    model: Any,
    tokenizer: Any,
    envs: Any,
    config: TrainConfig,
    *,
    seed: int | list[int],
    sampling: tuple[float, float, int] | None = None,
) -> Rollout:
    """:func:`collect` with the run's rollout settings; ``sampling`` is
    ``(temperature, top_p, top_k)`` in place of the run's ``rollout`` ones."""
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
    )


def _seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002  (for libraries that use the global RNG)
    torch.manual_seed(seed)


def _progress(config: TrainConfig, start: int) -> Any:
    if not config.run.progress:
        return None
    from tqdm import tqdm

    return tqdm(total=config.run.iterations, initial=start, desc="train", unit="it")
