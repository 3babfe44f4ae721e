"""A trained run's model, as evaluation and export read it: the run directory a path names,
its newest whole checkpoint, and the policy with its trained weights: the base model its
config names (a hub id at the commit the run recorded, a directory, a packaged model) with
the checkpoint's weights, or under LoRA its adapters folded in (:func:`load_trained`).
:func:`export_run` writes that policy as a plain Hugging Face model directory
(``gigpo-export``), for vLLM, serving, or OpenRLHF.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.folders import check_owner
from training.hub import ResolvedModel
from training.local.checkpoint import (
    CHECKPOINT_DIR,
    OLD_SUFFIX,
    STAGING_SUFFIX,
    find_checkpoint,
    load_weights,
    read_state,
)
from training.local.schema import TrainConfig

__all__ = ["TrainedModel", "export_run", "find_run_dir", "load_trained", "whole_checkpoint"]


def find_run_dir(path: str | Path) -> Path | None:
    """The run directory ``path`` names, without changing anything: ``path`` itself, or its
    parent when ``path`` is one of the run's checkpoint folders. A run directory holds a
    ``config.json`` beside a ``checkpoint/``, ``checkpoint.tmp/`` or ``checkpoint.old/``;
    None when ``path`` names no run (a model name, a Hugging Face model directory)."""
    path = Path(path).expanduser()
    names = [CHECKPOINT_DIR + suffix for suffix in ("", STAGING_SUFFIX, OLD_SUFFIX)]
    for candidate in (path, path.parent):
        if candidate == path.parent and path.name not in names:
            continue
        if (candidate / "config.json").is_file() and any(
            (candidate / name).is_dir() for name in names
        ):
            return candidate
    return None


def whole_checkpoint(run: Path) -> Path:
    """The newest whole checkpoint of run directory ``run`` (:func:`find_checkpoint`), its
    ``state.json`` checked (:func:`read_state`), without changing anything.

    Raises:
        FileNotFoundError: ``run`` holds no whole checkpoint.
        ValueError: its ``state.json`` is not JSON or not this format (the file named).
        UnsafeCheckpointError: the checkpoint is in the old pickled format.
    """
    found = find_checkpoint(run)
    if found is None:
        raise FileNotFoundError(
            f"{run} is a run directory but holds no whole checkpoint (no checkpoint/state.json)"
        )
    read_state(found)  # ValueError naming the file when it is not this format
    return found


@dataclass
class TrainedModel:
    """A model loaded for evaluation or export (frozen, in eval mode)."""

    policy: Any
    tokenizer: Any
    source: ResolvedModel
    """The base model: its name, local folder, and hub commit (None for a directory)."""
    checkpoint: Path | None
    """The run's checkpoint whose weights it holds (None: the base model as it is)."""
    lora: bool = False
    """The checkpoint held LoRA adapters, now folded into the weights."""


def load_trained(model: str, config: TrainConfig, out: Path) -> TrainedModel:
    """``model`` loaded in ``config.model``'s dtype on its device: a run directory of ours
    (or one of its checkpoint folders) gives the base model its ``config.json`` names with
    the checkpoint's weights, or its LoRA adapters merged (W + scale * B @ A); anything
    else is a model name (``smollm2``, ``tiny-random``, a hub id, a directory) under
    ``config.model``'s other settings. The run directory is only read.

    Raises:
        FileNotFoundError: a run directory with no whole checkpoint, a model that cannot be
            found (:class:`training.hub.ModelNotFoundError`).
        UnsafeCheckpointError: the run's checkpoint is in the old pickled format.
        RuntimeError: the checkpoint's weights cannot be loaded (the file named).
    """
    from training.local.config import load_config
    from training.local.lora import ADAPTER_DIR, merged_model
    from training.local.model import load_model, load_tokenizer, model_source

    run = find_run_dir(model)
    checkpoint = None
    if run is not None:
        base = load_config(run / "config.json", check_device=False, check_files=False).model
        source, checkpoint = model_source(base, run), whole_checkpoint(run)
    else:
        base = dataclasses.replace(config.model, name_or_path=model)
        source = model_source(base, out)
    trust = base.trust_remote_code
    tokenizer = load_tokenizer(source.path, trust_remote_code=trust)
    policy = load_model(source.path, config.model.dtype, trainable=False,
                        device=config.model.device, trust_remote_code=trust)  # fmt: skip
    lora = checkpoint is not None and (checkpoint / ADAPTER_DIR).is_dir()
    if checkpoint is not None:
        weights = checkpoint / (ADAPTER_DIR if lora else "model.safetensors")
        try:
            if lora:
                policy = merged_model(policy, weights)
                policy.requires_grad_(False)
                policy.eval()
            else:
                load_weights(policy, weights)
        except Exception as exc:  # corrupt file, another model: say which file
            raise RuntimeError(f"cannot load the weights in {weights}: {exc}") from exc
    return TrainedModel(policy, tokenizer, source, checkpoint, lora)


def export_run(run: Path, target: Path, dtype: str = "bfloat16") -> dict[str, Any]:
    """Writes run ``run``'s trained policy (its newest whole checkpoint; LoRA adapters
    merged) as a Hugging Face model directory ``target``: ``config.json``, the weights as
    safetensors in ``dtype``, the tokenizer, and ``gigpo_export.json`` (where it came from).
    ``target`` must not exist yet; it appears whole or not at all (written beside it, then
    renamed).

    Returns:
        ``gigpo_export.json``'s content.

    Raises:
        FileNotFoundError: ``run`` is no run directory with a checkpoint.
        FileExistsError: ``target`` exists (a dangling symlink included).
        FolderKindError: ``target`` is inside another command's folder (a run's checkpoint).
    """
    from training.local.config import load_config

    found = find_run_dir(run)
    if found is None:
        raise FileNotFoundError(
            f"{run} is not a run directory of gigpo-train (config.json beside a checkpoint/)"
        )
    target = Path(target)
    if target.exists() or target.is_symlink():  # a dangling link is there all the same
        raise FileExistsError(f"{target} exists; export into a new folder")
    check_owner(target, "export", "OUT_DIR")  # a run's checkpoint is rewritten by its run
    config = load_config(found / "config.json", check_device=False, check_files=False)
    config = dataclasses.replace(config, model=dataclasses.replace(
        config.model, dtype=dtype, device="cpu"))  # fmt: skip
    trained = load_trained(str(found), config, found)
    target.parent.mkdir(parents=True, exist_ok=True)
    # A fresh hidden folder beside the target (never one planted or left there before).
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        record = _write_export(trained, staging, found, dtype)
        os.chmod(staging, 0o777 & ~_umask())  # mkdtemp's 0700 is not what mkdir gives
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return record


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_export(trained: Any, staging: Path, found: Path, dtype: str) -> dict[str, Any]:
    """The model directory of :func:`export_run`, written into ``staging``; returns its
    ``gigpo_export.json`` record."""
    from training.files import atomic_write_text

    trained.policy.save_pretrained(str(staging), safe_serialization=True)
    trained.tokenizer.save_pretrained(str(staging))
    record = {
        "run": str(found.resolve()),
        "checkpoint": str(trained.checkpoint),
        "iteration": read_state(trained.checkpoint)["iteration"],
        "base_model": trained.source.name,
        "base_revision": trained.source.revision,
        "lora_merged": trained.lora,
        "dtype": dtype,
    }
    atomic_write_text(staging / "gigpo_export.json", json.dumps(record, indent=1) + "\n")
    return record
