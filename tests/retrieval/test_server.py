"""The HTTP server, as a real process on 127.0.0.1, and its client."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest
from retrieval_helpers import ServerProcess, post, post_raw, run_cli, title_of

from retrieval_server.backends import load_backend
from retrieval_server.client import RetrievalClient, RetrievalError, RetrievalRequestError


@pytest.fixture(scope="module")
def local(bm25s_index):
    """The same index, opened in this process: the reference for every answer."""
    return load_backend(bm25s_index)


def test_search_r1_batch_layout(bm25s_server, local, corpus_docs):
    queries = [title_of(doc) for doc in corpus_docs[:20]]
    status, answer = post(bm25s_server.url, {"queries": queries, "topk": 3, "return_scores": False})
    assert status == 200 and set(answer) == {"result"}
    expected = local.search(queries, 3)
    assert len(answer["result"]) == len(queries)
    for row, hits in zip(answer["result"], expected, strict=True):
        assert row == [local.document(h.doc_id) for h in hits]
        assert all(set(doc) == {"id", "contents"} for doc in row)
    assert answer["result"][0][0]["id"] == corpus_docs[0]["id"]


def test_scores_layout(bm25s_server, local):
    status, answer = post(bm25s_server.url, {"queries": ["Pavia Cathedral"], "return_scores": True})
    assert status == 200
    (row,) = answer["result"]
    assert len(row) == 3  # the default topk
    expected = local.search(["Pavia Cathedral"], 3)[0]
    assert [entry["document"]["id"] for entry in row] == [h.doc_id for h in expected]
    assert [entry["score"] for entry in row] == pytest.approx([h.score for h in expected])
    assert "Pavia Cathedral" in row[0]["document"]["contents"]


def test_single_query_layout(bm25s_server, local):
    status, answer = post(bm25s_server.url, {"query": "Evan Morris lobbyist", "topk": 2})
    assert status == 200
    assert [doc["id"] for doc in answer["result"][0]] == [
        h.doc_id for h in local.search(["Evan Morris lobbyist"], 2)[0]
    ]
    assert answer["result"][0][0]["id"] == "0"


def test_query_without_matches_gives_an_empty_list(bm25s_server):
    assert post(bm25s_server.url, {"queries": ["zzzqqq xxyyzz"], "topk": 5}) == (
        200,
        {"result": [[]]},
    )


@pytest.mark.parametrize(
    "body, status, message",
    [
        (b"{not json", 400, "not valid JSON"),
        (b"\xff\xfe", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (b'"just a string"', 400, "JSON object"),
        (b"{}", 422, "exactly one of"),
        (b'{"queries": ["a"], "query": "b"}', 422, "exactly one of"),
        (b'{"queries": "not a list"}', 422, "list of strings"),
        (b'{"queries": ["ok", 3]}', 422, "list of strings"),
        (b'{"query": 5}', 422, "must be a string"),
        (b'{"query": "a", "topk": 0}', 422, "'topk'"),
        (b'{"query": "a", "topk": 101}', 422, "'topk'"),
        (b'{"query": "a", "topk": "3"}', 422, "'topk'"),
        (b'{"query": "a", "topk": true}', 422, "'topk'"),
        (b'{"query": "a", "topk": 2.5}', 422, "'topk'"),
        (b'{"query": "a", "return_scores": "yes"}', 422, "'return_scores'"),
        (b'{"queries": [null]}', 422, "list of strings"),
    ],
)
def test_bad_requests_get_clear_4xx(bm25s_server, body, status, message):
    got_status, answer = post_raw(bm25s_server.url, body)
    assert got_status == status
    assert message in answer["detail"]


def test_limits_on_count_and_length(bm25s_server):
    status, answer = post(bm25s_server.url, {"queries": ["a"] * 65})  # the fixture allows 64
    assert status == 422 and "at most 64" in answer["detail"]
    status, answer = post(bm25s_server.url, {"query": "word " * 61})  # 305 > 300 characters
    assert status == 422 and "at most 300" in answer["detail"]
    status, answer = post(bm25s_server.url, {"queries": ["Pavia"] * 64, "topk": 100})
    assert status == 200 and len(answer["result"]) == 64


def test_oversized_body_is_413(bm25s_server):
    body = json.dumps({"query": "a", "padding": "x" * (5 << 20)}).encode()
    status, answer = post_raw(bm25s_server.url, body)
    assert status == 413 and "bytes" in answer["detail"]
    # Chunked, without a Content-Length header: the server counts as it reads.
    parts = urlsplit(bm25s_server.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    chunks = (body[i : i + (1 << 20)] for i in range(0, len(body), 1 << 20))
    connection.request("POST", "/retrieve", body=chunks, encode_chunked=True)
    response = connection.getresponse()
    assert response.status == 413 and "bytes" in json.loads(response.read())["detail"]
    connection.close()


def test_wrong_method_and_path(bm25s_server):
    parts = urlsplit(bm25s_server.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    connection.request("GET", "/retrieve")
    assert connection.getresponse().status == 405
    connection.close()
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    connection.request("GET", "/nowhere")
    assert connection.getresponse().status == 404
    connection.close()


def test_health_and_openapi(bm25s_server):
    health = RetrievalClient(bm25s_server.url).health()
    assert health["status"] == "ok" and health["backend"] == "bm25s"
    assert health["num_docs"] == 1000 and health["limits"]["max_queries"] == 64
    parts = urlsplit(bm25s_server.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    connection.request("GET", "/openapi.json")
    spec = json.loads(connection.getresponse().read())
    assert "/retrieve" in spec["paths"] and "/health" in spec["paths"]
    connection.request("GET", "/docs")
    assert connection.getresponse().status == 200
    connection.close()


def test_concurrent_clients_get_their_own_answers(bm25s_server, local, corpus_docs):
    """16 threads, different queries and topk each: every answer must be the right one."""
    titles = [title_of(doc) for doc in corpus_docs]
    client = RetrievalClient(bm25s_server.url)
    errors: list[str] = []
    before = client.health()

    def worker(index: int) -> None:
        for round_ in range(15):
            start = (index * 37 + round_ * 11) % 900
            queries = titles[start : start + 1 + (index + round_) % 5]
            k = 1 + (index + round_) % 4
            try:
                rows = client.retrieve(queries, topk=k, return_scores=True)
            except Exception as error:  # collected, then asserted in the main thread
                errors.append(repr(error))
                continue
            expected = local.search(queries, k)
            got = [[entry["document"]["id"] for entry in row] for row in rows]
            if got != [[h.doc_id for h in row] for row in expected]:
                errors.append(f"mismatch for {queries} k={k}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    after = client.health()
    assert after["queries"] - before["queries"] >= 16 * 15
    # (that requests share backend calls is tested without a clock in test_batcher.py)


def test_client_batches_long_lists(bm25s_server, local, corpus_docs):
    queries = [title_of(doc) for doc in corpus_docs[:150]]  # over the server's 64
    client = RetrievalClient(bm25s_server.url, batch_size=64)
    rows = client.retrieve(queries, topk=2)
    assert [[d["id"] for d in row] for row in rows] == [
        [h.doc_id for h in row] for row in local.search(queries, 2)
    ]


def _count_attempts(client: RetrievalClient) -> list[int]:
    """Counts the client's real attempts (each one a request on the wire)."""
    attempts = [0]
    real = client._attempt

    def counted(*args):
        attempts[0] += 1
        return real(*args)

    client._attempt = counted
    return attempts


def test_client_does_not_retry_4xx(bm25s_server):
    client = RetrievalClient(bm25s_server.url, retries=5, backoff_s=1.0)
    attempts = _count_attempts(client)
    with pytest.raises(RetrievalRequestError) as caught:
        client.retrieve(["a"], topk=0)
    assert caught.value.status == 422 and attempts == [1]
    with pytest.raises(TypeError):
        client.retrieve("a bare string")


def test_client_retries_then_fails_on_a_dead_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = RetrievalClient(f"http://127.0.0.1:{port}", retries=2, backoff_s=0.05, timeout_s=2)
    attempts = _count_attempts(client)
    with pytest.raises(RetrievalError, match="after 3 attempts"):
        client.retrieve(["a"])
    assert attempts == [3]
    with pytest.raises(ValueError, match="http://host:port"):
        RetrievalClient("127.0.0.1:8000")


def test_client_retries_until_a_late_server_is_up(bm25s_index):
    """The first attempts are refused; backoff outlasts the server's start."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = RetrievalClient(f"http://127.0.0.1:{port}", retries=8, backoff_s=0.5, max_backoff_s=4)
    result: dict = {}

    def call() -> None:
        try:
            result["rows"] = client.retrieve(["Pavia Cathedral"], topk=1)
        except Exception as error:
            result["error"] = error

    thread = threading.Thread(target=call)
    thread.start()
    time.sleep(0.3)
    server = ServerProcess(bm25s_index, "--port", str(port))
    try:
        thread.join(60)
    finally:
        server.stop()
    assert "error" not in result, result.get("error")
    assert "Pavia Cathedral" in result["rows"][0][0]["contents"]


def test_cli_errors_are_clear(tmp_path, corpus_path):
    completed = run_cli("serve", "--index", str(tmp_path / "missing"), "--port", "0")
    assert completed.returncode == 2 and "meta.json is missing" in completed.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "contents": "fine"}\n{"id": "2", "contents": \n')
    completed = run_cli("index", "--corpus", str(bad), "--out", str(tmp_path / "o"), "--quiet")
    assert completed.returncode == 2 and "bad.jsonl:2: not valid JSON" in completed.stderr
    bad.write_text('{"id": "1"}\n')
    completed = run_cli("index", "--corpus", str(bad), "--out", str(tmp_path / "o"), "--quiet")
    assert completed.returncode == 2 and "'contents' must be a string" in completed.stderr
    completed = run_cli("index", "--corpus", str(tmp_path / "none.jsonl"), "--out", "x")
    assert completed.returncode == 2 and "not found" in completed.stderr
    completed = run_cli("serve", "--index", str(tmp_path), "--max-topk", "0")
    assert completed.returncode == 2 and "--max-topk" in completed.stderr
    completed = run_cli("serve", "--port", "0")
    assert completed.returncode == 2 and "exactly one of --index" in completed.stderr
    completed = run_cli("serve", "--index", str(tmp_path), "--workers", "2", "--port", "0")
    assert completed.returncode == 2 and "meta.json is missing" in completed.stderr
    completed = run_cli("serve", "--corpus", str(bad), "--port", "0")
    assert completed.returncode == 2 and "'contents' must be a string" in completed.stderr


def test_serve_a_corpus_in_one_command(corpus_path, local):
    server = ServerProcess(corpus_path)  # --corpus instead of --index
    try:
        rows = RetrievalClient(server.url).retrieve(["Pavia Cathedral"], topk=3)
        assert [d["id"] for d in rows[0]] == [
            h.doc_id for h in local.search(["Pavia Cathedral"], 3)[0]
        ]
    finally:
        server.stop()


@pytest.mark.slow
def test_two_workers_serve_the_same_answers(bm25s_index, local, corpus_docs):
    server = ServerProcess(bm25s_index, "--workers", "2")
    try:
        client = RetrievalClient(server.url)
        queries = [title_of(doc) for doc in corpus_docs[:40]]
        for _ in range(3):
            rows = client.retrieve(queries, topk=3)
            assert [[d["id"] for d in row] for row in rows] == [
                [h.doc_id for h in row] for row in local.search(queries, 3)
            ]
    finally:
        server.stop()
    assert server.process.returncode is not None


def _nodelay_of_a_served_connection(sock: socket.socket) -> int:
    """TCP_NODELAY of the server side of one connection accepted on ``sock`` by asyncio."""
    seen = []

    async def main() -> None:
        async def handle(reader, writer):
            tcp = writer.get_extra_info("socket")
            seen.append(tcp.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(handle, sock=sock)
        reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        await reader.read()  # until the handler closes
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())
    return seen[0]


def test_the_server_socket_answers_without_waiting_for_delayed_acks():
    # asyncio turns Nagle off only on sockets made as TCP; the server's must be one, or each
    # answer waits ~40 ms for the client's delayed ACK
    from retrieval_server.__main__ import listening_socket

    assert _nodelay_of_a_served_connection(listening_socket("127.0.0.1", 0)) != 0
    plain = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # proto 0, as it was made before
    plain.bind(("127.0.0.1", 0))
    assert _nodelay_of_a_served_connection(plain) == 0
