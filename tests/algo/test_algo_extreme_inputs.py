"""Finite inputs at the edge of float64 (rewards near 1e308, huge weights): every estimator
either gives finite advantages, computed so that nothing overflows on the way, or raises
ValueError naming the input that is too large; never NaN or inf, and no numpy warning."""

import numpy as np
import pytest
import torch

from gigpo_algo import (
    discounted_returns,
    dr_grpo,
    episode_advantages,
    episode_level,
    estimator_advantages,
    filter_uniform_groups,
    gae,
    gigpo_advantages,
    graphgpo_advantages,
    grpo,
    grpo_advantages,
    hgpo_advantages,
    reinforce_pp_baseline,
    rloo,
    rloo_advantages,
    step_advantages,
    turn_gae,
)

# A numpy warning is a failure here: the estimators check what they compute instead.
pytestmark = pytest.mark.filterwarnings("error")

B = 1e308  # finite; twice it is not
M = 1.7e308  # near float64's largest, 1.797e308
T4, G4, A4 = [0, 1, 2, 3], [0] * 4, ["a", "a", "b", "b"]

RAISES = [
    # (call, the start of the message: the input named, what overflowed)
    (lambda: discounted_returns([B, B], [0, 0], 1.0), r"rewards are too large: the discounted "
     r"returns overflow float64 \(at rows \[0\]\)"),
    (lambda: gigpo_advantages([B, B, B, B], [0, 0, 1, 1], G4, A4), r"rewards are too large: "
     r"the episode scores \(a trajectory's reward sum\) overflow float64 \(at rows \[0, 1"),
    (lambda: gigpo_advantages([B, -B, -B, B], T4, G4, A4), "rewards are too large for "
     r"step_weight=1.0: A_E \+ step_weight \* A_S overflows float64"),
    (lambda: gigpo_advantages([-B, 0, 0, 0], T4, G4, A4, is_action_valid=[False] + [True] * 3,
                              invalid_penalty=B), "invalid_penalty=1e\\+308 is too large"),
    (lambda: step_advantages([M, -M, -M], [0, 0, 0]), "returns are too large: the step "
     "advantages"),
    (lambda: episode_advantages([M, -M, -M], [0] * 3, traj_ids=[0, 1, 2]), "scores are too "
     "large: the episode advantages"),
    (lambda: episode_advantages([B, -B], [0, 0], traj_ids=[0, 1], norm="loo"), "scores are too "
     "large: the episode advantages"),
    (lambda: episode_level([B, B], [0, 0], [0, 0]), "rewards are too large: the episode scores"),
    (lambda: dr_grpo([M, -M, -M], [0] * 3), "scores are too large: a score less the mean of "
     "its group overflows"),
    (lambda: rloo([B, -B], [0, 0]), "scores are too large: a score less the mean of its "
     "group's other members overflows"),
    (lambda: reinforce_pp_baseline([M, -M, -M], [0] * 3), "scores are too large"),
    (lambda: grpo_advantages([B, B, 0, 0], [0, 0, 1, 1], G4), "rewards are too large: the "
     "episode scores"),
    (lambda: rloo_advantages([M, -M, -M, M], T4, G4), "rewards are too large: the episode "
     "advantages"),
    (lambda: estimator_advantages("gigpo", [B, -B, -B, B], T4, G4, A4), "rewards are too large"),
    (lambda: hgpo_advantages([M, -M, -M, M, -M, M], [0, 0, 1, 1, 2, 2], [0] * 6,
                             ["a", "b"] * 3, gamma=0.0, norm="mean"),
     r"rewards are too large: the level-1 advantages \(a return less its group's mean\) "
     r"overflow float64 \(at rows \[0"),
    (lambda: hgpo_advantages([1, 2], [0, 0], [0, 0], ["a", "b"], length_alpha=800.0),
     r"length_alpha=800.0 is too large: the level weights \(k \+ 1\) \*\* length_alpha "
     "overflow float64 for k up to 2"),
    (lambda: graphgpo_advantages([0, 4, 0, 0], [0, 0, 1, 1], G4, ["a", "b", "a", "c"],
                                 ["b", "c", "c", "d"], norm="mean", step_weight=B,
                                 episode_weight=B),
     "rewards are too large for step_weight=1e\\+308 and episode_weight=1e\\+308"),
    (lambda: gae(np.array([[B, 0.0]]), np.array([[-B, 0.0]]), np.ones((1, 2))),
     r"rewards or values are too large: the GAE advantages overflow float64 \(at \(row, "
     r"column\) \[\(0, 0\)\]\)"),
    (lambda: turn_gae([B, B], [[0.0], [0.0]], [0, 0]), "rewards or values are too large"),
    # A result past a narrower input dtype's range would be inf there.
    (lambda: gigpo_advantages(torch.tensor([6e4, -6e4, -6e4, 6e4], dtype=torch.float16), T4,
                              G4, A4), "rewards is torch.float16, and a result is past its "
     "range"),
    (lambda: grpo_advantages(np.array([3e38, -3e38, -3e38, -3e38], dtype=np.float32), T4, G4,
                             norm="mean"), "rewards is float32, and a result is past its range"),
]  # fmt: skip


@pytest.mark.parametrize("call,message", RAISES, ids=[str(i) for i in range(len(RAISES))])
def test_an_overflowing_result_raises_naming_the_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


FINITE = [
    # (call, expected): finite answers, computed in units of each group's largest value
    (lambda: grpo([B, -B], [0, 0]), [0.5**0.5, -(0.5**0.5)]),
    (lambda: grpo([1e200, -1e200, 0.0], [0, 0, 0]), [1.0, -1.0, 0.0]),  # the square overflows
    (lambda: episode_advantages([M, M, M, -M], [0] * 4, traj_ids=T4, norm="mean_std"),
     [0.5, 0.5, 0.5, -1.5]),
    (lambda: step_advantages([B, -B], [0, 0], norm="mean"), [B, -B]),
    (lambda: dr_grpo([B, -B], [0, 0]), [B, -B]),
    (lambda: reinforce_pp_baseline([B, -B, B, -B], [0, 0, 1, 1]), [0.75**0.5, -(0.75**0.5)] * 2),
    # A_E: (score - 0) / (unbiased std 2B / 3**0.5); A_S: +-B / (B * 2**0.5).
    (lambda: gigpo_advantages([B, -B, -B, B], T4, G4, A4, norm="mean_std").advantages,
     np.array([1, -1, -1, 1]) * (0.75**0.5 + 0.5**0.5)),
    # Level 1 (population std): +-1, weight 2; A_E weight 1.
    (lambda: hgpo_advantages([B, -B, -B, B], T4, G4, A4).advantages, [1.0, -1.0, -1.0, 1.0]),
    (lambda: hgpo_advantages([B, -B, -B, B], T4, G4, A4, base_group=True).advantages,
     np.array([1, -1, -1, 1]) * (0.75**0.5 + 2) / 3),
    (lambda: graphgpo_advantages([0, 1, 0, 0], [0, 0, 1, 1], G4, ["a", "b", "a", "c"],
                                 ["b", "c", "c", "d"], is_action_valid=[False] + [True] * 3,
                                 invalid_penalty=M).step_advantages,
     [-(0.5**0.5), 0.0, 0.5**0.5, 0.0]),
    (lambda: filter_uniform_groups([B, -B, 1.0, 1.0], [0, 0, 1, 1]), [True, True, False, False]),
]  # fmt: skip


@pytest.mark.parametrize("call,expected", FINITE, ids=[str(i) for i in range(len(FINITE))])
def test_a_finite_answer_is_computed_without_overflow(call, expected):
    out = np.asarray(call())
    assert np.isfinite(out.astype(np.float64)).all()
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_hgpo_level_weights_whose_sum_overflows_give_the_weighted_mean():
    # Two walks over the same states, 1001 steps each, history 1000: 1001 levels, each row
    # in a group of two at every level its history reaches. (k + 1) ** 102.5 fits float64
    # (1002 ** 102.5 is about 4e307), their sum does not: the mean is taken with the weights
    # scaled down, here against the same mean with weights made in log space.
    rng = np.random.default_rng(0)
    n, alpha = 1001, 102.5
    anchors = np.tile(rng.integers(0, 3, n), 2)
    rewards = rng.normal(size=2 * n)
    traj = np.repeat([0, 1], n)
    out = hgpo_advantages(
        rewards, traj, [0] * (2 * n), anchors, history_length=n - 1, length_alpha=alpha
    )
    assert np.isfinite(out.advantages).all()
    # From step 100 on, the deep levels (the two walks' rows alone, +-1) outweigh the rest.
    assert (np.abs(out.advantages[np.tile(np.arange(n), 2) >= 100]) > 0.99).all()
    items = out.level_advantages  # (K, N)
    log_w = alpha * np.log(np.arange(2, n + 2))
    w = np.exp(log_w - log_w.max())[:, None] * ~np.isnan(items) * (items != 0)
    expected = (w * np.nan_to_num(items)).sum(axis=0) / w.sum(axis=0)
    np.testing.assert_allclose(out.advantages, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", range(40))
def test_every_estimator_gives_finite_advantages_or_raises_naming_an_input(case):
    # Random batches of finite values at every scale, mixed: each estimator's numbers are
    # finite, or it raises ValueError naming what is too large.
    rng = np.random.default_rng(case)
    n = 12
    scale = 10.0 ** rng.choice([0, 150, 300, 307, 308, -300], n)
    rewards = np.clip(rng.normal(size=n), -1.7, 1.7) * scale
    traj, groups = rng.integers(0, 4, n), rng.integers(0, 2, n)
    anchors = [f"s{x}" for x in rng.integers(0, 3, n)]
    valid = rng.random(n) > 0.3
    penalty = float(rng.choice([0.0, 1.0, B]))
    common = dict(is_action_valid=valid, invalid_penalty=penalty)
    calls = {
        "gigpo": lambda norm: gigpo_advantages(rewards, traj, groups, anchors, norm=norm,
                                               step_weight=float(rng.choice([1, B])), **common),
        "grpo": lambda norm: grpo_advantages(rewards, traj, groups, norm=norm, **common),
        "rloo": lambda norm: rloo_advantages(rewards, traj, groups, **common),
        "hgpo": lambda norm: hgpo_advantages(
            rewards, traj, groups, anchors, norm="mean" if norm == "loo" else norm,
            history_length=3, length_alpha=float(rng.choice([1, 300])),
            base_group=bool(rng.integers(2)), **common),
        "graphgpo": lambda norm: graphgpo_advantages(
            rewards, traj, groups, anchors, anchors[1:] + anchors[:1],
            norm="mean" if norm == "loo" else norm, **common),
        "episode": lambda norm: episode_advantages(rewards, groups, traj_ids=traj, norm=norm),
        "step": lambda norm: step_advantages(rewards, groups, norm=norm),
        "grpo_scores": lambda norm: grpo(rewards, groups),
        "dr_grpo": lambda norm: dr_grpo(rewards, groups),
        "rloo_scores": lambda norm: rloo(rewards, groups),
        "reinforce_pp": lambda norm: reinforce_pp_baseline(rewards, groups),
        "returns": lambda norm: discounted_returns(rewards, traj, 0.9),
        "gae": lambda norm: gae(rewards.reshape(3, 4), rewards[::-1].reshape(3, 4),
                                np.ones((3, 4)), gamma=0.9, lam=0.95),
        "turn_gae": lambda norm: turn_gae(rewards, [[x] for x in rewards[::-1]], traj),
    }  # fmt: skip
    for name, call in calls.items():
        for norm in ("mean", "mean_std", "loo"):
            try:
                out = call(norm)
            except ValueError as exc:
                assert "too large" in str(exc), (name, norm, str(exc))
                continue
            for array in _arrays(out):
                assert np.isfinite(array).all(), (name, norm, array)


def _arrays(out):
    """Every float array of an estimator's result (a named tuple, a tuple, a list, one
    array)."""
    if isinstance(out, np.ndarray):
        return [out] if out.dtype.kind == "f" else []
    if isinstance(out, tuple | list):
        return [a for part in out for a in _arrays(part)]
    return []
