"""Held-out evaluation: N held-out tasks of any gigpo env played by any model
(``gigpo-evaluate --model M``, whose command line is :mod:`training.cli.evaluate`).

The tasks are the trainer's held-out evaluation tasks: the first N seeds of
:meth:`training.local.tasks.TaskSplit.heldout_seeds` for the config's env, kwargs,
``env.heldout_fraction`` and ``run.seed``, so with N = ``eval.groups`` and greedy
decoding the numbers are the ones the trainer logs as ``eval_*`` (tested). One rollout per
task.

The model is a run directory of ours (its ``config.json`` and ``checkpoint/``: the trained
weights, or its LoRA adapters merged; the run's config is then the default config),
``smollm2``, ``tiny-random``, a Hugging Face hub id (through the hub cache,
:mod:`training.hub`) or a local model directory. Prompts are the config's (``template``: the env's
template with the config's changes, as in training) or a ReAct-style variant (``react``:
reason inside ``<think>`` first, then act; the answer starts with ``<think>``).

:func:`evaluate_heldout` writes ``summary.json`` (success rate with its 95% Wilson
interval, mean return with its 95% t interval, valid-action rate per step, mean episode
length, the seeds) and ``episodes.jsonl`` (one line per episode: seed, task, outcome and
every step's observation, action, reward and validity). The model loading and the compute
setup here serve the pinned suites too (:mod:`training.evaluation.suite`).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from training.files import atomic_write_text, check_writable_target
from training.local.checks import LIMITS, MAX_EPISODES
from training.local.config import ConfigError, TrainConfig, load_config
from training.locks import hold_folder

if TYPE_CHECKING:
    from training.local.trained import TrainedModel

#: Prompt variants.
PROMPTS = ("template", "react")
#: The ReAct-style answer format: reason about the state first, then one action.
REACT_INSTRUCTION = (
    "Reason first, inside <think> </think> tags: what you observe, what the goal needs, and "
    "which action brings you closer. Then give exactly one action inside <action> </action> "
    "tags, for example: {example}"
)
#: The ReAct variant's answer budget when ``--max-new-tokens`` is not given.
REACT_MAX_NEW_TOKENS = 256
#: Episodes played at once (one generation batch).
DEFAULT_BATCH_SIZE = 32


class ModelError(ValueError):
    """``--model`` cannot be loaded: no whole checkpoint in a run directory, a corrupt or
    mismatched weights file, an unknown model."""


@dataclass
class EvalSettings:
    """How to play: ``episodes`` held-out tasks, one rollout each.

    ``temperature`` 0 is greedy decoding; ``prompt`` is one of :data:`PROMPTS`;
    ``max_new_tokens`` None keeps the config's (or :data:`REACT_MAX_NEW_TOKENS` for react).
    """

    episodes: int
    temperature: float = 0.0
    top_p: float = 1.0
    prompt: str = "template"
    max_new_tokens: int | None = None
    batch_size: int = DEFAULT_BATCH_SIZE

    def check(self) -> None:
        """Raises ConfigError naming the option out of range; the sizes are bounded as the
        trainer's (``eval.groups``, ``rollout.max_new_tokens``, episodes played at once), so
        that a typo is an error before any model loads, not an allocation that fails."""
        most = LIMITS["eval.groups"]
        if not 1 <= self.episodes <= most:
            raise ConfigError(
                f"--episodes must be in 1..{most} (the trainer's eval.groups bound), "
                f"got {self.episodes}"
            )
        if not (np.isfinite(self.temperature) and self.temperature >= 0):
            raise ConfigError(f"--temperature must be a finite number >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"--top-p must be in (0, 1], got {self.top_p}")
        if self.prompt not in PROMPTS:
            raise ConfigError(f"--prompt must be one of {PROMPTS}, got {self.prompt!r}")
        most = LIMITS["rollout.max_new_tokens"]
        if self.max_new_tokens is not None and not 1 <= self.max_new_tokens <= most:
            raise ConfigError(
                f"--max-new-tokens must be in 1..{most} (the trainer's rollout.max_new_tokens "
                f"bound), got {self.max_new_tokens}"
            )
        if not 1 <= self.batch_size <= MAX_EPISODES:
            raise ConfigError(
                f"--batch-size must be in 1..{MAX_EPISODES} (episodes played at once, an env "
                f"each), got {self.batch_size}"
            )


def prompt_config(config: TrainConfig, settings: EvalSettings) -> TrainConfig:
    """``config`` with the prompt variant's format instruction, answer prefix, stop text and
    answer budget (a copy; ``template`` changes only the budget when one is given)."""
    import copy

    out = copy.deepcopy(config)
    if settings.prompt == "react":
        out.env.format_instruction = REACT_INSTRUCTION
        order = out.env.template.get("order")
        if order is not None and "format" not in order:
            out.env.template["order"] = [*order, "format"]
        out.rollout.response_prefix = "<think>"
        out.rollout.stop_text = "</action>"
        out.rollout.max_new_tokens = settings.max_new_tokens or REACT_MAX_NEW_TOKENS
    elif settings.max_new_tokens is not None:
        out.rollout.max_new_tokens = settings.max_new_tokens
    return out


def play(
    model: Any,
    tokenizer: Any,
    config: TrainConfig,
    settings: EvalSettings,
    model_dir: Path | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Plays ``settings.episodes`` held-out tasks with the trainer's own
    :func:`training.local.play.play_heldout` (same seeds, same measures, the same compute
    dtype and thread choice as the trainer's), with torch's generator seeded from
    ``run.seed`` first so that sampled evaluation is reproducible.

    Args:
        config: the env, prompt and rollout settings (already :func:`prompt_config`'d).
        model_dir: the base model's folder, which a ``rollout.engine: vllm`` engine is
            built on before ``model``'s weights are loaded into it (:func:`eval_engine`).

    Returns:
        ``(summary, episodes)``: the numbers of ``summary.json`` and one dict per episode
        (the lines of ``episodes.jsonl``), in seed order.
    """
    import torch

    from training.local.play import play_heldout

    settings.check()
    with compute_setup(config, model):
        engine = eval_engine(config, model, model_dir)
        torch.manual_seed(config.run.seed)
        return play_heldout(
            model,
            tokenizer,
            config,
            settings.episodes,
            temperature=settings.temperature,
            top_p=settings.top_p,
            batch_size=settings.batch_size,
            engine=engine,
        )


def eval_engine(config: TrainConfig, model: Any, model_dir: Path | None) -> Any:
    """Under ``rollout.engine: vllm`` (``--engine vllm``) a vLLM engine built on the base
    model in ``model_dir`` and holding ``model``'s weights (a run's checkpoint, LoRA merged:
    :func:`training.local.engine.policy_weights`); else None (the hf engine)."""
    from training.local.engine import build_engine
    from training.local.engine_settings import resolve_engine
    from training.local.precision import resolve_compute_dtype

    if resolve_engine(config.rollout.engine) != "vllm" or model_dir is None:
        return None
    dtype, _ = resolve_compute_dtype(config.model.compute_dtype, config.model.device)
    engine = build_engine(config, model_dir, dtype)
    engine.sync(model)
    return engine


@contextlib.contextmanager
def compute_setup(config: TrainConfig, model: Any) -> Iterator[None]:
    """The trainer's compute setup around playing with ``model`` (plain evaluation and the
    suites): the allocator choice, torch's thread count, the model's compute dtype and its
    autocast context."""
    from training.local.allocator import keep_freed_memory
    from training.local.precision import compute, prepare_models, resolve_compute_dtype
    from training.local.threads import ThreadGovernor

    if config.run.keep_freed_memory:
        keep_freed_memory()
    ThreadGovernor(config.run.threads).update()
    dtype, _ = resolve_compute_dtype(config.model.compute_dtype, config.model.device)
    prepare_models(dtype, config.model.device, model)
    with compute(dtype, config.model.device):
        yield


def load_policy(model: str, config: TrainConfig, out: Path) -> TrainedModel:
    """The model (a run's trained weights, LoRA adapters merged), its tokenizer, where its
    base came from and which checkpoint it holds (:func:`training.local.trained.load_trained`)."""
    from training.local.trained import load_trained

    return load_trained(model, config, out)


def evaluated(trained: TrainedModel) -> dict[str, Any]:
    """What a summary says was evaluated: the checkpoint (its folder, the last iteration it
    trained, numbered from 0 as in ``metrics.jsonl``, whether LoRA adapters were merged) and
    the base model under it (its folder and hub commit); ``checkpoint`` is None for a model
    evaluated as it is."""
    from training.local.trained import checkpoint_iteration

    iteration = None
    if trained.checkpoint is not None:
        try:
            iteration = checkpoint_iteration(trained.checkpoint)
        except (OSError, ValueError):
            iteration = None  # its weights loaded; only state.json's counter is unreadable
    return {
        "checkpoint": None if trained.checkpoint is None else str(trained.checkpoint.resolve()),
        "checkpoint_iteration": iteration,
        "lora_merged": trained.lora,
        "model_dir": str(trained.source.path),
        "model_revision": trained.source.revision,
    }


def default_out(model: str) -> Path:
    """Plain evaluation's folder when ``--out`` is not given, one per model:
    ``runs/evaluate/NAME`` for a model name or hub id (``Qwen--Qwen2.5-1.5B-Instruct``), and
    for a folder its name and a digest of its absolute path (``quickstart-3f2a9c1e``), so
    that evaluating a second model never replaces the first's summary."""
    import hashlib

    path = Path(model).expanduser()
    if path.exists():
        digest = hashlib.sha256(str(path.resolve()).encode("utf-8")).hexdigest()[:8]
        name = f"{path.resolve().name or 'root'}-{digest}"
    else:
        name = model.replace("/", "--")
    return Path("runs/evaluate") / (re.sub(r"[^A-Za-z0-9_.=+-]", "_", name)[:100] or "model")


def evaluate_heldout(
    model: str, config: TrainConfig, settings: EvalSettings, out: Path
) -> dict[str, Any]:
    """Loads ``model`` (:func:`load_policy`), plays ``settings.episodes`` held-out tasks
    (:func:`play`) and writes ``out/episodes.jsonl`` and ``out/summary.json``.

    Args:
        model: as ``--model`` (a run directory of ours, ``smollm2``, ``tiny-random``, a model
            directory).
        config: the env, prompt and rollout settings (already :func:`prompt_config`'d).
        out: the output folder (created), held by this process from start to end
            (:func:`training.locks.hold_folder`, kind ``evaluate``).

    Returns:
        The summary written (the model, env and decoding settings, then :func:`play`'s).

    Raises:
        ModelError: the model cannot be loaded (:func:`load_policy`'s error, its message kept).
        FolderLockError: ``out`` is held by another process (FolderBusyError, naming it), or
            holds another kind of output, a suite run or a training run (FolderKindError);
            nothing in it is touched.
        UnsafeFileError: ``out/summary.json`` or ``out/episodes.jsonl`` is there and not a
            regular file (a planted symlink, a FIFO); checked before the model loads.
    """
    settings.check()  # before the folder is made or any model loads
    lock = hold_folder(out, "evaluate", "gigpo-evaluate")
    try:
        for name in ("episodes.jsonl", "summary.json"):  # refused before the model loads
            check_writable_target(out / name)
        try:
            trained = load_policy(model, config, out)
        except (FileNotFoundError, RuntimeError, ValueError) as exc:
            raise ModelError(str(exc)) from exc
        summary, episodes = play(trained.policy, trained.tokenizer, config, settings,
                                 trained.source.path)  # fmt: skip
        summary = {
            "model": model,
            **evaluated(trained),
            "env_id": config.env.id,
            "env_kwargs": config.env.kwargs,
            "heldout_fraction": config.env.heldout_fraction,
            "run_seed": config.run.seed,
            "prompt": settings.prompt,
            "temperature": settings.temperature,
            "top_p": settings.top_p if settings.temperature > 0 else 1.0,
            "max_new_tokens": config.rollout.max_new_tokens,
            "engine": config.rollout.engine,
            **summary,
        }
        rows = "".join(json.dumps(row) + "\n" for row in episodes)
        atomic_write_text(out / "episodes.jsonl", rows)
        atomic_write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    except BaseException:
        lock.discard()  # a folder this call made and left empty is removed again
        raise
    lock.release()
    return summary


def eval_config(model: str, config: str | None, overrides: list[str]) -> TrainConfig:
    """The config to evaluate under: ``config`` (a YAML path or shipped name; None: the
    run's own ``config.json`` when ``model`` is a run directory of ours, else the trainer's
    defaults) with ``overrides`` (``--section.key=value``). A run's ``config.json`` is data:
    its ``model.trust_remote_code`` is not read (only an override turns it on).

    Raises:
        ConfigError: as :func:`training.local.config.load_config`.
    """
    from training.local.trained import find_run_dir

    if config is None and (run := find_run_dir(model)) is not None:
        return load_config(run / "config.json", overrides, run_file=True)
    return load_config(config, overrides)
