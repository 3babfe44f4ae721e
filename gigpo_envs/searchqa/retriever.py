"""Where the search environment's passages come from: an in-process index or a server.

Both retrievers answer ``search(query, k) -> [Passage, ...]``. The in-process one wraps any
:class:`retrieval_server.backends.SearchBackend`; :func:`corpus_backend` builds (once per
process and corpus file) a bm25s index over a JSON-lines corpus, or opens an index directory
written by ``python -m retrieval_server index``. The remote one uses
:class:`retrieval_server.client.RetrievalClient` (standard library HTTP).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, NamedTuple, Protocol


class Passage(NamedTuple):
    """One retrieved passage: document id, its text (``'"Title"\\ntext'``) and score."""

    doc_id: str
    contents: str
    score: float


class Retriever(Protocol):
    """Anything with ``search(query, k)`` returning at most ``k`` passages, best first."""

    def search(self, query: str, k: int) -> list[Passage]: ...


_CACHE: dict[tuple, Any] = {}
_CACHE_LOCK = threading.Lock()


def _backends():
    try:
        from retrieval_server import backends
    except ImportError as error:  # pragma: no cover - the package ships with gigpo
        raise ImportError(
            'SearchQA needs retrieval_server: pip install "gigpo[retrieval]"'
        ) from error
    return backends


def corpus_backend(corpus: str | os.PathLike[str], backend: str = "bm25s", **options: Any):
    """Returns an in-process index over ``corpus``, built once per process and cached.

    Args:
      corpus: a JSON-lines corpus file (``{"id", "contents"}`` per line) or an index
        directory written by ``python -m retrieval_server index``.
      backend: the backend to build a corpus file with (``bm25s`` by default).
      **options: build options of that backend.

    The cache key is the resolved path, the file's size and modification time, the backend
    and its options: editing the corpus file builds a fresh index.
    """
    backends = _backends()
    path = Path(corpus).resolve()
    if not path.exists():
        raise FileNotFoundError(f"corpus not found: {path}")
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns, backend, tuple(sorted(options.items())))
    with _CACHE_LOCK:
        found = _CACHE.get(key)
        if found is None:
            if path.is_dir():
                found = backends.load_backend(path)
            else:
                from retrieval_server.corpus import read_corpus

                found = backends.get_backend(backend).build(read_corpus(path), **options)
            _CACHE[key] = found
    return found


class BackendRetriever:
    """Searches an in-process :class:`~retrieval_server.backends.SearchBackend`."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def search(self, query: str, k: int) -> list[Passage]:
        if not query.strip():  # as the server answers a blank query: no documents
            return []
        hits = self.backend.search([query], k)[0]
        return [
            Passage(h.doc_id, self.backend.document(h.doc_id)["contents"], h.score) for h in hits
        ]


class RemoteRetriever:
    """Searches a retrieval server over HTTP (timeouts, retries: see ``RetrievalClient``)."""

    def __init__(self, url: str, **client_options: Any) -> None:
        from retrieval_server.client import RetrievalClient

        self.client = RetrievalClient(url, **client_options)

    def search(self, query: str, k: int) -> list[Passage]:
        rows = self.client.retrieve([query], topk=k, return_scores=True)[0]
        passages = []
        for row in rows:
            document = row.get("document") if isinstance(row, dict) else None
            if not isinstance(document, dict) or not isinstance(document.get("contents"), str):
                raise ValueError(f"the retrieval server sent a malformed result: {row!r:.200}")
            passages.append(
                Passage(str(document.get("id", "")), document["contents"], float(row["score"]))
            )
        return passages
