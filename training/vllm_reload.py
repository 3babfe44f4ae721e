"""New weights into a running vLLM engine on the CPU, in place: what verl's and OpenRLHF's
CPU runs share (:mod:`training.verl.vllm_cpu`, :mod:`training.openrlhf.cpu_engine`).

vLLM's CPU build repacks each linear layer's weight for its GEMM kernels after loading
(``dispatch_cpu_unquantized_gemm``) and leaves a plain parameter without a weight loader, so a
second ``model.load_weights`` fails; vLLM's own in-place reload (``reload_weights``) first
restores each layer's checkpoint layout, loads, then repacks layer by layer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

#: vLLM's layerwise reload (``vllm.model_executor.model_loader.reload.layerwise``) logs here.
RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"


class WeightlessLayerFilter(logging.Filter):
    """Drops vLLM's ``"<layer>: Failed to load weights"`` warning for rotary embeddings.

    A reload warns once a layer whose buffers no checkpoint weight fills, and puts the
    layer's tensors back as they were: the rotary embedding's cos/sin cache, computed from
    the config, warns at every weight sync of every run (20 lines a quick start). Any other
    layer's warning passes: there it means a weight the sync did not send."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        weightless = bool(args) and str(args[0]).endswith("RotaryEmbedding")
        return not (record.msg == "%s: Failed to load weights" and weightless)


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
    logger = logging.getLogger(RELOAD_LOGGER)
    if not any(isinstance(f, WeightlessLayerFilter) for f in logger.filters):
        logger.addFilter(WeightlessLayerFilter())
    model_runner.reload_weights(weights_iterator=iter(weights))
    repack_embeddings(model_runner.get_model())
