"""The estimator study's plan: parts, study files, and the runs they make.

An **arm** is an estimator with some of its settings, written as one string: ``gigpo``,
``grpo:norm=mean``, ``gigpo:norm=mean,step_weight=2`` (:mod:`training.study.arms`).

A **part** trains every arm on every config and seed, and names the **pairs** (arm A, arm B)
whose per-seed differences the report gives. A study file (YAML) lists parts::

    jobs: 2                      # runs at once (optional)
    threads: 1                   # torch threads per run (optional)
    overrides: [--run.iterations=50]   # config overrides for every run (optional)
    parts:
      - name: norm
        configs: [numberline_long.yaml]      # relative to the study file
        seeds: 8                             # 0..7; or a list
        arms: [gigpo:norm=mean, grpo:norm=mean]
        axes: {norm: [mean, mean_std]}       # optional: arms x values, for arms that read it
        pairs: [[gigpo:norm=mean, grpo:norm=mean]]

A run is named by (config, arm, seed) only, so parts that share an arm share its runs.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.files import check_own_path
from training.guarded import GuardError, ParseError, load_yaml, read_limited
from training.local.checks import MAX_SEED
from training.local.config import MAX_CONFIG_BYTES, ConfigError, TrainConfig, load_config
from training.study.arms import (  # noqa: F401  (the arms are planned here; re-exported)
    MAX_ARM_FOLDER,
    Arm,
    axis_arms,
    canonical_value,
    check_arm,
    parse_arm,
)
from training.text import bound_text, did_you_mean, show

#: The most seeds a part may have (a study of more is a typo: each seed is a run per arm).
MAX_SEEDS = 10_000
_PART_KEYS = {"name", "configs", "seeds", "arms", "axes", "pairs"}
_FILE_KEYS = {"jobs", "threads", "overrides", "parts"}


@dataclass
class Part:
    """Arms x configs x seeds, and the pairs to compare."""

    name: str
    configs: list[Path]
    arms: list[Arm]
    seeds: list[int]
    pairs: list[tuple[str, str]] = field(default_factory=list)
    overrides: tuple[str, ...] = ()
    """Config overrides (``--run.iterations=50``) for every run of the part."""


@dataclass(frozen=True)
class Run:
    """One training run of the study."""

    config_path: Path
    name: str
    arm: Arm
    seed: int
    out: Path
    overrides: tuple[str, ...]

    @property
    def estimator(self) -> str:
        return self.arm.estimator

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "training.local",
            "--config",
            str(self.config_path),
            *self.overrides,
            *self.arm.overrides(),
            f"--run.seed={self.seed}",
            f"--run.label={self.arm.name}",
            "--run.progress=false",
            f"--out={self.out}",
        ]


def default_pairs(arms: list[Arm]) -> list[tuple[str, str]]:
    """Each GiGPO arm against the GRPO arm with its ``norm`` (if there is one)."""
    grpo = {dict(a.settings).get("norm"): a.name for a in arms if a.estimator == "grpo"}
    return [
        (a.name, grpo[dict(a.settings).get("norm")])
        for a in arms
        if a.estimator == "gigpo" and dict(a.settings).get("norm") in grpo
    ]


def check_seeds(seeds: Any, where: str) -> list[int]:
    """``seeds``: a count n (0..n-1) or a list of distinct ints in ``[0, 2**32 - 1]`` (the
    trainer's ``run.seed``), at most :data:`MAX_SEEDS` of them.

    Raises:
        ConfigError: naming ``where`` (and the seed's position) and the bound.
    """
    count = seeds if isinstance(seeds, int) and not isinstance(seeds, bool) else None
    count = len(seeds) if isinstance(seeds, list) else count
    if count is not None and count > MAX_SEEDS:
        raise ConfigError(f"{where}: at most {MAX_SEEDS} seeds, got {count}")
    if isinstance(seeds, int) and not isinstance(seeds, bool) and seeds > 0:
        return list(range(seeds))
    if (
        not isinstance(seeds, list)
        or not seeds
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds)
        or len(set(seeds)) != len(seeds)
    ):
        raise ConfigError(
            f"{where} must be distinct non-negative ints (or a count), got {show(seeds)}"
        )
    for i, seed in enumerate(seeds):
        if seed > MAX_SEED:
            raise ConfigError(
                f"{where}[{i}]: a seed is the trainer's run.seed, in [0, {MAX_SEED}] "
                f"(2**32 - 1), got {show(seed)}"
            )
    return list(seeds)


def check_pairs(pairs: Any, arms: list[Arm], where: str) -> list[tuple[str, str]]:
    """``[[A, B], ...]`` checked against the part's arms (names in any spelling)."""
    names = {a.name for a in arms}
    if not isinstance(pairs, list | tuple):
        raise ConfigError(f"{where}: a list of [arm A, arm B] pairs, got {show(pairs)}")
    out = []
    for pair in pairs:
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise ConfigError(f"{where}: a pair is [arm A, arm B], got {show(pair)}")
        a, b = (parse_arm(str(x), where).name for x in pair)
        for x in (a, b):
            if x not in names:
                raise ConfigError(
                    f"{where}: {show(x)} is not an arm of the part ({show(sorted(names))})"
                )
        if a == b:
            raise ConfigError(f"{where}: {a!r} is paired with itself")
        out.append((a, b))
    return out


def load_study_file(path: Path) -> tuple[list[Part], dict[str, int]]:
    """The parts of a study file and its options (``jobs``, ``threads``), checked; the
    file's ``overrides`` go into every part.

    Raises:
        ConfigError: naming the dotted key that is wrong.
    """
    try:  # the guarded loader: size, depth, integer digits, no aliases
        text = read_limited(path, "--study", MAX_CONFIG_BYTES).decode("utf-8")
        data = load_yaml(text, f"--study {path}", max_bytes=MAX_CONFIG_BYTES)
    except ParseError as exc:
        raise ConfigError(f"--study {path}: cannot read it ({exc})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--study {path}: cannot read it (not UTF-8: {exc.reason})") from None
    except GuardError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"--study {path}: a mapping with 'parts', got {type(data).__name__}")
    for key in data:
        if key not in _FILE_KEYS:
            raise ConfigError(
                f"--study {path}: unknown key {show(key)}{did_you_mean(key, _FILE_KEYS)} "
                f"(known: {sorted(_FILE_KEYS)})"
            )
    options = {}
    for key in ("jobs", "threads"):
        if key in data:
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1024:
                raise ConfigError(f"{key} must be a positive int (at most 1024), got {show(value)}")
            options[key] = value
    overrides = data.get("overrides") or []
    if not isinstance(overrides, list) or not all(
        isinstance(o, str) and o.startswith("--") and "=" in o for o in overrides
    ):
        raise ConfigError(f"overrides: a list of '--key=value' strings, got {show(overrides)}")
    own = ("--algo.", "--run.seed", "--run.threads", "--run.label", "--run.progress", "--out")
    for o in overrides:
        if o.startswith(own):
            raise ConfigError(
                f"overrides: {o.split('=')[0]} is the study's own (algo.* settings go in the "
                "arms, threads in 'threads', seeds in each part)"
            )
    raw = data.get("parts")
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"parts: a non-empty list of parts, got {show(raw)}")
    parts = []
    for i, entry in enumerate(raw):
        where = f"parts.{i}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: a mapping, got {show(entry)}")
        for key in entry:
            if key not in _PART_KEYS:
                raise ConfigError(
                    f"{where}.{bound_text(str(key), 60)}: unknown key"
                    f"{did_you_mean(key, _PART_KEYS)} (known: {sorted(_PART_KEYS)})"
                )
        configs = entry.get("configs")
        if (
            not isinstance(configs, list)
            or not configs
            or not all(isinstance(c, str) for c in configs)
        ):
            raise ConfigError(
                f"{where}.configs: a non-empty list of YAML paths, got {show(configs)}"
            )
        base = Path(path).parent
        config_paths = [c if Path(c).is_absolute() else base / c for c in map(Path, configs)]
        for c in config_paths:
            if not c.is_file():
                raise ConfigError(f"{where}.configs: no file {c}")
        arms_raw = entry.get("arms")
        if not isinstance(arms_raw, list) or not arms_raw:
            raise ConfigError(
                f"{where}.arms: a non-empty list of arm strings, got {show(arms_raw)}"
            )
        arms = [parse_arm(str(a), f"{where}.arms") for a in arms_raw]
        axes = entry.get("axes") or {}
        if not isinstance(axes, dict):
            raise ConfigError(f"{where}.axes: a mapping key -> list, got {show(axes)}")
        arms = axis_arms(arms, axes, f"{where}.axes") if axes else list(dict.fromkeys(arms))
        seeds = check_seeds(entry.get("seeds", 3), f"{where}.seeds")
        if "pairs" in entry:  # an empty list: no pairs
            pairs = check_pairs(entry["pairs"], arms, f"{where}.pairs")
        else:
            pairs = default_pairs(arms)
        name = entry.get("name", f"part{i}")
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{where}.name: a non-empty string, got {show(name)}")
        parts.append(Part(name, config_paths, arms, seeds, pairs, tuple(overrides)))
    seen: set[str] = set()
    for i, part in enumerate(parts):
        if part.name in seen:
            raise ConfigError(f"parts.{i}.name: {show(part.name)} names another part too")
        seen.add(part.name)
    return parts, options


def plan_runs(
    parts: list[Part], out: Path, quick: bool = False, threads: int = 1
) -> tuple[list[Run], list[Part]]:
    """Every (config, arm, seed) run of the parts, once, with the overrides that make them
    comparable; with ``quick``, a tenth of the iterations and the first 2 seeds of each part.

    Every config is loaded under every arm first, so a setting that an arm's estimator does
    not read (or a bad value) fails here, before anything trains. A ``tiny-random`` model is
    built once per config into ``out/models/`` and shared by all its runs: each run folder's
    ``tiny-model`` (where the trainer looks for a ``tiny-random`` model) is a link to it,
    relative, so that the runs' configs hold no path and a study folder resumes wherever it
    is moved or copied (:func:`link_shared_model`).

    Returns:
        The runs, and the parts (their seeds cut under ``quick``).

    Raises:
        ConfigError: a bad config, arm or seed list.
    """
    names = {}
    for part in parts:
        for path in part.configs:
            other = names.setdefault(Path(path).stem, Path(path).resolve())
            if other != Path(path).resolve():
                raise ConfigError(
                    f"{part.name}: configs: {path} and {other} have one file name, and the "
                    "file name names the runs"
                )
    if quick:
        parts = [Part(p.name, p.configs, p.arms, p.seeds[:2], p.pairs, p.overrides) for p in parts]
    prepared: dict[Path, list[str]] = {}
    for part in parts:
        for path in part.configs:
            overrides = prepared.setdefault(
                path, [*part.overrides, *_overrides(path, part.overrides, quick, threads)]
            )
            if part.overrides != tuple(overrides[: len(part.overrides)]):
                raise ConfigError(f"{part.name}: {path} has other overrides in another part")
            for arm in part.arms:
                try:
                    load_config(path, [*overrides, *arm.overrides()])
                except ConfigError as exc:
                    raise ConfigError(f"{part.name}: arm {arm.name!r}: {exc}") from exc
    # Only now, with every arm checked, build the shared tiny models, and pin a hub id to
    # the commit it resolves to now: every arm and seed trains the same weights.
    shared: dict[Path, Path] = {}
    for path, overrides in prepared.items():
        base = load_config(path, overrides)
        if base.model.name_or_path == "tiny-random":
            shared[path] = _shared_tiny_model(base, out)
        commit = _hub_commit(base)
        if commit is not None:
            overrides.append(f"--model.revision={commit}")
    runs: dict[tuple[str, str, int], Run] = {}
    for part in parts:
        for path in part.configs:
            for arm in part.arms:
                for seed in part.seeds:
                    key = (Path(path).stem, arm.name, seed)
                    runs_dir = "runs-quick" if quick else "runs"  # never mixed with full runs
                    run_out = out / runs_dir / key[0] / arm.folder / f"seed{seed}"
                    check_own_path(out, runs_dir, key[0], arm.folder, f"seed{seed}")
                    run = Run(Path(path), key[0], arm, seed, run_out, tuple(prepared[path]))
                    if runs.setdefault(key, run) is run and path in shared:
                        link_shared_model(shared[path], run_out)
    return list(runs.values()), parts


def _hub_commit(config: TrainConfig) -> str | None:
    """The commit ``model.name_or_path`` resolves to when it is a hub id
    (:func:`training.hub.commit_of`), else None.

    Raises:
        ConfigError: the id cannot be resolved here (naming the command that fetches it).
    """
    from training.hub import ModelNotFoundError, commit_of
    from training.packaged import PACKAGED_MODELS

    m = config.model
    if m.name_or_path in PACKAGED_MODELS:
        return None
    try:
        return commit_of(m.name_or_path, m.revision)
    except ModelNotFoundError as exc:
        raise ConfigError(str(exc)) from None


def link_shared_model(model: Path, run_out: Path) -> None:
    """Makes ``run_out/tiny-model`` a relative link to the study's shared tiny model
    ``model`` (a copy where links cannot be made), unless something is there already (a
    resumed run's link, or a model the trainer built): the trainer finds it there, sees it
    was built with the run's settings, and builds none (:func:`~training.local.model.
    resolve_model_path`)."""
    link = run_out / "tiny-model"
    if link.is_symlink() or link.exists():
        return
    run_out.mkdir(parents=True, exist_ok=True)
    try:
        os.symlink(os.path.relpath(model.resolve(), run_out.resolve()), link, True)
    except OSError:  # no symbolic links here (some Windows setups)
        shutil.copytree(model, link)


def _overrides(path: Path, given: tuple[str, ...], quick: bool, threads: int) -> list[str]:
    base = load_config(path, list(given))
    overrides = [f"--run.threads={threads}"]
    if quick:
        iterations = max(2, base.run.iterations // 10)
        overrides += [
            f"--run.iterations={iterations}",
            f"--eval.every={iterations}",
            "--run.checkpoint_every=0",
        ]
    return overrides


def _shared_tiny_model(config: TrainConfig, out: Path) -> Path:
    from training.local.model import resolve_model_path

    m = config.model
    # Named by its settings, so that configs with the same tiny model share it.
    key = f"tiny-h{m.tiny_hidden_size}-l{m.tiny_layers}-v{m.tiny_vocab_size}-w{m.tiny_warmup_steps}"
    check_own_path(out, "models", key)  # a link planted as models/ is refused
    return resolve_model_path(m, out / "models" / key)
