"""Spreading per-step values (advantages, returns) onto response tokens.

Two layouts occur in agent training:
- one row per model call (verl-agent, the local trainer): a (B, T) response with a mask, and
  one value per row: :func:`broadcast_to_tokens`;
- one row per whole episode, all turns concatenated in one sequence with the environment's
  tokens between them (OpenRLHF's multi-turn agents): each turn's value goes onto its own
  token span: :func:`turns_to_tokens`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gigpo_algo._arrays import is_torch_tensor
from gigpo_algo._backend import backend, first_tensor


def broadcast_to_tokens(values: Any, response_mask: Any) -> Any:
    """Put each row's scalar on every response token of that row.

    Args:
        values: float, shape (B,).
        response_mask: shape (B, T), 1 on response tokens.

    Returns:
        float, shape (B, T): ``values[:, None] * response_mask`` (torch if either input is).
    """
    xp = backend(values, response_mask)
    like = first_tensor(values, response_mask)
    v = xp.asarray(values, like)
    m = xp.asarray(response_mask, like)
    if len(getattr(v, "shape", ())) != 1:
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
        float, shape (B, T): the turn's value on its tokens and 0 elsewhere (torch on
        ``values``' device when ``values`` is a tensor).

    Raises:
        ValueError: wrong shapes, spans out of range or overlapping.
    """
    spans = _spans_array(turn_spans)
    batch, length = _check_shape(shape)
    # Advantages are constants for the loss: no gradient flows through them.
    if is_torch_tensor(values):
        import torch

        v = values.detach().to("cpu", torch.float64).numpy()
    else:
        v = np.asarray(values, dtype=np.float64)
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
    if is_torch_tensor(values):
        import torch

        return torch.as_tensor(out, dtype=values.dtype, device=values.device)
    return out


def _spans_array(turn_spans: Any) -> np.ndarray:
    if is_torch_tensor(turn_spans):
        turn_spans = turn_spans.detach().cpu().numpy()
    arr = np.asarray(turn_spans)
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
