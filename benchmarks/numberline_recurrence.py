"""How often exact anchor states recur on NumberLine with a clock: JSON lines on stdout.

No training: groups of rollouts, each group's members reset from one seed (as a GiGPO group
is), play ``gigpo/NumberLine-v0`` with a fixed policy, and every step record (the state an
action was chosen in) is grouped with the other records of its group:

* ``exact_coverage``: the share of step records whose exact state key (``info["anchor"]``)
  recurs in their group (a step group of size >= 2), the number that matters for GiGPO's
  exact step groups;
* ``true_state_coverage``: the same with the key ``(target, position)``, the state that
  matters for the walk (what a grouping that ignores the clock perfectly would reach);
* ``step_synced_coverage``: the same with the key ``(target, position, step)``, which is what
  exact keys would give if the clock only counted steps (a clock drawn from the episode's
  generator, the same in every member of a group);
* ``similarity``: ``gigpo_algo.grouping.anchor_groups`` on the anchor texts, per metric
  (``--metric``: difflib, indel, embedding) and threshold:
  its coverage, how many of its step groups of size >= 2 join records of different true
  states (``mixed_groups``, ``mixed_fraction``), and the share of records in such groups;
* ``pairs``: over every pair of records of one group, the difflib ratio of their texts for
  pairs in the same true state (which differ at most in the clock) and pairs in different
  true states: quantiles, and the share at or above each threshold. Text that separates what
  matters from what does not puts the first high and the second low.

Policies: ``random`` (``+`` or ``-`` uniformly), ``noisy_expert`` (towards the target with
probability ``--expert-prob``, else uniformly random) and ``random_invalid`` (an answer that
names no action with probability ``--invalid-prob``, else ``random``: a policy early in
training, whose invalid answers leave the position where it is). Each runs with
``clock=True`` and, for comparison, ``clock=False``, on the same seeds and policy draws.

Run: ``python benchmarks/numberline_recurrence.py`` (the settings of
training/configs/study/numberline_clock.yaml: 32 groups of 4, 0..9, 18 steps, number words).
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import json
import time
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

import gigpo_envs  # noqa: F401  (registers the ids)
from gigpo_algo.grouping import anchor_groups

POLICIES = ("random", "noisy_expert", "random_invalid")


def play_groups(
    *,
    policy: str,
    clock: bool,
    groups: int,
    group_size: int,
    max_position: int,
    max_steps: int,
    expert_prob: float,
    invalid_prob: float,
    seed: int,
) -> list[dict[str, Any]]:
    """Plays ``groups * group_size`` episodes; returns one dict per step record."""
    env = gym.make(
        "gigpo/NumberLine-v0",
        max_position=max_position,
        max_steps=max_steps,
        words=True,
        clock=clock,
    )
    game = env.unwrapped
    records: list[dict[str, Any]] = []
    for group in range(groups):
        episode_seed = seed * 1_000_000 + group
        for member in range(group_size):
            # The policy's draws depend on the member, not on the clock: both clock settings
            # play the same walks.
            rng = np.random.default_rng([seed, POLICIES.index(policy), group, member])
            _, info = env.reset(seed=episode_seed)
            step, done = 0, False
            while not done:
                records.append(
                    {
                        "group": group,
                        "anchor": info["anchor"],
                        "text": info["anchor_text"],
                        "true": (game.target, game.position),
                        "step": step,
                    }
                )
                toward = "+" if game.target > game.position else "-"
                draw, coin = rng.random(), rng.random()
                if policy == "noisy_expert" and draw < expert_prob:
                    response = f"<action>{toward}</action>"
                elif policy == "random_invalid" and draw < invalid_prob:
                    response = "<action>wait</action>"
                else:
                    response = f"<action>{'+' if coin < 0.5 else '-'}</action>"
                _, _, terminated, truncated, info = env.step(response)
                step += 1
                done = terminated or truncated
    env.close()
    return records


def coverage(group_ids: Sequence[int], keys: Sequence[Hashable]) -> float:
    """The share of rows whose ``(group, key)`` occurs at least twice."""
    counts = Counter(zip(group_ids, keys, strict=True))
    shared = sum(counts[(g, k)] >= 2 for g, k in zip(group_ids, keys, strict=True))
    return shared / len(keys)


def similarity_summary(
    records: list[dict[str, Any]], similarity: float, metric: str
) -> dict[str, Any]:
    """Coverage and purity of ``anchor_groups`` on the records' anchor texts."""
    group_ids = [r["group"] for r in records]
    codes = anchor_groups(
        [r["text"] for r in records], group_ids, similarity=similarity, metric=metric
    )
    members: dict[int, list[int]] = {}
    for row, code in enumerate(codes.tolist()):
        members.setdefault(code, []).append(row)
    shared = [rows for rows in members.values() if len(rows) >= 2]
    mixed = [rows for rows in shared if len({records[i]["true"] for i in rows}) > 1]
    return {
        "metric": metric,
        "similarity": similarity,
        "coverage": sum(len(rows) for rows in shared) / len(records),
        "step_groups": len(members),
        "shared_groups": len(shared),
        "mixed_groups": len(mixed),
        "mixed_fraction": len(mixed) / len(shared) if shared else 0.0,
        "records_in_mixed": sum(len(rows) for rows in mixed) / len(records),
    }


def pair_ratios(records: list[dict[str, Any]], thresholds: Sequence[float]) -> dict[str, Any]:
    """difflib ratios of every within-group pair, split by same or different true state."""
    by_group: dict[int, list[dict[str, Any]]] = {}
    for record in records:
        by_group.setdefault(record["group"], []).append(record)
    ratios: dict[str, list[float]] = {"same_state": [], "different_state": []}
    for rows in by_group.values():
        for a, b in itertools.combinations(rows, 2):
            side = "same_state" if a["true"] == b["true"] else "different_state"
            ratios[side].append(difflib.SequenceMatcher(None, a["text"], b["text"]).ratio())
    summary: dict[str, Any] = {}
    for side, values in ratios.items():
        array = np.asarray(values)
        summary[side] = {
            "pairs": len(values),
            "min": round(float(array.min()), 4) if len(values) else None,
            "p10": round(float(np.percentile(array, 10)), 4) if len(values) else None,
            "median": round(float(np.median(array)), 4) if len(values) else None,
            "p90": round(float(np.percentile(array, 90)), 4) if len(values) else None,
            "max": round(float(array.max()), 4) if len(values) else None,
            "share_at_or_above": {
                str(t): float((array >= t).mean()) if len(values) else None for t in thresholds
            },
        }
    return summary


def measure(args: argparse.Namespace, policy: str, clock: bool) -> dict[str, Any]:
    """One JSON line: the recurrence numbers of one policy with or without the clock."""
    start = time.perf_counter()
    records = play_groups(
        policy=policy,
        clock=clock,
        groups=args.groups,
        group_size=args.group_size,
        max_position=args.max_position,
        max_steps=args.max_steps,
        expert_prob=args.expert_prob,
        invalid_prob=args.invalid_prob,
        seed=args.seed,
    )
    group_ids = [r["group"] for r in records]
    result: dict[str, Any] = {
        "what": "numberline_recurrence",
        "policy": policy,
        "clock": clock,
        "words": True,
        "groups": args.groups,
        "group_size": args.group_size,
        "max_position": args.max_position,
        "max_steps": args.max_steps,
        "expert_prob": args.expert_prob if policy == "noisy_expert" else None,
        "invalid_prob": args.invalid_prob if policy == "random_invalid" else None,
        "seed": args.seed,
        "step_records": len(records),
        "exact_coverage": coverage(group_ids, [r["anchor"] for r in records]),
        "true_state_coverage": coverage(group_ids, [r["true"] for r in records]),
        "step_synced_coverage": coverage(group_ids, [(*r["true"], r["step"]) for r in records]),
        "similarity": [
            similarity_summary(records, threshold, metric)
            for metric in args.metric
            for threshold in args.similarity
        ],
        "pairs": pair_ratios(records, args.similarity),
    }
    result["seconds"] = round(time.perf_counter() - start, 3)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=32)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-position", type=int, default=9)
    parser.add_argument("--max-steps", type=int, default=18)
    parser.add_argument("--expert-prob", type=float, default=0.8)
    parser.add_argument("--invalid-prob", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--similarity", type=float, nargs="+", default=[0.8, 0.9, 0.95])
    parser.add_argument("--metric", nargs="+", default=["difflib", "indel", "embedding"])
    args = parser.parse_args(argv)
    for policy in POLICIES:
        for clock in (True, False):
            print(json.dumps(measure(args, policy, clock)), flush=True)


if __name__ == "__main__":
    main()
