"""Reading a corpus in the wiki-18 layout: JSON lines ``{"id": str, "contents": str}``.

``contents`` is ``'"Title"\\ntext'`` in Search-R1's wiki-18 dump; any string works.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path


class CorpusError(ValueError):
    """A corpus file is missing or a line of it is not a valid document."""


def iter_corpus(path: str | os.PathLike[str], show_progress: bool = False) -> Iterator[dict]:
    """Yields the documents of a JSON-lines corpus, in file order; blank lines are skipped.

    Raises :class:`CorpusError` naming the file and line of the first bad line (invalid
    JSON, not an object, an ``id`` that is not a string or number, ``contents`` not a
    string). Numeric ids are turned into strings.
    """
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus file not found: {path}")
    progress = None
    if show_progress:
        from tqdm.auto import tqdm

        progress = tqdm(total=path.stat().st_size, unit="B", unit_scale=True, desc="read corpus")
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if progress is not None:
                progress.update(len(raw))
            if not raw.strip():
                continue
            try:
                doc = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
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
            yield {"id": doc_id, "contents": contents}
    if progress is not None:
        progress.close()


def read_corpus(path: str | os.PathLike[str], show_progress: bool = False) -> list[dict]:
    """Returns all documents of a JSON-lines corpus (see :func:`iter_corpus`)."""
    docs = list(iter_corpus(path, show_progress=show_progress))
    if not docs:
        raise CorpusError(f"corpus {path} holds no documents")
    return docs


def split_title(contents: str) -> tuple[str, str]:
    """Splits wiki-18 ``contents`` into ``(title, text)``; no title line: ``("", contents)``."""
    first, newline, rest = contents.partition("\n")
    if not newline:
        return "", contents
    return first.strip().strip('"'), rest
