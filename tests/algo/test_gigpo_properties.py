"""Properties of the advantages, checked on random batches, and the naive per-row oracle."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from naive_gigpo import naive_gigpo, naive_similarity_clusters

from gigpo_algo._arrays import factorize_hashables
from gigpo_algo.advantages import (
    anchor_groups,
    episode_advantages,
    gigpo_advantages,
    grpo,
)
from gigpo_algo.similarity import similarity_groups


@st.composite
def batches(draw, max_groups=3, max_trajs=4, max_len=6, n_states=4):
    """A batch of step rows: groups of trajectories walking over a few states, interleaved."""
    queues = []
    for g in range(draw(st.integers(1, max_groups))):
        for t in range(draw(st.integers(1, max_trajs))):
            queue = []
            for step in range(draw(st.integers(1, max_len))):
                queue.append(
                    dict(
                        group=f"g{g}",
                        traj=t,
                        step=step,
                        reward=draw(st.sampled_from([0.0, 0.0, 1.0, -0.5, 2.25])),
                        anchor=f"state-{draw(st.integers(0, n_states - 1))}",
                        valid=draw(st.booleans()),
                    )
                )
            queues.append(queue[::-1])
    # Interleave trajectories at random while keeping each one's time order.
    batch = []
    while queues:
        k = draw(st.integers(0, len(queues) - 1))
        batch.append(queues[k].pop())
        if not queues[k]:
            queues.pop(k)
    return {k: [r[k] for r in batch] for k in batch[0]}


OPTIONS = st.fixed_dictionaries(
    dict(
        norm=st.sampled_from(["mean", "mean_std", "loo"]),
        episode_stats=st.sampled_from(["trajectory", "step"]),
        gamma=st.sampled_from([0.0, 0.5, 0.95, 1.0]),
        step_weight=st.sampled_from([0.0, 1.0, 0.3]),
        invalid_penalty=st.sampled_from([0.0, 0.1]),
    )
)


@settings(max_examples=150, deadline=None)
@given(batches(), OPTIONS)
def test_matches_naive_per_row_loop(b, opts):
    ours = gigpo_advantages(
        b["reward"], b["traj"], b["group"], b["anchor"], is_action_valid=b["valid"], **opts
    )
    ref = naive_gigpo(
        b["reward"], b["traj"], b["group"], b["anchor"], is_action_valid=b["valid"], **opts
    )
    for field in ("advantages", "episode_advantages", "step_advantages", "returns"):
        np.testing.assert_allclose(getattr(ours, field), ref[field], rtol=1e-9, atol=1e-9)
    # Same partition: ids equal exactly when the naive keys are equal.
    ref_ids, _ = factorize_hashables(ref["step_keys"])
    np.testing.assert_array_equal(ours.step_group_ids, ref_ids)


@settings(max_examples=100, deadline=None)
@given(batches(), st.sampled_from(["trajectory", "step"]))
def test_zero_mean_within_groups_under_mean(b, stats):
    res = gigpo_advantages(
        b["reward"], b["traj"], b["group"], b["anchor"], norm="mean", episode_stats=stats
    )
    groups = np.array(b["group"])
    trajs = np.array([f"{g}/{t}" for g, t in zip(b["group"], b["traj"], strict=True)])
    for g in set(b["group"]):
        rows = groups == g
        if stats == "trajectory":
            # one value per trajectory
            per_traj = {t: res.episode_advantages[i] for i, t in enumerate(trajs) if rows[i]}
            assert abs(sum(per_traj.values())) < 1e-9
        else:
            assert abs(res.episode_advantages[rows].sum()) < 1e-9
    for k in set(res.step_group_ids.tolist()):
        assert abs(res.step_advantages[res.step_group_ids == k].sum()) < 1e-9


@settings(max_examples=100, deadline=None)
@given(batches(), st.sampled_from(["mean", "mean_std", "loo"]))
def test_all_distinct_anchors_is_grpo(b, norm):
    anchors = list(range(len(b["reward"])))
    res = gigpo_advantages(b["reward"], b["traj"], b["group"], anchors, norm=norm)
    np.testing.assert_array_equal(res.step_advantages, 0.0)
    # GRPO over trajectories: one score per trajectory, spread back to its rows.
    keys = [(g, t) for g, t in zip(b["group"], b["traj"], strict=True)]
    totals: dict = {}
    for k, r in zip(keys, b["reward"], strict=True):
        totals[k] = totals.get(k, 0.0) + r
    traj_keys = list(totals)
    if norm == "mean_std":
        per_traj = grpo([totals[k] for k in traj_keys], [k[0] for k in traj_keys])
    else:
        per_traj = episode_advantages(
            [totals[k] for k in traj_keys],
            [k[0] for k in traj_keys],
            traj_ids=list(range(len(traj_keys))),
            norm=norm,
        )
    expected = [per_traj[traj_keys.index(k)] for k in keys]
    np.testing.assert_allclose(res.advantages, expected, rtol=1e-9, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(batches(), st.randoms(use_true_random=False))
def test_permuting_whole_trajectories_permutes_output(b, rnd):
    n = len(b["reward"])
    res = gigpo_advantages(b["reward"], b["traj"], b["group"], b["anchor"])
    # Reorder rows trajectory by trajectory (random order of trajectories, time order kept).
    keys = [(g, t) for g, t in zip(b["group"], b["traj"], strict=True)]
    traj_order = list(dict.fromkeys(keys))
    rnd.shuffle(traj_order)
    perm = [i for k in traj_order for i in range(n) if keys[i] == k]
    res2 = gigpo_advantages(
        *(([b[f][i] for i in perm]) for f in ("reward", "traj", "group", "anchor"))
    )
    np.testing.assert_allclose(res2.advantages, res.advantages[perm], rtol=1e-9, atol=1e-12)
    # the partition is the same, up to renumbering
    a, b2 = res.step_group_ids[perm], res2.step_group_ids
    assert len({(x, y) for x, y in zip(a.tolist(), b2.tolist(), strict=True)}) == len(
        set(a.tolist())
    )


def test_revisited_state_joins_its_own_group():
    # One trajectory visits s0 twice (a loop), the other never: the loop's two visits of s0
    # form a step group of two, and their returns are compared with each other.
    res = gigpo_advantages(
        [0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0], ["s0", "s1", "s0", "s2"], gamma=1.0, norm="mean"
    )
    assert res.step_group_ids[0] == res.step_group_ids[2]
    np.testing.assert_allclose(res.step_advantages[[0, 2]], [0.0, 0.0])  # both return 1
    res = gigpo_advantages(
        [0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0], ["s0", "s1", "s0", "s2"], gamma=0.5, norm="mean"
    )
    np.testing.assert_allclose(res.step_advantages[[0, 2]], [-0.375, 0.375])  # .25 vs 1


@settings(max_examples=60, deadline=None)
@given(batches(), OPTIONS)
def test_torch_and_numpy_agree(b, opts):
    opts = dict(opts, is_action_valid=torch.tensor(b["valid"]))
    ref = gigpo_advantages(np.array(b["reward"]), b["traj"], b["group"], b["anchor"], **opts)
    out = gigpo_advantages(
        torch.tensor(b["reward"], dtype=torch.float64), b["traj"], b["group"], b["anchor"], **opts
    )
    assert isinstance(out.advantages, torch.Tensor) and out.advantages.dtype == torch.float64
    np.testing.assert_allclose(out.advantages.numpy(), ref.advantages, rtol=1e-12, atol=1e-12)
    out32 = gigpo_advantages(
        torch.tensor(b["reward"], dtype=torch.float32), b["traj"], b["group"], b["anchor"], **opts
    )
    assert out32.advantages.dtype == torch.float32
    np.testing.assert_allclose(out32.advantages.numpy(), ref.advantages, rtol=1e-5, atol=1e-5)


def test_numpy_dtype_kept_and_ids_from_tensors():
    r = np.array([1.0, 0.0, 0.0, 1.0], dtype=np.float32)
    out = episode_advantages(
        r, torch.tensor([0, 0, 1, 1]), traj_ids=np.array([0, 1, 2, 3]), norm="mean_std"
    )
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [0.7071, -0.7071, -0.7071, 0.7071], atol=1e-3)


# ------------------------------------------------------------------ similarity clustering

WORDS = ["you", "see", "a", "mug", "apple", "on", "the", "table", "drawer", "1", "2", "is", "open"]


@st.composite
def texts(draw):
    base = [
        " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=3, max_size=60)))
        for _ in range(draw(st.integers(1, 4)))
    ]
    out = []
    for _ in range(draw(st.integers(1, 25))):
        t = draw(st.sampled_from(base))
        if draw(st.booleans()):  # a near-duplicate: one edit
            k = draw(st.integers(0, len(t)))
            t = t[:k] + draw(st.sampled_from(["x", "", "mug 3", " "])) + t[k + 1 :]
        out.append(t)
    return out


@settings(max_examples=200, deadline=None)
@given(
    texts(),
    st.sampled_from([0.5, 0.8, 0.9, 0.95, 0.99]),
    st.sampled_from(["indel", "counts"]),
    st.sampled_from(["stdlib", "cydifflib"]),
)
def test_similarity_partition_equals_difflib_first_fit(txts, threshold, bound, matcher):
    groups = np.array([i % 2 for i in range(len(txts))])
    ours = similarity_groups(txts, groups, threshold, upper_bound=bound, matcher=matcher)
    ref = naive_similarity_clusters(txts, groups.tolist(), threshold)
    np.testing.assert_array_equal(ours, factorize_hashables(ref)[0])


def test_similarity_long_texts_use_autojunk_like_difflib():
    # Texts over 200 characters trigger difflib's "popular character" heuristic, which makes
    # the ratio asymmetric: the argument order must be verl-agent's (row, representative).
    rng = np.random.default_rng(0)
    base = " ".join(rng.choice(WORDS, 80))
    txts = [base]
    for _ in range(40):
        t = list(base)
        for k in rng.integers(0, len(t), 6):
            t[k] = rng.choice(list("abcdefgh "))
        txts.append("".join(t))
    for threshold in (0.6, 0.9, 0.97):
        ref = naive_similarity_clusters(txts, [0] * len(txts), threshold)
        for matcher in ("stdlib", "cydifflib"):
            ours = similarity_groups(txts, np.zeros(len(txts), int), threshold, matcher=matcher)
            np.testing.assert_array_equal(ours, factorize_hashables(ref)[0])


def test_indel_metric_is_an_upper_bound_grouping():
    txts = ["abcdef", "abcfed", "abdcef", "zzzzzz"]
    exact_difflib = anchor_groups(txts, [0] * 4, similarity=0.8)
    indel = anchor_groups(txts, [0] * 4, similarity=0.8, metric="indel")
    # indel never groups less eagerly than difflib: every difflib pair stays together
    for i in range(4):
        for j in range(4):
            if exact_difflib[i] == exact_difflib[j]:
                assert indel[i] == indel[j]


@pytest.mark.parametrize("ids", [[0, 1, 0, 1], ["a", "b", "a", "b"], np.array([5, 9, 5, 9])])
def test_group_ids_ints_or_strings(ids):
    out = anchor_groups(["x", "x", "y", "x"], ids)
    np.testing.assert_array_equal(out, [0, 1, 2, 1])
