"""The estimator study's plan: arms, parts, study files, and the runs they make.

An **arm** is an estimator with some of its settings, written as one string: ``gigpo``,
``grpo:norm=mean``, ``gigpo:norm=mean,step_weight=2``, ``gigpo:similarity=0.9,
similarity_metric=embedding``. The keys are the trainer's ``algo.*`` names (the vocabulary of
:mod:`gigpo_algo`); the string is the arm's name in tables and its run folder.

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

import itertools
import re
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from training.local.config import TRAINER_ESTIMATORS, ConfigError, TrainConfig, load_config
from training.local.schema import AlgoConfig

_KEY = re.compile(r"^[a-z_]+$")
_PART_KEYS = {"name", "configs", "seeds", "arms", "axes", "pairs"}
_FILE_KEYS = {"jobs", "threads", "overrides", "parts"}


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
        raise ConfigError(f"{where}: an arm is a string like 'gigpo:norm=mean', got {spec!r}")
    estimator, colon, rest = spec.strip().partition(":")
    if estimator not in TRAINER_ESTIMATORS:
        raise ConfigError(f"{where}: {spec!r}: the estimator must be one of {TRAINER_ESTIMATORS}")
    known = {f.name for f in fields(AlgoConfig)} - {"estimator"}
    settings: list[tuple[str, str]] = []
    for item in filter(None, (p.strip() for p in rest.split(","))) if rest else []:
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not _KEY.match(key) or not value:
            raise ConfigError(f"{where}: {spec!r}: {item!r} is not key=value")
        if key not in known:
            raise ConfigError(f"{where}: {spec!r}: algo.{key} is not a setting")
        if key in dict(settings):
            raise ConfigError(f"{where}: {spec!r}: algo.{key} is given twice")
        settings.append((key, canonical_value(value)))
    if colon and not settings:
        raise ConfigError(f"{where}: {spec!r}: nothing after ':'")
    return Arm(estimator, tuple(sorted(settings)))


def canonical_value(value: Any) -> str:
    """One spelling per value, as YAML reads it: ``2``, ``2.0`` -> ``2``; ``0.90`` ->
    ``0.9``; ``True`` -> ``true``; None -> ``null``; other text as it is."""
    if isinstance(value, str):
        try:
            value = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
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
            raise ConfigError(f"{where}: algo.{key} is not a setting")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}.{key}: a non-empty list of values, got {values!r}")
    for arm in arms:
        keys = [k for k in axes if arm.estimator in reads[k] and k not in dict(arm.settings)]
        for combo in itertools.product(*(axes[k] for k in keys)):
            extra = tuple((k, canonical_value(v)) for k, v in zip(keys, combo, strict=True))
            out.append(Arm(arm.estimator, tuple(sorted(arm.settings + extra))))
    return list(dict.fromkeys(out))


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
    """``seeds``: a count n (0..n-1) or a list of distinct non-negative ints."""
    if isinstance(seeds, int) and not isinstance(seeds, bool) and seeds > 0:
        return list(range(seeds))
    if (
        not isinstance(seeds, list)
        or not seeds
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds)
        or len(set(seeds)) != len(seeds)
    ):
        raise ConfigError(f"{where} must be distinct non-negative ints (or a count), got {seeds}")
    return list(seeds)


def check_pairs(pairs: Any, arms: list[Arm], where: str) -> list[tuple[str, str]]:
    """``[[A, B], ...]`` checked against the part's arms (names in any spelling)."""
    names = {a.name for a in arms}
    if not isinstance(pairs, list | tuple):
        raise ConfigError(f"{where}: a list of [arm A, arm B] pairs, got {pairs!r}")
    out = []
    for pair in pairs:
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise ConfigError(f"{where}: a pair is [arm A, arm B], got {pair!r}")
        a, b = (parse_arm(str(x), where).name for x in pair)
        for x in (a, b):
            if x not in names:
                raise ConfigError(f"{where}: {x!r} is not an arm of the part ({sorted(names)})")
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
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"--study {path}: cannot read it ({exc})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"--study {path}: a mapping with 'parts', got {type(data).__name__}")
    for key in data:
        if key not in _FILE_KEYS:
            raise ConfigError(f"--study {path}: unknown key {key!r} (known: {sorted(_FILE_KEYS)})")
    options = {}
    for key in ("jobs", "threads"):
        if key in data:
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{key} must be a positive int, got {value!r}")
            options[key] = value
    overrides = data.get("overrides") or []
    if not isinstance(overrides, list) or not all(
        isinstance(o, str) and o.startswith("--") and "=" in o for o in overrides
    ):
        raise ConfigError(f"overrides: a list of '--key=value' strings, got {overrides!r}")
    own = ("--algo.", "--run.seed", "--run.threads", "--run.label", "--run.progress", "--out")
    for o in overrides:
        if o.startswith(own):
            raise ConfigError(
                f"overrides: {o.split('=')[0]} is the study's own (algo.* settings go in the "
                "arms, threads in 'threads', seeds in each part)"
            )
    raw = data.get("parts")
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"parts: a non-empty list of parts, got {raw!r}")
    parts = []
    for i, entry in enumerate(raw):
        where = f"parts.{i}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: a mapping, got {entry!r}")
        for key in entry:
            if key not in _PART_KEYS:
                raise ConfigError(f"{where}.{key}: unknown key (known: {sorted(_PART_KEYS)})")
        configs = entry.get("configs")
        if (
            not isinstance(configs, list)
            or not configs
            or not all(isinstance(c, str) for c in configs)
        ):
            raise ConfigError(f"{where}.configs: a non-empty list of YAML paths, got {configs!r}")
        base = Path(path).parent
        config_paths = [c if Path(c).is_absolute() else base / c for c in map(Path, configs)]
        for c in config_paths:
            if not c.is_file():
                raise ConfigError(f"{where}.configs: no file {c}")
        arms_raw = entry.get("arms")
        if not isinstance(arms_raw, list) or not arms_raw:
            raise ConfigError(f"{where}.arms: a non-empty list of arm strings, got {arms_raw!r}")
        arms = [parse_arm(str(a), f"{where}.arms") for a in arms_raw]
        axes = entry.get("axes") or {}
        if not isinstance(axes, dict):
            raise ConfigError(f"{where}.axes: a mapping key -> list, got {axes!r}")
        arms = axis_arms(arms, axes, f"{where}.axes") if axes else list(dict.fromkeys(arms))
        seeds = check_seeds(entry.get("seeds", 3), f"{where}.seeds")
        if "pairs" in entry:  # an empty list: no pairs
            pairs = check_pairs(entry["pairs"], arms, f"{where}.pairs")
        else:
            pairs = default_pairs(arms)
        name = entry.get("name", f"part{i}")
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{where}.name: a non-empty string, got {name!r}")
        parts.append(Part(name, config_paths, arms, seeds, pairs, tuple(overrides)))
    seen: set[str] = set()
    for i, part in enumerate(parts):
        if part.name in seen:
            raise ConfigError(f"parts.{i}.name: {part.name!r} names another part too")
        seen.add(part.name)
    return parts, options


def plan_runs(
    parts: list[Part], out: Path, quick: bool = False, threads: int = 1
) -> tuple[list[Run], list[Part]]:
    """Every (config, arm, seed) run of the parts, once, with the overrides that make them
    comparable; with ``quick``, a tenth of the iterations and the first 2 seeds of each part.

    Every config is loaded under every arm first, so a setting that an arm's estimator does
    not read (or a bad value) fails here, before anything trains. A ``tiny-random`` model is
    built once per config into ``out/models/`` and shared by all its runs.

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
    # Only now, with every arm checked, build the shared tiny models.
    for path, overrides in prepared.items():
        base = load_config(path, overrides)
        if base.model.name_or_path == "tiny-random":
            overrides.append(f"--model.name_or_path={_shared_tiny_model(base, out)}")
    runs: dict[tuple[str, str, int], Run] = {}
    for part in parts:
        for path in part.configs:
            for arm in part.arms:
                for seed in part.seeds:
                    key = (Path(path).stem, arm.name, seed)
                    runs_dir = "runs-quick" if quick else "runs"  # never mixed with full runs
                    run_out = out / runs_dir / key[0] / arm.folder / f"seed{seed}"
                    run = Run(Path(path), key[0], arm, seed, run_out, tuple(prepared[path]))
                    runs.setdefault(key, run)
    return list(runs.values()), parts


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
    return resolve_model_path(m, out / "models" / key)
