"""Checkpoints for exact resume: model, optimizer, PPO's critic and its optimizer (when the
run has one), every RNG state, and the iteration counter.

The environments need no state of their own: iteration ``k`` resets them with a seed that is
a function of ``k`` (see :func:`training.local.train.train_seeds`).
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np

CHECKPOINT_DIR = "checkpoint"


def save_checkpoint(
    out: Path,
    *,
    model: Any,
    optimizer: Any,
    iteration: int,
    generator: np.random.Generator,
    critic: Any = None,
    critic_optimizer: Any = None,
) -> Path:
    """Writes ``out/checkpoint/state.pt`` atomically (a crash mid-write keeps the old one).

    Args:
        iteration: the number of iterations completed.
        generator: the trainer's numpy generator (minibatch shuffling).
        critic, critic_optimizer: PPO's critic and its optimizer (``algo.estimator: ppo``).
    """
    import torch

    target = out / CHECKPOINT_DIR
    staging = out / (CHECKPOINT_DIR + ".tmp")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    state = {
        "iteration": iteration,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": {
            "python": random.getstate(),
            "numpy": np.random.get_state(),  # noqa: NPY002  (libraries draw from it)
            "torch": torch.get_rng_state(),
            "generator": generator.bit_generator.state,
        },
    }
    if critic is not None:
        state["critic"] = critic.state_dict()
        state["critic_optimizer"] = critic_optimizer.state_dict()
    torch.save(state, staging / "state.pt")
    old = out / (CHECKPOINT_DIR + ".old")
    if target.exists():
        if old.exists():
            shutil.rmtree(old)
        target.rename(old)
    staging.rename(target)
    if old.exists():
        shutil.rmtree(old)
    return target


def load_checkpoint(
    out: Path,
    *,
    model: Any,
    optimizer: Any,
    generator: np.random.Generator,
    critic: Any = None,
    critic_optimizer: Any = None,
) -> int | None:
    """Restores a checkpoint written by :func:`save_checkpoint`, if ``out`` has one (with
    the critic's state when ``critic`` is given).

    Returns:
        The number of iterations completed, or None when there is no checkpoint.

    Raises:
        RuntimeError: the checkpoint exists but cannot be read or does not fit the model.
    """
    import torch

    path = out / CHECKPOINT_DIR / "state.pt"
    if not path.exists():
        old = out / (CHECKPOINT_DIR + ".old") / "state.pt"
        if not old.exists():
            return None
        path = old  # a crash between the two renames of save_checkpoint
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if critic is not None:
            if "critic" not in state:
                raise ValueError("it holds no critic (a run of an estimator without one)")
            critic.load_state_dict(state["critic"])
            critic_optimizer.load_state_dict(state["critic_optimizer"])
        rng = state["rng"]
    except Exception as exc:  # corrupt file, other model: say which file
        raise RuntimeError(f"cannot resume from {path}: {exc}") from exc
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])  # noqa: NPY002
    torch.set_rng_state(rng["torch"])
    generator.bit_generator.state = rng["generator"]
    return int(state["iteration"])
