"""``gigpo-evaluate --engine vllm`` on a trained LoRA run: the checkpoint's weights (adapters
merged) in the engine play the same greedy episodes as the hf engine, not the base's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

TRAIN = ["--config", "smoke", "--model.tiny_head_dim=32", "--model.compute_dtype=float32",
         "--model.lora_rank=4", "--optim.lr=5e-2", "--run.iterations=2", "--eval.every=0",
         "--run.progress=false", "--run.threads=2"]  # fmt: skip


def _run(*args: str) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                            env=env, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_a_lora_run_evaluates_the_same_on_both_engines(tmp_path: Path):
    run = tmp_path / "run"
    _run("training.local", *TRAIN, "--out", str(run))
    actions = {}
    for name, model, engine in (("hf", str(run), "hf"), ("vllm", str(run), "vllm"),
                                ("base", "tiny-random", "hf")):  # fmt: skip
        out = tmp_path / name
        _run("training.cli.evaluate", "--model", model, "--engine", engine, "--episodes", "6",
             "--config", "smoke", "--model.tiny_head_dim=32", "--model.compute_dtype=float32",
             "--out", str(out))  # fmt: skip
        summary = json.loads((out / "summary.json").read_text())
        assert summary["engine"] == engine and summary["lora_merged"] is (name != "base")
        rows = [json.loads(line) for line in open(out / "episodes.jsonl")]
        actions[name] = [[step["action"] for step in row["steps"]] for row in rows]
    assert actions["vllm"] == actions["hf"]
    assert actions["base"] != actions["hf"]  # the trained weights, not the base's, played
