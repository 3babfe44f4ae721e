"""A suite run's episode rows (``episodes.jsonl``), checked field by field when read back.

:func:`training.evaluation.play.play_suite` writes one row per episode (its ``_rows``); a row
read back counts toward a suite's numbers only when every field is what that writer
writes: the types, and the ranges one episode can have (a ``length`` >= 0, a finite
``return``, ``valid_steps`` within the length, one step entry per step, ...). With the
suite's tasks and group size at hand, :func:`row_in_suite` checks the rest: the task a row
names is the suite's task at that position, and its ``sample`` is within the group.
"""

from __future__ import annotations

import math
from typing import Any

from training.guarded import MAX_LINE_BYTES, GuardError, load_json
from training.text import show

#: An episode row's fields and their types (a float field takes an int too; never a bool).
ROW_FIELDS: dict[str, type] = {
    "task_index": int, "part": str, "seed": int, "column": str, "task": str, "sample": int,
    "batch": int, "batch_rows": int, "won": bool, "return": float, "length": int,
    "valid_steps": int, "recurring_steps": int, "recurring_later_steps": int, "steps": list,
}  # fmt: skip
#: Each entry of a row's ``steps``.
STEP_FIELDS: dict[str, type] = {
    "anchor": str, "observation": str, "action": str, "reward": float, "valid": bool,
}  # fmt: skip
_WHAT = {int: "an int", float: "a finite number", str: "a string", bool: "true or false",
         list: "a list"}  # fmt: skip


def parse_row(line: bytes) -> tuple[dict[str, Any] | None, str]:
    """``(row, "")`` for a line that holds a whole episode row, else ``(None, problem)``:
    the problem names the field (``return must be a finite number, got nan``).

    The line is read by the guarded reader (size, depth, integer digits); NaN and Infinity
    are read, then refused by the field that holds them.
    """
    try:
        row = load_json(line, "the line", max_bytes=MAX_LINE_BYTES, nonfinite=True, expect=dict)
    except GuardError as exc:
        return None, str(exc)
    problem = row_problem(row)
    return (None, problem) if problem else (row, "")


def row_problem(row: dict[str, Any]) -> str:
    """What is wrong with an episode row on its own (types and ranges), or ``""``."""
    problem = _typed(row, ROW_FIELDS, "")
    if problem:
        return problem
    if row.get("commit") is not None and not isinstance(row["commit"], str):
        return f"commit must be a string, got {show(row['commit'])}"
    for key in ("task_index", "seed", "sample", "batch", "length"):
        if row[key] < 0:
            return f"{key} must be >= 0, got {row[key]}"
    length = row["length"]
    bounds = {
        "batch_rows": (1, None),
        "sample": (0, row["batch_rows"] - 1),
        "valid_steps": (0, length),
        "recurring_steps": (0, length),
        "recurring_later_steps": (0, min(row["recurring_steps"], max(0, length - 1))),
    }
    for key, (low, high) in bounds.items():
        if row[key] < low or (high is not None and row[key] > high):
            return f"{key} must be in [{low}, {high}], got {row[key]}"
    if row["batch"] > row["task_index"]:
        return f"batch (its first task, {row['batch']}) is after the row's task {row['task_index']}"
    if len(row["steps"]) != length:
        return f"steps holds {len(row['steps'])} entries for a length of {length}"
    for j, step in enumerate(row["steps"]):
        if not isinstance(step, dict):
            return f"steps[{j}] must be an object, got {show(step)}"
        problem = _typed(step, STEP_FIELDS, f"steps[{j}].")
        if problem:
            return problem
    return ""


def row_in_suite(row: dict[str, Any], tasks: list[dict[str, Any]], group_size: int) -> str:
    """What makes a (well-formed) row not one of this suite run's rows, or ``""``: a task
    position past the suite's tasks, another task there, a sample past the group."""
    i = row["task_index"]
    if i >= len(tasks):
        return f"task_index {i} is past the suite's {len(tasks)} tasks"
    task = tasks[i]
    for key in ("part", "seed", "column", "task"):
        if row[key] != task[key]:
            return (f"a row of task {i} with {key} {show(row[key])}; the suite's task {i} has "
                    f"{show(task[key])}")  # fmt: skip
    if row["sample"] >= group_size:
        return f"sample {row['sample']} is past the group size {group_size}"
    if row["batch_rows"] % group_size:
        return f"batch_rows {row['batch_rows']} is no whole number of groups of {group_size}"
    return ""


def _typed(row: dict[str, Any], fields: dict[str, type], prefix: str) -> str:
    for key, kind in fields.items():
        if key not in row:
            return f"{prefix}{key} is missing"
        value = row[key]
        ok = isinstance(value, kind) or (kind is float and isinstance(value, int))
        if not ok or (kind is not bool and isinstance(value, bool)):
            return f"{prefix}{key} must be {_WHAT[kind]}, got {show(value)}"
        if kind is float and not math.isfinite(value):
            return f"{prefix}{key} must be {_WHAT[kind]}, got {show(value)}"
    return ""
