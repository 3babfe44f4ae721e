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

Why a wrapped method and not a trainer registered under a name of its own
(``register_trainer``): verl reads ``trainer.v1.trainer_mode`` both to pick the trainer class
and, inside it, to choose the replay buffer and the refill rules (``== "sync"``), so a
trainer named ``gigpo`` would run verl's sync trainer with its asynchronous buffer.
"""

from __future__ import annotations

import contextvars
import functools
from typing import Any

import numpy as np

from training.verl.config import VERL_ESTIMATORS, section_get

#: The batch whose advantage step is running: (rows, its step columns, its metrics).
_STEP_COLUMNS: contextvars.ContextVar[
    tuple[int, dict[str, np.ndarray], dict[str, float]] | None
] = contextvars.ContextVar("gigpo_step_columns", default=None)
#: The agent loop's ``extra_fields`` that are step columns (:mod:`training.verl.columns`).
STEP_FIELDS = (
    "traj_ids", "step", "rewards", "anchors", "anchor_texts", "next_anchors",
    "next_anchor_texts", "is_action_valid", "won",
)  # fmt: skip


def step_columns(extra_fields: list[Any]) -> dict[str, np.ndarray]:
    """The step columns (object arrays, one entry per row) of the rows' ``extra_fields``.

    Raises:
        ValueError: a row without a step column (not written by the gigpo agent loop).
    """
    rows = list(extra_fields)
    for i, row in enumerate(rows):
        missing = [f for f in STEP_FIELDS if not isinstance(row, dict) or f not in row]
        if missing:
            raise ValueError(
                f"batch row {i} has no step columns {missing} in its extra_fields: the gigpo "
                "estimators train rows of the gigpo agent loop "
                "(actor_rollout_ref.rollout.agent.default_agent_loop=gigpo)"
            )
    columns = {}
    for name in STEP_FIELDS:
        column = np.empty(len(rows), dtype=object)
        column[:] = [row[name] for row in rows]
        columns[name] = column
    return columns


def step_columns_for(rows: int) -> tuple[dict[str, np.ndarray], dict[str, float] | None]:
    """The step columns held by the running advantage step and the dict for its metrics, if
    it is one of ``rows`` rows; else none and None (a batch that carries its columns itself,
    as verl-agent's does, outside the v1 trainer)."""
    held = _STEP_COLUMNS.get()
    if held is None or held[0] != rows:
        return {}, None
    return held[1], held[2]


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
        columns = step_columns(extra.tolist() if hasattr(extra, "tolist") else list(extra))
        report: dict[str, float] = {}
        token = _STEP_COLUMNS.set((len(batch.keys), columns, report))
        try:
            out = original(self, batch, metrics)
        finally:
            _STEP_COLUMNS.reset(token)
        metrics.update(report)  # gigpo/step_group_coverage, ... (advantage.batch_metrics)
        return out

    return _compute_advantage
