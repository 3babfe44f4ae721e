"""docs/verl.md's commands and example, run from the page: each of the paper's runs dry-runs
and resolves to what the page says it is; the README's fourth way names the launcher."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from doc_blocks import code_blocks, section_text

from training.verl import launch

RUNS = code_blocks("docs/verl.md", "The paper's runs", language="bash")
#: What each run's verl command must hold (the page's words, checked on the real output).
EXPECTED = [
    ["data.max_prompt_length=2048", "actor_rollout_ref.rollout.n=8", "data.train_batch_size=16",
     "+algorithm.gigpo.mode=mean_std_norm", "+algorithm.gigpo.invalid_penalty=0.1"],
    ["data.max_prompt_length=4096", "+algorithm.gigpo.mode=mean_norm",
     "actor_rollout_ref.actor.ppo_mini_batch_size=64"],
    ["actor_rollout_ref.rollout.n=5", "data.train_batch_size=256",
     "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct",
     "+algorithm.gigpo.enable_similarity=true", "+algorithm.gigpo.similarity_thresh=0.9"],
]  # fmt: skip


def test_the_page_has_the_three_runs():
    assert len(RUNS) == len(EXPECTED) == 3


@pytest.mark.parametrize("index", range(3))
def test_each_papers_run_dry_runs_as_documented(index, capsys):
    words = shlex.split(RUNS[index].replace("\\\n", " "))
    assert words[:2] == ["gigpo-verl", "--dry-run"]
    assert launch.main(words[1:]) == 0
    out = capsys.readouterr().out
    command = out.split("# verl:\n", 1)[1].split()
    for part in EXPECTED[index]:
        assert part in command, part
    assert "actor_rollout_ref.rollout.agent.default_agent_loop=gigpo" in command


def test_the_readme_names_the_fourth_way():
    readme = section_text("README.md", "Four ways to use it")
    assert "gigpo-verl" in readme and "docs/verl.md" in readme


def _composed(args: list[str], capsys) -> tuple[object, list[str]]:
    """``gigpo-verl args`` (a dry run), its resolved overrides composed by Hydra in verl
    0.9.1's own ``ppo_trainer`` config as ``main_ppo`` composes them: (config, overrides)."""
    from hydra import compose, initialize_config_dir
    from verl.trainer import main_ppo

    assert launch.main(args) == 0
    command = shlex.split(capsys.readouterr().out.split("# verl:\n", 1)[1])
    overrides = command[command.index("verl.trainer.main_ppo") + 1 :]
    folder = str(Path(main_ppo.__file__).parent / "config")
    with initialize_config_dir(config_dir=folder, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides), overrides


@pytest.mark.parametrize("index", range(3))
def test_each_run_composes_in_verls_own_hydra_config(index, capsys):
    """The resolved overrides are keys verl's config has (or, ``+``, the estimators'
    subsections)."""
    words = shlex.split(RUNS[index].replace("\\\n", " "))
    config, overrides = _composed(words[1:], capsys)
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == "gigpo"
    assert config.algorithm.adv_estimator == "gigpo"
    given = dict(word.lstrip("+").split("=", 1) for word in overrides)
    assert str(config.actor_rollout_ref.rollout.n) == given["actor_rollout_ref.rollout.n"]
    assert str(config.algorithm.gigpo.mode) == given["algorithm.gigpo.mode"]
    assert config.data.max_prompt_length == int(given["data.max_prompt_length"])


@pytest.mark.parametrize(
    "args",
    [[], ["algorithm.adv_estimator=hgpo", "algorithm.hgpo.base_group=true"],
     ["algorithm.adv_estimator=graphgpo", "algorithm.graphgpo.episode_advantage_w=0.5"],
     ["algorithm.adv_estimator=grpo"]],
)  # fmt: skip
def test_the_launchers_defaults_compose_for_every_estimator(args, capsys):
    config, _ = _composed(["--dry-run", *args], capsys)
    estimator = config.algorithm.adv_estimator
    assert estimator == (args[0].split("=")[1] if args else "gigpo")
    if estimator == "hgpo":
        assert config.algorithm.hgpo.base_group is True and config.algorithm.gamma == 0.95
        assert config.algorithm.hgpo.history_length == 2  # the prompt's window, --history_length
    if estimator == "graphgpo":
        assert config.algorithm.gamma == 0.1
