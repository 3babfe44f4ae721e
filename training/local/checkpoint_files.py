"""The files of a checkpoint (:mod:`training.local.checkpoint`), as data that runs no code
when read: weights as safetensors (tied weights stored once), optimizer states unpickled
with ``weights_only=True``, RNG states as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from training.files import open_regular
from training.guarded import load_json

#: The checkpoint format these files belong to.
FORMAT = 2


def read_tensors(path: Path) -> dict[str, Any]:
    """A ``.safetensors`` file written by :func:`write_tensors`: name -> tensor, tied
    names (the ``aliases`` metadata) included."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    open_regular(path).close()  # a FIFO planted in its place: an error, never a hang
    tensors = load_file(str(path))
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata() or {}
    aliases = load_json(metadata.get("aliases", "{}"), f"{path}: 'aliases' metadata", expect=None)
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

    with open_regular(path) as handle:  # a FIFO planted in its place: an error, not a hang
        return torch.load(handle, map_location="cpu", weights_only=True)


def rng_to_json(rng: dict[str, Any]) -> dict[str, Any]:
    """The RNG states (``python``, ``numpy``, ``torch``, ``generator``, and where a device
    was used ``cuda``: one byte tensor per visible device, ``mps``: one) as JSON values."""
    version, words, gauss = rng["python"]
    name, keys, position, has_gauss, cached = rng["numpy"]
    out = {
        "python": [version, list(words), gauss],
        "numpy": [name, [int(k) for k in keys], int(position), int(has_gauss), float(cached)],
        "torch": [int(b) for b in rng["torch"].tolist()],
        "generator": rng["generator"],
    }
    if "cuda" in rng:
        out["cuda"] = [[int(b) for b in state.tolist()] for state in rng["cuda"]]
    if "mps" in rng:
        out["mps"] = [int(b) for b in rng["mps"].tolist()]
    return out


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
    } | {
        name: _bytes(rng[name]) if name == "mps" else [_bytes(s) for s in rng[name]]
        for name in DEVICE_RNGS
        if name in rng
    }


def check_rng_states(rng: dict[str, Any], path: Path) -> None:
    """Checks a ``state.json``'s RNG states (:func:`rng_to_json`'s form) by restoring each
    into a throwaway object (a ``random.Random``, a NumPy ``RandomState``, a bit generator of
    the named kind) and, for torch's, its dtype (uint8) and length (this torch's), so that a
    damaged state is refused before any model loads and before a real RNG is changed.

    Raises:
        ValueError: a state that cannot be restored; the message names ``path`` and the key.
    """
    import random

    import torch

    key = "rng"
    try:
        restored = rng_from_json(rng)
        key = "rng.python"
        random.Random().setstate(restored["python"])
        key = "rng.numpy"
        np.random.RandomState().set_state(restored["numpy"])  # noqa: NPY002
        key = "rng.torch"
        expected = torch.get_rng_state()
        state = restored["torch"]
        if state.dtype != torch.uint8 or state.shape != expected.shape:
            raise ValueError(f"{state.numel()} values, expected {expected.numel()} bytes")
        key = "rng.generator"
        saved = rng["generator"]
        name = saved.get("bit_generator") if isinstance(saved, dict) else None
        if name not in BIT_GENERATORS:
            raise ValueError(f"'bit_generator' must be one of {BIT_GENERATORS}")
        getattr(np.random, name)().state = saved
    except (TypeError, ValueError, KeyError, IndexError, OverflowError, RuntimeError) as exc:
        raise ValueError(
            f"{path}: '{key}' is not a state this library can restore ({exc}); the checkpoint "
            "is damaged: use another --out or --run.resume=false"
        ) from None


#: The NumPy bit generators a ``rng.generator`` state may name.
BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")
#: The optional RNG states of devices, saved where the run used them.
DEVICE_RNGS = ("cuda", "mps")


def _bytes(values: list[int]) -> Any:
    """A list of ints in [0, 255] as a uint8 tensor (an RNG state)."""
    import torch

    if not isinstance(values, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 256 for v in values
    ):
        raise ValueError("a device RNG state must be a list of bytes (ints in [0, 255])")
    return torch.tensor(values, dtype=torch.uint8)


def device_rng_states(cuda: Any = None, mps: Any = None) -> dict[str, Any]:
    """The RNG states of the accelerators this process used: ``cuda`` (one per visible
    device, where CUDA is initialised: a CPU run on a GPU machine saves none and starts no
    CUDA context) and ``mps`` (where available).

    Args:
        cuda, mps: ``torch.cuda`` and ``torch.mps`` (default); a test passes stand-ins.
    """
    import torch

    cuda = torch.cuda if cuda is None else cuda
    states: dict[str, Any] = {}
    if cuda.is_available() and cuda.is_initialized():
        states["cuda"] = list(cuda.get_rng_state_all())
    if mps is None and torch.backends.mps.is_available():
        mps = torch.mps
    if mps is not None:
        states["mps"] = mps.get_rng_state()
    return states


def restore_device_rngs(rng: dict[str, Any], cuda: Any = None, mps: Any = None) -> list[str]:
    """Restores the accelerator RNG states a checkpoint holds (:func:`device_rng_states`);
    returns a warning for each one it cannot restore exactly (another device count, a
    checkpoint made before they were saved while this run uses the device).

    Args:
        cuda, mps: ``torch.cuda`` and ``torch.mps`` (default); a test passes stand-ins.
    """
    import torch

    cuda = torch.cuda if cuda is None else cuda
    problems = []
    if cuda.is_available():
        saved = rng.get("cuda")
        count = cuda.device_count()
        if saved is None:
            if cuda.is_initialized():
                problems.append(
                    "the checkpoint holds no CUDA RNG state (made before they were saved, or "
                    "on another device): the resumed run samples differently from an "
                    "uninterrupted one"
                )
        else:
            if len(saved) != count:
                problems.append(
                    f"the checkpoint holds CUDA RNG states of {len(saved)} device(s) and this "
                    f"machine has {count}: the first {min(len(saved), count)} are restored"
                )
            for index, state in enumerate(saved[:count]):
                cuda.set_rng_state(state, index)
    if mps is None and torch.backends.mps.is_available():
        mps = torch.mps
    if mps is not None and "mps" in rng:
        mps.set_rng_state(rng["mps"])
    return problems
