"""Metrics as JSON lines, and the learning-curve plot.

:func:`iteration_row` builds an iteration's row; ``metrics.jsonl`` holds one object per
iteration (``iteration``, ``success_rate``,
``mean_return``, timings, loss statistics, and ``eval_*`` keys when evaluation ran).
``python -m training.local.plot RUN_DIR [RUN_DIR ...] -o curve.png`` puts several runs
(e.g. GiGPO and a GRPO baseline) on one plot.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from training.files import (
    atomic_write_bytes,
    atomic_write_text,
    check_writable_target,
    open_append,
)
from training.guarded import GuardError, read_json_lines
from training.text import bound_text, show

METRICS_FILE = "metrics.jsonl"
#: Keys every metrics row holds (a value may be null: a non-finite number is written so).
REQUIRED_KEYS = ("iteration", "success_rate", "mean_return")
#: Endings of the keys that count or measure (records, steps, tokens, groups): never < 0.
COUNT_ENDINGS = ("_records", "_length", "episodes", "steps", "_size", "_tokens", "_groups")


def iteration_row(
    iteration: int,
    estimator: str,
    rollout: Any,
    advantages: Any,
    group_summary: dict[str, Any],
    *,
    lr: float,
    update_stats: dict[str, float],
    times: dict[str, float],
) -> dict[str, Any]:
    """One iteration's metrics, in file order: the episodes (of a
    :class:`~training.local.rollout.Rollout`), the advantages (an
    :class:`~training.advantages.Advantages`) and the step groups
    (:func:`training.stats.step_group_summary`), the learning rate, the update's statistics,
    then the timings (seconds; ``time_iteration`` is added last by the loop)."""
    records = rollout.records
    return {
        "iteration": iteration,
        "estimator": estimator,
        "success_rate": float(rollout.episode_won.mean()),
        "mean_return": float(rollout.episode_returns.mean()),
        "mean_episode_length": float(rollout.episode_lengths.mean()),
        "valid_action_rate": float(np.mean(records.is_action_valid)),
        "step_records": len(records),
        "generated_tokens": rollout.generated_tokens,
        "mean_abs_advantage": float(np.abs(advantages.advantages).mean()),
        "mean_abs_episode_advantage": float(np.abs(advantages.episode_advantages).mean()),
        "mean_abs_step_advantage": float(np.abs(advantages.step_advantages).mean()),
        "step_group_coverage": float(group_summary["step_group_coverage"]),
        "step_group_mean_size": float(group_summary["step_group_mean_size"]),
        "step_groups": float(group_summary["step_groups"]),
        "lr": lr,
        **update_stats,
        "time_generation": rollout.generation_seconds,
        "time_env": rollout.env_seconds,
        **times,
    }


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Reads a metrics file (or a run dir holding one; none there: no rows), every row
    checked (:func:`metrics_problem`) through the guarded reader (:mod:`training.guarded`).

    A last line without its newline (a write a crash cut short, the expected kind of
    damage) is left out: that loses only that iteration's row, which a resumed run writes
    again.

    Raises:
        training.guarded.GuardError: a whole line that is not a metrics row (the file, line
            and field named), or a file over the guarded reader's limits.
    """
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    rows: list[dict[str, Any]] = []
    for number, row in read_json_lines(path, "metrics file", expect=dict, nonfinite=True):
        problem = metrics_problem(row, rows[-1]["iteration"] if rows else -1)
        if problem:
            raise GuardError(f"{bound_text(path, 300)} line {number}: {problem}")
        rows.append(row)
    return rows


def metrics_problem(row: dict[str, Any], previous: int = -1) -> str:
    """What makes ``row`` no metrics row after the row of iteration ``previous``, or ``""``:
    ``iteration`` an int after ``previous`` (two runs writing one file repeat iterations);
    every value a number, string, true/false or null (:class:`MetricsLog` writes a
    non-finite number as null); a ``*_rate`` and ``step_group_coverage`` in [0, 1]; a count
    (a key ending in one of :data:`COUNT_ENDINGS`) >= 0; every :data:`REQUIRED_KEYS` there."""
    iteration = row.get("iteration")
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration <= previous:
        return f"iteration must be an int after the row before's {previous}, got {show(iteration)}"
    for key, value in row.items():
        if isinstance(value, float) and not math.isfinite(value):
            return f"{bound_text(key, 60)} must be a finite number or null, got {value}"
        if value is not None and not isinstance(value, bool | int | float | str):
            return f"{bound_text(key, 60)} must be a number, string or null, got {show(value)}"
        share = key.endswith("_rate") or key == "step_group_coverage"
        if (
            share
            and value is not None
            and (isinstance(value, bool | str) or not 0.0 <= value <= 1.0)
        ):
            return f"{bound_text(key, 60)} must be a share in [0, 1] or null, got {show(value)}"
        if key.endswith(COUNT_ENDINGS) and isinstance(value, int | float) and value < 0:
            return f"{bound_text(key, 60)} must be a count >= 0 or null, got {show(value)}"
    missing = [key for key in REQUIRED_KEYS if key not in row]
    if missing:
        return f"lacks {', '.join(missing)} (every metrics row has {', '.join(REQUIRED_KEYS)})"
    return ""


class MetricsLog:
    """Appends one JSON line per iteration to ``out/metrics.jsonl``.

    On resume, rows of iterations past the checkpoint (written after it, then lost with the
    crash) are dropped so the file never holds an iteration twice.
    """

    def __init__(self, out: Path, completed: int = 0) -> None:
        """Raises UnsafeFileError (a symlink, FIFO or folder planted as the file) or
        GuardError (rows that cannot be read), each naming the file, before anything is
        written."""
        self.path = out / METRICS_FILE
        check_writable_target(self.path)  # never read through, nor replace, a planted link
        kept = [r for r in read_metrics(self.path) if r["iteration"] < completed]
        # Rewritten whole (a crash mid-write keeps the old file): rows are never lost.
        atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in kept))

    def write(self, row: dict[str, Any]) -> None:
        clean = {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in row.items()
        }
        with open_append(self.path) as f:  # never through a link planted in its place
            f.write((json.dumps(clean) + "\n").encode("utf-8"))


def plot_curves(runs: dict[str, list[dict[str, Any]]], path: str | Path) -> Path:
    """Writes a PNG: success rate, mean return and valid-action rate per iteration, one line
    per run.

    Args:
        runs: label -> metrics rows.
        path: the PNG file to write.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for index, (label, rows) in enumerate(runs.items()):
        color = f"C{index % 10}"  # one color per run on every panel
        its = [r["iteration"] for r in rows]  # numbered as metrics.jsonl: from 0
        for ax, key in zip(axes, ("success_rate", "mean_return", "valid_action_rate"), strict=True):
            ax.plot(its, [r.get(key) for r in rows], marker="o", color=color, label=label)
        evals = [r for r in rows if r.get("eval_success_rate") is not None]
        if evals:
            axes[0].plot(
                [r["iteration"] for r in evals],
                [r["eval_success_rate"] for r in evals],
                linestyle="--",
                marker="x",
                color=color,
                alpha=0.7,
                label=f"{label} (held-out)",
            )
    axes[0].set(xlabel="iteration", ylabel="success rate", ylim=(-0.05, 1.05))
    axes[1].set(xlabel="iteration", ylabel="mean episode return")
    axes[2].set(xlabel="iteration", ylabel="valid-action rate", ylim=(-0.05, 1.05))
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path = Path(path)
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=100, format=Path(path).suffix.lstrip(".") or "png")
    atomic_write_bytes(path, buffer.getvalue())
    plt.close(fig)
    return path


def read_stats(stats: dict[str, Any]) -> dict[str, float]:
    """0-d tensors (and numbers) as Python floats, read from the device at once (one wait,
    not one a statistic)."""
    import torch

    names = list(stats)
    values = [torch.as_tensor(stats[n], dtype=torch.float32).reshape(()) for n in names]
    if not values:
        return {}
    device = values[0].device
    return dict(zip(names, torch.stack([v.to(device) for v in values]).tolist(), strict=True))
