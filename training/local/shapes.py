"""What a memory plan reads of a model: its :class:`ModelShape`, from its config alone (no
weights), and where that config comes from (:func:`plan_config`).

The config is the model's own where it can be had (a local directory, the hub cache, the
hub: ``config.json`` alone, a few KB), else, for the models the papers train, a table of
their architectures (:data:`KNOWN_ARCHITECTURES`): a dry run for
``Qwen/Qwen2.5-7B-Instruct`` on a laptop with no network and an empty Hugging Face cache
still prints its plan. Each entry holds the sizes of the model's published ``config.json``
that a plan reads (the weights' shapes); an Instruct model and its base share them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.local.schema import ConfigError, TrainConfig
from training.text import show

__all__ = ["KNOWN_ARCHITECTURES", "ModelShape", "known_config", "model_shape", "plan_config"]

_QWEN2 = {
    "model_type": "qwen2",
    "hidden_act": "silu",
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
}


def _qwen25(hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int,
            vocab: int, tied: bool) -> dict[str, Any]:  # fmt: skip
    return _QWEN2 | {
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
    }


#: Qwen2.5's sizes (the GiGPO paper's 1.5B and 7B; its search runs' 3B and 7B), by size.
_SIZES = {
    "0.5B": _qwen25(896, 4864, 24, 14, 2, 151936, True),
    "1.5B": _qwen25(1536, 8960, 28, 12, 2, 151936, True),
    "3B": _qwen25(2048, 11008, 36, 16, 2, 151936, True),
    "7B": _qwen25(3584, 18944, 28, 28, 4, 152064, False),
}

#: Hub id -> the ``config.json`` fields a plan reads.
KNOWN_ARCHITECTURES: dict[str, dict[str, Any]] = {
    f"Qwen/Qwen2.5-{size}{suffix}": fields
    for size, fields in _SIZES.items()
    for suffix in ("", "-Instruct")
}


def known_config(name: str) -> Any:
    """A transformers ``PretrainedConfig`` for hub id ``name`` from
    :data:`KNOWN_ARCHITECTURES` (the id's last part compared case-insensitively, so a local
    copy named ``models/Qwen2.5-1.5B-Instruct`` is found too), or None."""
    from transformers import AutoConfig

    tail = name.rstrip("/").rsplit("/", 1)[-1].lower()
    for known, fields in KNOWN_ARCHITECTURES.items():
        if known.rsplit("/", 1)[-1].lower() == tail:
            settings = dict(fields)
            return AutoConfig.for_model(settings.pop("model_type"), **settings)
    return None


def plan_config(config: TrainConfig) -> tuple[Any, str]:
    """``(transformers config, where it came from)`` of a run's model for its plan, with no
    weights loaded or fetched: the tiny model's from its settings, SmolLM2's from the
    package, else :func:`training.hub.config_file` (a directory, the hub cache, the hub),
    else :func:`known_config`.

    Raises:
        ConfigError: none of these has it (naming the command that fetches the config), or
            the config found is refused (:func:`training.model_files.read_model_config`: no
            regular file, too large, nested too deeply; the file named).
    """
    from transformers import AutoConfig

    from training.hub import ModelNotFoundError, config_file, fetch_command
    from training.model_files import read_model_config

    m = config.model
    if m.name_or_path == "tiny-random":
        from training.tiny_model import TAG_TOKENS, tiny_model_config

        vocab = m.tiny_vocab_size + len(TAG_TOKENS)  # the tokenizer's length at most
        return tiny_model_config(m.tiny_hidden_size, m.tiny_layers, vocab), "model.tiny_*"
    if m.name_or_path == "smollm2":
        from training.smollm2 import smollm2_path

        found: Path | None = smollm2_path() / "config.json"
    else:
        try:
            found = config_file(m.name_or_path, m.revision)
        except ModelNotFoundError as exc:
            raise ConfigError(str(exc)) from None
    if found is not None:
        try:  # the guarded reader first: transformers' would recurse, or read it whole
            read_model_config(found)
        except ModelNotFoundError as exc:
            raise ConfigError(str(exc)) from None
        try:
            hf = AutoConfig.from_pretrained(str(found.parent), local_files_only=True,
                                            trust_remote_code=m.trust_remote_code)  # fmt: skip
            return hf, str(found)
        except (OSError, ValueError) as exc:  # its own config class, whose code is not here
            if known_config(m.name_or_path) is None:
                raise ConfigError(
                    f"model.name_or_path={show(m.name_or_path)}: {found} cannot be read "
                    f"without the repository's code ({str(exc)[:300]}); fetch the model with "
                    f"`{fetch_command(m.name_or_path, m.revision)}`"
                ) from None
    known = known_config(m.name_or_path)
    if known is not None:
        return known, "the table of known architectures (training/local/shapes.py)"
    raise ConfigError(
        f"model.name_or_path={show(m.name_or_path)}: its config.json is not here (not a "
        "directory, not in the Hugging Face cache, and the hub is out of reach) and it is "
        "not a known architecture; fetch the config alone (a few KB) with "
        f"`{fetch_command(m.name_or_path, m.revision)} config.json`"
    )


@dataclass(frozen=True)
class ModelShape:
    """What the plan reads of a causal LM (Llama / Qwen2 / Mistral layout)."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    parameters: int
    """Every weight of the causal LM (without LoRA's adapters)."""
    trainable: int
    """The weights the policy trains (``model.trainable_layers``; under LoRA its adapters)."""
    body: int
    """The decoder without its output head: PPO's critic's body."""


def model_shape(config: TrainConfig, hf: Any = None) -> ModelShape:
    """The :class:`ModelShape` of the run's model under its ``model.trainable_layers`` or
    ``model.lora_*``: the model is built on PyTorch's meta device, where weights take no
    memory, to count them.

    Args:
        hf: a transformers config, a model directory (its ``config.json`` is read, by the
            guarded reader first), or None (:func:`plan_config`'s).

    Raises:
        ConfigError: a ``model.lora_target_modules`` name matches no linear layer of the
            model (:func:`~training.local.lora.check_target_modules`), or as
            :func:`plan_config`.
        training.model_files.ModelFileError: a directory whose ``config.json`` is refused.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from training.local.lora import adapter_parameters, check_target_modules
    from training.local.model import limit_trainable_layers
    from training.model_files import read_model_config

    m = config.model
    if hf is None:
        hf = plan_config(config)[0]
    elif isinstance(hf, str | Path):
        read_model_config(Path(hf) / "config.json")
        hf = AutoConfig.from_pretrained(str(hf), local_files_only=True,
                                        trust_remote_code=m.trust_remote_code)  # fmt: skip
    text = hf.get_text_config(decoder=True) if hasattr(hf, "get_text_config") else hf
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf, trust_remote_code=m.trust_remote_code)
    parameters = sum(p.numel() for p in model.parameters())
    limit_trainable_layers(model, m.trainable_layers)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if m.lora_rank:
        check_target_modules(model, m)
        trainable = adapter_parameters(model, m)
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is model.get_input_embeddings().weight
    body = parameters - (0 if tied or head is None else head.weight.numel())
    heads = text.num_attention_heads
    return ModelShape(
        hidden=text.hidden_size,
        intermediate=text.intermediate_size,
        layers=text.num_hidden_layers,
        heads=heads,
        kv_heads=getattr(text, "num_key_value_heads", None) or heads,
        head_dim=getattr(text, "head_dim", None) or text.hidden_size // heads,
        vocab=text.vocab_size,
        parameters=parameters,
        trainable=trainable,
        body=body,
    )
