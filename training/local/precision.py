"""Mixed precision: the compute dtype of every forward pass, the weights kept in float32.

``model.compute_dtype``: ``bfloat16`` runs the matrix products of the policy, the reference,
the critic and generation in bfloat16 under ``torch.autocast`` (float32 master weights and
optimizer state, float32 losses: the log-softmax reads float32 logits); ``float32`` runs
everything in float32; ``auto``, the default, is bfloat16 where the device computes it
natively, else float32. Native means: on CPU, the AVX512-BF16 or AMX-BF16 instructions (read
from the CPU's flags; without them bfloat16 is emulated and slower than float32); on CUDA,
compute capability 8.0 or more (Ampere on); on MPS, never (float32).

On a CPU under bfloat16, attention runs as plain matrix products where its scores are small
(:mod:`training.local.attention`; PyTorch's bfloat16 flash kernel is slow there). Two
things keep the PPO ratio honest (:func:`prepare_heads`,
:func:`training.local.policy.policy_update`):

- the output projections (the policy's vocabulary head, the critic's value head) run in
  float32, on float32 hidden states: bfloat16 logits carry 8 bits of mantissa, an error of
  ~0.03-0.1 nats on a logit of 10-20;
- the ratio's old log-probs are recomputed by the update's own forward pass, on the very
  minibatches the update then steps on. The sampler (KV cache, left padding) and the update
  (one right-padded pass) round differently in bfloat16, so without it the ratio of a policy
  that has not moved yet strayed from 1 (up to 1.15 on the quick start's first iteration),
  and an untouched minibatch's tokens were clipped for noise.
"""

from __future__ import annotations

import contextlib
import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: The settings of ``model.compute_dtype``.
COMPUTE_DTYPES = ("auto", "float32", "bfloat16")
#: CPU flags (``/proc/cpuinfo``) of native bfloat16 arithmetic.
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def native_bf16(device: str, cpuinfo: str | None = None) -> tuple[bool, str]:
    """Whether ``device`` (``cpu``, ``cuda``, ``cuda:N``, ``mps``) computes bfloat16 natively,
    and why, in words. ``cpuinfo``: the text of ``/proc/cpuinfo`` (read when None; a
    machine without one, e.g. macOS, counts as having no native bfloat16)."""
    if device == "cpu":
        if cpuinfo is None:
            try:
                cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
            except OSError:
                return False, "cpu: no /proc/cpuinfo to read bfloat16 support from"
        lines = re.findall(r"^flags\s*:(.*)$", cpuinfo, re.M)
        flags = set(" ".join(lines).split())
        found = [f for f in CPU_BF16_FLAGS if f in flags]
        if found:
            return True, f"cpu: {'+'.join(found)}"
        return False, f"cpu: none of {'/'.join(CPU_BF16_FLAGS)}"
    if device.startswith("cuda"):
        import torch

        index = int(device.partition(":")[2] or 0)
        major, minor = torch.cuda.get_device_capability(index)
        return (major, minor) >= (8, 0), f"{device}: compute capability {major}.{minor}"
    return False, f"{device}: bfloat16 autocast not used"


def resolve_compute_dtype(setting: str, device: str) -> tuple[str, str]:
    """``(dtype, reason)``: the compute dtype ``setting`` means on ``device``."""
    if setting not in COMPUTE_DTYPES:
        raise ValueError(f"model.compute_dtype must be one of {COMPUTE_DTYPES}, got {setting!r}")
    if setting != "auto":
        return setting, "set by model.compute_dtype"
    native, why = native_bf16(device)
    return ("bfloat16" if native else "float32"), why


def _autocast_kind(device: str) -> str:
    """``torch.autocast``'s device type for ``device``: ``cuda`` for any CUDA device, else
    ``cpu``."""
    return "cuda" if device.startswith("cuda") else "cpu"


@contextlib.contextmanager
def compute(dtype: str, device: str) -> Iterator[Any]:
    """The context every forward pass runs in: ``torch.autocast`` to bfloat16 for
    ``dtype == "bfloat16"``, nothing for ``float32``."""
    if dtype == "float32":
        yield None
        return
    import torch

    with torch.autocast(device_type=_autocast_kind(device), dtype=torch.bfloat16) as context:
        yield context


def prepare_models(dtype: str, device: str, *models: Any) -> None:
    """Readies models for ``dtype`` compute on ``device`` (None models are skipped): their
    output heads (:func:`prepare_heads`) and, under bfloat16 on a CPU, their attention
    (:func:`training.local.attention.use_cpu_bf16_attention`)."""
    prepare_heads(dtype, device, *models)
    if dtype == "bfloat16" and not device.startswith(("cuda", "mps")):
        from training.local.attention import use_cpu_bf16_attention

        for model in models:
            if model is not None:
                use_cpu_bf16_attention(model)


def prepare_heads(dtype: str, device: str, *models: Any) -> None:
    """Makes each model's output projection read a contiguous 2-D input and, under bfloat16
    compute, run outside autocast in float32 (None models, and a model already prepared,
    are skipped).

    The projection is the model's output embeddings (a causal LM's ``lm_head``) or, for the
    critic, its ``value_head``. A causal LM projects a slice of positions
    (``logits_to_keep``), a non-contiguous view that sends ``F.linear`` down a batched-matmul
    path about 3x slower on CPU; the head now reads the slice as one ``(rows, hidden)``
    matrix. Only the head's ``forward`` changes (per instance): the weights, their names in
    the state dict and the optimizer's view of them stay as they are.
    """
    kind = _autocast_kind(device)
    for model in models:
        if model is None:
            continue
        head = getattr(model, "value_head", None)
        if head is None and hasattr(model, "get_output_embeddings"):
            head = model.get_output_embeddings()
        if head is None or not hasattr(head, "weight"):
            raise TypeError(f"{type(model).__name__} has no output head to prepare")
        if getattr(head, "gigpo_prepared", False):
            continue
        head.gigpo_prepared = True
        head.gigpo_float32 = dtype == "bfloat16"
        head.gigpo_autocast_kind = kind
        head.forward = types.MethodType(_head_forward, head)


def _head_forward(self: Any, hidden: Any, *args: Any, **kwargs: Any) -> Any:
    """``type(self).forward`` on ``hidden`` as a contiguous (rows, hidden) matrix, shaped back;
    outside autocast on the weight's dtype when ``self.gigpo_float32``."""
    import torch

    shape = hidden.shape
    flat = hidden.reshape(-1, shape[-1])
    if not self.gigpo_float32:
        out = type(self).forward(self, flat.contiguous(), *args, **kwargs)
    else:
        with torch.autocast(device_type=self.gigpo_autocast_kind, enabled=False):
            flat = flat.to(self.weight.dtype).contiguous()
            out = type(self).forward(self, flat, *args, **kwargs)
    return out.reshape(*shape[:-1], out.shape[-1])
