"""Shared fixtures: a tiny random Qwen2 (built offline once per session) and run configs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helpers beside the tests
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, 32-wide Qwen2 with a BPE tokenizer trained on the spot, warmed up so that
    it writes an admissible action now and then (else every advantage would be 0)."""
    from training.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", warmup_steps=120)


@pytest.fixture
def tiny_config(tiny_model_dir: Path, tmp_path: Path):
    """Builds a small, fast TrainConfig for ``env_id``; overrides are dotted CLI strings."""
    from training.local.config import load_config

    def make(env_id: str, *overrides: str, out: Path | None = None):
        args = [
            f"--model.name_or_path={tiny_model_dir}",
            f"--env.id={env_id}",
            "--env.num_groups=2",
            "--env.group_size=3",
            "--env.history_length=1",
            "--env.kwargs={max_steps: 3}",  # short episodes; a test's own kwargs replace it
            "--eval.groups=2",
            "--rollout.max_new_tokens=10",
            "--algo.minibatch_size=9",
            "--algo.kl_coef=0.01",
            "--optim.lr=1e-3",
            "--run.iterations=2",
            "--run.progress=false",
            "--run.threads=1",
            f"--out={out or tmp_path / 'run'}",
            *overrides,
        ]
        return load_config(None, args)

    return make
