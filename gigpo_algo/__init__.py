"""gigpo_algo: GiGPO and its baselines as fast, exact, pure functions.

Modules:
- :mod:`gigpo_algo.advantages`: GiGPO (episode + step level), discounted returns, and the
  GRPO-family baselines, GAE and the DAPO filter (re-exported from ``baselines``);
- :mod:`gigpo_algo.hgpo`, :mod:`gigpo_algo.graphgpo`: GiGPO's successors from its authors,
  HGPO (a hierarchy of groups by shared history) and GraphGPO (returns from each state's
  distance to the goal in the group's state graph);
- :mod:`gigpo_algo.estimators`: GiGPO, HGPO, GraphGPO, GRPO and RLOO over step records from
  one episode score, by name (``estimator_advantages``);
- :mod:`gigpo_algo.grouping`: anchor-state grouping (exact and similarity);
- :mod:`gigpo_algo.tokens`: per-step values onto response tokens;
- :mod:`gigpo_algo.baselines`: also ``turn_gae``, multi-turn PPO's GAE over step records;
- :mod:`gigpo_algo.losses`: PPO clipped loss, GSPO's sequence-level loss, the critic's
  clipped value loss, KL estimators, entropy, loss aggregation.

Arrays in, arrays out, no state (docs/design.md, contract 3); the argument names are the
project's vocabulary (docs/library.md).
"""

from gigpo_algo.advantages import (
    GiGPOResult,
    anchor_groups,
    discounted_returns,
    dr_grpo,
    episode_advantages,
    episode_level,
    filter_uniform_groups,
    filter_zero_advantage_groups,
    gae,
    gigpo_advantages,
    grpo,
    reinforce_pp_baseline,
    rloo,
    step_advantages,
)
from gigpo_algo.baselines import turn_gae
from gigpo_algo.estimators import (
    ESTIMATOR_SETTINGS,
    ESTIMATORS,
    estimator_advantages,
    grpo_advantages,
    rloo_advantages,
)
from gigpo_algo.graphgpo import GraphGPOResult, graphgpo_advantages
from gigpo_algo.hgpo import HGPOResult, hgpo_advantages
from gigpo_algo.losses import (
    aggregate_loss,
    entropy_from_logits,
    gspo_loss,
    kl_penalty,
    loss_denominator,
    ppo_clip_loss,
    value_loss,
)
from gigpo_algo.tokens import broadcast_to_tokens, turns_to_tokens

__all__ = [
    "ESTIMATORS",
    "ESTIMATOR_SETTINGS",
    "GiGPOResult",
    "GraphGPOResult",
    "HGPOResult",
    "aggregate_loss",
    "anchor_groups",
    "broadcast_to_tokens",
    "discounted_returns",
    "dr_grpo",
    "entropy_from_logits",
    "episode_advantages",
    "episode_level",
    "estimator_advantages",
    "filter_uniform_groups",
    "filter_zero_advantage_groups",
    "gae",
    "gigpo_advantages",
    "graphgpo_advantages",
    "grpo",
    "grpo_advantages",
    "gspo_loss",
    "hgpo_advantages",
    "kl_penalty",
    "loss_denominator",
    "ppo_clip_loss",
    "reinforce_pp_baseline",
    "rloo",
    "rloo_advantages",
    "step_advantages",
    "turn_gae",
    "turns_to_tokens",
    "value_loss",
]
