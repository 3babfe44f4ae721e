"""Shared-prefix computation gives the same tokens, log-probs and gradients as full rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.local.batch import make_batch, token_log_probs
from training.local.model import load_model, load_tokenizer
from training.local.prefix import MIN_SHARED, common_prefix_length, shared_prefix_length
from training.local.rollout import collect, generate, make_envs, render_prompts


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_dir):
    return load_model(tiny_model_dir, "float32"), load_tokenizer(tiny_model_dir)


def test_common_prefix_length_stops_at_the_first_difference_and_keeps_a_token():
    assert common_prefix_length([[1, 2, 3, 4], [1, 2, 5]]) == 2
    assert common_prefix_length([[1, 2, 3], [1, 2, 3, 4]]) == 2  # keeps 1 token of the short one
    assert common_prefix_length([[1, 2, 3], [1, 2, 3]], keep=2) == 1
    assert common_prefix_length([[7, 2], [8, 2]]) == 0
    assert common_prefix_length([[1, 2, 3]]) == 0  # one row: nothing to share
    assert common_prefix_length([]) == 0
    assert common_prefix_length([[1], [1]]) == 0
    long = list(range(40))
    assert shared_prefix_length([long + [1], long + [2]]) == 40
    assert shared_prefix_length([long[: MIN_SHARED - 1] + [1], long[: MIN_SHARED - 1] + [2]]) == 0


def _prompts(tok, env_id: str, groups: int, size: int, kwargs: dict):
    envs = make_envs(env_id, groups, size, 1, None, kwargs)
    _, infos = envs.reset(seed=3)
    prompts = render_prompts(tok, [list(m) for m in infos["messages"]], "<action>")
    envs.close()
    return prompts


def test_generation_on_a_shared_prefix_matches_full_prompts(model_and_tokenizer):
    model, tok = model_and_tokenizer
    # EZPoints deals different cards per group: prompts share their start, differ in length.
    prompts = _prompts(tok, "gigpo/EZPoints-v0", 3, 2, {})
    assert len({len(p) for p in prompts}) > 1
    assert shared_prefix_length(prompts) >= MIN_SHARED
    full = generate(model, tok, prompts, max_new_tokens=10, temperature=0.0)
    shared = generate(model, tok, prompts, max_new_tokens=10, temperature=0.0, share_prefix=True)
    assert full[0] == shared[0]
    for a, b in zip(full[1], shared[1], strict=True):
        assert np.allclose(a, b, atol=1e-4)


@pytest.fixture
def trainable(tiny_model_dir):
    model = load_model(tiny_model_dir, "float32")
    model.train()
    return model


def test_log_probs_and_gradients_on_a_shared_prefix_match_full_rows(trainable, tiny_model_dir):
    tok = load_tokenizer(tiny_model_dir)
    envs = make_envs("gigpo/EZPoints-v0", 2, 3, 1, None, {"max_steps": 3})
    torch.manual_seed(0)
    records = collect(trainable, tok, envs, seed=5, max_new_tokens=8, temperature=1.0).records
    envs.close()
    rows = np.arange(len(records))
    advantages = np.linspace(-1.0, 1.0, len(records))
    grads, log_probs = [], []
    for share in (False, True):
        batch = make_batch(records, rows, advantages, tok.pad_token_id, share_prefix=share)
        assert (batch.prefix_length >= MIN_SHARED) == share
        trainable.zero_grad(set_to_none=True)
        lp = token_log_probs(trainable, batch)
        mask = batch.response_mask
        (-(lp * mask * batch.advantages[:, None]).sum()).backward()
        log_probs.append(lp.detach()[mask.bool()])
        grads.append(
            torch.cat([p.grad.flatten() for p in trainable.parameters() if p.grad is not None])
        )
        # Sampling log-probs are what the update reproduces at the start.
        assert torch.allclose(log_probs[-1], batch.old_log_probs[mask.bool()], atol=1e-4)
    assert torch.allclose(log_probs[0], log_probs[1], atol=1e-5)
    assert grads[0].shape == grads[1].shape and grads[0].abs().sum() > 0
    assert torch.allclose(grads[0], grads[1], atol=1e-5, rtol=1e-4)
