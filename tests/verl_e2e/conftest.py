"""tests/verl_e2e: verl 0.9.1's whole ``main_ppo`` loop on this CPU through ``gigpo-verl``
(``tox -e verl-e2e``, which installs ``gigpo[verl-cpu]``: verl and vLLM's CPU build; the py
and verl envs ignore this folder). Every test here is marked ``verl_e2e``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.verl_e2e)
