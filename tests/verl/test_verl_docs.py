"""docs/verl.md's commands, run from the page: each passes verl 0.9.1's own checks (the dry
run composes verl's config with Hydra and runs its ``validate_config``) and resolves to what
the page says, the paper's runs to verl-agent's batch in verl's counting; the launcher's
defaults pass for every env and estimator; the README's fourth way names the launcher."""

from __future__ import annotations

import shlex

import pytest
from doc_blocks import code_blocks, section_text

from training.verl import launch

CHECKED = "# checked: verl 0.9.1's Hydra composition and validate_config passed"
RUNS = code_blocks("docs/verl.md", "The paper's runs", language="bash")
#: What each run's verl command must hold (the page's words, checked on the real output):
#: the prompt cap, the group, the tasks a step, the rows an optimizer step (verl-agent's
#: ppo_mini_batch_size, in rows: 256, 64, 512 -> 520), the estimator's settings.
EXPECTED = [
    ["data.max_prompt_length=2048", "actor_rollout_ref.rollout.n=8", "data.train_batch_size=16",
     "actor_rollout_ref.actor.ppo_mini_batch_size=32", "+algorithm.gigpo.mode=mean_std_norm",
     "+algorithm.gigpo.invalid_penalty=0.1"],
    ["data.max_prompt_length=4096", "+algorithm.gigpo.mode=mean_norm",
     "actor_rollout_ref.actor.ppo_mini_batch_size=8", "data.train_batch_size=16"],
    ["actor_rollout_ref.rollout.n=5", "data.train_batch_size=256",
     "actor_rollout_ref.actor.ppo_mini_batch_size=104",
     "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct",
     "+algorithm.gigpo.enable_similarity=true", "+algorithm.gigpo.similarity_thresh=0.9"],
]  # fmt: skip
ROWS = [256, 64, 520]


def _words(block: str) -> list[str]:
    return shlex.split(block.replace("\\\n", " "))


def _dry_run(args: list[str], capsys) -> str:
    assert launch.main(args) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_the_page_has_the_three_runs():
    assert len(RUNS) == len(EXPECTED) == 3


@pytest.mark.parametrize("index", range(3))
def test_each_papers_run_passes_verls_checks_as_documented(index, capsys):
    words = _words(RUNS[index])
    assert words[:2] == ["gigpo-verl", "--dry-run"]
    out = _dry_run(words[1:], capsys)
    assert CHECKED in out
    command = shlex.split(out.split("# verl:\n", 1)[1])
    for part in EXPECTED[index]:
        assert part in command, part
    assert "actor_rollout_ref.rollout.agent.default_agent_loop=gigpo" in command
    assert f"# update: {ROWS[index]} step rows an optimizer step" in out


def test_the_batch_lines_on_the_page_are_what_the_alfworld_run_prints(capsys):
    shown = code_blocks("docs/verl.md", "Batch sizes", language="text")[0].splitlines()
    out = _dry_run(_words(RUNS[0])[1:], capsys)
    printed = [line for line in out.splitlines() if line.startswith(("# batch", "# update",
                                                                     "# micro"))]  # fmt: skip
    assert printed == shown


def test_the_install_sections_command_passes_verls_checks(capsys):
    (block,) = code_blocks("docs/verl.md", "Install and run", language="bash")
    (line,) = [ln for ln in block.splitlines() if ln.startswith("gigpo-verl")]
    out = _dry_run(["--dry-run", *shlex.split(line)[1:]], capsys)
    assert CHECKED in out


def test_the_cpu_command_passes_verls_checks_with_the_cpu_settings(capsys, tmp_path):
    """docs/verl.md's CPU command (tests/verl_e2e runs it whole): verl's checks pass on it,
    one device, the packaged tiny model, and its folder is the one the page names."""
    (block,) = code_blocks("docs/verl.md", "Try it on CPU first", language="bash")
    words = _words(block[block.index("gigpo-verl") :])
    assert words[0] == "gigpo-verl" and "--dry-run" not in words
    out = _dry_run(["--dry-run", *words[1:]], capsys)
    assert CHECKED in out
    command = shlex.split(out.split("# verl:\n", 1)[1])
    assert "trainer.device=cpu" in command and "trainer.n_gpus_per_node=1" in command
    assert "trainer.total_training_steps=2" in command
    assert any(w.startswith("actor_rollout_ref.model.path=") and
               w.endswith("runs/verl_cpu/models/tiny-random") for w in command)  # fmt: skip


def test_the_readme_names_the_fourth_way():
    readme = section_text("README.md", "Four ways to use it")
    assert "gigpo-verl" in readme and "docs/verl.md" in readme


@pytest.mark.parametrize(
    "args",
    [[], ["algorithm.adv_estimator=hgpo", "algorithm.hgpo.base_group=true"],
     ["algorithm.adv_estimator=graphgpo", "algorithm.graphgpo.episode_advantage_w=0.5"],
     ["algorithm.adv_estimator=grpo"], ["trainer.device=cpu"],
     *[["--env", env] for env in ("gigpo/ALFWorld-v0", "gigpo/WebShop-v0", "gigpo/SearchQA-v0",
                                  "gigpo/NumberLine-v0", "gigpo/EZPoints-v0",
                                  "gigpo/Points24-v0", "gigpo/Blackjack-v0")]],
)  # fmt: skip
def test_the_launchers_defaults_pass_verls_checks_for_every_env_and_estimator(args, capsys):
    from training.verl.checks import compose

    out = _dry_run(["--dry-run", *args], capsys)
    assert CHECKED in out
    command = shlex.split(out.split("# verl:\n", 1)[1])
    overrides = [w for w in command[command.index("verl.trainer.main_ppo") + 1 :]
                 if not w.startswith("hydra.")]  # fmt: skip
    config = compose(overrides)  # what main_ppo composes
    estimator = config.algorithm.adv_estimator
    assert estimator == (args[0].split("=")[1] if args and "adv_estimator" in args[0] else "gigpo")
    if estimator == "hgpo":
        assert config.algorithm.hgpo.base_group is True and config.algorithm.gamma == 0.95
        assert config.algorithm.hgpo.history_length == 2  # the prompt's window, --history_length
    if estimator == "graphgpo":
        assert config.algorithm.gamma == 0.1
    rows = config.actor_rollout_ref.actor.ppo_mini_batch_size * config.actor_rollout_ref.rollout.n
    gpus = config.trainer.n_gpus_per_node * config.trainer.nnodes
    assert rows % gpus == 0 and config.actor_rollout_ref.actor.use_dynamic_bsz is True
