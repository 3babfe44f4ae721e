"""Updates by token budget: a minibatch run as micro-batches (gradients accumulated) takes the
same optimizer step as one pass over it, for the policy under every ``loss_agg`` and for
PPO's critic; gradient checkpointing changes nothing but memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gigpo_algo.losses import AGGREGATIONS
from training.local.batch import micro_batches, minibatch_denominators
from training.local.config import AlgoConfig
from training.local.critic import ppo_targets
from training.local.model import (
    checkpointing,
    enable_checkpointing,
    load_critic,
    load_model,
    load_tokenizer,
)
from training.local.policy import policy_update
from training.local.rollout import collect, make_envs
from training.records import StepRecords


@pytest.fixture(scope="module")
def played(tiny_model_dir):
    """The tiny model's tokenizer and the step records of 2 groups x 3 walks of up to 3 steps:
    prompts of several lengths (the history grows), responses cut at 1 to 8 tokens."""
    tok = load_tokenizer(tiny_model_dir)
    envs = make_envs("gigpo/NumberLine-v0", 2, 3, 2, None, {"max_position": 3, "max_steps": 3})
    model = load_model(tiny_model_dir, "float32")
    torch.manual_seed(0)
    records = collect(model, tok, envs, seed=1, max_new_tokens=8, temperature=1.0).records
    envs.close()
    pairs = zip(records.prompt_ids, records.response_ids, strict=True)
    lengths = {len(p) + len(r) for p, r in pairs}
    assert len(records) >= 12 and len(lengths) > 3
    return tok, records


def _longest(records: StepRecords) -> int:
    """Tokens of the longest prompt + response."""
    pairs = zip(records.prompt_ids, records.response_ids, strict=True)
    return max(len(p) + len(r) for p, r in pairs)


def _weights(network) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in network.parameters()])


def test_micro_batches_keep_the_budget_and_every_row_once():
    lengths = [30, 5, 12, 12, 40, 7, 3, 25]
    records = StepRecords(prompt_ids=[[1] * (n - 2) for n in lengths],
                          response_ids=[[2, 2]] * len(lengths))  # fmt: skip
    rows = np.array([7, 0, 3, 5, 1, 4, 6, 2])
    parts = micro_batches(records, rows, 36)
    assert sorted(np.concatenate(parts).tolist()) == sorted(rows.tolist())
    for part in parts:
        longest = max(lengths[i] for i in part)
        assert len(part) == 1 or len(part) * longest <= 36
    assert [4] in [p.tolist() for p in parts]  # 40 tokens, over the budget: alone
    assert [p.tolist() for p in micro_batches(records, rows, 36)] == [p.tolist() for p in parts]
    assert [p.tolist() for p in micro_batches(records, rows, 0)] == [rows.tolist()]
    assert len(micro_batches(records, rows, 1)) == len(rows)


def _update(model_dir, records, pad_id, algo, *, reference=True, checkpointing=False,
            critic=False, dtype="float32", share_prefix=True):  # fmt: skip
    """One policy update of a fresh tiny model (SGD, no clipping of the gradient norm),
    with a reference for KL and an entropy bonus; returns the policy (and the critic)."""
    model = load_model(model_dir, "float32")
    if checkpointing:
        enable_checkpointing(model)
    ref = load_model(model_dir, "float32", trainable=False) if reference else None
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    n = len(records)
    advantages = np.linspace(-1.0, 1.0, n)
    value_model = critic_optimizer = targets = None
    if critic:
        value_model = load_critic(model_dir, "float32")
        critic_optimizer = torch.optim.SGD(value_model.parameters(), lr=0.5)
        targets = ppo_targets(value_model, records, algo, pad_id=pad_id)
        advantages = targets.summary.advantages
    stats = policy_update(
        model, ref, optimizer, records, advantages, algo, pad_id=pad_id, temperature=1.0,
        max_grad_norm=1e6, generator=np.random.default_rng(0), share_prefix=share_prefix,
        critic_targets=targets, critic=value_model, critic_optimizer=critic_optimizer,
        compute_dtype=dtype,
    )  # fmt: skip
    return model, value_model, stats


@pytest.mark.parametrize("loss_agg", AGGREGATIONS)
def test_micro_batched_step_equals_the_whole_minibatch(tiny_model_dir, played, loss_agg):
    tok, records = played
    algo = {"loss_agg": loss_agg, "minibatch_size": len(records), "policy_epochs": 2,
            "kl_coef": 0.1, "entropy_coef": 0.05, "clip_low": 0.1, "clip_high": 0.1}  # fmt: skip
    if loss_agg == "seq-mean-token-mean":
        algo["policy_loss"] = "gspo"
    budget = 3 * _longest(records)
    rows = np.arange(len(records))
    assert len(micro_batches(records, rows, budget)) >= 3
    whole, _, whole_stats = _update(tiny_model_dir, records, tok.pad_token_id, AlgoConfig(**algo))
    cut, _, cut_stats = _update(tiny_model_dir, records, tok.pad_token_id,
                                AlgoConfig(**algo, micro_batch_tokens=budget))  # fmt: skip
    start = _weights(load_model(tiny_model_dir, "float32"))
    assert (_weights(whole) - start).abs().max() > 1e-3  # the step moved the weights
    torch.testing.assert_close(_weights(cut), _weights(whole), atol=2e-6, rtol=1e-5)
    assert cut_stats["micro_batches"] >= 3 and whole_stats["micro_batches"] == 1
    for name in ("loss", "kl", "entropy", "clip_frac", "ratio_max", "grad_norm"):
        assert cut_stats[name] == pytest.approx(whole_stats[name], rel=1e-5, abs=1e-6), name


def test_a_micro_batch_divided_by_its_own_normaliser_would_differ(played):
    """The check above can fail: each micro-batch's own token mean, summed, is not the
    minibatch's token mean (the mistake gradient accumulation invites)."""
    _, records = played
    rows = np.arange(len(records))
    parts = micro_batches(records, rows, 40)
    whole = minibatch_denominators(records, rows, "token-mean").tokens
    own = [minibatch_denominators(records, part, "token-mean").tokens for part in parts]
    assert sum(own) == whole and len(parts) > 1
    lengths = [sum(len(records.response_ids[i]) for i in part) for part in parts]
    summed = sum(n / d for n, d in zip(lengths, own, strict=True))
    assert summed != pytest.approx(sum(lengths) / whole)


def test_micro_batched_critic_step_equals_the_whole_minibatch(tiny_model_dir, played):
    tok, records = played
    algo = {"estimator": "ppo", "minibatch_size": len(records), "policy_epochs": 2,
            "kl_coef": 0.0}  # fmt: skip
    budget = 2 * _longest(records)
    whole_policy, whole, whole_stats = _update(
        tiny_model_dir, records, tok.pad_token_id, AlgoConfig(**algo), reference=False,
        critic=True,
    )  # fmt: skip
    cut_policy, cut, cut_stats = _update(
        tiny_model_dir, records, tok.pad_token_id,
        AlgoConfig(**algo, micro_batch_tokens=budget), reference=False, critic=True,
    )  # fmt: skip
    start = _weights(load_critic(tiny_model_dir, "float32"))
    assert (_weights(whole) - start).abs().max() > 1e-3
    torch.testing.assert_close(_weights(cut), _weights(whole), atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(_weights(cut_policy), _weights(whole_policy), atol=2e-6,
                               rtol=1e-5)  # fmt: skip
    for name in ("value_loss", "value_clip_frac", "critic_grad_norm"):
        assert cut_stats[name] == pytest.approx(whole_stats[name], rel=1e-5, abs=1e-7), name


def test_gradient_checkpointing_changes_no_step(tiny_model_dir, played):
    """Micro-batches of several rows sharing a prompt start: the shared prefix's cache runs
    apart without checkpointing and cannot with it (a recomputed layer drops the cache)."""
    tok, records = played
    longest = _longest(records)
    algo = AlgoConfig(minibatch_size=8, kl_coef=0.1, micro_batch_tokens=4 * longest)
    plain, _, plain_stats = _update(tiny_model_dir, records, tok.pad_token_id, algo,
                                    share_prefix=False)  # fmt: skip
    kept, _, kept_stats = _update(tiny_model_dir, records, tok.pad_token_id, algo,
                                  checkpointing=True)  # fmt: skip
    assert checkpointing(kept) and not checkpointing(plain)
    torch.testing.assert_close(_weights(kept), _weights(plain), atol=1e-6, rtol=1e-5)
    assert kept_stats["loss"] == pytest.approx(plain_stats["loss"], rel=1e-5)


def test_checkpointing_keeps_frozen_layers_out_of_the_backward_pass(tiny_model_dir):
    """model.trainable_layers stops the backward pass early; checkpointing keeps it so."""
    from training.local.model import limit_trainable_layers

    model = load_model(tiny_model_dir, "float32")
    limit_trainable_layers(model, 1)
    enable_checkpointing(model)
    model.train()
    embedded = model.get_input_embeddings()(torch.tensor([[5, 6, 7]]))
    assert not embedded.requires_grad
