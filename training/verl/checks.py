"""verl 0.9.1's own checks of a command, before anything starts: what ``main_ppo`` runs first.

:func:`check_command` composes verl's ``ppo_trainer`` config with the command's Hydra overrides
(Hydra's own composition, as ``main_ppo`` composes it: a misspelled or unknown key is refused
there, and :func:`closest_key` adds the key it most likely meant), then runs verl's
``validate_config`` with ``use_reference_policy`` and ``use_critic`` as ``main_ppo`` derives
them (``need_reference_policy``, ``need_critic``), then the one thing verl asserts only at its
first update (:func:`check_update_split`). Every failure is a :class:`VerlCheckError` with
verl's own message and the keys of the command it names (:func:`keys_named`). Importing verl
here needs no GPU, no network and no model: nothing is read from the Hugging Face hub.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import logging
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from training.text import bound_text


class VerlCheckError(ValueError):
    """verl would refuse the command (Hydra's composition or ``validate_config``)."""


def compose(overrides: list[str]) -> Any:
    """verl's ``ppo_trainer`` config with ``overrides`` (``key=value``, ``+key=value``),
    composed by Hydra as ``python -m verl.trainer.main_ppo`` composes it.

    Raises:
        VerlCheckError: Hydra refuses an override (an unknown key named with its closest
            match, a value of the wrong shape).
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    from verl.trainer import main_ppo

    folder = str(Path(main_ppo.__file__).parent / "config")
    with initialize_config_dir(config_dir=folder, version_base=None):
        try:
            return hydra_compose(config_name="ppo_trainer", overrides=list(overrides))
        except (HydraException, OmegaConfBaseException) as exc:
            message = " ".join(str(exc).split())
            match = re.match(r"Could not override '([^']+)'", message)
            if match:
                base = hydra_compose(config_name="ppo_trainer")
                guess = closest_key(base, match.group(1))
                hint = f"; did you mean {guess}?" if guess else ""
                raise VerlCheckError(
                    f"unknown verl config key {match.group(1)!r}{hint} (a key verl's config "
                    f"lacks is added as +{match.group(1)}=...)"
                ) from None
            raise VerlCheckError(
                f"Hydra refuses the overrides: {bound_text(message, 400)}"
            ) from None


def closest_key(config: Any, key: str) -> str | None:
    """The dotted key of ``config`` nearest to the unknown ``key``: its longest existing
    prefix, then the closest name among that node's keys (``difflib``); None when none is
    close."""
    node, kept = config, []
    parts = key.split(".")
    for i, part in enumerate(parts):
        keys = [str(k) for k in node.keys()] if hasattr(node, "keys") else []
        if part in keys and i < len(parts) - 1:
            node, kept = node[part], [*kept, part]
            continue
        found = difflib.get_close_matches(part, keys, n=1, cutoff=0.6)
        if not found:
            return None
        return ".".join([*kept, found[0], *parts[i + 1 :]])
    return None


def validate(config: Any) -> None:
    """verl's ``validate_config`` on ``config``, as ``main_ppo`` calls it.

    Raises:
        VerlCheckError: verl refuses it; the message is verl's, with the keys it names.
    """
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # verl warns that the critic is off (no GAE)
            validate_config(
                config=config,
                use_reference_policy=need_reference_policy(config),
                use_critic=need_critic(config),
            )
    except Exception as exc:  # verl raises ValueError, AssertionError, TypeError, KeyError
        message = " ".join(str(exc).split()) or type(exc).__name__
        keys = keys_named(config, message)
        change = f"; change {', '.join(keys)}" if keys else ""
        raise VerlCheckError(
            f"verl's validate_config: {bound_text(message, 400)}{change}"
        ) from None


def check_update_split(config: Any) -> None:
    """What verl asserts only at its first update: a mini-batch
    (``ppo_mini_batch_size x rollout.n`` rows) splits evenly over the actor's data-parallel
    GPUs (``engine_workers.train_mini_batch``).

    Raises:
        VerlCheckError: it does not, naming the keys.
    """
    actor = config.actor_rollout_ref.actor
    if actor.strategy not in ("fsdp", "fsdp2"):
        return  # Megatron's data-parallel size depends on its parallel layout
    gpus = int(config.trainer.n_gpus_per_node) * int(config.trainer.nnodes)
    data_parallel = max(1, gpus // max(1, int(actor.get("ulysses_sequence_parallel_size", 1))))
    rows = int(actor.ppo_mini_batch_size) * int(config.actor_rollout_ref.rollout.n)
    if rows % data_parallel:
        raise VerlCheckError(
            f"a mini-batch of {rows} step rows (actor_rollout_ref.actor.ppo_mini_batch_size "
            f"{actor.ppo_mini_batch_size} x actor_rollout_ref.rollout.n "
            f"{config.actor_rollout_ref.rollout.n}) does not split over {data_parallel} "
            "data-parallel GPUs, which verl asserts at its first update: change "
            "actor_rollout_ref.actor.ppo_mini_batch_size or trainer.n_gpus_per_node"
        )


def check_command(overrides: list[str]) -> Any:
    """Hydra's composition, verl's ``validate_config`` and :func:`check_update_split` on a
    ``main_ppo`` command's overrides; the composed config.

    Raises:
        VerlCheckError: the first refusal (module doc).
    """
    with _quiet():
        config = compose(overrides)
        validate(config)
        check_update_split(config)
    return config


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """verl's prints and log lines while it checks (its platform's guess on a machine
    without GPUs, "All configuration checks passed"): the dry run says what was checked."""
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        logging.disable(logging.NOTSET)


def keys_named(config: Any, message: str, most: int = 3) -> list[str]:
    """The config's dotted keys that ``message`` names, in order: each word that is a key or
    the unique end of one (verl writes ``actor.ppo_mini_batch_size`` for
    ``actor_rollout_ref.actor.ppo_mini_batch_size``); at most ``most``."""
    leaves = list(_leaves(config))
    found: list[str] = []
    for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*", message):
        if "_" not in word and "." not in word:
            continue  # plain words, not setting names
        matches = [k for k in leaves if k == word or k.endswith("." + word)]
        if len(matches) == 1 and matches[0] not in found:
            found.append(matches[0])
        if len(found) == most:
            break
    return found


def _leaves(node: Any, prefix: str = "") -> Any:
    """Every leaf key of a config, dotted."""
    for key in node.keys() if hasattr(node, "keys") else []:
        try:
            child = node[key]
        except Exception:  # an interpolation that cannot resolve yet: a leaf all the same
            child = None
        path = f"{prefix}{key}"
        if hasattr(child, "keys"):
            yield from _leaves(child, path + ".")
        else:
            yield path
