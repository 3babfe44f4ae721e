"""A verl batch's step columns as :class:`~training.records.StepRecords`.

One row of a verl batch is one environment step (the paper's layout; verl-agent's multi-turn
rollout and our agent loop both leave it so). Its step columns live in the batch's
``non_tensor_batch``, one numpy array per name, under our names (the record's columns,
written by :mod:`training.verl.agent_loop`) or verl-agent's, which are aliases:

========================  ==========================  ==========================================
ours                      verl-agent                  what
========================  ==========================  ==========================================
``uid``                   ``uid``                     the episode group (the task's prompt uid)
``traj_ids``              ``traj_uid``                the episode
``rewards``               ``rewards``                 the step's own environment reward
``anchors``               ``anchor_obs``              the state the step acted from (its key)
``anchor_texts``          (``anchor_obs``)            that state's text (similarity grouping)
``next_anchors``          ``next_obs``                the state the step led to (GraphGPO)
``next_anchor_texts``     (``next_obs``)              its text
``is_action_valid``       ``is_action_valid``         whether the env could act on the text
``won``                                               the env's ``info["won"]`` after the step
``step``                                              the step's index in its episode
``active_masks``          ``active_masks``            verl-agent's: every row must be active
========================  ==========================  ==========================================

verl-agent's ``anchor_obs`` is both the key (exact grouping: equal values) and the text
(similarity grouping); a value that is not a string is keyed by its JSON form. Rows of one
episode must be in time order unless ``step`` says the order (then they are sorted by it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from training.records import StepRecords

#: Our column -> verl-agent's name for it.
ALIASES = {"traj_ids": "traj_uid", "anchors": "anchor_obs", "next_anchors": "next_obs"}
#: The columns every estimator reads (under our name or its alias).
REQUIRED = ("uid", "traj_ids", "rewards", "anchors", "is_action_valid")


def _column(columns: Mapping[str, Any], name: str, n: int | None) -> list[Any] | None:
    """Column ``name`` (or its verl-agent alias) as a list, None where absent.

    Raises:
        ValueError: both names given, or a length that is not the batch's.
    """
    alias = ALIASES.get(name)
    if alias is not None and name in columns and alias in columns:
        raise ValueError(f"non_tensor_batch has both {name!r} and its alias {alias!r}: give one")
    key = name if name in columns else alias if alias in columns else None
    if key is None:
        return None
    values = list(np.asarray(columns[key], dtype=object).reshape(-1))
    if n is not None and len(values) != n:
        raise ValueError(f"non_tensor_batch[{key!r}] has {len(values)} rows, uid has {n}")
    return values


def state_key(value: Any) -> str:
    """A state as a string key: a string as it is, anything else by its JSON form (sorted
    keys, arrays as lists), so equal states give equal keys in every process."""
    if isinstance(value, str):
        return value
    if isinstance(value, np.ndarray):
        value = value.tolist()
    return json.dumps(value, sort_keys=True, default=str)


def _texts(values: list[Any] | None) -> list[str | None] | None:
    return None if values is None else [v if isinstance(v, str) else None for v in values]


def _bools(values: list[Any], name: str) -> list[bool]:
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool | np.bool_) or (
            isinstance(v, int | float | np.number) and v in (0, 1)
        ):
            out.append(bool(v))
        else:
            raise ValueError(f"non_tensor_batch[{name!r}] row {i} must be a bool, got {v!r}")
    return out


def _floats(values: list[Any], name: str) -> list[float]:
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool | np.bool_) or not isinstance(v, int | float | np.number):
            raise ValueError(f"non_tensor_batch[{name!r}] row {i} must be a number, got {v!r}")
        if not math.isfinite(float(v)):
            raise ValueError(f"non_tensor_batch[{name!r}] row {i} is not finite: {v!r}")
        out.append(float(v))
    return out


def batch_records(columns: Mapping[str, Any]) -> tuple[StepRecords, np.ndarray]:
    """The step records of a verl batch's ``non_tensor_batch``, in time order per episode.

    Returns:
        ``(records, order)``: the records, row ``j`` of them being batch row ``order[j]``
        (int64, shape (N,); the identity unless ``step`` reordered them).

    Raises:
        ValueError: a missing column (naming both of its names), a malformed value (naming
            the column and row), an inactive row, or a repeated ``(traj, step)``.
    """
    if not isinstance(columns, Mapping):
        raise ValueError(f"non_tensor_batch must be a mapping, got {type(columns).__name__}")
    if "uid" not in columns:
        raise ValueError("non_tensor_batch has no 'uid' (the episode group of each row)")
    n = len(np.asarray(columns["uid"], dtype=object).reshape(-1))
    got = {name: _column(columns, name, n) for name in (*REQUIRED, *ALIASES)}
    got["uid"] = list(np.asarray(columns["uid"], dtype=object).reshape(-1))
    missing = [
        name + (f" (verl-agent: {ALIASES[name]!r})" if name in ALIASES else "")
        for name in REQUIRED
        if got[name] is None
    ]
    if missing:
        raise ValueError(f"non_tensor_batch lacks the step columns {missing}")
    active = _column(columns, "active_masks", n)
    if active is not None:
        inactive = [i for i, a in enumerate(_bools(active, "active_masks")) if not a]
        if inactive:
            raise ValueError(
                f"non_tensor_batch['active_masks'] is false at rows {inactive[:10]}: every row "
                "of a step batch must be an active step (verl-agent asserts the same)"
            )
    order = np.arange(n, dtype=np.int64)
    steps = _column(columns, "step", n)
    traj = [str(t) for t in got["traj_ids"]]
    if steps is not None:
        index = [int(s) for s in _floats(steps, "step")]
        pairs = set(zip(traj, index, strict=True))
        if len(pairs) != n:
            raise ValueError("non_tensor_batch['step']: a step of an episode is there twice")
        order = np.argsort(np.asarray(index, dtype=np.int64), kind="stable")

    def take(values: list[Any] | None) -> list[Any] | None:
        return None if values is None else [values[i] for i in order]

    anchors = got["anchors"]
    texts = _column(columns, "anchor_texts", n) or _texts(anchors)
    nexts = got["next_anchors"]
    next_texts = _column(columns, "next_anchor_texts", n) or _texts(nexts)
    won = _column(columns, "won", n)
    records = StepRecords(
        rewards=take(_floats(got["rewards"], "rewards")),
        anchors=take([state_key(a) for a in anchors]),
        anchor_texts=take(texts),
        group_ids=take([str(g) for g in got["uid"]]),
        traj_ids=take(traj),
        is_action_valid=take(_bools(got["is_action_valid"], "is_action_valid")),
        next_anchors=take([state_key(a) for a in nexts]) if nexts is not None else [],
        next_anchor_texts=take(next_texts) if nexts is not None else [],
        won=take(_bools(won, "won")) if won is not None else [],
    )
    return records.check(), order
