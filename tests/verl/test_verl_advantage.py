"""The advantage step on verl batches of step rows: ``training.verl.compute_advantage`` against
verl-agent's official outputs, and verl's own dispatch (its ``compute_advantage``, its v1
multi-trajectory step, its registry) against gigpo_algo's functions on the same rows."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto

from gigpo_algo import gigpo_advantages, graphgpo_advantages, hgpo_advantages
from training.verl import compute_advantage

# A batch as verl-agent's multi-turn rollout leaves it (upstream commit 1df19bd): (uid,
# traj_uid, anchor_obs, next_obs, rewards, is_action_valid, response length). A won episode's
# last next_obs is the string 'success', as its GraphGPO rollout loop writes it.
ROWS = [
    ("u0", "u0-t0", "s0", "s2", 0.0, True, 1),
    ("u0", "u0-t0", "s2", "s1", 0.0, True, 2),
    ("u0", "u0-t0", "s1", "s2", 0.0, False, 2),
    ("u0", "u0-t1", "s0", "success", 10.0, True, 1),
    ("u0", "u0-t2", "s0", "s0", 0.0, True, 2),
    ("u0", "u0-t2", "s0", "success", 10.0, False, 1),
    ("u1", "u1-t0", "s0", "s1", 0.0, False, 1),
    ("u1", "u1-t0", "s1", "s0", 0.0, False, 2),
    ("u1", "u1-t1", "s0", "s1", 0.0, True, 2),
    ("u1", "u1-t1", "s1", "s2", 0.0, True, 2),
    ("u1", "u1-t2", "s0", "s2", 0.0, False, 4),
    ("u1", "u1-t2", "s2", "s1", 0.0, False, 4),
]
#: verl-agent's invalid-action penalty coefficient in these batches (its scripts' 0.1).
COEF = 0.1
# Each row's advantage as verl-agent 1df19bd's unmodified code computes it on ROWS (its
# trainers' pipeline: compute_step_discounted_returns or GraphGPO's graph path returns, then
# apply_invalid_action_penalty at 0.1, then compute_{gigpo,hgpo,graphgpo}_outcome_advantage;
# run with verl 0.9.1's DataProto): (algorithm section, advantages).
OFFICIAL = {
    "gigpo mean_norm": (
        {"adv_estimator": "gigpo", "gamma": 0.95, "gigpo": {"mode": "mean_norm"}},
        [-12.316667, -4.966667, -5.066667, 7.683333, 7.183333, 7.483333,
         -0.066667, -0.083333, 0.133333, 0.116667, -0.066667, -0.033333],
    ),
    "gigpo mean_std_norm": (
        {"adv_estimator": "gigpo", "gamma": 0.95,
         "gigpo": {"mode": "mean_std_norm", "step_advantage_w": 1.0,
                   "enable_similarity": False, "similarity_thresh": 0.95}},
        [-2.405289, -0.906745, -0.925001, 1.459207, 1.357265, 1.420562,
         -1.222825, -1.352582, 2.44565, 1.998066, -1.222825, -0.645485],
    ),
    "hgpo": (
        {"adv_estimator": "hgpo", "gamma": 0.95,
         "hgpo": {"mode": "mean_std_norm", "weight_type": "length", "length_weight_alpha": 1.0,
                  "base_group": False, "history_length": 2}},
        [-1.730369, 0.0, 0.0, 0.623874, 0.506162, 0.600332,
         -0.707091, -0.99998, 1.414183, 0.99998, -0.707091, 0.0],
    ),
    "hgpo base_group": (
        {"adv_estimator": "hgpo", "gamma": 0.95,
         "hgpo": {"mode": "mean_norm", "length_weight_alpha": 0.5, "base_group": True,
                  "history_length": 1}},
        [-6.362788, -4.966662, -5.066662, 3.637208, 3.344315, 3.537207,
         -0.033333, -0.04598, 0.066667, 0.05402, -0.033333, -0.033333],
    ),
    "graphgpo": (
        {"adv_estimator": "graphgpo", "gamma": 0.1,
         "graphgpo": {"mode": "mean_std_norm", "step_advantage_w": 1.0,
                      "episode_advantage_w": 1.0, "normalize_distance": False}},
        [-1.853493, -0.906745, -0.925001, 1.79213, 0.137618, 1.75549,
         -1.222825, -1.352582, 2.44565, 1.998066, -1.222825, -0.645485],
    ),
    "graphgpo normalize_distance": (
        {"adv_estimator": "graphgpo", "gamma": 0.8,
         "graphgpo": {"mode": "mean_norm", "step_advantage_w": 2.0,
                      "episode_advantage_w": 0.5, "normalize_distance": True}},
        [-6.833333, -2.483333, -2.533333, 5.366667, 1.366667, 5.116666,
         -0.083332, -0.116666, 0.166667, 0.133334, -0.083332, -0.016667],
    ),
}  # fmt: skip
WIDTH = 4  # response tokens per row (padded)


def verl_agent_batch(rows=ROWS, coef: float = COEF) -> DataProto:
    """A DataProto of ``rows`` laid out as verl-agent's trainer has it at compute_advantage:
    ``token_level_rewards`` holds the episode's reward sum, less ``coef`` on an invalid row,
    on the row's last response token."""
    n = len(rows)
    episode: dict[str, float] = {}
    for _, traj, *_, reward, _, _ in rows:
        episode[traj] = episode.get(traj, 0.0) + reward
    mask = torch.zeros(n, WIDTH, dtype=torch.int64)
    rewards = torch.zeros(n, WIDTH, dtype=torch.float32)
    for i, (_, traj, _, _, _, valid, length) in enumerate(rows):
        mask[i, :length] = 1
        rewards[i, length - 1] = episode[traj] - (0.0 if valid else coef)
    names = ("uid", "traj_uid", "anchor_obs", "next_obs", "rewards", "is_action_valid")
    columns = {k: np.array([r[j] for r in rows], dtype=object) for j, k in enumerate(names)}
    columns["active_masks"] = np.array([True] * n, dtype=object)
    return DataProto.from_dict(
        tensors={"response_mask": mask, "token_level_rewards": rewards}, non_tensors=columns
    )


@pytest.mark.parametrize("case", sorted(OFFICIAL))
def test_compute_advantage_gives_verl_agents_numbers(case):
    algorithm, expected = OFFICIAL[case]
    data = compute_advantage(verl_agent_batch(), copy.deepcopy(algorithm))
    adv, mask = data.batch["advantages"], data.batch["response_mask"]
    assert torch.equal(data.batch["returns"], adv)  # verl-agent sets both to the scores
    assert torch.all(adv[mask == 0] == 0)
    for i in range(len(ROWS)):  # the row's value on every one of its response tokens
        assert torch.allclose(adv[i][mask[i] == 1], adv[i, 0].expand(int(mask[i].sum())))
    np.testing.assert_allclose(adv[:, 0].numpy(), expected, rtol=2e-5, atol=2e-5)


def test_an_omegaconf_section_reads_as_a_dict():
    algorithm, expected = OFFICIAL["hgpo"]
    data = compute_advantage(verl_agent_batch(), OmegaConf.create(algorithm))
    np.testing.assert_allclose(data.batch["advantages"][:, 0].numpy(), expected, atol=2e-5)


def test_the_penalty_is_read_off_the_token_rewards():
    """Without a penalty in the token rewards (coef 0) the advantages change, and they are
    gigpo_algo's at invalid_penalty 0; a configured penalty the tokens lack is applied."""
    algorithm, with_penalty = OFFICIAL["gigpo mean_norm"]
    plain = compute_advantage(verl_agent_batch(coef=0.0), copy.deepcopy(algorithm))
    rows = list(zip(*ROWS, strict=True))
    ours = gigpo_advantages(rows[4], rows[1], rows[0], rows[2], gamma=0.95, norm="mean",
                            episode_stats="step")  # fmt: skip
    np.testing.assert_allclose(plain.batch["advantages"][:, 0].numpy(), ours.advantages,
                               atol=1e-5)  # fmt: skip
    assert not np.allclose(ours.advantages, with_penalty, atol=1e-3)
    configured = copy.deepcopy(algorithm)
    configured["gigpo"]["invalid_penalty"] = COEF
    data = compute_advantage(verl_agent_batch(coef=0.0), configured)
    np.testing.assert_allclose(data.batch["advantages"][:, 0].numpy(), with_penalty, atol=2e-5)


def _family(name: str, columns: dict, similarity: float | None) -> np.ndarray:
    """gigpo_algo's own function for ``name`` on the batch's columns (verl-agent's defaults:
    statistics over step rows)."""
    r = np.asarray(columns["rewards"], dtype=float)
    args = (r, list(columns["traj_uid"]), list(columns["uid"]), list(columns["anchor_obs"]))
    common = dict(episode_stats="step", similarity=similarity,
                  is_action_valid=np.asarray(columns["is_action_valid"], dtype=bool))  # fmt: skip
    if name == "gigpo":
        return gigpo_advantages(*args, gamma=0.9, **common).advantages
    if name == "hgpo":
        return hgpo_advantages(*args, gamma=0.9, history_length=2, **common).advantages
    nexts = list(columns["next_obs"])
    return graphgpo_advantages(*args, nexts, gamma=0.9, **common).advantages


def _random_rows(seed: int, texts: bool) -> list[tuple]:
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(3):
        for t in range(4):
            state, length, won = 0, int(rng.integers(1, 6)), bool(rng.random() < 0.5)
            for k in range(length):
                nxt = int(rng.integers(0, 4))
                last = k == length - 1
                name = (
                    (lambda s: f"a kitchen, counter {s}, a mug") if texts else (lambda s: f"s{s}")
                )
                reward = 10.0 if last and won else 0.0
                following = "success" if last and won else name(nxt)
                valid = bool(rng.random() > 0.2)
                rows.append((f"g{g}", f"g{g}-t{t}", name(state), following, reward, valid, 3))
                state = nxt
    return rows


@pytest.mark.parametrize("name", ["gigpo", "hgpo", "graphgpo"])
@pytest.mark.parametrize("similarity", [None, 0.9])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_verls_own_dispatch_equals_gigpo_algo(name, similarity, seed):
    """verl's ``compute_advantage`` (ray_trainer's, and the v1 trainer's
    multi-trajectory step) with the registered estimator, on a real DataProto whose token
    rewards hold no penalty, gives gigpo_algo's advantages row for row."""
    from verl.trainer.ppo.ray_trainer import compute_advantage as verl_compute
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    rows = _random_rows(seed, texts=similarity is not None)
    data = verl_agent_batch(rows, coef=0.0)
    sub = {"enable_similarity": similarity is not None, "similarity_thresh": similarity or 0.95}
    if name == "hgpo":
        sub = {"similarity": similarity} if similarity else {}
    config = OmegaConf.create({"adv_estimator": name, "gamma": 0.9, name: sub})
    expected = _family(name, data.non_tensor_batch, similarity)
    out = verl_compute(copy.deepcopy(data), name, gamma=0.9, config=config)
    np.testing.assert_allclose(out.batch["advantages"][:, 0].numpy(), expected, atol=1e-5)
    keys = [f"{u}_{t.rsplit('-t', 1)[1]}_{i}" for i, (u, t, *_) in enumerate(rows)]
    out = compute_advantage_for_multi_trajectories(copy.deepcopy(data), keys, name, gamma=0.9,
                                                   config=config)  # fmt: skip
    np.testing.assert_allclose(out.batch["advantages"][:, 0].numpy(), expected, atol=1e-5)
    assert np.abs(expected).max() > 0.1  # a batch whose advantages say something


def test_verls_registry_holds_the_three_and_grpo_is_verls_own():
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.ray_trainer import compute_advantage as verl_compute

    for name in ("gigpo", "hgpo", "graphgpo"):
        assert core_algos.get_adv_estimator_fn(name).__name__ == f"compute_{name}_advantage"
    data = verl_agent_batch(coef=0.0)
    out = verl_compute(copy.deepcopy(data), "grpo", config=OmegaConf.create({}))
    assert "advantages" in out.batch.keys()  # verl's own estimator runs unchanged


def test_a_registered_estimator_without_the_step_columns_says_why():
    from verl.trainer.ppo import core_algos

    data = verl_agent_batch()
    fn = core_algos.get_adv_estimator_fn("gigpo")
    with pytest.raises(ValueError, match="needs the batch's step columns"):
        fn(token_level_rewards=data.batch["token_level_rewards"],
           response_mask=data.batch["response_mask"], config=None, index=None)  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d.non_tensor_batch.pop("traj_uid"),
            "lacks the step columns .*traj_ids.*traj_uid",
        ),
        (lambda d: d.non_tensor_batch["active_masks"].__setitem__(2, False), "active_masks"),
        (lambda d: d.non_tensor_batch["rewards"].__setitem__(0, "ten"), "row 0 must be a number"),
        (lambda d: d.batch["token_level_rewards"].__setitem__((1, 0), 7.0), "row 1: token_level"),
        (
            lambda d: d.non_tensor_batch.__setitem__("traj_ids", d.non_tensor_batch["traj_uid"]),
            "both 'traj_ids' and its alias 'traj_uid'",
        ),
        (lambda d: d.non_tensor_batch["is_action_valid"].__setitem__(3, "yes"), "must be a bool"),
    ],
)
def test_malformed_batches_are_named(change, message):
    data = verl_agent_batch()
    change(data)
    algorithm = {"adv_estimator": "gigpo", "gamma": 0.95}
    with pytest.raises(ValueError, match=message):
        compute_advantage(data, algorithm)


@pytest.mark.parametrize(
    ("algorithm", "message"),
    [
        ({"adv_estimator": "gae"}, "algorithm.adv_estimator must be one of"),
        ({"adv_estimator": "gigpo", "gigpo": {"mode": "std"}}, "algorithm.gigpo.mode must be"),
        ({"adv_estimator": "gigpo", "gigpo": {"stepweight": 1}}, "algorithm.gigpo.stepweight"),
        ({"adv_estimator": "gigpo", "gigpo": {"step_weight": 1, "step_advantage_w": 1}},
         "set the same setting"),
        ({"adv_estimator": "hgpo", "hgpo": {"weight_type": "uniform"}}, "weight_type"),
        ({"adv_estimator": "gigpo", "gigpo": {"base_group": True}}, "is not used by"),
        ({"adv_estimator": "graphgpo", "gamma": "high"}, "algorithm.gamma must be a number"),
        ({"adv_estimator": "gigpo", "gigpo": {"gamma": 0.9}}, "the discount is algorithm.gamma"),
        ({"adv_estimator": "gigpo", "gigpo": {"mode": ["mean_norm"]}}, "gigpo.mode must be"),
        ({"adv_estimator": "gigpo", "gigpo": {"invalid_penalty": -1}}, "invalid_penalty"),
        ({"adv_estimator": "hgpo", "hgpo": {"history_length": 5000}}, "history_length"),
        ({"adv_estimator": "gigpo", "gigpo": [1, 2]}, "algorithm.gigpo must be a mapping"),
    ],
)  # fmt: skip
def test_bad_settings_name_the_dotted_key(algorithm, message):
    with pytest.raises(ValueError, match=message):
        compute_advantage(verl_agent_batch(), algorithm)


def test_similarity_threshold_counts_only_when_enabled():
    """verl-agent's configs always carry similarity_thresh; it groups only when enabled."""
    rows = _random_rows(3, texts=True)
    data = verl_agent_batch(rows, coef=0.0)
    base = {"adv_estimator": "gigpo", "gamma": 0.9}
    off = compute_advantage(copy.deepcopy(data), {**base, "gigpo": {"similarity_thresh": 0.5}})
    exact = compute_advantage(copy.deepcopy(data), base)
    on = compute_advantage(copy.deepcopy(data),
                           {**base, "gigpo": {"enable_similarity": True,
                                              "similarity_thresh": 0.5}})  # fmt: skip
    assert torch.equal(off.batch["advantages"], exact.batch["advantages"])
    assert not torch.allclose(on.batch["advantages"], exact.batch["advantages"])
