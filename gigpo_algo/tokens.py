"""Spreading per-step values (advantages, returns) onto response tokens.

Two layouts occur in agent training:
- one row per model call (verl-agent, the local trainer): a (B, T) response with a mask, and
  one value per row: :func:`broadcast_to_tokens`;
- one row per whole episode, all turns concatenated in one sequence with the environment's
  tokens between them (OpenRLHF's multi-turn agents): each turn's value goes onto its own
  token span: :func:`turns_to_tokens`.

Both take lists, numpy arrays or torch tensors (see :mod:`gigpo_algo._arrays`): with a tensor
the result is a tensor, else float64 numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gigpo_algo._arrays import NUMPY, common_kind, to_native, to_numpy


def broadcast_to_tokens(values: Any, response_mask: Any) -> Any:
    """Put each row's scalar on every response token of that row.

    Args:
        values: float, shape (B,).
        response_mask: shape (B, T), 1 on response tokens.

    Returns:
        float, shape (B, T): ``values[:, None] * response_mask``; a tensor on the first
        tensor input's device (autograd kept) if either input is one, else float64 numpy.

    Raises:
        ValueError: non-numeric input, or wrong shapes.
    """
    _, (v, m) = to_native(values=values, response_mask=response_mask)
    if len(v.shape) != 1:
        raise ValueError(f"values must have shape (B,), got {tuple(v.shape)}")
    if len(m.shape) != 2 or m.shape[0] != v.shape[0]:
        raise ValueError(f"response_mask must have shape ({v.shape[0]}, T), got {tuple(m.shape)}")
    return v[:, None] * m


def turns_to_tokens(values: Any, turn_spans: Any, shape: tuple[int, int]) -> Any:
    """Write each turn's value onto its token span inside concatenated multi-turn sequences.

    Args:
        values: float, shape (K,): one value per turn.
        turn_spans: int, shape (K, 3): ``(sequence, start, end)`` per turn, a half-open
            token range ``[start, end)`` of sequence ``sequence`` (row of the output).
            Spans of one sequence must not overlap; an empty span (start == end, e.g. a
            turn truncated away) writes nothing.
        shape: ``(B, T)`` of the output.

    Returns:
        float, shape (B, T): the turn's value on its tokens and 0 elsewhere; a tensor on
        ``values``' device (its dtype if floating, else torch's default) when ``values`` is
        a tensor, else float64 numpy. No gradient flows back into ``values``.

    Raises:
        ValueError: non-numeric values, wrong shapes, spans out of range or overlapping.
    """
    spans = _spans_array(turn_spans)
    batch, length = _check_shape(shape)
    # Advantages are constants for the loss: computed in numpy, no gradient.
    kind = common_kind(values)
    v = NUMPY.asarray(values, "values")
    if v.ndim != 1 or len(v) != len(spans):
        raise ValueError(f"values must have shape ({len(spans)},), got {v.shape}")
    seq, start, end = spans[:, 0], spans[:, 1], spans[:, 2]
    if len(spans) and (
        (seq < 0).any() or (seq >= batch).any() or (start < 0).any() or (end > length).any()
    ):
        raise ValueError(f"turn_spans out of range for shape {(batch, length)}")
    if (end < start).any():
        raise ValueError("turn_spans has a span with end < start")
    order = np.lexsort((start, seq))
    s_seq, s_start, s_end = seq[order], start[order], end[order]
    same = s_seq[1:] == s_seq[:-1]
    if (same & (s_start[1:] < s_end[:-1])).any():
        raise ValueError("turn_spans has overlapping spans in one sequence")
    lengths = end - start
    flat_rows = np.repeat(seq, lengths)
    offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    flat_cols = np.repeat(start, lengths) + offsets
    out = np.zeros((batch, length), dtype=np.float64)
    out[flat_rows, flat_cols] = np.repeat(v, lengths)
    return kind.wrap(out)


def _spans_array(turn_spans: Any) -> np.ndarray:
    arr = np.asarray(to_numpy(turn_spans))
    if arr.size == 0:
        return np.zeros((0, 3), dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != 3 or arr.dtype.kind not in "iu":
        raise ValueError(f"turn_spans must be ints of shape (K, 3), got {arr.dtype} {arr.shape}")
    return arr.astype(np.int64)


def _check_shape(shape: Any) -> tuple[int, int]:
    try:
        batch, length = (int(x) for x in shape)
    except (TypeError, ValueError):
        raise ValueError(f"shape must be (B, T), got {shape!r}") from None
    if batch < 0 or length < 0:
        raise ValueError(f"shape must be non-negative, got {shape!r}")
    return batch, length
