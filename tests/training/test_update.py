"""The update step: the entropy bonus and its logging."""

from __future__ import annotations

import numpy as np
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


def test_entropy_bonus_raises_the_entropy_and_is_logged(tiny_model_dir):
    tok = load_tokenizer(tiny_model_dir)
    envs = make_envs("gigpo/NumberLine-v0", 2, 3, 0, None, {"max_position": 3, "max_steps": 2})
    model = load_model(tiny_model_dir, "float32")
    torch.manual_seed(0)
    records = collect(model, tok, envs, seed=1, max_new_tokens=6, temperature=1.0).records
    envs.close()
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
