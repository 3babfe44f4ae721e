"""Stand-in for ``vllm.distributed.device_communicators.pynccl``: ``PyNcclCommunicator``, the
NCCL communicator of the weight-sync group, here a gloo process group on the CPU over the
same rendezvous (NCCL needs GPUs). Only ``broadcast``, the one call the weight sync makes."""

from __future__ import annotations

from typing import Any

from vllm.distributed.utils import TIMEOUT, StatelessProcessGroup


class PyNcclCommunicator:
    def __init__(self, group: StatelessProcessGroup, device: Any = None) -> None:
        import torch.distributed as dist

        self.rank, self.world_size = group.rank, group.world_size
        self.group = dist.ProcessGroupGloo(group.store, group.rank, group.world_size, TIMEOUT)

    def broadcast(self, tensor: Any, src: int, stream: Any = None) -> None:
        """``tensor`` from rank ``src`` into every rank's ``tensor`` (the stream is the GPU's:
        none here)."""
        import torch.distributed as dist

        options = dist.BroadcastOptions()
        options.rootRank = src
        self.group.broadcast([tensor], options).wait()
