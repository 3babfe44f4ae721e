"""HGPO and GraphGPO: the per-row reference on verl-agent's worked examples, then the fast
functions against the reference on random batches.

The worked examples' numbers come from running verl-agent's recipe files unmodified
(``recipe/hgpo/core_hgpo.py``, ``recipe/GraphGPO/core_graph.py``, ``gigpo/core_gigpo.py`` at
1df19bd), which compute in float32: hence the 1e-6 tolerance there. The reference
(``benchmarks/naive_family.py``) is float64 Python loops; the fast functions must match it
to 1e-9.
"""

import itertools
from collections import Counter

import numpy as np
import pytest
from naive_family import GOAL, naive_graphgpo, naive_hgpo

from gigpo_algo.graphgpo import graphgpo_advantages
from gigpo_algo.hgpo import hgpo_advantages

OFFICIAL = dict(rtol=0, atol=2e-6)  # float32 output of the official code
EXACT = dict(rtol=1e-9, atol=1e-9)

# ----------------------------------------------------------------------------- worked examples

# HGPO examples: one uid, trajectories A [a, b], B [a, b], C [a, c, b].
H_TRAJ = ["A", "A", "B", "B", "C", "C", "C"]
H_ANCHORS = ["a", "b", "a", "b", "a", "c", "b"]


def test_discounted_returns_example():
    # Spec section 0: x = [0, 0, 1], y = [0, 2], gamma .95.
    _, parts = naive_hgpo(
        [0, 0, 1, 0, 2], list("xxxyy"), [0] * 5, list("pqrst"), gamma=0.95, episode_stats="step"
    )
    np.testing.assert_allclose(parts["returns"], [0.9025, 0.95, 1.0, 1.9, 2.0], **OFFICIAL)


@pytest.mark.parametrize(
    ("alpha", "expected"),
    [
        (1.0, [-1.224743, -0.999999, 0, 1.089897, 1.224743, 0, -1.224743]),
        (0.0, [-1.224743, -0.999998, 0, 1.112371, 1.224743, 0, -1.224743]),
    ],
)
def test_hgpo_example_1(alpha, expected):
    # step_rewards [1, 2], [3, 4], [5, 6, 0] given as rewards with gamma 0.
    adv, parts = naive_hgpo(
        [1, 2, 3, 4, 5, 6, 0],
        H_TRAJ,
        [0] * 7,
        H_ANCHORS,
        history_length=1,
        gamma=0.0,
        norm="mean_std",
        length_alpha=alpha,
        episode_stats="step",
    )
    np.testing.assert_allclose(adv, expected, **OFFICIAL)
    # A1's level-1 item is exactly 0 and is dropped: only the level-2 item (-1) is left.
    assert parts["items"][1][0] == (1, 0.0)
    keep_zero, _ = naive_hgpo(
        [1, 2, 3, 4, 5, 6, 0],
        H_TRAJ,
        [0] * 7,
        H_ANCHORS,
        history_length=1,
        gamma=0.0,
        length_alpha=1.0,
        episode_stats="step",
        drop_zero=False,
    )
    np.testing.assert_allclose(keep_zero[1], -3 / (1 + 1e-6) / (5 + 1e-6))


@pytest.mark.parametrize(
    ("history_length", "expected"),
    [
        (1, [-0.206349, -0.408730, 0.460317, 0.591270, -0.206349, -0.285714, -0.317460]),
        (0, [-0.206349, -0.317460, 0.460317, 0.682539, -0.206349, -0.285714, -0.317460]),
    ],
)
def test_hgpo_example_2_base_group(history_length, expected):
    adv, parts = naive_hgpo(
        [0, 0, 0, 1, 0, 0, 0],
        H_TRAJ,
        [0] * 7,
        H_ANCHORS,
        history_length=history_length,
        gamma=0.5,
        norm="mean",
        base_group=True,
        episode_stats="step",
    )
    np.testing.assert_allclose(parts["returns"], [0, 0, 0.5, 1, 0, 0, 0])
    np.testing.assert_allclose(parts["base"], [-2 / 7] * 2 + [5 / 7] * 2 + [-2 / 7] * 3)
    np.testing.assert_allclose(adv, expected, **OFFICIAL)


def test_episode_statistics_examples():
    # core_gigpo episode_norm_reward: T1 3 rows score 1, T2 1 row score 0 (one uid).
    kw = dict(gamma=0.1, step_weight=0.0)
    args = ([0, 0, 1, 0], [1, 1, 1, 2], [0] * 4, list("abcd"), list("bcde"))
    adv, _ = naive_graphgpo(*args, norm="mean_std", episode_stats="step", **kw)
    np.testing.assert_allclose(adv, [0.499999, 0.499999, 0.499999, -1.499997], **OFFICIAL)
    adv, _ = naive_graphgpo(*args, norm="mean", episode_stats="step", **kw)
    np.testing.assert_allclose(adv, [0.25, 0.25, 0.25, -0.75], **EXACT)
    # One value per trajectory (the project's Eq. 3): [1, 0] -> +-0.707106.
    adv, _ = naive_graphgpo(*args, norm="mean_std", episode_stats="trajectory", **kw)
    np.testing.assert_allclose(adv, [0.707106] * 3 + [-0.707106], **OFFICIAL)
    # A single-row uid: verl-agent gives score / (1 + eps) ("step"); the project gives 0.
    one = ([0.7], [0], [0], ["s"], ["t"])
    adv, _ = naive_graphgpo(*one, norm="mean_std", episode_stats="step", **kw)
    np.testing.assert_allclose(adv, [0.699999], **OFFICIAL)
    adv, _ = naive_graphgpo(*one, norm="mean", episode_stats="step", **kw)
    assert adv[0] == 0.7
    adv, _ = naive_graphgpo(*one, norm="mean_std", episode_stats="trajectory", **kw)
    assert adv[0] == 0.0


# GraphGPO example 1: T1 (won) s0->s1->s2->goal, T2 s0->s3->s1->s4, T3 s0->s1->s5.
G_REWARDS = [0, 0, 1, 0, 0, 0, 0, 0]
G_TRAJ = [1, 1, 1, 2, 2, 2, 3, 3]
G_ANCHORS = ["s0", "s1", "s2", "s0", "s3", "s1", "s0", "s1"]
G_NEXT = ["s1", "s2", "end", "s3", "s1", "s4", "s1", "s5"]


@pytest.mark.parametrize(
    ("normalize", "returns"),
    [
        (False, [0.1, 1.0, 10, 0.01, 0.1, 0.001, 0.1, 0.001]),
        (True, [10, 10, 10, 1, 10, 0.01, 10, 0.01]),
    ],
)
def test_graphgpo_example_1_returns(normalize, returns):
    _, parts = naive_graphgpo(
        G_REWARDS,
        G_TRAJ,
        [0] * 8,
        G_ANCHORS,
        G_NEXT,
        gamma=0.1,
        normalize_distance=normalize,
        episode_stats="step",
    )
    np.testing.assert_allclose(parts["returns"], returns, rtol=1e-12)
    # d: goal 0, s2 1, s1 2, s0 3, s3 3; s4 and s5 cannot reach it: far (3) + 1.
    np.testing.assert_array_equal(parts["distances"], [3, 2, 1, 3, 3, 2, 3, 2])
    np.testing.assert_array_equal(parts["next_distances"], [2, 1, 0, 3, 2, 4, 2, 4])
    assert parts["next_nodes"][2] is GOAL


@pytest.mark.parametrize(
    ("norm", "expected", "tol"),
    [
        (
            "mean_std",
            [1.784952, 2.362311, 1.207612, -1.879246, -0.724567, -1.301917, -0.147228, -1.301917],
            OFFICIAL,
        ),
        ("mean", [0.655, 1.291, 0.625, -0.435, -0.375, -0.708, -0.345, -0.708], dict(atol=1e-3)),
    ],
)
def test_graphgpo_example_1_advantages(norm, expected, tol):
    adv, parts = naive_graphgpo(
        G_REWARDS, G_TRAJ, [0] * 8, G_ANCHORS, G_NEXT, gamma=0.1, norm=norm, episode_stats="step"
    )
    np.testing.assert_allclose(adv, expected, **tol)
    # s2 and s3 are singleton step groups: 0.
    assert parts["step"][2] == 0.0 and parts["step"][4] == 0.0


def test_graphgpo_example_2_no_success_invalid_action():
    args = ([0] * 4, list("AABB"), [0] * 4, ["p0", "p1", "p0", "p2"], ["p1", "p3", "p2", "p2"])
    adv, parts = naive_graphgpo(
        *args,
        gamma=0.1,
        episode_stats="step",
        is_action_valid=[True, True, False, True],
        invalid_penalty=0.1,
    )
    np.testing.assert_array_equal(parts["distances"], [1, 1, 1, 1])
    np.testing.assert_allclose(parts["returns"], [1, 1, 0.9, 1], rtol=1e-12)
    np.testing.assert_allclose(adv, [1.207087, 0.499990, -2.207067, 0.499990], **OFFICIAL)
    adv, _ = naive_graphgpo(*args, gamma=0.1, episode_stats="step")
    assert np.all(adv == 0.0)


def test_graphgpo_similarity_merges_nodes_first_fit():
    # "room 1 ..." and "room 7 ..." differ in one character: one node at 0.9, two at 0.999.
    near = "You are in room 1. A table, a chair and a lamp are here."
    other = near.replace("room 1", "room 7")
    args = ([0, 1, 0], [0, 0, 1], [0, 0, 0], ["start", near, "start"], [near, "won", other])
    kw = dict(gamma=0.5, norm="mean", episode_stats="step")
    _, exact = naive_graphgpo(*args, **kw)
    _, merged = naive_graphgpo(*args, **kw, similarity=0.9)
    _, strict = naive_graphgpo(*args, **kw, similarity=0.999)
    # Exactly: `other` cannot reach the goal (d = far 2 + 1); merged with `near`, d = 1.
    assert exact["next_distances"][2] == 3.0 and merged["next_distances"][2] == 1.0
    assert merged["next_nodes"][2] == near  # the first representative
    assert strict["next_distances"][2] == 3.0
    # Returns 10 * .5 ** d: 5 and 1.25 apart, both 5 merged; the rows from "start" are one
    # step group either way.
    np.testing.assert_allclose(exact["step"], [1.875, 0, -1.875], **EXACT)
    np.testing.assert_array_equal(merged["step"], [0, 0, 0])


# ----------------------------------------------------------------------------- random batches


def random_batch(seed: int, *, text_states: bool = False) -> dict:
    """Groups of trajectories walking over a few states (revisits, self-loops, cycles),
    reward 10 at the end of some, sparse small rewards, invalid actions; some episodes end
    in a state nothing else reaches; trajectories interleaved with their order kept.
    No group is a single row (see test_step_stats_single_row_group)."""
    rng = np.random.default_rng(seed)
    str_ids = bool(rng.integers(2))
    words = ("kettle", "kettles")
    texts = [
        f"You are at place {p}. You see {p % 3} mugs and a {w}." for p in range(8) for w in words
    ]
    queues = []
    for g in range(int(rng.integers(1, 5))):
        n_states = int(rng.integers(2, 7))
        n_trajs = int(rng.integers(1, 6))
        for t in range(n_trajs):
            length = int(rng.integers(2 if n_trajs == 1 else 1, 9))
            won = rng.random() < 0.4
            state = int(rng.integers(n_states)) if rng.random() < 0.5 else 0
            rows = []
            for k in range(length):
                nxt = int(rng.integers(n_states)) if rng.random() < 0.8 else state
                reward = (
                    10.0 if won and k == length - 1 else float(rng.normal()) * (rng.random() < 0.2)
                )
                rows.append([reward, state, nxt, bool(rng.random() > 0.2), won])
                state = nxt
            if rng.random() < 0.3:
                rows[-1][2] = 100 + t  # an end state of its own
            gid, tid = (f"g{g}", f"t{t}") if str_ids else (7 * g, t)
            queues.append([(gid, tid, *row) for row in rows][::-1])
    out = []
    while queues:
        k = int(rng.integers(len(queues)))
        out.append(queues[k].pop())
        if not queues[k]:
            queues.pop(k)
    group, traj, reward, state, nxt, valid, won = map(list, zip(*out, strict=True))
    if text_states:
        state, nxt = [texts[s % 16] for s in state], [texts[s % 16] for s in nxt]
    elif str_ids:
        state, nxt = [f"s{s}" for s in state], [f"s{s}" for s in nxt]
    return dict(
        rewards=reward, traj=traj, group=group, anchors=state, next=nxt, valid=valid, won=won
    )


HGPO_GRID = list(
    itertools.product(
        ["mean", "mean_std"], ["trajectory", "step"], [False, True], [0, 1, 2, 3], [0.0, 1.0, 2.0]
    )
)


@pytest.mark.parametrize("seed", range(30))
def test_hgpo_matches_reference(seed):
    b = random_batch(seed)
    rng = np.random.default_rng(1000 + seed)
    # Not gamma .9 with penalty .1: returns 10 * .9**2, 10 * .9, 10 - .1 have their mean
    # exactly at the middle one, and whether that item is exactly 0 (and dropped) then
    # depends on rounding (the official float32 code keeps it; an exact loop drops it).
    gamma = [0.95, 0.5, 1.0, 0.8][seed % 4]
    for i in rng.choice(len(HGPO_GRID), 16, replace=False):
        norm, stats, base, history, alpha = HGPO_GRID[i]
        kw = dict(
            history_length=history,
            gamma=gamma,
            norm=norm,
            length_alpha=alpha,
            base_group=base,
            episode_stats=stats,
            is_action_valid=b["valid"],
            invalid_penalty=[0.0, 0.1][seed % 2],
            drop_zero=bool(i % 3),
        )
        res = hgpo_advantages(b["rewards"], b["traj"], b["group"], b["anchors"], **kw)
        ref, parts = naive_hgpo(b["rewards"], b["traj"], b["group"], b["anchors"], **kw)
        np.testing.assert_allclose(res.advantages, ref, **EXACT, err_msg=str(kw))
        np.testing.assert_allclose(res.returns, parts["returns"], **EXACT)
        if base:
            np.testing.assert_allclose(res.episode_advantages, parts["base"], **EXACT)
        # Every level: the row's group size and its item (NaN where there is none).
        sizes = np.zeros((history + 1, len(ref)), dtype=np.int64)
        items = np.full((history + 1, len(ref)), np.nan)
        for (_, k, _), members in parts["clusters"].items():
            sizes[k - 1, members] = len(members)
        for row, row_items in enumerate(parts["items"]):
            for k, a in row_items:
                if k:
                    items[k - 1, row] = a
        # Levels past the longest trajectory hold no row, and are left out.
        depth = len(res.level_sizes)
        longest = max(Counter(zip(b["group"], b["traj"], strict=True)).values())
        assert depth == min(history + 1, longest)
        assert not sizes[depth:].any()
        np.testing.assert_array_equal(res.level_sizes, sizes[:depth])
        np.testing.assert_allclose(res.level_advantages, items[:depth], **EXACT)
        assert ((res.level_group_ids >= 0) == (sizes[:depth] > 0)).all()


@pytest.mark.parametrize("seed", range(30))
def test_graphgpo_matches_reference(seed):
    b = random_batch(seed, text_states=seed % 3 == 0)
    rng = np.random.default_rng(2000 + seed)
    for norm, stats, normalize in itertools.product(
        ["mean", "mean_std"], ["trajectory", "step"], [False, True]
    ):
        kw = dict(
            gamma=float(rng.choice([0.1, 0.5, 0.8, 1.0])),
            normalize_distance=normalize,
            step_weight=float(rng.choice([1.0, 0.5])),
            episode_weight=float(rng.choice([1.0, 0.0, 2.0])),
            norm=norm,
            episode_stats=stats,
            is_action_valid=b["valid"],
            invalid_penalty=[0.0, 0.1][seed % 2],
            success=b["won"] if rng.random() < 0.3 else None,
            similarity=0.9 if seed % 3 == 0 and rng.random() < 0.7 else None,
        )
        args = (b["rewards"], b["traj"], b["group"], b["anchors"], b["next"])
        res = graphgpo_advantages(*args, **kw)
        ref, parts = naive_graphgpo(*args, **kw)
        np.testing.assert_allclose(res.advantages, ref, **EXACT, err_msg=str(kw))
        np.testing.assert_allclose(res.returns, parts["returns"], **EXACT)
        np.testing.assert_array_equal(res.distances, parts["distances"])
        np.testing.assert_array_equal(res.next_distances, parts["next_distances"])
        np.testing.assert_allclose(res.step_advantages, parts["step"], **EXACT)
        np.testing.assert_allclose(res.episode_advantages, parts["episode"], **EXACT)
        # The same graph nodes: equal ids exactly where the reference's nodes are equal.
        nodes = parts["nodes"] + parts["next_nodes"]
        keys = [
            ("goal",) if v is GOAL else (g, v) for g, v in zip(b["group"] * 2, nodes, strict=True)
        ]
        ids = np.concatenate([res.node_ids, res.next_node_ids])
        first: dict = {}
        for key, i in zip(keys, ids.tolist(), strict=True):
            assert first.setdefault(key, i) == i
        assert len(set(first.values())) == len(first)
        assert (
            (res.next_node_ids == -1) == np.array([v is GOAL for v in parts["next_nodes"]])
        ).all()


@pytest.mark.parametrize("seed", range(8))
def test_reference_styles_agree(seed):
    """``style="official"`` (the official code's scans and tensors) gives the same numbers."""
    b = random_batch(seed, text_states=seed % 2 == 0)
    common = dict(is_action_valid=b["valid"], invalid_penalty=0.1)
    for norm, stats in itertools.product(["mean", "mean_std"], ["trajectory", "step"]):
        kw = dict(norm=norm, episode_stats=stats, **common)
        h_kw = dict(history_length=seed % 4, base_group=True, length_alpha=1.0, **kw)
        args = (b["rewards"], b["traj"], b["group"], b["anchors"])
        python, _ = naive_hgpo(*args, **h_kw)
        official, _ = naive_hgpo(*args, **h_kw, style="official")
        np.testing.assert_allclose(official, python, **EXACT)
        g_kw = dict(normalize_distance=bool(seed % 2), similarity=0.9 if seed % 2 else None, **kw)
        python, p_parts = naive_graphgpo(*args, b["next"], **g_kw)
        official, o_parts = naive_graphgpo(*args, b["next"], **g_kw, style="official")
        np.testing.assert_allclose(official, python, **EXACT)
        np.testing.assert_array_equal(o_parts["distances"], p_parts["distances"])
        np.testing.assert_allclose(o_parts["returns"], p_parts["returns"], **EXACT)


def test_random_batches_cover_the_cases():
    """The random batches above hold what they are meant to test."""
    seen = dict(revisit=0, cycle=0, no_success=0, unreachable=0, invalid=0, interleaved=0)
    for seed in range(30):
        b = random_batch(seed)
        _, parts = naive_graphgpo(b["rewards"], b["traj"], b["group"], b["anchors"], b["next"])
        seen["invalid"] += not all(b["valid"])
        groups = dict.fromkeys(b["group"])
        for g in groups:
            rows = [i for i, x in enumerate(b["group"]) if x == g]
            won = any(b["won"][i] for i in rows)
            seen["no_success"] += not won
            # A next state that no row leaves cannot reach the goal.
            leaves = {parts["nodes"][i] for i in rows}
            dead = [i for i in rows if parts["next_nodes"][i] not in leaves | {GOAL}]
            seen["unreachable"] += won and bool(dead)
            if won and dead:  # they get the group's largest distance
                d = parts["next_distances"]
                assert all(d[i] == max(d[rows].max(), parts["distances"][rows].max()) for i in dead)
            pairs = {(b["traj"][i], b["anchors"][i]) for i in rows}
            seen["revisit"] += len(pairs) < len(rows)
            seen["cycle"] += any(b["anchors"][i] == b["next"][i] for i in rows)
        order = [(b["group"][i], b["traj"][i]) for i in range(len(b["traj"]))]
        seen["interleaved"] += any(
            order[i] != order[i + 1] and order[i] in order[i + 2 :] for i in range(len(order) - 2)
        )
    assert all(v >= 5 for v in seen.values()), seen


# ------------------------------------------------- verl-agent's lone episode under step stats


@pytest.mark.parametrize("method", ["hgpo", "graphgpo"])
def test_step_stats_single_row_group(method):
    """episode_stats="step": a single-row episode group gets verl-agent's score / (1 + eps)."""
    rewards, traj, group, anchors = [10.0, 0.0, 10.0], [0, 0, 1], ["a", "a", "b"], [1, 2, 1]
    if method == "hgpo":
        kw = dict(base_group=True, episode_stats="step", norm="mean_std")
        res = hgpo_advantages(rewards, traj, group, anchors, **kw)
        ref, _ = naive_hgpo(rewards, traj, group, anchors, **kw)
    else:
        kw = dict(episode_stats="step", norm="mean_std")
        res = graphgpo_advantages(rewards, traj, group, anchors, [2, 3, 3], **kw)
        ref, _ = naive_graphgpo(rewards, traj, group, anchors, [2, 3, 3], **kw)
    assert ref[2] == pytest.approx(10.0, rel=1e-5)
    np.testing.assert_allclose(res.advantages, ref, **EXACT)
