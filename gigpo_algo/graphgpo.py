"""GraphGPO: step returns from each state's distance to the goal in the group's state graph.

GiGPO's step return is a discounted sum of the rewards that came later in the same episode.
GraphGPO (verl-agent ``recipe/GraphGPO/core_graph.py``) pools an episode group's episodes
into one directed graph: a node per state, an edge per step (its state -> the state it led
to), and the last step of every successful episode leads to a goal node. A state's distance
d is the fewest steps from it to the goal along the observed edges, whichever episodes they
come from. A step's return is ``10 * gamma ** d(next state)`` (with ``normalize_distance``,
``10 * gamma ** (d(next) - d(state) + 1)``: how much of the way it closed); these returns
are normalised in GiGPO's step groups and added to the episode advantage:
``A = step_weight * A_S + episode_weight * A_E``.

Vectorised: the node codes of all groups at once, then a breadth-first search backwards from
every group's goal over all edges together, one pass of the edge array per distance.

What the official code does, matched (docs/notes/algorithm.md lists it):

- an episode succeeded when its reward sum is > 0 (``success`` overrides this);
- in a group where some episode succeeded, a state that cannot reach the goal gets the
  group's largest finite distance + 1 (the goal's 0 counted); in a group where none did,
  every state gets d = 1, so every return is ``10 * gamma``;
- the environment's rewards enter only through success and the episode score; the
  invalid-action penalty is taken off a step's return and its episode score;
- step groups match anchors exactly, within the episode group; a ``similarity`` threshold
  merges similar states into one graph node only (verl-agent's ``StateCanonicalizer``:
  within a group, the states in row order, each row's state then its next state, each
  joining the first node whose first state is similar enough).

One departure, on purpose: the goal is a node of its own. The official code writes the string
``'success'`` as the last next state of a successful episode, so a real state with that text
would be the goal (and, under similarity, a state similar to it).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from gigpo_algo._arrays import check_eps, check_overflow, factorize_ints, to_numpy
from gigpo_algo._grouped import combine_codes, normalize_in_groups
from gigpo_algo.advantages import (
    _check_bool,
    _check_finite,
    _check_unit_interval,
    _step_groups,
    _to_bool,
)
from gigpo_algo.grouping import _anchor_codes, step_group_codes
from gigpo_algo.hgpo import family_episode_level

__all__ = ["GraphGPOResult", "graph_distances", "graphgpo_advantages"]

#: The return of a step that reaches the goal (verl-agent's constant).
GOAL_RETURN = 10.0


class GraphGPOResult(NamedTuple):
    """Output of :func:`graphgpo_advantages`; every per-row field has shape (N,)."""

    advantages: Any
    """``step_weight * step_advantages + episode_weight * episode_advantages``."""
    episode_advantages: Any
    """A_E: the row's episode score in its episode group."""
    step_advantages: Any
    """A_S: the row's graph return in its step group (0 for a row alone in its group)."""
    returns: Any
    """The graph return of each row, after the invalid-action penalty."""
    step_group_ids: np.ndarray
    """int64: the step group of each row (exact anchors within the episode group)."""
    distances: np.ndarray
    """float64: d of the state each row acted from."""
    next_distances: np.ndarray
    """float64: d of the state each row's action led to (0: the goal)."""
    node_ids: np.ndarray
    """int64: the graph node of each row's state (numbered over the batch, first
    appearance)."""
    next_node_ids: np.ndarray
    """int64: the graph node of each row's next state, -1 for the goal."""


def graphgpo_advantages(
    rewards: Any,
    traj_ids: Any,
    group_ids: Any,
    anchors: Any = None,
    next_anchors: Any = None,
    *,
    gamma: float = 0.1,
    normalize_distance: bool = False,
    step_weight: float = 1.0,
    episode_weight: float = 1.0,
    norm: str = "mean_std",
    episode_stats: str = "trajectory",
    success: Any = None,
    similarity: float | None = None,
    similarity_metric: str = "difflib",
    is_action_valid: Any = None,
    invalid_penalty: float = 0.0,
    eps: float = 1e-6,
    step_group_ids: Any = None,
) -> GraphGPOResult:
    """GraphGPO's advantage of every row.

    Args:
        rewards: float, shape (N,): the environment reward of each row.
        traj_ids: shape (N,): trajectory of each row; rows of a trajectory in time order.
        group_ids: shape (N,): episode group of each row.
        anchors: shape (N,): the state each row's action was taken from (keys; with
            ``similarity``, texts).
        next_anchors: shape (N,), the same kind: the state each row's action led to; for a
            trajectory's last row, the state the episode ended in (replaced by the goal when
            the episode succeeded).
        gamma: in [0, 1] (verl-agent's ALFWorld default 0.1; WebShop 0.2, Sokoban 0.8).
        normalize_distance: return ``10 * gamma ** (d(next) - d(state) + 1)``.
        step_weight: weight of A_S (verl-agent: ``step_advantage_w``).
        episode_weight: weight of A_E (verl-agent: ``episode_advantage_w``).
        norm: ``"mean_std"`` (verl-agent's mean_std_norm, the default) or ``"mean"``
            (mean_norm), for both levels; stds unbiased.
        episode_stats: ``"trajectory"`` (each trajectory counted once) or ``"step"``
            (verl-agent: every row), for A_E.
        success: bool, shape (N,), the same for every row of a trajectory, or None: an
            episode succeeded when its reward sum is > 0.
        similarity: None, or a threshold in (0, 1): states at least this similar (by
            ``similarity_metric``) are one graph node; step groups stay exact.
        similarity_metric: ``"difflib"`` (verl-agent's), ``"indel"`` or ``"embedding"``.
        is_action_valid: bool, shape (N,), or None.
        invalid_penalty: c >= 0 taken off an invalid row's return and episode score.
        eps: added to the stds.
        step_group_ids: shape (N,), or None: step groups formed by the caller (each inside
            one episode group) instead of exact anchors.

    Returns:
        :class:`GraphGPOResult`.

    Raises:
        ValueError: a malformed input, naming the argument; finite inputs so large that an
            advantage overflows float64 (naming the input and the rows).
    """
    ep = family_episode_level(
        rewards, traj_ids, group_ids, norm, episode_stats, is_action_valid, invalid_penalty, eps
    )
    _check_unit_interval(gamma, "gamma")
    for name, value in (("step_weight", step_weight), ("episode_weight", episode_weight)):
        _check_finite(value, name)
    _check_bool(normalize_distance, "normalize_distance")
    check_eps(eps)
    if anchors is None or next_anchors is None:
        raise ValueError("graphgpo_advantages needs anchors and next_anchors")
    n = len(ep.rewards)
    last = _last_rows(ep.traj_codes, ep.num_trajs)
    won = _success(success, ep, n)
    to_goal = last & won
    nodes, next_nodes = _node_codes(
        anchors, next_anchors, to_goal, ep, similarity, similarity_metric
    )
    # Exact step groups: a similarity threshold merges graph nodes only.
    steps = _step_groups(anchors, step_group_ids, ep, None, "difflib", "graphgpo_advantages")
    dist, next_dist = graph_distances(nodes, next_nodes, ep.groups, ep.num_groups)
    exponent = next_dist - dist + 1.0 if normalize_distance else next_dist
    returns = GOAL_RETURN * float(gamma) ** exponent - ep.penalties  # exponent >= 0: finite
    num_steps = int(steps.max()) + 1 if n else 0
    a_s = normalize_in_groups(returns, steps, num_steps, norm, float(eps))
    check_overflow(
        a_s, f"invalid_penalty={invalid_penalty!r} is too large: the step advantages (a "
        "return less its step group's mean) overflow float64"
    )  # fmt: skip
    with np.errstate(over="ignore", invalid="ignore"):
        advantages = float(step_weight) * a_s + float(episode_weight) * ep.advantages
    check_overflow(
        advantages, f"rewards are too large for step_weight={step_weight!r} and "
        f"episode_weight={episode_weight!r}: step_weight * A_S + episode_weight * A_E "
        "overflows float64"
    )  # fmt: skip
    wrap = ep.kind.wrap
    return GraphGPOResult(
        advantages=wrap(advantages),
        episode_advantages=wrap(ep.advantages),
        step_advantages=wrap(a_s),
        returns=wrap(returns),
        step_group_ids=steps,
        distances=dist,
        next_distances=next_dist,
        node_ids=nodes,
        next_node_ids=next_nodes,
    )


def graph_distances(
    nodes: np.ndarray, next_nodes: np.ndarray, groups: np.ndarray, num_groups: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's state's and next state's distance to its group's goal.

    Args:
        nodes: int64 (N,): the node of each row's state, codes unique across groups.
        next_nodes: int64 (N,): the node of each row's next state, -1 for the goal.
        groups: int64 (N,): the episode group of each row, in [0, num_groups).
        num_groups: G.

    Returns:
        ``(d_state, d_next)``, float64 (N,) each: fewest edges to the goal (0 for the goal
        itself); a state that cannot reach it gets its group's largest finite distance + 1;
        in a group without a goal edge every state gets 1.
    """
    n = len(nodes)
    if n == 0:
        return np.zeros(0), np.zeros(0)
    num_nodes = int(max(nodes.max(), next_nodes.max())) + 1
    # The goals are nodes num_nodes .. num_nodes + G - 1, one per group.
    dst = np.where(next_nodes < 0, num_nodes + groups, next_nodes)
    src = nodes
    dist = np.full(num_nodes + num_groups, np.inf)
    has_goal = np.zeros(num_groups, dtype=bool)
    has_goal[groups[next_nodes < 0]] = True
    dist[num_nodes + np.flatnonzero(has_goal)] = 0.0
    reached = dst >= num_nodes  # edges into a node of the current frontier
    level = 0.0
    while reached.any():
        level += 1.0
        new = src[reached]
        new = np.unique(new[np.isinf(dist[new])])
        if not len(new):
            break
        dist[new] = level
        frontier = np.zeros(len(dist), dtype=bool)
        frontier[new] = True
        reached = frontier[dst]
    # Unreachable states: the group's farthest finite distance + 1 (1 in a group with no goal).
    node_group = np.zeros(len(dist), dtype=np.int64)
    node_group[src] = groups
    node_group[dst] = groups
    finite = np.isfinite(dist)
    far = np.zeros(num_groups)
    np.maximum.at(far, node_group[finite], dist[finite])
    dist = np.where(finite, dist, far[node_group] + 1.0)
    return dist[src], dist[dst]


def _last_rows(traj_codes: np.ndarray, num_trajs: int) -> np.ndarray:
    """bool (N,): the last row of each trajectory in batch order."""
    last_index = np.full(num_trajs, -1, dtype=np.int64)
    np.maximum.at(last_index, traj_codes, np.arange(len(traj_codes)))
    out = np.zeros(len(traj_codes), dtype=bool)
    out[last_index[last_index >= 0]] = True
    return out


def _success(success: Any, ep: Any, n: int) -> np.ndarray:
    """bool (N,): whether each row's episode reached the goal."""
    if success is None:
        sums = np.bincount(ep.traj_codes, weights=ep.rewards, minlength=ep.num_trajs)
        return (sums > 0)[ep.traj_codes]
    won = _to_bool(success, "success", n)
    per_traj = np.bincount(ep.traj_codes, weights=won, minlength=ep.num_trajs)
    count = np.bincount(ep.traj_codes, minlength=ep.num_trajs)
    if ((per_traj != 0) & (per_traj != count)).any():
        raise ValueError("success must be the same for every row of a trajectory")
    return won


def _node_codes(
    anchors: Any,
    next_anchors: Any,
    to_goal: np.ndarray,
    ep: Any,
    similarity: float | None,
    metric: str,
) -> tuple[np.ndarray, np.ndarray]:
    """The graph node of each row's state and next state (-1: the goal), unique across
    groups, numbered in order of first appearance (state before next state, row by row)."""
    n = len(ep.groups)
    states, following = _as_list(anchors, "anchors", n), _as_list(next_anchors, "next_anchors", n)
    # Interleave: row i's state at 2i, its next state at 2i + 1; the goal rows' next states
    # are left out (the official code overwrites them).
    keep = np.ones(2 * n, dtype=bool)
    keep[1::2] = ~to_goal
    both: list[Any] = [None] * (2 * n)
    both[0::2], both[1::2] = states, following
    both = [x for x, k in zip(both, keep.tolist(), strict=True) if k]
    groups = np.repeat(ep.groups, 2)[keep]
    if similarity is None:
        try:
            codes, num = _anchor_codes(both, len(both))
        except ValueError as exc:
            raise ValueError(f"anchors and next_anchors: {exc}") from None
        codes = combine_codes(groups, ep.num_groups, codes, num)[0]
    else:
        codes = step_group_codes(
            both, groups, ep.num_groups, similarity, metric, metric_name="similarity_metric"
        )
    out = np.full(2 * n, -1, dtype=np.int64)
    out[keep] = factorize_ints(codes)[0] if len(codes) else codes
    return out[0::2], out[1::2]


def _as_list(x: Any, name: str, n: int) -> list[Any]:
    """One entry per row as a list; a 2-D array gives its rows, and every array state
    becomes the flat list of its values, so that a state compares equal whether it came as
    an array row, an array or a list (as verl-agent's ``to_hashable`` makes them all
    tuples)."""
    x = to_numpy(x)
    if isinstance(x, np.ndarray):
        x = x.reshape(len(x), -1).tolist() if x.ndim > 1 else x.tolist()
    elif isinstance(x, str | bytes) or not hasattr(x, "__len__"):
        raise ValueError(f"{name} must be a sequence with one state per row, got {type(x)}")
    if len(x) != n:
        raise ValueError(f"{name} has length {len(x)}, expected {n}")
    out = []
    for state in x:
        state = to_numpy(state)
        if isinstance(state, np.ndarray):
            state = state.ravel().tolist()
        elif state is None:
            raise ValueError(f"{name} holds None: every row needs a state")
        out.append(state)
    return out
