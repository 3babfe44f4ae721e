"""What command made a folder, and which folders a command may write: the kind file
(``FOLDER/.gigpo-folder``), the kind of an older folder read from what it holds, and the
folder that owns another (a run's checkpoint and tiny model are its own: no other command
writes inside them). :mod:`training.locks` checks these before it takes a folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from training.files import open_regular
from training.text import bound_text, show

#: The file that keeps a folder's kind.
KIND_FILE = ".gigpo-folder"
#: The kinds of folder, with what a message calls each.
KINDS = {
    "train": "a training run (gigpo-train)",
    "study": "an estimator study (python -m training.study)",
    "evaluate": "a held-out evaluation (gigpo-evaluate)",
    "suite": "a suite run (gigpo-evaluate --suite)",
    "openrlhf": "an OpenRLHF run's tasks and rollouts (gigpo-openrlhf)",
    "verl": "a verl run's task datasets (gigpo-verl)",
}
#: The most bytes read from a lock or kind file (both hold one short JSON object).
MAX_RECORD_BYTES = 4096


class FolderLockError(ValueError):
    """A folder (or page) cannot be taken for writing; the message says why and names it."""


class FolderKindError(FolderLockError):
    """The folder was made by another kind of command (:data:`KINDS`), or is no folder."""


def folder_kind(folder: str | Path) -> str | None:
    """The kind of ``folder``: its kind file's, else :func:`inferred_kind`; None for a new
    or empty folder.

    Raises:
        FolderKindError: the kind file is damaged or names no known kind.
    """
    folder = Path(folder)
    marker = folder / KIND_FILE
    try:
        record = read_record(marker)
    except FileNotFoundError:
        return inferred_kind(folder)
    except (OSError, ValueError) as exc:
        raise FolderKindError(
            f"{marker} cannot be read ({bound_text(exc, 200)}); it says which command made "
            "the folder: use another --out, or delete the file if the folder is yours"
        ) from None
    kind = record.get("kind") if isinstance(record, dict) else None
    if kind not in KINDS:
        raise FolderKindError(f"{marker}: 'kind' must be one of {sorted(KINDS)}, got {show(kind)}")
    return str(kind)


def inferred_kind(folder: Path) -> str | None:
    """The kind of a folder made before kind files existed, from what it holds: a suite run
    (``run.json``), a training run (``config.json`` with ``metrics.jsonl`` or
    ``checkpoint/``), a study (``study.json``, ``study.md`` or ``runs/``), a plain
    evaluation (``summary.json`` with ``episodes.jsonl``), an OpenRLHF run's dataset folder
    (``tasks.jsonl``); None for anything else."""

    def has(*names: str) -> bool:
        return any((folder / name).exists() for name in names)

    if has("run.json"):
        return "suite"
    if has("config.json") and has("metrics.jsonl", "checkpoint", "checkpoint.old"):
        return "train"
    if has("study.json", "study.md", "runs"):
        return "study"
    if (folder / "summary.json").exists() and (folder / "episodes.jsonl").exists():
        return "evaluate"
    if has("tasks.jsonl"):
        return "openrlhf"
    if has("train.parquet", "val.parquet"):
        return "verl"
    return None


def read_record(path: Path) -> Any:
    """The JSON object in a lock or kind file, reading at most :data:`MAX_RECORD_BYTES`."""
    with open_regular(path, follow=False) as handle:  # a FIFO there is refused, not waited on
        data = handle.read(MAX_RECORD_BYTES + 1)
    if len(data) > MAX_RECORD_BYTES:
        raise ValueError(f"more than {MAX_RECORD_BYTES} bytes")
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError("nested too deeply") from None


#: The kinds of folder that another command's folder may sit inside: a study's runs.
NESTED = {("study", "train")}


def owning_folder(folder: str | Path) -> tuple[Path, str] | None:
    """The nearest folder above ``folder`` (symlinks resolved) that a command owns, with its
    kind: one holding a kind file, or an older training run (``config.json`` with
    ``checkpoint/`` or ``metrics.jsonl``); None when there is none. Other folders' contents
    are not guessed at: a ``runs/`` folder in a project is not a study."""
    here = Path(folder).expanduser().resolve()
    for parent in here.parents:
        try:
            if (parent / KIND_FILE).exists():
                return parent, folder_kind(parent) or "train"
            if inferred_kind(parent) == "train":
                return parent, "train"
        except (OSError, FolderKindError):
            return parent, "train"  # a damaged kind file: someone's folder all the same
    return None


def check_owner(folder: Path, kind: str, option: str) -> None:
    """Refuses ``folder`` inside another command's folder (a run's checkpoint or tiny
    model, a suite run, ...): that command deletes and rewrites what is in it. A study's
    runs are the one nesting allowed (:data:`NESTED`)."""
    found = owning_folder(folder)
    if found is not None and (found[1], kind) not in NESTED:
        owner, owner_kind = found
        raise FolderKindError(
            f"{option} {folder} is inside {owner}, which holds {KINDS.get(owner_kind, owner_kind)} "
            f"and rewrites what is in it: use an {option} outside it"
        )


def check_kind(folder: Path, kind: str, option: str = "--out") -> None:
    found = folder_kind(folder)
    if found is not None and found != kind:
        raise FolderKindError(
            f"{option} {folder} holds {KINDS[found]}; this command writes {KINDS[kind]}: use "
            f"another {option}"
        )
