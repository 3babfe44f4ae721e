"""A LoRA actor's weights to the vLLM engines: merged, under the base model's names.

OpenRLHF 0.11.2's ``ActorPPOTrainer.broadcast_to_vllm`` sends every parameter of the actor's
model under its own name. Under ``--ds.lora.rank`` that model is PEFT's wrapper, so the
engines would get PEFT's names (``base_model.model.`` before each, ``.base_layer`` inside
each adapted layer) and the adapters apart from the weights they change (``lora_A``,
``lora_B``), which vLLM's ``load_weights`` refuses (OpenRLHF issue #1081).
:func:`broadcast_merged` sends instead what vLLM loads: each adapted layer's weight merged,
``W + delta`` with ``delta`` PEFT's own ``get_delta_weight`` (``scaling * B @ A``, its scaling
read off the layer: ``lora_alpha / r``, or over ``sqrt(r)`` under rsLoRA) of each active
adapter, added in float32 and rounded once to the weight's dtype, under the base model's
name; every other parameter under its base name; no adapter. One tensor at a time, as
OpenRLHF does: under ZeRO-3 each layer's weight and adapters are gathered together (its
``GatheredParameters``), under DeepSpeed's tensor parallelism each parameter with its
``GatherReplacedLayerParams``, and each tensor goes by OpenRLHF's own protocol with its
engines (``RolloutRayActor.update_weight`` and a broadcast on the sync group, or
``update_weight_cuda_ipc`` with every rank's CUDA IPC handle when the engines share the
GPUs). :mod:`training.openrlhf.patch` wraps ``broadcast_to_vllm`` with it for a PEFT actor;
a full model keeps OpenRLHF's own method.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from typing import Any

#: The module whose ``ActorPPOTrainer.broadcast_to_vllm`` this replaces for a LoRA actor.
ACTOR_MODULE = "openrlhf.trainer.ray.ppo_actor"
#: What OpenRLHF's ppo_actor module must hold for :func:`broadcast_merged` (checked when it
#: is patched): the names it looks up there at call time, as OpenRLHF's own method does.
ACTOR_MODULE_NAMES = ("get_physical_gpu_id", "torch_dist_barrier_and_cuda_sync")
PEFT_PREFIX = "base_model.model."


def base_name(peft_name: str) -> str:
    """The base model's name of a parameter of PEFT's LoRA wrapper:
    ``base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight`` ->
    ``model.layers.0.self_attn.q_proj.weight``."""
    name = peft_name.removeprefix(PEFT_PREFIX)
    return ".".join(part for part in name.split(".") if part != "base_layer")


def lora_layers(model: Any) -> dict[str, Any]:
    """The model's LoRA layers by module name (none: not a LoRA model)."""
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:  # no PEFT, no LoRA model
        return {}
    return {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}


@dataclass(frozen=True)
class SyncItem:
    """One tensor for the engines: ``name`` (the base model's), and either ``param`` as it
    is or ``layer``'s base weight merged with its adapters (``param`` is that weight)."""

    name: str
    param: Any
    trainable: bool
    layer: Any = None


def sync_items(model: Any) -> list[SyncItem]:
    """What one sync sends, in the order of ``model.named_parameters()``: a LoRA layer's merged
    weight where its base weight is, every parameter that is no adapter as it is.

    Raises:
        ValueError: an adapter PEFT cannot merge into one weight this way (DoRA, an adapter
            bias), LoRA on a tied weight (the embeddings a tied output layer shares), or a
            name that is not the base model's (PEFT's ``modules_to_save`` copies).
    """
    layers = lora_layers(model)
    adapters = {id(p) for layer in layers.values() for p in _adapters(layer)}
    names_of: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names_of.setdefault(id(param), []).append(name)
    items = []
    for name, param in model.named_parameters():
        if id(param) in adapters:
            continue  # merged into its layer's weight
        target = base_name(name)
        if "modules_to_save." in target or "original_module." in target:
            raise ValueError(
                f"{name}: PEFT's modules_to_save copies have no base model name; the LoRA "
                "sync to vLLM merges adapters only"
            )
        items.append(SyncItem(target, param, param.requires_grad))
    index = {id(item.param): i for i, item in enumerate(items)}
    for owner, layer in layers.items():
        weight = layer.get_base_layer().weight
        tied = names_of.get(id(weight), [])
        if len(tied) != 1:
            raise ValueError(
                f"{owner}: LoRA on a weight tied to others ({tied}): merged, it would change "
                "every tied use of it in vLLM, while LoRA changes this layer's only"
            )
        _check_mergeable(owner, layer)
        trainable = any(p.requires_grad for p in _adapters(layer))
        at = index[id(weight)]
        items[at] = SyncItem(items[at].name, weight, trainable, layer)
    return items


def _adapters(layer: Any) -> list:
    """A LoRA layer's adapter parameters (``lora_A``, ``lora_B``, ...; not its base layer's)."""
    return [p for n, p in layer.named_parameters() if _is_adapter(n)]


def _is_adapter(relative: str) -> bool:
    return relative.split(".", 1)[0].startswith("lora_")


def _check_mergeable(name: str, layer: Any) -> None:
    for adapter in layer.active_adapters:
        variant = adapter in getattr(layer, "lora_variant", {})
        if variant or getattr(layer, "lora_bias", {}).get(adapter, False):
            raise ValueError(
                f"{name}: adapter {adapter!r} is a LoRA variant (DoRA) or has a bias; the "
                "LoRA sync to vLLM merges plain LoRA (W + scaling * B @ A) only"
            )


def merged_weight(layer: Any, weight: Any) -> Any:
    """``weight`` (the layer's base weight, gathered) plus the delta of each active adapter
    that is not merged into it already, in float32, rounded once to ``weight``'s dtype."""
    import torch

    total = weight.detach().to(torch.float32)
    if not layer.disable_adapters:
        for adapter in layer.active_adapters:
            if adapter in layer.scaling and adapter not in layer.merged_adapters:
                total = total + layer.get_delta_weight(adapter).to(torch.float32)
    return total.to(weight.dtype).contiguous()


def _gathered(trainer: Any, model: Any, params: list) -> contextlib.ExitStack:
    """OpenRLHF's gathering of sharded parameters, for several at once: DeepSpeed's tensor
    parallel layers one by one, else ZeRO-3's ``GatheredParameters`` (a no-op below 3)."""
    import deepspeed

    args = trainer.strategy.args
    stack = contextlib.ExitStack()
    if args.ds.tensor_parallel_size > 1:
        for param in params:
            stack.enter_context(
                deepspeed.module_inject.layers.GatherReplacedLayerParams([param], model, True)
            )
    else:
        stack.enter_context(
            deepspeed.zero.GatheredParameters(params, enabled=args.ds.zero_stage == 3)
        )
    return stack


def broadcast_merged(trainer: Any, model: Any) -> None:
    """``ActorPPOTrainer.broadcast_to_vllm`` for a LoRA actor (``model``: the PEFT model
    DeepSpeed wraps); run on every actor rank, as OpenRLHF's own."""
    import ray
    import torch

    actor_module = sys.modules[ACTOR_MODULE]
    args = trainer.strategy.args
    rank = torch.distributed.get_rank()
    resets = []
    if getattr(args.vllm, "enable_prefix_caching", False) and rank == 0:
        resets = [engine.reset_prefix_cache.remote() for engine in trainer.vllm_engines]
    torch.cuda.empty_cache()
    items = sync_items(model)
    vlm = getattr(trainer.actor, "is_vlm", False)  # OpenRLHF: a VLM sends what trains
    items = [item for item in items if item.trainable or not vlm]
    send = _send_by_ipc if trainer.use_cuda_ipc else _send_by_broadcast
    for count, item in enumerate(items, start=1):
        params = [item.param]
        if item.layer is not None:
            params += _adapters(item.layer)
        with _gathered(trainer, model, params), torch.no_grad():
            if item.layer is not None:
                tensor, owned = merged_weight(item.layer, item.param.data), True
            else:
                tensor, owned = item.param.data, False
            send(trainer, actor_module, item.name, tensor, owned, last=count == len(items))
    if resets:
        ray.get(resets)
    torch.cuda.empty_cache()
    actor_module.torch_dist_barrier_and_cuda_sync()


def _send_by_broadcast(
    trainer: Any, actor_module: Any, name: str, tensor: Any, owned: bool, last: bool
) -> None:
    """Rank 0 announces the tensor to every engine, then broadcasts it on the sync group."""
    import ray
    import torch

    if torch.distributed.get_rank() != 0:
        return
    refs = [
        engine.update_weight.remote(name, dtype=tensor.dtype, shape=tensor.shape, empty_cache=last)
        for engine in trainer.vllm_engines
    ]
    if getattr(trainer.strategy.args.vllm, "sync_with_ray", False):
        import ray.util.collective as collective

        collective.broadcast(tensor, 0, group_name=trainer._model_update_group)
    else:
        trainer._model_update_group.broadcast(tensor, src=0, stream=torch.cuda.current_stream())
    ray.get(refs)


def _send_by_ipc(
    trainer: Any, actor_module: Any, name: str, tensor: Any, owned: bool, last: bool
) -> None:
    """Every rank shares its copy by CUDA IPC handle; rank 0 gives each engine all handles,
    keyed by physical GPU, and each engine reads the one on its own GPU."""
    import ray
    import torch
    from torch.multiprocessing.reductions import reduce_tensor

    shared = tensor if owned else tensor.clone()
    handles: list = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(
        handles, {actor_module.get_physical_gpu_id(): reduce_tensor(shared)}
    )
    if torch.distributed.get_rank() == 0:
        by_gpu = {gpu: handle for one in handles for gpu, handle in one.items()}
        refs = [
            engine.update_weight_cuda_ipc.remote(
                name, dtype=shared.dtype, shape=shared.shape, ipc_handles=by_gpu, empty_cache=last
            )
            for engine in trainer.vllm_engines
        ]
        ray.get(refs)
    actor_module.torch_dist_barrier_and_cuda_sync()
