"""``python -m training.study``: one recipe trained under several arms and seeds.

Every run of a study shares the model, the tasks, the budget and every setting; only the
**arm** (an estimator with some of its ``algo.*`` settings, e.g. ``gigpo:norm=mean``) and
``run.seed`` change. The arms come from the command line (``--estimators``, ``--arm``,
``--axis``) or from a study file (``--study``, see :mod:`training.study.plan`), which can
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

This module reads the command line; the study is :mod:`training.study` (read
:mod:`training.study.runs` first).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from training.commands import CommandParser, interrupted, invoked_as
from training.files import UnsafeFileError
from training.local.config import ConfigError
from training.locks import FolderLockError
from training.study.parts import command_line_parts
from training.study.plan import Part
from training.study.plan import plan_runs as plan_part_runs
from training.study.runs import hold_study, run_all, write_study


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(
        prog=invoked_as("training.study"),
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
    for flag, value in (("--jobs", args.jobs), ("--threads", args.threads)):
        if value is not None and not 1 <= value <= 1024:
            parser.fail(f"{flag} must be a positive int (at most 1024), got {value}")
    out = Path(args.out)
    tick = time.perf_counter()
    try:
        parts, options = _parts(args)
    except ConfigError as exc:
        parser.fail(str(exc))
    try:
        # Held before planning, which builds the shared tiny models into out/models/.
        lock = hold_study(out)
    except FolderLockError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    with lock:
        try:
            jobs = args.jobs or options.get("jobs", 2)
            threads = args.threads or options.get("threads", 1)
            runs, parts = plan_part_runs(parts, out, args.quick, threads)
        except (ConfigError, UnsafeFileError) as exc:  # a link planted as out/models, ...
            lock.discard()  # a folder made for a study that cannot run is removed again
            parser.fail(str(exc))
        except KeyboardInterrupt:
            lock.discard()
            return interrupted(parser.prog, "while planning; no run was started")
        command = "python -m training.study " + " ".join(argv if argv is not None else sys.argv[1:])
        try:
            run_all(runs, jobs)
            header = (
                f"## Estimator study\n\n`{command}`: {len(runs)} runs, "
                f"{(time.perf_counter() - tick) / 60:.1f} min wall (this invocation), "
                f"{os.cpu_count()} CPU cores, {jobs} runs at once, {threads} torch thread(s) "
                "each."
            )
            write_study(runs, parts, out, header)
        except (ValueError, UnsafeFileError) as exc:  # ConfigError, GuardError, a link: named
            print(f"{parser.prog}: error: {exc}", file=sys.stderr)
            return 2
        except RuntimeError as exc:  # a run failed: its folder and log named
            print(f"{parser.prog}: error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return interrupted(parser.prog, f"finished runs are kept in {out}, a half-done "
                               "run resumes from its checkpoint; run the same command to "
                               "resume")  # fmt: skip
    print((out / "study.md").read_text())
    return 0


def _parts(args: argparse.Namespace) -> tuple[list[Part], dict[str, int]]:
    """The parts from ``--study`` or from the command line's configs, arms and axes."""
    return command_line_parts(
        study=args.study, part=args.part, config=args.config, estimators=args.estimators,
        arm=args.arm, axis=args.axis, pair=args.pair, seeds=args.seeds,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
