"""The turns each OpenRLHF sample trains, and how they travel to the trainer.

The executor records every episode as :class:`~training.records.StepRecords` (the one step
record, contract 2 of docs/design.md). OpenRLHF moves samples, not episodes, so each sample
carries the rows it trains as a :class:`SampleTurns`: their step columns, the token range of
each response in the sample's sequence, and the episode's outcome. Under the step layout a
sample is one step and holds that one row (:meth:`SampleTurns.from_step`); under the episode
layout a sample is the whole episode and holds all its rows (:meth:`SampleTurns.from_steps`);
a filler sample (padding that trains nothing, see ``samples.expand_step_samples``) holds
none. It rides in ``Experience.info["gigpo_turns"]`` as a plain dict (a list of them once
OpenRLHF concatenates samples: its merge chains lists); the estimator reads the batch's back
as one :class:`~training.records.StepRecords` (:meth:`SampleTurns.steps`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from training.records import StepRecords

INFO_KEY = "gigpo_turns"


@dataclass(frozen=True)
class SampleTurns:
    """The turns one OpenRLHF sample trains.

    Attributes:
        group: episode group (the task: every sample of one prompt shares it).
        traj: trajectory id, unique within the group.
        rewards: float per turn.
        anchors: state key per turn (the state the response acted on).
        anchor_texts: that state's text per turn (``info["anchor_text"]``, for similarity
            grouping), None where the env gives none.
        is_action_valid: bool per turn (``info["is_action_valid"]``).
        action_ranges: ``(start, end)`` token range of each response in the full sequence.
        sequence_length: tokens in the full (untruncated) sequence.
        max_len: the truncation length OpenRLHF applies (``--data.max_len``).
        won: whether the episode was won.
        budget_ended: episode layout: the token budget (``--data.max_len``) ended the episode
            before the environment did.
        observations, actions: per turn, the observation answered and the response text,
            bounded; recorded only when the run saves rollouts (else empty).
        next_anchors, next_anchor_texts: per turn, the key and text of the state its action
            led to (for the episode's last turn, the state it ended in); empty in a record
            written before they were (GraphGPO refuses such a batch).
    """

    group: str
    traj: str
    rewards: list[float] = field(default_factory=list)
    anchors: list[str] = field(default_factory=list)
    anchor_texts: list[str | None] = field(default_factory=list)
    is_action_valid: list[bool] = field(default_factory=list)
    action_ranges: list[tuple[int, int]] = field(default_factory=list)
    sequence_length: int = 0
    max_len: int = 2048
    won: bool = False
    budget_ended: bool = False
    observations: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    next_anchors: list[str] = field(default_factory=list)
    next_anchor_texts: list[str | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        k = len(self.rewards)
        for name in ("anchors", "anchor_texts", "is_action_valid", "action_ranges"):
            if len(getattr(self, name)) != k:
                raise ValueError(
                    f"SampleTurns.{name} has {len(getattr(self, name))} entries, rewards has {k}"
                )
        for name in ("observations", "actions", "next_anchors", "next_anchor_texts"):
            if len(getattr(self, name)) not in (0, k):
                raise ValueError(
                    f"SampleTurns.{name} has {len(getattr(self, name))} entries, rewards has {k}"
                )
        if len(self.next_anchors) != len(self.next_anchor_texts):
            raise ValueError("SampleTurns.next_anchors and next_anchor_texts: both or neither")
        if not all(isinstance(r, int | float) and math.isfinite(r) for r in self.rewards):
            raise ValueError(f"SampleTurns.rewards must be finite numbers, got {self.rewards!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def is_filler(self) -> bool:
        """A sample that trains no turn (padding of the step layout)."""
        return not self.rewards

    def steps(self) -> StepRecords:
        """The sample's rows as step records without tokens (observations and actions ``""``
        where none were recorded; the next states only where they were)."""
        k = len(self.rewards)
        return StepRecords(
            rewards=list(self.rewards),
            anchors=list(self.anchors),
            anchor_texts=list(self.anchor_texts),
            group_ids=[self.group] * k,
            traj_ids=[self.traj] * k,
            is_action_valid=list(self.is_action_valid),
            observations=list(self.observations) or [""] * k,
            actions=list(self.actions) or [""] * k,
            next_anchors=list(self.next_anchors),
            next_anchor_texts=list(self.next_anchor_texts),
            won=[self.won] * k,
        )

    @classmethod
    def from_steps(
        cls,
        steps: StepRecords,
        action_ranges: list[tuple[int, int]],
        *,
        group: str,
        traj: str,
        sequence_length: int,
        max_len: int,
        won: bool,
        budget_ended: bool,
    ) -> SampleTurns:
        """An episode's step records (without tokens: they are the one growing sequence) as
        the record of its one sample (the episode layout); ``action_ranges[i]`` is row
        ``i``'s response in that sequence."""
        return cls(
            group=str(group),
            traj=str(traj),
            rewards=list(steps.rewards),
            anchors=list(steps.anchors),
            anchor_texts=list(steps.anchor_texts),
            is_action_valid=list(steps.is_action_valid),
            action_ranges=[(int(s), int(e)) for s, e in action_ranges],
            sequence_length=int(sequence_length),
            max_len=int(max_len),
            won=bool(won),
            budget_ended=bool(budget_ended),
            observations=list(steps.observations),
            actions=list(steps.actions),
            next_anchors=list(steps.next_anchors),
            next_anchor_texts=list(steps.next_anchor_texts),
        )

    @classmethod
    def from_step(cls, steps: StepRecords, i: int, *, won: bool, max_len: int) -> SampleTurns:
        """Row ``i`` of an episode's step records as the record of its own sample, whose
        sequence is that row's prompt then response."""
        start = len(steps.prompt_ids[i])
        end = start + len(steps.response_ids[i])
        return cls(
            group=str(steps.group_ids[i]),
            traj=str(steps.traj_ids[i]),
            rewards=[float(steps.rewards[i])],
            anchors=[str(steps.anchors[i])],
            anchor_texts=[steps.anchor_texts[i]],
            is_action_valid=[bool(steps.is_action_valid[i])],
            action_ranges=[(start, end)],
            sequence_length=end,
            max_len=int(max_len),
            won=bool(won),
            observations=[steps.observations[i]] if steps.observations else [],
            actions=[steps.actions[i]] if steps.actions else [],
            next_anchors=[str(steps.next_anchors[i])] if steps.next_anchors else [],
            next_anchor_texts=[steps.next_anchor_texts[i]] if steps.next_anchors else [],
        )

    def with_episode_reward(self, total: float) -> SampleTurns:
        """The same episode with its turn rewards summing to ``total``: the difference (a
        terminal shaping of the episode reward, such as OpenRLHF's length penalties) is added
        to the last turn's reward. An episode without turns is returned as it is."""
        if not self.rewards or total == sum(self.rewards):
            return self
        rewards = list(self.rewards)
        rewards[-1] += float(total) - sum(self.rewards)
        return dataclasses.replace(self, rewards=rewards)

    @classmethod
    def from_dict(cls, data: Any) -> SampleTurns:
        """Reads a dict written by :meth:`to_dict`; raises ValueError naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"a gigpo turn record must be a dict, got {type(data).__name__}")
        try:
            return cls(
                group=str(data["group"]),
                traj=str(data["traj"]),
                rewards=[float(r) for r in data["rewards"]],
                anchors=[str(a) for a in data["anchors"]],
                anchor_texts=[None if t is None else str(t) for t in data["anchor_texts"]],
                is_action_valid=[bool(v) for v in data["is_action_valid"]],
                action_ranges=[(int(s), int(e)) for s, e in data["action_ranges"]],
                sequence_length=int(data["sequence_length"]),
                max_len=int(data["max_len"]),
                won=bool(data.get("won", False)),
                budget_ended=bool(data.get("budget_ended", False)),
                observations=[str(t) for t in data.get("observations", [])],
                actions=[str(t) for t in data.get("actions", [])],
                next_anchors=[str(a) for a in data.get("next_anchors", [])],
                next_anchor_texts=[
                    None if t is None else str(t) for t in data.get("next_anchor_texts", [])
                ],
            )
        except KeyError as exc:
            raise ValueError(f"gigpo turn record lacks {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise ValueError(f"malformed gigpo turn record: {exc}") from None
