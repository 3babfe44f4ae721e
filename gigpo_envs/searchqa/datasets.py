"""Question sets for search QA: one loader for the layouts that papers publish.

* Search-R1 / FlashRAG: JSON lines or parquet with ``question`` and ``golden_answers``
  (a list, or a string);
* HotpotQA: a JSON list of ``{"question", "answer"}`` (``_id`` or ``id`` optional);
* Bamboogle: CSV with ``Question`` and ``Answer`` columns (any case).

Rows with ``answer`` or ``answers`` instead of ``golden_answers`` are read too.
"""

from __future__ import annotations

import csv
import functools
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class DatasetError(ValueError):
    """A question file is missing, of an unknown kind, or holds a bad row."""


@dataclass(frozen=True)
class QAItem:
    """One question: a stable id, the question text and its accepted answers."""

    id: str
    question: str
    answers: tuple[str, ...]


def _answers(row: Mapping[str, Any], where: str) -> tuple[str, ...]:
    for key in ("golden_answers", "answers", "answer"):
        if key in row:
            value = row[key]
            break
    else:
        raise DatasetError(f"{where}: no 'golden_answers', 'answers' or 'answer' field")
    if hasattr(value, "tolist"):  # numpy arrays from parquet readers
        value = value.tolist()
    values = [value] if isinstance(value, str | int | float) else value
    if not isinstance(values, list | tuple) or not values:
        raise DatasetError(f"{where}: answers must be a string or a non-empty list")
    answers = []
    for answer in values:
        if isinstance(answer, bool) or not isinstance(answer, str | int | float):
            raise DatasetError(f"{where}: answer {answer!r} is not a string")
        answers.append(str(answer).strip())
    if not any(answers):
        raise DatasetError(f"{where}: every answer is empty")
    return tuple(a for a in answers if a)


def _item(row: Any, index: int, where: str, default_prefix: str) -> QAItem:
    if not isinstance(row, Mapping):
        raise DatasetError(f"{where}: expected an object, got {type(row).__name__}")
    lowered = {str(k).lower(): v for k, v in row.items()}
    question = lowered.get("question")
    if not isinstance(question, str) or not question.strip():
        raise DatasetError(f"{where}: 'question' must be a non-empty string")
    raw_id = lowered.get("id", lowered.get("_id"))
    item_id = str(raw_id) if raw_id is not None else f"{default_prefix}-{index}"
    return QAItem(item_id, " ".join(question.split()), _answers(lowered, where))


def _rows_jsonl(path: Path) -> Iterable[tuple[Any, str]]:
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    yield json.loads(line), f"{path}:{number}"
                except json.JSONDecodeError as error:
                    raise DatasetError(f"{path}:{number}: not valid JSON ({error})") from None


def _rows_json(path: Path) -> Iterable[tuple[Any, str]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise DatasetError(f"{path}: not valid JSON ({error})") from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of questions")
    return ((row, f"{path}[{i}]") for i, row in enumerate(data))


def _rows_csv(path: Path) -> Iterable[tuple[Any, str]]:
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames or "question" not in {f.lower() for f in reader.fieldnames}:
            raise DatasetError(f"{path}: the CSV header needs a 'Question' column")
        for number, row in enumerate(reader, start=2):
            if None in row:
                raise DatasetError(f"{path}:{number}: more fields than the header has")
            yield row, f"{path}:{number}"


def _rows_parquet(path: Path) -> Iterable[tuple[Any, str]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as error:
        raise DatasetError(
            f'reading {path} needs pyarrow: pip install "gigpo[retrieval]"'
        ) from error
    try:
        table = pq.read_table(path)
    except Exception as error:  # pyarrow raises several kinds for a damaged file
        raise DatasetError(f"{path}: cannot read the parquet file ({error})") from error
    return ((row, f"{path}[{i}]") for i, row in enumerate(table.to_pylist()))


_READERS = {
    ".jsonl": _rows_jsonl,
    ".json": _rows_json,
    ".csv": _rows_csv,
    ".parquet": _rows_parquet,
}


def load_questions(path: str | os.PathLike[str]) -> list[QAItem]:
    """Reads a question file (``.jsonl``, ``.json``, ``.csv`` or ``.parquet``), in file order.

    A file read before in this process, unchanged since (same size and modification time),
    is not parsed again: the envs of a batch share one read (a new list of the same items).

    Raises :class:`DatasetError` naming the file and row of the first problem: a missing
    file, an unknown suffix, invalid JSON, a row without a question or answers, or no rows.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"question file not found: {path}")
    stat = path.stat()
    return list(_load_questions(str(path.resolve()), stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=16)
def _load_questions(name: str, size: int, mtime_ns: int) -> tuple[QAItem, ...]:
    del size, mtime_ns  # part of the cache key only: a changed file is read again
    path = Path(name)
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        raise DatasetError(f"{path}: unknown question file type; use one of {sorted(_READERS)}")
    try:
        items = [
            _item(row, index, where, path.stem) for index, (row, where) in enumerate(reader(path))
        ]
    except UnicodeDecodeError as error:
        raise DatasetError(f"{path}: not UTF-8 text ({error})") from None
    if not items:
        raise DatasetError(f"{path} holds no questions")
    return tuple(items)
