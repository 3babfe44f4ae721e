"""``gigpo-evaluate`` (``python -m training.cli.evaluate``): held-out tasks of any gigpo env
played by any model (:mod:`training.evaluation.heldout`); with ``--suite NAME`` a pinned
evaluation suite played and tabled (:mod:`training.evaluation.suite`); ``--compare DIR...``
tables several suite runs; ``--list-suites`` names the shipped suites. Any
``--section.key=value`` overrides the config, as for the trainer.

Held-out evaluation writes ``summary.json`` and ``episodes.jsonl`` into ``--out`` and prints
the summary as one JSON line (stdout) and one sentence (stderr); a suite prints its table.
This module only reads the command line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from training.commands import CommandParser, interrupted, invoked_as
from training.evaluation.heldout import (
    DEFAULT_BATCH_SIZE,
    PROMPTS,
    EvalSettings,
    ModelError,
    default_out,
    eval_config,
    evaluate_heldout,
    prompt_config,
)
from training.evaluation.suite_file import SuiteError, load_suite, suite_names
from training.evaluation.table import compare
from training.local.config import ConfigError
from training.locks import FolderLockError


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(
        prog=invoked_as("training.cli.evaluate"),
        description="Play held-out tasks of a gigpo env with a model; report success with a "
        "95% interval, mean return, valid-action rate and episode length.",
        epilog="Any --section.key=value overrides the config (e.g. --env.id=gigpo/Sokoban-v0 "
        "--env.kwargs='{max_steps: 10}'), as for python -m training.local.",
    )
    parser.add_argument(
        "--model",
        help="a run directory of ours (its checkpoint), smollm2, tiny-random, a hub id or a "
        "model dir",
    )
    parser.add_argument(
        "--config",
        default=None,
        help="YAML config or shipped config name (default: the run's own config for a run "
        "directory, else the trainer's defaults)",
    )
    parser.add_argument("--episodes", type=int, default=None, help="default: eval.groups")
    parser.add_argument("--temperature", type=float, default=None, help="0: greedy (default)")
    parser.add_argument("--top-p", type=float, default=None, help="default 1.0 (or the suite's)")
    parser.add_argument("--prompt", choices=PROMPTS, default="template")
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument("--engine", choices=("hf", "vllm"), default=None,
                        help="who generates (rollout.engine; default hf)")  # fmt: skip
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    parser.add_argument(
        "--out",
        default=None,
        help="default runs/evaluate/MODEL (one per model); with --suite runs/suites/SUITE/RUN",
    )
    suites = parser.add_argument_group("pinned suites (docs/evaluation.md)")
    suites.add_argument("--suite", help="a shipped suite name or a suite YAML file")
    suites.add_argument("--list-suites", action="store_true", help="name the shipped suites")
    suites.add_argument("--compare", nargs="+", metavar="DIR", help="table these suite runs")
    suites.add_argument(
        "--group-size",
        type=int,
        default=1,
        help="rollouts per task (> 1: sampled; reports how often states recur)",
    )
    suites.add_argument(
        "--max-episodes",
        type=int,
        default=None,
        help="play only the suite's first N tasks (a quick look)",
    )
    suites.add_argument(
        "--data-dir",
        default=None,
        help="the data root instead of $ALFWORLD_DATA, $WEBSHOP_DATA, ...",
    )
    suites.add_argument("--retriever-url", default=None, help="search suites: the server")
    suites.add_argument(
        "--data-manifest",
        default=None,
        help="an earlier run's data_manifest.json the data must equal",
    )
    args, overrides = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    given = [d for d, v in vars(args).items() if v != parser.get_default(d)] + overrides[:1]
    if args.engine is not None:  # the config's key, as the trainer's flag sets it
        overrides = [*overrides, f"--rollout.engine={args.engine}"]
    if args.list_suites or args.compare:
        if others := [d for d in given if d not in ("list_suites", "compare")]:
            parser.error(f"--list-suites and --compare take no {_flag(others[0])}")
        return _suite_tools(args, parser)
    if args.model is None:
        parser.error("the following arguments are required: --model")
    if args.suite is not None:
        return _suite(args, overrides, parser)
    if suite_only := [d for d in given if d in SUITE_ONLY]:
        parser.error(f"{_flag(suite_only[0])} applies to a suite only (--suite NAME)")
    out = Path(args.out) if args.out else default_out(args.model)  # one folder per model
    try:
        config = eval_config(args.model, args.config, overrides)
        settings = EvalSettings(
            episodes=config.eval.groups if args.episodes is None else args.episodes,
            temperature=(config.eval.temperature if args.temperature is None else args.temperature),
            top_p=1.0 if args.top_p is None else args.top_p,
            prompt=args.prompt,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.batch_size,
        )
        settings.check()
        config = prompt_config(config, settings)
    except ConfigError as exc:
        parser.fail(str(exc))
    try:
        summary = evaluate_heldout(args.model, config, settings, out)
    except (FolderLockError, OSError) as exc:  # --out held by another, or not an evaluation's;
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)  # a planted file; unwritable
        return 2
    except ModelError as exc:
        parser.fail(str(exc))
    except KeyboardInterrupt:
        return interrupted(parser.prog, "held-out evaluation keeps nothing (it does not "
                           "resume); run the same command to start again")  # fmt: skip
    print(json.dumps(summary))
    low, high = summary["success_rate_ci95"]
    print(
        f"{summary['episodes']} episodes of {config.env.id}: success {summary['success_rate']:.3f}"
        f" (95% CI {low:.3f}-{high:.3f}), mean return {summary['mean_return']:+.3f}, valid "
        f"actions {summary['valid_action_rate']:.3f}, mean length "
        f"{summary['mean_episode_length']:.2f}; episodes in {out / 'episodes.jsonl'}",
        file=sys.stderr,
    )
    return 0


# ----------------------------------------------------------------------------- internals

#: The options only a suite reads (``--suite``); refused without one.
SUITE_ONLY = ("group_size", "max_episodes", "data_dir", "retriever_url", "data_manifest")


def _flag(dest: str) -> str:
    """The option of an argument's ``dest`` (``group_size``: ``--group-size``); an override
    (``--env.id=x``) as it was given, up to its ``=``."""
    return dest.split("=")[0] if dest.startswith("--") else "--" + dest.replace("_", "-")


def _suite(args: argparse.Namespace, overrides: list[str], parser: CommandParser) -> int:
    """``--suite``: the pinned suite played and tabled (:mod:`training.evaluation.suite`)."""
    from training.evaluation.suite import SuiteRequest, default_suite_out, evaluate_suite

    out = Path(args.out) if args.out is not None else default_suite_out(
        args.suite, args.model, args.prompt, args.temperature, args.group_size)  # fmt: skip
    request = SuiteRequest(
        suite=args.suite, model=args.model, config=args.config, overrides=overrides, out=out,
        episodes=args.episodes, temperature=args.temperature, top_p=args.top_p,
        prompt=args.prompt, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
        group_size=args.group_size, max_episodes=args.max_episodes, data_dir=args.data_dir,
        retriever_url=args.retriever_url, data_manifest=args.data_manifest,
    )  # fmt: skip
    try:
        table = evaluate_suite(request)
    except (FolderLockError, OSError) as exc:  # --out held by another, or not a suite run's;
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)  # a planted file; unwritable
        return 2
    except ConfigError as exc:
        parser.fail(str(exc))
    except KeyboardInterrupt:  # every batch played is on disk; a resumed run replays none
        return interrupted(parser.prog, f"the episodes played so far are kept in "
                           f"{request.out}; run the same command to resume")  # fmt: skip
    print(table, end="")
    return 0


def _suite_tools(args: argparse.Namespace, parser: CommandParser) -> int:
    if args.list_suites:
        for name in suite_names():
            print(f"{name}: {load_suite(name).description}")
        return 0
    try:
        print(compare(args.compare), end="")
    except SuiteError as exc:
        parser.fail(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
