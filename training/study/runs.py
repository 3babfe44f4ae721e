"""A study's runs trained and its report written: the engine behind ``python -m training.study``
(whose command line is :mod:`training.cli.study`).

:func:`run_all` trains each planned run (:class:`training.study.plan.Run`) in its own
process with the local trainer, ``jobs`` at a time, skipping finished runs and refusing a
folder that holds a run with other settings; :func:`write_study` summarizes them
(:mod:`training.study.report`) into ``study.md``, ``study.json`` and ``study.png``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from training.files import atomic_write_text, open_append
from training.guarded import read_json_file
from training.local.config import ConfigError, TrainConfig, load_config
from training.local.metrics import read_metrics
from training.locks import FolderLock, hold_folder
from training.study.parts import check_estimators
from training.study.plan import Arm, Part, Run, check_seeds
from training.study.plan import plan_runs as plan_part_runs
from training.study.report import plot_study, summarize, write_table


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
    settings, then the ``arms``. See :func:`training.study.plan.plan_runs`.

    Raises:
        ConfigError: a bad config, estimator, arm or seed list.
    """
    estimators = check_estimators(estimators, arms or ())
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
        # appended to: the trainer takes the run folder's lock only once it starts, and a
        # refused second study must not empty the log of the run that holds it
        with open_append(run.out / "train.log") as stream:
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
        changes = config_changes(read_json_file(saved, "run config", nonfinite=True), config)
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


def write_study(runs: list[Run], parts: list[Part], out: Path, header: str) -> dict[str, Any]:
    """Summarizes the trained ``runs`` of ``parts`` into ``out/study.md`` (``header`` first),
    ``out/study.json`` and ``out/study.png``; returns the summary
    (:func:`training.study.report.summarize`)."""
    study = summarize(runs, parts)
    configs = {r.name: load_config(r.config_path, list(r.overrides)) for r in runs}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "study.md", write_table(study, configs, header))
    atomic_write_text(out / "study.json", json.dumps(study, indent=1) + "\n")
    plot_study(study, out / "study.png")
    return study


def hold_study(out: Path) -> FolderLock:
    """Holds the study folder ``out`` for this invocation (:func:`training.locks.hold_folder`,
    kind ``study``; release it, or use ``with``): a second study there, or a folder another
    kind of command made (a training run, an evaluation), is refused before anything is
    written. Each run folder inside is held by its own trainer process.

    Raises:
        FolderLockError: FolderBusyError naming the process holding ``out``, or
            FolderKindError.
    """
    return hold_folder(out, "study", "python -m training.study")


def _finished(out: Path, config: TrainConfig) -> bool:
    rows = read_metrics(out)
    return bool(rows) and rows[-1]["iteration"] + 1 >= config.run.iterations


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env
