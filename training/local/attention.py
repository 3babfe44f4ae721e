"""Attention on a CPU under bfloat16 autocast: scores as plain matrix products where they
are small, float32 flash attention where they are not.

Under ``torch.autocast("cpu", bfloat16)`` transformers' default attention (``sdpa``) runs
PyTorch's bfloat16 flash-attention kernel, which on CPU is slower than its float32 one and
far slower than two matrix products for the short sequences of a text agent's turn: on the
quick start it took 17% of an update, more than its share of the FLOPs by ~20x
(docs/benchmarks.md). :func:`use_cpu_bf16_attention` switches a model to
:func:`cpu_bf16_attention`, which computes ``softmax(q k^T * scaling + mask) v`` with the
products in bfloat16 and the softmax in float32 while the score tensor stays under
:data:`SCORES_LIMIT` elements, and otherwise calls the float32 flash kernel, whose memory
does not grow with the square of the sequence (a 50-step ALFWorld prompt).

Only model families whose attention is exactly that function are switched
(:data:`FAMILIES`); others keep their own. On GPU, and under float32, nothing changes.
"""

from __future__ import annotations

from typing import Any

#: The name the attention and its mask are registered under in transformers.
NAME = "gigpo_cpu_bf16"
#: Score tensors (batch x heads x queries x keys) up to this many elements are computed as
#: matrix products (16 MiB of float32 a layer, kept for the backward pass); larger ones by
#: the float32 flash kernel.
SCORES_LIMIT = 2**22
#: ``config.model_type`` of the families whose attention is plain scaled dot-product
#: attention with a causal (or padding) mask and grouped key/value heads.
FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


def cpu_bf16_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    scores_limit: int | None = None,
    **_: Any,
) -> tuple[Any, None]:
    """Scaled dot-product attention in transformers' attention-function signature.

    Args:
        module: the attention layer (its ``num_key_value_groups`` and ``scaling`` are read).
        query: (B, H, Q, D); key, value: (B, H_kv, K, D), H = H_kv x groups.
        attention_mask: (B, 1, Q, K) additive float mask (0 or the dtype's minimum), as
            transformers' eager mask builds it, or None.
        scaling: the score's scale (default ``module.scaling``, else D ** -0.5).
        dropout: attention dropout probability (0 in eval).
        scores_limit: overrides :data:`SCORES_LIMIT` (tests).

    Returns:
        ``(output, None)``: the output (B, Q, H, D), contiguous.
    """
    import torch
    import torch.nn.functional as F

    groups = getattr(module, "num_key_value_groups", query.shape[1] // key.shape[1])
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    if scaling is None:
        scaling = getattr(module, "scaling", query.shape[-1] ** -0.5)
    batch, heads, queries, _ = query.shape
    limit = SCORES_LIMIT if scores_limit is None else scores_limit
    if batch * heads * queries * key.shape[2] <= limit:
        scores = torch.matmul(query, key.transpose(2, 3)) * scaling
        if attention_mask is not None:
            scores = scores + attention_mask[:, :, :, : key.shape[2]]
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32)
        weights = F.dropout(weights, p=dropout, training=dropout > 0)
        output = torch.matmul(weights.to(value.dtype), value)
    else:
        mask = attention_mask
        with torch.autocast(query.device.type, enabled=False):
            if mask is not None:
                mask = mask[:, :, :, : key.shape[2]].float()
            output = F.scaled_dot_product_attention(
                query.float(), key.float(), value.float(), attn_mask=mask,
                dropout_p=dropout, scale=scaling,
            )  # fmt: skip
    return output.transpose(1, 2).contiguous(), None


def register() -> None:
    """Registers :func:`cpu_bf16_attention` (and transformers' eager mask for it) as
    :data:`NAME`; a second call changes nothing."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(NAME, cpu_bf16_attention)
    AttentionMaskInterface.register(NAME, eager_mask)


def use_cpu_bf16_attention(model: Any) -> bool:
    """Switches ``model`` (a transformers model, or a module holding one as ``model``, like
    the critic) to :func:`cpu_bf16_attention` when its family is in :data:`FAMILIES`;
    returns whether it did."""
    target = model if hasattr(model, "config") else getattr(model, "model", None)
    config = getattr(target, "config", None)
    if getattr(config, "model_type", None) not in FAMILIES:
        return False
    register()
    target.set_attn_implementation(NAME)
    return True
