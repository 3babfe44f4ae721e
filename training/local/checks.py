"""Checks of a :class:`~training.local.schema.TrainConfig`, all before any model is built.

Every field is checked against the constants :mod:`gigpo_algo` and the envs use, and the
error names the dotted key and the allowed values; then one env is built and reset with the
config's id, kwargs and prompt template. (Comparing a config with the one a checkpoint was
made with is :mod:`training.local.resume`.)
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from training.local.decoding import CACHES
from training.local.precision import COMPUTE_DTYPES
from training.local.schema import DTYPES, ConfigError, TrainConfig
from training.settings import unread
from training.text import show


def validate(config: TrainConfig, *, check_device: bool = True, check_files: bool = True) -> None:
    """Raises :class:`ConfigError`, naming the dotted key, on values no run can use.

    Checks every field against the constants :mod:`gigpo_algo` and the envs use, the model's
    name (:func:`~training.local.model_checks.check_model`), then builds and resets one
    environment (id, kwargs, prompt template), all before any model is loaded.

    Args:
        check_device: check that ``model.device`` exists here (False: a dry run planning a
            GPU run on another machine).
        check_files: check what needs the model's weights and the env's package and data
            (False: a dry run, which needs neither; it checks the env's id only, and
            :func:`env_problem` says what it could not check).
    """
    from training.local.engine import check_engine
    from training.local.memory import free_memory_override
    from training.local.model_checks import check_model

    free_memory_override()  # a bad $GIGPO_FREE_MEMORY_GIB is named at load, not at the plan
    _check_algo(config)
    _check_ranges(config)
    check_engine(config)
    _check_limits(config)
    _check_run_dir(config)
    if check_device:
        _check_device(config.model.device)
    check_model(config, files=check_files)
    _check_trackers(config)
    _check_template(config.env.template)
    if check_files:
        _check_env(config)
    else:
        _check_env_id(config.env.id)


def env_problem(config: TrainConfig) -> str | None:
    """Why one env of ``config`` cannot be built and reset here (its package or data
    missing, a bad kwarg), or None when it can: what a dry run reports it could not check."""
    try:
        _check_env(config)
    except ConfigError as exc:
        return str(exc)
    return None


def _check_trackers(config: TrainConfig) -> None:
    """``run.report_to``: known trackers, each named one installed."""
    from training.local.trackers import check_report_to

    check_report_to(config.run.report_to)


def _check_algo(config: TrainConfig) -> None:
    from gigpo_algo.losses import AGGREGATIONS, KL_ESTIMATORS, POLICY_LOSSES

    a, e = config.algo, config.env
    # Settings outside the algo section that this estimator reads (field metadata).
    also_reads = {
        a.estimator: [f"optim.{f.name}" for f in dataclasses.fields(config.optim)
                      if a.estimator in f.metadata.get("reads", ())]
    }  # fmt: skip
    try:
        a.check(prefix="algo.", estimator_name="algo.estimator", also_reads=also_reads)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    for name, value, reads in unread(config.optim, a.estimator):
        raise ConfigError(
            f"optim.{name}={show(value)} is not used by algo.estimator={show(a.estimator)} "
            f"(only {', '.join(map(repr, reads))}); remove it"
        )
    lr = config.optim.critic_lr
    if lr is not None and not (math.isfinite(lr) and lr >= 0):
        raise ConfigError(f"optim.critic_lr must be a finite number >= 0, got {lr}")
    for name, value, allowed in (
        ("algo.kl_estimator", a.kl_estimator, KL_ESTIMATORS),
        ("algo.loss_agg", a.loss_agg, AGGREGATIONS),
        ("algo.policy_loss", a.policy_loss, POLICY_LOSSES),
    ):
        if value not in allowed:
            raise ConfigError(f"{name} must be one of {tuple(allowed)}, got {show(value)}")
    if a.policy_loss == "gspo" and a.loss_agg != "seq-mean-token-mean":
        raise ConfigError(
            f"algo.policy_loss=gspo with algo.loss_agg={show(a.loss_agg)}: GSPO's objective is "
            "a mean over sequences of one ratio each (as OpenRLHF's gspo); set "
            "algo.loss_agg: seq-mean-token-mean"
        )
    if not 0.0 <= a.clip_low < 1.0:
        raise ConfigError(f"algo.clip_low must be in [0, 1), got {a.clip_low}")
    for name in ("clip_high", "kl_coef", "entropy_coef"):
        if not math.isfinite(getattr(a, name)):
            raise ConfigError(f"algo.{name} must be finite, got {getattr(a, name)}")
    if a.clip_high < 0:
        raise ConfigError(f"algo.clip_high must be >= 0, got {a.clip_high}")
    if e.group_size < 2 and a.estimator != "ppo":
        raise ConfigError("env.group_size must be >= 2: group-relative advantages need a group")


def _check_ranges(config: TrainConfig) -> None:
    a, e, r, m = config.algo, config.env, config.run, config.model
    for name, value in (
        ("env.num_groups", e.num_groups),
        ("env.group_size", e.group_size),
        ("rollout.max_new_tokens", config.rollout.max_new_tokens),
        ("algo.policy_epochs", a.policy_epochs),
        ("algo.minibatch_size", a.minibatch_size),
        ("model.tiny_layers", m.tiny_layers),
    ):
        if value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}")
    for name, value in (
        ("env.history_length", e.history_length),
        ("eval.groups", config.eval.groups),
        ("run.iterations", r.iterations),
        ("run.seed", r.seed),
        ("eval.every", config.eval.every),
        ("run.checkpoint_every", r.checkpoint_every),
        ("run.threads", r.threads),
        ("run.save_rollouts_every", r.save_rollouts_every),
        ("run.rollout_max_chars", r.rollout_max_chars),
        ("model.trainable_layers", m.trainable_layers),
        ("model.tiny_warmup_steps", m.tiny_warmup_steps),
        ("algo.kl_coef", a.kl_coef),
        ("algo.entropy_coef", a.entropy_coef),
        ("rollout.temperature", config.rollout.temperature),
        ("eval.temperature", config.eval.temperature),
        ("rollout.top_k", config.rollout.top_k),
        ("rollout.max_prompt_tokens", config.rollout.max_prompt_tokens),
        ("algo.micro_batch_tokens", a.micro_batch_tokens),
        ("optim.lr", config.optim.lr),
        ("optim.weight_decay", config.optim.weight_decay),
        ("optim.warmup_iterations", config.optim.warmup_iterations),
    ):
        if not value >= 0:
            raise ConfigError(f"{name} must be >= 0, got {value}")
    if not config.optim.max_grad_norm > 0:
        raise ConfigError(f"optim.max_grad_norm must be > 0, got {config.optim.max_grad_norm}")
    if config.rollout.temperature == 0:
        raise ConfigError("rollout.temperature must be > 0 for training (sampling)")
    if config.rollout.cache not in CACHES:
        raise ConfigError(
            f"rollout.cache must be one of {CACHES}, got {show(config.rollout.cache)}"
        )
    if config.rollout.cache == "static" and config.rollout.max_prompt_tokens < 1:
        raise ConfigError(
            "rollout.cache=static preallocates every env's cache for the longest prompt: set "
            "rollout.max_prompt_tokens (e.g. 2048)"
        )
    if not 0 < config.rollout.top_p <= 1:
        raise ConfigError(f"rollout.top_p must be in (0, 1], got {config.rollout.top_p}")
    if not 0.0 <= e.heldout_fraction < 1.0:
        raise ConfigError(f"env.heldout_fraction must be in [0, 1), got {e.heldout_fraction}")
    if m.dtype not in DTYPES:
        raise ConfigError(f"model.dtype must be one of {DTYPES}, got {show(m.dtype)}")
    if m.compute_dtype not in COMPUTE_DTYPES:
        raise ConfigError(
            f"model.compute_dtype must be one of {COMPUTE_DTYPES}, got {show(m.compute_dtype)}"
        )
    if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", m.device):
        raise ConfigError(f"model.device must be cpu, mps, cuda or cuda:N, got {show(m.device)}")
    if m.name_or_path == "tiny-random":
        if m.tiny_hidden_size < 16 or m.tiny_hidden_size % 16:
            raise ConfigError(
                f"model.tiny_hidden_size must be a positive multiple of 16, got "
                f"{m.tiny_hidden_size}"
            )
        if m.tiny_vocab_size < 259:
            raise ConfigError(f"model.tiny_vocab_size must be >= 259, got {m.tiny_vocab_size}")


#: Upper bounds of the sizes a config sets, far above any run's needs and below what makes a
#: machine swap or an allocation abort (the paper's runs: 16 groups of 8, 512 new tokens).
LIMITS = {
    "env.num_groups": 4096,
    "env.group_size": 1024,
    "eval.groups": 16384,
    "env.history_length": 1000,
    "rollout.max_new_tokens": 32768,
    "rollout.top_k": 1_000_000,
    "rollout.max_prompt_tokens": 1_048_576,
    "algo.micro_batch_tokens": 1 << 30,
    "algo.policy_epochs": 1000,
    "algo.minibatch_size": 1_000_000,
    "run.iterations": 10_000_000,
    "eval.every": 10_000_000,
    "run.checkpoint_every": 10_000_000,
    "run.save_rollouts_every": 10_000_000,
    "run.threads": 1024,
    "run.rollout_max_chars": 100_000_000,
    "optim.warmup_iterations": 10_000_000,
    "model.trainable_layers": 10_000,
    "model.tiny_hidden_size": 4096,
    "model.tiny_layers": 64,
    "model.tiny_vocab_size": 100_000,
    "model.tiny_warmup_steps": 100_000,
}
#: Episodes played at once (num_groups x group_size): each holds a live env.
MAX_EPISODES = 16384
#: Parameters of the tiny random model (it is built for tests and smoke runs).
MAX_TINY_PARAMETERS = 200_000_000
#: ``run.seed`` is NumPy's global seed, which takes 32 bits.
MAX_SEED = 2**32 - 1


def _check_limits(config: TrainConfig) -> None:
    """The bounds in :data:`LIMITS`, the episode count, the tiny model's size, the seed."""
    for key, limit in LIMITS.items():
        section, name = key.split(".")
        value = getattr(getattr(config, section), name)
        if value > limit:
            raise ConfigError(f"{key} must be <= {limit:,}, got {show(value)}")
    e, m = config.env, config.model
    if e.num_groups * e.group_size > MAX_EPISODES:
        raise ConfigError(
            f"env.num_groups x env.group_size must be <= {MAX_EPISODES:,} episodes at once, "
            f"got {e.num_groups} x {e.group_size}"
        )
    if m.name_or_path == "tiny-random":
        h = m.tiny_hidden_size
        parameters = m.tiny_vocab_size * h + m.tiny_layers * (4 * h * h + 6 * h * h)
        if parameters > MAX_TINY_PARAMETERS:
            raise ConfigError(
                f"model.tiny_*: the tiny model would have ~{parameters:,} parameters (vocab "
                f"{m.tiny_vocab_size} x hidden {h}, {m.tiny_layers} layers); at most "
                f"{MAX_TINY_PARAMETERS:,}: use a real model for anything larger"
            )
    if config.run.seed > MAX_SEED:
        raise ConfigError(f"run.seed must be in [0, {MAX_SEED}] (2**32 - 1), got {config.run.seed}")


def _check_run_dir(config: TrainConfig) -> None:
    """``run.out`` must be a directory or not exist yet (nothing is created here)."""
    from pathlib import Path

    out = Path(config.run.out).expanduser()
    for path in (out, *out.parents):
        if path.exists():
            if not path.is_dir():
                what = "run.out" if path == out else f"run.out's parent {path}"
                raise ConfigError(f"{what} is a file, not a directory: {config.run.out}")
            break


def _check_device(device: str) -> None:
    """A CUDA or MPS device must exist on this machine (checked before any model is built)."""
    if device == "cpu":
        return
    import torch

    if device == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError("model.device='mps' but this machine has no usable MPS device")
        return
    if not torch.cuda.is_available():
        raise ConfigError(f"model.device={show(device)} but torch sees no CUDA device here")
    index = int(device.partition(":")[2] or 0)
    count = torch.cuda.device_count()
    if index >= count:
        raise ConfigError(
            f"model.device={show(device)} but this machine has {count} CUDA device(s) "
            f"(cuda:0 to cuda:{count - 1})"
        )


def _check_env(config: TrainConfig) -> None:
    """Builds and resets one env as the trainer will: id, kwargs, and its prompts through
    the trainer's own :func:`gigpo_envs.history_prompt`."""
    import gymnasium as gym

    from gigpo_envs import history_prompt  # importing registers the ids

    e = config.env
    _check_env_id(e.id)
    try:
        env = gym.make(e.id, **e.kwargs)
    except Exception as exc:  # any constructor error is a bad kwarg or missing data
        raise ConfigError(
            f"env.kwargs: gym.make({show(e.id)}, **{show(e.kwargs)}) failed: {show_error(exc)}"
        ) from None
    try:
        prompted = history_prompt(
            env, e.history_length, template=e.template, format_instruction=e.format_instruction
        )
        _, info = prompted.reset(seed=0)
    except Exception as exc:  # the env's own message says what is wrong
        raise ConfigError(
            f"env: {e.id} with kwargs {show(e.kwargs)} cannot start: {show_error(exc)}"
        ) from None
    finally:
        env.close()
    if config.algo.similarity is not None and info.get("anchor_text") is None:
        raise ConfigError(
            f"algo.similarity: {e.id} gives no info['anchor_text'] (state_text), and "
            "similarity grouping never runs on state keys; use exact anchors"
        )


def _check_env_id(env_id: str) -> None:
    """The id must be registered (importing :mod:`gigpo_envs` registers ours; an env's own
    package is imported only when it is made)."""
    import gymnasium as gym

    import gigpo_envs  # noqa: F401  (registers the ids)

    try:
        gym.spec(env_id)
    except gym.error.Error:
        known = sorted(k for k in gym.registry if k.startswith("gigpo/"))
        raise ConfigError(
            f"env.id: unknown environment {show(env_id)}; registered: {known}"
        ) from None


def show_error(exc: BaseException, limit: int = 500) -> str:
    """An exception's message for a config error, cut to ``limit`` characters."""
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def _check_template(overrides: dict[str, Any]) -> None:
    from gigpo_envs import PromptTemplate

    fields = {f.name for f in dataclasses.fields(PromptTemplate)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ConfigError(f"env.template: unknown PromptTemplate field(s) {unknown}")
    for name, value in overrides.items():
        if name == "order":
            if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
                raise ConfigError(
                    f"env.template.order must be a list of part names, got {show(value)}"
                )
        elif not isinstance(value, str):
            raise ConfigError(f"env.template.{name} must be a string, got {show(value)}")
    try:
        dataclasses.replace(PromptTemplate(), **overrides)
    except ValueError as exc:
        raise ConfigError(f"env.template: {exc}") from None
