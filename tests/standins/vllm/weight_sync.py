"""The stand-in engine's side of OpenRLHF's weight sync (not a vLLM module).

vLLM's workers run OpenRLHF's ``WorkerWrap`` (``init_process_group``, ``update_weight``,
``update_weight_cuda_ipc``), which receives each tensor into GPU memory and hands it to the
model's ``load_weights``. :class:`WeightSync` does the same on the CPU: it joins the sync
group (:mod:`vllm.distributed`, gloo), receives each broadcast tensor, or rebuilds it from
the handle the trainer shared for :data:`STANDIN_GPU_ID` (a CPU tensor shared between
processes stands in for CUDA IPC), checks its dtype against the engine's as ``WorkerWrap``
does, and loads it as vLLM's ``load_weights`` would: under a name of the model's own
parameters (its Hugging Face checkpoint names), with that parameter's shape, else an error.
What it loaded is kept (``loaded``, the last tensor per name; ``names``, every load in order)
for the tests to read.
"""

from __future__ import annotations

from typing import Any

#: The "physical GPU" of the stand-in engine: the trainer's ``get_physical_gpu_id`` returns
#: it in the tests, and the engine reads the handle shared under it.
STANDIN_GPU_ID = "standin-gpu-0"


class WeightSync:
    def __init__(self, model: str, dtype: str) -> None:
        self.model, self.dtype_name = model, dtype
        self.group: Any = None
        self.loaded: dict[str, Any] = {}
        self.names: list[str] = []
        self._shapes: dict[str, tuple] | None = None

    def shapes(self) -> dict[str, tuple]:
        """The model's parameters by name (built on the meta device: names and shapes only)."""
        if self._shapes is None:
            import torch
            from transformers import AutoConfig, AutoModelForCausalLM

            config = AutoConfig.from_pretrained(self.model)
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(config)
            self._shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
        return self._shapes

    def init_process_group(
        self,
        master_address: str,
        master_port: int,
        rank_offset: int,
        world_size: int,
        group_name: str,
        backend: str = "nccl",
        use_ray: bool = False,
    ) -> None:
        if use_ray:
            raise NotImplementedError("vllm stand-in: --vllm.sync_with_ray")
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        from vllm.distributed.utils import StatelessProcessGroup

        group = StatelessProcessGroup.create(master_address, master_port, rank_offset, world_size)
        self.group = PyNcclCommunicator(group, device="cpu")

    def update_weight(self, name: str, dtype: Any, shape: Any, empty_cache: bool = False) -> None:
        import torch

        self._check_dtype(name, dtype)
        weight = torch.empty(shape, dtype=dtype)
        self.group.broadcast(weight, src=0)
        self.load_weights([(name, weight)])

    def update_weight_cuda_ipc(
        self, name: str, dtype: Any, shape: Any, ipc_handles: dict, empty_cache: bool = False
    ) -> None:
        self._check_dtype(name, dtype)
        rebuild, args = ipc_handles[STANDIN_GPU_ID]
        weight = rebuild(*args)
        if tuple(weight.shape) != tuple(shape):
            raise ValueError(f"vllm stand-in: {name}: shared {tuple(weight.shape)}, said {shape}")
        self.load_weights([(name, weight.clone())])

    def load_weights(self, weights: list) -> None:
        shapes = self.shapes()
        for name, weight in weights:
            if name not in shapes:
                raise KeyError(
                    f"vllm stand-in: load_weights: {name!r} is no parameter of the model"
                )
            if tuple(weight.shape) != shapes[name]:
                raise ValueError(
                    f"vllm stand-in: load_weights: {name} is {shapes[name]}, got "
                    f"{tuple(weight.shape)}"
                )
            self.loaded[name] = weight.clone()
            self.names.append(name)

    def _check_dtype(self, name: str, dtype: Any) -> None:
        import torch

        if dtype != getattr(torch, self.dtype_name):
            raise ValueError(
                f"vllm stand-in: {name}: dtype {dtype}, the engine's is {self.dtype_name}"
            )
