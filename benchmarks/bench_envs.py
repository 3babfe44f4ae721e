"""Speed of the gigpo environments: JSON lines on stdout, one object per result.

Measures, for every registered ``gigpo/`` environment:
  * ``reset``: resets per second of one environment in this process (distinct seeds);
  * ``step``: steps per second of one environment in this process, with responses in the
    full ``<think>...</think><action>...</action>`` protocol (about 1 in 10 invalid);
  * ``step_async_group``: environment steps per second of ``make_group_vec(...,
    vectorization="async")`` with one group of 2 worker processes;
and Sokoban room generation (6x6, 1 box) beside gym-sokoban's ``generate_room`` measured in
the same run (``tox -e bench-envs`` installs gym-sokoban; without it the baseline is null).

Run on one core for the targets: ``taskset -c 0 python benchmarks/bench_envs.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
import warnings

import gymnasium as gym
import numpy as np

from gigpo_envs import make_group_vec
from gigpo_envs.sokoban import generate_room, solve
from gigpo_envs.sokoban.room import Layout

STEP_TARGETS = {
    "gigpo/Sokoban-v0": 10_000,
    "gigpo/EZPoints-v0": 50_000,
    "gigpo/Points24-v0": 50_000,
    "gigpo/NumberLine-v0": 50_000,
    "gigpo/Blackjack-v0": 50_000,
}
VOCABULARY = {
    "gigpo/Sokoban-v0": ["up", "down", "left", "right"],
    "gigpo/EZPoints-v0": [*(str(n) for n in range(1, 11)), "+", "-", "*", "/", "(", ")", "="],
    "gigpo/Points24-v0": [*(str(n) for n in range(1, 11)), "+", "-", "*", "/", "(", ")", "="],
    "gigpo/NumberLine-v0": ["+", "-"],
    "gigpo/Blackjack-v0": ["hit", "stand"],
}


def emit(record: dict) -> None:
    record["cpus"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    print(json.dumps(record), flush=True)


def responses(env_id: str, count: int, seed: int) -> list[str]:
    """``count`` model-style responses: legal-looking tokens, about 10% junk."""
    rng = np.random.default_rng(seed)
    words = VOCABULARY[env_id]
    out = []
    for _ in range(count):
        if rng.random() < 0.1:
            out.append("<think>not sure</think> I will not use the tags")
        else:
            out.append(
                f"<think>let me see</think><action>{words[rng.integers(len(words))]}</action>"
            )
    return out


def bench_reset(env_id: str, count: int) -> None:
    env = gym.make(env_id)
    start = time.perf_counter()
    for seed in range(count):
        env.reset(seed=seed)
    seconds = time.perf_counter() - start
    emit(
        {
            "what": "reset",
            "env": env_id,
            "size": count,
            "seconds": seconds,
            "throughput": count / seconds,
            "unit": "resets/s",
            "baseline": None,
        }
    )


def bench_step(env_id: str, count: int) -> None:
    env = gym.make(env_id)
    texts = responses(env_id, count, seed=0)
    env.reset(seed=0)
    episode = 0
    clock = time.perf_counter
    stepping = 0.0
    for text in texts:
        start = clock()
        _, _, terminated, truncated, _ = env.step(text)
        stepping += clock() - start
        if terminated or truncated:
            episode += 1
            env.reset(seed=episode)
    target = STEP_TARGETS[env_id]
    emit(
        {
            "what": "step",
            "env": env_id,
            "size": count,
            "seconds": stepping,
            "throughput": count / stepping,
            "unit": "steps/s",
            "episodes": episode,
            "target": target,
            "meets_target": count / stepping >= target,
            "baseline": None,
        }
    )


def bench_async_group(env_id: str, count: int) -> None:
    vec = make_group_vec(env_id, num_groups=1, group_size=2, seed=0, vectorization="async")
    try:
        texts = responses(env_id, 2 * count, seed=1)
        vec.reset()
        start = time.perf_counter()
        for i in range(count):
            vec.step(texts[2 * i : 2 * i + 2])
        seconds = time.perf_counter() - start
    finally:
        vec.close()
    emit(
        {
            "what": "step_async_group",
            "env": env_id,
            "size": 2 * count,
            "workers": 2,
            "seconds": seconds,
            "throughput": 2 * count / seconds,
            "unit": "env-steps/s",
            "baseline": None,
        }
    )


def _gym_sokoban_generate():
    """Returns gym-sokoban's ``generate_room``, or the reason it is unavailable."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from gym_sokoban.envs.room_utils import generate_room as baseline
    except Exception as error:  # any import failure only disables the baseline
        return None, f"{type(error).__name__}: {error}"
    return baseline, None


def _solvable_in(room_fixed: np.ndarray, room_state: np.ndarray, max_steps: int) -> bool:
    """Converts a gym-sokoban room (0 wall, 1 floor, 2 target, 3/4 box, 5 player) and solves it."""
    height, width = room_fixed.shape
    rows = ["".join("#" if v == 0 else ("O" if v == 2 else "_") for v in row) for row in room_fixed]
    layout = Layout.from_rows(rows)
    flat = room_state.reshape(-1)
    player = int(np.flatnonzero(flat == 5)[0])
    boxes = tuple(int(i) for i in np.flatnonzero((flat == 3) | (flat == 4)))
    return solve(layout, player, boxes, max_depth=max_steps) is not None


def bench_room_generation(count: int, baseline_count: int, max_steps: int = 15) -> None:
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for _ in range(count):
        generate_room(rng, (6, 6), 1, max_steps)
    ours = (time.perf_counter() - start) / count

    baseline_record = None
    baseline, reason = _gym_sokoban_generate()
    if baseline is not None:
        # gym-sokoban draws from the global generators; seed them for a repeatable run.
        random.seed(0)
        np.random.seed(0)  # noqa: NPY002
        generated = solvable = 0
        spent = 0.0
        for _ in range(baseline_count):
            start = time.perf_counter()
            try:
                room_fixed, room_state, _ = baseline(dim=(6, 6), num_steps=20, num_boxes=1)
            except (RuntimeError, RuntimeWarning):
                spent += time.perf_counter() - start
                continue
            spent += time.perf_counter() - start
            generated += 1
            solvable += _solvable_in(room_fixed, room_state, max_steps)
        per_room = spent / max(generated, 1)
        per_solvable = spent / solvable if solvable else None
        baseline_record = {
            "name": "gym_sokoban.envs.room_utils.generate_room",
            "arguments": {"dim": [6, 6], "num_steps": 20, "num_boxes": 1},
            "attempts": baseline_count,
            "rooms": generated,
            "solvable_within_max_steps": solvable,
            "seconds_per_room": per_room,
            "seconds_per_solvable_room": per_solvable,
        }
    reference = baseline_record and (
        baseline_record["seconds_per_solvable_room"] or baseline_record["seconds_per_room"]
    )
    emit(
        {
            "what": "sokoban_room_generation",
            "env": "gigpo/Sokoban-v0",
            "dim_room": [6, 6],
            "num_boxes": 1,
            "max_steps": max_steps,
            "size": count,
            "seconds": ours * count,
            "seconds_per_room": ours,
            "throughput": 1.0 / ours,
            "unit": "rooms/s (every room solvable within max_steps)",
            "baseline": baseline_record,
            "baseline_error": reason,
            "speedup_vs_baseline_per_solvable_room": (reference / ours) if reference else None,
            "target_speedup": 10,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000, help="steps per env (1 process)")
    parser.add_argument("--resets", type=int, default=5_000, help="resets per env")
    parser.add_argument("--async-steps", type=int, default=5_000, help="vector steps, async")
    parser.add_argument("--rooms", type=int, default=5_000, help="rooms generated by gigpo")
    parser.add_argument("--baseline-rooms", type=int, default=500, help="gym-sokoban attempts")
    parser.add_argument("--quick", action="store_true", help="a 20x smaller run")
    args = parser.parse_args()
    scale = 20 if args.quick else 1
    # The self-contained games of issue 3; WebShop, ALFWorld and SearchQA have their own benches.
    for env_id in sorted(STEP_TARGETS):
        bench_reset(env_id, max(args.resets // scale, 10))
        bench_step(env_id, max(args.steps // scale, 10))
        bench_async_group(env_id, max(args.async_steps // scale, 10))
    bench_room_generation(max(args.rooms // scale, 10), max(args.baseline_rooms // scale, 10))


if __name__ == "__main__":
    main()
