"""Resuming a run: the config check before anything is built.

A run resumes from ``run.out/checkpoint`` (:mod:`training.local.checkpoint`) only with the
config it was made with, but for the keys that do not change what it learns
(:func:`~training.local.schema.resumable_keys`); :func:`check_resume` says which keys differ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from training.env_tasks import PromptTooLongError
from training.files import UnsafeFileError, check_own_folder
from training.guarded import GuardError, read_json_file
from training.hub import ModelNotFoundError, RemoteCodeError
from training.local.checkpoint import (
    CHECKPOINT_DIR,
    CheckpointReadError,
    UnsafeCheckpointError,
    read_state,
    recover_checkpoint,
)
from training.local.schema import (
    ConfigError,
    TrainConfig,
    ppo_gamma_renamed,
    renamed,
    resumable_keys,
)
from training.locks import FolderLockError
from training.text import show


class ResumeConfigError(ValueError):
    """``run.resume`` found a checkpoint made with another config, or a damaged one."""


#: What refuses a run before it trains or resumes, each with a message that names the file,
#: key or holder: another process or kind of output in --out (FolderLockError), a checkpoint
#: of another config, in the old pickled format, or damaged, a memory plan that does not fit,
#: a model that cannot be had here or runs code it may not, a prompt over the cap (the
#: iteration is lost, the last checkpoint is not), a file in the run folder that is no
#: regular file (a link or FIFO planted there: never written through).
#: The commands that train (``gigpo-train``, the quickstart) exit 2 with the message.
REFUSALS = (
    FolderLockError,
    ResumeConfigError,
    UnsafeCheckpointError,
    CheckpointReadError,
    ConfigError,
    ModelNotFoundError,
    RemoteCodeError,
    PromptTooLongError,
    UnsafeFileError,
    GuardError,  # a file read back (metrics.jsonl on resume, ...) that cannot be read, named
)


#: The folders a run writes inside its ``run.out``: each must be a real folder or absent.
RUN_FOLDERS = ("checkpoint", "checkpoint.tmp", "checkpoint.old", "rollouts", "tensorboard", "wandb")


def check_run_folders(out: Path) -> None:
    """Refuses a run folder where one of :data:`RUN_FOLDERS` is a symlink, a file or a
    FIFO: the run would write (or delete) through it, or wait on it. Runs before anything
    is read or written; nothing is changed.

    Raises:
        UnsafeFileError: naming the first such path and what it is.
    """
    for name in RUN_FOLDERS:
        check_own_folder(Path(out) / name)


def check_resume(config: TrainConfig) -> int | None:
    """Raises :class:`ResumeConfigError` naming the differing keys when ``run.out`` holds a
    checkpoint whose ``config.json`` differs from ``config`` (``run.allow_config_change``
    lets it through). Runs before anything is built; first finishes a checkpoint swap that
    a crash interrupted (:func:`~training.local.checkpoint.recover_checkpoint`).

    Returns:
        The iterations the checkpoint that resume will load has completed; None when the
        run does not resume (``run.resume`` false, or no checkpoint).

    Raises:
        ResumeConfigError: the configs differ, the saved one cannot be read, or the
            checkpoint's state.json is damaged (its RNG states included: the key named).
        UnsafeCheckpointError: the checkpoint is in the old pickled format.
    """
    out = Path(config.run.out)
    saved_path = out / "config.json"
    if not (config.run.resume and out.is_dir()):
        return None
    # A crash during a checkpoint's swap leaves checkpoint.tmp/ or checkpoint.old/: finish
    # it, so that the config check below sees the checkpoint that resume will load.
    if (found := recover_checkpoint(out)) is None:
        return None
    try:  # its RNG states too (restored into throwaway objects), before any model loads
        done = int(read_state(found)["iteration"])
    except ValueError as exc:
        raise ResumeConfigError(f"cannot resume: {exc}") from None
    if not saved_path.is_file():
        raise ResumeConfigError(
            f"{out} holds a checkpoint but no config.json to compare configs with; use "
            "another --out or --run.resume=false"
        )
    try:  # the guarded reader; a config's free-form env.kwargs may hold .inf
        saved = read_json_file(saved_path, "saved config", nonfinite=True, expect=None)
    except GuardError as exc:
        raise ResumeConfigError(f"cannot read {saved_path} to compare configs: {exc}") from None
    if not isinstance(saved, dict):
        raise ResumeConfigError(f"{saved_path} does not hold a config (a JSON object)")
    changes = config_changes(saved, config)
    if changes and not config.run.allow_config_change:
        raise ResumeConfigError(
            f"{out} holds a checkpoint of a run with another config; differing keys:\n  "
            + "\n  ".join(changes)
            + "\nUse another --out, --run.resume=false to start over, or "
            "--run.allow_config_change=true to continue anyway."
        )
    return done


def interrupt_note(config: TrainConfig) -> str:
    """What a Ctrl-C during the run of ``config`` kept, and how to go on: the last
    checkpoint's iteration (read from ``run.out/checkpoint/state.json``) and the command
    that resumes from it, or that none was written yet."""
    out = Path(config.run.out)
    try:
        done = int(read_state(out / CHECKPOINT_DIR)["iteration"])
    except (OSError, ValueError):  # none yet, or cut short: resume finishes or ignores it
        every = config.run.checkpoint_every
        when = f"one every {every} iterations" if every else "run.checkpoint_every is 0"
        return f"no checkpoint of {out} was written ({when}); run the same command to start again"
    how = "run the same command" if config.run.resume else "add --run.resume=true"
    # state.json counts the iterations done; the last one is numbered from 0, as everywhere
    return (f"the last checkpoint of {out} (after iteration {done - 1}, numbered from 0) is "
            f"kept; {how} to resume")  # fmt: skip


def config_changes(saved: dict[str, Any], config: TrainConfig) -> list[str]:
    """``key: saved -> now`` for each dotted key whose value differs from a saved
    ``config.json``, leaving out the keys that may change on resume
    (:func:`~training.local.schema.resumable_keys`). The saved config's renamed keys are
    read under their new names (:func:`~training.local.schema.renamed`,
    :func:`~training.local.schema.ppo_gamma_renamed`), and a key it lacks (added since)
    counts as its default."""
    resumable = set(resumable_keys())
    now = _flatten(config.to_dict())
    defaults = _flatten(TrainConfig().to_dict())
    saved = renamed(saved)
    if isinstance(saved.get("algo"), dict):
        saved["algo"] = ppo_gamma_renamed(saved["algo"])
    before = _flatten(saved)
    if now.get("model.name_or_path") == "tiny-random" and _study_tiny_model(
        before.get("model.name_or_path")
    ):
        before["model.name_or_path"] = "tiny-random"
    if now.get("model.revision") is None and before.get("model.name_or_path") == now.get(
        "model.name_or_path"
    ):  # an unpinned hub id: the trainer pins it to the commit it resolves to, then compares
        before.pop("model.revision", None)
    for key in set(now) - set(before):
        before[key] = defaults.get(key, "<absent>")
    changes = []
    for key in sorted(set(now) | set(before)):
        if key in resumable:
            continue
        if before.get(key, "<absent>") != now.get(key, "<absent>"):
            changes.append(
                f"{key}: {show(before.get(key, '<absent>'))} -> {show(now.get(key, '<absent>'))}"
            )
    return changes


def _study_tiny_model(name: Any) -> bool:
    """Whether ``name`` is the path a study made before its folders held relative links
    stored for its shared tiny model (``.../models/<key>/tiny-model``): the same model a
    study's run now names ``tiny-random`` (its folder's ``tiny-model`` links there)."""
    if not isinstance(name, str):
        return False
    parts = Path(name).parts
    return len(parts) >= 3 and parts[-1] == "tiny-model" and parts[-3] == "models"


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and prefix == "":
            flat.update(_flatten(value, f"{key}."))
        else:
            flat[prefix + key] = value
    return flat
