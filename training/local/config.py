"""The local trainer's configuration, loaded: from YAML, overridden on the CLI, then checked.

The sections and their keys are :mod:`training.local.schema` (imported here too, so
``from training.local.config import TrainConfig`` works); the checks are
:mod:`training.local.checks`. A YAML file holds any subset of the sections; every key it
names must exist (a renamed key, :data:`~training.local.schema.RENAMED_KEYS`, is read as its
new name with a warning). CLI
overrides use dotted names: ``--algo.estimator=grpo``, ``--env.num_groups 4``,
``--optim.lr=1e-5``; values are read as YAML (``--env.kwargs='{max_position: 3}'``).
``--out DIR`` is short for ``--run.out=DIR``.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any

from training.guarded import (
    MAX_DEPTH,
    MAX_YAML_BYTES,
    GuardError,
    ParseError,
    load_yaml,
    read_limited,
)
from training.local.checks import validate
from training.local.schema import (
    DTYPES,
    PPO_DEFAULTS,
    REMOVED_KEYS,
    TRAINER_ESTIMATORS,
    AlgoConfig,
    ConfigError,
    EnvConfig,
    EvalConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
    RunConfig,
    TrainConfig,
    new_name,
    ppo_gamma_renamed,
    renamed,
    renamed_value,
    resolve_defaults,
)
from training.text import did_you_mean, show

__all__ = [
    "CONFIGS_DIR", "DTYPES", "MAX_CONFIG_BYTES", "MAX_YAML_DEPTH", "PPO_DEFAULTS",
    "TRAINER_ESTIMATORS", "AlgoConfig", "ConfigError", "EnvConfig", "EvalConfig",
    "ModelConfig", "OptimConfig", "RolloutConfig", "RunConfig", "TrainConfig", "config_path",
    "load_config", "packaged_configs", "read_yaml", "renamed", "show", "validate",
]  # fmt: skip

#: A config file larger than this is refused (a config is a few KB).
MAX_CONFIG_BYTES = MAX_YAML_BYTES
#: Mappings and lists nested deeper than this are refused (configs nest two or three deep).
MAX_YAML_DEPTH = MAX_DEPTH


def read_yaml(text: str, where: str) -> Any:
    """Parses YAML ``text`` (from ``where``: a file or an override) through the project's
    guarded loader (:func:`training.guarded.load_yaml`): no anchors or aliases (``*name``: a
    few lines of them expand to gigabytes), nesting at most :data:`MAX_YAML_DEPTH` deep,
    integers of at most :data:`~training.guarded.MAX_INT_DIGITS` digits, at most
    :data:`MAX_CONFIG_BYTES`.

    Raises:
        ConfigError: a guard refused it (the message names ``where``, and the dotted key,
            line and column where it can).
        training.guarded.ParseError: not YAML (an override's value is then plain text).
    """
    try:
        return load_yaml(text, where, max_bytes=MAX_CONFIG_BYTES, max_depth=MAX_YAML_DEPTH)
    except ParseError:
        raise
    except GuardError as exc:
        raise ConfigError(str(exc)) from None


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


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    *,
    check_device: bool = True,
    check_files: bool = True,
    run_file: bool = False,
) -> TrainConfig:
    """Builds a :class:`TrainConfig` from an optional YAML file and CLI-style overrides.

    Args:
        path: a YAML file with any subset of the sections, a shipped config's bare name
            (``smoke``, ``quickstart``; see :func:`config_path`), or None for the defaults.
        overrides: ``["--algo.estimator=grpo", "--out", "runs/x", ...]``.
        check_device: check that ``model.device`` exists on this machine (False: a dry run
            planning for another machine).
        check_files: check what needs the model's weights and the env's package and data
            (False: a dry run; see :func:`~training.local.checks.validate`).
        run_file: ``path`` is a run folder's ``config.json``, which is data, not the user's
            config (docs/security.md): its ``model.trust_remote_code`` is not read (off
            unless an override turns it on).

    Raises:
        ConfigError: unknown key, wrong type, unreadable YAML, or an invalid value.
    """
    data: dict[str, Any] = {}
    if path is not None:
        path = config_path(path)
        try:
            # read up to the limit and a byte more: a pipe or /dev/zero has no size to stat
            data = read_limited(path, "config file", MAX_CONFIG_BYTES)
            loaded = read_yaml(data.decode("utf-8"), f"config file {path}")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"config file {path} is not UTF-8 text (byte {exc.start}: {exc.reason}); "
                "save it as UTF-8 YAML"
            ) from None
        except GuardError as exc:  # the message names the file: "config file X is not ..."
            raise ConfigError(str(exc)) from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(
                f"config file {path} must hold a mapping, got {type(loaded).__name__}"
            )
        data = loaded
    config = _build(TrainConfig, renamed(data, where=f"config file {path}"), "")
    if run_file:  # only the user's command line or config may run a model's own code
        config.model.trust_remote_code = False
    for key, value, text in _parse_overrides(overrides or []):
        _set_dotted(config, new_name(key, f"override --{key}"), renamed_value(key, value), text)
    moved = ppo_gamma_renamed(dataclasses.asdict(config.algo), "config")
    config.algo.gamma, config.algo.gae_gamma = moved["gamma"], moved["gae_gamma"]
    validate(resolve_defaults(config), check_device=check_device, check_files=check_files)
    return config


# ----------------------------------------------------------------------------- internals


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
    if len(unknown) == 1:
        key = unknown[0]
        raise ConfigError(
            f"unknown config key {show(prefix + key)}{did_you_mean(key, known, prefix)}"
        )
    if unknown:
        raise ConfigError(f"unknown config keys {show([prefix + str(k) for k in unknown])}")
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
    if origin is list:  # a list of one type; a lone value is a list of one
        (item,) = typing.get_args(hint)
        items = value if isinstance(value, list) else [value]
        return [_coerce(v, item, f"{name}[{i}]") for i, v in enumerate(items)]
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
    """``(key, value read as YAML, the text as given)`` per override.

    Raises:
        ConfigError: a malformed override, or a value the guarded loader refuses (an alias,
            too deep, an integer of too many digits: the message names ``--key``).
    """
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
        except ParseError:
            value = text
        pairs.append((key, value, text))
    return pairs


def _set_dotted(config: TrainConfig, key: str, value: Any, text: str) -> None:
    parts = key.split(".")
    sections = [f.name for f in dataclasses.fields(config)]
    if len(parts) != 2:
        owners = [s for s in sections if parts[-1] in _keys_of(getattr(config, s))]
        hint = f"; did you mean {owners[0]}.{parts[-1]}?" if len(owners) == 1 else ""
        raise ConfigError(
            f"override keys are section.name (e.g. algo.estimator), got {show(key)}{hint}"
        )
    section_name, name = parts
    section = getattr(config, section_name, None)
    if section is None or not dataclasses.is_dataclass(section):
        raise ConfigError(
            f"unknown config section {show(section_name)} in {show(key)}"
            + did_you_mean(section_name, sections)
        )
    hints = typing.get_type_hints(type(section))
    if name not in hints:
        _refuse_removed(key)
        raise ConfigError(
            f"unknown config key {show(key)}{did_you_mean(name, hints, section_name + '.')}"
        )
    hint = hints[name]
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    takes_text = hint is str or (union and str in typing.get_args(hint))
    if takes_text and not isinstance(value, str) and value is not None:
        value = text  # --run.label=123 is the text "123"; "a: b" is text, not a mapping
    setattr(section, name, _coerce(value, hint, key))


def _keys_of(section: Any) -> set[str]:
    """The key names of a config section (none for a value that is not a section)."""
    return set(typing.get_type_hints(type(section))) if dataclasses.is_dataclass(section) else set()
