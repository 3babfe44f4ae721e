"""``python -m training.local --config FILE.yaml [--out DIR] [--section.key=value ...]``."""

from __future__ import annotations

import sys
from pathlib import Path

from training.commands import CommandParser, interrupted, invoked_as
from training.hub import ModelNotFoundError
from training.local.config import ConfigError, TrainConfig, load_config
from training.local.resume import REFUSALS, interrupt_note
from training.locks import FolderLockError

USAGE = """%(prog)s --config FILE.yaml [--out DIR] [--dry-run] [--section.key=v ...]

Trains a causal LM with GiGPO (or HGPO, GraphGPO, GRPO, RLOO, or PPO with a critic) on a
gigpo environment, on one machine. Sections: model, env, rollout, eval, algo, optim, run (see
training/local/schema.py), e.g.
  --algo.estimator=grpo --env.num_groups 4 --run.iterations=10 --model.name_or_path=smollm2
  --algo.estimator=hgpo --algo.history_length=2   (graphgpo: --algo.gamma=0.1)
  --algo.estimator=ppo --optim.critic_lr=1e-5
Metrics go to DIR/metrics.jsonl, the learning curve to DIR/curve.png. --dry-run checks the
config and prints its memory plan (no weight loads; model.device need not exist here), and
whether it fits the device's free memory (or $GIGPO_FREE_MEMORY_GIB)."""


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(prog=invoked_as("training.local"), usage=USAGE)
    parser.add_argument("--config", default=None, help="YAML config file")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the memory plan and exit; train nothing"
    )
    args, overrides = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    try:
        config = load_config(
            args.config, overrides, check_device=not args.dry_run, check_files=not args.dry_run
        )
        if args.dry_run:
            return dry_run(config)
        from training.local.policy import TrainingDivergedError
        from training.local.train import train
    except (ConfigError, ModelNotFoundError) as exc:  # a model file refused (the dry run's)
        parser.fail(str(exc))
    except KeyboardInterrupt:
        return interrupted(parser.prog, "before training started; nothing was written")
    try:
        # The resume check runs inside train(), once --out is held: a crashed save is
        # finished there only when no other trainer can be writing that folder.
        rows = train(config)
    except FolderLockError as exc:  # another process holds --out, or it is not a run's
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except REFUSALS as exc:  # the memory plan does not fit, a checkpoint that cannot resume
        parser.fail(str(exc))
    except KeyboardInterrupt:  # Ctrl-C: what is on disk is whole (checkpoints are swapped in)
        return interrupted(parser.prog, interrupt_note(config))
    except TrainingDivergedError as exc:
        print(f"{parser.prog}: training diverged: {exc}", file=sys.stderr)
        return 1
    if rows:
        last = rows[-1]
        print(
            f"iteration {last['iteration']} (the last; numbered from 0, as in metrics.jsonl): "
            f"success rate {last['success_rate']:.3f}, "
            f"mean return {last['mean_return']:.3f}; metrics in {config.run.out}/metrics.jsonl"
        )
    return 0


def dry_run(config: TrainConfig) -> int:
    """Prints the memory plan (a table, then one JSON line), what could not be checked here,
    and whether the plan fits the free memory of ``model.device`` (when this machine has
    it, or ``$GIGPO_FREE_MEMORY_GIB``). Loads and downloads no weights (the model's
    ``config.json`` at most: :func:`~training.local.shapes.plan_config`), needs none of
    the env's packages or data, and writes nothing. Returns 0.

    Raises:
        ConfigError: it does not fit (the message names the settings to change; the command
            exits 2 with it), or the model's config cannot be had here.
        training.model_files.ModelFileError: a file of the model's folder is refused (a
            cache ref, a FIFO, a config too deep, a weights header that lies; named).
    """
    import json
    import tempfile

    from training.local.checks import env_problem
    from training.local.memory import GIB, check_fits, free_memory, run_plan
    from training.local.prompts import check_first_prompt
    from training.packaged import PACKAGED_MODELS

    m = config.model
    unchecked = []
    problem = env_problem(config)
    if problem is not None:
        unchecked.append(f"the env ({problem})")
    cap = config.rollout.max_prompt_tokens
    with tempfile.TemporaryDirectory(prefix="gigpo-dry-run-") as tmp:
        model_dir = None
        # A model directory only for its tokenizer, to count the first prompt (the tiny
        # model is built in seconds into a folder removed after): the plan itself needs the
        # model's config alone.
        if problem is None:
            model_dir = _tokenizer_dir(config, Path(tmp))
        plan = run_plan(config, None if cap else model_dir)
        counted = False
        if cap and model_dir is not None:
            counted = check_first_prompt(config, model_dir)  # below it: refused, exit 2
    if cap:
        first = "" if counted else "the first prompt and "
        unchecked.append(
            f"{first}the later prompts' lengths (rollout.max_prompt_tokens caps them: a longer "
            "prompt stops the run, naming that key)"
        )
    if m.name_or_path not in PACKAGED_MODELS and model_dir is None:
        unchecked.append(f"the model's weights and tokenizer ({m.name_or_path} is not loaded)")
    if plan.sizes.get("engine") == "weights":
        unchecked.append("the vllm engine's share of the GPU (rollout.gpu_memory_utilization of "
                         "its memory, unknown here: $GIGPO_FREE_MEMORY_GIB gives it); its "
                         "weights are counted")  # fmt: skip
    print("\n".join(plan.lines()))
    print(json.dumps(plan.to_dict()))
    print(f"model config: {plan.model_config}")
    for item in unchecked:
        print(f"not checked here: {item}")
    free = free_memory(m.device)
    if free is None:
        print(f"free memory of {m.device}: unknown here (not this machine's device); the "
              "plan is checked again when the run starts")  # fmt: skip
        return 0
    check_fits(plan, free)
    print(f"fits: peak {plan.peak / GIB:.2f} GiB of {free / GIB:.1f} GiB free on {m.device}")
    return 0


def _tokenizer_dir(config: TrainConfig, tmp: Path) -> Path | None:
    """A folder with the model's tokenizer that needs no download: a packaged model, a
    directory, or a hub id's cached snapshot; None otherwise (the plan then asks for
    ``rollout.max_prompt_tokens``)."""
    from training.hub import cached_model
    from training.local.model import resolve_model_path
    from training.packaged import PACKAGED_MODELS

    m = config.model
    if m.name_or_path in PACKAGED_MODELS or Path(m.name_or_path).expanduser().exists():
        return resolve_model_path(m, tmp)
    return cached_model(m.name_or_path, m.revision)


if __name__ == "__main__":
    sys.exit(main())
