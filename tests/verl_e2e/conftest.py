"""tests/verl_e2e: verl 0.9.1's whole ``main_ppo`` loop on this CPU through ``gigpo-verl``
(``tox -e verl-e2e``, which installs ``gigpo[verl-cpu]``: verl and vLLM's CPU build; the py
and verl envs ignore this folder). Every test here is
marked ``verl_e2e`` (by tests/conftest.py)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
