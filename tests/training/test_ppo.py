"""PPO with a critic in the local trainer: config rules, the critic's token layout, GAE on
real records, a run whose value loss falls, exact resume with the critic's state."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from training.local.batch import make_batch
from training.local.checkpoint import read_checkpoint
from training.local.config import ConfigError, load_config
from training.local.critic import ppo_targets, record_values, token_values
from training.local.metrics import read_metrics
from training.local.model import load_critic
from training.local.train import train
from training.records import StepRecords

NUMBERLINE = [
    "--env.kwargs={max_position: 2, max_steps: 3}",
    "--env.history_length=0",
    "--env.template={task: 'Number line.', order: [current], current: '{observation}'}",
    "--rollout.max_new_tokens=3",
    "--rollout.response_prefix=<action>",
    "--rollout.stop_text=</action>",
    "--algo.estimator=ppo",
    "--algo.invalid_penalty=1.0",
]


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["--algo.estimator=ppo", "--algo.step_weight=1.0"], "algo.step_weight"),
        (["--algo.estimator=ppo", "--algo.norm=mean"], "algo.norm"),
        (["--algo.estimator=ppo", "--algo.episode_stats=step"], "algo.episode_stats"),
        (["--algo.estimator=ppo", "--algo.lam=1.5"], "algo.lam"),
        (["--algo.estimator=ppo", "--algo.value_clip=0"], "algo.value_clip"),
        (["--algo.estimator=ppo", "--optim.critic_lr=-1"], "optim.critic_lr"),
        (["--algo.estimator=grpo", "--algo.lam=0.9"], "algo.lam"),
        (["--algo.estimator=gigpo", "--algo.value_clip=0.2"], "algo.value_clip"),
        (["--algo.estimator=rloo", "--optim.critic_lr=1e-4"], "optim.critic_lr"),
        (["--algo.estimator=a2c"], "algo.estimator"),
    ],
)
def test_ppo_settings_are_checked_at_load(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config("smoke", overrides)


def test_ppo_needs_no_group():
    config = load_config("smoke", ["--algo.estimator=ppo", "--env.group_size=1"])
    assert config.env.group_size == 1
    with pytest.raises(ConfigError, match="group_size"):
        load_config("smoke", ["--algo.estimator=grpo", "--env.group_size=1"])


def _records(tokenizer) -> StepRecords:
    shared = tokenizer("Number line. You stand at a point and walk to the target: ")["input_ids"]
    prompts = [shared + tokenizer("Target: 2 Current: 0")["input_ids"], shared + [5]]
    responses = [tokenizer("<action>+</action>")["input_ids"], [7, 8, 9, 10, 11]]
    return StepRecords(
        prompt_ids=prompts,
        response_ids=responses,
        old_log_probs=[[0.0] * len(r) for r in responses],
        rewards=[-1.0, 1.0],
        anchors=["a", "b"],
        anchor_texts=[None, None],
        group_ids=[0, 0],
        traj_ids=[0, 0],
        is_action_valid=[True, False],
    )


@pytest.mark.parametrize("share_prefix", [False, True])
def test_critic_values_are_the_values_of_each_tokens_prefix(tiny_model_dir, share_prefix):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    critic = load_critic(tiny_model_dir, "float32")
    torch.nn.init.normal_(critic.value_head.weight)  # a zero head would hide any misalignment
    records = _records(tokenizer)
    rows = np.arange(2)
    batch = make_batch(records, rows, np.zeros(2), 0, share_prefix=share_prefix)
    assert (batch.prefix_length > 0) == share_prefix
    with torch.no_grad():
        laid = token_values(critic, batch)
        got = record_values(critic, records, 0, batch_size=2, share_prefix=share_prefix)
    for i in rows:
        p, r = len(records.prompt_ids[i]), len(records.response_ids[i])
        seq = records.prompt_ids[i] + records.response_ids[i]
        with torch.no_grad():
            alone = critic(torch.tensor([seq]), torch.ones(1, len(seq), dtype=torch.long))[0]
        # The value of response token j is V(tokens before it): position p - 1 + j.
        expected = alone[p - 1 : p - 1 + r].numpy()
        np.testing.assert_allclose(laid[i, p - 1 : p - 1 + r].numpy(), expected, atol=1e-5)
        np.testing.assert_allclose(got[i], expected, atol=1e-5)
        assert len(got[i]) == r


def test_ppo_targets_on_records_by_hand(tiny_model_dir):
    from transformers import AutoTokenizer

    from training.local.config import AlgoConfig

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    critic = load_critic(tiny_model_dir, "float32")  # zero head: every value is 0
    records = _records(tokenizer)
    algo = AlgoConfig(estimator="ppo", invalid_penalty=0.5, minibatch_size=1)
    targets = ppo_targets(critic, records, algo, pad_id=0)
    # One trajectory, gamma = lam = 1, values 0: each token's return is the rewards from its
    # turn on: turn 0: -1 + (1 - 0.5) = -0.5; turn 1 (invalid): 1 - 0.5 = 0.5.
    r0, r1 = len(records.response_ids[0]), len(records.response_ids[1])
    np.testing.assert_allclose(targets.returns[0], [-0.5] * r0)
    np.testing.assert_allclose(targets.returns[1], [0.5] * r1)
    flat = np.array([-0.5] * r0 + [0.5] * r1)
    whitened = (flat - flat.mean()) / flat.std()
    np.testing.assert_allclose(np.concatenate(targets.advantages), whitened, atol=1e-6)
    np.testing.assert_allclose(targets.summary.returns, [-0.5, 0.5])
    assert targets.stats["value_mean"] == 0.0


def _ppo_config(tiny_config, out, *extra):
    return tiny_config(
        "gigpo/NumberLine-v0",
        *NUMBERLINE,
        "--env.num_groups=4",
        "--env.group_size=4",
        "--algo.minibatch_size=16",
        "--optim.critic_lr=3e-3",
        *extra,
        out=out,
    )


@pytest.mark.slow
def test_value_loss_falls_as_the_critic_learns_the_returns(tiny_config, tmp_path):
    config = _ppo_config(tiny_config, tmp_path / "run", "--run.iterations=10", "--eval.groups=0")
    rows = train(config)
    losses = [r["value_loss"] for r in rows]
    assert all(math.isfinite(v) for v in losses)
    # The zero-initialised critic starts at 0.5 * E[R^2] (measured: 1.9); it learns the
    # level of the returns (measured: 0.5-0.9 over the last iterations, the returns' spread).
    assert rows[0]["value_mean"] == 0.0
    assert np.mean(losses[-3:]) < 0.6 * losses[0], losses
    gaps = [abs(r["value_mean"] - r["return_mean"]) for r in rows]
    assert np.mean(gaps[-3:]) < 0.5 * gaps[0], gaps
    for row in rows:
        for key in ("value_clip_frac", "critic_grad_norm", "return_mean", "loss", "clip_frac"):
            assert math.isfinite(row[key]), key
    state = read_checkpoint(tmp_path / "run" / "checkpoint")
    assert "value_head.weight" in state["critic"] and state["critic_optimizer"]["state"]


@pytest.mark.slow
def test_ppo_resume_reproduces_the_next_iteration_and_the_critic(tiny_config, tmp_path):
    straight = _ppo_config(tiny_config, tmp_path / "straight")
    rows = train(straight)
    train(_ppo_config(tiny_config, tmp_path / "resumed", "--run.iterations=1"))
    resumed_rows = train(_ppo_config(tiny_config, tmp_path / "resumed"))

    assert [r["iteration"] for r in resumed_rows] == [1]
    for key in rows[1].keys() - {k for k in rows[1] if k.startswith("time_")}:
        assert resumed_rows[0][key] == rows[1][key], key
    a = read_checkpoint(tmp_path / "straight" / "checkpoint")
    b = read_checkpoint(tmp_path / "resumed" / "checkpoint")
    for part in ("model", "critic"):
        assert all(torch.equal(a[part][k], b[part][k]) for k in a[part]), part
    assert [r["iteration"] for r in read_metrics(tmp_path / "resumed")] == [0, 1]


@pytest.mark.slow
def test_a_checkpoint_without_a_critic_is_a_clear_error(tiny_config, tmp_path):
    out = tmp_path / "run"
    train(tiny_config("gigpo/NumberLine-v0", *NUMBERLINE[:-2], "--run.iterations=1", out=out))
    config = _ppo_config(tiny_config, out, "--run.allow_config_change=true")
    with pytest.raises(RuntimeError, match="holds no critic"):
        train(config)


@pytest.mark.slow
def test_ppo_saves_rollouts_the_viewer_reads(tiny_config, tmp_path):
    from training.record_files import read_rollouts, rollout_path

    out = tmp_path / "run"
    train(_ppo_config(tiny_config, out, "--run.iterations=1"))
    header, rows = read_rollouts(rollout_path(out, 0))
    assert header["estimator"] == "ppo" and len(rows) == header["records"] > 0
    assert all(r["episode_advantage"] == 0.0 and r["step_advantage"] == 0.0 for r in rows)
    assert any(r["advantage"] != 0.0 for r in rows)
