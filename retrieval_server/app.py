"""The HTTP service: ``POST /retrieve``, ``GET /health`` and the OpenAPI page at ``/docs``.

Request bodies (JSON):

* Search-R1's batch form ``{"queries": ["...", ...], "topk": 3, "return_scores": false}``;
* the single-query form ``{"query": "...", "topk": 3, "return_scores": false}``.

The answer is ``{"result": [[doc, ...], ...]}``, one list per query (one list for the
single-query form), each ``doc`` the stored ``{"id", "contents"}``; with
``"return_scores": true`` each entry is ``{"document": doc, "score": s}`` instead. As
Search-R1's own server does, an empty ``queries`` list gets ``{"result": []}``, an empty or
blank query gets an empty list (the other queries of its request are still searched), and
``"topk": null`` means the default. What no client sends gets a 4xx answer with
``{"detail": "..."}``: 400 for a body that is not a JSON object, 413 for a body over the
size limit, 422 for wrong types or values over the limits. A failing backend gives a 500
with ``{"detail": ...}`` (logged once per failed backend call), a server shutting down 503.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from typing import Any

try:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        'the retrieval server needs FastAPI: pip install "gigpo[retrieval]"'
    ) from error

from retrieval_server.backends import SearchBackend, load_backend
from retrieval_server.batcher import BatcherStopped, QueryBatcher

INDEX_ENV = "GIGPO_RETRIEVAL_INDEX"
LIMITS_ENV = "GIGPO_RETRIEVAL_LIMITS"


@dataclass(frozen=True)
class Limits:
    """What one request may ask for, and how requests are batched.

    Attributes:
      max_queries: the most queries in one request.
      max_query_chars: the longest query, in characters.
      max_topk: the largest ``topk``.
      default_topk: ``topk`` when the request gives none (Search-R1 uses 3).
      max_body_bytes: the largest request body, in bytes.
      max_batch: the most queries in one backend call.
      batch_window_s: how long a request waits for others to batch with, in seconds.
    """

    max_queries: int = 512
    max_query_chars: int = 4096
    max_topk: int = 100
    default_topk: int = 3
    max_body_bytes: int = 4 << 20
    max_batch: int = 256
    batch_window_s: float = 0.002

    def __post_init__(self) -> None:
        for name in ("max_queries", "max_query_chars", "max_topk", "max_body_bytes", "max_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"Limits.{name} must be >= 1, got {getattr(self, name)}")
        if not 1 <= self.default_topk <= self.max_topk:
            raise ValueError(
                f"Limits.default_topk must be in [1, max_topk], got {self.default_topk}"
            )
        if self.batch_window_s < 0:
            raise ValueError(f"Limits.batch_window_s must be >= 0, got {self.batch_window_s}")


class RequestError(ValueError):
    """A request the server refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def parse_request(body: bytes, limits: Limits) -> tuple[list[str], int, bool]:
    """Validates a ``/retrieve`` body; returns ``(queries, topk, return_scores)``.

    Raises :class:`RequestError` (400, 413 or 422) with a message that says what is wrong.
    """
    if len(body) > limits.max_body_bytes:
        raise RequestError(413, f"request body is over {limits.max_body_bytes} bytes")
    try:
        payload = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RequestError(400, f"request body is not valid JSON: {error}") from None
    if not isinstance(payload, dict):
        raise RequestError(400, "request body must be a JSON object")
    has_batch, has_single = "queries" in payload, "query" in payload
    if has_batch == has_single:
        raise RequestError(422, "give exactly one of 'queries' (a list) or 'query' (a string)")
    if has_single:
        if not isinstance(payload["query"], str):
            raise RequestError(422, "'query' must be a string")
        queries = [payload["query"]]
    else:
        queries = payload["queries"]
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            raise RequestError(422, "'queries' must be a list of strings")
    if len(queries) > limits.max_queries:
        raise RequestError(422, f"{len(queries)} queries; at most {limits.max_queries} allowed")
    for position, query in enumerate(queries):
        if len(query) > limits.max_query_chars:
            raise RequestError(
                422,
                f"query {position} has {len(query)} characters; at most "
                f"{limits.max_query_chars} allowed",
            )
    topk = payload.get("topk")
    if topk is None:  # absent or null (Search-R1's client default): the server's default
        topk = limits.default_topk
    if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= limits.max_topk:
        raise RequestError(
            422, f"'topk' must be an integer in [1, {limits.max_topk}], got {topk!r}"
        )
    return_scores = payload.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise RequestError(422, f"'return_scores' must be true or false, got {return_scores!r}")
    return queries, topk, return_scores


def create_app(backend: SearchBackend, limits: Limits | None = None) -> FastAPI:
    """Returns the FastAPI app serving ``backend`` under ``limits``."""
    limits = limits or Limits()
    batcher = QueryBatcher(backend, max_batch=limits.max_batch, window_s=limits.batch_window_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(
        title="gigpo retrieval server",
        description=__doc__,
        version="1",
        lifespan=lifespan,
    )
    app.state.backend = backend
    app.state.batcher = batcher
    app.state.limits = limits

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """Says the server is up, which backend it serves and how many documents it holds."""
        return {
            "status": "ok",
            "backend": backend.name,
            "num_docs": len(backend),
            "batches": batcher.batches,
            "queries": batcher.queries,
            "limits": asdict(limits),
        }

    @app.post(
        "/retrieve",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "example": {"queries": ["who wrote hamlet"], "topk": 3},
                        "schema": {
                            "type": "object",
                            "properties": {
                                "queries": {"type": "array", "items": {"type": "string"}},
                                "query": {"type": "string"},
                                "topk": {"type": "integer", "default": limits.default_topk},
                                "return_scores": {"type": "boolean", "default": False},
                            },
                        },
                    }
                },
            }
        },
    )
    async def retrieve(request: Request) -> Response:
        """Returns the top ``topk`` documents for each query (see the module docs)."""
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
            return JSONResponse(
                {"detail": f"request body is over {limits.max_body_bytes} bytes"}, 413
            )
        chunks, size = [], 0
        async for chunk in request.stream():  # stop reading once over the limit
            size += len(chunk)
            if size > limits.max_body_bytes:
                return JSONResponse(
                    {"detail": f"request body is over {limits.max_body_bytes} bytes"}, 413
                )
            chunks.append(chunk)
        try:
            queries, topk, return_scores = parse_request(b"".join(chunks), limits)
        except RequestError as error:
            return JSONResponse({"detail": error.detail}, status_code=error.status)
        # Search-R1's server answers an empty list with no results, and any string (an empty
        # <search> </search> included) with results or none: blank queries get [] here and
        # never fail the batch they came in.
        searched = [i for i, query in enumerate(queries) if query.strip()]
        hits: list[list[Any]] = [[] for _ in queries]
        if searched:
            try:
                found = await batcher.search([queries[i] for i in searched], topk)
            except BatcherStopped as error:
                return JSONResponse({"detail": str(error)}, status_code=503)
            except Exception as error:  # logged once by the batcher; the client is told why
                detail = f"search backend failed: {type(error).__name__}: {error}"
                return JSONResponse({"detail": detail}, status_code=500)
            for i, row in zip(searched, found, strict=True):
                hits[i] = row
        if return_scores:
            result = [
                [{"document": backend.document(h.doc_id), "score": h.score} for h in row]
                for row in hits
            ]
        else:
            result = [[backend.document(h.doc_id) for h in row] for row in hits]
        return JSONResponse({"result": result})

    return app


def create_app_from_env() -> FastAPI:
    """App factory for ``uvicorn --factory`` (used with several workers).

    Reads the index directory from ``$GIGPO_RETRIEVAL_INDEX`` and the limits, as a JSON
    object of :class:`Limits` fields, from ``$GIGPO_RETRIEVAL_LIMITS``.
    """
    directory = os.environ.get(INDEX_ENV)
    if not directory:
        raise RuntimeError(f"set {INDEX_ENV} to an index directory")
    limits = Limits(**json.loads(os.environ.get(LIMITS_ENV, "{}")))
    return create_app(load_backend(directory), limits)
