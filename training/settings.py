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
For gigpo_algo's critic-free estimators (gigpo, grpo, rloo, hgpo, graphgpo) the table
agrees with :data:`gigpo_algo.estimators.ESTIMATOR_SETTINGS` (a test checks it); ``ppo`` is
the local trainer's critic estimator (a learned value function and GAE). A setting left
unset (None) takes the estimator's own default, which may differ between estimators
(``gamma``: 0.95 under gigpo and hgpo, 0.1 under graphgpo; ``norm``: mean under gigpo and
grpo, mean_std under hgpo and graphgpo).

Two discounts, two names: ``gamma`` discounts the step-level returns per environment turn
(GraphGPO: per hop to the goal); ``gae_gamma`` discounts PPO's GAE per response token.

HGPO's ``history_length`` is verl-agent's ``env.history_length``, the one key that sets both
the prompt's window of past steps and HGPO's deepest level there. Here the prompt's window
has its own setting in each trainer (``env.history_length``; OpenRLHF's
``--history_length``), and HGPO's left unset takes it when the config is resolved
(:func:`training.local.config.load_config`, :func:`training.openrlhf.command.plan`), so the
deepest level matches what the policy saw; set, it may differ from the prompt's.
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
#: The deepest HGPO history a config may set (as ``env.history_length``'s bound: HGPO makes one
#: pass over the batch per level).
MAX_HISTORY_LENGTH = 1000
#: ``success`` values: where GraphGPO's "the episode reached the goal" comes from.
SUCCESS_RULES = ("reward", "won")
#: Settings of the trainers that are not gigpo_algo keyword arguments: ``success`` picks the
#: per-row ``success`` flags the trainer passes to graphgpo_advantages.
TRAINER_ONLY = ("success",)


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
    """``gigpo``, ``grpo`` or ``rloo`` (GRPO / RLOO = GiGPO without the step level),
    ``hgpo`` (a hierarchy of step groups by shared history), ``graphgpo`` (step returns from
    each state's distance to success on the group's state graph), or ``ppo`` (the local
    trainer only: a learned critic and GAE)."""
    gamma: float | None = setting(
        None,
        ("gigpo", "hgpo", "graphgpo"),
        "discount of the step-level returns: per environment turn (gigpo, hgpo; default "
        "0.95), per hop to the goal (graphgpo: 10 * gamma ** distance; default 0.1)",
    )
    step_weight: float | None = setting(
        None,
        ("gigpo", "graphgpo"),
        "weight of the step-level advantage A_S (default 1.0)",
        {"step_advantage_w": None},
    )
    norm: str | None = setting(
        None,
        ("gigpo", "grpo", "hgpo", "graphgpo"),
        "mean (the paper's GiGPO w/o std, verl-agent's mean_norm; the default of gigpo and "
        "grpo), mean_std (mean_std_norm; the default of hgpo and graphgpo) or loo (gigpo and "
        "grpo only); rloo is loo always",
        {"mode": {"mean_std_norm": "mean_std", "mean_norm": "mean"}},
    )
    episode_stats: str = setting(
        "trajectory",
        ESTIMATORS,
        "members of an episode group: trajectory (paper Eq. 3) or step (verl-agent)",
    )
    similarity: float | None = setting(
        None,
        ("gigpo", "hgpo", "graphgpo"),
        "group steps (graphgpo: merge graph nodes) whose states' texts are at least this "
        "similar, in (0, 1) (default: exact anchors)",
        {"similarity_thresh": None},
    )
    similarity_metric: str | None = setting(
        None,
        ("gigpo", "hgpo", "graphgpo"),
        "with similarity: difflib (default; verl-agent's partition), indel, or embedding "
        "(sentence-embedding cosine, the dense extra's MiniLM-L6)",
    )
    invalid_penalty: float = setting(
        0.0,
        TRAINER_ESTIMATORS,
        "taken off an invalid step's episode score (and its step return under gigpo, hgpo "
        "and graphgpo, its reward under ppo)",
    )
    history_length: int | None = setting(
        None,
        ("hgpo",),
        "the deepest level's earlier states: levels 1 to history_length + 1 group steps "
        "sharing that many most recent states (default: the prompt's history window, "
        "verl-agent's env.history_length; 2 where the prompt holds the whole episode)",
    )
    length_alpha: float | None = setting(
        None,
        ("hgpo",),
        "level k's weight is (k + 1) ** length_alpha, >= 0 (default 1.0; 0: equal weights)",
        {"length_weight_alpha": None},
    )
    base_group: bool | None = setting(
        None,
        ("hgpo",),
        "add the episode advantage A_E as a level-0 item of weight 1 (default false)",
    )
    normalize_distance: bool | None = setting(
        None,
        ("graphgpo",),
        "step return 10 * gamma ** (d(next) - d(state) + 1), the progress of the step, "
        "instead of 10 * gamma ** d(next) (default false)",
    )
    episode_weight: float | None = setting(
        None,
        ("graphgpo",),
        "weight of the episode-level advantage A_E (default 1.0)",
        {"episode_advantage_w": None},
    )
    success: str | None = setting(
        None,
        ("graphgpo",),
        "what reached the goal: reward (default; verl-agent's rule, the episode's reward sum "
        "> 0) or won (the env's info['won']; for envs with negative or shaped rewards)",
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
        # The values, by gigpo_algo's rules, of the settings the estimator reads (the others
        # are at their defaults); PPO's one critic-free setting is checked as GiGPO's.
        read = set(read_by(estimator))
        check_settings(
            estimator if estimator in ESTIMATORS else "gigpo",
            {k: v for k, v in self.estimator_settings().items() if k in read},
            prefix=prefix,
            estimator_name=estimator_name,
        )
        if self.success not in (None, *SUCCESS_RULES):
            raise ValueError(
                f"{prefix}success must be one of {SUCCESS_RULES}, got {self.success!r}"
            )
        history = self.history_length
        if isinstance(history, int) and history > MAX_HISTORY_LENGTH:
            raise ValueError(
                f"{prefix}history_length must be <= {MAX_HISTORY_LENGTH} (HGPO makes one "
                f"level per earlier state), got {history}"
            )
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
