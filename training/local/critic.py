"""PPO's critic for the local trainer (``algo.estimator: ppo``): a separate value model.

The critic is the policy's decoder body (loaded from the same model directory, so it starts
from the same weights) with a linear value head instead of the vocabulary projection:
``V(text up to a token)`` for every position. It has its own optimizer and is trained
beside the policy, minibatch for minibatch, on the clipped value loss
(:func:`gigpo_algo.losses.value_loss`) against GAE's returns (:func:`gigpo_algo.baselines.
turn_gae`). Why separate rather than a head on the policy: docs/training.md, "PPO with a
critic".

Per-token layout is :class:`training.local.update.TokenBatch`'s: column t of a (B, L - 1)
tensor is about token t + 1, so the value in column t is V(tokens <= t), the state in which
token t + 1 was generated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from training.local.prefix import cache_kwarg, prefix_cache


def _value_model_class() -> type:
    import torch

    class ValueModel(torch.nn.Module):
        """A decoder body (``.model``, e.g. ``Qwen2Model``) and a value head (``.value_head``).

        ``forward(input_ids, attention_mask, ...)`` returns float32 values, shape (B, L'),
        for the L' positions run (after any cached prefix).
        """

        def __init__(self, body: Any) -> None:
            super().__init__()
            self.model = body
            hidden = body.config.hidden_size
            # Zero-initialised: every value starts at 0, and the first updates move the
            # head (a baseline) before they move the body.
            self.value_head = torch.nn.Linear(hidden, 1, dtype=torch.float32)
            torch.nn.init.zeros_(self.value_head.weight)
            torch.nn.init.zeros_(self.value_head.bias)

        @property
        def device(self) -> Any:
            return self.value_head.weight.device

        def forward(self, input_ids: Any, attention_mask: Any, **kwargs: Any) -> Any:
            hidden = self.model(
                input_ids=input_ids, attention_mask=attention_mask, **kwargs
            ).last_hidden_state
            return self.value_head(hidden.float()).squeeze(-1)

    return ValueModel


def load_critic(path: Path, dtype: str, *, device: str = "cpu", trainable_layers: int = 0) -> Any:
    """The critic: the decoder body of the causal LM in ``path`` and a zero value head.

    Args:
        path: a local model directory (the policy's).
        dtype: the body's torch dtype name; the head is float32.
        trainable_layers: as ``model.trainable_layers`` (0: every weight trains; the head
            always does).
    """
    import torch
    from transformers import AutoModel

    from training.local.model import limit_trainable_layers

    body = AutoModel.from_pretrained(str(path), dtype=getattr(torch, dtype), local_files_only=True)
    critic = _value_model_class()(body)
    critic.to(device)
    limit_trainable_layers(critic, trainable_layers)
    critic.value_head.requires_grad_(True)
    critic.eval()
    return critic


def token_values(critic: Any, batch: Any) -> Any:
    """The critic's values in the per-token layout of ``batch`` (a ``TokenBatch``).

    Returns:
        float32, shape (B, L - 1): column t holds V(tokens <= t); 0 in the columns before
        ``batch.first_column`` (prompt tokens only), which are not run through the head.
        A shared prefix (``batch.prefix_length``) runs once, as for the policy.
    """
    import torch

    body = critic.model
    first, prefix = batch.first_column, batch.prefix_length
    kwargs: dict[str, Any] = {"attention_mask": batch.attention_mask}
    ids = batch.input_ids
    if prefix:
        kwargs[cache_kwarg(body)] = prefix_cache(body, ids[0, :prefix].tolist(), ids.shape[0])
        kwargs["use_cache"] = True
        ids = ids[:, prefix:]
    hidden = body(input_ids=ids, **kwargs).last_hidden_state  # (B, L - prefix, H)
    # The prefix leaves the last prompt token of every row to run (first >= prefix).
    values = critic.value_head(hidden[:, first - prefix : -1].float()).squeeze(-1)
    return torch.nn.functional.pad(values, (first, 0))
