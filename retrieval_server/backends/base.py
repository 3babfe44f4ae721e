"""The interface every search backend implements, and the on-disk layout they share.

A backend is built from documents ``{"id": str, "contents": str}`` (the wiki-18 layout:
``contents = '"Title"\\ntext'``), answers a batch of queries with the ``k`` best document ids
per query, returns stored documents by id, and saves itself to a directory that
:func:`load_backend` opens again. Every index directory holds ``meta.json`` (the backend's
name and options) and ``docs.jsonl`` (the documents, in corpus order); the rest is the
backend's own.
"""

from __future__ import annotations

import abc
import json
import os
import shutil
import weakref
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import numpy as np

META_FILE = "meta.json"
DOCS_FILE = "docs.jsonl"
#: Beside ``docs.jsonl``: the byte offset of each line (int64 ``[n + 1]``), and, unless the
#: ids are ``"0"``..``"n-1"`` (wiki-18's), the ids. A loaded index maps them instead of
#: reading every line, so a wiki-scale index opens at once and its workers share them.
OFFSETS_FILE = "docs.offsets.npy"
IDS_FILE = "docs.ids.npy"
FORMAT_VERSION = 1


class Hit(NamedTuple):
    """One search result: the document id and its score (higher is better)."""

    doc_id: str
    score: float


class BackendError(RuntimeError):
    """A backend cannot do what was asked (missing dependency, broken index directory)."""


class MissingDependencyError(BackendError, ImportError):
    """An optional package a backend needs is not installed (its message names the extra).

    Both a :class:`BackendError` (as before) and an ``ImportError``, so that callers can tell
    a missing package apart from a broken index without parsing messages. ``name`` is the
    package, ``extra`` the gigpo extra that installs it.
    """

    extra: str | None = None


def missing_dependency(package: str, extra: str) -> MissingDependencyError:
    """Returns the error raised when an optional dependency of a backend is not installed."""
    error = MissingDependencyError(
        f"this backend needs the '{package}' package: pip install \"gigpo[{extra}]\""
    )
    error.name, error.extra = package, extra
    return error


def validate_docs(docs: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Checks documents and returns them as plain ``{"id", "contents"}`` dicts.

    Raises ``ValueError`` naming the first bad document: not a mapping, an ``id`` or
    ``contents`` that is missing or not a string, an empty id, or a repeated id.
    """
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    for position, doc in enumerate(docs):
        if not isinstance(doc, Mapping):
            raise ValueError(f"document {position} is not a mapping: {doc!r:.120}")
        doc_id, contents = doc.get("id"), doc.get("contents")
        if not isinstance(doc_id, str) or not doc_id:
            raise ValueError(f"document {position} needs a non-empty string 'id', got {doc_id!r}")
        if not isinstance(contents, str):
            raise ValueError(f"document {position} ({doc_id!r}) needs a string 'contents'")
        if doc_id in seen:
            raise ValueError(f"document {position}: id {doc_id!r} appears twice")
        seen.add(doc_id)
        out.append({"id": doc_id, "contents": contents})
    return out


def validate_queries(queries: Sequence[str], k: int) -> None:
    """Raises ``ValueError`` unless ``queries`` is a sequence of strings and ``k >= 1``."""
    if isinstance(queries, str) or not all(isinstance(q, str) for q in queries):
        raise ValueError("queries must be a sequence of strings")
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")


def top_k(scores: np.ndarray, k: int, positive_only: bool = True) -> np.ndarray:
    """Returns the indices of the ``k`` best ``scores``, best first, ties by lower index.

    Args:
      scores: float array of shape ``[num_docs]``.
      k: how many to return at most.
      positive_only: drop documents whose score is not above zero (no term matched).

    Returns:
      int64 array of shape ``[<= k]``. The result for ``k`` is always a prefix of the result
      for any larger ``k`` (a total order: score descending, then index ascending).
    """
    candidates = np.flatnonzero(scores > 0) if positive_only else np.arange(scores.shape[0])
    if candidates.shape[0] > k:
        values = scores[candidates]
        kth = np.partition(values, values.shape[0] - k)[values.shape[0] - k]
        # Everything strictly better than the k-th value, plus the lowest-index ties.
        candidates = candidates[values >= kth]
    order = np.lexsort((candidates, -scores[candidates]))
    return candidates[order[:k]].astype(np.int64)


class PositionalIds(Sequence[str]):
    """The document ids ``"0"``, ``"1"``, ... ``"n-1"``, without a list of strings."""

    def __init__(self, count: int) -> None:
        self.count = int(count)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [str(i) for i in range(*index.indices(self.count))]
        index = int(index)
        if index < 0:
            index += self.count
        if not 0 <= index < self.count:
            raise IndexError(f"document index {index} out of range")
        return str(index)

    def position(self, doc_id: str) -> int:
        """The position of ``doc_id``; ``KeyError`` unless it is one of the ids."""
        if isinstance(doc_id, str) and doc_id.isdecimal() and doc_id == str(int(doc_id)):
            if int(doc_id) < self.count:
                return int(doc_id)
        raise KeyError(doc_id)


def are_positional(ids: Sequence[str]) -> bool:
    """Whether ``ids`` are exactly ``"0"``, ``"1"``, ... in order."""
    return all(doc_id == str(i) for i, doc_id in enumerate(ids))


class DiskDocs(Sequence[dict[str, str]]):
    """The documents of a ``docs.jsonl``, read from disk on demand, in file order.

    Memory per document: none when ``docs.offsets.npy`` (memory-mapped) matches the file
    and the ids are positional; else the id and the offset (about 100 bytes instead of the
    whole text). Without matching offsets (an index from before they were written, or a
    ``docs.jsonl`` changed since) every line is read and checked at open. Reads use
    ``os.pread`` and are safe from any thread.

    Raises :class:`BackendError` naming the line of a damaged document.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_RDONLY)
        weakref.finalize(self, os.close, self._fd)
        if not self._open_offsets():
            self._scan()

    def _open_offsets(self) -> bool:
        offsets_path = self.path.parent / OFFSETS_FILE
        if not offsets_path.is_file():
            return False
        try:
            offsets = np.load(offsets_path, mmap_mode="r")
            size = os.fstat(self._fd).st_size
            if offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != size:
                return False
            ids_path = self.path.parent / IDS_FILE
            if ids_path.is_file():
                ids = np.load(ids_path, allow_pickle=False)
                if ids.shape != (len(offsets) - 1,):
                    return False
                self.ids: Sequence[str] = [str(doc_id) for doc_id in ids.tolist()]
            else:
                self.ids = PositionalIds(len(offsets) - 1)
        except (OSError, ValueError):
            return False
        self._offsets = offsets
        return True

    def _scan(self) -> None:
        ids: list[str] = []
        offsets = [0]
        with open(self.path, "rb") as handle:
            for number, line in enumerate(handle, start=1):
                try:
                    doc = json.loads(line)
                except (ValueError, RecursionError) as error:  # bad JSON or UTF-8, too deep
                    raise BackendError(f"{self.path}:{number} is damaged: {error}") from None
                if (
                    not isinstance(doc, dict)
                    or not isinstance(doc.get("id"), str)
                    or not (isinstance(doc.get("contents"), str))
                ):
                    raise BackendError(f"{self.path}:{number} is damaged: not a document")
                ids.append(doc["id"])
                offsets.append(offsets[-1] + len(line))
        self.ids = ids
        self._offsets = np.asarray(offsets, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        index = int(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"document index {index} out of range")
        start, end = int(self._offsets[index]), int(self._offsets[index + 1])
        try:
            doc = json.loads(os.pread(self._fd, end - start, start))
            return {"id": doc["id"], "contents": doc["contents"]}
        except (ValueError, RecursionError, KeyError, TypeError) as error:
            raise BackendError(f"{self.path}:{index + 1} is damaged: {error!r}") from None


def write_docs(directory: Path, docs: Sequence[Mapping[str, str]], sidecars: bool = True) -> None:
    """Writes documents to ``directory/docs.jsonl``, one JSON object per line, with the line
    offsets (``docs.offsets.npy``) and, unless positional, the ids (``docs.ids.npy``);
    ``sidecars=False`` writes the lines only."""
    target = directory / DOCS_FILE
    ids_path = directory / IDS_FILE
    if isinstance(docs, DiskDocs):
        same = target.exists() and target.resolve() == docs.path.resolve()
        if same and (directory / OFFSETS_FILE).exists():
            return  # saved over itself: its offsets are in place (and may be mapped)
        if not same:
            shutil.copyfile(docs.path, target)
        offsets, ids = np.asarray(docs._offsets, dtype=np.int64), docs.ids
    else:
        offsets_list, ids = [0], []
        with open(target, "wb") as handle:
            for doc in docs:
                line = (json.dumps({"id": doc["id"], "contents": doc["contents"]}) + "\n").encode()
                handle.write(line)
                offsets_list.append(offsets_list[-1] + len(line))
                ids.append(doc["id"])
        offsets = np.asarray(offsets_list, dtype=np.int64)
    if not sidecars:
        return
    np.save(directory / OFFSETS_FILE, offsets)
    if isinstance(ids, PositionalIds) or are_positional(ids):
        ids_path.unlink(missing_ok=True)
    else:
        np.save(ids_path, np.asarray(list(ids), dtype=str))


def read_docs(directory: Path) -> DiskDocs:
    """Opens ``directory/docs.jsonl`` written by :func:`write_docs` (see :class:`DiskDocs`)."""
    path = directory / DOCS_FILE
    if not path.is_file():
        raise BackendError(f"{directory} is not an index directory: {DOCS_FILE} is missing")
    return DiskDocs(path)


def write_meta(directory: Path, backend: str, num_docs: int, options: Mapping[str, Any]) -> None:
    """Writes ``directory/meta.json``: the backend name, size and build options."""
    meta = {
        "format_version": FORMAT_VERSION,
        "backend": backend,
        "num_docs": int(num_docs),
        "options": dict(options),
    }
    (directory / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def read_meta(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """Reads ``meta.json`` of an index directory; raises :class:`BackendError` if unusable."""
    path = Path(directory) / META_FILE
    if not path.is_file():
        raise BackendError(f"{directory} is not an index directory: {META_FILE} is missing")
    try:
        meta = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as error:  # bad JSON or UTF-8, too deep, huge int
        raise BackendError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("backend"), str):
        raise BackendError(f"{path} does not name a backend")
    if meta.get("format_version") != FORMAT_VERSION:
        raise BackendError(
            f"{path} has format_version {meta.get('format_version')!r}; "
            f"this version reads {FORMAT_VERSION}: rebuild the index"
        )
    if not isinstance(meta.get("options", {}), dict):
        raise BackendError(f"{path}: 'options' must be an object")
    return meta


class SearchBackend(abc.ABC):
    """A searchable, saveable index of documents ``{"id": str, "contents": str}``.

    Subclasses set ``name`` and implement :meth:`build`, :meth:`search`, :meth:`save` and
    :meth:`load`. This class keeps the documents (``self.docs`` in corpus order: a list, or
    a :class:`DiskDocs` for a loaded index; ``self.doc_ids``; an id -> position map) and
    answers :meth:`document` and ``len()``.
    """

    name: ClassVar[str] = ""

    def __init__(self, docs: Sequence[Mapping[str, str]]) -> None:
        if isinstance(docs, DiskDocs):
            self.docs: Sequence[dict[str, str]] = docs
            self.doc_ids: Sequence[str] = docs.ids
        else:
            self.docs = [dict(doc) for doc in docs]
            self.doc_ids = [doc["id"] for doc in self.docs]
        self._position: dict[str, int] | None = None  # PositionalIds need no map
        if not isinstance(self.doc_ids, PositionalIds):
            self._position = {doc_id: i for i, doc_id in enumerate(self.doc_ids)}
            if len(self._position) != len(self.doc_ids):
                raise BackendError("document ids repeat; every id must be unique")

    @classmethod
    @abc.abstractmethod
    def build(cls, docs: Sequence[Mapping[str, str]], **options: Any) -> SearchBackend:
        """Builds an index over ``docs``; raises ``ValueError`` on a bad document or option."""

    @abc.abstractmethod
    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Returns, for each query, at most ``k`` hits, best first, ties in a fixed order.

        Args:
          queries: ``[num_queries]`` query strings.
          k: the most hits to return per query (``>= 1``).

        Returns:
          ``num_queries`` lists of :class:`Hit`. The same index and query give the same hits
          in every call and process.
        """

    @abc.abstractmethod
    def save(self, directory: str | os.PathLike[str]) -> None:
        """Writes the index to ``directory`` (created if needed) for :meth:`load`."""

    @classmethod
    @abc.abstractmethod
    def load(cls, directory: str | os.PathLike[str]) -> SearchBackend:
        """Opens an index that :meth:`save` wrote."""

    def document(self, doc_id: str) -> dict[str, str]:
        """Returns the stored document ``{"id", "contents"}``; ``KeyError`` if unknown."""
        if self._position is None:
            return dict(self.docs[self.doc_ids.position(doc_id)])
        return dict(self.docs[self._position[doc_id]])  # a copy: callers may change it

    def documents(self, hits: Iterable[Hit]) -> list[dict[str, str]]:
        """Returns the stored documents of ``hits``, in order."""
        return [self.document(hit.doc_id) for hit in hits]

    def __len__(self) -> int:
        return len(self.docs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_docs={len(self)})"
