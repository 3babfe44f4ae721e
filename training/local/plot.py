"""``python -m training.local.plot RUN_DIR [RUN_DIR ...] -o curve.png``: runs on one plot."""

from __future__ import annotations

import sys
from pathlib import Path

from training.commands import CommandParser
from training.guarded import GuardError, read_json_file
from training.local.metrics import plot_curves, read_metrics
from training.text import bound_text


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(prog="python -m training.local.plot")
    parser.add_argument("runs", nargs="+", help="run directories holding metrics.jsonl")
    parser.add_argument("-o", "--output", default="curve.png", help="PNG to write")
    args = parser.parse_args(argv)
    runs = {}
    for run in args.runs:
        try:
            rows = read_metrics(run)
        except GuardError as exc:
            parser.error(str(exc))
        if not rows:
            parser.error(f"{run} holds no metrics.jsonl rows")
        label = Path(run).name
        config = Path(run) / "config.json"
        if config.exists():
            try:  # the guarded reader; a config's free-form env.kwargs may hold .inf
                run_cfg = read_json_file(config, "config", nonfinite=True)
                label = str(run_cfg["run"].get("label") or run_cfg["algo"]["estimator"])
            except (GuardError, KeyError, TypeError, AttributeError) as exc:
                parser.error(f"{config}: no run config ({bound_text(exc, 300)})")
        runs[label] = rows
    print(plot_curves(runs, args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
