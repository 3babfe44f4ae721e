"""ALFWorld speed and anchor-state recurrence: JSON lines on stdout, one object per result.

On games written by ``python -m gigpo_envs.alfworld.generate`` (or ``--data-dir`` with real
ALFWorld games) it measures:

* ``reset_latency`` / ``step_latency``: p50 and p99 seconds of ``gigpo/ALFWorld-v0`` (first
  reset of each game = ``cold``, resets of a game seen before = ``warm``), with the same
  environment without :mod:`gigpo_envs.alfworld.speedups` (TextWorld as shipped) as the
  baseline, measured in the same run;
* ``step_async_group``: environment steps per second of ``make_group_vec`` with one group of
  2 async worker processes, beside the same 2 environments in one process (``sync``);
* ``recurrence``: how often anchor states recur inside a GiGPO group (``--group-size``
  rollouts of one game, ``max_steps`` 50) for a random policy, the hand-coded expert, and the
  expert with 20% random actions. ``step_group_fraction`` is the fraction of step records
  whose anchor (the state before the action) is shared with at least one other step record
  of the group, i.e. whose step-level group has size >= 2 (what the GiGPO paper reports, over
  65% on ALFWorld); ``cross_rollout_fraction`` counts only anchors seen in at least two
  different rollouts. The same numbers for grouping on the raw observation text are given
  as ``by_observation``.

Run: ``python benchmarks/bench_alfworld.py [--num-games 6] [--group-size 8]``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path

import gymnasium as gym
import numpy as np

import gigpo_envs  # noqa: F401  (registers gigpo/ALFWorld-v0)
from gigpo_envs import make_group_vec
from gigpo_envs.alfworld import speedups
from gigpo_envs.alfworld.generate import generate_games
from gigpo_envs.alfworld.session import TextWorldSession

ENV_ID = "gigpo/ALFWorld-v0"


def emit(record: dict) -> None:
    record["cpus"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    print(json.dumps(record), flush=True)


def _percentiles(samples: list[float]) -> dict:
    return {
        "p50": round(float(np.percentile(samples, 50)), 5),
        "p99": round(float(np.percentile(samples, 99)), 5),
        "n": len(samples),
    }


def latencies(data_dir: Path, num_games: int, steps: int, seed: int, fast: bool) -> dict:
    """Reset (cold and warm) and step latencies of one environment, in seconds."""
    env = gym.make(ENV_ID, data_dir=data_dir)
    if not fast:
        env.unwrapped._session = TextWorldSession(speedups=False)
    rng = np.random.default_rng(seed)
    cold, warm, step = [], [], []
    for rounds in range(2):
        for game in range(num_games):
            start = time.perf_counter()
            _, info = env.reset(seed=game)
            (cold if rounds == 0 else warm).append(time.perf_counter() - start)
            if rounds:
                continue
            for _ in range(steps):
                actions = info["admissible_actions"]
                response = f"<action>{actions[int(rng.integers(len(actions)))]}</action>"
                start = time.perf_counter()
                _, _, terminated, truncated, info = env.step(response)
                step.append(time.perf_counter() - start)
                if terminated or truncated:
                    break
    env.close()
    return {"reset_cold": cold, "reset_warm": warm, "step": step}


def bench_latency(data_dir: Path, num_games: int, steps: int) -> None:
    speedups.disable_speedups()
    baseline = latencies(data_dir, num_games, steps, seed=1, fast=False)
    speedups.enable_speedups()
    ours = latencies(data_dir, num_games, steps, seed=1, fast=True)
    for what, key in (
        ("reset_latency_cold", "reset_cold"),
        ("reset_latency_warm", "reset_warm"),
        ("step_latency", "step"),
    ):
        p = _percentiles(ours[key])
        emit(
            {
                "what": what,
                "size": {"games": num_games},
                "seconds": p,
                "throughput": round(1.0 / p["p50"], 2),
                "baseline": {
                    "name": "textworld without gigpo speedups",
                    **_percentiles(baseline[key]),
                },
            }
        )


def group_steps_per_second(data_dir: Path, vectorization: str, steps: int) -> float:
    vec = make_group_vec(ENV_ID, 1, 2, seed=0, vectorization=vectorization, data_dir=str(data_dir))
    rng = np.random.default_rng(0)
    _, infos = vec.reset()
    start = time.perf_counter()
    for _ in range(steps):
        actions = [
            f"<action>{a[int(rng.integers(len(a)))]}</action>" for a in infos["admissible_actions"]
        ]
        _, _, _, _, infos = vec.step(actions)
    elapsed = time.perf_counter() - start
    vec.close()
    return 2 * steps / elapsed


def bench_async(data_dir: Path, steps: int) -> None:
    sync = group_steps_per_second(data_dir, "sync", steps)
    async_ = group_steps_per_second(data_dir, "async", steps)
    emit(
        {
            "what": "step_async_group",
            "size": {"workers": 2, "steps_per_env": steps},
            "seconds": round(2 * steps / async_, 3),
            "throughput": round(async_, 2),
            "baseline": {"name": "sync, 2 envs in 1 process", "throughput": round(sync, 2)},
        }
    )


def rollout(env, seed: int, policy: str, rng: np.random.Generator) -> tuple[list, bool]:
    """One episode; returns (anchor, observation) of the state before every action, and won."""
    observation, info = env.reset(seed=seed)
    records = []
    while True:
        records.append((info["anchor"], observation))
        actions = info["admissible_actions"]
        action = info.get("expert_action")
        if policy == "random" or action is None or (policy == "expert_eps" and rng.random() < 0.2):
            action = actions[int(rng.integers(len(actions)))]
        observation, _, terminated, truncated, info = env.step(f"<action>{action}</action>")
        if terminated or truncated:
            return records, bool(info["won"])


def recurrence(groups: list[list[list[str]]]) -> dict:
    """Fractions of step records whose key recurs in their group (see the module doc)."""
    total = shared = cross = 0
    for group in groups:
        counts = Counter(key for traj in group for key in traj)
        trajectories = Counter(key for traj in group for key in set(traj))
        for traj in group:
            for key in traj:
                total += 1
                shared += counts[key] >= 2
                cross += trajectories[key] >= 2
    return {
        "step_group_fraction": round(shared / total, 4),
        "cross_rollout_fraction": round(cross / total, 4),
        "step_records": total,
    }


def bench_recurrence(data_dir: Path, num_games: int, group_size: int) -> None:
    for policy in ("random", "expert", "expert_eps"):
        env = gym.make(ENV_ID, data_dir=data_dir, expert=policy != "random", max_steps=50)
        rng = np.random.default_rng(7)
        start = time.perf_counter()
        by_anchor, by_observation, wins = [], [], 0
        for game in range(num_games):
            played = [rollout(env, game, policy, rng) for _ in range(group_size)]
            wins += sum(won for _, won in played)
            group = [records for records, _ in played]
            by_anchor.append([[a for a, _ in traj] for traj in group])
            by_observation.append([[o for _, o in traj] for traj in group])
        elapsed = time.perf_counter() - start
        stats = recurrence(by_anchor)
        emit(
            {
                "what": "recurrence",
                "policy": policy,
                "size": {"groups": num_games, "group_size": group_size, "max_steps": 50},
                "seconds": round(elapsed, 2),
                "throughput": round(stats["step_records"] / elapsed, 2),
                **stats,
                "episodes_won": wins,
                "by_observation": recurrence(by_observation),
                "baseline": "GiGPO paper: over 65% of states recur (ALFWorld, real games)",
            }
        )
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="ALFWorld data root; default: generate games")
    parser.add_argument("--num-games", type=int, default=6, help="games (one per type if 6)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--latency-steps", type=int, default=30, help="steps per game")
    parser.add_argument("--skip", nargs="*", default=[], choices=["latency", "async", "recurrence"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(args.data_dir) if args.data_dir else Path(tmp)
        if not args.data_dir:
            start = time.perf_counter()
            generate_games(data_dir, args.num_games, seed=args.seed)
            elapsed = time.perf_counter() - start
            emit(
                {
                    "what": "generate",
                    "size": {"games": args.num_games},
                    "seconds": round(elapsed, 2),
                    "throughput": round(args.num_games / elapsed, 3),
                    "baseline": None,
                }
            )
        if "latency" not in args.skip:
            bench_latency(data_dir, args.num_games, args.latency_steps)
        if "async" not in args.skip:
            bench_async(data_dir, args.latency_steps * 2)
        if "recurrence" not in args.skip:
            bench_recurrence(data_dir, args.num_games, args.group_size)


if __name__ == "__main__":
    main()
