"""Reading a corpus in the wiki-18 layout: JSON lines ``{"id": str, "contents": str}``.

``contents`` is ``'"Title"\\ntext'`` in Search-R1's wiki-18 dump; any string works.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


class CorpusError(ValueError):
    """A corpus file is missing or a line of it is not a valid document."""


def open_regular_file(path: Path, what: str = "corpus") -> BinaryIO:
    """Opens ``path`` for reading in binary, refusing anything but a regular file.

    Opened without blocking, so a FIFO (or a device) is refused rather than waited on.
    Raises :class:`CorpusError` for a missing path, a directory or another non-regular file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise CorpusError(f"{what} file not found: {path}") from None
    except OSError as error:
        raise CorpusError(f"cannot open the {what} file {path}: {error.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CorpusError(f"{what} {path} is not a regular file (a directory, FIFO or device)")
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _is_text(value: str) -> bool:
    """Whether ``value`` encodes to UTF-8 (a lone surrogate from a ``\\ud800`` escape does not)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _document(path: Path, number: int, raw: bytes) -> dict:
    """The document of line ``number`` (``raw``); :class:`CorpusError` naming it if bad."""
    try:
        doc = json.loads(raw)
    except RecursionError:
        raise CorpusError(f"{path}:{number}: not valid JSON (nested too deeply)") from None
    except ValueError as error:  # bad JSON or UTF-8, or an integer over Python's digit limit
        raise CorpusError(f"{path}:{number}: not valid JSON ({error})") from None
    if not isinstance(doc, dict):
        raise CorpusError(f"{path}:{number}: expected a JSON object")
    doc_id, contents = doc.get("id"), doc.get("contents")
    if isinstance(doc_id, int) and not isinstance(doc_id, bool):
        doc_id = str(doc_id)
    if not isinstance(doc_id, str) or not doc_id:
        raise CorpusError(f"{path}:{number}: 'id' must be a non-empty string")
    if not isinstance(contents, str):
        raise CorpusError(f"{path}:{number}: 'contents' must be a string")
    if b"\\u" in raw and not (_is_text(doc_id) and _is_text(contents)):
        raise CorpusError(f"{path}:{number}: 'id' or 'contents' holds a lone surrogate escape")
    return {"id": doc_id, "contents": contents}


def _numbered(path: Path, show_progress: bool) -> Iterator[tuple[int, dict]]:
    """Yields ``(line number, document)`` for each non-blank line of ``path``."""
    with open_regular_file(path) as handle:
        progress = None
        if show_progress:
            from tqdm.auto import tqdm

            size = os.fstat(handle.fileno()).st_size
            progress = tqdm(total=size, unit="B", unit_scale=True, desc="read corpus")
        for number, raw in enumerate(handle, start=1):
            if progress is not None:
                progress.update(len(raw))
            if raw.strip():
                yield number, _document(path, number, raw)
        if progress is not None:
            progress.close()


def iter_corpus(path: str | os.PathLike[str], show_progress: bool = False) -> Iterator[dict]:
    """Yields the documents of a JSON-lines corpus, in file order; blank lines are skipped.

    Raises :class:`CorpusError` naming the file and line of the first bad line (invalid
    JSON, nested past Python's recursion limit, not an object, an ``id`` that is not a
    string or number, ``contents`` not a string, a lone UTF-16 surrogate escape, which no
    answer could encode), or a path that is not a regular file (a FIFO is refused, never
    waited on). Numeric ids are turned into strings.
    """
    for _, doc in _numbered(Path(path), show_progress):
        yield doc


def read_corpus(path: str | os.PathLike[str], show_progress: bool = False) -> list[dict]:
    """Returns all documents of a JSON-lines corpus (see :func:`iter_corpus`).

    Also raises :class:`CorpusError` for a corpus without documents, and for an id that
    repeats (naming the line of the repeat).
    """
    docs: list[dict] = []
    seen: set[str] = set()
    for number, doc in _numbered(Path(path), show_progress):
        if doc["id"] in seen:
            raise CorpusError(f"{path}:{number}: id {doc['id']!r:.80} is used by an earlier line")
        seen.add(doc["id"])
        docs.append(doc)
    if not docs:
        raise CorpusError(f"corpus {path} holds no documents")
    return docs


def split_title(contents: str) -> tuple[str, str]:
    """Splits wiki-18 ``contents`` into ``(title, text)``; no title line: ``("", contents)``."""
    first, newline, rest = contents.partition("\n")
    if not newline:
        return "", contents
    return first.strip().strip('"'), rest
