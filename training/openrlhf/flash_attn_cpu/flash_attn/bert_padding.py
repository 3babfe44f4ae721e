"""``flash_attn.bert_padding``: its padding helpers, in plain torch.

OpenRLHF's ``--ds.packing_samples`` removes the padding of a batch before the model runs
(``unpad_input``, ``index_first_axis``) and puts it back after (``pad_input``). These are
flash-attn's gather/scatter helpers, not kernels; here they are written in torch with the
same signatures and results, so that OpenRLHF's packing code runs as it is. ``rearrange``
is einops', which flash-attn re-exports.
"""

from __future__ import annotations

import torch
from einops import rearrange

__all__ = ["index_first_axis", "pad_input", "rearrange", "unpad_input"]


def index_first_axis(x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Rows ``indices`` of ``x`` along its first axis."""
    return x[indices]


def unpad_input(hidden_states: torch.Tensor, attention_mask: torch.Tensor, unused_mask=None):
    """``(B, S, ...)`` with a ``(B, S)`` mask -> the kept tokens ``(N, ...)``, their flat
    indices, the cumulative sequence lengths ``(B + 1,)`` int32, the longest sequence, and
    each sequence's length (flash-attn 2.5+'s five results)."""
    mask = attention_mask.bool() if unused_mask is None else (attention_mask | unused_mask).bool()
    seqlens = mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    cu_seqlens = torch.nn.functional.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    used = attention_mask.sum(dim=-1, dtype=torch.int32)
    return flat[indices], indices, cu_seqlens, int(seqlens.max()), used


def pad_input(hidden_states: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int):
    """The inverse of :func:`unpad_input`: ``(N, ...)`` back to ``(B, S, ...)``, zeros at the
    padding."""
    out = hidden_states.new_zeros((batch * seqlen, *hidden_states.shape[1:]))
    out[indices] = hidden_states
    return out.reshape(batch, seqlen, *hidden_states.shape[1:])
