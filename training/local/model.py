"""Loading the policy (and its frozen reference) from a local model directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from training.local.config import DTYPES, ModelConfig, show


def require_train_extra() -> None:
    """Raises an ImportError naming the extra when torch or transformers is missing."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"the local trainer needs torch and transformers ({exc.name} is missing): "
            'pip install "gigpo[train]"'
        ) from exc


def resolve_model_path(config: ModelConfig, out: Path) -> Path:
    """The local directory the model is loaded from (built or converted when needed)."""
    if config.name_or_path == "tiny-random":
        from training.local.tiny_model import build_tiny_model, tiny_model_settings

        directory = out / "tiny-model"
        settings = {
            "hidden_size": config.tiny_hidden_size,
            "num_layers": config.tiny_layers,
            "vocab_size": config.tiny_vocab_size,
            "warmup_steps": config.tiny_warmup_steps,
        }
        # Rebuilt when absent, cut short by a crash (no marker file), or built with other
        # settings; a build is deterministic (seed 0), so a rebuilt model is the same model.
        if tiny_model_settings(directory) != {**settings, "seed": 0}:
            build_tiny_model(directory, **settings)
        return directory
    if config.name_or_path == "smollm2":
        from training.smollm2 import smollm2_path

        return smollm2_path()
    path = Path(config.name_or_path).expanduser()
    if not (path / "config.json").exists():
        raise FileNotFoundError(
            f"model.name_or_path={show(config.name_or_path)} is not a local model directory "
            "(no config.json); use a downloaded HF model dir, 'smollm2' or 'tiny-random'"
        )
    return path


def load_model(path: Path, dtype: str, *, trainable: bool = True, device: str = "cpu") -> Any:
    """A causal LM from a local directory on ``device``, in eval mode; frozen when not
    ``trainable``."""
    import torch
    from transformers import AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ValueError(f"model.dtype must be one of {DTYPES}, got {dtype!r}")
    model = AutoModelForCausalLM.from_pretrained(
        str(path), dtype=getattr(torch, dtype), local_files_only=True
    )
    model.to(device)
    model.eval()
    if not trainable:
        model.requires_grad_(False)
    return model


def limit_trainable_layers(model: Any, layers: int) -> None:
    """Freezes every weight but the last ``layers`` decoder layers and the final norm.

    Works for the usual decoder layout (``model.model.layers``, ``model.model.norm``: Llama,
    Qwen2, Mistral, ...). ``layers == 0`` leaves everything trainable.
    """
    if layers == 0:
        return
    body = getattr(model, "model", None)
    blocks = getattr(body, "layers", None)
    if blocks is None or not hasattr(body, "norm"):
        raise ValueError(
            "model.trainable_layers needs a decoder with model.layers and model.norm; "
            f"{type(model).__name__} has another layout (use trainable_layers: 0)"
        )
    if layers > len(blocks):
        raise ValueError(f"model.trainable_layers={layers} but the model has {len(blocks)} layers")
    model.requires_grad_(False)
    for block in list(blocks)[-layers:]:
        block.requires_grad_(True)
    body.norm.requires_grad_(True)


def load_tokenizer(path: Path) -> Any:
    """The tokenizer, with a pad token (the EOS token when the model has none)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.chat_template is None:
        raise ValueError(f"the tokenizer in {path} has no chat template")
    return tokenizer
