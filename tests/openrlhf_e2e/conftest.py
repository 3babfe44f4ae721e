"""tests/openrlhf_e2e: OpenRLHF 0.11.2's whole ``train_ppo_ray`` loop on this CPU through
``gigpo-openrlhf --gigpo.device cpu`` (``tox -e openrlhf-e2e``, which installs
``gigpo[openrlhf-cpu]`` and ``openrlhf==0.11.2``: OpenRLHF, Ray, DeepSpeed and vLLM's CPU
build; the other envs ignore this folder). Every test here is
marked ``openrlhf_e2e`` (by tests/conftest.py)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
