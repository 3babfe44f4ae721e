"""A suite's numbers in the paper's layout: per-column cells with 95% intervals, as
``summary.json`` and a markdown table; ``--compare`` puts several runs in one table.

Columns by layout (the GiGPO paper's tables):

* ``alfworld``: success (%) for All and each task type: Pick, Look, Clean, Heat, Cool, Pick2;
* ``webshop``: Score (the mean purchase score x 100) and Success (%);
* ``searchqa``: exact match (%) per dataset (the suite's parts) and Avg, their mean.

A cell is ``value [low, high] n=tasks``. A success rate's interval is Wilson's, over
episodes when each task is played once; with ``--group-size G > 1`` over tasks, each task
one trial whose outcome is its share of wins (the G episodes of a task are not
independent, so counting them as G trials would make the interval too narrow). A score's
interval is the t interval over per-task means (none for one task). Avg's interval
combines its parts' standard errors, read off their intervals (normal approximation).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from training.evaluation.play import read_rows
from training.evaluation.suite_file import SuiteError
from training.guarded import GuardError, read_json_file
from training.stats import Z95, mean_ci, sign_test, wilson_interval
from training.text import bound_text, show

#: ALFWorld's task types as the paper's columns.
ALFWORLD_COLUMNS = {
    "pick_and_place_simple": "Pick",
    "look_at_obj_in_light": "Look",
    "pick_clean_then_place_in_recep": "Clean",
    "pick_heat_then_place_in_recep": "Heat",
    "pick_cool_then_place_in_recep": "Cool",
    "pick_two_obj_and_place": "Pick2",
}


def cell(values_by_task: list[list[float]], proportion: bool) -> dict[str, Any]:
    """``{"value", "low", "high", "tasks", "episodes"}`` in percent for per-episode values
    (0/1 for a proportion, else scores in [0, 1]) grouped by task."""
    if not values_by_task:
        return {"value": None, "low": None, "high": None, "tasks": 0, "episodes": 0}
    flat = [v for task in values_by_task for v in task]
    value = float(np.mean(flat))
    means = [float(np.mean(task)) for task in values_by_task]
    if proportion and all(len(task) == 1 for task in values_by_task):
        low, high = wilson_interval(int(round(sum(flat))), len(flat))
    elif proportion:  # a group per task: each task one trial, its share of wins its outcome
        low, high = wilson_interval(sum(means), len(means))
    elif len(means) >= 2:
        mean, half = mean_ci(means)
        low, high = max(0.0, mean - half), min(1.0, mean + half)
    else:
        return {"value": 100 * value, "low": None, "high": None, "tasks": 1,
                "episodes": len(flat)}  # fmt: skip
    return {"value": 100 * value, "low": 100 * low, "high": 100 * high,
            "tasks": len(values_by_task), "episodes": len(flat)}  # fmt: skip


def summarize(layout: str, parts: list[str], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The suite's cells (``columns``: name -> :func:`cell`) and overall numbers from its
    episode rows (:func:`training.evaluation.play.play_suite`)."""
    by_task: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_task.setdefault(row["task_index"], []).append(row)
    groups = list(by_task.values())

    def won(keep: Any) -> list[list[float]]:
        return [[float(r["won"]) for r in g] for g in groups if keep(g[0])]

    columns: dict[str, dict[str, Any]] = {}
    if layout == "alfworld":
        columns["All"] = cell(won(lambda r: True), True)
        for task_type, name in ALFWORLD_COLUMNS.items():
            columns[name] = cell(won(lambda r, t=task_type: r["column"] == t), True)
    elif layout == "webshop":
        columns["Score"] = cell([[r["return"] for r in g] for g in groups], False)
        columns["Success"] = cell(won(lambda r: True), True)
    else:
        for part in parts:
            columns[part] = cell(won(lambda r, p=part: r["part"] == p), True)
        columns["Avg"] = _average([columns[p] for p in parts])
    steps = sum(r["length"] for r in rows)
    grouped = steps > 0 and any(r["sample"] > 0 for r in rows)
    return {
        "columns": columns,
        "success_rate": float(np.mean([r["won"] for r in rows])) if rows else None,
        "mean_return": float(np.mean([r["return"] for r in rows])) if rows else None,
        "valid_action_rate": sum(r["valid_steps"] for r in rows) / steps if steps else None,
        "mean_episode_length": steps / len(rows) if rows else None,
        "episodes": len(rows),
        "tasks": len(groups),
        "steps": steps,
        # GiGPO's own statistic: the share of step records whose state recurs in its group.
        "step_group_coverage": (sum(r["recurring_steps"] for r in rows) / steps
                                if grouped else None),
        # The same without each episode's first step (shared by the whole group by design).
        "step_group_coverage_after_first": (
            sum(r["recurring_later_steps"] for r in rows) / (steps - len(rows))
            if grouped and steps > len(rows) else None),
    }  # fmt: skip


def format_cell(c: dict[str, Any]) -> str:
    if c.get("value") is None:
        return "-"
    if c.get("low") is None:
        return f"{c['value']:.1f}"
    return f"{c['value']:.1f} [{c['low']:.1f}, {c['high']:.1f}] n={c['tasks']}"


def row_label(summary: dict[str, Any]) -> list[str]:
    decoding = "greedy" if summary["temperature"] == 0 else f"T={summary['temperature']:g}"
    if summary.get("group_size", 1) > 1:
        decoding += f" x{summary['group_size']}"
    if summary.get("max_new_tokens") != summary.get("suite_max_new_tokens", summary.get(
            "max_new_tokens")):  # fmt: skip
        decoding += f", {summary['max_new_tokens']} tokens"
    return [str(summary["model"]), summary["prompt"], decoding]


def markdown_table(summaries: list[dict[str, Any]]) -> str:
    """One markdown table: a row per summary (same suite), the layout's columns, and a
    line under it naming the suite, its data hash and each run's commit."""
    first = summaries[0]
    names = list(first["columns"])
    extra = ["states recur"] if any(s.get("step_group_coverage") is not None
                                    for s in summaries) else []  # fmt: skip
    head = ["model", "prompt", "decoding", *names, *extra]
    lines = ["| " + " | ".join(map(_cell_text, head)) + " |", "|" + " --- |" * len(head)]
    for s in summaries:
        cells = [format_cell(s["columns"].get(n, {})) for n in names]
        if extra:
            coverage = s.get("step_group_coverage")
            cells.append("-" if coverage is None else f"{100 * coverage:.1f}%")
        lines.append("| " + " | ".join(map(_cell_text, [*row_label(s), *cells])) + " |")
    partial = [s["model"] for s in summaries if not s.get("complete", True)]
    lines.append("")
    lines.append(
        f"Suite `{first['suite']}` v{first['suite_version']}, data sha256 "
        f"`{first['data']['sha256'][:12]}`"
        + ("" if first["data"]["pinned"] else " (hashed at run time, not pinned)")
        + "; commits: "
        + ", ".join(sorted({f"`{s['commit']}`" for s in summaries}))
        + ". Cells: % [95% interval] n=tasks."
        + (f" Partial runs (--max-episodes): {', '.join(partial)}." if partial else "")
    )
    return "\n".join(lines) + "\n"


def _cell_text(text: str) -> str:
    """``text`` as one markdown table cell: ``|`` escaped (``\\|``, shown as ``|``), line
    breaks as spaces (a part name or model path holding either would break the row)."""
    return " ".join(str(text).replace("|", "\\|").splitlines())


def compare(dirs: list[str | Path]) -> str:
    """The table of several runs' ``summary.json`` (one suite, one data hash).

    Raises:
        SuiteError: a folder without a suite summary, a summary or episode row whose fields
            are not a suite run's (:func:`check_summary`, :func:`training.evaluation.play.
            read_rows`: the file and field named), or runs of different suites or data.
    """
    summaries: list[dict[str, Any]] = []
    keys: tuple[Any, ...] = ()
    for d in dirs:
        path = Path(d) / "summary.json"
        try:
            summary = read_json_file(path, f"--compare {d}:")
        except GuardError as exc:
            raise SuiteError(f"{exc}: no suite summary") from None
        problem = check_summary(summary)
        if problem:
            raise SuiteError(f"--compare {d}: {path} is no suite summary: {problem}")
        key = (summary["suite"], summary["suite_version"], summary["data"]["sha256"])
        if summaries and key != keys:
            raise SuiteError(
                f"--compare {d}: suite {key[0]} v{key[1]} on data {key[2][:12]} is not what "
                f"{dirs[0]} measured ({keys[0]} v{keys[1]} on data {keys[2][:12]})"
            )
        keys = key
        summaries.append(summary)
    if not summaries:
        raise SuiteError("--compare needs at least one run folder")
    try:
        table = markdown_table(summaries)
        labels = [", ".join(row_label(s)) for s in summaries]
    except (KeyError, TypeError, AttributeError) as exc:
        raise SuiteError(f"--compare: a summary.json lacks a suite run's field ({exc!r})") from exc
    outcomes = [_task_outcomes(Path(d) / "episodes.jsonl", s.get("group_size", 1))
                for d, s in zip(dirs, summaries, strict=True)]  # fmt: skip
    lines = [paired_line(labels[0], label, outcomes[0], mine)
             for label, mine in zip(labels[1:], outcomes[1:], strict=True)]  # fmt: skip
    if lines:
        table += "\nPaired on the tasks both runs played (success, each run minus the first):\n"
        table += "".join(f"- {line}\n" for line in lines)
    return table


def paired_line(first: str, label: str, a: dict[int, float], b: dict[int, float]) -> str:
    """``label`` against ``first`` on their shared tasks: the mean difference in success
    (points) with its 95% t interval over tasks, the tasks each does better on, and the
    exact two-sided sign test of those counts.

    Args:
        a, b: task position -> success (the share of the task's episodes won).
    """
    shared = sorted(set(a) & set(b))
    if not shared:
        return f"`{label}` vs `{first}`: no task in common"
    diffs = [b[t] - a[t] for t in shared]
    mean, half = mean_ci(diffs)
    better, worse = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    return (f"`{label}` vs `{first}`: {100 * mean:+.1f} points [{100 * (mean - half):+.1f}, "
            f"{100 * (mean + half):+.1f}] over {len(shared)} tasks; better on {better}, worse "
            f"on {worse} (sign test p = {sign_test(better, worse):.3g})")  # fmt: skip


def check_summary(summary: dict[str, Any]) -> str:
    """What makes ``summary`` (a ``summary.json``, read back) not a suite run's summary as
    :func:`markdown_table` reads it, naming the field; ``""`` when it is one."""
    fields = {"suite": str, "suite_version": int, "model": str, "prompt": str,
              "temperature": float, "commit": str, "columns": dict, "data": dict}  # fmt: skip
    optional = {"group_size": int, "max_new_tokens": int, "suite_max_new_tokens": int,
                "step_group_coverage": float, "complete": bool}  # fmt: skip
    problem = _fields(summary, fields, "", required=True) or _fields(summary, optional, "")
    if problem:
        return problem
    data = summary["data"]
    problem = _fields(data, {"sha256": str, "pinned": bool}, "data.", required=True)
    if problem or summary["temperature"] < 0 or summary.get("group_size", 1) < 1:
        return problem or "temperature must be >= 0 and group_size >= 1"
    for name, c in summary["columns"].items():
        where = f"columns.{bound_text(name, 60)}."
        if not isinstance(c, dict):
            return f"{where[:-1]} must be an object, got {show(c)}"
        problem = _fields(c, {"value": float, "low": float, "high": float, "tasks": int}, where)
        if problem:
            return problem
    return ""


def _fields(obj: dict[str, Any], kinds: dict[str, type], where: str, required: bool = False) -> str:
    """The first field of ``obj`` that is not its kind (None allowed where not required; a
    float is finite, an int or float never a bool), or ``""``."""
    for key, kind in kinds.items():
        value = obj.get(key)
        if value is None and not required:
            continue
        ok = isinstance(value, kind) or (kind is float and isinstance(value, int))
        if not ok or isinstance(value, bool) is not (kind is bool) or (
                kind is float and not math.isfinite(value)):  # fmt: skip
            what = {str: "a string", int: "an int", float: "a finite number", dict: "an object",
                    bool: "true or false"}[kind]  # fmt: skip
            return f"{where}{key} must be {what}, got {show(value)}"
    return ""


def _task_outcomes(path: Path, group_size: int) -> dict[int, float]:
    """task position -> share of its episodes won, from a run's episode rows, each checked
    (:func:`training.evaluation.play.read_rows`, read only: nothing is cut)."""
    if not path.is_file():
        raise SuiteError(f"--compare: no episode rows in {path}")
    won: dict[int, list[float]] = {}
    for row in read_rows(path, group_size=group_size, truncate=False):
        won.setdefault(row["task_index"], []).append(float(row["won"]))
    return {t: float(np.mean(v)) for t, v in won.items()}


def _average(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean of the cells' values; its interval from their standard errors."""
    present = [c for c in cells if c["value"] is not None and c["low"] is not None]
    if not present:
        return {"value": None, "low": None, "high": None, "tasks": 0, "episodes": 0}
    value = float(np.mean([c["value"] for c in present]))
    se = math.sqrt(sum(((c["high"] - c["low"]) / (2 * Z95)) ** 2 for c in present)) / len(present)
    return {"value": value, "low": max(0.0, value - Z95 * se), "high": min(100.0, value + Z95 * se),
            "tasks": sum(c["tasks"] for c in present),
            "episodes": sum(c["episodes"] for c in present)}  # fmt: skip
