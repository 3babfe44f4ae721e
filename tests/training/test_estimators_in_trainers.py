"""Every estimator, through both trainers: one episode score, and similarity on state text.

Step records come from real environments (Sokoban, ALFWorld) played by a scripted random
policy. The local trainer's ``critic_free_advantages`` (training.advantages) and the
OpenRLHF estimator's ``batch_advantages`` must give GRPO == GiGPO(step_weight=0) and
RLOO == GiGPO(step_weight=0, norm="loo") row for row, and with a similarity threshold must
group the steps on their states' texts, as ``anchor_groups`` does, never on the state keys.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from gigpo_algo.advantages import anchor_groups, gigpo_advantages
from gigpo_algo.tokens import turns_to_tokens
from gigpo_envs import make_group_vec
from training.advantages import critic_free_advantages, step_groups
from training.local.config import AlgoConfig
from training.openrlhf.estimator import GiGPOSettings, batch_advantages
from training.openrlhf.spans import turn_columns
from training.openrlhf.turns import SampleTurns
from training.records import StepRecords
from training.stats import step_group_summary


def play(env_id: str, num_groups: int, group_size: int, turns: int, seed: int, **kwargs):
    """Random admissible actions (and some junk) in a group vector env; one dict per step."""
    rng = np.random.default_rng(seed)
    envs = make_group_vec(env_id, num_groups, group_size, seed=seed, **kwargs)
    _, infos = envs.reset(seed=seed)
    live = np.ones(envs.num_envs, dtype=bool)
    rows = []
    for _ in range(turns):
        if not live.any():
            break
        actions = []
        for i in range(envs.num_envs):
            choices = infos["admissible_actions"][i] or ["noop"]
            pick = str(choices[int(rng.integers(len(choices)))])
            actions.append("junk" if rng.random() < 0.2 else f"<action>{pick}</action>")
        keys, texts = envs.anchors.copy(), envs.anchor_texts.copy()
        _, rewards, terminated, truncated, infos = envs.step(actions)
        for i in np.flatnonzero(live):
            rows.append(
                dict(
                    group=int(envs.group_ids[i]),
                    traj=int(i),
                    reward=float(rewards[i]),
                    anchor=str(keys[i]),
                    anchor_text=str(texts[i]),
                    valid=bool(infos["is_action_valid"][i]),
                )
            )
        live &= ~(terminated | truncated)
    envs.close()
    return rows


def local_records(rows) -> StepRecords:
    return StepRecords(
        rewards=[r["reward"] for r in rows],
        anchors=[r["anchor"] for r in rows],
        anchor_texts=[r["anchor_text"] for r in rows],
        group_ids=[r["group"] for r in rows],
        traj_ids=[r["traj"] for r in rows],
        is_action_valid=[r["valid"] for r in rows],
    )


def openrlhf_batch(rows):
    """One SampleTurns per trajectory (3 response tokens per turn, 2 between turns), in one
    experience; returns (batch, shapes, turn spans, row order of the flattened turns)."""
    trajs = sorted({r["traj"] for r in rows})
    episodes, order = [], []
    for t in trajs:
        mine = [i for i, r in enumerate(rows) if r["traj"] == t]
        ranges = [(5 + 5 * k, 8 + 5 * k) for k in range(len(mine))]
        episodes.append(
            SampleTurns(
                group=f"task{rows[mine[0]]['group']}",
                traj=str(t),
                rewards=[rows[i]["reward"] for i in mine],
                anchors=[rows[i]["anchor"] for i in mine],
                anchor_texts=[rows[i]["anchor_text"] for i in mine],
                is_action_valid=[rows[i]["valid"] for i in mine],
                action_ranges=ranges,
                sequence_length=ranges[-1][1],
                max_len=4096,
            )
        )
        order.extend(mine)
    width = max(ep.sequence_length for ep in episodes)
    spans = []
    for b, ep in enumerate(episodes):
        for s, e in turn_columns(ep.action_ranges, ep.sequence_length, ep.max_len):
            spans.append((b, s, e))
    return [episodes], [(len(episodes), width)], spans, order


def openrlhf_rows(rows, settings: GiGPOSettings) -> np.ndarray:
    """The OpenRLHF estimator's value for each step row, read back from the token grid."""
    batch, shapes, spans, order = openrlhf_batch(rows)
    (grid,), _ = batch_advantages(batch, shapes, settings)
    out = np.empty(len(rows))
    for (b, s, e), row in zip(spans, order, strict=True):
        cells = grid[b, s:e]
        assert np.all(cells == cells[0])
        out[row] = cells[0]
    return out


@pytest.fixture(scope="module")
def sokoban_rows():
    return play("gigpo/Sokoban-v0", 3, 4, 8, seed=5, dim_room=(6, 6), num_boxes=1, max_steps=8)


@pytest.mark.parametrize("norm", [None, "mean"])
@pytest.mark.parametrize("episode_stats", ["trajectory", "step"])
def test_grpo_and_rloo_equal_gigpo_without_step_level_in_both_trainers(
    sokoban_rows, norm, episode_stats
):
    rows = sokoban_rows
    assert sum(not r["valid"] for r in rows) > 0  # the penalty is exercised
    rec = local_records(rows)
    common = dict(episode_stats=episode_stats, invalid_penalty=0.5)
    gigpo0 = critic_free_advantages(
        rec, AlgoConfig(estimator="gigpo", step_weight=0.0, norm=norm, **common)
    )
    grpo = critic_free_advantages(rec, AlgoConfig(estimator="grpo", norm=norm, **common))
    np.testing.assert_array_equal(grpo.advantages, gigpo0.advantages)
    gigpo_loo = critic_free_advantages(
        rec, AlgoConfig(estimator="gigpo", step_weight=0.0, norm="loo", **common)
    )
    rloo = critic_free_advantages(rec, AlgoConfig(estimator="rloo", **common))
    np.testing.assert_array_equal(rloo.advantages, gigpo_loo.advantages)
    # The step level is on in GiGPO proper, so GRPO is a different estimator there.
    full = critic_free_advantages(rec, AlgoConfig(estimator="gigpo", norm=norm, **common))
    assert not np.allclose(full.advantages, grpo.advantages)

    # The OpenRLHF estimator: the same numbers, written onto each turn's tokens.
    o_gigpo0 = openrlhf_rows(rows, GiGPOSettings(step_weight=0.0, norm=norm, **common))
    o_grpo = openrlhf_rows(rows, GiGPOSettings(estimator="grpo", norm=norm, **common))
    o_rloo = openrlhf_rows(rows, GiGPOSettings(estimator="rloo", **common))
    o_full = openrlhf_rows(rows, GiGPOSettings(norm=norm, **common))
    np.testing.assert_allclose(o_grpo, o_gigpo0, rtol=0, atol=0)
    np.testing.assert_allclose(o_grpo, grpo.advantages, atol=1e-12)
    np.testing.assert_allclose(o_rloo, rloo.advantages, atol=1e-12)
    np.testing.assert_allclose(o_full, full.advantages, atol=1e-12)


def _check_similarity_partition(rows, threshold: float) -> None:
    rec = local_records(rows)
    texts = [r["anchor_text"] for r in rows]
    groups = [r["group"] for r in rows]
    expected = anchor_groups(texts, groups, similarity=threshold)
    on_keys = anchor_groups([r["anchor"] for r in rows], groups, similarity=threshold)
    # The test can fail: grouping the 16-hex keys gives another partition.
    assert len(set(on_keys)) != len(set(expected)) or not np.array_equal(on_keys, expected)

    # The invalid-action penalty gives returns a spread even where no episode is won.
    local = critic_free_advantages(rec, AlgoConfig(similarity=threshold, invalid_penalty=0.5))
    np.testing.assert_array_equal(step_groups(rec, AlgoConfig(similarity=threshold)), expected)
    stats = step_group_summary(step_groups(rec, AlgoConfig(similarity=threshold)))
    assert stats["step_groups"] == len(set(expected.tolist()))

    reference = gigpo_advantages(
        [r["reward"] for r in rows],
        [r["traj"] for r in rows],
        groups,
        texts,
        similarity=threshold,
        is_action_valid=[r["valid"] for r in rows],
        invalid_penalty=0.5,
    )
    np.testing.assert_array_equal(reference.step_group_ids, expected)
    np.testing.assert_allclose(local.advantages, reference.advantages, atol=1e-12)
    got = openrlhf_rows(rows, GiGPOSettings(similarity=threshold, invalid_penalty=0.5))
    np.testing.assert_allclose(got, reference.advantages, atol=1e-12)
    on_key_values = gigpo_advantages(
        [r["reward"] for r in rows],
        [r["traj"] for r in rows],
        groups,
        [r["anchor"] for r in rows],
        similarity=threshold,
        is_action_valid=[r["valid"] for r in rows],
        invalid_penalty=0.5,
    ).advantages
    assert not np.allclose(got, on_key_values)


def test_similarity_groups_sokoban_states_by_text_in_both_trainers(sokoban_rows):
    _check_similarity_partition(sokoban_rows, 0.5)
    _check_similarity_partition(sokoban_rows, 0.9)


def test_similarity_groups_alfworld_states_by_text_in_both_trainers(tmp_path):
    from gigpo_envs.alfworld.generate import generate_games

    generate_games(tmp_path, num_games=2, seed=3)
    rows = play("gigpo/ALFWorld-v0", 2, 3, 6, seed=0, data_dir=tmp_path, max_steps=6)
    _check_similarity_partition(rows, 0.8)


def test_a_threshold_without_state_text_is_refused():
    rec = StepRecords(
        rewards=[0.0, 1.0],
        anchors=["a", "b"],
        anchor_texts=[None, None],
        group_ids=[0, 0],
        traj_ids=[0, 1],
        is_action_valid=[True, True],
    )
    with pytest.raises(ValueError, match="anchor_text"):
        critic_free_advantages(rec, AlgoConfig(similarity=0.5))
    ep = SampleTurns(
        group="g",
        traj="t",
        rewards=[0.0],
        anchors=["a"],
        anchor_texts=[None],
        is_action_valid=[True],
        action_ranges=[(1, 3)],
        sequence_length=3,
    )
    with pytest.raises(ValueError, match="anchor_text"):
        batch_advantages([[ep, ep]], [(2, 3)], GiGPOSettings(similarity=0.5))
    # Exact grouping needs no text.
    assert len(critic_free_advantages(rec, AlgoConfig()).advantages) == 2


def test_turns_to_tokens_layout_is_the_one_the_helper_reads(sokoban_rows):
    """The helper above reads the token grid the way turns_to_tokens writes it."""
    batch, shapes, spans, _ = openrlhf_batch(sokoban_rows[:5])
    values = np.arange(len(spans), dtype=float) + 1
    grid = turns_to_tokens(values, spans, shapes[0])
    assert [grid[b, s] for b, s, _ in spans] == list(values)


class _KeysOnlyEnv(gym.Env):
    """An env outside gigpo_envs: it gives an anchor key but no anchor text."""

    observation_space = gym.spaces.Text(64)
    action_space = gym.spaces.Text(64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "start", {"anchor": "k0", "is_action_valid": True, "won": False}

    def step(self, action):
        return "end", 0.0, True, False, {"anchor": "k1", "is_action_valid": True, "won": False}


def test_both_launchers_refuse_a_threshold_for_an_env_without_state_text():
    from training.local.config import ConfigError, load_config
    from training.openrlhf.command import UsageError, plan

    gym.register("gigpo_test/KeysOnly-v0", entry_point=_KeysOnlyEnv)
    load_config(None, ["--env.id=gigpo_test/KeysOnly-v0"])  # exact anchors: fine
    with pytest.raises(ConfigError, match=r"algo.similarity: gigpo_test/KeysOnly-v0 gives no"):
        load_config(None, ["--env.id=gigpo_test/KeysOnly-v0", "--algo.similarity=0.9"])
    args = ["--env", "gigpo_test/KeysOnly-v0", "--algo.kl.use_loss"]
    assert plan(args).settings is not None
    with pytest.raises(UsageError, match=r"--algo.gigpo.similarity: gigpo_test/KeysOnly-v0"):
        plan([*args, "--algo.gigpo.similarity", "0.9"])


def test_embedding_metric_groups_states_by_meaning_in_both_trainers(sokoban_rows):
    rows = sokoban_rows
    rec = local_records(rows)
    texts = [r["anchor_text"] for r in rows]
    groups = [r["group"] for r in rows]
    settings = dict(similarity=0.9, similarity_metric="embedding", invalid_penalty=0.5)
    expected = anchor_groups(texts, groups, similarity=0.9, metric="embedding")
    # The test can fail: difflib's partition of the same texts differs.
    assert not np.array_equal(expected, anchor_groups(texts, groups, similarity=0.9))
    np.testing.assert_array_equal(step_groups(rec, AlgoConfig(**settings)), expected)
    reference = gigpo_advantages(
        [r["reward"] for r in rows],
        [r["traj"] for r in rows],
        groups,
        texts,
        is_action_valid=[r["valid"] for r in rows],
        **settings,
    )
    local = critic_free_advantages(rec, AlgoConfig(**settings))
    np.testing.assert_allclose(local.advantages, reference.advantages, atol=1e-12)
    got = openrlhf_rows(rows, GiGPOSettings(**settings))
    np.testing.assert_allclose(got, reference.advantages, atol=1e-12)
