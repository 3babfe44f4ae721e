"""The estimator study's arms: an estimator with some of its settings, as one string.

An **arm** is written ``gigpo``, ``grpo:norm=mean``, ``gigpo:norm=mean,step_weight=2``,
``gigpo:similarity=0.9,similarity_metric=embedding``. The keys are the trainer's ``algo.*``
names (the vocabulary of :mod:`gigpo_algo`); the string is the arm's name in tables, and
(made path-safe, at most :data:`MAX_ARM_FOLDER` characters) its run folder's name. Values are
read through the guarded YAML loader (:mod:`training.guarded`), one spelling per value.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, fields
from typing import Any

from training.guarded import GuardError, ParseError, load_yaml
from training.local.config import MAX_CONFIG_BYTES, TRAINER_ESTIMATORS, ConfigError
from training.local.schema import AlgoConfig
from training.text import bound_text, show

#: The longest arm folder name (an arm's spec made path-safe); file names end at 255 bytes.
MAX_ARM_FOLDER = 100
_KEY = re.compile(r"^[a-z_]+$")
_FOLDER = re.compile(r"^[A-Za-z0-9_.=+-]+$")


@dataclass(frozen=True)
class Arm:
    """One estimator with some settings; ``name`` is its canonical spec string (settings in
    alphabetical order, values as :func:`canonical_value` writes them)."""

    estimator: str
    settings: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        if not self.settings:
            return self.estimator
        return self.estimator + ":" + ",".join(f"{k}={v}" for k, v in self.settings)

    @property
    def folder(self) -> str:
        """The run folder's name: the spec with ``:`` and ``,`` made path-safe."""
        return self.name.replace(":", "__").replace(",", "__")

    def overrides(self) -> list[str]:
        return [f"--algo.estimator={self.estimator}"] + [
            f"--algo.{k}={v}" for k, v in self.settings
        ]


def parse_arm(spec: str, where: str = "--arm") -> Arm:
    """``"gigpo:norm=mean,step_weight=2"`` -> :class:`Arm` (settings in the given order).

    Raises:
        ConfigError: an unknown estimator or key, a key given twice, a malformed spec.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"{where}: an arm is a string like 'gigpo:norm=mean', got {show(spec)}")
    estimator, colon, rest = spec.strip().partition(":")
    spec = show(spec)  # for messages: at most ~80 characters of it
    if estimator not in TRAINER_ESTIMATORS:
        raise ConfigError(f"{where}: {spec}: the estimator must be one of {TRAINER_ESTIMATORS}")
    known = {f.name for f in fields(AlgoConfig)} - {"estimator"}
    settings: list[tuple[str, str]] = []
    for item in filter(None, (p.strip() for p in rest.split(","))) if rest else []:
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not _KEY.match(key) or not value:
            raise ConfigError(f"{where}: {spec}: {show(item)} is not key=value")
        if key not in known:
            raise ConfigError(f"{where}: {spec}: algo.{bound_text(key, 40)} is not a setting")
        if key in dict(settings):
            raise ConfigError(f"{where}: {spec}: algo.{key} is given twice")
        settings.append((key, canonical_value(value, f"{where}: {spec}: algo.{key}")))
    if colon and not settings:
        raise ConfigError(f"{where}: {spec}: nothing after ':'")
    return check_arm(Arm(estimator, tuple(sorted(settings))), where)


def check_arm(arm: Arm, where: str) -> Arm:
    """``arm``, if its run folder's name is at most :data:`MAX_ARM_FOLDER` characters of
    letters, digits and ``. _ = + -`` (no ``/``: a folder of the study, not a path).

    Raises:
        ConfigError: naming the arm and the limit.
    """
    if len(arm.folder) > MAX_ARM_FOLDER:
        raise ConfigError(
            f"{where}: {show(arm.name)}: its run folder's name would be {len(arm.folder)} "
            f"characters, over the limit of {MAX_ARM_FOLDER}; give it fewer or shorter settings"
        )
    if not _FOLDER.match(arm.folder):
        raise ConfigError(
            f"{where}: {show(arm.name)}: a setting's value may hold letters, digits and "
            "'. _ = + -' only (it names the arm's run folder)"
        )
    return arm


def canonical_value(value: Any, where: str = "a setting's value") -> str:
    """One spelling per value, as YAML reads it (through :func:`training.guarded.load_yaml`):
    ``2``, ``2.0`` -> ``2``; ``0.90`` -> ``0.9``; ``True`` -> ``true``; None -> ``null``;
    other text as it is.

    Raises:
        ConfigError: the guarded loader refuses the text (an alias, an integer of too many
            digits, too deep), or the number is not finite (``.nan``, ``.inf``), naming
            ``where``.
    """
    if isinstance(value, str):
        try:
            value = load_yaml(value, where, max_bytes=MAX_CONFIG_BYTES)
        except ParseError:
            return value
        except GuardError as exc:
            raise ConfigError(str(exc)) from None
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: a finite number, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float):
        return repr(value)
    return str(value)


def axis_arms(arms: list[Arm], axes: dict[str, list[Any]], where: str = "axes") -> list[Arm]:
    """Each arm crossed with every value of every axis that its estimator reads (an arm
    whose estimator does not read an axis's key stays one arm)."""
    reads = {f.name: f.metadata.get("reads") or TRAINER_ESTIMATORS for f in fields(AlgoConfig)}
    out: list[Arm] = []
    for key, values in axes.items():
        if key not in reads or key == "estimator":
            raise ConfigError(f"{where}: algo.{bound_text(key, 40)} is not a setting")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}.{key}: a non-empty list of values, got {show(values)}")
    for key in axes:
        if not any(arm.estimator in reads[key] for arm in arms):
            raise ConfigError(
                f"{where}: algo.{key} is read by none of the estimators "
                f"{sorted({a.estimator for a in arms})} (it is read by {sorted(reads[key])})"
            )
    for arm in arms:
        keys = [k for k in axes if arm.estimator in reads[k] and k not in dict(arm.settings)]
        for combo in itertools.product(*(axes[k] for k in keys)):
            extra = tuple(
                (k, canonical_value(v, f"{where}.{k}")) for k, v in zip(keys, combo, strict=True)
            )
            out.append(check_arm(Arm(arm.estimator, tuple(sorted(arm.settings + extra))), where))
    return list(dict.fromkeys(out))
