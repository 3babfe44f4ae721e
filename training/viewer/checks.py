"""What the viewer reads from a run's rollout files, checked before the page uses it.

Every record field the page shows (the optional ones where a record has them), the header's
``estimator`` and ``source`` and its step-group summary are checked for type; a value that
fails is a :class:`~training.record_files.RolloutFileError` that names the file, the line and
the field (``gigpo-view`` exits 2 with it). Used by :mod:`training.viewer.page`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from training.record_files import RolloutFileError
from training.text import show

_T = TypeVar("_T")
SURROGATE = re.compile("[\ud800-\udfff]")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def as_float(value: Any) -> float | None:
    """``value`` as a finite float, or None when it is not a number (bools are not) or does
    not fit one (JSON allows ints of thousands of digits, ``NaN`` and ``Infinity``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


#: The longest group or trajectory id the page shows (an id is never cut: two would merge).
MAX_ID_CHARS = 200


def _is_id(value: Any) -> bool:
    # a group or trajectory id: an int or a string; lone surrogates (JSON can hold them)
    # could not be written to the page, and two ids differing only there would merge
    return _is_int(value) or (
        isinstance(value, str) and len(value) <= MAX_ID_CHARS and not SURROGATE.search(value)
    )


#: The record fields the page reads: what each must hold, and the test of it.
_RECORD_FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "group_id": (f"an int or a string of valid Unicode, at most {MAX_ID_CHARS} chars", _is_id),
    "traj_id": (f"an int or a string of valid Unicode, at most {MAX_ID_CHARS} chars", _is_id),
    "step": ("an int", _is_int),
    "step_group_id": ("an int", _is_int),
    "observation": ("a string", lambda value: isinstance(value, str)),
    "action": ("a string", lambda value: isinstance(value, str)),
    "anchor_text": ("a string or null", lambda value: value is None or isinstance(value, str)),
    "is_action_valid": ("true or false", lambda value: isinstance(value, bool)),
    **{
        key: (
            "a finite number or null",
            lambda value: value is None or as_float(value) is not None,
        )
        for key in ("reward", "episode_advantage", "step_advantage", "advantage", "return")
    },
}


def _number_or_null(value: Any) -> bool:
    return value is None or as_float(value) is not None


def _is_levels(value: Any) -> bool:
    # HGPO's hgpo_levels: one {"k", "group", "size", "advantage"} object per level
    return isinstance(value, list) and all(
        isinstance(level, dict)
        and all(_is_int(level.get(key)) for key in ("k", "group", "size"))
        and level["size"] >= 0
        and _number_or_null(level.get("advantage"))
        for level in value
    )


#: Record fields the page shows where a file has them (the next state, the estimators' own).
_OPTIONAL_FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "next_anchor": ("a string", lambda value: isinstance(value, str)),
    "next_anchor_text": ("a string or null", lambda value: value is None or isinstance(value, str)),
    "graph_distance": ("a finite number or null", _number_or_null),
    "graph_next_distance": ("a finite number or null", _number_or_null),
    "hgpo_levels": ('a list of {"k", "group", "size", "advantage"} objects', _is_levels),
}


def group_key(group_id: int | str) -> str:
    """The text that names a group in the page: its ``data-group`` and, percent-encoded, its
    ``#group=`` address."""
    return str(group_id)


def check_header(path: Path, header: dict[str, Any]) -> None:
    for key in ("estimator", "source"):
        value = header.get(key)
        if value is not None and not isinstance(value, str):
            raise RolloutFileError(
                f"{path} line 1 (header): {key} must be a string, got {show(value)}"
            )


def check_records(path: Path, records: list[dict[str, Any]]) -> None:
    """Raises RolloutFileError naming the line and field of the first record the page cannot
    show, or of a group id that reads as another's (``1`` and ``"1"``)."""
    groups: dict[str, tuple[Any, int]] = {}
    for line, record in enumerate(records, 2):  # line 1 is the header
        for key, (expected, valid) in _RECORD_FIELDS.items():
            if key not in record:
                raise RolloutFileError(f"{path} line {line}: record lacks {key}")
            if not valid(record[key]):
                raise RolloutFileError(
                    f"{path} line {line}: {key} must be {expected}, got {show(record[key])}"
                )
        for key, (expected, valid) in _OPTIONAL_FIELDS.items():
            if key in record and not valid(record[key]):
                raise RolloutFileError(
                    f"{path} line {line}: {key} must be {expected}, got {show(record[key])}"
                )
        group_id = record["group_id"]
        first, first_line = groups.setdefault(group_key(group_id), (group_id, line))
        if type(first) is not type(group_id):
            raise RolloutFileError(
                f"{path} line {line}: group_id {group_id!r} reads as group_id {first!r} of "
                f"line {first_line}; a file's group ids must be all ints or all strings"
            )


def checked_summary(path: Path, summary: Any) -> dict[str, Any]:
    """The step-group summary of a rollout file's header with the types the page needs; raises
    RolloutFileError naming the field when it has others."""
    where = f"{path} line 1 (header): summary"
    if not isinstance(summary, dict):
        raise RolloutFileError(f"{where} must be an object, got {show(summary)}")
    checked: dict[str, Any] = {}
    for key in ("records", "step_groups", "both_nonzero"):
        value = summary.get(key)
        if not _is_int(value) or value < 0:
            raise RolloutFileError(f"{where}.{key} must be an int >= 0, got {show(value)}")
        checked[key] = value
    for key in ("step_group_coverage", "sign_disagreement"):
        value = as_float(summary.get(key))
        if value is None or not 0.0 <= value <= 1.0:
            raise RolloutFileError(
                f"{where}.{key} must be a number from 0 to 1, got {show(summary.get(key))}"
            )
        checked[key] = value
    histogram = summary.get("step_group_sizes")
    if not isinstance(histogram, dict) or not all(
        _is_int(size) and size >= 1 and _is_int(count) and count >= 0
        for size, count in histogram.items()
    ):
        raise RolloutFileError(
            f"{where}.step_group_sizes must be an object of sizes >= 1 to counts >= 0, got "
            f"{show(histogram)}"
        )
    checked["step_group_sizes"] = dict(histogram)
    return checked


def read_guarded(path: Path, read: Callable[[Path], _T]) -> _T:
    """``read(path)``, with what gzip and json raise past read_rollouts' own checks (a line
    nested too deeply, a number of thousands of digits, a file too large for memory) turned
    into a RolloutFileError that names the file."""
    try:
        return read(path)
    except RolloutFileError:
        raise
    except RecursionError:
        raise RolloutFileError(f"{path}: a line is nested too deeply to read") from None
    except MemoryError:
        raise RolloutFileError(f"{path}: too large to read into memory") from None
    except (OSError, EOFError, ValueError) as exc:
        raise RolloutFileError(f"{path} is not a readable rollout file: {exc}") from None
