"""Playing a pinned suite (:mod:`training.evaluation.suite_file`): its tasks, in batches, resumably.

Every task is played by ``group_size`` rollouts (1: one greedy or sampled episode per task;
G > 1: a GiGPO group, sampled, whose states are grouped as training groups them). After
each batch its episode rows are appended to ``episodes.jsonl``; a run that stops is
resumed by the same command, which replays nothing already written (the run's settings
are in ``run.json`` and must match). Torch's generator is seeded per batch from
``run.seed`` and the batch's first task, so a resumed run samples what an uninterrupted
one would have.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from training.evaluation.rows import parse_row, row_in_suite
from training.evaluation.suite_file import Suite, SuiteError
from training.files import open_append
from training.guarded import MAX_JSONL_BYTES, GuardError, read_limited
from training.local.schema import TrainConfig


def suite_tasks(suite: Suite) -> list[dict[str, Any]]:
    """Every task of the suite, in play order: ``part``, ``seed``, ``column`` (the ALFWorld
    task type; the part's name otherwise) and ``task`` (a game path, a goal or question
    index), checking each part's ``expect`` (the number of games, goals or questions).

    Raises:
        SuiteError: a pinned game that is not in the data, or data of another size.
    """
    import gymnasium as gym

    import gigpo_envs  # noqa: F401  (registers the ids)

    tasks = []
    for part in suite.parts:
        env = gym.make(suite.env["id"], **suite.part_kwargs(part)).unwrapped
        try:
            size, names = _task_space(env)
            part.size = size
            if part.expect is not None and size != part.expect:
                raise SuiteError(
                    f"suite {suite.name}: part {part.name} expects {part.expect} tasks in its "
                    f"data, found {size}; the suite measures the pinned data only"
                )
            kind, value = next(iter(part.tasks.items()))
            if kind == "games":
                index = {name: i for i, name in enumerate(names or [])}
                missing = [g for g in value if g not in index]
                if missing:
                    raise SuiteError(f"suite {suite.name}: game {missing[0]} is not in the data")
                seeds = [index[g] for g in value]
            elif kind == "all_games":
                seeds = _by_type(names or [])
            elif kind == "count":
                if int(value) > size:
                    raise SuiteError(
                        f"suite {suite.name}: part {part.name} plays {value} tasks but its data "
                        f"holds only {size}"
                    )
                seeds = list(range(int(value)))
            else:
                seeds = [int(s) for s in value]
        finally:
            env.close()
        for seed in seeds:
            name = names[seed % size] if names else str(seed % size)
            column = _task_type(name) if names else part.name
            tasks.append({"part": part.name, "seed": seed, "column": column, "task": name})
    return tasks


def play_suite(
    model: Any,
    tokenizer: Any,
    config: TrainConfig,
    suite: Suite,
    tasks: list[dict[str, Any]],
    selected: list[int],
    out: Path,
    *,
    temperature: float,
    top_p: float,
    group_size: int,
    batch_size: int,
    progress: Callable[[int], None] | None = None,
    commit: str = "",
    engine: Any = None,
) -> list[dict[str, Any]]:
    """Plays the ``selected`` tasks not yet in ``out / "episodes.jsonl"``, appending rows.

    Args:
        config: the run's config with the suite's settings in (see :meth:`Suite.overrides`).
        tasks: every task of the suite (:func:`suite_tasks`); a row's ``task_index`` is a
            position in this list, whatever ``selected`` is.
        selected: the positions to play (all, or the first ``--max-episodes`` of each part).
        batch_size: episodes generated at once (``batch_size // group_size`` tasks, >= 1).
        progress: called with the number of tasks already done, then after each batch with
            the number it played.
        commit: the code's version (:func:`code_version`), written into each new row.
        engine: the vLLM engine that samples (``--engine vllm``); None: the hf engine.

    Returns:
        The episode rows of the selected tasks (earlier runs' and this one's), in order.

    Raises:
        SuiteError: an episodes file whose rows are not this suite's tasks, repeat one, or
            are not episode rows (:func:`read_rows`: the line and field named).
    """
    import torch

    from training.local.play import config_envs, play

    path = out / "episodes.jsonl"
    done = read_rows(path, tasks, group_size)
    finished = {row["task_index"] for row in done}
    wanted = set(selected)
    if progress is not None:
        progress(len(finished & wanted))
    per_batch = max(1, batch_size // group_size)
    todo = [i for i in selected if i not in finished]
    for chunk in _chunks(todo, tasks, per_batch):
        part = next(p for p in suite.parts if p.name == tasks[chunk[0]]["part"])
        part_config = copy.deepcopy(config)
        part_config.env.kwargs = suite.part_kwargs(part)
        torch.manual_seed(config.run.seed * 1_000_003 + chunk[0])
        envs = config_envs(part_config, len(chunk), group_size)
        try:
            rollout = play(
                model, tokenizer, envs, part_config, seed=[tasks[i]["seed"] for i in chunk],
                sampling=(temperature, top_p if temperature > 0 else 1.0, 0), engine=engine,
            )  # fmt: skip
        finally:
            envs.close()
        rows = _rows(rollout, [tasks[i] for i in chunk], chunk, group_size)
        for row in rows:
            row["commit"] = commit
        _append(path, rows)
        done += rows
        if progress is not None:
            progress(len(chunk))
    kept = [row for row in done if row["task_index"] in wanted]
    return sorted(kept, key=lambda row: (row["task_index"], row["sample"]))


def read_rows(
    path: Path,
    tasks: list[dict[str, Any]] | None = None,
    group_size: int | None = None,
    *,
    truncate: bool = True,
) -> list[dict[str, Any]]:
    """The episode rows of an earlier run, batch by batch, each checked field by field
    (:mod:`training.evaluation.rows`; with ``tasks`` and ``group_size``, also as rows of
    this suite: its task at that position, a sample within the group, each task's group
    whole). A batch that an interruption cut short (the file's last rows, the last line
    without its newline) is dropped and, with ``truncate``, the file cut back to the whole
    batches before it, so that its tasks are played again, in the same batch.

    Raises:
        SuiteError: a whole line that is not such an episode row, a task sample twice, or
            a file over :data:`~training.guarded.MAX_JSONL_BYTES` (the file, line and field
            named).
    """
    if not path.is_file():
        return []
    try:
        data = read_limited(path, "episodes file", MAX_JSONL_BYTES)
    except GuardError as exc:
        raise SuiteError(f"{exc}; use another --out") from None
    lines = data.splitlines(keepends=True)
    rows: list[dict[str, Any]] = []
    batch: list[dict[str, Any]] = []
    seen: dict[tuple[int, int], int] = {}
    good = size = 0
    for number, line in enumerate(lines, 1):
        if number == len(lines) and not line.endswith(b"\n"):
            break  # a write cut short: the last line
        row, problem = parse_row(line)
        if row is not None:
            problem = _row_here(row, batch, seen, tasks, group_size)
        if row is None or problem:
            raise SuiteError(f"{path}: line {number} is not the episode row that belongs "
                             f"there: {problem}; use another --out")  # fmt: skip
        seen[(row["task_index"], row["sample"])] = number
        batch.append(row)
        size += len(line)
        if len(batch) == row["batch_rows"]:  # a batch counts only when all of it is there
            rows += batch
            good += size
            batch, size = [], 0
    if group_size is not None:
        counts = Counter(row["task_index"] for row in rows)
        for i, count in counts.items():
            if count != group_size:
                raise SuiteError(f"{path}: task {i} has {count} rows, not its group's "
                                 f"{group_size}; use another --out")  # fmt: skip
    if good < len(data) and truncate:
        print(f"{path}: dropped {len(data) - good} bytes after the last whole batch of rows",
              file=sys.stderr)  # fmt: skip
        os.truncate(path, good)  # a regular file: read through the guarded reader above
    return rows


def code_version() -> str:
    """The commit of the checkout the code runs from, else the installed version."""
    import subprocess

    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=10, check=True)  # fmt: skip
        return done.stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != root:
            raise OSError(f"{root} is not a checkout")  # installed inside another repository
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"gigpo {version('gigpo')}"
        except PackageNotFoundError:
            return "unknown"


# ----------------------------------------------------------------------------- internals


def _row_here(
    row: dict[str, Any],
    batch: list[dict[str, Any]],
    seen: dict[tuple[int, int], int],
    tasks: list[dict[str, Any]] | None,
    group_size: int | None,
) -> str:
    """What makes a well-formed ``row`` wrong where it is (after ``batch``'s rows, the
    ``seen`` (task, sample) pairs, in this suite), or ``""``."""
    if tasks is not None and group_size is not None:
        problem = row_in_suite(row, tasks, group_size)
        if problem:
            return problem
    if batch and (row["batch"], row["batch_rows"]) != (batch[0]["batch"], batch[0]["batch_rows"]):
        return (f"batch {row['batch']} begins before batch {batch[0]['batch']} ended "
                f"({len(batch)} of its {batch[0]['batch_rows']} rows)")  # fmt: skip
    key = (row["task_index"], row["sample"])
    if key in seen:
        return f"task {key[0]} sample {key[1]} is there twice (line {seen[key]} too)"
    return ""


def _task_space(env: Any) -> tuple[int, list[str] | None]:
    """(number of tasks, ALFWorld's game paths or None) of one env instance."""
    if hasattr(env, "games"):
        return len(env.games), list(env.games)
    if hasattr(env, "goal_range"):
        return len(env.goal_range), None
    if hasattr(env, "questions"):
        return len(env.questions), None
    raise SuiteError(f"{type(env).__name__} is not an env a suite can play")


def _task_type(game: str) -> str:
    from gigpo_envs.alfworld.games import task_type_of

    return task_type_of(game.split("/")[2])


def _by_type(games: list[str]) -> list[int]:
    """Every game's index, round robin over the task types, so that the first tasks of a
    ``--max-episodes`` look cover every type."""
    queues: dict[str, list[int]] = {}
    for i, game in enumerate(games):
        queues.setdefault(_task_type(game), []).append(i)
    order = []
    for k in range(max((len(q) for q in queues.values()), default=0)):
        order += [q[k] for _, q in sorted(queues.items()) if k < len(q)]
    return order


def _chunks(todo: list[int], tasks: list[dict[str, Any]], size: int) -> list[list[int]]:
    """Consecutive runs of ``todo`` of at most ``size`` tasks, never across parts."""
    chunks: list[list[int]] = []
    for i in todo:
        last = chunks[-1] if chunks else None
        if last and len(last) < size and tasks[last[0]]["part"] == tasks[i]["part"]:
            last.append(i)
        else:
            chunks.append([i])
    return chunks


def _rows(
    rollout: Any, tasks: list[dict[str, Any]], indices: list[int], group_size: int
) -> list[dict[str, Any]]:
    """One row per episode; with a group, the steps of each episode that sit in a step
    group of size >= 2 (the same anchor state in another rollout of the group, or again)."""
    from gigpo_algo.grouping import anchor_groups

    records = rollout.records
    traj = np.asarray(records.traj_ids)
    valid = np.asarray(records.is_action_valid, dtype=bool)
    recurring = np.zeros(len(traj), dtype=bool)
    if group_size > 1 and len(traj):
        ids = anchor_groups(list(records.anchors), np.asarray(records.group_ids))
        _, codes, sizes = np.unique(ids, return_inverse=True, return_counts=True)
        recurring = sizes[codes] >= 2
    rows = []
    for e in range(len(indices) * group_size):
        k, sample = divmod(e, group_size)
        mine = np.flatnonzero(traj == e)
        rows.append({
            "task_index": indices[k], **tasks[k], "sample": sample,
            "batch": indices[0], "batch_rows": len(indices) * group_size,
            "won": bool(rollout.episode_won[e]), "return": float(rollout.episode_returns[e]),
            "length": int(rollout.episode_lengths[e]),
            "valid_steps": int(valid[mine].sum()),
            "recurring_steps": int(recurring[mine].sum()),
            "recurring_later_steps": int(recurring[mine[1:]].sum()),
            "steps": [{"anchor": records.anchors[i], "observation": records.observations[i],
                       "action": records.actions[i],
                       "reward": float(records.rewards[i]),
                       "valid": bool(valid[i])} for i in mine],
        })  # fmt: skip
    return rows


def _append(path: Path, rows: list[dict[str, Any]]) -> None:
    with open_append(path) as handle:  # never through a link planted in its place
        handle.write("".join(json.dumps(row) + "\n" for row in rows).encode())
        handle.flush()
        os.fsync(handle.fileno())
