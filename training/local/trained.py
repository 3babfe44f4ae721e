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

from training.files import UnsafeFileError, open_regular
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
from training.model_files import is_regular_file

__all__ = [
    "TrainedModel", "check_tiny_tokenizer", "checkpoint_iteration", "export_run",
    "find_run_dir", "load_trained", "whole_checkpoint",
]  # fmt: skip


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


def checkpoint_iteration(checkpoint: Path) -> int | None:
    """The last iteration checkpoint folder ``checkpoint`` trained, numbered from 0 as in
    ``metrics.jsonl`` (its ``state.json`` counts the iterations done); None for none.

    Raises:
        ValueError: its ``state.json`` is not JSON or not this format (the file named).
    """
    done = int(read_state(checkpoint)["iteration"])
    return done - 1 if done > 0 else None


def load_trained(model: str, config: TrainConfig, out: Path) -> TrainedModel:
    """``model`` loaded in ``config.model``'s dtype on its device: a run directory of ours
    (or one of its checkpoint folders) gives the base model its ``config.json`` names with
    the checkpoint's weights, or its LoRA adapters merged (W + scale * B @ A); anything
    else is a model name (``smollm2``, ``tiny-random``, a hub id, a directory) under
    ``config.model``'s other settings. The run directory is only read.

    A run folder is data (docs/security.md): a model runs its own code only where
    ``config`` (the user's) sets ``model.trust_remote_code``, never because the run's
    ``config.json`` does; the tiny model's tokenizer (:func:`check_tiny_tokenizer`) and the
    adapters' config (:func:`training.local.lora.read_adapter_config`) are checked before
    any model is built.

    Raises:
        FileNotFoundError: a run directory with no whole checkpoint, a model that cannot be
            found (:class:`training.hub.ModelNotFoundError`), a tiny model without its
            tokenizer.
        UnsafeCheckpointError: the run's checkpoint is in the old pickled format.
        UnsafeFileError: a file of the model folder or the adapters' weights is not a
            regular file (a FIFO is refused, never waited on).
        ValueError: the model's config maps to its own code (``auto_map``) without
            ``model.trust_remote_code`` (:class:`training.hub.RemoteCodeError`, or a
            ConfigError for the run's base model); the adapters' config is not one the
            trainer writes (:class:`training.local.lora.AdapterFileError`).
        RuntimeError: the checkpoint's weights cannot be loaded (the file named).
    """
    from training.hub import check_remote_code
    from training.local.config import load_config
    from training.local.lora import (
        ADAPTER_DIR,
        ADAPTER_WEIGHTS,
        merged_model,
        read_adapter_config,
    )
    from training.local.model import load_model, load_tokenizer, model_source

    trust = config.model.trust_remote_code  # the user's: a run's config.json never sets it
    run = find_run_dir(model)
    checkpoint = adapter = None
    if run is not None:
        trusted = [f"--model.trust_remote_code={str(trust).lower()}"]
        base = load_config(run / "config.json", trusted, check_device=False,
                           check_files=False, run_file=True).model  # fmt: skip
        checkpoint = whole_checkpoint(run)
        if (checkpoint / ADAPTER_DIR).is_dir():  # its bounds checked before anything is built
            adapter = read_adapter_config(checkpoint / ADAPTER_DIR)
            open_regular(checkpoint / ADAPTER_DIR / ADAPTER_WEIGHTS).close()
        source = model_source(base, run)
    else:
        base = dataclasses.replace(config.model, name_or_path=model)
        source = model_source(base, out)
    check_remote_code(source.path / "config.json", trust, key="model.trust_remote_code")
    if base.name_or_path == "tiny-random":
        check_tiny_tokenizer(source.path)
    tokenizer = load_tokenizer(source.path, trust_remote_code=trust)
    policy = load_model(source.path, config.model.dtype, trainable=False,
                        device=config.model.device, trust_remote_code=trust)  # fmt: skip
    lora = adapter is not None
    if checkpoint is not None:
        weights = checkpoint / (ADAPTER_DIR if lora else "model.safetensors")
        try:
            if lora:
                policy = merged_model(policy, weights, adapter)
                policy.requires_grad_(False)
                policy.eval()
            else:
                load_weights(policy, weights)
        except UnsafeFileError:  # named already: a FIFO planted after the check above
            raise
        except Exception as exc:  # corrupt file, another model: say which file
            raise RuntimeError(f"cannot load the weights in {weights}: {exc}") from exc
    return TrainedModel(policy, tokenizer, source, checkpoint, lora)


def check_tiny_tokenizer(folder: Path) -> None:
    """Refuses the tiny model in ``folder`` unless its tokenizer, ``tokenizer.json`` (the one
    file it is built with), is a regular file there: without it transformers builds an
    empty tokenizer and the model loads, evaluates and exports with it.

    Raises:
        FileNotFoundError: no ``tokenizer.json`` (or a folder by that name).
        ModelFileError: a FIFO, a device or a dangling link in its place
            (:func:`training.model_files.is_regular_file`).
    """
    path = folder / "tokenizer.json"
    if not is_regular_file(path):
        raise FileNotFoundError(
            f"{path} is missing (or no file): the tiny model's tokenizer (remove {folder} and "
            "the next command rebuilds it, the same model)"
        )


def export_run(
    run: Path, target: Path, dtype: str = "bfloat16", *, trust_remote_code: bool = False
) -> dict[str, Any]:
    """Writes run ``run``'s trained policy (its newest whole checkpoint; LoRA adapters
    merged) as a Hugging Face model directory ``target``: ``config.json``, the weights as
    safetensors in ``dtype``, the tokenizer, and ``gigpo_export.json`` (where it came from).
    ``target`` must not exist yet; it appears whole or not at all (written beside it, then
    renamed), its files with the mode a new file gets under the umask. The base model runs
    its own code only with ``trust_remote_code`` (the user's; the run's config is data).

    Returns:
        ``gigpo_export.json``'s content.

    Raises:
        FileNotFoundError: ``run`` is no run directory with a checkpoint.
        FileExistsError: ``target`` exists (a dangling symlink included).
        FolderKindError: ``target`` is inside another command's folder (a run's checkpoint).
        UnsafeFileError, ValueError, RuntimeError: as :func:`load_trained`.
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
    trusted = [f"--model.trust_remote_code={str(trust_remote_code).lower()}"]
    config = load_config(found / "config.json", trusted, check_device=False, check_files=False,
                         run_file=True)  # fmt: skip
    config = dataclasses.replace(config, model=dataclasses.replace(
        config.model, dtype=dtype, device="cpu"))  # fmt: skip
    trained = load_trained(str(found), config, found)
    target.parent.mkdir(parents=True, exist_ok=True)
    # A fresh hidden folder beside the target (never one planted or left there before).
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        record = _write_export(trained, staging, found, dtype)
        mask = _umask()
        for path in staging.iterdir():  # safetensors writes 0600; a plain open gives 0644
            if path.is_file() and not path.is_symlink():
                os.chmod(path, 0o666 & ~mask)
        os.chmod(staging, 0o777 & ~mask)  # mkdtemp's 0700 is not what mkdir gives
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
        "checkpoint_iteration": checkpoint_iteration(trained.checkpoint),
        "base_model": trained.source.name,
        "base_revision": trained.source.revision,
        "lora_merged": trained.lora,
        "dtype": dtype,
    }
    atomic_write_text(staging / "gigpo_export.json", json.dumps(record, indent=1) + "\n")
    return record
