"""Every estimator, through both trainers: one episode score, and similarity on state text.

Step records come from real environments (Sokoban, ALFWorld) played by a scripted random
policy. The local trainer's ``critic_free_advantages`` (training.advantages) and the
OpenRLHF estimator's ``batch_advantages`` must give GRPO == GiGPO(step_weight=0) and
RLOO == GiGPO(step_weight=0, norm="loo") row for row, and with a similarity threshold must
group the steps on their states' texts, as ``anchor_groups`` does, never on the state keys.
HGPO and GraphGPO give gigpo_algo's own values in both (HGPO's history from each
trajectory's earlier rows, GraphGPO's graph from each row's state and next state), with
their levels and distances as the rollout files' extras, and train end to end in the local
trainer.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from gigpo_algo.advantages import anchor_groups, gigpo_advantages
from gigpo_algo.graphgpo import graphgpo_advantages
from gigpo_algo.hgpo import hgpo_advantages
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
                    # the state the step led to (an ended env is reset on its next step)
                    next_anchor=str(envs.anchors[i]),
                    next_anchor_text=str(envs.anchor_texts[i]),
                    won=bool(infos["won"][i]),
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
        next_anchors=[r["next_anchor"] for r in rows],
        next_anchor_texts=[r["next_anchor_text"] for r in rows],
        won=[r["won"] for r in rows],
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
                next_anchors=[rows[i]["next_anchor"] for i in mine],
                next_anchor_texts=[rows[i]["next_anchor_text"] for i in mine],
                action_ranges=ranges,
                sequence_length=ranges[-1][1],
                max_len=4096,
                won=any(rows[i]["won"] for i in mine),
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


# --------------------------------------------------------------------- HGPO and GraphGPO

#: Settings off every default, the invalid-action penalty on (it spreads the returns).
FAMILY = {
    "hgpo": dict(history_length=1, length_alpha=0.5, base_group=True, invalid_penalty=0.5),
    "graphgpo": dict(gamma=0.5, normalize_distance=True, episode_weight=0.5, step_weight=2.0,
                     invalid_penalty=0.5),
}  # fmt: skip


@pytest.fixture(scope="module")
def numberline_rows():
    """Random walks on a short number line: some episodes reach the target (GraphGPO's
    goal), most do not."""
    return play("gigpo/NumberLine-v0", 3, 4, 6, seed=2, max_position=3, max_steps=6)


def family_reference(rows, estimator: str, settings: dict, on: str = "anchor"):
    """gigpo_algo's own function of ``estimator`` on the rows (states: ``on`` = anchor or
    anchor_text)."""
    columns = (
        [r["reward"] for r in rows], [r["traj"] for r in rows], [r["group"] for r in rows],
        [r[on] for r in rows],
    )  # fmt: skip
    valid = [r["valid"] for r in rows]
    if estimator == "hgpo":
        return hgpo_advantages(*columns, is_action_valid=valid, **settings)
    nxt = [r[f"next_{on}"] for r in rows]
    return graphgpo_advantages(*columns, nxt, is_action_valid=valid, **settings)


def same_partition(a, b) -> bool:
    """Whether two labelings group the rows the same way (whatever the numbers)."""
    pairs = set(zip(np.asarray(a).tolist(), np.asarray(b).tolist(), strict=True))
    return len(pairs) == len(set(np.asarray(a).tolist())) == len(set(np.asarray(b).tolist()))


@pytest.mark.parametrize("estimator", ["hgpo", "graphgpo"])
@pytest.mark.parametrize("rows_fixture", ["numberline_rows", "sokoban_rows"])
def test_hgpo_and_graphgpo_give_gigpo_algos_values_in_both_trainers(
    request, rows_fixture, estimator
):
    rows = request.getfixturevalue(rows_fixture)
    settings = FAMILY[estimator]
    reference = family_reference(rows, estimator, settings)
    assert np.abs(reference.advantages).max() > 0
    rec = local_records(rows)  # rows of all trajectories interleaved, each in time order
    local = critic_free_advantages(rec, AlgoConfig(estimator=estimator, **settings))
    np.testing.assert_allclose(local.advantages, reference.advantages, atol=1e-12)
    np.testing.assert_allclose(local.returns, reference.returns, atol=1e-12)
    # the OpenRLHF estimator (rows grouped by trajectory): the same values on the tokens
    got = openrlhf_rows(rows, GiGPOSettings(estimator=estimator, **settings))
    np.testing.assert_allclose(got, reference.advantages, atol=1e-12)
    # the step groups the batch reports are the ones the estimator used
    groups = step_groups(rec, AlgoConfig(estimator=estimator))
    assert same_partition(groups, reference.step_group_ids)
    if estimator == "hgpo":
        # without the history the values differ: the deeper level is read
        flat = family_reference(rows, "hgpo", {**settings, "history_length": 0})
        assert not np.allclose(flat.advantages, reference.advantages)
        levels = local.extras["hgpo_levels"]
        assert set(local.extras) == {"hgpo_levels"} and len(levels) == len(rows)
        for i, row_levels in enumerate(levels):
            ks = np.flatnonzero(reference.level_group_ids[:, i] >= 0)
            assert [item["k"] for item in row_levels] == [int(k) + 1 for k in ks]
            for item in row_levels:
                k = item["k"] - 1
                assert item["group"] == reference.level_group_ids[k, i]
                assert item["size"] == reference.level_sizes[k, i]
                value = reference.level_advantages[k, i]
                assert (item["advantage"] is None) == bool(np.isnan(value))
                assert item["advantage"] is None or item["advantage"] == value
        assert any(item["k"] == 2 and item["advantage"] is not None for r in levels for item in r)
    else:
        assert set(local.extras) == {"graph_distance", "graph_next_distance"}
        np.testing.assert_array_equal(local.extras["graph_distance"], reference.distances)
        np.testing.assert_array_equal(local.extras["graph_next_distance"],
                                      reference.next_distances)  # fmt: skip
        if rows_fixture == "numberline_rows":  # some walks reached the goal
            assert 0.0 in local.extras["graph_next_distance"]
            assert len(set(local.extras["graph_distance"])) > 2


@pytest.mark.parametrize("estimator", ["hgpo", "graphgpo"])
def test_hgpo_and_graphgpo_similarity_reads_state_texts_in_both_trainers(request, estimator):
    # GraphGPO's graph needs some won episodes (a graph without a goal gives every state d=1)
    rows = request.getfixturevalue("sokoban_rows" if estimator == "hgpo" else "numberline_rows")
    threshold = 0.5 if estimator == "hgpo" else 0.9
    settings = {**FAMILY[estimator], "similarity": threshold}
    reference = family_reference(rows, estimator, settings, on="anchor_text")
    rec = local_records(rows)
    local = critic_free_advantages(rec, AlgoConfig(estimator=estimator, **settings))
    np.testing.assert_allclose(local.advantages, reference.advantages, atol=1e-12)
    got = openrlhf_rows(rows, GiGPOSettings(estimator=estimator, **settings))
    np.testing.assert_allclose(got, reference.advantages, atol=1e-12)
    on_keys = family_reference(rows, estimator, settings, on="anchor").advantages
    assert not np.allclose(local.advantages, on_keys)  # the keys would give other values
    groups = step_groups(rec, AlgoConfig(estimator=estimator, similarity=threshold))
    assert same_partition(groups, reference.step_group_ids)
    texts, episode_groups = [r["anchor_text"] for r in rows], [r["group"] for r in rows]
    similar = anchor_groups(texts, episode_groups, similarity=threshold)
    # HGPO's levels start from GiGPO's similarity groups; GraphGPO's threshold merges graph
    # nodes only, its step groups match the texts exactly
    exact = anchor_groups(texts, episode_groups)
    assert not same_partition(similar, exact)
    assert same_partition(groups, similar if estimator == "hgpo" else exact)


def test_graphgpo_refuses_records_without_next_states():
    rec = StepRecords(
        rewards=[0.0, 1.0], anchors=["a", "b"], anchor_texts=["a", "b"], group_ids=[0, 0],
        traj_ids=[0, 1], is_action_valid=[True, True],
    )  # fmt: skip
    with pytest.raises(ValueError, match="graphgpo needs each step's next state"):
        critic_free_advantages(rec, AlgoConfig(estimator="graphgpo"))
    assert len(critic_free_advantages(rec, AlgoConfig(estimator="hgpo")).advantages) == 2
    old = SampleTurns(
        group="g", traj="t", rewards=[0.0], anchors=["a"], anchor_texts=["a"],
        is_action_valid=[True], action_ranges=[(1, 3)], sequence_length=3,
    )  # fmt: skip
    with pytest.raises(ValueError, match="graphgpo needs each step's next state"):
        batch_advantages([[old, old]], [(2, 3)], GiGPOSettings(estimator="graphgpo"))


def test_graphgpo_success_won_reads_the_envs_won_flag_in_both_trainers(numberline_rows):
    rows = numberline_rows
    # NumberLine's wrong steps cost -1: won walks can sum to <= 0, so the two rules differ.
    won = {(r["group"], r["traj"]) for r in rows if r["won"]}
    success = [(r["group"], r["traj"]) in won for r in rows]
    sums: dict = {}
    for r in rows:
        sums[(r["group"], r["traj"])] = sums.get((r["group"], r["traj"]), 0.0) + r["reward"]
    assert any(success) and success != [sums[(r["group"], r["traj"])] > 0 for r in rows]
    columns = ([r["reward"] for r in rows], [r["traj"] for r in rows],
               [r["group"] for r in rows], [r["anchor"] for r in rows],
               [r["next_anchor"] for r in rows])  # fmt: skip
    valid = [r["valid"] for r in rows]
    reference = graphgpo_advantages(*columns, is_action_valid=valid, success=success)
    by_reward = graphgpo_advantages(*columns, is_action_valid=valid)
    assert not np.allclose(reference.advantages, by_reward.advantages)
    rec = local_records(rows)
    local = critic_free_advantages(rec, AlgoConfig(estimator="graphgpo", success="won"))
    np.testing.assert_allclose(local.advantages, reference.advantages, atol=1e-12)
    got = openrlhf_rows(rows, GiGPOSettings(estimator="graphgpo", success="won"))
    np.testing.assert_allclose(got, reference.advantages, atol=1e-12)
    default = critic_free_advantages(rec, AlgoConfig(estimator="graphgpo"))
    np.testing.assert_allclose(default.advantages, by_reward.advantages, atol=1e-12)
    rec.won = []  # records made before the flag was recorded
    with pytest.raises(ValueError, match="success=won needs the env's won flag"):
        critic_free_advantages(rec, AlgoConfig(estimator="graphgpo", success="won"))


def test_advantages_take_keeps_the_extras_with_their_rows(numberline_rows):
    rec = local_records(numberline_rows)
    result = critic_free_advantages(rec, AlgoConfig(estimator="graphgpo"))
    order = np.random.default_rng(0).permutation(len(rec))
    moved = result.take(order)
    np.testing.assert_array_equal(moved.advantages, result.advantages[order])
    assert moved.extras["graph_distance"] == [result.extras["graph_distance"][i] for i in order]
    assert critic_free_advantages(rec, AlgoConfig(estimator="gigpo")).extras == {}


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["hgpo", "graphgpo"])
def test_hgpo_and_graphgpo_train_end_to_end_in_the_local_trainer(tiny_config, tmp_path, estimator):
    from training.local.train import train
    from training.record_files import read_rollouts, rollout_files

    out = tmp_path / "run"
    config = tiny_config(
        "gigpo/NumberLine-v0", "--env.kwargs={max_position: 3, max_steps: 4}",
        f"--algo.estimator={estimator}", "--algo.invalid_penalty=0.1", out=out,
    )  # fmt: skip
    # HGPO's history left unset is the prompt's (tiny_config: env.history_length 1)
    assert config.algo.history_length == (1 if estimator == "hgpo" else None)
    rows = train(config)
    assert [r["iteration"] for r in rows] == [0, 1]
    assert all(np.isfinite(r["loss"]) for r in rows)
    assert any(r["mean_abs_advantage"] > 0 for r in rows), rows
    files = rollout_files(out)
    assert sorted(files) == [0, 1]
    for path in files.values():
        header, records = read_rollouts(path)
        assert header["estimator"] == estimator
        # what the trainer saved is gigpo_algo's function of the saved step records
        saved = [dict(reward=r["reward"], traj=r["traj_id"], group=r["group_id"],
                      anchor=r["anchor"], next_anchor=r["next_anchor"],
                      valid=r["is_action_valid"]) for r in records]  # fmt: skip
        settings = {"invalid_penalty": 0.1}
        if estimator == "hgpo":
            settings["history_length"] = 1
        reference = family_reference(saved, estimator, settings)
        np.testing.assert_allclose(
            [r["advantage"] for r in records], reference.advantages, atol=1e-12
        )
        if estimator == "hgpo":
            assert all("hgpo_levels" in r for r in records)
            assert max(item["k"] for r in records for item in r["hgpo_levels"]) == 2
        else:
            np.testing.assert_array_equal([r["graph_distance"] for r in records],
                                          reference.distances)  # fmt: skip
