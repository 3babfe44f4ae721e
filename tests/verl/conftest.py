"""tests/verl: the verl plugin against verl 0.9.1's real code (``tox -e verl``, which installs
``gigpo[verl]``; the py env ignores this folder). Every test here is
marked ``verl`` (by tests/conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def verl_config():
    """verl 0.9.1's own ``ppo_trainer`` config, composed by Hydra as ``main_ppo`` does."""
    from hydra import compose, initialize_config_dir
    from verl.trainer import main_ppo

    folder = Path(main_ppo.__file__).parent / "config"
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        return compose(config_name="ppo_trainer")
