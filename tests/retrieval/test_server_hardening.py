"""The server under hostile or careless use: readiness, shutdown, stalled clients, bad input.

Every server here is a real ``python -m retrieval_server serve`` process on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import math
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from retrieval_helpers import REPO, ServerProcess, post, post_raw, run_cli

from retrieval_server.app import MAX_JSON_DEPTH, Limits
from retrieval_server.backends import load_backend
from retrieval_server.batcher import MAX_WINDOW_S, BatcherStopped, QueryBatcher
from retrieval_server.client import RetrievalClient

#: the longest any bounded wait below may take; what it waits for takes a few seconds.
PATIENCE_S = 20.0


class RawServer:
    """A server process whose ``listening on`` line is seen the moment it is printed.

    Unlike :class:`retrieval_helpers.ServerProcess`, it does not wait for the server to
    answer before returning: the test decides what happens right after the line.
    """

    def __init__(self, index: Path, *extra: str, log: Path) -> None:
        self.log = log
        with open(log, "wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "retrieval_server", "serve", "--index", str(index)]
                + ["--host", "127.0.0.1", "--port", "0", *extra],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                cwd=REPO,
            )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put("")  # the server closed its stdout

    def wait_for_line(self, timeout: float = 300) -> tuple[str, int]:
        """Returns ``(host, port)`` from the ``listening on`` line, once it is printed."""
        while True:
            line = self._lines.get(timeout=timeout)
            if not line:
                raise RuntimeError("the server ended:\n" + self.log.read_text()[-3000:])
            if line.startswith("listening on "):
                parts = urlsplit(line.split()[2])
                return parts.hostname, parts.port

    def stop(self) -> None:
        """Ends the process, whatever state it is in (stopped with SIGSTOP included)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(PATIENCE_S)


@pytest.fixture
def raw_server(tmp_path) -> Iterator[Callable[..., RawServer]]:
    """Returns ``start(index, *flags) -> RawServer``; every server started is ended after."""
    started: list[RawServer] = []

    def start(index: Path, *extra: str) -> RawServer:
        server = RawServer(index, *extra, log=tmp_path / f"server{len(started)}.log")
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def _health_over(sock: socket.socket) -> bytes:
    """Sends ``GET /health`` on a connected socket; returns the whole answer."""
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    return answer


def _connect_while_frozen(process: subprocess.Popen, host: str, port: int) -> socket.socket:
    """Freezes ``process`` (SIGSTOP), connects to it, thaws it; returns the connection.

    A frozen server runs no code, so the connection succeeds only if the socket already
    listens (the kernel queues it); a socket bound but not listening refuses it.
    """
    os.kill(process.pid, signal.SIGSTOP)
    try:
        sock = socket.create_connection((host, port), timeout=PATIENCE_S)
    finally:
        os.kill(process.pid, signal.SIGCONT)
    return sock


def test_a_client_that_connects_right_after_the_line_is_served(bm25s_index, raw_server):
    server = raw_server(bm25s_index)
    host, port = server.wait_for_line()
    with _connect_while_frozen(server.process, host, port) as sock:
        answer = _health_over(sock)
    assert answer.startswith(b"HTTP/1.1 200") and b'"status":"ok"' in answer


def _stall_a_request(host: str, port: int) -> socket.socket:
    """Opens a ``/retrieve`` request whose body never comes; returns once the app waits.

    ``Expect: 100-continue`` makes the server say ``100 Continue`` when the handler starts
    reading the body: from then on, the request is under way.
    """
    sock = socket.create_connection((host, port), timeout=PATIENCE_S)
    sock.sendall(
        b"POST /retrieve HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\nExpect: 100-continue\r\n\r\n"
    )
    seen = b""
    while b"\r\n\r\n" not in seen:
        chunk = sock.recv(4096)
        assert chunk, "the server closed the connection before reading the body"
        seen += chunk
    assert seen.startswith(b"HTTP/1.1 100"), seen
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    """Reads ``sock`` until the server closes it; returns what came (raises on a timeout)."""
    answer = b""
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    except ConnectionResetError:
        pass
    return answer


def test_sigterm_stops_the_server_with_a_request_under_way(bm25s_index):
    server = ServerProcess(bm25s_index)  # default read timeout (30 s) and shutdown (5 s)
    try:
        parts = urlsplit(server.url)
        with _stall_a_request(parts.hostname, parts.port) as stalled:
            server.process.terminate()
            server.process.wait(PATIENCE_S)  # raises TimeoutExpired if it hangs
            _read_until_closed(stalled)
    finally:
        server.stop()


@pytest.mark.slow
def test_two_workers_are_ready_when_they_say_and_stop_on_sigterm(bm25s_index, raw_server):
    server = raw_server(bm25s_index, "--workers", "2")
    host, port = server.wait_for_line()
    # only the supervisor is frozen: the line must wait until a worker listens
    with _connect_while_frozen(server.process, host, port) as sock:
        answer = _health_over(sock)
    assert answer.startswith(b"HTTP/1.1 200")
    with _stall_a_request(host, port) as stalled:
        server.process.terminate()
        server.process.wait(PATIENCE_S)
        _read_until_closed(stalled)


@pytest.mark.parametrize("sent", [b"", b'{"query": "Pav'])
def test_a_stalled_body_gets_408_and_a_closed_connection(bm25s_index, sent):
    server = ServerProcess(bm25s_index, "--read-timeout-s", "1")
    try:
        assert RetrievalClient(server.url).health()["limits"]["read_timeout_s"] == 1.0
        parts = urlsplit(server.url)
        with socket.create_connection((parts.hostname, parts.port), timeout=PATIENCE_S) as sock:
            sock.sendall(
                b"POST /retrieve HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                b"Content-Length: 50\r\n\r\n" + sent
            )
            answer = _read_until_closed(sock)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b"not received within 1.0 s" in answer
        # the server goes on serving
        status, _ = post(server.url, {"query": "Pavia Cathedral"})
        assert status == 200
    finally:
        server.stop()


def _nested(depth: int) -> bytes:
    """A body with a list nested ``depth`` levels deep under an unknown key."""
    inner = b"[" * (depth - 1) + b"]" * (depth - 1)
    return b'{"query": "Pavia Cathedral", "padding": ' + inner + b"}"


@pytest.mark.parametrize(
    "body, message",
    [
        (b"[" * 100_000, "levels deep"),
        (b'{"queries": ' + b"[" * 100_000, "levels deep"),
        (b"{" + b'"a": {' * 50_000, "levels deep"),
        (_nested(MAX_JSON_DEPTH + 1), "levels deep"),
        (b'{"query": "a", "topk": 1' + b"0" * 5000 + b"}", "not valid JSON"),
    ],
    ids=["arrays", "under-queries", "objects", "just-over-the-limit", "5000-digit-int"],
)
def test_hostile_json_gets_400_not_500(bm25s_server, body, message):
    status, answer = post_raw(bm25s_server.url, body)
    assert status == 400 and message in answer["detail"]
    assert post_raw(bm25s_server.url, _nested(MAX_JSON_DEPTH))[0] == 200  # the limit itself


@pytest.mark.parametrize(
    "command, flag, value",
    [
        ("serve", "--batch-window-s", "inf"),
        ("serve", "--batch-window-s", "nan"),
        ("serve", "--batch-window-s", "1e9"),
        ("serve", "--batch-window-s", "-1"),
        ("serve", "--read-timeout-s", "inf"),
        ("serve", "--read-timeout-s", "0"),
        ("serve", "--shutdown-timeout-s", "inf"),
        ("serve", "--port", "70000"),
        ("serve", "--port", "-1"),
        ("serve", "--workers", "0"),
        ("serve", "--max-topk", "1000000000"),
        ("serve", "--max-body-bytes", "1e12"),
        ("serve", "--max-queries", "99999999999"),
        ("index", "--k1", "inf"),
        ("index", "--b", "nan"),
        ("index", "--threads", "0"),
        ("index", "--batch-size", "-4"),
    ],
)
def test_numeric_flags_out_of_range_are_refused(tmp_path, corpus_path, command, flag, value):
    if command == "serve":  # refused before the (missing) index is looked at
        args = ("serve", "--index", str(tmp_path / "missing"), "--port", "0", flag, value)
    else:
        args = ("index", "--corpus", str(corpus_path), "--out", str(tmp_path / "o"), "--quiet")
        args += (flag, value)
    completed = run_cli(*args, timeout=120)
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert f"argument {flag}: must be" in completed.stderr
    assert "Traceback" not in completed.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "setting, value",
    [
        ("batch_window_s", math.inf),
        ("batch_window_s", math.nan),
        ("batch_window_s", 1e9),
        ("read_timeout_s", 0.0),
        ("read_timeout_s", math.inf),
        ("max_topk", 10**9),
        ("max_body_bytes", 1 << 40),
        ("max_queries", True),
    ],
)
def test_limits_refuse_settings_out_of_range(setting, value):
    with pytest.raises(ValueError, match=f"Limits.{setting} must be"):
        Limits(**{setting: value})


@pytest.mark.parametrize("window_s", [math.inf, math.nan, MAX_WINDOW_S * 2])
def test_batcher_refuses_an_unbounded_window(bm25s_index, window_s):
    with pytest.raises(ValueError, match="window_s must be a finite number"):
        QueryBatcher(load_backend(bm25s_index), window_s=window_s)


def test_stopping_the_batcher_answers_the_batch_it_holds(bm25s_index):
    """A request taken for a batch (waiting out the window) is told, not left waiting."""

    async def run() -> list:
        batcher = QueryBatcher(load_backend(bm25s_index), window_s=MAX_WINDOW_S)
        await batcher.start()
        pending = asyncio.ensure_future(batcher.search(["Pavia Cathedral"], 1))
        for _ in range(1000):  # until the batching loop (the queue's one reader) takes it
            await asyncio.sleep(0)
            if batcher._queue.empty():
                break
        await batcher.stop()
        return await asyncio.wait_for(asyncio.gather(pending, return_exceptions=True), 10)

    (error,) = asyncio.run(run())
    assert isinstance(error, BatcherStopped) and "shutting down" in str(error)
