"""``python -m training.cli.study``: the same config under several estimators and seeds.

Every run of a study shares the model, the tasks, the budget and every setting; only
``algo.estimator`` and ``run.seed`` change. For each config (one environment each) the study
trains every (estimator, seed) with the local trainer, then writes into ``--out``:

* ``study.md``: one table per environment: per estimator, the mean over seeds and its 95%
  confidence interval (Student's t) of the training success rate (mean of the last quarter
  of the iterations), the held-out success rate (last evaluation), the valid-action rate
  (last quarter), and the step-group statistics GiGPO depends on, measured in the runs
  (share of step records in a step group of size >= 2, mean step-group size);
* ``study.png``: per environment, training success, held-out success and valid-action rate
  over iterations, mean and 95% band over seeds, one colour per estimator;
* ``study.json``: the same numbers, and the per-seed values they come from;
* ``runs/<config>/<estimator>/seed<k>/``: each run's own metrics, config and curve.

A study that is stopped resumes where it was (finished runs are kept, a half-done run
resumes from its checkpoint). ``--quick`` cuts every run to a sixth of its iterations
(at least 2), for a smoke test of the whole pipeline.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.files import atomic_write_bytes, atomic_write_text
from training.local.config import TRAINER_ESTIMATORS, ConfigError, TrainConfig, load_config
from training.local.metrics import read_metrics
from training.stats import mean_ci

#: The table's columns: (key in a run's summary, heading).
COLUMNS = (
    ("train_success", "training success (last quarter)"),
    ("heldout_success", "held-out success (last eval)"),
    ("valid_action_rate", "valid actions (last quarter)"),
    ("step_group_coverage", "records in step groups >= 2"),
    ("step_group_mean_size", "mean step-group size"),
    ("minutes", "minutes per run"),
)


@dataclass(frozen=True)
class Run:
    """One training run of the study."""

    config_path: Path
    name: str
    estimator: str
    seed: int
    out: Path
    overrides: tuple[str, ...]

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "training.local",
            "--config",
            str(self.config_path),
            *self.overrides,
            f"--algo.estimator={self.estimator}",
            f"--run.seed={self.seed}",
            f"--run.label={self.estimator}",
            "--run.progress=false",
            f"--out={self.out}",
        ]


def plan_runs(
    configs: list[Path],
    estimators: list[str],
    seeds: list[int],
    out: Path,
    quick: bool = False,
    threads: int = 1,
) -> list[Run]:
    """Every (config, estimator, seed) run, with the overrides that make them comparable.

    Each config is loaded once per estimator first, so a setting that an estimator does not
    read fails here, before anything trains. A ``tiny-random`` model is built once per
    config into ``out/models/<config>`` and shared by all its runs (same initial weights).

    Raises:
        ConfigError: a bad config, estimator or seed list.
    """
    unknown = [e for e in estimators if e not in TRAINER_ESTIMATORS]
    if unknown or not estimators:
        raise ConfigError(f"--estimators must name some of {TRAINER_ESTIMATORS}, got {estimators}")
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ConfigError(f"--seeds must be distinct non-negative ints, got {seeds}")
    names = [Path(c).stem for c in configs]
    if len(set(names)) != len(names):
        raise ConfigError(f"config file names must differ (they name the runs): {names}")
    runs = []
    for path, name in zip(configs, names, strict=True):
        base = load_config(path)
        overrides = [f"--run.threads={threads}"]
        if quick:
            iterations = max(2, base.run.iterations // 6)
            overrides += [
                f"--run.iterations={iterations}",
                f"--eval.every={iterations}",
                "--run.checkpoint_every=0",
            ]
        for estimator in estimators:
            load_config(path, [*overrides, f"--algo.estimator={estimator}"])
        if base.model.name_or_path == "tiny-random":
            overrides.append(f"--model.name_or_path={_shared_tiny_model(base, out)}")
        for estimator in estimators:
            for seed in seeds:
                run_out = out / "runs" / name / estimator / f"seed{seed}"
                runs.append(Run(Path(path), name, estimator, seed, run_out, tuple(overrides)))
    return runs


def run_all(runs: list[Run], jobs: int, log: Any = sys.stderr) -> None:
    """Trains the runs, ``jobs`` at a time, each in its own process; a finished run (its
    metrics hold every iteration) is skipped."""

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
        print(f"done {run.name} {run.estimator} seed {run.seed} in {seconds:.0f} s", file=log)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for future in [pool.submit(one, run) for run in runs]:
            future.result()


def summarize_run(out: Path) -> dict[str, Any]:
    """The numbers the study reports for one finished run (see the module docstring)."""
    rows = read_metrics(out)
    if not rows:
        raise ValueError(f"{out} holds no metrics")
    tail = rows[-max(1, len(rows) // 4) :]
    evals = [r for r in rows if "eval_success_rate" in r]
    wall = out / "wall_seconds.txt"
    return {
        "train_success": _mean(r["success_rate"] for r in tail),
        "heldout_success": evals[-1]["eval_success_rate"] if evals else math.nan,
        "heldout_first": evals[0]["eval_success_rate"] if evals else math.nan,
        "valid_action_rate": _mean(r["valid_action_rate"] for r in tail),
        "step_group_coverage": _mean(r.get("step_group_coverage", math.nan) for r in rows),
        "step_group_mean_size": _mean(r.get("step_group_mean_size", math.nan) for r in rows),
        "minutes": float(wall.read_text()) / 60 if wall.exists() else math.nan,
        "curve": {
            "iteration": [r["iteration"] + 1 for r in rows],
            "success_rate": [r["success_rate"] for r in rows],
            "valid_action_rate": [r["valid_action_rate"] for r in rows],
            "eval_iteration": [r["iteration"] + 1 for r in evals],
            "eval_success_rate": [r["eval_success_rate"] for r in evals],
        },
    }


def summarize(runs: list[Run]) -> dict[str, Any]:
    """Per config and estimator: mean and 95% CI over seeds of every column, and the
    per-seed values."""
    study: dict[str, Any] = {}
    for run in runs:
        entry = study.setdefault(run.name, {}).setdefault(
            run.estimator, {"seeds": [], "per_seed": {}, "curves": []}
        )
        summary = summarize_run(run.out)
        entry["seeds"].append(run.seed)
        entry["curves"].append(summary.pop("curve"))
        for key, value in summary.items():
            entry["per_seed"].setdefault(key, []).append(value)
    for by_estimator in study.values():
        for entry in by_estimator.values():
            entry["mean_ci"] = {k: mean_ci(v) for k, v in entry["per_seed"].items()}
    return study


def write_table(study: dict[str, Any], configs: dict[str, TrainConfig], header: str) -> str:
    """The markdown report: one table per environment."""
    lines = [header, ""]
    for name, by_estimator in study.items():
        config = configs[name]
        lines += [f"### {name}: `{config.env.id}` {json.dumps(config.env.kwargs)}", ""]
        lines.append("| estimator | seeds | " + " | ".join(h for _, h in COLUMNS) + " |")
        lines.append("| --- | --- |" + " --- |" * len(COLUMNS))
        for estimator, entry in by_estimator.items():
            cells = []
            for key, _ in COLUMNS:
                mean, half = entry["mean_ci"][key]
                digits = 1 if key in ("minutes", "step_group_mean_size") else 2
                cells.append(f"{mean:.{digits}f} ± {half:.{digits}f}")
            seeds = len(entry["seeds"])
            lines.append(f"| {estimator} | {seeds} | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(
        "Mean ± half-width of the 95% confidence interval over seeds (Student's t). Training "
        "success and valid actions: mean over the last quarter of the iterations. Held-out: "
        "greedy play of held-out tasks at the last evaluation."
    )
    return "\n".join(lines) + "\n"


def plot_study(study: dict[str, Any], path: Path) -> Path:
    """One row of panels per environment: training success, held-out success and
    valid-action rate over iterations; mean over seeds with its 95% band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("success_rate", "iteration", "training success"),
        ("eval_success_rate", "eval_iteration", "held-out success (greedy)"),
        ("valid_action_rate", "iteration", "valid-action rate"),
    )
    fig, axes = plt.subplots(len(study), 3, figsize=(15, 3.8 * len(study)), squeeze=False)
    for row, (name, by_estimator) in enumerate(study.items()):
        for index, (estimator, entry) in enumerate(by_estimator.items()):
            known = estimator in TRAINER_ESTIMATORS
            color = f"C{TRAINER_ESTIMATORS.index(estimator) if known else index}"
            for ax, (key, x_key, title) in zip(axes[row], panels, strict=True):
                curves = [c for c in entry["curves"] if c[key]]
                if not curves:
                    continue
                length = min(len(c[key]) for c in curves)
                xs = curves[0][x_key][:length]
                stats = [mean_ci([c[key][i] for c in curves]) for i in range(length)]
                means = [m for m, _ in stats]
                ax.plot(xs, means, color=color, label=f"{estimator} ({len(curves)} seeds)")
                ax.fill_between(
                    xs,
                    [m - h for m, h in stats],
                    [m + h for m, h in stats],
                    color=color,
                    alpha=0.15,
                )
                ax.set_title(f"{name}: {title}")
                ax.set_xlabel("iteration")
                ax.set_ylim(-0.05, 1.05)
        axes[row][0].legend(loc="lower right")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=90, format=Path(path).suffix.lstrip(".") or "png")
    atomic_write_bytes(path, buffer.getvalue())
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.cli.study",
        description="Train one config under several estimators and seeds; write a table "
        "and a plot with 95% confidence intervals.",
    )
    parser.add_argument("--config", action="append", required=True, help="YAML (repeatable)")
    parser.add_argument("--estimators", nargs="+", default=list(TRAINER_ESTIMATORS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", default="runs/study")
    parser.add_argument("--jobs", type=int, default=2, help="runs trained at once")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--quick", action="store_true", help="a sixth of the iterations")
    args = parser.parse_args(argv)
    out = Path(args.out)
    tick = time.perf_counter()
    try:
        runs = plan_runs(
            [Path(c) for c in args.config],
            args.estimators,
            args.seeds,
            out,
            args.quick,
            args.threads,
        )
    except ConfigError as exc:
        parser.error(str(exc))
    run_all(runs, args.jobs)
    study = summarize(runs)
    configs = {r.name: load_config(r.config_path, list(r.overrides)) for r in runs}
    command = "python -m training.cli.study " + " ".join(argv if argv is not None else sys.argv[1:])
    header = (
        f"## Estimator study\n\n`{command}`: {len(runs)} runs, "
        f"{(time.perf_counter() - tick) / 60:.1f} min wall (this invocation), "
        f"{os.cpu_count()} CPU cores."
    )
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "study.md", write_table(study, configs, header))
    atomic_write_text(out / "study.json", json.dumps(study, indent=1) + "\n")
    plot_study(study, out / "study.png")
    print((out / "study.md").read_text())
    return 0


# ----------------------------------------------------------------------------- internals


def _mean(values: Any) -> float:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return sum(values) / len(values) if values else math.nan


def _finished(out: Path, config: TrainConfig) -> bool:
    rows = read_metrics(out)
    return bool(rows) and rows[-1]["iteration"] + 1 >= config.run.iterations


def _shared_tiny_model(config: TrainConfig, out: Path) -> Path:
    from training.local.model import resolve_model_path

    m = config.model
    # Named by its settings, so that configs with the same tiny model share it.
    key = f"tiny-h{m.tiny_hidden_size}-l{m.tiny_layers}-v{m.tiny_vocab_size}-w{m.tiny_warmup_steps}"
    return resolve_model_path(m, out / "models" / key)


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


if __name__ == "__main__":
    sys.exit(main())
