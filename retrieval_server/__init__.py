"""retrieval_server: a search service for search-QA agents, and the backends behind it.

* ``python -m retrieval_server index --corpus wiki.jsonl --out DIR --backend bm25s`` builds an
  index from a corpus of ``{"id", "contents"}`` JSON lines.
* ``python -m retrieval_server serve --index DIR`` serves it over HTTP (``POST /retrieve``).
* :mod:`retrieval_server.backends` is the in-process interface (no web dependencies), and
  :mod:`retrieval_server.client` talks to a running server (standard library only).

Importing this package imports nothing heavy.
"""

from __future__ import annotations

__all__: list[str] = []
