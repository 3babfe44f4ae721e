"""Checks of the ``model`` section's name and adapters, before any model is built: the name
(a packaged model, a local directory, a hub id and its ``revision``; :mod:`training.hub`),
``trust_remote_code``, and the LoRA settings (``model.lora_*``). Part of
:func:`training.local.checks.validate`."""

from __future__ import annotations

import math
import re

from training.local.schema import ConfigError, TrainConfig
from training.packaged import PACKAGED_MODELS
from training.text import show

#: LoRA ranks above this are refused (a rank is a few to a few hundred).
MAX_LORA_RANK = 4096
#: LoRA alphas above this are refused: twice the largest rank (alpha = 2 x rank is the usual
#: choice); a huge alpha scales the adapters' update to infinity in the first generation.
MAX_LORA_ALPHA = 8192.0


def check_model(config: TrainConfig, *, files: bool = True) -> None:
    """Raises :class:`ConfigError` naming the ``model.*`` key.

    Args:
        files: also check what the model's files say: a hub id must be in the cache when
            ``HF_HUB_OFFLINE`` is set, and a config that runs its own code needs
            ``model.trust_remote_code`` (False: a dry run, which needs no weights and says
            what it could not check).
    """
    m = config.model
    if m.revision is not None and (
        not re.fullmatch(r"[\w./-]{1,256}", m.revision) or ".." in m.revision
    ):
        raise ConfigError(
            f"model.revision must be a branch, tag or commit of the hub repository, got "
            f"{show(m.revision)}"
        )
    _check_lora(config)
    if m.name_or_path in PACKAGED_MODELS:
        return
    from training.hub import (
        ModelNotFoundError,
        RemoteCodeError,
        check_remote_code,
        config_file,
        is_offline,
        resolve_model,
    )

    try:
        if files and is_offline() and not _is_local(m.name_or_path):
            # the weights must be cached: an error now names the command that fetches them
            found = resolve_model(m.name_or_path, m.revision).path / "config.json"
        else:  # a directory's config, or the hub's (a few KB; None when out of reach)
            found = config_file(m.name_or_path, m.revision)
        if found is not None:
            check_remote_code(found, m.trust_remote_code, key="model.trust_remote_code")
    except (ModelNotFoundError, RemoteCodeError) as exc:
        raise ConfigError(str(exc)) from None


def _is_local(name: str) -> bool:
    from pathlib import Path

    return Path(name).expanduser().exists()


def _check_lora(config: TrainConfig) -> None:
    m = config.model
    if m.lora_rank == 0:
        return
    if not 0 < m.lora_rank <= MAX_LORA_RANK:
        raise ConfigError(
            f"model.lora_rank must be in [0, {MAX_LORA_RANK}] (0: no LoRA), got {m.lora_rank}"
        )
    if not (math.isfinite(m.lora_alpha) and 0 < m.lora_alpha <= MAX_LORA_ALPHA):
        raise ConfigError(
            f"model.lora_alpha must be in (0, {MAX_LORA_ALPHA:g}], got {show(m.lora_alpha)}"
        )
    if not 0.0 <= m.lora_dropout < 1.0:
        raise ConfigError(f"model.lora_dropout must be in [0, 1), got {m.lora_dropout}")
    targets = m.lora_target_modules
    if not targets or not all(re.fullmatch(r"[\w.-]{1,128}", t) for t in targets):
        raise ConfigError(
            "model.lora_target_modules must be a list of module names (q_proj, v_proj, ...) "
            f"or [all-linear], got {show(targets)}"
        )
    if "all-linear" in targets and len(targets) > 1:
        raise ConfigError(
            f"model.lora_target_modules: all-linear stands alone, got {show(targets)}"
        )
    if m.trainable_layers:
        raise ConfigError(
            "model.trainable_layers with model.lora_rank: LoRA already trains only its "
            "adapters; set model.trainable_layers: 0"
        )
    if config.algo.estimator == "ppo":
        raise ConfigError(
            "model.lora_rank with algo.estimator=ppo: the critic has no LoRA form here (its "
            "value model would be a second full model to train); use a critic-free "
            "estimator (gigpo, hgpo, graphgpo, grpo, rloo) with LoRA, or train PPO in full"
        )
