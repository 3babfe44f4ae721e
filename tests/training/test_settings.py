"""training.settings: one table of estimator settings, read by both trainers' configs."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gigpo_algo.estimators import ESTIMATOR_SETTINGS, ESTIMATORS
from training.local.config import AlgoConfig, ConfigError, load_config
from training.local.resume import config_changes
from training.openrlhf.command import plan
from training.openrlhf.estimator import GiGPOSettings
from training.settings import (
    TRAINER_ESTIMATORS,
    TRAINER_ONLY,
    EstimatorSettings,
    flag_settings,
    read_by,
    table,
)

KL = ["--algo.kl.init_coef", "0"]


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_the_table_agrees_with_gigpo_algo(estimator):
    assert set(read_by(estimator)) - set(TRAINER_ONLY) == set(ESTIMATOR_SETTINGS[estimator]) - {
        "eps"
    }


def test_ppo_reads_its_own_settings_and_no_gigpo_knob():
    assert set(read_by("ppo")) == {"gae_gamma", "lam", "value_clip", "invalid_penalty"}
    assert "gamma" not in read_by("ppo") and "gae_gamma" not in read_by("gigpo")


def test_both_trainers_take_their_settings_from_the_table():
    names = [f.name for f in table()]
    local = {f.name for f in dataclasses.fields(AlgoConfig)}
    openrlhf = {f.name for f in dataclasses.fields(GiGPOSettings)}
    assert set(names) <= local and set(names) <= openrlhf
    assert issubclass(AlgoConfig, EstimatorSettings)
    assert issubclass(GiGPOSettings, EstimatorSettings)
    # Every critic-free setting is an OpenRLHF flag (and only those): set each to a value
    # off its default through the launcher, under an estimator that reads it, and read it
    # back.
    values = {"gamma": 0.5, "step_weight": 0.5, "norm": "mean", "episode_stats": "step",
              "similarity": None, "similarity_metric": None, "invalid_penalty": 0.25,
              "history_length": 3, "length_alpha": 0.5, "base_group": True,
              "normalize_distance": True, "episode_weight": 0.5, "success": "won"}  # fmt: skip
    assert {f.name for f in flag_settings()} == set(values)
    checked = set()
    for estimator in ESTIMATORS:
        mine = {k: v for k, v in values.items() if k in read_by(estimator) and v is not None}
        args = [f"--algo.gigpo.{k}={str(v).lower()}" for k, v in mine.items()]
        settings = plan(["--algo.advantage.estimator", estimator, *args, *KL]).settings
        assert {k: getattr(settings, k) for k in mine} == mine
        assert all(type(getattr(settings, k)) is type(v) for k, v in mine.items())
        checked |= set(mine)
    assert checked == {k for k, v in values.items() if v is not None}


#: A value off each setting's default that the estimators reading it accept.
OFF_DEFAULT = {"norm": "mean", "episode_stats": "step", "similarity_metric": "indel",
               "history_length": 3, "base_group": True, "normalize_distance": True,
               "success": "won"}  # fmt: skip


def test_a_setting_the_estimator_does_not_read_is_refused_under_every_estimator():
    checked = 0
    for f in table():
        value = OFF_DEFAULT.get(f.name, 0.5)
        extra = {"similarity": 0.5} if f.name == "similarity_metric" else {}
        for estimator in TRAINER_ESTIMATORS:
            config = AlgoConfig(estimator=estimator, **{f.name: value, **extra})
            if estimator in f.metadata["reads"]:
                config.check()
            else:
                with pytest.raises(
                    ValueError, match=rf"algo\.({f.name}|similarity)=.* is not used by"
                ):
                    config.check()
            checked += 1
    assert checked == len(TRAINER_ESTIMATORS) * len(table()) == 6 * 16


def test_the_family_reads_its_own_settings_and_shares_the_rest():
    assert set(read_by("hgpo")) - set(read_by("gigpo")) == {
        "history_length", "length_alpha", "base_group"
    }  # fmt: skip
    assert set(read_by("graphgpo")) - set(read_by("gigpo")) == {
        "normalize_distance", "episode_weight", "success"
    }  # fmt: skip
    assert "step_weight" not in read_by("hgpo") and "step_weight" in read_by("graphgpo")
    # every critic-free estimator reads the one episode score's settings; PPO the penalty
    for estimator in TRAINER_ESTIMATORS:
        assert "invalid_penalty" in read_by(estimator)
        assert ("episode_stats" in read_by(estimator)) == (estimator != "ppo")
    # the table's defaults mean "the estimator's own", documented per estimator
    docs = {f.name: f.metadata["doc"] for f in table()}
    assert "0.95" in docs["gamma"] and "0.1" in docs["gamma"]
    assert "mean_std" in docs["norm"] and "hgpo" in docs["norm"]
    assert TRAINER_ESTIMATORS == (*ESTIMATORS, "ppo")


def test_renamed_keys_are_read_under_their_new_names_with_a_warning(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text(
        "env: {id: gigpo/EZPoints-v0, eval_groups: 3}\nrollout: {eval_temperature: 0.5}\n"
        "algo: {ppo_epochs: 2}\nrun: {eval_every: 4}\n"
    )
    with pytest.warns(FutureWarning) as caught:
        config = load_config(path, ["--run.eval_every=5"])
    messages = " ".join(str(w.message) for w in caught)
    for old, new in [("env.eval_groups", "eval.groups"), ("run.eval_every", "eval.every"),
                     ("rollout.eval_temperature", "eval.temperature"),
                     ("algo.ppo_epochs", "algo.policy_epochs")]:  # fmt: skip
        assert f"{old} is now {new}" in messages
    assert (config.eval.groups, config.eval.temperature, config.eval.every) == (3, 0.5, 5)
    assert config.algo.policy_epochs == 2
    with pytest.warns(FutureWarning, match="algo.ppo_epochs is now algo.policy_epochs"):
        assert load_config("smoke", ["--algo.ppo_epochs=3"]).algo.policy_epochs == 3
    both = tmp_path / "both.yaml"
    both.write_text("algo: {ppo_epochs: 2, policy_epochs: 2}\n")
    with pytest.raises(ConfigError, match="give algo.policy_epochs or its old name"):
        load_config(both)


def test_ppo_gamma_is_read_as_gae_gamma_and_gigpo_gamma_is_not():
    with pytest.warns(FutureWarning, match="read as algo.gae_gamma"):
        config = load_config("smoke", ["--algo.estimator=ppo", "--algo.gamma=0.9"])
    assert config.algo.gae_gamma == 0.9 and config.algo.gamma is None
    with pytest.raises(ConfigError, match="algo.gae_gamma=0.9 is not used by"):
        load_config("smoke", ["--algo.gae_gamma=0.9"])


def test_a_checkpoint_config_from_before_the_renames_resumes():
    config = load_config("smoke")
    saved = json.loads(json.dumps(config.to_dict()))
    # config.json as the trainer wrote it before: ppo_epochs, and eval settings in 3 sections
    saved["algo"]["ppo_epochs"] = saved["algo"].pop("policy_epochs")
    saved["algo"].pop("gae_gamma")
    evaluation = saved.pop("eval")
    saved["env"]["eval_groups"] = evaluation["groups"]
    saved["rollout"]["eval_temperature"] = evaluation["temperature"]
    saved["run"]["eval_every"] = evaluation["every"]
    assert config_changes(saved, config) == []
    saved["algo"]["ppo_epochs"] = 4
    assert config_changes(saved, config) == ["algo.policy_epochs: 4 -> 1"]
