"""A client for the retrieval server: timeouts, retries with backoff, batching.

Standard library only, so an environment can use it without the server's dependencies.
One client may be shared by threads: each thread keeps its own keep-alive connection.

    client = RetrievalClient("http://127.0.0.1:8000")
    docs = client.retrieve(["who wrote hamlet"], topk=3)[0]        # [{"id", "contents"}, ...]
    scored = client.retrieve(["who wrote hamlet"], return_scores=True)[0]
    # [{"document": {"id", "contents"}, "score": 12.3}, ...]
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

#: Answers worth another attempt: overload and gateways. A 500 is the backend failing on
#: this request, which would fail again: it is reported at once, with the server's detail.
_RETRY_STATUSES = frozenset({429, 502, 503, 504})


class RetrievalError(RuntimeError):
    """The server could not be reached, or kept failing, after all retries."""


class RetrievalServerError(RetrievalError):
    """The server failed on the request (a 500 answer); it is not retried."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"retrieval server failed ({status}): {detail}")
        self.status = status
        self.detail = detail


class RetrievalRequestError(ValueError):
    """The server refused the request (a 4xx answer); retrying would not help."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"retrieval server answered {status}: {detail}")
        self.status = status
        self.detail = detail


class RetrievalClient:
    """Talks to ``POST /retrieve`` and ``GET /health`` of a retrieval server.

    Args:
      url: the server's base URL, ``http://host:port``.
      timeout_s: socket timeout of one attempt, in seconds.
      retries: how many times a failed attempt (connection error, timeout, 429, 502, 503 or
        504) is tried again; 4xx and 500 answers are not retried (a 500 raises
        :class:`RetrievalServerError` with the server's detail).
      backoff_s: the first wait between attempts, doubled each time (with jitter), in seconds.
      max_backoff_s: the longest wait between attempts, in seconds.
      batch_size: the most queries per request; longer lists are split and sent in order.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.2,
        max_backoff_s: float = 5.0,
        batch_size: int = 256,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url must look like http://host:port, got {url!r}")
        if timeout_s <= 0 or retries < 0 or backoff_s < 0 or batch_size < 1:
            raise ValueError("need timeout_s > 0, retries >= 0, backoff_s >= 0, batch_size >= 1")
        self.url = url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.batch_size = int(batch_size)
        self._local = threading.local()

    # ------------------------------------------------------------------ public API
    def retrieve(
        self, queries: Sequence[str], topk: int = 3, return_scores: bool = False
    ) -> list[list[dict[str, Any]]]:
        """Returns, for each query, the server's top ``topk`` documents (best first).

        Each entry is ``{"id", "contents"}``, or ``{"document": {...}, "score": float}``
        with ``return_scores``. Raises :class:`RetrievalRequestError` when the server
        refuses the request and :class:`RetrievalError` when it cannot be reached.
        """
        if isinstance(queries, str):
            raise TypeError("queries must be a list of strings, not one string")
        queries = list(queries)
        results: list[list[dict[str, Any]]] = []
        for start in range(0, len(queries), self.batch_size):
            chunk = queries[start : start + self.batch_size]
            body = {"queries": chunk, "topk": topk, "return_scores": return_scores}
            answer = self._request("POST", "/retrieve", body)
            rows = answer.get("result") if isinstance(answer, dict) else None
            if not isinstance(rows, list) or len(rows) != len(chunk):
                raise RetrievalError(f"malformed answer from {self.url}: {str(answer)[:200]}")
            results.extend(rows)
        return results

    def health(self) -> dict[str, Any]:
        """Returns the server's ``/health`` answer."""
        return self._request("GET", "/health", None)

    def wait_until_ready(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """Polls ``/health`` until the server answers; raises :class:`RetrievalError` on timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self._attempt("GET", "/health", None)
            except (OSError, http.client.HTTPException, RetrievalError) as error:
                self._drop_connection()
                if time.monotonic() > deadline:
                    raise RetrievalError(
                        f"{self.url} not ready after {timeout_s} s: {error}"
                    ) from error
                time.sleep(0.1)

    def close(self) -> None:
        """Closes this thread's connection."""
        self._drop_connection()

    # ------------------------------------------------------------------ transport
    def _request(self, method: str, path: str, body: Any) -> Any:
        last_error: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                wait = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1))
                time.sleep(wait * (0.5 + random.random() / 2))
            try:
                return self._attempt(method, path, body)
            except (RetrievalRequestError, RetrievalServerError):
                raise
            except (OSError, http.client.HTTPException, RetrievalError) as error:
                self._drop_connection()
                last_error = error
        raise RetrievalError(
            f"{method} {self.url}{path} failed after {self.retries + 1} attempts: {last_error}"
        ) from last_error

    def _attempt(self, method: str, path: str, body: Any) -> Any:
        connection = self._connection()
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        connection.request(method, self._prefix + path, body=payload, headers=headers)
        response = connection.getresponse()
        data = response.read()
        if response.status in _RETRY_STATUSES:
            raise RetrievalError(f"server answered {response.status}: {data[:200]!r}")
        if response.status >= 500:
            try:
                detail = json.loads(data).get("detail", "")
            except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
                detail = data[:200].decode(errors="replace")
            raise RetrievalServerError(response.status, str(detail))
        try:
            answer = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise RetrievalError(f"answer is not JSON: {data[:200]!r}") from error
        if response.status >= 400:
            detail = answer.get("detail") if isinstance(answer, dict) else answer
            raise RetrievalRequestError(response.status, str(detail))
        return answer

    def _connection(self) -> http.client.HTTPConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            factory = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            connection = factory(self._host, self._port, timeout=self.timeout_s)
            self._local.connection = connection
        return connection

    def _drop_connection(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None
