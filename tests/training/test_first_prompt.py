"""A prompt cap below the run's first prompt is refused before any weight loads, by the
dry run and by the run itself; a later prompt over the cap ends the run with one line naming
the key (the last checkpoint kept), never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from training.local.config import ConfigError, load_config
from training.local.train import train

REPO = Path(__file__).resolve().parents[2]


def _args(out: Path, cap: int) -> list[str]:
    return [
        "--config", "smoke", f"--out={out}", f"--rollout.max_prompt_tokens={cap}",
        "--run.iterations=1", "--run.progress=false", "--run.threads=1",
        "--model.tiny_warmup_steps=0",  # its tokenizer is what counts here
    ]  # fmt: skip


def test_the_dry_run_refuses_a_cap_below_the_first_prompt_naming_the_key(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "training.local", *_args(tmp_path / "run", 20), "--dry-run"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "rollout.max_prompt_tokens=20 is below the run's first prompt" in done.stderr
    assert not (tmp_path / "run").exists()  # a dry run writes nothing


def test_the_dry_run_counts_the_first_prompt_under_a_cap_that_fits(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "training.local", *_args(tmp_path / "run", 4096), "--dry-run"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "not checked here: the later prompts' lengths" in done.stdout
    assert "the first prompt and" not in done.stdout


def test_the_run_refuses_it_before_any_weight_loads(tmp_path, monkeypatch):
    import training.local.train as train_module

    def no_models(*args, **kwargs):
        raise AssertionError("the models were loaded before the cap was checked")

    monkeypatch.setattr(train_module, "load_models", no_models)
    with pytest.raises(ConfigError, match=r"max_prompt_tokens=20 is below the run's first"):
        train(load_config("smoke", _args(tmp_path / "run", 20)[2:]))
    assert not (tmp_path / "run" / "checkpoint").exists()
