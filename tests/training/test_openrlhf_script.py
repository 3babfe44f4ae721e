"""``training/openrlhf_gigpo.sh --dry-run`` prints the fully resolved command; flags resolve."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openrlhf_launcher import command_line, dry_run

from training.openrlhf.command import CARRIER_ESTIMATOR, UsageError, dataset_lines, plan
from training.openrlhf.estimator import GiGPOSettings
from training.openrlhf.executor import parse_task

KL = ["--algo.kl.use_loss"]


def _value(argv, flag):
    return argv[argv.index(flag) + 1]


def test_dry_run_prints_the_resolved_openrlhf_command():
    result = dry_run(
        "--env",
        "gigpo/NumberLine-v0",
        "--algo.gigpo.step_weight",
        "0.5",
        "--algo.gigpo.gamma=0.9",
        "--group_size",
        "4",
        "--actor.model_name_or_path",
        "/models/qwen",
        "--env.num_tasks",
        "5",
    )
    assert result.returncode == 0, result.stderr
    assert "ray job submit --address http://127.0.0.1:1 --" in result.stdout
    argv = command_line(result.stdout)
    assert _value(argv, "--actor.model_name_or_path") == "/models/qwen"
    assert argv.count("--actor.model_name_or_path") == 1  # the user's flag replaced the default
    assert _value(argv, "--rollout.n_samples_per_prompt") == "4"
    assert _value(argv, "--algo.advantage.estimator") == CARRIER_ESTIMATOR
    assert Path(_value(argv, "--train.agent_func_path")).exists()
    assert "--algo.kl.use_loss" in argv
    assert not any(a.startswith(("--env", "--algo.gigpo", "--group_size")) for a in argv)
    settings_line = next(li for li in result.stdout.splitlines() if "ray runtime_env" in li)
    runtime_env = json.loads(settings_line.split(": ", 1)[1])
    settings = json.loads(runtime_env["env_vars"]["GIGPO_OPENRLHF_SETTINGS"])
    assert settings["step_weight"] == 0.5 and settings["gamma"] == 0.9
    assert settings["estimator"] == "gigpo"
    assert runtime_env["worker_process_setup_hook"] == "training.openrlhf.patch.setup_worker"
    assert "tasks: 5 of gigpo/NumberLine-v0" in result.stdout


def test_dry_run_reports_bad_flags_clearly():
    result = dry_run("--algo.gigpo.norm", "median")
    assert result.returncode == 2
    assert "--algo.gigpo.norm must be one of" in result.stderr
    result = dry_run("--algo.gigpo.mode", "median")
    assert result.returncode == 2
    assert "--algo.gigpo.mode must be one of ['mean_norm', 'mean_std_norm']" in result.stderr
    result = dry_run("--group_size", "1")
    assert result.returncode == 2 and "group_size must be >= 2" in result.stderr


def test_plan_writes_one_task_per_seed_and_keeps_openrlhf_estimators():
    run = plan(["--env", "gigpo/EZPoints-v0", "--env.num_tasks", "3", "--env.seed", "10"] + KL)
    tasks = [parse_task(json.loads(line)["label"]) for line in dataset_lines(run.tasks)]
    assert [t.seed for t in tasks] == [10, 11, 12]
    assert {t.group for t in tasks} == {t.group for t in run.tasks} and len(run.tasks) == 3
    other = plan(["--algo.advantage.estimator", "reinforce", "--algo.kl.init_coef", "0"])
    assert other.settings is None
    assert _value(other.openrlhf_args, "--algo.advantage.estimator") == "reinforce"
    with pytest.raises(UsageError, match="does not use"):
        plan(["--algo.advantage.estimator", "reinforce", "--algo.gigpo.gamma", "0.9"] + KL)


@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
def test_grpo_and_rloo_run_through_gigpo_algo(estimator):
    run = plan(
        ["--algo.advantage.estimator", estimator, "--algo.gigpo.invalid_penalty", "0.5"] + KL
    )
    rollouts = dict(
        save_rollouts_every=1,
        rollouts_dir=str(Path("runs/openrlhf_gigpo").resolve()),
        rollout_max_chars=2000,
    )  # the defaults of --gigpo.save_rollouts_every and its neighbours
    assert run.settings == GiGPOSettings(estimator=estimator, invalid_penalty=0.5, **rollouts)
    quiet = plan(["--algo.advantage.estimator", estimator, "--gigpo.save_rollouts_every=0"] + KL)
    assert quiet.settings.save_rollouts_every == 0
    with pytest.raises(UsageError, match="save_rollouts_every must be an int >= 0"):
        plan(["--algo.advantage.estimator", estimator, "--gigpo.save_rollouts_every=-1"] + KL)
    assert _value(run.openrlhf_args, "--algo.advantage.estimator") == CARRIER_ESTIMATOR
    with pytest.raises(
        UsageError, match="step_weight=1.0 is not used by --algo.advantage.estimator="
    ):
        plan(["--algo.advantage.estimator", estimator, "--algo.gigpo.step_weight", "1"] + KL)


def test_verl_agent_names_are_aliases_of_ours():
    ours = plan(
        ["--algo.gigpo.step_weight", "0.5", "--algo.gigpo.norm", "mean"]
        + ["--algo.gigpo.similarity", "0.9"]
        + KL
    ).settings
    theirs = plan(
        ["--algo.gigpo.step_advantage_w", "0.5", "--algo.gigpo.mode", "mean_norm"]
        + ["--algo.gigpo.similarity_thresh", "0.9"]
        + KL
    ).settings
    assert ours == theirs
    assert (ours.step_weight, ours.norm, ours.similarity) == (0.5, "mean", 0.9)
    with pytest.raises(UsageError, match="or its alias"):
        plan(["--algo.gigpo.step_weight", "1", "--algo.gigpo.step_advantage_w", "1"] + KL)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--env.kwargs", "{bad"], "not JSON"),
        (["--env.kwargs", "[1]"], "JSON object"),
        (["--group_size", "4", "--rollout.n_samples_per_prompt", "4"], "either --group_size"),
        ([], "--algo.kl.use_loss"),
        (["--env.max_turns", "10"], "max_steps"),  # the env's step limit is the only one
        (["--env.num_tasks", "0"], "num_tasks must be >= 1"),
    ],
)
def test_plan_rejects_contradictions(argv, message):
    with pytest.raises(UsageError, match=message):
        plan(argv)
