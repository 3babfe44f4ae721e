"""Generate new ALFWorld games offline, in ALFWorld's own data layout.

Usage::

    python -m gigpo_envs.alfworld.generate --out DIR --num-games N --seed S \\
        [--task-types pick_and_place_simple look_at_obj_in_light ...] [--split train]

writes ``DIR/json_2.1.1/<split>/<task_type>-<object>-None-<target>-<scene>/trial_G<seed>_<i>/``
with ``game.tw-pddl`` (ALFRED's domain and grammar from the ``alfworld`` wheel, the sampled
problem, ``"solvable": true``) and ``traj_data.json``. Game ``i`` has task type
``task_types[i % len(task_types)]``, so with ``N >= len(task_types)`` every type appears.
Every game is played by ``alfworld``'s hand-coded expert before it is kept (a game the expert
cannot win within ``--max-expert-steps`` is re-drawn), and at the end the whole tree is
loaded with ``alfworld``'s ``AlfredTWEnv`` to check that it lists every game. The output is a
function of the arguments: the same seed writes the same files.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gigpo_envs.alfworld.games import (
    DATA_VERSION,
    GAME_FILE,
    SPLITS,
    TASK_TYPES,
    TRAJ_FILE,
    alfred_logic_files,
    normalize_task_types,
)
from gigpo_envs.alfworld.problem import Scene, problem_pddl, sample_scene
from gigpo_envs.alfworld.session import TextWorldSession

MAX_ATTEMPTS = 50


@dataclass(frozen=True)
class GeneratedGame:
    """One written game: its path relative to the output root, type and expert steps."""

    path: str
    task_type: str
    room: str
    expert_steps: int


def expert_steps_to_win(session: TextWorldSession, game_file: Path, max_steps: int) -> int | None:
    """Plays the hand-coded expert on ``game_file``; its steps to win, or None if it fails."""
    session.reset(game_file, expert_seed=0)
    for step in range(1, max_steps + 1):
        action = session.expert_action()
        if action is None:
            return None
        session.step(action)
        if session.won:
            return step
    return None


def _write_game(trial_dir: Path, scene: Scene, name: str, solvable: bool) -> Path:
    domain_file, grammar_file = alfred_logic_files()
    grammar = grammar_file.read_text().replace("UNKNOWN GOAL", scene.task_desc)
    trial_dir.mkdir(parents=True, exist_ok=True)
    game = {
        "pddl_domain": domain_file.read_text(),
        "grammar": grammar,
        "pddl_problem": problem_pddl(scene, name),
        "solvable": solvable,
    }
    (trial_dir / GAME_FILE).write_text(json.dumps(game))
    (trial_dir / TRAJ_FILE).write_text(json.dumps(scene.traj_data(), indent=1))
    return trial_dir / GAME_FILE


def generate_games(
    out: str | Path,
    num_games: int,
    seed: int = 0,
    task_types: Sequence[str] | None = None,
    split: str = "train",
    max_expert_steps: int = 50,
) -> list[GeneratedGame]:
    """Writes ``num_games`` verified games under ``out``; returns what it wrote, in order.

    Args:
      out: the data root (``data_dir`` of ``gigpo/ALFWorld-v0``); created if missing.
      num_games: how many games (>= 1).
      seed: the generator seed (>= 0); game ``i`` draws from ``default_rng([seed, i, try])``.
      task_types: names or ALFWorld ids (1..6); None for all six.
      split: the split directory to write (``train``, ``valid_seen``, ``valid_unseen``).
      max_expert_steps: a game is kept only if the expert wins it within this many steps.

    Raises:
      ValueError: bad arguments. RuntimeError: no winnable game after many tries, or the
      written tree does not load in ``AlfredTWEnv``.
    """
    if isinstance(num_games, bool) or not isinstance(num_games, int) or num_games < 1:
        raise ValueError(f"num_games must be an int >= 1, got {num_games!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if isinstance(max_expert_steps, bool) or int(max_expert_steps) < 1:
        raise ValueError(f"max_expert_steps must be >= 1, got {max_expert_steps!r}")
    types = normalize_task_types(task_types)
    root = Path(out).expanduser().resolve()
    if root.exists() and not root.is_dir():
        raise ValueError(f"--out {root} exists and is not a directory")
    split_dir = root / DATA_VERSION / split
    session = TextWorldSession(expert=True)
    written: list[GeneratedGame] = []
    try:
        for index in range(num_games):
            task_type = types[index % len(types)]
            written.append(
                _one_game(session, split_dir, root, seed, index, task_type, max_expert_steps)
            )
    finally:
        session.close()
    _check_alfred_tw_env(root, split, [game.path for game in written])
    return written


def _one_game(
    session: TextWorldSession,
    split_dir: Path,
    root: Path,
    seed: int,
    index: int,
    task_type: str,
    max_expert_steps: int,
) -> GeneratedGame:
    for attempt in range(MAX_ATTEMPTS):
        rng = np.random.default_rng([seed, index, attempt])
        scene = sample_scene(rng, task_type)
        trial_dir = split_dir / scene.task_dir_name / f"trial_G{seed}_{index:05d}"
        name = f"gigpo_{seed}_{index}"
        game_file = _write_game(trial_dir, scene, name, solvable=False)
        steps = expert_steps_to_win(session, game_file, max_expert_steps)
        if steps is not None:
            _write_game(trial_dir, scene, name, solvable=True)
            return GeneratedGame(
                game_file.relative_to(root).as_posix(), task_type, scene.room, steps
            )
        shutil.rmtree(trial_dir)
        if not any(trial_dir.parent.iterdir()):
            trial_dir.parent.rmdir()
    raise RuntimeError(
        f"no {task_type} game that the expert wins in {max_expert_steps} steps after "
        f"{MAX_ATTEMPTS} tries (seed {seed}, game {index})"
    )


def _check_alfred_tw_env(root: Path, split: str, games: list[str]) -> None:
    """Loads the tree with ``alfworld``'s ``AlfredTWEnv``; raises unless it lists ``games``."""
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    train_eval = {
        "train": "train",
        "valid_seen": "eval_in_distribution",
        "valid_unseen": "eval_out_of_distribution",
    }[split]
    path = str(root / DATA_VERSION / split)
    config = {
        "env": {"goal_desc_human_anns_prob": 0, "task_types": list(range(1, 7))},
        "dataset": {
            "data_path": path,
            "eval_id_data_path": path,
            "eval_ood_data_path": path,
            "num_train_games": -1,
            "num_eval_games": -1,
        },
    }
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        listed = AlfredTWEnv(config, train_eval=train_eval).game_files
    listed_games = {Path(f).resolve().relative_to(root).as_posix() for f in listed}
    missing = sorted(set(games) - listed_games)
    if missing:
        raise RuntimeError(f"AlfredTWEnv does not list {len(missing)} written games: {missing[:3]}")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; prints one JSON line per game and a summary line."""
    parser = argparse.ArgumentParser(
        prog="python -m gigpo_envs.alfworld.generate",
        description="Generate ALFWorld games (json_2.1.1 layout), verified by the expert.",
    )
    parser.add_argument("--out", required=True, help="data root to write json_2.1.1/ into")
    parser.add_argument("--num-games", type=int, required=True, help="number of games (>= 1)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (>= 0)")
    parser.add_argument(
        "--task-types", nargs="+", default=None, metavar="TYPE", help=f"subset of {TASK_TYPES}"
    )
    parser.add_argument("--split", default="train", choices=SPLITS)
    parser.add_argument("--max-expert-steps", type=int, default=50)
    args = parser.parse_args(argv)
    try:
        games = generate_games(
            args.out,
            args.num_games,
            seed=args.seed,
            task_types=args.task_types,
            split=args.split,
            max_expert_steps=args.max_expert_steps,
        )
    except ValueError as error:
        parser.error(str(error))
    for game in games:
        print(json.dumps(game.__dict__))
    counts = {
        t: sum(g.task_type == t for g in games) for t in dict.fromkeys(g.task_type for g in games)
    }
    print(
        json.dumps(
            {"out": str(Path(args.out).resolve()), "games": len(games), "task_types": counts}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
