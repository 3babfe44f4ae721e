"""The local trainer: ``python -m training.local --config training/configs/smoke.yaml``.

Modules: :mod:`~training.local.config` (dataclass config, YAML, CLI overrides),
:mod:`~training.local.rollout` (generation, env steps, step records),
:mod:`~training.local.update` (advantages, PPO loss), :mod:`~training.local.checkpoint`
(exact resume), :mod:`~training.local.metrics` (JSON lines, learning curve),
:mod:`~training.local.train` (the loop: ``from training.local.train import train``).
"""

from training.local.config import TrainConfig, load_config

__all__ = ["TrainConfig", "load_config"]
