"""Size of the saved rollouts and of the viewer's page: JSON lines on stdout.

* ``view_alfworld_iteration``: an ALFWorld-sized iteration (default 16 groups x 8
  trajectories x 50 steps = 6,400 step records) played on real generated ALFWorld games by a
  random policy over the admissible actions, each response written as a short think + action
  (about the length of a real agent's), scored with :func:`gigpo_algo.gigpo_advantages`;
  reports the rollout file's size on disk, the page's size, and the seconds to write both.
  The baseline is the same page with every group rendered into the live document instead of
  inert templates (what the browser would lay out at once), measured as its DOM cell count.
* ``view_run``: the same sizes for an existing run directory (``--run-dir``, e.g. the quick
  start's ``runs/quickstart/gigpo``).

Needs the ``alfworld`` extra: ``python benchmarks/bench_view.py [--run-dir DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import gigpo_envs  # noqa: F401  (registers the envs)
from gigpo_algo.advantages import gigpo_advantages
from gigpo_envs.alfworld.generate import generate_games
from training.record_files import rollout_files, rollout_rows, write_rollouts
from training.viewer.page import write_page


def emit(record: dict) -> None:
    record["cpus"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    print(json.dumps(record), flush=True)


def play(games_dir: Path, groups: int, group_size: int, steps: int, seed: int) -> dict:
    """Plays ``groups`` tasks x ``group_size`` episodes of at most ``steps`` steps."""
    rng = np.random.default_rng(seed)
    env = gym.make("gigpo/ALFWorld-v0", data_dir=games_dir, max_steps=steps)
    columns: dict[str, list] = {
        k: []
        for k in (
            "group_ids", "traj_ids", "rewards", "is_action_valid", "anchors",
            "anchor_texts", "observations", "actions",
        )
    }  # fmt: skip
    for group in range(groups):
        for k in range(group_size):
            traj = group * group_size + k
            observation, info = env.reset(seed=seed + group)  # one task per group
            for _ in range(steps):
                choice = info["admissible_actions"][rng.integers(len(info["admissible_actions"]))]
                response = (
                    f"<think>The task needs me to look around; I will {choice} and see what "
                    f"is there.</think><action>{choice}</action>"
                )
                columns["group_ids"].append(group)
                columns["traj_ids"].append(traj)
                columns["anchors"].append(info["anchor"])
                columns["anchor_texts"].append(info.get("anchor_text"))
                columns["observations"].append(observation)
                columns["actions"].append(response)
                observation, reward, terminated, truncated, info = env.step(response)
                columns["rewards"].append(float(reward))
                columns["is_action_valid"].append(bool(info["is_action_valid"]))
                if terminated or truncated:
                    break
    env.close()
    return columns


def measure(run_dir: Path, what: str, extra: dict) -> None:
    started = time.perf_counter()
    path, info = write_page(run_dir)
    seconds = time.perf_counter() - started
    text = path.read_text(encoding="utf-8")
    rollout = rollout_files(run_dir)[info["iteration"]]
    emit({
        "what": what, **extra, "records": info["records"],
        "rollout_file_bytes": rollout.stat().st_size,
        "rollout_files": len(rollout_files(run_dir)),
        "rollout_dir_bytes": sum(p.stat().st_size for p in rollout_files(run_dir).values()),
        "page_bytes": info["bytes"], "page_seconds": seconds,
        "live_cells_when_one_group_open": max(
            text.count('class="step') // max(text.count("<template"), 1), 0
        ),
        "baseline": {"live_cells_all_groups_rendered": text.count('class="step')},
    })  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-dir", help="also measure this run directory")
    parser.add_argument("--keep", help="copy the ALFWorld-sized run (rollouts and page) here")
    args = parser.parse_args()
    if args.run_dir:
        measure(Path(args.run_dir), "view_run", {"run_dir": args.run_dir})
    with tempfile.TemporaryDirectory() as tmp:
        games = Path(tmp) / "games"
        generate_games(games, num_games=args.groups, seed=args.seed)
        started = time.perf_counter()
        columns = play(games, args.groups, args.group_size, args.steps, args.seed)
        play_seconds = time.perf_counter() - started
        result = gigpo_advantages(
            np.asarray(columns["rewards"]), np.asarray(columns["traj_ids"]),
            np.asarray(columns["group_ids"]), columns["anchors"],
        )  # fmt: skip
        rows = rollout_rows(
            0, **columns, step_group_ids=result.step_group_ids,
            episode_advantages=result.episode_advantages,
            step_advantages=result.step_advantages, advantages=result.advantages,
            returns=result.returns,
        )  # fmt: skip
        run = Path(tmp) / "run"
        started = time.perf_counter()
        write_rollouts(run, 0, rows, estimator="gigpo")
        write_seconds = time.perf_counter() - started
        measure(run, "view_alfworld_iteration", {
            "groups": args.groups, "group_size": args.group_size, "max_steps": args.steps,
            "play_seconds": play_seconds, "rollout_write_seconds": write_seconds,
            "mean_observation_chars": float(np.mean([len(o) for o in columns["observations"]])),
        })  # fmt: skip
        if args.keep:
            shutil.copytree(run, args.keep, dirs_exist_ok=True)


if __name__ == "__main__":
    main()
