"""GRPO and RLOO are GiGPO without the step level: one episode score for every estimator."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from naive_gigpo import naive_gigpo

from gigpo_algo import baselines
from gigpo_algo.advantages import gigpo_advantages
from gigpo_algo.estimators import (
    ESTIMATOR_SETTINGS,
    ESTIMATORS,
    estimator_advantages,
    grpo_advantages,
    rloo_advantages,
)


def _batch(seed: int, groups: int = 4, size: int = 4, max_len: int = 6):
    """Random step records: rewards, traj ids, group ids, anchors, validity."""
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(groups):
        for t in range(size):
            for _ in range(int(rng.integers(1, max_len + 1))):
                rows.append((float(rng.choice([-1.0, 0.0, 0.5, 1.0])), t, g, int(rng.integers(3))))
    r, t, g, a = (list(col) for col in zip(*rows, strict=True))
    valid = rng.random(len(r)) > 0.3
    return np.array(r), t, g, [f"s{x}" for x in a], valid


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("norm", ["mean", "mean_std"])
@pytest.mark.parametrize("episode_stats", ["trajectory", "step"])
def test_grpo_is_gigpo_without_the_step_level(seed, norm, episode_stats):
    r, t, g, a, valid = _batch(seed)
    kwargs = dict(
        norm=norm, episode_stats=episode_stats, is_action_valid=valid, invalid_penalty=0.5
    )
    grpo = grpo_advantages(r, t, g, **kwargs)
    gigpo = gigpo_advantages(r, t, g, a, step_weight=0.0, gamma=0.9, **kwargs)
    np.testing.assert_array_equal(grpo.advantages, gigpo.advantages)
    np.testing.assert_array_equal(grpo.episode_advantages, gigpo.episode_advantages)
    # ... and the per-row loop oracle (written separately, in benchmarks/naive_gigpo.py).
    oracle = naive_gigpo(list(r), t, g, a, step_weight=0.0, **kwargs)
    np.testing.assert_allclose(grpo.advantages, oracle["advantages"], atol=1e-12)
    assert not np.any(grpo.step_advantages)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("episode_stats", ["trajectory", "step"])
def test_rloo_is_gigpo_with_loo_norm_without_the_step_level(seed, episode_stats):
    r, t, g, a, valid = _batch(seed)
    kwargs = dict(episode_stats=episode_stats, is_action_valid=valid, invalid_penalty=0.25)
    rloo = rloo_advantages(r, t, g, **kwargs)
    gigpo = gigpo_advantages(r, t, g, a, step_weight=0.0, norm="loo", **kwargs)
    np.testing.assert_array_equal(rloo.advantages, gigpo.advantages)
    oracle = naive_gigpo(list(r), t, g, a, step_weight=0.0, norm="loo", **kwargs)
    np.testing.assert_allclose(rloo.advantages, oracle["advantages"], atol=1e-12)


def test_one_score_per_trajectory_matches_the_trajectory_baselines():
    """Without penalties every row of a trajectory has its trajectory's score, and the row
    estimators equal the classic per-trajectory GRPO / RLOO of gigpo_algo.baselines."""
    r, t, g, _, _ = _batch(11)
    keys = sorted({(gi, ti) for gi, ti in zip(g, t, strict=True)})
    score = {k: 0.0 for k in keys}
    for x, gi, ti in zip(r, g, t, strict=True):
        score[(gi, ti)] += x
    per_traj = np.array([score[k] for k in keys])
    traj_groups = [k[0] for k in keys]
    row_index = [keys.index((gi, ti)) for gi, ti in zip(g, t, strict=True)]
    np.testing.assert_allclose(
        grpo_advantages(r, t, g, norm="mean_std").advantages,
        np.asarray(baselines.grpo(per_traj, traj_groups))[row_index],
        atol=1e-12,
    )
    np.testing.assert_allclose(
        rloo_advantages(r, t, g).advantages,
        np.asarray(baselines.rloo(per_traj, traj_groups))[row_index],
        atol=1e-12,
    )


def test_the_issue_example_scores_the_same_under_both():
    """rewards [0, 0, 0 | -0.5], rows 0-1 invalid, c = 0.5: trajectory 1 scored -0.316 by
    GiGPO's episode level and +0.707 by the old GRPO path; now both give -0.316."""
    rewards, trajs, groups = [0.0, 0.0, 0.0, -0.5], [0, 0, 0, 1], [0, 0, 0, 0]
    valid = [False, False, True, True]
    gigpo = gigpo_advantages(
        rewards,
        trajs,
        groups,
        ["a", "b", "c", "a"],
        step_weight=0.0,
        norm="mean_std",
        is_action_valid=valid,
        invalid_penalty=0.5,
    )
    grpo = grpo_advantages(
        rewards, trajs, groups, norm="mean_std", is_action_valid=valid, invalid_penalty=0.5
    )
    assert grpo.advantages[3] == pytest.approx(-0.316, abs=1e-3)
    np.testing.assert_array_equal(grpo.advantages, gigpo.advantages)


def test_returns_are_reward_to_go_less_the_penalty():
    res = grpo_advantages(
        [1.0, 2.0, 3.0, 5.0],
        [0, 0, 0, 1],
        [0, 0, 0, 0],
        is_action_valid=[True, False, True, True],
        invalid_penalty=1.0,
    )
    np.testing.assert_allclose(res.returns, [6.0, 4.0, 3.0, 5.0])
    np.testing.assert_array_equal(res.step_group_ids, [0, 1, 2, 3])


def test_dispatch_by_name_and_refusal_of_ignored_settings():
    r, t, g, a, valid = _batch(3)
    assert set(ESTIMATORS) == set(ESTIMATOR_SETTINGS)
    by_name = estimator_advantages("grpo", r, t, g, is_action_valid=valid, norm="mean")
    direct = grpo_advantages(r, t, g, is_action_valid=valid, norm="mean")
    np.testing.assert_array_equal(by_name.advantages, direct.advantages)
    # None means "the estimator's default", for any estimator.
    estimator_advantages("rloo", r, t, g, gamma=None, step_weight=None, norm=None)
    with pytest.raises(ValueError, match=r"step_weight=1.0 is not used by estimator='grpo'"):
        estimator_advantages("grpo", r, t, g, step_weight=1.0)
    with pytest.raises(ValueError, match=r"norm='mean_std' is not used by estimator='rloo'"):
        estimator_advantages("rloo", r, t, g, norm="mean_std")
    with pytest.raises(ValueError, match="similarity=0.9 is not used by estimator='grpo'"):
        estimator_advantages("grpo", r, t, g, similarity=0.9)
    with pytest.raises(ValueError, match="estimator must be one of"):
        estimator_advantages("ppo", r, t, g)
    with pytest.raises(ValueError, match="needs anchors"):
        estimator_advantages("gigpo", r, t, g)
    with pytest.raises(ValueError, match="invalid_penalty needs is_action_valid"):
        estimator_advantages("grpo", r, t, g, invalid_penalty=0.5)


def test_tensors_in_tensors_out():
    r, t, g, _, _ = _batch(5)
    out = grpo_advantages(torch.tensor(r, dtype=torch.float32), t, g)
    assert isinstance(out.advantages, torch.Tensor) and out.advantages.dtype == torch.float32
    np.testing.assert_allclose(
        out.advantages.numpy(), grpo_advantages(r, t, g).advantages, atol=1e-5
    )


def test_gigpo_takes_step_groups_formed_once_and_checks_them():
    """A caller that forms the step groups for every estimator passes them in: the same
    advantages as grouping the anchors here, with exact and with similarity grouping."""
    from gigpo_algo.advantages import anchor_groups, gigpo_advantages

    rewards, traj, group = [0.0, 1.0, 0.0, 1.0, 0.5, 0.0], [0, 0, 1, 1, 2, 3], [0, 0, 0, 0, 1, 1]
    texts = ["room a", "room b", "room a!", "room c", "room a", "room a"]
    for similarity in (None, 0.8):
        ids = anchor_groups(texts, group, similarity=similarity)
        ref = gigpo_advantages(rewards, traj, group, texts, similarity=similarity)
        got = gigpo_advantages(rewards, traj, group, similarity=similarity, step_group_ids=ids)
        np.testing.assert_array_equal(got.advantages, ref.advantages)
        np.testing.assert_array_equal(got.step_group_ids, ref.step_group_ids)
    with pytest.raises(ValueError, match="spans more than one episode group"):
        gigpo_advantages(rewards, traj, group, step_group_ids=[0] * 6)
    with pytest.raises(ValueError, match="similarity_metric must be one of"):
        gigpo_advantages(rewards, traj, group, similarity_metric="bogus", step_group_ids=ids)
    with pytest.raises(ValueError, match="needs anchors"):
        gigpo_advantages(rewards, traj, group)
