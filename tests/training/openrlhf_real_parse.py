"""OpenRLHF 0.11.2's own argument parser and checks, on command lines the launcher resolves.

Run by ``test_openrlhf_real.py`` with ``tests/standins`` first on ``sys.path`` (OpenRLHF's
entry module imports ``vllm``). Reads ``{"parse_only": [argv, ...]}`` on stdin and prints, per
command line, what OpenRLHF resolved or the error its parser or checks raised; or reads
``{"estimator_choices": true}`` and prints the choices of OpenRLHF's own
``--algo.advantage.estimator``. :func:`parsed_args` is also used by ``openrlhf_real_run.py``.
"""

from __future__ import annotations

import json
import runpy
import sys


def parsed_args(argv: list[str]):
    """OpenRLHF's own parser and checks on ``argv``; stops where ``train(args)`` would start."""
    import openrlhf.utils.config as config
    import ray

    class ReachedTrain(Exception):
        pass

    def stop(*args, **kwargs):
        raise ReachedTrain

    seen = {}
    real_hierarchize = config.hierarchize

    def recording(args):
        seen["args"] = real_hierarchize(args)
        return seen["args"]

    saved = (ray.init, ray.is_initialized, config.hierarchize, sys.argv)
    ray.init, ray.is_initialized, config.hierarchize = stop, lambda: False, recording
    sys.argv = ["openrlhf.cli.train_ppo_ray", *argv]
    try:
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__")
    except ReachedTrain:
        return seen["args"]
    finally:
        ray.init, ray.is_initialized, config.hierarchize, sys.argv = saved
    raise RuntimeError("OpenRLHF's train_ppo_ray returned without starting training")


def parse_only(argvs: list[list[str]]) -> list[dict]:
    """Each command line through OpenRLHF's parser and checks: what it resolved, or the error."""
    out = []
    for argv in argvs:
        try:
            a = parsed_args(argv)
        except BaseException as exc:  # the parser's SystemExit and the checks' AssertionError
            out.append({"error": f"{type(exc).__name__}: {exc}"})
            continue
        out.append(
            {
                "estimator": a.algo.advantage.estimator,
                "n_samples_per_prompt": a.rollout.n_samples_per_prompt,
                "agent_func_path": a.train.agent_func_path,
                "remote_url": a.reward.remote_url,
                "prompt_dataset": a.data.prompt_dataset,
                "kl_use_loss": a.algo.kl.use_loss,
            }
        )
    return out


def estimator_choices() -> list[str]:
    """The choices of ``--algo.advantage.estimator`` in the parser OpenRLHF's entry module
    builds (taken as it starts parsing: nothing is parsed or run)."""
    import argparse

    class Built(Exception):
        pass

    def stop(parser, *args, **kwargs):
        raise Built(parser)

    saved = (argparse.ArgumentParser.parse_args, sys.argv)
    argparse.ArgumentParser.parse_args = stop
    sys.argv = ["openrlhf.cli.train_ppo_ray"]
    try:
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__")
    except Built as built:
        parser = built.args[0]
    else:
        raise RuntimeError("OpenRLHF's train_ppo_ray parsed no arguments")
    finally:
        argparse.ArgumentParser.parse_args, sys.argv = saved
    for action in parser._actions:
        if "--algo.advantage.estimator" in action.option_strings:
            return list(action.choices)
    raise RuntimeError("OpenRLHF's parser has no --algo.advantage.estimator")


def main() -> None:
    job = json.load(sys.stdin)
    if job.get("estimator_choices"):
        print(json.dumps(estimator_choices()))
        return
    print(json.dumps(parse_only(job["parse_only"])))


if __name__ == "__main__":
    main()
