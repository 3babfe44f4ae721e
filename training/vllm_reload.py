"""New weights into a running vLLM engine on the CPU, in place: what verl's and OpenRLHF's
CPU runs share (:mod:`training.verl.vllm_cpu`, :mod:`training.openrlhf.cpu_engine`).

vLLM's CPU build repacks each linear layer's weight for its GEMM kernels after loading
(``dispatch_cpu_unquantized_gemm``) and leaves a plain parameter without a weight loader, so a
second ``model.load_weights`` fails; vLLM's own in-place reload (``reload_weights``) first
restores each layer's checkpoint layout, loads, then repacks layer by layer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def repack_embeddings(model: Any) -> None:
    """Each embedding and LM head of ``model`` repacked from its current weight.

    On the CPU vLLM computes the logits with a packed copy of the LM head's weight, made when
    its layer is processed (``UnquantizedEmbeddingMethod.process_weights_after_loading``:
    ``dispatch_cpu_unquantized_gemm``, which keeps the weight). An LM head tied to the input
    embedding as a module of its own (Llama's ``ParallelLMHead.tie_weights``; Qwen2 reuses
    the embedding module) loads no weight in a reload, so the layerwise reload never
    processes it again, and its logits would come from the weights vLLM started with.
    Repacking is the same call, on the weight the reload wrote; for a layer processed
    already it packs the same values again."""
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    for module in model.modules():
        method = getattr(module, "quant_method", None)
        if isinstance(method, UnquantizedEmbeddingMethod):
            method.process_weights_after_loading(module)


def reload_in_place(model_runner: Any, weights: Iterable[tuple[str, Any]]) -> None:
    """``weights`` (checkpoint names and tensors, the whole model) into ``model_runner``'s
    model by vLLM's in-place reload, then its embeddings repacked (:func:`repack_embeddings`)."""
    model_runner.reload_weights(weights_iterator=iter(weights))
    repack_embeddings(model_runner.get_model())
