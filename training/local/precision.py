"""Mixed precision: the compute dtype of every forward pass, the weights kept in float32.

``model.compute_dtype``: ``bfloat16`` runs the matrix products of the policy, the reference,
the critic and generation in bfloat16 under ``torch.autocast`` (float32 master weights and
optimizer state, float32 losses: the log-softmax reads float32 logits); ``float32`` runs
everything in float32 (the default); ``auto`` is bfloat16 where the device computes it
natively, else float32. Native means: on CPU, the AVX512-BF16 or AMX-BF16 instructions (read
from the CPU's flags; without them bfloat16 is emulated and slower than float32); on CUDA,
compute capability 8.0 or more (Ampere on); on MPS, never (float32).
"""

from __future__ import annotations

import contextlib
import re
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


@contextlib.contextmanager
def compute(dtype: str, device: str) -> Iterator[Any]:
    """The context every forward pass runs in: ``torch.autocast`` to bfloat16 for
    ``dtype == "bfloat16"``, nothing for ``float32``."""
    if dtype == "float32":
        yield None
        return
    import torch

    kind = "cuda" if device.startswith("cuda") else "cpu"
    with torch.autocast(device_type=kind, dtype=torch.bfloat16) as context:
        yield context
