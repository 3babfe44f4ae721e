"""The vLLM worker extension of OpenRLHF's engines on the CPU (``--gigpo.device cpu``).

OpenRLHF 0.11.2 gives its engines ``WorkerWrap``, which receives each weight the trainer
broadcasts into a CUDA tensor over vLLM's ``PyNcclCommunicator`` and loads it with the
model's ``load_weights``. :class:`CPUWorkerWrap` keeps OpenRLHF's protocol (the same
``init_process_group`` and ``update_weight`` calls, one tensor at a time, the trainer at
rank 0) with what a CPU engine needs:

* the sync group is a gloo group of its own (:class:`training.openrlhf.cpu.GlooBroadcaster`),
  the tensors CPU tensors;
* vLLM's CPU build repacks its linear layers after loading, so a weight cannot be loaded
  into the running model one tensor at a time: the tensors of one sync are kept until its
  last (OpenRLHF marks it: ``empty_cache=True``) and then loaded together by vLLM's own
  in-place reload (:func:`training.vllm_reload.reload_in_place`). The engine generates with
  the weights it had until the whole update is in.

This module runs in vLLM's engine process, which imports it by name
(:data:`training.openrlhf.cpu.CPU_WORKER`).
"""

from __future__ import annotations

from typing import Any

from openrlhf.trainer.ray.vllm_worker_wrap import WorkerWrap

from training.openrlhf.cpu import GlooBroadcaster
from training.vllm_reload import reload_in_place


class CPUWorkerWrap(WorkerWrap):
    """OpenRLHF's ``WorkerWrap`` for vLLM's CPU build (see the module docstring)."""

    def init_process_group(self, master_address: str, master_port: int, rank_offset: int,
                           world_size: int, group_name: str, backend: str = "gloo",
                           use_ray: bool = False) -> None:  # fmt: skip
        """Joins the trainer's sync group at rank ``rank_offset`` + this worker's rank."""
        import torch

        if use_ray:
            raise ValueError("--gigpo.device cpu: the engines sync over their own gloo group, "
                             "not Ray's (drop --vllm.sync_with_ray)")  # fmt: skip
        rank = torch.distributed.get_rank() + rank_offset
        self._model_update_with_ray = False
        self._model_update_group = GlooBroadcaster(master_address, master_port, rank, world_size)
        self._gigpo_pending: list[tuple[str, Any]] = []
        print(f"init_process_group (gloo): master_address={master_address}, "
              f"master_port={master_port}, rank={rank}, world_size={world_size}, "
              f"group_name={group_name}")  # fmt: skip

    def update_weight(self, name: str, dtype: Any, shape: Any, empty_cache: bool = False) -> None:
        """Receives one weight of an update; the last (``empty_cache``) loads them all.

        Raises:
            ValueError: a dtype other than the engine's (OpenRLHF's check), or a sync
                before :meth:`init_process_group`.
        """
        import torch

        if dtype != self.model_config.dtype:
            raise ValueError(f"mismatch dtype: src {dtype}, dst {self.model_config.dtype}")
        if not hasattr(self, "_gigpo_pending"):
            raise ValueError("update_weight before init_process_group")
        weight = torch.empty(shape, dtype=dtype, device="cpu")
        self._model_update_group.broadcast(weight, src=0)
        self._gigpo_pending.append((name, weight))
        if empty_cache:
            weights, self._gigpo_pending = self._gigpo_pending, []
            reload_in_place(self.model_runner, weights)
            self.gigpo_weight_syncs = getattr(self, "gigpo_weight_syncs", 0) + 1
            print(f"gigpo: weights update {self.gigpo_weight_syncs}: {len(weights)} tensors "
                  "loaded in place", flush=True)  # fmt: skip

    def update_weight_cuda_ipc(self, *args: Any, **kwargs: Any) -> None:
        raise ValueError("--gigpo.device cpu has no CUDA IPC (drop --train.colocate_all)")
