"""Step records on disk: what the policy saw and did at every step, and how it was scored.

Both trainers write them (the local trainer every ``run.save_rollouts_every`` iterations, the
OpenRLHF path from its estimator), from :class:`~training.records.StepRecords` with their
:class:`~training.advantages.Advantages` and step groups (:func:`record_rows`), and
``gigpo-view RUN_DIR`` shows them. One
file per saved iteration, ``RUN_DIR/rollouts/iteration_000012.jsonl.gz``: gzip-compressed
JSON lines, a header object first, then one object per step record (one model call), in
trajectory order. Files are written whole to a temporary name and then renamed, so a crash
never leaves half a file.

Header: ``{"schema": "gigpo.rollouts", "version": 2, "iteration": 12, "source": "local",
"records": 96, "estimator": "gigpo", "max_chars": 2000, "summary": {...}}`` (the summary is
:func:`training.stats.step_group_summary` of the records, so a viewer of many iterations
reads one line each). Version 2 differs from 1 in the summary only, whose keys are now the
metrics' names (``step_group_coverage``, ``step_group_sizes``, ...); version 1 files are
read too, their summary recomputed from the records.

Record (schema versions 1 and 2; names are :mod:`gigpo_algo`'s argument names, singular):

========================  =====================================================================
``iteration``             int, 0-based training iteration
``group_id``              the episode group (the task): int (local) or str (OpenRLHF)
``traj_id``               the trajectory (one episode), unique in the iteration: int or str
``step``                  int, 0-based position of the record in its trajectory
``observation``           str, the environment's observation the action answered (bounded)
``action``                str, the model's whole response (bounded)
``reward``                float, the step reward
``is_action_valid``       bool
``anchor``                str, the key of the state the action was taken from
``anchor_text``           str or null, that state's text (similarity grouping; bounded)
``step_group_id``         int, the step group of the record (same anchor, same task)
``episode_advantage``     float, A_E: the episode score against its episode group
``step_advantage``        float, A_S (GiGPO: the return against its step group; HGPO: its levels)
``advantage``             float, the value trained on (GiGPO: A_E + step_weight * A_S)
``return``                float, the step's return after penalties (GraphGPO: 10 gamma^d)
========================  =====================================================================

Optional keys (absent from older files): ``next_anchor`` (str) and ``next_anchor_text`` (str
or null, bounded), the state the action led to (the last record's: where the episode ended);
an estimator's own values, :func:`record_rows`' ``extras``: HGPO's ``hgpo_levels`` (per level
``{"k", "group", "size", "advantage"}``), GraphGPO's ``graph_distance`` and
``graph_next_distance`` (the anchor's and the next state's steps to the goal).

Texts longer than ``max_chars`` keep their first ``max_chars`` characters and end with
``" ... [+N chars]"``. The step groups are those every estimator is given
(:func:`training.advantages.step_groups`); GRPO and RLOO have ``step_advantage`` 0, PPO
``episode_advantage`` and ``step_advantage`` 0.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from training.files import atomic_write_bytes, open_regular, own_folder
from training.guarded import MAX_JSONL_BYTES, MAX_LINE_BYTES, GuardError, load_json_line
from training.records import StepRecords
from training.stats import step_group_summary
from training.text import bound_text

ROLLOUTS_DIR = "rollouts"
SCHEMA = "gigpo.rollouts"
SCHEMA_VERSION = 2
#: The versions :func:`read_rollouts` reads (their records are the same).
READABLE_VERSIONS = (1, 2)
#: Default bound on each saved text (observation, action, anchor text), in characters.
DEFAULT_MAX_CHARS = 2000
#: Keys of every record, in file order.
RECORD_KEYS = (
    "iteration", "group_id", "traj_id", "step", "observation", "action", "reward",
    "is_action_valid", "anchor", "anchor_text", "step_group_id", "episode_advantage",
    "step_advantage", "advantage", "return",
)  # fmt: skip
#: The next state's keys, beyond :data:`RECORD_KEYS` where it was recorded (the module doc).
NEXT_KEYS = ("next_anchor", "next_anchor_text")
_FILE = re.compile(r"^iteration_(\d{6,})\.jsonl\.gz$")
_FLOAT_KEYS = ("reward", "episode_advantage", "step_advantage", "advantage", "return")
#: The most bytes a rollout file is read to once unpacked (a larger one is refused).
MAX_ROLLOUT_BYTES = MAX_JSONL_BYTES


class RolloutFileError(ValueError):
    """A rollout file is missing, not gzip, or not in the schema; the message names it."""


def rollout_rows(
    iteration: int,
    *,
    group_ids: Sequence[Any],
    traj_ids: Sequence[Any],
    rewards: Sequence[float],
    is_action_valid: Sequence[bool],
    anchors: Sequence[str],
    anchor_texts: Sequence[str | None],
    observations: Sequence[str],
    actions: Sequence[str],
    step_group_ids: Sequence[int],
    episode_advantages: Sequence[float],
    step_advantages: Sequence[float],
    advantages: Sequence[float],
    returns: Sequence[float],
    max_chars: int = DEFAULT_MAX_CHARS,
    next_anchors: Sequence[str] = (),
    next_anchor_texts: Sequence[str | None] = (),
    extras: Mapping[str, Sequence[Any]] | None = None,
) -> list[dict[str, Any]]:
    """Builds the records of one iteration from per-row columns, all of length N.

    The columns are those of :func:`gigpo_algo.estimators.estimator_advantages` (inputs and
    :class:`~gigpo_algo.advantages.GiGPOResult` fields); rows of one trajectory must be in
    time order (``step`` counts them). ``observations`` / ``actions`` may be empty sequences
    (an OpenRLHF run that did not record texts): then they are saved as ``""``.
    ``next_anchors`` / ``next_anchor_texts``: the next state of each row, or both empty (the
    records then have no ``next_*`` keys). ``extras``: more per-row columns by record key
    (e.g. ``graph_distance``), each value made JSON-plain (numpy to Python, a non-finite
    float to null).

    Raises:
        ValueError: the columns differ in length, or an ``extras`` key is a record key.
    """
    n = len(rewards)
    columns = {
        "group_ids": group_ids, "traj_ids": traj_ids, "is_action_valid": is_action_valid,
        "anchors": anchors, "anchor_texts": anchor_texts, "step_group_ids": step_group_ids,
        "episode_advantages": episode_advantages, "step_advantages": step_advantages,
        "advantages": advantages, "returns": returns,
    }  # fmt: skip
    extras = dict(extras or {})
    optional = {"observations": observations, "actions": actions, "next_anchors": next_anchors,
                "next_anchor_texts": next_anchor_texts}  # fmt: skip
    for name, column in [*columns.items(), *optional.items()]:
        if len(column) != n and not (name in optional and len(column) == 0):
            raise ValueError(f"rollout column {name} has {len(column)} rows, rewards has {n}")
    if len(next_anchors) != len(next_anchor_texts):
        raise ValueError("rollout columns next_anchors and next_anchor_texts: both or neither")
    for key, column in extras.items():
        if key in RECORD_KEYS or key in NEXT_KEYS:
            raise ValueError(f"rollout extras[{key!r}] would replace the record key {key!r}")
        if len(column) != n:
            raise ValueError(f"rollout extras[{key!r}] has {len(column)} rows, rewards has {n}")
    steps: dict[Any, int] = {}
    rows = []
    for i in range(n):
        traj = _plain(traj_ids[i])
        step = steps.get(traj, 0)
        steps[traj] = step + 1
        text = anchor_texts[i]
        rows.append(
            {
                "iteration": int(iteration),
                "group_id": _plain(group_ids[i]),
                "traj_id": traj,
                "step": step,
                "observation": bound_text(observations[i] if observations else "", max_chars),
                "action": bound_text(actions[i] if actions else "", max_chars),
                "reward": _number(rewards[i]),
                "is_action_valid": bool(is_action_valid[i]),
                "anchor": str(anchors[i]),
                "anchor_text": None if text is None else bound_text(text, max_chars),
                "step_group_id": int(step_group_ids[i]),
                "episode_advantage": _number(episode_advantages[i]),
                "step_advantage": _number(step_advantages[i]),
                "advantage": _number(advantages[i]),
                "return": _number(returns[i]),
            }
        )
        if next_anchors:
            after = next_anchor_texts[i]
            rows[-1]["next_anchor"] = str(next_anchors[i])
            rows[-1]["next_anchor_text"] = None if after is None else bound_text(after, max_chars)
        for key, column in extras.items():
            rows[-1][key] = _json_plain(column[i])
    return rows


def record_rows(
    iteration: int,
    records: StepRecords,
    advantages: Any,
    groups: Sequence[int],
    max_chars: int = DEFAULT_MAX_CHARS,
    extras: Mapping[str, Sequence[Any]] | None = None,
) -> list[dict[str, Any]]:
    """:func:`rollout_rows` of step records (their next states too, where recorded), their
    :class:`~training.advantages.Advantages`, their step groups
    (:func:`training.advantages.step_groups`) and the estimator's ``extras`` (per-row
    columns by record key, e.g. ``{"graph_distance": result.distances}``)."""
    return rollout_rows(
        iteration,
        group_ids=records.group_ids,
        traj_ids=records.traj_ids,
        rewards=records.rewards,
        is_action_valid=records.is_action_valid,
        anchors=records.anchors,
        anchor_texts=records.anchor_texts,
        observations=records.observations,
        actions=records.actions,
        step_group_ids=np.asarray(groups, dtype=np.int64),
        episode_advantages=advantages.episode_advantages,
        step_advantages=advantages.step_advantages,
        advantages=advantages.advantages,
        returns=advantages.returns,
        max_chars=max_chars,
        next_anchors=records.next_anchors,
        next_anchor_texts=records.next_anchor_texts,
        extras=extras,
    )


def rollout_path(run_dir: str | os.PathLike[str], iteration: int) -> Path:
    """Where the records of ``iteration`` live under ``run_dir``."""
    return Path(run_dir) / ROLLOUTS_DIR / f"iteration_{int(iteration):06d}.jsonl.gz"


def write_rollouts(
    run_dir: str | os.PathLike[str],
    iteration: int,
    rows: Sequence[dict[str, Any]],
    *,
    source: str = "local",
    estimator: str = "",
    max_chars: int = DEFAULT_MAX_CHARS,
) -> Path:
    """Writes one iteration's records (see the module doc) atomically; returns the path."""
    path = rollout_path(run_dir, iteration)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    own_folder(run_dir, ROLLOUTS_DIR)  # a link planted as rollouts/ is refused
    header = {
        "schema": SCHEMA, "version": SCHEMA_VERSION, "iteration": int(iteration),
        "source": source, "records": len(rows), "estimator": estimator, "max_chars": max_chars,
        "summary": rows_summary(rows),
    }  # fmt: skip
    lines = [json.dumps(header) + "\n", *(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)]
    return atomic_write_bytes(path, gzip.compress("".join(lines).encode("utf-8"), 6))


def read_rollouts(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Reads a file written by :func:`write_rollouts`: ``(header, records)``.

    Raises:
        RolloutFileError: the file is missing, not gzip, cut short, unpacks to over
            :data:`MAX_ROLLOUT_BYTES`, has another schema or version, or a line is not JSON
            under :mod:`training.guarded`'s limits or not a record (the file and line named).
    """
    path, limit = Path(path), MAX_ROLLOUT_BYTES
    try:
        with open_regular(path) as raw, gzip.GzipFile(fileobj=raw, mode="rb") as handle:
            data = handle.read(limit + 1)  # at most one byte past the limit is unpacked
    except FileNotFoundError:
        raise RolloutFileError(f"no rollout file {path}") from None
    except (OSError, EOFError) as exc:
        raise RolloutFileError(f"{path} is not a readable gzip rollout file: {exc}") from None
    if len(data) > limit:
        raise RolloutFileError(f"{path} unpacks to over {limit} bytes, the limit read")
    # one record a line, each ending in "\n" (the last one may lack it); UTF-8 checked per line
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    if not lines:
        raise RolloutFileError(f"{path} is empty")
    header = _json_line(path, 1, lines[0])
    version = header.get("version")
    if (
        header.get("schema") != SCHEMA
        or isinstance(version, bool)
        or version not in READABLE_VERSIONS
    ):
        raise RolloutFileError(
            f"{path}: schema {header.get('schema')!r} version {version!r}, "
            f"expected {SCHEMA!r} version {' or '.join(map(str, READABLE_VERSIONS))}"
        )
    records = [
        _check_record(path, n, _json_line(path, n, line)) for n, line in enumerate(lines[1:], 2)
    ]
    if header.get("records") != len(records):
        raise RolloutFileError(
            f"{path}: header says {header.get('records')} records, the file has {len(records)}"
        )
    return header, records


def read_summary(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The step-group summary of a rollout file (:func:`rows_summary`), from its header
    alone when the header carries it, else from its records."""
    try:
        with open_regular(path) as raw, gzip.GzipFile(fileobj=raw, mode="rb") as handle:
            header = _json_line(Path(path), 1, handle.readline(MAX_LINE_BYTES + 1))
        if header["version"] != SCHEMA_VERSION:
            raise KeyError("summary")  # version 1 named it otherwise: recomputed below
        summary = header["summary"]
        summary["step_group_sizes"] = {int(k): v for k, v in summary["step_group_sizes"].items()}
        return summary
    except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError):
        return rows_summary(read_rollouts(path)[1])


def rollout_files(run_dir: str | os.PathLike[str]) -> dict[int, Path]:
    """The rollout files under ``run_dir``, by iteration, in iteration order."""
    folder = Path(run_dir) / ROLLOUTS_DIR
    found = {}
    if folder.is_dir():
        for path in folder.iterdir():
            match = _FILE.match(path.name)
            if match:
                found[int(match.group(1))] = path
    return dict(sorted(found.items()))


def prune_rollouts(run_dir: str | os.PathLike[str], completed: int) -> list[int]:
    """Deletes the files of iterations ``>= completed`` (written after the checkpoint a run
    resumes from, so the resumed run writes them again); returns their iterations."""
    removed = []
    for iteration, path in rollout_files(run_dir).items():
        if iteration >= completed:
            path.unlink(missing_ok=True)
            removed.append(iteration)
    return removed


def rows_summary(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """:func:`training.stats.step_group_summary` of one iteration's records (a step group is
    a ``(group_id, step_group_id)`` pair; a null advantage, not finite when saved, counts as
    nonzero and positive in neither)."""
    codes: dict[tuple[Any, int], int] = {}
    rows = list(rows)
    ids = [codes.setdefault((r["group_id"], r["step_group_id"]), len(codes)) for r in rows]
    nan = float("nan")
    return step_group_summary(
        ids,
        [nan if r["episode_advantage"] is None else r["episode_advantage"] for r in rows],
        [nan if r["step_advantage"] is None else r["step_advantage"] for r in rows],
    )


# ----------------------------------------------------------------------------- internals
def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    return value if isinstance(value, int | str) and not isinstance(value, bool) else str(value)


def _json_plain(value: Any) -> Any:
    if isinstance(value, np.ndarray | np.generic):
        value = value.tolist()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _json_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_plain(v) for v in value]
    return value


def _number(value: Any) -> float | None:
    number = float(value)
    return number if math.isfinite(number) else None


def _json_line(path: Path, number: int, line: bytes) -> dict[str, Any]:
    try:
        text = line.decode("utf-8")
        return load_json_line(text, str(path), number, nonfinite=True, expect=dict)
    except UnicodeDecodeError as exc:
        raise RolloutFileError(f"{path} line {number} is not UTF-8 text ({exc.reason})") from None
    except GuardError as exc:
        raise RolloutFileError(str(exc)) from None


def _check_record(path: Path, number: int, record: dict[str, Any]) -> dict[str, Any]:
    missing = [key for key in RECORD_KEYS if key not in record]
    if missing:
        raise RolloutFileError(f"{path} line {number}: record lacks {missing}")
    for key in _FLOAT_KEYS:
        value = record[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise RolloutFileError(f"{path} line {number}: {key} must be a number, got {value!r}")
    for key in ("iteration", "step", "step_group_id"):
        if isinstance(record[key], bool) or not isinstance(record[key], int):
            raise RolloutFileError(f"{path} line {number}: {key} must be an int")
    for key in ("observation", "action", "anchor"):
        if not isinstance(record[key], str):
            raise RolloutFileError(f"{path} line {number}: {key} must be a string")
    if not isinstance(record["is_action_valid"], bool):
        raise RolloutFileError(f"{path} line {number}: is_action_valid must be true or false")
    after = (record.get("next_anchor", ""), record.get("next_anchor_text"))
    if not isinstance(after[0], str) or not isinstance(after[1], str | None):
        raise RolloutFileError(f"{path} line {number}: next_anchor(_text) must be a string")
    return record
