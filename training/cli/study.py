"""``python -m training.study``: one recipe trained under several arms and seeds.

Every run of a study shares the model, the tasks, the budget and every setting; only the
**arm** (an estimator with some of its ``algo.*`` settings, e.g. ``gigpo:norm=mean``) and
``run.seed`` change. The arms come from the command line (``--estimators``, ``--arm``,
``--axis``) or from a study file (``--study``, see :mod:`training.cli.study_plan`), which can
hold several parts, each with its configs, arms, seeds and pairs. The study trains every
(config, arm, seed) once with the local trainer, ``--jobs`` at a time, then writes into
``--out``:

* ``study.md``: per part and config, the arm table (mean over seeds and 95% interval of the
  training success, last quarter and all iterations, held-out success, valid-action rate,
  step-group statistics, minutes per run) and the paired table: for each pair (A, B), A's
  value less B's on the same seed, its 95% interval and a sign-test count;
* ``study.png``: per config, training success, held-out success and valid-action rate over
  iterations, mean and 95% band over seeds, one colour per arm;
* ``study.json``: the same numbers, and the per-seed values they come from;
* ``runs/<config>/<arm>/seed<k>/``: each run's own metrics, config and curve.

A study that is stopped resumes where it was (finished runs are kept, a half-done run
resumes from its checkpoint). ``--quick`` cuts every run to a tenth of its iterations (at
least 2) and every part to its first 2 seeds, for a smoke test of the whole pipeline.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from training.cli.study_plan import (
    Arm,
    Part,
    Run,
    axis_arms,
    check_pairs,
    check_seeds,
    default_pairs,
    load_study_file,
    parse_arm,
)
from training.cli.study_plan import plan_runs as plan_part_runs
from training.cli.study_report import plot_study, summarize, summarize_run, write_table
from training.files import atomic_write_text
from training.local.config import TRAINER_ESTIMATORS, ConfigError, TrainConfig, load_config
from training.local.metrics import read_metrics
from training.stats import mean_ci

__all__ = ["main", "mean_ci", "plan_runs", "run_all", "summarize", "summarize_run"]


def plan_runs(
    configs: list[Path],
    estimators: list[str],
    seeds: list[int],
    out: Path,
    quick: bool = False,
    threads: int = 1,
    arms: list[Arm] | None = None,
) -> list[Run]:
    """Every (config, arm, seed) run of one part: the ``estimators`` with the configs'
    settings, then the ``arms``. See :func:`training.cli.study_plan.plan_runs`.

    Raises:
        ConfigError: a bad config, estimator, arm or seed list.
    """
    unknown = [e for e in estimators if e not in TRAINER_ESTIMATORS]
    if unknown or not (estimators or arms):
        raise ConfigError(f"--estimators must name some of {TRAINER_ESTIMATORS}, got {estimators}")
    seeds = check_seeds(list(seeds), "--seeds")
    all_arms = list(dict.fromkeys([Arm(e) for e in estimators] + list(arms or [])))
    part = Part("study", [Path(c) for c in configs], all_arms, seeds)
    return plan_part_runs([part], out, quick, threads)[0]


def run_all(runs: list[Run], jobs: int, log: Any = sys.stderr) -> None:
    """Trains the runs, ``jobs`` at a time, each in its own process; a finished run (its
    metrics hold every iteration) is skipped.

    Raises:
        ConfigError: before anything trains, a run folder that holds a run with other
            settings (another study, another budget) than planned.
        RuntimeError: a run failed; the runs not started yet are cancelled.
    """
    for run in runs:
        _check_existing(run)

    def one(run: Run) -> None:
        config = load_config(run.config_path, run.argv()[5:])
        if _finished(run.out, config):
            return
        run.out.mkdir(parents=True, exist_ok=True)
        tick = time.perf_counter()
        with (run.out / "train.log").open("w") as stream:
            code = subprocess.call(
                run.argv(), stdout=stream, stderr=subprocess.STDOUT, env=_child_env()
            )
        seconds = time.perf_counter() - tick
        if code != 0:
            raise RuntimeError(f"{run.out} failed (exit {code}); see {run.out / 'train.log'}")
        atomic_write_text(run.out / "wall_seconds.txt", f"{seconds:.1f}\n")
        print(f"done {run.name} {run.arm.name} seed {run.seed} in {seconds:.0f} s", file=log)

    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        for future in [pool.submit(one, run) for run in runs]:
            future.result()
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _check_existing(run: Run) -> None:
    """A run folder that already holds a run must hold this one: same settings (those a
    resume may change aside), no more iterations than planned."""
    from training.local.resume import config_changes

    saved = run.out / "config.json"
    if not saved.is_file():
        return
    config = load_config(run.config_path, run.argv()[5:])
    try:
        changes = config_changes(json.loads(saved.read_text(encoding="utf-8")), config)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{saved}: cannot read it ({exc}); use another --out") from exc
    changes = [c for c in changes if not c.startswith(("run.label", "run.progress", "out"))]
    rows = read_metrics(run.out)
    if rows and rows[-1]["iteration"] + 1 > config.run.iterations:
        changes.append(
            f"run.iterations: {rows[-1]['iteration'] + 1} played -> {config.run.iterations}"
        )
    if changes:
        raise ConfigError(
            f"{run.out} holds a run with other settings ({'; '.join(changes[:4])}); "
            "use another --out"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.study",
        description="Train one recipe under several arms (estimator + settings) and seeds; "
        "write tables with 95% intervals, paired per-seed differences, and a plot.",
    )
    parser.add_argument(
        "--study", help="a study file (YAML: parts of configs, arms, pairs), or a shipped "
        "study's name (paper: training/studies/paper.yaml)",
    )  # fmt: skip
    parser.add_argument("--part", action="append", help="with --study: only these parts")
    parser.add_argument("--config", action="append", help="YAML (repeatable)")
    parser.add_argument("--estimators", nargs="*", default=None, help="plain estimators")
    parser.add_argument(
        "--arm", action="append", default=[], help="an estimator with settings, e.g. "
        "gigpo:norm=mean,step_weight=2 (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--axis", action="append", default=[], help="KEY=v1,v2: every arm (and estimator) "
        "that reads algo.KEY, once per value (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--pair", nargs=2, action="append", default=[], metavar=("A", "B"),
        help="report A - B per seed (default: each GiGPO arm against GRPO with its norm)",
    )  # fmt: skip
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="default 0 1 2")
    parser.add_argument("--out", default="runs/study")
    parser.add_argument("--jobs", type=int, default=None, help="runs trained at once (2)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per run (1)")
    parser.add_argument(
        "--quick", action="store_true", help="a tenth of the iterations, 2 seeds per part"
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    tick = time.perf_counter()
    try:
        parts, options = _parts(args)
        jobs = args.jobs or options.get("jobs", 2)
        threads = args.threads or options.get("threads", 1)
        runs, parts = plan_part_runs(parts, out, args.quick, threads)
    except ConfigError as exc:
        parser.error(str(exc))
    run_all(runs, jobs)
    study = summarize(runs, parts)
    configs = {r.name: load_config(r.config_path, list(r.overrides)) for r in runs}
    command = "python -m training.study " + " ".join(argv if argv is not None else sys.argv[1:])
    header = (
        f"## Estimator study\n\n`{command}`: {len(runs)} runs, "
        f"{(time.perf_counter() - tick) / 60:.1f} min wall (this invocation), "
        f"{os.cpu_count()} CPU cores, {jobs} runs at once, {threads} torch thread(s) each."
    )
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "study.md", write_table(study, configs, header))
    atomic_write_text(out / "study.json", json.dumps(study, indent=1) + "\n")
    plot_study(study, out / "study.png")
    print((out / "study.md").read_text())
    return 0


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


def _parts(args: argparse.Namespace) -> tuple[list[Part], dict[str, int]]:
    """The parts from ``--study`` or from the command line's configs, arms and axes."""
    if args.study:
        mixed = [f for f in ("config", "estimators", "seeds") if getattr(args, f)]
        mixed += [f for f in ("arm", "axis", "pair") if getattr(args, f)]
        if mixed:
            raise ConfigError(f"--study holds the arms and configs; drop --{mixed[0]}")
        parts, options = load_study_file(study_path(args.study))
        if args.part:
            unknown = set(args.part) - {p.name for p in parts}
            if unknown:
                raise ConfigError(f"--part: no part {sorted(unknown)} in {args.study}")
            parts = [p for p in parts if p.name in args.part]
        return parts, options
    if not args.config:
        raise ConfigError("give --config (repeatable) or --study")
    if args.part:
        raise ConfigError("--part needs --study")
    estimators = TRAINER_ESTIMATORS if args.estimators is None and not args.arm else (
        args.estimators or []
    )  # fmt: skip
    unknown = [e for e in estimators if e not in TRAINER_ESTIMATORS]
    if unknown or not (estimators or args.arm):
        raise ConfigError(f"--estimators must name some of {TRAINER_ESTIMATORS}, got {estimators}")
    arms = [Arm(e) for e in estimators] + [parse_arm(a) for a in args.arm]
    axes: dict[str, list[Any]] = {}
    for item in args.axis:
        key, eq, values = item.partition("=")
        if not eq or not values:
            raise ConfigError(f"--axis: KEY=v1,v2,..., got {item!r}")
        axes[key.strip()] = [v.strip() for v in values.split(",") if v.strip()]
    arms = axis_arms(arms, axes, "--axis") if axes else list(dict.fromkeys(arms))
    seeds = check_seeds(args.seeds if args.seeds is not None else [0, 1, 2], "--seeds")
    pairs = check_pairs(args.pair, arms, "--pair") or default_pairs(arms)
    return [Part("study", [Path(c) for c in args.config], arms, seeds, pairs)], {}


# ----------------------------------------------------------------------------- internals


def _finished(out: Path, config: TrainConfig) -> bool:
    rows = read_metrics(out)
    return bool(rows) and rows[-1]["iteration"] + 1 >= config.run.iterations


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


if __name__ == "__main__":
    sys.exit(main())
