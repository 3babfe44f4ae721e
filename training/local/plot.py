"""``python -m training.local.plot RUN_DIR [RUN_DIR ...] -o curve.png``: runs on one plot."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from training.local.metrics import plot_curves, read_metrics


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.local.plot")
    parser.add_argument("runs", nargs="+", help="run directories holding metrics.jsonl")
    parser.add_argument("-o", "--output", default="curve.png", help="PNG to write")
    args = parser.parse_args(argv)
    runs = {}
    for run in args.runs:
        rows = read_metrics(run)
        if not rows:
            parser.error(f"{run} holds no metrics.jsonl rows")
        label = Path(run).name
        config = Path(run) / "config.json"
        if config.exists():
            run_cfg = json.loads(config.read_text())
            label = run_cfg["run"].get("label") or run_cfg["algo"]["estimator"]
        runs[label] = rows
    print(plot_curves(runs, args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
