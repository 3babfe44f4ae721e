"""``python -m training.local --config FILE.yaml [--out DIR] [--section.key=value ...]``."""

from __future__ import annotations

import argparse
import sys

from training.local.config import ConfigError, load_config

USAGE = """python -m training.local --config FILE.yaml [--out DIR] [--section.key=value ...]

Trains a causal LM with GiGPO (or GRPO, RLOO, or PPO with a critic) on a gigpo environment,
on one machine. Sections: model, env, rollout, eval, algo, optim, run (see
training/local/schema.py), e.g.
  --algo.estimator=grpo --env.num_groups 4 --run.iterations=10 --model.name_or_path=smollm2
  --algo.estimator=ppo --optim.critic_lr=1e-5
Metrics go to DIR/metrics.jsonl, the learning curve to DIR/curve.png."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.local", usage=USAGE)
    parser.add_argument("--config", default=None, help="YAML config file")
    args, overrides = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    try:
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        parser.error(str(exc))
    from training.local.checkpoint import UnsafeCheckpointError
    from training.local.policy import TrainingDivergedError
    from training.local.resume import ResumeConfigError, check_resume
    from training.local.train import train

    try:
        check_resume(config)
    except (ResumeConfigError, UnsafeCheckpointError) as exc:
        parser.error(str(exc))
    try:
        rows = train(config)
    except TrainingDivergedError as exc:
        print(f"{parser.prog}: training diverged: {exc}", file=sys.stderr)
        return 1
    if rows:
        last = rows[-1]
        print(
            f"iteration {last['iteration'] + 1}: success rate {last['success_rate']:.3f}, "
            f"mean return {last['mean_return']:.3f}; metrics in {config.run.out}/metrics.jsonl"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
