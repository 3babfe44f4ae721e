"""The update step: the entropy bonus and its logging."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.local.batch import make_batch, token_log_probs
from training.local.config import AlgoConfig
from training.local.model import load_model, load_tokenizer
from training.local.policy import policy_update
from training.local.rollout import collect, make_envs


def _mean_entropy(model, records, pad_id):
    batch = make_batch(records, np.arange(len(records)), np.zeros(len(records)), pad_id)
    with torch.no_grad():
        _, entropy = token_log_probs(model, batch, with_entropy=True)
    mask = batch.response_mask
    return float((entropy * mask).sum() / mask.sum())


def _rollout(model_dir):
    """The tiny model's tokenizer and the step records of 2 groups x 3 two-step walks."""
    tok = load_tokenizer(model_dir)
    envs = make_envs("gigpo/NumberLine-v0", 2, 3, 0, None, {"max_position": 3, "max_steps": 2})
    model = load_model(model_dir, "float32")
    torch.manual_seed(0)
    records = collect(model, tok, envs, seed=1, max_new_tokens=6, temperature=1.0).records
    envs.close()
    return tok, records


def test_entropy_bonus_raises_the_entropy_and_is_logged(tiny_model_dir):
    tok, records = _rollout(tiny_model_dir)
    zero = np.zeros(len(records))  # no policy-gradient signal: only the bonus moves weights
    results = {}
    for coef in (0.0, 0.5):
        model = load_model(tiny_model_dir, "float32")
        before = _mean_entropy(model, records, tok.pad_token_id)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        stats = policy_update(
            model,
            None,
            optimizer,
            records,
            zero,
            AlgoConfig(entropy_coef=coef, minibatch_size=len(records)),
            pad_id=tok.pad_token_id,
            temperature=1.0,
            max_grad_norm=1.0,
            generator=np.random.default_rng(0),
        )
        assert abs(stats["entropy"] - before) < 1e-4  # logged before the step
        results[coef] = _mean_entropy(model, records, tok.pad_token_id) - before
    assert results[0.0] == 0.0  # zero advantages, no bonus: nothing moves
    assert results[0.5] > 1e-3


def test_gspo_update_equals_ppo_at_ratio_one_and_departs_after(tiny_model_dir):
    """With one advantage per sequence (each step record is its own row) and the policy at
    its rollout policy, GSPO's gradient is PPO's under per-sequence aggregation: the first
    step moves the weights the same; once the policy has moved, the two differ."""
    tok, records = _rollout(tiny_model_dir)
    advantages = np.linspace(-1.0, 1.0, len(records))
    weights = {}
    for loss, epochs in (("ppo", 1), ("gspo", 1), ("ppo", 3), ("gspo", 3)):
        model = load_model(tiny_model_dir, "float32")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        algo = AlgoConfig(
            policy_loss=loss,
            loss_agg="seq-mean-token-mean",
            minibatch_size=len(records),
            policy_epochs=epochs,
            clip_low=0.9,
            clip_high=10.0,
        )
        stats = policy_update(model, None, optimizer, records, advantages, algo,
                              pad_id=tok.pad_token_id, temperature=1.0, max_grad_norm=100.0,
                              generator=np.random.default_rng(0))  # fmt: skip
        assert np.isfinite(stats["clip_frac"])
        weights[loss, epochs] = torch.cat([p.detach().flatten() for p in model.parameters()])
    start_model = load_model(tiny_model_dir, "float32")
    start = torch.cat([p.detach().flatten() for p in start_model.parameters()])
    assert (weights["gspo", 1] - start).abs().max() > 1e-4  # it moved
    torch.testing.assert_close(weights["gspo", 1], weights["ppo", 1], atol=1e-6, rtol=1e-5)
    assert (weights["gspo", 3] - weights["ppo", 3]).abs().max() > 1e-4


def test_truncated_importance_sampling_weights_the_policy_gradient(tiny_model_dir):
    """``tis_cap`` (``rollout.tis_cap``) weights each token's clipped loss by
    ``min(exp(old - sampler), cap)``: records whose sampler log-probs sit log(4) above the
    update's own get weight 1/4 (a gradient 1/4 as long), log(4) below get 4, capped at 2;
    sampler log-probs equal to the update's leave the step exactly as without the setting."""
    tok, records = _rollout(tiny_model_dir)
    advantages = np.linspace(-1.0, 1.0, len(records))
    own = load_model(tiny_model_dir, "float32")
    batch = make_batch(records, np.arange(len(records)), advantages, tok.pad_token_id)
    with torch.no_grad():
        fresh = token_log_probs(own, batch, 1.0)
    exact = [fresh[i, batch.response_mask[i].bool()].tolist() for i in range(len(records))]
    norms = {}
    cases = (("plain", 0.0, 0.0), ("same", 0.0, 2.0), ("up", np.log(4), 2.0),
             ("down", -np.log(4), 2.0), ("down-wide", -np.log(4), 8.0))  # fmt: skip
    for name, shift, cap in cases:
        records.old_log_probs = [np.asarray(lp) + shift for lp in exact]
        model = load_model(tiny_model_dir, "float32")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        stats = policy_update(model, None, optimizer, records, advantages,
                              AlgoConfig(minibatch_size=len(records)), pad_id=tok.pad_token_id,
                              temperature=1.0, max_grad_norm=1e6, recompute=True, tis_cap=cap,
                              generator=np.random.default_rng(0))  # fmt: skip
        norms[name] = stats["grad_norm"]
        assert stats["rollout_logp_gap"] == pytest.approx(abs(shift), abs=1e-5)
    assert norms["same"] == pytest.approx(norms["plain"], rel=1e-6)
    assert norms["up"] == pytest.approx(norms["plain"] / 4, rel=1e-4)
    assert norms["down"] == pytest.approx(norms["plain"] * 2, rel=1e-4)
    assert norms["down-wide"] == pytest.approx(norms["plain"] * 4, rel=1e-4)
