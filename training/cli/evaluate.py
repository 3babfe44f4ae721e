"""``python -m training.cli.evaluate``: play N held-out tasks of any gigpo env with any model.

The tasks are the trainer's held-out evaluation tasks: the first N seeds of
:meth:`training.local.tasks.TaskSplit.heldout_seeds` for the config's env, kwargs,
``env.heldout_fraction`` and ``run.seed``, so with N = ``eval.groups`` and greedy
decoding the numbers are the ones the trainer logs as ``eval_*`` (tested). One rollout per
task.

The model is a run directory of ours (its ``config.json`` and ``checkpoint/``: the trained
weights; the run's config is then the default config), ``smollm2``, ``tiny-random`` or a
local Hugging Face model directory. Prompts are the config's (``--prompt template``: the
env's template with the config's changes, as in training) or a ReAct-style variant
(``--prompt react``: reason inside ``<think>`` first, then act; the answer starts with
``<think>``). Any ``--section.key=value`` overrides the config, as for the trainer.

With ``--suite NAME`` it plays a pinned evaluation suite instead and prints the paper's
table (:mod:`training.cli.evaluate_suite`); ``--compare DIR...`` tables several suite runs;
``--list-suites`` names the shipped suites.

Writes ``summary.json`` (success rate with its 95% Wilson interval, mean return with its
95% t interval, valid-action rate per step, mean episode length, the seeds) and
``episodes.jsonl`` (one line per episode: seed, task, outcome and every step's observation,
action, reward and validity) into ``--out``, and prints the summary as one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from training.files import atomic_write_text
from training.local.config import ConfigError, TrainConfig, load_config

#: Prompt variants.
PROMPTS = ("template", "react")
#: The ReAct-style answer format: reason about the state first, then one action.
REACT_INSTRUCTION = (
    "Reason first, inside <think> </think> tags: what you observe, what the goal needs, and "
    "which action brings you closer. Then give exactly one action inside <action> </action> "
    "tags, for example: {example}"
)
#: The ReAct variant's answer budget when ``--max-new-tokens`` is not given.
REACT_MAX_NEW_TOKENS = 256
#: Episodes played at once (one generation batch).
DEFAULT_BATCH_SIZE = 32


@dataclass
class EvalSettings:
    """How to play: ``episodes`` held-out tasks, one rollout each.

    ``temperature`` 0 is greedy decoding; ``prompt`` is one of :data:`PROMPTS`;
    ``max_new_tokens`` None keeps the config's (or :data:`REACT_MAX_NEW_TOKENS` for react).
    """

    episodes: int
    temperature: float = 0.0
    top_p: float = 1.0
    prompt: str = "template"
    max_new_tokens: int | None = None
    batch_size: int = DEFAULT_BATCH_SIZE

    def check(self) -> None:
        if self.episodes < 1:
            raise ConfigError(f"--episodes must be >= 1, got {self.episodes}")
        if not (np.isfinite(self.temperature) and self.temperature >= 0):
            raise ConfigError(f"--temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"--top-p must be in (0, 1], got {self.top_p}")
        if self.prompt not in PROMPTS:
            raise ConfigError(f"--prompt must be one of {PROMPTS}, got {self.prompt!r}")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ConfigError(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")
        if self.batch_size < 1:
            raise ConfigError(f"--batch-size must be >= 1, got {self.batch_size}")


def prompt_config(config: TrainConfig, settings: EvalSettings) -> TrainConfig:
    """``config`` with the prompt variant's format instruction, answer prefix, stop text and
    answer budget (a copy; ``template`` changes only the budget when one is given)."""
    import copy

    out = copy.deepcopy(config)
    if settings.prompt == "react":
        out.env.format_instruction = REACT_INSTRUCTION
        order = out.env.template.get("order")
        if order is not None and "format" not in order:
            out.env.template["order"] = [*order, "format"]
        out.rollout.response_prefix = "<think>"
        out.rollout.stop_text = "</action>"
        out.rollout.max_new_tokens = settings.max_new_tokens or REACT_MAX_NEW_TOKENS
    elif settings.max_new_tokens is not None:
        out.rollout.max_new_tokens = settings.max_new_tokens
    return out


def play(
    model: Any, tokenizer: Any, config: TrainConfig, settings: EvalSettings
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Plays ``settings.episodes`` held-out tasks with the trainer's own
    :func:`training.local.play.play_heldout` (same seeds, same measures, the same compute
    dtype and thread choice as the trainer's), with torch's generator seeded from
    ``run.seed`` first so that sampled evaluation is reproducible.

    Args:
        config: the env, prompt and rollout settings (already :func:`prompt_config`'d).

    Returns:
        ``(summary, episodes)``: the numbers of ``summary.json`` and one dict per episode
        (the lines of ``episodes.jsonl``), in seed order.
    """
    import torch

    from training.local.play import play_heldout

    settings.check()
    with compute_setup(config, model):
        torch.manual_seed(config.run.seed)
        return play_heldout(
            model,
            tokenizer,
            config,
            settings.episodes,
            temperature=settings.temperature,
            top_p=settings.top_p,
            batch_size=settings.batch_size,
        )


@contextlib.contextmanager
def compute_setup(config: TrainConfig, model: Any) -> Iterator[None]:
    """The trainer's compute setup around playing with ``model`` (plain evaluation and the
    suites): the allocator choice, torch's thread count, the model's compute dtype and its
    autocast context."""
    from training.local.allocator import keep_freed_memory
    from training.local.precision import compute, prepare_models, resolve_compute_dtype
    from training.local.threads import ThreadGovernor

    if config.run.keep_freed_memory:
        keep_freed_memory()
    ThreadGovernor(config.run.threads).update()
    dtype, _ = resolve_compute_dtype(config.model.compute_dtype, config.model.device)
    prepare_models(dtype, config.model.device, model)
    with compute(dtype, config.model.device):
        yield


def resolve_model(model: str, config: TrainConfig, out: Path) -> tuple[Path, Path | None]:
    """``(model directory, checkpoint directory or None)`` for ``--model``.

    A run directory of ours (``config.json`` and a ``checkpoint/``, or the ``checkpoint.tmp/``
    or ``checkpoint.old/`` a crash mid-save left) or its ``checkpoint/`` gives the base model
    its config names and the checkpoint's weights (``model.safetensors``); anything else is
    ``model.name_or_path`` (``smollm2``, ``tiny-random``, a model dir). The run directory is
    only read.

    Raises:
        UnsafeCheckpointError: the run's checkpoint is in the old pickled format.
        FileNotFoundError: a run directory with no whole checkpoint.
    """
    from training.local.checkpoint import find_run_dir, whole_checkpoint
    from training.local.model import resolve_model_path

    run = find_run_dir(model)
    if run is not None:
        saved = load_config(run / "config.json")
        return resolve_model_path(saved.model, run), whole_checkpoint(run)
    return resolve_model_path(dataclasses.replace(config.model, name_or_path=model), out), None


def load_policy(model: str, config: TrainConfig, out: Path) -> tuple[Any, Any, Path]:
    """The model (with a run's trained weights) and tokenizer; also the model directory."""
    from training.local.checkpoint import load_weights
    from training.local.model import load_model, load_tokenizer

    path, checkpoint = resolve_model(model, config, out)
    tokenizer = load_tokenizer(path)
    policy = load_model(path, config.model.dtype, trainable=False, device=config.model.device)
    if checkpoint is not None:
        weights = checkpoint / "model.safetensors"
        try:
            load_weights(policy, weights)
        except Exception as exc:  # corrupt file, another model: say which file
            raise RuntimeError(f"cannot load the weights in {weights}: {exc}") from exc
    return policy, tokenizer, path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.cli.evaluate",
        description="Play held-out tasks of a gigpo env with a model; report success with a "
        "95% interval, mean return, valid-action rate and episode length.",
        epilog="Any --section.key=value overrides the config (e.g. --env.id=gigpo/Sokoban-v0 "
        "--env.kwargs='{max_steps: 10}'), as for python -m training.local.",
    )
    parser.add_argument(
        "--model",
        help="a run directory of ours (its checkpoint), smollm2, tiny-random or a HF model dir",
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
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    parser.add_argument(
        "--out", default=None, help="default runs/evaluate; with --suite runs/suites/SUITE/RUN"
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
    if args.list_suites or args.compare:
        if args.suite or args.model:
            parser.error("--list-suites and --compare take no --suite or --model")
        return _suite_tools(args, parser)
    if args.model is None:
        parser.error("the following arguments are required: --model")
    if args.suite is not None:
        from training.cli.evaluate_suite import evaluate_suite

        if args.out is None:
            args.out = str(_suite_out(args))
        return evaluate_suite(args, overrides, parser)
    out = Path(args.out or "runs/evaluate")
    try:
        config = _config(args.model, args.config, overrides)
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
        parser.error(str(exc))
    out.mkdir(parents=True, exist_ok=True)
    try:
        policy, tokenizer, path = load_policy(args.model, config, out)
    except (FileNotFoundError, RuntimeError, ValueError) as exc:
        parser.error(str(exc))
    summary, episodes = play(policy, tokenizer, config, settings)
    summary = {
        "model": args.model,
        "model_dir": str(path),
        "env_id": config.env.id,
        "env_kwargs": config.env.kwargs,
        "heldout_fraction": config.env.heldout_fraction,
        "run_seed": config.run.seed,
        "prompt": settings.prompt,
        "temperature": settings.temperature,
        "top_p": settings.top_p if settings.temperature > 0 else 1.0,
        "max_new_tokens": config.rollout.max_new_tokens,
        **summary,
    }
    _write_json_lines(out / "episodes.jsonl", episodes)
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")
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


def _config(model: str, config: str | None, overrides: list[str]) -> TrainConfig:
    from training.local.checkpoint import find_run_dir

    if config is None and (run := find_run_dir(model)) is not None:
        config = str(run / "config.json")
    return load_config(config, overrides)


def _suite_tools(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from training.cli.suite_table import compare
    from training.cli.suites import SuiteError, load_suite, suite_names

    if args.list_suites:
        for name in suite_names():
            print(f"{name}: {load_suite(name).description}")
        return 0
    try:
        print(compare(args.compare), end="")
    except SuiteError as exc:
        parser.error(str(exc))
    return 0


def _suite_out(args: argparse.Namespace) -> Path:
    """``runs/suites/<suite>/<model>-<prompt>-<decoding>``: one folder per run's settings."""
    import re

    model = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(args.model).name or args.model)
    temperature = args.temperature if args.temperature is not None else (
        1.0 if args.group_size > 1 else None)  # fmt: skip
    decoding = f"t{temperature:g}" if temperature else "greedy"
    group = f"-g{args.group_size}" if args.group_size > 1 else ""
    return Path("runs/suites") / Path(args.suite).stem / f"{model}-{args.prompt}-{decoding}{group}"


def _write_json_lines(path: Path, rows: list[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in rows))


if __name__ == "__main__":
    sys.exit(main())
