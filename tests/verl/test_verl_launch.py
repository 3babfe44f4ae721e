"""The ``gigpo-verl`` launcher against verl 0.9.1: every command goes through verl's own
checks (Hydra's composition of its config, ``validate_config``) before anything is written or
started; refusals are exit 2 naming the key; the batch sizes follow verl-agent's recipes in
verl's counting; ``trainer.device=cpu`` gives what a CPU run needs; a run writes its folder
under a lock and never through a planted link."""

from __future__ import annotations

import json
import re
import shlex
import socket
import sys
from pathlib import Path

import pytest

from training.verl import command, launch, recipes


def _dry_run(capsys, *args: str) -> tuple[int, str, str]:
    code = launch.main(["--dry-run", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _command(out: str) -> list[str]:
    return shlex.split(out.split("# verl:\n", 1)[1])


def test_dry_run_prints_verls_command_with_our_agent_loop_and_estimator(capsys, tmp_path):
    code, out, _ = _dry_run(capsys, "--env", "gigpo/WebShop-v0", "--group_size", "4",
                            "--run_dir", str(tmp_path / "r"),
                            "algorithm.adv_estimator=graphgpo",
                            "algorithm.graphgpo.normalize_distance=true",
                            "actor_rollout_ref.model.path=/models/qwen")  # fmt: skip
    assert code == 0
    words = _command(out)
    assert words[1:3] == ["-m", "verl.trainer.main_ppo"]
    for part in ("actor_rollout_ref.rollout.agent.default_agent_loop=gigpo",
                 "actor_rollout_ref.rollout.n=4", "algorithm.adv_estimator=graphgpo",
                 "algorithm.gamma=0.1", "+algorithm.graphgpo.normalize_distance=true",
                 "data.max_prompt_length=4096", "actor_rollout_ref.model.path=/models/qwen",
                 f"data.train_files={tmp_path / 'r' / 'data' / 'train.parquet'}",
                 f"trainer.default_local_dir={tmp_path / 'r' / 'checkpoints'}"):  # fmt: skip
        assert part in words, part
    assert f"hydra.run.dir={tmp_path / 'r' / 'hydra'}/" in " ".join(words)  # not ./outputs
    settings = json.loads(out.split("# settings: ", 1)[1].splitlines()[0])
    assert settings["normalize_distance"] is True and settings["episode_stats"] == "step"
    assert "# checked: verl 0.9.1's Hydra composition and validate_config passed" in out
    assert not (tmp_path / "r").exists()  # a dry run writes nothing


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["algorithm.adv_estimator=ppo2"], "neither gigpo_algo's .* nor verl 0.9.1's"),
        (["algorithm.gigpo.lenght_alpha=1"], "algorithm.gigpo.lenght_alpha is not a setting"),
        (["algorithm.adv_estimator=hgpo", "algorithm.gigpo.mode=mean_norm"],
         "a setting of gigpo, the estimator is hgpo"),
        # another estimator's settings, verl's own estimator selected
        (["algorithm.adv_estimator=grpo", "algorithm.gigpo.mode=mean_norm"],
         "algorithm.gigpo.mode is a setting of gigpo, the estimator is grpo"),
        (["--env", "gigpo/Nope-v0"], "--env must be one of"),
        (["--group_size", "many"], "--group_size must be an int"),
        (["--env.num_tasks", "1000000000"], r"--env.num_tasks must be in \[1, 1000000\]"),
        (["--env.kwargs", "[1]"], "--env.kwargs must be a JSON object"),
        (["--env.max_new_tokens", "999999"], r"--env.max_new_tokens must be in \[1, 32768\]"),
        (["--history_length", "1001"], r"--history_length must be in \[0, 1000\]"),
        (["--group_size", "1025"], r"--group_size must be in \[1, 1024\]"),
        (["--env.workers", "1025"], r"--env.workers must be in \[0, 1024\]"),
        (["--env.kwargs", "[" * 100_000], "--env.kwargs: nested too deeply"),
        (["--env.kwargs", '{"a": 1' + "0" * 5000 + "}"], "--env.kwargs: an integer of 5001"),
        (["--env.seed", str(2**64)], "unknown flag --env.seed"),  # the seeds are fixed
        (["--colour", "red"], "unknown flag --colour"),
        (["oops"], "neither one of our flags nor a Hydra override"),
        (["algorithm.gigpo.mode.x=1"], "settings are algorithm.gigpo.<name>"),
        (["algorithm.gigpo={bogus: 1}"], "settings are algorithm.gigpo.<name>"),
        (["algorithm=foo"], "algorithm settings as algorithm.<name>=value"),
        # the KL in the reward, however a boolean is written
        (["algorithm.use_kl_in_reward=True"], "use_kl_loss"),
        (["algorithm.use_kl_in_reward=yes"], "use_kl_loss"),
        (["algorithm.use_kl_in_reward=on"], "use_kl_loss"),
        (["algorithm.use_kl_in_reward=1"], "use_kl_loss"),
        # the group size: one setting under two names, bounded under both
        (["actor_rollout_ref.rollout.n=0"], r"rollout.n \(--group_size\) must be in \[1, 1024\]"),
        (["--group_size", "4", "actor_rollout_ref.rollout.n=5"], "disagree: give one"),
        (["--run_dir", ""], "--run_dir must name a folder"),
        (["--dataset_dir", " "], "--dataset_dir must name a folder"),
        (["data.train_batch_size=abc"], "data.train_batch_size must be an int"),
        (["trainer.n_gpus_per_node=0"], r"trainer.n_gpus_per_node must be in \[1, 1024\]"),
        (["--env.num_tasks", "8"], "below data.train_batch_size 32: verl would take no"),
        # verl's own checks: Hydra's composition, with the closest key
        (["actor_rollout_ref.actor.ppo_mini_bach_size=64"],
         "unknown verl config key 'actor_rollout_ref.actor.ppo_mini_bach_size'; did you mean "
         "actor_rollout_ref.actor.ppo_mini_batch_size?"),
        (["trainer.totl_epochs=2"], "did you mean trainer.total_epochs?"),
        # verl's validate_config, with the keys its message names
        (["actor_rollout_ref.actor.use_dynamic_bsz=False"],
         "verl's validate_config: .*ppo_micro_batch_size.*; change "
         "actor_rollout_ref.actor.ppo_micro_batch_size"),
        # what verl asserts at its first update: a mini-batch splits over the GPUs
        (["--group_size", "3", "actor_rollout_ref.actor.ppo_mini_batch_size=3"],
         "9 step rows .* does not split over 8 data-parallel GPUs"),
    ],
)  # fmt: skip
def test_a_refused_command_is_exit_2_naming_the_argument(capsys, monkeypatch, args, message):
    monkeypatch.setattr(sys, "argv", ["/venv/bin/gigpo-verl"])  # as the console script
    code, out, err = _dry_run(capsys, *args)
    assert code == 2
    assert err.startswith("gigpo-verl: error: ") and err.count("\n") == 1, err
    assert re.search(message, err), err
    assert "# verl:" not in out


def test_verls_own_estimator_passes_through_unread(capsys):
    code, out, _ = _dry_run(capsys, "algorithm.adv_estimator=grpo")
    assert code == 0 and "# settings:" not in out
    assert "algorithm.adv_estimator=grpo" in _command(out)


def test_a_users_plus_key_is_added_and_an_unmarked_new_key_refused(capsys):
    code, out, _ = _dry_run(capsys, "+actor_rollout_ref.model.override_config.rope_theta=1000")
    assert code == 0
    assert "+actor_rollout_ref.model.override_config.rope_theta=1000" in _command(out)
    code, _, err = _dry_run(capsys, "actor_rollout_ref.model.override_config.rope_theta=1000")
    assert code == 2 and "unknown verl config key" in err


# ------------------------------------------------------------------------ the batch sizes


@pytest.mark.parametrize(
    ("env", "tasks", "group", "mini", "rows", "most"),
    [("gigpo/ALFWorld-v0", 16, 8, 32, 256, 25), ("gigpo/WebShop-v0", 16, 8, 8, 64, 30),
     ("gigpo/Sokoban-v0", 32, 8, 8, 64, 60), ("gigpo/SearchQA-v0", 256, 5, 104, 520, None)],
)  # fmt: skip
def test_each_envs_batch_is_verl_agents_in_verls_counting(capsys, env, tasks, group, mini,
                                                           rows, most):  # fmt: skip
    """The tasks and the group a training step, and the step rows an optimizer step, of
    verl-agent's script for the env (its ppo_mini_batch_size counts rows: its rollout.n is
    1); SearchQA's 512 rows are not a multiple of its group of 5 and the 8 GPUs: 520."""
    code, out, _ = _dry_run(capsys, "--env", env)
    assert code == 0, out
    words = _command(out)
    for part in (f"data.train_batch_size={tasks}", f"actor_rollout_ref.rollout.n={group}",
                 f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}",
                 "actor_rollout_ref.actor.use_dynamic_bsz=True",
                 "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
                 "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True"):  # fmt: skip
        assert part in words, part
    assert f"# batch: {tasks} tasks x {group} episodes = {tasks * group:,} episodes" in out
    assert f"# update: {rows} step rows an optimizer step (ppo_mini_batch_size {mini}" in out
    if most is None:  # SearchQA's step limit is set when it is built (its data's turns)
        assert f"ceil(rows / {rows}) optimizer steps a training step" in out
    else:
        assert f"1 to {most} optimizer steps a training step" in out


def test_the_mini_batch_is_the_nearest_multiple_of_the_group_and_the_gpus():
    assert recipes.mini_batch_size(256, 8, 8) == 32  # ALFWorld, 256 rows
    assert recipes.mini_batch_size(512, 5, 8) == 104  # 520 rows: 480 is farther
    assert recipes.mini_batch_size(512, 5, 1) == 102  # 510 rows, then 515
    assert recipes.mini_batch_size(16, 8, 1) == 2
    assert recipes.mini_batch_size(3, 8, 1) == 1  # at least one group
    for rows, group, gpus in [(256, 8, 8), (512, 5, 8), (64, 3, 2), (100, 7, 4)]:
        mini = recipes.mini_batch_size(rows, group, gpus)
        assert mini * group % gpus == 0 and abs(mini * group - rows) <= group * gpus


def test_the_users_batch_keys_win_over_the_recipes(capsys):
    code, out, _ = _dry_run(capsys, "--env", "gigpo/ALFWorld-v0", "data.train_batch_size=4",
                            "actor_rollout_ref.actor.ppo_mini_batch_size=4")  # fmt: skip
    assert code == 0
    words = _command(out)
    assert "data.train_batch_size=4" in words
    assert "actor_rollout_ref.actor.ppo_mini_batch_size=4" in words


# ---------------------------------------------------------------------------- on a CPU


def test_trainer_device_cpu_sets_what_verl_needs_on_a_cpu_machine(capsys, monkeypatch):
    from training.verl.cpu import CPU_OVERRIDES

    code, out, _ = _dry_run(capsys, "trainer.device=cpu", "--env", "gigpo/NumberLine-v0",
                            "data.train_batch_size=2", "--group_size", "2",
                            "actor_rollout_ref.rollout.agent.num_workers=2")  # fmt: skip
    assert code == 0, out
    words = _command(out)
    for key, value in CPU_OVERRIDES.items():
        plus = "+" if key in command.NEW_KEYS else ""
        wanted = "2" if key == "actor_rollout_ref.rollout.agent.num_workers" else value
        assert f"{plus}{key}={wanted}" in words, key  # the user's own value wins
    # NumberLine's 16 rows an optimizer step, on the one device: 8 groups of 2
    assert "actor_rollout_ref.actor.ppo_mini_batch_size=8" in words
    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    resolved, _ = command.resolve(*command.parse(["trainer.device=cpu"])[:2])
    env = command.run_env(resolved)
    assert env["VERL_PLATFORM"] == "cpu" and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")  # the user's own size wins
    assert command.run_env(resolved)["VLLM_CPU_KVCACHE_SPACE"] == "3"
    resolved, _ = command.resolve(*command.parse([])[:2])
    assert "VERL_PLATFORM" not in command.run_env(resolved)


def test_a_packaged_model_name_is_the_folder_the_run_makes_it_in(capsys, tmp_path):
    from training.packaged import prepare_packaged

    code, out, _ = _dry_run(capsys, "--run_dir", str(tmp_path / "r"),
                            "actor_rollout_ref.model.path=tiny-random")  # fmt: skip
    assert code == 0
    model = tmp_path / "r" / "models" / "tiny-random"
    assert f"actor_rollout_ref.model.path={model}" in _command(out)
    prepare_packaged("tiny-random", str(model))
    config = json.loads((model / "config.json").read_text())
    assert config["hidden_size"] // config["num_attention_heads"] == 32  # vLLM CPU's smallest
    stamp = (model / "config.json").stat().st_mtime_ns
    prepare_packaged("tiny-random", str(model))  # kept, not rebuilt
    assert (model / "config.json").stat().st_mtime_ns == stamp


def test_the_dry_run_opens_no_network_connection(capsys, monkeypatch):
    """A hub id as the model, no offline flag: verl's checks read no model, so the dry run
    never waits on the hub (a connection attempt here fails the test)."""
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("no network in this test")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    code, out, _ = _dry_run(capsys, "--env", "gigpo/ALFWorld-v0",
                            "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct")  # fmt: skip
    assert code == 0 and attempts == []
    assert "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct" in _command(out)


def test_help_prints_the_usage(capsys):
    assert launch.main(["--help"]) == 0
    assert "trainer.device=cpu" in capsys.readouterr().out


# ------------------------------------------------------------------- what a run writes


def test_the_datasets_carry_one_task_per_row(tmp_path):
    import pandas as pd

    from training.env_tasks import parse_task

    ours, overrides, added, _ = command.parse(
        ["--env", "gigpo/Sokoban-v0", "--env.num_tasks", "5", "--env.val_tasks", "2",
         "--history_length", "3", "--run_dir", str(tmp_path), "data.train_batch_size=4"]
    )  # fmt: skip
    resolved, _ = command.resolve(ours, overrides, added)
    launch.write_datasets(ours, int(resolved["data.max_prompt_length"]))
    train = pd.read_parquet(tmp_path / "data" / "train.parquet")
    val = pd.read_parquet(tmp_path / "data" / "val.parquet")
    seeds = [parse_task(x["gigpo_task"]).seed for x in train["extra_info"]]
    assert seeds == [0, 1, 2, 3, 4] and len(val) == 2
    task = parse_task(val["extra_info"][0]["gigpo_task"])
    assert task.seed >= 1_000_000 and task.history_length == 3 and task.layout == "step"
    assert task.max_prompt_tokens == 1024
    assert set(train["agent_name"]) == {"gigpo"}


def _run(*args: str) -> int:
    return launch.main(["--env.num_tasks", "3", "data.train_batch_size=2", *args])


def test_a_run_writes_its_folder_under_its_lock(tmp_path, monkeypatch, capsys):
    """Without --dry-run: the datasets are written, verl's command runs (here ``true`` stands
    in for the interpreter), and the run's folder is held meanwhile: a second launch into a
    held folder, or into another kind of folder, is refused with exit 2."""
    from training.locks import hold_folder

    monkeypatch.setenv("PYTHON", "true")
    run = tmp_path / "run"
    assert _run("--run_dir", str(run)) == 0
    assert (run / "data" / "train.parquet").exists() and (run / "data" / "val.parquet").exists()
    with hold_folder(run, "verl", "another gigpo-verl", "--run_dir"):
        assert _run("--run_dir", str(run)) == 2
    assert "another gigpo-verl" in capsys.readouterr().err
    other = tmp_path / "train"
    with hold_folder(other, "train", "gigpo-train"):
        pass
    assert _run("--run_dir", str(other)) == 2
    assert "training run" in capsys.readouterr().err
    data = tmp_path / "elsewhere"  # datasets outside the run's folder: held too
    assert _run("--run_dir", str(run), "--dataset_dir", str(data)) == 0
    assert (data / "train.parquet").exists()
    with hold_folder(data, "verl", "a third gigpo-verl", "--dataset_dir"):
        assert _run("--run_dir", str(run), "--dataset_dir", str(data)) == 2
    assert "a third gigpo-verl" in capsys.readouterr().err
    assert _run("--run_dir", str(run)) == 0  # released


def test_a_planted_link_is_refused_never_written_through(tmp_path, monkeypatch, capsys):
    """A link planted where a dataset goes, or as the datasets' folder: exit 2 naming it,
    its target untouched, verl not started."""
    monkeypatch.setenv("PYTHON", "false")  # verl's command would fail the run: it must not run
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (run / "data" / "train.parquet").symlink_to(target)
    assert _run("--run_dir", str(run)) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m training.verl.launch: error: ")
    assert "train.parquet is a symbolic link" in err and err.count("\n") == 1
    assert target.read_text() == "keep me"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    linked = tmp_path / "run2"
    linked.mkdir()
    (linked / "data").symlink_to(elsewhere, target_is_directory=True)
    assert _run("--run_dir", str(linked)) == 2
    assert "data is a symbolic link" in capsys.readouterr().err
    assert list(elsewhere.iterdir()) == []


def test_a_run_without_verl_installed_names_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(launch.importlib.util, "find_spec", lambda name: None)
    assert _run("--run_dir", str(tmp_path / "r"), "--dry-run") == 0
    assert "# checked: not by verl, which is not installed here" in capsys.readouterr().out
    assert _run("--run_dir", str(tmp_path / "r")) == 2
    assert "pip install -e '.[verl]'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_the_dry_run_and_the_run_check_the_same_way(tmp_path, monkeypatch, capsys):
    """A command verl refuses is refused before the run writes anything."""
    monkeypatch.setenv("PYTHON", "true")
    assert _run("--run_dir", str(tmp_path / "r"), "trainer.totl_epochs=1") == 2
    assert "did you mean trainer.total_epochs?" in capsys.readouterr().err
    assert not Path(tmp_path / "r").exists()
