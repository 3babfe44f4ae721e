"""verl's ``algorithm`` config section to :class:`~training.settings.EstimatorSettings`.

verl-agent (GiGPO's official code, a fork of an older verl) keeps each estimator's settings in
a subsection of ``algorithm`` named for it: ``algorithm.gigpo``, ``algorithm.hgpo``,
``algorithm.graphgpo``, with its own key names (``step_advantage_w``, ``mode``,
``enable_similarity`` + ``similarity_thresh``, ``length_weight_alpha``, ...), and the
discount in verl's own ``algorithm.gamma``. :func:`algorithm_settings` reads exactly that,
so a verl-agent config section works unchanged, and takes our names (the settings table's,
:mod:`training.settings`) in the same subsection; verl-agent's names are aliases, and a key
given under both names, or a key neither knows, is an error naming ``algorithm.<est>.<key>``.

Where verl-agent has a default, it is the default here, so that the numbers match its runs:
``episode_stats`` is ``step`` (verl-agent's statistics over step rows), ``norm`` is its
``mode`` default (``mean_norm`` for GiGPO, ``mean_std_norm`` for HGPO and GraphGPO, as
gigpo_algo's), ``gamma`` is ``algorithm.gamma`` (verl's default 1.0; verl-agent's scripts
set 0.95, GraphGPO's 0.1 to 0.8). HGPO's depth is ``env.history_length`` in verl-agent, which
is not in the algorithm section: here ``algorithm.hgpo.history_length`` (default 2, verl-agent's
``env.history_length`` default).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from training.settings import EstimatorSettings, read_by, table

#: The estimators the plugin registers in verl, named as verl-agent names them.
VERL_ESTIMATORS = ("gigpo", "hgpo", "graphgpo")
#: verl-agent's keys that are no setting of ours but are read (``enable_similarity``) or
#: checked (``weight_type``: HGPO's only weighting is by length).
EXTRA_KEYS = {"gigpo": ("enable_similarity",), "hgpo": ("weight_type",),
              "graphgpo": ("enable_similarity",)}  # fmt: skip
#: verl-agent's default of ``similarity_thresh`` when ``enable_similarity`` is on.
DEFAULT_SIMILARITY = 0.95
#: HGPO's depth where the section does not set it (verl-agent's ``env.history_length``).
DEFAULT_HISTORY_LENGTH = 2


def section_get(section: Any, key: str, default: Any = None) -> Any:
    """``section[key]`` of a dict, an OmegaConf ``DictConfig`` or a dataclass; ``default``
    where absent."""
    if section is None:
        return default
    if isinstance(section, Mapping) or hasattr(section, "keys"):
        return section.get(key, default) if key in section else default
    return getattr(section, key, default)


def _plain(value: Any) -> Any:
    """An OmegaConf node as plain Python (dicts and lists), anything else as it is."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # no OmegaConf installed: the values are plain already
        return value
    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    return value


def _keys(section: Any) -> list[str]:
    if section is None:
        return []
    if isinstance(section, Mapping) or hasattr(section, "keys"):
        return [str(k) for k in section.keys()]
    raise ValueError(f"expected a mapping, got {type(section).__name__}")


def algorithm_settings(algorithm: Any) -> EstimatorSettings:
    """The estimator settings of a verl ``algorithm`` section (a dict, an OmegaConf
    ``DictConfig`` or verl's ``AlgoConfig``), checked.

    Reads ``adv_estimator`` (one of :data:`VERL_ESTIMATORS`), ``gamma`` and the estimator's
    own subsection (see the module doc). Other estimators' subsections are not read (verl-agent's
    configs carry ``algorithm.gigpo`` whatever the estimator).

    Raises:
        ValueError: an estimator outside :data:`VERL_ESTIMATORS`, an unknown key, a key given
            under two names, or a value gigpo_algo refuses; the message names the dotted key.
    """
    estimator = section_get(algorithm, "adv_estimator")
    estimator = getattr(estimator, "value", estimator)  # verl's AdvantageEstimator enum
    if estimator not in VERL_ESTIMATORS:
        raise ValueError(
            f"algorithm.adv_estimator must be one of {VERL_ESTIMATORS} for the gigpo plugin, "
            f"got {estimator!r}"
        )
    prefix = f"algorithm.{estimator}."
    sub = _plain(section_get(algorithm, estimator, None))
    if sub is not None and not isinstance(sub, Mapping):
        raise ValueError(f"algorithm.{estimator} must be a mapping, got {type(sub).__name__}")
    sub = dict(sub or {})
    values: dict[str, Any] = {}
    names: dict[str, str] = {}  # our setting -> the key that gave it
    known = {f.name: f for f in table()}
    aliases = {
        alias: (f.name, value_map)
        for f in table()
        for alias, value_map in f.metadata["aliases"].items()
    }
    extra = EXTRA_KEYS[estimator]
    for key in _keys(sub):
        if key in extra:
            continue
        if key == "gamma":
            raise ValueError(f"{prefix}gamma: the discount is algorithm.gamma (verl's own key)")
        if key in known:
            name, value = key, sub[key]
        elif key in aliases:
            name, value_map = aliases[key]
            value = sub[key]
            if value_map is not None:
                if not isinstance(value, str) or value not in value_map:
                    raise ValueError(
                        f"{prefix}{key} must be one of {sorted(value_map)}, got {value!r}"
                    )
                value = value_map[value]
        else:
            raise ValueError(
                f"{prefix}{key} is not a setting of {estimator}: it reads "
                f"{sorted(read_by(estimator))}, verl-agent's names "
                f"{sorted(a for a, (n, _) in aliases.items() if n in read_by(estimator))} "
                f"and {sorted(extra)}"
            )
        if name in names:
            raise ValueError(f"{prefix}{key} and {prefix}{names[name]} set the same setting")
        names[name] = key
        values[name] = value
    _similarity(sub, values, names, prefix)
    if estimator == "hgpo":
        weight_type = sub.get("weight_type", "length")
        if weight_type != "length":
            raise ValueError(f"{prefix}weight_type must be 'length', got {weight_type!r}")
        values.setdefault("history_length", DEFAULT_HISTORY_LENGTH)
    values.setdefault("episode_stats", "step")
    gamma = _plain(section_get(algorithm, "gamma", None))
    if gamma is not None:
        if isinstance(gamma, bool) or not isinstance(gamma, int | float):
            raise ValueError(f"algorithm.gamma must be a number, got {gamma!r}")
        values["gamma"] = float(gamma)
    settings = EstimatorSettings(estimator=estimator, **values)
    if not isinstance(settings.invalid_penalty, int | float) or not math.isfinite(
        settings.invalid_penalty
    ):
        raise ValueError(
            f"{prefix}invalid_penalty must be a number, got {settings.invalid_penalty!r}"
        )
    settings.check(prefix=prefix, estimator_name="algorithm.adv_estimator",
                   estimators=VERL_ESTIMATORS)  # fmt: skip
    return settings


def _similarity(
    sub: dict[str, Any], values: dict[str, Any], names: dict[str, str], prefix: str
) -> None:
    """verl-agent's ``enable_similarity`` + ``similarity_thresh`` as our ``similarity``: its
    threshold counts only when enabled (verl-agent's configs always carry one; its default
    is off), and enabled without a threshold it is 0.95."""
    enabled = sub.get("enable_similarity")
    if enabled is not None and not isinstance(enabled, bool):
        raise ValueError(f"{prefix}enable_similarity must be true or false, got {enabled!r}")
    given = names.get("similarity")
    if enabled is False and given == "similarity":
        raise ValueError(f"{prefix}similarity is set and {prefix}enable_similarity is false")
    if given == "similarity_thresh" and not enabled:
        values.pop("similarity")
    if enabled:
        values.setdefault("similarity", DEFAULT_SIMILARITY)
