"""Hand-worked examples of the paper's equations (Feng et al. 2025, Eq. 3, 7, 8, 9)."""

import math

import numpy as np
import pytest

from gigpo_algo.advantages import (
    anchor_groups,
    discounted_returns,
    episode_advantages,
    gigpo_advantages,
    step_advantages,
)


def test_discounted_returns_interleaved_trajectories():
    # traj "a": rewards 1, 0, 2 ; traj "b": rewards 3, 4 (rows interleaved, time order kept)
    rewards = [1.0, 3.0, 0.0, 4.0, 2.0]
    trajs = ["a", "b", "a", "b", "a"]
    out = discounted_returns(rewards, trajs, 0.5)
    # a: G2 = 2, G1 = 0 + 0.5*2 = 1, G0 = 1 + 0.5*1 = 1.5 ; b: G1 = 4, G0 = 3 + 0.5*4 = 5
    np.testing.assert_allclose(out, [1.5, 5.0, 1.0, 4.0, 2.0])


def test_discounted_returns_gamma_edges():
    np.testing.assert_allclose(discounted_returns([1, 2, 3], [0, 0, 0], 0.0), [1, 2, 3])
    np.testing.assert_allclose(discounted_returns([1, 2, 3], [0, 0, 0], 1.0), [6, 5, 3])


def test_discounted_returns_long_trajectory_matches_loop():
    rng = np.random.default_rng(3)
    rewards = rng.normal(size=5000)
    expected = np.zeros_like(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + 0.99 * running
        expected[t] = running
    np.testing.assert_allclose(discounted_returns(rewards, np.zeros(5000, int), 0.99), expected)


def test_episode_trajectory_stats_count_each_trajectory_once():
    # One group: traj 0 scored 1 over 3 steps, traj 1 scored 0 over 1 step, traj 2 scored 0
    # over 2 steps. Eq. 3 over trajectories: mean 1/3, unbiased std sqrt(1/3).
    scores = [1, 1, 1, 0, 0, 0]
    trajs = [0, 0, 0, 1, 2, 2]
    out = episode_advantages(scores, [7] * 6, traj_ids=trajs, norm="mean_std", eps=0.0)
    std = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)
    np.testing.assert_allclose(out, [(2 / 3) / std] * 3 + [(-1 / 3) / std] * 3)


def test_episode_step_stats_count_rows():
    # Same data, verl-agent's statistics over the 6 rows: mean 0.5, std sqrt(1.5 / 5).
    scores = [1, 1, 1, 0, 0, 0]
    out = episode_advantages(scores, [7] * 6, stats="step", norm="mean_std", eps=0.0)
    std = math.sqrt(6 * 0.25 / 5)
    np.testing.assert_allclose(out, [0.5 / std] * 3 + [-0.5 / std] * 3)


def test_episode_mean_and_loo():
    scores = [1.0, 0.0, 0.0, 1.0]
    groups = ["g"] * 4
    trajs = [0, 1, 2, 3]
    np.testing.assert_allclose(
        episode_advantages(scores, groups, traj_ids=trajs, norm="mean"), [0.5, -0.5, -0.5, 0.5]
    )
    # Leave-one-out: 1 - mean(0, 0, 1) = 2/3 ; 0 - mean(1, 0, 1) = -2/3
    np.testing.assert_allclose(
        episode_advantages(scores, groups, traj_ids=trajs, norm="loo"),
        [2 / 3, -2 / 3, -2 / 3, 2 / 3],
    )


def test_singleton_groups_get_zero():
    out = episode_advantages([5.0, 1.0, 3.0], [0, 1, 1], traj_ids=[0, 1, 2])
    assert out[0] == 0.0
    assert step_advantages([2.0, 4.0, 9.0], [0, 0, 1])[2] == 0.0


def test_equal_scores_give_zero_not_nan():
    out = episode_advantages([1.0, 1.0], [0, 0], traj_ids=[0, 1], eps=0.0)
    np.testing.assert_array_equal(out, [0.0, 0.0])


def test_gigpo_small_group_by_hand():
    # Group of 3 trajectories over states s0..s3, gamma 0.5.
    #   traj 0: s0 -> s1 -> s2, rewards 0, 0, 1  (score 1, returns .25, .5, 1)
    #   traj 1: s0 -> s1,       rewards 0, 0     (score 0, returns 0, 0)
    #   traj 2: s0 -> s3,       rewards 0, 1     (score 1, returns .5, 1)
    rewards = [0, 0, 1, 0, 0, 0, 1]
    trajs = [0, 0, 0, 1, 1, 2, 2]
    anchors = ["s0", "s1", "s2", "s0", "s1", "s0", "s3"]
    res = gigpo_advantages(rewards, trajs, [0] * 7, anchors, gamma=0.5, eps=0.0, norm="mean_std")
    np.testing.assert_allclose(res.returns, [0.25, 0.5, 1.0, 0.0, 0.0, 0.5, 1.0])
    np.testing.assert_array_equal(res.step_group_ids, [0, 1, 2, 0, 1, 0, 3])
    # A_E: scores 1, 0, 1 -> mean 2/3, std sqrt(1/3)
    s = math.sqrt(1 / 3)
    np.testing.assert_allclose(
        res.episode_advantages, [(1 / 3) / s] * 3 + [(-2 / 3) / s] * 2 + [(1 / 3) / s] * 2
    )
    # A_S: s0 group returns (.25, 0, .5): mean .25, std .25 -> 0, -1, 1
    #      s1 group returns (.5, 0): mean .25, std sqrt(.125) -> +-0.7071 ; s2, s3 singletons
    r = 0.25 / math.sqrt(0.125)
    np.testing.assert_allclose(res.step_advantages, [0.0, r, 0.0, -1.0, -r, 1.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(res.advantages, res.episode_advantages + res.step_advantages)


def test_gigpo_step_weight_and_invalid_penalty():
    rewards = [0.0, 1.0, 0.0, 0.0]
    trajs = [0, 0, 1, 1]
    anchors = ["a", "b", "a", "b"]
    valid = [True, True, False, True]
    res = gigpo_advantages(
        rewards,
        trajs,
        [0] * 4,
        anchors,
        gamma=1.0,
        norm="mean",
        step_weight=0.5,
        is_action_valid=valid,
        invalid_penalty=0.2,
        episode_stats="step",
    )
    # traj 0 scores 1, traj 1 scores 0 and its invalid row is lowered to -0.2:
    # row scores (1, 1, -0.2, 0) -> mean 0.45 ; returns (1, 1, -0.2, 0)
    np.testing.assert_allclose(res.episode_advantages, [0.55, 0.55, -0.65, -0.45])
    np.testing.assert_allclose(res.returns, [1.0, 1.0, -0.2, 0.0])
    # step group "a": (1, -0.2) mean 0.4 ; "b": (1, 0) mean 0.5
    np.testing.assert_allclose(res.step_advantages, [0.6, 0.5, -0.6, -0.5])
    np.testing.assert_allclose(res.advantages, res.episode_advantages + 0.5 * res.step_advantages)


def test_anchor_groups_exact_types():
    anchors = ["x", b"x", 1, (1, 2), [1, 2], np.array([1, 2]), np.array([1, 2]), 1, {"k": 1}]
    ids = anchor_groups(anchors, [0] * len(anchors))
    # str != bytes != int; tuple == list by value; equal arrays match; dicts by value
    assert ids[0] != ids[1] != ids[2]
    assert ids[3] == ids[4]
    assert ids[5] == ids[6] and ids[5] != ids[3]
    assert ids[7] == ids[2]
    assert len(set(ids.tolist())) == 6


def test_anchor_groups_respect_episode_groups_and_2d_arrays():
    anchors = np.array([[1, 2], [1, 2], [3, 4], [1, 2]])
    ids = anchor_groups(anchors, ["g1", "g1", "g1", "g2"])
    np.testing.assert_array_equal(ids, [0, 0, 1, 2])


def test_similarity_groups_first_fit_by_hand():
    # threshold 0.75: "abcd" vs "abce" ratio 0.75 -> joins; "wxyz" new; "abcf" vs rep "abcd" .75
    ids = anchor_groups(["abcd", "abce", "wxyz", "abcf", "wxyq"], [0] * 5, similarity=0.75)
    np.testing.assert_array_equal(ids, [0, 0, 1, 0, 1])
    ids = anchor_groups(["abcd", "abce", "wxyz", "abcf"], [0] * 4, similarity=0.8)
    np.testing.assert_array_equal(ids, [0, 1, 2, 3])


@pytest.mark.parametrize("metric", ["difflib", "indel", "embedding"])
def test_similarity_identical_texts_equal_exact(metric):
    texts = ["room A", "room B", "room A", "kitchen", "room B"]
    groups = [0, 0, 0, 1, 1]
    exact = anchor_groups(texts, groups)
    sim = anchor_groups(texts, groups, similarity=1 - 1e-9, metric=metric)
    np.testing.assert_array_equal(sim, exact)
