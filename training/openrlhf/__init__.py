"""GiGPO on OpenRLHF 0.11.2 (Ray + vLLM + DeepSpeed): ``bash training/openrlhf_gigpo.sh``.

Modules: :mod:`~training.openrlhf.spans` (turn token ranges to action-mask columns),
:mod:`~training.openrlhf.records` (the per-episode turn record),
:mod:`~training.openrlhf.estimator` (GiGPO advantages on OpenRLHF batches),
:mod:`~training.openrlhf.executor` (our environments in OpenRLHF's vLLM actors),
:mod:`~training.openrlhf.command` (flags and the resolved command),
:mod:`~training.openrlhf.patch` (the version-pinned glue, applied in every Ray worker),
:mod:`~training.openrlhf.train` (the entry point). Only ``patch`` and ``train`` touch
OpenRLHF or Ray, lazily.
"""
