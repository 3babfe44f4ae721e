"""Config: YAML + dotted CLI overrides into dataclasses, and clear errors for bad input."""

from __future__ import annotations

import pytest

from training.local.config import ConfigError, TrainConfig, load_config


def test_defaults_without_a_file():
    assert load_config() == TrainConfig()


def test_yaml_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("env:\n  id: gigpo/EZPoints-v0\n  num_groups: 3\nalgo:\n  gamma: 0.9\n")
    config = load_config(
        path,
        [
            "--algo.estimator=rloo",
            "--env.num_groups",
            "5",
            "--out",
            "runs/x",
            "--env.kwargs={max_steps: 4}",
            "--algo.similarity=null",
            "--optim.lr=1e-4",
            "--run.label=123",
            "--env.format_instruction=Answer like this: <action>+</action>",
            "--env.template={order: [format, current], current: '{observation}'}",
            "--algo.entropy_coef=0.01",
        ],
    )
    assert config.env.id == "gigpo/EZPoints-v0"
    assert config.env.num_groups == 5
    assert config.algo.gamma == 0.9
    assert config.algo.estimator == "rloo"
    assert config.run.out == "runs/x"
    assert config.env.kwargs == {"max_steps": 4}
    assert config.algo.similarity is None
    assert config.optim.lr == pytest.approx(1e-4)
    assert config.run.label == "123"
    # "key: value" text stays text for a string option (YAML would read a mapping).
    assert config.env.format_instruction == "Answer like this: <action>+</action>"
    assert config.env.template == {"order": ["format", "current"], "current": "{observation}"}
    assert config.algo.entropy_coef == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("text", "overrides", "message"),
    [
        ("algo:\n  nope: 1\n", [], "unknown config key"),
        ("envv:\n  id: x\n", [], "unknown config key"),
        ("env:\n  num_groups: two\n", [], "env.num_groups must be an int"),
        ("env: 3\n", [], "env must be a mapping"),
        ("- a\n- b\n", [], "must hold a mapping"),
        ("env: [unclosed\n", [], "not valid YAML"),
        ("", ["--algo.estimator=ppo"], "algo.estimator must be one of"),
        ("", ["--algo.nope=1"], "unknown config key"),
        ("", ["--nope=1"], "section.name"),
        ("", ["--foo.bar=1"], "unknown config section"),
        ("", ["algo.gamma=1"], "--key=value"),
        ("", ["--algo.gamma"], "has no value"),
        ("", ["--env.num_groups=0"], "env.num_groups must be >= 1"),
        ("", ["--env.group_size=1"], "group_size must be >= 2"),
        ("", ["--run.progress=maybe"], "true or false"),
        ("", ["--rollout.temperature=0"], "temperature must be > 0"),
        ("", ["--env.kwargs=[1, 2]"], "env.kwargs must be a mapping"),
        ("", ["--env.template={nope: x}"], "unknown PromptTemplate field"),
        ("", ["--env.template={order: [current, observation]}"], "order must name"),
        ("", ["--env.template={order: current}"], "order must be a list"),
        ("", ["--env.template={task: 3}"], "template.task must be a string"),
        ("", ["--algo.entropy_coef=-0.1"], "entropy_coef must be >= 0"),
    ],
)
def test_bad_config_is_a_clear_error(tmp_path, text, overrides, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(path, overrides)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "absent.yaml")


def test_warmup_ramps_the_learning_rate_linearly():
    from training.local.train import learning_rate

    config = load_config(None, ["--optim.lr=1e-4", "--optim.warmup_iterations=4"])
    rates = [learning_rate(config, k) for k in range(6)]
    assert rates == pytest.approx([2.5e-5, 5e-5, 7.5e-5, 1e-4, 1e-4, 1e-4])
    config = load_config(None, ["--optim.lr=1e-4"])
    assert learning_rate(config, 0) == pytest.approx(1e-4)
    with pytest.raises(ConfigError, match="warmup_iterations must be >= 0"):
        load_config(None, ["--optim.warmup_iterations=-1"])
