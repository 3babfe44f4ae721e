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
  and for ``gigpo-export``. A run's adapter folder is data (docs/security.md): its config is
  read back only as the trainer writes it (:func:`read_adapter_config`) and PEFT opens none
  of its files.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.local.model_checks import MAX_LORA_ALPHA, MAX_LORA_RANK
from training.local.schema import ConfigError, ModelConfig
from training.text import show

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


@contextlib.contextmanager
def quiet_peft() -> Iterator[None]:
    """PEFT's wrapper reads transformers' ``is_gradient_checkpointing``, deprecated in
    transformers 5 with a FutureWarning on every read: that one warning, from our PEFT calls
    only, is not shown (the value read is the same as ``is_activation_checkpointing``)."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning
        )
        yield


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
        with quiet_peft():
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


def merged_model(model: Any, directory: Path, settings: Any = None) -> Any:
    """``model`` (the base causal LM) with the adapters in ``directory`` (PEFT's format, as
    :func:`save_adapter` writes it) folded into its weights (W + scale * B @ A): a plain
    transformers model again. ``settings``: the folder's checked config, when the caller
    already read it (:func:`read_adapter_config`, which reads it otherwise). PEFT reads no
    file of the folder: the weights come through :func:`load_adapter_weights`.

    Raises:
        AdapterFileError: the folder's config is not one the trainer writes.
        UnsafeFileError: its weights file is not a regular file (a FIFO never hangs it).
        ValueError, RuntimeError: its weights are not these adapters' (names, shapes).
    """
    require_peft()
    from peft import get_peft_model

    settings = read_adapter_config(directory) if settings is None else settings
    with quiet_peft():
        with_adapter = get_peft_model(model, settings)
    load_adapter_weights(with_adapter, directory)
    return with_adapter.merge_and_unload()


class AdapterFileError(ValueError):
    """A run's adapter folder holds a config the trainer does not write (a field of another
    type, out of bounds, or set where the trainer leaves PEFT's default); the message names
    the file and the field."""


#: What a run's ``adapter_config.json`` may say besides the adapters' shape: where the base
#: came from, PEFT's version and mode (read, never acted on).
_PROVENANCE = ("base_model_name_or_path", "revision", "peft_version", "inference_mode")
#: A module a run's adapters target: a plain (dotted) module name, never a pattern.
_MODULE_NAME = re.compile(r"[\w.-]{1,256}")
#: The most target modules an adapter config may list (a 70B model has 560 linear layers).
_MAX_TARGETS = 65_536


def read_adapter_config(directory: Path) -> Any:
    """The ``adapter_config.json`` of a run's adapter folder as PEFT's ``LoraConfig``, each
    field checked before anything is built: ``r`` in [1, 4096] and ``lora_alpha`` in
    (0, 8192] (``model.lora_rank``'s and ``model.lora_alpha``'s bounds), ``lora_dropout``
    in [0, 1), ``target_modules`` a list of module names (what the trainer writes: PEFT reads
    a string as a regular expression), a causal LM's LoRA without bias; every other field
    PEFT's default, as the trainer leaves it. The config returned holds only these values.

    Raises:
        AdapterFileError: a field is not what the trainer writes (the file and field named);
            the file is not JSON, too large, or not a regular file (a FIFO is refused, never
            waited on).
    """
    require_peft()
    from peft import LoraConfig

    from training.guarded import GuardError, read_json_file

    path = Path(directory) / ADAPTER_CONFIG
    try:
        data = read_json_file(path, "adapter config", max_bytes=1 << 20)
    except GuardError as exc:
        raise AdapterFileError(str(exc)) from None

    def refuse(key: str, what: str) -> AdapterFileError:
        return AdapterFileError(
            f"{path}: {key} must be {what}, got {show(data.get(key))} (a gigpo-train run's "
            "adapters are not written so)"
        )

    r, alpha, dropout = data.get("r"), data.get("lora_alpha"), data.get("lora_dropout", 0.0)
    if not _is_int(r) or not 1 <= r <= MAX_LORA_RANK:
        raise refuse("r", f"an int in [1, {MAX_LORA_RANK}] (model.lora_rank's bound)")
    if not _is_number(alpha) or not 0 < alpha <= MAX_LORA_ALPHA:
        raise refuse("lora_alpha", f"in (0, {MAX_LORA_ALPHA:g}] (model.lora_alpha's bound)")
    if not _is_number(dropout) or not 0 <= dropout < 1:
        raise refuse("lora_dropout", "in [0, 1)")
    targets = data.get("target_modules")
    listed = isinstance(targets, list) and 0 < len(targets) <= _MAX_TARGETS
    if not listed or not all(isinstance(t, str) and _MODULE_NAME.fullmatch(t) for t in targets):
        raise refuse("target_modules", "a list of module names (q_proj, model.layers.0.mlp.o_proj)")
    for key, wanted in (("peft_type", "LORA"), ("task_type", "CAUSAL_LM"), ("bias", "none")):
        if data.get(key) != wanted:
            raise refuse(key, repr(wanted))
    defaults = _plain(LoraConfig().to_dict())
    read = {"r", "lora_alpha", "lora_dropout", "target_modules", "peft_type", "task_type", "bias"}
    for key, value in data.items():
        if key in read or key in _PROVENANCE:
            continue
        if key in defaults and value != defaults[key]:
            raise refuse(key, f"PEFT's default {show(defaults[key])}")
        if key not in defaults and value not in (None, False, {}, []):
            raise refuse(key, "unset (null): this PEFT does not know it")
    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(targets),
                      task_type="CAUSAL_LM", bias="none", inference_mode=True)  # fmt: skip


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _plain(value: Any) -> Any:
    """``value`` as JSON gives it back (a set as a sorted list, anything else as text)."""
    text = json.dumps(value, default=lambda o: sorted(o) if isinstance(o, set) else str(o))
    return json.loads(text)


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


def check_target_modules(model: Any, m: ModelConfig) -> None:
    """Refuses a ``model.lora_target_modules`` name that targets no linear layer of ``model``
    (a causal LM, e.g. on the meta device) by PEFT's rule (a dotted path ending with it):
    PEFT would train no adapter there, or stop the run once it has started.

    Raises:
        ConfigError: naming the key, the names that match nothing and the linear layers'
            names the model has.
    """
    targets = m.lora_target_modules
    if targets == ["all-linear"]:
        return
    linear = [name for name, module in model.named_modules() if _is_linear(module)]
    missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in linear)]
    if not missing:
        return
    head = model.get_output_embeddings()
    names = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                    if _is_linear(module) and module is not head})  # fmt: skip
    raise ConfigError(
        f"model.lora_target_modules={show(targets)}: {show(missing)} names no linear layer of "
        f"the model; its linear layers are {names} (or [all-linear]: every one but the output "
        "head)"
    )


def _is_linear(module: Any) -> bool:
    """A layer PEFT's LoRA adapts as a linear map: ``torch.nn.Linear``, or transformers'
    ``Conv1D`` (GPT-2's)."""
    import torch
    from transformers.pytorch_utils import Conv1D

    return isinstance(module, torch.nn.Linear | Conv1D)
