"""Stand-in for ``vllm.distributed.utils``: ``StatelessProcessGroup``, the rendezvous of the
weight-sync group between the trainer's rank 0 and the engines (a torch ``TCPStore``, held
by rank 0), outside any default process group, as vLLM's."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

#: How long a rank waits for the others to join (vLLM's default is 300 s).
TIMEOUT = timedelta(seconds=120)


@dataclass
class StatelessProcessGroup:
    store: Any
    rank: int
    world_size: int

    @staticmethod
    def create(host: str, port: int, rank: int, world_size: int) -> StatelessProcessGroup:
        import torch.distributed as dist

        store = dist.TCPStore(host, port, world_size, is_master=rank == 0, timeout=TIMEOUT)
        return StatelessProcessGroup(store, rank, world_size)
