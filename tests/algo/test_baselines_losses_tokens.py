"""Baselines, GAE, losses and token spreading on hand-worked values, numpy and torch."""

import math

import numpy as np
import pytest
import torch

from gigpo_algo import (
    aggregate_loss,
    broadcast_to_tokens,
    dr_grpo,
    entropy_from_logits,
    filter_uniform_groups,
    filter_zero_advantage_groups,
    gae,
    grpo,
    gspo_loss,
    kl_penalty,
    ppo_clip_loss,
    reinforce_pp_baseline,
    rloo,
    turns_to_tokens,
)
from gigpo_algo.losses import AGGREGATIONS, loss_denominator, sequence_log_ratio

SCORES = [1.0, 0.0, 0.0, 1.0, 3.0, 3.0, 5.0]
GROUPS = ["a", "a", "a", "a", "b", "b", "c"]


def test_grpo_rloo_drgrpo_by_hand():
    s = math.sqrt(1 / 3)  # unbiased std of (1, 0, 0, 1)
    np.testing.assert_allclose(
        grpo(SCORES, GROUPS, eps=0.0), [0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s, 0, 0, 0]
    )
    np.testing.assert_allclose(dr_grpo(SCORES, GROUPS), [0.5, -0.5, -0.5, 0.5, 0, 0, 0])
    np.testing.assert_allclose(rloo(SCORES, GROUPS), [2 / 3, -2 / 3, -2 / 3, 2 / 3, 0, 0, 0])


def test_rloo_is_scaled_mean_baseline():
    rng = np.random.default_rng(1)
    x = rng.normal(size=12)
    g = np.repeat([0, 1, 2], 4)
    np.testing.assert_allclose(rloo(x, g), 4 / 3 * np.asarray(dr_grpo(x, g)))


def test_reinforce_pp_baseline_whitens_over_batch():
    out = reinforce_pp_baseline(SCORES, GROUPS)
    centered = np.array([0.5, -0.5, -0.5, 0.5, 0, 0, 0])
    expected = (centered - centered.mean()) / (centered.std(ddof=1) + 1e-6)
    np.testing.assert_allclose(out, expected)
    assert abs(np.mean(out)) < 1e-12


def test_dapo_filter_drops_uniform_groups():
    keep = filter_uniform_groups(SCORES, GROUPS)
    np.testing.assert_array_equal(keep, [True] * 4 + [False] * 3)
    keep = filter_uniform_groups([1.0, 1.05, 0.0, 1.0], [0, 0, 1, 1], atol=0.1)
    np.testing.assert_array_equal(keep, [False, False, True, True])


def test_gae_by_hand_with_masked_gap():
    # One sequence: tokens 0,1 response, 2 env (masked), 3 response. gamma .9, lam .5
    r = np.array([[0.0, 1.0, 0.0, 2.0]])
    v = np.array([[0.5, 0.4, 9.9, 0.3]])
    m = np.array([[1, 1, 0, 1]])
    adv, ret = gae(r, v, m, gamma=0.9, lam=0.5)
    d3 = 2.0 - 0.3
    a3 = d3
    d1 = 1.0 + 0.9 * 0.3 - 0.4  # next valid value skips the env token
    a1 = d1 + 0.9 * 0.5 * a3
    d0 = 0.0 + 0.9 * 0.4 - 0.5
    a0 = d0 + 0.45 * a1
    np.testing.assert_allclose(adv, [[a0, a1, 0.0, a3]])
    np.testing.assert_allclose(ret, [[a0 + 0.5, a1 + 0.4, 0.0, a3 + 0.3]])
    adv_t, _ = gae(torch.tensor(r, dtype=torch.float32), torch.tensor(v), torch.tensor(m))
    assert isinstance(adv_t, torch.Tensor) and adv_t.dtype == torch.float32


def test_ppo_clip_and_dual_clip_by_hand():
    ratio = np.array([[1.5, 1.5, 5.0, 0.5]])
    adv = np.array([[1.0, -1.0, -1.0, 1.0]])
    lp = np.log(ratio)
    old = np.zeros_like(lp)
    loss = ppo_clip_loss(lp, old, adv, clip_low=0.2, clip_high=0.2)
    # max(-A r, -A clip(r)): (-1.5 vs -1.2) -> -1.2 ; (1.5 vs 1.2) -> 1.5 ; (5 vs 1.2) -> 5 ;
    # (-0.5 vs -0.8) -> -0.5
    np.testing.assert_allclose(loss, [[-1.2, 1.5, 5.0, -0.5]])
    dual = ppo_clip_loss(lp, old, adv, dual_clip=3.0)
    np.testing.assert_allclose(dual, [[-1.2, 1.5, 3.0, -0.5]])
    higher = ppo_clip_loss(lp, old, adv, clip_low=0.2, clip_high=0.28)
    np.testing.assert_allclose(higher[0, 0], -1.28)


def test_ppo_loss_keeps_autograd():
    lp = torch.zeros(2, 3, requires_grad=True)
    loss = aggregate_loss(ppo_clip_loss(lp, torch.zeros(2, 3), torch.ones(2, 3)), torch.ones(2, 3))
    loss.backward()
    # d/dlp of -A * exp(lp - old) at ratio 1 (inside the clip range) is -1/6 per token
    np.testing.assert_allclose(lp.grad.numpy(), np.full((2, 3), -1 / 6), rtol=1e-6)


def test_kl_estimators_by_hand():
    lp = np.array([[math.log(0.5)]])
    ref = np.array([[math.log(0.25)]])
    d = math.log(0.25) - math.log(0.5)
    assert kl_penalty(lp, ref, estimator="k1")[0, 0] == pytest.approx(-d)
    assert kl_penalty(lp, ref, estimator="k2")[0, 0] == pytest.approx(0.5 * d * d)
    assert kl_penalty(lp, ref, estimator="k3")[0, 0] == pytest.approx(math.exp(d) - d - 1)
    assert kl_penalty(lp, lp)[0, 0] == 0.0


def test_entropy_from_logits_by_hand_and_in_torch():
    logits = np.array([[[0.0, 0.0, 0.0, 0.0], [math.log(3.0), 0.0, -np.inf, -np.inf]]])
    got = entropy_from_logits(logits)
    assert got.shape == (1, 2)
    assert got[0, 0] == pytest.approx(math.log(4))  # uniform over 4
    p = np.array([0.75, 0.25])
    assert got[0, 1] == pytest.approx(-(p * np.log(p)).sum())
    # Shifting logits changes nothing; huge logits do not overflow.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 7))
    np.testing.assert_allclose(entropy_from_logits(x + 1000.0), entropy_from_logits(x))
    t = torch.tensor(x, requires_grad=True)
    ent = entropy_from_logits(t)
    assert isinstance(ent, torch.Tensor) and ent.dtype == torch.float64
    np.testing.assert_allclose(ent.detach().numpy(), entropy_from_logits(x), rtol=1e-12)
    ent.sum().backward()  # differentiable: the bonus pushes logits toward uniform
    assert torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0


def test_k3_is_unbiased_estimate_of_kl():
    rng = np.random.default_rng(0)
    p = np.array([0.6, 0.3, 0.1])
    q = np.array([0.2, 0.5, 0.3])
    samples = rng.choice(3, size=200_000, p=p)
    lp = np.log(p[samples])[None]
    ref = np.log(q[samples])[None]
    true_kl = float(np.sum(p * np.log(p / q)))
    for est in ("k1", "k3"):
        assert kl_penalty(lp, ref, estimator=est).mean() == pytest.approx(true_kl, rel=0.02)


def test_aggregation_modes_by_hand():
    loss = np.array([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = np.array([[1, 1, 1], [1, 0, 0]])
    assert aggregate_loss(loss, mask, mode="token-mean") == pytest.approx(10 / 4)
    assert aggregate_loss(loss, mask, mode="seq-mean-token-sum") == pytest.approx((6 + 4) / 2)
    assert aggregate_loss(loss, mask, mode="seq-mean-token-mean") == pytest.approx((2 + 4) / 2)
    assert aggregate_loss(loss, mask, mode="seq-mean-token-sum-norm") == pytest.approx(10 / 6)
    assert aggregate_loss(
        loss, mask, mode="seq-mean-token-sum-norm", norm_length=5
    ) == pytest.approx(10 / 10)
    # a sequence without response tokens is left out of the per-sequence mean
    mask0 = np.array([[1, 1, 1], [0, 0, 0]])
    assert aggregate_loss(loss, mask0, mode="seq-mean-token-mean") == pytest.approx(2.0)
    assert aggregate_loss(loss, np.zeros((2, 3))) == 0.0
    t = aggregate_loss(torch.tensor(loss), torch.tensor(mask), mode="seq-mean-token-mean")
    assert isinstance(t, torch.Tensor) and float(t) == pytest.approx(3.0)


def test_broadcast_and_turn_spans():
    np.testing.assert_allclose(
        broadcast_to_tokens([2.0, -1.0], [[1, 1, 0], [1, 0, 0]]), [[2, 2, 0], [-1, 0, 0]]
    )
    out = turns_to_tokens(
        [1.5, -2.0, 3.0, 7.0], [[0, 1, 3], [0, 5, 6], [1, 0, 2], [1, 2, 2]], (2, 6)
    )
    np.testing.assert_allclose(out, [[0, 1.5, 1.5, 0, 0, -2.0], [3, 3, 0, 0, 0, 0]])
    t = turns_to_tokens(
        torch.tensor([1.0, 2.0], dtype=torch.bfloat16), [[0, 0, 1], [0, 1, 3]], (1, 4)
    )
    assert t.dtype == torch.bfloat16
    np.testing.assert_allclose(t.float().numpy(), [[1, 2, 2, 0]])
    assert turns_to_tokens([], np.zeros((0, 3), int), (2, 3)).shape == (2, 3)


def test_gspo_loss_by_hand_one_ratio_per_sequence():
    # row 0: token log-ratios log(2), 0 over 2 response tokens (a padded third): s = sqrt(2);
    # row 1: one response token of ratio 0.5 and an env token with a huge ratio, masked out
    lp = np.array([[math.log(2.0), 0.0, 9.0], [9.0, math.log(0.5), 0.0]])
    old = np.zeros_like(lp)
    adv = np.array([[1.0, -1.0, 0.0], [0.0, 1.0, 0.0]])
    mask = np.array([[1, 1, 0], [0, 1, 0]])
    loss = gspo_loss(lp, old, adv, mask, clip_low=0.2, clip_high=0.2)
    s = math.sqrt(2.0)
    # row 0: A=+1: max(-s, -1.2) = -1.2; A=-1: max(s, 1.2) = s. row 1: max(-0.5, -0.8) = -0.5
    np.testing.assert_allclose(loss[0, :2], [-1.2, s])
    np.testing.assert_allclose(loss[1, 1], -0.5)
    seq = aggregate_loss(loss, mask, mode="seq-mean-token-mean")
    np.testing.assert_allclose(seq, ((-1.2 + s) / 2 - 0.5) / 2)
    # a token's own ratio does not matter, only the sequence's mean log-ratio: swapping the
    # two tokens' log-probs changes PPO's loss but not GSPO's
    swapped = lp[:, [1, 0, 2]]
    ppo = ppo_clip_loss(lp, old, adv) * mask
    assert not np.allclose((ppo_clip_loss(swapped, old, adv) * mask)[0], ppo[0])
    np.testing.assert_allclose(
        gspo_loss(swapped, old, adv, mask)[0, :2], gspo_loss(lp, old, adv, mask)[0, :2]
    )


def test_gspo_gradient_pushes_every_token_by_the_sequence_mean_advantage():
    lp = torch.zeros(1, 3, requires_grad=True)
    adv = torch.tensor([[3.0, -1.0, 1.0]])  # three turns' advantages in one sample
    mask = torch.ones(1, 3)
    per_token = gspo_loss(lp, torch.zeros(1, 3), adv, mask)
    loss = aggregate_loss(per_token, mask, mode="seq-mean-token-mean")
    loss.backward()
    # d/dlp_t of -mean_u(A_u) * exp(mean(lp)) at 0: -mean(A) / 3 for every token alike
    np.testing.assert_allclose(lp.grad.numpy(), np.full((1, 3), -1.0 / 3), rtol=1e-6)
    with pytest.raises(ValueError, match="response_mask has shape"):
        gspo_loss(lp, lp, adv, torch.ones(1, 2))
    with pytest.raises(ValueError, match="clip_low must be < 1"):
        gspo_loss(lp, lp, adv, mask, clip_low=1.0)


def test_zero_advantage_filter_keeps_a_group_with_only_a_step_signal():
    groups = ["a", "a", "a", "b", "b", "c"]
    episode = [0.0, 0.0, 0.0, 0.5, -0.5, 0.0]
    step = [0.3, -0.3, 0.0, 0.0, 0.0, 0.0]  # group a: equal episode scores, a step signal
    keep = filter_zero_advantage_groups(np.column_stack([episode, step]), groups)
    np.testing.assert_array_equal(keep, [True, True, True, True, True, False])
    # the episode scores alone (DAPO's rule) would drop group a
    scores = [1.0, 1.0, 1.0, 2.0, 1.0, 0.0]
    np.testing.assert_array_equal(
        filter_uniform_groups(scores, groups), [False, False, False, True, True, False]
    )
    np.testing.assert_array_equal(
        filter_zero_advantage_groups([1e-12, 0.0, 2e-3], [0, 0, 1], atol=1e-9),
        [False, False, True],
    )
    with pytest.raises(ValueError, match="NaN"):
        filter_zero_advantage_groups([float("nan")], [0])
    with pytest.raises(ValueError, match="atol"):
        filter_zero_advantage_groups([1.0], [0], atol=-1.0)


def test_sequence_log_ratio_is_the_mean_over_response_tokens():
    lp = np.array([[1.0, 3.0, 9.0], [9.0, 9.0, 9.0]])
    mask = np.array([[1, 1, 0], [0, 0, 0]])
    np.testing.assert_allclose(sequence_log_ratio(lp, np.zeros_like(lp), mask), [2.0, 0.0])


@pytest.mark.parametrize("mode", AGGREGATIONS)
@pytest.mark.parametrize("as_tensor", [False, True])
def test_micro_batches_with_the_whole_denominator_sum_to_the_whole_loss(mode, as_tensor):
    rng = np.random.default_rng(0)
    loss = rng.normal(size=(7, 9))
    mask = (rng.random((7, 9)) < 0.6).astype(float)
    mask[3] = 0.0  # a row without response tokens
    if as_tensor:
        loss, mask = torch.tensor(loss), torch.tensor(mask)
    whole = aggregate_loss(loss, mask, mode=mode)
    total = loss_denominator(mask, mode=mode)
    parts = [slice(0, 2), slice(2, 5), slice(5, 7)]
    summed = sum(float(aggregate_loss(loss[p], mask[p], mode=mode, norm_length=9,
                                      denominator=total)) for p in parts)  # fmt: skip
    assert summed == pytest.approx(float(whole), rel=1e-12)
    own = sum(float(aggregate_loss(loss[p], mask[p], mode=mode, norm_length=9)) for p in parts)
    assert own != pytest.approx(float(whole), rel=1e-6)  # each part's own mean: not the whole's


def test_loss_denominators_count_what_each_mode_divides_by():
    mask = np.array([[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=float)
    assert loss_denominator(mask) == 6.0
    assert loss_denominator(mask, mode="seq-mean-token-sum") == 3.0
    assert loss_denominator(mask, mode="seq-mean-token-mean") == 2.0
    assert loss_denominator(mask, mode="seq-mean-token-sum-norm") == 12.0
    assert loss_denominator(mask, mode="seq-mean-token-sum-norm", norm_length=10) == 30.0
    assert loss_denominator(np.zeros((2, 3))) == 1.0
    for bad in (0, -1.0, True, float("nan"), "two", [3]):
        with pytest.raises(ValueError, match="denominator"):
            aggregate_loss(np.ones((1, 2)), np.ones((1, 2)), denominator=bad)
