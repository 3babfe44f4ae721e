"""Checkpoints for exact resume, stored as data that runs no code when read.

``out/checkpoint/`` holds:

- ``model.safetensors`` (and ``critic.safetensors`` for ``algo.estimator: ppo``): the
  weights, in safetensors (a header and raw tensor bytes; nothing in it is executed);
- ``optimizer.pt`` (and ``critic_optimizer.pt``): the optimizer's ``state_dict``, read back
  with ``torch.load(..., weights_only=True)``, whose unpickler builds only tensors and plain
  containers and refuses anything else (a planted ``__reduce__`` is an error, not a call);
- ``state.json``, written last: the format version, the iteration counter and every RNG
  state (Python's, NumPy's global one, torch's CPU one, the trainer's own generator, and
  where the run used them CUDA's, one per visible device, and MPS's), so that a resumed
  run on any device samples what the uninterrupted one did.

A directory without ``state.json`` is incomplete and never read. A checkpoint in the old
pickled format (one ``state.pt``) is refused; ``python -m training.local.checkpoint
--trust-pickle RUN_DIR`` converts one whose origin you trust (loading a pickle runs
whatever code it holds).

A save writes ``checkpoint.tmp/`` and then swaps it in with two renames (the old checkpoint
becomes ``checkpoint.old/`` for that instant). :func:`recover_checkpoint` finishes a swap a
crash interrupted; :func:`find_checkpoint` reads without touching the directory.

The environments need no state of their own: iteration ``k`` resets them with a seed that is
a function of ``k`` (see :func:`training.local.play.train_seeds`). The file formats are
:mod:`training.local.checkpoint_files`.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from training.commands import CommandParser
from training.files import atomic_write_text, check_own_folder, remove_tree
from training.guarded import ParseError, read_json_file
from training.local.checkpoint_files import (
    DEVICE_RNGS,
    FORMAT,
    check_rng_states,
    device_rng_states,
    read_tensors,
    read_torch,
    restore_device_rngs,
    rng_from_json,
    rng_to_json,
    write_tensors,
)

CHECKPOINT_DIR = "checkpoint"
#: The file written last; a checkpoint directory without it is incomplete.
STATE_FILE = "state.json"
#: The old pickled format's only file.
PICKLED_FILE = "state.pt"
#: Where a save stages the new checkpoint, and where the old one waits during the swap.
STAGING_SUFFIX, OLD_SUFFIX = ".tmp", ".old"


class UnsafeCheckpointError(RuntimeError):
    """A checkpoint in the old pickled format: reading it could run code; it is refused."""


class CheckpointReadError(RuntimeError):
    """A checkpoint that cannot be read or does not fit the model; the message names it."""


def save_checkpoint(
    out: Path,
    *,
    model: Any,
    optimizer: Any,
    iteration: int,
    generator: np.random.Generator,
    critic: Any = None,
    critic_optimizer: Any = None,
    adapter: Any = None,
) -> Path:
    """Writes ``out/checkpoint/`` atomically (a crash at any instant keeps one whole
    checkpoint, the old or the new, that :func:`recover_checkpoint` finds).

    Args:
        iteration: the number of iterations completed.
        generator: the trainer's numpy generator (minibatch shuffling).
        critic, critic_optimizer: PPO's critic and its optimizer (``algo.estimator: ppo``).
        adapter: under LoRA, PEFT's wrapper of ``model``: the adapters are saved in PEFT's
            format (``adapter/``) instead of the model's weights.
    """
    import torch

    states = {"optimizer": optimizer.state_dict()}
    if adapter is None:
        states["model"] = model.state_dict()
    else:
        states["adapter"] = adapter
    if critic is not None:
        states["critic"] = critic.state_dict()
        states["critic_optimizer"] = critic_optimizer.state_dict()
    rng = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),  # noqa: NPY002  (libraries draw from it)
        "torch": torch.get_rng_state(),
        "generator": generator.bit_generator.state,
        **device_rng_states(),
    }
    return write_checkpoint(out, states, iteration=iteration, rng=rng)


def write_checkpoint(
    out: Path, states: dict[str, Any], *, iteration: int, rng: dict[str, Any]
) -> Path:
    """Writes state dicts (``model`` or under LoRA ``adapter``, PEFT's wrapper;
    ``optimizer``; optionally ``critic`` and ``critic_optimizer``) and the RNG states as
    ``out/checkpoint/``, staged and swapped in."""
    import torch

    target = out / CHECKPOINT_DIR
    staging = out / (CHECKPOINT_DIR + STAGING_SUFFIX)
    old = out / (CHECKPOINT_DIR + OLD_SUFFIX)
    remove_tree(staging)  # a link or FIFO planted there is refused, never followed
    staging.mkdir(parents=True)
    for name in ("model", "critic"):
        if name in states:
            write_tensors(staging / f"{name}.safetensors", states[name])
    if "adapter" in states:  # PEFT's wrapper: its adapters in PEFT's own format
        from training.local.lora import ADAPTER_DIR, save_adapter

        save_adapter(states["adapter"], staging / ADAPTER_DIR)
    for name in ("optimizer", "critic_optimizer"):
        if name in states:
            torch.save(states[name], staging / f"{name}.pt")
    state = {"format": FORMAT, "iteration": int(iteration), "rng": rng_to_json(rng)}
    atomic_write_text(staging / STATE_FILE, json.dumps(state) + "\n")
    check_own_folder(target)
    if target.exists():
        remove_tree(old)
        target.rename(old)
    staging.rename(target)
    remove_tree(old)
    return target


def _complete(directory: Path) -> bool:
    return (directory / STATE_FILE).is_file()


def find_checkpoint(out: Path) -> Path | None:
    """The directory of the newest whole checkpoint in run directory ``out``, without
    changing anything: ``checkpoint/``, else the staged ``checkpoint.tmp/`` (whole when it
    holds ``state.json``: the crash came during the swap), else ``checkpoint.old/``.

    Raises:
        UnsafeCheckpointError: the checkpoint is in the old pickled format.
        UnsafeFileError: ``checkpoint``, ``checkpoint.tmp`` or ``checkpoint.old`` is there
            and is no real folder (a link, a file, a FIFO): named, and left as it is.
    """
    out = Path(out)
    for suffix in ("", STAGING_SUFFIX, OLD_SUFFIX):
        directory = out / (CHECKPOINT_DIR + suffix)
        check_own_folder(directory)  # a link there would load (and move) what it points to
        if _complete(directory):
            return directory
    for suffix in ("", OLD_SUFFIX):
        pickled = out / (CHECKPOINT_DIR + suffix) / PICKLED_FILE
        if pickled.is_file():
            raise UnsafeCheckpointError(_pickled_message(pickled, out))
    return None


def recover_checkpoint(out: Path) -> Path | None:
    """Finishes a checkpoint swap a crash interrupted, and clears incomplete leftovers.

    After it, ``out/checkpoint/`` is the newest whole checkpoint (or absent) and neither
    ``checkpoint.tmp/`` nor ``checkpoint.old/`` exists.

    Returns:
        ``out/checkpoint`` when there is a checkpoint, else None.

    Raises:
        UnsafeCheckpointError: the checkpoint is in the old pickled format.
        CheckpointReadError: ``checkpoint/`` is there without its ``state.json`` (nothing
            is changed then).
        UnsafeFileError: one of the three names is no real folder (nothing is changed).
    """
    out = Path(out)
    found = find_checkpoint(out)
    target = out / CHECKPOINT_DIR
    if found is None and (target.exists() or target.is_symlink()):
        # A save renames a whole staged directory into place, so no crash leaves this:
        # someone removed or damaged its state.json. Starting over would delete it and
        # overwrite the run's metrics; stop instead, changing nothing.
        raise CheckpointReadError(
            f"cannot resume from {target}: it holds no {STATE_FILE} (a save writes it, then "
            "renames the whole folder into place, so it was removed or damaged since); "
            "restore it, or move the folder away to start over (or use another --out)"
        )
    if found is not None and found != target:
        remove_tree(target)  # incomplete: no state.json
        found.rename(target)
    for suffix in (STAGING_SUFFIX, OLD_SUFFIX):
        remove_tree(out / (CHECKPOINT_DIR + suffix))
    return target if found is not None else None


def load_checkpoint(
    out: Path,
    *,
    model: Any,
    optimizer: Any,
    generator: np.random.Generator,
    critic: Any = None,
    critic_optimizer: Any = None,
    adapter: Any = None,
) -> int | None:
    """Restores a checkpoint written by :func:`save_checkpoint`, if ``out`` has one (with
    the critic's state when ``critic`` is given; under LoRA the adapters into ``adapter``).

    Returns:
        The number of iterations completed, or None when there is no checkpoint.

    Raises:
        UnsafeCheckpointError: the checkpoint is in the old pickled format.
        CheckpointReadError: the checkpoint exists but cannot be read or does not fit the
            model (no RNG is changed then).
    """
    import torch

    directory = find_checkpoint(out)
    if directory is None:
        return None
    try:
        state = read_state(directory)
        if adapter is None:
            load_weights(model, directory / "model.safetensors")
        else:
            from training.local.lora import ADAPTER_DIR, load_adapter_weights

            load_adapter_weights(adapter, directory / ADAPTER_DIR)
        optimizer.load_state_dict(read_torch(directory / "optimizer.pt"))
        if critic is not None:
            if not (directory / "critic.safetensors").is_file():
                raise ValueError("it holds no critic (a run of an estimator without one)")
            load_weights(critic, directory / "critic.safetensors")
            critic_optimizer.load_state_dict(read_torch(directory / "critic_optimizer.pt"))
        rng = rng_from_json(state["rng"])
        problems = restore_device_rngs(rng)  # first: a malformed one fails before any is set
        random.setstate(rng["python"])  # all checked by read_state: these do not fail
        np.random.set_state(rng["numpy"])  # noqa: NPY002
        torch.set_rng_state(rng["torch"])
    except Exception as exc:  # corrupt files, another model: say which checkpoint
        raise CheckpointReadError(f"cannot resume from {directory}: {exc}") from exc
    for message in problems:
        warnings.warn(f"resuming from {directory}: {message}", RuntimeWarning, stacklevel=2)
    generator.bit_generator.state = rng["generator"]
    return int(state["iteration"])


def read_state(directory: Path) -> dict[str, Any]:
    """``state.json`` of a checkpoint directory, checked (format, iteration, RNG keys).

    Read by the guarded reader (:func:`training.guarded.read_json_file`: size, depth,
    integer digits, no NaN).

    Raises:
        ValueError: it is not JSON, or not this format (a GuardError naming the file where
            the guarded reader refuses it).
    """
    path = Path(directory) / STATE_FILE
    try:
        state = read_json_file(path, "checkpoint state", expect=None)
    except ParseError as exc:
        raise ValueError(f"{path} is not a JSON checkpoint state: {exc}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"{path}: checkpoint format {found!r}, expected {FORMAT}")
    iteration = state.get("iteration")
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
        raise ValueError(f"{path}: 'iteration' must be an int >= 0")
    rng = state.get("rng")
    required = {"python", "numpy", "torch", "generator"}
    if not isinstance(rng, dict) or not required <= set(rng) <= required | set(DEVICE_RNGS):
        raise ValueError(
            f"{path}: 'rng' must hold python, numpy, torch and generator states (and "
            "optionally cuda and mps)"
        )
    check_rng_states(rng, path)  # each restored into a throwaway object
    return state


def read_checkpoint(directory: Path) -> dict[str, Any]:
    """A checkpoint directory as plain data: ``iteration``, ``model`` (name -> tensor),
    ``optimizer`` (a ``state_dict``), and ``critic`` / ``critic_optimizer`` when saved.
    Runs no code from the files (safetensors, ``weights_only`` and JSON)."""
    directory = Path(directory)
    state = read_state(directory)
    checkpoint: dict[str, Any] = {"iteration": state["iteration"]}
    for name in ("model", "critic"):
        if (directory / f"{name}.safetensors").is_file():
            checkpoint[name] = read_tensors(directory / f"{name}.safetensors")
    for name in ("optimizer", "critic_optimizer"):
        if (directory / f"{name}.pt").is_file():
            checkpoint[name] = read_torch(directory / f"{name}.pt")
    return checkpoint


def load_weights(model: Any, path: Path) -> None:
    """Loads a ``.safetensors`` file written by :func:`save_checkpoint` into ``model``
    (every key must match: ``strict``)."""
    model.load_state_dict(read_tensors(path), strict=True)


def _pickled_message(pickled: Path, out: Path) -> str:
    return (
        f"{pickled} is a checkpoint in the old pickled format, which can run arbitrary code "
        "when loaded, so it is refused. If you trust where it came from, convert it once with "
        f"`python -m training.local.checkpoint --trust-pickle {out}` (it loads the pickle "
        "and writes safetensors and JSON beside it), or start over with another --out"
    )


def convert_pickled(out: Path) -> Path:
    """Rewrites a run directory's old pickled checkpoint in the current format.

    UNSAFE on files you did not write: it unpickles ``state.pt``, which runs any code the
    pickle holds. The pickle is kept as ``state.pt.unsafe`` beside the new files.

    Raises:
        FileNotFoundError: ``out`` holds no ``checkpoint/state.pt``.
        ValueError: the pickle cannot be read, or holds no checkpoint; nothing changed.
    """
    import torch

    out = Path(out)
    for suffix in ("", OLD_SUFFIX):
        pickled = out / (CHECKPOINT_DIR + suffix) / PICKLED_FILE
        if pickled.is_file():
            break
    else:
        raise FileNotFoundError(f"{out} holds no pickled checkpoint ({CHECKPOINT_DIR}/state.pt)")
    try:
        state = torch.load(pickled, map_location="cpu", weights_only=False)  # the opt-in
    except Exception as exc:  # noqa: BLE001 - a pickle can fail in any way: named, not raised
        raise ValueError(f"{pickled} is not a readable pickled checkpoint: {exc}") from None
    if missing := [k for k in ("model", "iteration", "rng") if not isinstance(state, dict)
                   or k not in state]:  # fmt: skip
        raise ValueError(f"{pickled} is not a pickled checkpoint of gigpo-train: it holds "
                         f"{type(state).__name__}, without {', '.join(missing)}")  # fmt: skip
    states = {k: state[k] for k in ("model", "optimizer", "critic", "critic_optimizer")
              if k in state}  # fmt: skip
    kept = out / "state.pt.unsafe"
    shutil.copyfile(pickled, kept)
    for suffix in ("", OLD_SUFFIX):
        stale = out / (CHECKPOINT_DIR + suffix) / PICKLED_FILE
        if stale.exists():
            stale.unlink()
    target = write_checkpoint(out, states, iteration=state["iteration"], rng=state["rng"])
    return target


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(
        prog="python -m training.local.checkpoint",
        description="Convert a run directory's old pickled checkpoint (checkpoint/state.pt) "
        "to safetensors + JSON. Loading a pickle runs any code it holds: do this only for "
        "checkpoints you made yourself or otherwise trust.",
    )
    parser.add_argument("run_dir")
    parser.add_argument(
        "--trust-pickle",
        action="store_true",
        help="required: confirms that you trust the pickle (it is unsafe otherwise)",
    )
    args = parser.parse_args(argv)
    if not args.trust_pickle:
        parser.error("refusing to unpickle without --trust-pickle (see --help)")
    if not Path(args.run_dir).is_dir():
        parser.error(f"{args.run_dir} is not a folder (a run directory)")
    from training.locks import FolderLockError, hold_folder

    try:  # the run's trainer lock: no trainer may be writing this checkpoint meanwhile
        with hold_folder(args.run_dir, "train", "python -m training.local.checkpoint", "RUN_DIR"):
            target = convert_pickled(Path(args.run_dir))
    except FolderLockError as exc:  # a trainer holds it (named), or it is no run's folder
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except (OSError, KeyError, ValueError, RuntimeError) as exc:  # a file named
        parser.fail(str(exc))
    print(f"converted: {target} (the pickle is kept as {Path(args.run_dir) / 'state.pt.unsafe'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
