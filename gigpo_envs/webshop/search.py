"""Product search through the project's search backends (``retrieval_server.backends``).

WebShop indexes one document per product: the lower-cased title, description, first bullet
point and option text (``"color: red, blue, and size: small, large"``), and shows the 50 best
hits (:data:`SEARCH_RETURN_N`) in result pages of 10. :class:`ProductSearch` builds that
index with any backend (``bm25s`` by default; ``pyserini`` is Lucene BM25 as in the original)
and remembers the hits of recent queries, since group rollouts repeat queries often.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from gigpo_envs.webshop.data import Product

#: Hits a search keeps (WebShop's ``SEARCH_RETURN_N``).
SEARCH_RETURN_N = 50
_EXTRA_HINT = 'pip install "gigpo[webshop]"'
#: The packages the ``webshop`` extra installs (the default ``bm25s`` backend's).
_EXTRA_PACKAGES = frozenset({"bm25s", "PyStemmer"})


def product_document(product: Product) -> dict[str, str]:
    """The search document of a product: ``{"id": asin, "contents": text}`` as WebShop
    indexes it (title, description, first bullet point, options; lower case)."""
    option_text = ", and ".join(
        f"{name}: {', '.join(values)}" for name, values in product.options.items()
    )
    bullet = product.bullet_points[0] if product.bullet_points else ""
    contents = " ".join([product.title, product.description, bullet, option_text]).lower()
    return {"id": product.asin, "contents": contents}


def _backends() -> Any:
    try:
        from retrieval_server import backends
    except ImportError as error:  # the package ships with gigpo; its deps may not
        raise ImportError(f"WebShop search needs retrieval_server: {_EXTRA_HINT}") from error
    return backends


def _load_or_build(
    backends: Any,
    backend_class: Any,
    docs: list[dict[str, str]],
    backend_options: Mapping[str, Any] | None,
    index_dir: str | os.PathLike[str] | None,
) -> Any:
    """Loads the index in ``index_dir`` if it holds these documents; else builds (and saves)."""
    if index_dir is not None and os.path.isfile(os.path.join(index_dir, "meta.json")):
        loaded = backends.load_backend(index_dir)
        if [doc["id"] for doc in loaded.docs] == [doc["id"] for doc in docs]:
            return loaded
    index = backend_class.build(docs, **dict(backend_options or {}))
    if index_dir is not None:
        index.save(index_dir)
    return index


class ProductSearch:
    """Search over products: ``search(query) -> asins``, best first, at most 50.

    Args:
      products: the catalog's products, in catalog order.
      backend: a backend name of ``retrieval_server.backends`` (``"bm25s"``, ``"pyserini"``).
      backend_options: build options of that backend.
      index_dir: a directory to save the index to, or to load it from when it already
        holds an index of the same documents.
      cache_size: how many distinct queries' hits to remember.

    Raises ``ImportError`` (naming the extra to install) when a package the backend needs is
    missing, and ``retrieval_server.backends.BackendError`` with its own message when the
    backend fails otherwise (a damaged ``index_dir``, a model directory that is not there).
    """

    def __init__(
        self,
        products: Sequence[Product],
        backend: str = "bm25s",
        backend_options: Mapping[str, Any] | None = None,
        index_dir: str | os.PathLike[str] | None = None,
        cache_size: int = 4096,
    ) -> None:
        backends = _backends()
        docs = [product_document(product) for product in products]
        try:
            backend_class = backends.get_backend(backend)
        except ImportError as error:
            raise ImportError(f"search backend {backend!r} is not installed: {error}") from error
        # Only a missing optional package becomes an ImportError naming the extra; any other
        # BackendError (a damaged index directory, a bad model path) keeps its own message.
        try:
            self.index = _load_or_build(backends, backend_class, docs, backend_options, index_dir)
        except backends.MissingDependencyError as error:
            hint = f" (or {_EXTRA_HINT})" if error.name in _EXTRA_PACKAGES else ""
            raise ImportError(f"{error}{hint}", name=error.name) from error
        self.backend = backend
        self.cache_size = int(cache_size)
        self._cache: OrderedDict[str, tuple[str, ...]] = OrderedDict()

    def search(self, query: str) -> tuple[str, ...]:
        """Returns the asins of the best :data:`SEARCH_RETURN_N` products for ``query``."""
        hits = self._cache.get(query)
        if hits is not None:
            self._cache.move_to_end(query)
            return hits
        hits = tuple(hit.doc_id for hit in self.index.search([query], SEARCH_RETURN_N)[0])
        self._cache[query] = hits
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return hits

    def __len__(self) -> int:
        return len(self.index)
