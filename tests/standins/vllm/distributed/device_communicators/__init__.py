"""Stand-in for ``vllm.distributed.device_communicators`` (``pynccl`` only)."""
