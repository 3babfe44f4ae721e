"""GiGPO on verl from an install: ``gigpo-verl [--dry-run] [ours...] [key=value...]``.

Also ``python -m training.verl.launch``; ``bash training/verl_gigpo.sh`` (in a clone) is a
thin wrapper around it. Arguments are verl's own Hydra overrides (``key=value``, e.g.
``actor_rollout_ref.model.path=Qwen/Qwen2.5-1.5B-Instruct``, ``algorithm.gamma=0.95``, the
estimator's settings as ``algorithm.gigpo.step_advantage_w=1.0``: verl-agent's names or ours,
:mod:`training.verl.config`) plus ours (:data:`FLAGS`). The run's folder ``--run_dir`` holds
what it writes: the task datasets (``data/train.parquet``, ``data/val.parquet``: one row per
task, the task label in ``extra_info.gigpo_task``), Hydra's logs (``hydra/``), verl's
checkpoints (``checkpoints/``) and, for ``actor_rollout_ref.model.path=tiny-random``, the
tiny model (``models/``). It runs ``python -m verl.trainer.main_ppo`` with the resolved
overrides: our agent loop, the step rows' estimator, the batch sizes of verl-agent's recipe
for the env (:mod:`training.verl.recipes`), and on ``trainer.device=cpu`` what verl needs on a
CPU machine (:data:`training.verl.cpu.CPU_OVERRIDES`).

Before anything is written or started, the command goes through verl 0.9.1's own checks
(:mod:`training.verl.checks`: Hydra's composition of verl's config, ``validate_config``);
``--dry-run`` stops there, printing the settings, the batch a training step holds and the full
verl command. A refused command is exit 2 with one line naming the key. A run holds
``--run_dir`` (:func:`training.locks.hold_folder`, kind ``verl``) while verl runs.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shlex
import subprocess
import sys
from typing import Any

from training.commands import interrupted, invoked_as
from training.packaged import PACKAGED_MODELS, prepare_packaged
from training.text import bound_text
from training.verl import recipes
from training.verl.command import (
    USAGE,
    UsageError,
    command,
    folders,
    hydra_args,
    parse,
    resolve,
    run_env,
)


def tasks(ours: dict[str, Any], prompt_cap: int) -> dict[str, list[dict[str, Any]]]:
    """The train and validation dataset rows: one per task, seeds 0.. for training and
    1_000_000.. for validation."""
    from training.env_tasks import Task, task_label

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


def write_datasets(ours: dict[str, Any], prompt_cap: int) -> None:
    """``train.parquet`` and ``val.parquet`` in the datasets' folder, each written whole to
    a new file and renamed (never through a link planted there)."""
    import pandas as pd

    from training.files import UnsafeFileError, atomic_write_bytes

    folder = folders(ours)[1]
    if folder.is_symlink():
        raise UnsafeFileError(f"{folder} is a symbolic link: refusing to write the datasets "
                              "through it (remove it or write elsewhere)")  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in tasks(ours, prompt_cap).items():
        buffer = io.BytesIO()
        pd.DataFrame(rows).to_parquet(buffer)
        atomic_write_bytes(folder / f"{split}.parquet", buffer.getvalue())


def report(ours: dict[str, Any], resolved: dict[str, str], settings: Any, cmd: list[str],
           checked: str) -> None:  # fmt: skip
    """Prints our settings, the estimator's, the batch a step holds, whether verl checked
    it, and the verl command."""
    shown = {k: v for k, v in ours.items() if k != "--env.kwargs"}
    print(f"# gigpo: {json.dumps(shown)} env.kwargs {json.dumps(ours['--env.kwargs'])}")
    if settings is not None:
        named = {k: v for k, v in vars(settings).items() if v is not None}
        print(f"# settings: {json.dumps(named)}")
    steps = recipes.episode_steps(ours["--env"], ours["--env.kwargs"])
    for line in recipes.batch_plan(resolved, steps):
        print(line)
    print(f"# checked: {checked}")
    print("# verl:")
    print(shlex.join(cmd), flush=True)


def verl_checks(resolved: dict[str, str], added: set[str]) -> str:
    """verl's own checks of the command (:func:`training.verl.checks.check_command`), without
    Hydra's own ``hydra.*`` keys; what was checked, or why nothing was.

    Raises:
        UsageError: verl refuses the command.
    """
    if importlib.util.find_spec("verl") is None:
        return "not by verl, which is not installed here (pip install -e '.[verl]')"
    from training.verl.checks import VerlCheckError, check_command

    args = [a for a in hydra_args(resolved, added) if not a.startswith("hydra.")]
    try:
        check_command(args)
    except VerlCheckError as exc:
        raise UsageError(str(exc)) from None
    return "verl 0.9.1's Hydra composition and validate_config passed"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    python = os.environ.get("PYTHON") or sys.executable
    prog = invoked_as("training.verl.launch")
    if any(a in ("-h", "--help") for a in args):
        print(USAGE.replace("gigpo-verl", prog, 1))
        return 0
    try:
        ours, overrides, added, dry_run = parse(args)
        model = overrides.get("actor_rollout_ref.model.path", "")
        resolved, settings = resolve(ours, overrides, added)
        checked = verl_checks(resolved, added)
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    cmd = command(resolved, python, added)
    report(ours, resolved, settings, cmd, checked)
    if dry_run:
        return 0
    if importlib.util.find_spec("verl") is None:
        print(f"{prog}: error: verl is not installed: pip install -e '.[verl]'", file=sys.stderr)
        return 2
    from training.locks import FolderLockError, hold_folder

    run_dir, data = folders(ours)
    held = []
    try:  # one writer per folder: a second launch into it is refused, naming the holder
        held.append(hold_folder(run_dir, "verl", "gigpo-verl", "--run_dir"))
        if run_dir not in data.parents:
            held.append(hold_folder(data, "verl", "gigpo-verl", "--dataset_dir"))
    except FolderLockError as exc:
        for lock in held:
            lock.release()
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    try:
        try:
            write_datasets(ours, int(resolved["data.max_prompt_length"]))
            if model in PACKAGED_MODELS:
                prepare_packaged(model, resolved["actor_rollout_ref.model.path"])
        except (OSError, ValueError) as exc:  # a planted link, a full disk, a bad model
            print(f"{prog}: error: {bound_text(exc, 400)}", file=sys.stderr)
            return 2
        return subprocess.call(cmd, env=run_env(resolved))  # the locks are not inherited
    except KeyboardInterrupt:  # verl got the Ctrl-C too, and keeps its own checkpoints
        return interrupted(
            prog, "verl was stopped; the checkpoints it saved (trainer.default_local_dir) are "
            "kept, and trainer.resume_mode=auto resumes from the last",
        )  # fmt: skip
    finally:
        for lock in held:
            lock.release()


if __name__ == "__main__":
    raise SystemExit(main())
