"""The local trainer end to end on CPU: two iterations per env and estimator, exact resume."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from training.local.checkpoint import read_checkpoint
from training.local.config import TRAINER_ESTIMATORS, ConfigError, load_config
from training.local.metrics import read_metrics
from training.local.train import train

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "training" / "configs"

ENV_ARGS = {
    "gigpo/Sokoban-v0": ["--env.kwargs={dim_room: [6, 6], num_boxes: 1, max_steps: 3}"],
    # EZPoints pays only when "=" submits a formula; the penalty for invalid actions makes
    # the tiny model's rollouts differ in score even when none submits.
    "gigpo/EZPoints-v0": ["--env.kwargs={max_steps: 3}", "--algo.invalid_penalty=0.1"],
}


def _params(run_dir):
    state = read_checkpoint(run_dir / "checkpoint")
    return state["model"]


def _initial_params(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir)).state_dict()


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["gigpo", "grpo", "rloo", "ppo"])
@pytest.mark.parametrize("env_id", sorted(ENV_ARGS))
def test_two_iterations_run_and_update_the_model(
    tiny_config, tiny_model_dir, tmp_path, env_id, estimator
):
    out = tmp_path / "run"
    config = tiny_config(
        env_id, *ENV_ARGS[env_id], f"--algo.estimator={estimator}", "--eval.every=2", out=out
    )
    rows = train(config)

    assert [r["iteration"] for r in rows] == [0, 1]
    assert all(math.isfinite(r["loss"]) for r in rows)
    assert any(r["mean_abs_advantage"] > 0 for r in rows), rows
    assert all(r["step_records"] > 0 for r in rows)
    assert read_metrics(out) == json.loads(json.dumps(rows))
    assert (out / "curve.png").stat().st_size > 1000
    assert "eval_success_rate" in rows[-1] and "eval_valid_action_rate" in rows[-1]
    for row in rows:  # the step-group statistics are logged for every estimator
        assert 0.0 <= row["step_group_coverage"] <= 1.0 and row["step_group_mean_size"] >= 1.0
    # Whether training learns is tests/training/test_learning.py's question.

    before = _initial_params(tiny_model_dir)
    after = _params(out)
    changed = [name for name in before if not torch.equal(before[name], after[name])]
    assert changed, "no parameter changed in two iterations"


@pytest.mark.slow
def test_checkpoint_then_resume_reproduces_next_iteration(tiny_config, tmp_path):
    env = "gigpo/Sokoban-v0"
    straight = tiny_config(env, *ENV_ARGS[env], out=tmp_path / "straight")
    rows = train(straight)

    first = tiny_config(env, *ENV_ARGS[env], "--run.iterations=1", out=tmp_path / "resumed")
    train(first)
    resumed = tiny_config(env, *ENV_ARGS[env], out=tmp_path / "resumed")
    resumed_rows = train(resumed)

    assert [r["iteration"] for r in resumed_rows] == [1]
    timing = {k for k in rows[1] if k.startswith("time_")}
    for key in rows[1].keys() - timing:
        assert resumed_rows[0][key] == rows[1][key], key
    a, b = _params(tmp_path / "straight"), _params(tmp_path / "resumed")
    assert all(torch.equal(a[name], b[name]) for name in a)
    # The resumed run's metrics file holds each iteration once.
    assert [r["iteration"] for r in read_metrics(tmp_path / "resumed")] == [0, 1]


@pytest.mark.parametrize("path", sorted(CONFIGS.rglob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_loads(path, tmp_path):
    # The GPU config names a model directory, a GPU and the real ALFWorld games this machine
    # lacks: it loads with stand-ins for those three (its dry run: test_memory_plan.py).
    machine: list[str] = []
    if path.name == "alfworld_gpu.yaml":
        from transformers import Qwen2Config

        from gigpo_envs.alfworld.generate import generate_games

        Qwen2Config().save_pretrained(tmp_path / "model")
        generate_games(tmp_path / "games", num_games=1, seed=3)
        machine = [f"--model.name_or_path={tmp_path / 'model'}",
                   f"--env.kwargs={{data_dir: '{tmp_path / 'games'}', max_steps: 50}}"]  # fmt: skip
    import dataclasses

    from training.settings import unread

    def default_of(name: str) -> object:
        return next(f.default for f in dataclasses.fields(config.algo) if f.name == name)

    # The other GPU configs load as their dry run does: no model weights, no env data.
    files = path.name not in ("searchqa_3b_lora.yaml", "searchqa_7b_lora.yaml", "webshop_gpu.yaml")
    config = load_config(path, machine, check_device=False, check_files=files)
    assert config.run.iterations >= 1
    for estimator in TRAINER_ESTIMATORS:  # the quick start's --baseline, the study
        args = [*machine, f"--algo.estimator={estimator}"]
        # settings this estimator does not read (GiGPO's similarity, ...) back to default
        args += [f"--algo.{name}={json.dumps(default_of(name))}"
                 for name, _, _ in unread(config.algo, estimator)]  # fmt: skip
        if estimator == "ppo" and config.model.lora_rank:  # no LoRA critic: refused at load
            with pytest.raises(ConfigError, match="algo.estimator=ppo"):
                load_config(path, args, check_device=False, check_files=files)
            continue
        load_config(path, args, check_device=False, check_files=files)


@pytest.mark.slow
def test_smoke_config_runs_from_the_command_line(tmp_path, tiny_model_dir):
    out = tmp_path / "smoke"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = subprocess.run(
        [sys.executable, "-m", "training.local", "--config", str(CONFIGS / "smoke.yaml")]
        + ["--out", str(out), "--run.progress=false"]
        # The session's tiny model is the one smoke.yaml builds (same recipe), built once.
        + [f"--model.name_or_path={tiny_model_dir}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_metrics(out)
    assert [r["iteration"] for r in rows] == [0, 1]
    assert all(math.isfinite(r["loss"]) for r in rows)
    assert (out / "curve.png").exists() and (out / "checkpoint" / "state.json").exists()
    assert "metrics in" in result.stdout


def test_bad_cli_override_is_a_clear_error(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "training.local", "--algo.estimator=dapo", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == 2
    assert "algo.estimator must be one of" in result.stderr


def test_gigpo_train_console_script_is_installed():
    script = Path(sys.executable).parent / "gigpo-train"
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "--config FILE.yaml" in result.stdout


@pytest.mark.slow
def test_a_run_does_not_depend_on_whether_its_model_was_built_or_cached(
    tiny_config, tmp_path, monkeypatch
):
    # Converting SmolLM2 on first use draws from torch's RNG (transformers initialises the
    # model before loading the weights); here the first run's model "build" does the same.
    import training.local.model as model_module

    real = model_module.resolve_model_path
    args = ("gigpo/NumberLine-v0", "--run.iterations=1", "--run.checkpoint_every=0")
    cached = train(tiny_config(*args, out=tmp_path / "cached"))

    def building(config, out):
        torch.rand(1000)  # what a first-use build does to the global RNG
        return real(config, out)

    monkeypatch.setattr(model_module, "resolve_model_path", building)
    built = train(tiny_config(*args, out=tmp_path / "built"))
    timeless = [{k: v for k, v in r.items() if not k.startswith("time_")} for r in built]
    assert timeless == [{k: v for k, v in r.items() if not k.startswith("time_")} for r in cached]
