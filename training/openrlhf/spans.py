"""Turn spans: from token ranges in an agent's concatenated sequence to action-mask columns.

OpenRLHF 0.11's multi-turn executor returns, per episode, ``observation_tokens`` (prompt,
then each turn's response and the environment's feedback, concatenated) and
``action_ranges``: the half-open token range ``[start, end)`` of each model response in it.
Its sample builder then

* truncates the sequence to ``max_len`` tokens, and
* drops the first token from the per-token tensors (``action_mask = mask[1:max_len]``):
  column ``c`` of the action mask, log-probs and advantages is about token ``c + 1``.

So a turn's tokens ``[start, end)`` sit in columns ``[start - 1, end - 1)``, cut at the
truncated length. These functions do exactly that, for :func:`gigpo_algo.turns_to_tokens`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def turn_columns(
    action_ranges: Sequence[Sequence[int]], sequence_length: int, max_len: int
) -> np.ndarray:
    """Action-mask columns of each turn of one episode.

    Args:
        action_ranges: K pairs ``(start, end)``, token ranges of the responses in the full
            (untruncated) sequence, in order, non-overlapping, ``1 <= start <= end``.
        sequence_length: length of the full sequence in tokens.
        max_len: OpenRLHF's ``--data.max_len`` (the sequence is cut to this many tokens).

    Returns:
        int64, shape (K, 2): ``[first, last)`` columns per turn; a turn cut away by the
        truncation gets an empty span (``first == last``), a partly cut one keeps its head.

    Raises:
        ValueError: ranges malformed, out of order, overlapping or past the sequence.
    """
    if max_len < 2:
        raise ValueError(f"max_len must be >= 2, got {max_len}")
    if sequence_length < 0:
        raise ValueError(f"sequence_length must be >= 0, got {sequence_length}")
    ranges = np.asarray(action_ranges, dtype=np.int64).reshape(-1, 2)
    starts, ends = ranges[:, 0], ranges[:, 1]
    if (starts < 1).any():
        raise ValueError("action_ranges: a response must follow at least one prompt token")
    if (ends < starts).any():
        raise ValueError("action_ranges: a range has end < start")
    if (ends > sequence_length).any():
        raise ValueError(
            f"action_ranges: a range ends past the sequence ({sequence_length} tokens)"
        )
    if (starts[1:] < ends[:-1]).any():
        raise ValueError("action_ranges: ranges overlap or are out of order")
    width = min(sequence_length, max_len) - 1  # number of action-mask columns kept
    first = np.clip(starts - 1, 0, max(width, 0))
    last = np.clip(ends - 1, 0, max(width, 0))
    return np.stack([first, np.maximum(last, first)], axis=1)


def batch_turn_spans(per_sequence_columns: Sequence[np.ndarray], mask_width: int) -> np.ndarray:
    """Stacks the turn columns of a batch into ``(sequence, start, end)`` rows.

    Args:
        per_sequence_columns: for each row of the batch, the (K_b, 2) output of
            :func:`turn_columns`.
        mask_width: the batch's action-mask width (padding may make it wider than a row's).

    Returns:
        int64, shape (sum K_b, 3), the ``turn_spans`` argument of
        :func:`gigpo_algo.tokens.turns_to_tokens`.
    """
    rows = []
    for b, cols in enumerate(per_sequence_columns):
        cols = np.asarray(cols, dtype=np.int64).reshape(-1, 2)
        if len(cols) and cols[:, 1].max() > mask_width:
            raise ValueError(f"sequence {b} has turn columns past the mask width {mask_width}")
        rows.append(np.column_stack([np.full(len(cols), b, dtype=np.int64), cols]))
    if not rows:
        return np.zeros((0, 3), dtype=np.int64)
    return np.concatenate(rows, axis=0)
