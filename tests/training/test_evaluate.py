"""``python -m training.cli.evaluate`` on every registered env, its numbers against the trainer's
held-out evaluation, run directories, the ReAct prompt, and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from sample_data import sample_dir

import gigpo_envs  # noqa: F401  (registers the ids)
from training.cli.evaluate import main
from training.evaluation.heldout import REACT_INSTRUCTION
from training.local.checkpoint import read_checkpoint
from training.local.config import load_config
from training.stats import wilson_interval

REPO = Path(__file__).resolve().parents[2]
SEARCHQA = sample_dir("searchqa", "wiki_sample_1000.jsonl")


@pytest.fixture(scope="module")
def alfworld_data(tmp_path_factory):
    from gigpo_envs.alfworld.generate import generate_games

    out = tmp_path_factory.mktemp("alfworld")
    generate_games(out, num_games=2, seed=3)
    return out


def _env_kwargs(env_id: str, alfworld_data: Path) -> str:
    kwargs = {
        "gigpo/ALFWorld-v0": f"{{data_dir: '{alfworld_data}', max_steps: 3}}",
        "gigpo/SearchQA-v0": (
            f"{{dataset: '{SEARCHQA / 'nq_test16.jsonl'}', "
            f"corpus: '{SEARCHQA / 'wiki_sample_1000.jsonl'}', max_steps: 2}}"
        ),
        "gigpo/Sokoban-v0": "{dim_room: [6, 6], num_boxes: 1, max_steps: 3}",
        "gigpo/WebShop-v0": "{max_steps: 3}",  # the generated catalog (the default)
    }
    return kwargs.get(env_id, "{max_steps: 3}")


def _run(tmp_path, model, *args):
    out = tmp_path / "eval"
    code = main(["--model", str(model), "--out", str(out), *map(str, args)])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    return summary, episodes


REGISTERED = sorted(k for k in gym.registry if k.startswith("gigpo/"))


def test_every_registered_env_is_covered():
    assert len(REGISTERED) >= 8 and "gigpo/WebShop-v0" in REGISTERED


@pytest.mark.slow
@pytest.mark.parametrize("env_id", REGISTERED)
def test_evaluation_runs_on_every_registered_env(env_id, tiny_model_dir, tmp_path, alfworld_data):
    summary, episodes = _run(
        tmp_path,
        tiny_model_dir,
        "--episodes", 3,
        f"--env.id={env_id}",
        f"--env.kwargs={_env_kwargs(env_id, alfworld_data)}",
        "--rollout.max_new_tokens=8",
    )  # fmt: skip
    assert summary["env_id"] == env_id and summary["episodes"] == len(episodes) == 3
    won = sum(e["won"] for e in episodes)
    assert summary["success_rate"] == won / 3
    assert summary["success_rate_ci95"] == list(wilson_interval(won, 3))
    steps = [s for e in episodes for s in e["steps"]]
    assert summary["steps"] == len(steps) == sum(e["length"] for e in episodes)
    assert summary["valid_action_rate"] == sum(s["valid"] for s in steps) / len(steps)
    assert summary["mean_return"] == pytest.approx(sum(e["return"] for e in episodes) / 3)
    for e in episodes:
        assert e["return"] == pytest.approx(sum(s["reward"] for s in e["steps"]))
        assert 1 <= e["length"] <= 3 and e["task"]
        assert all(s["observation"] for s in e["steps"])
    # The trainer's held-out seeds, in order.
    assert [e["seed"] for e in episodes] == summary["seeds"]
    assert summary["seeds"] == [1_000_000_000 + k for k in range(3)]


NUMBERLINE = [
    "--env.id=gigpo/NumberLine-v0",
    "--env.kwargs={max_position: 4, max_steps: 4}",
    "--env.heldout_fraction=0.3",
    "--eval.groups=5",
    "--env.history_length=0",
    "--env.template={task: 'Number line.', order: [current], current: '{observation}'}",
    "--rollout.max_new_tokens=3",
    "--rollout.response_prefix=<action>",
    "--rollout.stop_text=</action>",
    "--run.seed=3",
    "--run.iterations=1",
    "--run.progress=false",
    "--eval.every=1",
]


@pytest.mark.slow
def test_a_run_directory_gives_the_trainers_own_held_out_numbers(
    tiny_config, tiny_model_dir, tmp_path
):
    from training.local.tasks import is_heldout
    from training.local.train import train

    run = tmp_path / "run"
    rows = train(tiny_config("gigpo/NumberLine-v0", *NUMBERLINE[1:], out=run))
    summary, episodes = _run(tmp_path, run)  # its config, its checkpoint, eval.groups tasks
    assert summary["episodes"] == 5
    assert summary["success_rate"] == rows[-1]["eval_success_rate"]
    assert summary["mean_return"] == pytest.approx(rows[-1]["eval_mean_return"])
    assert summary["valid_action_rate"] == rows[-1]["eval_valid_action_rate"]
    # Held-out tasks only: every task key falls in the held-out share.
    assert all(is_heldout(e["task"], 0.3) for e in episodes)
    assert summary["run_seed"] == 3 and summary["seeds"][0] >= 1_000_000_000 + 3_000_000
    # The checkpoint's weights, not the base model's.
    import torch

    from training.evaluation.heldout import load_policy

    # the summary names the checkpoint evaluated, not only the base model under it
    assert summary["checkpoint"] == str((run / "checkpoint").resolve())
    # the last iteration the checkpoint trained, numbered from 0 as metrics.jsonl numbers it
    assert summary["checkpoint_iteration"] == rows[-1]["iteration"] == 0
    assert "checkpoint_iterations" not in summary and summary["lora_merged"] is False
    assert summary["model_dir"] == str(tiny_model_dir)
    config = load_config(run / "config.json")
    loaded = load_policy(str(run), config, tmp_path / "o")
    policy, source = loaded.policy, loaded.source
    assert source.path == tiny_model_dir and source.revision is None
    trained = read_checkpoint(run / "checkpoint")["model"]
    named = config.model.name_or_path
    base = load_policy(str(tiny_model_dir), config, tmp_path / "o").policy
    assert config.model.name_or_path == named  # --model does not rewrite the caller's config
    now, before = policy.state_dict(), base.state_dict()
    assert all(torch.equal(now[k], trained[k]) for k in trained)
    assert any(not torch.equal(before[k], trained[k]) for k in trained)


def test_react_prompt_asks_to_reason_first_and_prefills_think(tiny_model_dir, tmp_path):
    summary, episodes = _run(
        tmp_path, tiny_model_dir, "--prompt", "react", "--max-new-tokens", 6, "--episodes", 2,
        *NUMBERLINE,
    )  # fmt: skip
    assert summary["prompt"] == "react" and summary["max_new_tokens"] == 6
    assert all(s["action"].startswith("<think>") for e in episodes for s in e["steps"])

    from training.evaluation.heldout import EvalSettings, prompt_config
    from training.local.play import config_envs

    config = prompt_config(load_config(None, NUMBERLINE), EvalSettings(episodes=1, prompt="react"))
    envs = config_envs(config, 1, 1)
    _, info = envs.reset(seed=[0])
    envs.close()
    user = info["messages"][0][-1]["content"]
    assert REACT_INSTRUCTION.split("{example}")[0] in user  # shown though order left it out


def test_sampled_evaluation_is_reproducible(tiny_model_dir, tmp_path):
    args = ["--temperature", 1.0, "--episodes", 4, *NUMBERLINE]
    first, a = _run(tmp_path / "a", tiny_model_dir, *args)
    second, b = _run(tmp_path / "b", tiny_model_dir, *args)
    assert first["temperature"] == 1.0 and a == b


def test_wilson_interval_by_hand():
    low, high = wilson_interval(6, 12)
    assert (round(low, 4), round(high, 4)) == (0.2538, 0.7462)
    assert wilson_interval(0, 12) == (0.0, pytest.approx(0.2425, abs=1e-4))
    assert wilson_interval(12, 12) == (pytest.approx(0.7575, abs=1e-4), 1.0)
    with pytest.raises(ValueError):
        wilson_interval(5, 4)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--episodes", "0"], "--episodes must be in 1.."),
        (["--temperature", "-1"], "--temperature must be a finite number >= 0, got -1.0"),
        (["--temperature", "nan"], "--temperature must be a finite number >= 0, got nan"),
        (["--prompt", "cot"], "invalid choice"),
        (["--env.id=gigpo/Nope-v0"], "env.id"),
        (["--batch-size", "0"], "--batch-size"),
    ],
)
def test_bad_arguments_are_clear_errors(args, message, tmp_path, capsys, tiny_model_dir):
    with pytest.raises(SystemExit) as exit_info:
        main(["--model", str(tiny_model_dir), "--out", str(tmp_path), *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--episodes", "99999999999999"], "--episodes must be in 1..16384"),
        (["--max-new-tokens", "999999999999"], "--max-new-tokens must be in 1..32768"),
        (["--batch-size", "99999999999"], "--batch-size must be in 1..16384"),
        (["--suite", "webshop-gen-v1", "--max-new-tokens", "999999999999"], "--max-new-tokens"),
        (["--suite", "webshop-gen-v1", "--batch-size", "99999999999"], "--batch-size"),
    ],
)
def test_sizes_are_bounded_before_any_model(args, message, tmp_path, capsys):
    """Too large a size is exit 2 naming the option before the tiny model is built and
    before --out is made."""
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        main(["--model", "tiny-random", "--out", str(out), *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (out / "tiny-model").exists() and not out.exists()


def test_a_failed_evaluation_leaves_no_new_folder(tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        main(["--model", str(tmp_path / "nowhere"), "--out", str(out)])
    assert exit_info.value.code == 2
    assert "no such local directory" in capsys.readouterr().err
    assert not out.exists()  # the lock was taken on a new folder, then discarded


def test_a_missing_model_or_a_broken_checkpoint_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--model", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")])
    assert "no such local directory" in capsys.readouterr().err

    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    config = load_config("smoke", [f"--out={run}", "--model.tiny_warmup_steps=0"])
    (run / "config.json").write_text(json.dumps(config.to_dict()))
    import random

    import numpy as np
    import torch

    from training.local.checkpoint_files import rng_to_json

    rng = rng_to_json({
        "python": random.getstate(), "numpy": np.random.get_state(),  # noqa: NPY002
        "torch": torch.get_rng_state(), "generator": np.random.default_rng(0).bit_generator.state,
    })  # fmt: skip
    (run / "checkpoint" / "state.json").write_text(
        json.dumps({"format": 2, "iteration": 1, "rng": rng})
    )
    (run / "checkpoint" / "model.safetensors").write_bytes(b"not a checkpoint")
    with pytest.raises(SystemExit):
        main(["--model", str(run), "--out", str(tmp_path / "o")])
    assert "cannot load the weights" in capsys.readouterr().err


def test_command_line(tiny_model_dir, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = tmp_path / "cli"
    done = subprocess.run(
        [sys.executable, "-m", "training.cli.evaluate", "--model", str(tiny_model_dir),
         "--episodes", "2", "--out", str(out), *NUMBERLINE],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["episodes"] == 2 and (out / "episodes.jsonl").exists()
    assert "95% CI" in done.stderr
    assert summary["checkpoint"] is None  # a model evaluated as it is


def test_each_model_gets_its_own_default_folder(tmp_path):
    from training.evaluation.heldout import default_out

    (tmp_path / "a" / "run").mkdir(parents=True)
    (tmp_path / "b" / "run").mkdir(parents=True)
    first, second = default_out(str(tmp_path / "a" / "run")), default_out(str(tmp_path / "b/run"))
    assert first != second and first.parent == Path("runs/evaluate")
    assert first.name.startswith("run-") and len(first.name) == len("run-") + 8
    assert default_out(str(tmp_path / "a" / "run")) == first  # the same model, the same folder
    assert default_out("Qwen/Qwen2.5-1.5B-Instruct") == Path(
        "runs/evaluate/Qwen--Qwen2.5-1.5B-Instruct"
    )
    assert default_out("smollm2") != default_out("tiny-random")
