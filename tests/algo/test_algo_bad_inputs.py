"""Every misuse raises ValueError naming the offending argument."""

import numpy as np
import pytest
import torch

from gigpo_algo import (
    aggregate_loss,
    anchor_groups,
    broadcast_to_tokens,
    discounted_returns,
    entropy_from_logits,
    episode_advantages,
    filter_uniform_groups,
    gae,
    gigpo_advantages,
    grpo,
    kl_penalty,
    ppo_clip_loss,
    step_advantages,
    turns_to_tokens,
)

R = [0.0, 1.0, 0.0, 1.0]
T = [0, 0, 1, 1]
G = [0, 0, 0, 0]
A = ["a", "b", "a", "c"]

CASES = [
    # (call, argument name expected in the message)
    (lambda: gigpo_advantages(R[:3], T, G, A), "group_ids has length 4, expected 3"),
    (lambda: gigpo_advantages(R, T, G[:3], A), "group_ids"),
    (lambda: gigpo_advantages(R, T, G, A[:3]), "anchors"),
    (lambda: gigpo_advantages([0, np.nan, 0, 0], T, G, A), "rewards"),
    (lambda: gigpo_advantages([0, np.inf, 0, 0], T, G, A), "rewards"),
    (lambda: gigpo_advantages(torch.tensor([0, float("nan"), 0, 0]), T, G, A), "rewards"),
    (lambda: gigpo_advantages(["x", 1, 0, 0], T, G, A), "rewards"),
    (lambda: gigpo_advantages([[0, 1], [0, 1]], [0, 0], [0, 0], ["a", "b"]), "rewards"),
    (lambda: gigpo_advantages(R, T, G, A, norm="z"), "norm"),
    (lambda: gigpo_advantages(R, T, G, A, episode_stats="episode"), "episode_stats"),
    (lambda: gigpo_advantages(R, T, G, A, similarity=1.0), "similarity"),
    (lambda: gigpo_advantages(R, T, G, A, similarity=0.0), "similarity"),
    (lambda: gigpo_advantages(R, T, G, A, similarity=1.5), "similarity"),
    (lambda: gigpo_advantages(R, T, G, A, similarity="high"), "similarity"),
    (lambda: gigpo_advantages(R, T, G, A, similarity=0.9, similarity_metric="cos"), "metric"),
    (lambda: gigpo_advantages(R, T, G, [1, 2, 3, 4], similarity=0.9), "anchors"),
    (lambda: gigpo_advantages(R, T, G, [None, "a", "b", "c"]), "anchors"),
    (lambda: gigpo_advantages(R, T, G, [object(), "a", "b", "c"]), "anchors"),
    (lambda: gigpo_advantages(R, T, G, [float("nan"), 1.0, 2.0, 3.0]), "anchors"),
    (lambda: gigpo_advantages(R, T, G, "abcd"), "anchors"),
    (lambda: gigpo_advantages(R, T, [None, 0, 0, 0], A), "group_ids"),
    (lambda: gigpo_advantages(R, [[0], [0], [1], [1]], G, A), "traj_ids"),
    (lambda: gigpo_advantages(R, T, G, A, gamma=1.5), "gamma"),
    (lambda: gigpo_advantages(R, T, G, A, gamma=float("nan")), "gamma"),
    (lambda: gigpo_advantages(R, T, G, A, step_weight=float("inf")), "step_weight"),
    (lambda: gigpo_advantages(R, T, G, A, invalid_penalty=0.1), "is_action_valid"),
    (lambda: gigpo_advantages(R, T, G, A, is_action_valid=[1, 0, 2, 1]), "is_action_valid"),
    (lambda: gigpo_advantages(R, T, G, A, is_action_valid=[True] * 3), "is_action_valid"),
    (
        lambda: gigpo_advantages(R, T, G, A, is_action_valid=[True] * 4, invalid_penalty=-1),
        "invalid_penalty",
    ),
    (lambda: gigpo_advantages(R, T, G, A, eps=-1.0), "eps"),
    (lambda: episode_advantages(R, G), "traj_ids"),
    (lambda: episode_advantages(R, G, traj_ids=T, stats="rows"), "stats"),
    (lambda: episode_advantages(R, G, traj_ids=T, norm="std"), "norm"),
    (lambda: step_advantages(R, [0, 0]), "step_group_ids"),
    (lambda: discounted_returns(R, T, -0.1), "gamma"),
    (lambda: discounted_returns(R, T[:2], 0.9), "traj_ids"),
    (lambda: anchor_groups(A, G, similarity=0.5, metric="levenshtein"), "metric"),
    (lambda: grpo([1.0, None], [0, 0]), "scores"),
    (lambda: grpo([1.0, 2.0], "ab"), "group_ids"),
    (lambda: filter_uniform_groups(R, G, atol=-1), "atol"),
    (lambda: gae(np.zeros((2, 3)), np.zeros((2, 4)), np.ones((2, 3))), "values"),
    (lambda: gae(np.zeros((2, 3)), np.zeros((2, 3)), np.ones((2, 3)), lam=2.0), "lam"),
    (lambda: ppo_clip_loss(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 4))), "advantages"),
    (lambda: ppo_clip_loss(np.zeros(3), np.zeros(3), np.zeros(3)), "log_probs"),
    (lambda: ppo_clip_loss(*[np.zeros((1, 2))] * 3, dual_clip=0.5), "dual_clip"),
    (lambda: ppo_clip_loss(*[np.zeros((1, 2))] * 3, clip_low=-0.1), "clip_low"),
    (lambda: kl_penalty(np.zeros((1, 2)), np.zeros((1, 2)), estimator="k4"), "estimator"),
    (lambda: aggregate_loss(np.zeros((1, 2)), np.ones((1, 2)), mode="sum"), "mode"),
    (lambda: entropy_from_logits(np.zeros((2, 3))), "logits"),
    (lambda: entropy_from_logits(np.zeros((1, 2, 0))), "logits"),
    (
        lambda: aggregate_loss(
            np.zeros((1, 2)), np.ones((1, 2)), mode="seq-mean-token-sum-norm", norm_length=0
        ),
        "norm_length",
    ),
    (lambda: broadcast_to_tokens(np.zeros(3), np.ones((2, 5))), "response_mask"),
    (lambda: turns_to_tokens([1.0], [[0, 2, 9]], (1, 5)), "turn_spans"),
    (lambda: turns_to_tokens([1.0, 2.0], [[0, 0, 3], [0, 2, 4]], (1, 5)), "turn_spans"),
    (lambda: turns_to_tokens([1.0], [[0, 3, 2]], (1, 5)), "turn_spans"),
    (lambda: turns_to_tokens([1.0, 2.0], [[0, 0, 3]], (1, 5)), "values"),
    (lambda: turns_to_tokens([1.0], [[0.5, 0, 3]], (1, 5)), "turn_spans"),
]


@pytest.mark.parametrize("call,name", CASES, ids=[f"{i}-{c[1]}" for i, c in enumerate(CASES)])
def test_bad_input_raises_value_error_naming_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_empty_batch_is_a_valid_no_op():
    res = gigpo_advantages([], [], [], [])
    assert res.advantages.shape == (0,) and res.step_group_ids.shape == (0,)
    assert discounted_returns([], [], 0.9).shape == (0,)
