"""tests/openrlhf_e2e: OpenRLHF 0.11.2's whole ``train_ppo_ray`` loop on this CPU through
``gigpo-openrlhf --gigpo.device cpu`` (``tox -e openrlhf-e2e``, which installs
``gigpo[openrlhf-cpu]`` and ``openrlhf==0.11.2``: OpenRLHF, Ray, DeepSpeed and vLLM's CPU
build; the other envs ignore this folder). Every test here is marked ``openrlhf_e2e``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.openrlhf_e2e)
