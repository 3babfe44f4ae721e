"""``python -m training.openrlhf.train [--dry-run] [OpenRLHF flags] [gigpo flags]``.

Resolves the flags (:mod:`training.openrlhf.command`), writes the task dataset, starts or
joins Ray with the GiGPO worker setup hook, patches this process too, and runs OpenRLHF
0.11.2's PPO entry point in-process. ``--dry-run`` prints the resolved run and exits without
importing OpenRLHF or Ray.
"""

from __future__ import annotations

import json
import os
import runpy
import shlex
import sys

from training.commands import invoked_as
from training.openrlhf.command import OPENRLHF_MODULE, Plan, UsageError, dataset_lines, plan
from training.packaged import prepare_packaged


def describe(run_plan, python: str = "python") -> str:
    """The resolved run as text: settings, Ray runtime env, the OpenRLHF command."""
    task = run_plan.tasks[0]
    if run_plan.layout == "step":
        layout = (
            f"# layout: step (one OpenRLHF sample per env step; --train.batch_size counts "
            f"step samples): history_length {task.history_length}, prompt cap "
            f"{task.max_prompt_tokens} tokens, response cap {task.max_new_tokens}"
        )
    else:
        layout = (
            "# layout: episode (one OpenRLHF sample per episode, cut at --data.max_len): "
            f"history_length {task.history_length}, response cap {task.max_new_tokens}"
        )
    lines = [
        "# gigpo settings: "
        + (run_plan.settings.to_json() if run_plan.settings else "off (OpenRLHF estimator)"),
        f"# tasks: {len(run_plan.tasks)} of {task.env_id}"
        + (f" -> {run_plan.dataset_path}" if run_plan.dataset_path else ""),
        layout,
        *(f"# warning: {w}" for w in run_plan.warnings),
        "# ray runtime_env: " + json.dumps(run_plan.runtime_env, sort_keys=True),
        shlex.join(run_plan.command(python)),
    ]
    return "\n".join(lines)


def prepare(run_plan: Plan) -> None:
    """Everything this process does before OpenRLHF's entry point: checks the OpenRLHF
    version, writes the task dataset, exports the run's variables, patches this process and
    starts or joins Ray with the run's runtime env (unless Ray is already up)."""
    from training.openrlhf.patch import check_openrlhf_version, install_patches

    check_openrlhf_version()
    if run_plan.dataset_path is not None:
        run_plan.dataset_path.parent.mkdir(parents=True, exist_ok=True)
        run_plan.dataset_path.write_text("\n".join(dataset_lines(run_plan.tasks)) + "\n")
    os.environ.update(run_plan.runtime_env["env_vars"])
    install_patches()  # and the CPU patches on --gigpo.device cpu
    import ray

    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS")
        ray.init(address=address or None, runtime_env=run_plan.runtime_env)


#: OpenRLHF's flags that name a model to load.
MODEL_FLAGS = ("--actor.model_name_or_path", "--critic.model_name_or_path",
               "--reward.model_name_or_path")  # fmt: skip


def model_commits(openrlhf_args: list[str]) -> dict[str, tuple[str, str | None]]:
    """``{flag: (model, commit)}`` for the models a run names: a hub id's commit as
    transformers will resolve it (:func:`training.hub.commit_of`: its ``config.json``, from
    the cache or the hub), None for a local directory. OpenRLHF loads the models itself, in
    every worker; this checks before Ray starts that each can be had, and says which commit.

    Raises:
        training.hub.ModelNotFoundError: offline and not cached, or no such repository (the
            message names the id and the command that fetches it).
    """
    from training.hub import commit_of
    from training.openrlhf.layout import flag_value

    found = {}
    for flag in MODEL_FLAGS:
        name = flag_value(openrlhf_args, flag, "")
        if name:
            found[flag] = (name, commit_of(name, key=flag))
    return found


def openrlhf_checked(run_plan: Plan, prog: str) -> int:
    """OpenRLHF's own parser and checks on the run's command (:mod:`training.openrlhf.checks`),
    reported as a comment line; exit status 2 with OpenRLHF's message when it refuses it.
    Where OpenRLHF (or what it imports) is not installed, says the checks did not run."""
    from training.openrlhf import cpu
    from training.openrlhf.checks import OpenRLHFRefused, openrlhf_checks
    from training.openrlhf.patch import check_openrlhf_version

    try:
        check_openrlhf_version()
        if run_plan.runtime_env["env_vars"].get(cpu.DEVICE_ENV) == "cpu":
            cpu.install_cpu_patches()  # flash-attn's padding helpers, where it is missing
        lines = openrlhf_checks(run_plan.openrlhf_args)
    except ImportError as exc:
        print(f"# OpenRLHF's own checks: not run, it cannot be imported here ({exc})")
        return 0
    except (OpenRLHFRefused, RuntimeError) as exc:
        print(f"{prog}: error: OpenRLHF 0.11.2 refuses the command: {exc}", file=sys.stderr)
        return 2
    print("\n".join(["# OpenRLHF's own checks: passed", *(f"# OpenRLHF: {x}" for x in lines)]))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    dry_run = "--dry-run" in argv
    argv = [a for a in argv if a != "--dry-run"]
    prog = invoked_as("training.openrlhf.train")
    try:
        run_plan = plan(argv)
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    for warning in run_plan.warnings:
        print(f"{prog}: warning: {warning}", file=sys.stderr)
    if dry_run:
        print(describe(run_plan, sys.executable), flush=True)
        return openrlhf_checked(run_plan, prog)

    try:
        for name, path in run_plan.packaged:  # tiny-random, smollm2: made here, no hub
            prepare_packaged(name, path)
        models = model_commits(run_plan.openrlhf_args)
    except (OSError, ValueError) as exc:  # ModelNotFoundError names the fetch; a bad folder
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    prepare(run_plan)
    print(describe(run_plan, sys.executable), flush=True)
    for flag, (name, commit) in models.items():
        print(f"# {flag}: {name}" + (f" at commit {commit}" if commit else ""), flush=True)
    sys.argv = [OPENRLHF_MODULE, *run_plan.openrlhf_args]
    runpy.run_module(OPENRLHF_MODULE, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
