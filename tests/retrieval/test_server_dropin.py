"""What the search-agent projects' clients really send, answered as Search-R1's server
answers it, and a failing backend seen by the client as a clear 500: real server processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from retrieval_helpers import REPO, post

from retrieval_server.backends import load_backend
from retrieval_server.client import RetrievalClient, RetrievalServerError


@pytest.fixture(scope="module")
def local(bm25s_index):
    return load_backend(bm25s_index)


def _ids(rows):
    return [[doc["id"] for doc in row] for row in rows]


def test_an_empty_query_list_gets_an_empty_result(bm25s_server):
    # Search-R1's training loop posts this when no rollout searched in a turn.
    body = {"queries": [], "topk": 3, "return_scores": True}
    assert post(bm25s_server.url, body) == (200, {"result": []})
    assert RetrievalClient(bm25s_server.url).retrieve([]) == []


def test_blank_queries_get_no_documents_and_never_fail_their_batch(bm25s_server, local):
    status, answer = post(bm25s_server.url, {"queries": ["Pavia Cathedral", "", "   "], "topk": 2})
    assert status == 200
    pavia = [h.doc_id for h in local.search(["Pavia Cathedral"], 2)[0]]
    assert _ids(answer["result"]) == [pavia, [], []]
    assert post(bm25s_server.url, {"query": ""}) == (200, {"result": [[]]})


def test_topk_null_means_the_default(bm25s_server, local):
    status, answer = post(bm25s_server.url, {"queries": ["Pavia Cathedral"], "topk": None})
    assert status == 200
    assert _ids(answer["result"]) == [[h.doc_id for h in local.search(["Pavia Cathedral"], 3)[0]]]


FAILING_SERVER = """
import sys
import uvicorn
from retrieval_server.app import Limits, create_app
from retrieval_server.backends import load_backend

inner = load_backend(sys.argv[1])


class BrokenOnBoom:
    # the real index, failing on any search holding "boom": a stand-in for a broken backend
    name = "bm25s-broken-on-boom"

    def __len__(self):
        return len(inner)

    def search(self, queries, k):
        if any("boom" in q for q in queries):
            raise OSError("index file vanished")
        return inner.search(queries, k)

    def document(self, doc_id):
        return inner.document(doc_id)


uvicorn.run(create_app(BrokenOnBoom(), Limits(batch_window_s=0.0)), host="127.0.0.1",
            port=int(sys.argv[2]), log_level="warning")
"""


@pytest.fixture(scope="module")
def failing_server(bm25s_index, tmp_path_factory):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path_factory.mktemp("failing") / "server.log"
    with open(log, "w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-c", FAILING_SERVER, str(bm25s_index), str(port)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    url = f"http://127.0.0.1:{port}"
    try:
        RetrievalClient(url).wait_until_ready(120)
        yield url, Path(log)
    finally:
        process.terminate()
        process.wait(20)


def _logged_failures(log: Path) -> int:
    return log.read_text().count("search backend failed")


def test_a_backend_failure_is_a_json_500_with_its_reason_logged_once(failing_server):
    url, log = failing_server
    before = _logged_failures(log)
    status, answer = post(url, {"queries": ["Pavia Cathedral", "boom"], "topk": 2})
    assert status == 500
    assert answer["detail"] == "search backend failed: OSError: index file vanished"
    assert _logged_failures(log) == before + 1
    status, answer = post(url, {"queries": ["Pavia Cathedral"], "topk": 2})
    assert status == 200 and len(answer["result"][0]) == 2  # the server is still up


def test_the_client_reports_a_500_at_once_instead_of_retrying(failing_server):
    url, log = failing_server
    before = _logged_failures(log)
    client = RetrievalClient(url, retries=5, backoff_s=0.01)
    with pytest.raises(RetrievalServerError) as caught:
        client.retrieve(["boom"])
    assert caught.value.status == 500 and "index file vanished" in caught.value.detail
    assert _logged_failures(log) == before + 1  # one attempt reached the backend


def test_concurrent_requests_of_a_failed_call_all_hear_why(failing_server):
    url, _ = failing_server
    answers: list = []

    def call(queries):
        answers.append(post(url, {"queries": queries}))

    threads = [threading.Thread(target=call, args=([f"boom {i}"],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(answers) == 4
    assert all(status == 500 and "vanished" in answer["detail"] for status, answer in answers)
