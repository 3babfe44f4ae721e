"""``training/openrlhf_gigpo.sh --dry-run`` prints the fully resolved command; flags resolve."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openrlhf_launcher import command_line, dry_run

from gigpo_algo.estimators import ESTIMATORS
from training.openrlhf.command import CARRIER_ESTIMATOR, UsageError, dataset_lines, plan
from training.openrlhf.estimator import GiGPOSettings
from training.openrlhf.executor import parse_task
from training.openrlhf.layout import OPENRLHF_ESTIMATORS

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
    with pytest.raises(UsageError, match="save_rollouts_every must be >= 0"):
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


def test_the_step_layout_is_the_default_with_per_env_history_and_caps():
    run = plan(["--env", "gigpo/ALFWorld-v0", "--env.max_new_tokens", "512"] + KL)
    task = run.tasks[0]
    assert run.layout == "step" and task.layout == "step"
    assert (task.history_length, task.max_prompt_tokens) == (2, 2048)  # the paper's
    assert _value(run.openrlhf_args, "--data.max_len") == "2560"  # one step fits exactly
    assert _value(run.openrlhf_args, "--actor.lr_scheduler") == "constant_with_warmup"
    webshop = plan(["--env", "gigpo/WebShop-v0", "--env.max_new_tokens", "512"] + KL)
    assert webshop.tasks[0].max_prompt_tokens == 4096
    assert _value(webshop.openrlhf_args, "--data.max_len") == "4608"
    search = plan(["--env", "gigpo/SearchQA-v0"] + KL).tasks[0]
    assert search.history_length == 4
    # given values win; a given --data.max_len lowers the default cap to fit
    given = ["--history_length", "5", "--data.max_len", "1024", "--env.max_new_tokens", "24"]
    mine = plan(["--env", "gigpo/ALFWorld-v0", *given, "--gigpo.env_workers", "3"] + KL)
    assert (mine.tasks[0].history_length, mine.tasks[0].max_prompt_tokens) == (5, 1000)
    assert mine.tasks[0].env_workers == 3 and plan(KL).tasks[0].env_workers is None


def test_openrlhfs_own_estimators_get_the_episode_layout_and_refuse_the_step_one():
    own = ["--algo.advantage.estimator", "reinforce_baseline", "--algo.kl.init_coef", "0"]
    run = plan(own)
    assert run.layout == "episode" and run.tasks[0].layout == "episode"
    assert run.tasks[0].history_length == 0 and run.tasks[0].max_prompt_tokens is None
    assert _value(run.openrlhf_args, "--data.max_len") == "4096"
    with pytest.raises(UsageError, match="--gigpo.layout step: OpenRLHF's own"):
        plan(own + ["--gigpo.layout", "step"])
    assert plan(["--gigpo.layout", "episode"] + KL).layout == "episode"  # gigpo: either


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gigpo.layout", "turns"], "--gigpo.layout must be one of"),
        # the OpenRLHF modes that cannot run as given fail here, before Ray, naming the flag
        (
            ["--train.partial_rollout_enable"],
            "--train.partial_rollout_enable .* needs --train.async_enable",
        ),
        (
            ["--train.async_enable", "--vllm.enable_sleep"],
            "--vllm.enable_sleep with --train.async_enable",
        ),
        (
            ["--algo.dynamic_filtering_enable", "--algo.dynamic_filtering_range", "0", "1"],
            "--algo.dynamic_filtering_range: with gigpo_algo's estimators",
        ),
        (
            ["--rollout.batch_size", "4", "--rollout.vllm_generate_batch_size", "8"],
            "vllm_generate_batch_size larger than --rollout.batch_size .* --train.async_enable",
        ),
        (["--rollout.batch_size", "4", "--rollout.vllm_generate_batch_size", "x"], "must be ints"),
        (["--ds.lora.rank", "8", "--ds.load_in_4bit"], "--ds.load_in_4bit with --ds.lora.rank"),
        (
            [
                "--data.max_len",
                "600",
                "--gigpo.max_prompt_tokens",
                "512",
                "--env.max_new_tokens",
                "128",
            ],
            "--data.max_len 600 cannot hold one step.*give --data.max_len 640",
        ),  # fmt: skip
        (["--data.max_len", "100", "--env.max_new_tokens", "100"], "cannot hold one step"),
        (["--gigpo.max_prompt_tokens", "0"], "max_prompt_tokens must be >= 1"),
        (["--gigpo.layout", "episode", "--gigpo.max_prompt_tokens", "100"], "step layout's"),
        (["--gigpo.env_workers", "-2"], "env_workers must be auto or an int"),
        (["--gigpo.env_workers", "many"], "env_workers must be auto or an int"),
        (["--env.max_new_tokens", "0"], "max_new_tokens must be >= 1"),
        # fillers must never make a whole optimizer step: dp x rollout micro-batch | step
        (
            [
                "--actor.num_gpus_per_node",
                "1",
                "--train.batch_size",
                "8",
                "--train.micro_batch_size",
                "2",
                "--rollout.micro_batch_size",
                "3",
            ],
            "micro_batch_size 3 must divide the 8",
        ),  # fmt: skip
        (["--gigpo.env_timeout_s", "0"], "env_timeout_s must be a number > 0 or none"),
        (["--gigpo.env_timeout_s", "soon"], "env_timeout_s must be a number > 0 or none"),
    ],
)
def test_layout_flags_that_cannot_run_are_refused_naming_the_flag(argv, message):
    with pytest.raises(UsageError, match=message):
        plan(argv + KL)


def test_the_launcher_warns_when_an_episode_cannot_fit_and_when_a_schedule_would_end():
    # 18 steps of up to 512 tokens cannot fit 4096: episodes may end at the budget
    result = dry_run("--env", "gigpo/NumberLine-v0", "--env.kwargs", '{"max_position": 9}',
                     "--gigpo.layout", "episode")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "may play 18 steps of up to 512 response tokens" in result.stderr
    assert "# warning: --gigpo.layout episode" in result.stdout
    assert "# layout: episode" in result.stdout
    roomy = plan(["--gigpo.layout", "episode", "--env", "gigpo/NumberLine-v0",
                  "--data.max_len", "16384"] + KL)  # fmt: skip
    assert roomy.warnings == ()
    decaying = plan(["--actor.lr_scheduler", "cosine_with_min_lr"] + KL)
    assert any("ends after a fraction of the run" in w for w in decaying.warnings)
    assert plan(["--actor.lr_scheduler", "constant"] + KL).warnings == ()
    step = dry_run("--env", "gigpo/Sokoban-v0")
    assert "# layout: step (one OpenRLHF sample per env step" in step.stdout
    assert "history_length 2, prompt cap 1024 tokens, response cap 512" in step.stdout


def test_the_papers_runs_resolve_as_documented():
    import shlex

    from doc_blocks import code_blocks

    commands = code_blocks("docs/openrlhf.md", "The paper's runs", "bash")
    expected = code_blocks("docs/openrlhf.md", "The paper's runs", "text")
    assert len(commands) == len(expected) == 2  # ALFWorld, WebShop
    for command, lines in zip(commands, expected, strict=True):
        words = shlex.split(command.replace("\\\n", " "))
        assert words[:3] == ["bash", "training/openrlhf_gigpo.sh", "--dry-run"]
        result = dry_run(*words[3:])
        assert result.returncode == 0, result.stderr
        layout, settings_line, openrlhf_line = lines.strip().splitlines()
        assert layout in result.stdout.splitlines()
        resolved = json.loads(
            json.loads(next(li for li in result.stdout.splitlines() if "runtime_env" in li)
                       .split(": ", 1)[1])["env_vars"]["GIGPO_OPENRLHF_SETTINGS"]
        )  # fmt: skip
        for pair in settings_line.removeprefix("settings: ").split(", "):
            name, value = pair.split(" ", 1)
            shown = resolved[name]
            assert value.split(" ")[0] == str(shown), (name, value, shown)
        argv = command_line(result.stdout)
        flags = openrlhf_line.removeprefix("openrlhf: ").split()
        for flag, value in zip(flags[::2], flags[1::2], strict=True):
            assert _value(argv, flag) == value, flag
        assert "warning" not in result.stderr


def test_env_workers_time_out_by_default_and_the_episode_layout_pads_nothing():
    assert plan(KL).tasks[0].env_timeout_s == 600.0
    assert plan(["--gigpo.env_timeout_s", "none"] + KL).tasks[0].env_timeout_s is None
    assert plan(["--gigpo.env_timeout_s", "30"] + KL).tasks[0].env_timeout_s == 30.0
    # the episode layout has no fillers, so any micro-batch size goes
    episode = ["--gigpo.layout", "episode", "--rollout.micro_batch_size", "3"]
    assert plan(episode + ["--actor.num_gpus_per_node", "1"] + KL).layout == "episode"


def test_async_training_displaces_the_launchers_sleep_default_and_warns_of_the_gap():
    # the launcher's defaults colocate everything with sleeping vLLM engines; OpenRLHF
    # refuses sleeping engines in async training, so --train.async_enable leaves it out
    result = dry_run("--train.async_enable", "--train.async_queue_size", "2",
                     "--train.partial_rollout_enable")  # fmt: skip
    assert result.returncode == 0, result.stderr
    resolved = command_line(result.stdout)
    assert "--vllm.enable_sleep" not in resolved and "--train.async_enable" in resolved
    assert "--vllm.enable_sleep" in command_line(dry_run().stdout)  # the default otherwise
    # the engines generate while the models train: the node's 8 GPUs are split, not shared
    assert _value(resolved, "--actor.num_gpus_per_node") == "4"
    assert _value(resolved, "--vllm.num_engines") == "4"
    assert _value(command_line(dry_run().stdout), "--vllm.num_engines") == "8"
    assert "vLLM engines need GPUs of their own" in result.stderr
    assert "--algo.advantage.is_correction_level token corrects the gap" in result.stderr
    corrected = plan(["--train.async_enable", "--algo.advantage.is_correction_level", "token"]
                     + KL)  # fmt: skip
    assert not any("correction" in w for w in corrected.warnings)
    # GSPO's one ratio per sample averages an episode-layout sample's turns
    episode_gspo = plan(["--actor.policy_loss_type", "gspo", "--gigpo.layout", "episode"] + KL)
    assert any("per-turn credit is averaged away" in w for w in episode_gspo.warnings)
    assert plan(["--actor.policy_loss_type", "gspo"] + KL).warnings == ()


def test_the_launcher_refuses_an_async_run_that_cannot_fit_its_node(monkeypatch, capsys):
    from training.openrlhf.launch import _async_gpus, main

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("GPUS", "8")
    # 4 GPUs for the colocated actor and reference, 8 for the engines: 12 on a node of 8
    assert main(["--train.async_enable", "--vllm.num_engines", "8"]) == 2
    assert "--train.async_enable needs 12 GPUs" in capsys.readouterr().err
    # a refused flag stops the launcher before Ray too (the check the job makes, run first)
    assert main(["--train.partial_rollout_enable"]) == 2
    assert (
        _async_gpus(
            [
                "--actor.num_gpus_per_node",
                "2",
                "--ref.num_gpus_per_node",
                "2",
                "--vllm.num_engines",
                "3",
                "--vllm.tensor_parallel_size",
                "2",
            ]
        )
        == 10
    )
    monkeypatch.setenv("GPUS", "eight")
    assert main(["--train.async_enable"]) == 2
    assert "GPUS must be an int" in capsys.readouterr().err


def test_dry_run_refuses_an_unknown_estimator_naming_the_flag_and_the_choices():
    # OpenRLHF's parser would refuse it only inside the Ray job: refused before Ray
    result = dry_run("--algo.advantage.estimator", "nonsense")
    assert result.returncode == 2 and "# resolved" in result.stdout
    assert "--algo.advantage.estimator must be one of" in result.stderr
    assert "'nonsense'" in result.stderr
    for name in (*ESTIMATORS, *OPENRLHF_ESTIMATORS):
        assert f"'{name}'" in result.stderr
    assert "ray job" not in result.stderr


@pytest.mark.parametrize("estimator", ["hgpo", "graphgpo"])
def test_dry_run_runs_hgpo_and_graphgpo_through_gigpo_algo(estimator):
    flag = {"hgpo": "--algo.gigpo.length_alpha", "graphgpo": "--algo.gigpo.episode_weight"}
    result = dry_run("--algo.advantage.estimator", estimator, flag[estimator], "0.5")
    assert result.returncode == 0, result.stderr
    argv = command_line(result.stdout)
    assert _value(argv, "--algo.advantage.estimator") == CARRIER_ESTIMATOR
    assert not any(a.startswith("--algo.gigpo") for a in argv)
    runtime = json.loads(next(li for li in result.stdout.splitlines()
                              if "ray runtime_env" in li).split(": ", 1)[1])  # fmt: skip
    settings = json.loads(runtime["env_vars"]["GIGPO_OPENRLHF_SETTINGS"])
    assert settings["estimator"] == estimator
    assert settings[flag[estimator].rsplit(".", 1)[1]] == 0.5
    assert "# layout: step" in result.stdout  # both layouts run them; step is the default
    episode = plan(["--algo.advantage.estimator", estimator, "--gigpo.layout", "episode"] + KL)
    assert episode.layout == "episode" and episode.settings.estimator == estimator


@pytest.mark.parametrize("estimator", [e for e in OPENRLHF_ESTIMATORS if e not in ESTIMATORS])
def test_openrlhfs_own_estimators_pass_the_launcher_untouched(estimator):
    run = plan(["--algo.advantage.estimator", estimator, "--algo.kl.init_coef", "0"])
    assert run.settings is None and run.layout == "episode"
    assert _value(run.openrlhf_args, "--algo.advantage.estimator") == estimator
    with pytest.raises(UsageError, match=r"--algo.advantage.estimator must be one of"):
        plan(["--algo.advantage.estimator", estimator.upper(), "--algo.kl.init_coef", "0"])


def test_cpu_device_resolves_the_cpus_flags_and_slots_without_the_gpu_defaults():
    result = dry_run("--gigpo.device", "cpu", "--actor.model_name_or_path", "tiny-random",
                     "--env", "gigpo/NumberLine-v0", "--group_size", "2")  # fmt: skip
    assert result.returncode == 0, result.stderr
    argv = command_line(result.stdout)
    assert _value(argv, "--vllm.sync_backend") == "gloo"
    assert _value(argv, "--ds.attn_implementation") == "sdpa"
    assert "--vllm.enforce_eager" in argv and "--train.colocate_actor_ref" in argv
    assert "--vllm.enable_sleep" not in argv and "--train.colocate_all" not in argv
    assert _value(argv, "--actor.num_gpus_per_node") == "1"
    model = Path(_value(argv, "--actor.model_name_or_path"))  # made in the run's folder
    assert model.parts[-2:] == ("models", "tiny-random") and model.is_absolute()
    prefix = "# ray runtime_env: "
    line = next(li for li in result.stdout.splitlines() if li.startswith(prefix))
    env = json.loads(line[len(prefix) :])
    assert env["env_vars"]["GIGPO_OPENRLHF_DEVICE"] == "cpu"
    assert env["env_vars"]["DS_ACCELERATOR"] == "cpu"
    # this env installs no OpenRLHF: the dry run says its checks did not run
    assert "# OpenRLHF's own checks: not run, it cannot be imported here" in result.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gigpo.device", "tpu"], "--gigpo.device must be one of ['cuda', 'cpu'], got 'tpu'"),
        (["--gigpo.device", "cpu", "--train.colocate_all"], "drop --train.colocate_all"),
        (["--gigpo.device", "cpu", "--vllm.enable_sleep"], "drop --vllm.enable_sleep"),
        (["--gigpo.device", "cpu", "--vllm.sync_with_ray"], "drop --vllm.sync_with_ray"),
        (["--gigpo.device", "cpu", "--vllm.sync_backend", "nccl"], "--vllm.sync_backend gloo"),
        (["--gigpo.device", "cpu", "--ds.packing_samples"], "drop --ds.packing_samples"),
    ],
)
def test_cpu_device_refuses_what_needs_cuda_naming_the_flag(argv, message):
    result = dry_run("--env", "gigpo/NumberLine-v0", *argv)
    assert result.returncode == 2, result.stdout
    assert message in result.stderr
