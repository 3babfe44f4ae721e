"""Stand-in for ``vllm.distributed``: the weight-sync group OpenRLHF builds (see ``utils``)."""
