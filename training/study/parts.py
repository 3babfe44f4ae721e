"""A study's parts from what its command line gives: a study file (shipped by name, or a
path; :func:`training.study.plan.load_study_file`), or configs with estimators, arms, axes,
seeds and pairs, checked as the file's would be (the command line's option names in the
errors)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from training.local.config import TRAINER_ESTIMATORS, ConfigError
from training.study.plan import (
    Arm,
    Part,
    axis_arms,
    check_pairs,
    check_seeds,
    default_pairs,
    load_study_file,
    parse_arm,
)


def study_path(name: str) -> Path:
    """A study file's path, or the name of one shipped in ``training/studies/`` (``paper``)."""
    path = Path(name)
    if path.exists() or path.suffix:
        return path
    shipped = Path(__file__).resolve().parents[1] / "studies" / f"{name}.yaml"
    if shipped.is_file():
        return shipped
    known = sorted(p.stem for p in shipped.parent.glob("*.yaml"))
    raise ConfigError(f"--study: no file {name!r} and no shipped study of that name ({known})")


def check_estimators(estimators: Sequence[str], arms: Sequence[Any] = ()) -> list[str]:
    """``estimators`` (``--estimators``) checked: trainer estimators, and some estimator or
    arm at all."""
    unknown = [e for e in estimators if e not in TRAINER_ESTIMATORS]
    if unknown or not (estimators or arms):
        raise ConfigError(
            f"--estimators must name some of {TRAINER_ESTIMATORS}, got {list(estimators)}"
        )
    return list(estimators)


def command_line_parts(
    *,
    study: str | None = None,
    part: Sequence[str] | None = None,
    config: Sequence[str] | None = None,
    estimators: Sequence[str] | None = None,
    arm: Sequence[str] = (),
    axis: Sequence[str] = (),
    pair: Sequence[Sequence[str]] = (),
    seeds: Sequence[int] | None = None,
) -> tuple[list[Part], dict[str, int]]:
    """The parts to run, and the study file's options (``jobs``, ``threads``; none without
    one), from ``python -m training.study``'s options of the same names.

    ``study`` excludes ``config``, ``estimators``, ``seeds``, ``arm``, ``axis`` and ``pair``
    (the file holds them), and ``part`` selects its parts. Without it: one part named
    ``study`` over ``config``, with ``estimators`` (default every trainer estimator unless
    ``arm`` is given) and the ``arm`` specs, multiplied by each ``axis`` (``KEY=v1,v2``),
    ``seeds`` (default 0 1 2), ``pair`` (default :func:`training.study.plan.default_pairs`).

    Raises:
        ConfigError: the first bad option, named.
    """
    if study:
        given = {"config": config, "estimators": estimators, "seeds": seeds, "arm": arm,
                 "axis": axis, "pair": pair}  # fmt: skip
        mixed = [name for name, value in given.items() if value]
        if mixed:
            raise ConfigError(f"--study holds the arms and configs; drop --{mixed[0]}")
        parts, options = load_study_file(study_path(study))
        if part:
            unknown = set(part) - {p.name for p in parts}
            if unknown:
                raise ConfigError(f"--part: no part {sorted(unknown)} in {study}")
            parts = [p for p in parts if p.name in part]
        return parts, options
    if not config:
        raise ConfigError("give --config (repeatable) or --study")
    if part:
        raise ConfigError("--part needs --study")
    chosen = TRAINER_ESTIMATORS if estimators is None and not arm else (estimators or [])
    arms = [Arm(e) for e in check_estimators(chosen, arm)] + [parse_arm(a) for a in arm]
    axes: dict[str, list[Any]] = {}
    for item in axis:
        key, eq, values = item.partition("=")
        if not eq or not values:
            raise ConfigError(f"--axis: KEY=v1,v2,..., got {item!r}")
        axes[key.strip()] = [v.strip() for v in values.split(",") if v.strip()]
    arms = axis_arms(arms, axes, "--axis") if axes else list(dict.fromkeys(arms))
    checked = check_seeds(list(seeds) if seeds is not None else [0, 1, 2], "--seeds")
    pairs = check_pairs([tuple(p) for p in pair], arms, "--pair") or default_pairs(arms)
    return [Part("study", [Path(c) for c in config], arms, checked, pairs)], {}
