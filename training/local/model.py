"""What a run trains, built from its config: the policy and its tokenizer (a hub id, a
model directory, or a packaged model), the frozen reference, the optimizers, PPO's critic
(:func:`load_models`), and the learning-rate schedule they follow (:func:`learning_rate`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.hub import ResolvedModel, check_remote_code, resolve_model
from training.local.schema import DTYPES, ModelConfig, TrainConfig
from training.model_files import ModelFileError, check_model_folder


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


def model_source(config: ModelConfig, out: Path) -> ResolvedModel:
    """Where the run's model loads from, and the hub commit when it is a hub id: the tiny
    model (built into ``out/tiny-model`` when needed), the packaged SmolLM2 (converted on
    first use), a local directory, or a hub id through the hub cache
    (:func:`training.hub.resolve_model`, at ``model.revision``). Every file of the folder
    transformers may read is checked first (:func:`training.model_files.check_model_folder`).

    Raises:
        training.hub.ModelNotFoundError: as :func:`training.hub.resolve_model`; its
            :class:`~training.model_files.ModelFileError` names a file of the model refused.
        training.hub.RemoteCodeError: the model runs its own code and
            ``model.trust_remote_code`` is off.
    """
    if config.name_or_path == "tiny-random":
        from training.tiny_model import build_tiny_model, tiny_model_settings

        directory = out / "tiny-model"
        settings = {
            "hidden_size": config.tiny_hidden_size,
            "num_layers": config.tiny_layers,
            "vocab_size": config.tiny_vocab_size,
            "warmup_steps": config.tiny_warmup_steps,
        }
        if config.tiny_head_dim not in (None, 16):  # recorded only where it is not 16
            settings["head_dim"] = config.tiny_head_dim
        # Rebuilt when absent, cut short by a crash (no marker file), or built with other
        # settings; a build is deterministic (seed 0), so a rebuilt model is the same model.
        if tiny_model_settings(directory) != {**settings, "seed": 0}:
            build_tiny_model(directory, **settings)
        check_model_folder(directory)  # a run folder is not trusted: its config may be a FIFO
        return ResolvedModel(config.name_or_path, directory)
    if config.name_or_path == "smollm2":
        from training.smollm2 import smollm2_path

        check_model_folder(smollm2_path())
        return ResolvedModel(config.name_or_path, smollm2_path())
    source = resolve_model(config.name_or_path, config.revision,
                           trust_remote_code=config.trust_remote_code)  # fmt: skip
    check_remote_code(source.path / "config.json", config.trust_remote_code,
                      key="model.trust_remote_code")  # fmt: skip
    return source


def resolve_model_path(config: ModelConfig, out: Path) -> Path:
    """The local directory the model is loaded from (:func:`model_source`'s path)."""
    return model_source(config, out).path


def load_model(
    path: Path,
    dtype: str,
    *,
    trainable: bool = True,
    device: str = "cpu",
    trust_remote_code: bool = False,
) -> Any:
    """A causal LM from a local directory on ``device``, in eval mode; frozen when not
    ``trainable``.

    Raises:
        ModelFileError: a weights file the safetensors library refuses (the folder named).
    """
    import torch
    from transformers import AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ValueError(f"model.dtype must be one of {DTYPES}, got {dtype!r}")
    with unreadable_weights(path):
        model = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=getattr(torch, dtype), local_files_only=True,
            trust_remote_code=trust_remote_code,
        )  # fmt: skip
    model.to(device)
    model.eval()
    if not trainable:
        model.requires_grad_(False)
    return model


@contextlib.contextmanager
def unreadable_weights(path: Path) -> Iterator[None]:
    """Turns the safetensors library's error while a model in ``path`` loads (a weights
    file changed after :func:`training.model_files.check_model_folder` read its header, or
    one the check let through) into a :class:`ModelFileError` naming the folder: the
    commands report it in one line, exit 2, not as a traceback."""
    from safetensors import SafetensorError

    try:
        yield
    except SafetensorError as exc:
        raise ModelFileError(f"cannot load the weights in {path}: {exc}") from None


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


def load_critic(
    path: Path,
    dtype: str,
    *,
    device: str = "cpu",
    trainable_layers: int = 0,
    trust_remote_code: bool = False,
) -> Any:
    """The critic: the decoder body of the causal LM in ``path`` and a zero value head.

    Args:
        path: a local model directory (the policy's).
        dtype: the body's torch dtype name; the head is float32.
        trainable_layers: as ``model.trainable_layers`` (0: every weight trains; the head
            always does).

    Raises:
        ModelFileError: as :func:`load_model`.
    """
    import torch
    from transformers import AutoModel

    with unreadable_weights(path):
        body = AutoModel.from_pretrained(str(path), dtype=getattr(torch, dtype),
                                         local_files_only=True,
                                         trust_remote_code=trust_remote_code)  # fmt: skip
    critic = _value_model_class()(body)
    critic.to(device)
    limit_trainable_layers(critic, trainable_layers)
    critic.value_head.requires_grad_(True)
    critic.eval()
    return critic


def enable_checkpointing(network: Any) -> None:
    """Turns on transformers' gradient checkpointing of ``network`` (a causal LM or a
    decoder body), non-reentrant: it needs no input that requires a gradient, so frozen
    embeddings (``model.trainable_layers``) are fine. Only passes with a gradient recompute;
    the others (generation, the reference, old log-probs) run as before. transformers 5.2x
    calls it activation checkpointing; older releases, gradient checkpointing."""
    options = {"use_reentrant": False}
    if hasattr(network, "activation_checkpointing_enable"):
        network.activation_checkpointing_enable(activation_checkpointing_kwargs=options)
    else:
        network.gradient_checkpointing_enable(gradient_checkpointing_kwargs=options)
    # transformers 5.2x also makes the embeddings' output require a gradient (what reentrant
    # checkpointing needs): with frozen layers, the backward pass would then run through
    # them. Non-reentrant checkpointing needs no such input.
    if getattr(network, "_require_grads_hook", None) is not None:
        network.disable_input_require_grads()


def checkpointing(network: Any) -> bool:
    """Whether ``network`` recomputes its layers in the backward pass (see
    :func:`enable_checkpointing`). Such a pass drops any key/value cache it is given
    (transformers sets it to None), so it cannot run on top of a shared prefix's cache."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(network), name):
            return bool(getattr(network, name))
    return False


def load_tokenizer(path: Path, *, trust_remote_code: bool = False) -> Any:
    """The tokenizer, with a pad token (the EOS token when the model has none)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        str(path), local_files_only=True, trust_remote_code=trust_remote_code
    )
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.chat_template is None:
        raise ValueError(f"the tokenizer in {path} has no chat template")
    return tokenizer


def learning_rate(config: TrainConfig, iteration: int, base: float | None = None) -> float:
    """The learning rate of iteration ``iteration`` (0-based): linear warmup over
    ``optim.warmup_iterations``, then constant; ``base`` (default ``optim.lr``) is PPO's
    critic's ``optim.critic_lr`` when it has one."""
    base = config.optim.lr if base is None else base
    warmup = config.optim.warmup_iterations
    return base * (min(1.0, (iteration + 1) / warmup) if warmup else 1.0)


@dataclass
class Models:
    """What a run trains: the policy and its tokenizer, the frozen reference (None without
    KL; a :class:`~training.local.lora.BaseReference` under LoRA), the optimizer, and under
    PPO the critic with its own optimizer (else None)."""

    policy: Any
    tokenizer: Any
    reference: Any
    optimizer: Any
    critic: Any = None
    critic_optimizer: Any = None
    critic_lr: float = 0.0
    """The critic's base learning rate (``optim.critic_lr``, default ``optim.lr``)."""
    adapter: Any = None
    """Under LoRA, PEFT's wrapper of the policy (what a checkpoint saves); else None."""

    def state(self) -> dict[str, Any]:
        """The keyword arguments of :func:`~training.local.checkpoint.save_checkpoint` and
        :func:`~training.local.checkpoint.load_checkpoint` that name what is saved."""
        return {"model": self.policy, "optimizer": self.optimizer, "critic": self.critic,
                "critic_optimizer": self.critic_optimizer, "adapter": self.adapter}  # fmt: skip

    def separate_reference(self) -> Any:
        """The reference when it is a model of its own (not the policy with its adapters
        off), else None."""
        from training.local.lora import BaseReference

        return None if isinstance(self.reference, BaseReference) else self.reference


def make_optimizer(network: Any, lr: float, weight_decay: float) -> Any:
    """AdamW over ``network``'s trainable weights, as one fused kernel a step where torch has
    it for their device (CPU and CUDA): the same update as the per-tensor loop, ~4x faster on
    CPU (0.26 -> 0.06 s a step for SmolLM2's 100M trainable weights, 2 cores), which is ~8%
    of the quick start's update. Elsewhere (MPS on an old torch, ...) the default loop."""
    import torch

    params = [p for p in network.parameters() if p.requires_grad]
    if params and params[0].device.type in ("cpu", "cuda"):
        try:
            return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
        except (RuntimeError, TypeError, ValueError):  # no fused kernel for these weights
            pass
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


def load_models(config: TrainConfig, out: Path) -> Models:
    """Builds a run's :class:`Models` from its config, in a fixed order (the policy, the
    reference, the optimizer, the critic), on ``model.device``. Under LoRA
    (``model.lora_rank``) the base loads in the compute dtype and only the adapters train
    (:mod:`training.local.lora`); the reference is the base with them off."""
    from training.local.precision import resolve_compute_dtype

    m = config.model
    path = resolve_model_path(m, out)
    trust = m.trust_remote_code
    tokenizer = load_tokenizer(path, trust_remote_code=trust)
    lora = m.lora_rank > 0
    base_dtype = resolve_compute_dtype(m.compute_dtype, m.device)[0] if lora else m.dtype
    policy = load_model(path, base_dtype, device=m.device, trust_remote_code=trust)
    limit_trainable_layers(policy, m.trainable_layers)
    if m.gradient_checkpointing:
        enable_checkpointing(policy)
    adapter = reference = None
    if lora:
        import torch

        from training.local.lora import BaseReference, add_adapters

        # The output head stays float32, as under full training's autocast: bfloat16 logits
        # carry 8 bits of mantissa (a tied head keeps the embeddings float32 with it).
        policy.get_output_embeddings().to(torch.float32)
        adapter = add_adapters(policy, m)
        from training.packaged import PACKAGED_MODELS

        if m.name_or_path not in PACKAGED_MODELS:  # those keep PEFT's local path
            settings = adapter.peft_config["default"]  # what adapter_config.json records
            settings.base_model_name_or_path, settings.revision = m.name_or_path, m.revision
        policy = adapter.get_base_model()
        policy.eval()
        if config.algo.kl_coef > 0:
            reference = BaseReference(adapter)
    elif config.algo.kl_coef > 0:
        reference = load_model(path, m.dtype, trainable=False, device=m.device,
                               trust_remote_code=trust)  # fmt: skip
    optimizer = make_optimizer(policy, config.optim.lr, config.optim.weight_decay)
    models = Models(policy, tokenizer, reference, optimizer, adapter=adapter)
    if config.algo.estimator == "ppo":
        critic_lr = config.optim.lr if config.optim.critic_lr is None else config.optim.critic_lr
        critic = load_critic(path, m.dtype, device=m.device, trainable_layers=m.trainable_layers,
                             trust_remote_code=trust)  # fmt: skip
        if m.gradient_checkpointing:
            enable_checkpointing(critic.model)
        models.critic, models.critic_lr = critic, critic_lr
        models.critic_optimizer = make_optimizer(
            critic, learning_rate(config, 0, critic_lr), config.optim.weight_decay
        )
    return models
