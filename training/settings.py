"""The estimator settings, and which estimator reads which: one table for both trainers.

:class:`EstimatorSettings` is the table: one field per setting, named as in
:mod:`gigpo_algo`, with its default, the estimators that read it (``reads``), what it means
(``doc``) and the other projects' names for it (``aliases``: verl-agent's). The local
trainer's ``algo`` section is this class plus the loss settings
(:class:`training.local.schema.AlgoConfig`); the OpenRLHF launcher's ``--algo.gigpo.*``
flags are generated from it (:func:`flag_settings`), and so is the settings object that
travels to its Ray workers (:class:`training.openrlhf.estimator.GiGPOSettings`).

A setting that the chosen estimator does not read must stay at its default
(:meth:`EstimatorSettings.check`), so that a baseline cannot silently carry a GiGPO knob.
For gigpo, grpo and rloo the table agrees with
:data:`gigpo_algo.estimators.ESTIMATOR_SETTINGS` (a test checks it); ``ppo`` is the local
trainer's critic estimator (a learned value function and GAE).

Two discounts, two names: ``gamma`` discounts GiGPO's step-level returns per environment
turn; ``gae_gamma`` discounts PPO's GAE per response token.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from gigpo_algo.estimators import ESTIMATORS, SETTINGS, check_settings

#: Every estimator a trainer may run: gigpo_algo's critic-free ones and PPO (local trainer).
TRAINER_ESTIMATORS = (*ESTIMATORS, "ppo")
#: The defaults PPO takes for its settings left unset (None).
PPO_DEFAULTS = {"gae_gamma": 1.0, "lam": 1.0, "value_clip": 0.5}


def setting(
    default: Any,
    reads: tuple[str, ...],
    doc: str,
    aliases: dict[str, dict[str, str] | None] | None = None,
) -> Any:
    """A dataclass field of the settings table.

    Args:
        default: the value that means "not set" (None: the estimator's own default).
        reads: the estimators that read the setting; under any other it must stay at
            ``default``.
        doc: one sentence for config docs and ``--help``.
        aliases: another project's name -> a map of its values to ours (None: the same
            values); the OpenRLHF launcher accepts ``--algo.gigpo.<alias>``.
    """
    metadata = {"reads": tuple(reads), "doc": doc, "aliases": dict(aliases or {})}
    return field(default=default, metadata=metadata)


@dataclass
class EstimatorSettings:
    """The estimator and its settings (the table: see the module doc and each field's
    ``metadata``)."""

    estimator: str = "gigpo"
    """``gigpo``, ``grpo`` or ``rloo`` (GRPO / RLOO = GiGPO without the step level), or
    ``ppo`` (the local trainer only: a learned critic and GAE)."""
    gamma: float | None = setting(
        None, ("gigpo",), "discount per environment turn of the step-level returns (default 0.95)"
    )
    step_weight: float | None = setting(
        None,
        ("gigpo",),
        "weight of the step-level advantage A_S (default 1.0)",
        {"step_advantage_w": None},
    )
    norm: str | None = setting(
        None,
        ("gigpo", "grpo"),
        "mean (default; the paper's GiGPO w/o std, verl-agent's mean_norm), mean_std or loo; "
        "rloo is loo always",
        {"mode": {"mean_std_norm": "mean_std", "mean_norm": "mean"}},
    )
    episode_stats: str = setting(
        "trajectory",
        ESTIMATORS,
        "members of an episode group: trajectory (paper Eq. 3) or step (verl-agent)",
    )
    similarity: float | None = setting(
        None,
        ("gigpo",),
        "group steps whose states' texts are at least this similar, in (0, 1) (default: "
        "exact anchors)",
        {"similarity_thresh": None},
    )
    similarity_metric: str | None = setting(
        None,
        ("gigpo",),
        "with similarity: difflib (default; verl-agent's partition), indel, or embedding "
        "(sentence-embedding cosine, the dense extra's MiniLM-L6)",
    )
    invalid_penalty: float = setting(
        0.0,
        TRAINER_ESTIMATORS,
        "taken off an invalid step's episode score (and its return under gigpo, its reward "
        "under ppo)",
    )
    gae_gamma: float | None = setting(
        None, ("ppo",), "GAE's discount per response token (default 1.0)"
    )
    lam: float | None = setting(
        None, ("ppo",), "GAE's lambda (default 1.0: the return less the critic's value)"
    )
    value_clip: float | None = setting(
        None, ("ppo",), "the value loss's clip range around the rollout-time values (default 0.5)"
    )

    def estimator_settings(self) -> dict[str, Any]:
        """Keyword arguments of :func:`gigpo_algo.estimators.estimator_advantages` (None:
        its default)."""
        return {name: getattr(self, name) for name in SETTINGS}

    def check(
        self,
        *,
        prefix: str = "algo.",
        estimator_name: str = "algo.estimator",
        estimators: tuple[str, ...] = TRAINER_ESTIMATORS,
        also_reads: dict[str, tuple[str, ...]] | None = None,
    ) -> None:
        """Raises ValueError for an estimator outside ``estimators``, a setting the estimator
        does not read left off its default, or a value no run can use.

        Args:
            prefix: put before each setting's name in messages (``"algo."``,
                ``"--algo.gigpo."``).
            estimator_name: how messages name the estimator option.
            also_reads: settings outside this table the estimator reads, by estimator
                (named as the messages should name them, e.g. ``optim.critic_lr``).
        """
        estimator = self.estimator
        if estimator not in estimators:
            raise ValueError(f"{estimator_name} must be one of {estimators}, got {estimator!r}")
        reads = [prefix + name for name in read_by(estimator)]
        reads += (also_reads or {}).get(estimator, ())
        for name, value, _ in unread(self, estimator):
            raise ValueError(
                f"{prefix}{name}={value!r} is not used by {estimator_name}={estimator!r} "
                f"(it reads {reads}); remove it"
            )
        # Every one of gigpo_algo's settings is read by gigpo: this checks values only.
        check_settings("gigpo", self.estimator_settings(), prefix=prefix)
        for name in ("gae_gamma", "lam"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ValueError(f"{prefix}{name} must be in [0, 1], got {value}")
        clip = self.value_clip
        if clip is not None and not (math.isfinite(clip) and clip > 0):
            raise ValueError(f"{prefix}value_clip must be a finite number > 0, got {clip}")


def table() -> tuple[dataclasses.Field, ...]:
    """The settings' fields (every field of :class:`EstimatorSettings` but ``estimator``)."""
    return tuple(f for f in dataclasses.fields(EstimatorSettings) if "reads" in f.metadata)


def read_by(estimator: str) -> tuple[str, ...]:
    """The names of the settings ``estimator`` reads, in table order."""
    return tuple(f.name for f in table() if estimator in f.metadata["reads"])


def flag_settings() -> tuple[dataclasses.Field, ...]:
    """The settings some critic-free estimator reads: the OpenRLHF launcher's flags."""
    return tuple(f for f in table() if set(f.metadata["reads"]) & set(ESTIMATORS))


def unread(config_section: Any, estimator: str) -> list[tuple[str, Any, tuple[str, ...]]]:
    """``(name, value, reads)`` of each field of a config section (a dataclass) that has a
    ``reads`` list without ``estimator`` and is off its default: a setting the run ignores."""
    found = []
    for f in dataclasses.fields(config_section):
        value, reads = getattr(config_section, f.name), f.metadata.get("reads")
        if reads is not None and estimator not in reads and value != f.default:
            found.append((f.name, value, reads))
    return found
