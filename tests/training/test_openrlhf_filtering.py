"""Dynamic sampling under gigpo_algo's estimators (training.openrlhf.filtering), pure: which
group is useless, and the rounds that replace dropped groups. The same rule on OpenRLHF's
real samples generator: test_openrlhf_real.py::test_dynamic_filtering_*."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from training.openrlhf.filtering import filter_groups, group_has_signal, sample_turns
from training.openrlhf.samples import STEP_SAMPLES
from training.openrlhf.turns import INFO_KEY, SampleTurns
from training.settings import EstimatorSettings


def _episode(group: str, traj: str, anchors: list[str], rewards: list[float]) -> SampleTurns:
    k = len(rewards)
    return SampleTurns(
        group=group,
        traj=traj,
        rewards=rewards,
        anchors=anchors,
        anchor_texts=[None] * k,
        is_action_valid=[True] * k,
        action_ranges=[(2 * i, 2 * i + 1) for i in range(k)],
        sequence_length=2 * k,
    )


def _same(group: str) -> list[SampleTurns]:
    """Four identical episodes: no advantage at either level."""
    return [_episode(group, f"t{i}", ["s0", "s1"], [0.0, 1.0]) for i in range(4)]


def _step_signal_only(group: str) -> list[SampleTurns]:
    """Every episode returns 1 (episode level 0), but from the shared start state s0 one
    action is rewarded at once and the other a step later: discounted returns differ."""
    late = [_episode(group, f"a{i}", ["s0", "s1"], [0.0, 1.0]) for i in range(2)]
    early = [_episode(group, f"b{i}", ["s0", "s2"], [1.0, 0.0]) for i in range(2)]
    return late + early


def _scores_differ(group: str) -> list[SampleTurns]:
    return [_episode(group, f"t{i}", ["s0"], [float(i % 2)]) for i in range(4)]


@pytest.mark.parametrize(
    ("estimator", "expected"),
    [
        ("gigpo", [False, True, True]),
        ("grpo", [False, False, True]),
        ("rloo", [False, False, True]),
    ],
)
def test_a_group_is_useless_when_no_turn_has_an_advantage_at_either_level(estimator, expected):
    settings = EstimatorSettings(estimator=estimator)
    groups = [_same("a"), _step_signal_only("b"), _scores_differ("c")]
    assert [group_has_signal(g, settings) for g in groups] == expected
    # equal episode scores alone do not make a GiGPO group useless: "b" scores 1, 1, 1, 1
    assert {sum(ep.rewards) for ep in groups[1]} == {1.0}
    assert not group_has_signal([], settings)


def _samples(groups: list[list[SampleTurns]], layout: str) -> list:
    """OpenRLHF's episode samples as the patched generator builds them: the record in the
    sample's info (episode layout) or in its step samples' (step layout)."""
    out = []
    for group in groups:
        for ep in group:
            if layout == "episode":
                out.append(SimpleNamespace(info={INFO_KEY: [ep.to_dict()]}))
                continue
            steps = [
                SimpleNamespace(info={INFO_KEY: [SampleTurns(
                    group=ep.group, traj=ep.traj, rewards=[r], anchors=[a], anchor_texts=[None],
                    is_action_valid=[True], action_ranges=[(0, 1)], sequence_length=1,
                ).to_dict()]})
                for r, a in zip(ep.rewards, ep.anchors, strict=True)
            ]  # fmt: skip
            out.append(SimpleNamespace(info={}, **{STEP_SAMPLES: steps}))
    return out


class _Prompts:
    """Stands for OpenRLHF's ``_generate_vllm`` without its filter: each call generates the
    groups of the next ``n`` prompts."""

    def __init__(self, groups: list[list[SampleTurns]], layout: str) -> None:
        self.groups, self.layout, self.calls = groups, layout, []

    def __call__(self, n: int) -> tuple[list, int, bool]:
        # as OpenRLHF's dataloader: exhausted only when a draw ran past the last prompt
        self.calls.append(n)
        taken, self.groups = self.groups[:n], self.groups[n:]
        return _samples(taken, self.layout), len(taken), len(taken) < n


@pytest.mark.parametrize("layout", ["episode", "step"])
def test_dropped_groups_are_replaced_round_by_round(layout):
    settings = EstimatorSettings(estimator="gigpo")
    prompts = _Prompts(
        [_same("a"), _step_signal_only("b"), _same("c"), _same("d"), _scores_differ("e")],
        layout,
    )
    samples, consumed, exhausted, stats = filter_groups(prompts, 2, settings)
    # round 1: a (dropped), b; round 2: c (dropped); round 3: d (dropped); round 4: e
    assert prompts.calls == [2, 1, 1, 1]
    assert [sample_turns(s)[0].group for s in samples] == ["b"] * 4 + ["e"] * 4
    assert (consumed, exhausted) == (5, False)  # e was the last, but no draw ran past it
    assert stats == {"gigpo/groups_kept": 2.0, "gigpo/groups_dropped": 3.0}
    # the next call finds the dataloader empty
    assert filter_groups(prompts, 2, settings)[1:3] == (0, True)
    # a sample without turn records is an error, not a group of its own
    with pytest.raises(ValueError, match="needs every sample's turn records"):
        filter_groups(lambda n: ([SimpleNamespace(info={})], 1, False), 1, settings)


def test_the_rounds_end_when_the_prompts_run_out():
    settings = EstimatorSettings(estimator="grpo")
    prompts = _Prompts([_same("a"), _step_signal_only("b"), _same("c")], "episode")
    samples, consumed, exhausted, stats = filter_groups(prompts, 2, settings)
    # a, b dropped (GRPO: b has no signal either); then c, drawn past the end, dropped
    assert prompts.calls == [2, 2] and samples == [] and consumed == 3 and exhausted
    assert stats == {"gigpo/groups_kept": 0.0, "gigpo/groups_dropped": 3.0}
    nothing = _Prompts([], "episode")
    assert filter_groups(nothing, 2, settings)[:3] == ([], 0, True)


def test_hgpo_without_base_group_trains_no_episode_term_so_its_filter_ignores_it():
    # Scores differ, but every turn is alone in its groups (each episode its own state): HGPO
    # gives every turn 0 unless the episode advantage is one of its items (base_group).
    lone = [_episode("d", f"t{i}", [f"s{i}"], [float(i % 2)]) for i in range(4)]
    assert not group_has_signal(lone, EstimatorSettings(estimator="hgpo"))
    assert group_has_signal(lone, EstimatorSettings(estimator="hgpo", base_group=True))
    assert group_has_signal(lone, EstimatorSettings(estimator="gigpo"))
    assert group_has_signal(_step_signal_only("b"), EstimatorSettings(estimator="hgpo"))


def test_graphgpo_levels_weighted_zero_do_not_keep_a_group():
    # Scores differ, every turn alone in its step group: only the episode level has a signal.
    lone = [
        dataclasses.replace(
            _episode("e", f"t{i}", [f"s{i}"], [float(i % 2)]),
            next_anchors=["end"],
            next_anchor_texts=[None],
        )
        for i in range(4)
    ]
    assert group_has_signal(lone, EstimatorSettings(estimator="graphgpo"))
    assert not group_has_signal(lone, EstimatorSettings(estimator="graphgpo", episode_weight=0.0))
