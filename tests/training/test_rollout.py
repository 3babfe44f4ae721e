"""Rollouts with the tiny model: step records, sampling log-probs, response cuts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.advantages import critic_free_advantages
from training.local.batch import make_batch, token_log_probs
from training.local.model import load_model, load_tokenizer
from training.local.rollout import collect, generate, make_envs, render_prompts


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_dir):
    return load_model(tiny_model_dir, "float32"), load_tokenizer(tiny_model_dir)


def test_records_follow_the_contract_and_log_probs_match_a_forward_pass(model_and_tokenizer):
    model, tok = model_and_tokenizer
    # EZPoints deals different cards per group, so prompts differ in length (left padding).
    envs = make_envs("gigpo/EZPoints-v0", 3, 2, 1, None, {"max_steps": 3})
    torch.manual_seed(0)
    rollout = collect(model, tok, envs, seed=4, max_new_tokens=8, temperature=1.0)
    rec = rollout.records
    assert len({len(p) for p in rec.prompt_ids}) > 1
    n = len(rec)
    assert n == int(rollout.episode_lengths.sum()) and n >= 6
    for field in ("response_ids", "old_log_probs", "rewards", "anchors", "group_ids", "traj_ids"):
        assert len(getattr(rec, field)) == n
    assert all(len(a) == len(b) for a, b in zip(rec.response_ids, rec.old_log_probs, strict=True))
    assert rec.group_ids == [t // 2 for t in rec.traj_ids]
    # Rows of a trajectory in time order, one per step the episode took.
    for traj in set(rec.traj_ids):
        rows = [i for i, t in enumerate(rec.traj_ids) if t == traj]
        assert rows == sorted(rows) and len(rows) == rollout.episode_lengths[traj]
    assert rollout.episode_lengths.max() <= 3  # every episode ends at the env's max_steps

    batch = make_batch(rec, np.arange(n), np.zeros(n), tok.pad_token_id)
    with torch.no_grad():
        log_probs = token_log_probs(model, batch)
    mask = batch.response_mask.bool()
    assert torch.allclose(log_probs[mask], batch.old_log_probs[mask], atol=1e-4)
    envs.close()


def test_stop_text_ends_each_response_at_its_closing_tag(model_and_tokenizer):
    model, tok = model_and_tokenizer
    envs = make_envs("gigpo/Sokoban-v0", 2, 4, 0, None, {})
    _, infos = envs.reset(seed=0)
    prompts = render_prompts(tok, [list(m) for m in infos["messages"]], "<action>")
    torch.manual_seed(1)
    ids, log_probs = generate(
        model, tok, prompts, max_new_tokens=12, temperature=1.0, stop_text="</action>"
    )
    cut = 0
    for response, lps in zip(ids, log_probs, strict=True):
        assert 1 <= len(response) == len(lps) <= 12
        text = tok.decode(response, skip_special_tokens=False)
        if "</action>" in text:
            cut += 1
            assert "</action>" not in tok.decode(response[:-1], skip_special_tokens=False)
    assert cut > 0
    envs.close()


def test_grpo_and_rloo_give_every_step_its_episode_advantage():
    from training.local.config import AlgoConfig
    from training.records import StepRecords

    rec = StepRecords(
        rewards=[0.0, 1.0, 0.0, 0.0, 0.0],
        anchors=["a", "b", "a", "c", "a"],
        anchor_texts=["A", "B", "A", "C", "A"],
        group_ids=[0, 0, 0, 0, 0],
        traj_ids=[0, 0, 1, 1, 2],
        is_action_valid=[True, True, True, False, True],
    )
    grpo = critic_free_advantages(rec, AlgoConfig(estimator="grpo", norm="mean_std")).advantages
    # Scores 1, 0, 0 (no penalty): mean 1/3, std sqrt(1/3) over the three trajectories.
    assert grpo[0] == grpo[1] == pytest.approx((2 / 3) / (np.sqrt(1 / 3) + 1e-6))
    assert grpo[2] == grpo[3] == grpo[4] == pytest.approx((-1 / 3) / (np.sqrt(1 / 3) + 1e-6))
    rloo = critic_free_advantages(rec, AlgoConfig(estimator="rloo", invalid_penalty=0.5)).advantages
    # The invalid row 3 scores 0 - 0.5; trajectory 1's value is the mean of its rows, -0.25.
    assert rloo[0] == pytest.approx(1.0 - (-0.25 + 0.0) / 2)
    assert rloo[2] == pytest.approx(0.0 - (1.0 + 0.0) / 2)
    assert rloo[3] == pytest.approx(-0.5 - (1.0 + 0.0) / 2)
    # The default norm, mean: the scores less their mean, no std.
    by_default = critic_free_advantages(rec, AlgoConfig(estimator="grpo")).advantages
    assert np.asarray(by_default) == pytest.approx([2 / 3, 2 / 3, -1 / 3, -1 / 3, -1 / 3])
    gigpo = critic_free_advantages(rec, AlgoConfig(estimator="gigpo", norm="mean_std"))
    # Rows 0, 2 and 4 share state "a" with discounted returns 0.95 * 1, 0, 0: mean 0.95 / 3,
    # unbiased std 0.95 / sqrt(3). Rows 1 and 3 are alone in their step group: A_S = 0.
    s = 0.95 / np.sqrt(3) + 1e-6
    expected_step = [(0.95 - 0.95 / 3) / s, 0.0, (-0.95 / 3) / s, 0.0, (-0.95 / 3) / s]
    assert np.asarray(gigpo.step_advantages) == pytest.approx(expected_step, abs=1e-6)
    assert np.asarray(gigpo.advantages) == pytest.approx(grpo + np.asarray(expected_step))


def test_template_overrides_reach_the_prompts():
    order = {"order": ["format", "admissible", "history", "current"], "current": "{observation}"}
    envs = make_envs("gigpo/NumberLine-v0", 2, 2, 0, "Answer: <action>+</action>", {}, order)
    _, infos = envs.reset(seed=0)
    for messages, raw in zip(infos["messages"], infos["raw_observation"], strict=True):
        user = messages[1]["content"]
        assert user.startswith("Answer: <action>+</action>") and user.endswith("\n\n" + raw)
    envs.close()
    with pytest.raises(ValueError, match="order"):
        make_envs("gigpo/NumberLine-v0", 1, 2, 0, None, {}, {"order": ["nope"]})
