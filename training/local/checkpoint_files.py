"""The files of a checkpoint (:mod:`training.local.checkpoint`), as data that runs no code
when read: weights as safetensors (tied weights stored once), optimizer states unpickled
with ``weights_only=True``, RNG states as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

#: The checkpoint format these files belong to.
FORMAT = 2


def read_tensors(path: Path) -> dict[str, Any]:
    """A ``.safetensors`` file written by :func:`write_tensors`: name -> tensor, tied
    names (the ``aliases`` metadata) included."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata() or {}
    aliases = json.loads(metadata.get("aliases", "{}"))
    if not isinstance(aliases, dict):
        raise ValueError(f"{path}: bad 'aliases' metadata")
    for name, original in aliases.items():
        if original not in tensors:
            raise ValueError(f"{path}: alias {name!r} names a missing tensor")
        tensors[name] = tensors[original]
    return tensors


def write_tensors(path: Path, tensors: dict[str, Any]) -> None:
    """Saves a state dict as safetensors. Tied weights (two names, one tensor: an LM's
    embedding and head) are stored once, the other name kept in the ``aliases`` metadata;
    any other tensor sharing storage is copied (safetensors stores each tensor whole)."""
    from safetensors.torch import save_file

    unique: dict[str, Any] = {}
    aliases: dict[str, str] = {}
    seen_views: dict[tuple, str] = {}
    seen_storage: set[int] = set()
    for name, tensor in tensors.items():
        tensor = tensor.detach().cpu()
        view = (
            tensor.untyped_storage().data_ptr(),
            tensor.storage_offset(),
            tuple(tensor.shape),
            tuple(tensor.stride()),
            tensor.dtype,
        )
        if view in seen_views:
            aliases[name] = seen_views[view]
            continue
        seen_views[view] = name
        storage = tensor.untyped_storage().data_ptr()
        shared = storage in seen_storage and tensor.numel() > 0
        seen_storage.add(storage)
        unique[name] = tensor.clone() if shared else tensor.contiguous()
    save_file(unique, str(path), metadata={"format": str(FORMAT), "aliases": json.dumps(aliases)})


def read_torch(path: Path) -> Any:
    """An optimizer state file, unpickled with ``weights_only=True`` (tensors and plain
    containers only; anything else is an error, never a call)."""
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def rng_to_json(rng: dict[str, Any]) -> dict[str, Any]:
    """The RNG states (``python``, ``numpy``, ``torch``, ``generator``) as JSON values."""
    version, words, gauss = rng["python"]
    name, keys, position, has_gauss, cached = rng["numpy"]
    return {
        "python": [version, list(words), gauss],
        "numpy": [name, [int(k) for k in keys], int(position), int(has_gauss), float(cached)],
        "torch": [int(b) for b in rng["torch"].tolist()],
        "generator": rng["generator"],
    }


def rng_from_json(rng: dict[str, Any]) -> dict[str, Any]:
    """:func:`rng_to_json`'s output back as the RNG states each library restores."""
    import torch

    version, words, gauss = rng["python"]
    name, keys, position, has_gauss, cached = rng["numpy"]
    return {
        "python": (int(version), tuple(int(w) for w in words), gauss),
        "numpy": (
            str(name),
            np.asarray(keys, dtype=np.uint32),
            int(position),
            int(has_gauss),
            float(cached),
        ),  # fmt: skip
        "torch": torch.tensor(rng["torch"], dtype=torch.uint8),
        "generator": rng["generator"],
    }
