"""HGPO's and GraphGPO's settings in both trainers' configs: loaded, defaulted, refused.

The local trainer's ``algo`` section and the OpenRLHF launcher's ``--algo.gigpo.*`` flags
come from one table (training/settings.py); each new key loads under the estimator that
reads it, a bad value fails at load naming the dotted key (or the flag), and a setting of
another estimator fails at load.
"""

from __future__ import annotations

import json

import pytest

from training.local.config import ConfigError, load_config
from training.local.resume import config_changes
from training.local.schema import resumable_keys
from training.openrlhf.command import UsageError, plan

KL = ["--algo.kl.use_loss"]
NEW_KEYS = ("history_length", "length_alpha", "base_group", "normalize_distance",
            "episode_weight")  # fmt: skip


def test_hgpo_and_its_settings_load_from_yaml(tmp_path):
    path = tmp_path / "hgpo.yaml"
    path.write_text(
        "env: {id: gigpo/EZPoints-v0, history_length: 3}\n"
        "algo: {estimator: hgpo, history_length: 1, length_alpha: 0, base_group: true,\n"
        "       gamma: 0.9, norm: mean, similarity: 0.8, invalid_penalty: 0.1}\n"
    )
    a = load_config(path).algo
    assert (a.estimator, a.history_length, a.length_alpha, a.base_group) == ("hgpo", 1, 0.0, True)
    assert (a.gamma, a.norm, a.similarity, a.invalid_penalty) == (0.9, "mean", 0.8, 0.1)
    assert type(a.history_length) is int and type(a.length_alpha) is float
    settings = a.estimator_settings()
    assert {k: settings[k] for k in ("history_length", "length_alpha", "base_group")} == {
        "history_length": 1, "length_alpha": 0.0, "base_group": True
    }  # fmt: skip


def test_graphgpo_and_its_settings_load_from_overrides():
    a = load_config(
        "smoke",
        ["--algo.estimator=graphgpo", "--algo.normalize_distance=true", "--algo.gamma=0.2",
         "--algo.episode_weight=0.5", "--algo.step_weight=2", "--algo.norm=mean_std"],
    ).algo  # fmt: skip
    assert (a.normalize_distance, a.gamma, a.episode_weight, a.step_weight) == (True, 0.2, 0.5, 2.0)
    # left unset, a setting takes the estimator's own default (gamma 0.1, norm mean_std)
    unset = load_config("smoke", ["--algo.estimator=graphgpo"]).algo
    assert all(getattr(unset, k) is None for k in ("gamma", "norm", *NEW_KEYS))


def test_hgpo_history_length_defaults_to_the_prompts_window():
    # verl-agent's one env.history_length sets both: unset, HGPO's is env.history_length
    assert load_config("smoke", ["--algo.estimator=hgpo"]).algo.history_length == 1
    config = load_config("smoke", ["--algo.estimator=hgpo", "--env.history_length=4"])
    assert (config.env.history_length, config.algo.history_length) == (4, 4)
    given = load_config("smoke", ["--algo.estimator=hgpo", "--algo.history_length=0"])
    assert (given.env.history_length, given.algo.history_length) == (1, 0)
    # under any other estimator it stays unset (a value there would be refused)
    assert load_config("smoke", ["--env.history_length=4"]).algo.history_length is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["--algo.history_length=-1"], r"algo.history_length must be >= 0, got -1"),
        (["--algo.history_length=1.5"], r"algo.history_length must be an int"),
        (["--algo.history_length=true"], r"algo.history_length must be an int"),
        (["--algo.history_length=5000"], r"algo.history_length must be <= 1000"),
        (["--algo.length_alpha=-1"], r"algo.length_alpha must be >= 0"),
        (["--algo.length_alpha=.inf"], r"algo.length_alpha must be finite"),
        (["--algo.length_alpha=abc"], r"algo.length_alpha must be a number"),
        (["--algo.base_group=1"], r"algo.base_group must be true or false"),
        (["--algo.base_group=maybe"], r"algo.base_group must be true or false"),
        (["--algo.norm=loo"], r"algo.norm='loo' is not defined for algo.estimator='hgpo'"),
        (["--algo.gamma=1.5"], r"algo.gamma must be in \[0, 1\]"),
        (["--algo.similarity_metric=indel"], "similarity_metric needs algo.similarity"),
        # a setting of another estimator
        (["--algo.step_weight=0.5"], r"algo.step_weight=0.5 is not used by algo.estimator='hgpo'"),
        (["--algo.episode_weight=1"], r"algo.episode_weight=1.0 is not used by"),
        (["--algo.normalize_distance=false"], r"algo.normalize_distance=False is not used by"),
        (["--algo.gae_gamma=0.9"], r"algo.gae_gamma=0.9 is not used by"),
    ],
)
def test_bad_hgpo_settings_fail_at_load_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("smoke", ["--algo.estimator=hgpo", *overrides])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["--algo.normalize_distance=2"], r"algo.normalize_distance must be true or false"),
        (["--algo.episode_weight=.nan"], r"algo.episode_weight must be finite"),
        (["--algo.episode_weight=x"], r"algo.episode_weight must be a number"),
        (["--algo.step_weight=.inf"], r"algo.step_weight must be finite"),
        (["--algo.norm=loo"], r"algo.norm='loo' is not defined for algo.estimator='graphgpo'"),
        (["--algo.history_length=2"], r"algo.history_length=2 is not used by algo.estimator="),
        (["--algo.length_alpha=1"], r"algo.length_alpha=1.0 is not used by"),
        (["--algo.base_group=false"], r"algo.base_group=False is not used by"),
        (["--algo.success=always"], r"algo.success must be one of \('reward', 'won'\)"),
    ],
)
def test_bad_graphgpo_settings_fail_at_load_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("smoke", ["--algo.estimator=graphgpo", *overrides])


@pytest.mark.parametrize("estimator", ["gigpo", "grpo", "rloo", "ppo"])
@pytest.mark.parametrize(
    "setting",
    ["history_length=2", "length_alpha=0.5", "base_group=true", "normalize_distance=true",
     "episode_weight=0.5"],
)  # fmt: skip
def test_the_familys_settings_are_refused_under_the_other_estimators(estimator, setting):
    name = setting.split("=")[0]
    with pytest.raises(ConfigError, match=rf"algo.{name}=.* is not used by algo.estimator="):
        load_config("smoke", [f"--algo.estimator={estimator}", f"--algo.{setting}"])


def test_the_new_settings_may_not_change_on_resume():
    config = load_config("smoke", ["--algo.estimator=hgpo", "--algo.length_alpha=0.5"])
    assert not {f"algo.{k}" for k in NEW_KEYS} & set(resumable_keys())
    saved = json.loads(json.dumps(config.to_dict()))
    assert config_changes(saved, config) == []  # the resolved history_length is saved
    saved["algo"]["length_alpha"], saved["algo"]["history_length"] = 1.0, 3
    assert config_changes(saved, config) == [
        "algo.history_length: 3 -> 1",
        "algo.length_alpha: 1.0 -> 0.5",
    ]
    # a config.json from before the family's keys: each counts as its default (unset)
    old = json.loads(json.dumps(load_config("smoke").to_dict()))
    for key in NEW_KEYS:
        del old["algo"][key]
    assert config_changes(old, load_config("smoke")) == []


# ------------------------------------------------------------------ the OpenRLHF launcher


def test_the_launcher_reads_the_familys_flags_and_verl_agents_names():
    hgpo = plan(
        ["--algo.advantage.estimator", "hgpo", "--algo.gigpo.history_length", "3",
         "--algo.gigpo.length_alpha", "0.5", "--algo.gigpo.base_group", *KL]
    ).settings  # fmt: skip
    assert (hgpo.history_length, hgpo.length_alpha, hgpo.base_group) == (3, 0.5, True)
    theirs = plan(
        ["--algo.advantage.estimator", "hgpo", "--algo.gigpo.history_length=3",
         "--algo.gigpo.length_weight_alpha=0.5", "--algo.gigpo.base_group=true",
         "--algo.gigpo.mode", "mean_std_norm", *KL]
    ).settings  # fmt: skip
    assert (theirs.length_alpha, theirs.base_group, theirs.norm) == (0.5, True, "mean_std")
    graph = plan(
        ["--algo.advantage.estimator", "graphgpo", "--algo.gigpo.normalize_distance", "false",
         "--algo.gigpo.episode_advantage_w", "0.25", "--algo.gigpo.step_advantage_w", "2",
         "--algo.gigpo.gamma", "0.2", *KL]
    ).settings  # fmt: skip
    assert (graph.normalize_distance, graph.episode_weight, graph.step_weight, graph.gamma) == (
        False, 0.25, 2.0, 0.2,
    )  # fmt: skip
    with pytest.raises(UsageError, match="give --algo.gigpo.episode_weight or its alias"):
        plan(["--algo.advantage.estimator", "graphgpo", "--algo.gigpo.episode_weight", "1",
              "--algo.gigpo.episode_advantage_w", "1", *KL])  # fmt: skip


def test_the_launchers_hgpo_history_length_is_the_step_layouts_prompt_window():
    step = plan(["--algo.advantage.estimator", "hgpo", "--env", "gigpo/SearchQA-v0", *KL])
    assert step.layout == "step" and step.tasks[0].history_length == 4  # SearchQA's default
    assert step.settings.history_length == 4
    given = plan(["--algo.advantage.estimator", "hgpo", "--history_length", "3", *KL])
    assert given.tasks[0].history_length == given.settings.history_length == 3
    # --algo.gigpo.history_length is HGPO's own, not the prompt's
    own = plan(["--algo.advantage.estimator", "hgpo", "--algo.gigpo.history_length", "1", *KL])
    assert (own.tasks[0].history_length, own.settings.history_length) == (2, 1)
    # the episode layout's prompt holds the whole episode: HGPO keeps its own default (2)
    episode = plan(["--algo.advantage.estimator", "hgpo", "--gigpo.layout", "episode", *KL])
    assert episode.settings.history_length is None
    assert plan(KL).settings.history_length is None  # gigpo reads none


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["hgpo", "--algo.gigpo.history_length", "x"],
            "--algo.gigpo.history_length must be an int",
        ),
        (["hgpo", "--algo.gigpo.history_length", "-1"], "--algo.gigpo.history_length must be >= 0"),
        (["hgpo", "--algo.gigpo.length_alpha", "-1"], "--algo.gigpo.length_alpha must be >= 0"),
        (
            ["hgpo", "--algo.gigpo.length_weight_alpha", "y"],
            "--algo.gigpo.length_weight_alpha must",
        ),
        (["hgpo", "--algo.gigpo.base_group", "maybe"], "--algo.gigpo.base_group must be true or"),
        (["hgpo", "--algo.gigpo.norm", "loo"], "--algo.gigpo.norm='loo' is not defined for"),
        (["graphgpo", "--algo.gigpo.episode_weight", "inf"], "--algo.gigpo.episode_weight must be"),
        (["graphgpo", "--algo.gigpo.normalize_distance", "2"], "normalize_distance must be true"),
        (["graphgpo", "--algo.gigpo.history_length", "2"], "history_length=2 is not used by"),
        (["hgpo", "--algo.gigpo.step_weight", "1"], "step_weight=1.0 is not used by"),
        (["gigpo", "--algo.gigpo.base_group"], "base_group=True is not used by"),
        (["grpo", "--algo.gigpo.episode_weight", "1"], "episode_weight=1.0 is not used by"),
        (["reinforce", "--algo.gigpo.length_alpha", "1"], "does not use"),
    ],
)
def test_the_launcher_refuses_bad_family_flags_naming_them(argv, message):
    with pytest.raises(UsageError, match=message):
        plan(["--algo.advantage.estimator", *argv, *KL])
