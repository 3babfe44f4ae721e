"""The plugin as verl loads it (its ``verl.plugins`` entry point, in a fresh process), its
checks that fail loudly when verl changes under it, and the ``gigpo-verl`` launcher."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import types

import pytest

from training.verl import launch, plugin

PROBE = textwrap.dedent(
    """
    import json
    import verl  # nothing else: verl's own plugin discovery must do the rest
    from verl.trainer.ppo import core_algos, ray_trainer
    from verl.trainer.ppo.v1 import trainer_base, utils
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    print(json.dumps({
        "estimators": sorted(
            set(core_algos.ADV_ESTIMATOR_REGISTRY) & {"gigpo", "hgpo", "graphgpo"}),
        "patched": [getattr(f, "__gigpo_patched__", False) for f in (
            ray_trainer.compute_advantage, utils.compute_advantage, trainer_base.PPOTrainer)],
        "agent_loop": _agent_loop_registry.get("gigpo"),
    }))
    """
)


def _probe(**env: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300, check=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_plain_import_verl_registers_everything_in_a_fresh_process():
    seen = _probe()
    assert seen["estimators"] == ["gigpo", "graphgpo", "hgpo"]
    assert seen["patched"] == [True, True, True]
    assert seen["agent_loop"] == {"_target_": "training.verl.agent_loop.GiGPOAgentLoop"}


def test_without_verls_plugin_discovery_nothing_is_registered():
    seen = _probe(VERL_USE_EXTERNAL_PLUGINS="none")
    assert seen == {"estimators": [], "patched": [False, False, False], "agent_loop": None}


def test_a_verl_of_another_version_is_refused_by_name(caplog):
    with pytest.raises(plugin.VerlChangedError, match=r"verl==0\.9\.1.*verl 0\.10\.0"):
        plugin.check_verl_version("0.10.0")
    assert "verl 0.10.0" in caplog.text  # logged too: verl hides a plugin's import error
    assert plugin.check_verl_version() == "0.9.1"


def test_each_patch_checks_what_it_wraps():
    def changed(data, adv_estimator, gamma=1.0, config=None):  # a signature verl could move to
        return data

    with pytest.raises(plugin.VerlChangedError, match="compute_advantage"):
        plugin.wrap_compute_advantage(changed)
    with pytest.raises(plugin.VerlChangedError, match="register_adv_est"):
        plugin.register_estimators(types.SimpleNamespace(ADV_ESTIMATOR_REGISTRY={}))
    with pytest.raises(plugin.VerlChangedError, match="agent_loop.register"):
        plugin.register_agent_loop(types.SimpleNamespace())
    with pytest.raises(plugin.VerlChangedError, match="PPOTrainer._compute_advantage"):
        plugin.patch_trainer_base(types.SimpleNamespace(PPOTrainer=object))


def test_the_launchers_list_of_verls_estimators_is_verls():
    from verl.trainer.ppo import core_algos

    verls = {e.value for e in core_algos.AdvantageEstimator}
    verls |= set(core_algos.ADV_ESTIMATOR_REGISTRY)
    assert set(launch.VERL_OWN_ESTIMATORS) == verls - {"gigpo", "hgpo", "graphgpo"}


def _dry_run(capsys, *args: str) -> tuple[int, str, str]:
    code = launch.main(["--dry-run", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_dry_run_prints_verls_command_with_our_agent_loop_and_estimator(capsys, tmp_path):
    code, out, _ = _dry_run(capsys, "--env", "gigpo/WebShop-v0", "--group_size", "4",
                            "--dataset_dir", str(tmp_path / "d"),
                            "algorithm.adv_estimator=graphgpo",
                            "algorithm.graphgpo.normalize_distance=true",
                            "actor_rollout_ref.model.path=/models/qwen")  # fmt: skip
    assert code == 0
    command = out.split("# verl:\n", 1)[1].strip()
    assert " -m verl.trainer.main_ppo " in command
    for part in ("actor_rollout_ref.rollout.agent.default_agent_loop=gigpo",
                 "actor_rollout_ref.rollout.n=4", "algorithm.adv_estimator=graphgpo",
                 "algorithm.gamma=0.1", "+algorithm.graphgpo.normalize_distance=true",
                 "data.max_prompt_length=4096",
                 "actor_rollout_ref.model.path=/models/qwen"):  # fmt: skip
        assert part in command.split(), part
    settings = json.loads(out.split("# settings: ", 1)[1].splitlines()[0])
    assert settings["normalize_distance"] is True and settings["episode_stats"] == "step"
    assert not (tmp_path / "d").exists()  # a dry run writes nothing


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["algorithm.adv_estimator=ppo2"], "neither gigpo_algo's .* nor verl 0.9.1's"),
        (["algorithm.gigpo.lenght_alpha=1"], "algorithm.gigpo.lenght_alpha is not a setting"),
        (["algorithm.adv_estimator=hgpo", "algorithm.gigpo.mode=mean_norm"],
         "a setting of gigpo, the estimator is hgpo"),
        (["--env", "gigpo/Nope-v0"], "--env must be one of"),
        (["--group_size", "many"], "--group_size must be an int"),
        (["--env.num_tasks", "1000000000"], r"--env.num_tasks must be in \[1, 1000000\]"),
        (["--env.kwargs", "[1]"], "--env.kwargs must be a JSON object"),
        # each bound as the OpenRLHF launcher's and the local trainer's; JSON read guarded
        (["--env.num_tasks", "3000000"], r"--env.num_tasks must be in \[1, 1000000\]"),
        (["--env.max_new_tokens", "999999"], r"--env.max_new_tokens must be in \[1, 32768\]"),
        (["--history_length", "1001"], r"--history_length must be in \[0, 1000\]"),
        (["--group_size", "1025"], r"--group_size must be in \[1, 1024\]"),
        (["--env.workers", "1025"], r"--env.workers must be in \[0, 1024\]"),
        (["--env.kwargs", "[" * 100_000], "--env.kwargs: nested too deeply"),
        (["--env.kwargs", '{"a": 1' + "0" * 5000 + "}"], "--env.kwargs: an integer of 5001"),
        (["--env.seed", str(2**64)], "unknown flag --env.seed"),  # the seeds are fixed
        (["--colour", "red"], "unknown flag --colour"),
        (["algorithm.use_kl_in_reward=True"], "use_kl_loss"),
        (["oops"], "neither one of our flags nor a Hydra override"),
        (["algorithm.gigpo.mode.x=1"], "settings are algorithm.gigpo.<name>"),
    ],
)  # fmt: skip
def test_dry_run_refuses_with_exit_2_naming_the_argument(capsys, monkeypatch, args, message):
    monkeypatch.setattr(sys, "argv", ["/venv/bin/gigpo-verl"])  # as the console script
    code, _, err = _dry_run(capsys, *args)
    assert code == 2
    assert err.startswith("gigpo-verl: error: ")
    assert re.search(message, err), err


def test_verls_own_estimator_passes_through_unread(capsys):
    code, out, _ = _dry_run(capsys, "algorithm.adv_estimator=grpo")
    assert code == 0 and "# settings:" not in out


def test_the_datasets_carry_one_task_per_row(tmp_path):
    from training.env_tasks import parse_task

    ours, _, _ = launch.parse(["--env", "gigpo/Sokoban-v0", "--env.num_tasks", "5",
                               "--env.val_tasks", "2", "--history_length", "3",
                               "--dataset_dir", str(tmp_path)])  # fmt: skip
    launch.write_datasets(ours)
    import pandas as pd

    train = pd.read_parquet(tmp_path / "train.parquet")
    val = pd.read_parquet(tmp_path / "val.parquet")
    seeds = [parse_task(x["gigpo_task"]).seed for x in train["extra_info"]]
    assert seeds == [0, 1, 2, 3, 4] and len(val) == 2
    task = parse_task(val["extra_info"][0]["gigpo_task"])
    assert task.seed >= 1_000_000 and task.history_length == 3 and task.layout == "step"
    assert set(train["agent_name"]) == {"gigpo"}


def test_a_run_writes_its_datasets_under_the_folders_lock(tmp_path, monkeypatch, capsys):
    """Without --dry-run: the datasets are written, verl's command runs (here ``true`` stands
    in for the interpreter), and the folder is held meanwhile: a second launch into a held
    folder, or into another kind of folder, is refused with exit 2."""
    from training.locks import hold_folder

    monkeypatch.setenv("PYTHON", "true")
    folder = tmp_path / "data"
    assert launch.main(["--dataset_dir", str(folder), "--env.num_tasks", "3"]) == 0
    assert (folder / "train.parquet").exists() and (folder / "val.parquet").exists()
    with hold_folder(folder, "verl", "another gigpo-verl", "--dataset_dir"):
        assert launch.main(["--dataset_dir", str(folder)]) == 2
    assert "another gigpo-verl" in capsys.readouterr().err
    run = tmp_path / "run"
    with hold_folder(run, "train", "gigpo-train"):
        pass
    assert launch.main(["--dataset_dir", str(run)]) == 2
    assert "training run" in capsys.readouterr().err
    assert launch.main(["--dataset_dir", str(folder), "--env.num_tasks", "2"]) == 0  # released


def test_a_run_without_verl_installed_names_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(launch.importlib.util, "find_spec", lambda name: None)
    assert launch.main(["--dataset_dir", str(tmp_path / "d")]) == 2
    assert "pip install 'gigpo[verl]'" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
