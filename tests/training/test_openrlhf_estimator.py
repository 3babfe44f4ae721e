"""The gigpo estimator on OpenRLHF-shaped batches, against gigpo_algo directly."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from gigpo_algo.advantages import gigpo_advantages
from training.openrlhf.estimator import SETTINGS_ENV, GiGPOSettings, batch_advantages
from training.openrlhf.turns import SampleTurns


def _episode(group, traj, rewards, anchors, start=4, gap=3, length=3):
    ranges, pos = [], start
    for _ in rewards:
        ranges.append((pos, pos + length))
        pos += length + gap
    return SampleTurns(
        group=group,
        traj=traj,
        rewards=list(rewards),
        anchors=list(anchors),
        anchor_texts=[f"text of {a}" for a in anchors],
        is_action_valid=[True] * len(rewards),
        action_ranges=ranges,
        sequence_length=pos,
        max_len=4096,
    )


def test_each_turn_gets_its_gigpo_advantage_on_its_tokens_across_experiences():
    # One group of three rollouts, split over two experiences (as micro-batches split them).
    a = _episode("task", "a", [0.0, 0.0, 1.0], ["s0", "s1", "s2"])
    b = _episode("task", "b", [0.0, 0.0], ["s0", "s1"])
    c = _episode("task", "c", [0.0, 1.0], ["s0", "s3"])
    batch = [[a, b], [c]]
    shapes = [(2, 30), (1, 12)]
    settings = GiGPOSettings(step_weight=0.5, gamma=0.9)
    advantages, returns = batch_advantages(batch, shapes, settings)

    expected = gigpo_advantages(
        [0, 0, 1, 0, 0, 0, 1],
        ["a"] * 3 + ["b"] * 2 + ["c"] * 2,
        ["task"] * 7,
        ["s0", "s1", "s2", "s0", "s1", "s0", "s3"],
        gamma=0.9,
        step_weight=0.5,
    ).advantages
    assert [x.shape for x in advantages] == shapes
    rows = [(0, 0, a), (0, 1, b), (1, 0, c)]
    k = 0
    for e, row, ep in rows:
        covered = np.zeros(shapes[e][1], dtype=bool)
        for start, end in ep.action_ranges:
            cols = slice(start - 1, end - 1)
            assert np.allclose(advantages[e][row, cols], expected[k])
            covered[cols] = True
            k += 1
        assert np.all(advantages[e][row, ~covered] == 0)
    assert returns[0].tolist() == [1.0, 0.0] and returns[1].tolist() == [1.0]
    # GiGPO tells the turns of one episode apart; OpenRLHF's estimators could not.
    assert len({round(float(v), 9) for v in expected[:3]}) > 1


def test_mismatched_shapes_are_clear_errors():
    ep = _episode("g", "t", [1.0], ["s"])
    with pytest.raises(ValueError, match="2 rows but 1 turn records"):
        batch_advantages([[ep]], [(2, 20)], GiGPOSettings())
    with pytest.raises(ValueError, match="mask shapes"):
        batch_advantages([[ep]], [], GiGPOSettings())


def test_settings_travel_as_json_and_validate(monkeypatch):
    settings = GiGPOSettings(step_weight=0.3, norm="mean", similarity=0.9)
    monkeypatch.setenv(SETTINGS_ENV, settings.to_json())
    assert GiGPOSettings.from_environ() == settings
    monkeypatch.delenv(SETTINGS_ENV)
    assert GiGPOSettings.from_environ() is None
    with pytest.raises(ValueError, match=r"--algo.gigpo.norm must be one of \('mean'"):
        GiGPOSettings(norm="median")
    with pytest.raises(ValueError, match="--algo.gigpo.similarity must be in"):
        GiGPOSettings(similarity=1.5)
    with pytest.raises(
        ValueError,
        match="--algo.gigpo.step_weight=1.0 is not used by --algo.advantage.estimator='grpo'",
    ):
        GiGPOSettings(estimator="grpo", step_weight=1.0)
    with pytest.raises(
        ValueError,
        match="--algo.gigpo.norm='mean' is not used by --algo.advantage.estimator='rloo'",
    ):
        GiGPOSettings(estimator="rloo", norm="mean")
    with pytest.raises(ValueError, match="estimator must be one of"):
        GiGPOSettings(estimator="ppo")
    with pytest.raises(ValueError, match="not valid JSON"):
        GiGPOSettings.from_json("{oops")
    with pytest.raises(ValueError, match="unknown keys"):
        GiGPOSettings.from_json('{"step_advantage_w": 1.0}')


def test_turn_records_round_trip_and_reject_damage():
    ep = _episode("g", "t", [1.0, 2.0], ["x", "y"])
    assert SampleTurns.from_dict(json.loads(json.dumps(ep.to_dict()))) == ep
    broken = ep.to_dict()
    del broken["anchors"]
    with pytest.raises(ValueError, match="lacks 'anchors'"):
        SampleTurns.from_dict(broken)
    with pytest.raises(ValueError, match="has 1 entries"):
        SampleTurns.from_dict(dict(ep.to_dict(), anchors=["x"]))
    with pytest.raises(ValueError, match="finite"):
        SampleTurns.from_dict(dict(ep.to_dict(), rewards=[1.0, float("nan")]))
    with pytest.raises(ValueError, match="must be a dict"):
        SampleTurns.from_dict([1, 2])


def test_advantages_follow_the_rollout_order_whatever_order_the_batch_is_in():
    # Under the step layout each step is a sample; OpenRLHF's dynamic batches regroup the
    # samples by length, so an episode's steps reach the estimator out of order. The
    # experiences' rollout index puts them back: the discounted returns need the order.
    from types import SimpleNamespace

    from training.advantages import critic_free_advantages, step_groups
    from training.openrlhf.estimator import batch_steps
    from training.openrlhf.order import in_rollout_order, rollout_order

    def step(traj, reward, anchor):
        return SampleTurns(group="task", traj=traj, rewards=[reward], anchors=[anchor],
                           anchor_texts=[None], is_action_valid=[True],
                           action_ranges=[(4, 6)], sequence_length=6, max_len=64)  # fmt: skip

    def returns(rows):
        steps = batch_steps([rows])
        return critic_free_advantages(steps, settings, step_groups(steps, settings)).returns

    steps = [step("a", 0.0, "s0"), step("a", 0.0, "s1"), step("a", 1.0, "s2"),
             step("b", 0.0, "s0"), step("b", 0.5, "s3")]  # fmt: skip
    settings = GiGPOSettings(gamma=0.9)
    shuffled_at = [4, 2, 0, 3, 1]  # rollout positions of the shuffled rows
    shuffled = [steps[i] for i in shuffled_at]
    experiences = [SimpleNamespace(index=shuffled_at[:2]), SimpleNamespace(index=shuffled_at[2:])]
    batch = [shuffled[:2], shuffled[2:]]
    rows, back = in_rollout_order(batch, rollout_order(experiences, batch))
    assert rows == steps
    np.testing.assert_allclose(returns(rows)[back], returns(steps)[shuffled_at])
    # taken as they are, the shuffled steps give other (wrong) returns
    assert not np.allclose(returns(shuffled), returns(steps)[shuffled_at])
    # no usable index: the rows are taken as they are
    assert rollout_order([SimpleNamespace(index=None), SimpleNamespace()], batch) is None
    assert rollout_order([SimpleNamespace(index=[0, 0]), SimpleNamespace(index=[1, 2, 3])],
                         batch) is None  # fmt: skip
    assert in_rollout_order(batch, None)[0] == shuffled
    # and without an index an episode spanning several samples is an error, not a guess
    from training.openrlhf.order import require_one_row_per_episode

    with pytest.raises(ValueError, match="spans several samples but the experiences carry no"):
        require_one_row_per_episode(batch)
    require_one_row_per_episode([[steps[0], steps[3]]])  # one row each: in order as it is
    with pytest.raises(ValueError, match="permutation"):
        in_rollout_order(batch, [0, 0, 1, 2, 3])


def test_turn_records_carry_next_states_and_older_ones_without_them_still_read():
    ep = dataclasses.replace(
        _episode("g", "t", [1.0, 2.0], ["x", "y"]),
        next_anchors=["y", "z"],
        next_anchor_texts=["text of y", None],
    )
    again = SampleTurns.from_dict(json.loads(json.dumps(ep.to_dict())))
    assert again == ep and again.steps().next_anchors == ["y", "z"]
    assert again.steps().next_anchor_texts == ["text of y", None]
    old = ep.to_dict()
    del old["next_anchors"], old["next_anchor_texts"]
    assert SampleTurns.from_dict(old).steps().next_anchors == []
    with pytest.raises(ValueError, match="next_anchors has 1 entries"):
        SampleTurns.from_dict(dict(ep.to_dict(), next_anchors=["y"]))
    with pytest.raises(ValueError, match="both or neither"):
        SampleTurns.from_dict(dict(ep.to_dict(), next_anchor_texts=[]))
