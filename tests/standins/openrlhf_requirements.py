"""Writes OpenRLHF's own requirements to a file (argument 1), without the GPU-only ones.

``tox -e openrlhf`` installs OpenRLHF 0.11.2 with ``--no-deps`` and then what this writes, so
the tests run with the versions OpenRLHF pins (transformers, Ray, DeepSpeed, ...). Left out:
``flash-attn`` (compiles CUDA kernels; ``training/openrlhf/flash_attn_cpu`` has the padding
helpers OpenRLHF imports) and
``torch`` (tox pins the CPU build). Its extras (``vllm``) are not requirements.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys

GPU_ONLY = {"flash-attn", "flash_attn"}
PINNED_BY_TOX = {"torch"}


def requirements(distribution: str = "openrlhf") -> list[str]:
    """The distribution's unconditional requirements, minus the ones named above."""
    out = []
    for requirement in importlib.metadata.requires(distribution) or []:
        if "extra ==" in requirement:
            continue
        name = re.split(r"[\s<>=!~\[;]", requirement, maxsplit=1)[0]
        if name.lower() in GPU_ONLY | PINNED_BY_TOX:
            continue
        out.append(requirement)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: openrlhf_requirements.py OUTPUT_FILE")
    with open(sys.argv[1], "w") as out:
        out.write("\n".join(requirements()) + "\n")
