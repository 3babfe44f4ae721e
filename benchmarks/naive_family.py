"""The naive reference for GiGPO's family: HGPO and GraphGPO as per-row Python loops.

This is the baseline of ``bench_family.py`` and the oracle of
``tests/algo/test_family_reference.py``. It walks the batch the way verl-agent's recipes do
(``recipe/hgpo/core_hgpo.py``, ``recipe/GraphGPO/core_graph.py`` and the pieces of
``gigpo/core_gigpo.py`` they reuse): dicts of lists per uid, one loop per trajectory, a
dict of clusters per uid, a reverse Dijkstra with ``heapq`` on a dict graph per uid, and
one statistic per cluster. Numbers are float64; the official code works in float32, so it
agrees to about 1e-6 (checked on random batches against the official files run unmodified,
apart from groups whose values are all equal, where its float32 mean leaves noise).

``style="python"`` (default) uses plain Python floats and linear-time bookkeeping: the
fastest a per-row loop gets. ``style="official"`` keeps the official code's costly parts, as
``naive_gigpo.py`` does for GiGPO: a scan of the whole batch per trajectory and per row to put
returns back in batch order (``compute_step_discounted_returns``,
``compute_graph_path_returns``), a scan per uid, per-element tensor updates in every
normalisation, a tensor stack per row in HGPO's aggregation, and path lists carried through
the Dijkstra (float64 torch here, so that numbers compare to 1e-9).

Two choices are the project's, not verl-agent's, and are named where they act:

- ``episode_stats="trajectory"`` counts each trajectory once in its episode group (the
  paper's Eq. 3; a trajectory's rows share its weight), and a group with a single
  trajectory gets 0. ``"step"`` is verl-agent's cross-step statistic: every row is a
  member, the std is unbiased, and a uid with a single row gets ``score / (1 + eps)``
  under ``"mean_std"`` (its raw score under ``"mean"``).
- A group whose values are all equal gets exactly 0 (the mathematical value), so that the
  exact-zero rule of HGPO's aggregation does not depend on rounding in a mean.

``norm``: ``"mean"`` is verl-agent's ``mean_norm`` (value - mean) and ``"mean_std"`` its
``mean_std_norm`` ((value - mean) / (std + eps)).
"""

from __future__ import annotations

import difflib
import heapq
import math
from collections import defaultdict
from typing import Any

import numpy as np

NORMS = ("mean", "mean_std")
STATS = ("trajectory", "step")


# ----------------------------------------------------------------------------- shared


def _key(x: Any) -> Any:
    """A hashable form of one anchor (verl-agent's ``to_hashable``)."""
    if isinstance(x, np.ndarray):
        return ("nd", x.shape, tuple(x.ravel().tolist()))
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, list | tuple):
        return tuple(_key(e) for e in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _key(v)) for k, v in x.items()))
    return x


def _trajectories(traj_ids: list[Any], group_ids: list[Any]) -> dict[tuple[Any, Any], list[int]]:
    """Rows of each trajectory (the pair (group, traj)), in batch order; first seen first."""
    rows: dict[tuple[Any, Any], list[int]] = {}
    for i, (g, t) in enumerate(zip(group_ids, traj_ids, strict=True)):
        rows.setdefault((_key(g), _key(t)), []).append(i)
    return rows


STYLES = ("python", "official")


def _traj_keys(traj_ids: list[Any], group_ids: list[Any]) -> np.ndarray:
    """One string per row naming its trajectory, as verl-agent's ``traj_uid`` column."""
    keys = np.empty(len(traj_ids), dtype=object)
    keys[:] = [repr((_key(g), _key(t))) for g, t in zip(group_ids, traj_ids, strict=True)]
    return keys


def _trajectories_official(keys: np.ndarray) -> dict[Any, list[int]]:
    """Rows of each trajectory, found by one scan of the batch per trajectory."""
    return {key: np.where(keys == key)[0].tolist() for key in dict.fromkeys(keys.tolist())}


def _place_official(per_traj: dict[Any, list[float]], keys: np.ndarray) -> list[float]:
    """Per-trajectory values back in batch order the official way: two scans per row."""
    out = [0.0] * len(keys)
    for i, key in enumerate(keys.tolist()):
        rows = np.where(keys == key)[0]
        out[i] = per_traj[key][int(np.where(rows == i)[0][0])]
    return out


def _uid_rows(group_ids: list[Any], style: str) -> dict[Any, list[int]]:
    """Rows of each uid (episode group), first seen first."""
    if style == "official":
        index = np.empty(len(group_ids), dtype=object)
        index[:] = [_key(g) for g in group_ids]
        return {g: np.flatnonzero(index == g).tolist() for g in dict.fromkeys(index.tolist())}
    rows_of: dict[Any, list[int]] = defaultdict(list)
    for i, g in enumerate(group_ids):
        rows_of[_key(g)].append(i)
    return dict(rows_of)


def _penalties(n: int, is_action_valid: Any, invalid_penalty: float) -> list[float]:
    """The invalid-action penalty of each row: ``invalid_penalty`` where the action was invalid."""
    if is_action_valid is None:
        return [0.0] * n
    return [0.0 if bool(v) else float(invalid_penalty) for v in is_action_valid]


def _all_equal(values: list[float]) -> bool:
    return all(v == values[0] for v in values)


def _mean_std(values: list[float], unbiased: bool) -> tuple[float, float]:
    n = len(values)
    mean = math.fsum(values) / n
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1 if unbiased else n)
    return mean, math.sqrt(var)


def _relative(
    values: list[float], norm: str, eps: float, unbiased: bool, style: str = "python"
) -> list[float]:
    """Each value against its group of >= 2 members: value - mean, or / (std + eps)."""
    if _all_equal(values):
        return [0.0] * len(values)
    if style == "official":
        return _relative_tensor(values, norm, eps, unbiased)
    mean, std = _mean_std(values, unbiased)
    if norm == "mean":
        return [v - mean for v in values]
    return [(v - mean) / (std + eps) for v in values]


def _relative_tensor(values: list[float], norm: str, eps: float, unbiased: bool) -> list[float]:
    """The same with the official code's tensors and per-element updates (float64)."""
    import torch

    scores = torch.tensor(values, dtype=torch.float64)
    mean, std = scores.mean(), scores.std(unbiased=unbiased)
    for j in range(len(values)):
        scores[j] = scores[j] - mean if norm == "mean" else (scores[j] - mean) / (std + eps)
    return scores.tolist()


def _episode_advantages(
    scores: list[float],
    group_ids: list[Any],
    trajs: dict[tuple[Any, Any], list[int]],
    norm: str,
    stats: str,
    eps: float,
    style: str = "python",
) -> list[float]:
    """The episode-level advantage of every row (core_gigpo's ``episode_norm_reward``).

    ``"step"``: verl-agent's cross-step statistic, every row a member of its uid, unbiased
    std, a single-row uid -> score / (1 + eps) (mean_std) or score (mean). ``"trajectory"``:
    each trajectory one member whose rows carry weight 1/len each (the project's Eq. 3),
    unbiased std over trajectories, a single-trajectory group -> 0.
    """
    n = len(scores)
    out = [0.0] * n
    if stats == "step":
        for rows in _uid_rows(group_ids, style).values():
            values = [scores[i] for i in rows]
            if len(rows) == 1:
                out[rows[0]] = values[0] / (1.0 + eps) if norm == "mean_std" else values[0]
                continue
            advs = _relative(values, norm, eps, unbiased=True, style=style)
            for i, a in zip(rows, advs, strict=True):
                out[i] = a
        return out
    trajs_of: dict[Any, list[list[int]]] = defaultdict(list)
    for (g, _), rows in trajs.items():
        trajs_of[g].append(rows)
    for members in trajs_of.values():
        count = len(members)
        values = [scores[i] for rows in members for i in rows]
        if count < 2 or _all_equal(values):
            continue  # stays 0
        mean = math.fsum(math.fsum(scores[i] for i in rows) / len(rows) for rows in members)
        mean /= count
        spread = math.fsum((scores[i] - mean) ** 2 / len(rows) for rows in members for i in rows)
        std = math.sqrt(spread / (count - 1))
        for rows in members:
            for i in rows:
                d = scores[i] - mean
                out[i] = d if norm == "mean" else d / (std + eps)
    return out


def _check(norm: str, episode_stats: str, style: str) -> None:
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    if episode_stats not in STATS:
        raise ValueError(f"episode_stats must be one of {STATS}, got {episode_stats!r}")


# ----------------------------------------------------------------------------- HGPO


def naive_hgpo(
    rewards: list[float],
    traj_ids: list[Any],
    group_ids: list[Any],
    anchors: list[Any],
    *,
    history_length: int = 2,
    gamma: float = 0.95,
    norm: str = "mean_std",
    length_alpha: float = 1.0,
    base_group: bool = False,
    episode_stats: str = "trajectory",
    is_action_valid: list[bool] | None = None,
    invalid_penalty: float = 0.0,
    eps: float = 1e-6,
    drop_zero: bool = True,
    style: str = "python",
) -> tuple[np.ndarray, dict[str, Any]]:
    """HGPO (``recipe/hgpo/core_hgpo.py``) as per-row loops.

    Per uid and per trajectory (rows in batch order), the step at position t joins the
    level-k cluster keyed by its k most recent anchors (k = 1 .. min(history_length + 1,
    t + 1)). A cluster of >= 2 members normalises its members' discounted returns with the
    population std and gives each member the item (k, a); with ``base_group`` every row
    first gets the item (0, episode advantage). A row's advantage is the weighted mean of
    its items with weights (k + 1) ** length_alpha / (sum + eps), items exactly 0 left out
    (``drop_zero``); no item left -> 0.

    Args:
        rewards: N env rewards, one per row (model call).
        traj_ids, group_ids: N ids (ints or strings); a trajectory is the pair.
        anchors: N state keys (the state before each row's action).
        history_length: levels k = 1 .. history_length + 1.
        gamma: discount of the step returns.
        norm: ``"mean"`` or ``"mean_std"`` (clusters and base group alike).
        length_alpha: exponent of the level weights.
        base_group: add the episode-level item (k = 0).
        episode_stats: ``"trajectory"`` or ``"step"`` (the base group's statistic).
        is_action_valid: N bools or None; an invalid row loses ``invalid_penalty`` from its
            step return and its episode score.
        invalid_penalty: c >= 0.
        eps: added to stds and to the weight sum.
        drop_zero: leave items exactly 0 out of the weighted mean (verl-agent does).
        style: ``"python"`` or ``"official"`` (see the module docstring); same numbers.

    Returns:
        ``(advantages, parts)``: float64 (N,), and a dict with ``returns`` (N,),
        ``base`` ((N,) episode advantages, or None), ``items`` (per row, the list of
        (k, a) items before dropping) and ``clusters`` (key -> member rows, singletons too).
    """
    _check(norm, episode_stats, style)
    n = len(rewards)
    penalty = _penalties(n, is_action_valid, invalid_penalty)
    trajs = _trajectories(list(traj_ids), list(group_ids))
    returns = _step_returns(rewards, traj_ids, group_ids, trajs, gamma, style)
    scores = [0.0] * n
    for rows in trajs.values():
        total = sum(float(rewards[i]) for i in rows)
        for i in rows:
            scores[i] = total
    for i in range(n):
        returns[i] -= penalty[i]
        scores[i] -= penalty[i]

    base = None
    if base_group:
        base = _episode_advantages(scores, list(group_ids), trajs, norm, episode_stats, eps, style)

    # Clusters per uid: key (uid, k, window of k anchors) -> member rows.
    clusters: dict[tuple[Any, int, tuple[Any, ...]], list[int]] = defaultdict(list)
    by_uid: dict[Any, list[list[int]]] = defaultdict(list)
    for (g, _), rows in trajs.items():
        by_uid[g].append(rows)
    if style == "official":  # one scan per uid, its trajectories split from its rows
        by_uid = {
            g: [[rows[j] for j in part] for part in _split(rows, traj_ids)]
            for g, rows in _uid_rows(group_ids, style).items()
        }
    for g, uid_trajs in by_uid.items():
        for rows in uid_trajs:
            states = [_key(anchors[i]) for i in rows]
            for t, i in enumerate(rows):
                for k in range(1, min(history_length + 1, t + 1) + 1):
                    clusters[(g, k, tuple(states[t - k + 1 : t + 1]))].append(i)

    items: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    if base is not None:
        for i in range(n):
            items[i].append((0, base[i]))
    for (_, k, _), members in clusters.items():
        if len(members) < 2:
            continue
        values = [returns[i] for i in members]
        advs = _relative(values, norm, eps, unbiased=False, style=style)
        for i, a in zip(members, advs, strict=True):
            items[i].append((k, a))

    aggregate = _aggregate_tensor if style == "official" else _aggregate
    advantages = np.array([aggregate(row, length_alpha, eps, drop_zero) for row in items])
    parts = {
        "returns": np.array(returns),
        "base": None if base is None else np.array(base),
        "items": items,
        "clusters": dict(clusters),
    }
    return advantages, parts


def _split(rows: list[int], traj_ids: list[Any]) -> list[list[int]]:
    """Positions in ``rows`` of each trajectory (a uid's rows split by traj id)."""
    parts: dict[Any, list[int]] = defaultdict(list)
    for j, i in enumerate(rows):
        parts[_key(traj_ids[i])].append(j)
    return list(parts.values())


def _step_returns(
    rewards: list[float],
    traj_ids: list[Any],
    group_ids: list[Any],
    trajs: dict[tuple[Any, Any], list[int]],
    gamma: float,
    style: str,
) -> list[float]:
    """``G_t = r_t + gamma * G_{t+1}`` backwards over each trajectory's rows."""
    if style == "official":
        keys = _traj_keys(list(traj_ids), list(group_ids))
        per_traj = {}
        for key, rows in _trajectories_official(keys).items():
            running, out = 0.0, [0.0] * len(rows)
            for t in reversed(range(len(rows))):
                running = float(rewards[rows[t]]) + gamma * running
                out[t] = running
            per_traj[key] = out
        return _place_official(per_traj, keys)
    returns = [0.0] * len(rewards)
    for rows in trajs.values():
        running = 0.0
        for i in reversed(rows):
            running = float(rewards[i]) + gamma * running
            returns[i] = running
    return returns


def _aggregate(items: list[tuple[int, float]], alpha: float, eps: float, drop_zero: bool) -> float:
    """``sum w_k a_k / (sum w_k + eps)``, ``w_k = (k + 1) ** alpha``, over the kept items."""
    kept = [(k, a) for k, a in items if a != 0.0 or not drop_zero]
    if not kept:
        return 0.0
    raw = [(k + 1.0) ** alpha for k, _ in kept]
    total = math.fsum(raw) + eps
    return math.fsum(w / total * a for w, (_, a) in zip(raw, kept, strict=True))


def _aggregate_tensor(
    items: list[tuple[int, float]], alpha: float, eps: float, drop_zero: bool
) -> float:
    """The same with the official code's tensors (float64)."""
    import torch

    if not items:
        return 0.0
    advs = torch.stack([torch.tensor(a, dtype=torch.float64) for _, a in items])
    ks = torch.tensor([k for k, _ in items], dtype=torch.float64)
    keep = advs != 0 if drop_zero else torch.ones_like(advs, dtype=torch.bool)
    if not keep.any():
        return 0.0
    w_raw = (ks[keep] + 1) ** alpha
    return float(((w_raw / (w_raw.sum() + eps)) * advs[keep]).sum())


# ----------------------------------------------------------------------------- GraphGPO


class _Goal:
    """The goal node of every graph: its own node, equal to no state."""

    def __repr__(self) -> str:
        return "GOAL"


GOAL = _Goal()


class _Canon:
    """verl-agent's ``StateCanonicalizer`` for one uid: a state maps to the first earlier
    representative with ``SequenceMatcher(None, state, rep).ratio() >= threshold``, else
    it becomes a representative itself; results are cached per state."""

    def __init__(self, threshold: float | None) -> None:
        self.threshold = threshold
        self.reps: list[Any] = []
        self.seen: dict[Any, Any] = {}

    def __call__(self, state: Any) -> Any:
        h = _key(state)
        if self.threshold is None:
            return h
        if h in self.seen:
            return self.seen[h]
        text = state if isinstance(state, str) else str(state)
        canonical = h
        for rep_h, rep_text in self.reps:
            if difflib.SequenceMatcher(None, text, rep_text).ratio() >= self.threshold:
                canonical = rep_h
                break
        else:
            self.reps.append((h, text))
        self.seen[h] = canonical
        return canonical


def _distances_to_goal(edges: list[tuple[Any, Any]], style: str = "python") -> dict[Any, float]:
    """Hop count from every node to GOAL over the observed edges (reverse Dijkstra, weight 1).

    Unreachable nodes get the largest finite distance + 1 (GOAL's 0 counted, so a graph
    without GOAL gives every node 1). ``style="official"`` keeps verl-agent's dict-of-dicts
    graph with an edge list per pair and carries each node's path through the search.
    """
    reverse: dict[Any, list[tuple[Any, float]]] = defaultdict(list)
    nodes: set[Any] = set()
    if style == "official":
        graph: dict[Any, dict[Any, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
        for row, (u, v) in enumerate(edges):
            graph[u][v].append({"data_id": row, "weight": 1.0})
            nodes.update((u, v))
        for u, targets in graph.items():
            for v, attrs in targets.items():
                reverse[v].extend((u, attr.get("weight", 1)) for attr in attrs)
    else:
        for u, v in edges:
            reverse[v].append((u, 1.0))
            nodes.update((u, v))
    dist: dict[Any, float] = {node: math.inf for node in nodes}
    keep_paths = style == "official"
    paths: dict[Any, list[Any]] = {}
    dist[GOAL] = 0.0
    tick = 0  # breaks ties in the heap, so nodes are never compared
    heap: list[tuple[float, int, Any, list[Any]]] = [(0.0, tick, GOAL, [GOAL])]
    while heap:
        cost, _, node, path = heapq.heappop(heap)
        if cost > dist[node]:
            continue
        for prev, w in reverse[node]:
            if cost + w < dist[prev]:
                dist[prev] = cost + w
                tick += 1
                if keep_paths:
                    paths[prev] = [prev, *path]
                heapq.heappush(heap, (cost + w, tick, prev, paths[prev] if keep_paths else []))
    far = max(d for d in dist.values() if d != math.inf)
    return {node: (far + 1.0 if d == math.inf else d) for node, d in dist.items()}


def naive_graphgpo(
    rewards: list[float],
    traj_ids: list[Any],
    group_ids: list[Any],
    anchors: list[Any],
    next_anchors: list[Any],
    *,
    gamma: float = 0.1,
    normalize_distance: bool = False,
    step_weight: float = 1.0,
    episode_weight: float = 1.0,
    norm: str = "mean_std",
    episode_stats: str = "trajectory",
    success: list[bool] | None = None,
    similarity: float | None = None,
    is_action_valid: list[bool] | None = None,
    invalid_penalty: float = 0.0,
    eps: float = 1e-6,
    style: str = "python",
) -> tuple[np.ndarray, dict[str, Any]]:
    """GraphGPO (``recipe/GraphGPO/core_graph.py``) as per-row loops.

    Per uid, a graph with one edge anchor -> next state per row; the next state of a
    successful trajectory's last row is the goal. d(s) = fewest observed transitions from s
    to the goal (unreachable: largest finite d + 1; no success in the uid: every d = 1).
    A row's step return is ``10 * gamma ** d(next)``, or with ``normalize_distance``
    ``10 * gamma ** (d(next) - d(anchor) + 1)``, less its invalid penalty; it is normalised
    in its exact-anchor step group (unbiased std; a single-row group -> 0). The advantage is
    ``step_weight * step + episode_weight * episode``.

    Args:
        rewards: N env rewards (only their trajectory sums are read: episode score, success).
        traj_ids, group_ids: N ids; a trajectory is the pair.
        anchors: N states before each row's action (state texts with ``similarity``).
        next_anchors: N states each row's action led to.
        gamma: discount per hop.
        normalize_distance: the progress form of the return.
        step_weight, episode_weight: weights of the two parts.
        norm: ``"mean"`` or ``"mean_std"`` (both parts).
        episode_stats: ``"trajectory"`` or ``"step"``.
        success: N bools (a trajectory succeeded when its last row says so), or None:
            a trajectory succeeded when its reward sum is > 0.
        similarity: None (exact states) or a threshold in (0, 1): graph nodes merged by
            ``difflib`` ratio, first fit against representatives, per uid in row order
            (anchor, then next state). Step groups stay exact.
        is_action_valid: N bools or None; an invalid row loses ``invalid_penalty`` from its
            step return and its episode score.
        invalid_penalty: c >= 0.
        eps: added to stds.
        style: ``"python"`` or ``"official"`` (see the module docstring); same numbers.

    Returns:
        ``(advantages, parts)``: float64 (N,), and a dict with ``returns``, ``distances``
        (d of each row's anchor node), ``next_distances`` (d of its next node), ``step`` and
        ``episode`` advantages, all (N,), and ``nodes`` / ``next_nodes`` (each row's
        canonical node keys; GOAL for the goal).
    """
    _check(norm, episode_stats, style)
    n = len(rewards)
    penalty = _penalties(n, is_action_valid, invalid_penalty)
    trajs = _trajectories(list(traj_ids), list(group_ids))

    scores = [0.0] * n
    ends_in_goal = [False] * n
    for rows in trajs.values():
        total = sum(float(rewards[i]) for i in rows)
        won = total > 0 if success is None else bool(success[rows[-1]])
        for i in rows:
            scores[i] = total - penalty[i]
        ends_in_goal[rows[-1]] = won

    rows_of = _uid_rows(list(group_ids), style)
    nodes: list[Any] = [None] * n
    next_nodes: list[Any] = [None] * n
    d_anchor = [0.0] * n
    d_next = [0.0] * n
    for rows in rows_of.values():
        canon = _Canon(similarity)
        edges = []
        for i in rows:
            nodes[i] = canon(anchors[i])
            next_nodes[i] = GOAL if ends_in_goal[i] else canon(next_anchors[i])
            edges.append((nodes[i], next_nodes[i]))
        dist = _distances_to_goal(edges, style)
        for i in rows:
            d_anchor[i], d_next[i] = dist[nodes[i]], dist[next_nodes[i]]

    def path_return(i: int) -> float:
        power = d_next[i] - d_anchor[i] + 1.0 if normalize_distance else d_next[i]
        return 10.0 * gamma**power - penalty[i]

    if style == "official":  # per trajectory, by scans, put back in batch order by scans
        keys = _traj_keys(list(traj_ids), list(group_ids))
        per_traj = {
            key: [path_return(i) for i in rows]
            for key, rows in _trajectories_official(keys).items()
        }
        returns = _place_official(per_traj, keys)
    else:
        returns = [path_return(i) for i in range(n)]

    step = [0.0] * n
    for rows in rows_of.values():
        step_groups: dict[Any, list[int]] = defaultdict(list)
        for i in rows:
            step_groups[_key(anchors[i])].append(i)
        for members in step_groups.values():
            if len(members) < 2:
                continue  # core_gigpo's step_norm_reward: a singleton gets exactly 0
            values = [returns[i] for i in members]
            advs = _relative(values, norm, eps, unbiased=True, style=style)
            for i, a in zip(members, advs, strict=True):
                step[i] = a

    episode = _episode_advantages(scores, list(group_ids), trajs, norm, episode_stats, eps, style)
    advantages = np.array([step_weight * step[i] + episode_weight * episode[i] for i in range(n)])
    parts = {
        "returns": np.array(returns),
        "distances": np.array(d_anchor),
        "next_distances": np.array(d_next),
        "step": np.array(step),
        "episode": np.array(episode),
        "nodes": nodes,
        "next_nodes": next_nodes,
    }
    return advantages, parts
