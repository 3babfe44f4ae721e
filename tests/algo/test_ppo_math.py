"""Multi-turn PPO's math: GAE over step records (turn_gae) and the clipped value loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gigpo_algo import turn_gae, value_loss


def test_turn_gae_places_each_reward_on_its_turns_last_token_by_hand():
    # Trajectory A: turn 0 (2 tokens, reward 1), turn 2 (1 token, reward 2).
    # Trajectory B: turn 1 (1 token, reward -1). Rows interleave, as a batch of envs does.
    rewards = [1.0, -1.0, 2.0]
    values = [[0.5, 0.25], [0.5], [1.0]]
    adv, ret = turn_gae(rewards, values, ["A", "B", "A"], gamma=0.5, lam=0.5)
    # A's tokens in order: a0 (v .5, r 0), a1 (v .25, r 1), [env token skipped], a2 (v 1, r 2).
    d2 = 2.0 - 1.0
    d1 = 1.0 + 0.5 * 1.0 - 0.25  # next value is a2's: the env token is skipped
    d0 = 0.0 + 0.5 * 0.25 - 0.5
    a2 = d2
    a1 = d1 + 0.25 * a2
    a0 = d0 + 0.25 * a1
    np.testing.assert_allclose(adv[0], [a0, a1])
    np.testing.assert_allclose(adv[2], [a2])
    np.testing.assert_allclose(adv[1], [-1.0 - 0.5])  # B's one token: r - V
    np.testing.assert_allclose(ret[0], [a0 + 0.5, a1 + 0.25])
    np.testing.assert_allclose(ret[2], [a2 + 1.0])
    np.testing.assert_allclose(ret[1], [-1.0])


def test_turn_gae_with_gamma_and_lambda_one_is_return_to_go_less_value():
    rewards = [0.0, -1.0, 1.0]  # one trajectory of three turns
    values = [[0.1, 0.2, 0.3], [0.4], [0.5, 0.6]]
    adv, ret = turn_gae(rewards, values, [7, 7, 7])
    togo = [0.0, 0.0, 0.0]  # return from each turn on: -1 + 1 = 0, then 0, then 1
    np.testing.assert_allclose(adv[0], [togo[0] - v for v in values[0]])
    np.testing.assert_allclose(adv[1], [0.0 - 0.4])
    np.testing.assert_allclose(adv[2], [1.0 - 0.5, 1.0 - 0.6])
    np.testing.assert_allclose(ret[0], [0.0, 0.0, 0.0])
    np.testing.assert_allclose(ret[2], [1.0, 1.0])


def test_turn_gae_does_not_leak_between_trajectories():
    adv, _ = turn_gae([0.0, 5.0], [[0.0], [0.0]], [0, 1])
    np.testing.assert_allclose(adv[0], [0.0])  # B's reward never reaches A
    np.testing.assert_allclose(adv[1], [5.0])


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: turn_gae([1.0], [[]], [0]), "no response token"),
        (lambda: turn_gae([1.0, 2.0], [[0.0]], [0, 0]), "values holds 1"),
        (lambda: turn_gae([1.0], [[0.0]], [0], gamma=1.5), "gamma"),
        (lambda: turn_gae([1.0], [[float("nan")]], [0]), "values"),
        (lambda: turn_gae([1.0], [[0.0]], [0, 1]), "traj_ids"),
    ],
)
def test_turn_gae_bad_inputs_are_clear_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_value_loss_clips_around_the_old_values_by_hand():
    values = np.array([[1.0, 3.0, 0.1, 2.5]])
    old = np.array([[0.0, 0.0, 0.0, 2.0]])
    returns = np.array([[2.0, 2.0, 0.0, 0.0]])
    got = value_loss(values, old, returns, value_clip=0.5)
    # token 0: plain (1-2)^2 = 1; clipped old+0.5 = 0.5 -> 2.25; max 2.25
    # token 1: plain 1; clipped 0.5 -> 2.25 (moved too far past the target: clip wins)
    # token 2: plain .01; within the clip range: the same .01
    # token 3: plain 6.25; clipped 2.5 -> 6.25
    np.testing.assert_allclose(got, 0.5 * np.array([[2.25, 2.25, 0.01, 6.25]]))
    plain = value_loss(values, old, returns)
    np.testing.assert_allclose(plain, 0.5 * (values - returns) ** 2)


def test_value_loss_gradient_stops_where_the_clipped_term_wins():
    values = torch.tensor([[1.0, 0.2]], requires_grad=True)
    old = torch.tensor([[0.0, 0.0]])
    returns = torch.tensor([[2.0, 1.0]])
    loss = value_loss(values, old, returns, value_clip=0.5).sum()
    loss.backward()
    # token 0 moved 1.0 > 0.5 towards its target: the clipped (constant) term is larger.
    # token 1 moved 0.2: the plain term's gradient (v - R) = -0.8.
    np.testing.assert_allclose(values.grad.numpy(), [[0.0, -0.8]], atol=1e-6)


def test_value_loss_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="value_clip"):
        value_loss([[0.0]], [[0.0]], [[0.0]], value_clip=0.0)
    with pytest.raises(ValueError, match="shape"):
        value_loss([[0.0, 1.0]], [[0.0]], [[0.0]])
