"""Micro-batching: concurrent requests share one backend call.

Requests wait at most ``window_s`` seconds for company; a batch holds at most ``max_batch``
queries. One worker thread runs the backend, so backends never run concurrently (pyserini's
JVM and faiss stay on one thread) and the event loop stays free to accept requests. Each
request gets back exactly its own results: queries are grouped by ``k`` and results are cut
back into the requests they came from, in order.

The window is at most :data:`MAX_WINDOW_S`: every request may wait that long, so a longer
(or infinite) window would hold each request, and a server shutting down, for that long.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from retrieval_server.backends import Hit, SearchBackend

logger = logging.getLogger(__name__)

#: the longest batch window, in seconds: batching gains nothing that a second's wait on every
#: request is worth, and clients (30 s timeouts) and shutdown must not wait on the window.
MAX_WINDOW_S = 1.0


class BatcherStopped(RuntimeError):
    """The server is shutting down: the request was not searched (a client may retry)."""


@dataclass
class _Pending:
    queries: Sequence[str]
    k: int
    future: asyncio.Future = field(repr=False)


class QueryBatcher:
    """Collects queries from concurrent requests and runs them through one backend.

    Args:
      backend: the index to search.
      max_batch: the most queries in one backend call (one request may exceed it; it then
        runs alone).
      window_s: how long the first request of a batch waits for others, in seconds: a finite
        number in ``[0, MAX_WINDOW_S]``.

    Raises:
      ValueError: ``max_batch`` below 1, or ``window_s`` not finite or outside its range.
    """

    def __init__(self, backend: SearchBackend, max_batch: int = 256, window_s: float = 0.002):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if not (math.isfinite(window_s) and 0 <= window_s <= MAX_WINDOW_S):
            raise ValueError(
                f"window_s must be a finite number in [0, {MAX_WINDOW_S}] seconds, got {window_s}"
            )
        self.backend = backend
        self.max_batch = int(max_batch)
        self.window_s = float(window_s)
        self._queue: asyncio.Queue[_Pending] | None = None
        self._task: asyncio.Task | None = None
        self._taken: list[_Pending] = []  # out of the queue, not yet answered
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="search")
        self.batches = 0
        self.queries = 0

    async def start(self) -> None:
        """Starts the batching loop on the running event loop."""
        self._queue = asyncio.Queue()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stops the loop; requests not yet answered get :class:`BatcherStopped`.

        That includes the batch the loop holds (waiting out its window or being searched),
        not only the requests still queued; calling it twice is harmless.
        """
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        unanswered = list(self._taken)
        self._taken = []
        while self._queue is not None and not self._queue.empty():
            unanswered.append(self._queue.get_nowait())
        for pending in unanswered:
            if not pending.future.done():
                pending.future.set_exception(BatcherStopped("the server is shutting down"))
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Returns the backend's hits for ``queries`` (one list per query), batched."""
        if self._queue is None:
            raise RuntimeError("QueryBatcher.start() was not called")
        future = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(list(queries), int(k), future))
        return await future

    async def _run(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = self._taken = [await self._queue.get()]
            size = len(batch[0].queries)
            deadline = loop.time() + self.window_s
            while size < self.max_batch:
                timeout = deadline - loop.time()
                try:
                    if timeout <= 0:
                        pending = self._queue.get_nowait()
                    else:
                        pending = await asyncio.wait_for(self._queue.get(), timeout)
                except (asyncio.QueueEmpty, asyncio.TimeoutError):
                    break
                batch.append(pending)
                size += len(pending.queries)
            await self._serve(loop, batch)
            self._taken = []

    async def _serve(self, loop: asyncio.AbstractEventLoop, batch: list[_Pending]) -> None:
        by_k: dict[int, list[_Pending]] = {}
        for pending in batch:
            by_k.setdefault(pending.k, []).append(pending)
        for k, group in by_k.items():
            flat = [query for pending in group for query in pending.queries]
            try:
                hits = await loop.run_in_executor(self._executor, self.backend.search, flat, k)
                if len(hits) != len(flat):
                    raise RuntimeError(f"backend returned {len(hits)} results for {len(flat)}")
            except Exception as error:  # every waiting request must hear about it
                logger.error(
                    "search backend failed on %d queries from %d requests: %s: %s",
                    len(flat),
                    len(group),
                    type(error).__name__,
                    error,
                    exc_info=error,
                )
                for pending in group:
                    if not pending.future.done():
                        pending.future.set_exception(error)
                continue
            self.batches += 1
            self.queries += len(flat)
            start = 0
            for pending in group:
                end = start + len(pending.queries)
                if not pending.future.done():  # the client may have gone away
                    pending.future.set_result(hits[start:end])
                start = end
