"""QueryBatcher in process, on the real bm25s index: batching, per-request answers, failures."""

from __future__ import annotations

import asyncio

import pytest

from retrieval_server.backends import load_backend
from retrieval_server.batcher import BatcherStopped, QueryBatcher


class FailingOnce:
    """The real index, failing on the first search that holds ``"boom"`` (a broken backend)."""

    def __init__(self, inner) -> None:
        self.inner, self.calls, self.failures = inner, [], 0

    def search(self, queries, k):
        self.calls.append(list(queries))
        if any("boom" in q for q in queries) and not self.failures:
            self.failures += 1
            raise OSError("index file vanished")
        return self.inner.search(queries, k)


@pytest.fixture(scope="module")
def index(bm25s_index):
    return load_backend(bm25s_index)


def test_requests_queued_together_share_one_backend_call(index):
    async def run():
        batcher = QueryBatcher(index, max_batch=64, window_s=0.0)
        await batcher.start()
        # queued before the loop runs: one batch, whatever the clock does
        requests = [batcher.search(["Pavia Cathedral"], 2), batcher.search(["Evan Morris", "x"], 2)]
        answers = await asyncio.gather(*requests)
        stats = batcher.batches, batcher.queries
        await batcher.stop()
        return answers, stats

    answers, (batches, queries) = asyncio.run(run())
    assert batches == 1 and queries == 3
    assert answers[0] == index.search(["Pavia Cathedral"], 2)
    assert answers[1] == index.search(["Evan Morris", "x"], 2)


def test_a_failing_backend_call_fails_its_requests_only_and_is_logged_once(index, caplog):
    backend = FailingOnce(index)

    async def run():
        batcher = QueryBatcher(backend, max_batch=64, window_s=0.0)
        await batcher.start()
        together = [batcher.search(["boom"], 2), batcher.search(["Pavia Cathedral"], 2)]
        first = await asyncio.gather(*together, return_exceptions=True)
        later = await batcher.search(["Pavia Cathedral"], 2)  # the loop still serves
        await batcher.stop()
        return first, later

    with caplog.at_level("ERROR", logger="retrieval_server.batcher"):
        first, later = asyncio.run(run())
    # both requests rode the failed call: both hear why; the next call is served
    assert all(isinstance(e, OSError) and "vanished" in str(e) for e in first)
    assert backend.calls[0] == ["boom", "Pavia Cathedral"]
    assert later == index.search(["Pavia Cathedral"], 2)
    failures = [r for r in caplog.records if "search backend failed" in r.getMessage()]
    assert len(failures) == 1 and "2 requests" in failures[0].getMessage()


def test_a_backend_answering_the_wrong_number_of_rows_is_an_error(index):
    class Short:
        def search(self, queries, k):
            return index.search(queries, k)[:-1]

    async def run():
        batcher = QueryBatcher(Short(), window_s=0.0)
        await batcher.start()
        try:
            return await asyncio.gather(batcher.search(["a", "b"], 1), return_exceptions=True)
        finally:
            await batcher.stop()

    (error,) = asyncio.run(run())
    assert isinstance(error, RuntimeError) and "1 results for 2" in str(error)


def test_requests_waiting_at_shutdown_are_told_so(index):
    async def run():
        with pytest.raises(RuntimeError, match="start"):
            await QueryBatcher(index).search(["a"], 1)
        batcher = QueryBatcher(index, window_s=1.0)  # the longest window allowed
        await batcher.start()
        await batcher.stop()  # the loop is gone: a request queued now waits ...
        pending = asyncio.ensure_future(batcher.search(["a"], 1))
        await asyncio.sleep(0)
        await batcher.stop()  # ... until stopping tells it, instead of hanging
        return await asyncio.gather(pending, return_exceptions=True)

    (error,) = asyncio.run(run())
    assert isinstance(error, BatcherStopped) and "shutting down" in str(error)
