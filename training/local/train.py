"""The local GiGPO trainer: one process, a transformers causal LM, any registered gigpo env.

Each iteration: group rollouts (batched generation for all live envs) into step records,
their step groups, advantages (:mod:`training.advantages`; for ``algo.estimator: ppo`` a
critic's values and GAE, :mod:`training.local.critic`), and the policy update
(:mod:`training.local.policy`): the clipped loss with KL to a frozen reference, and the
critic's step. Read :func:`train` top to bottom.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from training.advantages import Advantages, critic_free_advantages, step_groups
from training.files import atomic_write_text
from training.local.allocator import keep_freed_memory
from training.local.checkpoint import load_checkpoint, save_checkpoint
from training.local.checks import validate
from training.local.critic import ppo_targets
from training.local.engine import build_engine
from training.local.memory import check_fits, free_memory, run_plan
from training.local.metrics import MetricsLog, iteration_row, plot_curves, read_metrics
from training.local.model import (
    learning_rate,
    load_models,
    require_train_extra,
    resolve_model_path,
)
from training.local.play import config_envs, evaluate_heldout, play, task_split, train_seeds
from training.local.policy import check_finite, policy_update
from training.local.precision import compute, prepare_models, resolve_compute_dtype
from training.local.prompts import check_first_prompt
from training.local.resume import check_resume, check_run_folders
from training.local.schema import TrainConfig, resolve_defaults
from training.local.shapes import model_shape
from training.local.threads import ThreadGovernor
from training.local.trackers import open_trackers
from training.locks import hold_folder
from training.record_files import prune_rollouts, record_rows, write_rollouts
from training.records import StepRecords
from training.stats import step_group_summary

__all__ = ["save_rollouts", "train"]


def train(config: TrainConfig) -> list[dict[str, Any]]:
    """Runs (or resumes) training; returns the metrics rows of the iterations run now. A run
    whose checkpoint already completed ``run.iterations`` prints one line saying so and
    returns none, before any model is built.

    Writes into ``config.run.out``: ``config.json``, ``metrics.jsonl``, ``curve.png``,
    ``checkpoint/``, ``rollouts/`` (step records, :mod:`training.record_files`) and
    the trackers' files (``tensorboard/``, ``trackers.json``; see ``run.report_to``).

    The run holds ``run.out`` for itself from start to end (:func:`training.locks.hold_folder`,
    kind ``train``): a second writer, or a folder another kind of command made, is refused
    before anything is read or written there.

    Raises:
        ConfigError: the run's memory plan (:mod:`training.local.memory`) does not fit the
            device's free memory (or ``$GIGPO_FREE_MEMORY_GIB``); raised before any weight
            loads, naming the settings to change. A ``model.lora_target_modules`` name that
            matches no layer of the model is refused before ``run.out`` is made.
        FolderLockError: ``run.out`` is held by another process (FolderBusyError, naming it)
            or holds another kind of output (FolderKindError).
        ResumeConfigError, UnsafeCheckpointError: as
            :func:`training.local.resume.check_resume`.
    """
    require_train_extra()

    # a config built in code gets the defaults and checks a loaded one got
    validate(resolve_defaults(config))
    m = config.model
    if m.lora_rank and m.lora_target_modules != ["all-linear"]:
        model_shape(config)  # a target no layer has: refused, as by --dry-run, before --out
    with hold_folder(Path(config.run.out), "train", "gigpo-train"):
        return _train_held(config)


def _train_held(config: TrainConfig) -> list[dict[str, Any]]:
    """:func:`train`'s run, with ``run.out`` held by this process."""
    out = Path(config.run.out)
    check_run_folders(out)  # a link planted as RUN/tensorboard, ... is refused here
    _pin_revision(config)
    done = check_resume(config)
    if done is not None and done >= config.run.iterations:  # nothing to train: build nothing
        iterations = f"{done} iteration{'s' if done != 1 else ''}"
        print(f"{out} already finished its {iterations} (resume adds none); raise "
              "run.iterations to train more", flush=True)  # fmt: skip
        return []
    atomic_write_text(out / "config.json", json.dumps(config.to_dict(), indent=2) + "\n")
    if config.run.keep_freed_memory:
        keep_freed_memory()
    threads = ThreadGovernor(config.run.threads)
    threads.update()
    dtype, why = resolve_compute_dtype(config.model.compute_dtype, config.model.device)
    weights = (
        f"{dtype} base, {config.model.dtype} LoRA" if config.model.lora_rank else config.model.dtype
    )
    print(f"training: compute {dtype} ({why}); weights {weights}; torch threads "
          f"{'fixed at ' if config.run.threads else 'chosen per iteration, now '}"
          f"{threads.threads} of {threads.cores} cores; engine {config.rollout.engine}",
          file=sys.stderr)  # fmt: skip
    # The memory plan, before any weight loads: a run that cannot fit stops here.
    capped = config.rollout.max_prompt_tokens > 0  # else the tokenizer counts a first prompt
    plan = run_plan(config, None if capped else resolve_model_path(config.model, out))
    print("\n".join(plan.lines()), file=sys.stderr)
    check_fits(plan, free_memory(config.model.device))
    if capped:  # a cap below the first prompt stops here, not at the first step
        check_first_prompt(config, resolve_model_path(config.model, out))
    _seed_everything(config.run.seed)
    generator = np.random.default_rng(config.run.seed)
    models = load_models(config, out)
    model, tokenizer, critic = models.policy, models.tokenizer, models.critic
    prepare_models(dtype, config.model.device, model, models.separate_reference(), critic)
    engine = build_engine(config, resolve_model_path(config.model, out), dtype)
    envs = config_envs(config, config.env.num_groups, config.env.group_size)
    split = task_split(config)

    # Seeded again once everything is built: building or converting a model on first use
    # draws from torch's RNG, and a run must not depend on whether its model was cached.
    _seed_everything(config.run.seed)
    start = 0
    if config.run.resume:
        start = load_checkpoint(out, generator=generator, **models.state()) or 0
    if engine is not None and start:  # the engine holds the checkpoint's weights
        engine.sync(model)
    log = MetricsLog(out, completed=start)
    trackers = open_trackers(config, out, completed=start)
    prune_rollouts(out, completed=start)
    rows: list[dict[str, Any]] = []
    bar = _progress(config, start)
    for iteration in range(start, config.run.iterations):
        tick = time.perf_counter()
        threads.update()
        with compute(dtype, config.model.device):
            rollout = play(model, tokenizer, envs, config,
                           seed=train_seeds(config, iteration, split), engine=engine)  # fmt: skip
        records = rollout.records
        if engine is not None:
            engine.sleep()  # on a GPU: its memory to the update

        adv_tick = time.perf_counter()
        groups = step_groups(records, config.algo)  # once an iteration, for every estimator
        targets = None
        if critic is None:
            advantages = critic_free_advantages(records, config.algo, groups)
        else:
            with compute(dtype, config.model.device):
                targets = ppo_targets(critic, records, config.algo, pad_id=tokenizer.pad_token_id,
                                      share_prefix=config.model.share_prefix)  # fmt: skip
            advantages = targets.summary
        adv_seconds = time.perf_counter() - adv_tick
        if _saves_rollouts(config, iteration):
            save_rollouts(out, iteration, records, advantages, groups, config)

        update_tick = time.perf_counter()
        for group in models.optimizer.param_groups:
            group["lr"] = learning_rate(config, iteration)
        for group in models.critic_optimizer.param_groups if critic is not None else []:
            group["lr"] = learning_rate(config, iteration, models.critic_lr)
        stats = policy_update(
            model,
            models.reference,
            models.optimizer,
            records,
            advantages.advantages,
            config.algo,
            pad_id=tokenizer.pad_token_id,
            temperature=config.rollout.temperature,
            max_grad_norm=config.optim.max_grad_norm,
            generator=generator,
            share_prefix=config.model.share_prefix,
            critic_targets=targets,
            critic=critic,
            critic_optimizer=models.critic_optimizer,
            compute_dtype=dtype,
            recompute=engine is not None,
            tis_cap=config.rollout.tis_cap,
        )
        if engine is not None:  # the next rollout samples the updated policy
            stats["time_sync"] = engine.sync(model)
        if targets is not None:
            stats.update(targets.stats)
        check_finite(model, critic, iteration)
        update_seconds = time.perf_counter() - update_tick

        row = iteration_row(
            iteration, config.algo.estimator, rollout, advantages, step_group_summary(groups),
            lr=learning_rate(config, iteration), update_stats=stats,
            times={"time_advantage": adv_seconds, "time_update": update_seconds},
        )  # fmt: skip
        row["threads"] = threads.threads
        done = iteration + 1
        if _after(done, config.eval.every, config.run.iterations):
            with compute(dtype, config.model.device):
                row.update(evaluate_heldout(model, tokenizer, config, split, engine))
        row["time_iteration"] = time.perf_counter() - tick
        log.write(row)
        trackers.write(row)
        rows.append(row)
        if _after(done, config.run.checkpoint_every, config.run.iterations):
            save_checkpoint(out, iteration=done, generator=generator, **models.state())
        if bar is not None:
            bar.set_postfix(success=f"{row['success_rate']:.2f}", ret=f"{row['mean_return']:.2f}")
            bar.update(1)
    if bar is not None:
        bar.close()
    trackers.close()
    envs.close()
    split.close()
    label = config.run.label or config.algo.estimator
    plot_curves({label: read_metrics(out)}, out / "curve.png")
    return rows


def save_rollouts(
    out: Path,
    iteration: int,
    records: StepRecords,
    advantages: Advantages,
    groups: np.ndarray,
    config: TrainConfig,
) -> Path:
    """Writes the iteration's step records, advantages and step groups to ``out/rollouts/``
    (:mod:`training.record_files`)."""
    chars = config.run.rollout_max_chars
    rows = record_rows(iteration, records, advantages, groups, chars, extras=advantages.extras)
    return write_rollouts(out, iteration, rows, source="local", estimator=config.algo.estimator,
                          max_chars=chars)  # fmt: skip


def _saves_rollouts(config: TrainConfig, iteration: int) -> bool:
    """Whether iteration ``iteration`` (from 0) saves its step records: the first, every
    ``run.save_rollouts_every``-th and the last; never when that is 0."""
    every = config.run.save_rollouts_every
    return bool(every) and (iteration % every == 0 or iteration == config.run.iterations - 1)


def _after(done: int, every: int, iterations: int) -> bool:
    """Whether something done every ``every`` iterations (0: never), and after the last, is
    due once ``done`` iterations are."""
    return bool(every) and (done % every == 0 or done == iterations)


def _pin_revision(config: TrainConfig) -> None:
    """Records the commit a hub id resolves to as ``model.revision``
    (:func:`training.hub.commit_of`: its ``config.json`` alone; the weights are fetched once
    the memory plan fits): the run's ``config.json`` names the exact weights, and a resume on
    other weights (the branch moved on) is refused by the config check."""
    from training.hub import commit_of
    from training.packaged import PACKAGED_MODELS

    m = config.model
    if m.name_or_path not in PACKAGED_MODELS:
        m.revision = commit_of(m.name_or_path, m.revision) or m.revision


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
