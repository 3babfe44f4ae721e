"""The rollout order of a batch's rows, which the discounted returns need (pure).

Under the step layout one episode's steps are several OpenRLHF samples. OpenRLHF's fixed
micro-batches keep the order its generator made them in; ``--train.dynamic_batch_enable``
regroups samples by length. Each experience's ``index`` (the rollout position OpenRLHF gives
every sample before it splits the batch) puts them back in order
(:func:`training.openrlhf.estimator.apply_gigpo` computes the advantages on the rows in that
order, and writes each back to its own row).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from training.openrlhf.turns import SampleTurns


def rollout_order(experiences: Sequence[Any], batch: Sequence[Sequence[Any]]) -> list[int] | None:
    """The batch's rows (flattened, experience by experience) in the order OpenRLHF's
    generator made them: sorted by each experience's ``index`` (the rollout position
    OpenRLHF gives every sample before it splits the batch). None when an experience has no
    such index for every row (the rows are then taken as they are).

    OpenRLHF's fixed micro-batches keep that order; ``--train.dynamic_batch_enable`` groups
    samples by length instead, and under the step layout one episode's steps are several
    samples, whose order the discounted returns need."""
    flat: list[int] = []
    for experience, rows in zip(experiences, batch, strict=True):
        index = getattr(experience, "index", None)
        if not isinstance(index, list) or len(index) != len(rows):
            return None
        flat.extend(int(i) for i in index)
    if len(set(flat)) != len(flat):
        return None
    return [int(i) for i in np.argsort(flat, kind="stable")]


def require_one_row_per_episode(batch: Sequence[Sequence[SampleTurns]]) -> None:
    """Without the rollout order, only a batch whose every episode is one row is in order.

    Raises:
        ValueError: an episode spans several rows (the step layout), whose order is lost.
    """
    seen: set[tuple[str, str]] = set()
    for samples in batch:
        for sample in samples:
            if sample.is_filler:
                continue
            key = (sample.group, sample.traj)
            if key in seen:
                raise ValueError(
                    f"episode {sample.traj} of group {sample.group} spans several samples but "
                    "the experiences carry no rollout index (Experience.index) to order its "
                    "steps by; the discounted returns need them in order"
                )
            seen.add(key)


def in_rollout_order(
    batch: Sequence[Sequence[SampleTurns]], order: Sequence[int] | None
) -> tuple[list[SampleTurns], np.ndarray]:
    """The batch's rows in ``order`` (positions into the flattened rows, from
    :func:`rollout_order`; None: as they are), and ``back``: int64 (N,), for each turn of
    :func:`batch_steps` ``(batch)``, its position among the ordered rows' turns (so a value
    computed on the ordered turns, indexed by ``back``, is in batch order)."""
    rows = [sample for samples in batch for sample in samples]
    order = list(range(len(rows))) if order is None else list(order)
    if sorted(order) != list(range(len(rows))):
        raise ValueError(f"order must be a permutation of the batch's {len(rows)} rows")
    counts = [len(row.rewards) for row in rows]
    start = [0] * len(rows)
    position = 0
    for i in order:
        start[i], position = position, position + counts[i]
    back = np.array(
        [start[i] + k for i in range(len(rows)) for k in range(counts[i])], dtype=np.int64
    )
    return [rows[i] for i in order], back
