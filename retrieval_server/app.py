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
``{"detail": "..."}``: 400 for a body that is not a JSON object (or nests arrays and
objects over :data:`MAX_JSON_DEPTH` levels), 408 for a body not received within
``read_timeout_s`` (the connection is then closed), 413 for a body over the size limit, 422
for wrong types or values over the limits. A failing backend gives a 500
with ``{"detail": ...}`` (logged once per failed backend call), a server shutting down 503.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from typing import Any

try:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response
    from starlette.requests import ClientDisconnect
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        'the retrieval server needs FastAPI: pip install "gigpo[retrieval]"'
    ) from error

from retrieval_server.backends import SearchBackend, load_backend
from retrieval_server.batcher import BatcherStopped, QueryBatcher
from retrieval_server.limits import Limits

__all__ = ["Limits", "RequestError", "create_app", "create_app_from_env", "parse_request"]

INDEX_ENV = "GIGPO_RETRIEVAL_INDEX"
LIMITS_ENV = "GIGPO_RETRIEVAL_LIMITS"

#: the deepest nesting of arrays and objects a body may have (Search-R1's has 2): deeper
#: bodies are refused before Python's recursion limit could turn them into a 500.
MAX_JSON_DEPTH = 32


class RequestError(ValueError):
    """A request the server refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


_TOO_DEEP = f"request body nests arrays or objects more than {MAX_JSON_DEPTH} levels deep"


def _nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects in ``value`` nest more than ``limit`` levels deep."""
    stack = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def parse_request(body: bytes, limits: Limits) -> tuple[list[str], int, bool]:
    """Validates a ``/retrieve`` body; returns ``(queries, topk, return_scores)``.

    Raises :class:`RequestError` (400, 413 or 422) with a message that says what is wrong.
    """
    if len(body) > limits.max_body_bytes:
        raise RequestError(413, f"request body is over {limits.max_body_bytes} bytes")
    try:
        payload = json.loads(body)
    except RecursionError:
        raise RequestError(400, _TOO_DEEP) from None
    except ValueError as error:  # bad JSON or UTF-8, or an integer over Python's digit limit
        raise RequestError(400, f"request body is not valid JSON: {error}") from None
    if _nested_deeper_than(payload, MAX_JSON_DEPTH):
        raise RequestError(400, _TOO_DEEP)
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


async def read_body(request: Request, limits: Limits) -> bytes:
    """Reads the body of ``request``, at most ``limits.max_body_bytes`` of it.

    Raises :class:`RequestError`: 413 for a body over the limit (declared or counted while
    reading; reading stops there), 408 for one not received within ``limits.read_timeout_s``
    seconds (a client that sends its headers and then stalls holds nothing for longer).
    """
    too_big = RequestError(413, f"request body is over {limits.max_body_bytes} bytes")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise too_big
    chunks: list[bytes] = []

    async def collect() -> None:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_body_bytes:
                raise too_big
            chunks.append(chunk)

    try:
        await asyncio.wait_for(collect(), limits.read_timeout_s)
    except asyncio.TimeoutError:
        raise RequestError(
            408, f"request body not received within {limits.read_timeout_s} s"
        ) from None
    return b"".join(chunks)


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
        try:
            queries, topk, return_scores = parse_request(await read_body(request, limits), limits)
        except RequestError as error:
            # a client that did not finish its body in time is not waited for again
            headers = {"Connection": "close"} if error.status == 408 else None
            return JSONResponse({"detail": error.detail}, error.status, headers=headers)
        except ClientDisconnect:  # nobody is left to read an answer
            return Response(status_code=400)
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
