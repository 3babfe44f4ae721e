"""GiGPO on verl from an install: ``gigpo-verl [--dry-run] [ours...] [key=value...]``.

Also ``python -m training.verl.launch``; ``bash training/verl_gigpo.sh`` (in a clone) is a
thin wrapper around it. Arguments are verl's own Hydra overrides (``key=value``, e.g.
``actor_rollout_ref.model.path=Qwen/Qwen2.5-1.5B-Instruct``, ``algorithm.gamma=0.95``, the
estimator's settings as ``algorithm.gigpo.step_advantage_w=1.0``: verl-agent's names or ours,
:mod:`training.verl.config`) plus ours (:data:`FLAGS`). It writes the task datasets
(``train.parquet``, ``val.parquet``: one row per task, the task label in
``extra_info.gigpo_task``) into ``--dataset_dir`` and runs ``python -m verl.trainer.main_ppo``
with the resolved overrides: our agent loop, the step rows' estimator, and the defaults of
:func:`defaults` that the user did not override. ``--dry-run`` prints the settings and the
full verl command and starts nothing, writes nothing. A run holds ``--dataset_dir``
(:func:`training.locks.hold_folder`, kind ``verl``) while verl runs: a second launch into it
is refused, naming the holder.

An estimator neither gigpo_algo (through the plugin) nor verl 0.9.1 knows, a setting the
estimator does not read, or a malformed flag is refused with exit 2 before anything starts.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from training.commands import interrupted, invoked_as
from training.verl.config import VERL_ESTIMATORS, algorithm_settings

#: verl 0.9.1's own estimators (its ``AdvantageEstimator`` and registry); a test checks
#: this list against the installed verl.
VERL_OWN_ESTIMATORS = (
    "gae", "gdpo", "gpg", "grpo", "grpo_passk", "grpo_vectorized", "opo",
    "optimal_token_baseline", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax",
    "rloo", "rloo_vectorized", "tir_optimal_token_baseline",
)  # fmt: skip
#: Our flags, with their defaults (None: per env, :data:`ENV_DEFAULTS`).
FLAGS: dict[str, Any] = {
    "--env": "gigpo/Sokoban-v0",
    "--env.kwargs": "{}",
    "--env.num_tasks": 256,
    "--env.val_tasks": 32,
    "--env.max_new_tokens": 512,
    "--env.workers": None,
    "--group_size": 8,
    "--history_length": None,
    "--dataset_dir": "runs/verl_gigpo/data",
}
#: Per env: the prompt cap (tokens) and the step layout's default history, as the OpenRLHF
#: launcher's (docs/openrlhf.md, the defaults per env).
ENV_DEFAULTS = {
    "gigpo/ALFWorld-v0": (2048, 2),
    "gigpo/WebShop-v0": (4096, 2),
    "gigpo/Sokoban-v0": (1024, 2),
    "gigpo/SearchQA-v0": (4096, 4),
}
SMALL_GAMES_PROMPT = 1024
#: The estimators' discount when ``algorithm.gamma`` is not given (verl's own default is
#: 1.0; verl-agent's GiGPO and HGPO scripts set 0.95, GraphGPO's ALFWorld script 0.1).
DEFAULT_GAMMA = {"gigpo": 0.95, "hgpo": 0.95, "graphgpo": 0.1}


#: The most tasks a launch takes: a dataset row is a task, and Search-R1's training set, the
#: largest here, has 169,615 questions (training seeds stay below the validation ones).
MAX_COUNT = 1_000_000
#: ``flag -> (low, high)`` of our integer flags: the task counts up to :data:`MAX_COUNT`, the
#: rest the local trainer's bound of the same setting (``training.local.checks.LIMITS``:
#: ``rollout.max_new_tokens``, ``env.group_size``, ``env.history_length``, ``run.threads``).
BOUNDS = {
    "--env.num_tasks": (1, MAX_COUNT),
    "--env.val_tasks": (1, MAX_COUNT),
    "--env.max_new_tokens": (1, 32_768),
    "--group_size": (1, 1024),
    "--history_length": (0, 1000),
    "--env.workers": (0, 1024),
}


class UsageError(ValueError):
    """A flag or an override the launcher refuses (exit 2)."""


def defaults(ours: dict[str, Any], prompt_cap: int) -> dict[str, str]:
    """verl's overrides for a run of ``ours`` (one node of 8 GPUs, Qwen2.5-1.5B-Instruct, 16
    tasks x ``--group_size`` episodes a batch, the paper's learning rate and KL loss)."""
    data = Path(ours["--dataset_dir"])
    return {
        "data.train_files": str(data / "train.parquet"),
        "data.val_files": str(data / "val.parquet"),
        "data.prompt_key": "prompt",
        "data.train_batch_size": "16",
        "data.max_prompt_length": str(prompt_cap),
        "data.max_response_length": str(ours["--env.max_new_tokens"]),
        "data.return_raw_chat": "True",
        "actor_rollout_ref.model.path": "Qwen/Qwen2.5-1.5B-Instruct",
        "actor_rollout_ref.actor.optim.lr": "1e-6",
        "actor_rollout_ref.actor.ppo_mini_batch_size": "256",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "8",
        "actor_rollout_ref.actor.use_kl_loss": "True",
        "actor_rollout_ref.actor.kl_loss_coef": "0.01",
        "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.n": str(ours["--group_size"]),
        "actor_rollout_ref.rollout.agent.default_agent_loop": "gigpo",
        "actor_rollout_ref.rollout.gpu_memory_utilization": "0.6",
        "algorithm.adv_estimator": "gigpo",
        "algorithm.use_kl_in_reward": "False",
        "trainer.n_gpus_per_node": "8",
        "trainer.nnodes": "1",
        "trainer.total_epochs": "1",
        "trainer.logger": "['console']",
        "trainer.project_name": "gigpo_verl",
    }


def parse(argv: list[str]) -> tuple[dict[str, Any], dict[str, str], bool]:
    """``(ours, overrides, dry_run)`` of the command line; :class:`UsageError` naming the
    argument for anything malformed."""
    ours = dict(FLAGS)
    overrides: dict[str, str] = {}
    dry_run = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--dry-run":
            dry_run = True
        elif arg.startswith("--"):
            name, _, value = arg.partition("=")
            if name not in FLAGS:
                raise UsageError(f"unknown flag {name} (ours: {sorted(FLAGS)}; verl's own "
                                 "settings are Hydra overrides, key=value)")  # fmt: skip
            if not _:
                if i + 1 >= len(argv):
                    raise UsageError(f"{name} needs a value")
                i += 1
                value = argv[i]
            ours[name] = value
        elif "=" in arg and not arg.startswith("="):
            key, _, value = arg.partition("=")
            overrides[key.lstrip("+")] = value
        else:
            raise UsageError(f"{arg!r} is neither one of our flags nor a Hydra override key=value")
        i += 1
    for name, (low, high) in BOUNDS.items():
        value = ours[name]
        if value is None:
            continue
        try:
            ours[name] = int(value)
        except (TypeError, ValueError):
            raise UsageError(f"{name} must be an int, got {str(value)[:40]!r}") from None
        if not low <= ours[name] <= high:
            raise UsageError(f"{name} must be in [{low}, {high}], got {str(value)[:40]}")
    from training.guarded import GuardError, ParseError, load_json

    try:  # the guarded reader: size, depth, integer digits, no NaN
        kwargs = load_json(ours["--env.kwargs"], "--env.kwargs")
    except ParseError as exc:
        raise UsageError(f"--env.kwargs is not JSON: {exc}") from None
    except GuardError as exc:
        raise UsageError(str(exc)) from None
    if not isinstance(kwargs, dict):
        raise UsageError("--env.kwargs must be a JSON object")
    ours["--env.kwargs"] = kwargs
    return ours, overrides, dry_run


def resolve(ours: dict[str, Any], overrides: dict[str, str]) -> tuple[dict[str, str], Any]:
    """The full overrides (defaults the user did not give, then the user's) and the
    estimator settings they make (None for verl's own estimators); :class:`UsageError`."""
    import gymnasium as gym

    import gigpo_envs  # noqa: F401  (registers the ids)

    known = sorted(i for i in gym.registry if i.startswith("gigpo/"))
    if ours["--env"] not in known:
        raise UsageError(f"--env must be one of {known}, got {ours['--env']!r}")
    prompt_cap, history = ENV_DEFAULTS.get(ours["--env"], (SMALL_GAMES_PROMPT, 2))
    if ours["--history_length"] is None:
        ours["--history_length"] = history
    resolved = {**defaults(ours, prompt_cap), **overrides}
    estimator = resolved["algorithm.adv_estimator"]
    if estimator not in VERL_ESTIMATORS:
        if estimator not in VERL_OWN_ESTIMATORS:
            raise UsageError(
                f"algorithm.adv_estimator={estimator!r} is neither gigpo_algo's "
                f"{list(VERL_ESTIMATORS)} nor verl 0.9.1's {list(VERL_OWN_ESTIMATORS)}"
            )
        return resolved, None
    resolved.setdefault("algorithm.gamma", str(DEFAULT_GAMMA[estimator]))
    if estimator == "hgpo":  # its deepest level: the prompt's window, as verl-agent ties them
        resolved.setdefault("algorithm.hgpo.history_length", str(ours["--history_length"]))
    if resolved["algorithm.use_kl_in_reward"].lower() == "true":
        raise UsageError(
            "algorithm.use_kl_in_reward=True changes the reward the gigpo estimators read: "
            "use actor_rollout_ref.actor.use_kl_loss=True"
        )
    section: dict[str, Any] = {
        "adv_estimator": estimator,
        "gamma": _value(resolved["algorithm.gamma"]),
    }
    for key, value in resolved.items():
        parts = key.split(".")
        if len(parts) > 3 and parts[0] == "algorithm" and parts[1] in VERL_ESTIMATORS:
            raise UsageError(f"{key}: the estimator's settings are algorithm.{parts[1]}.<name>")
        if len(parts) == 3 and parts[0] == "algorithm" and parts[1] in VERL_ESTIMATORS:
            if parts[1] != estimator:
                raise UsageError(f"{key} is a setting of {parts[1]}, the estimator is {estimator}")
            section.setdefault(estimator, {})[parts[2]] = _value(value)
    try:
        settings = algorithm_settings(section)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return resolved, settings


def _value(text: str) -> Any:
    """A Hydra override's value as YAML reads it (numbers, true/false, null, strings)."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def command(resolved: dict[str, str], python: str) -> list[str]:
    """``python -m verl.trainer.main_ppo`` with the overrides; keys verl's config does not
    have (the estimators' subsections) get Hydra's ``+``."""
    args = []
    for key, value in resolved.items():
        new = key.split(".")[0] == "algorithm" and key.split(".")[1] in VERL_ESTIMATORS
        args.append(f"{'+' if new else ''}{key}={value}")
    return [python, "-m", "verl.trainer.main_ppo", *args]


def tasks(ours: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The train and validation dataset rows: one per task, seeds 0.. for training and
    1_000_000.. for validation."""
    from training.env_tasks import Task, task_label

    prompt_cap = ENV_DEFAULTS.get(ours["--env"], (SMALL_GAMES_PROMPT, 2))[0]
    out: dict[str, list[dict[str, Any]]] = {}
    for split, count, first in (("train", ours["--env.num_tasks"], 0),
                                ("val", ours["--env.val_tasks"], 1_000_000)):  # fmt: skip
        rows = []
        for i in range(count):
            task = Task(
                env_id=ours["--env"], seed=first + i, env_kwargs=ours["--env.kwargs"],
                history_length=ours["--history_length"], layout="step",
                max_new_tokens=ours["--env.max_new_tokens"], max_prompt_tokens=prompt_cap,
                env_workers=ours["--env.workers"],
            )  # fmt: skip
            rows.append({
                "data_source": ours["--env"],
                "prompt": [{"role": "user", "content": f"{ours['--env']} seed {first + i}"}],
                "agent_name": "gigpo",
                "extra_info": {"index": i, "gigpo_task": task_label(task)},
            })  # fmt: skip
        out[split] = rows
    return out


def write_datasets(ours: dict[str, Any]) -> None:
    """``train.parquet`` and ``val.parquet`` in ``--dataset_dir``."""
    import pandas as pd

    folder = Path(ours["--dataset_dir"])
    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in tasks(ours).items():
        pd.DataFrame(rows).to_parquet(folder / f"{split}.parquet")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    python = os.environ.get("PYTHON") or sys.executable
    prog = invoked_as("training.verl.launch")
    try:
        ours, overrides, dry_run = parse(args)
        resolved, settings = resolve(ours, overrides)
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    cmd = command(resolved, python)
    shown = {k: v for k, v in ours.items() if k != "--env.kwargs"}
    print(f"# gigpo: {json.dumps(shown)} env.kwargs {json.dumps(ours['--env.kwargs'])}")
    if settings is not None:
        named = {k: v for k, v in vars(settings).items() if v is not None}
        print(f"# settings: {json.dumps(named)}")
    print("# verl:")
    print(shlex.join(cmd), flush=True)
    if dry_run:
        return 0
    if importlib.util.find_spec("verl") is None:
        print(f"{prog}: error: verl is not installed: pip install 'gigpo[verl]'",
              file=sys.stderr)  # fmt: skip
        return 2
    from training.locks import FolderLockError, hold_folder

    try:  # one writer per folder: a second launch into it is refused, naming the holder
        lock = hold_folder(ours["--dataset_dir"], "verl", "gigpo-verl", "--dataset_dir")
    except FolderLockError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    try:
        write_datasets(ours)
        return subprocess.call(cmd)  # the lock's file is not inherited (O_CLOEXEC)
    except KeyboardInterrupt:  # verl got the Ctrl-C too, and keeps its own checkpoints
        return interrupted(
            prog, "verl was stopped; the checkpoints it saved (trainer.default_local_dir) are "
            "kept, and trainer.resume_mode=auto resumes from the last",
        )  # fmt: skip
    finally:
        lock.release()


if __name__ == "__main__":
    raise SystemExit(main())
