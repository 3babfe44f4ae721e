"""Stand-in for the GPU: a ``cpu`` platform for verl 0.9.1, so that its real actor worker
(``verl.workers.engine_workers.ActorRolloutRefWorker``) runs its FSDP2 engine on CPU with gloo.

verl reaches the accelerator only through its platform (``verl/utils/device.py:96-129``:
device name, torch device module, device id, collective backend). It ships CUDA, NPU and ROCm
platforms and, finding none of them, falls back to ``nvidia``
(``verl/plugin/platform/platform_manager.py:113-117``), so on a CPU its engine asks for CUDA.
Its extension point for other hardware is ``PlatformRegistry.register``
(``platform_manager.py:43``) with the ``VERL_PLATFORM`` variable (``platform_manager.py:92``);
:func:`install` uses both. Each piece, and why it is needed:

- ``current_device`` is the string ``"cpu"``: the engine moves batches and parameters with
  ``.to(get_device_id())`` (``verl/workers/engine/fsdp/transformer_impl.py:730,1552``), where
  CUDA's index 0 would mean ``cuda:0``.
- ``communication_backend_name`` is ``gloo``: NCCL needs GPUs.
- the device module is ``torch.cpu`` plus the ``torch.cuda`` functions that verl calls on it
  and ``torch.cpu`` lacks (:class:`CPUDeviceModule`; each names its callers). verl's own checks
  for ``torch.cpu`` (``verl/utils/profiler/performance.py:45``,
  ``verl/utils/flops_counter.py:77``) do not see through the wrapper, so it answers them too.
- ``VERL_ENGINE_DEVICE=cuda``: verl registers its FSDP engines for ``cuda`` and ``npu`` only
  (``transformer_impl.py:1143``); the variable, which ``EngineRegistry.get_engine_cls`` reads
  (``verl/workers/engine/base.py:405-406``), picks the CUDA registration, whose code takes its
  device from the platform.
- the process group is opened here, with gloo (:func:`open_process_group`): the worker would
  open it with the backend ``cpu:gloo,<device>:<backend>`` (``verl/utils/distributed.py:89``),
  on this platform ``cpu:gloo,cpu:gloo``, which torch rejects (a device type twice); it opens
  none when one is open (``distributed.py:90``).

What else the worker needs on CPU is configuration, not a stand-in: ``strategy=fsdp2`` (torch's
FSDP1 refuses CPU parameters) and eager attention (verl's default is flash-attn,
``verl/workers/config/model.py:185``). Nothing in verl is patched. :func:`install` and
:func:`open_process_group` change the process they run in for good (verl resolves its platform
once, ``platform_manager.py:140-147``): call them only in a child process, before anything
asks verl for the device.
"""

from __future__ import annotations

import os
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psutil
import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry


class CPUDeviceModule(types.ModuleType):
    """``torch.cpu`` with the ``torch.cuda`` functions verl calls on its device module."""

    def __init__(self) -> None:
        super().__init__("gigpo_tests_cpu_device")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        """0: no device memory (``verl/utils/profiler/performance.py:49``,
        ``verl/utils/memory_utils.py:48``: log lines)."""
        return 0

    @staticmethod
    def memory_reserved(device: Any = None) -> int:
        """0: no device memory (``verl/utils/profiler/performance.py:50``,
        ``verl/utils/memory_utils.py:47``: log lines)."""
        return 0

    @staticmethod
    def max_memory_allocated(device: Any = None) -> int:
        """0: no device memory (``verl/workers/engine_workers.py:219``, a metric)."""
        return 0

    @staticmethod
    def max_memory_reserved(device: Any = None) -> int:
        """0: no device memory (``verl/workers/engine_workers.py:220``, a metric)."""
        return 0

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        """The host's free and total memory (``verl/utils/profiler/performance.py:54``)."""
        memory = psutil.virtual_memory()
        return memory.available, memory.total

    @staticmethod
    def empty_cache() -> None:
        """Nothing to free (``verl/utils/memory_utils.py:54``)."""

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        """``"CPU"``: the MFU metric's peak-FLOPs lookup (``verl/utils/flops_counter.py:80``)."""
        return "CPU"


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
        pass

    def synchronize(self, device_index: int | None = None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass

    def ray_resource_name(self) -> str:
        return "CPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> None:
        return None


def install() -> None:
    """Register :class:`CPUPlatform` as verl's ``cpu`` platform and select it, with the CUDA
    registration of verl's FSDP engines (see the module docstring)."""
    PlatformRegistry.register(platform="cpu")(CPUPlatform)
    os.environ["VERL_PLATFORM"] = "cpu"
    os.environ["VERL_ENGINE_DEVICE"] = "cuda"


def open_process_group() -> None:
    """Open the default process group with gloo, from the launcher's ``RANK``,
    ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` (see the module docstring)."""
    torch.distributed.init_process_group(backend="gloo")
