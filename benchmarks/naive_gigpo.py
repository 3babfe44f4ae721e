"""The naive reference: GiGPO written as per-row Python loops, the way verl-agent writes it.

This is the baseline of ``bench_advantages.py`` and the oracle of the tests in
``tests/algo``. It follows the structure of verl-agent's ``core_gigpo.py`` (dicts of lists
per group, one ``np.where`` scan per trajectory, per-element tensor updates,
``difflib.SequenceMatcher`` against each cluster's first member) with the semantics of
``gigpo_algo.advantages.gigpo_advantages`` (singleton groups get 0; ``"trajectory"``
statistics count each trajectory once).

``style="official"`` keeps the official code's costly parts: the per-row scan that puts
returns back in batch order, and per-element tensor updates in the normalisations (float64
here, so that numbers compare exactly). ``style="python"`` uses plain Python floats and
linear-time bookkeeping: the fastest a per-row loop gets, reported beside it for honesty.
"""

from __future__ import annotations

import difflib
import math
from collections import defaultdict
from typing import Any

import numpy as np


def _stats(members: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(count, mean, unbiased std) of weighted members [(value, weight)], weights per member."""
    count = round(sum(w for _, w in members))
    mean = sum(v * w for v, w in members) / count
    if count < 2:
        return count, mean, 0.0
    var = sum(w * (v - mean) ** 2 for v, w in members) / (count - 1)
    return count, mean, math.sqrt(var)


def _normalize(
    values: list[float],
    keys: list[Any],
    weights: list[float],
    own: list[float],
    norm: str,
    eps: float,
    official: bool = False,
) -> list[float]:
    members: dict[Any, list[tuple[float, float]]] = defaultdict(list)
    for v, k, w in zip(values, keys, weights, strict=True):
        members[k].append((v, w))
    stats = {k: _stats(m) for k, m in members.items()}
    sums = {k: sum(v * w for v, w in m) for k, m in members.items()}
    if official:
        return _normalize_tensor(values, keys, stats, sums, own, norm, eps)
    out = []
    for v, k, o in zip(values, keys, own, strict=True):
        count, mean, std = stats[k]
        if count < 2:
            out.append(0.0)
        elif norm == "mean":
            out.append(v - mean)
        elif norm == "mean_std":
            denom = std + eps
            out.append((v - mean) / denom if denom > 0 else 0.0)
        else:  # loo
            out.append(v - (sums[k] - o) / (count - 1))
    return out


def _normalize_tensor(values, keys, stats, sums, own, norm, eps) -> list[float]:  # noqa: ANN001
    """The same, with the official code's per-element tensor updates (float64 here)."""
    import torch

    scores = torch.tensor(values, dtype=torch.float64)
    id2mean = {k: torch.tensor(s[1], dtype=torch.float64) for k, s in stats.items()}
    id2std = {k: torch.tensor(s[2], dtype=torch.float64) for k, s in stats.items()}
    for i in range(len(values)):
        k = keys[i]
        if stats[k][0] < 2:
            scores[i] = 0.0
        elif norm == "mean":
            scores[i] = scores[i] - id2mean[k]
        elif norm == "mean_std":
            denom = id2std[k] + eps
            scores[i] = (scores[i] - id2mean[k]) / denom if denom > 0 else 0.0
        else:
            scores[i] = scores[i] - (sums[k] - own[i]) / (stats[k][0] - 1)
    return scores.tolist()


def naive_similarity_clusters(texts: list[str], keys: list[Any], threshold: float) -> list[Any]:
    """verl-agent's build_step_group with similarity: first-fit against each cluster's rep."""
    out: list[Any] = [None] * len(texts)
    index = np.array([str(k) for k in keys], dtype=object)
    for key in dict.fromkeys(index.tolist()):
        locs = np.where(index == key)[0]
        clusters: list[dict[str, Any]] = []
        for loc in locs:
            obs = texts[loc]
            placed = False
            for cluster in clusters:
                if difflib.SequenceMatcher(None, obs, cluster["rep"]).ratio() >= threshold:
                    cluster["locs"].append(loc)
                    placed = True
                    break
            if not placed:
                clusters.append({"rep": obs, "locs": [loc]})
        for c, cluster in enumerate(clusters):
            for loc in cluster["locs"]:
                out[loc] = (key, c)
    return out


def naive_gigpo(
    rewards: list[float],
    traj_ids: list[Any],
    group_ids: list[Any],
    anchors: list[Any],
    *,
    gamma: float = 0.95,
    step_weight: float = 1.0,
    norm: str = "mean",
    episode_stats: str = "trajectory",
    similarity: float | None = None,
    is_action_valid: list[bool] | None = None,
    invalid_penalty: float = 0.0,
    eps: float = 1e-6,
    style: str = "python",
) -> dict[str, Any]:
    """Per-row loop GiGPO; returns a dict of lists like GiGPOResult's fields (ids as keys)."""
    n = len(rewards)
    rewards = [float(x) for x in rewards]
    traj_key = [(group_ids[i], traj_ids[i]) for i in range(n)]
    valid = [True] * n if is_action_valid is None else [bool(x) for x in is_action_valid]

    # Discounted returns, one trajectory at a time (verl-agent scans the batch per uid).
    uid_of_row = np.array([str(k) for k in traj_key], dtype=object)
    returns_by_uid: dict[Any, list[float]] = {}
    episode_sum: dict[Any, float] = {}
    if style == "official":  # one scan of the whole batch per trajectory
        rows_of = {
            uid: np.where(uid_of_row == uid)[0].tolist() for uid in dict.fromkeys(uid_of_row)
        }
    else:
        rows_of = defaultdict(list)
        for i, uid in enumerate(uid_of_row.tolist()):
            rows_of[uid].append(i)
    for uid, rows in rows_of.items():
        traj_returns = [0.0] * len(rows)
        running = 0.0
        for t in reversed(range(len(rows))):
            running = rewards[rows[t]] + gamma * running
            traj_returns[t] = running
        returns_by_uid[uid] = traj_returns
        episode_sum[uid] = sum(rewards[i] for i in rows)
    returns = [0.0] * n
    if style == "official":
        # verl-agent's recombination: for every row, find its position by scanning its uid.
        for i in range(n):
            position = np.where(np.where(uid_of_row == uid_of_row[i])[0] == i)[0][0]
            returns[i] = returns_by_uid[uid_of_row[i]][position]
    else:
        seen: dict[Any, int] = defaultdict(int)
        for i in range(n):
            returns[i] = returns_by_uid[uid_of_row[i]][seen[uid_of_row[i]]]
            seen[uid_of_row[i]] += 1
    scores = [episode_sum[uid_of_row[i]] for i in range(n)]
    for i in range(n):
        if not valid[i]:
            scores[i] -= invalid_penalty
            returns[i] -= invalid_penalty

    lengths: dict[Any, int] = defaultdict(int)
    traj_total: dict[Any, float] = defaultdict(float)
    for i in range(n):
        lengths[traj_key[i]] += 1
        traj_total[traj_key[i]] += scores[i]
    if episode_stats == "trajectory":
        weights = [1.0 / lengths[traj_key[i]] for i in range(n)]
        own = [traj_total[traj_key[i]] / lengths[traj_key[i]] for i in range(n)]
    else:
        weights, own = [1.0] * n, scores
    official = style == "official"
    a_e = _normalize(scores, list(group_ids), weights, own, norm, eps, official)

    if similarity is None:
        step_keys = [(group_ids[i], _hashable(anchors[i])) for i in range(n)]
    else:
        step_keys = naive_similarity_clusters(list(anchors), list(group_ids), similarity)
    a_s = _normalize(returns, step_keys, [1.0] * n, returns, norm, eps, official)
    advantages = [a_e[i] + step_weight * a_s[i] for i in range(n)]
    return {
        "advantages": advantages,
        "episode_advantages": a_e,
        "step_advantages": a_s,
        "returns": returns,
        "step_keys": step_keys,
    }


def _hashable(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return ("nd", x.shape, tuple(x.ravel().tolist()))
    if isinstance(x, list):
        return tuple(_hashable(e) for e in x)
    return x
