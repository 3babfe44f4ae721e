"""The step record both trainers build: one row per model call (docs/design.md, contract 2).

The local trainer fills a :class:`StepRecords` per iteration (``training.local.rollout``);
the OpenRLHF executor fills one per episode (``training.openrlhf.executor``): under the step
layout each of its rows becomes one OpenRLHF sample (``training.openrlhf.patch``), under the
episode layout the episode's one sample carries them (``training.openrlhf.turns``). The
estimators read the step columns (:mod:`training.advantages`), the rollout files write them
(:mod:`training.record_files`). Rows of one trajectory are in time order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

#: Columns that hold one entry per row in every record: what the estimators read.
REQUIRED_COLUMNS = (
    "rewards", "anchors", "anchor_texts", "group_ids", "traj_ids", "is_action_valid",
)  # fmt: skip
#: The token columns: one entry per row, or all three empty in a record without tokens (the
#: OpenRLHF batch's step columns, whose tokens stay in OpenRLHF's samples).
TOKEN_COLUMNS = ("prompt_ids", "response_ids", "old_log_probs")
#: Columns that are either empty (not recorded) or hold one entry per row.
OPTIONAL_COLUMNS = (
    "observations", "actions", "truncated", "next_anchors", "next_anchor_texts", "won",
)  # fmt: skip
#: The next state's columns: recorded together or not at all (records written before they
#: existed lack both; an estimator that needs them, GraphGPO, refuses such records).
NEXT_COLUMNS = ("next_anchors", "next_anchor_texts")


@dataclass
class StepRecords:
    """One row per model call, rows of one trajectory in time order.

    ``prompt_ids[i]`` and ``response_ids[i]`` are token id lists; ``old_log_probs[i]`` has
    one log-prob (nats, under the sampling policy) per response token, or is empty where the
    sampler reported none. ``group_ids`` name the episode group (the task: every rollout of
    one start state), ``traj_ids`` the episode; ints in the local trainer, strings in the
    OpenRLHF executor.
    """

    prompt_ids: list[list[int]] = field(default_factory=list)
    response_ids: list[list[int]] = field(default_factory=list)
    old_log_probs: list[list[float]] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    anchors: list[str] = field(default_factory=list)
    """The key of the state each call acted from (exact step grouping)."""
    anchor_texts: list[str | None] = field(default_factory=list)
    """That state's ``state_text()`` (similarity step grouping); None for an env without."""
    group_ids: list[Any] = field(default_factory=list)
    traj_ids: list[Any] = field(default_factory=list)
    is_action_valid: list[bool] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    """The environment's observation each call answered (``info["raw_observation"]``)."""
    actions: list[str] = field(default_factory=list)
    """The text the environment read: the response prefix and the generated text."""
    truncated: list[bool] = field(default_factory=list)
    """Whether the response stopped at its token limit rather than at its end."""
    next_anchors: list[str] = field(default_factory=list)
    """The key of the state each call's action led to: for a trajectory's last row, the state
    the episode ended in (terminated or truncated); else the next row's anchor."""
    next_anchor_texts: list[str | None] = field(default_factory=list)
    """That state's ``state_text()`` (``info["anchor_text"]`` after the step), or None."""
    won: list[bool] = field(default_factory=list)
    """Whether the env said the episode was won (``info["won"]``) as of the row: the local
    trainer marks the winning step, the OpenRLHF batch every row of a won episode; an
    episode was won when any of its rows says so (GraphGPO's ``success: won``)."""

    def __len__(self) -> int:
        return len(self.rewards)

    def append(
        self,
        *,
        reward: float,
        anchor: str,
        anchor_text: str | None,
        group_id: Any,
        traj_id: Any,
        is_action_valid: bool,
        prompt_ids: list[int] | None = None,
        response_ids: list[int] | None = None,
        old_log_probs: list[float] | None = None,
        observation: str | None = "",
        action: str | None = "",
        truncated: bool = False,
        next_anchor: str | None = None,
        next_anchor_text: str | None = None,
        won: bool | None = None,
    ) -> None:
        """Adds one row. A token column given None, a text given None, or ``next_anchor``
        None (then ``next_anchor_text`` is ignored) is not recorded (keep that the same for
        every row: :meth:`check`)."""
        for name, value in (("prompt_ids", prompt_ids), ("response_ids", response_ids),
                            ("old_log_probs", old_log_probs)):  # fmt: skip
            if value is not None:
                getattr(self, name).append(list(value))
        self.rewards.append(float(reward))
        self.anchors.append(str(anchor))
        self.anchor_texts.append(None if anchor_text is None else str(anchor_text))
        self.group_ids.append(group_id)
        self.traj_ids.append(traj_id)
        self.is_action_valid.append(bool(is_action_valid))
        if observation is not None:
            self.observations.append(str(observation))
        if action is not None:
            self.actions.append(str(action))
        self.truncated.append(bool(truncated))
        if next_anchor is not None:
            self.next_anchors.append(str(next_anchor))
            self.next_anchor_texts.append(
                None if next_anchor_text is None else str(next_anchor_text)
            )
        if won is not None:
            self.won.append(bool(won))

    def extend(self, other: StepRecords) -> StepRecords:
        """Appends ``other``'s rows (every column); returns self. Where one side has rows but
        no next states (:data:`NEXT_COLUMNS`), the result has none either."""
        known = all(len(r) == 0 or len(r.next_anchors) > 0 for r in (self, other))
        won_known = all(len(r) == 0 or len(r.won) > 0 for r in (self, other))
        for f in fields(self):
            getattr(self, f.name).extend(getattr(other, f.name))
        if not known:
            for name in NEXT_COLUMNS:
                getattr(self, name).clear()
        if not won_known:
            self.won.clear()
        return self

    def check(self) -> StepRecords:
        """Raises ValueError naming the column when the columns disagree; returns self."""
        n = len(self.rewards)
        for name in REQUIRED_COLUMNS:
            if len(getattr(self, name)) != n:
                raise ValueError(
                    f"StepRecords.{name} has {len(getattr(self, name))} rows, rewards has {n}"
                )
        for name in TOKEN_COLUMNS:
            if len(getattr(self, name)) != (n if self.prompt_ids else 0):
                raise ValueError(
                    f"StepRecords.{name} has {len(getattr(self, name))} rows, rewards has {n}"
                )
        for name in OPTIONAL_COLUMNS:
            if len(getattr(self, name)) not in (0, n):
                raise ValueError(
                    f"StepRecords.{name} has {len(getattr(self, name))} rows, rewards has {n}"
                )
        if len(self.next_anchors) != len(self.next_anchor_texts):
            raise ValueError(
                f"StepRecords.next_anchor_texts has {len(self.next_anchor_texts)} rows, "
                f"next_anchors has {len(self.next_anchors)}: record both or neither"
            )
        if not all(isinstance(r, int | float) and math.isfinite(r) for r in self.rewards):
            raise ValueError("StepRecords.rewards must be finite numbers")
        for i, (response, log_probs) in enumerate(
            zip(self.response_ids, self.old_log_probs, strict=True)
        ):
            if log_probs and len(log_probs) != len(response):
                raise ValueError(
                    f"StepRecords row {i}: {len(log_probs)} old_log_probs for "
                    f"{len(response)} response tokens"
                )
        return self

    def to_dict(self) -> dict[str, list[Any]]:
        """The columns as a plain dict of lists (JSON-able when the ids are)."""
        return {f.name: list(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Any) -> StepRecords:
        """Reads :meth:`to_dict`'s output back; ValueError naming what is malformed."""
        if not isinstance(data, dict):
            raise ValueError(f"step records must be a dict of columns, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"step records have unknown columns {unknown}")
        missing = [name for name in REQUIRED_COLUMNS if name not in data]
        if missing:
            raise ValueError(f"step records lack the columns {missing}")
        try:
            records = cls(
                prompt_ids=[[int(t) for t in row] for row in data.get("prompt_ids", [])],
                response_ids=[[int(t) for t in row] for row in data.get("response_ids", [])],
                old_log_probs=[[float(x) for x in row] for row in data.get("old_log_probs", [])],
                rewards=[float(r) for r in data["rewards"]],
                anchors=[str(a) for a in data["anchors"]],
                anchor_texts=[None if t is None else str(t) for t in data["anchor_texts"]],
                group_ids=list(data["group_ids"]),
                traj_ids=list(data["traj_ids"]),
                is_action_valid=[bool(v) for v in data["is_action_valid"]],
                observations=[str(t) for t in data.get("observations", [])],
                actions=[str(t) for t in data.get("actions", [])],
                truncated=[bool(v) for v in data.get("truncated", [])],
                next_anchors=[str(a) for a in data.get("next_anchors", [])],
                next_anchor_texts=[
                    None if t is None else str(t) for t in data.get("next_anchor_texts", [])
                ],
                won=[bool(v) for v in data.get("won", [])],
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"malformed step records: {exc}") from None
        return records.check()
