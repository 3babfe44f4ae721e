"""In-process search backends behind one interface (:class:`SearchBackend`).

Importing this package needs only numpy: each backend imports its own dependencies
(``bm25s``; ``pyserini`` and Java; ``faiss`` and ``sentence-transformers``) when it is used.

    from retrieval_server.backends import get_backend

    backend = get_backend("bm25s").build([{"id": "1", "contents": '"Paris"\\nParis is ...'}])
    hits = backend.search(["capital of france"], k=3)[0]  # [Hit(doc_id='1', score=...)]
    backend.save("my_index"); backend = load_backend("my_index")
"""

from __future__ import annotations

import importlib
import os

from retrieval_server.backends.base import (
    BackendError,
    Hit,
    MissingDependencyError,
    SearchBackend,
    read_meta,
)

#: backend name -> "module:class", imported on first use.
BACKENDS: dict[str, str] = {
    "bm25s": "retrieval_server.backends.bm25s_backend:Bm25sBackend",
    "pyserini": "retrieval_server.backends.pyserini_backend:PyseriniBackend",
    "dense": "retrieval_server.backends.dense_backend:DenseBackend",
}


def get_backend(name: str) -> type[SearchBackend]:
    """Returns the backend class called ``name`` (``bm25s``, ``pyserini`` or ``dense``).

    Raises ``ValueError`` for an unknown name.
    """
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {sorted(BACKENDS)}")
    module_name, class_name = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)


def load_backend(directory: str | os.PathLike[str]) -> SearchBackend:
    """Opens an index directory written by any backend's ``save`` (its ``meta.json`` says which)."""
    meta = read_meta(directory)
    try:
        backend_class = get_backend(meta["backend"])
    except ValueError as error:
        raise BackendError(f"{directory}: {error}") from error
    return backend_class.load(directory)


__all__ = [
    "BACKENDS",
    "BackendError",
    "Hit",
    "MissingDependencyError",
    "SearchBackend",
    "get_backend",
    "load_backend",
]
