"""LoRA in the local trainer, through PEFT: adapters on a frozen base (``model.lora_*``).

- The base loads in the run's compute dtype (bfloat16 on a GPU) and never trains; the
  adapters (and AdamW's state of them) are held in ``model.dtype`` (float32 by default).
- The trainer's code runs the transformers model itself (:func:`add_adapters` returns PEFT's
  wrapper; its ``get_base_model()`` is that model with the adapters in its linear layers),
  so generation, the shared prefix and the response-only head work as for full training.
- The KL reference is the same model with its adapters switched off
  (:class:`BaseReference`): no second copy of the weights.
- A checkpoint holds the adapters in PEFT's own format (``checkpoint/adapter/``:
  ``adapter_config.json``, ``adapter_model.safetensors``), which PEFT, vLLM and other tools
  load; :func:`merged_model` folds them into the base (W + alpha / r * B @ A) for evaluation
  and for ``gigpo-export``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.local.schema import ModelConfig

#: The checkpoint's adapter folder and PEFT's file names in it.
ADAPTER_DIR = "adapter"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def require_peft() -> None:
    """Raises an ImportError naming the extra when PEFT is missing."""
    try:
        import peft  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            'model.lora_rank needs PEFT (peft is missing): pip install "gigpo[train]"'
        ) from exc


def lora_config(m: ModelConfig) -> Any:
    """PEFT's ``LoraConfig`` of ``model.lora_*`` (a causal LM's adapters)."""
    require_peft()
    from peft import LoraConfig

    targets = m.lora_target_modules
    return LoraConfig(
        r=m.lora_rank,
        lora_alpha=m.lora_alpha,
        lora_dropout=m.lora_dropout,
        target_modules="all-linear" if targets == ["all-linear"] else list(targets),
        task_type="CAUSAL_LM",
        bias="none",
    )


def add_adapters(model: Any, m: ModelConfig) -> Any:
    """Adds ``model.lora_*``'s adapters to ``model`` (a causal LM, changed in place: its
    targeted linear layers gain ``lora_A`` / ``lora_B``) and freezes the rest; the adapters
    are cast to ``model.dtype``. Returns PEFT's wrapper (``PeftModelForCausalLM``).

    Raises:
        ValueError: ``model.lora_target_modules`` names no module of this model (PEFT's
            message, naming the key).
    """
    import torch
    from peft import get_peft_model

    try:
        wrapped = get_peft_model(model, lora_config(m), autocast_adapter_dtype=False)
    except ValueError as exc:
        raise ValueError(f"model.lora_target_modules={m.lora_target_modules}: {exc}") from exc
    dtype = getattr(torch, m.dtype)
    for parameter in wrapped.parameters():
        if parameter.requires_grad:
            parameter.data = parameter.data.to(dtype)
    return wrapped


@dataclass
class BaseReference:
    """The KL reference of a LoRA run: the policy's own model with its adapters off.

    ``model`` is the policy (the transformers model, adapters in it); run it inside
    :meth:`off` to get the base model's outputs."""

    adapter: Any
    """PEFT's wrapper of the policy."""

    @property
    def model(self) -> Any:
        return self.adapter.get_base_model()

    @contextlib.contextmanager
    def off(self) -> Iterator[None]:
        """The base model's outputs: adapters off, and in eval mode (no dropout), as a
        separate reference runs."""
        model = self.model
        training = model.training
        model.eval()
        try:
            with self.adapter.disable_adapter():
                yield
        finally:
            model.train(training)


def save_adapter(adapter: Any, directory: Path) -> None:
    """Writes ``adapter``'s weights and config in PEFT's format into ``directory``."""
    adapter.save_pretrained(str(directory), safe_serialization=True)


def load_adapter_weights(adapter: Any, directory: Path) -> None:
    """Loads the adapter weights :func:`save_adapter` wrote into ``adapter``, exactly: every
    adapter weight must be in the file and the file must hold nothing else.

    Raises:
        ValueError: the file's weights are not this adapter's (names the difference).
    """
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    from training.local.checkpoint_files import read_tensors

    path = Path(directory) / ADAPTER_WEIGHTS
    tensors = read_tensors(path)
    expected = set(get_peft_model_state_dict(adapter))
    if set(tensors) != expected:
        missing, extra = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
        raise ValueError(
            f"{path} holds other adapter weights than this run's (missing {missing[:3]}, "
            f"unexpected {extra[:3]}): another model.lora_* setting or model"
        )
    set_peft_model_state_dict(adapter, tensors)


def merged_model(model: Any, directory: Path) -> Any:
    """``model`` (the base causal LM) with the adapters in ``directory`` (PEFT's format)
    folded into its weights (W + scale * B @ A): a plain transformers model again."""
    require_peft()
    from peft import PeftModel

    with_adapter = PeftModel.from_pretrained(model, str(directory), is_trainable=False)
    return with_adapter.merge_and_unload()


def adapter_parameters(model: Any, m: ModelConfig) -> int:
    """The trainable weights ``model.lora_*`` adds to ``model`` (a causal LM, e.g. on the
    meta device): ``rank * (in + out)`` per targeted linear layer, PEFT's rule for which
    layers a name targets (a dotted path ending with it; ``all-linear``: every linear layer
    but the output head)."""
    import torch

    head = model.get_output_embeddings()
    targets = m.lora_target_modules
    total = 0
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or module is head:
            continue
        if targets == ["all-linear"] or any(name == t or name.endswith("." + t) for t in targets):
            total += m.lora_rank * (module.in_features + module.out_features)
    return total
