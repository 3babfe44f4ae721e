"""verl 0.9.1 on a CPU machine: the ``cpu`` platform, selected by ``VERL_PLATFORM=cpu``.

verl reaches the accelerator only through its platform (``verl/utils/device.py``: device
name, torch device module, device id, collective backend, Ray resource). It ships CUDA, NPU
and ROCm platforms and, finding none of them, falls back to ``nvidia``, so on a CPU its
workers ask for CUDA. Its extension point for other hardware is ``PlatformRegistry.register``
with the ``VERL_PLATFORM`` variable: where that is ``cpu``, the plugin
(:mod:`training.verl.plugin`) registers :class:`CPUPlatform` in every process that imports
verl (``gigpo-verl trainer.device=cpu`` sets it for verl's processes and Ray's workers), and
:data:`PATCHES` as their modules load. The platform:

- ``current_device`` is the string ``"cpu"`` (CUDA's index 0 would mean ``cuda:0``);
- ``communication_backend_name`` is ``gloo``; verl opens its process group with
  ``cpu:gloo,<device>:<backend>``, here ``cpu:gloo,cpu:gloo``, which torch refuses
  (:func:`patch_process_group` opens it with ``gloo``);
- the device module is ``torch.cpu`` with the ``torch.cuda`` calls verl makes (memory counters
  0, the host's free memory, no cache, the RNG state a resumed run restores);
- ``ray_resource_name`` is ``GPU``: verl places its workers by Ray's ``GPU`` resource and
  counts it before it starts; Ray declares one slot (``ray_init.num_gpus``), a CPU process;
- ``is_ipc_supported`` is False: verl's weight sync to the colocated vLLM server then goes
  through shared memory (its own fallback; :mod:`training.verl.vllm_cpu` for the rest);
- ``VERL_ENGINE_DEVICE=cuda``: verl registers its FSDP engines for ``cuda`` and ``npu``
  only; the variable picks the CUDA registration, whose code takes its device from here.

What else a CPU run needs is configuration, which ``gigpo-verl`` sets (:data:`CPU_OVERRIDES`).
"""

from __future__ import annotations

import os
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from training.verl.vllm_cpu import (
    ROLLOUT_UTILS,
    WEIGHT_TRANSFER,
    alias_vllm_cpu,
    patch_rollout_weight_update,
    patch_weight_receiver,
)

__all__ = ["CPU_ENV", "CPU_OVERRIDES", "PATCHES", "TARGETS", "alias_vllm_cpu", "install",
           "selected"]  # fmt: skip

#: The value of ``VERL_PLATFORM`` that selects the CPU platform.
PLATFORM = "cpu"
#: What ``gigpo-verl trainer.device=cpu`` sets where the user gave no value of their own,
#: and why: one process stands for one GPU; FSDP2 (FSDP1 refuses CPU parameters) and eager
#: attention (flash-attn is CUDA's); vLLM's CPU build has no sleep mode, no CUDA graphs and
#: one device (no tensor parallelism); on 2 cores, one agent-loop worker, no dataloader
#: workers and two TransferQueue storage units (each a Ray actor asking one CPU); Ray
#: declares the one ``GPU`` slot verl places its workers by and more logical CPUs than the
#: machine's cores, since its actors (the task runner, TransferQueue's controller and
#: storage units, the vLLM server, the agent-loop and reward workers) each ask one CPU and
#: mostly wait: with the cores' count (2) they would wait for each other forever.
CPU_OVERRIDES = {
    "trainer.n_gpus_per_node": "1",
    "trainer.nnodes": "1",
    "actor_rollout_ref.actor.strategy": "fsdp2",
    "actor_rollout_ref.ref.strategy": "fsdp2",
    "actor_rollout_ref.model.override_config.attn_implementation": "eager",
    "actor_rollout_ref.rollout.enable_sleep_mode": "False",
    "actor_rollout_ref.rollout.free_cache_engine": "False",
    "actor_rollout_ref.rollout.enforce_eager": "True",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "1",
    "actor_rollout_ref.rollout.agent.num_workers": "1",
    "data.dataloader_num_workers": "0",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units": "2",
    "ray_kwargs.ray_init.num_gpus": "1",
    "ray_kwargs.ray_init.num_cpus": "16",
}
#: The environment of a CPU run's processes where the user set none: the platform, and the
#: vLLM CPU build's KV cache in GiB (its default, 4, is much of a small machine's memory).
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}


def selected() -> bool:
    """Whether this process runs verl on the CPU platform (``VERL_PLATFORM=cpu``)."""
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM


def _platform_class() -> type:
    """:class:`CPUPlatform`, built on verl's ``PlatformBase`` (imported only when used)."""
    import psutil
    import torch
    from verl.plugin.platform import PlatformBase

    class CPUDeviceModule(types.ModuleType):
        """``torch.cpu`` with the ``torch.cuda`` functions verl calls on its device module."""

        def __init__(self) -> None:
            super().__init__("gigpo_verl_cpu_device")

        def __getattr__(self, name: str) -> Any:
            return getattr(torch.cpu, name)

        @staticmethod
        def memory_allocated(device: Any = None) -> int:
            return 0  # no device memory (log lines, metrics)

        @staticmethod
        def memory_reserved(device: Any = None) -> int:
            return 0

        @staticmethod
        def max_memory_allocated(device: Any = None) -> int:
            return 0

        @staticmethod
        def max_memory_reserved(device: Any = None) -> int:
            return 0

        @staticmethod
        def reset_peak_memory_stats(device: Any = None) -> None:
            return None

        @staticmethod
        def mem_get_info(device: Any = None) -> tuple[int, int]:
            memory = psutil.virtual_memory()  # the host's free and total memory
            return memory.available, memory.total

        @staticmethod
        def empty_cache() -> None:
            return None

        @staticmethod
        def get_device_name(device: Any = None) -> str:
            return "CPU"  # the MFU metric's peak-FLOPs lookup finds none

        @staticmethod
        def is_available() -> bool:
            return True

        @staticmethod
        def get_rng_state(device: Any = None) -> torch.Tensor:
            return torch.get_rng_state()  # the device's generator is the CPU's

        @staticmethod
        def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
            torch.set_rng_state(state)  # a resumed run restores it (checkpoint_manager)

    class CPUPlatform(PlatformBase):
        """verl's platform interface on the CPU: one device, ``"cpu"``, gloo, no profiler."""

        _device_module = CPUDeviceModule()

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "cpu"

        @property
        def device_module(self) -> types.ModuleType:
            return self._device_module

        def is_available(self) -> bool:
            return True

        def current_device(self) -> str:  # type: ignore[override]
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[None, None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextmanager
        def nvtx_range(self, msg: str) -> Iterator[None]:
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "GPU"

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> None:
            return None

    return CPUPlatform


def install() -> None:
    """Registers the ``cpu`` platform in verl's registry, with the CUDA registration of verl's
    FSDP engines (see the module docstring). Idempotent; call it before anything asks verl
    for its platform (the plugin does, on ``import verl``)."""
    from verl.plugin.platform import PlatformRegistry

    if PlatformRegistry.get(PLATFORM) is None:
        PlatformRegistry.register(platform=PLATFORM)(_platform_class())
    os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")


def patch_process_group(module: Any) -> None:
    """verl's ``initialize_global_process_group_ray`` opening its group with ``gloo`` alone
    (its default backend, ``cpu:gloo,cpu:gloo`` on this platform, names a device twice)."""
    original = module.initialize_global_process_group_ray
    if getattr(original, "__gigpo_patched__", False):
        return

    def initialize_global_process_group_ray(timeout_second: Any = None, backend: Any = None):
        return original(timeout_second=timeout_second, backend=backend or "gloo")

    initialize_global_process_group_ray.__gigpo_patched__ = True  # type: ignore[attr-defined]
    module.initialize_global_process_group_ray = initialize_global_process_group_ray


def patch_fsdp_engine(module: Any) -> None:
    """verl's FSDP engine offloading with unpinned host memory: it builds the reference
    model (forward only) with ``CPUOffloadPolicy(pin_memory=True)``, and pinning needs an
    accelerator; on a CPU the parameters are in host memory already."""
    policy = module.CPUOffloadPolicy
    if getattr(policy, "__gigpo_patched__", False):
        return

    def unpinned(*args: Any, **kwargs: Any) -> Any:
        kwargs["pin_memory"] = False
        return policy(*args, **kwargs)

    unpinned.__gigpo_patched__ = True  # type: ignore[attr-defined]
    module.CPUOffloadPolicy = unpinned


#: What each patch wraps, checked before it runs (the plugin's ``check_target``): per module,
#: ``(attribute path, its parameters or None)``.
TARGETS: dict[str, tuple[tuple[str, tuple[str, ...] | None], ...]] = {
    "verl.utils.distributed": (
        ("initialize_global_process_group_ray", ("timeout_second", "backend")),
    ),
    "verl.workers.engine.fsdp.transformer_impl": (("CPUOffloadPolicy", None),),
    WEIGHT_TRANSFER: (("BucketedWeightReceiver.receive_weights", ("self", "on_bucket_received")),),
    ROLLOUT_UTILS: (
        ("vLLMColocateWorkerExtension.update_weights_from_ipc",
         ("self", "peft_config", "base_sync_done", "use_shm")),
        ("vLLMColocateWorkerExtension._iter_all_models", ("self",)),
        ("is_quantized_model", None),
    ),
}  # fmt: skip
#: verl's modules that the CPU platform patches when they load (:func:`install`).
PATCHES = {
    "verl.utils.distributed": patch_process_group,
    "verl.workers.engine.fsdp.transformer_impl": patch_fsdp_engine,
    WEIGHT_TRANSFER: patch_weight_receiver,
    ROLLOUT_UTILS: patch_rollout_weight_update,
}
