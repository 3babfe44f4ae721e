"""The estimator study's numbers: per run, per arm (mean and 95% interval over seeds), per
pair of arms (the per-seed paired difference), as tables, JSON and curves."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

from training.files import atomic_write_bytes
from training.guarded import GuardError, read_limited
from training.local.config import ConfigError, TrainConfig
from training.local.metrics import METRICS_FILE, read_metrics
from training.stats import mean_ci, paired_difference
from training.study.plan import Part, Run

#: The arm table's columns: (key in a run's summary, heading).
COLUMNS = (
    ("train_success", "training success (last quarter)"),
    ("auc_success", "training success (all iterations)"),
    ("heldout_success", "held-out success (last eval)"),
    ("valid_action_rate", "valid actions (last quarter)"),
    ("step_group_coverage", "records in step groups >= 2"),
    ("step_group_mean_size", "mean step-group size"),
    ("minutes", "minutes per run"),
)
#: What the paired table compares (key, heading).
PAIRED = (
    ("train_success", "training success, last quarter"),
    ("auc_success", "training success, all iterations"),
    ("heldout_success", "held-out success, last eval"),
)


def summarize_run(out: Path) -> dict[str, Any]:
    """The numbers the study reports for one finished run.

    ``train_success`` and ``valid_action_rate``: mean over the last quarter of the
    iterations; ``auc_success``: mean training success over every iteration (how soon a run
    learns); ``heldout_success``: the last evaluation; the step-group statistics: mean over
    the iterations.

    Raises:
        ConfigError: the run's metrics are unreadable (:func:`~training.local.metrics.
            read_metrics` checks every row), missing, or lack a number the study reads (the
            file, line and field named); its ``wall_seconds.txt`` holds no number of seconds.
    """
    path = out / METRICS_FILE
    try:
        rows = read_metrics(path)
    except GuardError as exc:
        raise ConfigError(f"{exc}; the study reads every run's metrics") from None
    if not rows:
        raise ConfigError(f"{path}: no metrics rows; the run did not finish an iteration")
    for number, row in enumerate(rows, 1):  # rows are whole lines, in order
        for key in ("success_rate", "valid_action_rate"):
            if key not in row or (key == "success_rate" and row[key] is None):
                raise ConfigError(f"{path} line {number} (iteration {row['iteration']}): no "
                                  f"{key}; the study reads it from every row")  # fmt: skip
    tail = rows[-max(1, len(rows) // 4) :]
    evals = [r for r in rows if r.get("eval_success_rate") is not None]
    return {
        "train_success": _mean(r["success_rate"] for r in tail),
        "auc_success": _mean(r["success_rate"] for r in rows),
        "heldout_success": evals[-1]["eval_success_rate"] if evals else math.nan,
        "heldout_first": evals[0]["eval_success_rate"] if evals else math.nan,
        "valid_action_rate": _mean(r["valid_action_rate"] for r in tail),
        "step_group_coverage": _mean(r.get("step_group_coverage", math.nan) for r in rows),
        "step_group_mean_size": _mean(r.get("step_group_mean_size", math.nan) for r in rows),
        "minutes": _wall_seconds(out / "wall_seconds.txt") / 60,
        "curve": {
            "iteration": [r["iteration"] for r in rows],  # from 0, as metrics.jsonl
            "success_rate": [r["success_rate"] for r in rows],
            "valid_action_rate": [r["valid_action_rate"] for r in rows],
            "eval_iteration": [r["iteration"] for r in evals],
            "eval_success_rate": [r["eval_success_rate"] for r in evals],
        },
    }


def summarize(runs: list[Run], parts: list[Part]) -> dict[str, Any]:
    """``{"runs": {config: {arm: entry}}, "parts": [...]}``: each arm's per-seed values and
    their mean and 95% interval, and each part's pairs with their paired differences."""
    by_run = {(r.name, r.arm.name, r.seed): summarize_run(r.out) for r in runs}
    table: dict[str, dict[str, Any]] = {}
    for (config, arm, seed), summary in sorted(by_run.items(), key=lambda kv: kv[0][2]):
        entry = table.setdefault(config, {}).setdefault(
            arm, {"seeds": [], "per_seed": {}, "curves": []}
        )
        summary = dict(summary)
        entry["seeds"].append(seed)
        entry["curves"].append(summary.pop("curve"))
        for key, value in summary.items():
            entry["per_seed"].setdefault(key, []).append(value)
    for by_arm in table.values():
        for entry in by_arm.values():
            entry["mean_ci"] = {k: mean_ci(v) for k, v in entry["per_seed"].items()}
    out_parts = []
    for part in parts:
        configs = [Path(c).stem for c in part.configs]
        pairs = []
        for config in configs:
            for a, b in part.pairs:
                seeds = [
                    s for s in part.seeds if (config, a, s) in by_run and (config, b, s) in by_run
                ]
                diffs = {
                    key: paired_difference(
                        [by_run[(config, a, s)][key] for s in seeds],
                        [by_run[(config, b, s)][key] for s in seeds],
                    )
                    for key, _ in PAIRED
                }
                pairs.append({"config": config, "a": a, "b": b, "seeds": seeds, "diff": diffs})
        out_parts.append(
            {
                "name": part.name,
                "configs": configs,
                "arms": [a.name for a in part.arms],
                "seeds": part.seeds,
                "pairs": pairs,
            }
        )
    return {"runs": table, "parts": out_parts}


def write_table(study: dict[str, Any], configs: dict[str, TrainConfig], header: str) -> str:
    """The markdown report: per part and config, the arm table and the paired table."""
    lines = [header, ""]
    for part in study["parts"]:
        for name in part["configs"]:
            config = configs[name]
            lines += [
                f"### {part['name']}: {name}, `{config.env.id}` {json.dumps(config.env.kwargs)}",
                "",
                "| arm | seeds | " + " | ".join(h for _, h in COLUMNS) + " |",
                "| --- | --- |" + " --- |" * len(COLUMNS),
            ]
            for arm in part["arms"]:
                entry = study["runs"][name][arm]
                seeds = [s for s in entry["seeds"] if s in part["seeds"]]
                pick = [entry["seeds"].index(s) for s in seeds]
                cells = []
                for key, _ in COLUMNS:
                    mean, half = mean_ci([entry["per_seed"][key][i] for i in pick])
                    digits = 1 if key in ("minutes", "step_group_mean_size") else 2
                    cells.append(f"{mean:.{digits}f} ± {half:.{digits}f}")
                lines.append(f"| `{arm}` | {len(seeds)} | " + " | ".join(cells) + " |")
            lines.append("")
            pairs = [p for p in part["pairs"] if p["config"] == name]
            if pairs:
                lines += [
                    "| A - B (same seed) | seeds | " + " | ".join(h for _, h in PAIRED) + " |",
                    "| --- | --- |" + " --- |" * len(PAIRED),
                ]
                for p in pairs:
                    cells = [paired_cell(p["diff"][key]) for key, _ in PAIRED]
                    label = f"`{p['a']}` - `{p['b']}`"
                    lines.append(f"| {label} | {len(p['seeds'])} | " + " | ".join(cells) + " |")
                lines.append("")
    lines.append(
        "Arm tables: mean ± half-width of the 95% confidence interval over seeds (Student's "
        "t). Paired tables: the mean over seeds of A's value less B's on the same seed, its "
        "95% t interval, then A ahead / behind / tied in how many seeds and the exact "
        "two-sided sign test's p (ties left out)."
    )
    return "\n".join(lines) + "\n"


def paired_cell(d: dict[str, Any]) -> str:
    """``+0.12 [+0.03, +0.21] 7/1/0 p=0.07``."""
    if d["n"] < 2:
        return "n/a" if d["n"] == 0 else f"{d['mean']:+.2f} (1 seed)"
    return (
        f"{d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}] "
        f"{d['wins']}/{d['losses']}/{d['ties']} p={d['p_sign']:.2g}"
    )


def plot_study(study: dict[str, Any], path: Path) -> Path:
    """One row of panels per config: training success, held-out success and valid-action
    rate over iterations; mean over seeds with its 95% band, one colour per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("success_rate", "iteration", "training success"),
        ("eval_success_rate", "eval_iteration", "held-out success (greedy)"),
        ("valid_action_rate", "iteration", "valid-action rate"),
    )
    runs = study["runs"]
    fig, axes = plt.subplots(len(runs), 3, figsize=(15, 3.8 * len(runs)), squeeze=False)
    every_arm = sorted({arm for by_arm in runs.values() for arm in by_arm})
    colours = {arm: f"C{i % 10}" for i, arm in enumerate(every_arm)}  # one per arm
    for row, (name, by_arm) in enumerate(runs.items()):
        for arm, entry in by_arm.items():
            color = colours[arm]
            for ax, (key, x_key, title) in zip(axes[row], panels, strict=True):
                curves = [c for c in entry["curves"] if c[key]]
                if not curves:
                    continue
                length = min(len(c[key]) for c in curves)
                xs = curves[0][x_key][:length]
                stats = [mean_ci([c[key][i] for c in curves]) for i in range(length)]
                means = [m for m, _ in stats]
                ax.plot(xs, means, color=color, label=f"{arm} ({len(curves)} seeds)")
                ax.fill_between(
                    xs,
                    [m - h for m, h in stats],
                    [m + h for m, h in stats],
                    color=color,
                    alpha=0.12,
                )
                ax.set_title(f"{name}: {title}")
                ax.set_xlabel("iteration")
                ax.set_ylim(-0.05, 1.05)
        axes[row][0].legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=90, format=Path(path).suffix.lstrip(".") or "png")
    atomic_write_bytes(path, buffer.getvalue())
    plt.close(fig)
    return path


def _wall_seconds(path: Path) -> float:
    """The seconds a run took (``wall_seconds.txt``, written when it finished), NaN when the
    file is not there.

    Raises:
        ConfigError: the file holds no finite number of seconds >= 0.
    """
    if not path.is_file():
        return math.nan
    try:
        seconds = float(read_limited(path, "", 100).decode("ascii"))
    except (GuardError, UnicodeDecodeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ConfigError(f"{path}: not a number of seconds; delete it (the run is kept)")
    return seconds


def _mean(values: Any) -> float:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return sum(values) / len(values) if values else math.nan
