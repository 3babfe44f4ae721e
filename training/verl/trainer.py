"""verl 0.9.1's v1 trainer with the step columns in its advantage step.

verl's v1 trainer (``verl.trainer.ppo.v1``, the default) keeps a batch in its TransferQueue,
and its advantage step (``PPOTrainer._compute_advantage``) reads back only ``uid``, the
masks, the rewards and the log-probs: not the ``extra_fields`` where our agent loop leaves each
step's episode, state and validity. Under gigpo, hgpo or graphgpo the wrapped step
(:func:`wrap_compute_advantage_step`, installed by :mod:`training.verl.plugin` on the base
class, so every trainer mode has it) first reads the batch's step columns from the queue
(:func:`step_columns`) and holds them while verl's own advantage step runs;
:func:`step_columns_for` gives them to the patched ``compute_advantage``. Everything else
is verl's, and other estimators run unchanged.

verl pads a batch to a multiple of its mini-batch with rows of its own (masked, no loss;
``padding_utils.upsample_batch_to_divisible_size``), each a copy of the first row's fields,
``extra_fields`` included, under a ``uid`` of its own and tagged ``is_padding``: those rows
are no steps, take no part in the step groups or the episode scores, and get advantage 0.

With ``trainer.rollout_data_dir`` set (where verl dumps each step's generations), each
step's records, their step groups and advantages are also written there, as
``rollouts/iteration_N.jsonl.gz`` (:mod:`training.record_files`; ``N`` is verl's global step
less one), which ``gigpo-view DIR`` shows.

Why a wrapped method and not a trainer registered under a name of its own
(``register_trainer``): verl reads ``trainer.v1.trainer_mode`` both to pick the trainer class
and, inside it, to choose the replay buffer and the refill rules (``== "sync"``), so a
trainer named ``gigpo`` would run verl's sync trainer with its asynchronous buffer.
"""

from __future__ import annotations

import contextvars
import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from training.verl.config import VERL_ESTIMATORS, section_get

#: The agent loop's ``extra_fields`` that are step columns (:mod:`training.verl.columns`).
STEP_FIELDS = (
    "traj_ids", "step", "rewards", "anchors", "anchor_texts", "next_anchors",
    "next_anchor_texts", "is_action_valid", "won",
)  # fmt: skip


@dataclass
class HeldBatch:
    """What the running advantage step holds for ``compute_advantage``: the batch's step
    columns (N rows each), which rows are steps (bool (N,), None: all), a dict for the
    batch's metrics and one for its records (:func:`training.verl.advantage.row_advantages`)."""

    columns: dict[str, np.ndarray] = field(default_factory=dict)
    rows: np.ndarray | None = None
    report: dict[str, float] | None = None
    sink: dict[str, Any] | None = None


#: The batch whose advantage step is running: (its row count, what is held for it).
_HELD: contextvars.ContextVar[tuple[int, HeldBatch] | None] = contextvars.ContextVar(
    "gigpo_step_columns", default=None
)


def step_columns(extra_fields: list[Any], rows: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The step columns (object arrays, one entry per row) of the rows' ``extra_fields``;
    rows that ``rows`` marks False (verl's padding) are not read and hold None.

    Raises:
        ValueError: a step row without a step column (not written by the gigpo agent loop).
    """
    extra = list(extra_fields)
    steps = np.ones(len(extra), dtype=bool) if rows is None else np.asarray(rows, dtype=bool)
    for i, row in enumerate(extra):
        missing = [f for f in STEP_FIELDS if not isinstance(row, dict) or f not in row]
        if steps[i] and missing:
            raise ValueError(
                f"batch row {i} has no step columns {missing} in its extra_fields: the gigpo "
                "estimators train rows of the gigpo agent loop "
                "(actor_rollout_ref.rollout.agent.default_agent_loop=gigpo)"
            )
    columns = {}
    for name in STEP_FIELDS:
        column = np.empty(len(extra), dtype=object)
        column[:] = [row[name] if steps[i] else None for i, row in enumerate(extra)]
        columns[name] = column
    return columns


def step_columns_for(rows: int) -> HeldBatch:
    """What the running advantage step holds, if it is a batch of ``rows`` rows; else an
    empty :class:`HeldBatch` (a batch that carries its columns itself, as verl-agent's does,
    outside the v1 trainer)."""
    held = _HELD.get()
    if held is None or held[0] != rows:
        return HeldBatch()
    return held[1]


def padding_rows(tags: list[Any]) -> np.ndarray:
    """bool (N,): which of a batch's rows are steps, from verl's tags (``is_padding``)."""
    return np.array([not (isinstance(t, dict) and t.get("is_padding", False)) for t in tags],
                    dtype=bool)  # fmt: skip


def wrap_compute_advantage_step(original: Any) -> Any:
    """``PPOTrainer._compute_advantage`` with the batch's step columns read from the
    TransferQueue first, for our estimators (others run it unchanged)."""

    @functools.wraps(original)
    def _compute_advantage(self: Any, batch: Any, metrics: dict) -> Any:
        estimator = section_get(self.config.algorithm, "adv_estimator")
        if getattr(estimator, "value", estimator) not in VERL_ESTIMATORS:
            return original(self, batch, metrics)
        from verl.trainer.ppo.v1 import trainer_base

        data = trainer_base.tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"]
        )
        extra = data["extra_fields"]
        rows = padding_rows(list(batch.tags))
        columns = step_columns(extra.tolist() if hasattr(extra, "tolist") else list(extra), rows)
        held = HeldBatch(columns=columns, rows=rows, report={}, sink={})
        token = _HELD.set((len(batch.keys), held))
        try:
            out = original(self, batch, metrics)
        finally:
            _HELD.reset(token)
        metrics.update(held.report)  # gigpo/step_group_coverage, ... (advantage.batch_metrics)
        folder = section_get(self.config.trainer, "rollout_data_dir")
        if folder and held.sink:
            write_step_records(folder, int(self.global_steps) - 1, held.sink)
        return out

    return _compute_advantage


def write_step_records(folder: str, iteration: int, sink: dict[str, Any]) -> None:
    """One step's records with their step groups and advantages, as ``gigpo-view`` reads
    them, under ``folder/rollouts/`` (:func:`training.record_files.write_rollouts`)."""
    from training.record_files import record_rows, write_rollouts

    result = sink["result"]
    rows = record_rows(iteration, sink["records"], result, sink["groups"], extras=result.extras)
    write_rollouts(folder, iteration, rows, source="verl", estimator=sink["settings"].estimator)
