"""HGPO and GraphGPO on batches worked out by hand from the papers' equations and from reading
verl-agent's ``recipe/hgpo/core_hgpo.py`` and ``recipe/GraphGPO/core_graph.py`` (at 1df19bd).

The official numbers quoted here were checked by hand; the official code computes in float32,
so they agree with ours to about 1e-6. ``episode_stats="step"`` is verl-agent's episode
statistic (every row a member), used wherever the official code is the reference.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gigpo_algo import (
    estimator_advantages,
    gigpo_advantages,
    graphgpo_advantages,
    hgpo_advantages,
)

# --------------------------------------------------------------------------- HGPO

# One episode group, three trajectories: A visits a, b; B visits a, b; C visits a, c, b.
H_TRAJ = [0, 0, 1, 1, 2, 2, 2]
H_ANCHORS = ["a", "b", "a", "b", "a", "c", "b"]


def test_hgpo_levels_and_dropped_zero_items():
    # gamma = 0 makes each row's return its own reward: 1, 2 | 3, 4 | 5, 6, 0.
    # Level 1: 'a' {1,3,5} and 'b' {2,4,0}: mean 3 / 2, population std 1.632993;
    # 'c' alone gives no item. Level 2 (history_length=1): (a,b) {A1: 2, B1: 4} -> -1, +1.
    # B0 sits at its group's mean: its only item is 0, dropped -> 0.
    # A1's level-1 item is 0 and is dropped, leaving -1 with weight 3/(3 + eps).
    # B1 = (2 * 1.224745 + 3 * 1) / (5 + eps).
    out = hgpo_advantages(
        [1, 2, 3, 4, 5, 6, 0], H_TRAJ, [0] * 7, H_ANCHORS, history_length=1, gamma=0.0
    )
    z = 2 / (np.sqrt(8 / 3) + 1e-6)  # (5 - 3) / (population std of {1, 3, 5} + eps)
    one = 1 / (1 + 1e-6)  # level 2's items: (4 - 3) / (population std 1 + eps)
    expected = [
        -z * 2 / (2 + 1e-6),
        -one * 3 / (3 + 1e-6),
        0.0,
        (2 * z + 3 * one) / (5 + 1e-6),
        z * 2 / (2 + 1e-6),
        0.0,
        -z * 2 / (2 + 1e-6),
    ]
    np.testing.assert_allclose(out.advantages, expected, rtol=0, atol=1e-12)
    # The official code's output on this batch (float32): 0.4 lower 6th digit at most.
    official = [-1.224743, -0.999999, 0, 1.089897, 1.224743, 0, -1.224743]
    np.testing.assert_allclose(out.advantages, official, atol=2e-6)
    assert out.level_group_ids.shape == (2, 7)
    assert out.level_group_ids[1].tolist() == [-1, 0, -1, 0, -1, 1, 2]
    assert out.level_sizes.tolist() == [[3, 3, 3, 3, 3, 1, 3], [0, 2, 0, 2, 0, 1, 1]]
    assert np.isnan(out.level_advantages[0, 5]) and np.isnan(out.level_advantages[1, 5])
    # alpha = 0: equal weights; B1 = (1.224745 + 1) / 2.
    flat = hgpo_advantages(
        [1, 2, 3, 4, 5, 6, 0], H_TRAJ, [0] * 7, H_ANCHORS, history_length=1, gamma=0.0,
        length_alpha=0.0,
    )  # fmt: skip
    assert flat.advantages[3] == pytest.approx((z + one) / (2 + 1e-6), abs=1e-12)
    assert flat.advantages[1] == pytest.approx(-one / (1 + 1e-6), abs=1e-12)
    # drop_zero=False keeps A1's zero level-1 item: (2 * 0 + 3 * -1) / 5.
    kept = hgpo_advantages(
        [1, 2, 3, 4, 5, 6, 0], H_TRAJ, [0] * 7, H_ANCHORS, history_length=1, gamma=0.0,
        drop_zero=False,
    )  # fmt: skip
    assert kept.advantages[1] == pytest.approx(-3 * one / (5 + 1e-6), abs=1e-12)
    assert kept.advantages[2] == 0.0  # B0: one zero item, 0 either way


def test_hgpo_base_group_mean_norm():
    # Only B succeeds (reward 1 at its end), gamma 0.5: returns A [0, 0], B [.5, 1], C 0s.
    # Base item (mean_norm, every row a member): 2/7 mean -> A, C -2/7; B +5/7.
    # Level 1 'a' {0, .5, 0} -> -1/6, 1/3, -1/6; 'b' {0, 1, 0} -> -1/3, 2/3, -1/3;
    # level 2 (a,b) {0, 1} -> -1/2, 1/2. Weights: base 1, level 1 2, level 2 3.
    out = hgpo_advantages(
        [0, 0, 0, 1, 0, 0, 0], H_TRAJ, [0] * 7, H_ANCHORS, history_length=1, gamma=0.5,
        norm="mean", base_group=True, episode_stats="step",
    )  # fmt: skip
    base_a, base_b = -2 / 7, 5 / 7
    expected = [
        (base_a + 2 * -1 / 6) / (3 + 1e-6),
        (base_a + 2 * -1 / 3 + 3 * -0.5) / (6 + 1e-6),
        (base_b + 2 * 1 / 3) / (3 + 1e-6),
        (base_b + 2 * 2 / 3 + 3 * 0.5) / (6 + 1e-6),
        (base_a + 2 * -1 / 6) / (3 + 1e-6),
        base_a / (1 + 1e-6),
        (base_a + 2 * -1 / 3) / (3 + 1e-6),
    ]
    np.testing.assert_allclose(out.advantages, expected, atol=1e-12)
    official = [-0.206349, -0.408730, 0.460317, 0.591270, -0.206349, -0.285714, -0.317460]
    np.testing.assert_allclose(out.advantages, official, atol=1e-6)
    np.testing.assert_allclose(out.episode_advantages, [base_a] * 2 + [base_b] * 2 + [base_a] * 3)
    # step_advantages leaves the base item out.
    assert out.step_advantages[5] == 0.0
    assert out.step_advantages[0] == pytest.approx(-1 / 6 * 2 / (2 + 1e-6))


def test_hgpo_depth_zero_is_gigpo_step_level():
    # history_length=0 and norm "mean": one item per row, GiGPO's A_S scaled by 2/(2 + eps).
    rng = np.random.default_rng(0)
    n = 60
    traj = np.repeat(np.arange(12), 5)
    groups = traj // 4
    anchors = rng.integers(0, 3, n)
    rewards = rng.integers(0, 2, n) * 10.0
    hgpo = hgpo_advantages(rewards, traj, groups, anchors, history_length=0, norm="mean")
    gigpo = gigpo_advantages(rewards, traj, groups, anchors, norm="mean")
    np.testing.assert_allclose(hgpo.advantages, gigpo.step_advantages * 2 / (2 + 1e-6))
    np.testing.assert_array_equal(hgpo.step_group_ids, gigpo.step_group_ids)
    np.testing.assert_allclose(hgpo.returns, gigpo.returns)


def test_hgpo_history_is_the_trajectorys_earlier_rows_whatever_the_interleaving():
    rng = np.random.default_rng(1)
    traj = np.repeat(np.arange(16), 6)
    groups = traj // 8
    anchors = rng.integers(0, 3, len(traj))
    rewards = (rng.random(len(traj)) < 0.2) * 10.0
    kwargs = dict(history_length=3, base_group=True, episode_stats="step")
    out = hgpo_advantages(rewards, traj, groups, anchors, **kwargs)
    # Interleave the trajectories (each one's rows kept in time order).
    order = np.argsort(np.tile(np.arange(6), 16), kind="stable")
    shuffled = hgpo_advantages(rewards[order], traj[order], groups[order], anchors[order], **kwargs)
    np.testing.assert_allclose(shuffled.advantages, out.advantages[order], atol=1e-12)
    # Reversing a trajectory's rows changes its histories, so the result changes.
    flipped = np.concatenate([np.arange(6)[::-1] + 6 * t for t in range(16)])
    other = hgpo_advantages(rewards, traj, groups, anchors[flipped], **kwargs)
    assert not np.allclose(other.advantages, out.advantages)


def test_hgpo_similarity_keys_the_levels_on_step_groups():
    texts = ["You are in a kitchen.", "You are in a kitchen!", "You see a fridge."]
    anchors = [texts[0], texts[2], texts[1], texts[2]]
    traj, groups, rewards = [0, 0, 1, 1], [0] * 4, [0, 10, 0, 0]
    exact = hgpo_advantages(rewards, traj, groups, anchors, history_length=1)
    near = hgpo_advantages(rewards, traj, groups, anchors, history_length=1, similarity=0.9)
    assert exact.level_sizes[1].tolist() == [0, 1, 0, 1]  # two different histories
    assert near.level_sizes[1].tolist() == [0, 2, 0, 2]  # one, by similarity
    assert near.step_group_ids[0] == near.step_group_ids[2]


# ----------------------------------------------------------------------- GraphGPO

# T1 succeeds: s0 -> s1 -> s2 -> goal. T2: s0 -> s3 -> s1 -> s4. T3: s0 -> s1 -> s5.
G_TRAJ = [0, 0, 0, 1, 1, 1, 2, 2]
G_ANCHORS = ["s0", "s1", "s2", "s0", "s3", "s1", "s0", "s1"]
G_NEXT = ["s1", "s2", "end", "s3", "s1", "s4", "s1", "s5"]
G_REWARDS = [0, 0, 1, 0, 0, 0, 0, 0]


def test_graphgpo_distances_returns_and_advantages():
    out = graphgpo_advantages(G_REWARDS, G_TRAJ, [0] * 8, G_ANCHORS, G_NEXT, episode_stats="step")
    # d: goal 0, s2 1, s1 2, s0 3 and s3 3 (s3 -> s1); s4, s5 cannot reach the goal:
    # the largest finite distance + 1 = 4. T1's last next state is the goal, not 'end'.
    assert out.next_distances.tolist() == [2, 1, 0, 3, 2, 4, 2, 4]
    assert out.distances.tolist() == [3, 2, 1, 3, 3, 2, 3, 2]
    assert out.next_node_ids[2] == -1
    np.testing.assert_allclose(out.returns, 10 * 0.1**out.next_distances)
    # Step groups (unbiased std): s0 {.1, .01, .1}, s1 {1, .001, .001}; s2, s3 alone -> 0.
    # Episode (every row a member): 3 ones, 5 zeros.
    s0 = np.array([0.1, 0.01, 0.1])
    s1 = np.array([1.0, 0.001, 0.001])
    scores = np.array([1, 1, 1, 0, 0, 0, 0, 0], dtype=float)
    a_s0 = (s0 - s0.mean()) / (s0.std(ddof=1) + 1e-6)
    a_s1 = (s1 - s1.mean()) / (s1.std(ddof=1) + 1e-6)
    a_e = (scores - scores.mean()) / (scores.std(ddof=1) + 1e-6)
    a_s = np.array([a_s0[0], a_s1[0], 0, a_s0[1], 0, a_s1[1], a_s0[2], a_s1[2]])
    np.testing.assert_allclose(out.advantages, a_s + a_e, atol=1e-12)
    official = [1.784952, 2.362311, 1.207612, -1.879246, -0.724567, -1.301917, -0.147228,
                -1.301917]  # fmt: skip
    np.testing.assert_allclose(out.advantages, official, atol=2e-6)
    weighted = graphgpo_advantages(
        G_REWARDS, G_TRAJ, [0] * 8, G_ANCHORS, G_NEXT, episode_stats="step",
        step_weight=0.5, episode_weight=2.0,
    )  # fmt: skip
    np.testing.assert_allclose(weighted.advantages, 0.5 * a_s + 2.0 * a_e, atol=1e-12)


def test_graphgpo_normalize_distance_mean_norm():
    # Exponent d(next) - d(state) + 1: [0, 0, 0, 1, 0, 3, 0, 3] -> returns 10 * 0.1 ** e.
    out = graphgpo_advantages(
        G_REWARDS, G_TRAJ, [0] * 8, G_ANCHORS, G_NEXT, episode_stats="step",
        normalize_distance=True, norm="mean",
    )  # fmt: skip
    np.testing.assert_allclose(out.returns, [10, 10, 10, 1, 10, 0.01, 10, 0.01])
    # s0 {10, 1, 10} mean 7; s1 {10, .01, .01} mean 3.34; episode mean 3/8.
    expected = [3 + 0.625, 6.66 + 0.625, 0.625, -6 - 0.375, -0.375, -3.33 - 0.375,
                3 - 0.375, -3.33 - 0.375]  # fmt: skip
    np.testing.assert_allclose(out.advantages, expected, atol=1e-12)


def test_graphgpo_group_without_success_and_invalid_action():
    # No episode succeeds: every d = 1, every return 10 * 0.1 = 1, less B0's penalty 0.1.
    out = graphgpo_advantages(
        [0, 0, 0, 0], [0, 0, 1, 1], [0] * 4, ["p0", "p1", "p0", "p2"], ["p1", "p3", "p2", "p2"],
        episode_stats="step", is_action_valid=[True, True, False, True], invalid_penalty=0.1,
    )  # fmt: skip
    assert out.distances.tolist() == [1, 1, 1, 1]
    np.testing.assert_allclose(out.returns, [1, 1, 0.9, 1])
    # p0 {1, .9} -> +-1/sqrt(2); episode scores [0, 0, -.1, 0] -> [.5, .5, -1.5, .5].
    r = 0.05 / (np.std([1, 0.9], ddof=1) + 1e-6)
    np.testing.assert_allclose(out.step_advantages, [r, 0, -r, 0], atol=1e-12)
    official = [1.207087, 0.499990, -2.207067, 0.499990]
    np.testing.assert_allclose(out.advantages, official, atol=2e-6)
    clean = graphgpo_advantages(
        [0, 0, 0, 0], [0, 0, 1, 1], [0] * 4, ["p0", "p1", "p0", "p2"], ["p1", "p3", "p2", "p2"]
    )
    assert np.all(clean.advantages == 0.0)


def test_graphgpo_groups_have_their_own_graphs_and_success_can_be_given():
    # The same state names in two groups are different nodes: group 1 has no success.
    anchors = G_ANCHORS * 2
    nxt = G_NEXT * 2
    traj = G_TRAJ + [t + 3 for t in G_TRAJ]
    groups = [0] * 8 + [1] * 8
    rewards = G_REWARDS + [0] * 8
    out = graphgpo_advantages(rewards, traj, groups, anchors, nxt, episode_stats="step")
    assert out.next_distances[:8].tolist() == [2, 1, 0, 3, 2, 4, 2, 4]
    assert out.next_distances[8:].tolist() == [1] * 8
    assert set(out.node_ids[:8]).isdisjoint(out.node_ids[8:])
    # success= overrides the reward rule: T1 of group 1 now reaches its goal.
    success = [False] * 8 + [True] * 3 + [False] * 5
    given = graphgpo_advantages(
        rewards, traj, groups, anchors, nxt, episode_stats="step", success=success
    )
    assert given.next_distances[8:].tolist() == [2, 1, 0, 3, 2, 4, 2, 4]
    with pytest.raises(ValueError, match="success must be the same"):
        graphgpo_advantages(rewards, traj, groups, anchors, nxt, success=[True] + [False] * 15)


def test_graphgpo_similarity_merges_graph_nodes_only():
    door = "A long corridor ends at a red door, which is closed."
    door2 = "A long corridor ends at a red door, which is closed!"
    anchors = ["start", door, "start", door2]
    nxt = [door, "won", door2, "a dead end"]
    rewards, traj = [0, 10, 0, 0], [0, 0, 1, 1]
    exact = graphgpo_advantages(rewards, traj, [0] * 4, anchors, nxt)
    near = graphgpo_advantages(rewards, traj, [0] * 4, anchors, nxt, similarity=0.95)
    # Exact: door2 cannot reach the goal (d = 2 + 1); merged with door it is 1 step away.
    assert exact.next_distances.tolist() == [1, 0, 3, 3]
    assert near.next_distances.tolist() == [1, 0, 1, 3]
    assert exact.step_advantages[0] > 0 > exact.step_advantages[2]
    assert near.step_advantages[0] == near.step_advantages[2] == 0.0
    # The step groups stay exact: the two door rows are not one step group.
    assert near.step_group_ids[1] != near.step_group_ids[3]


def test_family_torch_in_torch_out_and_the_estimator_by_name():
    rewards = torch.tensor(G_REWARDS, dtype=torch.float32)
    out = graphgpo_advantages(rewards, G_TRAJ, [0] * 8, G_ANCHORS, G_NEXT)
    assert out.advantages.dtype == torch.float32
    by_name = estimator_advantages(
        "graphgpo", G_REWARDS, G_TRAJ, [0] * 8, G_ANCHORS, next_anchors=G_NEXT, gamma=0.2
    )
    direct = graphgpo_advantages(G_REWARDS, G_TRAJ, [0] * 8, G_ANCHORS, G_NEXT, gamma=0.2)
    np.testing.assert_array_equal(by_name.advantages, direct.advantages)
    h = estimator_advantages("hgpo", [0, 0, 0, 1, 0, 0, 0], H_TRAJ, [0] * 7, H_ANCHORS,
                             history_length=1, base_group=True)  # fmt: skip
    assert h.level_group_ids.shape == (2, 7)
    hgpo_t = hgpo_advantages(torch.tensor([1.0, 2, 3, 4, 5, 6, 0]), H_TRAJ, [0] * 7, H_ANCHORS)
    assert isinstance(hgpo_t.advantages, torch.Tensor)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: hgpo_advantages([1], [0], [0], ["a"], norm="loo"), "not defined for HGPO"),
        (lambda: hgpo_advantages([1], [0], [0], ["a"], history_length=-1), "history_length"),
        (lambda: hgpo_advantages([1], [0], [0], ["a"], history_length=1.5), "history_length"),
        (lambda: hgpo_advantages([1], [0], [0], ["a"], history_length=True), "history_length"),
        (lambda: hgpo_advantages([1], [0], [0], ["a"], length_alpha=-1.0), "length_alpha"),
        (lambda: hgpo_advantages([1], [0], [0], ["a"], base_group="yes"), "base_group"),
        (lambda: hgpo_advantages([1], [0], [0]), "needs anchors"),
        (lambda: hgpo_advantages([1, 2], [0, 0], [0, 0], ["a"]), "anchors has length"),
        (lambda: graphgpo_advantages([1], [0], [0], ["a"]), "next_anchors"),
        (lambda: graphgpo_advantages([1], [0], [0], ["a"], ["b", "c"]), "next_anchors has length"),
        (lambda: graphgpo_advantages([1], [0], [0], ["a"], ["b"], gamma=2.0), "gamma"),
        (lambda: graphgpo_advantages([1], [0], [0], ["a"], ["b"], norm="x"), "norm"),
        (lambda: graphgpo_advantages([1], [0], [0], ["a"], ["b"], success=[2]), "success"),
        (
            lambda: graphgpo_advantages([1], [0], [0], ["a"], ["b"], episode_weight=np.nan),
            "episode_weight",
        ),  # fmt: skip
        (
            lambda: graphgpo_advantages([1], [0], [0], ["a"], ["b"], normalize_distance=1),
            "normalize_distance",
        ),  # fmt: skip
        (lambda: graphgpo_advantages([1], [0], [0], [1], [2], similarity=0.9), "str"),
        (
            lambda: estimator_advantages("hgpo", [1], [0], [0], ["a"], episode_weight=1.0),
            "not used by",
        ),  # fmt: skip
        (
            lambda: estimator_advantages("gigpo", [1], [0], [0], ["a"], next_anchors=["b"]),
            "graphgpo only",
        ),  # fmt: skip
    ],
)
def test_family_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_family_empty_batch():
    assert len(hgpo_advantages([], [], [], []).advantages) == 0
    assert len(graphgpo_advantages([], [], [], [], []).advantages) == 0


def test_graphgpo_a_state_is_one_node_whatever_container_it_comes_in():
    # The same states as array rows and as tuples: verl-agent makes both tuples.
    states = np.array([[0, 0], [0, 1], [1, 1], [0, 0], [0, 1], [2, 2]])
    nxt = np.array([[0, 1], [1, 1], [9, 9], [0, 1], [2, 2], [3, 3]])
    rewards, traj = [0, 0, 10, 0, 0, 0], [0, 0, 0, 1, 1, 1]
    arrays = graphgpo_advantages(rewards, traj, [0] * 6, states, nxt)
    tuples = graphgpo_advantages(rewards, traj, [0] * 6, states, [tuple(x) for x in nxt])
    assert arrays.next_distances.tolist() == [2, 1, 0, 2, 4, 4]
    np.testing.assert_array_equal(tuples.next_distances, arrays.next_distances)
    listed = graphgpo_advantages(rewards, traj, [0] * 6, list(states), list(nxt))
    np.testing.assert_array_equal(listed.next_distances, arrays.next_distances)
    with pytest.raises(ValueError, match="next_anchors holds None"):
        graphgpo_advantages(rewards, traj, [0] * 6, states, [None] * 6)


def test_hgpo_levels_stop_at_the_longest_trajectory_and_huge_alpha_is_refused():
    out = hgpo_advantages([1, 2, 3], [0, 0, 1], [0] * 3, ["a", "b", "a"], history_length=10**12)
    assert out.level_group_ids.shape == (2, 3)
    same = hgpo_advantages([1, 2, 3], [0, 0, 1], [0] * 3, ["a", "b", "a"], history_length=1)
    np.testing.assert_array_equal(out.advantages, same.advantages)
    with pytest.raises(ValueError, match="length_alpha=1000.0 is too large"):
        hgpo_advantages([1, 2], [0, 0], [0, 0], ["a", "b"], length_alpha=1000.0)


def test_estimator_by_name_passes_graphgpos_step_groups_through():
    by_name = estimator_advantages(
        "graphgpo", G_REWARDS, G_TRAJ, [0] * 8, G_ANCHORS, next_anchors=G_NEXT,
        step_group_ids=[0] * 8,
    )  # fmt: skip
    direct = graphgpo_advantages(
        G_REWARDS, G_TRAJ, [0] * 8, G_ANCHORS, G_NEXT, step_group_ids=[0] * 8
    )
    np.testing.assert_array_equal(by_name.advantages, direct.advantages)
    wanted = r"norm='x' is not defined .* use one of \('mean', 'mean_std'\)$"
    with pytest.raises(ValueError, match=wanted):
        estimator_advantages("graphgpo", [1], [0], [0], ["a"], next_anchors=["b"], norm="x")


def test_family_embedding_similarity_merges_paraphrased_states():
    # The packaged MiniLM-L6: two wordings of one door are one state; difflib's characters
    # keep them apart at the same threshold.
    door = "A long corridor ends at a red door, which is closed."
    door2 = "At the end of a long corridor there is a closed red door."
    anchors = ["You stand at the start.", door, "You stand at the start.", door2]
    nxt = [door, "won", door2, "A dead end with nothing in it."]
    rewards, traj = [0, 10, 0, 0], [0, 0, 1, 1]
    kw = dict(similarity=0.9, similarity_metric="embedding")
    dense = graphgpo_advantages(rewards, traj, [0] * 4, anchors, nxt, **kw)
    chars = graphgpo_advantages(rewards, traj, [0] * 4, anchors, nxt, similarity=0.9)
    assert dense.next_distances.tolist() == [1, 0, 1, 3]
    assert chars.next_distances.tolist() == [1, 0, 3, 3]
    h = hgpo_advantages(rewards, traj, [0] * 4, anchors, history_length=1, **kw)
    assert h.level_sizes.tolist() == [[2, 2, 2, 2], [0, 2, 0, 2]]
